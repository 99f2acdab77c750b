"""jax.numpy's host I/O and printing (blu.numpy.host_io) against numpy's own results: save /
savez / load round trips (bfloat16 too), frombuffer / fromstring / fromfile / fromiter, the
print options, array_repr / array_str."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.errors import BluValueError, ConcretizationError

_DTYPES = [np.float32, np.float64, np.int32, np.int8, np.uint16, np.bool_, np.complex64]


@given(st.sampled_from(_DTYPES), st.lists(st.integers(0, 3), max_size=3), st.integers(0, 99))
def test_save_load_round_trip(tmp_path_factory, dtype, shape, seed):
    want = (np.random.default_rng(seed).normal(size=shape) * 5).astype(dtype)
    path = tmp_path_factory.mktemp("npy") / "x.npy"
    bnp.save(path, bnp.asarray(want))
    assert np.load(path).dtype == want.dtype  # a plain .npy numpy reads
    got = bnp.load(path)
    assert isinstance(got, blu.Array) and got.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(got), want)


def test_bfloat16_round_trip_and_savez(tmp_path):
    want = np.array([1.5, -2.0, 3.25], ml_dtypes.bfloat16)
    bnp.save(tmp_path / "b.npy", bnp.asarray(want))
    got = bnp.load(tmp_path / "b.npy")
    assert got.dtype == bnp.bfloat16
    np.testing.assert_array_equal(np.asarray(got).astype(np.float32), want.astype(np.float32))
    a, b = np.arange(6.0).reshape(2, 3), np.array([7, 8], np.int32)
    bnp.savez(tmp_path / "z.npz", bnp.asarray(a), b=bnp.asarray(b))
    with bnp.load(tmp_path / "z.npz") as z:  # an archive comes back as numpy's (JAX's)
        np.testing.assert_array_equal(z["arr_0"], a)
        np.testing.assert_array_equal(z["b"], b)
    with pytest.raises(ConcretizationError):
        blu.jit(lambda x: bnp.save(tmp_path / "t.npy", x))(a)


def test_frombuffer_fromstring_fromiter_fromfile(tmp_path):
    data = np.array([0.5, -1.25, 3.0])
    got = bnp.frombuffer(data.tobytes(), np.float64)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(got), data)
    # the default ``float`` reads float64 and gives blu's default float (JAX's without x64)
    got = bnp.frombuffer(data.tobytes(), offset=8, count=1)
    assert got.dtype == np.float32 and np.asarray(got).tolist() == [-1.25]
    raw = bytes(range(1, 9))
    np.testing.assert_array_equal(
        np.asarray(bnp.frombuffer(raw, bnp.uint16)), np.frombuffer(raw, np.uint16)
    )
    got = bnp.fromstring("1, 2, 30", int, sep=",")
    assert got.dtype == np.int32 and np.asarray(got).tolist() == [1, 2, 30]
    got = bnp.fromiter((i * i for i in range(5)), np.int64)
    assert got.dtype == np.int64 and np.asarray(got).tolist() == [0, 1, 4, 9, 16]
    data.tofile(tmp_path / "d.bin")
    np.testing.assert_array_equal(np.asarray(bnp.fromfile(tmp_path / "d.bin", np.float64)), data)
    (tmp_path / "d.txt").write_text("4 5 6")
    got = bnp.fromfile(tmp_path / "d.txt", np.int16, sep=" ")
    assert got.dtype == np.int16 and np.asarray(got).tolist() == [4, 5, 6]
    # under jit a buffer is read while tracing: a constant of the program
    np.testing.assert_array_equal(
        np.asarray(blu.jit(lambda y: y + bnp.frombuffer(raw, np.uint8))(np.uint8(1))),
        np.frombuffer(raw, np.uint8) + 1,
    )
    with pytest.raises(BluValueError, match="does not fit"):
        bnp.fromstring("3000000000", int, sep=" ")  # int -> int32, as JAX's defaults


def test_printing_follows_numpy():
    x = np.array([[1 / 3, 2.0], [1e-9, -4.5]], np.float32)
    bx = bnp.asarray(x)
    assert bnp.array_str(bx) == np.array_str(x)
    assert bnp.array_str(bx, precision=2, suppress_small=True) == np.array_str(
        x, precision=2, suppress_small=True
    )
    assert bnp.array_repr(bx) == "A" + np.array_repr(x)[1:]
    assert bnp.array_repr(bx) == repr(bx)
    assert bnp.array_repr(x) == np.array_repr(x)  # a numpy input prints as numpy's
    b = bnp.asarray(np.array([1, 2], ml_dtypes.bfloat16))
    assert bnp.array_repr(b) == "Array([1, 2], dtype=bfloat16)" == repr(b)
    assert bnp.get_printoptions() == np.get_printoptions()
    with bnp.printoptions(precision=2):
        assert np.get_printoptions()["precision"] == 2
        assert repr(bx) == "Array(" + np.array2string(x, separator=", ", prefix="Array(") + (
            ", dtype=float32)"
        )
        assert str(bx) == str(x) and "3.33e-01" in str(bx)
    old = bnp.get_printoptions()
    try:
        bnp.set_printoptions(threshold=3)
        assert "..." in bnp.array_str(bnp.arange(10))
    finally:
        bnp.set_printoptions(**old)
    assert bnp.get_printoptions() == old
