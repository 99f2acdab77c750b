"""GPT-2 training in every distributed mode, chosen by flags: data parallelism (DP), ZeRO-1,
FSDP, Megatron tensor parallelism (TP, with ``--sequence-parallel``), 1F1B pipeline parallelism
(PP) and 2-D meshes (DP x TP, DP x PP).

    --mesh data=4                    DP (the default: every device on the data axis)
    --mesh data=4 --zero1            ZeRO-1            --mesh data=4 --fsdp   FSDP (ZeRO-3)
    --mesh model=4                   TP                --mesh data=2,model=2  DP x TP
    --pipeline 4                     PP (4 stages)     --pipeline 2 --mesh data=2   DP x PP

    BLU_NUM_CPU_DEVICES=4 python -m examples.parallel.gpt2 --mesh data=2,model=2 --steps 20
    python -m blu.parallel.launch --nproc 4 --backend mpi examples/parallel/gpt2.py --pipeline 4

The mesh's size must be the number of devices (virtual CPU devices, or processes). Every mode
trains the same model on the same global batches as one device does (the tests check the loss
curves agree).
"""

from __future__ import annotations

import sys
import time

import numpy as np

from blu import parallel as bp
from blu.parallel import NamedSharding
from examples.gpt2.model import GPTConfig
from examples.parallel import data_parallel as dp
from examples.parallel import fsdp as fs
from examples.parallel import megatron as mg
from examples.parallel import pipeline as pl


def parse_mesh(text: str | None, pipeline: int, n_devices: int) -> dict[str, int]:
    """``"data=2,model=2"`` -> ``{"data": 2, "model": 2}`` (with ``pipe`` added for
    ``--pipeline``); the default puts every device on ``data`` (or ``pipe``)."""
    sizes: dict[str, int] = {}
    for part in (text or "").split(","):
        if part.strip():
            k, _, v = part.partition("=")
            if k.strip() not in ("data", "model"):
                raise ValueError(f"--mesh: unknown axis {k.strip()!r} (data, model)")
            sizes[k.strip()] = int(v)
    if pipeline > 1:
        if "model" in sizes:
            raise ValueError("--pipeline with a model axis (3-D meshes) is not supported here")
        sizes["pipe"] = pipeline
    if not sizes:
        sizes = {"data": n_devices}
    if int(np.prod(list(sizes.values()))) != n_devices:
        raise ValueError(f"--mesh {sizes} holds {int(np.prod(list(sizes.values())))} devices, "
                         f"but there are {n_devices}")  # fmt: skip
    return sizes


def mode_of(sizes: dict[str, int], fsdp: bool = False, zero1: bool = False) -> str:
    if "pipe" in sizes:
        return "pp"
    if "model" in sizes:
        return "tp"
    return "fsdp" if fsdp else "zero1" if zero1 else "dp"


def make(cfg: GPTConfig, mode: str, sizes: dict, lr: float = 3e-3, seed: int = 0,
         micro_batches: int = 2, sequence_parallel: bool = False):  # fmt: skip
    """``(params, state, step, batch_spec, mesh)`` for a mode on a mesh of ``sizes``."""
    import blu.random as random
    from blu.parallel import P

    mesh = bp.make_mesh(tuple(sizes.values()), tuple(sizes))
    if mode == "pp":
        params, state, _, _, step, b = pl.setup(cfg, mesh, micro_batches, lr, seed)
    elif mode == "tp":
        params, state, _, _, step, b = mg.setup(cfg, mesh, lr, seed, sequence_parallel)
    elif mode == "fsdp":
        params, state, _, _, step = fs.setup(cfg, mesh, lr, seed)
        b = P("data")
    else:
        params = dp.init_params(cfg, random.key(seed))
        opt = dp.make_optimizer(params, lr)
        params = bp.device_put(params, NamedSharding(mesh, P()))
        if mode == "zero1":
            state = dp.zero1_init(opt, params, mesh.shape["data"])
            state = fs.place(state, dp.zero1_specs(state), mesh)
        else:
            state = bp.device_put(opt.init(params), NamedSharding(mesh, P()))
        step = dp.make_train_step(cfg, opt, mesh, mode == "zero1", state)
        b = P("data")
    return params, state, step, b, mesh


def train(cfg: GPTConfig, tokens: np.ndarray, steps: int, batch: int, mode: str, sizes: dict,
          lr: float = 3e-3, seed: int = 0, micro_batches: int = 2,
          sequence_parallel: bool = False, log=None) -> list[float]:  # fmt: skip
    """Train for ``steps`` steps in ``mode`` on a mesh of ``sizes``; returns the losses (the
    same global batches as ``data_parallel.train`` with ``mesh=None``)."""
    params, state, step, b, mesh = make(cfg, mode, sizes, lr, seed, micro_batches,
                                        sequence_parallel)  # fmt: skip
    data = dp.batches(tokens, batch, cfg.n_ctx, seed)
    losses = []
    for i in range(steps):
        x, y = next(data)
        x = bp.device_put(x, NamedSharding(mesh, b))
        y = bp.device_put(y, NamedSharding(mesh, b))
        t0 = time.perf_counter()
        params, state, loss = step(params, state, x, y)
        losses.append(float(np.asarray(loss)))
        if log is not None:
            log(f"step {i + 1:4d}  loss {losses[-1]:.4f}  ({time.perf_counter() - t0:.2f}s)")
    return losses


def main(argv: list[str] | None = None) -> list[float]:
    ap = dp.model_parser(__doc__)
    ap.add_argument("--mesh", help="axis sizes, e.g. data=2,model=2 (default: data=<devices>)")
    ap.add_argument("--fsdp", action="store_true", help="FSDP (ZeRO-3) over the data axis")
    ap.add_argument("--zero1", action="store_true", help="ZeRO-1 over the data axis")
    ap.add_argument("--pipeline", type=int, default=1, help="pipeline stages (a pipe axis)")
    ap.add_argument("--micro-batches", type=int, default=2, help="per device, for --pipeline")
    ap.add_argument("--sequence-parallel", action="store_true", help="with a model axis")
    a = ap.parse_args(argv)
    dp.initialize_if_launched()
    from examples.gpt2.data import CharTokenizer

    tok = CharTokenizer.from_text(dp.TEXT)
    cfg = GPTConfig(a.layers, a.heads, a.width, a.ctx, vocab_size=tok.vocab_size)
    sizes = parse_mesh(a.mesh, a.pipeline, len(bp.devices()))
    mode = mode_of(sizes, a.fsdp, a.zero1)
    say = (lambda m: print(m, flush=True)) if bp.process_index() == 0 else None
    if say:
        say(f"{mode.upper()} on mesh {sizes}, global batch {a.batch}")
        if mode == "pp":
            from blu.parallel.pipeline import schedule_1f1b

            sc = schedule_1f1b(sizes["pipe"], a.micro_batches)
            say(f"1F1B: {sc.stages} stages, {sc.micro_batches} micro-batches per device, "
                f"{sc.ticks} ticks, bubble fraction {sc.bubble_fraction:.3f}")  # fmt: skip
    return train(
        cfg,
        tok.encode(dp.TEXT),
        a.steps,
        a.batch,
        mode,
        sizes,
        a.lr,
        micro_batches=a.micro_batches,
        sequence_parallel=a.sequence_parallel,
        log=say,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
