"""A numpy array's data address, read cheaply: what every kernel and BLAS call of the CPU
executable passes.

``x.ctypes.data`` builds a ctypes helper object on each read (on the 2-core development
machine two of them cost more than a small kernel). CPython's ``id`` of an ndarray is the address
of its ``PyArrayObject``, whose first field after the object header is the ``data`` pointer
(numpy's ``PyArrayObject_fields``, the same layout in numpy 1 and 2); reading it is far cheaper
(docs/benchmarks/cpu_backend.md, session 9).
That reading is checked against ``x.ctypes.data`` on arrays of several kinds when this module is
imported; where it differs (another Python, another layout), ``data`` is ``x.ctypes.data``.
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np

__all__ = ["data"]

_OFFSET = object.__basicsize__  # the object header: reference count and type (16 bytes)
_read = ctypes.c_size_t.from_address


def _fast(x: np.ndarray) -> int:
    """The address of ``x``'s first element (``x`` an ``np.ndarray``)."""
    return _read(id(x) + _OFFSET).value


def _slow(x: np.ndarray) -> int:
    return x.ctypes.data


def _agrees() -> bool:
    if sys.implementation.name != "cpython":
        return False
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    samples = [base, base[1:], base.T, base[:, 2:], base[::2], np.empty(0), np.zeros(3, np.int8),
               np.array(1.0), base.view(np.uint8)]  # fmt: skip
    try:
        return all(_fast(x) == x.ctypes.data for x in samples)
    except (OverflowError, ValueError):
        return False


data = _fast if _agrees() else _slow
