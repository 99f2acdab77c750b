"""blu.scipy.stats.gaussian_kde against scipy.stats.gaussian_kde in float64 over drawn
dimensions, sizes, weights and bandwidth methods (attributes, densities, log densities and the
integrals); float32 within tolerances from the dtype; the estimator as a pytree through jit and
vmap; derivatives against finite differences; resampling against the mixture's moments and
the points' weights; the errors on bad arguments."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as sst
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from blu.scipy import stats
from blu.scipy.stats import gaussian_kde
from tests.helpers import check_grads, check_jit, check_vmap, tolerance

ATTRS = ["dataset", "weights", "neff", "factor", "covariance", "inv_cov"]


def _close(got, want, tol=1e-10):
    got = np.asarray(got)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.max(np.abs(want))))


def _bw(kind):
    return {"default": None, "scott": "scott", "silverman": "silverman", "scalar": 0.35,
            "callable": lambda k: 0.5 * k.neff ** (-1.0 / (k.d + 3))}[kind]  # fmt: skip


@settings(deadline=None, max_examples=40)
@given(
    st.integers(1, 3),
    st.integers(0, 25),
    st.sampled_from(["default", "scott", "silverman", "scalar", "callable"]),
    st.booleans(),
    st.integers(1, 6),
)
def test_matches_scipy(d, extra, bw, weighted, m):
    n = d + 2 + extra
    rng = np.random.default_rng(100 * d + n + m)
    data = rng.standard_normal((d, n)) * rng.uniform(0.5, 2.0, (d, 1))
    w = rng.uniform(0.1, 1.0, n) if weighted else None
    got = gaussian_kde(data[0] if d == 1 and m % 2 else data, _bw(bw), w)
    want = sst.gaussian_kde(data, _bw(bw), w)
    assert (got.d, got.n) == (d, n)
    for a in ATTRS:
        _close(getattr(got, a), getattr(want, a))
    pts = rng.standard_normal((d, m)) * 2
    for meth in ("evaluate", "__call__", "pdf", "logpdf"):
        _close(getattr(got, meth)(pts), getattr(want, meth)(pts))
    _close(got.logpdf(pts + 40.0), want.logpdf(pts + 40.0))  # far out: the densities are 0
    mean, c = rng.standard_normal(d), np.cov(rng.standard_normal((d, d + 3)))
    _close(got.integrate_gaussian(mean, c), want.integrate_gaussian(mean, c))
    other = rng.standard_normal((d, m + d + 1))
    for o in (other, other[:, :2] if d == 1 else other):  # the smaller one either side
        _close(got.integrate_kde(gaussian_kde(o)), want.integrate_kde(sst.gaussian_kde(o)))
    if d == 1:
        _close(got.integrate_box_1d(-0.3, 1.2), want.integrate_box_1d(-0.3, 1.2))
        _close(got(0.25), want(0.25))  # a scalar point
    else:
        _close(got(pts[:, 0]), want(pts[:, 0]))  # a (d,) point


def test_set_bandwidth_matches_scipy():
    data = np.random.default_rng(1).standard_normal((2, 12))
    got, want = gaussian_kde(data), sst.gaussian_kde(data)
    for bw in ("silverman", 0.2, lambda k: 0.7, "scott"):
        got.set_bandwidth(bw)
        want.set_bandwidth(bw)
        for a in ATTRS:
            _close(getattr(got, a), getattr(want, a))


# ---- dtypes ------------------------------------------------------------------------------------


@settings(deadline=None, max_examples=20)
@given(st.integers(1, 2), st.integers(5, 40))
def test_float32_within_the_dtypes_tolerance(d, n):
    rng = np.random.default_rng(n)
    data, pts = rng.standard_normal((d, n)), rng.standard_normal((d, 4))
    got = gaussian_kde(data.astype(np.float32))
    want = sst.gaussian_kde(data)
    tol = tolerance(np.float32, n_ops=4 * n)
    for a in ATTRS:
        assert getattr(got, a).dtype == np.float32
        _close(getattr(got, a), getattr(want, a), tol)
    out = got.logpdf(pts.astype(np.float32))
    assert out.dtype == np.float32
    _close(out, want.logpdf(pts), tol)
    _close(got(pts.astype(np.float32)), want(pts), tol)


def test_integer_data_and_weights_promote():
    k = gaussian_kde(np.array([0, 1, 1, 3, 4]))
    assert k.dataset.dtype == np.float32 and k.covariance.dtype == np.float32
    k = gaussian_kde(np.array([0.0, 1, 1, 3, 4], np.float32), weights=np.array([1.0, 2, 1, 1, 3]))
    assert k.dataset.dtype == np.float64 and k.weights.dtype == np.float64
    _close(k.weights, np.array([1, 2, 1, 1, 3]) / 8.0)


# ---- pytree, jit, vmap, derivatives ------------------------------------------------------------


def test_pytree_jit_and_vmap():
    rng = np.random.default_rng(2)
    data, pts = rng.standard_normal((2, 9)), rng.standard_normal((5, 2))
    k = gaussian_kde(data, weights=rng.uniform(0.5, 1.0, 9))
    leaves, tree = blu.tree_util.tree_flatten(k)
    assert len(leaves) == 6
    back = blu.tree_util.tree_unflatten(tree, leaves)
    _close(back.logpdf(pts.T), np.asarray(k.logpdf(pts.T)))
    check_jit(lambda k, p: k.logpdf(p), [k, pts.T])
    check_jit(lambda d, w, p: gaussian_kde(d, "silverman", w)(p), [data, k.weights, pts.T])
    check_vmap(lambda p: k.logpdf(p), [pts], [0], atol=1e-12, rtol=1e-12)
    # a batch of estimators (leaves stacked)
    datas = rng.standard_normal((3, 2, 9))
    got = blu.vmap(lambda d: gaussian_kde(d).logpdf(pts.T))(datas)
    for i in range(3):
        _close(got[i], sst.gaussian_kde(datas[i]).logpdf(pts.T))


def test_grads():
    rng = np.random.default_rng(3)
    data, pts = rng.standard_normal((2, 8)), rng.standard_normal((2, 3))
    w = rng.uniform(0.5, 1.0, 8)
    check_grads(lambda p: gaussian_kde(data).logpdf(p), [pts])
    check_grads(lambda d, w: gaussian_kde(d, weights=w).evaluate(pts), [data, w])
    check_grads(lambda bw: gaussian_kde(data, bw).logpdf(pts), [np.array(0.4)])
    x1 = rng.standard_normal(7)
    check_grads(lambda lo, hi: gaussian_kde(x1).integrate_box_1d(lo, hi),
                [np.array(-0.5), np.array(0.8)])  # fmt: skip
    check_grads(lambda m, c: gaussian_kde(data).integrate_gaussian(m, c @ c.T),
                [np.zeros(2), np.eye(2)])  # fmt: skip


# ---- resampling --------------------------------------------------------------------------------


def test_resample():
    rng = np.random.default_rng(4)
    data = rng.standard_normal((2, 6))
    w = np.array([0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    # all the weight on one point and a tiny bandwidth: every draw is that point
    k = gaussian_kde(data, bw_method=1e-6, weights=w + 1e-12)
    s = k.resample(blu.random.PRNGKey(0), (3, 4))
    assert s.shape == (2, 3, 4) and s.dtype == np.float64
    np.testing.assert_allclose(np.asarray(s), np.broadcast_to(data[:, 2, None, None], (2, 3, 4)),
                               atol=1e-4)  # fmt: skip
    # the mixture's mean and covariance: the weighted data's plus the kernel's
    w = rng.uniform(0.2, 1.0, 6)
    k = gaussian_kde(data, weights=w)
    draws = np.asarray(blu.jit(lambda k, key: k.resample(key, (40000,)))(k, blu.random.PRNGKey(1)))
    assert draws.shape == (2, 40000)
    wn = w / w.sum()
    mean = data @ wn
    cov = (data - mean[:, None]) * wn @ (data - mean[:, None]).T + np.asarray(k.covariance)
    se = np.sqrt(np.diag(cov) / 40000)
    assert np.all(np.abs(draws.mean(1) - mean) < 5 * se)
    np.testing.assert_allclose(np.cov(draws), cov, atol=0.05 * np.max(np.abs(cov)))
    assert k.resample(blu.random.PRNGKey(2)).shape == (2,)
    assert k.resample(blu.random.PRNGKey(2), 5).shape == (2, 5)


# ---- errors ------------------------------------------------------------------------------------


def test_errors():
    data = np.random.default_rng(5).standard_normal((2, 6))
    k = gaussian_kde(data)
    with pytest.raises(BluValueError, match="more than one element"):
        gaussian_kde(np.ones(1))
    with pytest.raises(BluTypeError, match="real"):
        gaussian_kde(np.ones(4) + 1j)
    with pytest.raises(BluShapeError, match=r"weights must be \(6,\)"):
        gaussian_kde(data, weights=np.ones(5))
    with pytest.raises(BluValueError, match="bw_method"):
        gaussian_kde(data, bw_method="wide")
    with pytest.raises(BluValueError, match="bw_method"):
        gaussian_kde(data, bw_method=np.ones(2))
    with pytest.raises(BluShapeError, match="dimensions"):
        k.evaluate(np.ones((3, 4)))
    with pytest.raises(BluTypeError, match="real"):
        k.logpdf(np.ones((2, 1)) * 1j)
    with pytest.raises(BluShapeError, match="integrate_gaussian"):
        k.integrate_gaussian(np.zeros(3), np.eye(2))
    with pytest.raises(BluValueError, match="d == 1"):
        k.integrate_box_1d(0.0, 1.0)
    with pytest.raises(BluShapeError, match="scalars"):
        gaussian_kde(data[0]).integrate_box_1d(np.zeros(2), 1.0)
    with pytest.raises(BluValueError, match="integrate_box_1d"):
        k.integrate_box([0, 0], [1, 1])
    with pytest.raises(BluValueError, match="one dimension"):
        k.integrate_kde(gaussian_kde(data[0]))
    assert stats.gaussian_kde is gaussian_kde
