"""Per-element lowering rules of the casts: ``convert_element_type`` (numpy's ``astype``, with
the impl's float -> int rule) and ``bitcast_convert_type`` (bfloat16 through its stored bits).
Registered when this module is imported (``rules.py`` imports it).
"""

from __future__ import annotations

import numpy as np

from blu.core import dtypes
from blu.lax import bits
from blu.lax import elementwise as ew
from blu.lower.mlir.emit import Builder, compute_type, is_float, is_unsigned
from blu.lower.mlir.rules_base import _cmpi, _dt, _rule, _sel


@_rule(ew.convert_element_type_p)
def _convert(b, eqn, x):
    return convert(b, x, _dt(eqn), eqn.params["new_dtype"])


def convert(b: Builder, x: str, src: np.dtype, dst: np.dtype) -> str:
    """Cast a compute-type value of dtype ``src`` to ``dst`` (numpy's astype, with the impl's
    float -> int rule: truncate, saturate, NaN -> 0)."""
    src, dst = np.dtype(src), np.dtype(dst)
    st, dt_ = compute_type(src), compute_type(dst)
    if dst == dtypes.bool_:
        if is_float(src):
            return b.op(f"arith.cmpf une, {x}, {b.const(0.0, st)} : {st}")
        return _cmpi(b, "ne", x, b.const(0, st), st)
    if is_float(src) and is_float(dst):
        if dst in (dtypes.bfloat16, dtypes.float16):  # round to the narrow type, compute in f32
            x = x if st == "f32" else b.op(f"arith.truncf {x} : {st} to f32")
            if src == dst:
                return x
            if dst == dtypes.bfloat16:
                return b.round_to_bf16(x)
            return b.op(f"arith.extf {b.op(f'arith.truncf {x} : f32 to f16')} : f16 to f32")
        if st == dt_:
            return x
        return b.op(f"arith.{'extf' if dt_ == 'f64' else 'truncf'} {x} : {st} to {dt_}")
    if is_float(dst):  # integer or bool -> float
        op = "uitofp" if (is_unsigned(src) or src == dtypes.bool_) else "sitofp"
        y = b.op(f"arith.{op} {x} : {st} to {dt_}")
        if dst in (dtypes.bfloat16, dtypes.float16):
            return convert(b, y, dtypes.float32, dst)
        return y
    if is_float(src):  # float -> integer: truncate toward zero, saturate, NaN -> 0
        info = np.iinfo(dst)
        t = b.op(f"math.trunc {x} : {st}")
        lo, hi = b.const(float(info.min), st), b.const(float(info.max), st)
        inside = b.op(f"arith.minnumf {b.op(f'arith.maxnumf {t}, {lo} : {st}')}, {hi} : {st}")
        safe = _sel(b, b.op(f"arith.cmpf oge, {t}, {hi} : {st}"), b.const(0.0, st), inside, st)
        op = "fptoui" if is_unsigned(dst) else "fptosi"
        y = b.op(f"arith.{op} {safe} : {st} to {dt_}")
        y = _sel(b, b.op(f"arith.cmpf oge, {t}, {hi} : {st}"), b.const(info.max, dt_), y, dt_)
        y = _sel(b, b.op(f"arith.cmpf ole, {t}, {lo} : {st}"), b.const(info.min, dt_), y, dt_)
        return _sel(b, b.op(f"arith.cmpf uno, {x}, {x} : {st}"), b.const(0, dt_), y, dt_)
    sb, db = int(st[1:]), int(dt_[1:])  # integer or bool -> integer: wrap or extend
    if sb == db:
        return x
    if sb > db:
        return b.op(f"arith.trunci {x} : {st} to {dt_}")
    ext = "extui" if (is_unsigned(src) or src == dtypes.bool_) else "extsi"
    return b.op(f"arith.{ext} {x} : {st} to {dt_}")


@_rule(bits.bitcast_convert_type_p)
def _bitcast(b, eqn, x):
    src, dst = _dt(eqn), eqn.params["new_dtype"]
    ty = compute_type(src)
    if src == dtypes.bfloat16:  # back to the stored bits first
        x, ty = b.to_bf16(x), "i16"
    elif src == dtypes.float16:
        x, ty = b.op(f"arith.truncf {x} : f32 to f16"), "f16"
    if dst == dtypes.bfloat16:
        return b.bf16_to_f32(x if ty == "i16" else b.op(f"arith.bitcast {x} : {ty} to i16"))
    narrow = "f16" if dst == dtypes.float16 else compute_type(dst)
    y = b.op(f"arith.bitcast {x} : {ty} to {narrow}")
    return b.op(f"arith.extf {y} : f16 to f32") if narrow == "f16" else y
