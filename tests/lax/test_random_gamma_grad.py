"""``lax.random_gamma_grad`` (issue #39): the implicit reparameterization derivative of a
Gamma(a) sample, ``dx/da`` at fixed CDF value, against central differences of scipy's inverse
CDF ``gammaincinv(a, u)`` at fixed ``u`` (float64), across the series, continued-fraction and
large-``a`` regimes; its log-space form against the closed form of the ``x -> 0`` limit (where
``x`` underflows); dtypes, jit and vmap."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sc
from hypothesis import given
from hypothesis import strategies as st

import blu
from blu import lax
from blu.core.errors import BluError
from blu.lax.random_gamma import random_gamma_grad_log


def fd_dx_da(a, u):
    """d gammaincinv(a, u) / da by central differences (relative step 1e-6)."""
    h = 1e-6 * a
    return (sc.gammaincinv(a + h, u) - sc.gammaincinv(a - h, u)) / (2 * h)


A_GRID = [0.01, 0.2, 0.5, 1.0, 2.5, 10.0, 100.0, 1e3, 3e4, 2e6]
U_GRID = [1e-6, 0.01, 0.3, 0.5, 0.8, 0.99, 1 - 1e-7]


@pytest.mark.parametrize("a", A_GRID)
def test_against_differences_of_the_inverse_cdf(a):
    u = np.array(U_GRID)
    x = sc.gammaincinv(a, u)
    keep = x > 1e-250  # the inverse CDF's differences need a representable sample
    a_arr = np.full(keep.sum(), a)
    got = np.asarray(lax.random_gamma_grad(a_arr, x[keep]))
    np.testing.assert_allclose(got, fd_dx_da(a, u[keep]), rtol=2e-6)


@given(st.floats(0.05, 300.0), st.floats(1e-4, 1 - 1e-4))
def test_against_differences_random_points(a, u):
    x = sc.gammaincinv(a, u)
    got = float(lax.random_gamma_grad(np.array([a]), np.array([x]))[0])
    np.testing.assert_allclose(got, fd_dx_da(a, u), rtol=2e-6)


def test_log_space_where_the_sample_underflows():
    # x -> 0: F = x^a / Gamma(a + 1), so log x = (log u + lgamma(a + 1)) / a and
    # d log x / da = -log x / a + digamma(a + 1) / a (exact up to O(x))
    a = np.array([1e-3, 1e-3, 5e-3, 1e-2])
    u = np.array([1e-8, 0.3, 1e-3, 1e-6])
    log_x = (np.log(u) + sc.gammaln(a + 1)) / a
    assert np.all(np.exp(log_x) == 0)  # underflows in float64
    want = -log_x / a + sc.psi(a + 1) / a
    got = np.asarray(random_gamma_grad_log(a, log_x))
    np.testing.assert_allclose(got, want, rtol=1e-10)
    assert np.all(np.isfinite(got))


def test_log_space_is_the_plain_form_over_x():
    a = np.array([0.3, 2.0, 40.0])
    x = sc.gammaincinv(a, np.array([0.2, 0.6, 0.9]))
    plain = np.asarray(lax.random_gamma_grad(a, x))
    log_form = np.asarray(random_gamma_grad_log(a, np.log(x)))
    np.testing.assert_allclose(log_form, plain / x, rtol=1e-12)


def test_dtypes_jit_vmap_and_edges():
    a = np.array([[0.5, 3.0], [20.0, 0.1]])
    x = sc.gammaincinv(a, 0.4)
    want = fd_dx_da(a, 0.4)
    got32 = lax.random_gamma_grad(a.astype(np.float32), x.astype(np.float32))
    assert got32.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got32), want, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(blu.jit(lax.random_gamma_grad)(a, x)), want, rtol=2e-6)
    np.testing.assert_allclose(np.asarray(blu.vmap(lax.random_gamma_grad)(a, x)), want, rtol=2e-6)
    edge = np.asarray(lax.random_gamma_grad(np.array([1.0, -1.0]), np.array([0.0, 1.0])))
    assert edge[0] == 0 and np.isnan(edge[1])  # a sample at 0 stays; a <= 0 is no gamma


def test_no_second_derivative():
    with pytest.raises(BluError, match="not a second"):
        blu.grad(lambda a: lax.random_gamma_grad(a, np.float64(1.0)))(np.float64(2.0))
