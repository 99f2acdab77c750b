"""Memory-bound GPU kernels at GPT-2 124M's shapes: achieved bandwidth, before and after.

    PYTHONPATH=. python3 benchmarks/gpu_kernels.py [--rows 16384] [--iters 20] [--gens 1,2,3]
                                                   [--cases ln_fwd,ce_rows,...] [--json out.json]
    PYTHONPATH=. python3 benchmarks/gpu_kernels.py --fill   # compile only (a machine with MLIR)

Each case is a small ``blu.jit`` program on the GPU; each runs under the generations of blu's
GPU kernel emitter (``blu.config.gpu_kernels``, ``$BLU_GPU_KERNELS``: 1 = before issue #18's
work, 2 = loads first in unrolled strided loops, row totals in registers, 3 = 2 with the online
softmax normalizer in looped row groups: ``ce_rows`` and ``classifier`` read each row of
logits once for its max and sum of exponentials instead of twice). For every fused
kernel of the program (matrix products left out) it prints the mean time per call, its minimal
bytes (inputs read once, outputs written once, as the ``BLU_PROFILE`` table counts them), the
achieved GB/s and the fraction of the device-to-device copy bandwidth, which it measures first
(``cuMemcpyDtoDAsync`` of 1 GiB: bytes read + written per second). Kernel times come from
CUDA events around each launch (``blu.cuda.profile``), over ``--iters`` calls after warm-up.

Cases (N = ``--rows`` = 16 x 1024 tokens):

- ``ln_fwd``: ``nn.layer_norm`` of float32 (N, 768) with gain and bias, cast to bfloat16 (the
  GPT-2 block's pre-norm feeding a bf16 product);
- ``ln_bwd``: its vector-Jacobian product (the forward's kernel, then the backward row kernel
  and the gain/bias gradient reductions);
- ``ln_res_fwd`` / ``ln_res_bwd``: the residual add ``h = x + r`` (float32, kept) and the layer
  norm of ``h`` in bfloat16 (one row group: the add fused into the norm), and its VJP for the
  cotangents of both ``h`` and the bf16 output;
- ``gelu_fwd`` / ``gelu_bwd``: ``nn.gelu`` (tanh) of bfloat16 (N, 3072) and its VJP;
- ``rms_bwd``: LLaMA-1B's RMSNorm (float32 (N, 2048) with gain) VJP to a bfloat16 cotangent
  (its row group loops over rows keeping the gain gradient's column partials);
- ``swiglu_fwd`` / ``swiglu_bwd``: LLaMA-1B's ``silu(gate) * up`` of bfloat16 (N, 8192) and, as
  its rematerialized backward runs, the value again with both gradients (three outputs);
- ``ce_rows``: softmax cross-entropy over float32 logits (``--chunk`` x ``--vocab``, 1024 x
  50304): per row max, log-sum-exp and the picked logit, and ``dz = softmax - onehot`` in
  bfloat16: the fused classifier's chunk kernel (``blu/nn/classifier.py``) on its own;
- ``classifier``: ``nn.linear_cross_entropy`` value and gradient at (N, 768) x (50304, 768)
  bfloat16 (its chunk kernels between the cuBLASLt products);
- ``global_norm``: the global norm of 13 float32 (2048, N / 2) gradients (LLaMA-1B's MLP
  weights at N = 16,384), the sums of squares of one split reduction.

The kernels must be in the kernel cache (the GPU machine has no MLIR):
``python scripts/fill_gpu_cache.py`` compiles them (it calls :func:`fill_cache`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root

import blu  # noqa: E402
import blu.nn as nn  # noqa: E402
import blu.numpy as bnp  # noqa: E402
from blu import lax  # noqa: E402

CASES = ("ln_fwd", "ln_bwd", "ln_res_fwd", "ln_res_bwd", "rms_bwd", "gelu_fwd", "gelu_bwd",
         "swiglu_fwd", "swiglu_bwd", "ce_rows", "classifier", "global_norm")  # fmt: skip
NORM_ARRAYS = 13  # global_norm: LLaMA-1B's 16 layers' MLP gradients fuse 13 at a time
GENS = (1, 2, 3)  # the emitter generations (``blu.lower.cuda.codegen_strided.generation``)


def _bf16() -> Any:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def _ce_rows(z: Any, labels: Any) -> tuple[Any, Any]:
    """Softmax cross-entropy of rows of logits: the summed loss and ``softmax - onehot`` (bf16),
    written as the fused classifier's chunk (``classifier.chunk_loss`` / ``chunk_grads``)."""
    m = lax.stop_gradient(bnp.max(z, axis=1, keepdims=True))
    shifted = z - m
    e = bnp.exp(shifted)
    s = bnp.sum(e, axis=1, keepdims=True)
    hit = bnp.expand_dims(labels, 1) == lax.iota(labels.dtype, z.shape, 1)
    # the picked logit from the raw row (joins the max's pass), then shifted: the same value
    picked = bnp.sum(bnp.where(hit, z, bnp.zeros_like(z)), axis=1) - m[:, 0]
    loss = bnp.sum(bnp.log(s[:, 0]) - picked)
    dz = (e * (1 / s) - hit.astype(z.dtype)) * np.float32(1.0 / z.shape[0])
    return loss, dz.astype(_bf16())


def programs(rows: int, chunk: int, vocab: int) -> dict[str, tuple[Callable, list]]:
    """Each case's function and its arguments' ``(shape, dtype)``."""
    f32, bf16, i32 = np.dtype(np.float32), _bf16(), np.dtype(np.int32)
    C, H, D, F = 768, 3072, 2048, 8192  # GPT-2's width and MLP, LLaMA-1B's width and SwiGLU

    def ln(x, g, b):
        return nn.layer_norm(x, g, b)

    def ln_fwd(x, g, b):
        return ln(x, g, b).astype(bf16)

    def ln_bwd(x, g, b, dy):
        return blu.vjp(ln, x, g, b)[1](dy)

    def ln_res_fwd(x, r, g, b):  # the block's residual add, then the next pre-norm
        h = x + r
        return h, ln(h, g, b).astype(bf16)

    def ln_res_bwd(x, r, g, b, dy, dh):
        return blu.vjp(ln_res_fwd, x, r, g, b)[1]((dh, dy))

    def gelu_fwd(x):
        return nn.gelu(x)

    def gelu_bwd(x, dy):
        return blu.vjp(nn.gelu, x)[1](dy)[0]

    def rms_bwd(x, g, dy):
        return blu.vjp(nn.rms_norm, x, g)[1](dy.astype(f32))

    def swiglu_fwd(g, u):
        return nn.silu(g) * u

    def swiglu_bwd(g, u, dh):
        h, vjp = blu.vjp(swiglu_fwd, g, u)
        return (h, *vjp(dh))

    def classifier(x, w, labels):
        return blu.value_and_grad(nn.linear_cross_entropy, argnums=(0, 1))(x, w, labels)

    def global_norm(*gs):
        return bnp.sqrt(sum(bnp.sum(g * g) for g in gs))

    return {
        "ln_fwd": (ln_fwd, [((rows, C), f32), ((C,), f32), ((C,), f32)]),
        "ln_bwd": (ln_bwd, [((rows, C), f32), ((C,), f32), ((C,), f32), ((rows, C), f32)]),
        "ln_res_fwd": (ln_res_fwd, [((rows, C), f32), ((rows, C), f32), ((C,), f32), ((C,), f32)]),
        "ln_res_bwd": (
            ln_res_bwd,
            [
                ((rows, C), f32),
                ((rows, C), f32),
                ((C,), f32),
                ((C,), f32),
                ((rows, C), bf16),
                ((rows, C), f32),
            ],
        ),
        "gelu_fwd": (gelu_fwd, [((rows, H), bf16)]),
        "gelu_bwd": (gelu_bwd, [((rows, H), bf16), ((rows, H), bf16)]),
        "rms_bwd": (rms_bwd, [((rows, D), f32), ((D,), f32), ((rows, D), bf16)]),
        "swiglu_fwd": (swiglu_fwd, [((rows, F), bf16)] * 2),
        "swiglu_bwd": (swiglu_bwd, [((rows, F), bf16)] * 3),
        "ce_rows": (_ce_rows, [((chunk, vocab), f32), ((chunk,), i32)]),
        "classifier": (classifier, [((rows, C), bf16), ((vocab, C), bf16), ((rows,), i32)]),
        "global_norm": (global_norm, [((D, rows // 2), f32)] * NORM_ARRAYS),
    }


def _inputs(specs: list, vocab: int, rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for shape, dt in specs:
        if dt == np.int32:
            out.append(rng.integers(0, vocab, shape, dtype=np.int32))
        else:
            out.append((rng.standard_normal(shape, dtype=np.float32) * 0.5).astype(dt))
    return out


def fill_cache(rows: int = 16384, chunk: int = 1024, vocab: int = 50304,
               target: str = "cuda:sm_90", cases: tuple[str, ...] = CASES) -> None:  # fmt: skip
    """Compile every case under every emitter generation for ``target`` into the kernel cache
    (``BLU_CACHE_DIR``)."""
    progs = programs(rows, chunk, vocab)
    for gen in GENS:
        with blu.config.override(gpu_kernels=gen):
            for name in cases:
                fn, specs = progs[name]
                t = time.perf_counter()
                args = [blu.ShapeDtypeStruct(s, d) for s, d in specs]
                blu.jit(fn).lower(*args, target=target).compile()
                print(f"[gpu_kernels] {name} gen {gen}: compiled for {target} "
                      f"({time.perf_counter() - t:.0f} s)", flush=True)  # fmt: skip


def copy_bandwidth(nbytes: int = 1 << 30, iters: int = 20) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + bytes written per second)."""
    import blu.cuda as bc
    from blu.cuda.array import DeviceArray

    dev = bc.default_device()
    a = DeviceArray.empty((nbytes,), np.uint8, dev)
    b = DeviceArray.empty((nbytes,), np.uint8, dev)
    dev.copy_d2d(b.ptr, a.ptr, nbytes)
    dev.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        dev.copy_d2d(b.ptr, a.ptr, nbytes)
    dev.synchronize()
    return 2 * nbytes * iters / (time.perf_counter() - t) / 1e9


def run_case(name: str, fn: Callable, host_args: list, gen: int, iters: int) -> dict[str, Any]:
    """Time one case under emitter generation ``gen``: per-kernel rows and the call time."""
    import blu.cuda as bc
    from blu.cuda.profile import profiler

    dev_args = [bc.device_put(a) for a in host_args]
    with blu.config.override(gpu_kernels=gen):
        f = blu.jit(fn)  # a fresh function: its own executable for this generation
        for _ in range(3):
            blu.block_until_ready(f(*dev_args))
        bc.synchronize()
        t = time.perf_counter()
        for _ in range(iters):
            out = f(*dev_args)
        blu.block_until_ready(out)
        call_us = (time.perf_counter() - t) / iters * 1e6
        was = profiler.enabled
        profiler.reset()
        profiler.enabled = True
        try:
            for _ in range(iters):
                out = f(*dev_args)
            blu.block_until_ready(out)
            rows = [r for r in profiler.summary() if not r["name"].startswith("cublasLt")]
        finally:
            profiler.enabled = was
            profiler.reset()
    kernels = [{"name": r["name"], "calls": r["calls"] // iters, "mean_us": r["mean_us"],
                "mb": r["mb"], "gb_per_s": r["gb_per_s"]} for r in rows]  # fmt: skip
    return {"case": name, "gen": gen, "call_us": call_us, "kernels": kernels}


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def report(results: list[dict], copy_gbps: float) -> str:
    lines = [f"device-to-device copy: {copy_gbps:.0f} GB/s (read + write); fractions below are "
             f"of this", ""]  # fmt: skip
    head = (f"{'case':<10} {'gen':>3} {'kernel':<60} {'us':>9} {'min MB':>8} {'GB/s':>7} "
            f"{'of copy':>7}")  # fmt: skip
    lines += [head, "-" * len(head)]
    for r in results:
        k_us = k_mb = 0.0
        for k in r["kernels"]:
            us, mb = k["mean_us"] * k["calls"], k["mb"] * k["calls"]
            k_us, k_mb = k_us + us, k_mb + mb
            lines.append(f"{r['case']:<10} {r['gen']:>3} {_short(k['name']):<60} {us:>9.1f} "
                         f"{mb:>8.1f} {k['gb_per_s']:>7.0f} "
                         f"{k['gb_per_s'] / copy_gbps:>7.0%}")  # fmt: skip
        gbps = k_mb / k_us * 1e3 if k_us else 0.0  # MB per us = 1000 GB/s
        total = f"= all kernels (call: {r['call_us']:.1f} us)"
        lines.append(f"{r['case']:<10} {r['gen']:>3} {total:<60} {k_us:>9.1f} {k_mb:>8.1f} "
                     f"{gbps:>7.0f} {gbps / copy_gbps:>7.0%}")  # fmt: skip
    lines.append("")
    for case in dict.fromkeys(r["case"] for r in results):  # each generation against the first
        us = {r["gen"]: sum(k["mean_us"] * k["calls"] for k in r["kernels"])
              for r in results if r["case"] == case}  # fmt: skip
        gens = sorted(g for g, t in us.items() if t)
        for g in gens[1:]:
            t1, t2 = us[gens[0]], us[g]
            lines.append(f"{case}: kernels gen {gens[0]} -> {g}: {t1:.1f} -> {t2:.1f} us "
                         f"({t1 / t2:.2f}x)")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=16384, help="tokens (16 x 1024)")
    ap.add_argument("--chunk", type=int, default=1024, help="ce_rows: rows of logits")
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--gens", default="1,2,3", help="emitter generations to time (1,2,3)")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--fill", action="store_true", help="only compile the kernels (needs MLIR)")
    a = ap.parse_args(argv)
    cases = tuple(c for c in a.cases.split(",") if c)
    bad = [c for c in cases if c not in CASES]
    if bad:
        ap.error(f"unknown case(s) {bad}; choose from {CASES}")
    if a.fill:
        fill_cache(a.rows, a.chunk, a.vocab, cases=cases)
        return 0
    import blu.cuda as bc

    if not bc.is_available():
        print("no GPU: run this on the GPU machine (or --fill to compile the kernels)")
        return 2
    copy_gbps = copy_bandwidth()
    progs = programs(a.rows, a.chunk, a.vocab)
    rng = np.random.default_rng(0)
    results = []
    for name in cases:
        fn, specs = progs[name]
        host = _inputs(specs, a.vocab, rng)
        for gen in (int(g) for g in a.gens.split(",")):
            try:
                results.append(run_case(name, fn, host, gen, a.iters))
            except Exception as e:  # noqa: BLE001 - one failing case leaves the others' rows
                print(f"{name} gen {gen}: failed: {type(e).__name__}: {e}", flush=True)
    print(report(results, copy_gbps))
    if a.json:
        Path(a.json).write_text(json.dumps({"copy_gb_per_s": copy_gbps, "results": results},
                                           indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
