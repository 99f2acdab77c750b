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
from blu.core.errors import BluTypeError, BluValueError
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
