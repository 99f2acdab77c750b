"""Bitwise primitives on integers and bools: and/or/xor/not, shifts, bit counts, bitcasts; and
``reduce_precision`` and ``nextafter``, float operations composed of them, and ``mulhi`` (the
high half of integer products, composed of products, shifts and masks).

These are what a counter-based RNG (threefry2x32) is made of. Shifts follow XLA, not C/numpy:
the shift amount is read as unsigned, and an amount of at least the bit width shifts every bit
out (0 for the left and logical shifts, the sign for the arithmetic one). None of these is
differentiable: their JVPs give zero tangents.
"""

from __future__ import annotations

__all__ = [  # public lax functions; keep in sync
    "and_",
    "or_",
    "xor",
    "not_",
    "shift_left",
    "shift_right_logical",
    "shift_right_arithmetic",
    "population_count",
    "clz",
    "mulhi",
    "bitcast_convert_type",
    "reduce_precision",
    "nextafter",
]

import functools
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax._base import is_int, is_int_or_bool
from blu.lax.casts import convert_element_type
from blu.lax.elementwise import add, binary, eq, gt, le, lt, mul, ne, operands, select, sub, unary
from blu.lax.shapes import full_like
from blu.transforms.ad_ops import stop_gradient
from blu.transforms.ad_util import nondifferentiable
from blu.transforms.batching import moveaxis
from blu.transforms.custom_derivatives import custom_jvp


def _bits(dtype: np.dtype) -> int:
    return dtype.itemsize * 8


def _unsigned(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"u{dtype.itemsize}")


def _signed(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"i{dtype.itemsize}")


def _as(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Reinterpret the bits of ``x`` as ``dtype`` (same width)."""
    x = np.asarray(x)
    # (not np.ascontiguousarray: it turns 0-d arrays into 1-d ones)
    return (x if x.flags.c_contiguous else x.copy()).view(dtype)


# ---- logical -----------------------------------------------------------------------------------

_BOOL_OR_INT = "integer or bool"

and_p = binary("and", np.bitwise_and, is_int_or_bool, _BOOL_OR_INT)
or_p = binary("or", np.bitwise_or, is_int_or_bool, _BOOL_OR_INT)
xor_p = binary("xor", np.bitwise_xor, is_int_or_bool, _BOOL_OR_INT)
not_p = unary("not", np.invert, is_int_or_bool, _BOOL_OR_INT)  # on bool: logical not


# ---- shifts ------------------------------------------------------------------------------------


def _amount(y: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """The shift amount as unsigned (so a negative amount is huge), clamped below the width,
    and the mask of amounts that shift every bit out."""
    u = _as(y, _unsigned(y.dtype))
    out_of_range = u >= bits
    return np.where(out_of_range, 0, u).astype(u.dtype), out_of_range


def _shift_left_impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    ux = _as(x, _unsigned(x.dtype))  # unsigned: no overflow questions
    amt, out_of_range = _amount(y, _bits(x.dtype))
    out = np.where(out_of_range, 0, np.left_shift(ux, amt)).astype(ux.dtype)
    return _as(out, x.dtype)


def _shift_right_logical_impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    ux = _as(x, _unsigned(x.dtype))  # zeros come in from the left
    amt, out_of_range = _amount(y, _bits(x.dtype))
    out = np.where(out_of_range, 0, np.right_shift(ux, amt)).astype(ux.dtype)
    return _as(out, x.dtype)


def _shift_right_arithmetic_impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    sx = _as(x, _signed(x.dtype))  # copies of the sign bit come in from the left
    bits = _bits(x.dtype)
    amt, out_of_range = _amount(y, bits)
    amt = np.where(out_of_range, bits - 1, amt).astype(sx.dtype)
    return _as(np.right_shift(sx, amt).astype(sx.dtype), x.dtype)


shift_left_p = binary("shift_left", _shift_left_impl, is_int, "integer")
shift_right_logical_p = binary("shift_right_logical", _shift_right_logical_impl, is_int, "integer")
shift_right_arithmetic_p = binary(
    "shift_right_arithmetic", _shift_right_arithmetic_impl, is_int, "integer"
)


# ---- bit counts --------------------------------------------------------------------------------


def _population_count_impl(x: np.ndarray) -> np.ndarray:
    # np.bitwise_count counts the bits of |x|: count the two's-complement bits instead
    return np.bitwise_count(_as(x, _unsigned(x.dtype))).astype(x.dtype)


def _clz_impl(x: np.ndarray) -> np.ndarray:
    """Leading zeros by binary search: halve the window while its upper half is empty."""
    u = _as(x, _unsigned(x.dtype)).copy()
    count = np.zeros(u.shape, np.int64)
    width = _bits(x.dtype) // 2
    while width:
        empty = (u >> u.dtype.type(_bits(x.dtype) - width)) == 0
        count += np.where(empty, width, 0)
        u = np.where(empty, u << u.dtype.type(width), u).astype(u.dtype)
        width //= 2
    count += u == 0  # the last bit
    return count.astype(x.dtype)


population_count_p = unary("population_count", _population_count_impl, is_int, "integer")
clz_p = unary("clz", _clz_impl, is_int, "integer")

for _p in (and_p, or_p, xor_p, not_p, shift_left_p, shift_right_logical_p,
           shift_right_arithmetic_p, population_count_p, clz_p):  # fmt: skip
    nondifferentiable(_p)


# ---- bitcast -----------------------------------------------------------------------------------

bitcast_convert_type_p = Primitive("bitcast_convert_type")


@bitcast_convert_type_p.def_impl
def _bitcast_impl(x: np.ndarray, *, new_dtype: np.dtype) -> np.ndarray:
    x = np.asarray(x)
    x = x if x.flags.c_contiguous else x.copy()
    old, new = x.dtype.itemsize, new_dtype.itemsize
    if old == new:
        return x.view(new_dtype)
    if old > new:  # each element becomes old/new narrower ones along a new trailing axis
        return x.reshape(x.shape + (1,)).view(new_dtype)
    return x.view(new_dtype).reshape(x.shape[:-1])  # the trailing axis of new/old is consumed


@bitcast_convert_type_p.def_abstract_eval
def _bitcast_abstract_eval(x: ShapedArray, *, new_dtype: np.dtype) -> ShapedArray:
    if dtypes.is_bool(x.dtype) or dtypes.is_bool(new_dtype):
        raise BluTypeError(
            with_user_line(
                f"bitcast_convert_type: bool has no bit layout to reinterpret, got "
                f"{x.str_short()} -> {dtypes.short_name(new_dtype)}"
            )
        )
    old, new = x.dtype.itemsize, new_dtype.itemsize
    if old == new:
        shape = x.shape
    elif old > new:
        shape = x.shape + (old // new,)
    elif x.shape and x.shape[-1] == new // old:
        shape = x.shape[:-1]
    else:
        raise BluShapeError(
            with_user_line(
                f"bitcast_convert_type: {x.str_short()} -> {dtypes.short_name(new_dtype)} needs "
                f"a last axis of size {new // old} to combine into one wider element"
            )
        )
    return ShapedArray(shape, new_dtype, False)


@bitcast_convert_type_p.def_batch
def _bitcast_batch(axis_size, args, dims, *, new_dtype):
    (x,), (d,) = args, dims
    # a wider target consumes the last axis: that must not be the batch axis
    if new_dtype.itemsize > get_aval(x).dtype.itemsize and d == get_aval(x).ndim - 1:
        x, d = moveaxis(x, d, 0), 0
    return bitcast_convert_type_p.bind(x, new_dtype=new_dtype), d


nondifferentiable(bitcast_convert_type_p)


# ---- the lax functions users call --------------------------------------------------------------
# Operands of equal shape and dtype (Python ints adapt to the other operand).


def and_(x: Any, y: Any) -> Any:
    """Bitwise and of integers; logical and of bools."""
    return and_p.bind(*operands(x, y))


def or_(x: Any, y: Any) -> Any:
    """Bitwise or of integers; logical or of bools."""
    return or_p.bind(*operands(x, y))


def xor(x: Any, y: Any) -> Any:
    """Bitwise exclusive or of integers; logical xor of bools."""
    return xor_p.bind(*operands(x, y))


def not_(x: Any) -> Any:
    """Bitwise complement of integers (``~x``); logical not of bools."""
    return not_p.bind(x)


def shift_left(x: Any, y: Any) -> Any:
    """``x << y`` (integers); 0 where ``y`` (read as unsigned) is at least the bit width."""
    return shift_left_p.bind(*operands(x, y))


def shift_right_logical(x: Any, y: Any) -> Any:
    """``x >> y`` filling with zeros, whatever the signedness of ``x``; 0 where ``y`` (read as
    unsigned) is at least the bit width."""
    return shift_right_logical_p.bind(*operands(x, y))


def shift_right_arithmetic(x: Any, y: Any) -> Any:
    """``x >> y`` filling with copies of the sign bit (the top bit, also for unsigned ``x``);
    where ``y`` (read as unsigned) is at least the bit width, every bit is the sign bit."""
    return shift_right_arithmetic_p.bind(*operands(x, y))


def population_count(x: Any) -> Any:
    """The number of set bits of each element (of its two's-complement form), in x's dtype."""
    return population_count_p.bind(x)


def clz(x: Any) -> Any:
    """The number of leading zero bits of each element (the bit width for 0), in x's dtype."""
    return clz_p.bind(x)


def mulhi(x: Any, y: Any) -> Any:
    """The high half of each integer product ``x * y`` taken at twice the width (JAX's
    ``lax.mulhi``): ``(x * y) >> bits`` exactly, signed for signed integers.

    8-, 16- and 32-bit operands multiply in the integer type of twice their width; 64-bit ones
    in 32-bit halves (the schoolbook product of four partial products, in uint64), the signed
    high half corrected from the unsigned one by ``- (x < 0) * y - (y < 0) * x``.

    Raises:
        BluTypeError: bool or non-integer operands, or operands of two dtypes.
    """
    x, y = operands(x, y)
    ax, ay = get_aval(x), get_aval(y)
    if ax.dtype != ay.dtype or not dtypes.is_int(ax.dtype):
        raise BluTypeError(
            with_user_line(
                f"mulhi needs integer operands of one dtype, got {ax.str_short()} and "
                f"{ay.str_short()}"
            )
        )
    dt = ax.dtype
    bits = _bits(dt)
    if bits < 64:
        wide = np.dtype(f"{dt.kind}{2 * dt.itemsize}")
        p = mul(convert_element_type(x, wide), convert_element_type(y, wide))
        shift = shift_right_logical if dt.kind == "u" else shift_right_arithmetic
        return convert_element_type(shift(p, full_like(p, bits)), dt)
    u = _unsigned(dt)
    a, b = bitcast_convert_type(x, u), bitcast_convert_type(y, u)
    mask, k32 = full_like(a, 0xFFFFFFFF), full_like(a, 32)
    a0, a1 = and_(a, mask), shift_right_logical(a, k32)
    b0, b1 = and_(b, mask), shift_right_logical(b, k32)
    t = add(mul(a1, b0), shift_right_logical(mul(a0, b0), k32))
    low, carry = and_(t, mask), shift_right_logical(t, k32)
    t = add(mul(a0, b1), low)
    hi = add(add(mul(a1, b1), carry), shift_right_logical(t, k32))
    if dt.kind == "u":
        return hi
    zero = full_like(a, 0)
    hi = sub(hi, select(lt(x, full_like(x, 0)), b, zero))
    hi = sub(hi, select(lt(y, full_like(y, 0)), a, zero))
    return bitcast_convert_type(hi, dt)


def bitcast_convert_type(x: Any, new_dtype: Any) -> Any:
    """Reinterpret the bits of ``x`` as ``new_dtype`` (e.g. uint32 <-> float32).

    Shapes: same width: unchanged. Narrower target (e.g. u32 -> u8, ratio ``r``): ``x.shape +
    (r,)``, the element's bytes in memory order (little-endian: least significant first).
    Wider target: the last axis of ``x`` must have size ``r`` and is consumed.

    Raises:
        BluTypeError: bool on either side.
        BluShapeError: a wider target without a last axis of size ``r``.
    """
    new_dtype = dtypes.canonicalize(new_dtype)
    if get_aval(x).dtype == new_dtype:
        return x
    return bitcast_convert_type_p.bind(x, new_dtype=new_dtype)


# ---- reduce_precision --------------------------------------------------------------------------

# a float dtype's (exponent bits, explicit mantissa bits)
_FLOAT_BITS = {"float16": (5, 10), "bfloat16": (8, 7), "float32": (8, 23), "float64": (11, 52)}


def _reduce_precision_bits(x: Any, exponent_bits: int, mantissa_bits: int) -> Any:
    """XLA's ReducePrecision on the bits: round the mantissa to nearest even, then send
    exponents above the reduced range to a signed infinity and those below its normal range to
    a signed zero (the reduced format has no subnormals); NaN stays the operand."""
    dtype = get_aval(x).dtype
    src_e, src_m = _FLOAT_BITS[dtype.name]
    width = _bits(dtype)
    bits = bitcast_convert_type(x, _unsigned(dtype))

    def const(v: int) -> Any:
        return full_like(bits, v)

    if mantissa_bits < src_m:
        shift = src_m - mantissa_bits
        last = 1 << shift  # the lowest mantissa bit kept
        last_kept = shift_right_logical(and_(bits, const(last)), const(shift))
        # half the dropped range, less one, plus the kept bit: ties go to the even neighbour
        bias = add(last_kept, const((last >> 1) - 1))
        bits = and_(add(bits, bias), const(((1 << width) - 1) & ~(last - 1)))
    if exponent_bits < src_e:
        exp_mask = ((1 << src_e) - 1) << src_m
        src_bias, bias = (1 << (src_e - 1)) - 1, (1 << (exponent_bits - 1)) - 1
        exponent = and_(bits, const(exp_mask))
        overflows = gt(exponent, const((src_bias + bias) << src_m))
        underflows = le(exponent, const((src_bias - bias) << src_m))
        signed_zero = and_(bits, const(1 << (width - 1)))
        signed_inf = or_(signed_zero, const(exp_mask))
        bits = select(overflows, signed_inf, select(underflows, signed_zero, bits))
    return select(ne(x, x), x, bitcast_convert_type(bits, dtype))


@functools.cache
def _reduce_precision_fn(exponent_bits: int, mantissa_bits: int) -> custom_jvp:
    @custom_jvp
    def rounded(x: Any) -> Any:
        return _reduce_precision_bits(x, exponent_bits, mantissa_bits)

    # the rounding is a step function; its derivative is taken as the identity (JAX's rounds
    # the tangent too, reduce_precision(t), which has no transpose here: the bitcasts are not
    # linear)
    rounded.defjvps(lambda t, out, x: t)
    return rounded


def reduce_precision(operand: Any, exponent_bits: int, mantissa_bits: int) -> Any:
    """Round ``operand`` to the floats of ``exponent_bits`` exponent bits and ``mantissa_bits``
    explicit mantissa bits, keeping its dtype (``jax.lax.reduce_precision``; XLA's
    ReducePrecision).

    The mantissa is rounded to nearest, ties to even; a result beyond the reduced format's
    largest finite value is a signed infinity, one below its smallest normal value
    (``2**(2 - 2**(exponent_bits - 1))``) a signed zero: the reduced format has no subnormals
    (with as many exponent bits as the operand's dtype nothing is flushed, its subnormals are
    rounded at their own spacing). NaN and infinities are kept. So ``(8, 7)`` on float32 is
    bfloat16's rounding and ``(5, 10)`` float16's in float16's normal range. Bits beyond the
    dtype's own are no-ops. The derivative is taken as the identity.

    Args:
        operand: float array (float16, bfloat16, float32, float64).
        exponent_bits: at least 1.
        mantissa_bits: at least 0.

    Returns:
        An array of ``operand``'s shape and dtype.

    Raises:
        BluTypeError: ``operand`` is not a real float array, or a bit count is not an int.
        BluValueError: ``exponent_bits < 1`` or ``mantissa_bits < 0``.
    """
    exponent_bits = dtypes.static_int(exponent_bits, "reduce_precision: exponent_bits")
    mantissa_bits = dtypes.static_int(mantissa_bits, "reduce_precision: mantissa_bits")
    (operand,) = operands(operand)
    aval = get_aval(operand)
    if aval.dtype.name not in _FLOAT_BITS:
        raise BluTypeError(
            with_user_line(f"reduce_precision: needs a real float operand, got {aval.str_short()}")
        )
    if exponent_bits < 1 or mantissa_bits < 0:
        raise BluValueError(
            with_user_line(
                f"reduce_precision: exponent_bits must be at least 1 and mantissa_bits at least "
                f"0, got exponent_bits={exponent_bits}, mantissa_bits={mantissa_bits}"
            )
        )
    src_e, src_m = _FLOAT_BITS[aval.dtype.name]
    if exponent_bits >= src_e and mantissa_bits >= src_m:
        return operand
    return _reduce_precision_fn(exponent_bits, mantissa_bits)(operand)


# ---- nextafter ---------------------------------------------------------------------------------


def nextafter(x1: Any, x2: Any) -> Any:
    """The next float after ``x1`` in the direction of ``x2``, elementwise
    (``jax.lax.nextafter``; C's and ``numpy.nextafter``): one step of the float's bits away
    from or towards zero. ``x2`` where ``x1 == x2``, the smallest subnormal of ``x2``'s sign
    from a zero, NaN where either is NaN; the largest finite float steps to infinity and back.
    Not differentiable: its derivative is zero.

    Args:
        x1, x2: float arrays of one shape and dtype (a Python scalar takes the other's).

    Returns:
        An array of their shape and dtype.

    Raises:
        BluTypeError: not real float operands of one dtype.
        BluShapeError: operands of different shapes.
    """
    x1, x2 = operands(x1, x2)
    a1, a2 = get_aval(x1), get_aval(x2)
    got = f"got {a1.str_short()}, {a2.str_short()}"
    if a1.dtype.name not in _FLOAT_BITS or a1.dtype != a2.dtype:
        raise BluTypeError(with_user_line(f"nextafter: needs real floats of one dtype, {got}"))
    if a1.shape != a2.shape:
        raise BluShapeError(with_user_line(f"nextafter: operands must have one shape, {got}"))
    x1, x2 = stop_gradient(x1), stop_gradient(x2)
    same = eq(x1, x2)
    udt = _unsigned(a1.dtype)
    bits, bits2 = bitcast_convert_type(x1, udt), bitcast_convert_type(x2, udt)
    one, zero = full_like(bits, 1), full_like(x1, 0)
    sign = full_like(bits, 1 << (_bits(a1.dtype) - 1))
    away_from_zero = ne(lt(x1, x2), lt(x1, zero))  # |x1| grows on the way to x2
    stepped = select(away_from_zero, add(bits, one), sub(bits, one))
    from_zero = or_(and_(bits2, sign), one)  # the smallest subnormal, x2's sign
    out = bitcast_convert_type(select(eq(x1, zero), from_zero, stepped), a1.dtype)
    nan = or_(ne(x1, x1), ne(x2, x2))
    return select(nan, add(x1, x2), select(same, x2, out))
