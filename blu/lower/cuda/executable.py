"""The GPU executable: a jaxpr prepared for a CUDA target (``plan.prepare``: its products made
cuBLASLt-readable, partitioned, its buffers planned), its fused kernels compiled to PTX/cubin
(``mlir.codegen_gpu``, ``mlir.mlir_gpu``), run on a device's stream (``gpu.run``: the step
runners of the shared steps).

    exe = GpuExecutable(jaxpr, name="step", donated_invars=(True, False))
    outs = exe(*device_arrays)       # DeviceArrays; nothing waits for the GPU
    exe.memory_analysis()

Running a plan: temporaries live at planned offsets of one arena taken from the caching
allocator; outputs planned into donated arguments take over those arguments' buffers (the
arguments are deleted, as in JAX); kernels are queued with ``cuLaunchKernel``, products with
cuBLASLt (``blu.cuda.cublaslt``), library nodes with their library call (linear algebra with
cuSOLVER, ``gpu.libraries``); other primitives without a GPU lowering run their numpy impl on a host
copy (a synchronization; ``BLU_LOG_COMPILES`` names them).

CUDA graphs (``BLU_CUDA_GRAPHS``, ``gpu/run.py``): from the second call on, a plan without host
fallbacks is captured once and replayed with one driver call; by default ("auto") for large
programs with small fresh outputs (a training step).

On a ``blu.cuda.fake.FakeDevice`` (host memory) the same executable runs each fused kernel's
CPU build on the host buffers, after compiling (and caching) its GPU build: the CPU tests cover
the executable's logic, and running the GPU tests that way fills the kernel cache for the GPU
machine (``scripts/fill_gpu_cache.py``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from blu.core import trace as tracing
from blu.core.config import config
from blu.core.jaxpr import Jaxpr
from blu.lower import library
from blu.lower.cuda import codegen as codegen_gpu
from blu.lower.cuda import compiler as mlir_gpu
from blu.lower.cuda.kernels import emit_node, host_kernel, kernel_text  # noqa: F401
from blu.lower.cuda.options import CudaOptions
from blu.lower.cuda.run import bound_for, run
from blu.lower.mlir.scatter import scatter_launches
from blu.lower.plan.nodes import NodeKind
from blu.lower.program import Executable, log
from blu.lower.program import Lowered as _Lowered


class GpuExecutable(Executable):
    """A jaxpr compiled for a CUDA GPU (see the module docstring).

    Args:
        jaxpr: the program (no constvars).
        name: for logs and errors.
        donated_invars: per argument, whether the program may take over its buffer.
        target: ``cuda:sm_XX`` (default ``cuda:sm_90``).
        precision: the matrix-product precision of products with the default precision
            (default: ``blu.config.default_matmul_precision`` now).
        options: the seam's ``Options`` (its precision wins over ``precision``).
        prepared: the ``prepare`` result, if already made.

    Raises:
        KernelCacheMiss: a kernel is not cached and MLIR is not installed.
    """

    def __init__(
        self,
        jaxpr: Jaxpr,
        name: str = "jit",
        donated_invars: Sequence[bool] | None = None,
        target: str = mlir_gpu.DEFAULT_TARGET,
        precision: str | None = None,
        options: Any = None,
        prepared: Any = None,
    ):
        t0 = time.perf_counter()
        mlir_gpu.parse_target(target)
        if options is None:
            options = CudaOptions.from_config(precision)
        super().__init__(jaxpr, name, target, donated_invars, options, prepared)
        self.precision = options.precision
        t1 = time.perf_counter()
        self.modules: dict[int, mlir_gpu.GpuModule] = {}  # node index -> its module
        self.launches: dict[int, list[codegen_gpu.Launch]] = {}
        self.library_modules: dict[int, list[mlir_gpu.GpuModule]] = {}  # blu's own library kernels
        self.loop_bodies: dict[int, list[GpuExecutable]] = {}  # node index -> its bodies
        for k, node in enumerate(self.plan.nodes):
            if node.kind.compiled:
                mod = mlir_gpu.get_module(
                    kernel_text(node),
                    lambda sym, n=node: emit_node(n, sym, target),
                    node.label(),
                    target,
                )
                self.modules[k] = mod
                if node.kind == NodeKind.KERNEL:
                    self.launches[k] = codegen_gpu.launches(
                        node.layout, mod.name, mlir_gpu.parse_target(target)
                    )
                else:
                    self.launches[k] = scatter_launches(node.eqns[0], mod.name)
            elif node.kind == NodeKind.LIBRARY:
                mods = library_modules(node.eqns[0], target)
                if mods:
                    self.library_modules[k] = mods
            elif node.kind == NodeKind.LOOP:  # control flow: each body an executable of its own
                self.loop_bodies[k] = [
                    GpuExecutable(j, f"{name}/{tag}", donated, target, options=options,
                                  prepared=prepared_body)
                    for tag, j, prepared_body, donated, _ in node.bodies
                ]  # fmt: skip
        self.timing = {"plan_s": t1 - t0, "kernels_s": time.perf_counter() - t1}
        self.fallbacks = [n.label() for n in self.plan.nodes if n.kind == NodeKind.FALLBACK]
        self.fallbacks += [f for bs in self.loop_bodies.values() for b in bs for f in b.fallbacks]
        self._bound: dict[Any, Any] = {}  # device -> per-device steps
        tracing.span_since(f"compile jit({name})", "compile", t0,
                           {"target": target, "nodes": len(self.plan.nodes),
                            "kernels": len(self.modules), **self.timing})  # fmt: skip
        if config.log_compiles:
            log.warning(
                "blu.jit(%s) for %s: %d nodes (%d kernels), planned in %.1f ms, kernels in %.1f "
                "ms; host fallbacks: %s; %s",
                name, target, len(self.plan.nodes), len(self.modules), self.timing["plan_s"] * 1e3,
                self.timing["kernels_s"] * 1e3, self.fallbacks or "none", self.memory.analysis,
            )  # fmt: skip

    def ptx(self) -> dict[str, bytes]:
        """The PTX of every distinct kernel, by symbol."""
        return {m.name: m.ptx for m in self.modules.values()}

    def __call__(self, *args: Any) -> list[Any]:
        return run(self, args)

    def runner(self, args: Any) -> Any:
        """What calls like this one run (``jit``'s fast path, ``dispatch.DeviceFastCall``): the
        executable bound to the device of ``args`` (a list of arguments -> the outputs)."""
        return bound_for(self, args)


def library_modules(eqn: Any, target: str) -> list[mlir_gpu.GpuModule]:
    """The kernel modules a library call of ``eqn`` launches (compiled or from the cache)."""
    lowering = library.lowering_for(eqn, target)
    if lowering is None or lowering.kernels is None:
        return []
    avals = [a.aval for a in eqn.invars]
    return [mlir_gpu.get_module(canonical, emit, label, target)
            for canonical, emit, label in lowering.kernels(avals, eqn.params, target)]  # fmt: skip


class Lowered(_Lowered):
    """A jaxpr lowered for a CUDA target (``jit(f).lower(..., target="cuda:sm_90")``): the
    MLIR text without compiling; ``compile()`` compiles every kernel into the cache (no GPU
    needed) and returns the ``GpuExecutable``."""

    def __init__(
        self,
        jaxpr: Jaxpr,
        name: str,
        target: str,
        donated_invars: Sequence[bool] | None,
        options: Any = None,
    ):
        mlir_gpu.parse_target(target)
        if options is None:
            options = CudaOptions.from_config()
        super().__init__(jaxpr, name, target, donated_invars, options)

    def compile(self) -> GpuExecutable:
        return GpuExecutable(self.source_jaxpr, self.name, self.donated, self.target,
                             options=self.options, prepared=self.prepared)  # fmt: skip
