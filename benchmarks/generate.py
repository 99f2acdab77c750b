"""Text generation with a KV cache: GPT-2 124M, blu's one-program generation loop against
PyTorch (eager and ``torch.compile``) on the same weights. Tokens per second, and how many times
blu's host waited for the GPU per call.

    python benchmarks/generate.py                        # GPU: bf16 and fp32, B 1 and 8
    python benchmarks/generate.py --modes bf16 --batches 1,8 --systems blu-fori,torch
    python benchmarks/generate.py --fill                 # compile blu's programs for cuda:sm_90
                                                         # (the GPU machine has no MLIR)
    python benchmarks/generate.py --config tiny --new 8 --prompt 4 --modes fp32   # CPU smoke

What runs: random GPT-2 weights (``benchmarks/peers/blu_gpt2.host_params``: numpy, seed 0; the
vocabulary padded to 50304, tokens >= 50257 never drawn), a prompt of ``--prompt`` random tokens
per sequence, ``--new`` tokens drawn per sequence with top-k ``--top-k`` at ``--temperature``.
Each system's figure is ``B * new / seconds`` for the median of ``--reps`` whole calls (prefill,
decode steps, sampling, tokens read back to the host) after ``--warmup`` calls.

- ``blu-fori`` / ``blu-while``: ``examples.gpt2.decode.Generator`` (one jitted program: prefill,
  then a ``fori_loop`` (a scan: every step queued, no wait; from the second call a CUDA graph of
  the whole program) or a ``while_loop`` (its predicate read by the host each step) of decode
  steps). ``host syncs``: the waits of one call (device-to-host copies, stream and event
  synchronisations), counted on blu's device object.
- ``torch`` / ``torch-compile``: ``benchmarks/peers/torch_generate.py`` (a static KV cache,
  gpt-fast's way; a Python loop; ``torch.compile(mode="reduce-overhead")`` on the decode step).

Modes: ``fp32`` (parameters float32; blu's products under precision "fp32", PyTorch's TF32 off)
and ``bf16`` (parameters, cache and products in bfloat16; softmax in float32 in both).
Fidelity (``--fidelity``, on by default): greedy decoding (temperature 0) in fp32 at the first
batch size, blu's tokens against PyTorch's eager ones. ``--budget-s``: configurations that would
start after that many seconds are skipped (a GPU run's time is rationed).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import blu  # noqa: E402
import blu.random as random  # noqa: E402
from benchmarks.peers.blu_gpt2 import (  # noqa: E402
    GPT2_TOKENS,
    host_params,
    model_config,
    params_to_named,
    precision_scope,
)
from blu.core import pytree  # noqa: E402
from examples.gpt2.checkpoint import unflatten_named  # noqa: E402
from examples.gpt2.decode import Generator  # noqa: E402
from examples.gpt2.model import init_params  # noqa: E402

SYSTEMS = ("blu-fori", "blu-while", "torch", "torch-compile")
MODES = ("bf16", "fp32")


def _bf16() -> Any:
    import ml_dtypes

    return ml_dtypes.bfloat16


def blu_generator(cfg, a: argparse.Namespace, loop: str, temperature: float) -> Generator:
    return Generator(cfg, a.new, temperature, a.top_k, loop, n_valid=GPT2_TOKENS)


def blu_specs(cfg, mode: str, batch: int, prompt: int) -> tuple:
    """The argument specs of a generator's program: params, prompt, key."""
    S = blu.ShapeDtypeStruct
    dt = _bf16() if mode == "bf16" else np.float32
    params = blu.eval_shape(lambda k: init_params(cfg, k), random.key(0))
    params = pytree.tree_map(lambda s: S(s.shape, dt), params)
    return params, S((batch, prompt), np.int32), S((2,), np.uint32)


def programs(a: argparse.Namespace) -> list[tuple[str, int, str, float]]:
    """``(mode, batch, loop, temperature)`` of every blu program the run asks for."""
    out = []
    if a.fidelity:
        out.append(("fp32", a.batches[0], "fori", 0.0))
    for mode in a.modes:
        for b in a.batches:
            for s in a.systems:
                if s.startswith("blu-"):
                    out.append((mode, b, s[4:], a.temperature))
    return out


def fill(a: argparse.Namespace, target: str = "cuda:sm_90") -> None:
    """Compile every blu program of the run for ``target`` into the cache (``BLU_CACHE_DIR``)."""
    cfg = model_config(a.config)
    for mode, b, loop, temp in programs(a):
        t = time.perf_counter()
        with precision_scope(mode):
            gen = blu_generator(cfg, a, loop, temp)
            gen.fn.lower(*blu_specs(cfg, mode, b, a.prompt), target=target).compile()
        print(f"[generate] {mode} B={b} {loop} temperature {temp}: compiled for {target} "
              f"({time.perf_counter() - t:.0f} s)", flush=True)  # fmt: skip


class SyncCounter:
    """Counts the host's waits on blu's device: ``copy_d2h``, ``synchronize`` and the
    allocator's event waits (wrapped on the device object while counting)."""

    def __init__(self, dev: Any):
        self.dev, self.n, self._depth = dev, 0, 0

    def _wrap(self, obj: Any, name: str) -> None:
        fn = getattr(obj, name)

        def counted(*args, **kw):  # a wait inside a counted wait is the same wait
            self.n += self._depth == 0
            self._depth += 1
            try:
                return fn(*args, **kw)
            finally:
                self._depth -= 1

        setattr(obj, name, counted)

    @contextlib.contextmanager
    def counting(self):
        backing = self.dev.allocator.backing
        targets = [(self.dev, "copy_d2h"), (self.dev, "synchronize"),
                   (backing, "event_synchronize")]  # fmt: skip
        self.n = 0
        for obj, name in targets:
            self._wrap(obj, name)
        try:
            yield self
        finally:
            for obj, name in targets:
                del obj.__dict__[name]


def timed(call, warmup: int, reps: int) -> tuple[float, Any]:
    """Median seconds of ``reps`` calls after ``warmup``; and the last result."""
    out = None
    for _ in range(warmup):
        out = call()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        out = call()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), out


_WEIGHTS: dict[str, dict] = {}


def host_inputs(cfg, a: argparse.Namespace, batch: int) -> tuple[dict, np.ndarray]:
    """The weights (``params.<key path>`` numpy arrays, made once) and a prompt ``(batch, P)``."""
    if a.config not in _WEIGHTS:
        _WEIGHTS[a.config] = params_to_named(host_params(cfg, seed=0))
    named = _WEIGHTS[a.config]
    prompt = np.random.default_rng(1).integers(0, GPT2_TOKENS, (batch, a.prompt)).astype(np.int32)
    return named, prompt


def run_blu(cfg, named, prompt, mode, loop, temp, a) -> dict:
    """One blu program timed; its tokens and host syncs per call."""
    template = blu.eval_shape(lambda k: init_params(cfg, k), random.key(0))
    params = unflatten_named(template, "params", named, "weights")
    if mode == "bf16":
        params = pytree.tree_map(lambda x: np.asarray(x).astype(_bf16()), params)
    gpu = blu.cuda.is_available()
    put = blu.cuda.device_put if gpu else (lambda x: x)
    args = (put(params), put(prompt), put(np.asarray(random.key(a.seed))))
    with precision_scope(mode):
        gen = blu_generator(cfg, a, loop, temp)
        sec, toks = timed(lambda: np.asarray(gen(*args)), a.warmup, a.reps)
        syncs = None
        if gpu:
            counter = SyncCounter(blu.cuda.default_device())
            with counter.counting():
                np.asarray(gen(*args))
            syncs = counter.n
    return dict(sec=sec, tokens=toks, host_syncs=syncs, traces=gen.trace_count)


def run_torch(cfg, named, prompt, mode, temp, compile_: bool, a) -> dict:
    import torch

    from benchmarks.peers.torch_generate import TorchGenerator, make_model

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(a.seed)
    if compile_:
        torch._dynamo.reset()
    dt = torch.bfloat16 if mode == "bf16" else torch.float32
    model = make_model(named, cfg.n_layer, cfg.n_head, cfg.n_ctx, dev, dt)
    gen = TorchGenerator(model, a.new, temp, a.top_k, GPT2_TOKENS, compile=compile_)
    p = torch.from_numpy(prompt).long().to(dev)
    t = time.perf_counter()
    gen(p)  # the first call compiles
    first = time.perf_counter() - t
    sec, toks = timed(lambda: gen(p), a.warmup, a.reps)
    if dev == "cuda":
        torch.cuda.empty_cache()
    return dict(sec=sec, tokens=toks, first_call_s=first)


def fidelity(cfg, a: argparse.Namespace) -> dict:
    """Greedy fp32 tokens of blu (fori) and PyTorch eager at the first batch size."""
    named, prompt = host_inputs(cfg, a, a.batches[0])
    b = run_blu(cfg, named, prompt, "fp32", "fori", 0.0, a)["tokens"]
    t = run_torch(cfg, named, prompt, "fp32", 0.0, False, a)["tokens"]
    same = b == t
    first = [int(np.argmin(r)) if not r.all() else a.new for r in same]
    return dict(kind="fidelity", batch=a.batches[0], agree=int(same.sum()), total=int(same.size),
                first_difference=first)  # fmt: skip


def device_name() -> str:
    if not blu.cuda.is_available():
        return "cpu"
    return getattr(blu.cuda.default_device(), "device_kind", "simulated GPU")


def bench(a: argparse.Namespace) -> list[dict]:
    cfg = model_config(a.config)
    start = time.perf_counter()
    commit = "?"  # a copy of the tree without its .git (the GPU machine's) has no commit
    if (ROOT / ".git").exists():
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip() or "?"  # fmt: skip
    print(f"device {device_name()}; {datetime.date.today()}; commit {commit}; config {a.config}; "
          f"prompt {a.prompt}, {a.new} new tokens, top-k {a.top_k}, temperature "
          f"{a.temperature}; median of {a.reps} calls after {a.warmup}", flush=True)  # fmt: skip
    records = []
    if a.fidelity:
        try:
            r = fidelity(cfg, a)
        except ImportError as e:  # no PyTorch here
            r = dict(kind="fidelity", batch=a.batches[0], agree=0, total=0, first_difference=str(e))
        records.append(r)
        print(f"fidelity (fp32 greedy, B={r['batch']}): {r['agree']}/{r['total']} tokens agree; "
              f"first difference per sequence {r['first_difference']}", flush=True)  # fmt: skip
    print("| system | mode | B | tokens/s | ms per call | host syncs per call |\n"
          "| --- | --- | ---: | ---: | ---: | ---: |", flush=True)  # fmt: skip
    for mode in a.modes:
        for b in a.batches:
            named, prompt = host_inputs(cfg, a, b)
            for s in a.systems:
                if time.perf_counter() - start > a.budget_s:
                    print(f"| {s} | {mode} | {b} | skipped (budget) | | |", flush=True)
                    continue
                try:
                    if s.startswith("blu-"):
                        r = run_blu(cfg, named, prompt, mode, s[4:], a.temperature, a)
                    else:
                        r = run_torch(cfg, named, prompt, mode, a.temperature,
                                      s == "torch-compile", a)  # fmt: skip
                except Exception as e:  # noqa: BLE001 - report and go on
                    msg = f"{type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
                    print(f"| {s} | {mode} | {b} | failed: {msg} | | |", flush=True)
                    continue
                tps = b * a.new / r["sec"]
                syncs = r.get("host_syncs")
                print(f"| {s} | {mode} | {b} | {tps:,.0f} | {r['sec'] * 1e3:.1f} | "
                      f"{'-' if syncs is None else syncs} |", flush=True)  # fmt: skip
                r.pop("tokens")
                records.append(dict(system=s, mode=mode, batch=b, tokens_per_s=tps, **r))
    return records


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="gpt2-124m")
    p.add_argument("--batches", default="1,8", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--prompt", type=int, default=64, help="prompt tokens (default 64)")
    p.add_argument("--new", type=int, default=256, help="tokens drawn per sequence (default 256)")
    p.add_argument("--top-k", type=int, default=50)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--modes", default=",".join(MODES), type=lambda s: s.split(","))
    p.add_argument("--systems", default=",".join(SYSTEMS), type=lambda s: s.split(","))
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-fidelity", dest="fidelity", action="store_false")
    p.add_argument("--budget-s", type=float, default=1e9, help="skip what would start later")
    p.add_argument("--json", default="", help="also write the records to this file")
    p.add_argument("--fill", action="store_true", help="compile for cuda:sm_90 and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    bad = [m for m in a.modes if m not in MODES] + [s for s in a.systems if s not in SYSTEMS]
    if bad:
        print(f"unknown mode or system {bad}: modes {MODES}, systems {SYSTEMS}", file=sys.stderr)
        return 2
    if a.fill:
        fill(a)
        return 0
    records = bench(a)
    if a.json:
        Path(a.json).write_text(json.dumps(records, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
