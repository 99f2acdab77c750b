"""Derivatives of ``lax.igamma`` in ``a`` where the continued fraction ends (a whole ``a``) and
at third order, against differences of ``scipy.special`` in float64."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sc

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
