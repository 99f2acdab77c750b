"""Every distributed mode on the CPU (DP, ZeRO-1, FSDP, TP, PP and a 2-D DP x TP mesh):
per-device peak memory (plan) and step time of a tiny GPT-2's training step, on 4 virtual
devices (one process) and on 4 MPI processes.

    python benchmarks/parallel_cpu.py [--devices 4] [--steps 5] [--no-mpi] [--modes dp,tp,pp]

Memory: ``memory_analysis()`` of the program one device runs (traced as a process of an
N-process job; arguments = parameters + optimizer state + its batch; peak = most bytes live
at once). Step time: the median of ``--steps`` steps after one warm-up (compile) step; the
virtual devices run all N devices' work in this one process, the MPI processes one each (the
machine's cores are shared by all of them). Needs ``pip install 'blu[mpi]'`` for the MPI
column.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# mode -> (kind, mesh axis sizes at N devices)
MODES = {
    "single": ("single", None),
    "dp": ("dp", lambda n: {"data": n}),
    "zero1": ("zero1", lambda n: {"data": n}),
    "fsdp": ("fsdp", lambda n: {"data": n}),
    "tp": ("tp", lambda n: {"model": n}),
    "pp": ("pp", lambda n: {"pipe": n}),
    "dp_tp": ("tp", lambda n: {"data": 2, "model": n // 2}),
}
NAMES = {"single": "1 device", "dp": "DP", "zero1": "ZeRO-1", "fsdp": "FSDP (ZeRO-3)",
         "tp": "TP (Megatron)", "pp": "PP (1F1B)", "dp_tp": "2-D: DP 2 x TP"}  # fmt: skip
MICRO = 4  # micro-batches per device for PP


def config():
    from examples.gpt2.data import CharTokenizer
    from examples.parallel import data_parallel as dp

    tok = CharTokenizer.from_text(dp.TEXT)
    return dp.GPTConfig(4, 4, 64, 32, vocab_size=tok.vocab_size), tok.encode(dp.TEXT)


def time_mode(mode: str, n: int, steps: int, batch: int) -> float:
    """Median seconds of a training step (after one warm-up step)."""
    import numpy as np

    import blu.random as random
    from blu import parallel as bp
    from blu.parallel import NamedSharding
    from examples.parallel import data_parallel as dp
    from examples.parallel import gpt2

    cfg, tokens = config()
    data = dp.batches(tokens, batch, cfg.n_ctx)
    kind, sizes = MODES[mode]
    if kind == "single":
        params = dp.init_params(cfg, random.key(0))
        opt = dp.make_optimizer(params)
        state, step, mesh = opt.init(params), dp.make_single_device_step(cfg, opt), None
    else:
        params, state, step, spec, mesh = gpt2.make(cfg, kind, sizes(n), micro_batches=MICRO)
    times = []
    for _ in range(steps + 1):
        x, y = next(data)
        if mesh is not None:
            x = bp.device_put(x, NamedSharding(mesh, spec))
            y = bp.device_put(y, NamedSharding(mesh, spec))
        t0 = time.perf_counter()
        params, state, loss = step(params, state, x, y)
        np.asarray(loss)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def memory(mode: str, n: int, batch: int):
    """The planned memory of one device's step (``memory_analysis()``)."""
    from examples.parallel import fsdp as fs
    from examples.parallel import megatron as mg
    from examples.parallel import pipeline as pl

    cfg, _ = config()
    kind, sizes = MODES[mode]
    if kind == "single":
        return fs.per_device_memory(cfg, 1, batch, "dp")
    sz = sizes(n)
    local = batch // sz.get("data", 1)
    if kind == "tp":
        return mg.per_device_memory(cfg, sz, local)
    if kind == "pp":
        return pl.per_device_memory(cfg, sz, local, MICRO)
    return fs.per_device_memory(cfg, n, local, kind)


def worker(out: str, steps: int, batch: int, modes: list[str]) -> None:
    """One MPI rank: time every sharded mode; rank 0 writes the times."""
    from blu import parallel as bp

    bp.initialize()
    n = bp.process_count()
    res = {m: time_mode(m, n, steps, batch) for m in modes if m != "single"}
    if bp.process_index() == 0:
        Path(out).write_text(json.dumps(res))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=16, help="global batch")
    ap.add_argument("--no-mpi", action="store_true")
    ap.add_argument("--modes", default=",".join(MODES), help="a subset of " + ",".join(MODES))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.steps, a.batch, a.modes.split(","))
    n = a.devices
    modes = a.modes.split(",")
    os.environ["BLU_NUM_CPU_DEVICES"] = str(n)
    cfg, _ = config()
    mem = {m: memory(m, n, a.batch) for m in modes}
    virt = {m: time_mode(m, n, a.steps, a.batch) for m in modes}
    mpi_t: dict = {}
    if not a.no_mpi:
        from blu.parallel import mpi

        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "times.json")
            cmd = [sys.executable, "-m", "blu.parallel.launch", "--nproc", str(n), "--backend",
                   "mpi", __file__, "--worker", out, "--steps", str(a.steps), "--batch",
                   str(a.batch), "--modes", a.modes]  # fmt: skip
            env = dict(os.environ, PYTHONPATH=str(ROOT))
            env.pop("BLU_NUM_CPU_DEVICES")
            if mpi.available():
                subprocess.run(cmd, env=env, check=True, timeout=1800)
                mpi_t = json.loads(Path(out).read_text())
    mib = lambda b: f"{b / 2**20:.2f}"  # noqa: E731
    print(f"tiny GPT-2 {cfg.n_layer}x{cfg.d_model}, ctx {cfg.n_ctx}, global batch {a.batch}; "
          f"{n} devices; {os.cpu_count()} CPU cores")  # fmt: skip
    print("| mode | args MiB/device | peak MiB/device (plan) | step ms, 4 virtual devices "
          "| step ms, 4 MPI processes |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: |")
    for m in modes:
        t = f"{mpi_t[m] * 1e3:.1f}" if m in mpi_t else "-"
        print(f"| {NAMES[m]} | {mib(mem[m].argument_bytes)} | {mib(mem[m].peak_bytes)} | "
              f"{virt[m] * 1e3:.1f} | {t} |")  # fmt: skip
    if "pp" in modes:
        from blu.parallel.pipeline import schedule_1f1b

        print(f"PP: {n} stages, {MICRO} micro-batches, bubble fraction "
              f"{schedule_1f1b(n, MICRO).bubble_fraction:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
