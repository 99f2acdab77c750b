"""GPT-2 with Megatron tensor parallelism (``blu.parallel.tensor``), optionally with sequence
parallelism and a data axis (a 2-D mesh ``data x model``).

Attention is split by heads and the MLP by its hidden features over the ``model`` axis (Shoeybi
et al. 2019, section 3): ``c_attn`` and ``c_fc`` are column-parallel, the two ``c_proj`` are
row-parallel, with one all-reduce (``psum``) each; embeddings, layer norms and the row-parallel
biases are replicated. With ``sequence_parallel`` (Korthikanti et al. 2022) the residual stream
is split over the sequence between the layers: each all-reduce becomes a reduce-scatter and an
all-gather precedes the next column-parallel layer, so layer norms run on 1/M of the tokens.
With a ``data`` axis the batch is split over it and the loss averaged over it (DP x TP).

``c_attn``'s ``(d, 3d)`` weight (q, k, v side by side) is kept as ``(d, 3, d)`` (and its bias as
``(3, d)``) so that splitting its last dimension gives each device the q, k and v of its heads
(:func:`to_layout` / :func:`from_layout`; the values are the same, only the shapes differ).

    BLU_NUM_CPU_DEVICES=4 python -m examples.parallel.gpt2 --mesh data=2,model=2 --steps 20
    python -m blu.parallel.launch --nproc 4 --backend mpi examples/parallel/gpt2.py --mesh model=4
"""

from __future__ import annotations

from typing import Any

import numpy as np

import blu
from blu import lax, nn
from blu import parallel as bp
from blu.core import pytree
from blu.parallel import P, tensor
from examples.gpt2.model import GPTConfig, _layer_norm
from examples.parallel.data_parallel import make_optimizer

MODEL, DATA = "model", "data"


def to_layout(params: Any) -> Any:
    """GPT-2's parameters with ``c_attn`` reshaped for head-wise splitting (values unchanged)."""

    def blk(b):
        d = np.shape(b["attn"]["c_attn"]["w"])[0]
        ca = b["attn"]["c_attn"]
        attn = dict(b["attn"], c_attn={"w": ca["w"].reshape(d, 3, d), "b": ca["b"].reshape(3, d)})
        return dict(b, attn=attn)

    return dict(params, h=[blk(b) for b in params["h"]])


def from_layout(tree: Any) -> Any:
    """The inverse of :func:`to_layout` (for parameters or gradients)."""

    def blk(b):
        ca = b["attn"]["c_attn"]
        d = np.shape(ca["w"])[0]
        attn = dict(b["attn"], c_attn={"w": ca["w"].reshape(d, 3 * d), "b": ca["b"].reshape(-1)})
        return dict(b, attn=attn)

    return dict(tree, h=[blk(b) for b in tree["h"]])


def specs(layout_params: Any, model: Any = MODEL) -> Any:
    """The tensor-parallel PartitionSpec of every parameter (in :func:`to_layout`'s shapes)."""
    rep = pytree.tree_map(lambda _: P(), layout_params)

    def blk(b):
        return dict(
            b,
            attn={"c_attn": {"w": P(None, None, model), "b": P(None, model)},
                  "c_proj": {"w": P(model, None), "b": P()}},
            mlp={"c_fc": {"w": P(None, model), "b": P(model)},
                 "c_proj": {"w": P(model, None), "b": P()}},
        )  # fmt: skip

    return dict(rep, h=[blk(b) for b in rep["h"]])


def _attention(p, x, n_head_local, sp):
    """Causal self-attention over this device's heads; ``x`` is ``(B, T, d)`` whole."""
    B, T, C = x.shape
    w = p["c_attn"]["w"]
    qkv = tensor.column_linear(x, w.reshape(C, -1), p["c_attn"]["b"].reshape(-1))
    qkv = qkv.reshape(B, T, 3, n_head_local, -1)
    y = nn.dot_product_attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], is_causal=True)
    y = y.reshape(B, T, -1)
    return tensor.row_linear(y, p["c_proj"]["w"], p["c_proj"]["b"], MODEL,
                             scatter_dimension=1 if sp else None)  # fmt: skip


def _mlp(p, x, sp):
    h = nn.gelu(tensor.column_linear(x, p["c_fc"]["w"], p["c_fc"]["b"]), approximate=True)
    return tensor.row_linear(h, p["c_proj"]["w"], p["c_proj"]["b"], MODEL,
                             scatter_dimension=1 if sp else None)  # fmt: skip


def local_loss(p: Any, x, y, cfg: GPTConfig, sequence_parallel: bool = False):
    """This device's mean next-token cross-entropy (inside ``blu.shard``): over the whole
    local batch (replicated over ``model``), or with sequence parallelism over this device's
    tokens (``x``, ``y`` are then ``(B, T / M)`` blocks)."""
    m = bp.axis_size(MODEL)
    sp = sequence_parallel
    T = x.shape[1]
    if sp:  # this device's positions: block axis_index(model) of the sequence
        pos = lax.dynamic_slice_in_dim(p["wpe"], bp.axis_index(MODEL) * T, T, 0)
    else:
        pos = p["wpe"][:T]
    h = nn.embedding(p["wte"], x) + pos
    gather = (lambda a: tensor.gather_sequence(a, MODEL, 1)) if sp else (lambda a: a)
    for blk in p["h"]:
        h = h + _attention(blk["attn"], gather(_layer_norm(h, blk["ln_1"])), cfg.n_head // m, sp)
        h = h + _mlp(blk["mlp"], gather(_layer_norm(h, blk["ln_2"])), sp)
    return nn.linear_cross_entropy(_layer_norm(h, p["ln_f"]), p["wte"], y)


def _batch_spec(mesh, sp: bool) -> P:
    d = DATA if DATA in mesh.shape else None
    return P(d, MODEL) if sp else P(d)


def grads_fn(cfg: GPTConfig, mesh, param_specs: Any, sequence_parallel: bool = False):
    """``(layout_params, x, y) -> (loss, grads)`` of the global batch, jitted, sharded as
    ``param_specs`` (for tests against the single-device gradients)."""
    has_data = DATA in mesh.shape

    def f(p, x, y):
        return blu.value_and_grad(global_loss(cfg, has_data, sequence_parallel))(p, x, y)

    b = _batch_spec(mesh, sequence_parallel)
    return blu.jit(bp.shard(f, mesh, (param_specs, b, b), (P(), param_specs)))


def global_loss(cfg: GPTConfig, has_data: bool, sp: bool):
    """``(p, x, y) -> loss`` of the global batch (inside ``blu.shard``): the mean of the
    devices' :func:`local_loss` over ``model`` (a no-op unless sequence parallel, where each
    device has its own tokens' mean) and ``data``. Its gradient inside ``shard`` is the global
    gradient (shard_map's rule): split parameters get theirs, and replicated ones get the
    all-reduce of their partial gradients (Megatron's) from the transpose of the implicit
    ``pvary``."""
    axes = (DATA, MODEL) if has_data else MODEL
    return lambda p, x, y: bp.pmean(local_loss(p, x, y, cfg, sp), axes)


def tp_step(cfg: GPTConfig, opt, param_specs: Any, has_data: bool, sp: bool):
    """The per-device step: the global loss and its gradients (all-reduces included), AdamW."""

    def step(p, opt_state, x, y):
        l, g = blu.value_and_grad(global_loss(cfg, has_data, sp))(p, x, y)
        p, opt_state = opt.step(g, opt_state, p)
        return p, opt_state, l

    return step


def setup(cfg: GPTConfig, mesh, lr: float = 3e-3, seed: int = 0, sequence_parallel: bool = False):
    """Parameters and AdamW state laid out for ``mesh`` (axes ``model`` and maybe ``data``),
    their specs, and the jitted step ``(params, state, x, y) -> (params, state, loss)``."""
    import blu.random as random
    from blu.parallel import fsdp
    from examples.gpt2.model import init_params
    from examples.parallel.fsdp import place

    if cfg.n_head % mesh.shape[MODEL]:
        raise ValueError(f"{cfg.n_head} heads do not split over {mesh.shape[MODEL]} devices")
    params = init_params(cfg, random.key(seed))
    opt = make_optimizer(params, lr)  # the mask's structure is the layout's
    lp = to_layout(params)
    ps = specs(lp)
    state = opt.init(lp)
    ss = fsdp.optimizer_specs(state, lp, ps)
    b = _batch_spec(mesh, sequence_parallel)
    step = blu.jit(
        bp.shard(
            tp_step(cfg, opt, ps, DATA in mesh.shape, sequence_parallel),
            mesh,
            in_specs=(ps, ss, b, b),
            out_specs=(ps, ss, P()),
        )  # fmt: skip
    )
    return place(lp, ps, mesh), place(state, ss, mesh), ps, ss, step, b


def per_device_memory(cfg: GPTConfig, sizes: dict, local_batch: int, sp: bool = False):
    """The planned memory of the step one device runs on a mesh of ``sizes`` (``{"model": M}``
    or ``{"data": D, "model": M}``), traced as a process of such a job (nothing runs)."""
    import blu.random as random
    from blu.parallel import fsdp
    from blu.transforms.axes import ProcessAxisEnv, process_axis_env
    from examples.gpt2.model import init_params
    from examples.parallel.fsdp import _local_zeros

    params = init_params(cfg, random.key(0))
    opt = make_optimizer(params)
    lp = to_layout(params)
    ps = specs(lp)
    state = opt.init(lp)
    ss = fsdp.optimizer_specs(state, lp, ps)
    m = sizes[MODEL]
    is_spec = lambda s: isinstance(s, P)  # noqa: E731
    lpl = pytree.tree_map(lambda s, v: _local_zeros(v, s, m), ps, lp, is_leaf=is_spec)
    lsl = pytree.tree_map(lambda s, v: _local_zeros(v, s, m), ss, state, is_leaf=is_spec)
    x = np.zeros((local_batch, cfg.n_ctx // m if sp else cfg.n_ctx), np.int32)
    env = ProcessAxisEnv(sizes, {k: 0 for k in sizes}, lambda names: None)  # only traced
    step = tp_step(cfg, opt, ps, DATA in sizes, sp)
    with process_axis_env(env):
        return blu.jit(step).lower(lpl, lsl, x, x, target="cpu").memory_analysis()
