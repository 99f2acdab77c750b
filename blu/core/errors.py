"""The BluError family and helpers that point errors at the user's source line."""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

_BLU_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class BluError(Exception):
    """Base class of every error blu raises on purpose."""


class BluTypeError(BluError, TypeError):
    """Wrong dtype, or a value of the wrong kind (e.g. a tracer where a Python bool is needed)."""


class BluShapeError(BluError, ValueError):
    """Shapes that do not fit the operation."""


class BluValueError(BluError, ValueError):
    """A bad argument value (axis out of range, negative size, ...)."""


class LinAlgError(BluValueError, np.linalg.LinAlgError):
    """A degenerate matrix met with ``blu.config.debug_nans`` on (singular, not positive
    definite, non-convergent)."""


class BluIndexError(BluError, IndexError):
    """An index out of range where it can be checked (e.g. ``take(..., mode="raise")``)."""


class BluAxisError(BluValueError, IndexError):
    """An axis out of range for an array's rank (both a ValueError and an IndexError, as
    numpy's ``AxisError``; the Array API expects an IndexError)."""


class BluOutOfMemoryError(BluError, MemoryError):
    """An allocation that cannot fit: names the shape, dtype, bytes and the user's line."""


def out_of_memory(shape: tuple, dtype: object, what: str, cause: str = "") -> BluOutOfMemoryError:
    """A ``BluOutOfMemoryError`` for an array of ``shape`` and ``dtype`` (bytes computed with
    Python ints: no overflow), pointing at the user's line."""
    dt = np.dtype(dtype)  # type: ignore[call-overload]
    n = 1
    for d in shape:
        n *= int(d)
    nbytes = n * dt.itemsize
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"]
    k = 0
    size = float(nbytes)
    while size >= 1024 and k < len(units) - 1:
        size, k = size / 1024, k + 1
    if any(int(d) >= 2**63 for d in shape):
        why = "a dimension past 2**63 - 1, more than a 64-bit index can hold"
    elif nbytes >= 2**63:
        why = "more than a 64-bit address space can hold"
    else:
        why = "more memory than is available"
    return BluOutOfMemoryError(
        with_user_line(
            f"{what}: cannot allocate {dt.name}{list(shape)}, {size:.1f} {units[k]} "
            f"({nbytes:,} bytes): {why}" + (f" ({cause})" if cause else "")
        )
    )


class ConcretizationError(BluTypeError):
    """A traced value was used where a concrete Python value is needed."""


class EscapedTracerError(BluError):
    """A tracer was used after the transformation that created it had finished."""


def _user_frame_object() -> Any:
    """The innermost stack frame outside the blu package, or None."""
    frame = sys._getframe(1)
    internal = _INTERNAL
    while frame is not None:
        name = frame.f_code.co_filename
        inside = internal.get(name)
        if inside is None:
            inside = _is_internal(name)
        if not inside:
            return frame
        frame = frame.f_back
    return None


def user_frame() -> str:
    """Return 'file:line (function)' of the innermost stack frame outside the blu package.

    Used in error messages and in jaxpr source info, so the user sees *their* line.
    """
    frame = _user_frame_object()
    if frame is None:
        return "<unknown>"
    return f"{frame.f_code.co_filename}:{frame.f_lineno} ({frame.f_code.co_name})"


def user_site() -> Any:
    """What ``user_frame`` names, read without making its text (``format_site`` makes it): the
    code object and last instruction of the innermost frame outside blu, or None. For a message
    made only if it is ever shown (a donated array's deletion, at every training step)."""
    frame = _user_frame_object()
    return None if frame is None else (frame.f_code, frame.f_lasti)


def format_site(site: Any) -> str:
    """``user_frame``'s text for a ``user_site`` result."""
    if site is None:
        return "<unknown>"
    code, lasti = site
    line = code.co_firstlineno
    for start, end, n in code.co_lines():
        if start <= lasti < end and n is not None:
            line = n
            break
    return f"{code.co_filename}:{line} ({code.co_name})"


# file name -> inside blu: a plain dict read first (a donated jit call names its caller's line
# at every call: ``functools.lru_cache``'s wrapper cost more than the dict)
_INTERNAL: dict[str, bool] = {}
INTERNAL_FILES = _INTERNAL  # (read inline by jit's fast path: whether its caller's file is blu's)


def _is_internal(filename: str) -> bool:
    inside = os.path.abspath(filename).startswith(_BLU_DIR) or filename.startswith("<frozen")
    if len(_INTERNAL) >= 4096:
        _INTERNAL.clear()
    _INTERNAL[filename] = inside
    return inside


def with_user_line(msg: str) -> str:
    """Append the user's source line to an error message."""
    return f"{msg}\n  at {user_frame()}"
