"""What a traced CPU executable's steps did, and how close each came to the machine's bound: the
span of each step in a timeline trace (``blu.profiler.trace``) carries its work, as the GPU's
spans do (``blu.cuda.profile``), so ``scripts/summarize_trace.py`` prints each kernel's achieved
rate and its fraction of the peak.

- A product (``dot_general``, alone, fused with its epilogue, or two side by side: a pair) and a
  fused attention call carry their floating-point operations (2 per multiply-add; a causal
  attention counts the half its mask keeps) and compare with the *product peak*: one thread's
  rate on a 512x512x512 float32 (or float64) matrix product of the BLAS the executable calls,
  times the threads blu splits a step across. A tuned BLAS reaches ~90% of a core's FMA peak on
  that problem (100 GFLOP/s per core on the 2-core Zen 4 development VM, where the AVX-512 FMA
  peak is ~2 x 16 x 2 FLOP per cycle), so a fraction near 1 is the machine's bound.
- Every other step (fused kernels, copies, library calls without a FLOP count) carries its
  *minimal bytes* (each input read once, each output written once) and compares with the
  *copy bandwidth*: the bytes a 64 MiB copy reads and writes per second, split across the same
  threads (larger than the last-level cache on the CPUs blu meets: DRAM's bound; a kernel whose
  data stays in cache can exceed it).

Both peaks are measured once per process, when the first traced call is made (~0.1 s): they are
this machine's, whatever its vendor, cache sizes or core count, not constants of one CPU.
A pair's or a chain's steps run together, so each is one span (the work of all its steps).
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any

import numpy as np

from blu.core import trace as tracing
from blu.lower.cpu import blas
from blu.lower.cpu import threads as cpu_threads
from blu.lower.cpu.pairs import dot_flops
from blu.lower.plan.nodes import NodeKind
from blu.lower.tracing import step_args

__all__ = ["memory_counters", "node_work", "peaks", "spans", "step_spans"]

_GEMM_N = 512  # the product peak's problem: n x n x n
_COPY_BYTES = 64 << 20  # the copy bandwidth's array


def _best(fn: Any, repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


@functools.cache
def peaks(threads: int, dtype: str = "float32") -> tuple[float, float]:
    """``(FLOP/s, bytes/s)``: the product peak and the copy bandwidth of ``threads`` threads
    (module docstring), measured now and kept for the process."""
    dt = np.dtype(dtype)
    a = np.random.default_rng(0).standard_normal((_GEMM_N, _GEMM_N)).astype(dt)
    out = np.empty_like(a)
    blas.use_threads(1)  # as the executable's products run (``blas.py``)
    np.matmul(a, a, out=out)
    gemm = _best(lambda: np.matmul(a, a, out=out), 5)
    flops = 2.0 * _GEMM_N**3 / gemm * threads
    src = np.ones(_COPY_BYTES // 8, np.float64)
    dst = np.empty_like(src)
    cuts = cpu_threads.split(src.size, threads)

    def copy() -> None:
        cpu_threads.run_parts(lambda lo, hi: np.copyto(dst[lo:hi], src[lo:hi]), cuts)

    copy()
    moved = 2.0 * src.nbytes / _best(copy, 3)
    return flops, moved


def _attention_flops(eqn: Any) -> float:
    """A fused attention forward's (or backward's: 2.5 times) floating-point operations."""
    q, k, v = (a.aval.shape for a in eqn.invars[:3])
    b, t, n, h = q
    s, hv = k[1], v[3]
    f = 2.0 * b * n * t * s * (h + hv) * (0.5 if eqn.params.get("is_causal") else 1.0)
    return f * (2.5 if eqn.primitive.name.endswith("_bwd") else 1.0)


def node_work(node: Any) -> tuple[int, float]:
    """``(minimal bytes, FLOPs)`` of a plan node (FLOPs 0 where it is not a product or a fused
    attention call)."""
    seen: dict[int, Any] = {}
    for v in (*node.inputs, *node.outputs):
        seen.setdefault(id(v), v)
    nbytes = sum(v.aval.size * np.dtype(v.aval.dtype).itemsize for v in seen.values())
    flops = 0.0
    e = node.eqns[0] if node.eqns else None
    if node.kind == NodeKind.DOT:
        flops = dot_flops(e)
    elif node.kind == NodeKind.LIBRARY and e.primitive.name.startswith("dot_product_attention"):
        flops = _attention_flops(e)
    return int(nbytes), flops


def _span(nodes: list, threads: int, streamed: bool = False) -> tuple[str, dict]:
    """The name and args of one span covering ``nodes`` (one step, a pair or a chain);
    ``streamed``: a product a loop makes while it runs (its own step does nothing)."""
    out = nodes[-1].outputs[0].aval.str_short() if nodes[-1].outputs else ""
    if streamed:
        args = step_args(nodes[0])
        args["kind"] = "streamed"
        return f"{nodes[0].label()} -> {out} (made by the loop)", args
    if len(nodes) == 1:
        name = f"{nodes[0].label()} -> {out}"
    else:
        kind = "pair" if all(n.kind == NodeKind.DOT for n in nodes) else "chain"
        name = f"{kind}[{' + '.join(n.label() for n in nodes)}] -> {out}"
    args = step_args(nodes[0])
    if len(nodes) > 1:
        more = [step_args(n) for n in nodes[1:]]
        args["eqns"] = "\n".join([args["eqns"], *(m["eqns"] for m in more)])
        args["kind"] = "pair" if name.startswith("pair") else "chain"
    nbytes = flops = 0.0
    for n in nodes:
        b, f = node_work(n)
        nbytes, flops = nbytes + b, flops + f
    dtype = "float64" if any("f64" in n.outputs[0].aval.str_short() for n in nodes
                             if n.outputs) else "float32"  # fmt: skip
    peak_flops, peak_bytes = peaks(threads, dtype)
    args["bytes"] = str(int(nbytes))
    if flops:
        args["flops"] = str(int(flops))
        args["peak"] = f"{peak_flops / 1e12:.4g} TFLOP/s"
    else:
        args["peak"] = f"{peak_bytes / 1e9:.4g} GB/s"
    return name, args


def step_spans(exe: Any, threads: int, grouped: bool = True) -> dict[int, tuple[str, dict]]:
    """Per step position that starts a unit of the executable's run loop (a step, a pair of
    products, a chain; ``grouped=False``: each step alone, as ``BLU_DEBUG_NANS`` runs them), the
    ``(name, args)`` of its span."""
    spans, k, n = {}, 0, len(exe.runners)
    pairs, chains = (exe._pair_at, exe._chain_at) if grouped else ((), {})
    while k < n:
        end = k + 1 if k in pairs else chains[k][2] if k in chains else k
        streamed = grouped and getattr(exe.runners[k][1], "streamed", False)
        spans[k] = _span([exe.runners[i][2] for i in range(k, end + 1)], threads, streamed)
        k = end + 1
    return spans


def spans(exe: Any, threads: int, grouped: bool) -> dict[int, tuple[str, dict]]:
    """``step_spans`` of a ``CpuExecutable``, made when it is first traced and kept on it."""
    made = exe._trace_args = exe._trace_args or {}
    if grouped not in made:
        made[grouped] = step_spans(exe, threads, grouped)
    return made[grouped]


def memory_counters(exe: Any, tw: Any, env: list, start: bool) -> None:
    """Memory counters at the start and end of a traced call of ``exe`` (the planned
    temporaries and the bytes of the arguments and results held)."""
    held = sum(x.nbytes for x in env if isinstance(x, np.ndarray) and x.base is None)
    temps = exe.memory.arena_size if start else 0
    tw.counter(f"memory jit({exe.name})", {"temporaries": temps, "arrays": held},
               pid=tracing.EXECUTABLE)  # fmt: skip
