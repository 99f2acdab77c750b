"""Cumulative sum of a 4096x4096 float32 array along each axis: blu's jitted kernel against
numpy, in ms per call (the best of 3 rounds of ``--reps`` calls). On a machine with a GPU
(``blu.cuda.is_available()``, or ``--target cuda``) the operand lives on the device and each
call is waited for (``block_until_ready``); ``--target cpu`` times the CPU kernels.

    PYTHONPATH=. python benchmarks/cumulative.py [--target cpu|cuda] [--size 4096] [--reps 20]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import blu
import blu.cuda as bc
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
    target = a.target or ("cuda" if bc.is_available() else "cpu")
    if target == "cuda":
        x = bc.device_put(x_np)
        where = str(bc.devices()[0])
    else:
        x, where = x_np, "the CPU"
    print(f"cumsum over {a.size}x{a.size} float32 on {where}, ms per call")
    for axis in (1, 0):
        f = blu.jit(lambda v, axis=axis: lax.cumsum(v, axis))
        wait = (lambda r: r.block_until_ready()) if target == "cuda" else np.asarray
        ms = _time(lambda f=f, wait=wait: wait(f(x)), a.reps)
        ref = _time(lambda axis=axis: np.cumsum(x_np, axis), a.reps)
        print(f"  axis {axis}: blu {ms:8.3f}   numpy {ref:8.3f}")


if __name__ == "__main__":
    main()
