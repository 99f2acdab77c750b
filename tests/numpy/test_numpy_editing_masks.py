"""jax.numpy's mask-driven selection and edits (compress, extract, place) against numpy in
float64 over random shapes (size 0 and 1 included), under jit (with a static size= where the
result's length depends on values), and their derivatives."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import arrays, assert_matches, check_grads, shapes
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core.errors import (
    BluAxisError,
    BluIndexError,
    BluShapeError,
    BluValueError,
    ConcretizationError,
)


def _pad(want, axis, size, fill):
    """numpy's result cut or padded with ``fill`` to ``size`` along ``axis``."""
    want = np.moveaxis(want, axis, 0)[:size]
    pad = np.full((size - want.shape[0],) + want.shape[1:], fill, want.dtype)
    return np.moveaxis(np.concatenate([want, pad]), 0, axis)


# ---- compress ----------------------------------------------------------------------------------


@st.composite
def _compress_case(draw):
    a = draw(arrays(draw(shapes(max_dims=3))))
    axis = draw(st.one_of(st.none(), st.integers(-a.ndim, a.ndim - 1))) if a.ndim else None
    n = a.size if axis is None else a.shape[axis]
    c = draw(st.integers(0, n + 2))  # shorter than the axis, or longer and false past it
    cond = draw(st.lists(st.booleans(), min_size=c, max_size=c))
    cond = np.array([v and i < n for i, v in enumerate(cond)], bool)
    return cond, a, axis


@given(_compress_case(), st.integers(0, 3))
def test_compress_matches_numpy(case, size):
    cond, a, axis = case
    want = np.compress(cond, a, axis)
    assert_matches(bnp.compress(cond, a, axis), want, np.float64)
    assert_matches(bnp.compress(cond.astype(np.int32), a, axis), want)  # nonzero counts as True
    assert_matches(blu.jit(lambda a: bnp.compress(cond, a, axis))(a), want)  # concrete condition
    f = blu.jit(lambda c, a: bnp.compress(c, a, axis, size=size, fill_value=-5.0))
    n = a.size if axis is None else a.shape[axis]  # (a traced one past the axis is refused)
    assert_matches(f(cond[:n], a), _pad(want, axis or 0, size, -5.0))
    ai = a.astype(np.int16)
    assert_matches(bnp.compress(cond, ai, axis), np.compress(cond, ai, axis), np.int16)


def test_compress_gradient():
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((3, 4)), rng.standard_normal((3, 2))
    cond = np.array([False, True, False, True])
    g = blu.grad(lambda x: bnp.sum(bnp.compress(cond, x, axis=1) * w))(x)
    want = np.zeros((3, 4))
    want[:, cond] = w  # closed form
    assert_matches(g, want)
    check_grads(lambda x: bnp.compress(cond, x, axis=1, size=3), [x])


def test_compress_rejects_bad_input():
    x = np.zeros((2, 3))
    with pytest.raises(BluShapeError, match=r"condition must be 1-d, got shape \(2, 3\)"):
        bnp.compress(x > 0, x)
    with pytest.raises(BluIndexError, match=r"length 4\) is true past the end of axis 1 of size 3"):
        bnp.compress([0, 0, 0, 1], x, axis=1)
    with pytest.raises(ConcretizationError, match="compress without size="):
        blu.jit(lambda c: bnp.compress(c, x, axis=0))(np.array([True, False]))
    with pytest.raises(BluAxisError, match="axis 2 is out of bounds"):
        bnp.compress([True], x, axis=2)
    with pytest.raises(BluValueError, match="out="):
        bnp.compress([True], x, out=x)


# ---- extract -----------------------------------------------------------------------------------


@given(st.data(), st.integers(0, 4))
def test_extract_matches_numpy(data, size):
    a = data.draw(arrays(data.draw(shapes(max_dims=3))))
    cond = np.round(a) != 0
    want = np.extract(cond, a)
    assert_matches(bnp.extract(cond, a), want, np.float64)
    assert_matches(bnp.extract(cond.astype(np.int8), a), want)  # nonzero counts as True
    f = blu.jit(lambda c, a: bnp.extract(c, a, size=size, fill_value=7.0))
    assert_matches(f(cond, a), _pad(want, 0, size, 7.0))
    ai = np.round(a * 10).astype(np.int32)
    assert_matches(bnp.extract(cond, ai), np.extract(cond, ai), np.int32)
    x = np.arange(6.0).reshape(2, 3)  # a shorter condition: numpy's rule
    assert_matches(bnp.extract([True, False, True], x), [0.0, 2.0])


def test_extract_gradient_and_errors():
    x = np.random.default_rng(7).standard_normal((2, 3))
    cond = np.array([[True, False, True], [False, False, True]])
    g = blu.grad(lambda x: bnp.sum(bnp.extract(cond, x) * np.array([1.0, 2.0, 3.0])))(x)
    assert_matches(g, [[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]])  # closed form
    check_grads(lambda x: bnp.extract(cond, x, size=4), [x])
    with pytest.raises(ConcretizationError, match="size="):
        blu.jit(bnp.extract)(cond, x)
    with pytest.raises(BluIndexError, match=r"length 7\) is true past the end of axis 0 of size 6"):
        bnp.extract(np.ones(7, bool), x)


# ---- place -------------------------------------------------------------------------------------


@given(st.data())
def test_place_matches_numpy(data):
    a = data.draw(arrays(data.draw(shapes(max_dims=3))))
    mask = np.round(a) > 0
    vals = np.arange(1.0, 1.0 + data.draw(st.integers(1, 4))) + 0.25  # repeated cyclically
    want = a.copy()
    np.place(want, mask, vals)
    assert_matches(bnp.place(a, mask, vals, inplace=False), want, np.float64)
    f = blu.jit(lambda a, m, v: bnp.place(a, m, v, inplace=False))  # a traced mask works
    assert_matches(f(a, mask, vals), want)
    ai = np.asarray(np.round(a * 10)).astype(np.int16)  # vals take arr's dtype
    wi = ai.copy()
    np.place(wi, mask, vals.astype(np.int16))
    assert_matches(bnp.place(ai, mask, vals, inplace=False), wi, np.int16)


def test_place_gradient_and_errors():
    rng = np.random.default_rng(8)
    x, v, w = rng.standard_normal((2, 3)), rng.standard_normal(2), rng.standard_normal((2, 3))
    mask = np.array([[True, False, True], [False, True, False]])
    gx, gv = blu.grad(lambda x, v: bnp.sum(bnp.place(x, mask, v, inplace=False) * w), (0, 1))(x, v)
    assert_matches(gx, np.where(mask, 0.0, w))  # closed form: masked entries are overwritten
    assert_matches(gv, [w[0, 0] + w[1, 1], w[0, 2]])  # v[0] goes to the 1st and 3rd masked entries
    check_grads(lambda x, v: bnp.place(x, mask, v, inplace=False), [x, v])
    with pytest.raises(BluValueError, match="inplace=False"):
        bnp.place(x, mask, v)
    with pytest.raises(BluShapeError, match=r"mask \(shape \(3,\)\) .*arr \(shape \(2, 3\)\)"):
        bnp.place(x, [True, False, True], v, inplace=False)
    with pytest.raises(BluValueError, match="vals is empty"):
        bnp.place(x, mask, [], inplace=False)


# ---- fill_diagonal -----------------------------------------------------------------------------


@given(st.data())
def test_fill_diagonal_matches_numpy(data):
    if data.draw(st.booleans()):
        shape = data.draw(shapes(min_dims=2, max_dims=2, max_side=7))
    else:  # more dimensions: all of one length
        shape = (data.draw(st.integers(0, 3)),) * data.draw(st.integers(3, 4))
    a = data.draw(arrays(shape))
    val = data.draw(st.one_of(st.floats(-3, 3), st.just(np.array([1.5, -2.5, 3.5]))))
    wrap = data.draw(st.booleans())
    want = a.copy()
    np.fill_diagonal(want, val, wrap)
    assert_matches(bnp.fill_diagonal(a, val, wrap, inplace=False), want, np.float64)
    f = blu.jit(lambda a, v: bnp.fill_diagonal(a, v, wrap, inplace=False))
    assert_matches(f(a, np.asarray(val)), want)
    ai = np.asarray(np.round(a)).astype(np.int8)  # val takes a's dtype
    wi = ai.copy()
    np.fill_diagonal(wi, np.asarray(val).astype(np.int8), wrap)
    assert_matches(bnp.fill_diagonal(ai, val, wrap, inplace=False), wi, np.int8)


def test_fill_diagonal_gradient_and_errors():
    rng = np.random.default_rng(9)
    x, w = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    gx, gv = blu.grad(lambda x, v: bnp.sum(bnp.fill_diagonal(x, v, inplace=False) * w), (0, 1))(
        x, np.float64(2.0)
    )
    eye = np.eye(3, 4, dtype=bool)
    assert_matches(gx, np.where(eye, 0.0, w))  # closed form
    assert_matches(gv, w[eye].sum())
    check_grads(lambda x, v: bnp.fill_diagonal(x, v, inplace=False), [x, np.ones(2)])
    with pytest.raises(BluValueError, match="inplace=False"):
        bnp.fill_diagonal(x, 1.0)
    with pytest.raises(BluShapeError, match=r"at least 2-d, got shape \(3,\)"):
        bnp.fill_diagonal(np.zeros(3), 1.0, inplace=False)
    with pytest.raises(BluShapeError, match=r"equal length, got shape \(2, 2, 3\)"):
        bnp.fill_diagonal(np.zeros((2, 2, 3)), 1.0, inplace=False)


def test_python_float_values_keep_float64_precision():
    # 0.1 went through float32 (0.10000000149...) before it was converted to the array's dtype
    x = np.zeros((2, 3))
    want = x.copy()
    want.flat[[0, 4]] = 0.1
    assert_matches(bnp.put(x, [0, 4], 0.1, inplace=False), want)
    assert_matches(bnp.place(x, want != 0, [0.1], inplace=False), want)
    assert_matches(bnp.insert(x, 1, 0.1, axis=0), np.insert(x, 1, 0.1, axis=0))
    assert_matches(
        bnp.insert(x.reshape(-1), [0, 2], [0.1, 0.3]), np.insert(x.reshape(-1), [0, 2], [0.1, 0.3])
    )
