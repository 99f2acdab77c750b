"""Elementwise arithmetic (numpy's ufuncs): +, -, *, /, //, %, powers, absolute values, rounding,
extrema and clip, the three-argument ``where``, floating-point classification (``isnan``, ...)
and ``isclose``; with broadcasting and JAX's dtype promotion. Exponentials, logarithms, roots
and the trigonometric and hyperbolic functions are in ``transcendental``.

Each is a composition of ``blu.lax`` elementwise primitives; functions numpy defines with
particular semantics keep them: ``floor_divide`` rounds toward -inf and ``mod`` takes the sign
of the divisor (for integers and floats, as numpy's ``divmod``), ``round`` rounds half to even,
integer division by zero gives 0. Functions of floats (``true_divide``, ``reciprocal``, ...)
turn integer and bool inputs into the default float (float32).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluTypeError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import (
    asarray_operand,
    broadcast_shapes,
    broadcast_to,
    is_python_scalar,
    promote_args,
    promote_args_inexact,
    promote_args_numeric,
    promote_dtypes,
    scalar_array,
    to_inexact,
)
from blu.numpy.logic import (
    equal,
    greater,
    less,
    less_equal,
    logical_and,
    logical_or,
    not_equal,
    to_bool,
)

# fmt: off
__all__ = [
    "add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "mod", "remainder",
    "fmod", "divmod", "power", "float_power", "negative", "positive", "abs", "absolute", "fabs",
    "sign", "square", "reciprocal", "floor", "ceil", "trunc", "fix", "rint", "round", "around",
    "maximum", "minimum", "fmax", "fmin", "clip", "isfinite", "isnan", "isinf", "signbit",
    "copysign", "nan_to_num", "isclose",
]
# fmt: on


def _is_float(x: Any) -> bool:
    return dtypes.is_float(get_aval(x).dtype)


def _is_complex(x: Any) -> bool:
    return dtypes.is_complex(get_aval(x).dtype)


def _check_real(name: str, x: Any) -> None:
    """Raise BluTypeError for complex ``x`` (an ordering or rounding of reals)."""
    if _is_complex(x):
        raise BluTypeError(
            with_user_line(f"{name} is not defined for complex numbers ({get_aval(x).str_short()})")
        )


def _is_bool(x: Any) -> bool:
    return get_aval(x).dtype == dtypes.bool_


def _is_unsigned(x: Any) -> bool:
    return dtypes.is_unsigned(get_aval(x).dtype)


def _zeros(x: Any) -> Any:
    aval = get_aval(x)
    return lax.full(aval.shape, 0, aval.dtype)


def _bools(x: Any, value: bool) -> Any:
    return lax.full(get_aval(x).shape, value, dtypes.bool_)


# ---- arithmetic --------------------------------------------------------------------------------


def add(x: Any, y: Any) -> Any:
    """``x + y`` (for bool, logical or, like numpy)."""
    x, y = promote_args(x, y)
    return lax.or_(x, y) if _is_bool(x) else lax.add(x, y)


def subtract(x: Any, y: Any) -> Any:
    """``x - y`` (not defined for bool)."""
    return lax.sub(*promote_args_numeric("subtract", x, y))


def multiply(x: Any, y: Any) -> Any:
    """``x * y`` (for bool, logical and)."""
    x, y = promote_args(x, y)
    return lax.and_(x, y) if _is_bool(x) else lax.mul(x, y)


def true_divide(x: Any, y: Any) -> Any:
    """``x / y`` in floating point (integers become float32)."""
    return lax.div(*promote_args_inexact(x, y))


divide = true_divide


def _float_divmod(x: Any, y: Any) -> tuple[Any, Any]:
    # numpy's npy_divmod: the quotient from (x - fmod(x, y)) / y, adjusted toward -inf
    mod = lax.rem(x, y)
    div = true_divide(subtract(x, mod), y)
    adjust = logical_and(not_equal(mod, 0), not_equal(less(y, 0), less(mod, 0)))
    mod = _where(adjust, add(mod, y), mod)
    div = _where(adjust, subtract(div, 1), div)
    fl = lax.floor(div)
    fl = _where(greater(subtract(div, fl), 0.5), add(fl, 1), fl)
    # signed zeros as numpy's npy_divmod: a zero remainder takes the divisor's sign, a zero
    # quotient the sign of x / y
    zero = _zeros(x)
    quot = lax.div(x, y)
    mod = _where(equal(mod, 0), copysign(zero, y), mod)
    fl = _where(equal(fl, 0), copysign(zero, quot), fl)
    # the Array API: inf // finite is a signed inf (numpy gives NaN; the remainder stays NaN),
    # finite // inf a signed zero (numpy and Python give -1 for opposite signs)
    fl = _where(logical_and(isinf(x), isfinite(y)), quot, fl)
    fl = _where(logical_and(isfinite(x), isinf(y)), quot, fl)
    y_zero = equal(y, 0)
    return _where(y_zero, quot, fl), mod


def _int_divmod(x: Any, y: Any) -> tuple[Any, Any]:
    y_zero = lax.eq(y, _zeros(y))
    safe_y = lax.select(y_zero, lax.full_like(y, 1), y)
    q, r = lax.div(x, safe_y), lax.rem(x, safe_y)
    if not _is_unsigned(x):
        adjust = logical_and(not_equal(r, 0), not_equal(less(x, 0), less(y, 0)))
        q = _where(adjust, subtract(q, 1), q)
        r = _where(adjust, add(r, y), r)
    return lax.select(y_zero, _zeros(q), q), lax.select(y_zero, _zeros(r), r)


def divmod(x: Any, y: Any) -> tuple[Any, Any]:
    """``(floor_divide(x, y), mod(x, y))`` with numpy's semantics: the quotient rounds toward
    -inf, the remainder has the divisor's sign; integer division by zero gives 0 and 0."""
    x, y = promote_args_numeric("divmod", x, y)
    return _float_divmod(x, y) if _is_float(x) else _int_divmod(x, y)


def floor_divide(x: Any, y: Any) -> Any:
    """``x // y``: the quotient rounded toward -inf (ints and floats, as numpy)."""
    return divmod(x, y)[0]


def mod(x: Any, y: Any) -> Any:
    """``x % y``: the remainder with the sign of the divisor (numpy's ``remainder``)."""
    return divmod(x, y)[1]


remainder = mod


def fmod(x: Any, y: Any) -> Any:
    """C's ``fmod``: the remainder with the sign of the dividend (integer ``fmod(x, 0)`` is 0)."""
    x, y = promote_args_numeric("fmod", x, y)
    if _is_float(x):
        return lax.rem(x, y)
    y_zero = lax.eq(y, _zeros(y))
    r = lax.rem(x, lax.select(y_zero, lax.full_like(y, 1), y))
    return lax.select(y_zero, _zeros(r), r)


def _int_power(x: Any, y: Any) -> Any:
    # square-and-multiply over every bit of the exponent; negative exponents give 0 (as in JAX)
    bits = get_aval(y).dtype.itemsize * 8
    acc = _where(less(y, 0), 0, lax.full_like(x, 1))
    for _ in range(bits):
        acc = _where(equal(lax.rem(y, lax.full_like(y, 2)), 0), acc, lax.mul(acc, x))
        x = lax.mul(x, x)
        y = lax.div(y, lax.full_like(y, 2))
    return acc


def power(x: Any, y: Any) -> Any:
    """``x ** y``. A Python int exponent uses ``lax.integer_pow`` (exact, and differentiable at
    x = 0); integer arrays use repeated squaring (negative integer exponents give 0)."""
    if isinstance(y, int) and not isinstance(y, bool):
        (x,) = promote_dtypes(x, y)[:1]
        if _is_bool(x):
            raise BluTypeError(with_user_line("power is not defined for bool arrays"))
        return lax.integer_pow(x, y)
    x, y = promote_args_numeric("power", x, y)
    if _is_float(x) or _is_complex(x):
        return lax.pow(x, y)
    return _int_power(x, y)


def float_power(x: Any, y: Any) -> Any:
    """``x ** y`` computed in float64 (complex128 for complex operands, as numpy)."""
    raw = [v if is_python_scalar(v) else asarray_operand(v) for v in (x, y)]
    wide = dtypes.complex128 if dtypes.is_complex(dtypes.result_type(*raw)) else dtypes.float64
    # each operand straight into the wide dtype (a Python scalar is not range-checked against
    # an integer array's dtype: float_power(u8, -1) is 1 / u8)
    x, y = (
        scalar_array(v, wide, False) if is_python_scalar(v) else lax.convert_element_type(v, wide)
        for v in raw
    )
    shape = broadcast_shapes(get_aval(x).shape, get_aval(y).shape)
    return lax.pow(broadcast_to(x, shape), broadcast_to(y, shape))


def negative(x: Any) -> Any:
    """``-x`` (unsigned integers wrap; not defined for bool)."""
    (x,) = promote_args_numeric("negative", x)
    return lax.neg(x)


def positive(x: Any) -> Any:
    """``+x``: ``x`` itself, as a blu array."""
    return asarray_operand(x)


def abs(x: Any) -> Any:
    """``|x|`` (bool and unsigned inputs are returned unchanged)."""
    x = asarray_operand(x)
    if _is_bool(x) or _is_unsigned(x):
        return x
    return lax.abs(x)


absolute = abs


def fabs(x: Any) -> Any:
    """Elementwise absolute value as a float (integers and bools are cast to float32)."""
    return abs(to_inexact(asarray_operand(x)))


def sign(x: Any) -> Any:
    """-1, 0 or 1 (NaN for NaN)."""
    (x,) = promote_args_numeric("sign", x)
    return lax.sign(x)


def square(x: Any) -> Any:
    """``x * x`` (integers stay integers)."""
    (x,) = promote_args_numeric("square", x)
    return lax.square(x)


def reciprocal(x: Any) -> Any:
    """``1 / x`` in floating point."""
    (x,) = promote_args_inexact(x)
    return true_divide(1, x)


# ---- rounding ----------------------------------------------------------------------------------


def floor(x: Any) -> Any:
    """Round toward -inf (integer and bool inputs are returned unchanged, as in JAX)."""
    x = asarray_operand(x)
    _check_real("floor", x)
    return lax.floor(x) if _is_float(x) else x


def ceil(x: Any) -> Any:
    """Round toward +inf (integer and bool inputs are returned unchanged)."""
    x = asarray_operand(x)
    _check_real("ceil", x)
    return lax.ceil(x) if _is_float(x) else x


def trunc(x: Any) -> Any:
    """Round toward zero (real numbers)."""
    x = asarray_operand(x)
    _check_real("trunc", x)
    if not _is_float(x):
        return x
    return _where(less(x, 0), lax.ceil(x), lax.floor(x))


fix = trunc


def rint(x: Any) -> Any:
    """Round to the nearest integer, ties to even (floats, and each part of complex numbers;
    integers unchanged)."""
    x = asarray_operand(x)
    if _is_complex(x):
        return round(x)
    return lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN) if _is_float(x) else x


def round(a: Any, decimals: int = 0) -> Any:
    """Round to ``decimals`` decimal places, half to even (numpy's ``round``).

    Floats: ``rint(a * 10**decimals) / 10**decimals`` (for negative ``decimals``, divided then
    multiplied, as numpy). Integers are unchanged for ``decimals >= 0`` and rounded half to even
    at ``10**-decimals`` otherwise.
    """
    a = asarray_operand(a)
    decimals = int(decimals)
    if _is_bool(a):
        return a
    if _is_complex(a):  # each part on its own, as numpy
        return lax.complex(round(lax.real(a), decimals), round(lax.imag(a), decimals))
    if not _is_float(a):
        if decimals >= 0:
            return a
        f = 10 ** (-decimals)
        dt = get_aval(a).dtype
        if f > np.iinfo(dt).max:  # beyond the dtype: every value is nearer 0 (numpy's 0s)
            return lax.full_like(a, 0)
        q, r = divmod(a, f)
        # r against f - r, not 2 r against f: 2 r overflows (round(int8(99), -2) was 0)
        rest = subtract(np.asarray(f, dt), r)
        up = logical_or(greater(r, rest), logical_and(equal(r, rest), not_equal(mod(q, 2), 0)))
        return multiply(_where(up, add(q, 1), q), f)
    if decimals == 0:
        return rint(a)
    dt = get_aval(a).dtype
    if np.dtype(dt).itemsize == 2:  # float16 / bfloat16 scale in float32, as JAX's: numpy's
        # round(float16(100.5), 3) overflowed 100500 to inf
        return lax.convert_element_type(
            round(lax.convert_element_type(a, dtypes.float32), decimals), dt
        )
    if decimals > 0:
        f = 10.0**decimals
        return true_divide(rint(multiply(a, f)), f)
    f = 10.0 ** (-decimals)
    return multiply(rint(true_divide(a, f)), f)


around = round


# ---- extrema, clip, where ----------------------------------------------------------------------


def maximum(x: Any, y: Any) -> Any:
    """Elementwise maximum (NaN propagates)."""
    x, y = promote_args(x, y)
    return lax.or_(x, y) if _is_bool(x) else lax.max(x, y)


def minimum(x: Any, y: Any) -> Any:
    """Elementwise minimum (NaN propagates)."""
    x, y = promote_args(x, y)
    return lax.and_(x, y) if _is_bool(x) else lax.min(x, y)


def fmax(x: Any, y: Any) -> Any:
    """Elementwise maximum that ignores NaN (NaN only where both are NaN)."""
    x, y = promote_args(x, y)
    return _where(isnan(x), y, _where(isnan(y), x, maximum(x, y)))


def fmin(x: Any, y: Any) -> Any:
    """Elementwise minimum that ignores NaN."""
    x, y = promote_args(x, y)
    return _where(isnan(x), y, _where(isnan(y), x, minimum(x, y)))


_NO_VALUE = object()


def clip(
    a: Any, min: Any = None, max: Any = None, *, a_min: Any = _NO_VALUE, a_max: Any = _NO_VALUE
) -> Any:
    """``minimum(maximum(a, min), max)`` (either bound may be None; dtypes promote);
    ``a_min``/``a_max`` are numpy's older names of ``min``/``max``."""
    if a_min is _NO_VALUE:
        a_min = min
    if a_max is _NO_VALUE:
        a_max = max
    out = asarray_operand(a)
    dt = get_aval(out).dtype
    if dtypes.is_int(dt):  # a Python int bound beyond the dtype on its own side clips nothing
        # (numpy's): it was a range error, and JAX wraps it (clip(u8, 0, 300) clips to 44)
        info = np.iinfo(dt)
        py_int = lambda v: isinstance(v, int) and not isinstance(v, bool)  # noqa: E731
        a_min = None if py_int(a_min) and a_min <= info.min else a_min
        a_max = None if py_int(a_max) and a_max >= info.max else a_max
    if a_min is not None:
        out = maximum(out, a_min)
    if a_max is not None:
        out = minimum(out, a_max)
    return out


def _where(condition: Any, x: Any, y: Any) -> Any:
    """``x`` where ``condition`` else ``y`` (all three broadcast; x and y promote): the
    three-argument ``where``, which blu.numpy's modules call. The public ``where`` (in
    ``selection``, beside ``nonzero``) adds the one-argument form, ``nonzero``."""
    cond = to_bool(condition)
    x, y = promote_dtypes(x, y)
    shape = broadcast_shapes(get_aval(cond).shape, get_aval(x).shape, get_aval(y).shape)
    return lax.select(broadcast_to(cond, shape), broadcast_to(x, shape), broadcast_to(y, shape))


# ---- floating-point classification -------------------------------------------------------------


def isfinite(x: Any) -> Any:
    """True where x is neither inf nor NaN (always for integers)."""
    x = asarray_operand(x)
    if _is_complex(x):
        return logical_and(isfinite(lax.real(x)), isfinite(lax.imag(x)))
    return lax.is_finite(x) if _is_float(x) else _bools(x, True)


def isnan(x: Any) -> Any:
    """Elementwise ``x != x``: True where ``x`` is NaN (all False for integers and bools)."""
    x = asarray_operand(x)
    if _is_complex(x):
        return logical_or(isnan(lax.real(x)), isnan(lax.imag(x)))
    return lax.ne(x, x) if _is_float(x) else _bools(x, False)


def isinf(x: Any) -> Any:
    """True where ``x`` is +inf or -inf (all False for integers and bools)."""
    x = asarray_operand(x)
    if _is_complex(x):
        return logical_or(isinf(lax.real(x)), isinf(lax.imag(x)))
    if not _is_float(x):
        return _bools(x, False)
    return lax.eq(lax.abs(x), lax.full_like(x, np.inf))


def signbit(x: Any) -> Any:
    """True where the sign bit of x is set: negative numbers, -0.0 and -NaN (real numbers)."""
    x = asarray_operand(x)
    _check_real("signbit", x)
    if _is_bool(x) or _is_unsigned(x):
        return _bools(x, False)
    if not _is_float(x):
        return lax.lt(x, _zeros(x))
    # the sign bit itself: true for -0.0 and for NaNs with the sign bit set
    aval = get_aval(x)
    udt = {2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[aval.dtype.itemsize]
    bits = lax.bitcast_convert_type(x, udt)
    top = lax.shift_right_logical(bits, lax.full(aval.shape, 8 * aval.dtype.itemsize - 1, udt))
    return lax.eq(top, lax.full(aval.shape, 1, udt))


def copysign(x: Any, y: Any) -> Any:
    """``|x|`` with the sign of ``y``."""
    x, y = promote_args_inexact(x, y)
    return _where(signbit(y), negative(lax.abs(x)), lax.abs(x))


def nan_to_num(
    x: Any,
    copy: bool = True,
    nan: float = 0.0,
    posinf: float | None = None,
    neginf: float | None = None,
) -> Any:
    """NaN -> ``nan``, +inf -> ``posinf`` (default the dtype's max), -inf -> ``neginf``."""
    x = asarray_operand(x)
    if _is_complex(x):  # each part on its own, as numpy
        parts = (lax.real(x), lax.imag(x))
        return lax.complex(*(nan_to_num(p, nan=nan, posinf=posinf, neginf=neginf) for p in parts))
    if not _is_float(x):
        return x
    info = dtypes.finfo(get_aval(x).dtype)
    posinf = float(info.max) if posinf is None else posinf
    neginf = float(info.min) if neginf is None else neginf
    out = _where(isnan(x), nan, x)
    out = _where(logical_and(isinf(x), greater(x, 0)), posinf, out)
    return _where(logical_and(isinf(x), less(x, 0)), neginf, out)


# ---- closeness -----------------------------------------------------------------------------------


def isclose(a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):
    """``|a - b| <= atol + rtol * |b|`` elementwise (infinities equal only to themselves)."""
    a, b = promote_args_inexact(a, b)
    close = less_equal(lax.abs(subtract(a, b)), add(atol, multiply(rtol, lax.abs(b))))
    both_inf = logical_and(isinf(a), equal(a, b))
    out = logical_or(logical_and(close, isfinite(b)), both_inf)
    if equal_nan:
        out = logical_or(out, logical_and(isnan(a), isnan(b)))
    return out
