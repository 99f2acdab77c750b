"""The CUDA backend: fused kernels compiled to PTX/cubin, products through cuBLASLt, library
calls (cuDNN attention, cuSOLVER, cuBLASLt epilogues) on a device's stream, the whole program
replayed as a CUDA graph (``executable.GpuExecutable``, ``run.py``). Its passes: packed
attention and cuBLASLt epilogues before simplification (``packed_attention.py``,
``epilogues.py``), products canonicalized for cuBLASLt after it (``dots.py``), split reductions
planned per kernel (``codegen.plan_nests``)."""

from __future__ import annotations

from blu.core.config import config
from blu.core.jaxpr import Jaxpr
from blu.lower import library
from blu.lower.backend import Backend, Capabilities, _donated, register_backend
from blu.lower.cuda import attention as _attention  # noqa: F401  (registers its library calls)
from blu.lower.cuda import collectives as _collectives  # noqa: F401  (NCCL on the stream)
from blu.lower.cuda import convolution as _convolution  # noqa: F401  (registers cuDNN's convs)
from blu.lower.cuda import cumulative as _cumulative  # noqa: F401  (registers its kernels)
from blu.lower.cuda import kernels, loops
from blu.lower.cuda import libraries as _libraries  # noqa: F401  (registers cuSOLVER's calls)
from blu.lower.cuda import sorting as _sorting  # noqa: F401  (registers its kernels)
from blu.lower.cuda.codegen import plan_nests
from blu.lower.cuda.complex_dots import split_complex_dots
from blu.lower.cuda.conv_layouts import native_conv_layouts
from blu.lower.cuda.dots import canonicalize_dots, library_dot
from blu.lower.cuda.epilogues import fuse_epilogues
from blu.lower.cuda.executable import GpuExecutable, Lowered
from blu.lower.cuda.memory_checks import check_device_memory
from blu.lower.cuda.options import CudaOptions
from blu.lower.cuda.packed_attention import pack_attention
from blu.lower.lowering import describe_generic
from blu.lower.plan.scan_unroll import unroll_scans
from blu.lower.target import CUDA_DEFAULT


class CudaBackend(Backend):
    """Fused kernels compiled to PTX/cubin, products through cuBLASLt, run on a device's stream
    (``cuda.executable``)."""

    platform = "cuda"
    # a launch takes every buffer of its kernel as an 8-byte parameter, at most 4352 bytes
    # (sm_90 below PTX 8.1): 544 buffers, kept below with a margin
    caps = Capabilities(compiles_loops=True, strided_views=False, views_feed_libraries=True,
                        kernel_buffers=512)  # fmt: skip

    def __init__(self, target: str = CUDA_DEFAULT):
        super().__init__(target)

    def options(self) -> CudaOptions:
        return CudaOptions.from_config()

    def prepare(self, jaxpr, donated, options=None):
        """The plan, made under ``options``' matrix-product precision (the executable's): a
        library call that reads it (a float32 convolution's TF32 engines, their workspace)
        plans what the call then runs (``LibraryLowering.precision``)."""
        if options is None or getattr(options, "precision", None) is None:
            return super().prepare(jaxpr, donated, options)
        with config.override(default_matmul_precision=options.precision):
            return super().prepare(jaxpr, donated, options)

    def early_passes(self, jaxpr: Jaxpr) -> Jaxpr:
        # before simplify inlines the GELU's custom_jvp calls, which name them; the epilogues
        # after the packing, which leaves the QKV sum read by library calls only
        # short scans first (a model scanned over its blocks): the rewrites then see each
        # block's forward and backward in one program
        # convolutions in layouts cuDNN takes (transposed filters) before anything fuses
        j = native_conv_layouts(unroll_scans(jaxpr, int(config.unroll_scans)))
        return fuse_epilogues(pack_attention(j))

    def late_passes(self, jaxpr: Jaxpr) -> Jaxpr:
        # complex products as real ones first: cuBLASLt then reads every product
        return canonicalize_dots(split_complex_dots(jaxpr))

    def prepare_loop(self, node) -> None:
        # each body prepared as a program of its own; its buffers become the node's workspace
        loops.prepare_loop(node, self.prepare)

    def runs_dot(self, eqn) -> bool:
        return library_dot(eqn)

    def lay_out_kernel(self, layout) -> None:
        plan_nests(layout)  # the GPU's split reductions add scratch to the layout

    def heading(self) -> str:
        return f" for {self.target}"

    def kernel_text(self, node) -> str:
        return kernels.kernel_text(node)

    def emit_node(self, node, sym: str) -> str:
        return kernels.emit_node(node, sym, self.target)

    def describe(self, prim) -> str:
        lw = prim.lowerings
        if library.registered(prim, self.platform) is not None:
            return "library"
        if "dot" in lw:
            return "dot (cuBLASLt)"
        if "scatter" in lw:
            return "scatter kernel"
        if "loop" in lw:
            return "loop (compiled bodies)"
        return describe_generic(prim, strided_views=False, platform=self.platform)

    def compile(self, jaxpr, donated, options, name="jit", args=()):
        """The executable; with the call's ``args`` (device arrays), the memory plan is first
        checked against what their device can still give
        (``memory_checks.check_device_memory``), so a program that cannot fit raises its
        out-of-memory report before any kernel is compiled or looked up."""
        prepared = None
        if any(getattr(a, "_blu_device_array", False) for a in args):
            prepared = self.prepare(jaxpr, donated, options)
            check_device_memory(name, prepared, _donated(jaxpr, donated), args)
        return GpuExecutable(jaxpr, name, donated, self.target, options=options,
                             prepared=prepared)  # fmt: skip

    def lower(self, jaxpr, name, donated, options):
        return Lowered(jaxpr, name, self.target, donated, options)


register_backend("cuda", CudaBackend)
