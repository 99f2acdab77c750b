"""Comparisons, logical and bitwise functions (numpy's), with broadcasting and promotion.

Comparisons return bool arrays; the logical functions treat nonzero as True; the bitwise ones
take integer or bool arrays, and ``right_shift`` is arithmetic for signed integers and logical
for unsigned ones (as numpy). Shifts by the bit width or more give 0 (or -1 for a negative
signed value shifted right). ``packbits`` packs truth values into the bits of uint8s, ``unpackbits``
takes them out.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer, get_aval
from blu.numpy._promote import (
    asarray_operand,
    canonicalize_axis,
    check_int_or_bool,
    concrete_value,
    promote_args,
)

# fmt: off
__all__ = [
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
    "logical_or", "logical_xor", "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor",
    "bitwise_not", "invert", "left_shift", "right_shift", "packbits",
    "unpackbits", "bitwise_count"
]
# fmt: on


def to_bool(x: Any) -> Any:
    """``x != 0`` (bool arrays are returned as they are)."""
    x = asarray_operand(x)
    aval = get_aval(x)
    return x if aval.dtype == dtypes.bool_ else lax.ne(x, lax.full(aval.shape, 0, aval.dtype))


# ---- comparisons -------------------------------------------------------------------------------


def _comparison(lax_fn: Callable, name: str) -> Callable:
    def fn(x: Any, y: Any) -> Any:
        return lax_fn(*promote_args(x, y))

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise ``{name}`` (bool result; operands promote and broadcast)."
    return fn


equal = _comparison(lambda x, y: lax.eq(x, y), "equal")
not_equal = _comparison(lambda x, y: lax.ne(x, y), "not_equal")
less = _comparison(lambda x, y: lax.lt(x, y), "less")
less_equal = _comparison(lambda x, y: lax.le(x, y), "less_equal")
greater = _comparison(lambda x, y: lax.gt(x, y), "greater")
greater_equal = _comparison(lambda x, y: lax.ge(x, y), "greater_equal")


# ---- logical and bitwise -----------------------------------------------------------------------


def _logical(lax_fn: Callable, name: str) -> Callable:
    def fn(x: Any, y: Any) -> Any:
        return lax_fn(*promote_args(to_bool(x), to_bool(y)))

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise ``{name}`` of the truth values (nonzero is True)."
    return fn


logical_and = _logical(lambda x, y: lax.and_(x, y), "logical_and")
logical_or = _logical(lambda x, y: lax.or_(x, y), "logical_or")
logical_xor = _logical(lambda x, y: lax.xor(x, y), "logical_xor")


def logical_not(x: Any) -> Any:
    """Elementwise NOT of ``x``'s truth values (nonzero is True); bool result."""
    return lax.not_(to_bool(x))


def _bitwise(lax_fn: Callable, name: str) -> Callable:
    def fn(x: Any, y: Any) -> Any:
        x, y = promote_args(x, y)
        check_int_or_bool(name, x)
        return lax_fn(x, y)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise ``{name}`` of integer or bool arrays."
    return fn


bitwise_and = _bitwise(lambda x, y: lax.and_(x, y), "bitwise_and")
bitwise_or = _bitwise(lambda x, y: lax.or_(x, y), "bitwise_or")
bitwise_xor = _bitwise(lambda x, y: lax.xor(x, y), "bitwise_xor")


def invert(x: Any) -> Any:
    """Bitwise not (logical not for bool)."""
    x = asarray_operand(x)
    check_int_or_bool("invert", x)
    return lax.not_(x)


bitwise_not = invert


def bitwise_count(x: Any, /) -> Any:
    """The number of 1 bits in each element's absolute value, as uint8 (numpy's and JAX's
    ``bitwise_count``: ``lax.population_count(abs(x))``; the most negative value of a signed
    type counts its one bit). Bools count as 0 and 1.

    Raises:
        BluTypeError: a float or complex ``x``.
    """
    x = asarray_operand(x)
    aval = get_aval(x)
    if aval.dtype == dtypes.bool_:
        x = lax.convert_element_type(x, dtypes.uint8)
    elif not dtypes.is_int(aval.dtype):
        raise BluTypeError(
            with_user_line(f"bitwise_count needs integer or bool operands, got {aval.str_short()}")
        )
    elif not dtypes.is_unsigned(aval.dtype):
        x = lax.abs(x)
    return lax.convert_element_type(lax.population_count(x), dtypes.uint8)


def _check_int(name: str, x: Any) -> None:
    if not dtypes.is_int(get_aval(x).dtype):
        raise BluTypeError(
            with_user_line(f"{name} needs integer operands, got {get_aval(x).str_short()}")
        )


def left_shift(x: Any, y: Any) -> Any:
    """``x << y`` (shifts of the bit width or more give 0)."""
    x, y = promote_args(x, y)
    _check_int("left_shift", x)
    return lax.shift_left(x, y)


def right_shift(x: Any, y: Any) -> Any:
    """``x >> y``: arithmetic for signed integers, logical for unsigned (as numpy)."""
    x, y = promote_args(x, y)
    _check_int("right_shift", x)
    if dtypes.is_unsigned(get_aval(x).dtype):
        return lax.shift_right_logical(x, y)
    return lax.shift_right_arithmetic(x, y)


def _bits_axis_last(a: Any, axis: Any, bitorder: str, name: str) -> tuple[Any, tuple[int, ...]]:
    """``a`` (raveled when ``axis`` is None) with ``axis`` moved last, and the permutation
    that moves it back.

    Raises:
        BluValueError: ``bitorder`` other than 'big' or 'little'. BluAxisError: a bad axis.
    """
    if bitorder not in ("big", "little"):
        raise BluValueError(
            with_user_line(f"{name}: bitorder must be 'big' or 'little', got {bitorder!r}")
        )
    aval = get_aval(a)
    if axis is None:
        return lax.reshape(a, (aval.size,)), (0,)
    ax = canonicalize_axis(axis, aval.ndim, name)
    perm = tuple(i for i in range(aval.ndim) if i != ax) + (ax,)
    back = tuple(perm.index(i) for i in range(aval.ndim))
    return lax.transpose(a, perm), back


def _bit_shifts(shape: tuple[int, ...], bitorder: str) -> Any:
    """uint8 shifts 7..0 ('big': the first element is the most significant bit) or 0..7 along
    the last axis of ``shape``."""
    shifts = lax.iota(dtypes.uint8, shape, len(shape) - 1)
    return lax.sub(lax.full(shape, 7, dtypes.uint8), shifts) if bitorder == "big" else shifts


def packbits(a: Any, axis: int | None = None, bitorder: str = "big") -> Any:
    """The truth values (nonzero) of ``a`` packed 8 to a uint8 along ``axis`` (the raveled
    ``a`` when None), the last byte padded with zero bits (``jax.numpy.packbits``; numpy's
    rule that every nonzero value, negative ones too, is a 1 bit).

    Raises:
        BluTypeError: ``a`` is neither integer nor bool. BluValueError: a bad ``bitorder``.
        BluAxisError: ``axis`` out of range.
    """
    a = asarray_operand(a)
    aval = get_aval(a)
    if not (dtypes.is_int(aval.dtype) or aval.dtype == dtypes.bool_):
        raise BluTypeError(
            with_user_line(f"packbits: a must be integer or bool, got {aval.str_short()}")
        )
    x, back = _bits_axis_last(a, axis, bitorder, "packbits")
    shape = get_aval(x).shape
    bits = lax.convert_element_type(lax.ne(x, lax.full(shape, 0, aval.dtype)), dtypes.uint8)
    n, nd = shape[-1], len(shape)
    if n % 8:
        zero = lax.full((), 0, dtypes.uint8)
        bits = lax.pad(bits, zero, [(0, 0, 0)] * (nd - 1) + [(0, -n % 8, 0)])
    grouped = shape[:-1] + (-(-n // 8), 8)
    bits = lax.reshape(bits, grouped)
    packed = lax.reduce_sum(lax.shift_left(bits, _bit_shifts(grouped, bitorder)), (nd,))
    return lax.transpose(packed, back)


def unpackbits(
    a: Any, axis: int | None = None, count: int | None = None, bitorder: str = "big"
) -> Any:
    """The bits of the uint8 ``a`` as uint8 0/1 values, 8 per element along ``axis`` (the
    raveled ``a`` when None), as ``jax.numpy.unpackbits``.

    ``count`` (static) keeps that many bits along the axis, zero-padding past the end; a
    negative one drops ``-count`` bits from the end (numpy's).

    Raises:
        BluTypeError: ``a`` is not uint8, or a non-integer ``count``. BluValueError: a bad
        ``bitorder``, or ``-count`` more than the bits. BluAxisError: ``axis`` out of range.
        ConcretizationError: a traced ``count``.
    """
    a = asarray_operand(a)
    aval = get_aval(a)
    if aval.dtype != dtypes.uint8:
        raise BluTypeError(with_user_line(f"unpackbits: a must be uint8, got {aval.str_short()}"))
    x, back = _bits_axis_last(a, axis, bitorder, "unpackbits")
    shape = get_aval(x).shape
    nd, m = len(shape), 8 * shape[-1]
    spread = shape + (8,)
    x = lax.broadcast_in_dim(x, spread, tuple(range(nd)))
    bits = lax.shift_right_logical(x, _bit_shifts(spread, bitorder))
    bits = lax.and_(bits, lax.full(spread, 1, dtypes.uint8))
    bits = lax.reshape(bits, shape[:-1] + (m,))
    if count is not None:
        if isinstance(count, Tracer):
            concrete_value(count, "unpackbits (count)")
        try:
            c = operator.index(count)
        except TypeError:
            raise BluTypeError(
                with_user_line(f"unpackbits: count must be an int, got {count!r}")
            ) from None
        if c < -m:
            raise BluValueError(
                with_user_line(
                    f"unpackbits: -count ({-c}) is more than the {m} bits along the axis"
                )
            )
        keep = c if c >= 0 else m + c
        if keep <= m:
            bits = lax.slice_in_dim(bits, 0, keep, axis=nd - 1)
        else:
            zero = lax.full((), 0, dtypes.uint8)
            bits = lax.pad(bits, zero, [(0, 0, 0)] * (nd - 1) + [(0, keep - m, 0)])
    return lax.transpose(bits, back)
