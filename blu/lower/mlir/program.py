"""The MLIR of a launch plan's compiled nodes, for any backend: their canonical texts (cache
key material), their cache keys and a program's text (the plan as comments, then one module
per distinct kernel). What differs per target (the key's suffixes, the emitted text) comes
from the backend (``Backend.kernel_text`` / ``emit_node`` / ``key_target``). Computed without
MLIR installed."""

from __future__ import annotations

from typing import Any

from blu.core.jaxpr import Jaxpr
from blu.lower.mlir import cache
from blu.lower.mlir.llvm import symbol
from blu.lower.plan.nodes import NodeKind, Plan

# Per primitive, the version of its kernel rule where a fix changed the code it emits: the
# kernels holding it get keys of their own (the cache keeps no kernel built by the old rule),
# while every other kernel keeps its key (``cache.CODEGEN_VERSION`` would invalidate them all).
# concatenate 2: every operand's position clamped (the last one's was read unclamped: a load
# before its buffer, an illegal address on a GPU where that buffer starts an allocation).
# tanh 2: exactly +-1 beyond the approximation's clamp (it gave 1 - 3e-7 there, and GELU's
# x * (1 + tanh) grew with large negative x).
RULE_VERSIONS = {"concatenate": 2, "tanh": 2}


def node_text(node: Any) -> str:
    """The canonical text (cache key material) of a kernel or scatter node."""
    if node.kind == NodeKind.SCATTER:
        e = node.eqns[0]
        return cache.canonical_text(Jaxpr([], e.invars, [e], e.outvars))
    text = cache.canonical_text(node.jaxpr)
    rules = sorted({e.primitive.name for e in node.jaxpr.eqns} & RULE_VERSIONS.keys())
    if rules:
        text += "\n#rules " + " ".join(f"{r}={RULE_VERSIONS[r]}" for r in rules)
    return text


def kernel_key(node: Any, backend: Any) -> str:
    return cache.kernel_key(backend.kernel_text(node), backend.key_target())


def cache_keys(plan: Plan, backend: Any) -> list[str]:
    """The cache keys of a plan's distinct kernels, in plan order."""
    keys = {kernel_key(n, backend): None for n in plan.nodes if n.kind.compiled}
    return list(keys)


def program_text(name: str, backend: Any, plan: Plan, heading: str = "") -> str:
    """The launch plan as MLIR comments (after ``heading``), then one module per distinct
    kernel (named by its cache key's symbol)."""
    parts = [f"// launch plan of {name}{heading}"]
    parts += ["//   " + ln for ln in str(plan).splitlines()]
    seen = set()
    for node in plan.nodes:
        if node.kind.compiled:
            sym = symbol(kernel_key(node, backend))
            if sym not in seen:
                seen.add(sym)
                parts.append(backend.emit_node(node, sym))
    return "\n".join(parts)
