"""numpy.histogramdd and histogram2d (JAX's; blu had none) against numpy over random samples
(no points, one point, one dimension...), bins given as numbers, edges or one per dimension,
ranges, weights and density; jit, vmap over the weights and the sample, the gradient by the
weights; the errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core.errors import BluShapeError, BluValueError


@st.composite
def _problems(draw):
    n = draw(st.integers(0, 12))
    d = draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    sample = rng.uniform(-2, 2, (n, d))
    bins = []
    for _ in range(d):
        kind = draw(st.sampled_from(["int", "edges"]))
        if kind == "int":
            bins.append(draw(st.integers(1, 4)))
        else:  # increasing edges, some points outside them
            bins.append(np.sort(rng.uniform(-2.5, 2.5, draw(st.integers(2, 5)))))
    if draw(st.booleans()) and all(isinstance(b, int) for b in bins) and len(set(bins)) == 1:
        bins = bins[0]  # one number for every dimension
    ranges = None
    if n == 0 or draw(st.booleans()):  # (no data: a range, as min/max have nothing to reduce)
        ranges = [(-1.0, 1.5) if draw(st.booleans()) or n == 0 else None for _ in range(d)]
    weights = rng.uniform(0, 2, n) if draw(st.booleans()) else None
    density = draw(st.sampled_from([None, False, True]))
    return sample, bins, ranges, weights, density


def _check(got_hist, got_edges, want_hist, want_edges, counts):
    g = np.asarray(got_hist)
    assert g.shape == want_hist.shape
    if counts:  # JAX's counts are int32
        assert g.dtype == np.int32
        np.testing.assert_array_equal(g, want_hist)
    else:
        np.testing.assert_allclose(g, want_hist, rtol=1e-10, atol=1e-12, equal_nan=True)
    for ge, we in zip(got_edges, want_edges, strict=True):
        np.testing.assert_allclose(np.asarray(ge), we, rtol=1e-12, atol=1e-12)


@given(_problems())
def test_histogramdd_against_numpy(problem):
    sample, bins, ranges, weights, density = problem
    kw = dict(bins=bins, range=ranges, weights=weights, density=density)
    with np.errstate(invalid="ignore", divide="ignore"):
        want, want_edges = np.histogramdd(sample, **kw)
    counts = weights is None and not density
    hist, edges = bnp.histogramdd(sample, **kw)
    _check(hist, edges, want, want_edges, counts)
    hist, edges = blu.jit(lambda s, w: bnp.histogramdd(s, bins, ranges, w, density))(
        sample, weights
    )
    _check(hist, edges, want, want_edges, counts)


@given(_problems())
def test_histogram2d_against_numpy(problem):
    sample, bins, ranges, weights, density = problem
    if sample.shape[1] != 2:
        sample = np.resize(sample, (sample.shape[0], 2))
        bins, ranges = 3, (None if ranges is None else [(-1.0, 1.5), (-1.0, 1.5)])
    x, y = sample[:, 0], sample[:, 1]
    kw = dict(bins=bins, range=ranges, weights=weights, density=density)
    with np.errstate(invalid="ignore", divide="ignore"):
        want, wx, wy = np.histogram2d(x, y, **kw)
    hist, ex, ey = bnp.histogram2d(x, y, **kw)
    _check(hist, [ex, ey], want, [wx, wy], weights is None and not density)


def test_histogram2d_one_edges_array_for_both_axes():
    rng = np.random.default_rng(4)
    x, y = rng.uniform(-2, 2, 30), rng.uniform(-2, 2, 30)
    edges = np.array([-2.0, -0.5, 0.0, 1.0, 3.0])  # not 1 or 2 entries: the edges of both
    want, wx, wy = np.histogram2d(x, y, bins=edges)
    hist, ex, ey = bnp.histogram2d(x, y, bins=edges)
    _check(hist, [ex, ey], want, [wx, wy], True)


def test_histograms_vmap_and_gradient_by_the_weights():
    rng = np.random.default_rng(5)
    sample = rng.uniform(-2, 2, (20, 2))
    ws = rng.uniform(0, 1, (3, 20))

    def f(s, w):
        return bnp.histogramdd(s, bins=[3, 2], range=[(-2, 2), (-2, 2)], weights=w)[0]

    got = blu.vmap(f, in_axes=(None, 0))(sample, ws)
    for g, w in zip(np.asarray(got), ws):
        want = np.histogramdd(sample, bins=[3, 2], range=[(-2, 2), (-2, 2)], weights=w)[0]
        np.testing.assert_allclose(g, want, rtol=1e-12)
    samples = np.stack([sample, sample[::-1] * 0.5])
    got = blu.vmap(f, in_axes=(0, None))(samples, ws[0])
    for g, s in zip(np.asarray(got), samples):
        want = np.histogramdd(s, bins=[3, 2], range=[(-2, 2), (-2, 2)], weights=ws[0])[0]
        np.testing.assert_allclose(g, want, rtol=1e-12)
    # d hist[i, j] / d w[k] is 1 where point k is in bin (i, j)
    jac = np.asarray(blu.jacrev(lambda w: f(sample, w))(ws[0]))
    ix = np.clip(np.floor((sample[:, 0] + 2) / (4 / 3)).astype(int), 0, 2)
    iy = np.clip(np.floor((sample[:, 1] + 2) / 2).astype(int), 0, 1)
    want = np.zeros((3, 2, 20))
    want[ix, iy, np.arange(20)] = 1.0
    np.testing.assert_array_equal(jac, want)


def test_histogram_errors_name_the_shapes():
    s = np.zeros((4, 2))
    with pytest.raises(BluShapeError, match=r"f64\[4\]"):
        bnp.histogramdd(np.zeros(4))
    with pytest.raises(BluShapeError, match=r"f64\[3\]"):
        bnp.histogramdd(s, weights=np.ones(3))
    with pytest.raises(BluValueError, match="3 for sample of shape"):
        bnp.histogramdd(s, bins=[2, 3, 4])
    with pytest.raises(BluValueError, match="2 \\(lo, hi\\) pairs"):
        bnp.histogramdd(s, range=[(0, 1)])
    with pytest.raises(BluShapeError, match=r"f64\[4\] and f64\[3\]"):
        bnp.histogram2d(np.zeros(4), np.zeros(3))


def test_histogramdd_sequence_sample_is_one_array_per_dimension():
    # numpy reads a sequence as D coordinate arrays (it was read as D points of N dimensions)
    rng = np.random.default_rng(6)
    x, y = rng.uniform(-2, 2, 9), rng.uniform(-2, 2, 9)
    want, wedges = np.histogramdd((x, y), bins=3)
    got, edges = bnp.histogramdd((x, y), bins=3)
    _check(got, edges, want, wedges, True)
    got, edges = blu.jit(lambda a, b: bnp.histogramdd([a, b], bins=(2, 3), range=[(-2, 2)] * 2))(
        x, y
    )
    want, wedges = np.histogramdd([x, y], bins=(2, 3), range=[(-2, 2)] * 2)
    _check(got, edges, want, wedges, True)
    want, wedges = np.histogramdd([0.5, 1.0, 3.0, 3.0], bins=2)  # numbers: 4 points in 1-d
    got, edges = bnp.histogramdd([0.5, 1.0, 3.0, 3.0], bins=2)
    _check(got, edges, want, wedges, True)
