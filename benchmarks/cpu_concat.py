"""The CPU's copies for concatenations (``blu/lower/cpu/concat.py``) against the fused kernels
they replace, at the README main job's shapes (batch 32 x 64, 4 heads of 32): the gradient of
splitting the fused q/k/v projection (``qkv.reshape(B, T, 3, H, D)[:, :, i]``), alone and with
the bias gradient and squared norm the training step fuses after it, and ``concatenate``.
Each case is jitted twice in one process, with the rewrite off (``MIN_ELEMENTS`` huge while it
compiles) and on, and the two are timed interleaved (median of ``--reps`` calls per round).

    python benchmarks/cpu_concat.py --rounds 5 --reps 50
    BLU_DATA_DIR=/work/shared/data python benchmarks/cpu_concat.py --main-job --rounds 10 --reps 10

``--main-job``: the README main job's training step (``benchmarks/cpu_main_job.py``'s blu run),
compiled with the rewrite off and on in one process, ``--reps`` steps of each in turn per round:
ms per step (median over rounds of the mean step time).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

B, T, H, D = 32, 64, 4, 32


def cases():
    import blu
    import blu.numpy as bnp

    def split(qkv):
        x = qkv.reshape(B, T, 3, H, D)
        return x[:, :, 0], x[:, :, 1], x[:, :, 2]

    def vjp(qkv, cq, ck, cv):
        return blu.vjp(split, qkv)[1]((cq, ck, cv))[0]

    def vjp_bias(qkv, cq, ck, cv):  # as in the training step: bias grad, its square sum
        g = vjp(qkv, cq, ck, cv)
        b = g.sum(axis=(0, 1))
        return g, b, (b * b).sum()

    def cat(qkv, cq, ck, cv):
        return bnp.concatenate([cq, ck, cv], axis=2)

    def cat_bias(qkv, cq, ck, cv):
        g = cat(qkv, cq, ck, cv)
        b = g.sum(axis=(0, 1))
        return g, b, (b * b).sum()

    return {"split VJP": vjp, "split VJP + bias grad + norm": vjp_bias, "concatenate": cat,
            "concatenate + bias grad + norm": cat_bias}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--main-job", action="store_true", help="the main job's training step")
    a = ap.parse_args()
    if a.main_job:
        main_job(a.rounds, a.reps)
        return

    import blu
    from blu.lower.cpu import concat

    rng = np.random.default_rng(0)
    args = [rng.standard_normal((B, T, 3 * H * D), dtype=np.float32)]
    args += [rng.standard_normal((B, T, H, D), dtype=np.float32) for _ in range(3)]
    fns = {}
    for name, f in cases().items():
        old = concat.MIN_ELEMENTS
        concat.MIN_ELEMENTS = 1 << 62
        try:
            fused = blu.jit(lambda *xs, f=f: f(*xs))
            r_fused = fused(*args)
        finally:
            concat.MIN_ELEMENTS = old
        copy = blu.jit(lambda *xs, f=f: f(*xs))
        r_copy = copy(*args)
        for u, v in zip(blu.tree_util.tree_leaves(r_fused), blu.tree_util.tree_leaves(r_copy)):
            np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-5, atol=1e-4)
        fns[name] = (fused, copy)
    times = {name: ([], []) for name in fns}
    for _ in range(a.rounds):
        for name, pair in fns.items():
            for k, fn in enumerate(pair):
                ts = []
                for _ in range(a.reps):
                    t = time.perf_counter()
                    fn(*args)
                    ts.append(time.perf_counter() - t)
                times[name][k].append(np.median(ts))
    print("| case | fused kernel (ms) | copies (ms) | speed-up |")
    print("| --- | ---: | ---: | ---: |")
    for name, (f, c) in times.items():
        f, c = np.median(f) * 1e3, np.median(c) * 1e3
        print(f"| {name} | {f:.3f} | {c:.3f} | {f / c:.1f}x |")


def main_job(rounds: int, reps: int) -> None:
    import blu
    from blu.core import pytree
    from blu.lower.cpu import concat
    from examples.gpt2 import model, train

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import cpu_main_job as mj

    a = train.build_parser().parse_args(["--config", "small", "--steps", "700"])
    cfg = model.CONFIGS["small"].with_vocab(65)
    train._fill_defaults(a, cfg)
    batches, _ = mj.load_data(1337, reps * (rounds + 1), 1, None)
    params = pytree.tree_map(np.asarray, model.init_params(cfg, blu.random.key(a.seed)))
    runs = []
    for on in (False, True):
        old = concat.MIN_ELEMENTS
        concat.MIN_ELEMENTS = old if on else 1 << 62
        try:
            r = mj.BluRun(cfg, a, params)
            r.steps(batches[:reps])  # compiles
        finally:
            concat.MIN_ELEMENTS = old
        runs.append(r)
    times: list[list[float]] = [[], []]
    for i in range(1, rounds + 1):
        for k, r in enumerate(runs):
            t = time.perf_counter()
            r.steps(batches[i * reps : (i + 1) * reps])
            times[k].append((time.perf_counter() - t) / reps)
    f, c = np.median(times[0]) * 1e3, np.median(times[1]) * 1e3
    print("| main job step | fused kernel (ms) | copies (ms) | speed-up |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| small GPT, batch 32x64 | {f:.1f} | {c:.1f} | {f / c:.3f}x |")
    print(f"losses: {runs[0].loss:.4f} {runs[1].loss:.4f}")


if __name__ == "__main__":
    main()
