"""Powers, transcendental and special-function primitives: square, sqrt, rsqrt, pow,
integer_pow, cbrt; tan, inverse trigonometric and hyperbolic functions, atan2; exp2, log1p,
expm1, logistic; erf, erfc, erf_inv; lgamma, digamma, polygamma (sin, cos, exp, log and tanh are
in ``elementwise.py``).

All but square and integer_pow take floating-point operands only (float16/bfloat16 computed in
float32); the impls come from numpy and ``scipy.special`` (numpy has no erf or gamma functions).
Derivatives are the textbook ones (Abramowitz & Stegun, ch. 4, 6 and 7), written with blu
operations so they are themselves differentiable.
"""

from __future__ import annotations

__all__ = [  # public lax functions; keep in sync
    "square",
    "sqrt",
    "rsqrt",
    "pow",
    "integer_pow",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "asinh",
    "acosh",
    "atanh",
    "atan2",
    "exp2",
    "log1p",
    "expm1",
    "logistic",
    "cbrt",
    "erf",
    "erfc",
    "erf_inv",
    "lgamma",
    "digamma",
    "polygamma",
]

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.special

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.errors import BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax._base import check_dtype, compute_in_f32, is_float, is_inexact, is_numeric
from blu.lax.elementwise import (
    add,
    binary,
    convert_element_type,
    div,
    eq,
    exp,
    log,
    mul,
    neg,
    operands,
    quiet,
    select,
    sub,
    unary,
)
from blu.lax.shapes import full_like
from blu.transforms.ad_util import defjvp, defjvp_with_output
from blu.transforms.batching import defvectorized


def _keep_dtype(fn: Callable) -> Callable:
    """scipy.special may answer float32 input in float64: give back the input's dtype."""

    def impl(x: np.ndarray, *args: Any, **params: Any) -> np.ndarray:
        return np.asarray(fn(x, *args, **params)).astype(x.dtype, copy=False)

    return impl


# ---- powers ------------------------------------------------------------------------------------

square_p = unary("square", np.square, is_numeric, "numeric")
defjvp(square_p, lambda t, x: mul(t, mul(x, 2)))

sqrt_p = unary("sqrt", np.sqrt)
defjvp_with_output(sqrt_p, lambda t, out, x: div(t, mul(out, 2)))

rsqrt_p = unary("rsqrt", lambda x: 1 / np.sqrt(x))
defjvp_with_output(rsqrt_p, lambda t, out, x: mul(t, mul(div(out, x), -0.5)))

pow_p = binary("pow", np.power, is_inexact, "floating-point or complex")


def _replace_zero(x: Any) -> Any:
    return select(eq(x, 0), full_like(x, 1), x)


def _pow_jvp_x(t, out, x, y):
    # y * x**(y-1); at x == y == 0 that is 0 * inf, and the limit from x > 0 is 0. (JAX uses 0
    # wherever y == 0, which also zeroes the mixed second derivative there; 1/x is right.)
    degenerate = mul(eq(x, 0), eq(y, 0))  # mul of bools: logical and
    safe_y = select(degenerate, full_like(y, 1), y)  # keeps 0 * inf out of the backward pass
    jac = select(degenerate, full_like(y, 0), mul(safe_y, pow(x, sub(y, 1))))
    return mul(t, jac)


def _pow_jvp_y(t, out, x, y):
    # log(x) * x**y, with log(1) = 0 standing in for log(0) (as in JAX: 0**y is flat in y)
    return mul(t, mul(log(_replace_zero(x)), out))


defjvp_with_output(pow_p, _pow_jvp_x, _pow_jvp_y)


def _integer_pow_impl(x: np.ndarray, *, y: int) -> np.ndarray:
    if dtypes.is_float(x.dtype):
        return np.power(x, x.dtype.type(y))
    if x.dtype.kind == "c" and y < 0:
        return 1 / _integer_pow_impl(x, y=-y)
    # square-and-multiply in x's dtype, so integers wrap like XLA's multiplies
    acc, base, n = np.ones_like(x), x, y
    while n:
        if n & 1:
            acc = acc * base
        base = base * base
        n >>= 1
    return acc


integer_pow_p = Primitive("integer_pow")
integer_pow_p.def_impl(compute_in_f32(quiet(_integer_pow_impl)))
defvectorized(integer_pow_p)


@integer_pow_p.def_abstract_eval
def _integer_pow_abstract_eval(x: ShapedArray, *, y: int) -> ShapedArray:
    check_dtype("integer_pow", x, is_numeric, "numeric")
    if y < 0 and not dtypes.is_inexact(x.dtype):
        raise BluTypeError(
            with_user_line(
                f"integer_pow: integers cannot be raised to negative powers, got "
                f"integer_pow({x.str_short()}, {y})"
            )
        )
    return x


def _integer_pow_jvp(t, x, *, y):
    if y == 0:
        return mul(t, full_like(x, 0))
    return mul(t, mul(integer_pow(x, y - 1), y))


defjvp(integer_pow_p, _integer_pow_jvp)


# ---- trigonometric and hyperbolic --------------------------------------------------------------

tan_p = unary("tan", np.tan)
defjvp_with_output(tan_p, lambda t, out, x: mul(t, add(square(out), 1)))

asin_p = unary("asin", np.arcsin)
defjvp(asin_p, lambda t, x: mul(t, rsqrt(sub(1, square(x)))))

acos_p = unary("acos", np.arccos)
defjvp(acos_p, lambda t, x: neg(mul(t, rsqrt(sub(1, square(x))))))

atan_p = unary("atan", np.arctan)
defjvp(atan_p, lambda t, x: div(t, add(square(x), 1)))

sinh_p = unary("sinh", np.sinh)
defjvp(sinh_p, lambda t, x: mul(t, cosh(x)))

cosh_p = unary("cosh", np.cosh)
defjvp(cosh_p, lambda t, x: mul(t, sinh(x)))

asinh_p = unary("asinh", np.arcsinh)
defjvp(asinh_p, lambda t, x: mul(t, rsqrt(add(square(x), 1))))

acosh_p = unary("acosh", np.arccosh)
# 1 / (sqrt(x - 1) sqrt(x + 1)): the principal branch for complex x too (1/sqrt(x^2 - 1) is
# not, left of the imaginary axis)
defjvp(acosh_p, lambda t, x: div(t, mul(sqrt(sub(x, 1)), sqrt(add(x, 1)))))

atanh_p = unary("atanh", np.arctanh)
defjvp(atanh_p, lambda t, x: div(t, mul(sub(1, x), add(x, 1))))

atan2_p = binary("atan2", np.arctan2, is_float, "floating-point")


def _atan2_jvp_x(t, x, y):
    return mul(t, div(y, add(square(x), square(y))))


def _atan2_jvp_y(t, x, y):
    return neg(mul(t, div(x, add(square(x), square(y)))))


defjvp(atan2_p, _atan2_jvp_x, _atan2_jvp_y)


# ---- exponentials and logarithms ---------------------------------------------------------------

exp2_p = unary("exp2", np.exp2)
defjvp_with_output(exp2_p, lambda t, out, x: mul(t, mul(out, math.log(2.0))))

log1p_p = unary("log1p", np.log1p)
defjvp(log1p_p, lambda t, x: div(t, add(x, 1)))


def _expm1_impl(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind != "c":
        return np.expm1(x)
    # numpy's complex expm1 misses C99's infinities; exp(z) - 1 has them (-inf + i inf gives
    # -1 + 0j, +inf + 0j gives +inf + 0j), and expm1 stays accurate near 0 for finite z
    out = np.where(np.isfinite(x), np.expm1(x), np.exp(x) - 1).astype(x.dtype)
    # expm1(+-0 + i0) is +0 + i0 in the standard (numpy keeps the sign of a -0 real part)
    out.real = np.where((x.real == 0) & (x.imag == 0), 0.0, out.real)
    return out


expm1_p = unary("expm1", _expm1_impl)
defjvp_with_output(expm1_p, lambda t, out, x: mul(t, add(out, 1)))

# scipy's expit is the numerically stable 1 / (1 + exp(-x)): no overflow for large |x|
logistic_p = unary("logistic", _keep_dtype(scipy.special.expit), is_float, "floating-point")
defjvp_with_output(logistic_p, lambda t, out, x: mul(t, mul(out, sub(1, out))))

cbrt_p = unary("cbrt", np.cbrt, is_float, "floating-point")
defjvp_with_output(cbrt_p, lambda t, out, x: mul(t, mul(integer_pow(out, -2), 1.0 / 3.0)))


# ---- error function ----------------------------------------------------------------------------

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)

erf_p = unary("erf", _keep_dtype(scipy.special.erf), is_float, "floating-point")
defjvp(erf_p, lambda t, x: mul(t, mul(exp(neg(square(x))), _TWO_OVER_SQRT_PI)))

erfc_p = unary("erfc", _keep_dtype(scipy.special.erfc), is_float, "floating-point")
defjvp(erfc_p, lambda t, x: mul(t, mul(exp(neg(square(x))), -_TWO_OVER_SQRT_PI)))


def _erf_inv_impl(x: np.ndarray) -> np.ndarray:
    out = np.asarray(scipy.special.erfinv(x)).astype(x.dtype, copy=False)
    return np.where(x == 0, x, out)  # erf_inv(-0.0) is -0.0 (odd; XLA's, and blu.jit's)


erf_inv_p = unary("erf_inv", _erf_inv_impl, is_float, "floating-point")
# d/dy erfinv(y) = 1 / erf'(erfinv(y)) = sqrt(pi)/2 * exp(erfinv(y)^2)
defjvp_with_output(
    erf_inv_p, lambda t, out, x: mul(t, mul(exp(square(out)), 1.0 / _TWO_OVER_SQRT_PI))
)


# ---- gamma family ------------------------------------------------------------------------------

lgamma_p = unary("lgamma", _keep_dtype(scipy.special.gammaln), is_float, "floating-point")
defjvp(lgamma_p, lambda t, x: mul(t, digamma(x)))

digamma_p = unary("digamma", _keep_dtype(scipy.special.psi), is_float, "floating-point")
defjvp(digamma_p, lambda t, x: mul(t, polygamma(1, x)))

polygamma_p = Primitive("polygamma")
polygamma_p.def_impl(
    compute_in_f32(quiet(_keep_dtype(lambda x, *, m: scipy.special.polygamma(m, x))))
)
defvectorized(polygamma_p)


@polygamma_p.def_abstract_eval
def _polygamma_abstract_eval(x: ShapedArray, *, m: int) -> ShapedArray:
    check_dtype("polygamma", x, is_float, "floating-point")
    return x


defjvp(polygamma_p, lambda t, x, *, m: mul(t, polygamma(m + 1, x)))


# ---- the lax functions users call --------------------------------------------------------------
# Floating-point operands (any numbers for square and integer_pow; BluTypeError otherwise);
# outside its domain a function gives NaN (or +-inf at a pole) without a warning, like numpy.


def square(x: Any) -> Any:
    """Elementwise ``x * x`` (numeric dtypes)."""
    return square_p.bind(x)


def sqrt(x: Any) -> Any:
    """Square root; NaN below 0."""
    return sqrt_p.bind(x)


def rsqrt(x: Any) -> Any:
    """``1 / sqrt(x)``; inf at 0, NaN below 0."""
    return rsqrt_p.bind(x)


def pow(x: Any, y: Any) -> Any:
    """Elementwise ``x ** y`` for floating-point or complex ``x``; ``y`` of ``x``'s dtype, or an
    integer array, which is converted to ``x``'s dtype (as JAX's ``lax.pow`` does).

    The derivative in ``y`` is ``log(x) * x**y`` with 0 where ``x == 0`` (as in JAX); the
    derivative in ``x`` is ``y * x**(y - 1)``, with 0 where ``x == y == 0``.
    """
    if not isinstance(x, (bool, int, float, complex)) and not isinstance(y, (int, float, complex)):
        x_dt, y_dt = get_aval(x).dtype, get_aval(y).dtype
        if dtypes.is_inexact(x_dt) and dtypes.is_int(y_dt):
            y = convert_element_type(y, x_dt)
    return pow_p.bind(*operands(x, y))


def integer_pow(x: Any, y: int) -> Any:
    """Elementwise ``x ** y`` for a static Python int ``y`` (negative only for floats; integer
    results wrap modulo ``2**bits``).

    Raises:
        BluTypeError: ``y`` is not an int, or is negative with an integer ``x``.
    """
    try:
        y = operator.index(y)
    except TypeError as e:
        raise BluTypeError(with_user_line(f"integer_pow: exponent {y!r} is not an int")) from e
    return integer_pow_p.bind(x, y=y)


def tan(x: Any) -> Any:
    """Tangent (radians)."""
    return tan_p.bind(x)


def asin(x: Any) -> Any:
    """Inverse sine, in [-pi/2, pi/2]; NaN outside [-1, 1]."""
    return asin_p.bind(x)


def acos(x: Any) -> Any:
    """Inverse cosine, in [0, pi]; NaN outside [-1, 1]."""
    return acos_p.bind(x)


def atan(x: Any) -> Any:
    """Inverse tangent, in (-pi/2, pi/2)."""
    return atan_p.bind(x)


def sinh(x: Any) -> Any:
    """Hyperbolic sine."""
    return sinh_p.bind(x)


def cosh(x: Any) -> Any:
    """Hyperbolic cosine."""
    return cosh_p.bind(x)


def asinh(x: Any) -> Any:
    """Inverse hyperbolic sine."""
    return asinh_p.bind(x)


def acosh(x: Any) -> Any:
    """Inverse hyperbolic cosine; NaN below 1."""
    return acosh_p.bind(x)


def atanh(x: Any) -> Any:
    """Inverse hyperbolic tangent; +-inf at +-1, NaN outside [-1, 1]."""
    return atanh_p.bind(x)


def atan2(x: Any, y: Any) -> Any:
    """``arctan(x / y)`` in the quadrant of the point with abscissa ``y`` and ordinate ``x``,
    in [-pi, pi] (numpy's ``arctan2(x, y)``, ``jax.lax.atan2(x, y)``); one shape and dtype."""
    return atan2_p.bind(*operands(x, y))


def exp2(x: Any) -> Any:
    """``2 ** x``."""
    return exp2_p.bind(x)


def log1p(x: Any) -> Any:
    """``log(1 + x)``, accurate for small ``x``."""
    return log1p_p.bind(x)


def expm1(x: Any) -> Any:
    """``exp(x) - 1``, accurate for small ``x``."""
    return expm1_p.bind(x)


def logistic(x: Any) -> Any:
    """The sigmoid ``1 / (1 + exp(-x))``, computed without overflow for any ``x``."""
    return logistic_p.bind(x)


def cbrt(x: Any) -> Any:
    """Real cube root (negative for negative ``x``)."""
    return cbrt_p.bind(x)


def erf(x: Any) -> Any:
    """The error function ``2/sqrt(pi) * integral_0^x exp(-t^2) dt``."""
    return erf_p.bind(x)


def erfc(x: Any) -> Any:
    """``1 - erf(x)``, accurate for large ``x``."""
    return erfc_p.bind(x)


def erf_inv(x: Any) -> Any:
    """The inverse of ``erf`` on (-1, 1); +-inf at +-1, NaN outside [-1, 1]."""
    return erf_inv_p.bind(x)


def lgamma(x: Any) -> Any:
    """``log |Gamma(x)|``; +inf at the poles 0, -1, -2, ..."""
    return lgamma_p.bind(x)


def digamma(x: Any) -> Any:
    """The digamma function ``d/dx lgamma(x)``."""
    return digamma_p.bind(x)


def polygamma(m: int, x: Any) -> Any:
    """The ``m``-th derivative of ``digamma`` at ``x`` (``polygamma(0, x) == digamma(x)``).

    Unlike ``jax.lax.polygamma``, ``m`` is a static non-negative Python int.

    Raises:
        BluValueError: ``m`` is not a non-negative int.
    """
    try:
        order = operator.index(m)
    except TypeError:
        order = -1
    if order < 0:
        raise BluValueError(with_user_line(f"polygamma: m must be a non-negative int, got {m!r}"))
    return polygamma_p.bind(x, m=order)
