"""CPU attention: the unfused decomposition compiled by blu's CPU backend against the blocked
numpy kernels (what the CPU library lowering of the fused primitive runs), per call.

    PYTHONPATH=. python3 benchmarks/attention_cpu.py [--batch 32 --seq 64 --heads 4 --head-dim 32]

Defaults: the README main job's attention (``python -m examples.gpt2``: config "small", batch
32, T=64, 4 heads of 32), float32, causal. Prints the best of ``--repeat`` timings (ms) of the
forward and of forward+backward (``jit(grad)`` of ``sum(out * g)``) for:

- ``decomposition (jit)``: ``nn.dot_product_attention(..., implementation="reference")`` under
  ``jit``: the unfused lax computation, fused and compiled like the decomposition would be;
- ``numpy kernels``: ``attention_numpy.forward`` / ``forward + backward`` called directly;
- ``MLIR kernels``: blu's MLIR CPU kernels (``blu.lower.cpu.flash``, the CPU library
  lowering of the primitives) called directly on numpy arrays;
- ``primitive (jit)``: the fused primitive under ``jit`` as the backend runs it today (the
  launch plan's node kinds are printed: ``library`` nodes are the MLIR kernels).

``--threads N`` sets the BLAS threads of the numpy rows (before numpy is imported; default: the
environment's, as the main job runs); the MLIR kernels are single-threaded.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _threads() -> None:
    if "--threads" not in sys.argv:
        return
    n = sys.argv[sys.argv.index("--threads") + 1]
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, n)


_threads()

import numpy as np  # noqa: E402

import blu  # noqa: E402
from blu import nn  # noqa: E402
from blu.lax import attention_numpy as kern  # noqa: E402
from blu.lower.cpu import attention as cpu_lowering  # noqa: E402


def best(fn, repeat: int) -> float:
    fn()  # compile / warm up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        blu.block_until_ready(fn()) if hasattr(blu, "block_until_ready") else fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0, help="BLAS threads (0: as set)")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    shape = (a.batch, a.seq, a.heads, a.head_dim)
    q, k, v, g = (rng.normal(size=shape).astype(np.float32) for _ in range(4))
    scale = 1.0 / np.sqrt(a.head_dim)

    def fwd(impl):
        return blu.jit(lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=True,
                                                                implementation=impl))  # fmt: skip

    def fwd_bwd(impl):
        def loss(q, k, v):
            out = nn.dot_product_attention(q, k, v, is_causal=True, implementation=impl)
            return (out * g).sum()

        return blu.jit(blu.grad(loss, argnums=(0, 1, 2)))

    def np_fwd():
        return kern.forward(q, k, v, scale=scale, is_causal=True)

    def np_fwd_bwd():
        out, lse = kern.forward(q, k, v, scale=scale, is_causal=True)
        return kern.backward(q, k, v, None, None, out, lse, g, scale=scale, is_causal=True)

    params = dict(scale=scale, is_causal=True, has_bias=False, has_mask=False,
                  implementation=None)  # fmt: skip
    out, lse = np.empty_like(q), np.empty(q.shape[:1] + q.shape[2:3] + q.shape[1:2], np.float32)
    grads = [np.empty_like(q) for _ in range(3)]

    def mlir_fwd():
        cpu_lowering._cpu_fwd([q, k, v], [out, lse], None, **params)

    def mlir_fwd_bwd():
        mlir_fwd()
        cpu_lowering._cpu_bwd([q, k, v, out, lse, g], grads, None, has_dlse=False,
                              need_dbias=False, **params)  # fmt: skip

    rows = [
        ("decomposition (jit)", fwd("reference"), fwd_bwd("reference")),
        ("numpy kernels", np_fwd, np_fwd_bwd),
        ("MLIR kernels", mlir_fwd, mlir_fwd_bwd),
        ("primitive (jit)", fwd(None), fwd_bwd(None)),
    ]
    step = fwd_bwd(None).lower(q, k, v)._program
    print("primitive (jit) fwd+bwd plan:", " ".join(n.label() for n in step.plan.nodes))
    print(f"CPU attention B={a.batch} T={a.seq} heads={a.heads}x{a.head_dim} float32 causal "
          f"(best of {a.repeat}, ms)")  # fmt: skip
    print(f"{'implementation':<22}{'forward':>10}{'fwd+bwd':>10}")
    for name, f, fb in rows:
        if name.endswith("kernels"):
            tf, tfb = best(f, a.repeat), best(fb, a.repeat)
        else:
            tf, tfb = best(lambda: f(q, k, v), a.repeat), best(lambda: fb(q, k, v), a.repeat)
        print(f"{name:<22}{tf:>10.3f}{tfb:>10.3f}")


if __name__ == "__main__":
    main()
