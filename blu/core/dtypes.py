"""Dtypes and JAX's type-promotion lattice, with weakly typed Python scalars.

blu's dtypes are numpy dtypes (bfloat16 comes from ml_dtypes). Promotion follows JAX's lattice
(https://jax.readthedocs.io/en/latest/type_promotion.html): the result of combining two dtypes is
their least upper bound in

    b1 -> i* -> u8 -> u16 -> u32 -> u64 -> f*
          i* -> i8 -> i16 -> i32 -> i64 -> f*
          u8 -> i16,  u16 -> i32,  u32 -> i64
          f* -> bf16 -> f32,  f* -> f16 -> f32 -> f64
          f* -> c* -> c64 -> c128,  f32 -> c64,  f64 -> c128

where ``i*``, ``f*`` and ``c*`` are the *weak* types of Python ints, floats and complex numbers:
they take the dtype of whatever they meet, so ``x_f16 * 2.0`` stays float16. Unlike JAX, 64-bit
types are always on; Python floats default to float32, Python complex numbers to complex64 and
Python ints to int32, as in JAX.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import ml_dtypes
import numpy as np

from blu.core.errors import BluError, BluTypeError, with_user_line

bool_ = np.dtype(np.bool_)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
uint64 = np.dtype(np.uint64)
float16 = np.dtype(np.float16)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
complex64 = np.dtype(np.complex64)
complex128 = np.dtype(np.complex128)

SUPPORTED = (bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
             float16, bfloat16, float32, float64, complex64, complex128)  # fmt: skip
_SUPPORTED_SET = frozenset(SUPPORTED)

default_float = float32
default_int = int32
default_complex = complex64

_SHORT = {bool_: "bool", int8: "i8", int16: "i16", int32: "i32", int64: "i64", uint8: "u8",
          uint16: "u16", uint32: "u32", uint64: "u64", float16: "f16", bfloat16: "bf16",
          float32: "f32", float64: "f64", complex64: "c64", complex128: "c128"}  # fmt: skip


def short_name(dtype: np.dtype) -> str:
    """'f32', 'bf16', 'i32', ... as printed in jaxprs."""
    return _SHORT.get(dtype, str(dtype))


def canonicalize(dtype: Any) -> np.dtype:
    """Turn anything numpy accepts as a dtype (``'float32'``, ``np.float32``, ``float``) into a
    supported ``np.dtype``.

    Raises:
        BluTypeError: the dtype is not one blu supports (e.g. complex or strings).
    """
    if dtype is float:
        return default_float
    if dtype is int:
        return default_int
    if dtype is bool:
        return bool_
    try:
        d = np.dtype(dtype)
    except TypeError as e:
        raise BluTypeError(with_user_line(f"{dtype!r} is not a dtype")) from e
    if d not in _SUPPORTED_SET:
        names = ", ".join(str(s) for s in SUPPORTED)
        raise BluTypeError(
            with_user_line(f"dtype {d} is not supported by blu (supported: {names})")
        )
    return d


def is_float(dtype: np.dtype) -> bool:
    """True for the real floats float16, bfloat16, float32, float64 (not complex)."""
    return dtype.kind == "f" or dtype == bfloat16


def is_complex(dtype: np.dtype) -> bool:
    """True for complex64 and complex128."""
    return dtype.kind == "c"


def real_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype of the real and imaginary parts: complex64 -> float32, complex128 -> float64;
    other dtypes map to themselves."""
    return {complex64: float32, complex128: float64}.get(dtype, dtype)


def complex_dtype(dtype: np.dtype) -> np.dtype:
    """The complex dtype holding values of a real float dtype: float64 -> complex128, other
    floats (and complex64) -> complex64."""
    return complex128 if dtype in (float64, complex128) else complex64


def is_int(dtype: np.dtype) -> bool:
    """True for signed and unsigned integers (not bool)."""
    return dtype.kind in "iu"


def is_int_scalar(x: Any) -> bool:
    """True for a Python int or a numpy integer scalar, not a ``bool``: the check for an
    argument that is a position, a count or a size (``argnums``, ``static_argnums``,
    ``random.permutation``'s ``n``, ``lax.map``'s ``batch_size``). Arrays, even 0-d ones, are
    not."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def not_an_int(v: Any, what: str, kind: str = "an int") -> BluTypeError:
    """The error for a static integer argument (an axis, a size, a count) that is not one:
    ``{what} must be {kind}, got {v!r}``."""
    return BluTypeError(with_user_line(f"{what} must be {kind}, got {v!r}"))


def index_int(v: Any, what: str, kind: str = "an int") -> int:
    """``operator.index(v)``, numpy's rule for an axis: a Python or numpy integer, a 0-d
    integer array or a bool; not ``1.5`` nor ``'1'``.

    Raises:
        BluTypeError: anything else (:func:`not_an_int`'s message; a traced value's
            concretization error is its cause).
    """
    try:
        return operator.index(v)
    except TypeError as e:
        raise not_an_int(v, what, kind) from e


def static_int(v: Any, what: str) -> int:
    """A static integer argument (an axis, a size, a count): a Python or numpy integer, or an
    integral float (``int(v) == v``), as ``int``.

    Raises:
        BluTypeError: anything else (None, a string, a fractional or non-finite float, a
            non-scalar array); a traced value's concretization error as it is.
    """
    try:
        i = int(v)
        ok = bool(i == v)
    except BluError:
        raise
    except (TypeError, ValueError, OverflowError):  # (OverflowError: int(inf))
        ok = False
    if not ok:
        raise not_an_int(v, what)
    return i


def is_unsigned(dtype: np.dtype) -> bool:
    return dtype.kind == "u"


def is_bool(dtype: np.dtype) -> bool:
    return dtype == bool_


def is_inexact(dtype: np.dtype) -> bool:
    """Dtypes that carry derivatives (real floats and complex)."""
    return is_float(dtype) or dtype.kind == "c"


def finfo(dtype: Any) -> ml_dtypes.finfo:
    """Machine limits of a float dtype (works for bfloat16)."""
    return ml_dtypes.finfo(canonicalize(dtype))


def iinfo(dtype: Any) -> np.iinfo:
    return np.iinfo(canonicalize(dtype))


# ---- the promotion lattice ---------------------------------------------------------------------
# Nodes are dtypes plus the two weak kinds. Edges point from a type to its immediate supertypes.
_WEAK_INT, _WEAK_FLOAT, _WEAK_COMPLEX = "i*", "f*", "c*"
_EDGES: dict[Any, list[Any]] = {
    bool_: [_WEAK_INT],
    _WEAK_INT: [uint8, int8],
    uint8: [uint16, int16],
    uint16: [uint32, int32],
    uint32: [uint64, int64],
    uint64: [_WEAK_FLOAT],
    int8: [int16],
    int16: [int32],
    int32: [int64],
    int64: [_WEAK_FLOAT],
    _WEAK_FLOAT: [bfloat16, float16, _WEAK_COMPLEX],
    bfloat16: [float32],
    float16: [float32],
    float32: [float64, complex64],
    float64: [complex128],
    _WEAK_COMPLEX: [complex64],
    complex64: [complex128],
    complex128: [],
}


@functools.cache
def _upper_bounds(node: Any) -> frozenset:
    out = {node}
    for nxt in _EDGES[node]:
        out |= _upper_bounds(nxt)
    return frozenset(out)


@functools.cache
def _join(a: Any, b: Any) -> Any:
    common = _upper_bounds(a) & _upper_bounds(b)
    # the least upper bound is the common bound that every other common bound is above
    for c in common:
        if all(o in _upper_bounds(c) for o in common):
            return c
    raise AssertionError(f"lattice has no join for {a}, {b}")  # pragma: no cover


def _node(dtype: np.dtype, weak: bool) -> Any:
    if weak and is_int(dtype):
        return _WEAK_INT
    if weak and is_float(dtype):
        return _WEAK_FLOAT
    if weak and is_complex(dtype):
        return _WEAK_COMPLEX
    return dtype


def dtype_and_weak(x: Any) -> tuple[np.dtype, bool]:
    """The dtype and weak-typedness of a value: arrays, tracers, avals, Python scalars or dtypes."""
    if isinstance(x, np.generic):  # before the Python types: np.float64 subclasses float
        return canonicalize(x.dtype), False
    if isinstance(x, bool):
        return bool_, False
    if isinstance(x, int):
        return default_int, True
    if isinstance(x, float):
        return default_float, True
    if isinstance(x, complex):
        return default_complex, True
    if isinstance(x, type):  # a scalar type (np.int32): its ``dtype`` is a descriptor
        return canonicalize(x), False
    dt = getattr(x, "dtype", None)
    if dt is not None:
        return canonicalize(dt), bool(getattr(x, "weak_type", False))
    return canonicalize(x), False


def result_type(*args: Any, return_weak_type: bool = False) -> Any:
    """The dtype that combining ``args`` promotes to (JAX's lattice).

    Args:
        *args: dtypes, arrays, tracers, avals or Python scalars.
        return_weak_type: also return whether the result is weakly typed (all inputs weak).

    Returns:
        ``np.dtype``, or ``(np.dtype, bool)`` with ``return_weak_type``.
    """
    if not args:
        raise BluTypeError("result_type needs at least one argument")
    nodes = []
    for a in args:
        d, w = dtype_and_weak(a)
        nodes.append((_node(d, w), d))
    node = nodes[0][0]
    for n, _ in nodes[1:]:
        node = _join(node, n)
    weak = node in (_WEAK_INT, _WEAK_FLOAT, _WEAK_COMPLEX)
    if node == _WEAK_COMPLEX:
        # a weak complex stays complex128 if any weak input was 64-bit wide (f64 or c128)
        dtype = default_complex
        for n, d in nodes:
            if n in (_WEAK_FLOAT, _WEAK_COMPLEX) and d in (float64, complex128):
                dtype = complex128
    elif node == _WEAK_INT:
        dtype = default_int
    elif node == _WEAK_FLOAT:
        # all inputs weak, or a weak float met ints: default float, unless a weak input
        # was a wider float (a weak f64 stays f64)
        dtype = default_float
        for n, d in nodes:
            if n == _WEAK_FLOAT and d == float64:
                dtype = float64
    else:
        dtype = node
    return (dtype, weak) if return_weak_type else dtype
