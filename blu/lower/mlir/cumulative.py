"""Cumulative reductions (``blu.lax.cumulative``: cumsum, cumprod, cummax, cummin and the
cumulative argmax/argmin) as kernels of their own: what they compute, shared by the CPU and CUDA
emitters, and the CPU kernel.

A cumulative equation is not fused with its neighbours: its output at a point depends on every
earlier point along the axis, which no per-point rule can say. Each runs as a library node
(``blu.lower.library``) calling blu's own kernel, specialized to a ``Spec``: the operand viewed
as ``(outer, n, inner)`` (``n`` the scanned axis), the operation, the dtype and ``reverse``.

Semantics are the numpy impls' (``blu/lax/cumulative.py``):

- the running value is kept in the compute type (bfloat16/float16 in float32, rounded only when
  stored, as ``compute_in_f32`` does; integers wrap in their own width);
- the combination is the ``"reduce"`` rule of the matching reduction (``mlir/rules.py``):
  ``maximumf``/``minimumf`` propagate NaN, as ``np.maximum.accumulate`` does;
- the argument form records position ``k`` when ``x[k]`` is strictly better than the running
  extremum, or is NaN while the extremum is not: the first position in scan order attaining
  each running extremum (``reverse``: counted from the end, reported as an index of the axis).

The CPU kernel (``emit_cpu``): a sequential loop along the axis per row, the running value in a
register, when ``inner == 1``; otherwise the positions along the axis outermost and a loop over
the ``inner`` contiguous columns inside (which LLVM vectorizes), the running values of a row of
columns in a scratch buffer (the planned workspace). Summation order is the sequential one.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.lax import cumulative as cum
from blu.lax import reductions
from blu.lower.mlir.emit import (
    Builder,
    compute_type,
    is_float,
    is_unsigned,
    memref_type,
    storage_type,
)
from blu.lower.slots import slot

VERSION = "1"  # bump when the generated code changes meaning (only these kernels' keys)

PRIMS = (cum.cumsum_p, cum.cumprod_p, cum.cummax_p, cum.cummin_p, cum.cumarg_p)
_REDUCTION = {"sum": reductions.reduce_sum_p, "prod": reductions.reduce_prod_p,
              "max": reductions.reduce_max_p, "min": reductions.reduce_min_p}  # fmt: skip
_OP = {cum.cumsum_p: "sum", cum.cumprod_p: "prod", cum.cummax_p: "max", cum.cummin_p: "min"}


@dataclasses.dataclass(frozen=True)
class Spec:
    """One cumulative problem: the operand as ``(outer, n, inner)`` scanned along ``n``."""

    op: str  # "sum", "prod", "max", "min", "argmax", "argmin"
    dtype: str  # numpy name of the operand
    outer: int
    n: int
    inner: int
    reverse: bool

    @property
    def arg(self) -> bool:
        return self.op.startswith("arg")

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(getattr(dtypes, self.dtype) if self.dtype == "bfloat16" else self.dtype)

    @property
    def out_dtype(self) -> np.dtype:
        return np.dtype(np.int32 if self.n < 2**31 else np.int64) if self.arg else self.np_dtype

    @property
    def size(self) -> int:
        return self.outer * self.n * self.inner

    def text(self, target: str) -> str:
        """Cache key material of this problem's kernel on ``target`` ("cpu", "cuda")."""
        return f"blu-cumulative-{target} v{VERSION} {dataclasses.astuple(self)!r}"

    def workspace_elems(self) -> int:
        """Running values the CPU kernel keeps in scratch (one per column; none for rows)."""
        return self.inner if self.inner > 1 and self.size else 0

    def workspace_bytes(self) -> int:
        return self.workspace_elems() * acc_storage(self.np_dtype).itemsize


def spec_of(prim: Any, aval: Any, params: dict, outer_split: int | None = None) -> Spec:
    """The ``Spec`` of a cumulative equation on an operand of ``aval`` (or an array);
    ``outer_split``: a part of that many rows of it (the CPU's threads)."""
    shape, axis = tuple(aval.shape), params["axis"]
    op = "arg" + params["kind"] if prim is cum.cumarg_p else _OP[prim]
    outer = math.prod(shape[:axis]) if outer_split is None else outer_split
    return Spec(op, np.dtype(aval.dtype).name, outer, shape[axis], math.prod(shape[axis + 1 :]),
                bool(params["reverse"]))  # fmt: skip


def supported(avals, params, target: str) -> bool:
    """Whether the kernels take this operand's dtype (not complex: those run on the host)."""
    if np.dtype(avals[0].dtype).kind == "c":  # the combine rules are real-valued
        return False
    try:
        storage_type(avals[0].dtype)
    except KeyError:
        return False
    return True


def acc_storage(dt: np.dtype) -> np.dtype:
    """The dtype of a running value held in memory (half floats as float32)."""
    dt = np.dtype(dt)
    return np.dtype(np.float32) if dt in (dtypes.bfloat16, dtypes.float16) else dt


def combine(b: Builder, sp: Spec, acc: str, x: str) -> str:
    """The running value after ``x`` (not for the argument forms)."""
    _, comb = slot(_REDUCTION[sp.op], "reduce")
    return comb(b, sp.np_dtype, acc, x)


def better(b: Builder, sp: Spec, x: str, best: str) -> str:
    """``i1``: ``x`` replaces the running extremum ``best`` (strictly better, or NaN first)."""
    dt, ty = sp.np_dtype, compute_type(sp.np_dtype)
    mx = sp.op == "argmax"
    if is_float(dt):
        strict = b.op(f"arith.cmpf {'ogt' if mx else 'olt'}, {x}, {best} : {ty}")
        x_nan = b.op(f"arith.cmpf uno, {x}, {x} : {ty}")
        best_ok = b.op(f"arith.cmpf ord, {best}, {best} : {ty}")
        nan_first = b.op(f"arith.andi {x_nan}, {best_ok} : i1")
        return b.op(f"arith.ori {strict}, {nan_first} : i1")
    unsigned = is_unsigned(dt) or dt == dtypes.bool_
    pred = ("ugt" if mx else "ult") if unsigned else ("sgt" if mx else "slt")
    return b.op(f"arith.cmpi {pred}, {x}, {best} : {ty}")


def position(b: Builder, sp: Spec, p: str) -> str:
    """The index along the axis of scan step ``p`` (from the end with ``reverse``)."""
    if not sp.reverse:
        return p
    return b.op(f"arith.subi {b.index(sp.n - 1)}, {p} : index", "i")


def index_value(b: Builder, sp: Spec, k: str) -> str:
    """Axis index ``k`` (index) as the argument form's output integer."""
    ity = "i32" if sp.out_dtype == np.int32 else "i64"
    return b.op(f"arith.index_cast {k} : index to {ity}")


# ---- the CPU kernel ----------------------------------------------------------------------------


def emit_cpu(sp: Spec, name: str) -> str:
    """The CPU kernel ``name(x, out[, acc])`` of a non-empty problem (see the module doc)."""
    b = Builder()
    b.depth = 2
    x_av = ShapedArray((sp.size,), sp.np_dtype)
    o_av = ShapedArray((sp.size,), sp.out_dtype)
    params = [f"%x: {memref_type(x_av)}", f"%out: {memref_type(o_av)}"]
    acc_av = None
    if sp.inner > 1:
        acc_av = ShapedArray((sp.inner,), acc_storage(sp.np_dtype))
        params.append(f"%acc: {memref_type(acc_av)}")
    row_len = sp.n * sp.inner
    o, _, _ = b.begin_for(sp.outer)
    base = b.imul(o, row_len)
    if sp.inner == 1:
        _rows(b, sp, base, x_av, o_av)
    else:
        _columns(b, sp, base, x_av, o_av, acc_av)
    b.end_for("")
    lines = [f"  func.func @{name}({', '.join(params)}) {{"]
    lines += b.const_lines + b.lines + ["    return", "  }"]
    lines += list(b.decls.values())
    return "module {\n" + "\n".join(lines) + "\n}\n"


def _rows(b: Builder, sp: Spec, base: str, x_av, o_av) -> None:
    """One row along the axis (contiguous): the running value (and position) in registers."""
    ty = compute_type(sp.np_dtype)
    k0 = b.index(sp.n - 1 if sp.reverse else 0)
    first = b.load("%x", x_av, b.iadd(base, k0))
    if sp.arg:
        b.store(index_value(b, sp, k0), "%out", o_av, b.iadd(base, k0))
        inits = [(first, ty), (index_value(b, sp, k0), _ity(sp))]
    else:
        b.store(first, "%out", o_av, b.iadd(base, k0))
        inits = [(first, ty)]
    p, args, res = b.begin_range(b.index(1), b.index(sp.n), b.index(1), inits)
    k = position(b, sp, p)
    at = b.iadd(base, k)
    x = b.load("%x", x_av, at)
    if sp.arg:
        best, idx = args
        take = better(b, sp, x, best)
        best = b.op(f"arith.select {take}, {x}, {best} : {ty}")
        idx = b.op(f"arith.select {take}, {index_value(b, sp, k)}, {idx} : {_ity(sp)}")
        b.store(idx, "%out", o_av, at)
        b.end_for(res, [(best, ty), (idx, _ity(sp))])
    else:
        acc = combine(b, sp, args[0], x)
        b.store(acc, "%out", o_av, at)
        b.end_for(res, [(acc, ty)])


def _ity(sp: Spec) -> str:
    return "i32" if sp.out_dtype == np.int32 else "i64"


def _acc_load(b: Builder, sp: Spec, acc_av, i: str) -> str:
    v = b.op(f"memref.load %acc[{i}] : {memref_type(acc_av)}")
    if sp.np_dtype == dtypes.bool_:
        return b.op(f"arith.cmpi ne, {v}, {b.const(0, 'i8')} : i8")
    return v


def _acc_store(b: Builder, sp: Spec, acc_av, v: str, i: str) -> None:
    if sp.np_dtype == dtypes.bool_:
        v = b.op(f"arith.extui {v} : i1 to i8")
    b.stmt(f"memref.store {v}, %acc[{i}] : {memref_type(acc_av)}")


def _columns(b: Builder, sp: Spec, base: str, x_av, o_av, acc_av) -> None:
    """Positions along the axis outermost, ``inner`` contiguous columns inside: the running
    values in ``%acc`` (the argument form's positions read back from the previous output)."""
    ty = compute_type(sp.np_dtype)
    k0 = b.index(sp.n - 1 if sp.reverse else 0)
    row0 = b.iadd(base, b.imul(k0, sp.inner))
    i, _, _ = b.begin_for(sp.inner)
    at = b.iadd(row0, i)
    first = b.load("%x", x_av, at)
    _acc_store(b, sp, acc_av, first, i)
    b.store(index_value(b, sp, k0) if sp.arg else first, "%out", o_av, at)
    b.end_for("")
    p, _, _ = b.begin_range(b.index(1), b.index(sp.n), b.index(1))
    k = position(b, sp, p)
    row = b.iadd(base, b.imul(k, sp.inner))
    if sp.arg:  # the previous step's row of positions
        prev_k = b.op(f"arith.{'addi' if sp.reverse else 'subi'} {k}, {b.index(1)} : index", "i")
        prev_row = b.iadd(base, b.imul(prev_k, sp.inner))
        kv = index_value(b, sp, k)
    i, _, _ = b.begin_for(sp.inner)
    at = b.iadd(row, i)
    x = b.load("%x", x_av, at)
    acc = _acc_load(b, sp, acc_av, i)
    if sp.arg:
        take = better(b, sp, x, acc)
        _acc_store(b, sp, acc_av, b.op(f"arith.select {take}, {x}, {acc} : {ty}"), i)
        prev = b.load("%out", o_av, b.iadd(prev_row, i))
        b.store(b.op(f"arith.select {take}, {kv}, {prev} : {_ity(sp)}"), "%out", o_av, at)
    else:
        acc = combine(b, sp, acc, x)
        _acc_store(b, sp, acc_av, acc, i)
        b.store(acc, "%out", o_av, at)
    b.end_for("")
    b.end_for("")
