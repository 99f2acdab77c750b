"""GPT-2 as pure functions over a nested dict of parameters.

The architecture of Radford et al. 2019, "Language Models are Unsupervised Multitask Learners"
(reference code: ``openai/gpt-2`` ``src/model.py``, and nanoGPT's ``model.py``): learned token and
position embeddings, ``n_layer`` pre-LayerNorm blocks (causal multi-head self-attention, then a
4x MLP with tanh-approximated GELU), a final LayerNorm, and an output projection tied to the
token embedding. Initialisation as GPT-2: weights ~ N(0, 0.02²), the two residual projections
of each block scaled by 1/sqrt(2·n_layer), biases 0, LayerNorm gains 1.

Shapes: token ids ``(B, T)`` int32 with ``T <= n_ctx``; logits ``(B, T, vocab_size)``.
Linear weights are stored ``(in, out)`` (``y = x @ w + b``), as in GPT-2's ``Conv1D``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

import blu.numpy as bnp
from blu import nn
from blu.core import pytree
from examples.gpt2 import ExampleError

Params = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    """Hyperparameters of the architecture.

    Attributes:
        n_layer: transformer blocks.
        n_head: attention heads (must divide ``d_model``).
        d_model: width of the residual stream.
        n_ctx: longest sequence (rows of the position embedding).
        vocab_size: rows of the token embedding (the tokenizer's vocabulary, maybe padded).
        dropout: dropout rate on embeddings, attention output and MLP output (0 disables).
        pad_vocab_to: round the tokenizer's vocabulary up to a multiple of this (64 for
            GPT-2 124M: 50257 -> 50304, which suits matrix units); 1 keeps it exact.
        scan_layers: run the blocks as one ``lax.scan`` over their parameters stacked along
            a leading layer axis (as JAX users write it: one compiled block body, whatever
            the depth); the parameters are stored per block either way, and the results are
            the same up to rounding.
    """

    n_layer: int
    n_head: int
    d_model: int
    n_ctx: int
    vocab_size: int = 0
    dropout: float = 0.0
    pad_vocab_to: int = 1
    scan_layers: bool = False

    def with_vocab(self, n_tokens: int) -> GPTConfig:
        """This config sized for a tokenizer of ``n_tokens`` tokens (padded as configured)."""
        m = self.pad_vocab_to
        return dataclasses.replace(self, vocab_size=-(-n_tokens // m) * m)

    def check(self) -> None:
        """Raise ExampleError on sizes that cannot build a model."""
        for f in ("n_layer", "n_head", "d_model", "n_ctx", "vocab_size"):
            if getattr(self, f) <= 0:
                raise ExampleError(f"model config {f} must be positive, got {getattr(self, f)}")
        if self.d_model % self.n_head:
            raise ExampleError(f"d_model {self.d_model} is not divisible by n_head {self.n_head}")
        if not 0.0 <= self.dropout < 1.0:
            raise ExampleError(f"dropout must be in [0, 1), got {self.dropout}")

    def to_dict(self) -> dict:
        """The architecture (``scan_layers``, how it runs, is not part of it)."""
        d = dataclasses.asdict(self)
        d.pop("scan_layers")
        return d


CONFIGS: dict[str, GPTConfig] = {
    # a few-second model for tests and CI
    "tiny": GPTConfig(n_layer=2, n_head=2, d_model=32, n_ctx=32),
    # the CPU default: reaches a char-level val loss below 2.0 nats in a few minutes on 2 cores
    "small": GPTConfig(n_layer=3, n_head=4, d_model=128, n_ctx=64),
    # GPT-2 small (124M parameters with the padded 50304-token vocabulary)
    "gpt2-124m": GPTConfig(n_layer=12, n_head=12, d_model=768, n_ctx=1024, pad_vocab_to=64),
    # the larger GPT-2s (Radford et al. 2019, table 2; heads as OpenAI's released checkpoints)
    "gpt2-350m": GPTConfig(n_layer=24, n_head=16, d_model=1024, n_ctx=1024, pad_vocab_to=64),
    "gpt2-774m": GPTConfig(n_layer=36, n_head=20, d_model=1280, n_ctx=1024, pad_vocab_to=64),
    "gpt2-1.5b": GPTConfig(n_layer=48, n_head=25, d_model=1600, n_ctx=1024, pad_vocab_to=64),
}


def init_params(cfg: GPTConfig, key) -> Params:
    """GPT-2's initialisation (float32).

    Args:
        cfg: the architecture (with ``vocab_size`` set).
        key: a ``blu.random`` key.

    Returns:
        ``{"wte": (V, d), "wpe": (n_ctx, d), "h": [block] * n_layer, "ln_f": {"g", "b"}}``,
        a block being ``{"ln_1", "attn": {"c_attn", "c_proj"}, "ln_2", "mlp": {"c_fc",
        "c_proj"}}`` with linears ``{"w": (in, out), "b": (out,)}``.
    """
    import blu.random as random

    cfg.check()
    d, std = cfg.d_model, 0.02
    proj_std = std / math.sqrt(2 * cfg.n_layer)
    keys = iter(random.split(key, 2 + 4 * cfg.n_layer))

    def normal(shape, s):
        return random.normal(next(keys), shape, np.float32) * np.float32(s)

    def linear(n_in, n_out, s):
        return {"w": normal((n_in, n_out), s), "b": bnp.zeros((n_out,), np.float32)}

    def ln():
        return {"g": bnp.ones((d,), np.float32), "b": bnp.zeros((d,), np.float32)}

    params: Params = {"wte": normal((cfg.vocab_size, d), std), "wpe": normal((cfg.n_ctx, d), std)}
    params["h"] = [
        {
            "ln_1": ln(),
            "attn": {"c_attn": linear(d, 3 * d, std), "c_proj": linear(d, d, proj_std)},
            "ln_2": ln(),
            "mlp": {"c_fc": linear(d, 4 * d, std), "c_proj": linear(4 * d, d, proj_std)},
        }
        for _ in range(cfg.n_layer)
    ]
    params["ln_f"] = ln()
    return params


def num_params(params: Params) -> int:
    return sum(int(np.prod(np.shape(p))) for p in pytree.tree_leaves(params))


def _mm(x, cd):
    """A matrix product's operand in the compute dtype ``cd`` (``None``: as it is)."""
    return x if cd is None else x.astype(cd)


def _linear(x, p, cd=None):
    return nn.linear(_mm(x, cd), _mm(p["w"], cd), _mm(p["b"], cd))


def _layer_norm(x, p):
    return nn.layer_norm(x, p["g"], p["b"], eps=1e-5)


def _dropout(x, rate, key, i):
    if rate == 0.0 or key is None:
        return x
    import blu.random as random

    return nn.dropout(random.fold_in(key, i), x, rate, deterministic=False)


def _attention(p, x, n_head, cd=None):
    B, T, C = x.shape
    qkv = _linear(x, p["c_attn"], cd).reshape(B, T, 3, n_head, C // n_head)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    y = nn.dot_product_attention(q, k, v, is_causal=True)  # (B, T, H, D)
    return _linear(y.reshape(B, T, C), p["c_proj"], cd)


def _mlp(p, x, cd=None):
    return _linear(nn.gelu(_linear(x, p["c_fc"], cd), approximate=True), p["c_proj"], cd)


def hidden_states(params: Params, ids, cfg: GPTConfig, key=None, compute_dtype=None):
    """The final LayerNorm's output, shape ``(B, T, d_model)``: what the output projection
    reads (see :func:`forward`; ``compute_dtype`` as there)."""
    B, T = ids.shape
    if T > cfg.n_ctx:
        raise ExampleError(f"sequence of {T} tokens is longer than the context n_ctx={cfg.n_ctx}")
    x = nn.embedding(params["wte"], ids) + params["wpe"][:T]
    x = _dropout(x, cfg.dropout, key, 0)
    if cfg.scan_layers:  # one block body scanned over the stacked blocks (and their indices)
        from blu import lax

        stacked = pytree.tree_map(lambda *ls: bnp.stack(ls), *params["h"])
        layer = bnp.arange(len(params["h"]), dtype=np.int32)
        body = lambda x, blk_i: (_block(blk_i[0], x, cfg, key, blk_i[1], compute_dtype), None)  # noqa: E731
        x, _ = lax.scan(body, x, (stacked, layer))
    else:
        for i, blk in enumerate(params["h"]):
            x = _block(blk, x, cfg, key, i, compute_dtype)
    return _layer_norm(x, params["ln_f"])


def _block(blk, x, cfg: GPTConfig, key, i, compute_dtype):
    """Block ``i`` (an int, or a traced index under ``scan_layers``) on the residual ``x``."""
    a = _attention(blk["attn"], _layer_norm(x, blk["ln_1"]), cfg.n_head, compute_dtype)
    x = x + _dropout(a, cfg.dropout, key, 2 * i + 1)  # the residual keeps x's dtype
    m = _mlp(blk["mlp"], _layer_norm(x, blk["ln_2"]), compute_dtype)
    return x + _dropout(m, cfg.dropout, key, 2 * i + 2)


def logits_from_hidden(params: Params, h, compute_dtype=None):
    """The tied output projection: ``h @ wte.T``, ``(..., d_model) -> (..., vocab_size)``."""
    return _mm(h, compute_dtype) @ _mm(params["wte"], compute_dtype).T


def forward(params: Params, ids, cfg: GPTConfig, key=None, compute_dtype=None):
    """Logits of the next token at every position.

    Args:
        params: from :func:`init_params` (any float dtype: the compute follows it).
        ids: int token ids, shape ``(B, T)``, ``T <= cfg.n_ctx``.
        cfg: the architecture.
        key: a ``blu.random`` key enabling dropout (``None``: no dropout, e.g. for eval).
        compute_dtype: e.g. ``bfloat16``: mixed precision as ``torch.autocast`` does it: the
            matrix products' operands (activations, weights, biases) are cast to it, so the
            products and what directly follows them (attention, GELU) run in it; embeddings, the
            residual stream and LayerNorm stay in the parameters' dtype (bf16 residuals lose
            the small updates each block adds). ``None``: everything in the parameters' dtype.

    Returns:
        logits, shape ``(B, T, vocab_size)``, in ``compute_dtype`` (else the parameters').

    Raises:
        ExampleError: ``T > cfg.n_ctx``.
    """
    h = hidden_states(params, ids, cfg, key, compute_dtype)
    return logits_from_hidden(params, h, compute_dtype)


def loss_fn(params: Params, x, y, cfg: GPTConfig, key=None, compute_dtype=None):
    """Mean next-token cross-entropy in nats (float32).

    The output projection and the loss are one fused classifier
    (:func:`blu.nn.linear_cross_entropy`, llm.c's): the ``(B·T, vocab)`` logits are made and
    differentiated in row chunks, never held whole.

    Args:
        params: float32 master parameters.
        x, y: int token ids and targets, shape ``(B, T)``.
        compute_dtype: e.g. ``bfloat16``: mixed precision as in :func:`forward` (the products
            in it, the logits and the loss in float32; the gradient still arrives in float32,
            through the casts); ``None`` computes in float32.
    """
    h = hidden_states(params, x, cfg, key, compute_dtype)
    return nn.linear_cross_entropy(_mm(h, compute_dtype), _mm(params["wte"], compute_dtype), y)
