"""Exponentials, logarithms, roots, and the trigonometric and hyperbolic functions (numpy's
ufuncs), with broadcasting and JAX's dtype promotion; ``logaddexp``, ``hypot`` and the angle
conversions.

Each is a composition of ``blu.lax`` elementwise primitives, accurate where numpy's is (``expm1``,
``log1p``, ``arcsinh`` near 0, no overflow in ``hypot`` or ``logaddexp``); complex inputs take
C99's special values as numpy. Integer and bool inputs become the default float (float32).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.interpreter import get_aval
from blu.numpy._promote import promote_args_inexact
from blu.numpy.logic import equal, greater, less
from blu.numpy.ufuncs import (
    _is_complex,
    _where,
    add,
    isnan,
    maximum,
    minimum,
    multiply,
    negative,
    power,
    signbit,
    subtract,
    true_divide,
)

# fmt: off
__all__ = [
    "sqrt", "cbrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan",
    "arcsin", "arccos", "arctan", "arctan2", "sinh", "cosh", "tanh", "arcsinh", "arccosh",
    "arctanh", "hypot", "deg2rad", "rad2deg", "degrees", "radians", "logaddexp", "logaddexp2",
]
# fmt: on


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


def cbrt(x: Any) -> Any:
    """Real cube root (negative for negative x)."""
    (x,) = promote_args_inexact(x)
    return multiply(lax.sign(x), power(lax.abs(x), 1.0 / 3.0))


def exp2(x: Any) -> Any:
    """``2 ** x``: the exp2 primitive (within an ulp, exact at integers as numpy's; JAX 0.10's
    is 65 ulps off near 2**100 in float32, as blu's exp(x log 2) was)."""
    (x,) = promote_args_inexact(x)
    return lax.exp2(x)  # (complex: numpy's complex exp2, C99's special values)


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
    a = _where(neg, negative(x), x)
    big = greater(a, math.sqrt(float(dtypes.finfo(get_aval(x).dtype).max)) / 2)
    a_safe = _where(big, 1, a)
    sq = multiply(a_safe, a_safe)
    small = log1p(add(a_safe, true_divide(sq, add(1, sqrt(add(1, sq))))))
    r = _where(big, add(log(_where(big, a, 1)), math.log(2.0)), small)
    return _where(neg, negative(r), r)


def arccosh(x: Any) -> Any:
    """Inverse hyperbolic cosine (NaN below 1): ``log1p(t + sqrt(t (t + 2)))`` with ``t = x - 1``
    (accurate near 1), ``log(2x)`` where ``x^2`` would overflow."""
    (x,) = promote_args_inexact(x)
    if _is_complex(x):  # numpy's complex acosh (C99's special values)
        return lax.acosh(x)
    big = greater(x, math.sqrt(float(dtypes.finfo(get_aval(x).dtype).max)) / 2)
    t = subtract(_where(big, 2, x), 1)  # (a safe value in the unused branch: finite derivatives)
    small = log1p(add(t, sqrt(multiply(t, add(t, 2)))))
    out = _where(big, add(log(_where(big, x, 2)), math.log(2.0)), small)
    # NaN below 1 also where t (t + 2) overflows to +inf for very negative x
    return _where(less(x, 1), np.nan, out)


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
    safe = _where(equal(big, 0), 1, big)
    r = true_divide(small, safe)
    return _where(equal(big, 0), 0, multiply(big, sqrt(add(1, multiply(r, r)))))


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


def logaddexp(x: Any, y: Any) -> Any:
    """``log(exp(x) + exp(y))`` without overflow; at ``x == y`` the gradient is split evenly.
    Both ``-inf`` gives ``-inf`` with gradient 0 (not NaN; docs/conventions.md)."""
    x, y = promote_args_inexact(x, y)
    ninf = lax.full_like(x, -np.inf)
    both_ninf = lax.and_(lax.eq(x, ninf), lax.eq(y, ninf))
    zero = lax.full_like(x, 0)
    x, y = _where(both_ninf, zero, x), _where(both_ninf, zero, y)
    d = subtract(y, x)
    pos = greater(d, 0)
    m = _where(pos, y, x)
    neg_abs = _where(pos, negative(d), d)  # -|d|, but equal to d at a tie (so both get 1/2)
    out = add(m, log1p(exp(neg_abs)))
    return _where(both_ninf, ninf, _where(isnan(d), add(x, y), out))


def logaddexp2(x: Any, y: Any) -> Any:
    """``log2(2**x + 2**y)``."""
    x, y = promote_args_inexact(x, y)
    ln2 = math.log(2.0)
    return true_divide(logaddexp(multiply(x, ln2), multiply(y, ln2)), ln2)
