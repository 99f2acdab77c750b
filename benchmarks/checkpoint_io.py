"""The example's checkpoint commit and load (``examples/gpt2/checkpoint.py``) on host arrays of a
given total size: seconds for ``save`` (write, hash, fsync, rename, record) and ``load`` (read,
verify, parse), the best of ``--rounds``, into a fresh temporary folder each round (under
``--dir``: put it on the file system the runs write to; ``/dev/shm`` times no disk).

A LLaMA-1B run's checkpoint is its float32 parameters and AdamW's two moments: 1.18B x 12 bytes,
14 GB; ``--gb 14`` times that size (it needs about twice that in host memory).

    python benchmarks/checkpoint_io.py [--gb 2] [--rounds 3] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.gpt2 import checkpoint  # noqa: E402

LEAF = 2048 * 8192  # float32 leaves of 64 MiB (an MLP weight of a 1B-class model), or smaller


def state(gb: float) -> tuple[dict, dict]:
    """Parameters and two optimizer moments of ``gb`` GB in all (float32, random)."""
    size = max(1, min(LEAF, round(gb * 1e9 / 12)))
    n = 3 * max(1, round(gb * 1e9 / (12 * size)))
    rng = np.random.default_rng(0)
    leaves = [rng.standard_normal(size, dtype=np.float32) for _ in range(n)]
    k = n // 3
    params = {f"w{i}": v for i, v in enumerate(leaves[:k])}
    opt = {"m": {f"w{i}": v for i, v in enumerate(leaves[k : 2 * k])},
           "v": {f"w{i}": v for i, v in enumerate(leaves[2 * k :])}}  # fmt: skip
    return params, opt


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=2.0, help="total size of the tensors (GB)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the temporary folders go")
    a = ap.parse_args(argv)
    params, opt = state(a.gb)
    nbytes = sum(v.nbytes for v in params.values()) + sum(
        v.nbytes for d in opt.values() for v in d.values()
    )
    best = {"save": float("inf"), "load": float("inf")}
    with tempfile.TemporaryDirectory(dir=a.dir) as d:  # the imports, untimed
        checkpoint.load(checkpoint.save(d, {"w": np.zeros(1)}, {}, {"step": 0}).parent)
    for _ in range(a.rounds):
        d = Path(tempfile.mkdtemp(prefix="blu-ckpt-bench-", dir=a.dir))
        try:
            t0 = time.perf_counter()
            checkpoint.save(d, params, opt, {"step": 1})
            t1 = time.perf_counter()
            tensors, _ = checkpoint.load(d)
            t2 = time.perf_counter()
            assert len(tensors) == len(params) + sum(len(v) for v in opt.values())
            del tensors
        finally:
            shutil.rmtree(d, ignore_errors=True)
        best["save"] = min(best["save"], t1 - t0)
        best["load"] = min(best["load"], t2 - t1)
    for what, s in best.items():
        print(f"{what}: {s:.2f} s for {nbytes / 1e9:.2f} GB ({nbytes / 1e9 / s:.2f} GB/s)")


if __name__ == "__main__":
    main()
