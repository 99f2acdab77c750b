"""CPU jit (MLIR-compiled kernels) against eager blu and the numpy reference executable.

    python benchmarks/cpu_jit.py                 # every case
    python benchmarks/cpu_jit.py gelu softmax    # some cases
    python benchmarks/cpu_jit.py --gpt2 small    # GPT-2 training step config (tiny/small/...)

For each case: eager (op by op, each primitive's numpy impl through the eval interpreter),
``numpy-jit`` (the jaxpr interpreted with numpy impls, today's default jit executable) and
``mlir-jit`` (``blu.lower.cpu.executable.CpuExecutable``: fused kernels compiled through MLIR,
numpy's
BLAS for matrix products, planned memory). Times are the best of several runs (the machine
may be shared), compile time is measured with an empty kernel cache.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import blu  # noqa: E402
import blu.lax as lax  # noqa: E402
from blu import nn, optim  # noqa: E402
from blu.core import pytree  # noqa: E402
from blu.core.staging import hoist_consts  # noqa: E402
from blu.lower.cpu.executable import CpuExecutable  # noqa: E402
from blu.lower.mlir import mlir_cpu  # noqa: E402
from blu.lower.reference import NumpyExecutable  # noqa: E402


def best(fn, args, reps: int, copy: bool = False) -> float:
    ts = []
    for _ in range(reps):
        a = [x.copy() for x in args] if copy else args
        t = time.perf_counter()
        fn(*a)
        ts.append(time.perf_counter() - t)
    return min(ts)


def bench(name: str, f, args, reps: int = 10, donate: tuple[bool, ...] | None = None) -> None:
    flat, tree = pytree.tree_flatten(args)
    flat = [np.asarray(x) for x in flat]

    def flat_f(*ls):
        return pytree.tree_leaves(f(*pytree.tree_unflatten(tree, list(ls))))

    closed = blu.make_jaxpr(flat_f)(*flat)
    jaxpr = hoist_consts(closed.jaxpr)
    full = [np.asarray(c) for c in closed.consts] + flat
    donated = None if donate is None else (False,) * len(closed.consts) + donate
    t0 = time.perf_counter()
    before = dict(mlir_cpu.stats)
    exe = CpuExecutable(jaxpr, name, donated)
    compile_s = time.perf_counter() - t0
    n_compiled = mlir_cpu.stats["compiled"] - before["compiled"]
    ref = NumpyExecutable(jaxpr)
    copy = donate is not None
    t_eager = best(lambda *a: flat_f(*a), flat, max(reps // 2, 2), copy)
    t_np = best(ref, full, reps, copy)
    t_mlir = best(exe, full, reps, copy)
    got = exe(*[x.copy() for x in full])
    want = ref(*[x.copy() for x in full])
    errs = [0.0]
    for g, w in zip(got, want):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if g.size:
            errs.append(float(np.max(np.abs(g - w) / (1 + np.abs(w)))))
    err = max(errs)
    kinds = [n.kind for n in exe.plan.nodes]
    m = exe.memory_analysis()
    print(
        f"{name:22s} eager {t_eager * 1e3:9.2f} ms | numpy-jit {t_np * 1e3:9.2f} ms | "
        f"mlir-jit {t_mlir * 1e3:9.2f} ms ({t_np / t_mlir:5.2f}x) | compile {compile_s:6.2f} s "
        f"({n_compiled} kernels compiled, {kinds.count('kernel')} kernel / {kinds.count('dot')} "
        f"dot / {kinds.count('fallback')} fallback nodes) | peak {m.peak_bytes / 2**20:.1f} MiB "
        f"vs {m.intermediate_bytes / 2**20:.1f} MiB of intermediates | max rel err {err:.1e}",
        flush=True,
    )


def cases(rng: np.random.Generator) -> dict:
    f32 = np.float32
    n = 1 << 20
    x = rng.standard_normal(n).astype(f32)
    rows = rng.standard_normal((1024, 1024)).astype(f32)
    g, b = rng.standard_normal(1024).astype(f32), rng.standard_normal(1024).astype(f32)
    h = rng.standard_normal((512, 768)).astype(f32)
    w1 = (rng.standard_normal((768, 3072)) / 30).astype(f32)
    b1 = rng.standard_normal(3072).astype(f32)
    w2 = (rng.standard_normal((3072, 768)) / 60).astype(f32)
    labels = rng.integers(0, 1024, 1024).astype(np.int32)
    p = {
        "w": rng.standard_normal((1024, 1024)).astype(f32),
        "b": rng.standard_normal(4096).astype(f32),
    }
    gr = pytree.tree_map(lambda a: rng.standard_normal(a.shape).astype(f32), p)
    opt = optim.adamw(1e-3, weight_decay=0.1)
    state = pytree.tree_map(np.asarray, opt.init(p))
    return {
        "mul_tanh": (lambda x: lax.tanh(x * 2.0), (x,), None),
        "gelu": (lambda x: nn.gelu(x, approximate=True), (x,), None),
        "gelu_exact": (lambda x: nn.gelu(x, approximate=False), (x,), None),
        "softmax": (lambda x: nn.softmax(x, -1), (rows,), None),
        "layer_norm": (lambda x: nn.layer_norm(x, g, b), (rows,), None),
        "cross_entropy": (lambda x: nn.cross_entropy(x, labels), (rows,), None),
        "mlp": (lambda h: nn.gelu(h @ w1 + b1) @ w2, (h,), None),
        "adamw_update": (
            lambda g, s, p: opt.update(g, s, p),
            (gr, state, p),
            (False,) * 2 + (True,) * 5,
        ),  # fmt: skip
    }


def gpt2(cfg_name: str) -> None:
    from examples.gpt2 import model

    cfg = model.CONFIGS[cfg_name].with_vocab(65 if cfg_name != "gpt2-124m" else 50257)
    params = pytree.tree_map(np.asarray, model.init_params(cfg, blu.random.key(0)))
    opt = optim.adamw(1e-3, weight_decay=0.1)
    state = pytree.tree_map(np.asarray, opt.init(params))
    rng = np.random.default_rng(0)
    bsz, t = (4, cfg.n_ctx) if cfg_name != "gpt2-124m" else (1, 128)
    x, y = (rng.integers(0, cfg.vocab_size, (bsz, t)).astype(np.int32) for _ in range(2))

    def step(params, state, x, y):
        loss, grads = blu.value_and_grad(model.loss_fn)(params, x, y, cfg)
        params, state = opt.update(grads, state, params)
        return params, state, loss

    n = len(pytree.tree_leaves((params, state)))
    bench(
        f"gpt2-{cfg_name} step",
        step,
        (params, state, x, y),
        reps=5,
        donate=(True,) * n + (False, False),
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("cases", nargs="*")
    ap.add_argument(
        "--gpt2", default=None, help="also time a GPT-2 training step (tiny/small/gpt2-124m)"
    )
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    os.environ.setdefault("BLU_CACHE_DIR", tempfile.mkdtemp(prefix="blu-bench-cache-"))
    print(f"kernel cache: {os.environ['BLU_CACHE_DIR']}; {os.cpu_count()} CPUs")
    table = cases(np.random.default_rng(0))
    for name, (f, a, donate) in table.items():
        if not args.cases or name in args.cases:
            bench(name, f, a, args.reps, donate)
    if args.gpt2:
        gpt2(args.gpt2)


if __name__ == "__main__":
    main()
