"""blu.scipy.special's loggamma, bernoulli, spence, bessel_jn, hyp1f1 and hyp2f1 against
scipy.special in float64 (hypothesis-drawn points and special values), float32 with tolerances
from its eps, jit and vmap, and gradients against central differences in float64."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import scipy.special as ss
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu.core.errors import BluTypeError, BluValueError
from blu.scipy import special as S

EPS32 = float(np.finfo(np.float32).eps)
EPS64 = float(np.finfo(np.float64).eps)


def _floats(lo: float, hi: float, n: int = 8):
    return st.lists(
        st.floats(lo, hi, allow_nan=False, allow_infinity=False), min_size=1, max_size=n
    ).map(np.array)


def _close(got, want, rtol, atol=0.0):
    got = np.asarray(got)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _central(f, x, h):
    return (f(x + h) - f(x - h)) / (2 * h)


# ---- loggamma ------------------------------------------------------------------------------


@settings(deadline=None, max_examples=30)
@given(_floats(1e-3, 1e3))
def test_loggamma_positive_against_scipy(x):
    got = S.loggamma(x)
    assert got.dtype == np.float64
    _close(got, ss.loggamma(x), rtol=100 * EPS64, atol=100 * EPS64)


def test_loggamma_special_values_dtypes_and_grad():
    x = np.array([-2.5, -1.0, 0.0, np.nan, np.inf, 1.0, 2.0])
    got = np.asarray(S.loggamma(x))
    want = np.array([np.nan, np.nan, np.nan, np.nan, np.inf, 0.0, 0.0])  # JAX's: NaN at x <= 0
    _close(got, want, rtol=0, atol=1e-15)
    assert S.loggamma(3).dtype == np.float32
    x32 = np.linspace(0.1, 30, 17).astype(np.float32)
    _close(S.loggamma(x32), ss.loggamma(x32.astype(np.float64)), rtol=50 * EPS32, atol=50 * EPS32)
    g = blu.grad(S.loggamma)(np.float64(3.7))
    np.testing.assert_allclose(g, ss.digamma(3.7), rtol=1e-12)
    with pytest.raises(BluTypeError, match="complex"):
        S.loggamma(np.array([1 + 1j]))


# ---- bernoulli -----------------------------------------------------------------------------


def _bernoulli_fractions(n):
    """B_0 .. B_n by the recurrence sum_k C(m+1, k) B_k = 0 (B_1 = -1/2)."""
    from math import comb

    b = [Fraction(1)]
    for m in range(1, n + 1):
        b.append(-sum(comb(m + 1, k) * b[k] for k in range(m)) / (m + 1))
    return np.array([float(v) for v in b])


@pytest.mark.parametrize("n", [0, 1, 2, 3, 10, 31, 60])
def test_bernoulli_against_fractions(n):
    got = S.bernoulli(n)
    assert got.shape == (n + 1,) and got.dtype == np.float32
    np.testing.assert_allclose(got, _bernoulli_fractions(n), rtol=2 * EPS32, atol=0)


def test_bernoulli_large_overflow_and_errors():
    got = np.asarray(S.bernoulli(300))
    with np.errstate(over="ignore"):
        want = ss.bernoulli(300).astype(np.float32)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_allclose(got[np.isfinite(want)], want[np.isfinite(want)], rtol=4 * EPS32)
    with pytest.raises(BluValueError, match="non-negative"):
        S.bernoulli(-1)
    with pytest.raises(BluTypeError, match="concrete integer"):
        S.bernoulli(2.5)
    with pytest.raises(BluTypeError, match="concrete integer"):
        blu.jit(S.bernoulli)(3)


# ---- spence --------------------------------------------------------------------------------


@settings(deadline=None, max_examples=40)
@given(_floats(0.0, 1e6))
def test_spence_against_scipy(x):
    got = S.spence(x)
    assert got.dtype == np.float64
    _close(got, ss.spence(x), rtol=20 * EPS64, atol=20 * EPS64)


def test_spence_special_values_float32_jit_vmap_and_grad():
    x = np.array([-1.0, -0.0, 0.0, 0.5, 1.0, 2.0, np.inf, np.nan, 1e-300])
    with np.errstate(all="ignore"):
        want = ss.spence(x)
    _close(S.spence(x), want, rtol=20 * EPS64, atol=1e-300)
    x32 = np.linspace(0.0, 12.0, 37).astype(np.float32)
    got32 = S.spence(x32)
    assert got32.dtype == np.float32
    _close(got32, ss.spence(x32.astype(np.float64)), rtol=20 * EPS32, atol=20 * EPS32)
    xs = np.linspace(0.01, 9.0, 13)
    _close(blu.jit(S.spence)(xs), ss.spence(xs), rtol=20 * EPS64, atol=20 * EPS64)
    _close(blu.vmap(S.spence)(xs), ss.spence(xs), rtol=20 * EPS64, atol=20 * EPS64)
    for x0 in [0.2, 0.5, 1.0, 1.7, 3.0, 40.0]:
        g = blu.grad(S.spence)(np.float64(x0))
        fd = _central(lambda v: ss.spence(v), x0, 1e-6 * max(x0, 1.0))
        np.testing.assert_allclose(g, fd, rtol=1e-7)
    with pytest.raises(BluTypeError, match="float32 or float64"):
        S.spence(np.array([1, 2]))


# ---- bessel_jn -----------------------------------------------------------------------------


@settings(deadline=None, max_examples=30)
@given(_floats(-20.0, 20.0), st.integers(0, 15))
def test_bessel_jn_against_scipy(z, v):
    got = S.bessel_jn(z, v=v)
    assert got.shape == (v + 1, *z.shape) and got.dtype == np.float64
    _close(got, ss.jv(np.arange(v + 1)[:, None], z), rtol=0, atol=200 * EPS64)


def test_bessel_jn_special_values_float32_transforms_and_grad():
    z = np.array([0.0, -0.0, 1e-300, 3e-5, -2e-3, np.inf, -np.inf, np.nan, 35.0])
    got = S.bessel_jn(z, v=6, n_iter=80)
    _close(got, ss.jv(np.arange(7)[:, None], z), rtol=0, atol=1e-14)
    z32 = np.linspace(-15, 15, 31).astype(np.float32)
    got32 = S.bessel_jn(z32, v=5)
    assert got32.dtype == np.float32
    want = ss.jv(np.arange(6)[:, None], z32.astype(np.float64))
    _close(got32, want, rtol=0, atol=50 * EPS32)
    assert S.bessel_jn(2, v=1).dtype == np.float32
    zz = np.linspace(-9, 9, 12).reshape(3, 4)
    want = ss.jv(np.arange(4)[:, None, None], zz)
    _close(blu.jit(lambda x: S.bessel_jn(x, v=3))(zz), want, rtol=0, atol=100 * EPS64)
    vm = blu.vmap(lambda x: S.bessel_jn(x, v=3))(zz)  # (3, 4, 4): the batch axis first
    _close(vm, np.moveaxis(want, 1, 0), rtol=0, atol=100 * EPS64)
    for n, z0 in [(0, 0.7), (1, 2.3), (3, -4.1), (5, 12.0)]:
        g = blu.grad(lambda x, n=n: S.bessel_jn(x, v=5)[n])(np.float64(z0))
        fd = _central(lambda x, n=n: ss.jv(n, x), z0, 1e-6)
        np.testing.assert_allclose(g, fd, rtol=1e-7, atol=1e-9)


def test_bessel_jn_errors():
    with pytest.raises(BluTypeError, match="v must be a concrete integer"):
        S.bessel_jn(1.0, v=1.5)
    with pytest.raises(BluTypeError, match="n_iter must be a concrete integer"):
        S.bessel_jn(1.0, v=1, n_iter=None)
    with pytest.raises(BluValueError, match=r"v must be in \[0, n_iter\]"):
        S.bessel_jn(1.0, v=60)
    with pytest.raises(BluValueError, match=r"v must be in \[0, n_iter\]"):
        S.bessel_jn(1.0, v=-1)
    with pytest.raises(BluValueError, match="complex"):
        S.bessel_jn(np.array([1j]), v=1)
