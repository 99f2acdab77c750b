"""Host-side I/O and printing as ``jax.numpy`` has them: numpy does the work on host values and
``asarray`` makes blu arrays of the results (``load``, ``frombuffer``, ``fromstring``,
``fromfile``, ``fromiter``); ``save`` / ``savez`` write host copies; ``array_repr`` /
``array_str`` print them; the print options are numpy's (blu arrays print through numpy).

None of these can see a traced value: under ``jit`` the readers run once, while tracing, and
their results are constants of the program (numpy's ``fromfile`` / ``fromiter`` consume the
file or iterator then; JAX leaves those two unimplemented for that reason)."""

from __future__ import annotations

from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.array import Array
from blu.core.errors import BluTypeError
from blu.numpy._promote import array

__all__ = [
    "array_repr",
    "array_str",
    "frombuffer",
    "fromfile",
    "fromiter",
    "fromstring",
    "get_printoptions",
    "load",
    "printoptions",
    "save",
    "savez",
    "set_printoptions",
]

get_printoptions = np.get_printoptions
set_printoptions = np.set_printoptions
printoptions = np.printoptions


def _host(a: Any) -> np.ndarray:
    """The host (numpy) value of ``a``; a traced ``a`` raises ConcretizationError."""
    return np.asarray(a)


def _parsed(values: np.ndarray, dtype: Any) -> Any:
    """numpy's parse as a blu array of ``dtype`` taken as blu takes it (``float`` -> float32,
    ``int`` -> int32, as JAX's defaults; sized dtypes stay)."""
    return array(values, dtype=dtype, copy=False)


def array_repr(
    arr: Any, max_line_width: int | None = None, precision: int | None = None,
    suppress_small: bool | None = None,
) -> str:  # fmt: skip
    """numpy's ``array_repr`` of the host value, headed ``Array(`` for a blu array (bfloat16
    values printed as numbers)."""
    host = _host(arr)
    text = np.array_repr(host, max_line_width, precision, suppress_small)
    # numpy spells an ml_dtypes dtype ``dtype=dtype(bfloat16)``
    text = text.replace(f"dtype=dtype({host.dtype.name})", f"dtype={host.dtype.name}")
    if isinstance(arr, Array) and text.startswith("array("):
        text = "Array(" + text[len("array(") :]  # same width: continuation lines stay aligned
    return text


def array_str(
    a: Any, max_line_width: int | None = None, precision: int | None = None,
    suppress_small: bool | None = None,
) -> str:  # fmt: skip
    """numpy's ``array_str`` of the host value."""
    return np.array_str(_host(a), max_line_width, precision, suppress_small)


def save(file: Any, arr: Any, allow_pickle: bool = True) -> None:
    """numpy's ``save`` of the host value (bfloat16 is stored as 2-byte voids; ``load``
    restores it)."""
    np.save(file, _host(arr), allow_pickle=allow_pickle)


def savez(file: Any, *args: Any, allow_pickle: bool = True, **kwds: Any) -> None:
    """numpy's ``savez`` of the host values."""
    np.savez(
        file,
        *(_host(a) for a in args),
        allow_pickle=allow_pickle,
        **{k: _host(v) for k, v in kwds.items()},
    )


def load(file: Any, *args: Any, **kwargs: Any) -> Any:
    """numpy's ``load``: a ``.npy`` array becomes a blu array (2-byte voids, bfloat16 saved by
    ``save``, are read back as bfloat16); ``.npz`` archives and pickled objects come back as
    numpy gives them (JAX's)."""
    out = np.load(file, *args, **kwargs)
    if isinstance(out, np.ndarray):
        if out.dtype == np.dtype("V2"):
            out = out.view(dtypes.bfloat16)
        try:
            return array(out, copy=False)
        except BluTypeError:  # a dtype blu has no arrays of (strings, objects)
            return out
    return out


def frombuffer(buffer: Any, dtype: Any = float, count: int = -1, offset: int = 0) -> Any:
    """A 1-d array of the buffer's bytes read as ``dtype`` (numpy's reading; ``float``, the
    default, reads float64 values and gives blu's float32, as JAX does without x64)."""
    return _parsed(np.frombuffer(buffer, dtype=np.dtype(dtype), count=count, offset=offset), dtype)


def fromstring(string: str, dtype: Any = float, count: int = -1, *, sep: str) -> Any:
    """A 1-d array of the numbers in the text ``string`` separated by ``sep`` (numpy's parse)."""
    return _parsed(np.fromstring(string, dtype=np.dtype(dtype), count=count, sep=sep), dtype)


def fromfile(file: Any, dtype: Any = float, count: int = -1, sep: str = "", offset: int = 0) -> Any:
    """A 1-d array of a file's binary (``sep=""``) or text contents (numpy's ``fromfile``; read
    once, on the host)."""
    values = np.fromfile(file, dtype=np.dtype(dtype), count=count, sep=sep, offset=offset)
    return _parsed(values, dtype)


def fromiter(iter: Any, dtype: Any, count: int = -1) -> Any:  # noqa: A002  (numpy's name)
    """A 1-d array of the iterable's values (numpy's ``fromiter``; it is consumed on the
    host)."""
    return _parsed(np.fromiter(iter, dtype=np.dtype(dtype), count=count), dtype)
