"""The CPU's kernel texts: a node's cache text (its canonical text plus what changes the CPU
code: outputs written in place, the row split across threads, the vector width) and its MLIR
(``mlir/codegen.py``'s loops, or a scatter kernel's CPU function)."""

from __future__ import annotations

from typing import Any

from blu.lower.cpu import rows
from blu.lower.mlir.codegen import VECTOR_WIDTH, emit_kernel
from blu.lower.mlir.program import node_text
from blu.lower.mlir.scatter import emit_scatter
from blu.lower.plan.nodes import NodeKind

# the CPU kernels' vector width is part of their code (``codegen.VECTOR_WIDTH``), hence of the key
VECTOR_SUFFIX = f"\nvector {VECTOR_WIDTH}"


def kernel_text(node: Any) -> str:
    """The canonical text a node's CPU kernel is cached under."""
    return node_text(node) + inplace_suffix(node) + rows_suffix(node) + VECTOR_SUFFIX


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


def emit_node(node: Any, sym: str) -> str:
    """The MLIR text of a CPU kernel or scatter node, with its in-place stores and row range."""
    if node.kind == NodeKind.SCATTER:
        return emit_scatter(node.eqns[0], sym, "cpu")
    r = split_rows(node)
    return emit_kernel(node.layout, sym, dict(node.inplace), r, rows.row_block(node, r) if r else 0)
