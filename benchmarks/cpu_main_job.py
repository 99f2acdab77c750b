"""The README's main job on the CPU against its peers: the ``small`` char-level GPT (3 layers,
d=128, 4 heads, batch 32 x 64 characters of tinyshakespeare) trained with the example's own
settings (AdamW, lr 4e-3 with warm-up and cosine decay, beta2 0.99, weight decay 0.1 on
matrices, gradient clipping at 1.0) in blu, JAX and PyTorch eager (optionally torch.compile),
from the same initial weights on the same batches, interleaved.

    python benchmarks/cpu_main_job.py                      # 700 steps, rounds of 50
    python benchmarks/cpu_main_job.py --steps 60 --round 20  # a quick look
    python benchmarks/cpu_main_job.py --compile            # also torch.compile
    python benchmarks/cpu_main_job.py --only blu jax torch torch1   # also PyTorch on 1 thread
    python benchmarks/cpu_main_job.py --only blu --profile /tmp/step.json  # + blu's kernels

Each round runs ``--round`` steps of each framework in turn (so load from other processes falls
on all of them alike); the first round (compiles, warm-up) is reported apart and left out of
tokens/s. The batches are drawn once with numpy (seed 1337) and fed to every framework: the
example's own batch sampling (``blu.random`` on the host) is not measured here. blu's step is the
example's (``examples/gpt2/train.py: make_steps``): one jitted program, parameters and optimizer
state donated. At the end each model's validation loss is the mean over the same 20 batches.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

B, T = 32, 64


def load_data(seed: int, steps: int, eval_iters: int, path: str | None):
    from examples.gpt2.data import find_corpus, make_tokenizer, read_corpus, train_val_split

    text = read_corpus(path or find_corpus())
    tokens = make_tokenizer("char", text).encode(text).astype(np.int32)
    train, val = train_val_split(tokens, 0.1)
    rng = np.random.default_rng(seed)

    def batch(src):
        i = rng.integers(0, len(src) - T - 1, B)
        x = np.stack([src[j : j + T] for j in i])
        return x, np.stack([src[j + 1 : j + T + 1] for j in i])

    return [batch(train) for _ in range(steps)], [batch(val) for _ in range(eval_iters)]


def lr_at(n: int, a: argparse.Namespace) -> float:
    """The example's schedule at update ``n`` (from 1): linear warm-up, cosine decay."""
    if n < a.warmup_steps:
        return a.lr * n / a.warmup_steps
    s = min(n - a.warmup_steps, a.steps - a.warmup_steps) / max(1, a.steps - a.warmup_steps)
    return a.min_lr + (a.lr - a.min_lr) * (1 + math.cos(math.pi * s)) / 2


# ---- blu --------------------------------------------------------------------------------------


class BluRun:
    name = "blu"

    def __init__(self, cfg, a, params):
        import blu
        from blu.core import pytree
        from examples.gpt2 import train

        opt, _ = train.make_optimizer(a)
        self.step_fn, self.eval_fn = train.make_steps(cfg, opt, a)
        self.params = pytree.tree_map(lambda x: np.array(x, copy=True), params)
        self.state = opt.init(self.params)
        self.key = blu.random.key(0)
        self.loss = float("nan")

    def steps(self, batches) -> None:
        for x, y in batches:
            self.params, self.state, loss, _ = self.step_fn(
                self.params, self.state, x[None], y[None], self.key
            )
        self.loss = float(loss)

    def val_loss(self, batches) -> float:
        return float(np.mean([float(self.eval_fn(self.params, x, y)) for x, y in batches]))


# ---- JAX --------------------------------------------------------------------------------------


class JaxRun:
    name = "JAX"

    def __init__(self, cfg, a, params):
        import jax
        import jax.numpy as jnp

        self.jax, self.a = jax, a
        H = cfg.n_head

        def ln(x, p):
            m = x.mean(-1, keepdims=True)
            v = ((x - m) ** 2).mean(-1, keepdims=True)
            return (x - m) * jax.lax.rsqrt(v + 1e-5) * p["g"] + p["b"]

        def lin(x, p):
            return x @ p["w"] + p["b"]

        def loss_fn(params, x, y):
            b, t = x.shape
            h = params["wte"][x] + params["wpe"][:t]
            for blk in params["h"]:
                z = ln(h, blk["ln_1"])
                q, k, v = jnp.split(lin(z, blk["attn"]["c_attn"]).reshape(b, t, 3, H, -1), 3, 2)
                att = jax.nn.dot_product_attention(q[:, :, 0], k[:, :, 0], v[:, :, 0],
                                                   is_causal=True)  # fmt: skip
                h = h + lin(att.reshape(b, t, -1), blk["attn"]["c_proj"])
                m = jax.nn.gelu(lin(ln(h, blk["ln_2"]), blk["mlp"]["c_fc"]), approximate=True)
                h = h + lin(m, blk["mlp"]["c_proj"])
            logits = ln(h, params["ln_f"]) @ params["wte"].T
            lp = jax.nn.log_softmax(logits, -1)
            return -jnp.take_along_axis(lp, y[..., None], -1).mean()

        b1, b2, eps, wd, clip = a.beta1, a.beta2, 1e-8, a.weight_decay, a.grad_clip

        def step(params, m, v, t, lr, x, y):
            loss, g = jax.value_and_grad(loss_fn)(params, x, y)
            leaves = jax.tree_util.tree_leaves(g)
            norm = jnp.sqrt(sum(jnp.sum(l * l) for l in leaves))
            g = jax.tree_util.tree_map(lambda l: l * jnp.minimum(1.0, clip / norm), g)
            m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
            v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)

            def upd(p, m, v):
                u = (m / (1 - b1**t)) / (jnp.sqrt(v / (1 - b2**t)) + eps)
                return p - lr * (u + (wd * p if p.ndim >= 2 else 0.0))

            return jax.tree_util.tree_map(upd, params, m, v), m, v, loss

        self.step_fn = jax.jit(step, donate_argnums=(0, 1, 2))
        self.eval_fn = jax.jit(loss_fn)
        self.params = jax.tree_util.tree_map(jnp.asarray, params)
        self.m = jax.tree_util.tree_map(jnp.zeros_like, self.params)
        self.v = jax.tree_util.tree_map(jnp.zeros_like, self.params)
        self.t, self.loss = 0, float("nan")

    def steps(self, batches) -> None:
        for x, y in batches:
            self.t += 1
            lr = np.float32(lr_at(self.t, self.a))
            self.params, self.m, self.v, loss = self.step_fn(
                self.params, self.m, self.v, np.float32(self.t), lr, x, y
            )
        self.loss = float(loss)  # waits for the last step

    def val_loss(self, batches) -> float:
        return float(np.mean([float(self.eval_fn(self.params, x, y)) for x, y in batches]))


# ---- PyTorch ----------------------------------------------------------------------------------


class TorchRun:
    name = "PyTorch eager"

    def __init__(self, cfg, a, params, compile_: bool = False, threads: int | None = None):
        import torch
        import torch.nn.functional as F

        self.torch, self.a = torch, a
        self.threads = threads or torch.get_num_threads()
        H = cfg.n_head
        if compile_:
            self.name = "torch.compile"
        if threads:
            self.name += f" ({threads} thread{'s' if threads > 1 else ''})"

        def tensors(tree):
            if isinstance(tree, dict):
                return {k: tensors(v) for k, v in tree.items()}
            if isinstance(tree, list):
                return [tensors(v) for v in tree]
            return torch.tensor(np.asarray(tree), requires_grad=True)

        self.params = tensors(params)

        def lin(x, p):
            return torch.addmm(p["b"], x.reshape(-1, x.shape[-1]), p["w"]).view(*x.shape[:-1], -1)

        def ln(x, p):
            return F.layer_norm(x, (x.shape[-1],), p["g"], p["b"], 1e-5)

        def loss_fn(params, x, y):
            b, t = x.shape
            h = params["wte"][x] + params["wpe"][:t]
            for blk in params["h"]:
                qkv = lin(ln(h, blk["ln_1"]), blk["attn"]["c_attn"]).view(b, t, 3, H, -1)
                q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
                att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                h = h + lin(att.transpose(1, 2).reshape(b, t, -1), blk["attn"]["c_proj"])
                m = F.gelu(lin(ln(h, blk["ln_2"]), blk["mlp"]["c_fc"]), approximate="tanh")
                h = h + lin(m, blk["mlp"]["c_proj"])
            logits = ln(h, params["ln_f"]) @ params["wte"].T
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))

        self.loss_fn = torch.compile(loss_fn) if compile_ else loss_fn
        flat = []

        def collect(tree):
            if isinstance(tree, dict):
                for v in tree.values():
                    collect(v)
            elif isinstance(tree, list):
                for v in tree:
                    collect(v)
            else:
                flat.append(tree)

        collect(self.params)
        self.flat = flat
        self.opt = torch.optim.AdamW(
            [{"params": [p for p in flat if p.ndim >= 2], "weight_decay": a.weight_decay},
             {"params": [p for p in flat if p.ndim < 2], "weight_decay": 0.0}],
            lr=a.lr, betas=(a.beta1, a.beta2), eps=1e-8,
        )  # fmt: skip
        self.t, self.loss = 0, float("nan")

    def steps(self, batches) -> None:
        torch = self.torch
        torch.set_num_threads(self.threads)
        for x, y in batches:
            self.t += 1
            for g in self.opt.param_groups:
                g["lr"] = lr_at(self.t, self.a)
            loss = self.loss_fn(self.params, torch.from_numpy(x).long(), torch.from_numpy(y).long())
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.flat, self.a.grad_clip)
            self.opt.step()
        self.loss = float(loss.detach())

    def val_loss(self, batches) -> float:
        torch = self.torch
        with torch.no_grad():
            return float(np.mean([float(self.loss_fn(self.params, torch.from_numpy(x).long(),
                                                     torch.from_numpy(y).long()))
                                  for x, y in batches]))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=700)
    ap.add_argument("--round", type=int, default=50, help="steps of each framework per turn")
    ap.add_argument("--eval-iters", type=int, default=20)
    ap.add_argument("--data", default=None, help="tinyshakespeare.txt (default: as the example)")
    ap.add_argument("--compile", action="store_true", help="also PyTorch with torch.compile")
    ap.add_argument("--profile", metavar="TRACE", default=None,
                    help="after the run, trace 10 more blu steps into TRACE (Chrome trace JSON) "
                         "and print scripts/summarize_trace.py's table: each kernel's rate and "
                         "its fraction of the machine's measured peak")  # fmt: skip
    ap.add_argument("--only", nargs="*", default=None,
                    help="a subset of: blu jax torch torch1 (one thread) compile")  # fmt: skip
    args = ap.parse_args()

    import blu
    from blu.core import pytree
    from examples.gpt2 import model, train

    a = train.build_parser().parse_args(["--config", "small", "--steps", str(args.steps)])
    cfg = model.CONFIGS["small"].with_vocab(65)
    train._fill_defaults(a, cfg)
    batches, val = load_data(1337, args.steps, args.eval_iters, args.data)
    params = pytree.tree_map(np.asarray, model.init_params(cfg, blu.random.key(a.seed)))
    which = args.only or (["blu", "jax", "torch"] + (["compile"] if args.compile else []))
    runs = []
    for w in which:
        if w == "blu":
            runs.append(BluRun(cfg, a, params))
        elif w == "jax":
            runs.append(JaxRun(cfg, a, params))
        elif w in ("torch", "compile"):
            runs.append(TorchRun(cfg, a, params, compile_=w == "compile"))
        elif w == "torch1":  # PyTorch eager on one thread (its workers spin under load)
            runs.append(TorchRun(cfg, a, params, threads=1))
    import torch

    print(f"{os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}; {args.steps} steps "
          f"of {B}x{T} tokens, rounds of {args.round}", flush=True)  # fmt: skip
    first = {r.name: 0.0 for r in runs}
    timed = {r.name: 0.0 for r in runs}
    for k, start in enumerate(range(0, args.steps, args.round)):
        chunk = batches[start : start + args.round]
        for r in runs:
            t0 = time.perf_counter()
            r.steps(chunk)
            dt = time.perf_counter() - t0
            if k == 0:
                first[r.name] = dt
            else:
                timed[r.name] += dt
        print(f"round {k}: " + ", ".join(f"{r.name} loss {r.loss:.3f}" for r in runs), flush=True)
    n_timed = args.steps - min(args.round, args.steps)
    tok = {r.name: n_timed * B * T / timed[r.name] if timed[r.name] else float("nan")
           for r in runs}  # fmt: skip
    ref = tok.get("PyTorch eager")
    print(
        "\n| framework | tokens/s | vs PyTorch eager | first round (compile) | "
        "train loss | val loss |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in runs:
        rel = f"{tok[r.name] / ref:.2f}x" if ref else "-"
        print(f"| {r.name} | {tok[r.name]:,.0f} | {rel} | {first[r.name]:.1f} s | {r.loss:.3f} "
              f"| {r.val_loss(val):.3f} |", flush=True)  # fmt: skip
    blu_run = next((r for r in runs if r.name == "blu"), None)
    if args.profile and blu_run is not None:
        profile(blu_run, batches[:10], args.profile)


def profile(run: BluRun, batches: list, path: str) -> None:
    """Trace ``batches`` of blu steps into ``path`` and print the summary of its kernels."""
    import importlib.util

    import blu

    with blu.profiler.trace(path):
        run.steps(batches)
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts",
                          "summarize_trace.py")  # fmt: skip
    spec = importlib.util.spec_from_file_location("summarize_trace", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    print(f"\nprofile of {len(batches)} blu steps ({path}):")
    print(mod.report(mod.load(path), top=25, n_gaps=3))


if __name__ == "__main__":
    main()
