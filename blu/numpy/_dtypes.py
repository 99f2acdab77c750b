"""Dtypes as ``blu.numpy`` attributes, and the dtype functions (result_type, finfo, ...).

``bnp.float32`` is a scalar type as in JAX: it is accepted wherever a dtype is
(``np.dtype(bnp.float32)``, ``x.astype(bnp.float32)``, ``x.dtype == bnp.float32``) and calling
it makes a blu array: ``bnp.float32(1.5)``.
"""

from __future__ import annotations

import abc
from typing import Any

import ml_dtypes
import numpy as np

from blu.core import dtypes
from blu.core.array import Array
from blu.core.errors import BluTypeError, with_user_line
from blu.core.interpreter import Tracer
from blu.numpy._promote import array


class _ScalarMeta(type):
    """Metaclass of the scalar types: ``np.dtype(cls)`` works through ``cls.dtype``."""

    dtype: np.dtype

    def __call__(cls, x: Any) -> Any:
        return array(x, dtype=cls.dtype, copy=False)

    def __eq__(cls, other: Any) -> bool:
        # a dtype compares unequal to what is not a dtype, never raises (the Array API's
        # reporting compares dtypes with arbitrary objects)
        if isinstance(other, _ScalarMeta):
            return cls.dtype == other.dtype
        if other is None or not isinstance(other, (np.dtype, type, str)):
            return False
        try:
            return cls.dtype == np.dtype(other)
        except Exception:  # noqa: BLE001  (np.dtype raises TypeError, ValueError, ...)
            return False

    def __ne__(cls, other: Any) -> bool:
        return not _ScalarMeta.__eq__(cls, other)

    def __hash__(cls) -> int:
        return hash(cls.dtype)

    def __repr__(cls) -> str:
        return f"blu.numpy.{cls.__name__}"


def _make_scalar_type(name: str, dtype: np.dtype) -> _ScalarMeta:
    return _ScalarMeta(name, (), {"dtype": dtype, "__doc__": f"The {dtype} scalar type."})


bool_ = _make_scalar_type("bool_", dtypes.bool_)
int8 = _make_scalar_type("int8", dtypes.int8)
int16 = _make_scalar_type("int16", dtypes.int16)
int32 = _make_scalar_type("int32", dtypes.int32)
int64 = _make_scalar_type("int64", dtypes.int64)
uint8 = _make_scalar_type("uint8", dtypes.uint8)
uint16 = _make_scalar_type("uint16", dtypes.uint16)
uint32 = _make_scalar_type("uint32", dtypes.uint32)
uint64 = _make_scalar_type("uint64", dtypes.uint64)
float16 = _make_scalar_type("float16", dtypes.float16)
bfloat16 = _make_scalar_type("bfloat16", dtypes.bfloat16)
float32 = _make_scalar_type("float32", dtypes.float32)
float64 = _make_scalar_type("float64", dtypes.float64)
complex64 = _make_scalar_type("complex64", dtypes.complex64)
complex128 = _make_scalar_type("complex128", dtypes.complex128)

# numpy's aliases as JAX has them: the same scalar types (``jnp.float_ is jnp.float64``); blu's
# 64-bit types are always on, so ``bnp.float_(1)`` is float64 (JAX's with ``jax_enable_x64``),
# while Python scalars still default to float32 / int32
float_ = double = float64
single = float32
int_ = int64
uint = uint64
complex_ = cdouble = complex128
csingle = complex64

# abstract kinds, for issubdtype (numpy's own; bfloat16 is handled specially)
generic = np.generic
number = np.number
inexact = np.inexact
floating = np.floating
complexfloating = np.complexfloating
integer = np.integer
signedinteger = np.signedinteger
unsignedinteger = np.unsignedinteger

_FLOAT_KINDS = (np.generic, np.number, np.inexact, np.floating)


class ndarray(abc.ABC):  # noqa: B024  (only for isinstance; numpy spells it lowercase)
    """The type of blu arrays *and tracers*, for ``isinstance(x, bnp.ndarray)`` (as
    ``jax.Array``): concrete ``blu.Array`` values and the tracers of every transformation."""


ndarray.register(Array)
ndarray.register(Tracer)


def dtype(x: Any) -> np.dtype:
    """The blu dtype named by ``x`` (a dtype, scalar type, string, Python type or array).

    Raises:
        BluTypeError: not a dtype blu supports.
    """
    if hasattr(x, "dtype") and not isinstance(x, type):
        return dtypes.canonicalize(x.dtype)
    return dtypes.canonicalize(x)


def _weak_python_type(x: Any) -> Any:
    # JAX treats the Python types themselves as weak: result_type(int8, int) is int8
    if x is int:
        return 0
    if x is float:
        return 0.0
    if x is bool:
        return False
    return x


def result_type(*args: Any) -> np.dtype:
    """The dtype that combining ``args`` gives (JAX's promotion lattice; Python scalars and the
    types ``int``/``float`` are weak).

    Args:
        *args: dtypes, scalar types, arrays, tracers or Python scalars.

    Raises:
        BluTypeError: no arguments, or an unsupported dtype.
    """
    return dtypes.result_type(*[_weak_python_type(a) for a in args])


def promote_types(a: Any, b: Any) -> np.dtype:
    """The dtype two (strong) dtypes promote to."""
    return dtypes.result_type(dtype(a), dtype(b))


class FInfo:
    """``finfo``'s result: the standard's attributes as Python numbers (``bits``: int; ``eps``,
    ``max``, ``min``, ``smallest_normal``, ``tiny``: float; ``dtype``: the real float dtype);
    every other attribute of ``ml_dtypes.finfo`` (``resolution``, ``nmant``, ...) as it is."""

    __module__ = "blu.numpy"

    def __init__(self, info: Any):
        self._info = info
        self.bits = int(info.bits)
        self.eps = float(info.eps)
        self.max = float(info.max)
        self.min = float(info.min)
        self.smallest_normal = float(info.smallest_normal)
        self.tiny = self.smallest_normal
        self.dtype = np.dtype(info.dtype)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._info, name)

    def __repr__(self) -> str:
        return f"finfo(resolution={self._info.resolution}, min={self.min:.6g}, " \
               f"max={self.max:.6g}, dtype={self.dtype})"  # fmt: skip


def finfo(x: Any) -> FInfo:
    """Machine limits of a float dtype (bits, eps, max, min, smallest_normal, ... as Python
    numbers, as the Array API says); bfloat16 included. For a complex dtype, the limits of its
    real and imaginary parts (``finfo(complex64)`` is float32's, as numpy)."""
    return FInfo(ml_dtypes.finfo(dtypes.real_dtype(dtype(x))))


def iinfo(x: Any) -> np.iinfo:
    """Machine limits of an integer dtype (bits, min, max)."""
    d = dtype(x)
    if not dtypes.is_int(d):
        raise BluTypeError(with_user_line(f"iinfo needs an integer dtype, got {d}"))
    return np.iinfo(d)


def issubdtype(arg1: Any, arg2: Any) -> bool:
    """numpy's ``issubdtype`` that also knows bfloat16 is a floating type."""
    if (
        isinstance(arg2, type)
        and issubclass(arg2, np.generic)
        and arg2
        in _FLOAT_KINDS
        + (np.integer, np.signedinteger, np.unsignedinteger, np.bool_, np.complexfloating)
    ):
        d1 = dtype(arg1)
        if d1 == dtypes.bfloat16:
            return arg2 in _FLOAT_KINDS
        return bool(np.issubdtype(d1, arg2))
    return dtype(arg1) == dtype(arg2)


def can_cast(from_: Any, to: Any, casting: str = "safe") -> bool:
    """numpy's ``can_cast`` on dtypes (bfloat16 casts safely to float32 and float64)."""
    f, t = dtype(from_), dtype(to)
    if f == dtypes.bfloat16 or t == dtypes.bfloat16:
        if casting == "unsafe" or f == t:
            return True
        return (
            f == dtypes.bfloat16
            and t in (dtypes.float32, dtypes.float64)
            or (t == dtypes.bfloat16 and f in (dtypes.bool_, dtypes.int8, dtypes.uint8))
        )
    return bool(np.can_cast(f, t, casting))
