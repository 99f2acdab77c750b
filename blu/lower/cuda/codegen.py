"""Emit a fused kernel for the GPU: one ``gpu.module`` whose ``gpu.func`` kernels are the
layout's loop nests, mapped onto threads (``fusion.KernelLayout`` plans the nests, as for the CPU).

Each nest becomes one or two launches, by *strategy* (chosen in Python from shapes alone, so a
machine without MLIR knows every launch's grid from the kernel's jaxpr):

- ``map``: no reduction. A grid-stride loop over the nest's elements, one element per thread
  per iteration (consecutive threads touch consecutive elements: coalesced).
- ``row``: reductions over the innermost dimensions, many rows (or few elements in all:
  ``SMALL_ROWS``, one launch instead of a split's two). One block per kept row: the
  threads stride over the row, then ``gpu.all_reduce`` (warp shuffles and one barrier) combines
  their partial results. A row nest and the nests after it over the same rows (a softmax's max,
  sum and quotient; a layer norm's mean, variance and output) form a *row group*, run by one
  launch (``codegen_rows``: one warp or one block per row, values kept in registers).
- ``split``: other reductions (over leading dimensions, e.g. bias gradients; or few long
  rows). Stage 1: ``K * S`` threads, thread ``(k, s)`` combines the elements ``r = s, s + S,
  ...`` of kept index ``k`` into a partial result in scratch memory; stage 2: one thread per
  ``k`` combines the ``S`` partials (one block per ``k`` with ``gpu.all_reduce`` when there are
  many). Consecutive threads read consecutive addresses in both the
  leading-axis and the innermost-axis cases. Over leading axes (a column reduction: bias
  gradients, batch norm's statistics) each stage-1 thread takes ``lanes`` consecutive kept
  indices (``column_lanes``: 16 bytes of the narrowest buffer), one vector load a point. With
  the reduced index innermost (generation 2), a stage-1 thread takes contiguous runs (vector
  loads), a nest of many reductions over disjoint inputs (a global norm) runs one loop per
  reduction, and where whole blocks share a kept index each block combines its threads first
  (``per_block``: one partial a block for stage 2; in lanes, a block's tile of partials summed in
  shared memory, ``codegen_splits``).
- ``thread``: the rest (short reductions, argmax/argmin): one thread per kept index loops over
  the reduced elements.

Elements of the other members of a nest (values of the full shape computed in the same pass)
are computed and stored by whichever thread visits them; every element is visited once.

The element-level code is the CPU's: ``codegen.KernelEmitter.value`` with the rules of
``rules.py``; buffers are flat memrefs passed as bare pointers (``cuLaunchKernel`` takes device
addresses). Library functions the CPU takes from libm come from libdevice (``__nv_*``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.config import config
from blu.core.jaxpr import Var
from blu.lower.cuda.codegen_online import OnlineRowEmitter
from blu.lower.cuda.codegen_rows import (
    SPLIT_PARTIALS,
    SPLIT_THREADS,
    RowGroupEmitter,
    group_launch,
    online_at,
    pow2_at_least,
    row_groups,
    shuffled,
)
from blu.lower.cuda.codegen_splits import (
    MEMBER_LOOPS,
    SplitEmitter,
    combine_epilogues,
    hoist_loads,
    lanes_block_values,
    plans_lanes_block,
    tile_itemsizes,
)
from blu.lower.cuda.codegen_stash import RowStashEmitter, stash_shared
from blu.lower.cuda.codegen_strided import (
    ALIGN,
    ROW_UNROLL,
    StridedEmitter,
    generation,
    last_dim,
    loads_first,
    map_unroll,
)
from blu.lower.cuda.gpu_builder import GpuBuilder
from blu.lower.mlir.codegen import KernelEmitter, deep_recursion
from blu.lower.mlir.emit import Idx, compute_type, memref_type
from blu.lower.mlir.launch import BLOCK, MAX_MAP_GRID, Launch  # noqa: F401  (re-exported)
from blu.lower.plan.fusion import KernelLayout, Nest, is_arg_reduce, is_reduction, is_suffix
from blu.lower.plan.signs import nonpositive

# reductions over innermost dimensions of at most this many elements in all (and at most
# MEMBER_LOOPS of them in the nest: a global norm's many sums stay a split) run as rows (one
# block per kept index) even where they are few: a split made two launches of a few threads
# each (GPT-2's layer-norm backward: a global norm's sums over 768 gains, 8.7 + 2.0 us of its
# ~100 us on the H100)
SMALL_ROWS = 1 << 14


@dataclasses.dataclass(frozen=True)
class NestPlan:
    """How one nest maps onto threads (see the module docstring)."""

    strategy: str  # "map" | "row" | "thread" | "split"
    kept: tuple[int, ...]  # kept dimensions of the nest's shape
    red: tuple[int, ...]  # reduced dimensions
    K: int  # number of kept indices (outputs of each reduction)
    R: int  # elements reduced per kept index
    S: int = 1  # split: partial results per kept index
    partials: tuple[int, ...] = ()  # split: scratch positions of each reduction's partials
    block_combine: bool = False  # split: stage 2 is one block per kept index (gpu.all_reduce)
    group: int = -1  # row group: the index of its first nest (all of it is one launch)
    lanes: int = 1  # split, kept innermost: consecutive kept indices per stage-1 thread
    grid: int = 0  # row group head: blocks that loop over its rows (0: one block per row)
    per_block: bool = False  # split: stage 1 writes one partial a block (lanes: codegen_splits)
    host: int = -1  # map: the split whose stage 2 computes its elements (combine_epilogues)

    @property
    def parts(self) -> int:
        """Partial results per kept index a split's stage 1 writes (stage 2 combines)."""
        if not self.per_block:
            return self.S
        return self.S // (BLOCK if self.lanes == 1 else lanes_block_values(self.K, self.lanes))


def plan_nests(layout: KernelLayout) -> list[NestPlan]:
    """The strategy of every nest of ``layout``; adds the split partial buffers to its scratch
    (so call it once per layout, before the memory plan)."""
    plans = getattr(layout, "gpu_nests", None)
    if plans is not None:
        return plans
    plans = []
    for nest in layout.nests:
        shape = nest.shape
        if nest.axes is None:
            n = math.prod(shape)
            plans.append(NestPlan("map", tuple(range(len(shape))), (), n, 1))
            continue
        red = tuple(sorted(nest.axes))
        kept = tuple(d for d in range(len(shape)) if d not in red)
        K, R = math.prod(shape[d] for d in kept), math.prod(shape[d] for d in red)
        reds = [m for m in nest.members if is_reduction(layout.producer[m])]
        arg = any(is_arg_reduce(layout.producer[m]) for m in reds)
        small = K * R <= SMALL_ROWS and len(reds) <= MEMBER_LOOPS  # (not a many-sum norm)
        if arg or R < 64 or K * R == 0:
            plans.append(NestPlan("thread", kept, red, K, R))
        elif is_suffix(nest) and (K >= 512 or small) and shuffled(layout, reds):
            plans.append(NestPlan("row", kept, red, K, R))
        else:
            # S counts the lanes in every generation (generation 1: one lane a thread), so the
            # partial results, and the bits, are the same
            lanes = column_lanes(layout, nest)
            S = max(1, min(pow2_at_least(SPLIT_THREADS * lanes // max(K, 1)), R // 16, 1 << 17,
                           max(1, SPLIT_PARTIALS // max(K, 1))))  # fmt: skip
            lanes = lanes if loads_first() else 1
            # the reduced index innermost, whole blocks per kept index: each block's threads
            # combine their partials first (a full reduction of 2**27 elements: 512 partials
            # for stage 2, not 131,072 read by one block)
            per_block = (is_suffix(nest) and lanes == 1 and S % BLOCK == 0
                         and shuffled(layout, reds))  # fmt: skip
            per_block = per_block or (lanes > 1 and shuffled(layout, reds) and plans_lanes_block(
                K, lanes, S, tile_itemsizes(layout, reds)))  # fmt: skip
            n = NestPlan("split", kept, red, K, R, S, lanes=lanes, per_block=per_block).parts
            parts = []
            for m in reds:
                parts.append(len(layout.scratch))
                dt = partial_dtype(layout.producer[m].invars[0].aval.dtype)
                layout.scratch.append(ShapedArray((n * K,), dt))
            block = n >= 64 and shuffled(layout, reds)
            plans.append(NestPlan("split", kept, red, K, R, S, tuple(parts), block, lanes=lanes,
                                  per_block=per_block))  # fmt: skip
    plans = combine_epilogues(layout, row_groups(layout, plans))
    layout.gpu_nests = plans  # type: ignore[attr-defined]
    return plans


def column_lanes(layout: KernelLayout, nest: Nest) -> int:
    """Consecutive kept indices one stage-1 thread of a split reduction visits when the kept
    dimensions are innermost (a column reduction: a bias gradient, batch norm's statistics):
    16 bytes of the kernel's narrowest buffer (4 or 8), fewer where the innermost dimension's
    size is not a multiple. Its lanes' loads are one vector access, and the point's index
    arithmetic (divisions) is done once for all of them: the index work, not the bandwidth,
    had bound these kernels (6-21% of copy bandwidth on the H200, one scalar load a point).
    Only where a point's index divides by a size that is not a power of two (``_divides``:
    batch norm's H x W of 112, 56, ...): GPT-2's bias and layer-norm gradients (rows of
    B x 1024, shifts) measured 6% slower in lanes (the larger S's second stage). Generation 1
    keeps one lane a thread (``plan_nests``)."""
    inner = max((d for d, n in enumerate(nest.shape) if n > 1), default=-1)
    if is_suffix(nest) or inner in (nest.axes or ()) or not _divides(nest):
        return 1  # (the lanes run along the innermost dimension: it must be a kept one)
    sizes = [v.aval.dtype.itemsize for v in layout.buffer] or [4]
    lanes, inner = min(8, max(4, ALIGN // max(1, min(sizes)))), last_dim(nest.shape)
    while lanes > 1 and inner % lanes:
        lanes //= 2
    return lanes


def _merged_loops(shape: tuple[int, ...], red: tuple[int, ...]) -> list[tuple[int, str]]:
    """The non-unit dimensions of ``shape`` as (size, "k" kept / "r" reduced: in ``red``),
    adjacent ones of one kind merged (row-major offsets are the same)."""
    out: list[tuple[int, str]] = []
    for d, n in enumerate(shape):
        lab = "r" if d in red else "k"
        if n == 1:
            continue
        if out and out[-1][1] == lab:
            out[-1] = (out[-1][0] * n, lab)
        else:
            out.append((n, lab))
    return out


def _divides(nest: Nest) -> bool:
    """Whether a point's index divides by a size that is not a power of two: per dimension
    where the nest needs multi-indices, else per merged loop (the outermost of each kind takes
    the quotient, no division)."""
    red = nest.axes or ()
    if nest.needs_multi:
        loops = [(n, "r" if d in red else "k") for d, n in enumerate(nest.shape) if n > 1]
    else:
        loops = _merged_loops(nest.shape, red)
    return any(n & (n - 1) for lab in "kr" for n, g in [x for x in loops if x[1] == lab][1:])


def map_grid(K: int, layout: KernelLayout, nest: Nest) -> int:
    """Blocks of a ``map`` nest over ``K`` elements of ``layout``'s kernel (generation 2:
    ``map_unroll`` elements per thread and chunk, so its loop has whole chunks)."""
    per = BLOCK * (map_unroll(layout, nest) if loads_first() else 1)
    return max(1, min(-(-K // per), MAX_MAP_GRID))


def row_block(R: int) -> int:
    """Threads per block of a ``row`` nest (not in a group) over rows of ``R`` elements."""
    return min(1024, max(64, pow2_at_least(R // 4)))


def launches(layout: KernelLayout, sym: str, chip: str = "sm_90") -> list[Launch]:
    """The launches of a kernel for ``chip``, in order (nests with nothing to do are
    skipped)."""
    out, plans = [], plan_nests(layout)
    for j, p in enumerate(plans):
        name, nest = f"{sym}_{j}", layout.nests[j]
        if p.group >= 0:
            if p.group == j:
                out.append(Launch(name, *group_launch(p), stash_shared(layout, plans, j, chip)))
            elif p.strategy == "split":  # a row group's column reductions: its stage 2
                out.append(_combine_launch(name, p))
        elif p.strategy == "map":
            if p.K and p.host < 0:
                out.append(Launch(name, map_grid(p.K, layout, nest), BLOCK))
        elif p.strategy == "thread":
            if p.K:
                out.append(Launch(name, -(-p.K // BLOCK), BLOCK))
        elif p.strategy == "row":
            out.append(Launch(name, p.K, row_block(p.R)))
        else:
            out.append(Launch(name + "a", -(-(p.K // p.lanes * p.S) // BLOCK), BLOCK))
            out.append(_combine_launch(name, p))
    return out


def _combine_launch(name: str, p: NestPlan) -> Launch:
    """A split reduction's stage 2 (``_emit_combine``)."""
    if p.block_combine:
        return Launch(name + "b", p.K, min(1024, pow2_at_least(p.parts // 8)))
    return Launch(name + "b", -(-p.K // BLOCK), BLOCK)


class GpuKernelEmitter(RowGroupEmitter, RowStashEmitter, OnlineRowEmitter, SplitEmitter,
                       StridedEmitter, KernelEmitter):  # fmt: skip
    """Emits ``gpu.module @sym`` with one ``gpu.func @sym_<nest>[a|b]`` per launch."""

    def __init__(self, layout: KernelLayout, name: str):
        super().__init__(layout, name)
        self.plans = plan_nests(layout)
        for i, a in enumerate(layout.scratch):  # split partials were added after the base init
            self.aval[f"%tmp{i}"] = a
        self.funcs: list[str] = []
        self.decls: dict[str, str] = {}
        self.keep = False  # values stay cached across nests (an unrolled row group)
        self.row_vals = {}
        # values known <= 0 (a softmax's shift) get a cheaper exp (``blu.lower.plan.signs``)
        self.nonpositive = nonpositive(layout.jaxpr) if config.gpu_exp == "ex2" else frozenset()

    # ---- one gpu.func -------------------------------------------------------------------------

    def _begin(self) -> None:
        self.b = GpuBuilder()
        self.b.depth = 3
        self.b.nonpositive = self.nonpositive
        self.cache = {}
        self.smem: list[str] = []  # the function's shared buffers (workgroup attributions)
        self.memo: dict[tuple, Any] = {}  # digits made before a loop (``_kept_digits``)

    def _end(self, fname: str, threads: int = 0, blocks: int = 0) -> None:
        """Close the function ``fname``; ``threads``: the block it must run with (NVVM's
        ``maxntid``: ptxas then keeps its registers within what that block can hold, spilling
        if it must; ``run.fit_block`` would otherwise launch fewer threads, which a kernel whose
        threads own fixed points of a row, an unrolled row group, cannot take); ``blocks``:
        the blocks an SM must hold at once (``minctasm``: registers for that many)."""
        j, lay = self.layout.jaxpr, self.layout
        # generation 2: every buffer is ALIGN-byte aligned (codegen_strided): vector accesses
        al = f" {{llvm.align = {ALIGN} : i64}}" if loads_first() else ""
        params = [f"%in{i}: {memref_type(v.aval)}{al}" for i, v in enumerate(j.invars)]
        params += [f"%out{i}: {memref_type(v.aval)}{al}" for i, v in enumerate(j.outvars)]
        params += [f"%tmp{i}: {memref_type(a)}{al}" for i, a in enumerate(lay.scratch)]
        wg = f" workgroup({', '.join(self.smem)})" if self.smem else ""
        attrs = [f"nvvm.maxntid = array<i32: {threads}, 1, 1>"] if threads else []
        attrs += [f"nvvm.minctasm = {blocks} : i32"] if blocks else []
        at = f" attributes {{{', '.join(attrs)}}}" if attrs else ""
        lines = [f"    gpu.func @{fname}({', '.join(params)}){wg} kernel{at} {{"]
        lines += ["  " + ln for ln in self.b.const_lines] + self.b.lines
        lines += ["      gpu.return", "    }"]
        self.funcs.append("\n".join(lines))
        for k, d in self.b.decls.items():
            self.decls[k] = "  " + d

    def _gpu(self, what: str) -> str:
        return self.b.op(f"gpu.{what} x", "g")

    def _global_thread(self) -> tuple[str, str]:
        """(this thread's global index, the total number of threads)."""
        b = self.b
        bid, bdim, tid, gdim = (self._gpu(w) for w in ("block_id", "block_dim", "thread_id",
                                                         "grid_dim"))  # fmt: skip
        start = b.op(f"arith.addi {b.op(f'arith.muli {bid}, {bdim} : index', 'i')}, {tid} : index")
        return start, b.op(f"arith.muli {gdim}, {bdim} : index", "i")

    def _open(self, lo: str, hi: str, step: str, inits=()) -> tuple[str, list[str], str]:
        return self.b.begin_range(lo, hi, step, inits)

    def _if(self, cond: str) -> None:
        self.b.stmt(f"scf.if {cond} {{")
        self.b.depth += 1

    def _close(self) -> None:
        self.b.depth -= 1
        self.b.stmt("}")

    def _point(self, nest: Nest, p: NestPlan, k: str, r: str | None) -> Idx:
        """The element (kept index ``k``, reduced index ``r``) of the nest."""
        b = self.b
        if r is None:
            return Idx(nest.shape, None, k)
        # the offset from the merged loops' digits: no division where the reduced dimensions
        # lead (a column reduction: r * K + k) or trail (k * R + r)
        groups = _merged_loops(nest.shape, p.red)  # p: a row group's head for all its nests
        digits = {lab: list(self._digits(tuple(n for n, g in groups if g == lab), i))
                  for lab, i in (("k", k), ("r", r))}  # fmt: skip
        lin = b.index(0)
        for n, lab in groups:
            lin = b.iadd(b.imul(lin, n), digits[lab].pop(0))
        if not nest.needs_multi:
            return Idx(nest.shape, None, lin)
        # per-dimension indices for inlined data movement (LLVM drops the unused ones)
        multi = [b.index(0)] * len(nest.shape)
        km = self._digits(tuple(nest.shape[d] for d in p.kept), k)
        rm = b.multi(Idx(tuple(nest.shape[d] for d in p.red), None, r))
        for d, i in zip(p.kept, km):
            multi[d] = i
        for d, i in zip(p.red, rm):
            multi[d] = i
        return Idx(nest.shape, multi, lin)

    def _digits(self, shape: tuple[int, ...], i: str) -> tuple[str, ...]:
        """The multi-index of offset ``i`` in ``shape`` (made before the loop if it was)."""
        got = self.memo.get((shape, i))
        return got if got is not None else self.b.multi(Idx(shape, None, i))

    def _kept_digits(self, nest: Nest, p: NestPlan, k: str) -> None:
        """Before a split's stage-1 loop: kept index ``k``'s digits and its lanes' innermost
        ones, made once outside the loop, so the points' loads of per-kept-index values index
        by loop-invariant names (``hoist_loads`` moves them out of the loop)."""
        b, groups = self.b, _merged_loops(nest.shape, p.red)
        shapes = [tuple(n for n, g in groups if g == "k"), tuple(nest.shape[d] for d in p.kept)]
        for shape in shapes:
            self.memo[(shape, k)] = b.multi(Idx(shape, None, k))
        inner = max((d for d, n in enumerate(nest.shape) if n > 1), default=-1)
        if nest.needs_multi and inner in p.kept:
            digit = self.memo[(shapes[1], k)][p.kept.index(inner)]
            for v in range(p.lanes):
                self.memo[("lane", digit, v)] = b.iaddc(digit, v)

    def _visit(self, nest: Nest, at: Idx, reds: list[Var], accs: list[str], pos: str) -> list[str]:
        """Compute and store the nest's full-shape members at ``at``; combine the reductions."""
        pars = [m for m in nest.members if m not in reds]
        vals = [self.value(m, at) for m in pars]  # every load before any store (in place)
        new, k = [], 0
        for m in reds:
            w = 2 if is_arg_reduce(self.layout.producer[m]) else 1
            new += self._combine(m, accs[k : k + w], at, pos)
            k += w
        for m, v in zip(pars, vals):
            self.b.store(v, self.arg[m], m.aval, self.b.lin(at))
            if self.keep:  # later nests of an unrolled group read m as stored: rounded
                self.cache[(m, at.key())] = self.b.stored(v, m.aval)
        return new

    def _store_reds(self, reds: list[Var], accs: list[str], k: str) -> None:
        j = 0
        for m in reds:
            w = 2 if is_arg_reduce(self.layout.producer[m]) else 1
            self._store_red(m, accs[j : j + w], k)
            j += w

    # ---- strategies ---------------------------------------------------------------------------

    def _emit_map(self, nest: Nest, p: NestPlan, fname: str) -> None:
        self._begin()
        start, stride = self._global_thread()
        if loads_first():  # the launch's geometry is known: contiguous chunks, vector accesses
            T = map_grid(p.K, self.layout, nest) * BLOCK
            self._contiguous(nest, start, p.K, T, lambda r: self._point(nest, p, r, None),
                             map_unroll(self.layout, nest))  # fmt: skip
            self._end(fname)
            return
        lin, _, _ = self._open(start, self.b.index(p.K), stride)
        self._visit(nest, self._point(nest, p, lin, None), [], [], lin)
        self._close()
        self._end(fname)

    def _reductions(self, nest: Nest) -> tuple[list[Var], list[tuple[str, str]]]:
        reds = [m for m in nest.members if is_reduction(self.layout.producer[m])]
        inits = [v for m in reds for v in self._red_init(m)]
        return reds, inits

    def _emit_thread(self, nest: Nest, p: NestPlan, fname: str) -> None:
        self._begin()
        b = self.b
        start, stride = self._global_thread()
        k, _, _ = self._open(start, b.index(p.K), stride)
        reds, inits = self._reductions(nest)
        r, accs, res = self._open(b.index(0), b.index(p.R), b.index(1), inits)
        new = self._visit(nest, self._point(nest, p, k, r), reds, accs, r)
        b.stmt(f"scf.yield {', '.join(new)} : {', '.join(t for _, t in inits)}")
        self._close()
        outs = [res] if len(inits) == 1 else [f"{res}#{i}" for i in range(len(inits))]
        self._store_reds(reds, outs, k)
        self._close()
        self._end(fname)

    def _emit_row(self, nest: Nest, p: NestPlan, fname: str) -> None:
        self._begin()
        k, tid, bdim = self._gpu("block_id"), self._gpu("thread_id"), self._gpu("block_dim")
        self._row_pass(nest, p, k, tid, bdim, row_block(p.R))
        self._end(fname, row_block(p.R))  # (its loop steps by the block: run.fit_block)

    def _row_pass(self, nest: Nest, p: NestPlan, k: str, tid: str, bdim: str,
                  block: int) -> list[tuple[Var, str]]:  # fmt: skip
        """The block's pass over row ``k`` (``block`` threads): its threads stride over the
        row, ``gpu.all_reduce`` combines their partial results, thread 0 stores them. Returns
        each reduction with its total (every thread holds it)."""
        b = self.b
        reds, inits = self._reductions(nest)
        if loads_first():
            parts = self._strided(nest, tid, p.R, block, lambda r: self._point(nest, p, k, r),
                                  reds, inits, ROW_UNROLL,
                                  contiguous=generation() >= 3)  # fmt: skip
        else:
            r, accs, res = self._open(tid, b.index(p.R), bdim, inits)
            new = self._visit(nest, self._point(nest, p, k, r), reds, accs, r)
            b.stmt(f"scf.yield {', '.join(new)} : {', '.join(t for _, t in inits)}")
            self._close()
            parts = [res] if len(inits) == 1 else [f"{res}#{i}" for i in range(len(inits))]
        totals = [self._all_reduce(m, v) for m, v in zip(reds, parts)]
        self._if(b.op(f"arith.cmpi eq, {tid}, {b.index(0)} : index"))
        self._store_reds(reds, totals, k)
        self._close()
        return list(zip(reds, totals))

    def _all_reduce(self, m: Var, x: str) -> str:
        """Combine ``x`` over the block with the reduction's own combine (a region)."""
        b, eqn = self.b, self.layout.producer[m]
        dt = eqn.invars[0].aval.dtype
        ty = compute_type(dt)
        res, lhs, rhs = b.fresh("t"), b.fresh("p"), b.fresh("q")
        b.stmt(f"{res} = gpu.all_reduce {x} uniform {{")
        b.stmt(f"^bb0({lhs}: {ty}, {rhs}: {ty}):")
        b.depth += 1
        c = eqn.primitive.lowerings["reduce"][1](b, dt, lhs, rhs)
        b.stmt(f"gpu.yield {c} : {ty}")
        b.depth -= 1
        b.stmt(f"}} : ({ty}) -> ({ty})")
        return res

    def _emit_split(self, nest: Nest, p: NestPlan, fname: str) -> None:
        # stage 1: thread (k, s) -> partials[s * K + k]
        self._begin()
        b = self.b
        reds, inits = self._reductions(nest)
        start, stride = self._global_thread()
        Kt = p.K // p.lanes  # threads per s
        if p.per_block:  # the launch has exactly K * S threads: one (k, s) each, no loop
            t = start
        else:
            t, _, _ = self._open(start, b.index(Kt * p.S), stride)
        if is_suffix(nest):  # the reduced index is innermost: s varies fastest across threads
            k = b.op(f"arith.divui {t}, {b.index(p.S)} : index", "i")
            s = b.op(f"arith.remui {t}, {b.index(p.S)} : index", "i")
        else:  # kept innermost: k varies fastest (this thread: the lanes from k)
            k = b.imul(b.op(f"arith.remui {t}, {b.index(Kt)} : index", "i"), p.lanes)
            s = b.op(f"arith.divui {t}, {b.index(Kt)} : index", "i")
        if p.lanes > 1:
            self._kept_digits(nest, p, k)
            mark = len(b.lines)
            outs = self._strided(nest, s, p.R, p.S,
                                 lambda r: self._lane_points(self._point(nest, p, k, r), p.lanes),
                                 reds, inits, ROW_UNROLL, p.lanes)  # fmt: skip
            hoist_loads(b.lines, mark, p.K)
        elif loads_first():
            # the reduced index innermost: a chunk's points are consecutive elements (vector
            # loads); a stage-1 thread's few loads in flight carry 4x the bytes
            runs = is_suffix(nest)
            outs = []
            for sub, sub_inits in self._member_loops(nest, reds, inits):
                outs += self._strided(sub, s, p.R, p.S, lambda r: self._point(nest, p, k, r),
                                      [m for m in sub.members if m in reds], sub_inits,
                                      ROW_UNROLL, contiguous=runs)  # fmt: skip
        else:
            r, accs, res = self._open(s, b.index(p.R), b.index(p.S), inits)
            new = self._visit(nest, self._point(nest, p, k, r), reds, accs, r)
            b.stmt(f"scf.yield {', '.join(new)} : {', '.join(t for _, t in inits)}")
            self._close()
            outs = [res] if len(inits) == 1 else [f"{res}#{i}" for i in range(len(inits))]
        if p.per_block and p.lanes > 1:  # the block's tile of partials, summed (codegen_lanes)
            self._lanes_block_store(p, reds, outs)
            self._end(fname + "a")
            return self._emit_combine(nest, p, fname)
        if p.per_block:  # the block's total, stored by its thread 0 at (s / BLOCK, k)
            outs = [self._all_reduce(m, v) for m, v in zip(reds, outs)]
            tid = self._gpu("thread_id")
            self._if(b.op(f"arith.cmpi eq, {tid}, {b.index(0)} : index"))
            s = b.op(f"arith.divui {s}, {b.index(BLOCK)} : index", "i")
        slot, w = b.iadd(b.imul(s, p.K), k), len(inits)
        for lane in range(p.lanes):
            for v, pos in zip(outs[lane * w : (lane + 1) * w], p.partials):
                b.store(v, f"%tmp{pos}", self.layout.scratch[pos], b.iaddc(slot, lane))
        self._close()  # (the loop over (k, s), or the block's thread 0)
        self._end(fname + "a")
        self._emit_combine(nest, p, fname)

    # ---- the module ---------------------------------------------------------------------------

    def emit(self) -> str:
        emitters = {"map": self._emit_map, "thread": self._emit_thread, "row": self._emit_row,
                    "split": self._emit_split}  # fmt: skip
        for j, (nest, p) in enumerate(zip(self.layout.nests, self.plans)):
            if p.group == j:
                self._emit_group(j, f"{self.name}_{j}")
            elif p.group >= 0 and p.strategy == "split":  # the group made its partials
                self._emit_combine(nest, p, f"{self.name}_{j}")
            elif p.group < 0:
                if p.host < 0:  # (a hosted map ran in its split's stage 2)
                    emitters[p.strategy](nest, p, f"{self.name}_{j}")
                self.done.update(nest.members)
        body = list(self.decls.values()) + self.funcs
        return (
            "module attributes {gpu.container_module} {\n"
            f"  gpu.module @{self.name} {{\n" + "\n".join(body) + "\n  }\n}\n"
        )


def emit_gpu_kernel(layout: KernelLayout, name: str, chip: str = "sm_90") -> str:
    """The MLIR text (gpu, scf, arith, math, memref dialects) of a fused kernel for the GPU
    ``chip`` (its shared memory bounds a row group's stash)."""
    with deep_recursion(layout):
        emitter = GpuKernelEmitter(layout, name)
        emitter.chip = chip
        return emitter.emit()


def partial_dtype(dt: np.dtype) -> np.dtype:
    """The dtype split reductions keep partial results in (half floats accumulate in f32)."""
    return np.dtype(dtypes.float32) if dt in (dtypes.bfloat16, dtypes.float16) else np.dtype(dt)


def online_groups(layout: KernelLayout) -> list[int]:
    """The nests of ``layout`` that start an online pass (for tests and reports)."""
    plans = plan_nests(layout)
    return [t for t in range(len(plans)) if online_at(layout, plans, t)]
