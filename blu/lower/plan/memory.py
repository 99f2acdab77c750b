"""The memory plan of a launch plan: buffer liveness, reuse of dead buffers, in-place updates.

Every value the plan produces has a *root* buffer (a view shares its operand's root). A root
lives from the node that defines it to its last reader; outputs live to the end. Temporaries
are placed at offsets of one arena (best fit, freed blocks coalesced); a kernel may write an
output over an input that dies in that kernel when it reads that input only element-for-element
(in place); outputs of kernels and matrix products are written into donated arguments of the
same size once those are dead (``donate_argnums``), else into fresh arrays. Results of numpy
fallbacks are arrays numpy allocated (counted, not placed).

``MemoryAnalysis`` reports argument, output, temporary (arena) and peak bytes under JAX's names
(``compiled.memory_analysis()``: ``argument_size_in_bytes``, ``temp_size_in_bytes``, ...), plus
the sum of every intermediate value's size, which is what running the jaxpr unfused and
unplanned would keep alive at worst. ``live_bytes_at`` and the liveness tables of ``MemoryPlan``
are what ``blu.lower.memory_timeline`` draws.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.jaxpr import Var
from blu.lower.plan.nodes import NodeKind, Plan

ALIGN = 64


@dataclasses.dataclass(frozen=True)
class MemoryAnalysis:
    """Bytes of one executable's buffers (JAX's ``CompiledMemoryStats`` fields, and blu's).

    JAX's names are properties: ``argument_size_in_bytes``, ``output_size_in_bytes``,
    ``alias_size_in_bytes``, ``temp_size_in_bytes``, ``generated_code_size_in_bytes``,
    ``peak_memory_in_bytes`` and the ``host_*`` ones (0: blu keeps no buffers on the host
    for a device program, and counts a CPU program's as device bytes, as XLA's CPU client does).

    Attributes:
        argument_bytes: all arguments.
        output_bytes: all outputs (including those written into donated arguments).
        alias_bytes: output bytes written into donated arguments (counted once in the peak).
        temp_bytes: the arena of temporaries (intermediates and kernel scratch), after reuse.
        fallback_bytes: the largest total of live numpy-fallback results.
        peak_bytes: most bytes live at once during a call (arguments, live outputs, the arena,
            live fallback results).
        intermediate_bytes: the sum of the sizes of all intermediate values of the jaxpr.
        generated_code_bytes: bytes of the compiled kernels (0 until an executable sets it:
            ``dataclasses.replace(analysis, generated_code_bytes=n)``).
        live_bytes_at: bytes live during each node of the plan (the peak is their maximum).
    """

    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    fallback_bytes: int
    peak_bytes: int
    intermediate_bytes: int
    generated_code_bytes: int = 0
    live_bytes_at: tuple[int, ...] = dataclasses.field(default=(), repr=False, compare=False)

    # JAX's names (jax.stages.Compiled.memory_analysis())
    argument_size_in_bytes = property(lambda self: self.argument_bytes)
    output_size_in_bytes = property(lambda self: self.output_bytes)
    alias_size_in_bytes = property(lambda self: self.alias_bytes)
    temp_size_in_bytes = property(lambda self: self.temp_bytes)
    generated_code_size_in_bytes = property(lambda self: self.generated_code_bytes)
    peak_memory_in_bytes = property(lambda self: self.peak_bytes)
    host_argument_size_in_bytes = property(lambda self: 0)
    host_output_size_in_bytes = property(lambda self: 0)
    host_alias_size_in_bytes = property(lambda self: 0)
    host_temp_size_in_bytes = property(lambda self: 0)
    host_generated_code_size_in_bytes = property(lambda self: 0)

    def __str__(self) -> str:
        mb = lambda n: f"{n / 2**20:.2f} MiB"  # noqa: E731
        return (
            f"arguments {mb(self.argument_bytes)}, outputs {mb(self.output_bytes)} "
            f"({mb(self.alias_bytes)} in donated arguments), temporaries {mb(self.temp_bytes)}, "
            f"fallback results {mb(self.fallback_bytes)}, peak {mb(self.peak_bytes)} "
            f"(all intermediates: {mb(self.intermediate_bytes)})"
        )


def nbytes(aval: Any) -> int:
    return aval.size * aval.dtype.itemsize


class Arena:
    """Best-fit placement of blocks in one growing byte range."""

    def __init__(self) -> None:
        self.free: list[tuple[int, int]] = []  # (offset, size), sorted, coalesced
        self.size = 0

    def alloc(self, n: int) -> int:
        n = max(-(-n // ALIGN) * ALIGN, ALIGN)
        best = None
        for k, (_, sz) in enumerate(self.free):
            if sz >= n and (best is None or sz < self.free[best][1]):
                best = k
        if best is not None:
            off, sz = self.free[best]
            if sz == n:
                del self.free[best]
            else:
                self.free[best] = (off + n, sz - n)
            return off
        if self.free and self.free[-1][0] + self.free[-1][1] == self.size:  # grow the tail
            off = self.free.pop()[0]
        else:
            off = self.size
        self.size = off + n
        return off

    def release(self, off: int, n: int) -> None:
        n = max(-(-n // ALIGN) * ALIGN, ALIGN)
        self.free.append((off, n))
        self.free.sort()
        merged: list[tuple[int, int]] = []
        for o, s in self.free:
            if merged and merged[-1][0] + merged[-1][1] == o:
                merged[-1] = (merged[-1][0], merged[-1][1] + s)
            else:
                merged.append((o, s))
        self.free = merged


def _writes(n: Any) -> list[Var]:
    """The values a node writes: a library call writes every result, read later or not (it is
    handed a buffer for each, so none may be left without one)."""
    return n.eqns[0].outvars if n.kind.writes_every_result else n.outputs


class MemoryPlan:
    """Where each value of a plan lives.

    Attributes:
        root: value -> the value owning its buffer (itself unless it is a view).
        place: root -> ("arg", i) | ("arena", offset) | ("out",) | ("donated", arg index) |
            ("fallback",).
        scratch: node index -> arena offsets of the kernel's scratch buffers.
        defined_at: root -> index of the node making it (-1: an argument).
        last_use: root -> index of its last reader (``len(plan.nodes)``: an output).
        concurrent: indices ``k`` of the nodes that run at the same time as node ``k + 1``.
        analysis: the MemoryAnalysis.
    """

    def __init__(
        self,
        plan: Plan,
        donated: tuple[bool, ...],
        inplace_ok: Any,
        concurrent: frozenset[int] = frozenset(),
    ):
        j = plan.jaxpr
        nodes = plan.nodes
        end = len(nodes)
        self.root: dict[Var, Var] = {v: v for v in j.invars}
        defined_at: dict[Var, int] = {v: -1 for v in j.invars}
        kind_of: dict[Var, str] = {}
        for k, n in enumerate(nodes):
            for e in n.eqns if n.kind == NodeKind.FALLBACK else []:
                for v in e.outvars:
                    self.root[v], defined_at[v], kind_of[v] = v, k, NodeKind.FALLBACK
            for v in _writes(n):
                if n.kind == NodeKind.VIEW:
                    self.root[v] = self.root[n.inputs[0]]
                else:
                    self.root[v], defined_at[v], kind_of[v] = v, k, n.kind
        last: dict[Var, int] = {}
        for k, n in enumerate(nodes):
            for v in n.inputs:
                r = self.root[v]
                last[r] = max(last.get(r, -1), k)
        # nodes k and k + 1 that run at the same time (``concurrent``): what either reads stays
        # live past both, and what k writes past k + 1, so neither writes where the other works
        self.concurrent = concurrent
        for k in concurrent:
            for v in (*nodes[k].inputs, *nodes[k + 1].inputs):
                r = self.root[v]
                last[r] = max(last.get(r, -1), k + 2)
            for v in _writes(nodes[k]):
                r = self.root[v]
                last[r] = max(last.get(r, -1), k + 1)
        outs = {self.root[v] for v in j.outvars if isinstance(v, Var)}
        for r in outs:
            last[r] = end
        self.place: dict[Var, tuple] = {}
        for i, v in enumerate(j.invars):
            self.place[v] = ("arg", i)
        self.scratch: dict[int, list[int]] = {}
        arena = Arena()
        offset: dict[Var, int] = {}
        donor_free = [
            v for v, d in zip(j.invars, donated) if d and self.root[v] is v and v not in outs
        ]
        used_donors: set[Var] = set()
        # JAX's pairing: output i prefers the first unused donated argument of its shape and
        # dtype, in order. A training step returning (params, state) for (params, state) then
        # writes every value back into its own argument's buffer, so the buffers' addresses do
        # not permute from call to call (a CUDA graph keyed by them replays instead of
        # capturing anew each call).
        self.preferred: dict[Var, Var] = {}
        unpaired = list(donor_free)
        for v in j.outvars:
            r = self.root.get(v) if isinstance(v, Var) else None
            if r is None or r in self.preferred or r in j.invars:
                continue
            for d in unpaired:
                if d.aval.shape == r.aval.shape and d.aval.dtype == r.aval.dtype:
                    self.preferred[r] = d
                    unpaired.remove(d)
                    break
        live_bytes = [0] * (end + 1)  # bytes live during node k, besides the arena
        fallback_live = [0] * (end + 1)

        def span(r: Var, lo: int, hi: int, table: list[int]) -> None:
            for k in range(max(lo, 0), min(hi, end) + 1):
                table[k] += nbytes(r.aval)

        arena_peak_at = [0] * (end + 1)
        current = 0
        for n in nodes:
            n.inplace = ()
        for k, n in enumerate(nodes):
            new_roots = [v for v in _writes(n) if self.root[v] is v and defined_at.get(v) == k]
            if n.kind == NodeKind.FALLBACK:
                new_roots = [v for e in n.eqns for v in e.outvars if v in last or v in outs]
            for r in new_roots:
                if n.kind == NodeKind.FALLBACK:
                    self.place[r] = ("fallback",)
                    span(r, k, last.get(r, k), fallback_live)
                    continue
                if r in outs:
                    donor = self._donor(r, k, n, donor_free, used_donors, last, inplace_ok)
                    if donor is not None:
                        used_donors.add(donor)
                        self.place[r] = ("donated", j.invars.index(donor))
                        if last.get(donor) == k:
                            _same_buffer(n, r, donor)
                    else:
                        self.place[r] = ("out",)
                        span(r, k, end, live_bytes)
                    continue
                reuse = None
                if n.kind.compiled or n.overwrites is not None:
                    for i in n.inputs:
                        ri = self.root[i]
                        if (ri in offset and last.get(ri) == k and ri.aval.size == r.aval.size
                                and ri.aval.dtype.itemsize == r.aval.dtype.itemsize
                                and sum(self.root[u] is ri for u in n.inputs) == 1
                                and inplace_ok(n, r, i)):  # fmt: skip
                            reuse = ri
                            break
                if reuse is not None:
                    offset[r] = offset.pop(reuse)
                    _same_buffer(n, r, i)
                else:
                    offset[r] = arena.alloc(nbytes(r.aval))
                    current += _aligned(nbytes(r.aval))
                self.place[r] = ("arena", offset[r])
            scratch = scratch_avals(n)
            if scratch:
                self.scratch[k] = [arena.alloc(nbytes(a)) for a in scratch]
            scratch_bytes = sum(_aligned(nbytes(a)) for a in scratch)
            arena_peak_at[k] = current + scratch_bytes
            for off, a in zip(self.scratch.get(k, []), scratch):
                arena.release(off, nbytes(a))
            for r in list(offset):
                if last.get(r, k) <= k:
                    arena.release(offset.pop(r), nbytes(r.aval))
                    current -= _aligned(nbytes(r.aval))
        for d in donor_free:  # a donated argument stays live until its last reader
            if d not in used_donors:
                span(d, 0, last.get(d, -1), live_bytes)
        self.arena_size = arena.size
        arg_bytes = sum(nbytes(v.aval) for v in j.invars)
        donated_bytes = sum(nbytes(v.aval) for v in donor_free)
        out_roots = {self.root[v] for v in j.outvars if isinstance(v, Var)}
        out_bytes = sum(nbytes(v.aval) for v in j.outvars if isinstance(v, Var))
        alias = sum(nbytes(r.aval) for r in out_roots if self.place.get(r, ("",))[0] == "donated")
        at = [arena_peak_at[k] + live_bytes[k] + fallback_live[k] for k in range(end)]
        peak = max(at, default=0)
        # for the timeline (blu.lower.memory_timeline): where each root is made and last read
        self.defined_at, self.last_use = defined_at, last
        inter = sum(nbytes(v.aval) for e in j.eqns for v in e.outvars)
        self.analysis = MemoryAnalysis(
            argument_bytes=arg_bytes,
            output_bytes=out_bytes,
            alias_bytes=alias,
            temp_bytes=arena.size,
            fallback_bytes=max(fallback_live, default=0),
            # donated arguments are counted by live_bytes while live; the others all along
            peak_bytes=peak + arg_bytes - donated_bytes + alias,
            intermediate_bytes=inter,
            live_bytes_at=tuple(a + arg_bytes - donated_bytes + alias for a in at),
        )

    def _donor(self, r, k, node, donors, used, last, inplace_ok) -> Var | None:
        """A donated argument whose buffer output ``r`` can take."""
        if not node.kind.owns_buffers:
            return None
        want = self.preferred.get(r)
        # its own pairing first, then donors no other output is paired with; never another
        # output's pair: buffers permuted from call to call change the addresses a CUDA graph
        # is keyed by, so each call would capture anew (ResNet-50's step: 71 batch-norm and
        # filter values written into each other's arguments, slower than no graph)
        reserved = set(self.preferred.values())
        order = ([want] if want is not None else []) + [d for d in donors if d not in reserved]
        for d in order:
            if d in used or nbytes(d.aval) != nbytes(r.aval):
                continue
            lu = last.get(d, -1)
            if lu < k:
                return d
            if lu == k and node.kind.compiled and d in node.inputs:
                if sum(self.root[u] is d for u in node.inputs) != 1:
                    continue  # also read through a view of it (another input, same bytes)
                if d.aval.size == r.aval.size and inplace_ok(node, r, d):
                    return d
        return None


def scratch_avals(node: Any) -> list[ShapedArray]:
    """The scratch buffers a node needs during its step: a kernel's layout scratch, a library
    call's workspace, a loop's bodies' buffers (where its backend plans them)."""
    if node.kind == NodeKind.KERNEL:
        return node.layout.scratch
    if node.kind in (NodeKind.LIBRARY, NodeKind.LOOP) and node.workspace:
        return [ShapedArray((node.workspace,), dtypes.uint8)]
    return []


def _same_buffer(node: Any, out: Var, inp: Var) -> None:
    """Record on a kernel node that ``out`` is written over input ``inp`` (the whole buffer, the
    same dtype): its CPU kernel then stores through the input's pointer, so LLVM sees one buffer
    (two pointers to one buffer make its vectorized loops fall back to scalar code at run time)."""
    if (node.kind == NodeKind.KERNEL and inp in node.inputs and out in node.outputs
            and inp.aval.dtype == out.aval.dtype and inp.aval.size == out.aval.size):  # fmt: skip
        node.inplace += ((node.outputs.index(out), node.inputs.index(inp)),)


def inplace_ok(node: Any, out: Var, inp: Var) -> bool:
    """Whether node output ``out`` may be written over input ``inp``'s buffer: for kernels,
    their layout decides (``fusion.KernelLayout.inplace_safe``); a scatter may update its operand
    in place unless the operand is also its indices or updates; a library call, its
    ``overwrites`` input (read once by the call)."""
    if node.kind == NodeKind.SCATTER:
        e = node.eqns[0]
        return inp is e.invars[0] and all(a is not inp for a in e.invars[1:])
    if node.kind == NodeKind.LIBRARY:  # a call that may write its result over that input
        return inp is node.overwrites and sum(a is inp for a in node.eqns[0].invars) == 1
    return node.layout.inplace_safe(out, inp)


def _aligned(n: int) -> int:
    return max(-(-n // ALIGN) * ALIGN, ALIGN)
