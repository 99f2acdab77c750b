"""Cumulative sum of a 4096x4096 float32 array along each axis: blu's jitted kernel against
numpy (and JAX where installed), in ms per call. On a machine with a GPU (or ``--target
cuda``) the jitted call runs on the device and is timed with a synchronization per call.

    PYTHONPATH=. python benchmarks/cumulative.py [--target cpu|cuda] [--size 4096] [--reps 20]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import blu
import blu.lax as lax


def _time(fn, reps: int) -> float:
    fn()  # compile and warm up
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=None, help="cpu or cuda (default: blu's default device)")
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    x_np = np.random.default_rng(0).standard_normal((a.size, a.size)).astype(np.float32)
    device = blu.devices(a.target)[0] if a.target else blu.devices()[0]
    x = blu.device_put(x_np, device)
    print(f"cumsum over {a.size}x{a.size} float32 on {device}, ms per call")
    for axis in (1, 0):
        f = blu.jit(lambda v, axis=axis: lax.cumsum(v, axis))
        ms = _time(lambda f=f: f(x).block_until_ready(), a.reps)
        ref = _time(lambda axis=axis: np.cumsum(x_np, axis), a.reps)
        print(f"  axis {axis}: blu {ms:8.3f}   numpy {ref:8.3f}")


if __name__ == "__main__":
    main()
