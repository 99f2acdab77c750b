"""Data parallelism, ZeRO-1 and FSDP on the CPU: per-device peak memory (plan) and step time of
a tiny GPT-2's training step, on 4 virtual devices (one process) and on 4 MPI processes.

    python benchmarks/parallel_cpu.py [--devices 4] [--steps 5] [--no-mpi]

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

MODES = ("single", "dp", "zero1", "fsdp")


def config():
    from examples.gpt2.data import CharTokenizer
    from examples.parallel import data_parallel as dp

    tok = CharTokenizer.from_text(dp.TEXT)
    return dp.GPTConfig(2, 2, 64, 32, vocab_size=tok.vocab_size), tok.encode(dp.TEXT)


def time_mode(mode: str, n: int, steps: int, batch: int) -> float:
    """Median seconds of a training step (after one warm-up step)."""
    import numpy as np

    import blu.random as random
    from blu import parallel as bp
    from blu.core import pytree
    from blu.parallel import NamedSharding, P
    from examples.parallel import data_parallel as dp
    from examples.parallel import fsdp as fs

    cfg, tokens = config()
    data = dp.batches(tokens, batch, cfg.n_ctx)
    if mode == "single":
        params = dp.init_params(cfg, random.key(0))
        opt = dp.make_optimizer(params)
        state, step, mesh = opt.init(params), dp.make_single_device_step(cfg, opt), None
    else:
        mesh = bp.make_mesh((n,), ("data",))
        if mode == "fsdp":
            params, state, _, _, step = fs.setup(cfg, mesh)
        else:
            params = dp.init_params(cfg, random.key(0))
            opt = dp.make_optimizer(params)
            params = bp.device_put(params, NamedSharding(mesh, P()))
            if mode == "zero1":
                state = dp.zero1_init(opt, params, n)
                specs = dp.zero1_specs(state)
                state = bp.device_put(
                    state,
                    pytree.tree_map(
                        lambda s: NamedSharding(mesh, s), specs, is_leaf=lambda s: isinstance(s, P)
                    ),
                )
            else:
                state = bp.device_put(opt.init(params), NamedSharding(mesh, P()))
            step = dp.make_train_step(cfg, opt, mesh, mode == "zero1", state)
    times = []
    for _ in range(steps + 1):
        x, y = next(data)
        if mesh is not None:
            x = bp.device_put(x, NamedSharding(mesh, P("data")))
            y = bp.device_put(y, NamedSharding(mesh, P("data")))
        t0 = time.perf_counter()
        params, state, loss = step(params, state, x, y)
        np.asarray(loss)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def worker(out: str, steps: int, batch: int) -> None:
    """One MPI rank: time every sharded mode; rank 0 writes the times."""
    from blu import parallel as bp

    bp.initialize()
    n = bp.process_count()
    res = {m: time_mode(m, n, steps, batch) for m in MODES if m != "single"}
    if bp.process_index() == 0:
        Path(out).write_text(json.dumps(res))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=16, help="global batch")
    ap.add_argument("--no-mpi", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.steps, a.batch)
    n = a.devices
    os.environ["BLU_NUM_CPU_DEVICES"] = str(n)
    from examples.parallel import fsdp as fs

    cfg, _ = config()
    mem = {"single": fs.per_device_memory(cfg, 1, a.batch, "dp")}
    for m in MODES[1:]:
        mem[m] = fs.per_device_memory(cfg, n, a.batch // n, m)
    virt = {m: time_mode(m, n, a.steps, a.batch) for m in MODES}
    mpi_t: dict = {}
    if not a.no_mpi:
        from blu.parallel import mpi

        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "times.json")
            cmd = [sys.executable, "-m", "blu.parallel.launch", "--nproc", str(n), "--backend",
                   "mpi", __file__, "--worker", out, "--steps", str(a.steps), "--batch",
                   str(a.batch)]  # fmt: skip
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
    names = {"single": "1 device", "dp": "DP", "zero1": "ZeRO-1", "fsdp": "FSDP (ZeRO-3)"}
    for m in MODES:
        t = f"{mpi_t[m] * 1e3:.1f}" if m in mpi_t else "-"
        print(f"| {names[m]} | {mib(mem[m].argument_bytes)} | {mib(mem[m].peak_bytes)} | "
              f"{virt[m] * 1e3:.1f} | {t} |")  # fmt: skip


if __name__ == "__main__":
    main()
