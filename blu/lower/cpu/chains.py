"""Row chains: consecutive steps of the CPU executable that all go by the same ``R`` rows, run
as one split step, each thread taking its rows through every step of the chain.

A layer's forward pass is a product, then a kernel on its rows (bias, activation), then often
the next product: ``h = gelu(x @ w1 + b1); y = h @ w2``. Run step by step, each is split across
the threads on its own: three hand-overs to the pool thread, three waits for the slower part,
and the activation reads the product's rows back from memory. Row ``i`` of every result
depends only on row ``i`` of the one before (the products' right operands are read whole, but
made before the chain), so each thread can run its rows through the whole chain: one
hand-over, one wait, and a part's rows are still in its core's cache when the next step reads
them (on the 2-core machine the MLP step ran faster with ``x @ w1``, the GELU kernel and
``h @ w2`` as one chain than as three split steps: docs/benchmarks/cpu_backend.md, session 8).
With spinning workers (``spin.py``) a hand-over costs a few microseconds, and the chain's cost
dominates instead (each part packs the products' whole right operands): the same step was
slower with the chain (session 9), so the executable makes chains only where the parts go to
the blocking pool.

``find`` picks the chains of a CPU executable's steps: runs of at least two steps, at least one
a product, where every step is

- a product ``(R, ..., k) @ (k, n)`` (float32/float64 throughout, no batch dimension, a 2-D
  right operand) whose left operand is read as it is stored (rows first) and whose right
  operand is not made in the chain, or
- a kernel split by rows (``rows.RowKernel``, ``R`` rows, no scratch) that reads the values
  the chain makes only at the row it writes (``rows.row_count(node, rowed_inputs)``),

and where no step writes a buffer another step of the chain reads whole (buffers of the memory
plan compared by their arena ranges and arguments): values made in the chain may share memory
only row for row (the same start and the same bytes per row, the kernel writing over the
product's result in place). Products run beside another (``pairs``), fused with the update
after them (``epilogue``) or handed to a loop are never part of one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from blu.core.jaxpr import Var
from blu.lower.cpu import address, blas, rows, spin
from blu.lower.cpu import threads as cpu_threads
from blu.lower.plan.nodes import NodeKind

__all__ = ["Chain", "find", "runner"]

MIN_ROWS = 8  # rows of each part at the least (as ``blas.split_axis``)


@dataclasses.dataclass(frozen=True)
class Chain:
    """Steps ``start`` to ``end`` (inclusive) run as one, split by their ``rows`` rows."""

    start: int
    end: int
    rows: int


def _product_rows(step: Any) -> int:
    """``R`` when the product step is a plain ``(R, ..., k) @ (k, n)`` (or ``(n, k)`` read
    transposed) with its left operand read as stored, rows first (see the module docstring),
    else 0."""
    if step.kind != NodeKind.DOT or not all(isinstance(a, int) for a in step.ins):
        return 0
    e = step.node.eqns[0]
    (lc, rc), (lb, rb) = e.params["dimension_numbers"]
    la, ra, oa = e.invars[0].aval, e.invars[1].aval, e.outvars[0].aval
    nl = len(la.shape)
    if lb or rb or nl < 2 or len(ra.shape) != 2 or tuple(lc) != (nl - 1,):
        return 0
    dts = {np.dtype(a.dtype) for a in (la, ra, oa)}
    if len(dts) != 1 or dts.pop() not in (np.dtype(np.float32), np.dtype(np.float64)):
        return 0
    return la.shape[0]


def _buffer(memory: Any, r: Var) -> tuple | None:
    """Where a root's buffer is, for overlap tests: ``("arena", lo, hi)``, ``("arg", i)``,
    ``("out", id)``, or None (a fallback's value: never part of a chain)."""
    place = memory.place.get(r)
    if place is None or place[0] == "fallback":
        return None
    if place[0] == "arena":
        return ("arena", place[1], place[1] + r.aval.size * np.dtype(r.aval.dtype).itemsize)
    if place[0] in ("arg", "donated"):
        return ("arg", place[1])
    return ("out", id(r))


def _overlap(a: tuple, b: tuple) -> bool:
    if a[0] == "arena" and b[0] == "arena":
        return a[1] < b[2] and b[1] < a[2]
    return a == b


def _row_bytes(r: Var) -> int:
    return int(np.prod(r.aval.shape[1:], dtype=np.int64)) * np.dtype(r.aval.dtype).itemsize


def _safe(steps: list, memory: Any) -> bool:
    """Whether the steps' buffers allow running them row by row at once (module docstring)."""
    made: set[Var] = set()  # roots made in the chain (row by row)
    whole: set[Var] = set()  # roots read whole
    for st in steps:
        node = st.node
        ins = [memory.root[v] for v in node.inputs]
        if any(memory.root[v] is not v for v in node.inputs if memory.root[v] in made):
            return False  # a view of a value made in the chain
        if st.kind == NodeKind.DOT:
            lhs, rhs = ins
            if rhs in made:
                return False
            if lhs not in made:
                whole.add(lhs)
            whole.add(rhs)
        else:
            whole.update(r for r in ins if r not in made)
        made.update(memory.root[v] for v in node.outputs)
    bufs = {r: _buffer(memory, r) for r in made | whole}
    if any(b is None for b in bufs.values()):
        return False
    for w in made:
        for v, b in bufs.items():
            if v is w or not _overlap(bufs[w], b):
                continue
            if v in whole:
                return False
            same_rows = bufs[w][0] == "arena" and bufs[w][1] == b[1]
            if not same_rows or _row_bytes(w) != _row_bytes(v):
                return False
    return True


def _fits(st: Any, r: int, made: set, memory: Any) -> bool:
    """Whether step ``st`` can join a chain of ``r`` rows that has made the roots ``made``."""
    if st.kind == NodeKind.DOT:
        return _product_rows(st) == r
    if st.kind != NodeKind.KERNEL or st.scratch:
        return False
    rowed = frozenset(i for i, v in enumerate(st.node.inputs) if memory.root[v] in made)
    return rows.row_count(st.node, rowed) == r


def find(steps: Any, memory: Any, free: set[int], threads: int) -> list[Chain]:
    """The row chains of a CPU executable's steps (see the module docstring); ``free``: the
    positions of the steps that may join one (products and kernels run by ``rows.RowKernel``,
    none in a pair, fused or streamed); ``threads``: the CPU threads (none below 2)."""
    if threads < 2:
        return []
    ss = steps.steps
    out: list[Chain] = []
    i = 0
    while i < len(ss):
        st = ss[i]
        r = _product_rows(st) if st.kind == NodeKind.DOT else 0
        if st.kind == NodeKind.KERNEL and not st.scratch:
            r = rows.row_count(st.node)
        if i not in free or r < MIN_ROWS * threads:
            i += 1
            continue
        made = {memory.root[v] for v in st.node.outputs}
        j = i
        while j + 1 < len(ss) and j + 1 in free and _fits(ss[j + 1], r, made, memory):
            if not _safe(ss[i : j + 2], memory):
                break
            j += 1
            made.update(memory.root[v] for v in ss[j].node.outputs)
        chain = ss[i : j + 1]
        flops = sum(_flops(s) for s in chain if s.kind == NodeKind.DOT)
        if j > i and flops >= blas.MIN_THREADED_FLOPS and _safe(chain, memory):
            out.append(Chain(i, j, r))
            i = j + 1
        else:
            i += 1
    return out


def _flops(st: Any) -> float:
    e = st.node.eqns[0]
    la, oa = e.invars[0].aval, e.outvars[0].aval
    return 2.0 * float(np.prod(oa.shape, dtype=np.float64)) * la.shape[-1]


def runner(chain: Chain, steps: list, kernels: dict[int, Any]) -> Any:
    """The runner of a chain: ``run(env, arena, owned)`` runs its steps row part by row part on
    blu's threads (``steps``: the chain's ``Step``s; ``kernels``: position in the chain ->
    the ``rows.RowKernel`` of each kernel step). A concurrent call of the executable
    (``owned=False``) runs the steps one after the other, each split on its own."""
    r = chain.rows
    balance = cpu_threads.Balance()
    plan: list[tuple] = []
    for k, st in enumerate(steps):
        if st.kind == NodeKind.DOT:
            e = st.node.eqns[0]
            rt = e.params["dimension_numbers"][0][1][0] == 1  # rhs read as (n, k)
            k, n = e.invars[0].aval.shape[-1], e.outvars[0].aval.shape[-1]
            plan.append(("dot", st.ins[0], st.ins[1], st.outs[0], rt, k, n))
        else:
            plan.append(("kernel", kernels[k]))

    def run(env: list, arena: Any, owned: bool) -> None:
        if not owned:
            for item in plan:
                if item[0] == "kernel":
                    item[1](env, arena, owned)
                else:
                    _, li, ri, oi, rt, k, n = item
                    rhs = env[ri].T if rt else env[ri]
                    blas.mm(env[li].reshape(-1, k), rhs, env[oi].reshape(-1, n))
            return
        threads = rows._threads()
        cuts = cpu_threads.split(r, threads, MIN_ROWS, balance.share, align=16)
        if len(cuts) > 1 and balance.solo():
            cuts = [(0, r)]
        work = []
        for item in plan:
            if item[0] == "kernel":
                rk = item[1]
                addrs = [address.data(env[s]) for s in (*rk.ins, *rk.outs)]
                packs = {}
                for k, (lo, hi) in enumerate(cuts):
                    ptrs, packed = rk._part(k)
                    ptrs[:] = [*addrs, lo, hi]
                    packs[lo] = packed
                work.append((rk.fn, packs))
            else:
                _, li, ri, oi, rt, k, n = item
                work.append((env[li], env[ri].T if rt else env[ri], env[oi], k, n))
        blas.use_threads(1)

        def part(lo: int, hi: int) -> None:
            with np.errstate(over="ignore", invalid="ignore"):  # as the caller's (per thread)
                for w in work:
                    if len(w) == 2:
                        spin.call(w[0], w[1][lo])
                    else:  # rows [lo, hi) of the stacked operands, as 2-D matrices
                        lhs, rhs, out, k, n = w
                        blas.mm(lhs[lo:hi].reshape(-1, k), rhs, out[lo:hi].reshape(-1, n))

        if len(cuts) == 1:
            part(0, r)
            return
        cpu_threads.run_parts(part, cuts, balance, native=True)

    return run
