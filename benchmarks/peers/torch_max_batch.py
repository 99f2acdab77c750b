"""The largest GPT-2 124M batch PyTorch trains (one step: forward, backward, AdamW) on one GPU,
searched inside one process per system (``--compile``: torch.compile) for every mode, so the
search costs one start-up and, for torch.compile, few recompilations (after the second batch
size PyTorch compiles the batch dimension as dynamic).

    python3 benchmarks/peers/torch_max_batch.py [--compile] [--modes fp32,tf32,bf16]
        [--start fp32=120,bf16=150] [--limit 1024] [--json out.json]

Each try builds fresh weights and an optimizer, runs two steps at the batch and records
``torch.cuda.max_memory_allocated()``; an out-of-memory error is a failed try (the caching
allocator is emptied after each). The search gallops from ``--start`` by doubling, then
bisects to the exact boundary. In one process the allocator may fragment after a failure, so
the figure is a lower bound on what a fresh process could reach (at most a few sequences).
Model and modes as ``torch_gpt2.py`` (fp32; tf32: TF32 products; bf16: autocast, fp32 master
weights).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from torch_gpt2 import GPT, make_optimizer  # noqa: E402


def try_batch(b: int, mode: str, compile_: bool, t: int = 1024, vocab: int = 50304) -> tuple:
    torch.backends.cuda.matmul.allow_tf32 = mode != "fp32"
    torch.backends.cudnn.allow_tf32 = mode != "fp32"
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    m = opt = step_fn = None
    try:
        m = GPT(vocab, 12, 12, 768, t).cuda()
        opt = make_optimizer(m)
        step_fn = torch.compile(m) if compile_ else m
        x = torch.randint(0, vocab, (b, t), device="cuda")
        y = torch.randint(0, vocab, (b, t), device="cuda")
        for _ in range(2):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "bf16"):
                loss = step_fn(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return True, torch.cuda.max_memory_allocated()
    except torch.OutOfMemoryError:
        return False, None
    finally:
        del m, opt, step_fn
        gc.collect()
        torch.cuda.empty_cache()


def search(mode: str, compile_: bool, start: int, limit: int) -> dict:
    lo, hi, tries, b = 0, limit + 1, [], start
    while hi - lo > 1:
        b = min(max(b, lo + 1), hi - 1)
        t0 = time.time()
        ok, peak = try_batch(b, mode, compile_)
        tries.append([b, ok, None if peak is None else round(peak / 2**30, 2),
                      round(time.time() - t0, 1)])  # fmt: skip
        print(f"  {mode} B={b}: {'ok' if ok else 'out of memory'}"
              + (f", peak {peak / 2**30:.2f} GiB" if ok else ""), flush=True)  # fmt: skip
        if ok:
            lo = b
            b = b * 2 if hi > limit else (lo + hi) // 2
        else:
            hi = b
            b = (lo + hi) // 2
    return {"mode": mode, "max_batch": lo, "tries": tries}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--modes", default="fp32,tf32,bf16")
    ap.add_argument("--start", default="", help="per mode, e.g. fp32=120,bf16=150 (default 64)")
    ap.add_argument("--limit", type=int, default=1024)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    starts = dict(kv.split("=") for kv in a.start.split(",") if kv)
    system = "torch-compile" if a.compile else "torch"
    out = []
    for mode in a.modes.split(","):
        print(f"{system} {mode}:", flush=True)
        r = search(mode, a.compile, int(starts.get(mode, 64)), a.limit)
        r["system"] = system
        out.append(r)
        print(f"{system} {mode}: largest batch {r['max_batch']} x 1024", flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
