"""Row groups on the GPU: a row nest and the nests after it over the same rows (a softmax's
max, sum and quotient; a layer norm's mean, variance and output; their gradients) run as one
launch, planned here (``row_groups``) and emitted by ``RowGroupEmitter`` (a part of
``codegen_gpu.GpuKernelEmitter``).

Three forms, by row length ``R`` (chosen from shapes alone, like every launch):

- ``unrolled``: ``R`` splits evenly into at most ``UNROLL`` elements per thread of a block
  (``group_block``: about 8 each): one block per row, each thread's elements kept in registers
  across the group's nests, ``gpu.all_reduce`` per reduction, a block barrier between nests.
- ``looped``: otherwise (the vocabulary's rows of 50,304 logits): one block per row, each nest a
  strided loop over the row (after the first, from the L1/L2 cache).
- ``warp`` (opt-in, ``$BLU_GPU_ROWS=warp``): ``R`` a multiple of 32 and at most
  ``32 * WARP_UNROLL``: one warp per row (``WARP_ROWS`` rows per block), lane ``l`` owning the
  elements ``l, l + 32, ...``; reductions are warp butterflies (``gpu.shuffle xor``), so every
  lane holds each total and lanes only meet at a ``nvvm.bar.warp.sync`` between nests. Measured
  slower than ``unrolled`` on the GPT-2 step (H200, bf16: 24-32 elements per lane need ~117
  registers, so fewer warps are resident; docs/benchmarks/gpt2_gpu.md), hence not the default.

Column partials (generation 2, unrolled form, ``$BLU_GPU_GROUP_COLUMNS``): when the nest after
a group reduces over the group's rows and keeps its columns (a layer norm backward's gain and
bias gradients, computed with the input gradient), the group takes it in: ``column_blocks``
blocks loop over the rows (``k = block, block + G, ...``), each thread adding its elements'
terms into one register per column and reduction, and store ``G`` partials per column; the
split's second stage combines them. The rows are read once instead of twice (the separate split
read them again), one launch fewer. A split that generation 1 makes in place of the group uses
the same ``S = G`` (a partial sums the rows ``s, s + G, ...`` in order either way), so both
generations compute the same bits.

A value a nest stored in a half-precision buffer is reused by later nests *as stored* (rounded),
so the unrolled and looped forms compute the same bits
(``tests/lower/cuda/test_gpu_row_groups.py``).
``$BLU_GPU_ROWS=warp`` turns the warp form on and ``$BLU_GPU_UNROLL=0`` the unrolled one off
(both part of a kernel's cache key: ``key_suffix``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from blu.core.aval import ShapedArray
from blu.core.config import config
from blu.core.jaxpr import Var
from blu.lax.shapes import broadcast_in_dim_p, reshape_p, squeeze_p
from blu.lower.cuda.codegen_online import online_on, online_pairs
from blu.lower.cuda.codegen_prefetch import RowPrefetchEmitter, prefetch_on
from blu.lower.cuda.codegen_strided import (
    MAP_VALUES,
    ROW_UNROLL,
    generation,
    loads_first,
    loop_results,
    map_unroll,
    map_values,
)
from blu.lower.mlir.emit import Idx, compute_type
from blu.lower.plan.fusion import KernelLayout, is_arg_reduce, is_reduction

UNROLL = 16  # unrolled form: most elements per thread
# split reductions (``codegen.plan_nests``); row groups with column partials: ``COLUMN_THREADS``
SPLIT_THREADS = 1 << 17  # target K * S / lanes of a split reduction
SPLIT_PARTIALS = 1 << 20  # most K * S: stage 2 reads the partials from L2 (4 MiB of float32)
# row groups with column partials: about this many threads, so about one wave (the layer-norm
# backward's 128-thread blocks hold ~108 registers a thread: ~4 blocks an SM, ~528 on 132 SMs)
# and half the partials of 2**17 threads. GPT-2 124M's (H100, BENCHMARKS.md session 26): 512
# blocks 82.5 us a node (85% of copy bandwidth), 1024 blocks 100.7 us (stage 2 18 us of it).
COLUMN_THREADS = 1 << 16
ROW_TYPES = ("f32", "f64", "i32", "i64")  # gpu.all_reduce shuffles these
WARP_UNROLL = 32  # warp form: most elements per lane
WARP_ROWS = 4  # warp form: rows (warps) per block
VEC = 4  # generation 3, unrolled form: contiguous elements per thread and run (16 bytes of f32)


def unroll_limit() -> int:
    """``UNROLL``, or ``$BLU_GPU_UNROLL`` (0: never unrolled)."""
    return UNROLL if config.gpu_unroll is None else int(config.gpu_unroll)


def warp_rows_on() -> bool:
    """Whether the warp form is used (``$BLU_GPU_ROWS=warp``; default ``block``)."""
    rows = config.gpu_rows or "block"
    if rows not in ("block", "warp"):
        from blu.core.errors import BluValueError

        raise BluValueError(f"BLU_GPU_ROWS={rows!r}: expected 'block' or 'warp'")
    return rows == "warp"


# The GPU emitter's version, part of every GPU kernel's key (which holds the kernel's jaxpr, not
# the code emitted for it): bump it when the emitter's code or a launch's geometry changes, so no
# cache serves a kernel built by an older emitter. 2: split reductions over leading dimensions
# in lanes of consecutive kept indices, with their own partial counts (``codegen.column_lanes``);
# 3: generation 3's looped row passes visit contiguous runs a thread (vector accesses); 4: float32
# exp through ex2.approx (``mathlib.exp_ex2``); 6: row groups with column partials
# (``column_blocks``), a column reduction before its group moved after it, unrolled groups of
# blocks that are not powers of two (``group_block``); 7: elementwise chunks store buffer by
# buffer (vector stores), ``logistic`` divides once (``div.approx`` with ``ex2``); 8: ``exp_ex2``
# calls ``ex2.approx.ftz``; 9: ``exp_ex2`` rounds by a constant and scales once, a split's
# stage 1 over contiguous runs and one loop per reduction of a many-reduction nest; 11: a column
# split in lanes combines each block's partials in shared memory first (``codegen_splits``); 12:
# its stage-1 loads of per-kept-index inputs made before the loop (``hoist_loads``); 13: maps
# over a split's kept indices run in its stage 2 (``combine_epilogues``); 14: a row group's
# column split combines all its partials (it had kept 12's per-block count); 15: a row group's
# column partials stored column by column (taken back); 16: small reductions over innermost
# dimensions as rows (``codegen.SMALL_ROWS``), row groups with column partials of half the
# blocks (``COLUMN_THREADS``), unrolled groups compiled for their block (``nvvm.maxntid``);
# 17: looped groups keep their row's inputs in shared memory (``codegen_stash``), looped groups
# and row nests compiled for their block too; 18: a softmax's exp unreduced (``signs``), bfloat16
# values stored as rounded or loaded (not rounded again).
EMITTER_VERSION = 18


def key_suffix() -> str:
    """What the emitted text depends on besides the kernel's canonical text."""
    n, warp, gen = unroll_limit(), warp_rows_on(), generation()
    # the flash-attention kernels' choice is no kernel text but must key the executables
    flash = "" if config.flash_tensor_cores else "\n#flash-cuda-cores"
    flash += "" if config.gpu_epilogues else "\n#no-gpu-epilogues"  # (the plan differs)
    flash += "" if config.gpu_gelu_aux else "\n#no-gelu-aux"
    flash += "" if prefetch_on() else "\n#no-row-prefetch"
    flash += "" if config.packed_attention else "\n#unpacked-attention"
    flash += "" if config.gpu_exp == "ex2" else f"\n#gpu-exp {config.gpu_exp}"
    flash += "" if config.gpu_group_columns else "\n#no-group-columns"
    flash += "" if map_values() == MAP_VALUES else f"\n#gpu-map-values {map_values()}"
    cols = config.gpu_column_blocks
    flash += f"\n#gpu-column-blocks {cols}" if cols else ""
    stash = config.gpu_row_stash
    flash += f"\n#gpu-row-stash {stash}" if stash is not None else ""
    return (("" if n == UNROLL else f"\n#gpu-unroll {n}") + ("\n#gpu-rows warp" if warp else "")
            + ("" if gen == 1 else f"\n#gpu-kernels {gen}") + flash
            + f"\n#gpu-emitter {EMITTER_VERSION}")  # fmt: skip


def pow2_at_least(n: int) -> int:
    """The least power of two ``>= n`` (1 for ``n <= 1``)."""
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def group_block(R: int) -> int:
    """Threads per block of a block-form row group over rows of ``R`` elements (about 8 each):
    a power of two, or where that does not divide ``R``, the multiple of 32 dividing it that
    gives each thread at most ``unroll_limit()`` elements, nearest ``R / 8`` (GPT-2 1.5B's rows
    of 1600: 160 threads of 10), so the row fits the unrolled form; else the power of two (the
    looped form)."""
    b = min(1024, max(32, pow2_at_least(R // 8)))
    if R % b == 0:
        return b
    fits = [c for c in range(32, 1025, 32) if R % c == 0 and R // c <= unroll_limit()]
    return min(fits, key=lambda c: (abs(c - R / 8), c)) if fits else b


def vector_block(R: int) -> int | None:
    """Generation 3: threads per block of an unrolled group whose threads own ``VEC``
    contiguous elements at a time (128-bit accesses for float32; thread ``t``'s elements
    ``VEC t + j VEC block + u``), about 8-16 elements each, so that smaller blocks (rows of 768:
    64 threads, 12 elements) put more rows in flight per SM; None where no block of at least 32
    threads divides the row so (then the generation-2 layout)."""
    if generation() < 3:
        return None
    b = group_block(R)
    while b > 32 and (R % (VEC * b) or R // b < 8):
        b //= 2
    ok = R % (VEC * b) == 0 and R // b <= unroll_limit() and b % 32 == 0  # (whole warps)
    return b if ok else None


def group_form(head: Any) -> str:
    """``"warp"``, ``"unrolled"`` or ``"looped"``: how the group led by ``head`` (a
    ``codegen_gpu.NestPlan``) is emitted."""
    if warp_rows_on() and head.R % 32 == 0 and head.R // 32 <= WARP_UNROLL:
        return "warp"
    if vector_block(head.R):
        return "unrolled"
    block = group_block(head.R)
    return "unrolled" if head.R % block == 0 and head.R // block <= unroll_limit() else "looped"


def online_at(layout: KernelLayout, plans: list[Any], t: int) -> dict[Var, Var] | None:
    """The pairs of nests ``t`` and ``t + 1`` when the emitter runs them as one online pass:
    generation 3, both ``row`` nests of one looped row group (``plans``: ``codegen_gpu``'s
    ``NestPlan`` list), and ``online_pairs`` matches; else None."""
    if not online_on() or t + 1 >= len(plans):
        return None
    p, q = plans[t], plans[t + 1]
    if p.strategy != "row" or q.strategy != "row" or p.group < 0 or q.group != p.group:
        return None
    if group_form(plans[p.group]) != "looped":
        return None
    return online_pairs(layout, layout.nests[t], layout.nests[t + 1])


def group_launch(head: Any) -> tuple[int, int]:
    """(grid, block) of the group led by ``head``."""
    if group_form(head) == "warp":
        return -(-head.K // WARP_ROWS), 32 * WARP_ROWS
    return head.grid or head.K, vector_block(head.R) or group_block(head.R)


# ---- planning -----------------------------------------------------------------------------------


def _strip(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


def row_groups(layout: KernelLayout, plans: list[Any]) -> list[Any]:
    """Runs of nests that one block per row can execute together: a ``row`` nest, then nests
    over the same rows (more row reductions, elementwise maps over the full shape or over one
    value per row) that read what the run produced only in their own row. The block passes
    over its row once per nest (after the first pass, from the L1/L2 cache), with a barrier
    between nests, instead of one launch and one trip through memory per nest."""
    nests, out, i = layout.nests, list(plans), 0
    while i < len(nests):
        head = out[i]
        if head.strategy != "row":
            i += 1
            continue
        shape = nests[i].shape
        kept_shape = _strip(tuple(shape[d] for d in head.kept))
        made, j = set(nests[i].members), i + 1
        while j < len(nests) and _joins(layout, nests[j], out[j], head, shape, kept_shape, made):
            made.update(nests[j].members)
            j += 1
        if group_form(head) == "unrolled":
            i, j, head = _take_columns(layout, out, i, j, head, made)
        if j - i > 1:
            for t in range(i, j):
                out[t] = dataclasses.replace(out[t], group=i)
        i = j
    return out


def _take_columns(layout: KernelLayout, out: list[Any], i: int, j: int, head: Any,
                  made: set) -> tuple[int, int, Any]:  # fmt: skip
    """The unrolled group ``[i, j)``'s column partials (the module docstring): a column split at
    ``j`` (or just before ``i`` that the group does not read: RMSNorm's gain gradient, moved to
    ``j``) gets ``S`` = the group's blocks in every generation (the partials, and the bits, are
    the same whether the group, generation 2, or a split, generation 1, makes them); generation
    2's group takes it in. Returns the group's bounds and head."""
    nests, shape = layout.nests, layout.nests[i].shape
    after = j < len(nests) and _column_split(layout, nests[j], out[j], head, shape, made)
    if not after and i > 0 and out[i - 1].group < 0:
        before = nests[i - 1]
        # (the walk starts at the members' operands: members are buffers, where _touches stops)
        ins = [v for n in nests[i:j] for m in n.members for v in layout.producer[m].invars]
        read = any(_touches(layout, v, set(before.members)) for v in ins)
        if not read and _column_split(layout, before, out[i - 1], head, shape, made):
            nests.insert(j - 1, nests.pop(i - 1))
            out.insert(j - 1, out.pop(i - 1))
            i, j, after = i - 1, j - 1, True
    if not after:
        return i, j, head
    G = column_blocks(head, out[j].K)
    for pos in out[j].partials:
        layout.scratch[pos] = ShapedArray((G * out[j].K,), layout.scratch[pos].dtype)
    reds = [m for m in nests[j].members if is_reduction(layout.producer[m])]
    block = G >= 64 and shuffled(layout, reds)
    # (one partial a block row of the group: not a lanes split's per-block tile)
    out[j] = dataclasses.replace(out[j], S=G, block_combine=block, lanes=1, per_block=False)
    if loads_first():
        out[i] = head = dataclasses.replace(head, grid=G)
        j += 1
    return i, j, head


def shuffled(layout: KernelLayout, reds: list[Var]) -> bool:
    """Whether the reductions ``reds`` accumulate in types ``gpu.all_reduce`` shuffles
    (``ROW_TYPES``): a block can combine them (a row nest, a block-combined split)."""
    return {compute_type(layout.producer[m].invars[0].aval.dtype) for m in reds} <= set(ROW_TYPES)


def column_blocks(head: Any, columns: int) -> int:
    """Blocks of a row group that also reduces ``columns`` columns over its rows: about
    ``COLUMN_THREADS`` threads in all (or ``$BLU_GPU_COLUMN_BLOCKS`` blocks), at least 16 rows
    a block, at most ``SPLIT_PARTIALS`` partial results (the second stage reads them from L2)."""
    G = config.gpu_column_blocks or pow2_at_least(COLUMN_THREADS // group_block(head.R))
    return max(1, min(G, head.K // 16, SPLIT_PARTIALS // max(columns, 1)))


def _column_split(layout, nest, p, head, shape, made) -> bool:
    """Whether ``nest`` (after a row group over ``shape``) reduces over the group's rows and
    keeps its columns (``split``, the same shape and axes swapped), every member computed from
    values of its own row: the group can then accumulate its column partials
    (``$BLU_GPU_GROUP_COLUMNS``)."""
    if not config.gpu_group_columns or p.strategy != "split" or nest.shape != shape:
        return False
    if set(p.red) != set(head.kept) or set(p.kept) != set(head.red) or p.K != head.R:
        return False
    if any(is_arg_reduce(layout.producer[m]) for m in nest.members):
        return False
    allowed = {_strip(shape), _strip(tuple(shape[d] for d in head.kept))}
    return all(_row_local(layout, m, made, allowed) for m in nest.members)


def _joins(layout, nest, p, head, shape, kept_shape, made) -> bool:
    if p.strategy == "row":
        fits = nest.shape == shape and (p.K, p.R, p.red) == (head.K, head.R, head.red)
    elif p.strategy == "map":
        fits = nest.shape == shape or (p.K == head.K and _strip(nest.shape) == kept_shape)
    else:
        fits = False
    allowed = {_strip(shape), kept_shape}
    return fits and all(_row_local(layout, m, made, allowed) for m in nest.members)


def _row_local(layout: KernelLayout, m: Var, made: set, allowed: set) -> bool:
    """Whether computing ``m`` reads values ``made`` earlier in the group only in its own row:
    through elementwise operations, and reshapes / broadcasts between the full and the per-row
    shapes (one value per row broadcast along it)."""
    stack, seen = list(layout.producer[m].invars), set()
    while stack:
        v = stack.pop()
        if not isinstance(v, Var) or v in seen:
            continue
        seen.add(v)
        if v in layout.buffer:
            continue  # a buffer: inputs and earlier nests are complete; ours are row-local
        e = layout.producer[v]
        if "elementwise" in e.primitive.lowerings:
            stack.extend(e.invars)
        elif e.primitive in (reshape_p, squeeze_p, broadcast_in_dim_p):
            x = e.invars[0]
            moves_rows = _strip(x.aval.shape) not in allowed or _strip(v.aval.shape) not in allowed
            if e.primitive is broadcast_in_dim_p and not moves_rows:  # operand dims lead the output
                dims = [d for d, n in zip(e.params["broadcast_dimensions"], x.aval.shape) if n != 1]
                lead = [d for d, n in enumerate(v.aval.shape) if n != 1][: len(dims)]
                moves_rows = dims != lead
            if moves_rows and _touches(layout, x, made):
                return False
            if not moves_rows:
                stack.append(x)
        elif _touches(layout, v, made):
            return False  # other data movement of values the group makes: rows may mix
    return True


def _touches(layout: KernelLayout, v: Any, made: set) -> bool:
    """Whether ``v`` is computed from a value in ``made``."""
    stack, seen = [v], set()
    while stack:
        u = stack.pop()
        if not isinstance(u, Var) or u in seen:
            continue
        seen.add(u)
        if u in made:
            return True
        if u not in layout.buffer:
            stack.extend(layout.producer[u].invars)
    return False


# ---- emission -----------------------------------------------------------------------------------


class RowGroupEmitter(RowPrefetchEmitter):
    """The row-group part of ``codegen_gpu.GpuKernelEmitter`` (a mixin: it uses the emitter's
    builder, ``_visit``, ``_reductions``, ``_all_reduce``, ``_row_pass``...; the pipelined row
    loop: ``codegen_prefetch``)."""

    row_vals: dict[Var, str]  # warp form: a per-row value every lane holds (reductions, ...)

    def value(self, v: Any, idx: Idx) -> str:
        # within a group, values made per row are read only in their own row (``_row_local``)
        got = self.row_vals.get(v)
        return got if got is not None else super().value(v, idx)  # type: ignore[misc]

    def _points(self, shape, head, k: str, lane: str, step: int, n: int,
                vec: int = 1) -> list[tuple[str, Idx]]:  # fmt: skip
        """This thread's elements ``lane + i * step`` (``i < n``) of row ``k``: the points every
        nest of the group visits; with ``vec > 1``, runs of ``vec`` contiguous elements:
        ``vec * lane + (i // vec) * vec * step + i % vec``."""
        b = self.b
        km = b.multi(Idx(tuple(shape[d] for d in head.kept), None, k))
        points = []
        for r in self._columns(lane, step, n, vec):
            rm = b.multi(Idx(tuple(shape[d] for d in head.red), None, r))
            multi = [b.index(0)] * len(shape)
            for d, x in [*zip(head.kept, km), *zip(head.red, rm)]:
                multi[d] = x
            points.append((r, Idx(shape, multi, b.iadd(b.imul(k, head.R), r))))
        return points

    def _columns(self, lane: str, step: int, n: int, vec: int = 1) -> list[str]:
        """The positions in the row of ``_points``' elements."""
        b = self.b
        base = lane if vec == 1 else b.imul(lane, vec)
        return [b.iaddc(base, (i // vec) * vec * step + i % vec) for i in range(n)]

    def _reduce_points(self, nest, points, combine) -> tuple[list[Var], list[str]]:
        """The nest's reductions over this thread's ``points`` (storing its other members on
        the way), each partial result then combined across threads by ``combine(m, x)``."""
        reds, inits = self._reductions(nest)
        accs = [v for v, _ in inits]
        if loads_first():  # every load of the thread's points issued before the first store
            accs = self._visit_many(nest, points, reds, accs)
        else:
            for r, at in points:
                accs = self._visit(nest, at, reds, accs, r)
        return reds, [combine(m, v) for m, v in zip(reds, accs)]

    def _per_row(self, nest, k: str, first: str) -> None:
        """A nest of one value per row (generation 2): every thread computes it from the row's
        totals in registers, the ``first`` thread stores it, and later nests read it from
        registers (as stored) instead of from memory after a barrier."""
        b = self.b
        at = Idx(nest.shape, None, k)
        vals = [self.value(m, at) for m in nest.members]
        self._if(first)
        for m, v in zip(nest.members, vals):
            b.store(v, self.arg[m], m.aval, k)
        self._close()
        for m, v in zip(nest.members, vals):
            self.row_vals[m] = b.stored(v, m.aval)

    def _emit_group(self, j: int, fname: str) -> None:
        """A row group in the block forms (module docstring): one block per row runs its nests in
        order, with a block barrier after each. Unrolled, each thread's elements are points
        known at emission, so a value computed or loaded in one nest (the row's inputs,
        ``exp(x - max)``) is reused from registers by the later nests."""
        head = self.plans[j]
        form = group_form(head)
        if form == "warp":
            return self._emit_warp_group(j, fname)
        self._begin()
        b = self.b
        k, tid, bdim = self._gpu("block_id"), self._gpu("thread_id"), self._gpu("block_dim")
        shape = self.layout.nests[j].shape
        unrolled = self.keep = form == "unrolled"
        vblock = vector_block(head.R)
        block = vblock or group_block(head.R)
        vec, n = (VEC if vblock else 1), head.R // block
        points, carried = None, []
        if head.grid:  # blocks loop over rows; the last nest's column partials in registers
            bid, last = k, max(t for t, q in enumerate(self.plans) if q.group == j)
            cols = self._columns(tid, block, n, vec)
            col_reds, col_inits = self._reductions(self.layout.nests[last])
            col_inits = col_inits * n  # each of the thread's columns its own (lane-major)
            k, col_accs, col_res, carried, points = self._open_rows(
                j, head, shape, bid, tid, block, n, vec, col_inits,
                unrolled and loads_first() and prefetch_on())  # fmt: skip
        if unrolled and points is None:  # this thread's points, shared by every nest
            points = self._points(shape, head, k, tid, block, n, vec)
        R = b.index(head.R)
        # generation 2: totals and per-row values stay in registers (``row_vals``); a thread
        # then reads from memory only its own elements, so the nests need no barriers
        gen2, self.row_vals = loads_first(), {}
        first = b.op(f"arith.cmpi eq, {tid}, {b.index(0)} : index") if gen2 else ""
        if not unrolled:  # inputs its passes read again, kept in shared memory
            self._stash_open(j, head, k)
        skip = -1
        for t in range(j, len(self.plans)):
            nest, p = self.layout.nests[t], self.plans[t]
            if p.group != j:
                break
            if t == skip:  # the second nest of an online pass
                continue
            self._stash_pass()
            if not unrolled:
                self.cache = {}
            pairs = None if unrolled else online_at(self.layout, self.plans, t)
            if pairs:  # generation 3: max and sum of exponentials in one pass over the row
                second = self.layout.nests[t + 1]
                for m, v in self._online_pass(nest, second, pairs, head, k, tid, block):
                    self.row_vals[m] = b.stored(v, m.aval)
                self.done.update(nest.members)
                self.done.update(second.members)
                skip = t + 1
                continue
            if p.strategy == "split":  # (head.grid) this row's terms of the column reductions
                col_accs = self._visit_many(nest, points, col_reds, col_accs, n)
            elif p.strategy == "row" and unrolled:
                reds, totals = self._reduce_points(nest, points, self._all_reduce)
                self._if(first or b.op(f"arith.cmpi eq, {tid}, {b.index(0)} : index"))
                self._store_reds(reds, totals, k)
                self._close()
                if gen2:
                    for m, v in zip(reds, totals):
                        self.row_vals[m] = b.stored(v, m.aval)
            elif p.strategy == "row":
                got = self._row_pass(nest, head, k, tid, bdim, block)
                if gen2:
                    for m, v in got:
                        self.row_vals[m] = b.stored(v, m.aval)
            elif nest.shape == shape and unrolled:  # over the row's elements
                if gen2:
                    self._visit_many(nest, points, [], [])
                else:
                    for r, at in points:
                        self._visit(nest, at, [], [], r)
            elif nest.shape == shape and generation() >= 3:  # contiguous runs: vectorizable
                self._contiguous(nest, tid, head.R, block,
                                 lambda r: self._point(nest, head, k, r),
                                 map_unroll(self.layout, nest))  # fmt: skip
            elif nest.shape == shape and gen2:
                self._strided(nest, tid, head.R, block, lambda r: self._point(nest, head, k, r),
                              [], [], ROW_UNROLL)  # fmt: skip
            elif nest.shape == shape:
                r, _, _ = self._open(tid, R, bdim)
                self._visit(nest, self._point(nest, head, k, r), [], [], r)
                self._close()
            elif gen2:  # one value per row: every thread computes it, thread 0 stores it
                self._per_row(nest, k, first)
            else:  # one value per row, by thread 0 (what it computes stays in its region)
                saved = dict(self.cache)
                self._if(b.op(f"arith.cmpi eq, {tid}, {b.index(0)} : index"))
                self._visit(nest, Idx(nest.shape, None, k), [], [], k)
                self._close()
                self.cache = saved
            self.done.update(nest.members)
            if not gen2:
                b.stmt("gpu.barrier")  # this nest's writes are visible to the whole block
        if head.grid:  # (with the next row's loads after the accumulators, if carried)
            yields = [*col_accs, *(s for s, _ in carried)]
            types = [t for _, t in (*col_inits, *carried)]
            b.stmt(f"scf.yield {', '.join(yields)} : {', '.join(types)}")
            self._close()
            self.cache = {}  # (values of the loop's body)
            self._store_partials(self.plans[last], bid, cols,
                                 loop_results(col_res, len(types))[: len(col_inits)])  # fmt: skip
        self.keep, self.row_vals = False, {}
        # compiled for its block (its loops step by it: run.fit_block must not launch fewer);
        # with a stash, two blocks an SM (one loads its row while the other computes)
        self._end(fname, block, self._stash_close())

    def _store_partials(self, p: Any, s: str, cols: list[str], accs: list[str]) -> None:
        """A group's column partials (``accs``: column-major, one per reduction) into the
        split's scratch at ``s * K + column`` (its stage 2 combines them: ``_emit_combine``).
        (Stored ``column * S + s`` instead, for stage 2's reads in one run, GPT-2 124M's
        layer-norm backward measured 6.8 us in stage 2 instead of 18.4, and 115 us in this
        launch instead of 85 on the H100: the scattered stores cost more.)"""
        b, w = self.b, len(accs) // len(cols)
        for i, c in enumerate(cols):
            slot = b.iadd(b.imul(s, p.K), c)
            for v, pos in zip(accs[i * w : (i + 1) * w], p.partials):
                b.store(v, f"%tmp{pos}", self.layout.scratch[pos], slot)

    def _emit_warp_group(self, j: int, fname: str) -> None:
        """A row group in the warp form (module docstring)."""
        self._begin()
        b, head = self.b, self.plans[j]
        shape = self.layout.nests[j].shape
        tid, bid = self._gpu("thread_id"), self._gpu("block_id")
        lane = b.op(f"arith.remui {tid}, {b.index(32)} : index", "i")
        warp = b.op(f"arith.divui {tid}, {b.index(32)} : index", "i")
        k = b.iadd(b.imul(bid, WARP_ROWS), warp)
        self._if(b.op(f"arith.cmpi ult, {k}, {b.index(head.K)} : index"))  # the last block's
        points = self._points(shape, head, k, lane, 32, head.R // 32)
        first = b.op(f"arith.cmpi eq, {lane}, {b.index(0)} : index")
        self.keep, self.row_vals = True, {}
        for t in range(j, len(self.plans)):
            nest, p = self.layout.nests[t], self.plans[t]
            if p.group != j:
                break
            if p.strategy == "row":
                reds, totals = self._reduce_points(nest, points, self._warp_reduce)
                self._if(first)
                self._store_reds(reds, totals, k)
                self._close()
                for m, v in zip(reds, totals):  # as a load after the store would read it
                    self.row_vals[m] = b.stored(v, m.aval)
            elif nest.shape == shape:  # over the row's elements
                for r, at in points:
                    self._visit(nest, at, [], [], r)
            else:  # one value per row: every lane computes it, lane 0 stores it
                self._per_row(nest, k, first)
            self.done.update(nest.members)
            b.stmt(f"nvvm.bar.warp.sync {b.const(-1, 'i32')} : i32")  # the lanes' stores seen
        self._close()
        self.keep, self.row_vals = False, {}
        self._end(fname, WARP_ROWS * 32)  # (its lanes own fixed points of a row)

    def _warp_reduce(self, m: Var, x: str) -> str:
        """``x`` combined over the warp by a butterfly: every lane gets the total."""
        b, eqn = self.b, self.layout.producer[m]
        dt = eqn.invars[0].aval.dtype
        ty = compute_type(dt)
        width = b.const(32, "i32")
        for off in (16, 8, 4, 2, 1):
            other, ok = b.fresh("s"), b.fresh("ok")
            b.stmt(f"{other}, {ok} = gpu.shuffle xor {x}, {b.const(off, 'i32')}, {width} : {ty}")
            x = eqn.primitive.lowerings["reduce"][1](b, dt, x, other)
        return x
