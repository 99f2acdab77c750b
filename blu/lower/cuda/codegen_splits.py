"""The split reductions' combines (``codegen``'s ``split`` strategy): stage 1's loops of a
many-reduction nest (``_member_loops``), a column split's stage 1 combining each block's
partials first, its per-kept-index loads made before its loop (``hoist_loads``), and stage 2
(``_emit_combine``) with the maps over the kept indices it hosts (``combine_epilogues``).

A column split's stage-1 thread ``t`` in lanes takes the kept indices ``k = (t % Kt) * lanes``
... ``+ lanes - 1`` (``Kt = K / lanes`` threads per ``s``) of the rows ``s, s + S, ...``
(``s = t / Kt``). Where ``Kt`` divides the block, one block holds ``BLOCK / Kt`` whole values
of ``s`` for every kept index: its threads store their lanes' partial results in shared memory
(``w`` buffers of ``BLOCK * lanes`` values, one per reduction: the value of thread ``tl``'s
lane ``j`` at ``tl * lanes + j = (tl / Kt) * K + k``, so a tile of ``BLOCK / Kt`` rows of
``K``), and after a barrier thread ``k`` sums column ``k`` of the tile and writes one partial a
block. Stage 2 then reads ``S * Kt / BLOCK`` partials a kept index, not ``S``: ResNet-50's batch
norms (``K`` 64-2048 channels in lanes of 8) wrote and read 2.4 GB of partials a step.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from blu.core.jaxpr import Var
from blu.lower.mlir.emit import compute_type
from blu.lower.mlir.launch import BLOCK
from blu.lower.plan.fusion import Nest, is_elementwise

MEMBER_LOOPS = 8  # more reductions than this in a split nest: one stage-1 loop each
_SAME_ORDER = ("reshape", "squeeze", "expand_dims", "broadcast_in_dim")  # row-major kept

SMEM = "#gpu.address_space<workgroup>"
SMEM_BYTES = 40 * 1024  # at most this much shared memory (static: under the 48 KiB limit)


def lanes_block_values(K: int, lanes: int) -> int:
    """The values of ``s`` one block of a lanes split holds (``BLOCK / Kt``), or 0 where its
    threads do not tile whole blocks (``Kt`` not a divisor of ``BLOCK``)."""
    kt = K // lanes
    return BLOCK // kt if lanes > 1 and kt and BLOCK % kt == 0 else 0


def plans_lanes_block(K: int, lanes: int, S: int, itemsizes: list[int]) -> bool:
    """Whether a column split of ``K`` kept indices in ``lanes``, ``S`` partials and
    reductions accumulating in ``itemsizes`` bytes combines each block first: at least two
    values of ``s`` a block, a launch of whole blocks (no loop, no idle thread), and the
    shared tile within ``SMEM_BYTES``."""
    per = lanes_block_values(K, lanes)
    return (per >= 2 and S % per == 0 and bool(itemsizes)
            and BLOCK * lanes * sum(itemsizes) <= SMEM_BYTES)  # fmt: skip


def combine_epilogues(layout: Any, plans: list) -> list:
    """``plans`` with each ``map`` nest that can run in the stage 2 of the split before it
    marked (``host``: that split's nest): a map over the split's ``K`` kept indices whose every
    element ``i`` reads only element ``i`` (or a scalar) of values made before it, through
    elementwise operations and reshapes (batch norm's ``rsqrt(var + eps)``, its running
    statistics, the mean of the shift sample). The thread that stores kept index ``k``'s
    totals then computes the map's element ``k``: one launch of a few hundred threads fewer
    each (ResNet-50's step: 3-4 a batch norm)."""
    out, host = list(plans), -1
    for j, p in enumerate(plans):
        if p.group >= 0:
            host = -1
        elif p.strategy == "split":
            host = j
        elif (p.strategy == "map" and host >= 0 and p.K == plans[host].K
              and _own_elements(layout, j, p.K)):  # fmt: skip
            out[j] = dataclasses.replace(p, host=host)
        else:
            host = -1
    return out


def _own_elements(layout: Any, j: int, K: int) -> bool:
    """Whether every element ``i`` of nest ``j``'s members reads only element ``i`` of the
    values made before the nest (the kernel's inputs, earlier nests' members) or scalars."""
    made = set(layout.jaxpr.invars)
    for nest in layout.nests[:j]:
        made.update(nest.members)
    stack, seen = list(layout.nests[j].members), set()
    while stack:
        v = stack.pop()
        if v in seen or not hasattr(v, "aval"):
            continue  # (a literal: a scalar)
        seen.add(v)
        size = v.aval.size
        if size not in (1, K):
            return False
        if v in made or size == 1 and v not in layout.producer:
            continue
        eqn = layout.producer.get(v)
        if eqn is None or not (is_elementwise(eqn) or eqn.primitive.name in _SAME_ORDER):
            return False
        stack.extend(eqn.invars)
    return True


class SplitEmitter:
    """The split reductions' combines (a mixin of ``codegen.GpuKernelEmitter``: it uses the
    emitter's builder ``b``, ``layout``, ``smem``, ``_gpu``, ``_open``, ``_close``, ``_if``,
    ``_begin``, ``_end``, ``_reductions``, ``_all_reduce``, ``_store_reds``,
    ``_global_thread``)."""

    def _epilogues(self, nest: Nest, k: str) -> None:
        """The maps hosted by this split (``combine_epilogues``): their element ``k``, after
        the split's totals (stored by this thread, read back from its own stores)."""
        j = self.layout.nests.index(nest)
        hosted = [q for q, p in enumerate(self.plans) if p.host == j]
        if not hosted:
            return
        saved, self.cache = self.done, {}
        self.done = set(self.done) | set(nest.members)
        for q in hosted:
            other = self.layout.nests[q]
            self._visit(other, self._point(other, self.plans[q], k, None), [], [], k)
            self.done.update(other.members)
        self.done, self.cache = saved, {}

    def _lanes_block_store(self, p: Any, reds: list, outs: list[str]) -> None:
        """Stage 1's end for ``p.per_block`` with lanes: ``outs`` (lane-major, one value per
        reduction and lane) into the block's shared tile, a barrier, then the tile's column
        sums to the partials at ``(block, k)``."""
        b, w = self.b, len(reds)
        tid, bid = self._gpu("thread_id"), self._gpu("block_id")
        per = lanes_block_values(p.K, p.lanes)
        n = BLOCK * p.lanes
        tiles = []
        for i, m in enumerate(reds):
            eqn = self.layout.producer[m]
            ty = compute_type(eqn.invars[0].aval.dtype)
            mt = f"memref<{n}x{ty}, {SMEM}>"
            name = f"%lanes{len(self.smem)}"
            self.smem.append(f"{name}: {mt}")
            tiles.append((name, mt, eqn))
            base = b.imul(tid, p.lanes)
            for lane in range(p.lanes):
                at = b.iaddc(base, lane)
                b.stmt(f"memref.store {outs[lane * w + i]}, {name}[{at}] : {mt}")
        b.stmt("gpu.barrier")
        row0 = b.imul(bid, p.K)
        for (name, mt, eqn), pos in zip(tiles, p.partials):
            dt = eqn.invars[0].aval.dtype
            combine = eqn.primitive.lowerings["reduce"][1]
            k, _, _ = self._open(tid, b.index(p.K), b.index(BLOCK))
            acc = b.op(f"memref.load {name}[{k}] : {mt}")
            for j in range(1, per):  # the tile's rows in order: the same sum every run
                x = b.op(f"memref.load {name}[{b.iaddc(k, j * p.K)}] : {mt}")
                acc = combine(b, dt, acc, x)
            b.store(acc, f"%tmp{pos}", self.layout.scratch[pos], b.iadd(row0, k))
            self._close()

    def _member_loops(self, nest: Nest, reds: list[Var],
                      inits: list[tuple[str, str]]) -> list[tuple[Nest, list]]:  # fmt: skip
        """``[(nest, inits)]``: the loops of a split's stage 1. One, unless the nest is more
        than ``MEMBER_LOOPS`` reductions over disjoint inputs (a global norm's sums of squares
        over many weights): then one loop per reduction, each unrolled over contiguous
        elements (one loop over all of them gets one element a reduction per chunk, and
        ptxas keeps about two loads in flight: ~35% of copy bandwidth on the H100)."""
        few = len(reds) <= MEMBER_LOOPS or len(reds) != len(nest.members)
        if few or len(inits) != len(reds):  # (an arg reduction carries two accumulators)
            return [(nest, inits)]
        seen: set = set()
        for m in reds:
            read = set(self.layout.reads(m)[0])
            if read & seen:
                return [(nest, inits)]
            seen |= read
        out = []
        for m, init in zip(reds, inits):
            sub = Nest(nest.shape, nest.axes)
            sub.members, sub.needs_multi = [m], nest.needs_multi
            out.append((sub, [init]))
        return out

    def _emit_combine(self, nest: Nest, p: Any, fname: str) -> None:
        """A split reduction's stage 2 (``fname`` + "b"): the ``parts`` partials of each kept index
        ``k`` (``partials[s * K + k]``), combined by one block (or by one thread)."""
        self._begin()
        reds, inits = self._reductions(nest)
        b = self.b
        if p.block_combine:
            k, tid = self._gpu("block_id"), self._gpu("thread_id")
            lo, step = tid, self._gpu("block_dim")
        else:
            start, stride = self._global_thread()
            k, _, _ = self._open(start, b.index(p.K), stride)
            lo, step = b.index(0), b.index(1)
        s, accs, res = self._open(lo, b.index(p.parts), step, inits)
        slot = b.iadd(b.imul(s, p.K), k)
        new = []
        for m, acc, pos in zip(reds, accs, p.partials):
            x = b.load(f"%tmp{pos}", self.layout.scratch[pos], slot)
            eqn = self.layout.producer[m]
            new.append(eqn.primitive.lowerings["reduce"][1](b, eqn.invars[0].aval.dtype, acc, x))
        b.stmt(f"scf.yield {', '.join(new)} : {', '.join(t for _, t in inits)}")
        self._close()
        outs = [res] if len(inits) == 1 else [f"{res}#{i}" for i in range(len(inits))]
        if p.block_combine:
            totals = [self._all_reduce(m, v) for m, v in zip(reds, outs)]
            self._if(b.op(f"arith.cmpi eq, {tid}, {b.index(0)} : index"))
            self._store_reds(reds, totals, k)
        else:
            self._store_reds(reds, outs, k)
        self._epilogues(nest, k)
        self._close()
        self._end(fname + "b")


_LOAD = re.compile(r"^( *)(%\w+) = memref\.load (%in\d+)\[(%\w+)\] : memref<(\d+)x")
_DEF = re.compile(r"(%\w+)(?::\d+)? = ")


def hoist_loads(lines: list[str], mark: int, limit: int) -> None:
    """Move out of each loop opened at ``lines[mark:]``'s top level the loads of kernel inputs
    of at most ``limit`` elements whose index is defined before the loop (a stage-1 thread's
    per-kept-index values: batch norm's mean, scale, shift). The loop's stores go to its nest's
    full-size buffers and the partials, never to such an input, but NVPTX cannot prove that
    (the parameters may alias) and reloaded them at every point: 8 vector loads and their
    addresses a point in the stem's batch-norm backward."""
    i = mark
    while i < len(lines):
        head = lines[i]
        ind = len(head) - len(head.lstrip())
        if not (head.lstrip().startswith(("scf.for", "%")) and "scf.for" in head
                and head.endswith("{")):  # fmt: skip
            i += 1
            continue
        j = i + 1
        while not (lines[j].startswith(" " * ind + "}") and lines[j][ind] == "}"):
            j += 1
        body = lines[i + 1 : j]
        defined = set(_DEF.findall(head.split("scf.for", 1)[1]))
        for ln in body:
            defined.update(_DEF.findall(ln))
        moved, kept = [], []
        for ln in body:
            m = _LOAD.match(ln)
            if (m and len(m.group(1)) == ind + 2 and m.group(4) not in defined
                    and int(m.group(5)) <= limit):  # fmt: skip
                moved.append(ln[2:])
            else:
                kept.append(ln)
        lines[i:j] = [*moved, head, *kept]
        i = j + 1


def tile_itemsizes(layout: Any, reds: list) -> list[int]:
    """The bytes of each reduction's accumulator (its shared tile's element: ``ROW_TYPES``)."""
    return [8 if compute_type(layout.producer[m].invars[0].aval.dtype) in ("f64", "i64") else 4
            for m in reds]  # fmt: skip
