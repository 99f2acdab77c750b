"""blu.numpy creation and shape manipulation against numpy, over random shapes (size 0 and 1
included)."""

import functools
import re

import numpy as np
import pytest
from helpers import arrays, assert_matches, shapes
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core.errors import (
    BluError,
    BluShapeError,
    BluTypeError,
    BluValueError,
    ConcretizationError,
)

# float32 results against numpy's float64 ones
_eq = functools.partial(assert_matches, rtol=1e-6)


# ---- creation ----------------------------------------------------------------------------------


@given(st.data())
def test_constant_creation(data):
    shape = data.draw(shapes())
    _eq(bnp.zeros(shape), np.zeros(shape), np.float32)
    _eq(bnp.ones(shape, bnp.int8), np.ones(shape), np.int8)
    _eq(bnp.empty(shape), np.zeros(shape), np.float32)
    _eq(bnp.full(shape, 2.5), np.full(shape, 2.5), np.float32)
    assert bnp.full(shape, 2.5).weak_type and not bnp.zeros(shape).weak_type
    _eq(bnp.full(shape, 3, bnp.uint8), np.full(shape, 3), np.uint8)
    x = data.draw(arrays(shape))
    _eq(bnp.zeros_like(x), np.zeros_like(x), np.float64)
    _eq(bnp.ones_like(x, dtype=bnp.int32), np.ones(shape), np.int32)
    _eq(bnp.full_like(x, 7), np.full_like(x, 7), np.float64)
    _eq(bnp.empty_like(x, shape=(2,)), np.zeros(2), np.float64)
    if shape:
        row = data.draw(arrays(shape[-1:]))
        _eq(bnp.full(shape, row), np.broadcast_to(row, shape), np.float64)


@pytest.mark.parametrize(
    "args", [(5,), (2, 9), (2, 9, 3), (10, 0, -3), (0,), (-2, 2), (0.5, 3.0), (1, 2, 0.25)]
)
def test_arange(args):
    got = bnp.arange(*args)
    want = np.arange(*args)
    _eq(got, want, np.int32 if want.dtype.kind == "i" else np.float32)
    _eq(bnp.arange(*args, dtype=bnp.float64), np.arange(*args, dtype=np.float64), np.float64)
    with pytest.raises(ConcretizationError):
        blu.jit(lambda n: bnp.arange(n))(3)


@pytest.mark.parametrize("num,endpoint", [(5, True), (5, False), (1, True), (0, True), (2, False)])
def test_linspace_logspace(num, endpoint):
    _eq(bnp.linspace(-1.0, 3.0, num, endpoint), np.linspace(-1.0, 3.0, num, endpoint), np.float32)
    start, stop = np.array([0.0, 1.0]), np.array([[2.0], [5.0]])
    for axis in (0, -1):
        want = np.linspace(start, stop, num, endpoint, axis=axis)
        _eq(bnp.linspace(start, stop, num, endpoint, axis=axis), want)
    got, step = bnp.linspace(0, 10, num, endpoint, retstep=True)
    if num > 1:
        assert abs(float(step) - np.linspace(0, 10, num, endpoint, retstep=True)[1]) < 1e-6
    _eq(
        bnp.linspace(0, 10, num, endpoint, dtype=bnp.int32),
        np.linspace(0, 10, num, endpoint, dtype=np.int32),
    )
    _eq(bnp.logspace(0.0, 2.0, num, endpoint), np.logspace(0.0, 2.0, num, endpoint))
    # bool is True where the value is nonzero (numpy's astype); it was floored first: 0.25 -> False
    for lo, hi in ((0, 1), (-1, 1)):
        got = bnp.linspace(lo, hi, num, endpoint, dtype=bnp.bool_)
        _eq(got, np.linspace(lo, hi, num, endpoint, dtype=bool), np.bool_)


@pytest.mark.parametrize("num,endpoint", [(9, True), (9, False), (1, True), (2, True), (0, True)])
def test_geomspace_endpoints_are_exact(num, endpoint):
    # numpy's first value is start and its last (with endpoint) stop exactly; the logarithms'
    # rounding gave 255.99992 for geomspace(1, 256) and 255 in int32
    for start, stop in (
        (1.0, 256.0),
        (-3.0, -1000.0),
        (np.array([1.0, 2.0]), np.array([8.0, 5.0])),
    ):
        for dt in (None, bnp.float64, bnp.int32):
            want = np.geomspace(start, stop, num, endpoint, dtype=dt)
            got = np.asarray(bnp.geomspace(start, stop, num, endpoint, dtype=dt))
            assert got.shape == want.shape
            if num:
                np.testing.assert_array_equal(got[:1], want[:1])
                if endpoint:
                    np.testing.assert_array_equal(got[-1:], want[-1:])
            if dt is not bnp.int32:  # (the interior's truncation may fall either side)
                np.testing.assert_allclose(got, want, rtol=1e-6)
    got = bnp.geomspace(np.array([1.0, 2.0]), 64.0, num, endpoint, axis=1)
    _eq(got, np.geomspace(np.array([1.0, 2.0]), 64.0, num, endpoint, axis=1))


@pytest.mark.parametrize("n,m,k", [(3, None, 0), (3, 5, 1), (4, 2, -1), (0, 3, 0), (3, 3, 5)])
def test_eye_tri_tril_triu(n, m, k):
    _eq(bnp.eye(n, m, k), np.eye(n, m, k), np.float32)
    _eq(bnp.tri(n, m, k, dtype=bnp.int32), np.tri(n, m, k, dtype=np.int32), np.int32)
    x = np.arange(2 * n * (m or n), dtype=np.float64).reshape(2, n, m or n)
    _eq(bnp.tril(x, k), np.tril(x, k))
    _eq(bnp.triu(x, k), np.triu(x, k))
    _eq(bnp.identity(n, bnp.bool_), np.identity(n, bool), np.bool_)


def test_meshgrid_copy_array_of_tracers():
    a, b, c = np.arange(3.0), np.arange(4.0), np.arange(2.0)
    for indexing in ("xy", "ij"):
        for sparse in (False, True):
            for g, w in zip(
                bnp.meshgrid(a, b, c, indexing=indexing, sparse=sparse),
                np.meshgrid(a, b, c, indexing=indexing, sparse=sparse),
            ):
                _eq(g, w)
    x = bnp.arange(3.0)
    assert bnp.copy(x) is not x
    _eq(bnp.copy(x), np.arange(3.0))
    # a list holding traced values is stacked
    out = blu.jit(lambda s, t: bnp.array([[s, t], [t, s]]))(1.0, 2.0)
    _eq(out, [[1.0, 2.0], [2.0, 1.0]], np.float32)
    out = blu.grad(lambda s: bnp.sum(bnp.array([s, 2 * s]) ** 2))(1.5)
    assert abs(float(out) - 15.0) < 1e-6


# ---- reshaping ---------------------------------------------------------------------------------


@given(st.data())
def test_reshape_ravel_transpose(data):
    shape = data.draw(shapes())
    x = data.draw(arrays(shape))
    size = x.size
    new = data.draw(st.sampled_from([(size,), (1, size, 1), (-1,), (size, -1) if size else (0, 1)]))
    _eq(bnp.reshape(x, new), np.reshape(x, new))
    _eq(bnp.asarray(x).reshape(new), np.reshape(x, new))
    _eq(bnp.asarray(x).reshape(*new), np.reshape(x, new))
    _eq(bnp.ravel(x), np.ravel(x))
    _eq(bnp.transpose(x), np.transpose(x))
    perm = data.draw(st.permutations(range(x.ndim)))
    _eq(bnp.transpose(x, perm), np.transpose(x, perm))
    _eq(
        bnp.asarray(x).transpose(*perm) if perm else bnp.asarray(x).transpose(),
        np.transpose(x, perm),
    )
    _eq(bnp.asarray(x).T, x.T)
    if x.ndim >= 1:
        src = data.draw(st.integers(-x.ndim, x.ndim - 1))
        dst = data.draw(st.integers(-x.ndim, x.ndim - 1))
        _eq(bnp.moveaxis(x, src, dst), np.moveaxis(x, src, dst))
        _eq(bnp.swapaxes(x, src, dst), np.swapaxes(x, src, dst))
        ax = data.draw(st.integers(-x.ndim - 1, x.ndim))
        _eq(bnp.expand_dims(x, ax), np.expand_dims(x, ax))
    if x.ndim >= 2:
        _eq(bnp.moveaxis(x, (0, 1), (-1, 0)), np.moveaxis(x, (0, 1), (-1, 0)))
        _eq(bnp.expand_dims(x, (0, -1)), np.expand_dims(x, (0, -1)))
        _eq(bnp.matrix_transpose(x), np.swapaxes(x, -1, -2))
    _eq(bnp.squeeze(x), np.squeeze(x))
    ones = tuple(i for i, d in enumerate(shape) if d == 1)
    if ones:
        _eq(bnp.squeeze(x, ones[0]), np.squeeze(x, ones[0]))
    assert bnp.shape(x) == x.shape and bnp.ndim(x) == x.ndim and bnp.size(x) == x.size
    for f in (bnp.atleast_1d, bnp.atleast_2d, bnp.atleast_3d):
        _eq(f(x), getattr(np, f.__name__)(x))


@given(st.data())
def test_reshape_and_ravel_orders(data):
    # order='F' reads and writes column-major, as numpy's; 'A' is row-major for blu's arrays
    shape = data.draw(shapes(max_dims=3, max_side=4))
    x = data.draw(arrays(shape))
    size = x.size
    new = data.draw(st.sampled_from([(size,), (-1,), (1, size, 1), (size, -1)] if size else [(0,)]))
    xb = bnp.asarray(x)
    for order in ("C", "F", "A"):
        _eq(bnp.reshape(xb, new, order=order), np.reshape(x, new, order=order))
        _eq(bnp.ravel(xb, order), np.ravel(x, order))
        _eq(xb.flatten(order), x.flatten(order))
    if len(shape) == 2:
        _eq(bnp.reshape(xb, shape[::-1], order="F"), np.reshape(x, shape[::-1], order="F"))


def test_reshape_errors():
    x = bnp.zeros((2, 3))
    with pytest.raises(BluError, match=r"\(2, 3\)"):
        bnp.reshape(x, (4, -1))
    with pytest.raises(BluValueError, match="order"):
        bnp.reshape(x, (6,), order="K")
    with pytest.raises(BluValueError, match="order"):
        bnp.ravel(x, order="X")
    with pytest.raises(BluError):
        bnp.squeeze(x, 0)
    with pytest.raises(BluError):
        bnp.transpose(x, (0, 0))
    with pytest.raises(BluError):
        bnp.swapaxes(x, 0, 2)


@given(st.data())
def test_broadcast_to_and_arrays(data):
    shape = data.draw(shapes(max_dims=2))
    x = data.draw(arrays(shape))
    target = data.draw(st.sampled_from([(2,) + shape, (3, 1) + shape, shape]))
    _eq(bnp.broadcast_to(x, target), np.broadcast_to(x, target))
    y = data.draw(arrays(shape[-1:] if shape else ()))
    for g, w in zip(bnp.broadcast_arrays(x, y, 1.0), np.broadcast_arrays(x, y, 1.0)):
        _eq(g, w)
    assert bnp.broadcast_shapes(shape, (1,) * len(shape)) == shape
    with pytest.raises(BluError):
        bnp.broadcast_to(np.ones((3,)), (4,))
    # an int shape is one axis, as numpy's (it raised TypeError: 'int' object is not iterable)
    row = np.array([1.5, -2.0, 0.25])
    _eq(bnp.broadcast_to(row, 3), np.broadcast_to(row, 3))
    _eq(bnp.broadcast_to(2.0, np.int64(4)), np.broadcast_to(2.0, np.int64(4)))


# ---- joining and splitting ---------------------------------------------------------------------


@given(st.data())
def test_concatenate_stack(data):
    shape = data.draw(shapes(min_dims=1))
    ax = data.draw(st.integers(-len(shape), len(shape) - 1))
    xs = []
    for _ in range(data.draw(st.integers(1, 3))):
        s = list(shape)
        s[ax] = data.draw(st.integers(0, 3))
        xs.append(data.draw(arrays(tuple(s))))
    _eq(bnp.concatenate(xs, ax), np.concatenate(xs, ax))
    _eq(bnp.concatenate(xs, None), np.concatenate(xs, None))
    ys = [data.draw(arrays(shape)) for _ in range(2)]
    sax = data.draw(st.integers(-len(shape) - 1, len(shape)))
    _eq(bnp.stack(ys, sax), np.stack(ys, sax))
    for f in ("hstack", "vstack", "dstack", "column_stack"):
        if f == "column_stack" and len(shape) > 2:
            continue
        _eq(getattr(bnp, f)(ys), getattr(np, f)(ys))
    # dtypes promote
    out = bnp.concatenate([np.ones(2, np.int8), np.ones(3, np.float16)])
    assert out.dtype == np.float16
    _eq(bnp.append(xs[0], ys[0]), np.append(xs[0], ys[0]))


def test_concatenate_errors():
    with pytest.raises(BluError, match="zero-dimensional"):
        bnp.concatenate([np.float32(1), np.float32(2)])
    with pytest.raises(BluError):
        bnp.concatenate([np.ones((2, 3)), np.ones((2, 4))], 0)
    with pytest.raises(BluError):
        bnp.stack([np.ones(2), np.ones(3)])
    with pytest.raises(BluError):
        bnp.concatenate([])


@given(st.data())
def test_split_array_split(data):
    shape = data.draw(shapes(min_dims=1, max_side=6))
    x = data.draw(arrays(shape))
    ax = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[ax]
    k = data.draw(st.integers(1, 4))
    for g, w in zip(bnp.array_split(x, k, ax), np.array_split(x, k, ax), strict=True):
        _eq(g, w)
    if n % k == 0:
        for g, w in zip(bnp.split(x, k, ax), np.split(x, k, ax), strict=True):
            _eq(g, w)
    else:
        with pytest.raises(BluError, match="equal division"):
            bnp.split(x, k, ax)
    idx = sorted(data.draw(st.lists(st.integers(-n - 1, n + 1), max_size=3)))
    for g, w in zip(bnp.split(x, idx, ax), np.split(x, idx, ax), strict=True):
        _eq(g, w)


@given(st.data())
def test_dsplit(data):
    """numpy's dsplit (axis 2, 3-d and up), sections and indices, under jit; < 3-d refused."""
    shape = data.draw(shapes(min_dims=3, max_dims=4, max_side=6))
    x = data.draw(arrays(shape))
    k = data.draw(st.sampled_from([d for d in range(1, 5) if shape[2] % d == 0]))
    idx = sorted(data.draw(st.lists(st.integers(-shape[2] - 1, shape[2] + 1), max_size=3)))
    for arg in (k, idx):
        got = blu.jit(lambda a, arg=arg: bnp.dsplit(a, arg))(x)
        for g, w in zip(bnp.dsplit(x, arg), np.dsplit(x, arg), strict=True):
            _eq(g, w)
        for g, w in zip(got, np.dsplit(x, arg), strict=True):
            _eq(g, w)
    with pytest.raises(BluValueError, match=r"3 or more dimensions, got f64\[2,2\]"):
        bnp.dsplit(np.zeros((2, 2)), 1)


# ---- repeating, flipping, rolling, padding -----------------------------------------------------


@given(st.data())
def test_tile_repeat_flip_roll(data):
    shape = data.draw(shapes())
    x = data.draw(arrays(shape))
    reps = data.draw(
        st.one_of(st.integers(0, 3), st.lists(st.integers(0, 3), max_size=4).map(tuple))
    )
    _eq(bnp.tile(x, reps), np.tile(x, reps))
    r = data.draw(st.integers(0, 3))
    _eq(bnp.repeat(x, r), np.repeat(x, r))
    _eq(bnp.flip(x), np.flip(x))
    if shape:
        ax = data.draw(st.integers(-len(shape), len(shape) - 1))
        _eq(bnp.repeat(x, r, ax), np.repeat(x, r, ax))
        counts = data.draw(st.lists(st.integers(0, 3), min_size=shape[ax], max_size=shape[ax]))
        _eq(bnp.repeat(x, np.array(counts, int), ax), np.repeat(x, counts, ax))
        _eq(bnp.flip(x, ax), np.flip(x, ax))
        sh = data.draw(st.integers(-7, 7))
        _eq(bnp.roll(x, sh, ax), np.roll(x, sh, ax))
        _eq(bnp.roll(x, sh), np.roll(x, sh))
        # a traced shift
        _eq(blu.jit(lambda x, s: bnp.roll(x, s, ax))(x, sh), np.roll(x, sh, ax))
        if len(shape) >= 2:
            _eq(bnp.roll(x, (sh, 1), (0, 1)), np.roll(x, (sh, 1), (0, 1)))
            _eq(bnp.fliplr(x), np.fliplr(x))
        _eq(bnp.flipud(x), np.flipud(x))


def test_roll_broadcasts_shifts_and_axes():
    # numpy's and JAX's rule: shift and axis broadcast, the shifts of a repeated axis add up.
    # A shift sequence with axis=None or one axis was a raw ValueError, a 1-d shift array a raw
    # TypeError, a repeated axis a BluValueError
    x = np.arange(12.0).reshape(3, 4)
    for shift, axis in [((1, 2), None), ((1, 2), 1), ((1, 1), (0, 0)), ((2, -1, 1), (1, 0, 1)),
                        (np.array([1, 2]), (0, 1)), (1, (0, 1, 0))]:  # fmt: skip
        _eq(bnp.roll(x, shift, axis), np.roll(x, shift, axis))
    _eq(
        blu.jit(lambda x, s: bnp.roll(x, s, (0, 1)))(x, np.array([1, 2])),
        np.roll(x, (1, 2), (0, 1)),
    )
    _eq(blu.jit(lambda x, s: bnp.roll(x, (s, 2), (1, 1)))(x, 1), np.roll(x, 3, 1))
    _eq(blu.jit(lambda x, s: bnp.roll(x, s))(x, np.array([5, -1])), np.roll(x, 4))
    with pytest.raises(BluValueError, match="shifts"):
        bnp.roll(x, (1, 2, 3), (0, 1))
    # a 2-d shift is numpy's ValueError (it was Python's 'only 0-dimensional arrays ...')
    for axis in (0, None):
        with pytest.raises(BluValueError, match="1-d sequence"):
            bnp.roll(x, np.array([[1]]), axis)
        with pytest.raises(BluValueError, match="1-d sequence"):
            blu.jit(lambda x, s: bnp.roll(x, s, axis))(x, np.array([[1]]))


def test_roll_shift_dtypes():
    # a float shift was truncated (roll(x, 1.5) rolled by 1); a traced int64 shift was cast to
    # int32 first (2**32 + 1 rolled by 1)
    x = np.arange(5.0)
    for shift in (1.5, np.float32(2.0)):
        with pytest.raises(BluTypeError, match="integer"):
            bnp.roll(x, shift)
        with pytest.raises(BluTypeError, match="integer"):
            blu.jit(lambda x, s: bnp.roll(x, s))(x, shift)
    for big in (np.array(2**32 + 1, np.int64), np.array(2**32 - 2, np.uint32)):
        _eq(blu.jit(lambda x, s: bnp.roll(x, s))(x, big), np.roll(x, int(big)))


@given(st.data())
def test_pad(data):
    shape = data.draw(shapes(min_dims=1, max_dims=3))
    x = data.draw(arrays(shape))
    nd = len(shape)
    widths = data.draw(
        st.one_of(
            st.integers(0, 2),
            st.tuples(st.integers(0, 2), st.integers(0, 2)),
            st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=nd, max_size=nd).map(
                tuple
            ),
        )
    )
    _eq(bnp.pad(x, widths), np.pad(x, widths))
    _eq(bnp.pad(x, widths, constant_values=-1.5), np.pad(x, widths, constant_values=-1.5))
    if x.size:
        for mode in ("edge", "wrap"):
            _eq(bnp.pad(x, widths, mode), np.pad(x, widths, mode))
    if nd:  # per-axis (before, after) constants
        cv = tuple((float(i), float(-i)) for i in range(nd))
        _eq(bnp.pad(x, widths, constant_values=cv), np.pad(x, widths, constant_values=cv))
    with pytest.raises(BluError):
        bnp.pad(x, widths, "nope")


def test_pad_traced_per_axis_constants():
    # traced (before, after) constants under jit were read as NaN; a bad shape was a raw
    # ValueError
    x = np.arange(6.0).reshape(2, 3)
    for cv in (np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([5.0, -6.0]), np.array([[7.0, 8.0]])):
        got = blu.jit(lambda x, c: bnp.pad(x, ((1, 2), (2, 1)), constant_values=c))(x, cv)
        _eq(got, np.pad(x, ((1, 2), (2, 1)), constant_values=cv))
    xi = x.astype(np.int32)
    got = blu.jit(lambda x, c: bnp.pad(x, 1, constant_values=c))(xi, np.array([1.0, -2.0]))
    _eq(got, np.pad(xi, 1, constant_values=np.array([1.0, -2.0])))
    # each constant's gradient counts the elements it fills
    g = blu.grad(lambda c: bnp.sum(bnp.pad(x, ((1, 2), (2, 1)), constant_values=c)))(
        np.array([[1.0, 2.0], [3.0, 4.0]])
    )
    _eq(g, np.array([[3.0, 6.0], [10.0, 5.0]]))
    for bad in (np.ones(3), np.ones((3, 2))):
        with pytest.raises(BluValueError, match="constant_values"):
            bnp.pad(x, 1, constant_values=bad)
        with pytest.raises(BluValueError, match="constant_values"):
            blu.jit(lambda x, c: bnp.pad(x, 1, constant_values=c))(x, bad)


# ---- take, diagonal, astype --------------------------------------------------------------------


@given(st.data())
def test_take_and_take_along_axis(data):
    shape = data.draw(shapes(min_dims=1, min_side=1))
    x = data.draw(arrays(shape))
    ax = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[ax]
    idx = np.array(data.draw(st.lists(st.integers(-n, n - 1), max_size=5)), dtype=np.int32)
    _eq(bnp.take(x, idx, axis=ax), np.take(x, idx, axis=ax))
    _eq(bnp.take(x, idx.reshape(-1, 1), axis=ax), np.take(x, idx.reshape(-1, 1), axis=ax))
    _eq(bnp.take(x, idx), np.take(x, idx))  # the raveled array (size >= n)
    # out of bounds: clamped (default), wrapped, or filled
    oob = np.array([n + 3, -n - 2], np.int32)
    _eq(bnp.take(x, oob, axis=ax), np.take(x, [n - 1, 0], axis=ax))
    _eq(bnp.take(x, oob, axis=ax, mode="wrap"), np.take(x, oob, axis=ax, mode="wrap"))
    filled = bnp.take(x, oob, axis=ax, mode="fill", fill_value=np.nan)
    assert np.isnan(np.asarray(filled)).all()
    # 'fill' without a fill_value reads JAX's: NaN for floats, the most negative signed int
    assert np.isnan(np.asarray(bnp.take(x, oob, axis=ax, mode="fill"))).all()
    for dt in (np.int16, np.int64, np.uint32, np.uint64):  # (int64's does not fit an int32)
        ints = np.asarray(bnp.take(x.astype(dt), oob, axis=ax, mode="fill"))
        info = np.iinfo(dt)
        assert (ints == (info.max if info.min == 0 else info.min)).all()
    # take_along_axis with broadcasting of the other axes
    m = data.draw(st.integers(0, 4))
    ishape = tuple(
        1 if (i != ax % len(shape) and data.draw(st.booleans())) else d for i, d in enumerate(shape)
    )
    ishape = tuple(m if i == ax % len(shape) else d for i, d in enumerate(ishape))
    ind = data.draw(
        st.lists(
            st.integers(-n, n - 1), min_size=int(np.prod(ishape)), max_size=int(np.prod(ishape))
        )
    )
    ind = np.array(ind, np.int64).reshape(ishape)
    _eq(bnp.take_along_axis(x, ind, ax), np.take_along_axis(x, ind, ax))
    order = np.argsort(x, axis=ax)
    _eq(bnp.take_along_axis(x, order, ax), np.sort(x, axis=ax))


def test_take_positional_arguments_follow_numpy():
    # numpy's and JAX's take(a, indices, axis, out, mode): the 5th positional was read as
    # fill_value, so take(x, i, 0, None, "wrap") silently clamped instead of wrapping
    x = np.arange(5.0)
    i = np.array([6, -7, 2])
    _eq(bnp.take(x, i, 0, None, "wrap"), np.take(x, i, 0, None, "wrap"))
    _eq(bnp.take(x, i, 0, None, "clip"), np.take(x, i, 0, None, "clip"))
    _eq(bnp.take(x, i, unique_indices=True, indices_are_sorted=False, mode="wrap"), x[i % 5])
    with pytest.raises(BluValueError, match="out="):
        bnp.take(x, i, 0, np.zeros(3))
    # mode in the 4th place (blu's order before) says where mode goes now
    with pytest.raises(BluValueError, match=r"which is the 5th: pass mode='wrap'"):
        bnp.take(x, i, 0, "wrap")


def test_take_from_an_empty_axis():
    # numpy and JAX raise; clip/wrap returned zeros (wrap with a numpy divide-by-zero warning)
    x = np.zeros((3, 0))
    for mode in (None, "clip", "wrap"):
        with pytest.raises(IndexError, match="empty axis"):
            bnp.take(x, np.array([0, 1]), axis=1, mode=mode)
        with pytest.raises(IndexError, match="empty axis"):
            blu.jit(lambda x, i, mode=mode: bnp.take(x, i, axis=1, mode=mode))(x, np.array([0]))
    _eq(bnp.take(x, np.array([0, 1]), axis=1, mode="fill", fill_value=-1.0), -np.ones((3, 2)))
    _eq(bnp.take(x, np.zeros(0, np.int32), axis=1), np.zeros((3, 0)))  # no index: fine


@given(st.data())
def test_diagonal_diag_trace(data):
    shape = data.draw(shapes(min_dims=2, max_dims=4))
    x = data.draw(arrays(shape))
    k = data.draw(st.integers(-4, 4))
    a1 = data.draw(st.integers(0, len(shape) - 1))
    a2 = data.draw(st.integers(0, len(shape) - 1).filter(lambda a: a != a1))
    _eq(bnp.diagonal(x, k, a1, a2), np.diagonal(x, k, a1, a2))
    _eq(bnp.trace(x, k, a1, a2), np.trace(x, k, a1, a2))
    v = data.draw(arrays(shape[:1]))
    _eq(bnp.diag(v, k), np.diag(v, k))
    m = data.draw(arrays(data.draw(shapes(min_dims=2, max_dims=2))))
    _eq(bnp.diag(m, k), np.diag(m, k))


@pytest.mark.parametrize("src", [np.float64, np.float32, np.int32, np.uint8, np.bool_])
@pytest.mark.parametrize("dst", [np.float16, np.int8, np.int64, np.uint32, np.bool_, np.float64])
def test_astype(src, dst):
    x = np.array([0, 1, 2, 3, 100], dtype=src)
    got = bnp.asarray(x).astype(dst)
    assert got.dtype == dst
    np.testing.assert_array_equal(np.asarray(got), x.astype(dst))
    y = np.array([-1.7, -0.2, 0.0, 0.5, 2.9])
    np.testing.assert_array_equal(np.asarray(bnp.astype(y, bnp.int32)), y.astype(np.int32))


def _repeat_to(a, reps, axis, total):
    """NumPy's repeat, cut to ``total`` or padded with the axis's last element (JAX's rule)."""
    r = np.repeat(a, reps, axis)
    if r.shape[axis] >= total:
        return np.take(r, np.arange(total), axis)
    last = np.take(a, [a.shape[axis] - 1], axis)
    return np.concatenate([r, np.repeat(last, total - r.shape[axis], axis)], axis)


@given(st.data())
def test_repeat_with_total_repeat_length(data):
    shape = data.draw(shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[axis]
    a = np.arange(float(np.prod(shape))).reshape(shape)
    reps = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), np.int32)
    total = data.draw(st.integers(0, int(reps.sum()) + 3))
    want = _repeat_to(a, reps, axis, total)
    got = bnp.repeat(a, reps, axis, total_repeat_length=total)
    np.testing.assert_array_equal(np.asarray(got), want)
    # traced counts: the length is static, the counts are not
    f = blu.jit(lambda r: bnp.repeat(a, r, axis, total_repeat_length=total))
    np.testing.assert_array_equal(np.asarray(f(reps)), want)
    k = int(reps[0])
    want = _repeat_to(a, np.full(n, k), axis, total)
    np.testing.assert_array_equal(np.asarray(f(np.int32(k))), want)


def test_repeat_length_errors():
    with pytest.raises(BluError, match="negative"):
        bnp.repeat(np.ones(3), 2, total_repeat_length=-1)
    with pytest.raises(BluError, match="empty"):
        bnp.repeat(np.ones(0), 2, total_repeat_length=2)
    assert bnp.repeat(np.ones(0), 2, total_repeat_length=0).shape == (0,)
    # per-element counts: a negative one was numpy's bare ValueError, a float one truncated
    with pytest.raises(BluValueError, match="negative"):
        bnp.repeat(np.ones(3), np.array([1, -1, 2]))
    with pytest.raises(BluTypeError, match="integers"):
        bnp.repeat(np.ones(3), np.array([1.0, 2.5, 0.0]))


@given(st.data())
def test_repeat_counts_of_the_wrong_number_are_shape_errors(data):
    """``repeats`` holding neither 1 count nor one per element: a BluShapeError naming the
    counts' shape and the axis's length, with or without ``total_repeat_length`` and traced
    (before, NumPy's broadcast error or a reshape error came out, or a count of the wrong
    axis: '3 counts' for counts of shape (3, 1))."""
    shape = data.draw(shapes(min_dims=1, max_dims=3, min_side=0, max_side=4))
    axis = data.draw(st.sampled_from([None, *range(-len(shape), len(shape))]))
    a = np.zeros(shape)
    n = int(np.prod(shape)) if axis is None else shape[axis]
    m = data.draw(st.integers(0, 6).filter(lambda m: m not in (1, n)))
    rshape = data.draw(st.sampled_from([(m,), (1, m), (m, 1)]))
    reps = np.ones(rshape, np.int32)
    msg = rf"repeats of shape {re.escape(str(rshape))} hold {m} counts, but .* has {n} elements"
    with pytest.raises(BluShapeError, match=msg):
        bnp.repeat(a, reps, axis)
    with pytest.raises(BluShapeError, match=msg):
        bnp.repeat(a, reps, axis, total_repeat_length=3)
    f = blu.jit(lambda r: bnp.repeat(a, r, axis, total_repeat_length=3))
    with pytest.raises(BluShapeError, match=msg):
        f(reps)


@given(st.data())
def test_repeat_counts_of_any_shape_are_raveled_as_in_jax(data):
    """Counts of shape (1, n) or (n, 1) are n counts (JAX ravels them); traced (1, n) counts
    with ``total_repeat_length`` were summed along their length-1 axis, a wrong result."""
    shape = data.draw(shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[axis]
    a = np.arange(float(np.prod(shape))).reshape(shape)
    flat = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), np.int32)
    reps = flat.reshape(data.draw(st.sampled_from([(1, n), (n, 1), (1, n, 1)])))
    _eq(bnp.repeat(a, reps, axis), np.repeat(a, flat, axis))
    total = data.draw(st.integers(0, int(flat.sum()) + 3))
    want = _repeat_to(a, flat, axis, total)
    np.testing.assert_array_equal(
        np.asarray(bnp.repeat(a, reps, axis, total_repeat_length=total)), want
    )
    f = blu.jit(lambda r: bnp.repeat(a, r, axis, total_repeat_length=total))
    np.testing.assert_array_equal(np.asarray(f(reps)), want)
