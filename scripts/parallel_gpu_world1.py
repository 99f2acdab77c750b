"""The distributed training programs (DP, ZeRO-1, FSDP, TP, PP, DP x TP, DP x PP) as a world of
one process over NCCL on one GPU, each against the single-device run on the same GPU.

    scripts/gpu_check.sh parallel      # installs the carried wheels, then runs this script:
    BLU_PARALLEL_BACKEND=nccl python3 scripts/parallel_gpu_world1.py

Each mode is ``examples/parallel/gpt2.py``'s program on a mesh of one device per axis: the same
jaxpr as on N devices with every collective (psum, all_gather, psum_scatter, ...) bound, so its
calls go through NCCL (a communicator of one rank) while the rest runs as CUDA kernels (the
state and the batches are device arrays). It prints a table (mode, loss of each step, largest
relative difference from the single-device losses, median step time) and exits 1 when a mode
differs by more than ``--rtol``.

The kernels come from the kernel cache: ``scripts/fill_gpu_cache.py`` runs this script on the
simulated GPU (``BLU_FAKE_GPU=1 ... --backend cpu``: the same programs with the collectives
through a one-process communicator), which compiles every kernel these programs use.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# mode -> (the example's mode, its mesh of one device per axis)
MODES = {
    "dp": ("dp", {"data": 1}),
    "zero1": ("zero1", {"data": 1}),
    "fsdp": ("fsdp", {"data": 1}),
    "tp": ("tp", {"model": 1}),
    "tp_sp": ("tp", {"model": 1}),
    "pp": ("pp", {"pipe": 1}),
    "dp_tp": ("tp", {"data": 1, "model": 1}),
    "dp_pp": ("pp", {"data": 1, "pipe": 1}),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="nccl", help="nccl (the GPU) or cpu (the fill's run)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--rtol", type=float, default=1e-4)
    a = ap.parse_args(argv)

    import blu
    import blu.cuda as bc
    from blu import parallel as bp
    from blu.core import pytree
    from examples.gpt2.data import CharTokenizer
    from examples.parallel import data_parallel as dp
    from examples.parallel import gpt2

    if not bc.is_available():
        print("no GPU (blu.cuda.is_available() is False)", file=sys.stderr)
        return 2
    bp.initialize(backend=a.backend)
    assert bp.process_count() == 1, "a world of one: run this script alone"
    tok = CharTokenizer.from_text(dp.TEXT)
    cfg = dp.GPTConfig(2, 2, 32, 16, vocab_size=tok.vocab_size)
    tokens = tok.encode(dp.TEXT)
    on_gpu = lambda tree: bc.device_put(pytree.tree_map(np.asarray, tree))  # noqa: E731

    def run(params, state, step):
        data = dp.batches(tokens, a.batch, cfg.n_ctx)
        params, state = on_gpu((params, state))
        losses, times = [], []
        for _ in range(a.steps):
            x, y = on_gpu(next(data))
            t0 = time.perf_counter()
            params, state, loss = step(params, state, x, y)
            losses.append(float(np.asarray(blu.device_get(loss))))
            times.append(time.perf_counter() - t0)
        # the programs ran on the GPU: their results are device arrays
        assert all(getattr(v, "_blu_device_array", False) for v in pytree.tree_leaves(params))
        return losses, statistics.median(times[1:]) if len(times) > 1 else times[0]

    import blu.random as random

    p0 = dp.init_params(cfg, random.key(0))
    opt = dp.make_optimizer(p0)
    ref, t_ref = run(p0, opt.init(p0), dp.make_single_device_step(cfg, opt))
    print(f"backend {bp.runtime.backend()}, world of {bp.process_count()}; tiny GPT-2 "
          f"{cfg.n_layer}x{cfg.d_model}, batch {a.batch}, {a.steps} steps", flush=True)  # fmt: skip
    print("| mode | losses | max rel. diff vs 1 device | step ms |")
    print("| --- | --- | ---: | ---: |")
    print(f"| 1 device (no shard) | {', '.join(f'{v:.5f}' for v in ref)} | - | {t_ref * 1e3:.1f} |")
    bad = []
    for m in a.modes.split(","):
        kind, sizes = MODES[m]
        params, state, step, _, _ = gpt2.make(cfg, kind, sizes, micro_batches=2,
                                              sequence_parallel=m == "tp_sp")  # fmt: skip
        losses, t = run(params, state, step)
        diff = float(np.max(np.abs(np.subtract(losses, ref)) / np.abs(ref)))
        if not diff <= a.rtol:
            bad.append(m)
        print(f"| {m} | {', '.join(f'{v:.5f}' for v in losses)} | {diff:.1e} | {t * 1e3:.1f} |",
              flush=True)  # fmt: skip
    print("FAILED: " + ", ".join(bad) if bad else "OK: every mode equals the single-device run")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
