"""jax.random's discrete samplers (blu.random.discrete) against scipy.stats: chi-square tests of
the counts and moment checks on large draws with fixed keys (deterministic: a correct sampler
fails a fixed key with probability P_MIN), shapes, dtypes, errors, jit and vmap over keys."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as st

import blu
from blu import random

KEY = random.key(7)
N = 20000
P_MIN = 1e-4


def _chi2_ok(k, dist):
    """A chi-square test of the integer draws ``k`` against the scipy distribution ``dist``:
    one bin per value of expected count >= 5, the tails merged into the end bins."""
    lo, hi = int(dist.ppf(1e-6)), int(dist.ppf(1 - 1e-6))
    vals = np.arange(lo, hi + 1)
    probs = dist.pmf(vals)
    probs[0], probs[-1] = dist.cdf(lo), dist.sf(hi - 1)
    expected = k.size * probs
    observed = np.array([(k <= lo).sum(), *[(k == v).sum() for v in vals[1:-1]], (k >= hi).sum()])
    if len(vals) == 1:
        observed = np.array([k.size])
    # merge bins from the ends inward until each expects >= 5
    keep = expected >= 5
    stat = ((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum()
    rest_o, rest_e = observed[~keep].sum(), expected[~keep].sum()
    if rest_e > 0:
        stat += (rest_o - rest_e) ** 2 / rest_e
    dof = max(1, keep.sum() - (0 if rest_e > 0 else 1))
    assert st.chi2(dof).sf(stat) > P_MIN, (stat, dof)


def _moments_ok(x, dist, se=5.0):
    m, v, kurt = (float(s) for s in dist.stats(moments="mvk"))
    n = x.size
    assert abs(x.mean() - m) < se * np.sqrt(v / n), (x.mean(), m)
    assert abs(x.var() - v) < se * v * np.sqrt((kurt + 2) / n), (x.var(), v)


def _jit_vmap_matches(draw):
    """``jit(vmap(draw))`` over three keys gives each key's eager draws (a tuple of arrays)."""
    keys = random.split(KEY, 3)
    got = blu.jit(blu.vmap(draw))(keys)
    for i in range(3):
        for g, w in zip(got, draw(keys[i]), strict=True):
            np.testing.assert_array_equal(np.asarray(g)[i], np.asarray(w))


# ---- geometric ---------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.02, 0.3, 0.9])
def test_geometric_against_scipy(p):
    k = np.asarray(random.geometric(KEY, p, (N,)))
    assert k.dtype == np.int32 and k.shape == (N,) and k.min() >= 1
    _chi2_ok(k, st.geom(p))
    _moments_ok(k.astype(np.float64), st.geom(p))


def test_geometric_shapes_dtypes_edges_errors_jit_vmap():
    p = np.array([0.1, 0.5, 1.0], np.float32)
    assert random.geometric(KEY, 0.5).shape == () and random.geometric(KEY, p).shape == (3,)
    assert random.geometric(KEY, p, (0, 3)).shape == (0, 3)
    assert random.geometric(KEY, 0.5, (2,), np.int64).dtype == np.int64
    assert random.geometric(KEY, np.float64(0.5), (2,), np.int16).dtype == np.int16
    k = np.asarray(random.geometric(KEY, p, (5000, 3)), np.float64)
    assert np.all(k[:, 2] == 1)  # p = 1: the first trial succeeds
    np.testing.assert_array_less(
        np.abs(k.mean(0) - 1 / p)[:2], 5 * np.sqrt((1 - p) / p**2 / 5000)[:2]
    )
    # p = 0 (never a success) and tiny p: clipped to the dtype's maximum, not a wrapped value
    big = np.asarray(random.geometric(KEY, np.array([0.0, 1e-30], np.float32), (4, 2), np.int16))
    assert np.all(big == np.iinfo(np.int16).max)
    with pytest.raises(blu.errors.BluTypeError, match="random.geometric: dtype must be an integer"):
        random.geometric(KEY, 0.5, (2,), np.float32)
    with pytest.raises(blu.errors.BluShapeError, match=r"p f32\[3\] does not broadcast to \(2,\)"):
        random.geometric(KEY, p, (2,))
    _jit_vmap_matches(lambda key: (random.geometric(key, p, (4, 3)),))


# ---- binomial ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n, p",
    [(10, 0.3), (100, 0.05), (3, 0.97), (30, 0.35), (1000, 0.3), (60, 0.8), (100000, 0.01)],
)  # inversion where min(p, 1 - p) n < 10, BTRS elsewhere; p > 1/2 through n - k
def test_binomial_against_scipy(n, p):
    k = np.asarray(random.binomial(KEY, n, p, (N,)))
    assert k.dtype == np.float32 and k.shape == (N,)
    assert k.min() >= 0 and k.max() <= n and np.all(k == np.round(k))
    _chi2_ok(k.astype(np.int64), st.binom(n, p))
    _moments_ok(k.astype(np.float64), st.binom(n, p))


def test_binomial_parameter_arrays_edges_and_dtypes():
    # one draw mixes the methods: each column follows its own (n, p)
    n = np.array([0.0, 7.0, 40.0, 500.0, 12.0, 9.0], np.float32)
    p = np.array([0.5, 0.0, 0.5, 0.02, 1.0, 0.6], np.float32)
    k = np.asarray(random.binomial(KEY, n, p, (N // 2, 6)), np.float64)
    assert np.all(k[:, 0] == 0) and np.all(k[:, 1] == 0) and np.all(k[:, 4] == 12)
    for j in (2, 3, 5):
        _chi2_ok(k[:, j].astype(np.int64), st.binom(int(n[j]), p[j]))
    bad = random.binomial(KEY, np.array([-1.0, 5, 5, np.nan]), np.array([0.5, 1.5, np.nan, 0.5]))
    assert np.all(np.isnan(np.asarray(bad)))  # JAX's NaN for invalid parameters
    assert random.binomial(KEY, 5, 0.5).shape == () and random.binomial(KEY, n, 0.5).shape == (6,)
    assert random.binomial(KEY, 5, 0.5, (0, 2)).shape == (0, 2)
    k64 = np.asarray(random.binomial(KEY, 3e9, 0.25, (N // 2,), np.float64))
    assert k64.dtype == np.float64  # counts past 2**31 (float64 holds them exactly)
    assert abs(k64.mean() - 7.5e8) < 5 * np.sqrt(3e9 * 0.25 * 0.75 / k64.size)
    assert random.binomial(KEY, 5, 0.5, (2,), np.float16).dtype == np.float16


def test_binomial_errors_jit_vmap():
    with pytest.raises(blu.errors.BluTypeError, match="random.binomial: dtype must be a float"):
        random.binomial(KEY, 5, 0.5, (2,), np.int32)
    with pytest.raises(blu.errors.BluShapeError, match="do not broadcast together"):
        random.binomial(KEY, np.ones(2), np.full(3, 0.5))
    with pytest.raises(blu.errors.BluShapeError, match=r"p f32\[3\] does not broadcast to \(2,\)"):
        random.binomial(KEY, 5, np.full(3, 0.5, np.float32), (2,))
    n = np.array([4.0, 200.0, 30.0], np.float32)
    _jit_vmap_matches(lambda key: (random.binomial(key, n, 0.3, (2, 3)),))


# ---- multinomial -------------------------------------------------------------------------------


def test_multinomial_against_scipy():
    n, p = 40, np.array([0.1, 0.45, 0.0, 0.3, 0.15])
    c = np.asarray(random.multinomial(KEY, n, p, shape=(N, 5)), np.float64)
    assert c.shape == (N, 5) and np.all(c.sum(1) == n) and np.all(c[:, 2] == 0)
    for j in (0, 1, 3, 4):  # each count is Binomial(n, p_j)
        _chi2_ok(c[:, j].astype(np.int64), st.binom(n, p[j]))
    # the covariance is n (diag(p) - p p^T), each entry within 5 standard errors of a sample
    # covariance, sqrt((s_ij^2 + s_ii s_jj) / N) (its normal-theory value)
    cov = np.cov(c.T)
    want = n * (np.diag(p) - np.outer(p, p))
    se = np.sqrt((want**2 + np.outer(np.diag(want), np.diag(want))) / N)
    np.testing.assert_array_less(np.abs(cov - want), 5 * se + 1e-12)
    # the whole vector: a chi-square over the outcomes of a small multinomial
    c2 = np.asarray(random.multinomial(KEY, 3, np.array([0.5, 0.3, 0.2]), shape=(N, 3)))
    outcomes, observed = np.unique(c2.astype(np.int64), axis=0, return_counts=True)
    dist = st.multinomial(3, [0.5, 0.3, 0.2])
    expected = N * dist.pmf(outcomes)
    assert len(outcomes) == 10 and np.isclose(expected.sum(), N)
    stat = ((observed - expected) ** 2 / expected).sum()
    assert st.chi2(9).sf(stat) > P_MIN


def test_multinomial_shapes_broadcasting_errors_jit_vmap():
    p = np.array([1.0, 1.0, 2.0], np.float32)  # unnormalized: 1/4, 1/4, 1/2
    assert random.multinomial(KEY, 10, p).shape == (3,)  # JAX's default: p's shape
    assert random.multinomial(KEY, 10, p, shape=(0, 3)).shape == (0, 3)
    assert random.multinomial(KEY, 10, p, dtype=np.float64).dtype == np.float64
    n = np.array([5.0, 200.0], np.float32)
    c = np.asarray(random.multinomial(KEY, n, p, shape=(2000, 2, 3)), np.float64)
    np.testing.assert_array_equal(c.sum(-1), np.broadcast_to(n, (2000, 2)))
    np.testing.assert_allclose(c[:, 1].mean(0), [50.0, 50.0, 100.0], atol=5 * np.sqrt(50 / 2000))
    with pytest.raises(blu.errors.BluShapeError, match="p must have a category axis"):
        random.multinomial(KEY, 10, 0.5)
    with pytest.raises(blu.errors.BluShapeError, match="must end in the number of categories 3"):
        random.multinomial(KEY, 10, p, shape=(4, 2))
    with pytest.raises(blu.errors.BluShapeError, match=r"n f32\[3\] does not broadcast to \(2,\)"):
        random.multinomial(KEY, np.ones(3, np.float32), p, shape=(2, 3))
    with pytest.raises(blu.errors.BluTypeError, match="random.multinomial: dtype must be a float"):
        random.multinomial(KEY, 10, p, dtype=np.bool_)
    # an integer dtype, as JAX's (it raised BluTypeError): counts summing to n, each column's
    # mean within 6 standard errors of n p
    c = random.multinomial(KEY, 10, p, shape=(4000, 3), dtype=np.int32)
    assert (
        c.dtype == np.int32
        and random.multinomial(KEY, 10, p, shape=(0, 3), dtype=np.int32).dtype == np.int32
    )
    c = np.asarray(c, np.float64)
    np.testing.assert_array_equal(c.sum(-1), 10)
    want = 10 * np.asarray(p, np.float64) / p.sum()
    np.testing.assert_array_less(
        np.abs(c.mean(0) - want), 6 * np.sqrt(want * (1 - want / 10) / 4000)
    )
    _jit_vmap_matches(lambda key: (random.multinomial(key, 12, p, shape=(2, 3), unroll=2),))
