"""A KV-cache update on the CPU: ``dynamic_update_slice`` at a traced position, compiled as an
index rule (``blu/lower/mlir/rules_dynamic.py``) or, with ``--host``, run as the host fallback
it used to be (its numpy impl between the kernels).

    python benchmarks/kv_cache_update.py                  # compiled
    python benchmarks/kv_cache_update.py --host           # the old host fallback, to compare
    python benchmarks/kv_cache_update.py --heads 12 --length 1024 --dim 64 --reps 20

Two programs, both jitted, timed call by call (best and median of ``--reps`` after a warm-up):

- ``fill``: a 128-step ``fori_loop`` that writes one new key per step into a cache of shape
  ``(heads, length, dim)`` (the new key read from an input with ``dynamic_index_in_dim`` and
  scaled, so the loop body is a fused kernel around the update); ms per call of the whole loop.
- ``step``: one decode step per call, the cache donated (the update is written over it in
  place), the position a traced int32; ms per call.

CPU numbers only: this measures nothing about GPUs.

Seen on the 2-core development VM (2026-12-04, best of 20, shared machine): a (2, 1024, 64)
cache: fill 3.0 ms compiled against 9.6 ms with ``--host``, step 0.041 against 0.080 ms; the
default (12, 1024, 64) cache (3 MiB): step 0.08 against 0.12 ms, but fill 128 ms against 37 ms.
In a loop the carry lives in two buffers that swap (``cpu/control_flow.py``), so every step
rewrites the whole cache out of place; past the caches that runs at memory speed, slower than
numpy's copy (non-temporal stores) plus a window write. Writing only the window needs the loop
carry updated in place (not done yet).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import blu  # noqa: E402
import blu.lax as lax  # noqa: E402

STEPS = 128


def use_host_fallbacks() -> None:
    """Take the index rules off the three primitives, so jit runs them on the host again."""
    from blu.lax.slicing import dynamic_slice_p, dynamic_update_slice_p
    from blu.lax.sorting import take_along_axis_p
    from blu.lower.slots import host_fallback

    for p in (dynamic_slice_p, dynamic_update_slice_p, take_along_axis_p):
        p.lowerings.pop("index", None)
    host_fallback("benchmark --host", dynamic_slice_p, dynamic_update_slice_p, take_along_axis_p)


def fill(cache, new):
    """Write ``new[t] * 0.5`` at position ``t`` of every head, for ``t < STEPS``."""

    def body(t, c):
        row = lax.dynamic_index_in_dim(new, t, keepdims=False)[:, None, :] * 0.5
        return lax.dynamic_update_slice(c, row, [np.int32(0), t, np.int32(0)])

    return lax.fori_loop(0, STEPS, body, cache)


def step(cache, k, t):
    return lax.dynamic_update_slice(cache, k, [np.int32(0), t, np.int32(0)])


def timed(fn, reps: int) -> tuple[float, float]:
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts) * 1e3, statistics.median(ts) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", action="store_true", help="run the updates as host fallbacks")
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--length", type=int, default=1024)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--reps", type=int, default=10)
    a = p.parse_args()
    if a.host:
        use_host_fallbacks()
    rng = np.random.default_rng(0)
    cache = np.zeros((a.heads, a.length, a.dim), np.float32)
    new = rng.standard_normal((STEPS, a.heads, a.dim)).astype(np.float32)

    f = blu.jit(fill)
    exe = f.lower(cache, new, target="cpu").compile().executable
    out = np.asarray(f(cache, new))  # warm-up (and the check below)
    want = cache.copy()
    want[:, :STEPS] = np.transpose(new, (1, 0, 2)) * np.float32(0.5)
    np.testing.assert_array_equal(out, want)
    best, med = timed(lambda: np.asarray(f(cache, new)), a.reps)
    mode = "host fallback" if a.host else "compiled"
    print(f"cache {cache.shape} f32, {mode}; fallback nodes: {len(exe.fallbacks)}")
    print(f"fill ({STEPS}-step fori_loop): best {best:.3f} ms, median {med:.3f} ms per call")

    g = blu.jit(step, donate_argnums=0)
    c = cache.copy()
    k = rng.standard_normal((a.heads, 1, a.dim)).astype(np.float32)
    pos = iter(range(10**9))
    c = g(c, k, np.int32(0))  # warm-up

    def one():
        nonlocal c
        c = g(c, k, np.int32(next(pos) % a.length))
        np.asarray(c)

    best, med = timed(one, max(a.reps, 1) * 10)
    print(f"step (one donated update per call): best {best:.3f} ms, median {med:.3f} ms per call")


if __name__ == "__main__":
    main()
