"""lax.split (JAX's; blu had none) against numpy's ``split`` at the cumulative offsets, with
size-0 pieces, finite-difference gradients, vmap, jit and its errors; lax.broadcast_to_rank
(JAX's; blu had none) against a reshape. (test_lax_slicing.py and test_lax_shapes.py are near
the length limit.)"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
from blu import lax
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from tests.helpers import check_grads, check_jit, check_vmap, shapes


@st.composite
def split_problem(draw):
    shape = draw(shapes(min_dims=1, max_side=5))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[axis]
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4)))
    sizes = np.diff([0, *cuts, n]).tolist()  # non-negative, zeros included, sum n
    x = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).standard_normal(shape)
    return x, sizes, axis


@given(data=split_problem())
def test_split_matches_numpy(data):
    x, sizes, axis = data
    got = lax.split(x, sizes, axis=axis)
    want = np.split(x, np.cumsum(sizes)[:-1], axis=axis)
    assert isinstance(got, list) and len(got) == len(sizes)
    for g, w in zip(got, want):
        assert np.asarray(g).shape == w.shape
        np.testing.assert_array_equal(np.asarray(g), w)


@given(data=split_problem())
def test_split_grads_vmap_and_jit(data):
    x, sizes, axis = data
    weights = [float(i + 1) for i in range(len(sizes))]

    def f(v):  # every piece used, each with its own weight
        return sum(
            w * lax.reduce_sum(p * p) for w, p in zip(weights, lax.split(v, sizes, axis=axis))
        )

    check_grads(f, [x])
    check_jit(lambda v: lax.split(v, sizes, axis=axis), [x])
    batched = np.stack([x, 2 * x])
    check_vmap(lambda v: lax.split(v, sizes, axis=axis), [batched], in_axes=[0])


def test_split_example_and_gradient():
    x = np.arange(6.0)
    a, b = lax.split(x, (2, 4))
    np.testing.assert_array_equal(np.asarray(a), [0, 1])
    np.testing.assert_array_equal(np.asarray(b), [2, 3, 4, 5])
    g = blu.grad(lambda v: lax.reduce_sum(lax.split(v, (2, 4))[1]) * 3.0)(x)
    np.testing.assert_array_equal(np.asarray(g), [0, 0, 3, 3, 3, 3])


@pytest.mark.parametrize(
    ("x", "sizes", "axis", "err", "match"),
    [
        (np.zeros((2, 3)), (1, 1), 1, BluValueError, r"sizes \[1, 1\] must be .* sum to 3"),
        (np.zeros((2, 3)), (4, -1), 1, BluValueError, r"non-negative"),
        (np.zeros((2, 3)), (2,), 2, BluValueError, r"split: axis 2 out of range"),
        (np.zeros((2, 3)), (1.5, 0.5), 0, BluTypeError, r"split: sizes must be an int"),
        (np.zeros(()), (), 0, BluValueError, r"split: axis 0 out of range for rank 0"),
    ],
)
def test_split_errors(x, sizes, axis, err, match):
    with pytest.raises(err, match=match):
        lax.split(x, sizes, axis=axis)


# ---- broadcast_to_rank (JAX's; blu had none) ---------------------------------------------------


@given(shape=shapes(), extra=st.integers(-2, 3))
def test_broadcast_to_rank_adds_leading_ones(shape, extra):
    x = np.random.default_rng(len(shape)).standard_normal(shape)
    rank = len(shape) + extra
    got = np.asarray(lax.broadcast_to_rank(x, rank))
    # JAX's: leading 1s up to the rank; an array of that rank or more is returned as it is
    want_shape = (1,) * max(0, extra) + shape
    assert got.shape == want_shape
    np.testing.assert_array_equal(got, x.reshape(want_shape))


def test_broadcast_to_rank_grad_vmap_and_jit():
    x = np.arange(6.0).reshape(2, 3)
    g = blu.grad(lambda v: lax.reduce_sum(lax.broadcast_to_rank(v, 4) * 2.0))(x)
    np.testing.assert_array_equal(np.asarray(g), np.full((2, 3), 2.0))
    check_jit(lambda v: lax.broadcast_to_rank(v, 3), [x])
    check_vmap(lambda v: lax.broadcast_to_rank(v, 3), [x], in_axes=[1])  # rank of the slice
    with pytest.raises(BluTypeError, match=r"broadcast_to_rank: rank must be an int"):
        lax.broadcast_to_rank(x, 2.5)


# ---- stack, unstack, tile, broadcast_like, broadcast_shapes, dtype, empty (JAX's) --------------


@st.composite
def stack_problem(draw):
    shape = draw(shapes(max_dims=3))
    n = draw(st.integers(1, 3))
    axis = draw(st.integers(-len(shape) - 1, len(shape)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return [rng.standard_normal(shape) for _ in range(n)], axis


@given(data=stack_problem())
def test_stack_unstack_match_numpy(data):
    xs, axis = data
    got = lax.stack(xs, axis)
    want = np.stack(xs, axis)
    assert got.shape == want.shape and got.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(got), want)
    parts = lax.unstack(want, axis)
    assert isinstance(parts, tuple) and len(parts) == len(xs)
    for p, x in zip(parts, xs):
        np.testing.assert_array_equal(np.asarray(p), x)
    weights = [float(i + 1) for i in range(len(xs))]
    check_grads(lambda *v: lax.reduce_sum(lax.stack(v, axis) ** 2), xs)
    check_grads(
        lambda s: sum(w * lax.reduce_sum(p**3) for w, p in zip(weights, lax.unstack(s, axis))),
        [want],
    )
    check_jit(lambda *v: lax.stack(v, axis), xs)
    check_vmap(lambda a, b: lax.stack([a, b], axis), [np.stack([xs[0]] * 2), xs[0]], [0, None])


@given(shape=shapes(max_dims=3), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_tile_and_broadcast_like_match_numpy(shape, seed, data):
    x = np.random.default_rng(seed).standard_normal(shape)
    reps = data.draw(st.lists(st.integers(0, 3), min_size=len(shape), max_size=len(shape)))
    got = lax.tile(x, reps)
    np.testing.assert_array_equal(np.asarray(got), np.tile(x, reps))
    check_grads(lambda v: lax.reduce_sum(lax.tile(v, reps) ** 2), [x])
    check_vmap(lambda v: lax.tile(v, reps), [np.stack([x, 2 * x], -1)], [-1])
    # broadcast_like: a shape ``x`` broadcasts to (numpy's rule), only its shape read
    lead = data.draw(st.lists(st.integers(0, 3), max_size=2))
    target = tuple(lead) + tuple(d if d != 1 else data.draw(st.integers(0, 3)) for d in shape)
    like = np.zeros(target, np.int8)
    np.testing.assert_array_equal(
        np.asarray(lax.broadcast_like(x, like)), np.broadcast_to(x, target)
    )
    assert lax.broadcast_shapes(shape, target) == np.broadcast_shapes(shape, target)
    assert lax.broadcast_shapes(target, shape, (1,) * 4) == np.broadcast_shapes(
        target, shape, (1,) * 4
    )


def test_stack_examples_and_errors():
    np.testing.assert_array_equal(np.asarray(lax.stack([1.0, 2.0])), [1.0, 2.0])
    assert lax.stack([np.float32(1), 2.0]).dtype == np.float32  # scalars take the array's dtype
    with pytest.raises(BluShapeError, match=r"equal shapes, got f32\[2\], f32\[3\]"):
        lax.stack([np.zeros(2, np.float32), np.zeros(3, np.float32)])
    with pytest.raises(BluTypeError, match="lax does not promote"):
        lax.stack([np.zeros(2, np.int32), np.zeros(2, np.float32)])
    with pytest.raises(BluShapeError, match=r"got f32\[2\], f32\[\] \(a scalar is not broadcast"):
        lax.stack([np.zeros(2, np.float32), 3.0])  # JAX's refuses it too
    with pytest.raises(BluTypeError, match="reps for f32.* must be a sequence of ints"):
        lax.tile(np.zeros(2, np.float32), (2.0,))
    with pytest.raises(BluTypeError, match="a shape must be a sequence of ints"):
        lax.broadcast_shapes((2.0, 1))
    with pytest.raises(BluValueError, match="at least one"):
        lax.stack([])
    with pytest.raises(BluValueError, match="axis 2 out of range"):
        lax.stack([np.zeros(3)], axis=2)
    with pytest.raises(BluShapeError, match="rank >= 1"):
        lax.unstack(np.float32(1))
    with pytest.raises(BluTypeError, match=r"reps \(2, 3\) must have one entry per axis"):
        lax.tile(np.zeros(2), (2, 3))
    with pytest.raises(BluValueError, match=">= 0"):
        lax.tile(np.zeros(2), (-1,))
    with pytest.raises(BluShapeError, match=r"shape \(3,\) does not broadcast to \(3, 2\)"):
        lax.broadcast_like(np.arange(3), np.zeros((3, 2)))
    with pytest.raises(BluShapeError, match="incompatible shapes"):
        lax.broadcast_shapes((2, 1), (3, 2))


def test_dtype_and_empty():
    # JAX's lax.dtype: Python scalars and types at blu's defaults, arrays keep theirs
    assert (
        lax.dtype(1.0) == np.float32 and lax.dtype(1) == np.int32 and lax.dtype(1j) == np.complex64
    )
    assert lax.dtype(True) == np.bool_ and lax.dtype(float) == np.float32
    assert (
        lax.dtype(np.arange(3, dtype=np.int16)) == np.int16 and lax.dtype("bfloat16").itemsize == 2
    )
    assert lax.dtype(np.float64(2)) == np.float64  # blu's 64-bit types are on
    with pytest.raises(BluTypeError):
        lax.dtype("U3")
    e = lax.empty((2, 0, 3), np.int8)
    assert e.shape == (2, 0, 3) and e.dtype == np.int8
    e = blu.jit(lambda: lax.empty(4, "float32"))()
    assert e.shape == (4,) and e.dtype == np.float32
