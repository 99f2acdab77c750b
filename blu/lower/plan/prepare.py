"""One plan preparation for every target: a jaxpr's decompositions inlined, simplified,
partitioned into a launch plan, its kernels laid out and its memory planned, with the target's
own rewrites taken from its backend at fixed points (``Backend.early_passes`` /
``late_passes`` / ``lay_out_kernel`` / ``concurrent_nodes``). Pure Python (no MLIR, no device):
``jit(f).lower(...)`` shows and sizes a program without compiling it. This module never
imports a backend: it is handed one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from blu.core.jaxpr import Jaxpr, JaxprEqn, splice_each
from blu.core.staging import trace_to_jaxpr
from blu.lower import library
from blu.lower.plan.fusion import KernelLayout, can_fuse
from blu.lower.plan.memory import MemoryPlan, inplace_ok
from blu.lower.plan.nodes import NodeKind, Plan
from blu.lower.plan.partition import partition
from blu.lower.plan.simplify import simplify


class Prepared(NamedTuple):
    """A program ready for a target: the simplified jaxpr, its launch plan, its memory plan."""

    jaxpr: Jaxpr
    plan: Plan
    memory: MemoryPlan


def lowers(eqn: JaxprEqn, target: str) -> bool:
    """Whether some lowering of ``eqn``'s primitive (``prim.lowerings``) applies on ``target``."""
    lw = eqn.primitive.lowerings
    return (
        can_fuse(eqn) or "dot" in lw or "scatter" in lw or "inline" in lw
        or library.lowering_for(eqn, target) is not None
    )  # fmt: skip


MAX_DECOMPOSITION_DEPTH = 8  # a decomposition may use primitives that decompose in turn


def inline_decompositions(jaxpr: Jaxpr, target: str) -> Jaxpr:
    """Replace each equation whose primitive has a ``decomposition`` and no lowering that
    applies on ``target`` by the jaxpr of its decomposition (fresh variables), so it fuses
    like other code instead of running on the host."""
    for _ in range(MAX_DECOMPOSITION_DEPTH):
        todo = {id(e) for e in jaxpr.eqns if e.primitive.decomposition is not None
                and not lowers(e, target)}  # fmt: skip
        if not todo:
            return jaxpr
        # (spliced with each equation's source: traced now, the body's lines would be the
        # lowering call's; keep the user's)
        jaxpr = splice_each(jaxpr, lambda e: _decomposition_jaxpr(e) if id(e) in todo else None)
    return jaxpr


def _decomposition_jaxpr(eqn: JaxprEqn) -> Jaxpr | None:
    """The decomposition of ``eqn`` traced on its operands' avals (None if it closes over
    arrays: those would have to become arguments)."""
    prim = eqn.primitive

    def fun(*args: Any) -> list[Any]:
        out = prim.decomposition(*args, **eqn.params)
        return list(out) if prim.multiple_results else [out]

    body, consts = trace_to_jaxpr(fun, [a.aval for a in eqn.invars])
    return None if consts or body.constvars else body


def prepare_plan(jaxpr: Jaxpr, donated: Sequence[bool], backend: Any) -> Prepared:
    """Inline decompositions, simplify, partition, lay out kernels and plan memory, with
    ``backend``'s passes (``blu.lower.backend.Backend``) at their places.

    Args:
        jaxpr: the program (no constvars).
        donated: per argument, whether its buffer may be reused for outputs.
        backend: the target's backend object.
    """
    jaxpr = backend.early_passes(jaxpr)
    simple = backend.late_passes(simplify(inline_decompositions(jaxpr, backend.target)))
    plan = partition(simple, backend)
    for node in plan.nodes:
        if node.kind == NodeKind.LIBRARY:
            node.workspace = library.workspace_bytes(node.eqns[0], backend.target)
            lw = library.lowering_for(node.eqns[0], backend.target)
            if lw is not None and lw.inplace is not None:
                node.overwrites = node.eqns[0].invars[lw.inplace]
        if node.kind == NodeKind.LOOP:
            backend.prepare_loop(node)
        if node.kind == NodeKind.KERNEL:
            node.layout = KernelLayout(node.jaxpr)
            backend.lay_out_kernel(node.layout)
    concurrent = backend.concurrent_nodes(plan)
    return Prepared(simple, plan, MemoryPlan(plan, tuple(donated), inplace_ok, concurrent))
