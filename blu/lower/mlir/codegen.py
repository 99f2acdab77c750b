"""Emit a fused kernel (a ``fusion.KernelLayout``) as MLIR text: one ``func.func`` over flat
memrefs (inputs, outputs, scratch) whose body is the layout's loop nests.

Inside a nest, ``value(v, idx)`` produces element ``idx`` of ``v``: a load for inputs and
finished buffers, else the lowering rule of ``v``'s equation applied to its operands' values
(data movement maps the index instead). Values are cached per (variable, index) within a nest,
so shared subexpressions are computed once per element.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.jaxpr import Literal, Var
from blu.lower.mlir.emit import (
    Builder,
    Idx,
    compute_type,
    is_float,
    is_unsigned,
    memref_type,
    scalar,
)
from blu.lower.mlir.rules import _extreme
from blu.lower.plan.fusion import (
    KernelLayout,
    Nest,
    is_arg_reduce,
    is_reduction,
    is_suffix,
    loop_groups,
)

# LLVM vectorizes for at most this many bits (its default on x86 CPUs with AVX-512 is 256, for
# the clock penalty of 512-bit instructions on the first of them): measured on the 2-core Xeon,
# 512 bits make a softmax's exponentials and a layer norm + GELU faster
# (docs/benchmarks/cpu_backend.md, session 7); a CPU with
# only AVX2 (or SSE) gets its own widest vectors, as before
VECTOR_WIDTH = 512


class KernelEmitter:
    """``inplace``: output position -> input position whose buffer it is (the memory plan's
    in-place updates): the output is loaded and stored through the input's memref, so LLVM sees
    one buffer and vectorizes without a run-time overlap check (which fails on such a pair and
    runs the scalar loop). The output's own parameter stays (unused): one calling convention.

    ``block`` (with ``rows``): the nests run block by block of ``block`` rows, every nest over
    one block before the next block starts (``scf.for`` over the blocks around the nests), so a
    block's rows are read from memory once and reread by the later nests from the cache (a
    softmax's max, sum and quotient; a layer norm's mean, variance and output). Correct for any
    kernel split by rows: every nest runs over the rows, and each reads a value computed by
    rows only at the row it computes (``rows.row_count``)."""

    def __init__(
        self,
        layout: KernelLayout,
        name: str,
        inplace: dict[int, int] | None = None,
        rows: int = 0,
        block: int = 0,
    ):
        self.layout, self.name = layout, name
        # rows > 0: the kernel takes a row range (``%lo``, ``%hi``: two index parameters after
        # the buffers) of its nests' leading dimension of ``rows`` (``blu/lower/cpu/rows.py``)
        self.rows = rows
        self.block = block if rows else 0
        self.bounds = ("%lo", "%hi")  # the rows the nests run over (a block of them, blocked)
        self.b = Builder()
        self.b.depth = 2
        self.arg: dict[Var, str] = {}
        self.aval: dict[str, Any] = {}
        inplace = inplace or {}
        for v, (kind, i) in layout.buffer.items():
            if kind == "out" and i in inplace:
                kind, i = "in", inplace[i]
            self.arg[v] = f"%{kind}{i}"
            self.aval[f"%{kind}{i}"] = layout.scratch[i] if kind == "tmp" else v.aval
        for i, a in enumerate(layout.scratch):
            self.aval[f"%tmp{i}"] = a
        self.done: set[Var] = set(layout.jaxpr.invars)
        self.cache: dict[tuple, str] = {}

    # ---- element values -----------------------------------------------------------------------

    def value(self, v: Any, idx: Idx) -> str:
        b = self.b
        if isinstance(v, Literal):
            return b.const(scalar(v.val, v.aval.dtype), compute_type(v.aval.dtype))
        key = (v, idx.key())
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        if v in self.done:
            out = b.load(self.arg[v], v.aval, b.lin(idx))
        else:
            eqn = self.layout.producer[v]
            lw = eqn.primitive.lowerings
            if "elementwise" in lw:
                out = lw["elementwise"](b, eqn, *[self.value(a, idx) for a in eqn.invars])
            elif "index" in lw:
                out = lw["index"](self, eqn, idx)
            else:
                raise AssertionError(f"{eqn.primitive.name} read before its nest ran")
        self.cache[key] = out
        return out

    # ---- nests --------------------------------------------------------------------------------

    def _red_init(self, m: Var) -> list[tuple[str, str]]:
        eqn = self.layout.producer[m]
        dt = eqn.invars[0].aval.dtype
        ty = compute_type(dt)
        if is_arg_reduce(eqn):
            kind = eqn.primitive.lowerings["arg_reduce"]
            return [(self._const(_extreme(dt, kind), dt), ty), (self.b.index(0), "index")]
        return [(self._const(eqn.primitive.lowerings["reduce"][0](dt), dt), ty)]

    def _const(self, val: Any, dt: np.dtype) -> str:
        return self.b.const(scalar(val, dt), compute_type(dt))

    def _combine(self, m: Var, accs: list[str], idx: Idx, pos: str) -> list[str]:
        b, eqn = self.b, self.layout.producer[m]
        x = self.value(eqn.invars[0], idx)
        dt = eqn.invars[0].aval.dtype
        if not is_arg_reduce(eqn):
            return [eqn.primitive.lowerings["reduce"][1](b, dt, accs[0], x)]
        ty, (v, i) = compute_type(dt), accs
        is_max = eqn.primitive.lowerings["arg_reduce"] == "max"
        if is_float(dt):
            better = b.op(f"arith.cmpf {'ogt' if is_max else 'olt'}, "
                          f"{x}, {v} : {ty}")  # fmt: skip
            first_nan = b.op(f"arith.andi {b.op(f'arith.cmpf uno, {x}, {x} : {ty}')}, "
                             f"{b.op(f'arith.cmpf ord, {v}, {v} : {ty}')} : i1")  # fmt: skip
            better = b.op(f"arith.ori {better}, {first_nan} : i1")
        else:
            u = is_unsigned(dt) or dt == dtypes.bool_
            pred = ("u" if u else "s") + ("gt" if is_max else "lt")
            better = b.op(f"arith.cmpi {pred}, {x}, {v} : {ty}")
        return [b.op(f"arith.select {better}, {x}, {v} : {ty}"),
                b.op(f"arith.select {better}, {pos}, {i} : index")]  # fmt: skip

    def _store_red(self, m: Var, accs: list[str], lin: str) -> None:
        b, eqn = self.b, self.layout.producer[m]
        if is_arg_reduce(eqn):
            ity = compute_type(m.aval.dtype)
            b.store(b.op(f"arith.index_cast {accs[1]} : index to {ity}"), self.arg[m], m.aval, lin)
        else:
            b.store(accs[0], self.arg[m], m.aval, lin)

    def emit_nest(self, nest: Nest) -> None:
        b = self.b
        self.cache = {}
        groups = loop_groups(nest)
        reds = [m for m in nest.members if is_reduction(self.layout.producer[m])]
        pars = [m for m in nest.members if m not in reds]
        suffix = is_suffix(nest)
        types = [t for _, t in self._acc_types(reds)]
        zero = b.index(0)
        st = {"lin": zero, "out": zero, "pos": zero, "multi": [zero] * len(nest.shape)}

        def open_loop(group, inits=()):
            n, lab, dims = group
            if self.rows and dims[0] == 0:  # the rows of this part only (global indices)
                iv, args, res = b.begin_range(*self._row_range(n), b.index(1), inits)
            else:
                iv, args, res = b.begin_for(n, inits)
            st["lin"] = b.iadd(b.imul(st["lin"], n), iv)
            if lab == "k" and not suffix:
                st["out"] = b.iadd(b.imul(st["out"], n), iv)
            if lab == "r":
                st["pos"] = iv
            if nest.needs_multi:
                st["multi"][dims[0]] = iv
            return res, args

        def idx() -> Idx:
            return Idx(nest.shape, st["multi"] if nest.needs_multi else None, st["lin"])

        if not suffix:  # reductions accumulate in their (or a float32 scratch) buffer
            for m in reds:
                buf, aval = self._acc_buffer(m)
                iv, _, r = self._begin_rows(m.aval.size)
                b.store(self._red_init(m)[0][0], buf, aval, iv)
                b.end_for(r)
        kept = [g for g in groups if g[1] == "k"] if suffix else groups
        outer = [open_loop(g)[0] for g in kept]
        if suffix:
            st["out"] = st["lin"]
            accs = [v for m in reds for v, _ in self._red_init(m)]
            inner = []
            for g in (g for g in groups if g[1] == "r"):
                res, accs = open_loop(g, list(zip(accs, types)))
                inner.append(res)
            at = idx()
            vals = [self.value(m, at) for m in pars]  # every load before any store (in place)
            k, new = 0, []
            for m in reds:
                w = 2 if is_arg_reduce(self.layout.producer[m]) else 1
                new += self._combine(m, accs[k : k + w], at, st["pos"])
                k += w
            for m, v in zip(pars, vals):
                b.store(v, self.arg[m], m.aval, b.lin(at))
            for res in reversed(inner):
                new = b.end_for(res, list(zip(new, types)))
            k = 0
            for m in reds:
                w = 2 if is_arg_reduce(self.layout.producer[m]) else 1
                self._store_red(m, new[k : k + w], st["out"])
                k += w
        else:
            at = idx()
            vals = [self.value(m, at) for m in pars]
            for m in reds:
                buf, aval = self._acc_buffer(m)
                old = b.load(buf, aval, st["out"])
                b.store(self._combine(m, [old], at, st["pos"])[0], buf, aval, st["out"])
            for m, v in zip(pars, vals):
                b.store(v, self.arg[m], m.aval, b.lin(at))
        for res in reversed(outer):
            b.end_for(res)
        if not suffix:
            for m in reds:
                if m in self.layout.acc:  # float32 accumulator -> the half-precision output
                    buf, aval = self._acc_buffer(m)
                    iv, _, r = self._begin_rows(m.aval.size)
                    b.store(b.load(buf, aval, iv), self.arg[m], m.aval, iv)
                    b.end_for(r)
        self.done.update(nest.members)

    def _row_range(self, n: int) -> tuple[str, str]:
        """The bounds of this part's rows in a loop of ``n`` iterations over whole rows."""
        b, per = self.b, n // self.rows
        lo, hi = self.bounds
        if per != 1:
            lo = b.op(f"arith.muli {lo}, {b.index(per)} : index")
            hi = b.op(f"arith.muli {hi}, {b.index(per)} : index")
        return lo, hi

    def _begin_rows(self, n: int) -> tuple[str, list[str], str]:
        """A loop over a buffer of ``n`` elements, rows first: this part's rows only."""
        if self.rows:
            return self.b.begin_range(*self._row_range(n), self.b.index(1))
        return self.b.begin_for(n)

    def _acc_types(self, reds: list[Var]) -> list[tuple[str, str]]:
        out = []
        for m in reds:
            e = self.layout.producer[m]
            out.append(("", compute_type(e.invars[0].aval.dtype)))
            if is_arg_reduce(e):
                out.append(("", "index"))
        return out

    def _acc_buffer(self, m: Var) -> tuple[str, Any]:
        if m in self.layout.acc:
            name = f"%tmp{self.layout.acc[m]}"
            return name, self.aval[name]
        return self.arg[m], m.aval

    # ---- the function -------------------------------------------------------------------------

    def emit(self) -> str:
        b = self.b
        if self.block:  # blocks of rows, every nest over a block before the next one
            iv, _, res = b.begin_range("%lo", "%hi", b.index(self.block))
            end = b.op(f"arith.addi {iv}, {b.index(self.block)} : index")
            self.bounds = (iv, b.op(f"arith.minsi {end}, %hi : index"))
        for nest in self.layout.nests:
            self.emit_nest(nest)
        if self.block:
            b.end_for(res)
        j = self.layout.jaxpr
        params = [f"%in{i}: {memref_type(v.aval)}" for i, v in enumerate(j.invars)]
        params += [f"%out{i}: {memref_type(v.aval)}" for i, v in enumerate(j.outvars)]
        params += [f"%tmp{i}: {memref_type(a)}" for i, a in enumerate(self.layout.scratch)]
        if self.rows:
            params += ["%lo: index", "%hi: index"]
        attrs = f'attributes {{passthrough = [["prefer-vector-width", "{VECTOR_WIDTH}"]]}}'
        lines = [f"  func.func @{self.name}({', '.join(params)}) {attrs} {{"]
        lines += self.b.const_lines + self.b.lines + ["    return", "  }"]
        lines += list(self.b.decls.values())
        return "module {\n" + "\n".join(lines) + "\n}\n"


def emit_kernel(
    layout: KernelLayout,
    name: str,
    inplace: dict[int, int] | None = None,
    rows: int = 0,
    block: int = 0,
) -> str:
    """The MLIR text (func, arith, math, scf, memref dialects) of a fused kernel; ``inplace``:
    outputs written over inputs; ``rows``: it takes a row range, its nests run by blocks of
    ``block`` rows (``KernelEmitter``)."""
    with deep_recursion(layout):
        return KernelEmitter(layout, name, inplace, rows, block).emit()


@contextlib.contextmanager
def deep_recursion(layout: KernelLayout) -> Iterator[None]:
    """Room on Python's stack for ``value``'s recursion through an inlined chain as long as the
    kernel (a few frames an equation: a 200-step chain of ``sin(x) * c`` had exceeded the
    default limit of 1000). Python 3.11+ calls Python functions without C recursion, so a higher
    limit costs no C stack."""
    need = 1000 + 8 * len(layout.jaxpr.eqns)
    old = sys.getrecursionlimit()
    if need > old:
        sys.setrecursionlimit(need)
    try:
        yield
    finally:
        if need > old:
            sys.setrecursionlimit(old)
