"""Elementwise primitives: arithmetic, rounding, the basic transcendental functions (sin, cos,
exp, log, tanh), comparisons and select. Casts (``convert_element_type``) are in ``casts.py``
and re-exported here.

Each primitive is defined in one place with all its rules: numpy impl, abstract eval (operands
of equal shape and dtype; the result is weakly typed iff every operand is), JVP, transpose (for
the linear ones) and batching. Impls never warn (overflow, division by zero, invalid values
give what XLA gives), integer arithmetic wraps modulo ``2**bits``, and float16/bfloat16 are
computed in float32 and rounded back. Powers and roots and the other transcendental and special
functions are in ``special.py``, bitwise operations in ``bits.py``.
"""

from __future__ import annotations

__all__ = [  # public lax functions; keep in sync
    "add",
    "sub",
    "mul",
    "div",
    "rem",
    "neg",
    "max",
    "min",
    "abs",
    "sign",
    "floor",
    "ceil",
    "round",
    "RoundingMethod",
    "is_finite",
    "sin",
    "cos",
    "exp",
    "log",
    "tanh",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "select",
]

import enum
from collections.abc import Callable
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax import _late
from blu.lax._base import (
    any_dtype,
    check_dtype,
    check_same_shapes_dtypes,
    compute_in_f32,
    elementwise_abstract_eval,
    is_float,
    is_inexact,
    is_numeric,
    quiet,
)
from blu.lax._operands import as_operands
from blu.lax.casts import convert_element_type, convert_element_type_p  # noqa: F401  (re-exported)
from blu.lax.shapes import full_like
from blu.transforms.ad_util import (
    Zero,
    defjvp,
    defjvp_with_output,
    is_undefined,
    nondifferentiable,
)
from blu.transforms.batching import defbroadcasting, defvectorized


def operands(*args: Any) -> list[Any]:
    """The operands of an n-ary elementwise function: Python scalars take the arrays' dtype, a
    0-d array or size-1 dimensions broadcast (JAX's lax rules; ranks are not added)."""
    return as_operands(*args, broadcast=True)


def unary(
    name: str, impl: Callable, allowed=is_inexact, kind: str = "floating-point or complex"
) -> Primitive:
    """A one-operand elementwise primitive with its impl, abstract eval and batching rule (the
    JVP is added by the caller)."""
    p = Primitive(name)
    p.def_impl(compute_in_f32(quiet(impl)))
    p.def_abstract_eval(elementwise_abstract_eval(name, allowed, kind))
    defvectorized(p)
    return p


def binary(name: str, impl: Callable, allowed=any_dtype, kind: str = "") -> Primitive:
    """A two-operand elementwise primitive (operands of equal shape and dtype)."""
    p = Primitive(name)
    p.def_impl(compute_in_f32(quiet(impl)))
    p.def_abstract_eval(elementwise_abstract_eval(name, allowed, kind))
    defbroadcasting(p)
    return p


def _one(like: Any) -> Any:
    return full_like(like, 1)


def _zeros_like(x: Any) -> Any:
    return full_like(x, 0)


def _all_ones(dtype: np.dtype) -> np.ndarray:
    """The integer with every bit set: -1 signed, the maximum unsigned."""
    return np.invert(np.zeros((), dtype))


# ---- linear arithmetic -------------------------------------------------------------------------

# add and mul also accept bool (numpy's logical or / and); sub and neg need numbers
add_p = binary("add", np.add)
sub_p = binary("sub", np.subtract, is_numeric, "numeric")
neg_p = unary("neg", np.negative, is_numeric, "numeric")


def _ct_if_linear(ct: Any, x: Any) -> Any:
    """The cotangent for operand ``x``: None unless x is linear (an UndefinedPrimal)."""
    return ct if is_undefined(x) else None


def _add_transpose(ct, x, y):
    if isinstance(ct, Zero):
        return [None, None]
    return [_ct_if_linear(ct, x), _ct_if_linear(ct, y)]


def _sub_transpose(ct, x, y):
    if isinstance(ct, Zero):
        return [None, None]
    return [_ct_if_linear(ct, x), neg(ct) if is_undefined(y) else None]


defjvp(add_p, lambda t, x, y: t, lambda t, x, y: t)
add_p.def_transpose(_add_transpose)
defjvp(sub_p, lambda t, x, y: t, lambda t, x, y: neg(t))
sub_p.def_transpose(_sub_transpose)
defjvp(neg_p, lambda t, x: neg(t))
neg_p.def_transpose(lambda ct, x: [neg(ct)])

mul_p = binary("mul", np.multiply)
defjvp(mul_p, lambda t, x, y: mul(t, y), lambda t, x, y: mul(x, t))


def _finite_where_ct_is_zero(ct: Any, y: Any, for_div: bool = False) -> Any:
    """The constant factor ``y`` of a linear ``ct * y`` (divisor of ``ct / y`` with
    ``for_div``), with the entries that would give 0 * NaN or 0 / 0 replaced where the cotangent
    ``ct`` is exactly 0 (by 0, or by 1 for a divisor): a zero cotangent contributes nothing
    through an undefined (NaN) partial derivative or a division by zero. This makes the gradient
    through the untaken side of ``where(x > 0, log(x), 0)``, ``where(x > 0, sqrt(x), 0)`` or
    ``where(x != 0, 1 / x, 0)`` 0 and not NaN (docs/conventions.md).

    A zero cotangent times an *infinite* factor stays NaN: that is how an overflow shows (the
    naive ``log(1 + exp(x))`` at x = 750 has cotangent 1/inf = 0 meeting exp's inf), and 0 there
    would be silently wrong. Other factors are kept as they are, so derivatives of the product
    with respect to ``ct`` stay exact. Floats only.
    """
    if isinstance(ct, Zero) or not dtypes.is_float(get_aval(ct).dtype):
        return y
    # Every operation here reads ct: y where ct is 0, a harmless constant elsewhere. An
    # expression of y alone (``isnan(y)``) would be a function of forward values only, which
    # the launch plan fuses into the forward kernel that makes y, and its result would then be
    # held from the forward pass to the backward one beside y: one more activation per product.
    repl = full_like(y, 1 if for_div else 0)
    yz = select(eq(ct, _zeros_like(ct)), y, repl)
    bad = ne(yz, yz)  # ct == 0 and y is NaN
    if for_div:
        bad = select(bad, bad, eq(yz, _zeros_like(yz)))  # or y == 0
    return select(bad, repl, y)


@mul_p.def_transpose
def _mul_transpose(ct, x, y):
    if is_undefined(x) and is_undefined(y):
        raise NotImplementedError("mul of two linear values is not linear")
    if is_undefined(x):
        return [mul(ct, _finite_where_ct_is_zero(ct, y)), None]
    return [None, mul(_finite_where_ct_is_zero(ct, x), ct)]


# ---- division and remainder --------------------------------------------------------------------


def _div_impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if not dtypes.is_int(x.dtype):
        return np.true_divide(x, y)
    # C-style truncation, in integer arithmetic (a float64 detour would lose int64 bits).
    # x / 0 is -1 (all bits set) as in XLA, so that x == (x / y) * y + rem(x, y) still holds.
    safe = np.where(y == 0, np.ones((), y.dtype), y)
    q = np.floor_divide(x, safe)
    if not dtypes.is_unsigned(x.dtype):
        q = q + ((np.remainder(x, safe) != 0) & ((x < 0) != (safe < 0))).astype(x.dtype)
    return np.where(y == 0, _all_ones(x.dtype), q).astype(x.dtype)


div_p = binary("div", _div_impl, is_numeric, "numeric")
defjvp(div_p, lambda t, x, y: div(t, y), lambda t, x, y: neg(div(mul(t, x), mul(y, y))))


@div_p.def_transpose
def _div_transpose(ct, x, y):
    if is_undefined(y):
        raise NotImplementedError("div is not linear in its divisor")
    if isinstance(ct, Zero):
        return [None, None]
    return [div(ct, _finite_where_ct_is_zero(ct, y, for_div=True)), None]


def _rem_impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if not dtypes.is_int(x.dtype):
        return np.fmod(x, y)  # the sign of the dividend, like C's fmod
    # x % 0 is x, as in XLA; np.fmod on integers is C's % elsewhere
    safe = np.where(y == 0, np.ones((), y.dtype), y)
    return np.where(y == 0, x, np.fmod(x, safe)).astype(x.dtype)


def _trunc(q: Any) -> Any:
    """Round toward zero, with blu operations (for derivatives)."""
    return mul(sign(q), floor(abs(q)))


rem_p = binary("rem", _rem_impl, is_numeric, "numeric")
defjvp(rem_p, lambda t, x, y: t, lambda t, x, y: neg(mul(t, _trunc(div(x, y)))))


# ---- max and min -------------------------------------------------------------------------------

max_p = binary("max", np.maximum)
min_p = binary("min", np.minimum)


def _balanced_eq(x: Any, out: Any, y: Any) -> Any:
    """1 where x alone gave ``out``, 1/2 where x and y tie, 0 elsewhere (as in JAX): at a tie
    the derivative is split evenly between the two operands."""
    half_or_one = select(eq(y, out), full_like(x, 0.5), _one(x))
    return select(eq(x, out), half_or_one, _zeros_like(x))


for _p in (max_p, min_p):
    defjvp_with_output(
        _p,
        lambda t, out, x, y: mul(t, _balanced_eq(x, out, y)),
        lambda t, out, x, y: mul(t, _balanced_eq(y, out, x)),
    )


# ---- sign, magnitude and rounding --------------------------------------------------------------

abs_p = unary("abs", np.abs, is_numeric, "numeric")


@abs_p.def_abstract_eval
def _abs_abstract_eval(x: ShapedArray) -> ShapedArray:
    check_dtype("abs", x, is_numeric, "numeric")
    return ShapedArray(x.shape, dtypes.real_dtype(x.dtype), x.weak_type)  # |complex| is real


def _abs_jvp(t: Any, out: Any, x: Any) -> Any:
    if not dtypes.is_complex(get_aval(x).dtype):
        return mul(t, sign(x))  # sign(0) = 0: the derivative at 0 is 0, as in JAX
    # d|z| = Re(conj(z) dz) / |z|, and 0 at z = 0 (as JAX)
    safe = select(eq(out, _zeros_like(out)), _one(out), out)
    return select(
        eq(out, _zeros_like(out)), _zeros_like(out), div(_late.real(mul(_late.conj(x), t)), safe)
    )


defjvp_with_output(abs_p, _abs_jvp)


def _sign_impl(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "f" or x.dtype == dtypes.bfloat16:
        return np.where(x == 0, x, np.sign(x))  # sign(-0.0) is -0.0, as XLA's
    if x.dtype.kind != "c":
        return np.sign(x)
    mag = np.abs(x)  # z / |z|, 0 at 0 (numpy 2's complex sign)
    return np.where(mag == 0, 0, x / np.where(mag == 0, 1, mag)).astype(x.dtype)


sign_p = unary("sign", _sign_impl, is_numeric, "numeric")
floor_p = unary("floor", np.floor, is_float, "floating-point")
ceil_p = unary("ceil", np.ceil, is_float, "floating-point")


class RoundingMethod(enum.IntEnum):
    """How ``round`` breaks ties (as ``jax.lax.RoundingMethod``)."""

    AWAY_FROM_ZERO = 0
    TO_NEAREST_EVEN = 1


def _round_impl(x: np.ndarray, *, rounding_method: int) -> np.ndarray:
    if rounding_method == RoundingMethod.TO_NEAREST_EVEN:
        return np.rint(x)
    t = np.trunc(x)
    # x - trunc(x) is exact, so the tie test is exact (unlike floor(x + 0.5))
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t)


round_p = unary("round", _round_impl, is_float, "floating-point")

for _p in (sign_p, floor_p, ceil_p, round_p):
    nondifferentiable(_p)  # piecewise constant: the derivative is 0 (where it exists)


def _is_finite_impl(x: np.ndarray) -> np.ndarray:
    if x.dtype == dtypes.bfloat16:
        x = x.astype(np.float32)
    return np.isfinite(x)


is_finite_p = Primitive("is_finite")
is_finite_p.def_impl(_is_finite_impl)
is_finite_p.def_abstract_eval(
    elementwise_abstract_eval("is_finite", is_float, "floating-point", out_dtype=dtypes.bool_)
)
defvectorized(is_finite_p)
nondifferentiable(is_finite_p)


# ---- transcendental ----------------------------------------------------------------------------

sin_p = unary("sin", np.sin)
cos_p = unary("cos", np.cos)
defjvp(sin_p, lambda t, x: mul(t, cos(x)))
defjvp(cos_p, lambda t, x: neg(mul(t, sin(x))))

exp_p = unary("exp", np.exp)
defjvp_with_output(exp_p, lambda t, out, x: mul(t, out))

log_p = unary("log", np.log)
defjvp(log_p, lambda t, x: div(t, x))


def _tanh_impl(x: np.ndarray) -> np.ndarray:
    out = np.tanh(x)
    if x.dtype.kind != "c":
        return out
    # tanh(+-inf + iy), y finite: +-1 + i copysign(0, y) (C99; numpy may give the other zero)
    edge = np.isinf(x.real) & np.isfinite(x.imag)
    out = np.array(out, x.dtype)
    out.real = np.where(edge, np.sign(x.real), out.real)
    out.imag = np.where(edge, np.copysign(np.zeros((), x.real.dtype), x.imag), out.imag)
    return out


tanh_p = unary("tanh", _tanh_impl)
defjvp_with_output(tanh_p, lambda t, out, x: mul(t, sub(_one(out), mul(out, out))))


# ---- comparisons and select --------------------------------------------------------------------


def _compare(name: str, impl: Callable) -> Primitive:
    p = Primitive(name)
    p.def_impl(impl)  # numpy compares bfloat16 directly; no float32 detour needed
    p.def_abstract_eval(elementwise_abstract_eval(name, out_dtype=dtypes.bool_))
    defbroadcasting(p)
    nondifferentiable(p)
    return p


eq_p = _compare("eq", np.equal)
ne_p = _compare("ne", np.not_equal)
lt_p = _compare("lt", np.less)
le_p = _compare("le", np.less_equal)
gt_p = _compare("gt", np.greater)
ge_p = _compare("ge", np.greater_equal)

select_p = Primitive("select")
select_p.def_impl(lambda pred, on_true, on_false: np.where(pred, on_true, on_false))


@select_p.def_abstract_eval
def _select_abstract_eval(pred: ShapedArray, on_true: ShapedArray, on_false: ShapedArray):
    check_same_shapes_dtypes("select", (on_true, on_false))
    if pred.shape != on_true.shape:
        raise BluShapeError(
            with_user_line(
                f"select: predicate {pred.str_short()} must have the shape of the cases "
                f"{on_true.str_short()}"
            )
        )
    check_dtype("select (predicate)", pred, lambda d: d == dtypes.bool_, "bool")
    return ShapedArray(on_true.shape, on_true.dtype, on_true.weak_type and on_false.weak_type)


defjvp(
    select_p,
    None,
    lambda t, p, a, b: select(p, t, _zeros_like(t)),
    lambda t, p, a, b: select(p, _zeros_like(t), t),
)


@select_p.def_transpose
def _select_transpose(ct, pred, on_true, on_false):
    if is_undefined(pred):
        raise NotImplementedError("select is not linear in its predicate")
    if isinstance(ct, Zero):
        return [None, None, None]
    z = _zeros_like(ct)
    return [
        None,
        select(pred, ct, z) if is_undefined(on_true) else None,
        select(pred, z, ct) if is_undefined(on_false) else None,
    ]


defbroadcasting(select_p)


# ---- the lax functions users call --------------------------------------------------------------
# Operands must have equal dtypes (no promotion: that is blu.numpy's job); shapes broadcast
# only as JAX's lax does (a 0-d operand, size-1 dimensions of operands of one rank; no ranks
# added); Python scalars take the other operand's dtype and shape. Errors: BluShapeError for
# shapes that do not broadcast, BluTypeError for unequal or unsupported dtypes.


def add(x: Any, y: Any) -> Any:
    """Elementwise ``x + y``; integers wrap modulo ``2**bits``; on bool, logical or."""
    return add_p.bind(*operands(x, y))


def sub(x: Any, y: Any) -> Any:
    """Elementwise ``x - y`` (numeric dtypes; integers wrap)."""
    return sub_p.bind(*operands(x, y))


def mul(x: Any, y: Any) -> Any:
    """Elementwise ``x * y``; integers wrap modulo ``2**bits``; on bool, logical and."""
    return mul_p.bind(*operands(x, y))


def div(x: Any, y: Any) -> Any:
    """Elementwise ``x / y``. Integer division truncates toward zero (C semantics); integer
    division by zero gives -1 (all bits set), as XLA does."""
    return div_p.bind(*operands(x, y))


def rem(x: Any, y: Any) -> Any:
    """Elementwise remainder of ``x / y`` with the sign of ``x`` (C's ``fmod`` / ``%``), so
    ``x == div(x, y) * y + rem(x, y)``. Integer ``rem(x, 0)`` is ``x``, as in XLA."""
    return rem_p.bind(*operands(x, y))


def neg(x: Any) -> Any:
    """Elementwise ``-x`` (numeric dtypes; unsigned integers wrap)."""
    return neg_p.bind(x)


def max(x: Any, y: Any) -> Any:
    """Elementwise maximum; NaN if either is NaN. At ties ``x == y`` the derivative is split
    evenly: ``d max(x, y) = (dx + dy) / 2`` (as in JAX)."""
    return max_p.bind(*operands(x, y))


def min(x: Any, y: Any) -> Any:
    """Elementwise minimum; NaN if either is NaN; ties split the derivative evenly like max."""
    return min_p.bind(*operands(x, y))


def abs(x: Any) -> Any:
    """Elementwise ``|x|`` (numeric dtypes). Its derivative is ``sign(x)``, so 0 at 0."""
    return abs_p.bind(x)


def sign(x: Any) -> Any:
    """-1, 0 or 1 by the sign of ``x`` (NaN stays NaN); derivative 0."""
    return sign_p.bind(x)


def floor(x: Any) -> Any:
    """Round down to an integral value (floating-point dtypes); derivative 0."""
    return floor_p.bind(x)


def ceil(x: Any) -> Any:
    """Round up to an integral value (floating-point dtypes); derivative 0."""
    return ceil_p.bind(x)


def round(x: Any, rounding_method: int = RoundingMethod.AWAY_FROM_ZERO) -> Any:
    """Round to an integral value; ties go away from zero (default, like ``jax.lax.round``) or
    to the nearest even value (``RoundingMethod.TO_NEAREST_EVEN``, like ``np.round``)."""
    return round_p.bind(x, rounding_method=int(RoundingMethod(rounding_method)))


def is_finite(x: Any) -> Any:
    """bool array: True where ``x`` is neither infinite nor NaN (floating-point dtypes)."""
    return is_finite_p.bind(x)


def sin(x: Any) -> Any:
    """Sine (radians)."""
    return sin_p.bind(x)


def cos(x: Any) -> Any:
    """Cosine (radians)."""
    return cos_p.bind(x)


def exp(x: Any) -> Any:
    """``e ** x``; overflows to inf without warning."""
    return exp_p.bind(x)


def log(x: Any) -> Any:
    """Natural logarithm; -inf at 0 and NaN below, like numpy (no warning)."""
    return log_p.bind(x)


def tanh(x: Any) -> Any:
    """Hyperbolic tangent."""
    return tanh_p.bind(x)


def eq(x: Any, y: Any) -> Any:
    """bool array ``x == y``."""
    return eq_p.bind(*operands(x, y))


def ne(x: Any, y: Any) -> Any:
    """bool array ``x != y``."""
    return ne_p.bind(*operands(x, y))


def lt(x: Any, y: Any) -> Any:
    """bool array ``x < y``."""
    return lt_p.bind(*operands(x, y))


def le(x: Any, y: Any) -> Any:
    """bool array ``x <= y``."""
    return le_p.bind(*operands(x, y))


def gt(x: Any, y: Any) -> Any:
    """bool array ``x > y``."""
    return gt_p.bind(*operands(x, y))


def ge(x: Any, y: Any) -> Any:
    """bool array ``x >= y``."""
    return ge_p.bind(*operands(x, y))


def select(pred: Any, on_true: Any, on_false: Any) -> Any:
    """``on_true`` where ``pred`` else ``on_false`` (all of one shape; pred is bool)."""
    on_true, on_false = operands(on_true, on_false)
    return select_p.bind(pred, on_true, on_false)
