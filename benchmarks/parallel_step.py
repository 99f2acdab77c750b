"""The GPT-2 training step partitioned by ``jit``'s shardings, against the same step unpartitioned.

    python benchmarks/parallel_step.py --config gpt2-124m --mode bf16 --B 16 --T 1024
    python benchmarks/parallel_step.py --fill-cache      # (here: compile every kernel, AOT)

The step is the GPT-2 benchmark's (``benchmarks/peers/blu_gpt2.py``: the example's jitted
``value_and_grad`` + global norm + AdamW, parameters and optimizer state donated). Each layout
is that function under ``blu.jit(..., in_shardings=..., out_shardings=...)`` and nothing else:

- ``single``: no shardings (the one-device program);
- ``dp``: parameters and optimizer state replicated, the batch split over ``data``;
- ``fsdp``: every parameter and moment split on its first dimension over ``data`` (ZeRO-3:
  gathered where used, gradients reduce-scattered, the update computed split);
- ``tp``: Megatron's layout over ``model`` (``c_attn`` / ``c_fc`` split by columns, ``c_proj``
  by rows), the batch over ``data``.

On the GPU machine (one H200) the job is a world of one process over NCCL
(``blu.parallel.initialize``): the mesh has one device, so the partitioner inserts no
collective and each layout should run as the single-device step. It prints one JSON line per
layout: tokens/s from the median step, peak memory, the host's median time per call, and the
device-to-host copies made during the timed steps (counted at the device's ``copy_d2h``: the
loss is read only after the timing), then a table. Then, for the speed comparison, every layout
is built again and kept alive while their steps are timed in turns (``--rounds`` rounds of
``--steps`` steps, the order rotated): a drift of the GPU's clocks over the run then falls on
all of them alike (H200 timings move by several percent between calls).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

LAYOUTS = ("single", "dp", "fsdp", "tp")


def shardings(layout: str, params: Any, state: Any) -> tuple[Any, Any]:
    """``(in_shardings, out_shardings)`` of the step ``(params, state, xs, ys, key) -> (params,
    state, loss, grad_norm)`` for ``layout`` on a mesh of all devices (``xs``: (1, B, T))."""
    import blu
    from blu import parallel as bp
    from blu.core import pytree
    from blu.parallel import NamedSharding, P

    n = len(blu.devices()) if not bp.is_initialized() else bp.process_count()
    if layout == "tp":
        mesh = bp.make_mesh((1, n), ("data", "model"))
    else:
        mesh = bp.make_mesh((n,), ("data",))
    rep = NamedSharding(mesh, P())
    batch = NamedSharding(mesh, P(None, "data"))

    def fsdp(p):
        return NamedSharding(mesh, P("data")) if np.ndim(p) and np.shape(p)[0] % n == 0 else rep

    def megatron(path, p):
        keys = [str(getattr(k, "key", getattr(k, "idx", k))) for k in path]
        if "c_attn" in keys or "c_fc" in keys:
            return NamedSharding(mesh, P(None, "model") if keys[-1] == "w" else P("model"))
        if "c_proj" in keys and keys[-1] == "w":
            return NamedSharding(mesh, P("model", None))
        return rep

    if layout == "dp":
        return (rep, rep, batch, batch, rep), None
    spec = (
        (lambda t: pytree.tree_map(fsdp, t))
        if layout == "fsdp"
        else (lambda t: pytree.tree_map_with_path(megatron, t))
    )
    ps = spec(params)
    ss = type(state)(*[spec(f) if isinstance(f, dict) else rep for f in state])
    return (ps, ss, batch, batch, rep), (ps, ss, rep, rep)


def step_for(layout: str, base: Any, params: Any, state: Any) -> Any:
    import blu

    if layout == "single":
        return base
    ins, outs = shardings(layout, params, state)
    return blu.jit(base.fun, donate_argnums=(0, 1), in_shardings=ins, out_shardings=outs)


class D2HCounter:
    """Counts ``copy_d2h`` calls on the GPU device while active."""

    def __init__(self) -> None:
        import blu.cuda as bc

        self.dev = bc.default_device()
        self.n = 0
        self._orig = self.dev.copy_d2h

    def __enter__(self) -> D2HCounter:
        def counted(dst, src):
            self.n += 1
            return self._orig(dst, src)

        self.dev.copy_d2h = counted
        return self

    def __exit__(self, *exc: Any) -> None:
        del self.dev.copy_d2h  # (the instance attribute; the class's method again)


def run_layout(layout: str, a: argparse.Namespace) -> dict:
    import blu_gpt2 as bg

    import blu
    import blu.cuda as bc

    cfg = bg.model_config(a.config, a.vocab)
    base = bg.train_step(cfg, a.mode)
    params = bg.host_params(cfg, 0, "numpy")
    state = bg.host_opt_state(params)
    step = step_for(layout, base, params, state)
    rng = np.random.default_rng(1)
    x = rng.integers(0, cfg.vocab_size, (1, a.B, a.T), dtype=np.int32)
    y = rng.integers(0, cfg.vocab_size, (1, a.B, a.T), dtype=np.int32)
    key = np.zeros(2, np.uint32)
    params, state, x, y, key = bg.to_run_device((params, state, x, y, key))
    times, host, losses = [], [], []
    with bg.precision_scope(a.mode):
        for _ in range(a.warmup):
            params, state, loss, _ = step(params, state, x, y, key)
            losses.append(loss)
        loss.block_until_ready()
        bc.reset_peak_memory_stats()
        with D2HCounter() as d2h:
            for _ in range(a.steps):
                t = time.perf_counter()
                params, state, loss, _ = step(params, state, x, y, key)
                host.append(time.perf_counter() - t)
                loss.block_until_ready()
                times.append(time.perf_counter() - t)
                losses.append(loss)
        if layout in a.profile_host.split(","):  # the host's share of a call, by function
            import cProfile
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            for _ in range(5):
                params, state, loss, _ = step(params, state, x, y, key)
                loss.block_until_ready()
            prof.disable()
            pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(12)
    med = statistics.median(times)
    stats = bc.memory_stats()
    return dict(
        layout=layout,
        mode=a.mode,
        B=a.B,
        T=a.T,
        tok_s=round(a.B * a.T / med),
        step_ms=round(med * 1e3, 2),
        host_ms=round(statistics.median(host) * 1e3, 2),
        peak_GiB=round(stats["peak_allocated_bytes"] / 2**30, 3),
        d2h_copies=d2h.n,
        losses=[round(float(np.asarray(blu.device_get(v))), 4) for v in losses],
        device=bg.device_name(),
    )


def interleaved(a: argparse.Namespace, layouts: list[str]) -> dict[str, list[float]]:
    """Step times of every layout, alive together and timed in turns (``--rounds`` rounds of
    ``--steps`` steps, the order rotated each round), so that a drift of the GPU's clocks or
    of the host's load over the run falls on every layout alike."""
    import blu_gpt2 as bg

    cfg = bg.model_config(a.config, a.vocab)
    base = bg.train_step(cfg, a.mode)
    rng = np.random.default_rng(1)
    x = rng.integers(0, cfg.vocab_size, (1, a.B, a.T), dtype=np.int32)
    y = rng.integers(0, cfg.vocab_size, (1, a.B, a.T), dtype=np.int32)
    runs = {}
    with bg.precision_scope(a.mode):
        for layout in layouts:
            params = bg.host_params(cfg, 0, "numpy")
            state = bg.host_opt_state(params)
            step = step_for(layout, base, params, state)
            args = list(bg.to_run_device((params, state, x, y, np.zeros(2, np.uint32))))
            for _ in range(a.warmup):
                args[0], args[1], loss, _ = step(*args)
            loss.block_until_ready()
            runs[layout] = (step, args)
        times: dict[str, list[float]] = {k: [] for k in layouts}
        for r in range(a.rounds):
            for layout in layouts[r % len(layouts) :] + layouts[: r % len(layouts)]:
                step, args = runs[layout]
                for _ in range(a.steps):
                    t = time.perf_counter()
                    args[0], args[1], loss, _ = step(*args)
                    loss.block_until_ready()
                    times[layout].append(time.perf_counter() - t)
    return times


def fill_cache(a: argparse.Namespace) -> None:
    """Compile every layout's program for ``a.target`` (no GPU needed: ``BLU_FAKE_GPU=1``)."""
    import blu_gpt2 as bg

    cfg = bg.model_config(a.config, a.vocab)
    base = bg.train_step(cfg, a.mode)
    specs = bg.step_specs(cfg, a.B, a.T)
    with bg.precision_scope(a.mode):
        for layout in a.layouts.split(","):
            t = time.perf_counter()
            step_for(layout, base, specs[0], specs[1]).lower(*specs, target=a.target).compile()
            print(f"[fill] {layout}: {time.perf_counter() - t:.0f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="gpt2-124m")
    ap.add_argument("--mode", default="bf16", choices=("fp32", "tf32", "bf16"))
    ap.add_argument("--B", type=int, default=16)
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (0: none)")
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    ap.add_argument("--backend", default=None, help="blu.parallel.initialize's (default: nccl)")
    ap.add_argument("--fill-cache", action="store_true")
    ap.add_argument("--profile-host", default="", help="layouts whose calls cProfile prints")
    ap.add_argument("--target", default="cuda:sm_90")
    a = ap.parse_args(argv)

    from blu import parallel as bp

    bp.initialize(backend=a.backend)  # a world of one (or one process per GPU)
    if a.fill_cache:
        fill_cache(a)
        return 0
    rows = []
    for layout in a.layouts.split(","):
        rows.append(run_layout(layout, a))
        import gc

        import blu

        blu.clear_caches()  # the previous layout's executables (their arenas) go: each peak
        gc.collect()  # is its own layout's
        print(json.dumps(rows[-1]), flush=True)
    if a.rounds:
        times = interleaved(a, [r["layout"] for r in rows])
        for r in rows:
            med = statistics.median(times[r["layout"]])
            r["tok_s_interleaved"] = round(a.B * a.T / med)
            print(json.dumps({"layout": r["layout"], "interleaved_step_ms": round(med * 1e3, 2)}))
    ref = next((r for r in rows if r["layout"] == "single"), rows[0])
    if a.rounds:
        print(f"\ninterleaved ({a.rounds} rounds of {a.steps} steps, the layouts alive together):")
        for r in rows:
            ratio = r["tok_s_interleaved"] / ref["tok_s_interleaved"]
            print(f"{r['layout']:8} {r['tok_s_interleaved']:>9} {ratio:>9.3f}")
    print(
        f"\n{'layout':8} {'tok/s':>9} {'vs single':>9} {'step ms':>8} {'host ms':>8} "
        f"{'peak GiB':>8} {'D2H':>4}  device {ref['device']}"
    )
    for r in rows:
        print(
            f"{r['layout']:8} {r['tok_s']:>9} {r['tok_s'] / ref['tok_s']:>9.3f} "
            f"{r['step_ms']:>8} {r['host_ms']:>8} {r['peak_GiB']:>8} {r['d2h_copies']:>4}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
