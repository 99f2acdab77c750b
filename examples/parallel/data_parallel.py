"""Data-parallel GPT-2 training with ``blu.shard``, optionally with ZeRO-1.

Every device holds the parameters and runs the model on its slice of the global batch; the
loss is averaged over the ``data`` axis (``pmean``), so its gradient w.r.t. the replicated
parameters is the global one (shard_map's rule: the gradient all-reduce is the transpose of the
implicit ``pvary``), inside the one jitted training step. With ``--zero1`` the optimizer state
is sharded (Rajbhandari et al. 2020, stage 1): each device keeps the AdamW moments of 1/N of
every parameter, takes its own gradient (w.r.t. ``pvary(params)``), the gradients are
reduce-scattered (``psum_scatter``), each device updates its slice, and the new parameters are
all-gathered.

    BLU_NUM_CPU_DEVICES=4 python -m examples.parallel.data_parallel --steps 20 --zero1
    python -m blu.parallel.launch --nproc 8 examples/parallel/data_parallel.py --zero1   # GPUs

The model is ``examples/gpt2/model.py``'s; the data is a character-level corpus (``--corpus``)
or a small built-in text.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np

import blu
from blu import lax, optim
from blu import parallel as bp
from blu.core import pytree
from blu.parallel import NamedSharding, P
from examples.gpt2.model import GPTConfig, init_params, loss_fn

AXIS = "data"

TEXT = (
    "It is a truth universally acknowledged, that a single man in possession of a good "
    "fortune, must be in want of a wife. However little known the feelings or views of such "
    "a man may be on his first entering a neighbourhood, this truth is so well fixed in the "
    "minds of the surrounding families, that he is considered the rightful property of some "
    "one or other of their daughters. "
) * 8


def make_optimizer(params: Any, lr: float = 3e-3):
    """AdamW, decaying matrices only. The mask is a fixed pytree (not a function of the
    leaves' ranks), so it also fits ZeRO-1's flattened parameter slices."""
    mask = pytree.tree_map(lambda p: np.ndim(p) >= 2, params)
    return optim.adamw(lr, weight_decay=0.1, mask=mask)


# ---- plain data parallelism ---------------------------------------------------------------------


def dp_step(cfg: GPTConfig, opt):
    """The per-device step: the gradient of the global (``pmean``) loss, whose transpose
    all-reduces the gradients, then the (replicated) update."""

    def step(params, opt_state, x, y):
        loss, grads = blu.value_and_grad(lambda p: bp.pmean(loss_fn(p, x, y, cfg), AXIS))(params)
        params, opt_state = opt.step(grads, opt_state, params)
        return params, opt_state, loss

    return step


# ---- ZeRO-1: optimizer state sharded ------------------------------------------------------------


def _padded(n: int, parts: int) -> int:
    return -(-n // parts) * parts


def zero1_init(opt, params: Any, n_dev: int) -> Any:
    """AdamW state over the flattened, padded parameters (to be sharded over ``data``)."""
    flat = pytree.tree_map(lambda p: np.zeros(_padded(int(np.size(p)), n_dev), np.float32), params)
    return opt.init(flat)


def zero1_specs(opt_state: Any) -> Any:
    """Moments split over ``data``; the step counter replicated."""
    return pytree.tree_map(lambda s: P(AXIS) if np.ndim(s) else P(), opt_state)


def zero1_step(cfg: GPTConfig, opt, n_dev: int):
    """The per-device ZeRO-1 step: reduce-scatter the gradients, update this device's slice of
    every parameter (its moments live only here), all-gather the new parameters."""

    def step(params, opt_state, x, y):
        # this device's own gradient (pvary: not all-reduced), reduce-scattered below
        local = bp.pvary(params, AXIS)
        loss, grads = blu.value_and_grad(lambda p: loss_fn(p, x, y, cfg))(local)
        loss = bp.pmean(loss, AXIS)
        i = bp.axis_index(AXIS)
        leaves, tree = pytree.tree_flatten(params)
        g_leaves = pytree.tree_leaves(grads)
        p_sh, g_sh = [], []
        for p, g in zip(leaves, g_leaves):
            n = p.size
            k = _padded(n, n_dev) // n_dev
            pad = _padded(n, n_dev) - n
            flat_g = lax.pad(g.reshape(n), 0.0, ((0, pad, 0),)) if pad else g.reshape(n)
            g_sh.append(bp.psum_scatter(flat_g, AXIS, tiled=True) / n_dev)  # mean gradient slice
            flat_p = lax.pad(p.reshape(n), 0.0, ((0, pad, 0),)) if pad else p.reshape(n)
            p_sh.append(lax.dynamic_slice_in_dim(flat_p, i * k, k))
        new_sh, opt_state = opt.step(
            pytree.tree_unflatten(tree, g_sh), opt_state, pytree.tree_unflatten(tree, p_sh)
        )
        new_leaves = []
        for p, s in zip(leaves, pytree.tree_leaves(new_sh)):
            full = bp.all_gather(s, AXIS, tiled=True)[: p.size]
            new_leaves.append(full.reshape(p.shape))
        return pytree.tree_unflatten(tree, new_leaves), opt_state, loss

    return step


# ---- building the jitted steps ------------------------------------------------------------------


def make_train_step(cfg: GPTConfig, opt, mesh, zero1: bool = False, opt_state: Any = None):
    """The jitted data-parallel step ``(params, opt_state, x, y) -> (params, opt_state, loss)``.

    ``x``/``y`` are the global batch ``(B, T)``, split over the mesh's ``data`` axis.
    """
    n_dev = mesh.shape[AXIS]
    if zero1:
        state_specs = zero1_specs(opt_state)
        step = zero1_step(cfg, opt, n_dev)
    else:
        state_specs = P()
        step = dp_step(cfg, opt)
    sharded = bp.shard(
        step, mesh, in_specs=(P(), state_specs, P(AXIS), P(AXIS)),
        out_specs=(P(), state_specs, P()),
    )  # fmt: skip
    return blu.jit(sharded)


def make_single_device_step(cfg: GPTConfig, opt):
    """The same training step on one device, no shard: the reference."""

    def step(params, opt_state, x, y):
        loss, grads = blu.value_and_grad(lambda p: loss_fn(p, x, y, cfg))(params)
        params, opt_state = opt.step(grads, opt_state, params)
        return params, opt_state, loss

    return blu.jit(step)


def batches(tokens: np.ndarray, batch: int, ctx: int, seed: int = 0):
    """Random (x, y) windows of the token stream, the same on every process (same seed)."""
    rng = np.random.default_rng(seed)
    while True:
        starts = rng.integers(0, len(tokens) - ctx - 1, size=batch)
        x = np.stack([tokens[s : s + ctx] for s in starts]).astype(np.int32)
        y = np.stack([tokens[s + 1 : s + ctx + 1] for s in starts]).astype(np.int32)
        yield x, y


def train(
    cfg: GPTConfig,
    tokens: np.ndarray,
    steps: int,
    batch: int,
    mesh=None,
    zero1: bool = False,
    lr: float = 3e-3,
    seed: int = 0,
    log=None,
) -> list[float]:
    """Train for ``steps`` steps; returns the losses. ``mesh=None``: one device, no shard."""
    import blu.random as random

    params = init_params(cfg, random.key(seed))
    opt = make_optimizer(params, lr)
    data = batches(tokens, batch, cfg.n_ctx, seed)
    if mesh is None:
        state = opt.init(params)
        step = make_single_device_step(cfg, opt)
    else:
        n_dev = mesh.shape[AXIS]
        if batch % n_dev:
            raise ValueError(f"the global batch {batch} must divide over {n_dev} devices")
        replicated = NamedSharding(mesh, P())
        params = bp.device_put(params, replicated)
        if zero1:
            state = zero1_init(opt, params, n_dev)
            state = bp.device_put(
                state,
                pytree.tree_map(
                    lambda s: NamedSharding(mesh, s),
                    zero1_specs(state),
                    is_leaf=lambda s: isinstance(s, P),
                ),  # fmt: skip
            )
        else:
            state = bp.device_put(opt.init(params), replicated)
        step = make_train_step(cfg, opt, mesh, zero1, state)
    losses = []
    for i in range(steps):
        x, y = next(data)
        if mesh is not None:
            x = bp.device_put(x, NamedSharding(mesh, P(AXIS)))
            y = bp.device_put(y, NamedSharding(mesh, P(AXIS)))
        t0 = time.perf_counter()
        params, state, loss = step(params, state, x, y)
        losses.append(float(np.asarray(loss).reshape(-1)[0]))
        if log is not None:
            log(f"step {i + 1:4d}  loss {losses[-1]:.4f}  ({time.perf_counter() - t0:.2f}s)")
    return losses


def model_parser(description: str | None) -> argparse.ArgumentParser:
    """The flags every parallel example shares: steps, global batch, model size, learning rate."""
    ap = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=8, help="global batch (split over devices)")
    ap.add_argument("--ctx", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    return ap


def initialize_if_launched() -> None:
    """One process per device when a launcher started this one (blu.parallel.launch, srun,
    mpirun): join its process group."""
    if any(v in os.environ for v in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")):
        bp.initialize()


def main(argv: list[str] | None = None) -> list[float]:
    ap = model_parser(__doc__)
    ap.add_argument("--zero1", action="store_true", help="shard the optimizer state (ZeRO-1)")
    ap.add_argument("--corpus", help="a text file (character-level tokens)")
    a = ap.parse_args(argv)
    initialize_if_launched()
    text = open(a.corpus, encoding="utf-8").read() if a.corpus else TEXT
    from examples.gpt2.data import CharTokenizer

    tok = CharTokenizer.from_text(text)
    cfg = GPTConfig(a.layers, a.heads, a.width, a.ctx, vocab_size=tok.vocab_size)
    mesh = bp.make_mesh((len(bp.devices()),), (AXIS,))
    me = bp.process_index()
    say = (lambda m: print(m, flush=True)) if me == 0 else None
    if say:
        say(f"{len(bp.devices())} device(s), global batch {a.batch}, zero1={a.zero1}")
    return train(cfg, tok.encode(text), a.steps, a.batch, mesh, a.zero1, a.lr, log=say)


if __name__ == "__main__":
    main(sys.argv[1:])
