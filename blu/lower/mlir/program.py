"""The MLIR of a launch plan's compiled nodes, for any target: their canonical texts (cache
key material), their kernels' MLIR, and a program's text (the plan as comments, then one module
per distinct kernel). Computed without MLIR installed."""

from __future__ import annotations

from typing import Any

from blu.core.jaxpr import Jaxpr
from blu.lower.cpu import rows
from blu.lower.cpu.compiler import symbol
from blu.lower.cuda import codegen_rows
from blu.lower.cuda.codegen import emit_gpu_kernel
from blu.lower.mlir import cache
from blu.lower.mlir.codegen import VECTOR_WIDTH, emit_kernel
from blu.lower.mlir.scatter import emit_scatter
from blu.lower.plan.nodes import NodeKind, Plan


def is_gpu(target: str) -> bool:
    return target.startswith("cuda")


def node_text(node: Any) -> str:
    """The canonical text (cache key material) of a kernel or scatter node."""
    if node.kind == NodeKind.SCATTER:
        e = node.eqns[0]
        return cache.canonical_text(Jaxpr([], e.invars, [e], e.outvars))
    return cache.canonical_text(node.jaxpr)


def kernel_text(node: Any, target: str) -> str:
    """The canonical text a node's kernel is cached under for ``target`` (a GPU kernel's
    includes the row-group form, which changes its code)."""
    if is_gpu(target):
        return node_text(node) + codegen_rows.key_suffix()
    return node_text(node) + inplace_suffix(node) + rows_suffix(node) + VECTOR_SUFFIX


# the CPU kernels' vector width is part of their code (``codegen.VECTOR_WIDTH``), hence of the key
VECTOR_SUFFIX = f"\nvector {VECTOR_WIDTH}"


def split_rows(node: Any) -> int:
    """The rows a CPU kernel is split by across threads (``blu/lower/cpu/rows.py``), or 0:
    only kernels that allow it and have the work to pay for it."""
    if node.kind != NodeKind.KERNEL or rows.work(node) < rows.MIN_SPLIT_WORK:
        return 0
    return rows.row_count(node)


def rows_suffix(node: Any) -> str:
    r = split_rows(node)
    if not r:
        return ""
    blk = rows.row_block(node, r)
    return f"\nrows {r}" + (f" block {blk}" if blk else "")


def inplace_suffix(node: Any) -> str:
    """The CPU kernel's outputs written through an input's pointer (``Node.inplace``), as a
    line of its cache text (empty when none: the keys of other kernels are unchanged)."""
    pairs = getattr(node, "inplace", ())
    if node.kind != NodeKind.KERNEL or not pairs:
        return ""
    return "\ninplace " + " ".join(f"out{o}=in{i}" for o, i in pairs)


def key_target(target: str) -> str:
    """The target string of cache keys: the host's CPU (``cache.host_target``) or the GPU's."""
    return target if is_gpu(target) else cache.host_target()


def kernel_key(node: Any, target: str) -> str:
    return cache.kernel_key(kernel_text(node, target), key_target(target))


def emit_node(node: Any, sym: str, target: str, variants: bool = True) -> str:
    """The MLIR text of a kernel or scatter node for ``target`` ("cpu" or "cuda:sm_XX");
    ``variants=False``: a CPU kernel without its in-place stores and row range (the GPU's host
    stand-in, called with the buffers only)."""
    if node.kind == NodeKind.SCATTER:
        return emit_scatter(node.eqns[0], sym, target)
    if is_gpu(target):
        return emit_gpu_kernel(node.layout, sym)
    if not variants:
        return emit_kernel(node.layout, sym)
    r = split_rows(node)
    return emit_kernel(node.layout, sym, dict(node.inplace), r, rows.row_block(node, r) if r else 0)


def cache_keys(plan: Plan, target: str) -> list[str]:
    """The cache keys of a plan's distinct kernels, in plan order."""
    keys = {kernel_key(n, target): None for n in plan.nodes if n.kind.compiled}
    return list(keys)


def program_text(name: str, target: str, plan: Plan) -> str:
    """The launch plan as MLIR comments, then one module per distinct kernel (named by its
    cache key's symbol)."""
    parts = [f"// launch plan of {name}" + (f" for {target}" if is_gpu(target) else "")]
    parts += ["//   " + ln for ln in str(plan).splitlines()]
    seen = set()
    for node in plan.nodes:
        if node.kind.compiled:
            sym = symbol(kernel_key(node, target))
            if sym not in seen:
                seen.add(sym)
                parts.append(emit_node(node, sym, target))
    return "\n".join(parts)
