"""custom_jvp / custom_vjp: user rules replace autodiff (finite gradients where the naive
formula overflows), and compose with jit, vmap, grad, closures and nondiff_argnums."""

import numpy as np
import pytest
from helpers import arrays, check_grads, check_vjp, rng_for, shapes
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu import lax
from blu.core.errors import BluTypeError
from blu.parallel import P, make_mesh, psum, shard
from blu.transforms.custom_derivatives import CustomVJPForwardModeError, custom_jvp, custom_vjp


def naive_softplus(x):
    return lax.log(lax.add(lax.full_like(x, 1.0), lax.exp(x)))


def stable_softplus(x):
    """max(x, 0) + log1p(exp(-|x|)): never overflows."""
    zero = lax.full_like(x, 0.0)
    return lax.add(lax.max(x, zero), lax.log1p(lax.exp(lax.neg(lax.abs(x)))))


def sigmoid_np(x):
    return np.where(
        x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x)))
    )


def softplus_np(x):
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


# the naive formula as the primal, the stable derivative as the rule: the rule must be used
softplus_vjp = custom_vjp(naive_softplus)
softplus_vjp.defvjp(lambda x: (stable_softplus(x), x), lambda x, g: (lax.mul(g, lax.logistic(x)),))

softplus_jvp = custom_jvp(stable_softplus)


@softplus_jvp.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return softplus_jvp(x), lax.mul(t, lax.logistic(x))


def sum_of(f):
    return lambda x: lax.reduce_sum(f(x))


@given(st.data())
def test_custom_vjp_softplus_gradient_finite_where_naive_is_nan(data):
    shape = data.draw(shapes(min_dims=1, max_dims=2, min_side=1, max_side=3))
    x = data.draw(arrays(shape, lo=-800.0, hi=800.0))
    x.flat[0] = 750.0  # exp overflows float64 here
    g = np.asarray(blu.grad(sum_of(softplus_vjp))(x))
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, sigmoid_np(x), rtol=1e-12, atol=1e-300)
    with np.errstate(all="ignore"):
        g_naive = np.asarray(blu.grad(sum_of(naive_softplus))(x))
    assert not np.all(np.isfinite(g_naive))
    # the composition with jit, vmap and grad gives the same
    for gf in (
        blu.jit(blu.grad(sum_of(softplus_vjp))),
        blu.grad(blu.jit(sum_of(softplus_vjp))),
        blu.grad(sum_of(blu.vmap(softplus_vjp))),
    ):
        np.testing.assert_allclose(np.asarray(gf(x)), sigmoid_np(x), rtol=1e-12, atol=1e-300)
    per_row = blu.vmap(blu.grad(sum_of(softplus_vjp)))(x)
    np.testing.assert_allclose(np.asarray(per_row), sigmoid_np(x), rtol=1e-12, atol=1e-300)


@given(st.data())
def test_custom_jvp_softplus_forward_reverse_and_second_order(data):
    shape = data.draw(shapes(min_dims=1, max_dims=2, min_side=1, max_side=3))
    x = data.draw(arrays(shape, lo=-800.0, hi=800.0))
    x.flat[0] = -750.0
    t = rng_for(x).standard_normal(shape)
    y, ty = blu.jvp(softplus_jvp, (x,), (t,))
    np.testing.assert_allclose(np.asarray(y), softplus_np(x), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(ty), t * sigmoid_np(x), rtol=1e-12, atol=1e-300)
    for gf in (
        blu.grad(sum_of(softplus_jvp)),
        blu.jit(blu.grad(sum_of(softplus_jvp))),
        blu.grad(blu.jit(sum_of(softplus_jvp))),
        blu.vmap(blu.grad(sum_of(softplus_jvp))),
    ):
        g = np.asarray(gf(x))
        assert np.all(np.isfinite(g))
        np.testing.assert_allclose(g, sigmoid_np(x), rtol=1e-12, atol=1e-300)
    # second order differentiates the rule: d sigmoid = sigmoid (1 - sigmoid)
    h = blu.grad(lambda x: lax.reduce_sum(blu.grad(sum_of(softplus_jvp))(x)))(x)
    s = sigmoid_np(x)
    np.testing.assert_allclose(np.asarray(h), s * (1 - s), rtol=1e-10, atol=1e-300)


# a norm whose gradient at 0 is 0 instead of 0/0
def naive_norm(x):
    return lax.sqrt(lax.reduce_sum(lax.mul(x, x)))


safe_norm = custom_vjp(naive_norm)


def _norm_fwd(x):
    n = naive_norm(x)
    return n, (x, n)


def _norm_bwd(res, g):
    x, n = res
    safe_n = lax.select(lax.eq(n, 0.0), lax.full_like(n, 1.0), n)
    return (lax.mul(lax.broadcast_in_dim(lax.div(g, safe_n), x.shape, ()), x),)


safe_norm.defvjp(_norm_fwd, _norm_bwd)


@given(st.data())
def test_custom_vjp_safe_norm(data):
    shape = data.draw(shapes(min_dims=1, max_dims=2, min_side=1, max_side=3))
    x = data.draw(arrays(shape))
    np.testing.assert_allclose(float(safe_norm(x)), np.linalg.norm(x), rtol=1e-12)
    g = np.asarray(blu.grad(safe_norm)(x))
    n = np.linalg.norm(x)
    np.testing.assert_allclose(g, x / n if n > 0 else np.zeros_like(x), rtol=1e-10, atol=1e-12)
    zero = np.zeros(shape)
    np.testing.assert_array_equal(np.asarray(blu.grad(safe_norm)(zero)), zero)
    with np.errstate(all="ignore"):
        assert np.all(np.isnan(np.asarray(blu.grad(naive_norm)(zero))))
    # batched: one norm per row, including an all-zero row
    xs = np.stack([x, zero])
    gs = blu.vmap(blu.grad(safe_norm))(xs)
    np.testing.assert_allclose(np.asarray(gs)[1], zero)
    np.testing.assert_allclose(np.asarray(gs)[0], g, rtol=1e-12)


@given(st.data())
def test_custom_rules_that_are_exact_match_finite_differences(data):
    shape = data.draw(shapes(max_dims=2, max_side=3))
    x, y = data.draw(arrays(shape)), data.draw(arrays(shape))

    @custom_jvp
    def f(x, y):
        return lax.mul(lax.sin(x), y)

    @f.defjvp
    def f_jvp(p, t):
        (x, y), (tx, ty) = p, t
        return f(x, y), lax.add(lax.mul(lax.mul(lax.cos(x), y), tx), lax.mul(lax.sin(x), ty))

    check_grads(f, [x, y], order=2)

    @custom_vjp
    def g(x, y):
        return lax.mul(lax.sin(x), y)

    g.defvjp(
        lambda x, y: (g(x, y), (x, y)),
        lambda r, ct: (lax.mul(lax.mul(lax.cos(r[0]), r[1]), ct), lax.mul(lax.sin(r[0]), ct)),
    )
    check_vjp(g, [x, y], rng_for(x, y))
    # reverse over reverse differentiates bwd
    check_vjp(lambda x, y: blu.grad(lambda a: lax.reduce_sum(g(a, y)))(x), [x, y], rng_for(x))
    # jacrev = vmap over the backward pass
    if x.ndim == 1:
        jac = blu.jacrev(g)(x, y)
        np.testing.assert_allclose(np.asarray(jac), np.diag(np.cos(x) * y), atol=1e-12)


def test_closures_over_traced_values():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(3)

    def with_jvp(w, x):
        @custom_jvp
        def f(x):
            return lax.mul(lax.sin(x), w)

        f.defjvp(lambda p, t: (f(p[0]), lax.mul(lax.mul(t[0], lax.cos(p[0])), w)))
        return lax.reduce_sum(f(x))

    def with_vjp(w, x):
        @custom_vjp
        def f(x):
            return lax.mul(lax.sin(x), w)

        f.defvjp(lambda x: (f(x), x), lambda x, g: (lax.mul(lax.mul(g, lax.cos(x)), w),))
        return lax.reduce_sum(f(x))

    w = rng.standard_normal(3)
    want_dw, want_dx = np.sin(x), np.cos(x) * w
    for fn in (with_jvp, with_vjp):
        for g in (
            blu.grad(fn, (0, 1)),
            blu.jit(blu.grad(fn, (0, 1))),
            blu.grad(blu.jit(fn), (0, 1)),
        ):
            dw, dx = g(w, x)  # d/dw: ordinary autodiff of the closed-over value
            np.testing.assert_allclose(np.asarray(dw), want_dw, rtol=1e-12)
            np.testing.assert_allclose(np.asarray(dx), want_dx, rtol=1e-12)
        ws = rng.standard_normal((2, 3))  # w a vmap tracer inside the rules
        got = blu.vmap(blu.grad(fn, 1), (0, None))(ws, x)
        np.testing.assert_allclose(np.asarray(got), np.cos(x) * ws, rtol=1e-12)


def test_nondiff_argnums_and_pytrees():
    x = np.array([1.0, 2.0])

    def scale_fn(k, d):
        return {"a": lax.mul(d["a"], lax.full_like(d["a"], k)), "b": d["b"]}

    f = custom_vjp(scale_fn, nondiff_argnums=(0,))
    f.defvjp(
        lambda k, d: (f(k, d), None),
        lambda k, res, ct: ({"a": lax.mul(ct["a"], lax.full_like(ct["a"], 10.0 * k)), "b": None},),
    )  # noqa: E501
    g = blu.grad(lambda d: lax.reduce_sum(lax.add(f(3.0, d)["a"], f(3.0, d)["b"])))(
        {"a": x, "b": x}
    )
    np.testing.assert_allclose(np.asarray(g["a"]), [30.0, 30.0])
    np.testing.assert_allclose(np.asarray(g["b"]), [0.0, 0.0])  # bwd said None

    h = custom_jvp(lambda x, k: lax.mul(x, lax.full_like(x, k)), nondiff_argnums=(1,))
    h.defjvp(lambda k, p, t: (h(p[0], k), lax.mul(t[0], lax.full_like(t[0], 2.0 * k))))
    np.testing.assert_allclose(np.asarray(blu.grad(sum_of(lambda x: h(x, 5.0)))(x)), [10.0, 10.0])
    np.testing.assert_allclose(np.asarray(blu.jit(lambda x: h(x, k=5.0))(x)), [5.0, 10.0])


def test_errors(set_flag):
    x = np.array([1.0, 2.0])
    with pytest.raises(CustomVJPForwardModeError, match="reverse mode"):
        blu.jvp(softplus_vjp, (x,), (x,))
    with pytest.raises(CustomVJPForwardModeError):
        blu.jacfwd(softplus_vjp)(x)
    for name in (None, "i"):  # batched forward mode too (custom_lin's batching rule)
        with pytest.raises(CustomVJPForwardModeError):
            blu.vmap(lambda x: blu.jvp(softplus_vjp, (x,), (x,))[1], axis_name=name)(x)
    bad = custom_vjp(lax.sin)
    bad.defvjp(lambda x: (lax.sin(x), None), lambda r, g: (g, g))
    with pytest.raises(BluTypeError, match="one cotangent per"):
        blu.grad(sum_of(bad))(x)
    bad2 = custom_jvp(lax.sin)
    bad2.defjvp(lambda p, t: (lax.sin(p[0]), lax.reduce_sum(t[0])))
    with pytest.raises(BluTypeError, match="tangent output"):
        bad2(x)
    with pytest.raises(BluTypeError, match="defjvp"):
        custom_jvp(lax.sin)(x)


def test_defjvps_one_rule_per_argument():
    x, y = np.array([1.0, 2.0]), np.array([3.0, -4.0])
    f = custom_jvp(lambda x, y: lax.mul(lax.sin(x), y))
    f.defjvps(
        lambda t, out, x, y: lax.mul(lax.mul(lax.cos(x), y), t),
        lambda t, out, x, y: lax.mul(lax.sin(x), t),
    )
    gx, gy = blu.grad(lambda x, y: lax.reduce_sum(f(x, y)), (0, 1))(x, y)
    np.testing.assert_allclose(np.asarray(gx), np.cos(x) * y, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(gy), np.sin(x), rtol=1e-12)


def test_a_rejected_rule_leaves_the_previous_one():
    """defjvp/defjvps/defvjp check their rules before setting them (a non-callable or a wrong
    number of parameters is a BluTypeError naming it); the rule set before stays in use."""
    x = np.array([0.5, -1.0, 2.0])
    f = custom_jvp(lambda x, y: lax.mul(lax.sin(x), y))
    # deliberately not the derivative of sin(x) * y: d/dx is 2 y, d/dy is 3, so the rule shows
    f.defjvp(lambda p, t: (f(*p), lax.add(lax.mul(lax.mul(t[0], p[1]), lax.full_like(t[0], 2.0)),
                                          lax.mul(t[1], lax.full_like(t[1], 3.0)))))  # fmt: skip
    for bad, match in [
        ((3,), "the JVP rule must be callable, got int"),
        ((lambda p: p,), r"the JVP rule <lambda>\(p\) cannot take 2 positional"),
    ]:
        with pytest.raises(BluTypeError, match=match):
            f.defjvp(*bad)
    for bad, match in [
        ((lambda t, o, x, y: t,), r"one function \(or None\) per positional .* got 1"),
        ((None, 4.0), "function 1 must be callable, got float"),
        ((None, lambda t, o: t), r"function 1 <lambda>\(t, o\) cannot take 4 positional"),
    ]:
        with pytest.raises(BluTypeError, match=match):
            f.defjvps(*bad)
    gx, gy = blu.grad(lambda x, y: lax.reduce_sum(f(x, y)), (0, 1))(x, 1.5 * x)
    np.testing.assert_allclose(np.asarray(gx), 2.0 * 1.5 * x, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(gy), np.full(3, 3.0), rtol=1e-12)
    h = custom_jvp(lambda k, x: lax.mul(x, lax.full_like(x, k)), nondiff_argnums=(0,))
    with pytest.raises(BluTypeError, match="nondiff_argnums"):
        h.defjvps(lambda t, o, x: t)

    g = custom_vjp(lax.sin)
    g.defvjp(lambda x: (lax.sin(x), x), lambda r, ct: (lax.mul(ct, lax.full_like(ct, 5.0)),))
    good_fwd = lambda x: (lax.sin(x), x)  # noqa: E731
    for fwd, bwd, match in [
        (None, lambda r, ct: (ct,), "fwd must be callable, got NoneType"),
        (good_fwd, "bwd", "bwd must be callable, got str"),
        (lambda: 0, lambda r, ct: (ct,), r"fwd <lambda>\(\) cannot take 1 positional"),
        (good_fwd, lambda ct: (ct,), r"bwd <lambda>\(ct\) cannot take 2 positional"),
    ]:
        with pytest.raises(BluTypeError, match=match):
            g.defvjp(fwd, bwd)
    np.testing.assert_allclose(np.asarray(blu.grad(sum_of(g))(x)), np.full(3, 5.0), rtol=1e-12)


# ---- higher orders: a rule calling its own function applies the rule again -----------------------

# rules that are deliberately *not* sin's derivative, so each order shows which one was used
sin_2cos = custom_jvp(lax.sin)


@sin_2cos.defjvp
def _sin_2cos_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return sin_2cos(x), lax.mul(lax.mul(t, lax.full_like(t, 2.0)), lax.cos(x))


# f' = 2 f(x + pi/2) by the rule, applied recursively: the k-th derivative is
# 2^k sin(x + k pi/2) (differentiating the inner call as plain sin would give 2^(k-1) ...)
sin_shift = custom_jvp(lax.sin)


@sin_shift.defjvp
def _sin_shift_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    shifted = sin_shift(lax.add(x, lax.full_like(x, np.pi / 2)))
    return sin_shift(x), lax.mul(lax.mul(t, lax.full_like(t, 2.0)), shifted)


def nth_grad(f, n):
    """The n-th derivative of an elementwise f, elementwise (nested grads of sums)."""
    for _ in range(n):
        f = blu.grad(sum_of(f))
    return f


def nth_jvp(f, n):
    for _ in range(n):
        f = (lambda g: lambda x: blu.jvp(g, (x,), (lax.full_like(x, 1.0),))[1])(f)
    return f


@given(st.data())
def test_custom_jvp_rule_is_used_at_every_order(data):
    shape = data.draw(shapes(max_dims=2, max_side=3))
    x = data.draw(arrays(shape, lo=-3.0, hi=3.0))
    # sin_2cos: f' = 2 cos, f'' = -2 sin (the rule's tangent differentiated)
    np.testing.assert_allclose(np.asarray(nth_grad(sin_2cos, 1)(x)), 2 * np.cos(x), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(nth_grad(sin_2cos, 2)(x)), -2 * np.sin(x), atol=1e-12)
    np.testing.assert_allclose(np.asarray(nth_jvp(sin_2cos, 2)(x)), -2 * np.sin(x), atol=1e-12)
    # the rule's primal output (its call of sin_2cos) is differentiated by the rule too
    ones = np.ones_like(x)
    primal_of_jvp = lambda x: blu.jvp(sin_2cos, (x,), (ones,))[0]  # noqa: E731
    np.testing.assert_allclose(np.asarray(nth_jvp(primal_of_jvp, 1)(x)), 2 * np.cos(x), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(nth_grad(primal_of_jvp, 1)(x)), 2 * np.cos(x), rtol=1e-12)
    # sin_shift: k-th derivative 2^k sin(x + k pi/2), forward, reverse and mixed
    for k in range(4):
        want = 2.0**k * np.sin(x + k * np.pi / 2)
        for got in (nth_grad(sin_shift, k)(x), nth_jvp(sin_shift, k)(x)):
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-10)
    want2 = -4 * np.sin(x)
    mixed = (
        nth_jvp(nth_grad(sin_shift, 1), 1),
        nth_grad(nth_jvp(sin_shift, 1), 1),
        blu.jit(nth_grad(sin_shift, 2)),
        nth_grad(blu.jit(nth_grad(sin_shift, 1)), 1),
        nth_grad(nth_grad(blu.jit(sin_shift), 1), 1),
        blu.vmap(nth_grad(sin_shift, 2)) if x.ndim else nth_grad(sin_shift, 2),
        nth_grad(blu.vmap(nth_grad(sin_shift, 1)), 1) if x.ndim else nth_grad(sin_shift, 2),
    )
    for f in mixed:
        np.testing.assert_allclose(np.asarray(f(x)), want2, rtol=1e-10, atol=1e-10)
    if x.ndim == 1:  # a Hessian: diagonal, 2^2 sin(x + pi)
        h = blu.jacfwd(blu.jacrev(lambda v: lax.reduce_sum(sin_shift(v))))(x)
        np.testing.assert_allclose(np.asarray(h), np.diag(want2), atol=1e-10)


def naive_log1pexp(x):
    """log(1 + e^x), kept finite by a select; its gradient is still nan for large x (the
    discarded branch's derivative is inf/inf)."""
    big = lax.gt(x, lax.full_like(x, 30.0))
    return lax.select(big, x, lax.log1p(lax.exp(x)))


log1pexp = custom_jvp(naive_log1pexp)


@log1pexp.defjvp
def _log1pexp_jvp(primals, tangents):
    # sigmoid(x) = 1 - e^-log1pexp(x): its own derivative then calls the rule again, giving
    # e^-f sigmoid, finite everywhere
    (x,), (t,) = primals, tangents
    y = log1pexp(x)
    return y, lax.mul(t, lax.neg(lax.expm1(lax.neg(y))))


@given(st.data())
def test_log1pexp_second_derivative_matches_finite_differences_where_naive_overflows(data):
    shape = data.draw(shapes(min_dims=1, max_dims=1, min_side=1, max_side=4))
    x = data.draw(arrays(shape, lo=-800.0, hi=800.0))
    x.flat[0] = 750.0  # exp overflows float64 here
    s = sigmoid_np(x)
    np.testing.assert_allclose(np.asarray(log1pexp(x)), np.logaddexp(0.0, x), rtol=1e-12)
    g1, g2 = nth_grad(log1pexp, 1), nth_grad(log1pexp, 2)
    np.testing.assert_allclose(np.asarray(g1(x)), s, rtol=1e-12, atol=1e-300)
    d2 = np.asarray(g2(x))
    assert np.all(np.isfinite(d2))
    # s(1-s) written as s(x) s(-x): 1 - s cancels catastrophically for large x. expm1's JVP
    # is (expm1(x) + 1) t, as in JAX: near x = -20 that sum cancels to an absolute error ~1 ulp of 1
    np.testing.assert_allclose(d2, s * sigmoid_np(-x), rtol=1e-9, atol=4e-16)
    np.testing.assert_allclose(np.asarray(nth_jvp(log1pexp, 2)(x)), d2, rtol=1e-12, atol=1e-300)
    h = 1e-4  # central differences of the first derivative
    fd = (np.asarray(g1(x + h)) - np.asarray(g1(x - h))) / (2 * h)
    np.testing.assert_allclose(d2, fd, atol=1e-8)
    with np.errstate(all="ignore"):
        naive = np.asarray(nth_grad(naive_log1pexp, 2)(x))
    assert np.isnan(naive.flat[0])
    # and on moderate inputs every order up to 3 matches finite differences
    check_grads(log1pexp, [data.draw(arrays(shape, lo=-5.0, hi=5.0))], order=3)


# ---- named axes: collectives inside the function and its rules, under blu.shard ----------------

MESHES = [((4,), ("x",)), ((2, 2), ("x", "y"))]


@pytest.fixture
def four_devices(set_flag):
    set_flag("num_cpu_devices", 4)


def make_pnormalize(names: tuple, kind: str):
    """x / ||x|| with the norm over every device of ``names`` (a psum), as a custom_vjp
    (psum in fwd and bwd) or a custom_jvp (psum in the function and its rule); ``names=()`` is
    the same function on the whole array."""

    def norm(x):
        return bnp.sqrt(psum(bnp.sum(x * x), names))

    def vjp_fun(x):
        return x / norm(x)

    def fwd(x):
        n = norm(x)
        return x / n, (x, n)

    def bwd(res, g):
        x, n = res
        return (g / n - x * (psum(bnp.sum(g * x), names) / n**3),)

    def jvp_rule(primals, tangents):
        (x,), (t,) = primals, tangents
        n = norm(x)
        return f(x), t / n - x * (psum(bnp.sum(t * x), names) / n**3)

    f = custom_vjp(vjp_fun) if kind == "vjp" else custom_jvp(vjp_fun)
    if kind == "vjp":
        f.defvjp(fwd, bwd)
    else:
        f.defjvp(jvp_rule)
    return f


def _pnormalize_np(x, w):
    y = x / np.linalg.norm(x)
    return np.sum(np.sin(y) * w)


@pytest.mark.parametrize("kind", ["vjp", "jvp"])
@pytest.mark.parametrize("mesh_shape,names", MESHES)
def test_collectives_inside_custom_rules_under_shard(four_devices, kind, mesh_shape, names):
    mesh = make_mesh(mesh_shape, names)
    spec = P(*names)
    rng = np.random.default_rng(len(names))
    x, w = rng.standard_normal((4, 6)), rng.standard_normal((4, 6))
    pnorm, whole = make_pnormalize(names, kind), make_pnormalize((), kind)

    def local(x, w):  # one device's share of the loss
        return bnp.sum(bnp.sin(pnorm(x)) * w)

    def global_loss(x, w):  # the sum over devices, as the function of the whole arrays
        return bnp.sum(shard(lambda x, w: local(x, w)[None, None], mesh, spec, spec)(x, w))

    want = _pnormalize_np(x, w)
    plain = lambda x, w: bnp.sum(bnp.sin(x / bnp.sqrt(bnp.sum(x * x))) * w)  # noqa: E731
    want_g = np.asarray(blu.grad(plain)(x, w))  # ordinary autodiff, no custom rule
    np.testing.assert_allclose(float(global_loss(x, w)), want, rtol=1e-12)
    np.testing.assert_allclose(float(blu.jit(global_loss)(x, w)), want, rtol=1e-12)
    np.testing.assert_allclose(float(bnp.sum(bnp.sin(whole(x)) * w)), want, rtol=1e-12)
    # gradients taken outside shard, and inside it (pmap semantics: d/dx_d of the sum over
    # devices, which bwd/the rule compute with their psum)
    for g in (
        blu.grad(global_loss)(x, w),
        blu.jit(blu.grad(global_loss))(x, w),
        shard(blu.grad(local), mesh, spec, spec)(x, w),
        shard(blu.jit(blu.grad(local)), mesh, spec, spec)(x, w),
        blu.jit(shard(blu.grad(local), mesh, spec, spec))(x, w),
    ):
        np.testing.assert_allclose(np.asarray(g), want_g, rtol=1e-10, atol=1e-12)
    if kind == "jvp":  # forward mode inside shard runs the rule with its psum
        t = rng.standard_normal(x.shape)
        tan = shard(lambda x, t: blu.jvp(pnorm, (x,), (t,))[1], mesh, spec, spec)(x, t)
        want_t = blu.jvp(lambda x: x / bnp.sqrt(bnp.sum(x * x)), (x,), (t,))[1]
        np.testing.assert_allclose(np.asarray(tan), np.asarray(want_t), rtol=1e-10, atol=1e-12)
        # second order: the rule's own call of pnorm (its primal output, which sin' uses) is
        # differentiated by the rule again, inside shard and outside it
        hvp_want = blu.jvp(lambda x: blu.grad(plain)(x, w), (x,), (t,))[1]
        hvp_in = shard(lambda x, w, t: blu.jvp(lambda x: blu.grad(local)(x, w), (x,), (t,))[1],
                       mesh, spec, spec)(x, w, t)  # fmt: skip
        hvp_out = blu.jvp(lambda x: blu.grad(global_loss)(x, w), (x,), (t,))[1]
        for got in (hvp_in, hvp_out):
            np.testing.assert_allclose(np.asarray(got), np.asarray(hvp_want), rtol=1e-9, atol=1e-11)
    # a replicated argument: nothing is batched, the psum still sees the mesh axes
    r = rng.standard_normal(3)
    got = shard(pnorm, mesh, P(), P())(r)
    np.testing.assert_allclose(np.asarray(got), r / (2 * np.linalg.norm(r)), rtol=1e-12)
    got_g = blu.grad(lambda r: bnp.sum(shard(pnorm, mesh, P(), P())(r) * w[0, :3]))(r)
    want_rg = blu.grad(lambda r: bnp.sum(r / bnp.sqrt(4 * bnp.sum(r * r)) * w[0, :3]))(r)
    np.testing.assert_allclose(np.asarray(got_g), np.asarray(want_rg), rtol=1e-10)


@pytest.mark.parametrize("mesh_shape,names", MESHES)
def test_custom_vjp_cotangent_of_a_replicated_argument_sums_over_devices(
    four_devices, mesh_shape, names
):
    """y = x * a + psum(x): x split over the mesh, a replicated. Under batching, bwd's
    per-device cotangent of a is summed over the devices."""
    mesh = make_mesh(mesh_shape, names)
    spec = P(*names)
    rng = np.random.default_rng(7)
    x, c = rng.standard_normal((4, 6)), rng.standard_normal((4, 6))
    blk = (4 // mesh.shape[names[0]], 6 // (mesh.shape[names[1]] if len(names) > 1 else 1))
    a = rng.standard_normal(blk)

    @custom_vjp
    def f(x, a):
        return x * a + psum(x, names)

    f.defvjp(lambda x, a: (f(x, a), (x, a)), lambda r, g: (g * r[1] + psum(g, names), g * r[0]))

    def plain_blocks(x, a):  # the same on the whole array, by block
        xb = bnp.reshape(x, (4 // blk[0], blk[0], 6 // blk[1], blk[1]))
        total = bnp.sum(xb, axis=(0, 2))
        y = xb * a[None, :, None, :] + total[None, :, None, :]
        return bnp.reshape(y, (4, 6))

    def loss(run):
        return lambda x, a: bnp.sum(bnp.sin(run(x, a)) * c)

    sharded = loss(shard(f, mesh, (spec, P()), spec))
    np.testing.assert_allclose(float(sharded(x, a)), float(loss(plain_blocks)(x, a)), rtol=1e-12)
    want = blu.grad(loss(plain_blocks), (0, 1))(x, a)
    for got in (blu.grad(sharded, (0, 1))(x, a), blu.jit(blu.grad(sharded, (0, 1)))(x, a)):
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-10, atol=1e-12)
