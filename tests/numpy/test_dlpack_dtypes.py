"""DLPack for every blu dtype: round trips with numpy and with torch (CPU) both ways, bfloat16
through DLPack's kDLBfloat code, and BluErrors instead of numpy's or torch's own."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu.errors import BluTypeError, BluValueError

NUMPY_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                np.uint32, np.uint64, np.float16, np.float32, np.float64, np.complex64,
                np.complex128]  # fmt: skip


def _values(dtype, shape=(2, 3)):
    v = np.arange(np.prod(shape)).reshape(shape) % 5 - 1
    return (
        (v != 0)
        if dtype == np.bool_
        else (v % 3 if np.dtype(dtype).kind == "u" else v).astype(dtype)
    )


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_round_trips(dtype):
    want = _values(dtype)
    x = bnp.from_dlpack(want)  # numpy -> blu
    assert x.dtype == dtype
    np.testing.assert_array_equal(np.asarray(x), want)
    back = np.from_dlpack(x)  # blu -> numpy
    assert back.dtype == dtype
    np.testing.assert_array_equal(back, want)


def test_numpy_bfloat16_both_ways():
    want = np.array([[0.5, -1.25, 3.0]], ml_dtypes.bfloat16)
    x = bnp.from_dlpack(want)  # numpy cannot export bfloat16: the array is copied directly
    assert x.dtype == bnp.bfloat16
    np.testing.assert_array_equal(np.asarray(x).astype(np.float32), want.astype(np.float32))
    # numpy has no bfloat16 DLPack importer: np.asarray is the way back
    assert np.asarray(x).dtype == ml_dtypes.bfloat16


def test_bfloat16_capsule_carries_the_bfloat_code():
    import ctypes

    from blu.cuda import dlpack as capsules

    x = bnp.asarray(np.array([1.0, -2.0, 0.5], np.float32)).astype(bnp.bfloat16)
    ptr, shape, dtype, device, owner = capsules.from_capsule(x.__dlpack__())
    try:
        assert shape == (3,) and dtype == ml_dtypes.bfloat16 and device == (1, 0)
        raw = np.frombuffer((ctypes.c_char * 6).from_address(ptr), np.uint16)
        np.testing.assert_array_equal(raw, np.asarray(x).view(np.uint16))
    finally:
        owner.release()


try:
    import torch
except ImportError:  # torch is optional (the peers-cpu extra): its tests skip
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
_TORCH_NAMES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float16", "float32", "float64", "complex64", "complex128", "bfloat16"]  # fmt: skip
TORCH_DTYPES = [] if torch is None else [getattr(torch, n) for n in _TORCH_NAMES]


@needs_torch
@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_torch_round_trips(dtype):
    t = torch.arange(12).reshape(3, 4) % 5 - 1
    t = (t != 0) if dtype == torch.bool else (t % 3 if "uint" in str(dtype) else t).to(dtype)
    x = bnp.from_dlpack(t)  # torch -> blu
    assert str(x.dtype) == str(dtype).removeprefix("torch.")
    back = torch.from_dlpack(x)  # blu -> torch
    assert back.dtype == dtype and torch.equal(back, t)
    # and a blu-made array (not one that came from torch)
    y = bnp.asarray(np.asarray(x)) * (1 if dtype != torch.bool else True)
    assert torch.equal(torch.from_dlpack(y), t)


@needs_torch
def test_torch_bfloat16_values_survive_a_blu_computation():
    t = torch.tensor([[1.5, -2.0], [0.25, 8.0]], dtype=torch.bfloat16)
    x = bnp.from_dlpack(t)
    y = blu.jit(lambda a: (a * 2).astype(bnp.bfloat16))(x)
    np.testing.assert_array_equal(torch.from_dlpack(y).float().numpy(), (t * 2).float().numpy())
    empty = torch.from_dlpack(bnp.zeros((0, 3), bnp.bfloat16))
    assert empty.shape == (0, 3) and empty.dtype == torch.bfloat16


@needs_torch
def test_clear_errors():
    with pytest.raises(BluValueError, match="detach"):
        bnp.from_dlpack(torch.ones(2, requires_grad=True))
    with pytest.raises(BluValueError, match="C-contiguous"):
        bnp.from_dlpack(torch.ones(3, 2, dtype=torch.bfloat16).T)
    with pytest.raises(BluValueError, match="DLPack"):
        bnp.from_dlpack(torch.ones(2, dtype=torch.float8_e4m3fn))
    with pytest.raises(BluTypeError, match="no __dlpack__"):
        bnp.from_dlpack([1, 2])
    with pytest.raises(BluValueError, match="copy=False"):
        bnp.from_dlpack(torch.ones(2), copy=False)
    with pytest.raises(BluTypeError, match="traced"):
        blu.jit(lambda a: a.__dlpack__())(np.ones(2, np.float32))
