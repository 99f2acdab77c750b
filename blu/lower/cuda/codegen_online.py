"""The online softmax normalizer in looped GPU row groups (emitter generation 3, issue #18).

A softmax (or a cross-entropy's log-sum-exp) over rows too long for registers (the fused
classifier's rows of 50,304 logits) is a row group of two nests: ``m = max(x)``, then
``s = sum(exp(x - m))``. Generation 2 emits each nest as its own strided pass over the row, so
the row is read twice (the second time from L2 when few enough rows are in flight). Here the two
nests run as one pass that carries, per thread, the running maximum and the sum of exponentials
relative to it, rescaling the sum whenever the maximum grows (Milakov & Gimelshein 2018, "Online
normalizer calculation for softmax", arXiv:1805.02867, Algorithm 3); the threads' pairs are then
combined across the block (the maximum first, each thread's sum rescaled to it, then summed).

Per chunk of ``ROW_UNROLL`` points (every load issued first, as in ``codegen_strided``):
``m' = max(m, x_1..x_U)`` by the max's own combine, ``s' = s * exp(m - m') + sum_i exp(x_i -
m')`` with the exponentials computed by the program's own ``sub`` and ``exp`` rules, so one
``exp`` per element plus one per chunk. The sums round differently from the two-pass form (the
same value up to float32 rounding, not the same bits), hence a generation of its own.

Special values follow the two-pass form: a row whose maximum is ``-inf`` (all ``-inf``) gives a
NaN sum (``exp(-inf - -inf)``); ``+inf`` or NaN elements give NaN. While a thread's running
maximum is still ``-inf`` its exponentials are taken relative to 0 (they are ``exp(-inf) = 0``)
and the rescale factor between equal maxima is 1, so no NaN appears that the two-pass form
would not make.

The pattern (``online_pairs``): the second nest's members are all ``reduce_sum`` of
``exp(sub(X, b))`` where ``b`` is the first nest's ``reduce_max`` of the same ``X`` (through
reshapes and broadcasts that keep it per row), float32, and the first nest's members are all
reductions; any other group keeps the two passes. Launch geometry is unchanged.
"""

from __future__ import annotations

from typing import Any

from blu.core import dtypes
from blu.core.jaxpr import Var
from blu.lax.shapes import broadcast_in_dim_p, reshape_p, squeeze_p
from blu.lower.cuda.codegen_strided import ROW_UNROLL, generation
from blu.lower.mlir.emit import Idx
from blu.lower.plan.fusion import KernelLayout, Nest, is_arg_reduce, is_reduction

_PER_ROW = (reshape_p, squeeze_p, broadcast_in_dim_p)


def online_on() -> bool:
    """Whether looped row groups use the online normalizer (generation 3)."""
    return generation() >= 3


def _name(layout: KernelLayout, v: Any) -> str:
    e = layout.producer.get(v) if isinstance(v, Var) else None
    return "" if e is None else e.primitive.name


def online_pairs(layout: KernelLayout, first: Nest, second: Nest) -> dict[Var, Var] | None:
    """``{s: m}`` for each member ``s = sum(exp(X - m))`` of ``second`` with ``m = max(X)`` a
    member of ``first`` (the module docstring's pattern), or None when ``second`` is not all
    such sums or ``first`` holds a member that is not a reduction."""
    prod = layout.producer
    if not first.members or not second.members:
        return None
    for m in first.members:
        if not is_reduction(prod[m]) or is_arg_reduce(prod[m]):
            return None
    pairs: dict[Var, Var] = {}
    for s in second.members:
        if _name(layout, s) != "reduce_sum" or s.aval.dtype != dtypes.float32:
            return None
        e = prod[s].invars[0]
        if _name(layout, e) != "exp" or e in layout.buffer:
            return None
        d = prod[e].invars[0]
        if _name(layout, d) != "sub" or d in layout.buffer:
            return None
        x, bc = prod[d].invars
        while isinstance(bc, Var) and bc not in layout.buffer and prod[bc].primitive in _PER_ROW:
            bc = prod[bc].invars[0]
        m = bc
        if m not in first.members or _name(layout, m) != "reduce_max":
            return None
        if prod[m].invars[0] is not x or prod[m].params != prod[s].params:
            return None  # the max of another value, or over other axes
        pairs[s] = m
    return pairs


class OnlineRowEmitter:
    """The online pass of ``codegen_gpu.GpuKernelEmitter`` (a mixin: it uses the emitter's
    builder, ``value``, ``row_vals``, ``_reductions``, ``_combine``, ``_all_reduce``...)."""

    def _online_pass(self, first: Nest, second: Nest, pairs: dict[Var, Var], head: Any,
                     k: str, tid: str, block: int) -> list[tuple[Var, str]]:  # fmt: skip
        """One strided pass over row ``k`` computing ``first``'s reductions and ``second``'s
        sums of exponentials (``pairs``: sum -> its max); thread 0 stores every total.
        Returns each reduction with its total (every thread holds it)."""
        b, prod = self.b, self.layout.producer
        reds_a, inits_a = self._reductions(first)
        sums = list(second.members)
        at_m = {m: i for i, m in enumerate(reds_a)}  # plain reductions: one accumulator each
        inits = inits_a + [(self._const(0.0, dtypes.float32), "f32") for _ in sums]
        types = [t for _, t in inits]
        shape = first.shape
        km = b.multi(Idx(tuple(shape[d] for d in head.kept), None, k))
        row0 = b.imul(k, head.R)

        def point(r: str) -> Idx:  # the multi-index known: broadcasts of m need no division
            rm = b.multi(Idx(tuple(shape[d] for d in head.red), None, r))
            multi = [b.index(0)] * len(shape)
            for d, x in [*zip(head.kept, km), *zip(head.red, rm)]:
                multi[d] = x
            return Idx(shape, multi, b.iadd(row0, r))

        n, step = head.R, block
        chunks = (n // step) // ROW_UNROLL

        def body(accs: list[str], pts: list[tuple[str, Idx]]) -> list[str]:
            self.cache = {}
            for _, at in pts:  # every load of the chunk first
                for m in reds_a:
                    self.value(prod[m].invars[0], at)
            new_a = accs[: len(reds_a)]
            for pos, at in pts:
                new_a = [v for i, m in enumerate(reds_a)
                         for v in self._combine(m, new_a[i : i + 1], at, pos)]  # fmt: skip
            new_s = []
            for j, s in enumerate(sums):
                m = pairs[s]
                old, cur = accs[at_m[m]], new_a[at_m[m]]
                self.row_vals[m] = self._finite_or_zero(cur)
                acc = b.op(f"arith.mulf {accs[len(reds_a) + j]}, "
                           f"{self._rescale(s, old, cur)} : f32")  # fmt: skip
                for _, at in pts:
                    acc = self._combine(s, [acc], at, "")[0]
                new_s.append(acc)
            for s in sums:
                self.row_vals.pop(pairs[s], None)
            return new_a + new_s

        accs = [v for v, _ in inits]
        if chunks:
            c, args, res = self._open(b.index(0), b.index(chunks), b.index(1), inits)
            # thread t's chunk c: the ROW_UNROLL contiguous elements from (c step + t) ROW_UNROLL
            # (one vector access where the row is aligned; chunk c covers the same elements as
            # a strided chunk would, so the remainder loop below is the strided one)
            first = b.op(f"arith.muli {b.iadd(b.imul(c, step), tid)}, {b.index(ROW_UNROLL)} "
                         ": index", "i")  # fmt: skip
            pts = [(r, point(r)) for r in (b.iaddc(first, u) for u in range(ROW_UNROLL))]
            new = body(args, pts)
            b.stmt(f"scf.yield {', '.join(new)} : {', '.join(types)}")
            self._close()
            accs = [f"{res}#{i}" for i in range(len(inits))]
        start = b.iaddc(tid, chunks * ROW_UNROLL * step)
        r, args, res = self._open(start, b.index(n), b.index(step), list(zip(accs, types)))
        new = body(args, [(r, point(r))])
        b.stmt(f"scf.yield {', '.join(new)} : {', '.join(types)}")
        self._close()
        accs = [f"{res}#{i}" for i in range(len(inits))]
        self.cache = {}
        # across the block: the maxima, then each thread's sums rescaled to the row's maximum
        totals = {m: self._all_reduce(m, accs[i]) for i, m in enumerate(reds_a)}
        for j, s in enumerate(sums):
            m = pairs[s]
            mine = b.op(f"arith.mulf {accs[len(reds_a) + j]}, "
                        f"{self._rescale(s, accs[at_m[m]], totals[m])} : f32")  # fmt: skip
            tot = self._all_reduce(s, mine)
            ninf = b.op(f"arith.cmpf oeq, {totals[m]}, {self._const(float('-inf'), dtypes.float32)}"
                        " : f32")  # fmt: skip
            nan = self._const(float("nan"), dtypes.float32)
            totals[s] = b.op(f"arith.select {ninf}, {nan}, {tot} : f32")
        self._if(b.op(f"arith.cmpi eq, {tid}, {b.index(0)} : index"))
        self._store_reds(reds_a + sums, [totals[m] for m in reds_a + sums], k)
        self._close()
        return [(m, totals[m]) for m in reds_a + sums]

    def _finite_or_zero(self, m: str) -> str:
        """``m``, or 0 while it is ``-inf`` (exponentials of ``-inf`` elements are then 0)."""
        b = self.b
        ninf = b.op(f"arith.cmpf oeq, {m}, {self._const(float('-inf'), dtypes.float32)} : f32")
        return b.op(f"arith.select {ninf}, {self._const(0.0, dtypes.float32)}, {m} : f32")

    def _rescale(self, s: Var, old: str, new: str) -> str:
        """``exp(old - new)`` by the program's own ``sub`` and ``exp`` rules, 1 when equal (both
        ``-inf``, or no growth)."""
        b, prod = self.b, self.layout.producer
        e = prod[s].invars[0]
        d = prod[e].invars[0]
        diff = prod[d].primitive.lowerings["elementwise"](b, prod[d], old, new)
        factor = prod[e].primitive.lowerings["elementwise"](b, prod[e], diff)
        same = b.op(f"arith.cmpf oeq, {old}, {new} : f32")
        return b.op(f"arith.select {same}, {self._const(1.0, dtypes.float32)}, {factor} : f32")
