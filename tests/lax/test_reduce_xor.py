"""lax.reduce_xor (JAX's; blu had none): against numpy's ``bitwise_xor.reduce`` on integers
and bools over any axes, size-0 axes giving 0 / False, vmap and jit, and its errors.
(test_lax_reductions.py is near the length limit.)"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from blu import lax
from blu.core.errors import BluTypeError, BluValueError
from tests.helpers import check_jit, check_vmap, shapes

DTYPES = [np.bool_, np.int8, np.uint8, np.int32, np.uint32, np.int64]


@st.composite
def array_axes(draw, dtype):
    shape = draw(shapes(max_side=6))
    x = draw(hnp.arrays(dtype, shape))
    axes = draw(
        st.lists(st.integers(-len(shape), len(shape) - 1), unique_by=lambda a: a % len(shape))
        if shape
        else st.just([])
    )
    return x, axes


def _reference(x: np.ndarray, axes) -> np.ndarray:
    axes = tuple(sorted(a % x.ndim for a in axes))
    out = x
    for a in reversed(axes):  # a loop of Python's ^ along each axis
        acc = np.zeros(out.shape[:a] + out.shape[a + 1 :], out.dtype)
        for i in range(out.shape[a]):
            acc = acc ^ np.take(out, i, axis=a)
        out = acc
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_reduce_xor_matches_a_loop(dtype, data):
    x, axes = data.draw(array_axes(dtype))
    got = np.asarray(lax.reduce_xor(x, axes))
    want = _reference(x, axes)
    assert got.dtype == x.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, np.bitwise_xor.reduce(x, axis=tuple(axes)))


@given(x=hnp.arrays(np.int32, shapes(min_dims=1)))
def test_reduce_xor_all_axes_by_default(x):
    np.testing.assert_array_equal(np.asarray(lax.reduce_xor(x)), _reference(x, range(x.ndim)))


def test_reduce_xor_examples():
    assert bool(lax.reduce_xor(np.array([True, True, True]))) is True  # odd count
    np.testing.assert_array_equal(np.asarray(lax.reduce_xor(np.zeros((2, 0), bool), 1)), [0, 0])
    assert int(lax.reduce_xor(np.array([0b1100, 0b1010, 0b0001], np.uint8))) == 0b0111


@given(x=hnp.arrays(np.int32, shapes(min_dims=2)), axis=st.integers(0, 1))
def test_reduce_xor_vmap_and_jit(x, axis):
    check_vmap(lambda v: lax.reduce_xor(v, 0), [x], in_axes=[1 - axis])
    check_jit(lambda v: lax.reduce_xor(v, (0, 1)), [x])


@pytest.mark.parametrize(
    ("x", "axes", "err", "match"),
    [
        (np.zeros(3, np.float32), 0, BluTypeError, r"reduce_xor requires integer or bool"),
        (np.zeros((2, 3), np.int32), 2, BluValueError, r"axis 2 out of range for i32\[2,3\]"),
        (np.zeros((2, 3), np.int32), (1, -1), BluValueError, r"repeated axes \[1, 1\]"),
    ],
)
def test_reduce_xor_errors(x, axes, err, match):
    with pytest.raises(err, match=match):
        lax.reduce_xor(x, axes)
