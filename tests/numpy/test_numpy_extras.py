"""jax.numpy's counting, statistics, set and index functions (blu.numpy.statistics and
blu.numpy.extras) against numpy in float64, eagerly and under jit (with size= where the result
size depends on values)."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest
from helpers import arrays, shapes
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
import blu.numpy as bnp
from blu.errors import (
    BluAxisError,
    BluIndexError,
    BluShapeError,
    BluTypeError,
    BluValueError,
    ConcretizationError,
)

RNG = np.random.default_rng(0)
A = RNG.normal(size=200)
M = RNG.normal(size=(3, 25))
INTS = np.array([3, 1, 2, 3, 1, 5, 0, 5])


def close(got, want, **kw):
    got = np.asarray(got)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got, want, **kw)


def test_bincount():
    close(bnp.bincount(INTS), np.bincount(INTS))
    w = np.linspace(0, 1, INTS.size)
    close(bnp.bincount(INTS, w, minlength=9), np.bincount(INTS, w, minlength=9))
    # under jit: length is static; values >= length are dropped
    got = blu.jit(lambda x: bnp.bincount(x, length=4))(INTS)
    close(got, np.bincount(INTS)[:4])
    with pytest.raises(ConcretizationError):
        blu.jit(bnp.bincount)(INTS)
    with pytest.raises(BluValueError, match="1-d integer"):
        bnp.bincount(np.ones(3))
    flags = np.array([True, False, True, True])  # bools count as 0 and 1 (they raised)
    close(bnp.bincount(flags), np.bincount(flags))
    close(blu.jit(lambda x: bnp.bincount(x, length=3))(flags), np.bincount(flags, minlength=3))
    # bool weights are counted (as numpy's, in int32): they were or-ed, a bool result
    w = np.array([True, True, False, True])
    got = bnp.bincount(np.array([0, 1, 1, 3]), weights=w)
    assert got.dtype == np.int32
    close(got, np.bincount(np.array([0, 1, 1, 3]), weights=w))


def test_bincount_clips_negative_values_to_zero():
    # JAX's rule (numpy raises); they were dropped
    x = np.array([-3, 0, 2, 5, -1])
    clipped = np.maximum(x, 0)
    close(bnp.bincount(x), np.bincount(clipped))
    close(blu.jit(lambda x: bnp.bincount(x, length=3))(x), np.bincount(clipped)[:3])
    w = np.array([0.5, 1.0, 2.0, 4.0, 8.0])
    got = blu.jit(lambda x, w: bnp.bincount(x, w, length=4))(x, w)
    close(got, np.bincount(clipped, w, minlength=4)[:4])


EDGES = np.array([-3.0, -0.5, 0.0, 0.1, 3.0])


@pytest.mark.parametrize(
    "bins, rng, density", [(10, None, False), (7, (-1.0, 2.0), True), (EDGES, None, False)]
)
def test_histogram(bins, rng, density):
    h, e = bnp.histogram(A, bins, range=rng, density=density)
    hn, en = np.histogram(A, bins, range=rng, density=density)
    close(h, hn, rtol=1e-12)
    close(e, en, rtol=1e-12)
    close(bnp.histogram_bin_edges(A, bins, range=rng), en, rtol=1e-12)
    hj = blu.jit(lambda a: bnp.histogram(a, bins, range=rng, density=density)[0])(A)
    close(hj, hn, rtol=1e-12)


def test_histogram_weights_and_max_in_last_bin():
    w = RNG.uniform(size=A.size)
    close(bnp.histogram(A, 5, weights=w)[0], np.histogram(A, 5, weights=w)[0], rtol=1e-12)
    x = np.array([0.0, 1.0, 1.0, 2.0])
    close(bnp.histogram(x, 2)[0], [1.0, 3.0])  # the max lands in the closed last bin


def test_histogram_rejects_bad_ranges_and_bins():
    with pytest.raises(BluValueError, match="'auto'"):  # it was a TypeError
        bnp.histogram(np.ones(3), bins="auto")
    # numpy's ValueErrors; they silently gave all-zero counts (or counts over unsorted edges)
    for kw in (
        {"bins": 2, "range": (3.0, 0.0)},
        {"bins": 2, "range": (0.0, np.inf)},
        {"bins": 2, "range": (np.nan, 1.0)},
        {"bins": np.array([0.0, 2.0, 1.0])},
    ):
        with pytest.raises(ValueError):
            np.histogram(A, **kw)
        with pytest.raises(BluValueError, match="range|bins"):
            bnp.histogram(A, **kw)
        with pytest.raises(BluValueError, match="range|bins"):
            bnp.histogram_bin_edges(A, **kw)
    # traced bounds can't be checked and still work
    got = blu.jit(lambda a, lo: bnp.histogram(a, 3, range=(lo, 1.0))[0])(A, -1.0)
    close(got, np.histogram(A, 3, range=(-1.0, 1.0))[0])


@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("bins", [np.array([0.0, 1, 2.5, 4, 10]), np.array([10.0, 4, 2.5, 1, 0])])
def test_digitize(bins, right):
    x = np.array([-1.0, 0.0, 0.2, 1.0, 2.5, 3.0, 6.4, 10.0, 11.0])
    close(bnp.digitize(x, bins, right=right), np.digitize(x, bins, right=right))
    for method in ("scan", "sort", "compare_all"):  # JAX's keyword, searchsorted's methods
        got = bnp.digitize(x, bins, right=right, method=method)
        close(got, np.digitize(x, bins, right=right))


def test_interp():
    xp = np.array([0.0, 1.0, 1.5, 4.0])
    fp = np.array([2.0, -1.0, 0.5, 3.0])
    x = np.linspace(-1, 5, 41)
    close(bnp.interp(x, xp, fp), np.interp(x, xp, fp), rtol=1e-12)
    close(bnp.interp(x, xp, fp, left=-9.0, right=9.0), np.interp(x, xp, fp, -9.0, 9.0))
    close(bnp.interp(x, xp, fp, period=3.0), np.interp(x, xp, fp, period=3.0), atol=1e-12)
    g = blu.grad(lambda t: bnp.interp(t, xp, fp))(0.5)
    assert float(g) == pytest.approx(-3.0)  # the slope of the first segment


def test_cov_corrcoef():
    close(bnp.cov(M), np.cov(M), rtol=1e-12)
    close(bnp.cov(M.T, rowvar=False, bias=True), np.cov(M.T, rowvar=False, bias=True), rtol=1e-12)
    close(bnp.cov(M[0], M[1]), np.cov(M[0], M[1]), rtol=1e-12)
    fw, aw = np.arange(1, 26), np.linspace(0.1, 1, 25)
    close(bnp.cov(M, fweights=fw, aweights=aw), np.cov(M, fweights=fw, aweights=aw), rtol=1e-12)
    close(bnp.cov(M, ddof=0, aweights=aw), np.cov(M, ddof=0, aweights=aw), rtol=1e-12)
    close(bnp.cov(M[0]), np.cov(M[0]), rtol=1e-12)
    close(bnp.corrcoef(M), np.corrcoef(M), rtol=1e-12)
    close(blu.jit(bnp.corrcoef)(M), np.corrcoef(M), rtol=1e-12)


def test_unique_nans_are_one_value_by_default():
    # numpy's and JAX's equal_nan=True: every NaN was its own value (several NaNs came out)
    v = np.array([np.nan, 1.0, np.nan, 0.0, 1.0, np.nan])
    want = np.unique(v, return_index=True, return_inverse=True, return_counts=True)
    for got in (
        bnp.unique(v, return_index=True, return_inverse=True, return_counts=True),
        blu.jit(lambda v: bnp.unique(v, True, True, True, size=3))(v),
    ):
        for g, w in zip(got, want):
            close(g, w)
    z = np.array([1 + 1j, complex(np.nan, 1), complex(1, np.nan), 1 + 1j])
    close(bnp.unique(z), np.unique(z))
    close(bnp.unique(v, equal_nan=False), [0.0, 1.0, np.nan, np.nan, np.nan])
    close(bnp.unique_values(v), [0.0, 1.0, np.nan, np.nan, np.nan])  # the Array API's rule
    # padding: the smallest value (the first sorted one, JAX's), not a NaN minimum
    close(blu.jit(lambda v: bnp.unique(v, size=5))(v), [0.0, 1.0, np.nan, 0.0, 0.0])
    close(bnp.unique_values(v, size=6), [0.0, 1.0, np.nan, np.nan, np.nan, 0.0])


@given(st.data())
def test_unique_along_an_axis_matches_numpy(data):
    shape = data.draw(shapes(min_dims=1, max_dims=3))
    a = np.round(data.draw(arrays(shape, -1.0, 1.0)))  # few distinct values: repeated slices
    if a.ndim > 1 and a.shape[0] > 1 and data.draw(st.booleans()):
        a[-1] = a[0]  # a repeated slice along axis 0
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    got = bnp.unique(a, True, True, True, axis=axis)
    want = np.unique(a, True, True, True, axis=axis)
    for g, w in zip(got, want):
        close(g, w)
    assert np.asarray(got[0]).dtype == np.float64 and np.asarray(got[2]).dtype == np.int32
    k = want[0].shape[axis]
    size = k + 2  # padded with fill_value under jit
    f = blu.jit(lambda a: bnp.unique(a, True, True, True, axis=axis, size=size, fill_value=-9.0))
    vals, first, inv, counts = f(a)
    pad = list(want[0].shape)
    pad[axis] = 2
    close(vals, np.concatenate([want[0], np.full(pad, -9.0)], axis=axis))
    close(first, np.concatenate([want[1], [want[1][0] if k else 0] * 2]))  # smallest's index
    close(inv, want[2])
    close(counts, np.concatenate([want[3], [0, 0]]))
    ai = a.astype(np.int8)
    close(bnp.unique(ai, axis=axis), np.unique(ai, axis=axis))
    assert np.asarray(bnp.unique(ai, axis=axis)).dtype == np.int8


def test_unique_axis_gradient_and_errors():
    x = np.array([[1.0, 2.0], [3.0, 0.5], [1.0, 2.0]])
    w = np.array([[1.0, -2.0], [0.5, 4.0]])
    g = blu.grad(lambda x: bnp.sum(bnp.unique(x, axis=0) * w))(x)
    # closed form: the values are the first occurrences of each row, sorted: rows 0 and 1
    close(g, [[1.0, -2.0], [0.5, 4.0], [0.0, 0.0]])
    with pytest.raises(ConcretizationError, match="size="):
        blu.jit(lambda x: bnp.unique(x, axis=0))(x)
    with pytest.raises(BluAxisError, match="axis -3 is out of bounds for rank 2"):
        bnp.unique(x, axis=-3)


def test_unique_and_sets():
    got = bnp.unique(INTS, return_index=True, return_inverse=True, return_counts=True)
    want = np.unique(INTS, return_index=True, return_inverse=True, return_counts=True)
    for g, w in zip(got, want):
        close(g, w)
    close(blu.jit(lambda x: bnp.unique(x, size=7, fill_value=-1))(INTS), [0, 1, 2, 3, 5, -1, -1])
    for flag in (True, False):  # numpy's and JAX's keyword (a TypeError); sorted either way
        close(bnp.unique(INTS, sorted=flag), np.unique(INTS))
    with pytest.raises(BluAxisError, match="unique: axis 2 is out of bounds for rank 2"):
        bnp.unique(M, axis=2)
    other = np.array([5, 7, 1, 9])
    close(bnp.isin(INTS, other), np.isin(INTS, other))
    close(bnp.isin(INTS, other, invert=True), np.isin(INTS, other, invert=True))
    for method in ("auto", "compare_all", "binary_search", "sort"):  # JAX's keyword
        close(bnp.isin(INTS, other, method=method), np.isin(INTS, other))
    with pytest.raises(BluValueError, match="unknown method 'bogus'"):
        bnp.isin(INTS, other, method="bogus")
    for name in ("intersect1d", "union1d", "setdiff1d", "setxor1d"):
        close(getattr(bnp, name)(INTS, other), getattr(np, name)(INTS, other))
    got = blu.jit(lambda a, b: bnp.setdiff1d(a, b, size=5, fill_value=-7))(INTS, other)
    close(got, [0, 2, 3, -7, -7])
    got = blu.jit(lambda a, b: bnp.intersect1d(a, b, size=3, fill_value=0))(INTS, other)
    close(got, [1, 5, 0])
    # the padding takes the arrays' dtype (a fill of 7 made bools int32, 2.5 made int8 float)
    flags = np.array([True, False])
    got = bnp.setdiff1d(flags, np.array([True]), size=3, fill_value=7)
    assert got.dtype == np.bool_
    close(got, [False, True, True])
    got = bnp.intersect1d(
        np.array([1, 2], np.int8), np.array([2, 5], np.int8), size=3, fill_value=2.5
    )
    assert got.dtype == np.int8
    close(got, [2, 2, 2])


def test_unique_size_pads_indices_with_the_smallest_values_index():
    # JAX's: x[index] == values on the padding too (the default fill is the smallest value);
    # the padding's index was 0
    x = np.array([3, 1, 2, 1])
    values, index = bnp.unique(x, size=5, return_index=True)
    close(values, [1, 2, 3, 1, 1])
    close(index, [1, 2, 0, 1, 1])
    close(x[np.asarray(index)], values)
    rows = np.array([[3, 1], [1, 2], [3, 1]])
    values, index = bnp.unique(rows, axis=0, size=4, return_index=True)
    close(index, [1, 0, 1, 1])
    close(rows[np.asarray(index)], values)


def test_setxor1d_keeps_each_arrays_nan():
    # a NaN equals nothing: numpy keeps one per array holding one (it was dropped: NaN is in
    # neither array by isin)
    nan = np.nan
    for a, b in (([nan, 1.0], [nan, 2.0]), ([nan, 1.0, nan], [2.0, 2.0]), ([3.0], [nan])):
        a32, b32 = np.array(a, np.float32), np.array(b, np.float32)
        close(bnp.setxor1d(a32, b32), np.setxor1d(a32, b32))
    got = blu.jit(lambda a, b: bnp.setxor1d(a, b, size=4, fill_value=-1.0))(
        np.array([nan, 1.0, 3.0], np.float32), np.array([2.0, 2.0, 3.0], np.float32)
    )
    close(got, [1.0, 2.0, nan, -1.0])


def test_intersect1d_promotes_both_arrays():
    a, b = np.array([1, 2, 3], np.int8), np.array([1.5, 2.0, 300.0], np.float32)
    got = bnp.intersect1d(a, b)
    assert got.dtype == np.intersect1d(a, b).dtype == np.float32
    close(got, np.intersect1d(a, b))


def test_intersect1d_return_indices():
    a, b = np.array([3, 1, 2, 3, 5, np.nan]), np.array([5, 7, 3, np.nan, 5])
    for unique in (False, True):
        x, y = (np.unique(a), np.unique(b)) if unique else (a, b)
        got = bnp.intersect1d(x, y, assume_unique=unique, return_indices=True)
        for g, w in zip(got, np.intersect1d(x, y, assume_unique=unique, return_indices=True)):
            close(g, w)
    # with size: padded with fill_value, the padding's indices the arrays' lengths (JAX's)
    f = blu.jit(lambda a, b: bnp.intersect1d(a, b, return_indices=True, size=4, fill_value=-1))
    values, i1, i2 = f(a, b)
    close(values, [3.0, 5.0, -1.0, -1.0])
    close(i1, [0, 4, 6, 6])
    close(i2, [2, 0, 5, 5])


def test_select_argwhere_flatnonzero():
    x = np.arange(12).reshape(3, 4)
    close(bnp.select([x < 3, x > 8], [x, -x], 100), np.select([x < 3, x > 8], [x, -x], 100))
    conds, choices = np.stack([x < 3, x > 8]), np.stack([x, -x])  # arrays of them (a ValueError)
    close(bnp.select(conds, choices, 100), np.select(conds, choices, 100))
    close(bnp.select(bnp.asarray(conds), bnp.asarray(choices)), np.select(conds, choices))
    close(bnp.argwhere(x % 3 == 0), np.argwhere(x % 3 == 0))
    close(bnp.flatnonzero(x % 5 == 0), np.flatnonzero(x % 5 == 0))
    got = blu.jit(lambda v: bnp.argwhere(v > 9, size=3, fill_value=-1))(x)
    close(got, [[2, 2], [2, 3], [-1, -1]])
    with pytest.raises(BluValueError, match="2 conditions but 1"):
        bnp.select([x < 1, x > 2], [x])


def test_nonzero_fill_value_per_axis():
    # JAX's tuple fill_value, one per axis: the tuple was flattened into every axis' padding
    # (eagerly) or failed to broadcast (under jit)
    x = np.array([[0, 1, 0], [2, 0, 3]])
    want = (np.array([0, 1, 1, 8, 8]), np.array([1, 0, 2, 9, 9]))
    for got in (
        bnp.nonzero(x, size=5, fill_value=(8, 9)),
        blu.jit(lambda x: bnp.nonzero(x, size=5, fill_value=(8, 9)))(x),
    ):
        for g, w in zip(got, want):
            close(g, w)
    close(blu.jit(lambda x: bnp.argwhere(x, size=4, fill_value=(-1, -2)))(x),
          [[0, 1], [1, 0], [1, 2], [-1, -2]])  # fmt: skip
    for bad in ((1,), (1, 2, 3), np.array([1, 2])):
        with pytest.raises(BluValueError, match="fill_value"):
            bnp.nonzero(x, size=5, fill_value=bad)


def test_cross():
    a, b = RNG.normal(size=(5, 3)), RNG.normal(size=(5, 3))
    close(bnp.cross(a, b), np.cross(a, b), rtol=1e-12)
    close(bnp.cross(a.T, b.T, axisa=0, axisb=0, axisc=0), np.cross(a.T, b.T, axis=0), rtol=1e-12)
    close(bnp.cross(a[:, :2], b[:, :2]), a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0], rtol=1e-12)
    g = blu.grad(lambda u: bnp.cross(u, b[0])[2])(a[0])
    close(g, [b[0, 1], -b[0, 0], 0.0])
    with pytest.raises(BluValueError, match="length 2 or 3"):
        bnp.cross(np.ones(4), np.ones(4))


def test_vectorize_and_apply_along_axis():
    a, b = RNG.normal(size=(4, 3)), RNG.normal(size=(3,))
    dot = bnp.vectorize(lambda u, v: bnp.sum(u * v), signature="(n),(n)->()")
    close(dot(a, b), a @ b, rtol=1e-12)
    add = bnp.vectorize(lambda u, v, scale: u * scale + v, excluded={2})
    close(add(np.arange(3.0), np.ones((2, 1)), 2.0), np.arange(3.0) * 2 + np.ones((2, 1)))
    close(bnp.apply_along_axis(bnp.sum, 1, a), a.sum(1), rtol=1e-12)
    f = lambda r: bnp.stack([bnp.min(r), bnp.max(r)])  # noqa: E731
    g = lambda r: np.stack([np.min(r), np.max(r)])  # noqa: E731
    close(bnp.apply_along_axis(f, 0, a), np.apply_along_axis(g, 0, a))
    close(bnp.apply_along_axis(bnp.sum, -2, a), a.sum(0), rtol=1e-12)


@pytest.mark.parametrize("axis", [2, -3, 5])
def test_apply_along_axis_axis_out_of_range(axis):
    # numpy raises an AxisError; the axis was taken modulo the rank (2 became 0)
    with pytest.raises(np.exceptions.AxisError):
        np.apply_along_axis(np.sum, axis, np.ones((4, 3)))
    with pytest.raises(BluAxisError, match=f"apply_along_axis: axis {axis} is out of bounds"):
        bnp.apply_along_axis(bnp.sum, axis, np.ones((4, 3)))
    with pytest.raises(BluAxisError, match="out of bounds for rank 0"):
        bnp.apply_along_axis(bnp.sum, 0, np.float64(1.0))


def test_lexsort_and_index_conversions():
    k1, k2 = RNG.integers(0, 3, 20), RNG.integers(0, 3, 20)
    close(bnp.lexsort((k1, k2)), np.lexsort((k1, k2)))
    with pytest.raises(BluShapeError, match=r"one shape, got \(20,\), \(19,\)"):
        bnp.lexsort((k1, k2[:19]))  # it sorted by k2[:19] as if k1 were its length
    with pytest.raises(BluValueError, match="0-d"):
        bnp.lexsort(bnp.asarray(1.0))
    flat = np.array([0, 22, 41, 37, -1])
    for g, w in zip(bnp.unravel_index(flat, (7, 6)), np.unravel_index(flat % 42, (7, 6))):
        close(g, w)
    with pytest.raises(BluIndexError):
        bnp.unravel_index(np.array([42]), (7, 6))
    idx = (np.array([3, 6, 6]), np.array([4, 5, 1]))
    close(bnp.ravel_multi_index(idx, (7, 6)), np.ravel_multi_index(idx, (7, 6)))
    close(
        bnp.ravel_multi_index(idx, (7, 6), order="F"), np.ravel_multi_index(idx, (7, 6), order="F")
    )
    out = (np.array([8, -1]), np.array([2, 9]))
    close(
        bnp.ravel_multi_index(out, (7, 6), mode="clip"),
        np.ravel_multi_index(out, (7, 6), mode="clip"),
    )
    close(
        bnp.ravel_multi_index(out, (7, 6), mode="wrap"),
        np.ravel_multi_index(out, (7, 6), mode="wrap"),
    )
    with pytest.raises(BluIndexError):
        bnp.ravel_multi_index(out, (7, 6))


def test_small_helpers():
    x = np.arange(24.0).reshape(2, 3, 4)
    for k in range(-1, 5):
        close(bnp.rot90(x, k), np.rot90(x, k))
        close(bnp.rot90(x, k, axes=(1, 2)), np.rot90(x, k, axes=(1, 2)))
        close(bnp.rot90(x, k, axes=(-1, 0)), np.rot90(x, k, axes=(-1, 0)))
    # the same axis twice (also as a negative alias) raises, as numpy's; it returned x rotated
    # by swapping an axis with itself
    for axes in ((0, 0), (0, -3), (0, 1, 2)):
        with pytest.raises(BluValueError, match="axes"):
            bnp.rot90(x, 1, axes)
    with pytest.raises(BluAxisError):
        bnp.rot90(x, 1, (0, 3))
    close(bnp.indices((2, 3, 4)), np.indices((2, 3, 4)))
    for g, w in zip(bnp.indices((2, 3), sparse=True), np.indices((2, 3), sparse=True)):
        close(g, w)
    for g, w in zip(bnp.tril_indices(4, -1, 5), np.tril_indices(4, -1, 5)):
        close(g, w)
    for g, w in zip(bnp.triu_indices(3, 1), np.triu_indices(3, 1)):
        close(g, w)
    t = np.linspace(-2, 2, 9)
    close(bnp.sinc(t), np.sinc(t), rtol=1e-12, atol=1e-15)
    assert float(blu.grad(bnp.sinc)(0.0)) == 0.0
    close(bnp.heaviside(t, 0.5), np.heaviside(t, 0.5))
    # integers and bools give floats (JAX's float32, numpy's float64); it kept int32
    i = np.array([-2, 0, 3], np.int32)
    for a, b in [(i, np.int32(7)), (i, 0.5), (i > 0, False)]:
        got = bnp.heaviside(a, b)
        assert got.dtype == np.float32
        close(got, np.heaviside(a, b))
    close(bnp.trapezoid(x, axis=1), np.trapezoid(x, axis=1))
    close(bnp.trapezoid(x[0, 0], x=np.array([0.0, 1, 3, 7])), np.trapezoid(x[0, 0], x=[0, 1, 3, 7]))
    close(
        bnp.ediff1d(x[0], to_end=[9.0], to_begin=-1.0),
        np.ediff1d(x[0], to_end=[9.0], to_begin=-1.0),
    )


NANS = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, np.nan], [2.0, 5.0, -1.0], [4.0, 0.5, 2.0]])


@pytest.mark.parametrize("name", ["nanprod", "nancumsum", "nancumprod", "nanvar", "nanstd"])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_nan_functions_against_numpy(name, axis):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy warns on the all-NaN row
        want = getattr(np, name)(NANS, axis=axis)
    close(getattr(bnp, name)(NANS, axis=axis), want, rtol=1e-12, equal_nan=True)


def test_nanargmax_nanargmin_and_small_helpers():
    close(bnp.nanargmax(NANS[[0, 2, 3]], axis=1), np.nanargmax(NANS[[0, 2, 3]], axis=1))
    close(bnp.nanargmin(NANS[[0, 2, 3]], axis=0), np.nanargmin(NANS[[0, 2, 3]], axis=0))
    close(bnp.nanargmax(NANS, axis=1), [2, -1, 1, 0])  # an all-NaN row gives -1
    x = np.array([np.inf, -np.inf, 1.0, np.nan])
    close(bnp.isposinf(x), np.isposinf(x))
    close(bnp.isneginf(x), np.isneginf(x))
    y = np.array([-1.5, 2.25, 0.0, -0.75])
    for g, w in zip(bnp.modf(y), np.modf(y)):
        close(g, w)
    close(bnp.ldexp(y, np.array([2, -1, 3, 0])), np.ldexp(y, [2, -1, 3, 0]))
    close(bnp.diagflat(np.array([[1, 2], [3, 4]]), -1), np.diagflat([[1, 2], [3, 4]], -1))
    a = np.zeros((2, 3, 4, 5))
    for axis, start in [(3, 1), (1, 4), (2, 0), (-1, -3)]:
        assert bnp.rollaxis(a, axis, start).shape == np.rollaxis(a, axis, start).shape
    assert bool(bnp.array_equiv(np.array([1, 2]), np.array([[1, 2], [1, 2]])))
    assert not bool(bnp.array_equiv(np.array([1, 2]), np.array([1, 2, 3])))
    m, v = RNG.normal(size=(2, 3, 4)), RNG.normal(size=(2, 4))
    close(bnp.matvec(m, v), np.einsum("bij,bj->bi", m, v), rtol=1e-12)
    close(bnp.vecmat(m[:, :, 0], m), np.einsum("bi,bij->bj", m[:, :, 0], m), rtol=1e-12)
    close(bnp.geomspace(1.0, 1000.0, 4), np.geomspace(1.0, 1000.0, 4), rtol=1e-12)


# ---- mgrid, ogrid, r_, c_, s_, index_exp, ix_ (numpy's results are the reference) ------------


def _slices(draw_int, draw_step):
    """A slice with int bounds and an int, float or complex (point count) step."""
    return st.builds(slice, draw_int, draw_int, draw_step)


_STEPS = st.one_of(
    st.sampled_from([1, 2, -1, 3, -2]),
    st.sampled_from([0.5, 0.7, -0.3, 1.25]),
    st.integers(0, 6).map(lambda n: complex(0, n)),
)


@given(st.lists(_slices(st.integers(-4, 4), _STEPS), min_size=1, max_size=3))
def test_mgrid_ogrid_against_numpy(key):
    key = tuple(key)
    # numpy's 1-d grids, meshed (np.mgrid itself fails on an empty one in several dims)
    ones = [np.mgrid[k] for k in key]
    want = np.stack(np.meshgrid(*ones, indexing="ij")).astype(np.result_type(*ones))
    tol = dict(rtol=1e-6, atol=1e-6)  # float grids are float32 (numpy's float64)
    close(bnp.mgrid[key], want, **tol)
    if all(o.size for o in ones):
        close(bnp.mgrid[key], np.mgrid[key], **tol)
    for got, w in zip(bnp.ogrid[key], np.ogrid[key], strict=True):
        close(got, w, **tol)
    close(bnp.mgrid[key[0]], np.mgrid[key[0]], **tol)
    assert (bnp.mgrid[key].dtype == np.int32) == (want.dtype.kind == "i")


def test_mgrid_ogrid_cases_and_errors():
    close(bnp.mgrid[0:1:5j, 0:3], np.mgrid[0:1:5j, 0:3], rtol=1e-6)
    assert bnp.mgrid[0:1:5j, 0:3].dtype == np.float32  # promoted together, JAX's dtypes
    close(bnp.ogrid[:2, :3][1], np.ogrid[:2, :3][1])
    assert bnp.mgrid[()].shape == (0,)
    with pytest.raises(ConcretizationError, match="slice stop of bnp.mgrid"):
        blu.jit(lambda n: bnp.mgrid[0:n])(3)
    with pytest.raises(BluTypeError, match="expected slices"):
        bnp.mgrid[5]
    with pytest.raises(BluValueError, match="needs a stop"):
        bnp.ogrid[0:]


_DIRECTIVES = ["0,3,0", "0,3,1", "0,3,-1", "0,3,-2", "1,3,0", "0,2,0", "0,2,-2", "0,4,1",
               "r", "c", "-1", "0,2", "1,2"]  # fmt: skip


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # numpy's np.matrix for r, c
@pytest.mark.parametrize("directive", _DIRECTIVES)
@pytest.mark.parametrize("shape", [(2,), (2, 3)])
def test_r_directives_against_numpy(directive, shape):
    a = np.arange(np.prod(shape)).reshape(shape)
    want = np.asarray(np.r_[directive, a, 2 * a])
    close(bnp.r_[directive, a, 2 * a], want)
    close(blu.jit(lambda x: bnp.r_[directive, x, 2 * x])(a), want)


def test_r_c_items_slices_and_errors():
    a, b = np.array([1.0, 2.0]), np.array([[3.0, 4.0]])
    close(bnp.r_[1:3, 1.5, [4], a], np.r_[1:3, 1.5, [4], a])
    close(bnp.r_[-1:1:6j, 0, a], np.r_[-1:1:6j, 0, a], rtol=1e-6)
    close(bnp.c_[a, a], np.c_[a, a])
    close(bnp.c_[b, 7, b], np.c_[b, 7, b])
    close(bnp.c_[1:3, 4:6], np.c_[1:3, 4:6])
    close(bnp.c_["0,2", [1, 2, 3], [4, 5, 6]], np.c_["0,2", [1, 2, 3], [4, 5, 6]])
    assert bnp.r_[1:3, 5].dtype == np.int32 and bnp.r_[1:3, 1.5].dtype == np.float32
    # traced items, differentiated through the concatenation
    g = blu.grad(lambda x: bnp.sum(bnp.r_[x, 3 * x, 0:2] ** 2))(a)
    close(g, 2 * a + 18 * a)
    assert len(bnp.r_) == 0 and len(bnp.c_) == 0
    with pytest.raises(BluValueError, match="could not understand the directive 'a,b'"):
        bnp.r_["a,b", 1]
    with pytest.raises(BluValueError, match="must come first"):
        bnp.r_[1, "r"]
    with pytest.raises(BluValueError, match="nothing to concatenate"):
        bnp.r_[()]
    with pytest.raises(BluValueError, match="trans1d=-3"):
        bnp.r_["0,3,-3", np.ones((2, 3))]
    with pytest.raises(ConcretizationError):
        blu.jit(lambda n: bnp.r_[0:n])(3)


def test_s_and_index_exp_are_numpys():
    assert bnp.s_[1:2, ::2] == np.s_[1:2, ::2] and bnp.index_exp[3] == np.index_exp[3]
    x = np.arange(12.0).reshape(3, 4)
    close(bnp.asarray(x)[bnp.s_[1:, ::2]], x[1:, ::2])


@given(st.data())
def test_ix_against_numpy(data):
    dims = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    x = np.arange(np.prod(dims), dtype=np.float64).reshape(dims)
    idx = [np.array(data.draw(st.lists(st.integers(-d, d - 1), max_size=4)), np.int32)
           for d in dims]  # fmt: skip
    want = np.ix_(*idx)
    for got, w in zip(bnp.ix_(*idx), want, strict=True):
        close(got, w)
    close(blu.jit(lambda x, *i: x[bnp.ix_(*i)])(x, *idx), x[want])


def test_ix_bools_vmap_and_errors():
    m = np.array([True, False, True])
    for got, w in zip(bnp.ix_(m, np.array([0, 1])), np.ix_(m, np.array([0, 1])), strict=True):
        close(got, w)
    assert bnp.ix_(np.array([], np.float32))[0].shape == (0,) and bnp.ix_() == ()
    rows = np.array([[0, 2], [1, 1]], np.int32)
    got = blu.vmap(lambda r: bnp.ix_(r, r)[0])(rows)
    close(got, rows[:, :, None])
    with pytest.raises(BluShapeError, match=r"argument 0 must be 1-d, got shape \(2, 2\)"):
        bnp.ix_(np.ones((2, 2), np.int32))
    with pytest.raises(BluTypeError, match="traced boolean"):
        blu.jit(bnp.ix_)(m)


@given(st.data())
def test_ldexp_is_exact(data):
    # numpy's ldexp rounds x * 2**n once; blu multiplied by exp2(n // 3) three times, and exp2 is
    # exp(n log 2): ldexp(1.0, 100) was 1.2676532e+30 for 2**100 = 1.2676506e+30, and a uint8
    # or int8 exponent raised a range error for the clip's limits
    dt = data.draw(st.sampled_from([np.float16, ml_dtypes.bfloat16, np.float32, np.float64]))
    n_dt = data.draw(st.sampled_from([np.int8, np.uint8, np.int32, np.int64]))
    size = data.draw(st.integers(0, 8))
    mant = data.draw(hnp.arrays(np.float64, size, elements=st.floats(-2.0, 2.0)))
    expo = data.draw(hnp.arrays(np.int64, size, elements=st.integers(-40, 40)))
    x = np.ldexp(mant, expo).astype(dt)
    info = np.iinfo(n_dt)
    n = data.draw(
        hnp.arrays(n_dt, size, elements=st.integers(max(info.min, -3000), min(info.max, 3000)))
    )
    with np.errstate(over="ignore", under="ignore"):
        want = np.ldexp(x.astype(np.float64), n.astype(np.int64)).astype(dt)  # (one rounding)
    got = np.asarray(bnp.ldexp(x, n))
    assert got.dtype == dt
    np.testing.assert_array_equal(got, want)
    assert float(bnp.ldexp(np.float32(1.0), 100)) == 2.0**100
    assert float(bnp.ldexp(np.float64(2.0**-1074), 1100)) == 2.0**26
