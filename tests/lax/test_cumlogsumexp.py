"""lax.cumlogsumexp (JAX's; blu had none): against numpy's float64 ``logaddexp.accumulate``
with infinities and NaN, without overflow at large values, finite-difference gradients (the
prefix softmax), derivative 0 over a prefix of only ``-inf``, vmap and jit."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
from blu import lax
from blu.core.errors import BluTypeError, BluValueError
from tests.helpers import arrays, check_grads, check_jit, check_vmap, shapes, tolerance


def _reference(x: np.ndarray, axis: int, reverse: bool) -> np.ndarray:
    x = np.asarray(x, np.float64)
    if reverse:
        return np.flip(np.logaddexp.accumulate(np.flip(x, axis), axis=axis), axis)
    return np.logaddexp.accumulate(x, axis=axis)


@st.composite
def array_axis(draw, special: bool = True):
    shape = draw(shapes(min_dims=1))
    values = (
        st.one_of(
            st.floats(-1e3, 1e3, allow_nan=False, width=64),
            st.sampled_from([-np.inf, np.inf, np.nan, -np.inf, 1e300, -1e300]),
        )
        if special
        else st.floats(-3, 3, allow_nan=False, width=64)
    )
    x = draw(hnp.arrays(np.float64, shape, elements=values))
    return x, draw(st.integers(-len(shape), len(shape) - 1)), draw(st.booleans())


@given(data=array_axis())
def test_matches_numpy_logaddexp_accumulate(data):
    x, axis, reverse = data
    with np.errstate(invalid="ignore", over="ignore"):
        want = _reference(x, axis, reverse)
    got = np.asarray(lax.cumlogsumexp(x, axis=axis, reverse=reverse))
    assert got.shape == x.shape and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32])
@given(seed=st.integers(0, 2**32 - 1), shape=shapes(min_dims=1, max_side=5))
def test_narrow_floats_keep_their_dtype(dtype, seed, shape):
    x = np.random.default_rng(seed).uniform(-4, 4, shape).astype(dtype)
    got = np.asarray(lax.cumlogsumexp(x, axis=-1))
    assert got.dtype == np.dtype(dtype)
    want = _reference(x.astype(np.float64), -1, False)
    tol = tolerance(dtype, n_ops=4 * max(1, shape[-1]).bit_length())
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


def test_large_values_neither_overflow_nor_underflow():
    x = np.array([1000.0, 1000.0, -1000.0, 1001.0], np.float32)
    want = np.log(np.cumsum(np.exp(x.astype(np.float64) - 1001.0))) + 1001.0
    np.testing.assert_allclose(np.asarray(lax.cumlogsumexp(x)), want, rtol=1e-6)


@given(data=array_axis(special=False))
def test_gradients_match_finite_differences(data):
    x, axis, reverse = data
    check_grads(lambda v: lax.cumlogsumexp(v, axis=axis, reverse=reverse), [x], order=2)


def test_gradient_is_the_prefix_softmax():
    x = np.array([0.5, -1.0, 2.0, 0.0])
    jac = np.asarray(blu.jacrev(lax.cumlogsumexp)(x))
    want = np.tril(np.exp(x[None, :] - np.logaddexp.accumulate(x)[:, None]))
    np.testing.assert_allclose(jac, want, rtol=1e-12, atol=1e-12)


def test_a_prefix_of_only_minus_inf_has_derivative_zero():
    x = np.array([-np.inf, -np.inf, 0.0, 1.0])
    jac = np.asarray(blu.jacrev(lax.cumlogsumexp)(x))
    assert np.all(np.isfinite(jac))
    np.testing.assert_array_equal(jac[0], [1, 0, 0, 0])  # out[0] is x[0] itself
    np.testing.assert_array_equal(jac[1], 0.0)  # out[1] = log(0 + 0): no mass, derivative 0
    np.testing.assert_allclose(jac[3], [0, 0, 1 / (1 + np.e), np.e / (1 + np.e)], rtol=1e-12)


@given(data=array_axis(special=False))
def test_vmap_and_jit(data):
    x, axis, reverse = data
    if x.ndim < 2:
        x = x[None]
    axis = axis % (x.ndim - 1)
    f = lambda v: lax.cumlogsumexp(v, axis=axis, reverse=reverse)  # noqa: E731
    check_vmap(f, [x], in_axes=[x.ndim - 1], atol=1e-12, rtol=1e-12)
    check_jit(f, [x.astype(np.float32)])


@pytest.mark.parametrize(
    ("x", "kw", "err", "match"),
    [
        (np.arange(3), {}, BluTypeError, r"real float operand, got i64\[3\]"),
        (np.zeros(3, np.complex64), {}, BluTypeError, r"real float operand"),
        (np.zeros((2, 3)), {"axis": 2}, BluValueError, r"axis 2 out of range for f64\[2,3\]"),
        (np.zeros((2, 3)), {"axis": -3}, BluValueError, r"axis -3 out of range"),
    ],
)
def test_errors(x, kw, err, match):
    with pytest.raises(err, match=match):
        lax.cumlogsumexp(x, **kw)


@given(x=arrays((0,)))
def test_size_0_axis(x):
    assert np.asarray(lax.cumlogsumexp(x)).shape == (0,)
