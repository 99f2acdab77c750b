"""The layout of one fused kernel: which values get buffers and in which loop nests they are
computed. Pure Python over the kernel's jaxpr (no MLIR), so the launch plan and the memory plan
know a kernel's scratch buffers before anything is compiled.

A kernel is a jaxpr of fusible equations (elementwise, data movement, reductions). Values that
are not *materialized* are recomputed inline, element by element, wherever they are read (data
movement becomes index arithmetic). Materialized are: the kernel's outputs, reduction results
(their consumers read them at other indices), and expensive values read through a broadcast
that would recompute them many times. Each materialized value is computed in a loop *nest*
over its iteration domain (its shape, or its operand's shape for a reduction); nests over the
same domain share one loop (multi-output fusion: e.g. the AdamW update writes the parameter and
both moments in one pass), unless one reads the other at a different index, or reads a
reduction that is not finished yet.
"""

from __future__ import annotations

from typing import Any

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.jaxpr import Jaxpr, Literal, Var
from blu.lax.shapes import broadcast_in_dim_p

KERNEL_RULES = ("elementwise", "index", "reduce", "arg_reduce")  # kinds of ``prim.lowerings``


def is_arg_reduce(eqn: Any) -> bool:
    return "arg_reduce" in eqn.primitive.lowerings


def is_elementwise(eqn: Any) -> bool:
    return "elementwise" in eqn.primitive.lowerings


def is_index(eqn: Any) -> bool:
    return "index" in eqn.primitive.lowerings


def own_point(eqn: Any, i: int) -> bool:
    """Whether operand ``i`` of ``eqn`` is read only at the output's own point: every operand of
    an elementwise equation, and those an index rule lists in its ``"own_point"`` slot (the
    operand of ``dynamic_update_slice``, read outside the window where it is kept)."""
    return is_elementwise(eqn) or i in eqn.primitive.lowerings.get("own_point", ())


def reduce_axes(eqn: Any) -> tuple[int, ...]:
    p = eqn.params
    return (p["axis"],) if is_arg_reduce(eqn) else tuple(p["axes"])


def is_reduction(eqn: Any) -> bool:
    lw = eqn.primitive.lowerings
    return "reduce" in lw or "arg_reduce" in lw


def can_fuse(eqn: Any) -> bool:
    """Whether the equation has a kernel lowering rule (``prim.lowerings``) that applies."""
    lw = eqn.primitive.lowerings
    if eqn.primitive.multiple_results or not any(k in lw for k in KERNEL_RULES):
        return False
    # complex operands or results fuse only where the rules say so (the ``"complex"`` slot,
    # ``blu/lower/mlir/rules_complex.py``); the rest run as fallback nodes (their numpy impls)
    if any(getattr(v, "aval", None) is not None and v.aval.dtype.kind == "c"
           for v in (*eqn.invars, *eqn.outvars)):  # fmt: skip
        complex_ok = lw.get("complex")
        if complex_ok is None or not complex_ok(eqn):
            return False
    fuses = lw.get("fuses")
    return fuses is None or fuses(eqn)


GATHERS = 8  # shifted or strided reads in a value's inline computation that earn it a buffer
GATHER_PRIMITIVES = frozenset({"slice", "pad", "dynamic_slice", "gather", "rev"})


class Nest:
    """One loop nest: iterates over ``shape``; reduces ``axes`` (None: no reduction yet)."""

    __slots__ = ("shape", "axes", "members", "needs_multi")

    def __init__(self, shape: tuple[int, ...], axes: tuple[int, ...] | None):
        self.shape, self.axes = shape, axes
        self.members: list[Var] = []
        self.needs_multi = False


class KernelLayout:
    """Buffers and nests of a kernel jaxpr.

    Attributes:
        jaxpr: the kernel (invars: inputs, outvars: outputs; no constvars).
        producer: the equation defining each intermediate variable.
        buffer: materialized var -> ("in" | "out" | "tmp", position).
        scratch: avals of the kernel-private buffers (reductions read inside, float32
            accumulators of half-precision reductions, expensive broadcast values).
        acc: reduction var -> scratch position of its float32 accumulator (half floats
            reduced into a buffer).
        nests: the loop nests, in execution order.
    """

    def __init__(self, jaxpr: Jaxpr):
        self.jaxpr = jaxpr
        self.producer: dict[Var, Any] = {v: e for e in jaxpr.eqns for v in e.outvars}
        self.buffer: dict[Var, tuple[str, int]] = {}
        for i, v in enumerate(jaxpr.invars):
            self.buffer[v] = ("in", i)
        for i, v in enumerate(jaxpr.outvars):
            self.buffer[v] = ("out", i)
        self.scratch: list[ShapedArray] = []
        self.acc: dict[Var, int] = {}
        consumers: dict[Var, list[Any]] = {}
        for e in jaxpr.eqns:
            for a in e.invars:
                if isinstance(a, Var):
                    consumers.setdefault(a, []).append(e)
        for e in jaxpr.eqns:
            v = e.outvars[0]
            if v in self.buffer:
                continue
            users = consumers.get(v, [])
            if (is_reduction(e) or self._expensive_broadcast(v, users) or self._many_maps(v, users)
                    or self._shared_gather(v, users)):  # fmt: skip
                v = self._narrow_source(v, e, consumers)
                if v not in self.buffer:
                    self.buffer[v] = ("tmp", len(self.scratch))
                    self.scratch.append(v.aval.strip_weak_type())
        self.nests: list[Nest] = []
        self._reads: dict[Var, tuple[dict[Var, bool], bool]] = {}
        self._schedule()

    # ---- materialization ----------------------------------------------------------------------

    def _inline_sum(self, v: Var, budget: int, weight: Any) -> int:
        """``weight(eqn)`` summed over the equations computing ``v`` inline (up to the
        materialized values), saturating at ``budget``."""
        total, stack, seen = 0, [v], set()
        while stack and total < budget:
            u = stack.pop()
            if isinstance(u, Literal) or u in seen or u in self.buffer:
                continue
            seen.add(u)
            e = self.producer[u]
            total += weight(e)
            stack.extend(e.invars)
        return min(total, budget)

    def _cost(self, v: Var, budget: int = 8) -> int:
        """Roughly how expensive recomputing ``v`` inline is (saturating at ``budget``)."""
        return self._inline_sum(v, budget, lambda e: 4 if "expensive" in e.primitive.lowerings
                                else (1 if is_elementwise(e) else 0))  # fmt: skip

    def _narrow_source(self, v: Var, e: Any, consumers: dict[Var, list[Any]]) -> Var:
        """What to hold in place of ``v``: the operand of a widening cast that only the cast
        reads (its readers redo the cast, and the buffer has fewer bytes: a max pool's
        bfloat16 gradient had been held in float32 for a batch norm's sums), else ``v``."""
        u = e.invars[0] if e.primitive.name == "convert_element_type" else None
        if (isinstance(u, Var) and len(consumers.get(u, [])) == 1
                and u.aval.dtype.itemsize < v.aval.dtype.itemsize):  # fmt: skip
            return u
        return v

    def _expensive_broadcast(self, v: Var, consumers: list[Any]) -> bool:
        grows = any(
            e.primitive is broadcast_in_dim_p and e.outvars[0].aval.size >= 4 * max(v.aval.size, 1)
            for e in consumers
        )
        return grows and self._cost(v) >= 4

    def _many_maps(self, v: Var, consumers: list[Any]) -> bool:
        """A costly value read through several different index maps would be recomputed once
        per map (and chains of such reads multiply): give it a buffer instead."""
        maps = {id(e) for e in consumers if is_index(e)}
        maps |= {None for e in consumers if not is_index(e)}
        return len(maps) >= 2 and self._cost(v, 12) >= 12

    def _gathers(self, v: Var, budget: int) -> int:
        """How many shifted or strided reads (``GATHER_PRIMITIVES``: slices, pads, ...)
        computing ``v`` inline runs (saturating at ``budget``); broadcasts and reshapes, which
        read each operand element in place, do not count."""
        return self._inline_sum(v, budget, lambda e: e.primitive.name in GATHER_PRIMITIVES)

    def _shared_gather(self, v: Var, consumers: list[Any]) -> bool:
        """A value gathered from many offsets (a windowed max's backward: each element reads
        every offset of its window) and read by several equations: its readers may sit in
        different nests (a batch norm's sums and its input gradient after a max pool), each of
        which would redo every gather and its index arithmetic; give it a buffer instead."""
        return len({id(e) for e in consumers}) >= 2 and self._gathers(v, GATHERS) >= GATHERS

    # ---- scheduling ---------------------------------------------------------------------------

    def reads(self, m: Var) -> tuple[dict[Var, bool], bool]:
        """The materialized values computing ``m`` reads (True: only at its own index, through
        elementwise operations and ``own_point`` operands), and whether any data movement is
        inlined (needs multi-indices)."""
        if m in self._reads:
            return self._reads[m]
        e = self.producer[m]
        if is_reduction(e):
            roots, moves = [(e.invars[0], True)], False
        else:
            roots = [(a, own_point(e, i)) for i, a in enumerate(e.invars)]
            moves = not is_elementwise(e)
        out: dict[Var, bool] = {}
        seen: set = set()
        while roots:
            v, ident = roots.pop()
            if isinstance(v, Literal) or (v, ident) in seen:
                continue
            seen.add((v, ident))
            if v in self.buffer:
                out[v] = out.get(v, True) and ident
                continue
            pe = self.producer[v]
            moves = moves or not is_elementwise(pe)
            roots.extend((a, ident and own_point(pe, i)) for i, a in enumerate(pe.invars))
        self._reads[m] = (out, moves)
        return out, moves

    def _schedule(self) -> None:
        where: dict[Var, int] = {}
        for e in self.jaxpr.eqns:
            m = e.outvars[0]
            if m not in self.buffer:
                continue
            red = is_reduction(e)
            shape = e.invars[0].aval.shape if red else m.aval.shape
            axes = reduce_axes(e) if red else None
            deps, moves = self.reads(m)
            earliest = 0
            for d, ident in deps.items():
                if d in where:
                    finished = not is_reduction(self.producer[d]) and ident
                    earliest = max(earliest, where[d] + (0 if finished else 1))
            k = next(
                (
                    j
                    for j in range(earliest, len(self.nests))
                    if self.nests[j].shape == shape
                    and (axes is None or self.nests[j].axes in (None, axes))
                ),
                None,
            )
            if k is None:
                k = len(self.nests)
                self.nests.append(Nest(shape, None))
            nest = self.nests[k]
            if axes is not None:
                nest.axes = axes
            nest.members.append(m)
            nest.needs_multi = nest.needs_multi or moves
            where[m] = k
        self._defer_reductions()
        for nest in self.nests:
            self._plan_accumulators(nest)

    def _defer_reductions(self) -> None:
        """A reduction nest whose values no nest reads before a later nest of the same shape
        and reduced axes joins that nest: the two passes over their shared inputs become one
        (a layer norm's backward: ``dgamma`` and ``dbeta``, which only the optimizer reads, with
        the pass that writes ``dx`` after the row sums: GPT-2's read ``dy`` and ``x`` three
        times, now twice)."""
        j = 0
        while j < len(self.nests):
            a = self.nests[j]
            mine, joined = set(a.members), False
            for b in self.nests[j + 1 :] if a.axes is not None else ():
                if any(d in mine for m in b.members for d in self.reads(m)[0]):
                    break  # read on the way: it must finish first
                if b.shape == a.shape and b.axes == a.axes:
                    b.members[:0] = a.members
                    b.needs_multi = b.needs_multi or a.needs_multi
                    joined = True
                    break
            if joined:
                del self.nests[j]
            else:
                j += 1

    def inplace_safe(self, out: Var, inp: Var) -> bool:
        """Whether ``out`` may be written over ``inp``'s buffer: ``inp`` is read only in earlier
        nests, or element-for-element in ``out``'s own nest (where loads precede stores)."""
        if out not in self.buffer or is_reduction(self.producer[out]):
            return False
        nest_of = {m: j for j, n in enumerate(self.nests) for m in n.members}
        j0 = nest_of[out]
        for j, nest in enumerate(self.nests):
            for m in nest.members:
                reads = self.reads(m)[0]
                if inp in reads and (j > j0 or (j == j0 and not reads[inp])):
                    return False
        return True

    def _plan_accumulators(self, nest: Nest) -> None:
        """Half-precision reductions that accumulate in memory get a float32 scratch buffer."""
        if nest.axes is None or is_suffix(nest):
            return
        for m in nest.members:
            if is_reduction(self.producer[m]) and m.aval.dtype in (dtypes.bfloat16, dtypes.float16):
                self.acc[m] = len(self.scratch)
                self.scratch.append(ShapedArray(m.aval.shape, dtypes.float32))


def loop_groups(nest: Nest) -> list[tuple[int, str, tuple[int, ...]]]:
    """The loops of a nest: (trip count, 'k' kept / 'r' reduced, dimensions). Unit dimensions
    get no loop; adjacent dimensions of one kind are merged unless the nest needs per-dimension
    indices (inlined data movement)."""
    axes = nest.axes or ()
    out: list[tuple[int, str, tuple[int, ...]]] = []
    for d, n in enumerate(nest.shape):
        if n == 1:
            continue
        lab = "r" if d in axes else "k"
        if out and out[-1][1] == lab and not nest.needs_multi:
            out[-1] = (out[-1][0] * n, lab, out[-1][2] + (d,))
        else:
            out.append((n, lab, (d,)))
    return out


def is_suffix(nest: Nest) -> bool:
    """Whether the reduced loops are innermost (the accumulators can live in registers)."""
    labels = [g[1] for g in loop_groups(nest)]
    return "k" not in labels[labels.index("r") :] if "r" in labels else True
