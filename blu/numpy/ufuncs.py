"""Elementwise functions (numpy's ufuncs) with broadcasting and JAX's dtype promotion.

Each is a composition of ``blu.lax`` elementwise primitives; functions numpy defines with
particular semantics keep them: ``floor_divide`` rounds toward -inf and ``mod`` takes the sign
of the divisor (for integers and floats, as numpy's ``divmod``), ``round`` rounds half to even,
integer division by zero gives 0. Functions of floats (``sqrt``, ``exp``, ``true_divide``, ...)
turn integer and bool inputs into the default float (float32).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import (
    asarray_operand,
    broadcast_shapes,
    broadcast_to,
    promote_args,
    promote_args_inexact,
    promote_args_numeric,
    promote_dtypes,
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
from blu.numpy.reductions import all as _all

# fmt: off
__all__ = [
    "add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "mod", "remainder",
    "fmod", "divmod", "power", "float_power", "negative", "positive", "abs", "absolute", "fabs",
    "sign", "sqrt", "cbrt", "square", "reciprocal", "exp", "exp2", "expm1", "log", "log2",
    "log10", "log1p", "sin", "cos", "tan", "arcsin", "arccos", "arctan", "arctan2", "sinh",
    "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "hypot", "deg2rad", "rad2deg", "degrees",
    "radians", "floor", "ceil", "trunc", "fix", "rint", "round", "around", "maximum", "minimum",
    "fmax", "fmin", "clip", "where", "logaddexp", "logaddexp2", "isfinite", "isnan", "isinf",
    "signbit", "copysign", "nan_to_num", "isclose", "allclose", "array_equal",
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
    mod = where(adjust, add(mod, y), mod)
    div = where(adjust, subtract(div, 1), div)
    fl = lax.floor(div)
    fl = where(greater(subtract(div, fl), 0.5), add(fl, 1), fl)
    # signed zeros as numpy's npy_divmod: a zero remainder takes the divisor's sign, a zero
    # quotient the sign of x / y
    zero = _zeros(x)
    quot = lax.div(x, y)
    mod = where(equal(mod, 0), copysign(zero, y), mod)
    fl = where(equal(fl, 0), copysign(zero, quot), fl)
    # the Array API: inf // finite is a signed inf (numpy gives NaN; the remainder stays NaN),
    # finite // inf a signed zero (numpy and Python give -1 for opposite signs)
    fl = where(logical_and(isinf(x), isfinite(y)), quot, fl)
    fl = where(logical_and(isfinite(x), isinf(y)), quot, fl)
    y_zero = equal(y, 0)
    return where(y_zero, quot, fl), mod


def _int_divmod(x: Any, y: Any) -> tuple[Any, Any]:
    y_zero = lax.eq(y, _zeros(y))
    safe_y = lax.select(y_zero, lax.full_like(y, 1), y)
    q, r = lax.div(x, safe_y), lax.rem(x, safe_y)
    if not _is_unsigned(x):
        adjust = logical_and(not_equal(r, 0), not_equal(less(x, 0), less(y, 0)))
        q = where(adjust, subtract(q, 1), q)
        r = where(adjust, add(r, y), r)
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
    acc = where(less(y, 0), 0, lax.full_like(x, 1))
    for _ in range(bits):
        acc = where(equal(lax.rem(y, lax.full_like(y, 2)), 0), acc, lax.mul(acc, x))
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
    """``x ** y`` computed in float64."""
    x, y = promote_args(x, y)
    x = lax.convert_element_type(x, dtypes.float64)
    y = lax.convert_element_type(y, dtypes.float64)
    return lax.pow(x, y)


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


def _unary_inexact(lax_fn: Callable, name: str, doc: str) -> Callable:
    def fn(x: Any) -> Any:
        (x,) = promote_args_inexact(x)
        return lax_fn(x)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


sqrt = _unary_inexact(lambda x: lax.sqrt(x), "sqrt", "Square root (NaN below 0).")
exp = _unary_inexact(lambda x: lax.exp(x), "exp", "``e ** x``.")
expm1 = _unary_inexact(lambda x: lax.expm1(x), "expm1", "``exp(x) - 1``, accurate near 0.")
log = _unary_inexact(lambda x: lax.log(x), "log", "Natural logarithm (-inf at 0, NaN below).")
log1p = _unary_inexact(lambda x: lax.log1p(x), "log1p", "``log(1 + x)``, accurate near 0.")
sin = _unary_inexact(lambda x: lax.sin(x), "sin", "Sine (radians).")
cos = _unary_inexact(lambda x: lax.cos(x), "cos", "Cosine (radians).")
tan = _unary_inexact(lambda x: lax.tan(x), "tan", "Tangent (radians).")
tanh = _unary_inexact(lambda x: lax.tanh(x), "tanh", "Hyperbolic tangent.")


def square(x: Any) -> Any:
    """``x * x`` (integers stay integers)."""
    (x,) = promote_args_numeric("square", x)
    return lax.square(x)


def reciprocal(x: Any) -> Any:
    """``1 / x`` in floating point."""
    (x,) = promote_args_inexact(x)
    return true_divide(1, x)


def cbrt(x: Any) -> Any:
    """Real cube root (negative for negative x)."""
    (x,) = promote_args_inexact(x)
    return multiply(lax.sign(x), power(lax.abs(x), 1.0 / 3.0))


def exp2(x: Any) -> Any:
    """``2 ** x``."""
    (x,) = promote_args_inexact(x)
    if _is_complex(x):  # numpy's complex exp2 (C99's special values)
        return lax.exp2(x)
    return exp(multiply(x, math.log(2.0)))


def log2(x: Any) -> Any:
    """Base-2 logarithm."""
    (x,) = promote_args_inexact(x)
    return true_divide(log(x), math.log(2.0))


def log10(x: Any) -> Any:
    """Base-10 logarithm."""
    (x,) = promote_args_inexact(x)
    return true_divide(log(x), math.log(10.0))


def arctan2(y: Any, x: Any) -> Any:
    """The angle of the point (x, y), in ``[-pi, pi]``."""
    return lax.atan2(*promote_args_inexact(y, x))


def arctan(x: Any) -> Any:
    """Inverse tangent, in ``[-pi/2, pi/2]``."""
    (x,) = promote_args_inexact(x)
    if _is_complex(x):  # numpy's complex atan (C99's special values)
        return lax.atan(x)
    return lax.atan2(x, lax.full_like(x, 1))


def arcsin(x: Any) -> Any:
    """Inverse sine (NaN outside [-1, 1])."""
    (x,) = promote_args_inexact(x)
    if _is_complex(x):  # numpy's complex asin (C99's special values)
        return lax.asin(x)
    return lax.atan2(x, sqrt(multiply(subtract(1, x), add(1, x))))


def arccos(x: Any) -> Any:
    """Inverse cosine (NaN outside [-1, 1])."""
    (x,) = promote_args_inexact(x)
    if _is_complex(x):  # numpy's complex acos (C99's special values)
        return lax.acos(x)
    return lax.atan2(sqrt(multiply(subtract(1, x), add(1, x))), x)


def sinh(x: Any) -> Any:
    """Hyperbolic sine, as ``(expm1(x) - expm1(-x)) / 2`` (accurate near 0)."""
    (x,) = promote_args_inexact(x)
    if _is_complex(x):  # numpy's complex sinh (C99's special values)
        return lax.sinh(x)
    return multiply(subtract(expm1(x), expm1(negative(x))), 0.5)


def cosh(x: Any) -> Any:
    """Hyperbolic cosine."""
    (x,) = promote_args_inexact(x)
    if _is_complex(x):  # numpy's complex cosh (C99's special values)
        return lax.cosh(x)
    return multiply(add(exp(x), exp(negative(x))), 0.5)


def arcsinh(x: Any) -> Any:
    """Inverse hyperbolic sine: ``sign(x) log1p(|x| + x^2 / (1 + sqrt(1 + x^2)))``, with
    ``log(2|x|)`` where ``x^2`` would overflow."""
    (x,) = promote_args_inexact(x)
    if _is_complex(x):  # numpy's complex asinh (C99's special values)
        return lax.asinh(x)
    # |x| and the sign through a select (not abs/sign, whose derivatives vanish at 0: the
    # derivative of arcsinh there is 1); the sign bit, so that asinh(-0.0) is -0.0
    neg = signbit(x)
    a = where(neg, negative(x), x)
    big = greater(a, math.sqrt(float(dtypes.finfo(get_aval(x).dtype).max)) / 2)
    a_safe = where(big, 1, a)
    sq = multiply(a_safe, a_safe)
    small = log1p(add(a_safe, true_divide(sq, add(1, sqrt(add(1, sq))))))
    r = where(big, add(log(where(big, a, 1)), math.log(2.0)), small)
    return where(neg, negative(r), r)


def arccosh(x: Any) -> Any:
    """Inverse hyperbolic cosine (NaN below 1): ``log1p(t + sqrt(t (t + 2)))`` with ``t = x - 1``
    (accurate near 1), ``log(2x)`` where ``x^2`` would overflow."""
    (x,) = promote_args_inexact(x)
    if _is_complex(x):  # numpy's complex acosh (C99's special values)
        return lax.acosh(x)
    big = greater(x, math.sqrt(float(dtypes.finfo(get_aval(x).dtype).max)) / 2)
    t = subtract(where(big, 2, x), 1)  # (a safe value in the unused branch: finite derivatives)
    small = log1p(add(t, sqrt(multiply(t, add(t, 2)))))
    out = where(big, add(log(where(big, x, 2)), math.log(2.0)), small)
    # NaN below 1 also where t (t + 2) overflows to +inf for very negative x
    return where(less(x, 1), np.nan, out)


def arctanh(x: Any) -> Any:
    """Inverse hyperbolic tangent: ``log1p(2x / (1 - x)) / 2``."""
    (x,) = promote_args_inexact(x)
    if _is_complex(x):  # numpy's complex atanh (C99's special values)
        return lax.atanh(x)
    return multiply(log1p(true_divide(multiply(x, 2), subtract(1, x))), 0.5)


def hypot(x: Any, y: Any) -> Any:
    """``sqrt(x^2 + y^2)`` without intermediate overflow."""
    x, y = promote_args_inexact(x, y)
    x, y = lax.abs(x), lax.abs(y)
    big, small = maximum(x, y), minimum(x, y)
    safe = where(equal(big, 0), 1, big)
    r = true_divide(small, safe)
    return where(equal(big, 0), 0, multiply(big, sqrt(add(1, multiply(r, r)))))


def deg2rad(x: Any) -> Any:
    """Degrees to radians, elementwise (integers become float32); ``radians`` is the
    same function."""
    (x,) = promote_args_inexact(x)
    return multiply(x, math.pi / 180.0)


def rad2deg(x: Any) -> Any:
    """Radians to degrees, elementwise (integers become float32); ``degrees`` is the
    same function."""
    (x,) = promote_args_inexact(x)
    return multiply(x, 180.0 / math.pi)


radians, degrees = deg2rad, rad2deg


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
    return where(less(x, 0), lax.ceil(x), lax.floor(x))


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
        q, r = divmod(a, f)
        twice = multiply(r, 2)
        up = logical_or(greater(twice, f), logical_and(equal(twice, f), not_equal(mod(q, 2), 0)))
        return multiply(where(up, add(q, 1), q), f)
    if decimals == 0:
        return rint(a)
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
    return where(isnan(x), y, where(isnan(y), x, maximum(x, y)))


def fmin(x: Any, y: Any) -> Any:
    """Elementwise minimum that ignores NaN."""
    x, y = promote_args(x, y)
    return where(isnan(x), y, where(isnan(y), x, minimum(x, y)))


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
    if a_min is not None:
        out = maximum(out, a_min)
    if a_max is not None:
        out = minimum(out, a_max)
    return out


def where(
    condition: Any, x: Any = None, y: Any = None, *, size: int | None = None, fill_value: Any = None
) -> Any:
    """``x`` where ``condition`` else ``y`` (all three broadcast; x and y promote).

    With only ``condition`` this is ``nonzero(condition, size=size, fill_value=fill_value)``,
    which needs a concrete condition unless ``size`` is given.

    Raises:
        BluValueError: exactly one of ``x``, ``y`` given. ConcretizationError: the
            one-argument form on a traced condition without ``size``.
    """
    if x is None and y is None:
        from blu.numpy.selection import nonzero

        return nonzero(condition, size=size, fill_value=fill_value)
    if x is None or y is None:
        raise BluValueError(with_user_line("where: give both x and y, or neither"))
    cond = to_bool(condition)
    x, y = promote_dtypes(x, y)
    shape = broadcast_shapes(get_aval(cond).shape, get_aval(x).shape, get_aval(y).shape)
    return lax.select(broadcast_to(cond, shape), broadcast_to(x, shape), broadcast_to(y, shape))


def logaddexp(x: Any, y: Any) -> Any:
    """``log(exp(x) + exp(y))`` without overflow; at ``x == y`` the gradient is split evenly.
    Both ``-inf`` gives ``-inf`` with gradient 0 (not NaN; docs/conventions.md)."""
    x, y = promote_args_inexact(x, y)
    ninf = lax.full_like(x, -np.inf)
    both_ninf = lax.and_(lax.eq(x, ninf), lax.eq(y, ninf))
    zero = lax.full_like(x, 0)
    x, y = where(both_ninf, zero, x), where(both_ninf, zero, y)
    d = subtract(y, x)
    pos = greater(d, 0)
    m = where(pos, y, x)
    neg_abs = where(pos, negative(d), d)  # -|d|, but equal to d at a tie (so both get 1/2)
    out = add(m, log1p(exp(neg_abs)))
    return where(both_ninf, ninf, where(isnan(d), add(x, y), out))


def logaddexp2(x: Any, y: Any) -> Any:
    """``log2(2**x + 2**y)``."""
    x, y = promote_args_inexact(x, y)
    ln2 = math.log(2.0)
    return true_divide(logaddexp(multiply(x, ln2), multiply(y, ln2)), ln2)


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
    return where(signbit(y), negative(lax.abs(x)), lax.abs(x))


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
    out = where(isnan(x), nan, x)
    out = where(logical_and(isinf(x), greater(x, 0)), posinf, out)
    return where(logical_and(isinf(x), less(x, 0)), neginf, out)


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


def allclose(a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):
    """True when ``isclose`` holds everywhere (a 0-d bool array)."""
    return _all(isclose(a, b, rtol, atol, equal_nan))


def array_equal(a1: Any, a2: Any, equal_nan: bool = False) -> Any:
    """True when the shapes agree and all elements are equal (a 0-d bool array)."""
    a1, a2 = asarray_operand(a1), asarray_operand(a2)
    if get_aval(a1).shape != get_aval(a2).shape:
        return lax.full((), False, dtypes.bool_)
    eq = equal(a1, a2)
    if equal_nan:
        eq = logical_or(eq, logical_and(isnan(a1), isnan(a2)))
    return _all(eq)
