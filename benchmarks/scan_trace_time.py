"""Trace and jit time of a GPT-2 style stack: ``scan`` over stacked layers vs a Python loop.

A ``scan`` traces its body once, so staging the model costs the same for 12 or 48 layers; an
unrolled Python loop stages every layer again. This script measures, for each depth and both
styles, for the forward loss and for ``value_and_grad`` of it (a training step's derivative):

- trace: ``jit(f).lower(...)`` (Python tracing to a jaxpr, including the transforms);
- first call: trace + compile + one run (what a user waits for before the first step);
- run: a later call (the compiled program alone), to separate compile from run time;
- eqns: the staged program's size (equations, counting those inside scan bodies), which
  does not depend on the machine's load.

Usage: ``python benchmarks/scan_trace_time.py [--depths 12 48] [--repeat 3]``. Results are
recorded in BENCHMARKS.md ("Trace and jit time: scan vs unrolled").
"""

from __future__ import annotations

import argparse
import gc
import platform
import time

import numpy as np

import blu
import blu.numpy as bnp
from blu import lax
from blu.core import pytree
from blu.core.jaxpr import Jaxpr

# a small GPT-2 block: the staging cost depends on the number of ops, not on their size
D, HEADS, T, B = 64, 4, 16, 2


def layer_norm(x, g, b, eps=1e-5):
    mu = bnp.mean(x, axis=-1, keepdims=True)
    var = bnp.mean((x - mu) * (x - mu), axis=-1, keepdims=True)
    return (x - mu) / bnp.sqrt(var + eps) * g + b


def gelu(x):
    return 0.5 * x * (1.0 + bnp.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def attention(x, p):
    b, t, d = x.shape
    hd = d // HEADS
    qkv = bnp.matmul(x, p["w_qkv"]) + p["b_qkv"]
    q, k, v = (
        bnp.swapaxes(bnp.reshape(qkv[..., i * d : (i + 1) * d], (b, t, HEADS, hd)), 1, 2)
        for i in range(3)
    )
    scores = bnp.matmul(q, bnp.swapaxes(k, -1, -2)) / float(np.sqrt(hd))
    mask = np.tril(np.ones((t, t), bool))
    scores = bnp.where(mask, scores, -1e9)
    scores = scores - bnp.max(scores, axis=-1, keepdims=True)
    w = bnp.exp(scores)
    w = w / bnp.sum(w, axis=-1, keepdims=True)
    out = bnp.reshape(bnp.swapaxes(bnp.matmul(w, v), 1, 2), (b, t, d))
    return bnp.matmul(out, p["w_proj"]) + p["b_proj"]


def block(x, p):
    x = x + attention(layer_norm(x, p["ln1_g"], p["ln1_b"]), p)
    h = gelu(bnp.matmul(layer_norm(x, p["ln2_g"], p["ln2_b"]), p["w_fc"]) + p["b_fc"])
    return x + bnp.matmul(h, p["w_out"]) + p["b_out"]


def init_layer(rng):
    f32 = np.float32
    n = lambda *s: (rng.standard_normal(s) * 0.02).astype(f32)
    return {
        "ln1_g": np.ones(D, f32), "ln1_b": np.zeros(D, f32),
        "w_qkv": n(D, 3 * D), "b_qkv": np.zeros(3 * D, f32),
        "w_proj": n(D, D), "b_proj": np.zeros(D, f32),
        "ln2_g": np.ones(D, f32), "ln2_b": np.zeros(D, f32),
        "w_fc": n(D, 4 * D), "b_fc": np.zeros(4 * D, f32),
        "w_out": n(4 * D, D), "b_out": np.zeros(D, f32),
    }  # fmt: skip


def loss_scan(stacked, x):
    h, _ = lax.scan(lambda h, p: (block(h, p), None), x, stacked)
    return bnp.mean(h * h)


def loss_unrolled(layers, x):
    h = x
    for p in layers:
        h = block(h, p)
    return bnp.mean(h * h)


def count_eqns(jaxpr) -> int:
    """Equations of a jaxpr, counting those inside sub-jaxprs (scan bodies, ...)."""
    n = 0
    for e in jaxpr.eqns:
        n += 1
        for v in e.params.values():
            for sub in v if isinstance(v, tuple) else (v,):
                if isinstance(sub, Jaxpr):
                    n += count_eqns(sub)
    return n


def measure(fn, args, repeat):
    """Best of ``repeat`` (seconds) for trace, first call and a later call; GC paused."""
    trace, first, run = [], [], []
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeat):
            _measure_once(fn, args, trace, first, run)
    finally:
        gc.enable()
    return min(trace), min(first), min(run)


def _measure_once(fn, args, trace, first, run):
    t0 = time.perf_counter()
    blu.jit(fn).lower(*args)
    trace.append(time.perf_counter() - t0)
    jitted = blu.jit(fn)
    t0 = time.perf_counter()
    pytree.tree_map(np.asarray, jitted(*args))
    first.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    pytree.tree_map(np.asarray, jitted(*args))
    run.append(time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[12, 48])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, T, D)).astype(np.float32)
    print(
        f"GPT-2 style block d={D} heads={HEADS}, batch {B} x {T} tokens, float32; "
        f"blu {blu.__version__}, Python {platform.python_version()}, numpy {np.__version__}"
    )
    print(f"{'what':<26}{'depth':>6}{'eqns':>8}{'trace s':>10}{'first call s':>14}{'run s':>9}")
    warm = [init_layer(rng) for _ in range(2)]  # warm up (imports, first-use caches)
    measure(blu.value_and_grad(loss_scan), (pytree.tree_map(lambda *a: np.stack(a), *warm), x), 1)
    measure(blu.value_and_grad(loss_unrolled), (warm, x), 1)
    for depth in args.depths:
        layers = [init_layer(rng) for _ in range(depth)]
        stacked = pytree.tree_map(lambda *a: np.stack(a), *layers)
        # the two styles compute the same thing
        a, b = float(blu.jit(loss_scan)(stacked, x)), float(blu.jit(loss_unrolled)(layers, x))
        assert abs(a - b) <= 1e-5 * abs(b), (a, b)
        for name, fn, params in (
            ("scan: loss", loss_scan, stacked),
            ("unrolled: loss", loss_unrolled, layers),
            ("scan: value_and_grad", blu.value_and_grad(loss_scan), stacked),
            ("unrolled: value_and_grad", blu.value_and_grad(loss_unrolled), layers),
        ):
            tr, first, run = measure(fn, (params, x), args.repeat)
            n_eqns = count_eqns(blu.jit(fn).lower(params, x).jaxpr.jaxpr)
            print(
                f"{name:<26}{depth:>6}{n_eqns:>8}{tr:>10.3f}{first:>14.3f}{run:>9.3f}", flush=True
            )


if __name__ == "__main__":
    main()
