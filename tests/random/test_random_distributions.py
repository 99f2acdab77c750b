"""exponential, gamma, loggamma, beta and dirichlet: Kolmogorov-Smirnov tests against
scipy.stats and moment checks, shapes/dtypes as jax.random, vmap over keys, jit.

Tolerances: with a fixed key each test is deterministic. For a correct sampler the KS p-value
is uniform on [0, 1], so requiring p > 1e-3 rejects a correct sampler for one key in a
thousand, while a wrong distribution with 20,000 samples (the KS statistic's resolution is
~1/sqrt(n) = 0.007) gives p far below that. Moment checks allow 5 standard errors.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as ss

import blu
import blu.random as br
from blu.core.errors import BluError

N = 20_000
P_MIN = 1e-3


def _ks(samples, cdf, *args):
    return ss.kstest(np.asarray(samples, np.float64), cdf, args=args).pvalue


def test_exponential():
    x = np.asarray(br.exponential(br.key(1), (N,)))
    assert x.dtype == np.float32 and x.shape == (N,) and np.all(np.isfinite(x)) and x.min() >= 0
    assert _ks(x, "expon") > P_MIN
    x64 = np.asarray(br.exponential(br.key(2), (N,), np.float64))
    assert x64.dtype == np.float64 and _ks(x64, "expon") > P_MIN


@pytest.mark.parametrize("a", [0.05, 0.3, 1.0, 2.5, 40.0])
def test_gamma_ks_and_moments(a):
    x = np.asarray(br.gamma(br.key(3), a, (N,)), np.float64)
    assert np.all(np.isfinite(x)) and x.min() >= 0
    assert _ks(x, "gamma", a) > P_MIN
    se = np.sqrt(a / N)  # the standard error of the mean of N Gamma(a) draws
    assert abs(x.mean() - a) < 5 * se


def test_loggamma_tiny_shape():
    a = 1e-3
    lg = np.asarray(br.loggamma(br.key(4), a, (N,)), np.float64)
    assert np.all(np.isfinite(lg))  # gamma itself underflows to 0 for many of these
    # log G with G ~ Gamma(a): P(log G <= t) = gamma.cdf(exp(t), a), which for exp(t) below
    # float64's range is its leading term exp(a t) / Gamma(a + 1) (relative error O(e^t))
    import scipy.special as sp

    def cdf(t):
        t = np.asarray(t, np.float64)
        tail = np.exp(a * t - sp.gammaln(a + 1))
        return np.where(t < -700, tail, ss.gamma.cdf(np.exp(np.maximum(t, -700)), a))

    assert ss.kstest(lg, cdf).pvalue > P_MIN


def test_gamma_per_element_shapes_broadcast():
    a = np.array([0.5, 2.0, 7.0])
    x = np.asarray(br.gamma(br.key(5), a, (N, 3)))
    assert x.shape == (N, 3)
    for j, aj in enumerate(a):
        assert _ks(x[:, j], "gamma", aj) > P_MIN
    assert br.gamma(br.key(5), a).shape == (3,)
    with pytest.raises(BluError, match="broadcast"):
        br.gamma(br.key(5), a, (4,))
    assert np.asarray(br.gamma(br.key(6), 2.0, (5,), np.float16)).dtype == np.float16
    with pytest.raises(BluError, match="float"):
        br.gamma(br.key(6), 2.0, (5,), np.int32)


@pytest.mark.parametrize("a,b", [(2.0, 3.0), (0.2, 0.5), (30.0, 1.5)])
def test_beta(a, b):
    x = np.asarray(br.beta(br.key(7), a, b, (N,)), np.float64)
    assert x.min() >= 0 and x.max() <= 1
    assert _ks(x, "beta", a, b) > P_MIN
    assert br.beta(br.key(7), np.ones((2, 1)), np.ones(3)).shape == (2, 3)


def test_dirichlet():
    alpha = np.array([0.5, 2.0, 4.0])
    x = np.asarray(br.dirichlet(br.key(8), alpha, (N,)), np.float64)
    assert x.shape == (N, 3)
    np.testing.assert_allclose(x.sum(-1), 1.0, rtol=1e-6)
    s = alpha.sum()
    for j, aj in enumerate(alpha):  # marginals are Beta(alpha_j, sum - alpha_j)
        assert _ks(x[:, j], "beta", aj, s - aj) > P_MIN
    assert br.dirichlet(br.key(8), np.ones((4, 2))).shape == (4, 2)
    with pytest.raises(BluError, match="last axis"):
        br.dirichlet(br.key(8), 1.0)


def test_vmap_over_keys_and_jit():
    keys = br.split(br.key(9), 4)
    f = lambda k: br.gamma(k, 1.7, (6,))  # noqa: E731
    got = np.asarray(blu.vmap(f)(keys))
    want = np.stack([np.asarray(f(k)) for k in keys])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(blu.jit(f)(keys[0])), want[0], rtol=1e-6)
    g = lambda k: br.beta(k, 2.0, 0.5, (3,))  # noqa: E731
    np.testing.assert_allclose(
        np.asarray(blu.vmap(g)(keys)), np.stack([np.asarray(g(k)) for k in keys]), rtol=1e-6
    )
