"""Products that run side by side on the CPU: two adjacent, independent matrix products of the
plan, each on one thread, at the same time (``CpuExecutable`` runs them; the memory plan keeps
either one's buffers out of the other's way: ``MemoryPlan(concurrent=...)``).

A product large enough to pay for a second thread is otherwise split across the threads
(``blas.matmul``); two threads on one product do less than two on two products: each part packs
a whole operand again, the parts start tens of microseconds apart, and they end together only
on average (on the 2-core machine two independent products gained more over one thread than
one product split in two: docs/benchmarks/cpu_backend.md). A training step's backward pass has
such pairs: the gradient
of a layer's weight and that of its input (``h.T @ g`` and ``g @ w.T``) both read only ``g``.

A pair is chosen when the process has at least two threads (``BLU_CPU_THREADS``), both products
are above ``blas.MIN_THREADED_FLOPS`` and within ``MAX_RATIO`` of each other's flops (one waits
for the other), and the second reads nothing the first writes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blu.lower.cpu import blas
from blu.lower.plan.nodes import NodeKind

__all__ = ["MAX_RATIO", "concurrent_products", "dot_flops"]

MAX_RATIO = 2.0


def dot_flops(eqn: Any) -> float:
    """Floating-point operations of a ``dot_general`` equation (2 per multiply-add)."""
    (lc, rc), (lb, _) = eqn.params["dimension_numbers"]
    la, oa = eqn.invars[0].aval, eqn.outvars[0].aval
    k = int(np.prod([la.shape[a] for a in lc], dtype=np.int64))
    return 2.0 * float(np.prod(oa.shape, dtype=np.float64)) * k


def concurrent_products(plan: Any, threads: int | None = None) -> frozenset[int]:
    """Indices ``k`` of the plan's nodes that run at the same time as node ``k + 1`` (see the
    module docstring); ``threads``: the CPU threads (default: ``rows._threads()``)."""
    from blu.lower.cpu.rows import _threads

    if (threads or _threads()) < 2:
        return frozenset()
    nodes, out, k = plan.nodes, set(), 0
    while k + 1 < len(nodes):
        a, b = nodes[k], nodes[k + 1]
        if a.kind == NodeKind.DOT and b.kind == NodeKind.DOT:
            fa, fb = dot_flops(a.eqns[0]), dot_flops(b.eqns[0])
            big = min(fa, fb) >= blas.MIN_THREADED_FLOPS and max(fa, fb) <= MAX_RATIO * min(fa, fb)
            written = set(a.outputs)
            if big and not any(v in written for v in b.inputs):
                out.add(k)
                k += 2
                continue
        k += 1
    return frozenset(out)
