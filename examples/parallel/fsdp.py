"""GPT-2 trained with fully sharded data parallelism (FSDP / ZeRO-3, ``blu.parallel.fsdp``).

Every parameter, its gradient and its AdamW moments are split over the ``data`` axis (on the
largest dimension N divides); each layer (the embeddings, every block, the head) gathers its
parameters just before it runs, inside a ``checkpoint``, so only one layer's whole parameters
are live at a time, and the backward pass gathers them again; the gradients arrive
reduce-scattered. The step is the data-parallel step with other PartitionSpecs.

    BLU_NUM_CPU_DEVICES=4 python -m examples.parallel.fsdp --steps 20
    python -m blu.parallel.launch --nproc 4 --backend mpi examples/parallel/fsdp.py
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

import blu
from blu import nn
from blu import parallel as bp
from blu.core import pytree
from blu.parallel import NamedSharding, P, fsdp
from examples.gpt2.model import GPTConfig, _attention, _layer_norm, _mlp, init_params
from examples.parallel.data_parallel import (
    AXIS,
    TEXT,
    batches,
    initialize_if_launched,
    make_optimizer,
    model_parser,
)

_is_spec = lambda s: isinstance(s, P)  # noqa: E731


def fsdp_loss(slices: Any, x, y, cfg: GPTConfig, specs: Any):
    """The mean next-token cross-entropy of this device's batch from its parameter slices
    (inside ``blu.shard``): the model of ``examples/gpt2/model.py``, layer by layer."""
    T = x.shape[1]

    def embed(p, ids):
        return nn.embedding(p["wte"], ids) + p["wpe"][:T]

    def block(p, h):
        h = h + _attention(p["attn"], _layer_norm(h, p["ln_1"]), cfg.n_head)
        return h + _mlp(p["mlp"], _layer_norm(h, p["ln_2"]))

    def head(p, h, targets):
        logits = _layer_norm(h, p["ln_f"]) @ p["wte"].T  # the output projection tied to wte
        return nn.cross_entropy(logits, targets)

    pick = lambda tree, *keys: {k: tree[k] for k in keys}  # noqa: E731
    h = fsdp.layer(embed, pick(specs, "wte", "wpe"))(pick(slices, "wte", "wpe"), x)
    for blk, spec in zip(slices["h"], specs["h"]):
        h = fsdp.layer(block, spec)(blk, h)
    return fsdp.layer(head, pick(specs, "wte", "ln_f"))(pick(slices, "wte", "ln_f"), h, y)


def fsdp_step(cfg: GPTConfig, opt, specs: Any):
    """The per-device step over parameter slices: the data-parallel mean loss and its
    gradients (reduce-scattered for the sliced parameters, all-reduced for the replicated
    ones: shard_map's rule), the optimizer on the slices."""

    def step(slices, opt_state, x, y):
        mean_loss = lambda p: bp.pmean(fsdp_loss(p, x, y, cfg, specs), AXIS)  # noqa: E731
        loss, grads = blu.value_and_grad(mean_loss)(slices)
        slices, opt_state = opt.step(grads, opt_state, slices)
        return slices, opt_state, loss

    return step


def make_train_step(cfg: GPTConfig, opt, mesh, specs: Any, state_specs: Any):
    """The jitted FSDP step ``(params, opt_state, x, y) -> (params, opt_state, loss)``; the
    parameters and the state are laid out by ``specs``/``state_specs``, ``x``/``y`` are the
    global batch split over ``data``."""
    step = fsdp_step(cfg, opt, specs)
    return blu.jit(
        bp.shard(
            step,
            mesh,
            in_specs=(specs, state_specs, P(AXIS), P(AXIS)),
            out_specs=(specs, state_specs, P()),
        )  # fmt: skip
    )


def place(tree: Any, tree_specs: Any, mesh) -> Any:
    shardings = pytree.tree_map(lambda s: NamedSharding(mesh, s), tree_specs, is_leaf=_is_spec)
    return bp.device_put(tree, shardings)


def setup(cfg: GPTConfig, mesh, lr: float = 3e-3, seed: int = 0, min_size: int = 0):
    """Parameters and AdamW state laid out for FSDP, their specs, and the jitted step."""
    import blu.random as random

    params = init_params(cfg, random.key(seed))
    opt = make_optimizer(params, lr)
    specs = fsdp.specs(params, mesh.shape[AXIS], AXIS, min_size)
    state = opt.init(params)
    state_specs = fsdp.optimizer_specs(state, params, specs)
    step = make_train_step(cfg, opt, mesh, specs, state_specs)
    return place(params, specs, mesh), place(state, state_specs, mesh), specs, state_specs, step


def train(cfg: GPTConfig, tokens: np.ndarray, steps: int, batch: int, mesh, lr: float = 3e-3,
          seed: int = 0, log=None) -> list[float]:  # fmt: skip
    """Train with FSDP for ``steps`` steps; returns the losses."""
    if batch % mesh.shape[AXIS]:
        raise ValueError(f"the global batch {batch} must divide over {mesh.shape[AXIS]} devices")
    params, state, _, _, step = setup(cfg, mesh, lr, seed)
    data = batches(tokens, batch, cfg.n_ctx, seed)
    losses = []
    for i in range(steps):
        x, y = next(data)
        x = bp.device_put(x, NamedSharding(mesh, P(AXIS)))
        y = bp.device_put(y, NamedSharding(mesh, P(AXIS)))
        t0 = time.perf_counter()
        params, state, loss = step(params, state, x, y)
        losses.append(float(np.asarray(loss).reshape(-1)[0]))
        if log is not None:
            log(f"step {i + 1:4d}  loss {losses[-1]:.4f}  ({time.perf_counter() - t0:.2f}s)")
    return losses


def _local_zeros(x: Any, spec: P, n: int) -> np.ndarray:
    shape = list(np.shape(x))
    for i in range(len(spec)):
        if spec.names_of(i):
            shape[i] //= n
    return np.zeros(shape, np.asarray(x).dtype)


def per_device_memory(cfg: GPTConfig, n: int, local_batch: int, mode: str = "fsdp"):
    """The planned memory (``memory_analysis()``) of the training step one device runs in a
    job of ``n`` over ``data``: the per-device program is traced as a process of an
    ``n``-process job would trace it (nothing runs, no collective is called) and lowered for
    the CPU.

    Args:
        cfg: the model.
        n: devices on the data axis.
        local_batch: sequences per device.
        mode: ``"dp"`` (replicated), ``"zero1"`` (optimizer state sharded) or ``"fsdp"``.
    """
    import blu.random as random
    from blu.transforms.axes import ProcessAxisEnv, process_axis_env
    from examples.parallel import data_parallel as dp

    params = init_params(cfg, random.key(0))
    opt = make_optimizer(params)
    if mode == "zero1":
        specs = pytree.tree_map(lambda _: P(), params)
        state = dp.zero1_init(opt, params, n)
        sspecs = dp.zero1_specs(state)
        step = dp.zero1_step(cfg, opt, n)
    else:
        if mode == "fsdp":
            specs = fsdp.specs(params, n, AXIS)
        else:
            specs = pytree.tree_map(lambda _: P(), params)
        state = opt.init(params)
        sspecs = fsdp.optimizer_specs(state, params, specs)
        step = fsdp_step(cfg, opt, specs) if mode == "fsdp" else dp.dp_step(cfg, opt)
    lp = pytree.tree_map(lambda s, x: _local_zeros(x, s, n), specs, params, is_leaf=_is_spec)
    ls = pytree.tree_map(lambda s, x: _local_zeros(x, s, n), sspecs, state, is_leaf=_is_spec)
    x = np.zeros((local_batch, cfg.n_ctx), np.int32)
    env = ProcessAxisEnv({AXIS: n}, {AXIS: 0}, lambda names: None)  # only traced
    with process_axis_env(env):
        return blu.jit(step).lower(lp, ls, x, x, target="cpu").memory_analysis()


def main(argv: list[str] | None = None) -> list[float]:
    a = model_parser(__doc__).parse_args(argv)
    initialize_if_launched()
    from examples.gpt2.data import CharTokenizer

    tok = CharTokenizer.from_text(TEXT)
    cfg = GPTConfig(a.layers, a.heads, a.width, a.ctx, vocab_size=tok.vocab_size)
    mesh = bp.make_mesh((len(bp.devices()),), (AXIS,))
    say = (lambda m: print(m, flush=True)) if bp.process_index() == 0 else None
    if say:
        say(f"FSDP over {len(bp.devices())} device(s), global batch {a.batch}")
    return train(cfg, tok.encode(TEXT), a.steps, a.batch, mesh, a.lr, log=say)


if __name__ == "__main__":
    main(sys.argv[1:])
