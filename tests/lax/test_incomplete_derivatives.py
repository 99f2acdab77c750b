"""Derivatives of ``lax.igamma`` and ``lax.betainc`` in their parameters where the continued
fraction ends (a whole ``a`` for ``igamma``, a whole ``b`` or, through the symmetry, ``a`` for
``betainc``) and at third order, against differences of ``scipy.special`` in float64 and the
closed forms of the density's derivatives."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sc
from hypothesis import given
from hypothesis import strategies as st

import blu
from blu import lax

d, jf = blu.grad, blu.jacfwd


def _d1(f, v, h):
    """Five-point first difference (error ~h^4)."""
    return (8 * (f(v + h) - f(v - h)) - (f(v + 2 * h) - f(v - 2 * h))) / (12 * h)


def _d2_5(f, v, h):
    """Five-point second difference (error ~h^4)."""
    return (16 * (f(v + h) + f(v - h)) - (f(v + 2 * h) + f(v - 2 * h)) - 30 * f(v)) / (12 * h * h)


def _d3_7(f, v, h):
    """Seven-point third difference (error ~h^4)."""
    near, mid, far = (f(v + k * h) - f(v - k * h) for k in (1, 2, 3))
    return (-13 * near + 8 * mid - far) / (8 * h**3)


# ---- igamma: the fraction -i (i - a) ends at i = a for a whole a ------------------------------


@pytest.mark.parametrize("a", [1.0, 2.0, 3.0, 2.0 + 1e-10])
def test_igamma_derivative_in_a_where_the_fraction_ends(a):
    # dP/da at (2, 5) was -0.05585705 for -0.05585990 (5e-5 off; 6e-8 at a = 2 + 1e-10): the
    # loop stopped with the value, at i = a, before the derivative's tail
    x = np.float64(5.0)  # x > a + 1: the continued fraction
    want = -_d1(lambda v: sc.gammaincc(v, x), a, 1e-3)
    got = float(d(lax.igamma, 0)(np.float64(a), x))
    np.testing.assert_allclose(got, want, rtol=1e-9)
    got = float(d(lax.igammac, 0)(np.float64(a), x))
    np.testing.assert_allclose(got, -want, rtol=1e-9)
    want2 = -_d2_5(lambda v: sc.gammaincc(v, x), a, 1e-2)
    np.testing.assert_allclose(float(d(d(lax.igamma, 0), 0)(np.float64(a), x)), want2, rtol=1e-6)


@pytest.mark.parametrize("a, x", [(2.3, 5.0), (2.0, 5.0), (7.0, 20.0)])
def test_igamma_third_derivative_in_the_fraction(a, x):
    # d3P/da3 was NaN above x = a + 1: the fraction's start c = 1 / FPMIN (1e292) overflowed
    # in the third derivative
    a, x = np.float64(a), np.float64(x)
    want = -_d3_7(lambda v: sc.gammaincc(v, x), a, 2e-2)
    np.testing.assert_allclose(float(d(d(d(lax.igamma, 0), 0), 0)(a, x)), want, rtol=1e-5)


def test_igammac_values_where_the_fraction_ends_keep_their_digits():
    # the loop runs on for the shadow fraction after the value has converged: those steps
    # multiply by 1 +- ulp and drifted (Q(2, 5) 3 ulps off); the value is kept now
    a = np.array([1.0, 2.0, 3.0, 2.0, 1.0])
    x = np.array([3.0, 5.0, 12.0, 4.0, 7.0])
    got = np.asarray(lax.igammac(a, x))
    np.testing.assert_allclose(got, sc.gammaincc(a, x), rtol=2 * np.finfo(np.float64).eps)


# ---- betainc: the fraction's m (q - m) ends at m = q for a whole q ----------------------------


def _dens(a, b, x):
    return np.exp((a - 1) * np.log(x) + (b - 1) * np.log1p(-x) - sc.betaln(a, b))


# (a, b, x): a whole b (no swap); a whole a through the swap (x above (a + 1) / (a + b + 2));
# neither; a, b >= 10 (Stirling's factor)
_POINTS = [(2.5, 3.0, 0.4), (2.0, 3.5, 0.7), (0.7, 1.9, 0.8), (12.0, 15.0, 0.45)]


@given(st.floats(0.3, 20.0), st.integers(1, 12), st.floats(0.05, 0.95), st.booleans())
def test_betainc_first_derivatives_at_a_whole_parameter(p, n, x, flip):
    # dI/db at (2.5, 3, 0.4) was 0.15390805 for 0.15390801 (3e-7 off): the fraction ended at
    # m = b and the loop stopped before the derivative's tail
    a, b = (np.float64(n), np.float64(p)) if flip else (np.float64(p), np.float64(n))
    x = np.float64(x)
    ga, gb = d(lax.betainc, (0, 1))(a, b, x)
    h = 1e-3
    want_a = _d1(lambda v: sc.betainc(v, b, x), a, h)
    want_b = _d1(lambda v: sc.betainc(a, v, x), b, h)
    scale = max(abs(want_a), abs(want_b))
    np.testing.assert_allclose(float(ga), want_a, rtol=1e-7, atol=1e-9 * scale)
    np.testing.assert_allclose(float(gb), want_b, rtol=1e-7, atol=1e-9 * scale)


@pytest.mark.parametrize("a, b, x", _POINTS)
def test_betainc_second_derivatives(a, b, x):
    # five-point differences of scipy, h = 1e-2 (scipy's ~1e-13 over h^2 would be ~1e-9)
    a, b, x = np.float64(a), np.float64(b), np.float64(x)
    h = 1e-2
    f = sc.betainc
    want_aa = _d2_5(lambda v: f(v, b, x), a, h)
    want_bb = _d2_5(lambda v: f(a, v, x), b, h)
    want_ab = _d1(lambda w: _d1(lambda v: f(v, w, x), a, h), b, h)
    hess = jf(d(lax.betainc, (0, 1)), (0, 1))(a, b, x)
    got = np.array([[float(v) for v in row] for row in hess])
    want = np.array([[want_aa, want_ab], [want_ab, want_bb]])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7 * np.abs(want).max())
    np.testing.assert_allclose(float(d(d(lax.betainc, 1), 0)(a, b, x)), want_ab, rtol=1e-6)


def test_betainc_third_derivatives():
    # they were 0 (the second derivative in a, b was taken at operands cut from the graph):
    # d3I/da3 at (2.5, 3, 0.4) is 0.0108282, d3I/da2db -0.0404002, d3I/da2dx -0.521669
    a, b, x = np.float64(2.5), np.float64(3.0), np.float64(0.4)
    h = 2e-2
    want_aaa = _d3_7(lambda v: sc.betainc(v, b, x), a, h)
    got = float(d(d(d(lax.betainc, 0), 0), 0)(a, b, x))
    np.testing.assert_allclose(got, want_aaa, rtol=1e-5)
    want_aab = _d1(lambda w: _d2_5(lambda v: sc.betainc(v, w, x), a, h), b, h)
    got = float(jf(d(d(lax.betainc, 0), 1), 0)(a, b, x))
    np.testing.assert_allclose(got, want_aab, rtol=1e-5)
    # d3I/da2dx = d2/da2 of the density = density (L^2 - polygamma(1, a) + polygamma(1, a + b)),
    # L = log x - digamma(a) + digamma(a + b)
    ell = np.log(x) - sc.digamma(a) + sc.digamma(a + b)
    want = _dens(a, b, x) * (ell**2 - sc.polygamma(1, a) + sc.polygamma(1, a + b))
    np.testing.assert_allclose(float(d(d(d(lax.betainc, 0), 2), 0)(a, b, x)), want, rtol=1e-9)


def test_betainc_higher_derivatives_under_jit_and_vmap():
    a = np.array([2.5, 2.0, 0.7])
    b = np.array([3.0, 3.5, 1.9])
    x = np.array([0.4, 0.7, 0.8])
    h = 1e-2
    want = [_d2_5(lambda v: sc.betainc(v, bi, xi), ai, h) for ai, bi, xi in zip(a, b, x)]
    got = blu.jit(blu.vmap(d(d(lax.betainc, 0), 0)))(a, b, x)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
