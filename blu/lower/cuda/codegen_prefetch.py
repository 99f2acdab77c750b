"""Row groups whose blocks loop over rows, software-pipelined (``BLU_GPU_ROW_PREFETCH``, on by
default; ``=0`` the plain loop): the loads of row ``k + G`` are issued at the top of row
``k``'s iteration and carried to the next one as the loop's iteration arguments, so they are in
flight while row ``k`` runs its block reductions and barriers.

Which groups: ``codegen_rows``' unrolled form with column partials (``head.grid``: ``G`` blocks
loop over the rows ``k = block, block + G, ...``; a layer norm's or RMSNorm's backward with its
gain and bias gradients), generation 2 or later. Without the pipeline each row waits for its
loads, then for two block reductions (four ``bar.sync``), then for the loads a later nest
makes (the residual's gradient), one after the other: GPT-2 124M's layer-norm backward ran at
44% of the H100's copy bandwidth (154 us a call, 23 a step), and 63% with it (109 us; 75 to
108 registers, no spills). The steps, alternating processes on the H100 (BENCHMARKS.md,
session 26): GPT-2 124M bf16 +3.6%, LLaMA-1B +1.7%, ViT-B/16 +5.3%.

What is carried: each value the group's full-row nests read that is a load of a buffer complete
before the group (the kernel's inputs, earlier nests' results), directly or through broadcasts,
reshapes and squeezes, at this thread's points of the row. Values constant along the row
index (a gain broadcast over the rows) are not: they come from L1 in every iteration, and
carried they would hold registers for no DRAM latency. The last iteration loads row ``K - 1``
again (``min(k + G, K - 1)``) rather than branch.
"""

from __future__ import annotations

from typing import Any

from blu.core.config import config
from blu.core.jaxpr import Var
from blu.lax.shapes import broadcast_in_dim_p, reshape_p, squeeze_p
from blu.lower.mlir.emit import compute_type

_MOVES = (reshape_p, squeeze_p, broadcast_in_dim_p)


def prefetch_on() -> bool:
    """Whether row groups looping over rows prefetch the next row (``BLU_GPU_ROW_PREFETCH``)."""
    return bool(config.gpu_row_prefetch)


class RowPrefetchEmitter:
    """The pipelined row loop of ``codegen_rows.RowGroupEmitter`` (a mixin: it uses the
    emitter's builder, ``value``, ``cache``, ``done``, ``_points`` and ``_open``)."""

    def _open_rows(self, j: int, head: Any, shape: tuple, bid: str, tid: str, block: int, n: int,
                   vec: int, inits: list, pipelined: bool) -> tuple:  # fmt: skip
        """Open the blocks' loop over rows ``k = bid, bid + G, ...`` with the column
        accumulators ``inits``: ``(k, accs, res, carried, points)``, ``carried`` the next row's
        values to yield after the accumulators (``[(ssa, type)]``, empty unless
        ``pipelined``), ``points`` this thread's points of row ``k`` (None unless
        ``pipelined``; their loads are then the carried values)."""
        b = self.b
        K, G = b.index(head.K), b.index(head.grid)
        leaves = self._row_leaves(j, shape, head) if pipelined else []
        if not leaves:
            k, accs, res = self._open(bid, K, G, inits)
            return k, accs, res, [], None
        pattern, first = self._fetch(leaves, self._points(shape, head, bid, tid, block, n, vec))
        self.cache = {}  # (row bid's values: the loop must not reuse them as its own)
        k, args, res = self._open(bid, K, G, [*inits, *first])
        nc = len(inits)
        carried = dict(zip((s for s, _ in first), args[nc:]))
        points = self._points(shape, head, k, tid, block, n, vec)
        for (_, at), row in zip(points, pattern):
            for v, s in row:
                self.cache[(v, at.key())] = carried[s]
        kn = b.op(f"arith.minui {b.iaddc(k, head.grid)}, {b.index(head.K - 1)} : index", "i")
        saved = dict(self.cache)
        _, nxt = self._fetch(leaves, self._points(shape, head, kn, tid, block, n, vec))
        self.cache = saved
        assert len(nxt) == len(first), (len(nxt), len(first))
        return k, args[:nc], res, [(s, t) for (s, _), (_, t) in zip(nxt, first)], points

    def _fetch(self, leaves: list[Var], points: list) -> tuple[list, list]:
        """The loads of ``leaves`` at ``points``: ``(pattern, values)``, ``pattern[i]`` the
        ``(leaf, ssa)`` pairs of point ``i``, ``values`` each distinct ``(ssa, type)`` once."""
        pattern, seen = [], {}
        for _, at in points:
            row = []
            for v in leaves:
                s = self.value(v, at)
                row.append((v, s))
                seen.setdefault(s, compute_type(v.aval.dtype))
            pattern.append(row)
        return pattern, list(seen.items())

    def _row_leaves(self, j: int, shape: tuple, head: Any) -> list[Var]:
        """The full-row values of group ``j``'s nests that are loads (module docstring), in the
        order the nests read them, less those constant along the row index."""
        layout, out, seen = self.layout, [], set()
        stack: list = []
        for t in range(j, len(self.plans)):
            if self.plans[t].group != j:
                break
            if layout.nests[t].shape == shape:
                for m in layout.nests[t].members:
                    stack += reversed(layout.producer[m].invars)
        while stack:
            v = stack.pop()
            if not isinstance(v, Var) or v in seen:
                continue
            seen.add(v)
            if v.aval.shape == shape and self._loaded(v):
                if not self._row_invariant(v, head):
                    out.append(v)
                continue
            e = layout.producer.get(v)
            if v in layout.buffer or v in self.done or e is None:
                continue
            if "elementwise" in e.primitive.lowerings:
                stack += reversed(e.invars)
        return out

    def _loaded(self, v: Var) -> bool:
        """Whether ``v`` is a buffer complete before the group, or one through data movement."""
        while isinstance(v, Var):
            if v in self.done:
                return True
            e = self.layout.producer.get(v)
            if v in self.layout.buffer or e is None or e.primitive not in _MOVES:
                return False
            v = e.invars[0]
        return False

    def _row_invariant(self, v: Var, head: Any) -> bool:
        """Whether ``v`` is a broadcast whose operand spans only the row's (reduced) axes (its
        other axes of size 1: a gain ``g[None, :]``)."""
        e = self.layout.producer.get(v)
        if v in self.done or e is None or e.primitive is not broadcast_in_dim_p:
            return False
        shape = e.invars[0].aval.shape
        return all(d in head.red or shape[i] == 1
                   for i, d in enumerate(e.params["broadcast_dimensions"]))  # fmt: skip
