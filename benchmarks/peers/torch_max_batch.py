"""The largest batch PyTorch trains (one step: forward, backward, AdamW) on one GPU, for any
config the example knows (GPT-2 124M by default; ``--config llama-1b --T 2048``, ``--config
gpt2-1.5b``, ``--config gpt2-124m --T 8192 --n-ctx 8192``), searched inside one process per
system (``--compile``: torch.compile) for every mode, so the search costs one start-up and, for
torch.compile, one compilation (the batch dimension marked dynamic, as PyTorch compiles it after
a second batch size).

    python3 benchmarks/peers/torch_max_batch.py [--compile] [--config C] [--T T] [--n-ctx N]
        [--modes fp32,tf32,bf16] [--start bf16=40] [--limit 1024] [--json out.json]

Each mode builds the weights, an AdamW optimizer and (``--compile``) the compiled model once
(the model of ``torch_gpt2.py``, or of ``torch_llama.py`` for a ``llama-*`` config, sized as
``benchmarks/gpt2_124m.py`` sizes it); each try runs two steps at its batch and records
``torch.cuda.max_memory_allocated()``, which counts the weights and the optimizer's state; an
out-of-memory error is a failed try (gradients dropped and the caching allocator emptied after
each). The search starts at
``--start`` (default 8) and is ``max_batch.search_guided``'s: the line through the fitting
tries' peaks names the next try, bisection brackets the exact boundary. In one process the
allocator may fragment after a failure, so the figure is a lower bound on what a fresh process
could reach (at most a few sequences). Modes as ``torch_gpt2.py`` (fp32; tf32: TF32 products;
bf16: autocast, fp32 master weights).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(1, os.path.dirname(os.path.dirname(_HERE)))  # the repo root: the configs

from max_batch import search_guided  # noqa: E402
from torch_gpt2 import build_model, build_parser, make_optimizer  # noqa: E402


def model_args(config: str, n_ctx: int | None, vocab: int | None = None) -> argparse.Namespace:
    """``torch_gpt2.py``'s model flags for an example config (``vocab``: default the one the
    benchmark gives the config, GPT-2's 50,304 or Llama 3's 128,256, padded as it pads it;
    ``n_ctx``: the position table's rows if not the config's)."""
    from benchmarks.peers.bench_cli import default_vocab, model_dims

    vocab = default_vocab(config) if vocab is None else vocab
    argv = []
    for k, v in model_dims(config, vocab, n_ctx).items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    return build_parser().parse_args(argv)


class Trainer:
    """One model, optimizer and (with ``compile_``) compiled step, built once per mode and
    reused by every try: torch.compile compiles once (the batch dimension marked dynamic), so a
    try after the first costs two steps, not a compilation."""

    def __init__(self, mode: str, compile_: bool, model: argparse.Namespace):
        torch.backends.cuda.matmul.allow_tf32 = mode != "fp32"
        torch.backends.cudnn.allow_tf32 = mode != "fp32"
        self.mode, self.compile_, self.vocab = mode, compile_, model.vocab
        self.m = build_model(model).cuda()
        self.opt = make_optimizer(self.m)
        self.step_fn = torch.compile(self.m) if compile_ else self.m

    def try_batch(self, b: int, t: int) -> tuple:
        """Two training steps at batch ``b`` of ``t`` tokens: ``(fitted, peak bytes or None)``;
        the peak counts the weights and the optimizer's state, as a fresh process would."""
        self.opt.zero_grad(set_to_none=True)
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        x = y = loss = None
        try:
            x = torch.randint(0, self.vocab, (b, t), device="cuda")
            y = torch.randint(0, self.vocab, (b, t), device="cuda")
            if self.compile_:  # one compilation for every try (as PyTorch does after a second size)
                torch._dynamo.mark_dynamic(x, 0)
                torch._dynamo.mark_dynamic(y, 0)
            for _ in range(2):
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.mode == "bf16"):
                    loss = self.step_fn(x, y)
                loss.backward()
                loss = None
                self.opt.step()
                self.opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            return True, torch.cuda.max_memory_allocated()
        except torch.OutOfMemoryError:
            return False, None
        finally:
            del x, y, loss
            self.opt.zero_grad(set_to_none=True)
            gc.collect()
            torch.cuda.empty_cache()


def search(mode: str, compile_: bool, start: int, limit: int, model: argparse.Namespace,
           t: int, margin: float) -> dict:  # fmt: skip
    """The largest batch that trains, by ``max_batch.search_guided`` (the line through the
    fitting tries' peaks guides the next try; the answer is bracketed exactly)."""
    tries = []
    trainer = Trainer(mode, compile_, model)

    def one(b: int) -> tuple:
        t0 = time.time()
        ok, peak = trainer.try_batch(b, t)
        tries.append([b, ok, None if peak is None else round(peak / 2**30, 2),
                      round(time.time() - t0, 1)])  # fmt: skip
        print(f"  {mode} B={b}: {'ok' if ok else 'out of memory'}"
              + (f", peak {peak / 2**30:.2f} GiB" if ok else ""), flush=True)  # fmt: skip
        return ok, peak

    budget = torch.cuda.mem_get_info()[1] - margin
    found = search_guided(one, budget, start=min(start, limit), limit=limit)
    return {"mode": mode, "max_batch": found["max_batch"], "at_limit": found["at_limit"],
            "tries": tries}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--config", default="gpt2-124m", help="an example config (examples/gpt2)")
    ap.add_argument("--T", type=int, default=1024, help="tokens per sequence")
    ap.add_argument("--n-ctx", type=int, default=None, help="position rows, if not the config's")
    ap.add_argument("--vocab", type=int, default=None,
                    help="vocabulary (default: the benchmark's for the config)")  # fmt: skip
    ap.add_argument("--modes", default="fp32,tf32,bf16")
    ap.add_argument("--start", default="", help="per mode, e.g. fp32=20,bf16=40 (default 8)")
    ap.add_argument("--limit", type=int, default=1024)
    ap.add_argument(
        "--margin-gib",
        type=float,
        default=2.0,
        help="memory left free by the guide's line (the benchmark's margin)",
    )
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    model = model_args(a.config, a.n_ctx, a.vocab)
    if a.T > model.n_ctx:
        ap.error(f"--T {a.T} exceeds the config's context {model.n_ctx} (pass --n-ctx)")
    starts = dict(kv.split("=") for kv in a.start.split(",") if kv)
    system = "torch-compile" if a.compile else "torch"
    out = []
    for mode in a.modes.split(","):
        print(f"{system} {a.config} T={a.T} {mode}:", flush=True)
        r = search(
            mode, a.compile, int(starts.get(mode, 8)), a.limit, model, a.T, a.margin_gib * 2**30
        )
        gc.collect()  # the mode's trainer is gone with search's frame: free its memory
        torch.cuda.empty_cache()
        r.update(system=system, config=a.config, T=a.T, device=torch.cuda.get_device_name(),
                 version=torch.__version__)  # fmt: skip
        out.append(r)
        print(f"{system} {a.config} {mode}: largest batch {r['max_batch']} x {a.T}", flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
