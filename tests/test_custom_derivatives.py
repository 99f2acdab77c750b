"""custom_jvp / custom_vjp: user rules replace autodiff (finite gradients where the naive
formula overflows), and compose with jit, vmap, grad, closures and nondiff_argnums."""

import numpy as np
import pytest
from helpers import arrays, check_grads, check_vjp, rng_for, shapes
from hypothesis import given
from hypothesis import strategies as st

import blu
from blu import lax
from blu.core.errors import BluTypeError
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


def test_errors():
    x = np.array([1.0, 2.0])
    with pytest.raises(CustomVJPForwardModeError, match="reverse mode"):
        blu.jvp(softplus_vjp, (x,), (x,))
    with pytest.raises(CustomVJPForwardModeError):
        blu.jacfwd(softplus_vjp)(x)
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
