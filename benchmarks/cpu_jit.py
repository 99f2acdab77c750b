"""CPU jit (MLIR-compiled kernels) against eager blu and the numpy reference executable.

    python benchmarks/cpu_jit.py                 # every case
    python benchmarks/cpu_jit.py gelu softmax    # some cases
    python benchmarks/cpu_jit.py --gpt2 small    # GPT-2 training step config (tiny/small/...)
    python benchmarks/cpu_jit.py --vs-jax --reps 30   # blu.jit against jax.jit, in turns
    python benchmarks/cpu_jit.py --dispatch           # a cached jitted call's own time, and a
                                                      # small donating training step's

``--vs-jax``: the same programs written once for each (an MLP training step, softmax, layer
norm + GELU, a 100-step ``scan`` RNN and its gradient, an attention block), both jitted, timed
in turns (blu, JAX, blu, JAX, ...; each result waited for), steady-state medians after warm-up;
also the number of host fallback nodes in blu's program (its ``fallbacks``). The turns are
rounds of calls (``--settle`` untimed calls of a framework, default 3, then ``--per-round``
timed ones, default 7): XLA's thread pool keeps a core busy for tens of milliseconds after a
JAX call returns, and what runs next shares that core (blu's 100-step scan took 10.1 ms right
after a JAX call, call by call, and 6.5 ms after its own; with one untimed call between, still
10.1; three, 8.6). blu's spinning workers stop when its call ends, so JAX's calls do not pay
so after blu's. Rounds time each as a program that uses one framework runs.

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
from blu.lower.mlir import llvm as mlir_cpu  # noqa: E402
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
            lambda g, s, p: opt.step(g, s, p),
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
        params, state = opt.step(grads, state, params)
        return params, state, loss

    n = len(pytree.tree_leaves((params, state)))
    bench(
        f"gpt2-{cfg_name} step",
        step,
        (params, state, x, y),
        reps=5,
        donate=(True,) * n + (False, False),
    )


def jax_cases(rng: np.random.Generator) -> dict:
    """name -> (blu function, JAX function, numpy arguments) for ``--vs-jax``."""
    import jax
    import jax.numpy as jnp

    f32 = np.float32
    r = lambda *shape, s=1.0: (rng.standard_normal(shape) * s).astype(f32)  # noqa: E731

    def mlp_step(np_, nn_, grad):
        def loss(p, x, y):
            h = nn_.gelu(x @ p["w1"] + p["b1"], approximate=True)
            out = h @ p["w2"] + p["b2"]
            return np_.mean((out - y) ** 2)

        def step(p, x, y):
            g = grad(loss)(p, x, y)
            return {k: p[k] - 0.01 * g[k] for k in p}

        return step

    mlp = ({"w1": r(512, 1024, s=0.03), "b1": r(1024), "w2": r(1024, 256, s=0.03),
            "b2": r(256)}, r(256, 512), r(256, 256))  # fmt: skip

    def ln_gelu(np_, nn_, g, b):
        def f(x):
            m = np_.mean(x, -1, keepdims=True)
            v = np_.mean((x - m) ** 2, -1, keepdims=True)
            return nn_.gelu((x - m) / np_.sqrt(v + 1e-5) * g + b, approximate=True)

        return f

    g, b = r(1024), r(1024)

    def rnn(np_, scan):
        def f(w, u, h0, xs):
            def step(h, x):
                h = np_.tanh(x @ w + h @ u)
                return h, np_.sum(h)

            h, ys = scan(step, h0, xs)
            return np_.sum(h) + np_.sum(ys)

        return f

    rnn_args = (r(256, 256, s=1 / 16), r(256, 256, s=1 / 16), np.zeros((32, 256), f32),
                r(100, 32, 256))  # fmt: skip

    def attn_block(np_, attention, heads=4):
        def f(x, wqkv, wo):
            bsz, t, c = x.shape
            qkv = (x @ wqkv).reshape(bsz, t, 3, heads, c // heads)
            y = attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], is_causal=True)
            return x + y.reshape(bsz, t, c) @ wo

        return f

    attn_args = (r(8, 256, 256), r(256, 768, s=1 / 16), r(256, 256, s=1 / 16))
    bnp = blu.numpy
    blu_rnn, jax_rnn = rnn(bnp, lax.scan), rnn(jnp, jax.lax.scan)
    return {
        "MLP step (256x512-1024-256)": (mlp_step(bnp, nn, blu.grad),
                                        mlp_step(jnp, jax.nn, jax.grad), mlp),
        "softmax 4096x4096": (lambda x: nn.softmax(x, -1), lambda x: jax.nn.softmax(x, -1),
                              (r(4096, 4096),)),
        "layer norm + GELU 2048x1024": (ln_gelu(bnp, nn, g, b), ln_gelu(jnp, jax.nn, g, b),
                                        (r(2048, 1024),)),
        "scan RNN 100x(32x256)": (blu_rnn, jax_rnn, rnn_args),
        "scan RNN gradient": (blu.grad(blu_rnn, (0, 1)), jax.grad(jax_rnn, (0, 1)), rnn_args),
        "attention block 8x256x256": (attn_block(bnp, nn.dot_product_attention),
                                      attn_block(jnp, jax.nn.dot_product_attention), attn_args),
    }  # fmt: skip


def vs_jax(names: list[str], reps: int, settle: int = 3, per_round: int = 7) -> None:
    """blu.jit against jax.jit, in rounds of calls taken in turns (see the module docstring)."""
    import jax

    table = jax_cases(np.random.default_rng(0))
    rows = []
    for name, (bf, jf, args) in table.items():
        if names and not any(n in name for n in names):
            continue
        bj, jj = blu.jit(bf), jax.jit(jf)
        t0 = time.perf_counter()
        want = pytree.tree_leaves(jax.block_until_ready(jj(*args)))
        jax_compile = time.perf_counter() - t0
        t0 = time.perf_counter()
        got = pytree.tree_leaves(bj(*args))
        blu_compile = time.perf_counter() - t0
        err = max(
            float(
                np.max(
                    np.abs(np.asarray(a, np.float64) - np.asarray(w, np.float64))
                    / (1 + np.abs(np.asarray(w, np.float64)))
                )
            )
            for a, w in zip(got, want)
        )
        exe = bj.lower(*args, target="cpu").compile().executable
        jargs = [jax.device_put(a) for a in pytree.tree_leaves(args)]
        jargs = pytree.tree_unflatten(pytree.tree_structure(args), jargs)
        tb, tj = [], []
        while len(tb) < reps:  # rounds (see the module docstring)
            for _ in range(settle):  # (untimed: the other framework's threads settle)
                pytree.tree_leaves(bj(*args))
            for _ in range(per_round):
                t = time.perf_counter()
                pytree.tree_leaves(bj(*args))
                tb.append(time.perf_counter() - t)
            for _ in range(settle):
                jax.block_until_ready(jj(*jargs))
            for _ in range(per_round):
                t = time.perf_counter()
                jax.block_until_ready(jj(*jargs))
                tj.append(time.perf_counter() - t)
        mb, mj = float(np.median(tb)), float(np.median(tj))
        rows.append((name, mb, mj, len(exe.fallbacks), len(exe.plan.nodes), blu_compile,
                     jax_compile, err))  # fmt: skip
        print(f"{name}: blu {mb * 1e3:.2f} ms, JAX {mj * 1e3:.2f} ms ({mb / mj:.2f}x), "
              f"{len(exe.fallbacks)} fallbacks, max rel diff {err:.1e}", flush=True)  # fmt: skip
    print("\n| program | blu | JAX | blu / JAX | blu nodes (fallbacks) | first call blu / JAX |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, mb, mj, nf, nn_, cb, cj, _ in rows:
        print(
            f"| {name} | {mb * 1e3:.2f} ms | {mj * 1e3:.2f} ms | {mb / mj:.2f}x | {nn_} ({nf}) "
            f"| {cb:.2f} s / {cj:.2f} s |"
        )


def dispatch(rounds: int = 7, calls: int = 5000) -> None:
    """The time of a cached jitted call of a one-kernel program (``x * 2 + 1`` on 8 float32s),
    blu against JAX, in rounds taken in turns; the median round's time per call."""
    import warnings

    import jax

    x = np.arange(8, dtype=np.float32)
    bf, jf = blu.jit(lambda x: x * 2.0 + 1.0), jax.jit(lambda x: x * 2.0 + 1.0)
    bx, jx = bf(x), jax.device_put(x)
    jax.block_until_ready(jf(jx))
    # donated: each call's result is the next call's argument (a training step's state)
    bd = blu.jit(lambda x: x * 0.5 + 1.0, donate_argnums=0)
    jd = jax.jit(lambda x: x * 0.5 + 1.0, donate_argnums=0)
    carry = {"blu": bd(bf(x)), "jax": jd(jax.device_put(x))}

    def blu_donated() -> None:
        carry["blu"] = bd(carry["blu"])

    def jax_donated() -> None:
        carry["jax"] = jd(carry["jax"]).block_until_ready()

    cases = {
        "blu, a blu Array": lambda: bf(bx),
        "blu, a numpy array": lambda: bf(x),
        "JAX, a device array (result waited for)": lambda: jf(jx).block_until_ready(),
        "blu, donated (x = f(x))": blu_donated,
        "JAX, donated (x = f(x), result waited for)": jax_donated,
    }
    warnings.filterwarnings("ignore", message=".*donated buffers were not usable")
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(rounds):
        for name, call in cases.items():
            for _ in range(calls // 10):  # warm
                call()
            t = time.perf_counter()
            for _ in range(calls):
                call()
            times[name].append((time.perf_counter() - t) / calls)
    print("\n| call of a one-kernel program (8 float32) | time per call |")
    print("| --- | ---: |")
    for name, ts in times.items():
        print(f"| {name} | {np.median(ts) * 1e6:.1f} us |")


def donated_step(rounds: int = 7, calls: int = 300) -> None:
    """A training step whose call overhead shows: AdamW on a 12-layer tanh MLP of 16x16
    weights, parameters and optimizer state donated (37 leaves), ``params, state = step(...)``;
    the median round's time per step (blu only)."""
    bnp = blu.numpy
    rng = np.random.default_rng(0)
    params = {f"w{i}": bnp.asarray(rng.standard_normal((16, 16)).astype(np.float32))
              for i in range(12)}  # fmt: skip
    opt = optim.adamw(1e-3, weight_decay=0.1)
    state = opt.init(params)
    x = rng.standard_normal((8, 16)).astype(np.float32)

    def loss(p, x):
        h = x
        for i in range(12):
            h = bnp.tanh(h @ p[f"w{i}"])
        return bnp.mean(h * h)

    def step(p, s, x):
        p, s = opt.step(blu.grad(loss)(p, x), s, p)
        return p, s

    f = blu.jit(step, donate_argnums=(0, 1))
    n = len(pytree.tree_leaves((params, state)))
    for _ in range(calls // 10):
        params, state = f(params, state, x)
    ts = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            params, state = f(params, state, x)
        ts.append((time.perf_counter() - t) / calls)
    print(f"\n| a donating AdamW step ({n} donated leaves) | {np.median(ts) * 1e6:.0f} us |")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("cases", nargs="*")
    ap.add_argument(
        "--gpt2", default=None, help="also time a GPT-2 training step (tiny/small/gpt2-124m)"
    )
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--vs-jax", action="store_true", help="blu.jit against jax.jit (see above)")
    ap.add_argument("--settle", type=int, default=3,
                    help="--vs-jax: untimed calls of a framework opening each round")  # fmt: skip
    ap.add_argument("--per-round", type=int, default=7,
                    help="--vs-jax: timed calls of a framework per round")  # fmt: skip
    ap.add_argument(
        "--dispatch", action="store_true", help="a cached jitted call's own time, blu and JAX"
    )
    args = ap.parse_args()
    os.environ.setdefault("BLU_CACHE_DIR", tempfile.mkdtemp(prefix="blu-bench-cache-"))
    print(f"kernel cache: {os.environ['BLU_CACHE_DIR']}; {os.cpu_count()} CPUs")
    if args.dispatch:
        dispatch()
        donated_step()
        return
    if args.vs_jax:
        vs_jax(args.cases, args.reps, args.settle, args.per_round)
        return
    table = cases(np.random.default_rng(0))
    for name, (f, a, donate) in table.items():
        if not args.cases or name in args.cases:
            bench(name, f, a, args.reps, donate)
    if args.gpt2:
        gpt2(args.gpt2)


if __name__ == "__main__":
    main()
