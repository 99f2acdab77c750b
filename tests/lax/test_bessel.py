"""lax.bessel_i0e / bessel_i1e (JAX's; blu had none) against their float64 power series (and
scipy.special beyond it), in every float dtype, with infinities, NaN and size-0 / size-1
shapes; finite-difference derivatives; the textbook derivative identities; vmap and jit."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import scipy.special
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
from blu import lax
from blu.core.errors import BluTypeError
from tests.helpers import check_grads, check_jit, check_vmap, shapes, tolerance

FUNCS = {"i0e": (lax.bessel_i0e, 0), "i1e": (lax.bessel_i1e, 1)}


def _series(x: float, order: int) -> float:
    """exp(-|x|) I_order(x) = sum_k (x/2)^(2k+order) / (k! (k+order)!) e^-|x|: positive terms,
    each from logarithms (no overflow); accurate to a few ulps for |x| <= 40."""
    if x == 0:
        return 1.0 if order == 0 else 0.0
    a = abs(x)
    terms = []
    for k in range(400):
        log_t = (2 * k + order) * math.log(a / 2) - math.lgamma(k + 1) - math.lgamma(k + order + 1)
        terms.append(math.exp(log_t - a))
        if k > a and terms[-1] < 1e-18 * terms[0]:
            break
    return math.copysign(math.fsum(terms), x) if order else math.fsum(terms)


def _reference(x: np.ndarray, order: int) -> np.ndarray:
    x = np.asarray(x, np.float64)
    ref = scipy.special.i0e if order == 0 else scipy.special.i1e
    out = ref(x)  # beyond the series' range, and inf / NaN
    flat = out.ravel()
    for i, v in enumerate(x.ravel()):
        if np.isfinite(v) and abs(v) <= 40:
            flat[i] = _series(float(v), order)
    return flat.reshape(x.shape)


def _values(shape):
    elem = st.one_of(
        st.floats(-60, 60, width=64),
        st.floats(-1e30, 1e30, width=64),
        st.sampled_from([0.0, -0.0, 8.0, -8.0, np.inf, -np.inf, np.nan, 1e-300]),
    )
    return hnp.arrays(np.float64, shape, elements=elem)


@pytest.mark.parametrize("name", list(FUNCS))
@given(x=shapes().flatmap(_values))
def test_matches_the_float64_series(name, x):
    fn, order = FUNCS[name]
    got = np.asarray(fn(x))
    assert got.shape == x.shape and got.dtype == np.float64
    np.testing.assert_allclose(got, _reference(x, order), rtol=tolerance(np.float64, 8), atol=0)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32])
@pytest.mark.parametrize("name", list(FUNCS))
@given(seed=st.integers(0, 2**32 - 1), shape=shapes(max_side=5))
def test_narrow_floats(name, dtype, seed, shape):
    fn, order = FUNCS[name]
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 10.0 ** rng.uniform(-2, 2, shape)).astype(dtype)
    got = np.asarray(fn(x))
    assert got.dtype == np.dtype(dtype)
    want = _reference(x.astype(np.float64), order)
    tol = tolerance(dtype, 4)  # 31 Clenshaw steps in the dtype: several ulps
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * 1e-2)


def _away_from_kinks(shape):  # not at 0 (|x|'s kink) nor at the series' split at |x| = 8
    pieces = [(0.05, 7.95), (8.05, 30.0), (-7.95, -0.05), (-30.0, -8.05)]
    elem = st.one_of(*(st.floats(lo, hi) for lo, hi in pieces))
    return hnp.arrays(np.float64, shape, elements=elem)


@pytest.mark.parametrize("name", list(FUNCS))
@given(x=shapes(max_side=3).flatmap(_away_from_kinks))
def test_derivatives_match_finite_differences(name, x):
    fn, _ = FUNCS[name]
    check_grads(fn, [x], order=2, atol=1e-6, rtol=1e-6)


@given(x=st.floats(0.01, 50).filter(lambda v: abs(v - 8) > 1e-3), neg=st.booleans())
def test_derivatives_are_the_textbook_ones(x, neg):
    x = -x if neg else x
    i0e, i1e = float(scipy.special.i0e(x)), float(scipy.special.i1e(x))
    s = math.copysign(1.0, x)
    d0 = float(blu.grad(lax.bessel_i0e)(np.float64(x)))
    d1 = float(blu.grad(lax.bessel_i1e)(np.float64(x)))
    np.testing.assert_allclose(d0, i1e - s * i0e, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(d1, i0e - i1e * (s + 1 / x), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", list(FUNCS))
def test_vmap_jit_and_errors(name):
    fn, _ = FUNCS[name]
    x = np.array([[0.3, -9.0, 0.0], [20.0, -1.5, 8.0]], np.float32)
    check_vmap(fn, [x], in_axes=[1])
    check_jit(fn, [x])
    with pytest.raises(BluTypeError, match=rf"bessel_{name}: needs a real float operand, got i32"):
        fn(np.arange(3, dtype=np.int32))
