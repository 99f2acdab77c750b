"""The GPU executable: a jaxpr simplified, its products made cuBLASLt-readable (``dots``),
partitioned into a launch plan, its fused kernels compiled to PTX/cubin (``codegen_gpu``,
``mlir_gpu``) and its buffers planned (``memory``), run on a device's stream.

    exe = GpuExecutable(jaxpr, name="step", donated_invars=(True, False))
    outs = exe(*device_arrays)       # DeviceArrays; nothing waits for the GPU
    exe.memory_analysis()

Running a plan: temporaries live at planned offsets of one arena taken from the caching
allocator; outputs planned into donated arguments take over those arguments' buffers (the
arguments are deleted, as in JAX); kernels are queued with ``cuLaunchKernel``, products with
cuBLASLt (``blu.cuda.cublaslt``), linear-algebra primitives with cuSOLVER
(``blu.cuda.solver``); other primitives without a GPU lowering run their numpy impl on a host
copy (a synchronization; ``BLU_LOG_COMPILES`` names them).

CUDA graphs (``BLU_CUDA_GRAPHS=1``, ``gpu_run.py``): from the second call on, a plan without host
fallbacks is captured once and replayed with one driver call. Off by default: the GPT-2 step is
GPU-bound and ran slower replayed than launched (BENCHMARKS.md).

On a ``blu.cuda.fake.FakeDevice`` (host memory) the same executable runs each fused kernel's
CPU build on the host buffers, after compiling (and caching) its GPU build: the CPU tests cover
the executable's logic, and running the GPU tests that way fills the kernel cache for the GPU
machine (``scripts/fill_gpu_cache.py``).
"""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core import trace as tracing
from blu.core.config import config
from blu.core.errors import BluError
from blu.core.jaxpr import Jaxpr, Literal
from blu.lower import cache, codegen_gpu, codegen_rows, mlir_gpu
from blu.lower.cpu import emit_node, node_text
from blu.lower.dots import canonicalize_dots
from blu.lower.fusion import KernelLayout
from blu.lower.memory import MemoryAnalysis, MemoryPlan, inplace_ok
from blu.lower.partition import Plan, partition
from blu.lower.scatter import scatter_launches
from blu.lower.simplify import simplify

log = logging.getLogger("blu.jit")


def prepare_gpu(jaxpr: Jaxpr, donated: Sequence[bool]) -> tuple[Jaxpr, Plan, MemoryPlan]:
    """Simplify, canonicalize products, partition, lay out kernels, plan memory (no MLIR)."""
    simple = canonicalize_dots(simplify(jaxpr))
    plan = partition(simple, gpu=True)
    for node in plan.nodes:
        if node.kind == "kernel":
            node.layout = KernelLayout(node.jaxpr)
            codegen_gpu.plan_nests(node.layout)
    memory = MemoryPlan(plan, tuple(donated), inplace_ok)
    return simple, plan, memory


def _precision(eqn: Any, default: str) -> str:
    p = eqn.params.get("precision")
    if isinstance(p, (tuple, list)):
        p = p[0]
    p = str(getattr(p, "name", p) or "default").lower()
    return default if p in ("default", "none") else p


class GpuExecutable:
    """A jaxpr compiled for a CUDA GPU (see the module docstring).

    Args:
        jaxpr: the program (no constvars).
        name: for logs and errors.
        donated_invars: per argument, whether the program may take over its buffer.
        target: ``cuda:sm_XX`` (default ``cuda:sm_90``).
        precision: the matrix-product precision of products with the default precision
            (default: ``blu.config.default_matmul_precision`` now).

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
    ):
        t0 = time.perf_counter()
        self.name, self.target, self.source_jaxpr = name, target, jaxpr
        self.donated = tuple(donated_invars or ()) or (False,) * len(jaxpr.invars)
        self.precision = precision or config.default_matmul_precision
        self.jaxpr, self.plan, self.memory = prepare_gpu(jaxpr, self.donated)
        t1 = time.perf_counter()
        self.modules: dict[int, mlir_gpu.GpuModule] = {}  # node index -> its module
        self.launches: dict[int, list[codegen_gpu.Launch]] = {}
        for k, node in enumerate(self.plan.nodes):
            if node.kind in ("kernel", "scatter"):
                mod = mlir_gpu.get_module(
                    gpu_text(node),
                    lambda sym, n=node: emit_node(n, sym, target),
                    node.label(),
                    target,
                )
                self.modules[k] = mod
                if node.kind == "kernel":
                    self.launches[k] = codegen_gpu.launches(node.layout, mod.name)
                else:
                    self.launches[k] = scatter_launches(node.eqns[0], mod.name)
        self.timing = {"plan_s": t1 - t0, "kernels_s": time.perf_counter() - t1}
        self.fallbacks = [n.label() for n in self.plan.nodes if n.kind == "fallback"]
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

    # ---- inspection ---------------------------------------------------------------------------

    def memory_analysis(self) -> MemoryAnalysis:
        return self.memory.analysis

    def as_text(self) -> str:
        """The launch plan (as comments) and the MLIR of every distinct kernel."""
        return program_text(self.name, self.target, self.plan)

    def ptx(self) -> dict[str, bytes]:
        """The PTX of every distinct kernel, by symbol."""
        return {m.name: m.ptx for m in self.modules.values()}

    # ---- running ------------------------------------------------------------------------------

    def __call__(self, *args: Any) -> list[Any]:
        from blu.lower.gpu_run import run

        return run(self, args)


class Lowered:
    """A jaxpr lowered for a CUDA target (``jit(f).lower(..., target="cuda:sm_90")``): the
    MLIR text without compiling; ``compile()`` compiles every kernel into the cache (no GPU
    needed) and returns the ``GpuExecutable``."""

    def __init__(self, jaxpr: Jaxpr, name: str, target: str, donated_invars: Sequence[bool]):
        mlir_gpu.parse_target(target)
        self.name, self.target, self.source_jaxpr = name, target, jaxpr
        self.donated = tuple(donated_invars or ()) or (False,) * len(jaxpr.invars)
        self.jaxpr, self.plan, self.memory = prepare_gpu(jaxpr, self.donated)

    def as_text(self) -> str:
        return program_text(self.name, self.target, self.plan)

    def cache_keys(self) -> list[str]:
        keys = {cache.kernel_key(gpu_text(n), self.target): None
                for n in self.plan.nodes if n.kind in ("kernel", "scatter")}  # fmt: skip
        return list(keys)

    def memory_analysis(self) -> MemoryAnalysis:
        return self.memory.analysis

    def compile(self) -> GpuExecutable:
        return GpuExecutable(self.source_jaxpr, self.name, self.donated, self.target)


def program_text(name: str, target: str, plan: Plan) -> str:
    """The launch plan as MLIR comments, then one module per distinct kernel (named by its
    cache key's symbol), computed without MLIR."""
    parts = [f"// launch plan of {name} for {target}"]
    parts += ["//   " + ln for ln in str(plan).splitlines()]
    seen = set()
    for node in plan.nodes:
        if node.kind in ("kernel", "scatter"):
            sym = mlir_gpu.symbol(cache.kernel_key(gpu_text(node), target))
            if sym not in seen:
                seen.add(sym)
                parts.append(emit_node(node, sym, target))
    return "\n".join(parts)


def gpu_text(node: Any) -> str:
    """The canonical text a GPU kernel's cache key is made of."""
    return node_text(node) + codegen_rows.key_suffix()


class GpuFallbackError(BluError):
    """A primitive without a GPU lowering failed in its host fallback."""


def host_kernel(node: Any) -> Any:
    """The CPU build of a kernel or scatter node (for fake devices): the same parameters as the
    GPU's (a kernel's layout has the GPU's split partials in its scratch, hence its own key)."""
    from blu.lower import mlir_cpu

    canon = node_text(node)
    if node.kind == "kernel":
        canon += "\n#gpu-scratch " + str(len(node.layout.scratch))
    return mlir_cpu.get_kernel(canon, lambda sym: emit_node(node, sym, "cpu"), node.label())


def call_host_kernel(kernel: Any, ptrs: Sequence[int]) -> None:
    arr = (ctypes.c_void_p * max(len(ptrs), 1))(*ptrs)
    base = ctypes.addressof(arr)
    packed = (ctypes.c_void_p * max(len(ptrs), 1))(*[base + 8 * i for i in range(len(ptrs))])
    kernel.fn(packed)


def literal_value(a: Literal) -> np.ndarray:
    return np.asarray(a.val, a.aval.dtype)
