"""Elementwise primitives: arithmetic, transcendental functions, comparisons, select, casts.

Each primitive is defined in one place with all its rules: numpy impl, abstract eval (operands
of equal shape and dtype), JVP, transpose (for the linear ones) and batching.
"""

from __future__ import annotations

__all__ = ['add', 'sub', 'mul', 'div', 'neg', 'sin', 'cos', 'exp', 'log', 'tanh', 'eq', 'ne', 'lt', 'le', 'gt', 'ge', 'select', 'convert_element_type']  # public lax functions; keep in sync

from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.primitive import Primitive
from blu.lax._base import (
    any_dtype,
    as_operands,
    compute_in_f32,
    elementwise_abstract_eval,
    is_float,
    is_numeric,
)
from blu.transforms.ad_util import (
    Zero,
    defjvp,
    defjvp_with_output,
    is_undefined,
)
from blu.transforms.batching import defbroadcasting, defvectorized


def _unary(name: str, impl, allowed=is_float, kind: str = "floating-point") -> Primitive:
    p = Primitive(name)
    p.def_impl(compute_in_f32(impl))
    p.def_abstract_eval(elementwise_abstract_eval(name, allowed, kind))
    defvectorized(p)
    return p


def _binary(name: str, impl, allowed=any_dtype, kind: str = "") -> Primitive:
    p = Primitive(name)
    p.def_impl(compute_in_f32(impl))
    p.def_abstract_eval(elementwise_abstract_eval(name, allowed, kind))
    defbroadcasting(p)
    return p


# ---- linear arithmetic -------------------------------------------------------------------------

add_p = _binary("add", np.add)
sub_p = _binary("sub", np.subtract)
neg_p = _unary("neg", np.negative, is_numeric, "numeric")


def _unbroadcast_ct(ct: Any, x: Any) -> Any:
    """A cotangent for operand ``x`` (an UndefinedPrimal or value): None if x is not linear."""
    return ct if is_undefined(x) else None


def _add_transpose(ct, x, y):
    if isinstance(ct, Zero):
        return [None, None]
    return [_unbroadcast_ct(ct, x), _unbroadcast_ct(ct, y)]


def _sub_transpose(ct, x, y):
    if isinstance(ct, Zero):
        return [None, None]
    return [_unbroadcast_ct(ct, x), neg(ct) if is_undefined(y) else None]


defjvp(add_p, lambda t, x, y: t, lambda t, x, y: t)
add_p.def_transpose(_add_transpose)
defjvp(sub_p, lambda t, x, y: t, lambda t, x, y: neg(t))
sub_p.def_transpose(_sub_transpose)
defjvp(neg_p, lambda t, x: neg(t))
neg_p.def_transpose(lambda ct, x: [neg(ct)])

mul_p = _binary("mul", np.multiply)
defjvp(mul_p, lambda t, x, y: mul(t, y), lambda t, x, y: mul(x, t))


@mul_p.def_transpose
def _mul_transpose(ct, x, y):
    if is_undefined(x) and is_undefined(y):
        raise NotImplementedError("mul of two linear values is not linear")
    if is_undefined(x):
        return [mul(ct, y), None]
    return [None, mul(x, ct)]


def _div_impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if dtypes.is_int(x.dtype):  # C-style truncating division, like lax.div
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.trunc(np.true_divide(x, y))
        return np.where(y == 0, 0, q).astype(x.dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.true_divide(x, y)


div_p = _binary("div", _div_impl, is_numeric, "numeric")
defjvp(div_p, lambda t, x, y: div(t, y), lambda t, x, y: neg(div(mul(t, x), mul(y, y))))


@div_p.def_transpose
def _div_transpose(ct, x, y):
    if is_undefined(y):
        raise NotImplementedError("div is not linear in its divisor")
    return [div(ct, y), None]


# ---- transcendental ----------------------------------------------------------------------------

sin_p = _unary("sin", np.sin)
cos_p = _unary("cos", np.cos)
defjvp(sin_p, lambda t, x: mul(t, cos(x)))
defjvp(cos_p, lambda t, x: neg(mul(t, sin(x))))

exp_p = _unary("exp", np.exp)
defjvp_with_output(exp_p, lambda t, out, x: mul(t, out))

log_p = _unary("log", lambda x: _errstate(np.log, x))
defjvp(log_p, lambda t, x: div(t, x))

tanh_p = _unary("tanh", np.tanh)
defjvp_with_output(tanh_p, lambda t, out, x: mul(t, sub(_one(out), mul(out, out))))


def _errstate(fn, *args):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return fn(*args)


def _one(like: Any) -> Any:
    from blu.lax.shapes import full_like

    return full_like(like, 1)


# ---- comparisons and select --------------------------------------------------------------------


def _compare(name: str, impl) -> Primitive:
    p = Primitive(name)
    p.def_impl(impl)
    p.def_abstract_eval(elementwise_abstract_eval(name, out_dtype=dtypes.bool_))
    defbroadcasting(p)
    from blu.transforms.ad_util import nondifferentiable

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
    from blu.lax._base import check_dtype, check_same_shapes_dtypes

    check_same_shapes_dtypes("select", (on_true, on_false))
    if pred.shape != on_true.shape:
        from blu.core.errors import BluShapeError, with_user_line

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


def _zeros_like(x: Any) -> Any:
    from blu.lax.shapes import full_like

    return full_like(x, 0)


# ---- casts -------------------------------------------------------------------------------------

convert_element_type_p = Primitive("convert_element_type")


@convert_element_type_p.def_impl
def _convert_impl(x: np.ndarray, *, new_dtype: np.dtype, weak_type: bool) -> np.ndarray:
    if dtypes.is_float(x.dtype) and dtypes.is_int(new_dtype):
        # float -> int truncates toward zero; NaN/inf give 0/min/max like XLA (saturating)
        info = np.iinfo(new_dtype)
        with np.errstate(invalid="ignore"):
            y = np.nan_to_num(np.trunc(x.astype(np.float64)), nan=0.0)
            return np.clip(y, info.min, info.max).astype(new_dtype)
    return x.astype(new_dtype)


@convert_element_type_p.def_abstract_eval
def _convert_abstract_eval(x: ShapedArray, *, new_dtype: np.dtype, weak_type: bool):
    return ShapedArray(x.shape, new_dtype, weak_type)


@convert_element_type_p.def_jvp
def _convert_jvp(primals, tangents, *, new_dtype, weak_type):
    (x,), (t,) = primals, tangents
    out = convert_element_type_p.bind(x, new_dtype=new_dtype, weak_type=weak_type)
    from blu.core.interpreter import get_aval
    from blu.transforms.ad_util import tangent_aval

    if not (dtypes.is_float(new_dtype) and dtypes.is_float(get_aval(x).dtype)):
        return out, Zero(tangent_aval(get_aval(out)))
    return out, convert_element_type_p.bind(t, new_dtype=new_dtype, weak_type=False)


@convert_element_type_p.def_transpose
def _convert_transpose(ct, x, *, new_dtype, weak_type):
    return [convert_element_type_p.bind(ct, new_dtype=x.aval.dtype, weak_type=False)]


defvectorized(convert_element_type_p)


# ---- the lax functions users call --------------------------------------------------------------


def add(x: Any, y: Any) -> Any:
    """Elementwise ``x + y`` (equal shapes and dtypes; Python scalars adapt)."""
    return add_p.bind(*as_operands(x, y))


def sub(x: Any, y: Any) -> Any:
    """Elementwise ``x - y``."""
    return sub_p.bind(*as_operands(x, y))


def mul(x: Any, y: Any) -> Any:
    """Elementwise ``x * y``."""
    return mul_p.bind(*as_operands(x, y))


def div(x: Any, y: Any) -> Any:
    """Elementwise ``x / y``; integer division truncates toward zero (C semantics)."""
    return div_p.bind(*as_operands(x, y))


def neg(x: Any) -> Any:
    """Elementwise ``-x``."""
    return neg_p.bind(x)


def sin(x: Any) -> Any:
    return sin_p.bind(x)


def cos(x: Any) -> Any:
    return cos_p.bind(x)


def exp(x: Any) -> Any:
    return exp_p.bind(x)


def log(x: Any) -> Any:
    """Natural logarithm; -inf at 0 and NaN below, like numpy (no warning)."""
    return log_p.bind(x)


def tanh(x: Any) -> Any:
    return tanh_p.bind(x)


def eq(x: Any, y: Any) -> Any:
    return eq_p.bind(*as_operands(x, y))


def ne(x: Any, y: Any) -> Any:
    return ne_p.bind(*as_operands(x, y))


def lt(x: Any, y: Any) -> Any:
    return lt_p.bind(*as_operands(x, y))


def le(x: Any, y: Any) -> Any:
    return le_p.bind(*as_operands(x, y))


def gt(x: Any, y: Any) -> Any:
    return gt_p.bind(*as_operands(x, y))


def ge(x: Any, y: Any) -> Any:
    return ge_p.bind(*as_operands(x, y))


def select(pred: Any, on_true: Any, on_false: Any) -> Any:
    """``on_true`` where ``pred`` else ``on_false`` (all of one shape; pred is bool)."""
    on_true, on_false = as_operands(on_true, on_false)
    return select_p.bind(pred, on_true, on_false)


def convert_element_type(x: Any, new_dtype: Any, weak_type: bool = False) -> Any:
    """Cast ``x`` to ``new_dtype`` (float->int truncates toward zero and saturates)."""
    from blu.core.interpreter import get_aval

    new_dtype = dtypes.canonicalize(new_dtype)
    aval = get_aval(x)
    if aval.dtype == new_dtype and aval.weak_type == weak_type and not isinstance(x, (int, float)):
        return x
    return convert_element_type_p.bind(x, new_dtype=new_dtype, weak_type=weak_type)
