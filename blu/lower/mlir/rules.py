"""Per-element lowering rules, shared by the CPU and CUDA code generators: one small function
per primitive, registered in its ``lowerings`` slot (``blu/lower/slots.py``) when this module
is imported.

Three kinds, all working on one element at a time inside a kernel's loop nest (``codegen.py``):

- ``"elementwise"``: ``rule(b, eqn, *operand_values) -> value``. Operands are SSA
  values in their compute type (``emit.compute_type``); semantics follow each primitive's numpy
  impl (XLA's: integer division by zero gives -1, ``rem(x, 0) = x``, shifts by the bit width or
  more shift everything out, float -> int casts truncate, saturate and map NaN to 0).
- ``"index"``: ``rule(k, eqn, idx) -> value``: data movement (broadcast, reshape, transpose, slice,
  pad, concatenate, ...) and ``iota``: the value at ``idx`` of the output, read from the
  operand at a mapped index (``k.value(atom, idx)``), so moving data costs no copy.
- ``"reduce"``: reductions, as (identity, combine) in the compute type; ``codegen.py``
  drives the loops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.primitive import Primitive
from blu.lax import bits, parallel, random_gamma, reductions, shapes, slicing, special
from blu.lax import elementwise as ew
from blu.lower.mlir import mathlib, mathlib_gamma, mathlib_special
from blu.lower.mlir.emit import Builder, Idx, compute_type, is_float, is_unsigned
from blu.lower.mlir.rules_base import _binop, _cmpi, _dt, _rule, _sel  # noqa: F401  (shared)
from blu.lower.mlir.rules_casts import convert  # noqa: F401  (registers the casts; rules_complex)
from blu.lower.slots import lowering
from blu.transforms import ad_ops, remat


def _by_kind(fop: str, iop: str, bop: str | None = None, uop: str | None = None) -> Callable:
    """A binary rule choosing the float / signed / unsigned / bool arith op by dtype."""

    def rule(b: Builder, eqn: Any, x: str, y: str) -> str:
        dt, ty = _dt(eqn), compute_type(_dt(eqn))
        if is_float(dt):
            return _binop(b, fop, x, y, ty)
        if dt == dtypes.bool_ and bop is not None:
            return _binop(b, bop, x, y, ty)
        return _binop(b, uop if (uop and is_unsigned(dt)) else iop, x, y, ty)

    return rule


# ---- arithmetic --------------------------------------------------------------------------------

_rule(ew.add_p)(_by_kind("addf", "addi", "ori"))
_rule(ew.sub_p)(_by_kind("subf", "subi"))
_mul = _rule(ew.mul_p)(_by_kind("mulf", "muli", "andi"))
_rule(ew.max_p)(_by_kind("maximumf", "maxsi", "ori", "maxui"))
_rule(ew.min_p)(_by_kind("minimumf", "minsi", "andi", "minui"))
_rule(bits.and_p)(_by_kind("andi", "andi", "andi"))
_rule(bits.or_p)(_by_kind("ori", "ori", "ori"))
_rule(bits.xor_p)(_by_kind("xori", "xori", "xori"))


@_rule(ew.neg_p)
def _neg(b, eqn, x):
    ty = compute_type(_dt(eqn))
    if is_float(_dt(eqn)):
        return b.op(f"arith.negf {x} : {ty}")
    return _binop(b, "subi", b.const(0, ty), x, ty)


@_rule(bits.not_p)
def _not(b, eqn, x):
    ty = compute_type(_dt(eqn))
    return _binop(b, "xori", x, b.const(-1 if ty != "i1" else 1, ty), ty)


@_rule(ew.div_p)
def _div(b, eqn, x, y):
    dt, ty = _dt(eqn), compute_type(_dt(eqn))
    if is_float(dt):
        return _binop(b, "divf", x, y, ty)
    zero, one, ones = b.const(0, ty), b.const(1, ty), b.const(-1, ty)
    y0 = _cmpi(b, "eq", y, zero, ty)
    if is_unsigned(dt):
        q = _binop(b, "divui", x, _sel(b, y0, one, y, ty), ty)
        return _sel(b, y0, ones, q, ty)
    # x / 0 = -1 (XLA); x / -1 = -x (wraps), which divsi would trap on for the minimum
    ym1 = _cmpi(b, "eq", y, ones, ty)
    safe = _sel(b, _binop(b, "ori", y0, ym1, "i1"), one, y, ty)
    q = _binop(b, "divsi", x, safe, ty)
    q = _sel(b, ym1, _binop(b, "subi", zero, x, ty), q, ty)
    return _sel(b, y0, ones, q, ty)


@_rule(ew.rem_p)
def _rem(b, eqn, x, y):
    dt, ty = _dt(eqn), compute_type(_dt(eqn))
    if is_float(dt):
        return _binop(b, "remf", x, y, ty)
    zero, one = b.const(0, ty), b.const(1, ty)
    y0 = _cmpi(b, "eq", y, zero, ty)
    if is_unsigned(dt):
        return _sel(b, y0, x, _binop(b, "remui", x, _sel(b, y0, one, y, ty), ty), ty)
    ym1 = _cmpi(b, "eq", y, b.const(-1, ty), ty)
    safe = _sel(b, _binop(b, "ori", y0, ym1, "i1"), one, y, ty)
    r = _sel(b, ym1, zero, _binop(b, "remsi", x, safe, ty), ty)
    return _sel(b, y0, x, r, ty)


@_rule(ew.abs_p)
def _abs(b, eqn, x):
    dt, ty = _dt(eqn), compute_type(_dt(eqn))
    if is_float(dt):
        return b.op(f"math.absf {x} : {ty}")
    return x if is_unsigned(dt) else b.op(f"math.absi {x} : {ty}")


@_rule(ew.sign_p)
def _sign(b, eqn, x):
    dt, ty = _dt(eqn), compute_type(_dt(eqn))
    zero, one = b.const(0, ty), b.const(1, ty)
    if is_float(dt):  # 0, -0 and NaN are their own sign
        pos = b.op(f"arith.cmpf ogt, {x}, {zero} : {ty}")
        neg = b.op(f"arith.cmpf olt, {x}, {zero} : {ty}")
        return _sel(b, pos, one, _sel(b, neg, b.const(-1, ty), x, ty), ty)
    if is_unsigned(dt):
        return _sel(b, _cmpi(b, "ne", x, zero, ty), one, zero, ty)
    pos = _sel(b, _cmpi(b, "sgt", x, zero, ty), one, zero, ty)
    return _sel(b, _cmpi(b, "slt", x, zero, ty), b.const(-1, ty), pos, ty)


@_rule(special.square_p)
def _square(b, eqn, x):
    return _mul(b, eqn, x, x)


@_rule(special.integer_pow_p)
def _integer_pow(b, eqn, x):
    dt, ty, y = _dt(eqn), compute_type(_dt(eqn)), eqn.params["y"]
    mul = "mulf" if is_float(dt) else "muli"
    acc, base, n = None, x, abs(y)
    while n:  # square-and-multiply, as the impl does for integers
        if n & 1:
            acc = base if acc is None else _binop(b, mul, acc, base, ty)
        n >>= 1
        if n:
            base = _binop(b, mul, base, base, ty)
    acc = b.const(1, ty) if acc is None else acc
    return _binop(b, "divf", b.const(1.0, ty), acc, ty) if y < 0 else acc


@_rule(special.rsqrt_p)
def _rsqrt(b, eqn, x):
    ty = compute_type(_dt(eqn))
    return _binop(b, "divf", b.const(1.0, ty), b.op(f"math.sqrt {x} : {ty}"), ty)


@_rule(ew.is_finite_p)
def _is_finite(b, eqn, x):
    ty = compute_type(_dt(eqn))
    return b.op(f"arith.cmpf olt, {b.op(f'math.absf {x} : {ty}')}, {b.const(np.inf, ty)} : {ty}")


@_rule(ew.round_p)
def _round(b, eqn, x):
    op = "roundeven" if eqn.params["rounding_method"] == 1 else "round"
    return b.op(f"math.{op} {x} : {compute_type(_dt(eqn))}")


# float functions: a vectorizable polynomial in f32 where mathlib has one, else the math
# dialect (libm); f64 always through libm (numpy's accuracy)
_MATH = {"sqrt": "sqrt", "floor": "floor", "ceil": "ceil", "sin": "sin", "cos": "cos",
         "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh",
         "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "exp2": "exp2",
         "cbrt": "cbrt", "erfc": "erfc", "exp": "exp", "log": "log", "tanh": "tanh",
         "log1p": "log1p", "expm1": "expm1", "erf": "erf"}  # fmt: skip


# MLIR lowers math.log1p / math.expm1 to log(1 + x) / exp(x) - 1 (no precision near 0): libm
_LIBM_ONLY = {"log1p": ("log1p", "log1pf"), "expm1": ("expm1", "expm1f")}


def _math_rule(name: str) -> Callable:
    def rule(b, eqn, x):
        ty = compute_type(_dt(eqn))
        if name == "exp" and ty == "f32" and eqn.invars[0] in b.nonpositive:  # x - max(x)
            return mathlib.exp_nonpositive(b, x)
        if ty == "f32" and name in mathlib.FUNCTIONS:
            return mathlib.FUNCTIONS[name](b, x)
        if name in _LIBM_ONLY:
            return b.libm(_LIBM_ONLY[name][ty == "f32"], [x], ty)
        return b.op(f"math.{_MATH[name]} {x} : {ty}")

    return rule


for _p in (
    special.sqrt_p, ew.floor_p, ew.ceil_p, ew.sin_p, ew.cos_p, special.tan_p, special.asin_p,
    special.acos_p, special.atan_p, special.sinh_p, special.cosh_p, special.asinh_p,
    special.acosh_p, special.atanh_p, special.exp2_p, special.cbrt_p, special.erfc_p, ew.exp_p,
    ew.log_p, ew.tanh_p, special.log1p_p, special.expm1_p, special.erf_p,
):  # fmt: skip
    _rule(_p)(_math_rule(_p.name))


@_rule(special.logistic_p)
def _logistic(b, eqn, x):
    ty = compute_type(_dt(eqn))
    if ty == "f32":
        return mathlib.logistic(b, x)
    ax = b.op(f"math.absf {x} : {ty}")
    e = b.op(f"math.exp {b.op(f'arith.negf {ax} : {ty}')} : {ty}")
    d = _binop(b, "addf", e, b.const(1.0, ty), ty)
    pos, neg = _binop(b, "divf", b.const(1.0, ty), d, ty), _binop(b, "divf", e, d, ty)
    return _sel(b, b.op(f"arith.cmpf oge, {x}, {b.const(0.0, ty)} : {ty}"), pos, neg, ty)


@_rule(special.pow_p)
def _pow(b, eqn, x, y):
    return b.op(f"math.powf {x}, {y} : {compute_type(_dt(eqn))}")


@_rule(special.atan2_p)
def _atan2(b, eqn, x, y):
    return b.op(f"math.atan2 {x}, {y} : {compute_type(_dt(eqn))}")


# the gamma family and erf_inv: mathlib_special's algorithms in f32 and f64 (no libm has all of
# them, and none vectorizes)
def _special_rule(fn: Callable) -> Callable:
    return lambda b, eqn, x: fn(b, x, compute_type(_dt(eqn)))


_rule(special.lgamma_p)(_special_rule(mathlib_special.lgamma))
_rule(special.digamma_p)(_special_rule(mathlib_special.digamma))
_rule(special.erf_inv_p)(_special_rule(mathlib_special.erf_inv))


@_rule(special.polygamma_p)
def _polygamma(b, eqn, x):
    return mathlib_special.polygamma(b, x, compute_type(_dt(eqn)), eqn.params["m"])


@_rule(random_gamma.random_gamma_grad_p)
def _random_gamma_grad(b, eqn, a, x):  # two scf.while loops per element (mathlib_gamma)
    ty = compute_type(_dt(eqn))
    return mathlib_gamma.random_gamma_grad(b, a, x, ty, eqn.params["log_space"])


@_rule(ad_ops.stop_gradient_p, remat.name_p, parallel.pvary_p)  # names / vma marks only
def _identity(b, eqn, x):
    return x


# ---- comparisons and select --------------------------------------------------------------------

_FCMP = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}
_SCMP = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}
_UCMP = {"eq": "eq", "ne": "ne", "lt": "ult", "le": "ule", "gt": "ugt", "ge": "uge"}


def _compare(name: str) -> Callable:
    def rule(b, eqn, x, y):
        dt, ty = _dt(eqn), compute_type(_dt(eqn))
        if is_float(dt):
            return b.op(f"arith.cmpf {_FCMP[name]}, {x}, {y} : {ty}")
        table = _UCMP if (is_unsigned(dt) or dt == dtypes.bool_) else _SCMP
        return _cmpi(b, table[name], x, y, ty)

    return rule


for _p in (ew.eq_p, ew.ne_p, ew.lt_p, ew.le_p, ew.gt_p, ew.ge_p):
    _rule(_p)(_compare(_p.name))


@_rule(ew.select_p)
def _select(b, eqn, p, x, y):
    return _sel(b, p, x, y, compute_type(_dt(eqn, 1)))


# ---- shifts and bit counts ---------------------------------------------------------------------


def _shift(kind: str) -> Callable:
    def rule(b, eqn, x, y):
        ty = compute_type(_dt(eqn))
        bits = int(ty[1:])
        big = _cmpi(b, "uge", y, b.const(bits, ty), ty)  # the amount is read as unsigned
        amt = _sel(b, big, b.const(bits - 1 if kind == "shrsi" else 0, ty), y, ty)
        out = _binop(b, kind, x, amt, ty)
        return out if kind == "shrsi" else _sel(b, big, b.const(0, ty), out, ty)

    return rule


_rule(bits.shift_left_p)(_shift("shli"))
_rule(bits.shift_right_logical_p)(_shift("shrui"))
_rule(bits.shift_right_arithmetic_p)(_shift("shrsi"))


@_rule(bits.population_count_p)
def _popcount(b, eqn, x):
    return b.op(f"math.ctpop {x} : {compute_type(_dt(eqn))}")


@_rule(bits.clz_p)
def _clz(b, eqn, x):
    return b.op(f"math.ctlz {x} : {compute_type(_dt(eqn))}")


# ---- data movement (index maps) ----------------------------------------------------------------


def _index_rule(prim: Primitive) -> Callable:
    return lowering("index", prim)


@_index_rule(shapes.broadcast_in_dim_p)
def _bid(k, eqn, idx: Idx) -> str:
    x = eqn.invars[0]
    out = k.b.multi(idx)
    zero = k.b.index(0)
    dims = eqn.params["broadcast_dimensions"]
    multi = [zero if x.aval.shape[i] == 1 else out[d] for i, d in enumerate(dims)]
    return k.value(x, Idx(x.aval.shape, multi))


@_index_rule(shapes.reshape_p)
def _reshape(k, eqn, idx: Idx) -> str:
    x = eqn.invars[0]
    groups = _reshape_groups(x.aval.shape, idx.shape) if idx.multi is not None else None
    if groups is None:
        return k.value(x, Idx(x.aval.shape, lin=k.b.lin(idx)))  # row-major order is unchanged
    # dimensions only split or merged: each group's operand digits from its own output digits
    # (a split of y into (y / s, y % s) divides by s, not by every size of the shape: a
    # repeat's broadcast-and-reshape read at several offsets redid the whole division chain)
    b, multi = k.b, []
    for (i0, i1), (o0, o1) in groups:
        sub = Idx(idx.shape[o0:o1], idx.multi[o0:o1])
        multi += b.multi(Idx(x.aval.shape[i0:i1], None, b.lin(sub)))
    return k.value(x, Idx(x.aval.shape, multi, idx.lin))


def _reshape_groups(ins, outs) -> list | None:
    """The reshape of ``ins`` to ``outs`` as groups ``((i0, i1), (o0, o1))`` of consecutive
    dimensions with equal products (None if a size is 0)."""
    if 0 in ins or 0 in outs:
        return None
    groups, i, o = [], 0, 0
    while i < len(ins) or o < len(outs):
        i0, o0, pi, po = i, o, 1, 1
        while True:
            if pi <= po and i < len(ins):
                pi, i = pi * ins[i], i + 1
            elif o < len(outs):
                po, o = po * outs[o], o + 1
            else:
                break
            if pi == po and (i == len(ins) or ins[i] != 1 or o == len(outs)):
                break
        if pi != po:
            return None
        groups.append(((i0, i), (o0, o)))
    return groups


@_index_rule(shapes.squeeze_p)
def _squeeze(k, eqn, idx: Idx) -> str:
    x = eqn.invars[0]
    if idx.multi is None:
        return k.value(x, Idx(x.aval.shape, lin=idx.lin))
    it, zero = iter(idx.multi), k.b.index(0)
    dims = set(eqn.params["dimensions"])
    return k.value(
        x, Idx(x.aval.shape, [zero if d in dims else next(it) for d in range(x.aval.ndim)])
    )


@_index_rule(shapes.transpose_p)
def _transpose(k, eqn, idx: Idx) -> str:
    x, perm = eqn.invars[0], eqn.params["permutation"]
    out = k.b.multi(idx)
    multi = [None] * len(perm)
    for j, p in enumerate(perm):
        multi[p] = out[j]
    return k.value(x, Idx(x.aval.shape, multi))


@_index_rule(slicing.slice_p)
def _slice(k, eqn, idx: Idx) -> str:
    x, b = eqn.invars[0], k.b
    starts, strides = eqn.params["start_indices"], eqn.params["strides"]
    multi = [b.iaddc(b.imul(i, st), s) for i, s, st in zip(b.multi(idx), starts, strides)]
    return k.value(x, Idx(x.aval.shape, multi))


@_index_rule(shapes.rev_p)
def _rev(k, eqn, idx: Idx) -> str:
    x, b = eqn.invars[0], k.b
    dims = set(eqn.params["dimensions"])
    multi = [
        b.op(f"arith.subi {b.index(n - 1)}, {i} : index", "i") if d in dims else i
        for d, (i, n) in enumerate(zip(b.multi(idx), x.aval.shape))
    ]
    return k.value(x, Idx(x.aval.shape, multi))


@_index_rule(shapes.iota_p)
def _iota(k, eqn, idx: Idx) -> str:
    b, dt = k.b, eqn.params["dtype"]
    i = b.multi(idx)[eqn.params["dimension"]]
    as_int = b.op(f"arith.index_cast {i} : index to i64")
    return convert(b, as_int, dtypes.int64, dt)


def _clamp_index(b: Builder, t: str, n: int) -> str:
    """min(max(t, 0), n - 1) on signed index values (keeps a masked-off load in bounds)."""
    t = b.op(f"arith.maxsi {t}, {b.index(0)} : index", "i")
    return b.op(f"arith.minsi {t}, {b.index(max(n - 1, 0))} : index", "i")


@_index_rule(shapes.pad_p)
def _pad(k, eqn, idx: Idx) -> str:
    x, pv = eqn.invars
    b = k.b
    fill = k.value(pv, Idx((), ()))
    if x.aval.size == 0:
        return fill
    ok, multi = None, []
    for i, n, (lo, _, interior) in zip(b.multi(idx), x.aval.shape, eqn.params["padding_config"]):
        t = b.op(f"arith.subi {i}, {b.index(lo)} : index", "i") if lo else i
        conds = [b.op(f"arith.cmpi sge, {t}, {b.index(0)} : index")]
        if interior:
            step = b.index(interior + 1)
            conds.append(b.op(f"arith.cmpi eq, {b.op(f'arith.remsi {t}, {step} : index', 'i')}, "
                              f"{b.index(0)} : index"))  # fmt: skip
            t = b.op(f"arith.divsi {t}, {step} : index", "i")
        conds.append(b.op(f"arith.cmpi slt, {t}, {b.index(n)} : index"))
        for c in conds:
            ok = c if ok is None else b.op(f"arith.andi {ok}, {c} : i1")
        multi.append(_clamp_index(b, t, n))
    v = k.value(x, Idx(x.aval.shape, multi))
    return v if ok is None else _sel(b, ok, v, fill, compute_type(x.aval.dtype))


@_index_rule(shapes.concatenate_p)
def _concatenate(k, eqn, idx: Idx) -> str:
    b, d = k.b, eqn.params["dimension"]
    out = b.multi(idx)
    parts, off = [], 0
    for x in eqn.invars:
        n = x.aval.shape[d]
        if n:
            parts.append((x, off, n))
        off += n
    dt = eqn.outvars[0].aval.dtype
    ty = compute_type(dt)
    if not parts:  # every operand is empty along d: so is the result, and no element is read
        return b.const(False if ty == "i1" else 0.0 if is_float(dt) else 0, ty)
    result = None
    for x, off, n in reversed(parts):
        t = b.op(f"arith.subi {out[d]}, {b.index(off)} : index", "i") if off else out[d]
        multi = list(out)
        # every operand is read at every position (a select keeps one): each index clamped
        # into its operand, or a position before this part reads before its buffer
        multi[d] = _clamp_index(b, t, n)
        v = k.value(x, Idx(x.aval.shape, multi))
        if result is None:
            result = v
        else:
            below = b.op(f"arith.cmpi slt, {out[d]}, {b.index(off + n)} : index")
            result = _sel(b, below, v, result, ty)
    return result


# ---- reductions --------------------------------------------------------------------------------


def _reducer(fop: str, iop: str, bop: str, uop: str | None = None) -> Callable:
    def combine(b: Builder, dt: np.dtype, acc: str, x: str) -> str:
        ty = compute_type(dt)
        if is_float(dt):  # reassociation lets LLVM vectorize the reduction
            return b.op(f"arith.{fop} {acc}, {x} fastmath<reassoc> : {ty}")
        if dt == dtypes.bool_:
            return _binop(b, bop, acc, x, ty)
        return _binop(b, uop if (uop and is_unsigned(dt)) else iop, acc, x, ty)

    return combine


def _extreme(dt: np.dtype, kind: str) -> Any:
    if dt == dtypes.bool_:
        return kind == "min"
    if is_float(dt):
        return -np.inf if kind == "max" else np.inf
    info = np.iinfo(dt)
    return info.min if kind == "max" else info.max


# reductions: (identity(dtype), combine(b, dtype, acc, x))
for _p, _identity_of, _combine in (
    (reductions.reduce_sum_p, lambda dt: 0, _reducer("addf", "addi", "ori")),
    (reductions.reduce_prod_p, lambda dt: 1, _reducer("mulf", "muli", "andi")),
    (reductions.reduce_max_p, lambda dt: _extreme(dt, "max"),
     _reducer("maximumf", "maxsi", "ori", "maxui")),
    (reductions.reduce_min_p, lambda dt: _extreme(dt, "min"),
     _reducer("minimumf", "minsi", "andi", "minui")),
    (reductions.reduce_and_p, lambda dt: True, _reducer("andi", "andi", "andi")),
    (reductions.reduce_or_p, lambda dt: False, _reducer("ori", "ori", "ori")),
):  # fmt: skip
    lowering("reduce", _p)((_identity_of, _combine))
_rule(ad_ops.optimization_barrier_p)(lambda b, eqn, x: x)  # it only had to survive simplification
