"""Derivatives of gamma / loggamma / beta / dirichlet samples by their parameters (issue #39):
implicit reparameterization (Figurnov et al. 2018), not the accept/reject loop differentiated
with its draws held fixed. Per sample: ``dx/da`` equals central differences of scipy's inverse
CDF ``gammaincinv(a, u)`` at the sample's own CDF value ``u`` (the noise held fixed). In
expectation (Monte Carlo, within 4 standard errors): ``E[dx/da] = dE[x]/da``, which is 1 for
Gamma(a), ``b / (a + b)^2`` for Beta(a, b) and ``(delta_ij S - alpha_i) / S^2`` for Dirichlet."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sc

import blu
import blu.numpy as bnp
from blu import random

KEY = random.key(42)
F64 = np.float64


def fd_inverse_cdf(a, u):
    h = 1e-6 * a
    return (sc.gammaincinv(a + h, u) - sc.gammaincinv(a - h, u)) / (2 * h)


def test_each_sample_moves_as_its_inverse_cdf_at_fixed_noise():
    a = np.array([0.05, 0.3, 0.9, 1.0, 1.5, 4.0, 30.0, 500.0])  # a < 1 takes the boost path
    x = np.asarray(random.gamma(KEY, a, dtype=F64))
    jac = np.asarray(blu.jacfwd(lambda a: random.gamma(KEY, a, dtype=F64))(a))
    np.testing.assert_allclose(jac, np.diag(np.diag(jac)), atol=0)  # elementwise
    u = sc.gammainc(a, x)
    np.testing.assert_allclose(np.diag(jac), fd_inverse_cdf(a, u), rtol=1e-6)
    # reverse mode agrees, eagerly and under jit
    for gf in (blu.grad, lambda f: blu.jit(blu.grad(f))):
        g = np.asarray(gf(lambda a: bnp.sum(random.gamma(KEY, a, dtype=F64)))(a))
        np.testing.assert_allclose(g, np.diag(jac), rtol=1e-12)


def test_shape_broadcast_and_float32():
    a = F64(2.5)
    x = np.asarray(random.gamma(KEY, a, shape=(6,), dtype=F64))
    g = float(blu.grad(lambda a: bnp.sum(random.gamma(KEY, a, shape=(6,), dtype=F64)))(a))
    np.testing.assert_allclose(g, fd_inverse_cdf(a, sc.gammainc(a, x)).sum(), rtol=1e-6)
    g32 = blu.grad(lambda a: bnp.sum(random.gamma(KEY, a, shape=(6,))))(np.float32(2.5))
    assert g32.dtype == np.float32 and np.isfinite(float(g32))


def test_vmap_over_keys_equals_a_loop():
    keys = random.split(KEY, 4)
    a = np.array([0.4, 3.0])

    def per_key(k):
        return blu.grad(lambda a: bnp.sum(random.gamma(k, a, dtype=F64) ** 2))(a)

    got = np.asarray(blu.vmap(per_key)(keys))
    want = np.stack([np.asarray(per_key(keys[i])) for i in range(4)])
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_loggamma_derivative_where_the_sample_underflows():
    a = np.full(5, 1e-3)
    log_x = np.asarray(random.loggamma(KEY, a, dtype=F64))
    assert np.sum(np.exp(log_x) == 0) >= 3  # most of these samples underflow in float64
    g = np.diag(np.asarray(blu.jacfwd(lambda a: random.loggamma(KEY, a, dtype=F64))(a)))
    # x -> 0: F = x^a / Gamma(a + 1): d log x / da = -log x / a + digamma(a + 1) / a
    np.testing.assert_allclose(g, -log_x / a + sc.psi(a + 1) / a, rtol=1e-9)


def mc_mean(samples_fn, n):
    s = np.asarray(samples_fn)
    return s.mean(axis=0), s.std(axis=0) / np.sqrt(n)


@pytest.mark.parametrize("a0", [0.3, 1.5, 7.0])
def test_gamma_expected_derivative_is_one(a0):
    n = 20000

    def per_sample(a):  # the derivative of each of n samples
        return blu.jacfwd(lambda a: random.gamma(KEY, a, shape=(n,), dtype=F64))(a)

    d = np.asarray(per_sample(F64(a0)))
    mean, se = d.mean(), d.std() / np.sqrt(n)
    assert abs(mean - 1.0) < 4 * se, (mean, se)
    # and the mean sample's derivative: the same via grad of the sum
    g = float(blu.grad(lambda a: bnp.sum(random.gamma(KEY, a, shape=(n,), dtype=F64)))(F64(a0)))
    np.testing.assert_allclose(g / n, mean, rtol=1e-10)


def test_beta_expected_derivatives():
    n, a, b = 20000, 0.7, 2.0
    da, db = blu.jacfwd(lambda a, b: random.beta(KEY, a, b, shape=(n,), dtype=F64), argnums=(0, 1))(
        F64(a), F64(b)
    )
    da, db = np.asarray(da), np.asarray(db)
    for d, want in ((da, b / (a + b) ** 2), (db, -a / (a + b) ** 2)):
        mean, se = d.mean(), d.std() / np.sqrt(n)
        assert abs(mean - want) < 4 * se, (mean, want, se)


def test_dirichlet_expected_derivatives():
    n = 20000
    alpha = np.array([0.5, 1.0, 3.0])
    s = alpha.sum()
    keys = random.split(KEY, n)
    jac = np.asarray(
        blu.vmap(lambda k: blu.jacfwd(lambda al: random.dirichlet(k, al, dtype=F64))(alpha))(keys)
    )  # (n, 3, 3): d x_i / d alpha_j per sample
    want = (np.eye(3) * s - alpha[:, None]) / s**2
    mean, se = jac.mean(axis=0), jac.std(axis=0) / np.sqrt(n)
    assert np.all(np.abs(mean - want) < 4 * se + 1e-12), (mean, want, se)
    np.testing.assert_allclose(jac.sum(axis=1), 0, atol=1e-12)  # the simplex is kept
