"""DLPack capsules made and read with ctypes (no compiled code), for zero-copy exchange of device
arrays with PyTorch, CuPy, JAX and numpy.

The C structs are those of ``dlpack.h`` (v0.8 layout, the "dltensor" capsule every consumer
accepts). Export: ``to_capsule`` builds a ``DLManagedTensor`` whose ``manager_ctx`` entry keeps
the exported array alive in a registry until the consumer calls ``deleter`` (or, if the capsule is
never consumed, until the capsule is garbage collected). Import: ``from_capsule`` reads the
struct, renames the capsule ``"used_dltensor"`` (the protocol's way of saying it was consumed)
and returns an owner object that calls the producer's ``deleter`` when released.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import ml_dtypes
import numpy as np

from blu.core.errors import BluTypeError, BluValueError

kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged = 1, 2, 3, 13
_INT, _UINT, _FLOAT, _BFLOAT, _COMPLEX, _BOOL = 0, 1, 2, 4, 5, 6


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", _DELETER),
    ]


# ---- dtypes ------------------------------------------------------------------------------------


def dl_dtype(dtype: Any) -> tuple[int, int]:
    """``(code, bits)`` of a numpy dtype.

    Raises:
        BluTypeError: a dtype DLPack has no code for.
    """
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return _BOOL, 8
    if dt == ml_dtypes.bfloat16:
        return _BFLOAT, 16
    kind = {"i": _INT, "u": _UINT, "f": _FLOAT, "c": _COMPLEX}.get(dt.kind)
    if kind is None:
        raise BluTypeError(f"DLPack: no type code for dtype {dt}")
    return kind, dt.itemsize * 8


def np_dtype(code: int, bits: int, lanes: int = 1) -> np.dtype:
    if lanes != 1:
        raise BluTypeError(f"DLPack: vector dtypes (lanes={lanes}) are not supported")
    if code == _BOOL or (code == _UINT and bits == 1):
        return np.dtype(np.bool_)
    if code == _BFLOAT and bits == 16:
        return np.dtype(ml_dtypes.bfloat16)
    letter = {_INT: "i", _UINT: "u", _FLOAT: "f", _COMPLEX: "c"}.get(code)
    if letter is None or bits % 8:
        raise BluTypeError(f"DLPack: unsupported dtype code {code} with {bits} bits")
    return np.dtype(f"{letter}{bits // 8}")


# ---- the Python C-API functions used (called through ctypes, holding the GIL) -----------------

_api = ctypes.pythonapi
_capsule_new = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
)(("PyCapsule_New", _api))
_capsule_get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p)(
    ("PyCapsule_GetPointer", _api)
)
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)(
    ("PyCapsule_IsValid", _api)
)
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)(
    ("PyCapsule_SetName", _api)
)
# the destructor receives a capsule being destroyed: use raw pointers, never a py_object
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(
    ("PyCapsule_IsValid", _api)
)
_raw_get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
    ("PyCapsule_GetPointer", _api)
)

# names must outlive every capsule: module-level buffers with static addresses
_NAME = ctypes.create_string_buffer(b"dltensor")
_USED_NAME = ctypes.create_string_buffer(b"used_dltensor")

# ---- export ------------------------------------------------------------------------------------

_exports: dict[int, tuple[Any, ...]] = {}  # DLManagedTensor address -> what must stay alive
_exports_lock = threading.Lock()


def _release(addr: int) -> None:
    with _exports_lock:
        _exports.pop(addr, None)


@_DELETER
def _deleter(addr: int) -> None:  # called by the consumer once it is done with the tensor
    _release(addr)


@ctypes.PYFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule: int) -> None:  # an unconsumed capsule was garbage collected
    if _raw_is_valid(capsule, ctypes.addressof(_NAME)):
        _release(_raw_get(capsule, ctypes.addressof(_NAME)))


def live_exports() -> int:
    """How many exported tensors consumers still hold (for tests)."""
    return len(_exports)


def to_capsule(
    owner: Any,
    ptr: int,
    shape: tuple[int, ...],
    dtype: Any,
    device: tuple[int, int],
) -> Any:
    """A "dltensor" capsule for a C-contiguous array at ``ptr``.

    Args:
        owner: kept alive until the consumer releases the tensor (the exported array).
        ptr: address of the first element.
        shape: the array's shape.
        dtype: numpy dtype.
        device: ``(DLPack device type, device id)``.
    """
    code, bits = dl_dtype(dtype)
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides = [0] * ndim
    acc = 1
    for i in range(ndim - 1, -1, -1):
        strides[i] = acc
        acc *= shape[i]
    strides_arr = (ctypes.c_int64 * max(ndim, 1))(*strides)
    m = DLManagedTensor()
    t = m.dl_tensor
    t.data = ptr or None
    t.device = DLDevice(*device)
    t.ndim = ndim
    t.dtype = DLDataType(code, bits, 1)
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    addr = ctypes.addressof(m)
    m.manager_ctx = addr
    m.deleter = _deleter
    with _exports_lock:
        _exports[addr] = (m, shape_arr, strides_arr, owner)
    return _capsule_new(
        addr, ctypes.addressof(_NAME), ctypes.cast(_capsule_destructor, ctypes.c_void_p)
    )


# ---- import ------------------------------------------------------------------------------------


class ImportedTensor:
    """Holds a consumed DLManagedTensor and calls its producer's deleter when released."""

    __slots__ = ("addr", "__weakref__")

    def __init__(self, addr: int):
        self.addr = addr

    def release(self) -> None:
        addr, self.addr = self.addr, 0
        if addr:
            m = DLManagedTensor.from_address(addr)
            if ctypes.cast(m.deleter, ctypes.c_void_p).value:
                m.deleter(addr)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass


def from_capsule(capsule: Any) -> tuple[int, tuple[int, ...], np.dtype, tuple[int, int], Any]:
    """Consume a "dltensor" capsule.

    Returns:
        ``(address of the first element, shape, dtype, (device type, device id), owner)``;
        keep ``owner`` alive as long as the memory is used.

    Raises:
        BluValueError: the capsule was consumed already, or the tensor is not C-contiguous.
        BluTypeError: an unsupported dtype.
    """
    if not _capsule_is_valid(capsule, ctypes.addressof(_NAME)):
        raise BluValueError("from_dlpack: not a 'dltensor' capsule, or it was consumed already")
    addr = _capsule_get(capsule, ctypes.addressof(_NAME))
    m = DLManagedTensor.from_address(addr)
    t = m.dl_tensor
    ndim = t.ndim
    shape = tuple(int(t.shape[i]) for i in range(ndim))
    dtype = np_dtype(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    if t.strides:
        strides = tuple(int(t.strides[i]) for i in range(ndim))
        expect, acc = [0] * ndim, 1
        for i in range(ndim - 1, -1, -1):
            expect[i] = acc
            acc *= shape[i]
        # strides of size-1 dimensions do not matter
        if any(s != e and n != 1 for s, e, n in zip(strides, expect, shape)) and acc:
            raise BluValueError(
                f"from_dlpack: only C-contiguous tensors are supported (shape {shape}, strides "
                f"{strides} in elements); make it contiguous first (torch: .contiguous())"
            )
    ptr = (t.data or 0) + int(t.byte_offset)
    device = (int(t.device.device_type), int(t.device.device_id))
    _capsule_set_name(capsule, ctypes.addressof(_USED_NAME))
    return ptr, shape, dtype, device, ImportedTensor(addr)
