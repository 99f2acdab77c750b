"""custom_jvp in reverse mode (issue #39): a JVP rule that applies a custom_jvp function to its
tangents (``f(t)``, any rule linear in the tangents) is transposable, so grad/vjp work, under jit,
vmap, scan, checkpoint and at second order. References: central differences in float64, and
the rule's own derivative written out in numpy where it differs from the primal's."""

import numpy as np
import pytest
from helpers import check_vjp, numerical_jvp, rng_for

import blu
import blu.numpy as bnp
from blu import lax
from blu.core.errors import BluValueError

W = np.array([[1.0, -2.0, 0.5], [0.3, 0.7, -1.1], [2.0, 0.1, 0.4]])


# a linear map whose rule applies the map to the tangents (the failing case of the issue)
@blu.custom_jvp
def matvec(x):
    return bnp.matmul(W, x)


@matvec.defjvp
def _matvec_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return matvec(x), matvec(t)


# a straight-through estimator: the primal is floor (derivative 0), the rule says identity, by
# calling another custom_jvp function on the tangent
@blu.custom_jvp
def ident(x):
    return x * 1.0


@ident.defjvp
def _ident_jvp(primals, tangents):
    return ident(primals[0]), ident(tangents[0])


@blu.custom_jvp
def floor_st(x):
    return bnp.floor(x)


@floor_st.defjvp
def _floor_st_jvp(primals, tangents):
    return floor_st(primals[0]), 2.0 * ident(tangents[0])


def loss(x):
    return bnp.sum(bnp.sin(matvec(bnp.cos(x))))


def loss_np(x):
    return np.sum(np.sin(W @ np.cos(x)))


def fd_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = eps
        g.flat[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


X = np.array([0.3, -1.2, 2.1])


@pytest.mark.parametrize(
    "make",
    [
        lambda: blu.grad(loss),
        lambda: blu.jit(blu.grad(loss)),
        lambda: blu.grad(blu.jit(loss)),
        lambda: blu.grad(lambda x: bnp.sum(bnp.sin(blu.jit(matvec)(bnp.cos(x))))),
        lambda: blu.grad(blu.checkpoint(loss)),
    ],
    ids=["grad", "jit(grad)", "grad(jit)", "grad(jit inside)", "grad(checkpoint)"],
)
def test_grad_of_rule_applying_f_to_tangents_equals_finite_differences(make):
    g = np.asarray(make()(X))
    np.testing.assert_allclose(g, fd_grad(loss_np, X), rtol=1e-8, atol=1e-9)


def test_vjp_against_numerical_jvp():
    rng = rng_for(X)
    check_vjp(lambda x: bnp.tanh(matvec(x)), [X], rng, 1e-7, 1e-7)
    ct = rng.standard_normal(3)
    _, f_vjp = blu.vjp(lambda x: matvec(x), X)
    # matvec is linear: its VJP is W^T ct exactly
    np.testing.assert_allclose(np.asarray(f_vjp(ct)[0]), W.T @ ct, rtol=1e-12)


def test_vmap_of_grad_and_grad_of_vmap():
    xs = np.stack([X, -X, 0.5 * X])
    want = np.stack([fd_grad(loss_np, x) for x in xs])
    per_row = np.asarray(blu.vmap(blu.grad(loss))(xs))
    np.testing.assert_allclose(per_row, want, rtol=1e-8, atol=1e-9)
    total = blu.grad(lambda xs: bnp.sum(blu.vmap(lambda x: bnp.sin(matvec(bnp.cos(x))))(xs)))
    np.testing.assert_allclose(np.asarray(total(xs)), want, rtol=1e-8, atol=1e-9)


def test_grad_through_scan_of_custom_jvp():
    def f(x):
        def body(c, _):
            return bnp.tanh(matvec(c)), bnp.sum(c)

        c, ys = lax.scan(body, x, None, length=3)
        return bnp.sum(c) + bnp.sum(ys)

    def f_np(x):
        c, tot = x, 0.0
        for _ in range(3):
            tot += np.sum(c)
            c = np.tanh(W @ c)
        return np.sum(c) + tot

    np.testing.assert_allclose(np.asarray(blu.grad(f)(X)), fd_grad(f_np, X), rtol=1e-8, atol=1e-9)


def test_closed_over_differentiated_value():
    # the function closes over a traced matrix: its tangent goes by ordinary autodiff
    def f(w, x):
        @blu.custom_jvp
        def mv(x):
            return bnp.matmul(w, x)

        @mv.defjvp
        def _mv_jvp(p, t):
            return mv(p[0]), mv(t[0])

        return bnp.sum(bnp.sin(mv(x)))

    gw, gx = blu.grad(f, argnums=(0, 1))(W, X)
    np.testing.assert_allclose(
        np.asarray(gx), fd_grad(lambda x: np.sum(np.sin(W @ x)), X), rtol=1e-8, atol=1e-9
    )
    want_w = fd_grad(lambda w: np.sum(np.sin(w @ X)), W.copy())
    np.testing.assert_allclose(np.asarray(gw), want_w, rtol=1e-8, atol=1e-9)


def test_rule_not_primal_autodiff_is_used_in_reverse_mode():
    x = np.array([0.3, 1.7, -2.4])
    # the primal's own derivative (floor) is 0; the rule says 2 (through ident's f(t) rule)
    _, t = blu.jvp(floor_st, (x,), (np.ones(3),))
    np.testing.assert_array_equal(np.asarray(t), 2.0 * np.ones(3))
    g = np.asarray(blu.grad(lambda x: bnp.sum(floor_st(x) * x))(x))
    # d/dx sum(floor_st(x) * x) with d floor_st = 2: 2 x + floor(x)
    np.testing.assert_allclose(g, 2 * x + np.floor(x), rtol=1e-12)
    np.testing.assert_allclose(
        np.asarray(blu.jit(blu.grad(lambda x: bnp.sum(floor_st(x) * x)))(x)), g, rtol=1e-12
    )
    jac = np.asarray(blu.jacrev(floor_st)(x))
    np.testing.assert_allclose(jac, 2.0 * np.eye(3), rtol=1e-12)


def test_second_order_forward_over_reverse_and_reverse_over_reverse():
    def hess_np(x, eps=1e-4):
        return np.stack([fd_grad(loss_np, x + eps * e) - fd_grad(loss_np, x - eps * e)
                         for e in np.eye(3)]) / (2 * eps)  # fmt: skip

    want = hess_np(X)
    for h in (blu.hessian(loss), blu.jacrev(blu.grad(loss)), blu.jacfwd(blu.grad(loss))):
        np.testing.assert_allclose(np.asarray(h(X)), want, rtol=1e-5, atol=1e-6)


def test_linearize_then_transpose_matches_jvp():
    rng = rng_for(X)
    t = rng.standard_normal(3)
    _, f_lin = blu.linearize(lambda x: bnp.sin(matvec(x)), X)
    np.testing.assert_allclose(
        np.asarray(f_lin(t)),
        numerical_jvp(lambda x: np.sin(W @ x), [X], [t]),
        rtol=1e-7,
        atol=1e-8,
    )


def test_nondiff_argnums_under_cond_and_fori_loop():
    from functools import partial

    @partial(blu.custom_jvp, nondiff_argnums=(0,))
    def scale(k, x):
        return k * x

    @scale.defjvp
    def _scale_jvp(k, p, t):
        return scale(k, p[0]), scale(k, t[0])

    def f(x):
        return lax.cond(
            bnp.sum(x) > 0,
            lambda x: bnp.sum(bnp.sin(scale(3.0, x))),
            lambda x: bnp.sum(scale(2.0, x) ** 2),
            x,
        )

    x = np.array([0.3, 0.5])
    np.testing.assert_allclose(np.asarray(blu.grad(f)(x)), 3 * np.cos(3 * x), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(blu.grad(f)(-x)), -8 * x, rtol=1e-12)

    def loop(x):
        return bnp.sum(lax.fori_loop(0, 3, lambda i, c: bnp.sin(scale(1.5, c)), x))

    def loop_np(x):
        for _ in range(3):
            x = np.sin(1.5 * x)
        return np.sum(x)

    np.testing.assert_allclose(
        np.asarray(blu.grad(loop)(x)), fd_grad(loop_np, x), rtol=1e-8, atol=1e-9
    )


def test_negative_nondiff_argnums_count_from_the_end():
    # nondiff_argnums=(-1,) is the last argument (it was a StopIteration); the rules get it
    # first, and the derivative is the rule's: d/dx of x * n with a tangent of n * 10
    from functools import partial

    @partial(blu.custom_jvp, nondiff_argnums=(-1,))
    def f(x, n):
        return x * n

    f.defjvp(lambda n, p, t: (p[0] * n, t[0] * n * 10.0))

    @partial(blu.custom_vjp, nondiff_argnums=(-2,))
    def g(n, x):
        return x * n

    g.defvjp(lambda n, x: (x * n, None), lambda n, r, ct: (ct * n * 10.0,))
    x = np.array([0.5, -1.0, 2.0], np.float32)
    assert float(f(2.0, 3)) == 6.0 and float(blu.grad(f)(2.0, 3)) == 30.0
    np.testing.assert_allclose(
        blu.vmap(blu.grad(g, argnums=1), in_axes=(None, 0))(3, x), [30.0] * 3
    )
    np.testing.assert_allclose(blu.vmap(blu.grad(f), in_axes=(0, None))(x, 2), [20.0] * 3)


def test_nondiff_argnums_out_of_range_or_named_twice_raise():
    # JAX's ValueError for an index outside [-len(args), len(args)) (-3 was dropped silently);
    # 1 and -1 of two arguments name one argument twice (it was a bare StopIteration)
    from functools import partial

    @partial(blu.custom_jvp, nondiff_argnums=(-3,))
    def f(x, n):
        return x * n

    f.defjvp(lambda n, p, t: (p[0] * n, t[0] * n))
    with pytest.raises(BluValueError, match="out of range"):
        f(2.0, 3.0)

    @partial(blu.custom_jvp, nondiff_argnums=(1, -1))
    def g(x, n):
        return x * n

    g.defjvp(lambda n, m, p, t: (p[0] * n, t[0] * n))
    with pytest.raises(BluValueError, match="twice"):
        g(2.0, 3.0)


def test_a_rule_calling_the_next_order_traces_only_the_orders_taken():
    # g(k, x) = d^k/dx^k exp(2 x); its rule calls g(k + 1). A call made while a deferred rule
    # was applied traced its own rule right away, so grad(grad(g)) traced g(3) too (and grad^3
    # of betainc took every mixed order of the next one); the rules defer again now
    traced = []

    def fun(k, x):
        traced.append(k)
        return lax.mul(lax.exp(lax.mul(x, lax.full_like(x, 2.0))), lax.full_like(x, 2.0**k))

    g = blu.custom_jvp(fun, nondiff_argnums=(0,))
    g.defjvp(lambda k, p, t: (g(k, p[0]), lax.mul(t[0], g(k + 1, p[0]))))
    x = np.float64(0.3)
    f = lambda x: g(0, x)  # noqa: E731
    for n in (1, 2, 3):
        f = blu.grad(f)
        traced.clear()
        np.testing.assert_allclose(float(f(x)), 2.0**n * np.exp(2 * x), rtol=1e-14)
        assert max(traced) == n
