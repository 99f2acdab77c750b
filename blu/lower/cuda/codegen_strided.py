"""Loads in flight: the strided loops of GPU kernels with several independent loads per thread
(the second generation of the emitter, ``$BLU_GPU_KERNELS=2``, the default; issue #18).

A GPU hides memory latency only with enough loads in flight. The first emitter's strided loops
(a row pass over a vocabulary row, a split reduction's stage 1, an elementwise grid-stride loop)
issued one element per thread per iteration, and within an iteration a store could sit between
two loads; the NVPTX back end keeps such loops rolled (the step is the block size, a run-time
value) and may not move a load above a store to a buffer it cannot prove distinct, so each
thread waited out a whole memory round trip per element. On the H200 that held the fused
classifier's row kernels and the layer norms far below the copy bandwidth
(docs/benchmarks/gpt2_gpu.md, "Where the bf16 step goes now").

Here a strided loop over ``j`` (element ``lo + j * step``, ``lo < step``, both known at emission
where the launch geometry is) runs in chunks of ``U`` iterations: every value of the chunk's
``U`` points is computed (all loads issued) before any reduction combines them or any store,
and the reductions still combine in the order of ``j``, so the results are the same bits as the
rolled loop's. The ``n // step`` iterations that every thread has are chunked; the rest run in
the rolled remainder loop.

Elementwise loops go further: a thread's chunk is ``U`` *contiguous* elements (``U`` = 4, or 8
when the kernel touches 16-bit or 8-bit buffers: 16 bytes of the narrowest type), and each
buffer parameter carries ``llvm.align = 16``, so LLVM's load/store vectorizer merges a chunk's
accesses to a buffer read at the element's own index into 128-bit ``ld.global.v4`` /
``st.global.v4`` (accesses through broadcasts or transposes stay scalar). The runtime
guarantees the alignment: the allocator's blocks are 512-byte aligned, the memory plan's arena
offsets 64-byte aligned, and an argument that is not (a DLPack view at an offset) is copied
first (``blu.lower.cuda.run``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blu.core.config import config
from blu.core.jaxpr import Var
from blu.lower.mlir.emit import Idx
from blu.lower.plan.fusion import Nest, is_arg_reduce

ROW_UNROLL = 8  # points per chunk of a reduction loop (row pass, split stage 1)
MAP_UNROLL = 4  # contiguous elements per thread and chunk of an elementwise loop (8 for 16-bit)
MAP_VALUES = 16  # most stored values per chunk of an elementwise loop (registers)
ALIGN = 16  # bytes: every buffer a generation-2 kernel gets is aligned so (``llvm.align``)


def generation() -> int:
    """The GPU emitter's generation: ``$BLU_GPU_KERNELS`` (1, 2 or 3; default 2). 3 is 2 with
    the online softmax normalizer in looped row groups (``codegen_online``)."""
    g = config.gpu_kernels
    if g in (None, ""):
        return 2
    if g not in (1, 2, 3):
        from blu.core.errors import BluValueError

        raise BluValueError(f"BLU_GPU_KERNELS={g!r}: expected 1, 2 or 3")
    return int(g)


def loads_first() -> bool:
    """Whether kernels are emitted with their loads first (generation 2)."""
    return generation() >= 2


def map_values() -> int:
    """``MAP_VALUES``, or ``$BLU_GPU_MAP_VALUES``."""
    v = config.gpu_map_values
    return MAP_VALUES if v in (None, "") else int(v)


def map_unroll(layout: Any, nest: Nest) -> int:
    """Contiguous elements per thread and chunk of the elementwise loop of ``nest``: 16 bytes of
    the kernel's narrowest buffer (4 or 8), fewer for a nest storing many members (at most
    ``map_values()`` stored values per chunk: the chunk's values are all live at once, and a
    nest of 16 members unrolled 8 times spilled on sm_90)."""
    sizes = [v.aval.dtype.itemsize for v in layout.buffer] or [4]
    u = max(MAP_UNROLL, min(8, ALIGN // max(1, min(sizes))))
    while u > 1 and u * len(nest.members) > map_values():
        u //= 2
    return u


class StridedEmitter:
    """The strided-loop part of ``codegen_gpu.GpuKernelEmitter`` (a mixin: it uses the
    emitter's builder ``b``, ``cache``, ``keep``, ``value``, ``_combine``, ``_open``,
    ``_close``)."""

    def _visit_many(self, nest: Nest, points: list[tuple[str, Idx]], reds: list[Var],
                    accs: list[str], lanes: int = 1) -> list[str]:  # fmt: skip
        """``_visit`` at each of ``points`` (``(position, index)``) in order, with every value
        the points need computed, so every load issued, before the first combine or store.
        With ``lanes`` > 1, point ``i`` belongs to lane ``i % lanes`` and ``accs`` holds each
        lane's accumulators in turn (lane-major)."""
        b = self.b
        pars = [m for m in nest.members if m not in reds]
        vals = []
        for _, at in points:
            vals.append([self.value(m, at) for m in pars])
            for m in reds:  # the reductions' operands: _combine then finds them in the cache
                self.value(self.layout.producer[m].invars[0], at)
        accs, w = list(accs), len(accs) // lanes
        for i, (pos, at) in enumerate(points):
            lane = i % lanes
            cur, new, k = accs[lane * w : (lane + 1) * w], [], 0
            for m in reds:
                n = 2 if is_arg_reduce(self.layout.producer[m]) else 1
                new += self._combine(m, cur[k : k + n], at, pos)
                k += n
            accs[lane * w : (lane + 1) * w] = new
        # Stores buffer by buffer: a member's points are consecutive stores to one buffer, which
        # LLVM merges into vector stores (interleaved with other buffers' stores, which might
        # alias, they stayed one 2-byte store per bf16 element).
        for j, m in enumerate(pars):
            for (_, at), vs in zip(points, vals):
                b.store(vs[j], self.arg[m], m.aval, b.lin(at))
                if self.keep:  # later nests of an unrolled group read m as stored: rounded
                    self.cache[(m, at.key())] = b.stored(vs[j], m.aval)
        return accs

    def _lane_points(self, at: Idx, lanes: int, multi: bool = False) -> list[Idx]:
        """``at`` and the ``lanes - 1`` points after it along the innermost non-unit dimension
        (the caller knows they lie in the same row of it): their multi-indices (``at``'s, made
        if ``multi``) and offsets derived from ``at``'s by adding constants, so no division is
        repeated, and LLVM sees consecutive addresses (one vector access)."""
        b = self.b
        if lanes == 1:
            return [at]
        lin = b.lin(at)
        if multi:
            b.multi(at)
        if at.multi is None:
            return [Idx(at.shape, None, b.iaddc(lin, v)) for v in range(lanes)]
        d = max(i for i, n in enumerate(at.shape) if n > 1)
        out = []
        for v in range(lanes):
            multi = list(at.multi)
            multi[d] = self.memo.get(("lane", multi[d], v)) or b.iaddc(multi[d], v)
            out.append(Idx(at.shape, multi, b.iaddc(lin, v)))
        return out

    def _strided(self, nest: Nest, lo: str, n: int, step: int, point: Callable[[str], Any],
                 reds: list[Var], inits: list[tuple[str, str]], unroll: int,
                 lanes: int = 1, contiguous: bool = False) -> list[str]:  # fmt: skip
        """The loop ``for r = lo; r < n; r += step`` (``0 <= lo < step``) visiting
        ``point(r)``, its reductions starting from ``inits`` (``(value, type)``): chunks of
        ``unroll`` iterations with their loads first, then the rolled remainder. Returns the
        reductions' final accumulators (per thread, before any combine across threads). With
        ``lanes`` > 1, ``point(r)`` is a list of ``lanes`` points, each lane with its own
        accumulators (the result is lane-major). ``contiguous``: chunk ``c`` visits the
        ``unroll`` elements from ``(c step + lo) unroll`` instead (the chunks together cover
        the same elements; one vector access where aligned), then the same remainder."""
        b = self.b
        inits = list(inits) * lanes
        types = [t for _, t in inits]
        accs = [v for v, _ in inits]
        while unroll > 1 and unroll * lanes * len(nest.members) > 2 * MAP_VALUES:
            unroll //= 2  # the chunk's values are live at once: bound the registers

        def at(r: str) -> list[tuple[str, Idx]]:
            pts = point(r)
            return [(r, pt) for pt in (pts if lanes > 1 else [pts])]

        chunks = (n // step) // unroll if unroll > 1 else 0
        saved = dict(self.cache)  # values made inside a loop do not outlive it
        if chunks:
            c, args, res = self._open(b.index(0), b.index(chunks), b.index(1),
                                      list(zip(accs, types)))  # fmt: skip
            pts = []
            if contiguous and lanes == 1:
                first = b.op(f"arith.muli {b.iadd(b.imul(c, step), lo)}, {b.index(unroll)} "
                             ": index", "i")  # fmt: skip
                for u in range(unroll):
                    pts += at(b.iaddc(first, u))
            else:
                base = b.iadd(lo, b.op(f"arith.muli {c}, {b.index(unroll * step)} : index", "i"))
                for u in range(unroll):
                    pts += at(b.iaddc(base, u * step))
            new = self._visit_many(nest, pts, reds, args, lanes)
            if inits:
                b.stmt(f"scf.yield {', '.join(new)} : {', '.join(types)}")
            self._close()
            accs = loop_results(res, len(inits))
            self.cache = dict(saved)
        start = b.iaddc(lo, chunks * unroll * step)
        r, args, res = self._open(start, b.index(n), b.index(step), list(zip(accs, types)))
        new = self._visit_many(nest, at(r), reds, args, lanes)
        if inits:
            b.stmt(f"scf.yield {', '.join(new)} : {', '.join(types)}")
        self._close()
        self.cache = saved
        return loop_results(res, len(inits))

    def _contiguous(self, nest: Nest, t: str, n: int, T: int, point: Callable[[str], Idx],
                    unroll: int) -> None:  # fmt: skip
        """An elementwise loop over ``n`` elements by ``T`` threads (this one ``t``): chunks in
        which thread ``t`` visits the ``unroll`` contiguous elements from ``(c T + t) unroll``,
        loads first (vectorizable), then a grid-stride remainder."""
        b = self.b
        chunks = n // (T * unroll)
        saved = dict(self.cache)
        if chunks:
            c, _, _ = self._open(b.index(0), b.index(chunks), b.index(1))
            first = b.op(f"arith.muli {b.iadd(b.imul(c, T), t)}, {b.index(unroll)} : index", "i")
            if nest.needs_multi and last_dim(nest.shape) % unroll == 0:  # one row: one division
                pts = [(b.iaddc(first, u), at) for u, at in
                       enumerate(self._lane_points(point(first), unroll, True))]  # fmt: skip
            else:
                pts = [(b.iaddc(first, u), point(b.iaddc(first, u))) for u in range(unroll)]
            self._visit_many(nest, pts, [], [])
            self._close()
            self.cache = dict(saved)
        r, _, _ = self._open(b.iaddc(t, chunks * T * unroll), b.index(n), b.index(T))
        self._visit_many(nest, [(r, point(r))], [], [])
        self._close()
        self.cache = saved


def last_dim(shape: tuple[int, ...]) -> int:
    """The size of the innermost dimension of ``shape`` that is not 1 (1 if none)."""
    return next((n for n in reversed(shape) if n > 1), 1)


def loop_results(res: str, n: int) -> list[str]:
    """The names of an ``scf.for``'s ``n`` results (``res``, or ``res#i``)."""
    return [] if n == 0 else [res] if n == 1 else [f"{res}#{i}" for i in range(n)]
