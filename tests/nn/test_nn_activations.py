"""blu.nn's jax.nn activations against float64 numpy/scipy references, finite differences away
from kinks, the stated conventions at kinks, stability at large |x|, vmap and jit."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sp
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
import blu.nn as nn
from blu.core.errors import BluTypeError
from tests.helpers import arrays, check_grads, shapes

A, S = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946

# name -> (blu function, float64 reference, points where the derivative is undefined)
REF = {
    "softplus": (nn.softplus, lambda x: np.logaddexp(x, 0.0), []),
    "log_sigmoid": (nn.log_sigmoid, lambda x: -np.logaddexp(-x, 0.0), []),
    "soft_sign": (nn.soft_sign, lambda x: x / (np.abs(x) + 1), []),
    "swish": (nn.swish, lambda x: x * sp.expit(x), []),
    "sparse_plus": (
        nn.sparse_plus,
        lambda x: np.where(x <= -1, 0.0, np.where(x < 1, (x + 1) ** 2 / 4, x)),
        [],
    ),
    "sparse_sigmoid": (
        nn.sparse_sigmoid,
        lambda x: np.clip((x + 1) / 2, 0, 1),
        [-1.0, 1.0],
    ),
    "elu": (nn.elu, lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))), [0.0]),
    "celu": (
        lambda x: nn.celu(x, 0.5),
        lambda x: np.where(x > 0, x, 0.5 * np.expm1(np.minimum(x, 0) / 0.5)),
        [],
    ),
    "selu": (nn.selu, lambda x: S * np.where(x > 0, x, A * np.expm1(np.minimum(x, 0))), [0.0]),
    "hard_tanh": (nn.hard_tanh, lambda x: np.clip(x, -1, 1), [-1.0, 1.0]),
    "relu6": (nn.relu6, lambda x: np.clip(x, 0, 6), [0.0, 6.0]),
    "hard_sigmoid": (nn.hard_sigmoid, lambda x: np.clip(x + 3, 0, 6) / 6, [-3.0, 3.0]),
    "hard_silu": (nn.hard_silu, lambda x: x * np.clip(x + 3, 0, 6) / 6, [-3.0, 3.0]),
    "leaky_relu": (nn.leaky_relu, lambda x: np.where(x >= 0, x, 0.01 * x), [0.0]),
    "mish": (nn.mish, lambda x: x * np.tanh(np.logaddexp(x, 0.0)), []),
    "squareplus": (nn.squareplus, lambda x: (x + np.sqrt(x * x + 4)) / 2, []),
    "gelu_exact": (
        lambda x: nn.gelu(x, approximate=False),
        lambda x: 0.5 * x * (1 + sp.erf(x / np.sqrt(2))),
        [],
    ),
    "tanh": (nn.tanh, np.tanh, []),
}


@pytest.mark.parametrize("name", sorted(REF))
def test_values_against_float64(name):
    f, ref, _ = REF[name]
    x = np.concatenate([np.linspace(-8, 8, 161), [-1e4, -50.0, 50.0, 1e4, 0.0, -1.0, 1.0]])
    np.testing.assert_allclose(np.asarray(f(x)), ref(x), rtol=1e-12, atol=1e-12)
    y = np.asarray(f(x.astype(np.float32)))
    assert y.dtype == np.float32 and np.all(np.isfinite(y))
    np.testing.assert_allclose(y, ref(x), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", sorted(REF))
def test_gradients_against_finite_differences(name):
    f, _, kinks = REF[name]
    x = np.linspace(-7.3, 7.1, 37)  # no kink lies on or within eps of this grid
    assert all(np.min(np.abs(x - k)) > 1e-3 for k in kinks)
    check_grads(f, [x], order=2, atol=1e-6, rtol=1e-6)


def _grad(f, x):
    return float(blu.grad(lambda v: f(v))(np.float64(x)))


def test_gradients_at_special_points():
    # softplus family: sigmoid's exact values, finite at the extremes
    assert _grad(nn.softplus, 0.0) == 0.5
    assert _grad(nn.softplus, 1e4) == 1.0 and _grad(nn.softplus, -1e4) == 0.0
    assert _grad(nn.log_sigmoid, -1e4) == 1.0 and _grad(nn.log_sigmoid, 1e4) == 0.0
    np.testing.assert_allclose(_grad(nn.mish, 1e4), 1.0)
    assert np.isfinite(_grad(nn.mish, -1e4))
    np.testing.assert_allclose(_grad(nn.soft_sign, 0.0), 1.0)
    # continuously differentiable at their joins
    np.testing.assert_allclose(_grad(nn.sparse_plus, -1.0), 0.0)
    np.testing.assert_allclose(_grad(nn.sparse_plus, 1.0), 1.0)
    np.testing.assert_allclose(_grad(lambda v: nn.celu(v, 0.5), 0.0), 1.0)
    # JAX's conventions at kinks
    assert _grad(nn.relu6, 0.0) == 0.0 and _grad(nn.relu6, 6.0) == 0.0
    assert _grad(nn.hard_sigmoid, 3.0) == 0.0 and _grad(nn.hard_sigmoid, -3.0) == 0.0
    assert _grad(nn.leaky_relu, 0.0) == 1.0
    assert _grad(nn.hard_tanh, 1.0) == 1.0 and _grad(nn.hard_tanh, -1.0) == 1.0
    np.testing.assert_allclose(_grad(lambda v: nn.elu(v, 2.0), 0.0), 2.0)
    np.testing.assert_allclose(_grad(nn.selu, 0.0), S * A)
    # no NaN from the untaken branch of elu at large x
    assert _grad(nn.elu, 1e4) == 1.0 and _grad(nn.selu, 1e4) == S


@pytest.mark.parametrize("name", sorted(REF))
def test_nan_gives_nan(name):
    # as the float64 references (and JAX's): sparse_sigmoid(NaN) was 1, NaN taking its x >= 1 piece
    f, ref, _ = REF[name]
    x = np.array([np.nan, 0.5])
    assert np.isnan(ref(x)[0])
    got = np.asarray(f(x))
    assert np.isnan(got[0]) and np.isfinite(got[1])
    if name == "sparse_plus":  # its derivative at NaN, (x + 1) / 2, is NaN too
        assert np.isnan(_grad(f, np.nan))


def test_squareplus_does_not_overflow():
    # x**2 overflowed float32 beyond ~1.8e19: squareplus(1e20) was inf with derivative 0.5
    x = np.array([1e20, 1e30, 3e38, -1e20, -1e30], np.float32)
    x64 = x.astype(np.float64)
    r = np.sqrt(x64 * x64 + 4.0)  # no overflow in float64
    want = np.where(x64 > 0, (x64 + r) / 2, 4.0 / (2 * (r + np.abs(x64))))  # r - x for x < 0
    got = np.asarray(nn.squareplus(x))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-6)
    grads = np.asarray(blu.vmap(blu.grad(nn.squareplus))(x))
    np.testing.assert_allclose(grads, (1 + x64 / r) / 2, rtol=2e-6, atol=1e-30)


@given(arrays(shapes(max_dims=2)))
def test_vmap_matches_loop(x):
    for name in ["softplus", "mish", "hard_silu", "elu"]:
        f = REF[name][0]
        if x.ndim == 0:
            continue
        got = np.asarray(blu.vmap(f)(x))
        want = np.stack([np.asarray(f(r)) for r in x]) if len(x) else np.zeros_like(x)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.asarray(blu.jit(f)(x)), want.reshape(x.shape), rtol=1e-12)


def test_glu():
    x = np.random.default_rng(0).standard_normal((3, 4, 6))
    np.testing.assert_allclose(np.asarray(nn.glu(x)), x[..., :3] * sp.expit(x[..., 3:]), rtol=1e-12)
    np.testing.assert_allclose(
        np.asarray(nn.glu(x, axis=1)), x[:, :2] * sp.expit(x[:, 2:]), rtol=1e-12
    )
    check_grads(lambda v: nn.glu(v, axis=0), [x[:2, :2, :2]], order=2)
    with pytest.raises(blu.BluError, match="even"):
        nn.glu(np.ones((3, 5)))


def test_standardize():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 7)) * 3 + 5
    want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(np.asarray(nn.standardize(x)), want, rtol=1e-10)
    want0 = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5)
    np.testing.assert_allclose(np.asarray(nn.standardize(x, axis=0)), want0, rtol=1e-10)
    m = np.arange(7) < 4
    xm = x[:, :4]
    wantm = (x - xm.mean(-1, keepdims=True)) / np.sqrt(xm.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(np.asarray(nn.standardize(x, where=m)), wantm, rtol=1e-10)
    got = nn.standardize(x, mean=1.0, variance=4.0, epsilon=0.0)
    np.testing.assert_allclose(np.asarray(got), (x - 1) / 2, rtol=1e-12)
    check_grads(nn.standardize, [x[:2, :3]], order=2)


def test_standardize_algorithm_with_a_given_mean():
    # JAX's algorithm=: with a mean given and no variance, "fast" (the default) divides by
    # sqrt(mean(x^2) - mean^2 + eps), "stable" by sqrt(mean((x - mean)^2) + eps); blu had no
    # algorithm= and always took the second, so JAX's default value was off (0.999 for 0.577
    # at x = 1, mean 0.5)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 5)) * 2 + 1
    m = np.array([[0.5], [-1.0], [3.0]])
    x2 = (x**2).mean(-1, keepdims=True)
    fast = (x - m) / np.sqrt(np.maximum(x2 - m**2, 0) + 1e-5)
    stable = (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(np.asarray(nn.standardize(x, mean=m)), fast, rtol=1e-12)
    got = nn.standardize(x, mean=m, algorithm="fast")
    np.testing.assert_allclose(np.asarray(got), fast, rtol=1e-12)
    got = nn.standardize(x, mean=m, algorithm="stable")
    np.testing.assert_allclose(np.asarray(got), stable, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(nn.standardize(np.ones(3), mean=0.5)),
                               0.5 / np.sqrt(0.75 + 1e-5), rtol=1e-12)  # fmt: skip
    # mean(x^2) < mean^2: clipped to 0, as JAX's
    np.testing.assert_allclose(np.asarray(nn.standardize(np.ones(2), mean=2.0)),
                               -1 / np.sqrt(1e-5), rtol=1e-12)  # fmt: skip
    # with the mean computed both give the variance (mean None: computed in two passes)
    want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    for alg in ("fast", "stable"):
        got = nn.standardize(x, algorithm=alg)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10)
    check_grads(lambda v: nn.standardize(v, mean=m[:2]), [x[:2, :3]], order=2)
    with pytest.raises(blu.errors.BluValueError, match="algorithm"):
        nn.standardize(x, algorithm="two-pass")


@given(st.integers(0, 2), st.integers(1, 5))
def test_one_hot_axis(axis, k):
    labels = np.array([[0, 2], [k - 1, 7]])
    want = np.moveaxis((labels[..., None] == np.arange(k)).astype(np.float32), -1, axis)
    got = nn.one_hot(labels, k, axis=axis)
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_one_hot_narrow_labels_more_classes_than_the_dtype_holds(dtype):
    # the classes' iota was in the labels' dtype and wrapped: uint8 label 1 matched 1 and 257
    # (JAX's does the same); a numpy comparison in int64 is the reference
    info = np.iinfo(dtype)
    labels = np.array([0, 1, info.max, info.min, -1 if info.min < 0 else 2], dtype)
    k = int(info.max) + 3 if dtype in (np.uint8, np.int8) else 70000
    want = (labels.astype(np.int64)[:, None] == np.arange(k)).astype(np.float32)
    got = np.asarray(nn.one_hot(labels, k))
    np.testing.assert_array_equal(got, want)
    assert got.sum() == np.count_nonzero((labels >= 0) & (labels.astype(np.int64) < k))


@pytest.mark.parametrize(
    "name", ["softmax", "log_softmax", "logsumexp", "gelu", "sigmoid", "silu", "standardize"]
)
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_input_is_a_type_error_not_a_cast(name, dtype):
    """Complex input was cast to float32, dropping the imaginary part and the precision: e.g.
    ``scipy.special.logsumexp([1+1j, 2-1j])`` gave 2.3133, the logsumexp of the real parts,
    where the complex value is 1.9063-0.6238j. Real input is unchanged (float64 reference)."""
    z = np.array([1 + 1j, 2 - 1j], dtype)
    with pytest.raises(BluTypeError, match="real input"):
        getattr(nn, name)(z)
    with pytest.raises(BluTypeError, match="real input"):
        blu.scipy.special.logsumexp(z)
    x = np.array([1.0, 2.0])
    want = np.log(np.exp(1.0) + np.exp(2.0))
    assert float(blu.scipy.special.logsumexp(x)) == pytest.approx(want, rel=1e-15)


@pytest.mark.parametrize("axis", [1.5, 1.0, "a", np.float32(0.0)], ids=repr)
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp", "standardize"])
def test_an_axis_that_is_no_int_is_a_type_error(name, axis):
    """numpy's rule (``operator.index``): 1.5 was silently axis 1 (``int()``), a lone 1.0
    raised Python's 'float object is not iterable'. Integer-likes still work (float64
    reference for logsumexp over axis 1)."""
    x = np.arange(6.0).reshape(2, 3)
    with pytest.raises(BluTypeError, match="axis must be an int"):
        getattr(nn, name)(x, axis=axis)
    want = np.log(np.exp(x).sum(axis=1))
    for ok in (1, np.int64(1), np.array(1), [1]):
        np.testing.assert_allclose(np.asarray(nn.logsumexp(x, axis=ok)), want, rtol=1e-14)


def _log1mexp_decimal(v: float) -> float:
    """``log(1 - exp(-v))`` in 400-digit decimal arithmetic (``exp(-800)`` is ~1e-348)."""
    import decimal

    if np.isnan(v) or v < 0:
        return float("nan")
    if v == 0:
        return -float("inf")
    if np.isinf(v):
        return 0.0
    with decimal.localcontext() as ctx:
        ctx.prec = 400
        d = decimal.Decimal(float(v))
        return float((1 - (-d).exp()).ln())


@given(
    st.lists(
        st.one_of(
            st.floats(1e-30, 800.0),
            st.sampled_from([0.0, -0.0, -1.0, np.log(2.0), 1e-300, np.inf, -np.inf, np.nan]),
        ),
        min_size=0,
        max_size=7,
    )
)
def test_log1mexp_against_decimal_arithmetic(values):
    """JAX's ``log1mexp(x) = log(1 - exp(-x))``: a few ulps at tiny ``x`` (where
    ``log1p(-exp(-x))`` loses every digit) and at large ``x`` (where ``log(-expm1(-x))`` is 0)."""
    x = np.array(values, np.float64)
    want = np.array([_log1mexp_decimal(v) for v in values], np.float64)
    for got in (nn.log1mexp(x), blu.jit(nn.log1mexp)(x)):
        got = np.asarray(got)
        assert got.dtype == np.float64 and got.shape == x.shape
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=8 * np.finfo(np.float64).eps, atol=0)
    assert nn.log1mexp(np.arange(1, 3)).dtype == np.float32


def test_log1mexp_gradient():
    """The derivative ``1 / expm1(x)`` (JAX's), against central differences."""
    x = np.array([1e-3, 0.3, np.log(2.0) - 1e-3, np.log(2.0) + 1e-3, 2.0, 30.0])
    g = np.asarray(blu.vmap(blu.grad(nn.log1mexp))(x))
    np.testing.assert_allclose(g, 1.0 / np.expm1(x), rtol=1e-13)
    h = 1e-7
    fd = (np.asarray(nn.log1mexp(x + h)) - np.asarray(nn.log1mexp(x - h))) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-5)


@given(shapes(min_dims=0, max_dims=3, min_side=0, max_side=3), st.data())
def test_logmeanexp_against_a_float64_loop(shape, data):
    """``log(mean(exp(x)))`` over axes and a mask (JAX's ``axis, where, keepdims``): the mean of
    the exponentials in float64, element by element; NaN where nothing is reduced."""
    x = np.asarray(data.draw(arrays(shape, -30.0, 30.0)))
    ndim = x.ndim
    axis = data.draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1) if ndim else st.none()))
    keepdims = data.draw(st.booleans())
    mask = np.asarray(data.draw(hnp.arrays(np.bool_, shape))) if data.draw(st.booleans()) else None
    axes = tuple(range(ndim)) if axis is None else (axis % ndim,)
    w = np.ones(shape, bool) if mask is None else mask
    with np.errstate(all="ignore"):
        total = np.sum(np.where(w, np.exp(x), 0.0), axis=axes, keepdims=keepdims)
        want = np.log(total / np.sum(w, axis=axes, keepdims=keepdims))
    got = np.asarray(nn.logmeanexp(x, axis=axis, where=mask, keepdims=keepdims))
    assert got.shape == np.shape(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    if x.size and mask is None:
        check_grads(lambda v: nn.logmeanexp(v, axis=axis, keepdims=keepdims), (x,))
