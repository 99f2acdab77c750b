"""The training loop and command line of ``python -m examples.vision``.

The state is three pytrees: ``params`` (trained), ``batch_stats`` (batch norm's running
statistics, updated by the forward pass in training mode, never by the optimizer) and the
optimizer's state. One jitted step takes and returns all three; evaluation runs the model with
``train=False`` (the running statistics), in fixed-size chunks so it compiles once.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import blu
import blu.numpy as bnp
import blu.random as random
from blu import nn, optim
from blu.core.dtypes import bfloat16
from examples.vision import ExampleError, data, models

EVAL_CHUNK = 256


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m examples.vision",
        description="Train a ResNet or ViT image classifier with blu (NHWC, pure functions). "
        "The defaults train resnet-tiny on procedurally drawn 8x8 digits in well under a "
        "minute on two CPU cores.",
    )
    p.add_argument("--model", choices=list(models.CONFIGS), default="resnet-tiny")
    p.add_argument(
        "--data",
        choices=("auto", "digits", "glyphs", "synthetic"),
        default="auto",
        help="digits: scikit-learn's load_digits (1,797 real 8x8 digits, bundled with "
        "scikit-learn: offline); glyphs: procedurally drawn 8x8 digits (no dependency); auto "
        "(default): digits when scikit-learn is installed, else glyphs; synthetic: "
        "ImageNet-shaped random batches for speed (no evaluation)",
    )
    p.add_argument(
        "--data-dir",
        default=None,
        metavar="DIR",
        help="train on a folder of images, one subfolder per class (wins over --data)",
    )
    p.add_argument(
        "--image-size",
        type=int,
        default=None,
        metavar="S",
        help="input size (default: the model's: 8 for the tiny ones, 224 otherwise)",
    )
    p.add_argument("--steps", type=int, default=300, metavar="N")
    p.add_argument("--batch-size", type=int, default=64, metavar="B")
    p.add_argument(
        "--optimizer",
        choices=("adamw", "sgd"),
        default="adamw",
        help="AdamW, or SGD with Nesterov momentum 0.9",
    )
    p.add_argument(
        "--lr",
        type=float,
        default=None,
        help="peak learning rate (default 3e-3 AdamW, 0.1 SGD); linear warm-up, cosine decay to 0",
    )
    p.add_argument("--warmup-steps", type=int, default=20, metavar="N")
    p.add_argument(
        "--weight-decay",
        type=float,
        default=None,
        metavar="WD",
        help="on convolution and dense weights only (default 0.05 AdamW, 5e-4 SGD)",
    )
    p.add_argument(
        "--eval-every",
        type=int,
        default=50,
        metavar="K",
        help="held-out accuracy every K steps (and at the end)",
    )
    p.add_argument("--val-fraction", type=float, default=0.2, metavar="F")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where the state lives and the jitted steps run",
    )
    p.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        default="fp32",
        help="bf16: images and activations in bfloat16 (batch norm statistics, the "
        "head and the loss in float32)",
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="write the final params, batch_stats and optimizer state there "
        "(examples.gpt2's checkpoint format)",
    )
    return p


def make_optimizer(a: argparse.Namespace):
    lr = a.lr if a.lr is not None else (3e-3 if a.optimizer == "adamw" else 0.1)
    warm = min(a.warmup_steps, max(a.steps - 1, 0))
    schedule = optim.warmup_cosine_decay(peak_lr=lr, warmup_steps=warm, total_steps=a.steps)
    sched = lambda count: schedule(count + 1)  # noqa: E731  (update n uses lr(n): no zero step
    if a.optimizer == "adamw":
        wd = 0.05 if a.weight_decay is None else a.weight_decay
        return optim.adamw(sched, weight_decay=wd, mask=optim.decay_mask_matrices)
    wd = 5e-4 if a.weight_decay is None else a.weight_decay
    sgd = optim.sgd(sched, momentum=0.9, nesterov=True)
    decay = optim.masked(optim.add_decayed_weights(wd), optim.decay_mask_matrices)
    return optim.chain(decay, sgd)


def make_steps(module, cfg, opt, precision: str = "fp32"):
    """``train_step(params, batch_stats, opt_state, x, y) -> (params, batch_stats, opt_state,
    loss)`` and ``eval_step(params, batch_stats, x, y, valid) -> correct count``, jitted."""
    cd = bfloat16 if precision == "bf16" else None

    def loss_fn(params, batch_stats, x, y):
        x = x if cd is None else x.astype(cd)
        logits, new_stats = module.apply(params, batch_stats, x, cfg, train=True)
        return nn.cross_entropy(logits.astype(np.float32), y), new_stats

    grad_fn = blu.value_and_grad(loss_fn, has_aux=True)

    def train_step(params, batch_stats, opt_state, x, y):
        (loss, batch_stats), grads = grad_fn(params, batch_stats, x, y)
        updates, opt_state = opt.update(grads, opt_state, params)
        params = optim.apply_updates(params, updates)
        return params, batch_stats, opt_state, loss

    def eval_step(params, batch_stats, x, y, valid):
        x = x if cd is None else x.astype(cd)
        logits, _ = module.apply(params, batch_stats, x, cfg, train=False)
        hit = (bnp.argmax(logits, axis=-1) == y) & valid
        return bnp.sum(hit.astype(np.int32))

    return blu.jit(train_step, donate_argnums=(0, 1, 2)), blu.jit(eval_step)


def accuracy(eval_step, params, batch_stats, x: np.ndarray, y: np.ndarray) -> float:
    """Held-out accuracy, in chunks of ``EVAL_CHUNK`` (the last one padded and masked)."""
    n, correct = len(x), 0
    chunk = min(EVAL_CHUNK, n)
    for i in range(0, n, chunk):
        xb, yb = x[i : i + chunk], y[i : i + chunk]
        valid = np.arange(chunk) < len(xb)
        if len(xb) < chunk:
            pad = chunk - len(xb)
            xb = np.concatenate([xb, np.zeros((pad, *xb.shape[1:]), xb.dtype)])
            yb = np.concatenate([yb, np.zeros(pad, yb.dtype)])
        correct += int(eval_step(params, batch_stats, xb, yb, valid))
    return correct / n


def _check(a: argparse.Namespace) -> None:
    for flag in ("steps", "batch_size", "eval_every"):
        if getattr(a, flag) < 1:
            raise ExampleError(f"--{flag.replace('_', '-')} must be >= 1")
    if not 0.0 < a.val_fraction < 1.0:
        raise ExampleError("--val-fraction must be in (0, 1)")


def main(argv: list[str] | None = None) -> dict:
    """Run the command line; returns a summary (accuracy curve, losses, speed) for callers."""
    a = build_parser().parse_args(argv)
    _check(a)
    t_start = time.perf_counter()
    module, cfg = models.get(a.model)
    size = a.image_size or (getattr(cfg, "image_size", None) or 224)
    if a.data == "synthetic" and not a.data_dir:
        ds = None
        cfg = models.get(a.model, in_channels=3, **_size(cfg, size))[1]
    else:
        ds = data.load(a.data, a.data_dir, size, cfg.in_channels, a.seed, a.val_fraction)
        h, w, c = ds.image_shape
        if h != w:
            raise ExampleError(f"{ds.name}: square images needed, got {h}x{w}")
        cfg = models.get(a.model, in_channels=c, num_classes=ds.num_classes, **_size(cfg, h))[1]

    k_init = random.key(a.seed)
    params, batch_stats = module.init(cfg, k_init)
    opt = make_optimizer(a)
    opt_state = opt.init(params)
    train_step, eval_step = make_steps(module, cfg, opt, a.precision)
    if a.device == "cuda":
        import blu.cuda as bc

        if not bc.is_available():
            raise ExampleError("--device cuda: no GPU is available (blu.cuda.is_available())")
        params, batch_stats, opt_state = bc.device_put((params, batch_stats, opt_state))
        bc.reset_peak_memory_stats()
    where = ds.name if ds else f"synthetic {size}x{size}x3 batches"
    n_tr = f" ({len(ds.x_train)} train / {len(ds.x_val)} held out)" if ds else ""
    print(
        f"model {a.model}: {models.num_params(params) / 1e6:.3f}M parameters; data {where}{n_tr}; "
        f"{a.steps} steps of {a.batch_size}, {a.optimizer}, {a.precision}, {a.device}",
        flush=True,
    )
    history: dict[str, list] = {"step": [], "train_loss": [], "val_acc": []}
    order = data.batches(len(ds.x_train), a.batch_size, a.seed + 1) if ds else None
    fixed = None if ds else data.synthetic_imagenet(a.batch_size, size, cfg.num_classes, a.seed)
    losses: list[float] = []
    t_first = t_timed = None
    for step in range(1, a.steps + 1):
        if ds:
            idx = next(order)
            x, y = ds.x_train[idx], ds.y_train[idx]
        else:
            x, y = fixed
        params, batch_stats, opt_state, loss = train_step(params, batch_stats, opt_state, x, y)
        losses.append(float(loss))  # (a host sync per step: honest step times)
        if step == 1:
            t_first = time.perf_counter() - t_start
            t_timed = time.perf_counter()
        if ds and (step % a.eval_every == 0 or step == a.steps):
            acc = accuracy(eval_step, params, batch_stats, ds.x_val, ds.y_val)
            mean = float(np.mean(losses[-a.eval_every :]))
            history["step"].append(step)
            history["train_loss"].append(mean)
            history["val_acc"].append(acc)
            print(
                f"step {step:5d} | train loss {mean:.4f} | held-out accuracy {acc:.4f}", flush=True
            )
    timed = time.perf_counter() - t_timed if t_timed else 0.0
    result = {
        "model": a.model,
        "history": history,
        "losses": losses,
        "val_acc": history["val_acc"][-1] if history["val_acc"] else None,
        "images_per_s": (a.steps - 1) * a.batch_size / timed if a.steps > 1 and timed else None,
        "first_step_s": t_first,
        "num_params": models.num_params(params),
    }
    if a.device == "cuda":
        import blu.cuda as bc

        result["peak_gpu_bytes"] = bc.memory_stats()["peak_allocated_bytes"]
    if a.out:
        from examples.gpt2 import checkpoint

        meta = {"step": a.steps, "model": a.model, "history": history, "args": vars(a)}
        tree = {"params": params, "batch_stats": batch_stats}
        result["checkpoint"] = str(checkpoint.save(Path(a.out), tree, opt_state, meta))
    result["wall_s"] = time.perf_counter() - t_start
    speed = f"{result['images_per_s']:,.0f} images/s" if result["images_per_s"] else "-"
    print(
        f"{speed} after the first step ({t_first:.1f} s with compilation); "
        f"wall time {result['wall_s']:.1f} s"
    )
    return result


def _size(cfg, size: int) -> dict:
    """The config override for an input size (ViT's positions depend on it; ResNet's do not)."""
    if hasattr(cfg, "patch") and size % cfg.patch:
        raise ExampleError(f"image size {size} is not a multiple of the patch size {cfg.patch}")
    return {"image_size": size}


def cli(argv: list[str] | None = None) -> int:
    """``main`` with user errors printed as ``error: ...`` (exit status 2), no traceback."""
    try:
        main(argv)
    except ExampleError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
