"""The vision training step in blu (``examples.vision``): throughput (one JSON line) and the
fidelity run. The PyTorch peer (``torch_vision.py``) takes the same flags.

Throughput: the example's jitted step (forward with ``train=True``, cross-entropy, backward,
SGD with momentum 0.9, lr 0.1, no weight decay; batch statistics threaded) on one random
NHWC batch made once on the device; ``--warmup`` steps, then the peak-memory counter is reset
and ``--steps`` steps are timed one by one; images/s from the median step. Modes: ``fp32``
(``default_matmul_precision("fp32")``), ``tf32`` (TF32 products), ``bf16`` (images and
activations in bfloat16, float32 parameters, batch norm statistics and loss).

Fidelity (``--fidelity``): loads the initial parameters and batch statistics from ``--weights``
(``.npz`` of ``params/<path>`` and ``batch_stats/<path>`` names, blu's layouts: HWIO kernels,
``(in, out)`` matrices), runs one step per batch of ``--batches`` (``x`` ``(S, B, H, W, C)``,
``y`` ``(S, B)``) with SGD lr ``FIDELITY_LR``, and writes each step's loss (before its update)
as JSON to ``--out``.

    python benchmarks/peers/blu_vision.py --model resnet50 --mode bf16 --batch 256
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import blu  # noqa: E402
import blu.random as random  # noqa: E402
from blu import optim  # noqa: E402
from examples.vision import models  # noqa: E402
from examples.vision.train import make_steps  # noqa: E402

MODES = ("fp32", "tf32", "bf16")
LR, MOMENTUM, FIDELITY_LR = 0.1, 0.9, 0.01


def flatten(tree: dict, prefix: str) -> dict[str, np.ndarray]:
    """``{prefix/a/b: array}`` of a nested dict (the names both peers read)."""
    out = {}
    for k, v in tree.items():
        name = f"{prefix}/{k}"
        out.update(flatten(v, name) if isinstance(v, dict) else {name: np.asarray(v)})
    return out


def unflatten(flat: dict[str, np.ndarray], prefix: str) -> dict:
    out: dict = {}
    for name, v in flat.items():
        parts = name.split("/")
        if parts[0] != prefix:
            continue
        d = out
        for p in parts[1:-1]:
            d = d.setdefault(p, {})
        d[parts[-1]] = v
    return out


def model(name: str, image_size: int | None):
    over = {} if image_size is None else {"image_size": image_size}
    return models.get(name, **over)


def init_state(name: str, image_size: int | None, seed: int = 0):
    module, cfg = model(name, image_size)
    params, stats = module.init(cfg, random.key(seed))
    return module, cfg, params, stats


def gpu() -> bool:
    return blu.cuda.is_available()


def to_device(tree):
    return blu.cuda.device_put(tree) if gpu() else tree


def _scope(mode: str):
    return blu.default_matmul_precision("tf32" if mode == "tf32" else "fp32")


def bench(a: argparse.Namespace) -> dict:
    module, cfg, params, stats = init_state(a.model, a.image_size, a.seed)
    opt = optim.sgd(LR, momentum=MOMENTUM)
    step, _ = make_steps(module, cfg, opt, "bf16" if a.mode == "bf16" else "fp32")
    rng = np.random.default_rng(1)
    s = cfg.image_size if hasattr(cfg, "image_size") else 224
    x = rng.standard_normal((a.batch, s, s, cfg.in_channels), np.float32)
    y = rng.integers(0, cfg.num_classes, a.batch).astype(np.int32)
    state = to_device((params, stats, opt.init(params)))
    x, y = to_device((x, y))
    with _scope(a.mode):
        t0 = time.time()
        for _ in range(a.warmup):
            *state, loss = step(*state, x, y)
        if a.warmup:
            loss.block_until_ready()
        warm_s = time.time() - t0
        if gpu():
            blu.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(a.steps):
            t = time.perf_counter()
            *state, loss = step(*state, x, y)
            loss.block_until_ready()
            times.append(time.perf_counter() - t)
    med = sorted(times)[len(times) // 2]
    peak = blu.cuda.memory_stats()["peak_allocated_bytes"] if gpu() else None
    return dict(
        system="blu", model=a.model, mode=a.mode, B=a.batch, image=s,
        params=models.num_params(params), images_s=round(a.batch / med, 1),
        step_ms=round(med * 1e3, 2), peak_GiB=None if peak is None else round(peak / 2**30, 3),
        warmup_s=round(warm_s, 1), loss=float(loss), device="cuda" if gpu() else "cpu",
    )  # fmt: skip


def program(name: str, mode: str, batch: int, lr: float = LR) -> tuple:
    """``(jitted_fn, specs)``: the training step :func:`bench` (``lr`` = ``LR``) or
    :func:`fidelity` (``FIDELITY_LR``, fp32) calls at ``batch``, with its argument specs."""
    module, cfg, params, stats = init_state(name, None)
    s = getattr(cfg, "image_size", 224)
    opt = optim.sgd(lr, momentum=MOMENTUM)
    step, _ = make_steps(module, cfg, opt, "bf16" if mode == "bf16" else "fp32")
    state = blu.tree_util.tree_map(lambda v: blu.ShapeDtypeStruct(np.shape(v), v.dtype),
                                   (params, stats, opt.init(params)))  # fmt: skip
    x = blu.ShapeDtypeStruct((batch, s, s, cfg.in_channels), np.float32)
    return step, (*state, x, blu.ShapeDtypeStruct((batch,), np.int32))


def compile_program(name: str, mode: str, batch: int, lr: float = LR,
                    target: str = "cuda:sm_90") -> None:  # fmt: skip
    """Lower and compile :func:`program` for ``target`` under ``mode``'s precision: fills the
    kernel cache (``BLU_CACHE_DIR``) ahead of a run on the GPU machine, which has no MLIR."""
    fn, specs = program(name, mode, batch, lr)
    with _scope(mode):
        fn.lower(*specs, target=target).compile()


def fidelity(a: argparse.Namespace) -> dict:
    module, cfg = model(a.model, a.image_size)
    with np.load(a.weights) as f:
        flat = dict(f)
    params, stats = unflatten(flat, "params"), unflatten(flat, "batch_stats")
    with np.load(a.batches) as f:
        xs, ys = f["x"][: a.steps], f["y"][: a.steps]
    opt = optim.sgd(FIDELITY_LR, momentum=MOMENTUM)
    step, _ = make_steps(module, cfg, opt, "bf16" if a.mode == "bf16" else "fp32")
    state = to_device((params, stats, opt.init(params)))
    losses = []
    with _scope(a.mode):
        for x, y in zip(xs, ys):
            *state, loss = step(*state, *to_device((x, y.astype(np.int32))))
            losses.append(float(loss))
    out = dict(system="blu", model=a.model, mode=a.mode, steps=len(losses), losses=losses)
    Path(a.out).write_text(json.dumps(out))
    return out


def build_parser(doc: str = __doc__) -> argparse.ArgumentParser:
    """The flags both peers take."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--model", default="resnet50", choices=list(models.CONFIGS))
    p.add_argument("--mode", default="fp32", choices=MODES)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--image-size", type=int, default=None, help="default: the model's")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compile", action="store_true", help="(PyTorch) torch.compile the step")
    p.add_argument("--fidelity", action="store_true")
    p.add_argument("--weights", help="(--fidelity) .npz of initial params and batch_stats")
    p.add_argument("--batches", help="(--fidelity) .npz with x, y")
    p.add_argument("--out", help="(--fidelity) JSON of the losses")
    return p


def main(argv: list[str] | None = None) -> None:
    a = build_parser().parse_args(argv)
    print(json.dumps(fidelity(a) if a.fidelity else bench(a)), flush=True)


if __name__ == "__main__":
    main()
