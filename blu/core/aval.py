"""Abstract values: what a tracer knows about the array it stands for (shape, dtype, weak type)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.errors import BluValueError, with_user_line


def canonical_shape(shape: Any) -> tuple[int, ...]:
    """A shape as a tuple of non-negative Python ints.

    Raises:
        BluValueError: a dimension is negative or not an integer.
    """
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        out = tuple(int(operator_index(d)) for d in shape)
    except TypeError as e:
        raise BluValueError(with_user_line(f"shape {shape!r} must be a tuple of ints")) from e
    if any(d < 0 for d in out):
        raise BluValueError(with_user_line(f"shape {out} has a negative dimension"))
    return out


def operator_index(d: Any) -> int:
    import operator

    return operator.index(d)


class ShapedArray:
    """The abstract value of an array: its shape, dtype and whether its dtype is weak.

    Attributes:
        shape: tuple of ints.
        dtype: a supported ``np.dtype``.
        weak_type: True when the value came from a Python scalar and should defer to the other
            operand's dtype in promotion.
    """

    __slots__ = ("shape", "dtype", "weak_type", "_hash")

    def __init__(self, shape: Any, dtype: Any, weak_type: bool = False):
        self.shape = canonical_shape(shape)
        self.dtype = dtypes.canonicalize(dtype)
        self.weak_type = bool(weak_type)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def update(self, shape: Any = None, dtype: Any = None, weak_type: bool | None = None):
        return ShapedArray(
            self.shape if shape is None else shape,
            self.dtype if dtype is None else dtype,
            self.weak_type if weak_type is None else weak_type,
        )

    def strip_weak_type(self) -> ShapedArray:
        return self.update(weak_type=False) if self.weak_type else self

    def str_short(self) -> str:
        """e.g. ``f32[3,4]``."""
        return f"{dtypes.short_name(self.dtype)}[{','.join(map(str, self.shape))}]"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ShapedArray)
            and self.shape == other.shape
            and self.dtype == other.dtype
            and self.weak_type == other.weak_type
        )

    def __hash__(self) -> int:
        try:  # made once: avals are never mutated, and jit hashes every argument's per call
            return self._hash
        except AttributeError:
            h = self._hash = hash((self.shape, self.dtype, self.weak_type))
            return h

    def __repr__(self) -> str:
        weak = ", weak_type=True" if self.weak_type else ""
        return f"ShapedArray({self.str_short()}{weak})"


class ShapeDtypeStruct:
    """A shape and dtype standing for an argument, for ahead-of-time ``jit(f).lower(...)``."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: Any, dtype: Any):
        self.shape = canonical_shape(shape)
        self.dtype = dtypes.canonicalize(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ShapeDtypeStruct) and (self.shape, self.dtype) == (
            other.shape,
            other.dtype,
        )

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype))


_SHAPED: dict[tuple, ShapedArray] = {}


def shaped(shape: tuple[int, ...], dtype: Any, weak_type: bool = False) -> ShapedArray:
    """``ShapedArray(shape, dtype, weak_type)`` for a concrete array's own tuple shape and numpy
    dtype, made once per distinct key (avals are never mutated): a jitted call looks up every
    argument's aval, and a training step has hundreds."""
    key = (shape, dtype, weak_type)
    a = _SHAPED.get(key)
    if a is None:
        if len(_SHAPED) > 65536:  # many distinct shapes (a shape sweep): start over
            _SHAPED.clear()
        a = _SHAPED[key] = ShapedArray(shape, dtype, weak_type)
    return a
