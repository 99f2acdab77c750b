"""GPT-2 with pipeline parallelism (``blu.parallel.pipeline``: the 1F1B schedule), optionally
with a data axis (a 2-D mesh ``data x pipe``).

The ``n_layer`` blocks are split into S stages over the ``pipe`` axis (their parameters stacked
``(S, n_layer / S, ...)`` and split over it); the token and position embeddings and the final
layer norm are replicated (stage 0 embeds, the last stage applies the tied head and the loss;
their gradients are summed over ``pipe``). Each device's batch is cut into ``micro_batches``
micro-batches that flow through the stages in the 1F1B order (Narayanan et al. 2021).

    BLU_NUM_CPU_DEVICES=4 python -m examples.parallel.gpt2 --pipeline 4 --steps 20
    python -m blu.parallel.launch --nproc 4 --backend mpi examples/parallel/gpt2.py --pipeline 2 \\
        --mesh data=2
"""

from __future__ import annotations

from typing import Any

import numpy as np

import blu
from blu import lax, nn, optim
from blu import parallel as bp
from blu.core import pytree
from blu.parallel import P
from blu.parallel.pipeline import pipeline_1f1b
from examples.gpt2.model import GPTConfig, _attention, _layer_norm, _mlp

PIPE, DATA = "pipe", "data"
SHARED = ("wte", "wpe", "ln_f")


def to_layout(params: Any, stages: int) -> Any:
    """``{"blocks": every block leaf stacked (S, n_layer / S, ...), "shared": wte, wpe, ln_f}``."""
    n = len(params["h"])
    if n % stages:
        raise ValueError(f"{n} layers do not split into {stages} stages")
    blocks = pytree.tree_map(
        lambda *xs: np.stack([np.asarray(x) for x in xs]).reshape((stages, n // stages)
                                                                   + np.shape(xs[0])),
        *params["h"],
    )  # fmt: skip
    return {"blocks": blocks, "shared": {k: params[k] for k in SHARED}}


def from_layout(tree: Any) -> Any:
    """GPT-2's parameter tree (or gradients) from :func:`to_layout`'s."""
    flat = pytree.tree_map(lambda v: np.asarray(v).reshape((-1,) + np.shape(v)[2:]),
                           tree["blocks"])  # fmt: skip
    n = len(pytree.tree_leaves(flat)[0])
    h = [pytree.tree_map(lambda v, i=i: v[i], flat) for i in range(n)]
    return dict(tree["shared"], h=h)


def specs(layout: Any) -> Any:
    return {
        "blocks": pytree.tree_map(lambda _: P(PIPE), layout["blocks"]),
        "shared": pytree.tree_map(lambda _: P(), layout["shared"]),
    }


def make_optimizer(layout: Any, lr: float = 3e-3):
    """AdamW decaying the matrices only (as ``data_parallel.make_optimizer``; the stacked
    blocks' leaves are decayed when one block's leaf is a matrix)."""
    mask = {
        "blocks": pytree.tree_map(lambda v: np.ndim(v) - 2 >= 2, layout["blocks"]),
        "shared": pytree.tree_map(lambda v: np.ndim(v) >= 2, layout["shared"]),
    }
    return optim.adamw(lr, weight_decay=0.1, mask=mask)


def stage_fn(cfg: GPTConfig, stages: int):
    """One stage's work on one micro-batch: embed (stage 0), its blocks, the head's loss."""

    def run(p, h_in, micro, s):
        blocks, shared = p
        x, y = micro
        T = x.shape[1]
        emb = nn.embedding(shared["wte"], x) + shared["wpe"][:T]
        first = lax.broadcast_in_dim(lax.eq(s, lax.full((), 0, s.dtype)), emb.shape, ())
        h = lax.select(first, emb, h_in)
        for j in range(cfg.n_layer // stages):
            blk = pytree.tree_map(lambda v, j=j: v[j], blocks)
            h = h + _attention(blk["attn"], _layer_norm(h, blk["ln_1"]), cfg.n_head)
            h = h + _mlp(blk["mlp"], _layer_norm(h, blk["ln_2"]))
        loss = nn.linear_cross_entropy(_layer_norm(h, shared["ln_f"]), shared["wte"], y)
        return h, loss

    return run


def loss_and_grads(cfg: GPTConfig, micro_batches: int, has_data: bool):
    """Per device: the pipelined loss and the gradients (stage blocks exact, shared ones summed
    over ``pipe``, all averaged over ``data``)."""

    def f(p, x, y):
        S = bp.axis_size(PIPE)
        B, T = x.shape
        M = micro_batches
        if B % M:
            raise ValueError(f"the per-device batch {B} does not split into {M} micro-batches")
        xs, ys = x.reshape(M, B // M, T), y.reshape(M, B // M, T)
        blocks = pytree.tree_map(lambda v: v[0], p["blocks"])  # this stage's (n_layer / S, ...)
        loss, (g_blocks, g_shared) = pipeline_1f1b(
            stage_fn(cfg, S), (blocks, p["shared"]), (xs, ys),
            (B // M, T, cfg.d_model), np.float32, PIPE, M,
        )  # fmt: skip
        g = {"blocks": pytree.tree_map(lambda v: v[None], g_blocks),
             "shared": bp.psum(g_shared, PIPE)}  # fmt: skip
        loss = bp.psum(loss, PIPE)
        if has_data:
            loss, g = bp.pmean((loss, g), DATA)
        return loss, g

    return f


def grads_fn(cfg: GPTConfig, mesh, micro_batches: int):
    """``(layout, x, y) -> (loss, grads)`` over the global batch, jitted (for tests)."""
    layout_specs = {"blocks": P(PIPE), "shared": P()}
    b = P(DATA) if DATA in mesh.shape else P()
    f = loss_and_grads(cfg, micro_batches, DATA in mesh.shape)
    return blu.jit(bp.shard(f, mesh, (layout_specs, b, b), (P(), layout_specs)))


def pp_step(cfg: GPTConfig, opt, micro_batches: int, has_data: bool):
    lg = loss_and_grads(cfg, micro_batches, has_data)

    def step(p, opt_state, x, y):
        loss, g = lg(p, x, y)
        p, opt_state = opt.step(g, opt_state, p)
        return p, opt_state, loss

    return step


def setup(cfg: GPTConfig, mesh, micro_batches: int, lr: float = 3e-3, seed: int = 0):
    """Parameters and AdamW state laid out over ``pipe`` (and ``data``), their specs, the
    jitted step and the batch spec."""
    import blu.random as random
    from blu.parallel import fsdp
    from examples.gpt2.model import init_params
    from examples.parallel.fsdp import place

    layout = to_layout(init_params(cfg, random.key(seed)), mesh.shape[PIPE])
    opt = make_optimizer(layout, lr)
    ps = specs(layout)
    state = opt.init(layout)
    ss = fsdp.optimizer_specs(state, layout, ps)
    b = P(DATA) if DATA in mesh.shape else P()
    step = blu.jit(
        bp.shard(pp_step(cfg, opt, micro_batches, DATA in mesh.shape), mesh,
                 in_specs=(ps, ss, b, b), out_specs=(ps, ss, P()))
    )  # fmt: skip
    return place(layout, ps, mesh), place(state, ss, mesh), ps, ss, step, b


def per_device_memory(cfg: GPTConfig, sizes: dict, local_batch: int, micro_batches: int):
    """The planned memory of the step one device runs on a mesh of ``sizes`` (``{"pipe": S}``
    or ``{"data": D, "pipe": S}``), traced as a process of such a job (nothing runs)."""
    import blu.random as random
    from blu.parallel import fsdp
    from blu.transforms.axes import ProcessAxisEnv, process_axis_env
    from examples.gpt2.model import init_params
    from examples.parallel.fsdp import _local_zeros

    S = sizes[PIPE]
    layout = to_layout(init_params(cfg, random.key(0)), S)
    opt = make_optimizer(layout)
    ps = specs(layout)
    state = opt.init(layout)
    ss = fsdp.optimizer_specs(state, layout, ps)
    is_spec = lambda s: isinstance(s, P)  # noqa: E731
    lp = pytree.tree_map(lambda s, v: _local_zeros(v, s, S), ps, layout, is_leaf=is_spec)
    ls = pytree.tree_map(lambda s, v: _local_zeros(v, s, S), ss, state, is_leaf=is_spec)
    x = np.zeros((local_batch, cfg.n_ctx), np.int32)
    env = ProcessAxisEnv(sizes, {k: 0 for k in sizes}, lambda names: None)  # only traced
    with process_axis_env(env):
        step = pp_step(cfg, opt, micro_batches, DATA in sizes)
        return blu.jit(step).lower(lp, ls, x, x, target="cpu").memory_analysis()
