"""The safetensors file format, written and read with numpy (no torch, no extra dependency).

A file is an 8-byte little-endian header length N, a JSON header of N bytes (padded with spaces
so the data starts 8-byte aligned), then the tensors' bytes, back to back in the header's order
of ``data_offsets`` (relative to the end of the header)::

    {"__metadata__": {"k": "v"},
     "name": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]}}

(https://github.com/huggingface/safetensors, "Format"). The ``safetensors`` package reads
these files (``safetensors.numpy.load_file``; bfloat16 as ``ml_dtypes.bfloat16`` in version
0.8). safetensors has no complex128: such a block is stored as ``F64`` with a trailing axis of 2
(real, imaginary), which the checkpoint's manifest records.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator, Sequence

import numpy as np

from blu.core import dtypes
from blu.core.durable import write_atomic

# blu's dtypes -> safetensors' names; complex128 has none (see the module docstring)
CODES = {
    np.dtype(np.bool_): "BOOL",
    np.dtype(np.uint8): "U8",
    np.dtype(np.int8): "I8",
    np.dtype(np.uint16): "U16",
    np.dtype(np.int16): "I16",
    np.dtype(np.uint32): "U32",
    np.dtype(np.int32): "I32",
    np.dtype(np.uint64): "U64",
    np.dtype(np.int64): "I64",
    dtypes.float16: "F16",
    dtypes.bfloat16: "BF16",
    dtypes.float32: "F32",
    dtypes.float64: "F64",
    dtypes.complex64: "C64",
}
_STORED_AS = {dtypes.complex128: dtypes.float64}


def supported(dtype: np.dtype) -> bool:
    return np.dtype(dtype) in CODES or np.dtype(dtype) in _STORED_AS


def encode(block: np.ndarray) -> np.ndarray:
    """``block`` as the C-contiguous array whose bytes the file holds."""
    block = np.ascontiguousarray(block)
    real = _STORED_AS.get(block.dtype)
    if real is not None:
        block = block.reshape(-1).view(real).reshape(block.shape + (2,))
    return block


def decode(raw: np.ndarray | memoryview, dtype: np.dtype, shape: Sequence[int]) -> np.ndarray:
    """The block of ``dtype`` and ``shape`` from its bytes (a view of them)."""
    dtype = np.dtype(dtype)
    return np.frombuffer(raw, dtype=dtype).reshape(tuple(shape))


def write(
    dest: str | os.PathLike,
    blocks: Sequence[tuple[str, np.ndarray]],
    metadata: dict[str, str] | None = None,
) -> tuple[dict[str, tuple[int, int]], str, int]:
    """Write ``blocks`` (name, array) to the safetensors file ``dest`` (atomically, durably).

    Returns:
        ({name: (begin, end) byte offsets *in the file*}, the file's sha256, its size).

    Raises:
        KeyError: a dtype safetensors cannot hold (callers check ``supported`` first).
    """
    stored = [(name, encode(a)) for name, a in blocks]
    # widest items first, as safetensors orders them, so every tensor starts aligned
    stored.sort(key=lambda t: (-t[1].dtype.itemsize, t[0]))
    header: dict = {"__metadata__": dict(metadata or {})} if metadata else {}
    at = 0
    for name, a in stored:
        header[name] = {
            "dtype": CODES[a.dtype],
            "shape": list(a.shape),
            "data_offsets": [at, at + a.nbytes],
        }
        at += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    start = 8 + len(text)

    def chunks() -> Iterator[bytes | memoryview]:
        yield struct.pack("<Q", len(text)) + text
        for _, a in stored:
            yield a.reshape(-1).view(np.uint8)

    sha, size = write_atomic(dest, chunks())
    offsets = {}
    for name, _ in stored:
        b, e = header[name]["data_offsets"]
        offsets[name] = (start + b, start + e)
    return offsets, sha, size


def dtype_named(name: str) -> np.dtype:
    """The dtype a manifest names (``"bfloat16"``, ...)."""
    for d in (*CODES, *_STORED_AS):
        if d.name == name:
            return d
    raise KeyError(name)
