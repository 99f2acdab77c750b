"""The CPU executable: a jaxpr simplified, partitioned into a launch plan, its fused kernels
compiled through MLIR (``mlir_cpu``), its buffers planned (``memory``), run on numpy arrays.

    exe = CpuExecutable(jaxpr, name="step", donated_invars=(True, False))
    outs = exe(*numpy_arrays)
    exe.memory_analysis()

Opt-in while it matures: ``BLU_JIT_BACKEND=mlir`` (see ``make_executable``).

Debugging: ``BLU_LOG_COMPILES=1`` logs every kernel compiled or loaded from the cache;
``BLU_DUMP_IR=dir`` writes each kernel's jaxpr and MLIR before and after the pass pipeline;
``BLU_DEBUG_NANS=1`` checks every node's floating-point outputs and raises at the first NaN,
naming the primitives and the user's source line.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core import trace as tracing
from blu.core.config import config
from blu.core.errors import BluError, BluValueError
from blu.core.jaxpr import Jaxpr, Literal, Var
from blu.lower import cache
from blu.lower.codegen import emit_kernel
from blu.lower.fusion import KernelLayout
from blu.lower.memory import MemoryAnalysis, MemoryPlan, inplace_ok
from blu.lower.partition import Plan, partition
from blu.lower.simplify import simplify
from blu.lower.tracing import step_args

log = logging.getLogger("blu.jit")


class BluFloatingPointError(BluError, FloatingPointError):
    """``BLU_DEBUG_NANS``: a jitted computation produced a NaN."""


def make_executable(jaxpr: Jaxpr, name: str = "jit", donated_invars: Sequence[bool] | None = None):
    """The executable ``jit`` runs: MLIR-compiled CPU code by default (``BLU_JIT_BACKEND=mlir``),
    or the numpy reference interpreter with ``BLU_JIT_BACKEND=numpy`` or where the MLIR
    bindings are not installed (e.g. the GPU test machine)."""
    if _backend() == "mlir":
        return CpuExecutable(jaxpr, name, donated_invars)
    from blu.lower.executable import NumpyExecutable

    return NumpyExecutable(jaxpr, name)


def _backend() -> str:
    choice = os.environ.get("BLU_JIT_BACKEND", "").lower()
    if choice in ("mlir", "numpy"):
        return choice
    if choice:
        raise BluValueError(f"BLU_JIT_BACKEND={choice!r}: expected 'mlir' or 'numpy'")
    return "mlir" if _mlir_available() else "numpy"


@functools.cache
def _mlir_available() -> bool:
    return importlib.util.find_spec("mlir") is not None


# ---- steps ---------------------------------------------------------------------------------------


class _Kernel:
    __slots__ = ("fn", "ins", "outs", "scratch", "ptrs", "packed", "node", "n")

    def __init__(self, fn, ins, outs, scratch, node):
        self.fn, self.ins, self.outs, self.scratch, self.node = fn, ins, outs, scratch, node
        self.n = len(ins) + len(outs) + len(scratch)
        self.ptrs = (ctypes.c_void_p * max(self.n, 1))()
        base = ctypes.addressof(self.ptrs)
        self.packed = (ctypes.c_void_p * max(self.n, 1))(*[base + 8 * i for i in range(self.n)])

    def __call__(self, env: list, arena: np.ndarray | None, shared: bool = True) -> None:
        # the pointer arrays are reused across calls; a concurrent call (shared=False) makes its own
        p, packed = self.ptrs, self.packed
        if not shared:
            p = (ctypes.c_void_p * max(self.n, 1))()
            base = ctypes.addressof(p)
            packed = (ctypes.c_void_p * max(self.n, 1))(*[base + 8 * i for i in range(self.n)])
        k = 0
        for s in self.ins:
            p[k] = env[s].ctypes.data
            k += 1
        for s in self.outs:
            p[k] = env[s].ctypes.data
            k += 1
        if self.scratch:
            base = arena.ctypes.data
            for off in self.scratch:
                p[k] = base + off
                k += 1
        self.fn(packed)


def _dot(eqn: Any, lhs: np.ndarray, rhs: np.ndarray, out: np.ndarray) -> None:
    """dot_general into ``out`` through one np.matmul (BLAS for floats), as its impl does."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lf = [i for i in range(lhs.ndim) if i not in lc and i not in lb]
    rf = [i for i in range(rhs.ndim) if i not in rc and i not in rb]
    size = lambda x, axes: int(np.prod([x.shape[a] for a in axes], dtype=np.int64))  # noqa: E731
    b, m, kk, n = size(lhs, lb), size(lhs, lf), size(lhs, lc), size(rhs, rf)
    comp = out.dtype
    if comp in (dtypes.bfloat16, dtypes.float16) or lhs.dtype != comp:
        comp = np.dtype(np.float64 if np.float64 in (lhs.dtype, out.dtype) else np.float32)
        if not (dtypes.is_float(lhs.dtype) or dtypes.is_float(out.dtype)):
            comp = np.promote_types(lhs.dtype, out.dtype)
    l3 = (
        np.transpose(lhs, tuple(lb) + tuple(lf) + tuple(lc))
        .reshape(b, m, kk)
        .astype(comp, copy=False)
    )
    r3 = (
        np.transpose(rhs, tuple(rb) + tuple(rc) + tuple(rf))
        .reshape(b, kk, n)
        .astype(comp, copy=False)
    )
    with np.errstate(over="ignore", invalid="ignore"):
        if comp == out.dtype:
            o3 = out.reshape(b, m, n)
            if b == 1:
                np.matmul(l3[0], r3[0], out=o3[0])
            else:
                np.matmul(l3, r3, out=o3)
        else:
            out.reshape(b, m, n)[...] = np.matmul(l3, r3).astype(out.dtype)


def _view(eqn: Any, x: np.ndarray) -> np.ndarray:
    p = eqn.params
    name = eqn.primitive.name
    if name == "reshape":
        return x.reshape(eqn.outvars[0].aval.shape)
    if name == "transpose":
        return np.transpose(x, p["permutation"])
    if name == "squeeze":
        return x.reshape(eqn.outvars[0].aval.shape)
    if name == "broadcast_in_dim":
        shape = p["shape"]
        expanded = [1] * len(shape)
        for src, dst in enumerate(p["broadcast_dimensions"]):
            expanded[dst] = x.shape[src]
        return np.broadcast_to(x.reshape(expanded), shape)
    if name == "slice":
        return x[
            tuple(
                slice(s, e, st)
                for s, e, st in zip(p["start_indices"], p["limit_indices"], p["strides"])
            )
        ]
    if name == "rev":
        return np.flip(x, p["dimensions"])
    raise AssertionError(name)


def node_text(node: Any) -> str:
    """The canonical text (cache key material) of a kernel or scatter node."""
    if node.kind == "scatter":
        e = node.eqns[0]
        return cache.canonical_text(Jaxpr([], e.invars, [e], e.outvars))
    return cache.canonical_text(node.jaxpr)


def emit_node(node: Any, sym: str, target: str) -> str:
    """The MLIR text of a kernel or scatter node for ``target`` ("cpu" or "cuda:sm_XX")."""
    if node.kind == "scatter":
        from blu.lower.scatter import emit_scatter

        return emit_scatter(node.eqns[0], sym, target)
    if target.startswith("cuda"):
        from blu.lower.codegen_gpu import emit_gpu_kernel

        return emit_gpu_kernel(node.layout, sym)
    return emit_kernel(node.layout, sym)


def prepare(jaxpr: Jaxpr, donated: Sequence[bool]) -> tuple[Jaxpr, Plan, MemoryPlan]:
    """Simplify, partition, lay out every kernel and plan memory (no MLIR needed)."""
    simple = simplify(jaxpr)
    plan = partition(simple)
    for node in plan.nodes:
        if node.kind == "kernel":
            node.layout = KernelLayout(node.jaxpr)
    memory = MemoryPlan(plan, tuple(donated), inplace_ok)
    return simple, plan, memory


class CpuExecutable:
    """A jaxpr compiled for the CPU (see the module docstring).

    Args:
        jaxpr: the program (no constvars; ``jit`` hoists them into arguments).
        name: for logs and errors.
        donated_invars: per argument, whether the program may write into its buffer.
    """

    def __init__(
        self, jaxpr: Jaxpr, name: str = "jit", donated_invars: Sequence[bool] | None = None
    ):
        t0 = time.perf_counter()
        self.name = name
        self.source_jaxpr = jaxpr
        self.donated = tuple(donated_invars or ()) or (False,) * len(jaxpr.invars)
        self.jaxpr, self.plan, self.memory = prepare(jaxpr, self.donated)
        kernels: dict[str, Any] = {}
        t1 = time.perf_counter()
        from blu.lower import mlir_cpu

        self.node_kernels: list[Any] = []  # per node: its compiled kernel (or None)
        for node in self.plan.nodes:
            k = None
            if node.kind in ("kernel", "scatter"):
                canon = node_text(node)
                k = kernels.get(canon)
                if k is None:
                    k = kernels[canon] = mlir_cpu.get_kernel(
                        canon, lambda sym, n=node: emit_node(n, sym, "cpu"), node.label()
                    )
            self.node_kernels.append(k)
        self.kernels = kernels
        self.timing = {"plan_s": t1 - t0, "kernels_s": time.perf_counter() - t1}
        self._build()
        self._arena: np.ndarray | None = None
        self._arena_lock = threading.Lock()
        self._trace_args: list[dict] | None = None  # per step, made when first traced
        tracing.span_since(f"compile jit({name})", "compile", t0,
                           {"target": "cpu", "nodes": len(self.plan.nodes),
                            "kernels": len(kernels), **self.timing})  # fmt: skip
        if config.log_compiles:
            n_kernels = sum(n.kind == "kernel" for n in self.plan.nodes)
            log.warning(
                "blu.jit(%s): %d nodes (%d kernels, %d distinct), planned in %.1f ms, kernels in "
                "%.1f ms; %s",
                name,
                len(self.plan.nodes),
                n_kernels,
                len(kernels),
                self.timing["plan_s"] * 1e3,
                self.timing["kernels_s"] * 1e3,
                self.memory.analysis,
            )

    # ---- building the steps -------------------------------------------------------------------

    def _build(self) -> None:
        j, mem = self.jaxpr, self.memory
        slot: dict[Var, int] = {}

        def s(v: Var) -> int:
            if v not in slot:
                slot[v] = len(slot)
            return slot[v]

        self.in_slots = [s(v) for v in j.invars]
        self.steps: list[tuple] = []
        for k, node in enumerate(self.plan.nodes):
            allocs = []  # (slot, how) for the node's outputs that own a buffer
            if node.kind != "fallback" and node.kind != "view":
                for v in node.outputs:
                    allocs.append((s(v), mem.place[mem.root[v]], v.aval))
            if node.kind in ("kernel", "scatter"):
                kern = self.node_kernels[k]
                reads = node.inputs if node.kind == "kernel" else node.eqns[0].invars
                ins = [s(v) for v in reads]
                step = _Kernel(kern.fn, ins, [s(v) for v in node.outputs],
                               mem.scratch.get(k, []), node)  # fmt: skip
                self.steps.append(("kernel", allocs, step, node))
            elif node.kind == "dot":
                e = node.eqns[0]
                ins = [s(a) if isinstance(a, Var) else a for a in e.invars]
                self.steps.append(("dot", allocs, (e, ins, s(e.outvars[0])), node))
            elif node.kind == "view":
                e = node.eqns[0]
                self.steps.append(("view", allocs, (e, s(e.invars[0]), s(e.outvars[0])), node))
            else:
                e = node.eqns[0]
                ins = [
                    ("lit", np.asarray(a.val, a.aval.dtype))
                    if isinstance(a, Literal)
                    else ("var", s(a))
                    for a in e.invars
                ]
                self.steps.append(("fallback", allocs, (e, ins, [s(v) for v in e.outvars]), node))
        self.out_spec = [
            ("lit", np.asarray(v.val, v.aval.dtype)) if isinstance(v, Literal) else ("var", s(v))
            for v in j.outvars
        ]
        self.n_slots = len(slot)
        self.slot = slot
        self.donated_slots = [s for s, d in zip(self.in_slots, self.donated) if d]

    # ---- running ------------------------------------------------------------------------------

    def _take_arena(self) -> tuple[np.ndarray, bool]:
        if self._arena_lock.acquire(blocking=False):
            if self._arena is None:
                self._arena = np.empty(max(self.memory.arena_size, 64), np.uint8)
            return self._arena, True
        return np.empty(max(self.memory.arena_size, 64), np.uint8), False  # a concurrent call

    def __call__(self, *args: Any) -> list[np.ndarray]:
        j = self.jaxpr
        env: list[Any] = [None] * self.n_slots
        for slot, v, x in zip(self.in_slots, j.invars, args, strict=True):
            x = np.asarray(x)
            if x.dtype != v.aval.dtype:
                x = x.astype(v.aval.dtype)
            env[slot] = x if x.flags.c_contiguous else np.ascontiguousarray(x)
        arena, owned = self._take_arena()
        tw = tracing.current()  # a timeline trace: one span per step, memory counters
        if tw is not None:
            self._trace_call(tw, env, start=True)
        try:
            for n_step, (kind, allocs, step, node) in enumerate(self.steps):
                t = time.perf_counter() if tw is not None else 0.0
                for slot, place, aval in allocs:
                    env[slot] = self._buffer(place, aval, arena, env, args)
                if kind == "kernel":
                    step(env, arena, owned)
                elif kind == "dot":
                    e, ins, out = step
                    vals = [
                        env[a] if isinstance(a, int) else np.asarray(a.val, a.aval.dtype)
                        for a in ins
                    ]
                    _dot(e, vals[0], vals[1], env[out])
                elif kind == "view":
                    e, i, o = step
                    env[o] = _view(e, env[i])
                else:
                    self._fallback(step, env, arena)
                if tw is not None:
                    tw.span(node.label(), "device", t, pid=tracing.EXECUTABLE,
                            args=self._trace_args[n_step])  # fmt: skip
                if config.debug_nans:
                    self._check_nans(node, env, step)
            if tw is not None:
                self._trace_call(tw, env, start=False)
            outs = []
            for kind, x in self.out_spec:
                if kind == "lit":
                    outs.append(x.copy())
                    continue
                y = env[x]
                if np.may_share_memory(y, arena):  # never hand out the arena
                    y = y.copy()
                outs.append(y)
            return outs
        finally:
            if owned:
                self._arena_lock.release()

    def _trace_call(self, tw: tracing.TraceWriter, env: list, start: bool) -> None:
        """Memory counters at the start and end of a traced call (the planned temporaries and
        the bytes of the arguments and results held)."""
        if self._trace_args is None:
            self._trace_args = [step_args(node) for *_, node in self.steps]
        held = sum(x.nbytes for x in env if isinstance(x, np.ndarray) and x.base is None)
        temps = self.memory.arena_size if start else 0
        tw.counter(f"memory jit({self.name})", {"temporaries": temps, "arrays": held},
                   pid=tracing.EXECUTABLE)  # fmt: skip

    def _buffer(
        self, place: tuple, aval: Any, arena: np.ndarray, env: list, args: tuple
    ) -> np.ndarray:
        kind = place[0]
        if kind == "arena":
            n = aval.size * aval.dtype.itemsize
            return arena[place[1] : place[1] + n].view(aval.dtype).reshape(aval.shape)
        if kind == "donated":
            x = env[self.in_slots[place[1]]]
            ok = (
                x.flags.writeable
                and x.flags.c_contiguous
                and x.nbytes == aval.size * aval.dtype.itemsize
            )
            ok = ok and not any(
                k != place[1] and np.may_share_memory(x, env[s])
                for k, s in enumerate(self.in_slots)
            )
            if ok:
                return x.reshape(-1).view(np.uint8).view(aval.dtype).reshape(aval.shape)
        return np.empty(aval.shape, aval.dtype)

    def _fallback(self, step: tuple, env: list, arena: np.ndarray) -> None:
        e, ins, outs = step
        vals = [x if kind == "lit" else env[x] for kind, x in ins]
        res = e.primitive.impl(*vals, **e.params)
        res = res if e.primitive.multiple_results else [res]
        for slot, v, r in zip(outs, e.outvars, res):
            r = np.asarray(r)
            if r.dtype != v.aval.dtype:
                r = r.astype(v.aval.dtype)
            if (
                not r.flags.c_contiguous
                or np.may_share_memory(r, arena)
                or any(np.may_share_memory(r, env[s]) for s in self.donated_slots)
            ):
                r = r.copy()  # kernels read dense row-major buffers; temporaries die early
            env[slot] = r

    def _check_nans(self, node: Any, env: list, step: Any) -> None:
        for v in node.outputs:
            x = env[self.slot[v]] if v in self.slot else None
            if x is None or not dtypes.is_float(v.aval.dtype):
                continue
            if np.isnan(x.astype(np.float32) if x.dtype.itemsize < 4 else x).any():
                srcs = sorted({e.source for e in node.eqns if e.source})
                raise BluFloatingPointError(
                    f"jit({self.name}): NaN in the output {v.aval.str_short()} of {node.label()}"
                    + (f"\n  from {'; '.join(srcs[:3])}" if srcs else "")
                )

    # ---- inspection ---------------------------------------------------------------------------

    def memory_analysis(self) -> MemoryAnalysis:
        return self.memory.analysis

    def as_text(self) -> str:
        """The launch plan (as comments) and the MLIR of every distinct kernel."""
        return program_text(self.name, self.plan)


def program_text(name: str, plan: Plan) -> str:
    """The launch plan as MLIR comments, then one module per distinct kernel (named by its
    cache key's symbol), computed without MLIR."""
    from blu.lower.mlir_cpu import symbol

    parts = [f"// launch plan of {name}"] + ["//   " + ln for ln in str(plan).splitlines()]
    seen = set()
    for node in plan.nodes:
        if node.kind in ("kernel", "scatter"):
            sym = symbol(cache.kernel_key(node_text(node), cache.host_target()))
            if sym not in seen:
                seen.add(sym)
                parts.append(emit_node(node, sym, "cpu"))
    return "\n".join(parts)


class Lowered:
    """A jaxpr lowered for a target, not compiled yet (``jit(f).lower(...)``'s result).

    ``as_text()`` is the MLIR (no ``mlir`` import needed); ``compile()`` gives the executable
    (kernels from the persistent cache, or compiled into it); ``memory_analysis()`` the plan's
    bytes; ``cache_keys()`` the keys of its kernels in ``BLU_CACHE_DIR``.
    """

    def __init__(self, jaxpr: Jaxpr, name: str = "jit", target: str = "cpu",
                 donated_invars: Sequence[bool] | None = None):  # fmt: skip
        if target != "cpu":
            from blu.core.errors import BluValueError

            raise BluValueError(
                f"blu.jit(...).lower(target={target!r}): only the 'cpu' target is built so far "
                "(the CUDA target, 'cuda:sm_90', comes with the GPU backend)"
            )
        self.name, self.target, self.source_jaxpr = name, target, jaxpr
        self.donated = tuple(donated_invars or ()) or (False,) * len(jaxpr.invars)
        self.jaxpr, self.plan, self.memory = prepare(jaxpr, self.donated)

    def as_text(self) -> str:
        return program_text(self.name, self.plan)

    def cache_keys(self) -> list[str]:
        keys = {cache.kernel_key(node_text(n), cache.host_target()): None
                for n in self.plan.nodes if n.kind in ("kernel", "scatter")}  # fmt: skip
        return list(keys)

    def memory_analysis(self) -> MemoryAnalysis:
        return self.memory.analysis

    def compile(self) -> CpuExecutable:
        return CpuExecutable(self.source_jaxpr, self.name, self.donated)
