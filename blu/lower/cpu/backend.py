"""The CPU backend: fused kernels compiled through MLIR and LLVM to the host's machine code,
products through BLAS on blu's threads, control flow compiled as loop nodes
(``executable.CpuExecutable``). Its passes: scan products hoisted out of loops and carry
accumulations summed after them (``plan/scan_hoist.py``, ``plan/scan_accumulate.py``), sums of
zero-padded parts as one copy (``concat.py``), independent products side by side (``pairs.py``)."""

from __future__ import annotations

from blu.core.jaxpr import Jaxpr
from blu.lower import library
from blu.lower.backend import Backend, Capabilities, register_backend
from blu.lower.cpu import attention as _attention  # noqa: F401  (registers its library calls)
from blu.lower.cpu import collectives as _collectives  # noqa: F401  (MPI into planned buffers)
from blu.lower.cpu import cumulative as _cumulative  # noqa: F401  (registers its library calls)
from blu.lower.cpu import kernels
from blu.lower.cpu import libraries as _libraries  # noqa: F401  (LAPACK and pocketfft calls)
from blu.lower.cpu import sorting as _sorting  # noqa: F401  (registers its library calls)
from blu.lower.cpu.concat import rewrite_concats
from blu.lower.cpu.executable import CpuExecutable, Lowered
from blu.lower.cpu.options import CpuOptions
from blu.lower.cpu.pairs import concurrent_products
from blu.lower.lowering import describe_generic
from blu.lower.mlir import cache
from blu.lower.plan.scan_accumulate import hoist_scan_accumulations
from blu.lower.plan.scan_hoist import hoist_scan_products


class CpuBackend(Backend):
    """Fused kernels compiled through MLIR to the host's machine code (``cpu.executable``)."""

    platform = "cpu"
    caps = Capabilities(compiles_loops=True, strided_views=True, views_feed_libraries=False)

    def options(self) -> CpuOptions:
        return CpuOptions()

    def late_passes(self, jaxpr: Jaxpr) -> Jaxpr:
        # the CPU compiles loops (loop nodes): products independent of the carry leave them,
        # and products a carry only accumulates are summed after them; sums of zero-padded
        # parts tiling their output (a concatenation) become plain copies
        return rewrite_concats(hoist_scan_products(hoist_scan_accumulations(jaxpr)))

    def concurrent_nodes(self, plan):
        return concurrent_products(plan)

    def key_target(self) -> str:
        return cache.host_target()

    def kernel_text(self, node) -> str:
        return kernels.kernel_text(node)

    def emit_node(self, node, sym: str) -> str:
        return kernels.emit_node(node, sym)

    def describe(self, prim) -> str:
        lw = prim.lowerings
        if library.registered(prim, self.platform) is not None:
            return "library"
        if "dot" in lw:
            return "dot (numpy matmul)"
        if "scatter" in lw:
            return "scatter kernel"
        if "loop" in lw:
            return "loop (compiled bodies)"
        return describe_generic(prim, strided_views=True, platform=self.platform)

    def compile(self, jaxpr, donated, options, name="jit", args=()):
        return CpuExecutable(jaxpr, name, donated, options)

    def lower(self, jaxpr, name, donated, options):
        return Lowered(jaxpr, name, self.target, donated, options)


register_backend("cpu", CpuBackend)
