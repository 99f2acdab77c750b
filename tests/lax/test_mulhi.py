"""lax.mulhi (JAX's; blu had none): the high half of the double-width product against Python's
exact integers in every integer dtype, extremes included, with size-0 / size-1 shapes; jit and
vmap; the errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
from blu import lax
from blu.core.errors import BluTypeError
from tests.helpers import shapes

DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


def _exact(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    bits = x.dtype.itemsize * 8
    hi = [(int(a) * int(b)) >> bits for a, b in zip(x.ravel(), y.ravel())]
    return np.array(hi, dtype=object).reshape(x.shape)


@pytest.mark.parametrize("dtype", DTYPES)
@given(data=st.data())
def test_mulhi_against_exact_integers(dtype, data):
    info = np.iinfo(dtype)
    shape = data.draw(shapes())
    elems = st.one_of(
        st.integers(int(info.min), int(info.max)),
        st.sampled_from([int(info.min), int(info.max), 0, 1, -1 if info.min < 0 else 2]),
    )
    x = data.draw(hnp.arrays(dtype, shape, elements=elems))
    y = data.draw(hnp.arrays(dtype, shape, elements=elems))
    want = _exact(x, y)
    for f in (lax.mulhi, blu.jit(lax.mulhi)):
        got = np.asarray(f(x, y))
        assert got.dtype == np.dtype(dtype) and got.shape == shape
        np.testing.assert_array_equal(got.astype(object), want)


@pytest.mark.parametrize("dtype", [np.int32, np.uint64, np.int64])
def test_mulhi_vmap_and_python_scalars(dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(3)
    x = rng.integers(info.min, info.max, (3, 5), dtype=dtype, endpoint=True)
    y = rng.integers(info.min, info.max, (5,), dtype=dtype, endpoint=True)
    got = blu.vmap(lax.mulhi, in_axes=(0, None))(x, y)
    np.testing.assert_array_equal(
        np.asarray(got).astype(object), _exact(x, np.broadcast_to(y, x.shape))
    )
    got = lax.mulhi(x, 7)  # a Python int takes x's dtype
    np.testing.assert_array_equal(np.asarray(got).astype(object), _exact(x, np.full_like(x, 7)))


def test_mulhi_errors_name_the_dtypes():
    with pytest.raises(BluTypeError, match=r"i32\[2\] and i64\[2\]"):
        lax.mulhi(np.zeros(2, np.int32), np.zeros(2, np.int64))
    with pytest.raises(BluTypeError, match=r"f32"):
        lax.mulhi(np.zeros(2, np.float32), np.zeros(2, np.float32))
    with pytest.raises(BluTypeError, match=r"bool"):
        lax.mulhi(np.zeros(2, bool), np.zeros(2, bool))
