"""The CUDA target's kernel texts: a node's cache text (its canonical text plus the row-group
form and the plan flags, which change its code: ``codegen_rows.key_suffix``), its MLIR
(``codegen.emit_gpu_kernel`` or a scatter kernel's ``gpu.module``), and the host build the
simulated device runs (``BLU_FAKE_GPU=1``: the shared CPU loops, with the GPU's parameters)."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

from blu.lower.cuda import codegen_rows
from blu.lower.cuda.codegen import emit_gpu_kernel
from blu.lower.cuda.compiler import parse_target
from blu.lower.mlir import llvm
from blu.lower.mlir.codegen import emit_kernel
from blu.lower.mlir.program import node_text
from blu.lower.mlir.scatter import emit_scatter
from blu.lower.plan.nodes import NodeKind


def kernel_text(node: Any) -> str:
    """The canonical text a node's GPU kernel is cached under."""
    return node_text(node) + codegen_rows.key_suffix()


def emit_node(node: Any, sym: str, target: str) -> str:
    """The MLIR text of a GPU kernel or scatter node for ``target`` (``cuda:sm_XX``)."""
    if node.kind == NodeKind.SCATTER:
        return emit_scatter(node.eqns[0], sym, target)
    return emit_gpu_kernel(node.layout, sym, parse_target(target))


def host_kernel(node: Any) -> Any:
    """The CPU build of a kernel or scatter node (for fake devices): the same parameters as the
    GPU's (a kernel's layout has the GPU's split partials in its scratch, hence its own key)."""
    canon = node_text(node)
    if node.kind == NodeKind.KERNEL:
        canon += "\n#gpu-scratch " + str(len(node.layout.scratch))

    def emit(sym: str) -> str:
        if node.kind == NodeKind.SCATTER:
            return emit_scatter(node.eqns[0], sym, "cpu")
        return emit_kernel(node.layout, sym)

    return llvm.get_kernel(canon, emit, node.label())


def call_host_kernel(kernel: Any, ptrs: Sequence[int]) -> None:
    arr = (ctypes.c_void_p * max(len(ptrs), 1))(*ptrs)
    base = ctypes.addressof(arr)
    packed = (ctypes.c_void_p * max(len(ptrs), 1))(*[base + 8 * i for i in range(len(ptrs))])
    kernel.fn(packed)
