"""A LLaMA-style decoder as pure functions over a nested dict of parameters.

The architecture of Touvron et al. 2023, "LLaMA: Open and Efficient Foundation Language Models"
(and Llama 2/3, Meta's ``llama/model.py``; Hugging Face's ``modeling_llama.py``), beside GPT-2:

- pre-normalization with RMSNorm (Zhang & Sennrich 2019, "Root Mean Square Layer
  Normalization"): ``x / sqrt(mean(x²) + eps) * g``, no bias, no mean subtraction;
- rotary position embeddings (RoPE; Su et al. 2021, "RoFormer"), applied to queries and keys in
  the "rotate half" convention of Hugging Face's LLaMA: head dimension ``i < D/2`` pairs with
  ``i + D/2``, rotated by ``pos * theta^(-2i/D)`` (theta 10000 for LLaMA 1/2, 500000 for
  Llama 3); no learned position table, so the model only sees relative positions in q·k;
- a SwiGLU MLP (Shazeer 2020, "GLU Variants Improve Transformer"):
  ``w_down(silu(x w_gate) * (x w_up))``;
- grouped-query attention (Ainslie et al. 2023, "GQA"): ``n_kv_head`` key/value heads shared by
  groups of ``n_head / n_kv_head`` query heads; ``blu.nn.dot_product_attention`` takes the fewer
  K/V heads directly (query head ``n`` reads K/V head ``n // (n_head / n_kv_head)``, as
  ``repeat_kv`` in Meta's code), on every path (CPU kernels, blu's flash kernel and cuDNN), so
  they are never repeated in memory;
- no biases anywhere; the token embedding and the output head are separate matrices (untied).

Initialisation as this example's GPT-2: weights ~ N(0, 0.02²), the two residual projections of
each block (``wo``, ``w_down``) scaled by 1/sqrt(2·n_layer), RMSNorm gains 1.

Shapes: token ids ``(B, T)`` int32 with ``T <= n_ctx``; logits ``(B, T, vocab_size)``.
Projection weights are stored ``(in, out)`` (``y = x @ w``); the embedding and the output head
are ``(vocab_size, d_model)`` (the head's logits are ``h @ head.T``).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

import blu
import blu.numpy as bnp
from blu import nn
from examples.gpt2 import ExampleError
from examples.gpt2.model import Params, _dropout, _mm


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Hyperparameters of the architecture (field names shared with ``GPTConfig`` where they
    mean the same thing).

    Attributes:
        n_layer: transformer blocks.
        n_head: query heads (must divide ``d_model``; head size ``d_model / n_head``).
        d_model: width of the residual stream.
        n_ctx: longest sequence the example trains and samples (RoPE has no table to outgrow).
        d_ff: hidden width of the SwiGLU MLP (LLaMA: about 8/3·d_model, rounded up).
        n_kv_head: key/value heads (must divide ``n_head``; ``n_head``: plain multi-head).
        rope_theta: RoPE's base wavelength (10000 LLaMA 1/2; 500000 Llama 3).
        norm_eps: RMSNorm's epsilon.
        vocab_size, dropout, pad_vocab_to: as in ``GPTConfig``.
        arch: always ``"llama"`` (recorded in checkpoints to rebuild the right config).
    """

    n_layer: int
    n_head: int
    d_model: int
    n_ctx: int
    d_ff: int
    n_kv_head: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    vocab_size: int = 0
    dropout: float = 0.0
    pad_vocab_to: int = 1
    arch: str = "llama"

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def with_vocab(self, n_tokens: int) -> LlamaConfig:
        """This config sized for a tokenizer of ``n_tokens`` tokens (padded as configured)."""
        m = self.pad_vocab_to
        return dataclasses.replace(self, vocab_size=-(-n_tokens // m) * m)

    def check(self) -> None:
        """Raise ExampleError on sizes that cannot build a model."""
        for f in ("n_layer", "n_head", "d_model", "n_ctx", "d_ff", "n_kv_head", "vocab_size"):
            if getattr(self, f) <= 0:
                raise ExampleError(f"model config {f} must be positive, got {getattr(self, f)}")
        if self.d_model % self.n_head:
            raise ExampleError(f"d_model {self.d_model} is not divisible by n_head {self.n_head}")
        if self.head_dim % 2:  # RoPE rotates pairs of dimensions
            raise ExampleError(f"head size {self.head_dim} must be even for rotary embeddings")
        if self.n_head % self.n_kv_head:
            raise ExampleError(f"n_kv_head {self.n_kv_head} does not divide n_head {self.n_head}")
        if self.arch != "llama":
            raise ExampleError(f"LlamaConfig arch must be 'llama', got {self.arch!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ExampleError(f"dropout must be in [0, 1), got {self.dropout}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


CONFIGS: dict[str, LlamaConfig] = {
    # a few-second model for tests and CI (2 query heads per K/V head)
    "llama-tiny": LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, d_model=32, d_ff=96, n_ctx=32),
    # CPU-trainable, the size of GPT-2's "small" config
    "llama-small": LlamaConfig(n_layer=3, n_head=4, n_kv_head=2, d_model=128, d_ff=352, n_ctx=64),
    # GPT-2 124M's body (12 x 768, 12 heads) with 4 K/V heads and SwiGLU 2048
    "llama-125m": LlamaConfig(
        n_layer=12, n_head=12, n_kv_head=4, d_model=768, d_ff=2048, n_ctx=1024, pad_vocab_to=64
    ),
    # Llama-3.2-1B's shape (Meta, 2024): 16 layers, d 2048, 32 heads, 8 K/V heads, FFN 8192,
    # theta 500000 (its 128K vocabulary and tied head aside: the vocabulary is the tokenizer's)
    "llama-1b": LlamaConfig(
        n_layer=16,
        n_head=32,
        n_kv_head=8,
        d_model=2048,
        d_ff=8192,
        n_ctx=2048,
        rope_theta=500000.0,
        pad_vocab_to=64,
    ),
}


def init_params(cfg: LlamaConfig, key) -> Params:
    """Initial parameters (float32).

    Args:
        cfg: the architecture (with ``vocab_size`` set).
        key: a ``blu.random`` key.

    Returns:
        ``{"embed": (V, d), "layers": [block] * n_layer, "norm": {"g": (d,)}, "head": (V, d)}``,
        a block being ``{"attn_norm": {"g"}, "attn": {"wq": (d, H·Dh), "wk": (d, K·Dh),
        "wv": (d, K·Dh), "wo": (H·Dh, d)}, "mlp_norm": {"g"}, "mlp": {"w_gate": (d, F),
        "w_up": (d, F), "w_down": (F, d)}}``.
    """
    import blu.random as random

    cfg.check()
    d, f, std = cfg.d_model, cfg.d_ff, 0.02
    kv = cfg.n_kv_head * cfg.head_dim
    proj_std = std / math.sqrt(2 * cfg.n_layer)
    keys = iter(random.split(key, 2 + 7 * cfg.n_layer))

    def normal(shape, s=std):
        return random.normal(next(keys), shape, np.float32) * np.float32(s)

    def norm():
        return {"g": bnp.ones((d,), np.float32)}

    params: Params = {"embed": normal((cfg.vocab_size, d))}
    params["layers"] = [
        {
            "attn_norm": norm(),
            "attn": {
                "wq": normal((d, d)),
                "wk": normal((d, kv)),
                "wv": normal((d, kv)),
                "wo": normal((d, d), proj_std),
            },
            "mlp_norm": norm(),
            "mlp": {
                "w_gate": normal((d, f)),
                "w_up": normal((d, f)),
                "w_down": normal((f, d), proj_std),
            },
        }
        for _ in range(cfg.n_layer)
    ]
    params["norm"] = norm()
    params["head"] = normal((cfg.vocab_size, d))
    return params


def rope_tables(positions, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """RoPE's cosines and sines, ``(T, head_dim)`` float32 each (Su et al. 2021, eq. 34).

    Frequency ``i < D/2`` is ``theta^(-2i/D)``, repeated for both halves ("rotate half" layout).
    Angles are computed in float64 on the host (static positions), so long contexts keep their
    precision; the tables enter the program as constants.

    Args:
        positions: int positions, shape ``(T,)``.
        head_dim: ``D`` (even).
        theta: the base wavelength.
    """
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)  # (D/2,)
    ang = np.asarray(positions, np.float64)[:, None] * inv_freq[None, :]
    ang = np.concatenate([ang, ang], axis=-1)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def apply_rope(x, cos, sin):
    """Rotate queries or keys: ``x * cos + rotate_half(x) * sin``.

    Args:
        x: ``(B, T, heads, D)``.
        cos, sin: ``(T, D)`` from :func:`rope_tables` (cast to ``x``'s dtype).

    Returns:
        ``(B, T, heads, D)`` in ``x``'s dtype.
    """
    half = x.shape[-1] // 2
    rotated = bnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    c = bnp.asarray(cos[:, None, :]).astype(x.dtype)  # broadcast over the heads
    s = bnp.asarray(sin[:, None, :]).astype(x.dtype)
    return x * c + rotated * s


def _rms_norm(x, p, eps):
    return nn.rms_norm(x, p["g"], eps=eps)


def _attention(p, x, cfg: LlamaConfig, cos, sin, cd=None):
    """Causal grouped-query self-attention with RoPE: ``(B, T, d) -> (B, T, d)``."""
    B, T, _ = x.shape
    H, K, D = cfg.n_head, cfg.n_kv_head, cfg.head_dim
    xc = _mm(x, cd)
    q = (xc @ _mm(p["wq"], cd)).reshape(B, T, H, D)
    k = (xc @ _mm(p["wk"], cd)).reshape(B, T, K, D)
    v = (xc @ _mm(p["wv"], cd)).reshape(B, T, K, D)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    y = nn.dot_product_attention(q, k, v, is_causal=True)  # (B, T, H, D): K heads shared
    return y.reshape(B, T, H * D) @ _mm(p["wo"], cd)


def _swiglu_down(gate, up, w_down):
    return (nn.silu(gate) * up) @ w_down


# Under grad only the two products' outputs are kept for the backward pass (the gate's sigmoid,
# SiLU and the product of the two, each (B, T, d_ff), are recomputed there, fused into the
# backward's elementwise kernel): 4 of 6 (B, T, d_ff) buffers a layer fewer, 16 GiB of the 1B
# model's 59 at batch 8 x 2048.
_swiglu_down_remat = blu.checkpoint(_swiglu_down)


def _mlp(p, x, cd=None):
    """SwiGLU: ``(silu(x w_gate) * (x w_up)) w_down``, ``(B, T, d) -> (B, T, d)``."""
    xc = _mm(x, cd)
    return _swiglu_down_remat(xc @ _mm(p["w_gate"], cd), xc @ _mm(p["w_up"], cd),
                              _mm(p["w_down"], cd))  # fmt: skip


def hidden_states(params: Params, ids, cfg: LlamaConfig, key=None, compute_dtype=None):
    """The final RMSNorm's output, shape ``(B, T, d_model)``: what the output head reads.

    Token ``t`` of ``ids`` sits at position ``t`` (RoPE angle ``t·freq``); the sampler's fixed
    buffer relies on this (its tokens fill positions ``0..pos-1``). ``key`` and
    ``compute_dtype`` as in :func:`forward`.
    """
    B, T = ids.shape
    if T > cfg.n_ctx:
        raise ExampleError(f"sequence of {T} tokens is longer than the context n_ctx={cfg.n_ctx}")
    cos, sin = rope_tables(np.arange(T), cfg.head_dim, cfg.rope_theta)
    x = _dropout(nn.embedding(params["embed"], ids), cfg.dropout, key, 0)
    for i, blk in enumerate(params["layers"]):
        a = _attention(blk["attn"], _rms_norm(x, blk["attn_norm"], cfg.norm_eps), cfg, cos, sin,
                       compute_dtype)  # fmt: skip
        x = x + _dropout(a, cfg.dropout, key, 2 * i + 1)  # the residual keeps x's dtype
        m = _mlp(blk["mlp"], _rms_norm(x, blk["mlp_norm"], cfg.norm_eps), compute_dtype)
        x = x + _dropout(m, cfg.dropout, key, 2 * i + 2)
    return _rms_norm(x, params["norm"], cfg.norm_eps)


def logits_from_hidden(params: Params, h, compute_dtype=None):
    """The untied output head: ``h @ head.T``, ``(..., d_model) -> (..., vocab_size)``."""
    return _mm(h, compute_dtype) @ _mm(params["head"], compute_dtype).T


def forward(params: Params, ids, cfg: LlamaConfig, key=None, compute_dtype=None):
    """Logits of the next token at every position.

    Args:
        params: from :func:`init_params`.
        ids: int token ids, shape ``(B, T)``, ``T <= cfg.n_ctx``.
        cfg: the architecture.
        key: a ``blu.random`` key enabling dropout (``None``: no dropout).
        compute_dtype: e.g. ``bfloat16``: the matrix products' operands are cast to it (as
            GPT-2's ``forward``); embeddings, the residual stream and RMSNorm's statistics
            stay float32.

    Returns:
        logits, shape ``(B, T, vocab_size)``, in ``compute_dtype`` (else the parameters').
    """
    h = hidden_states(params, ids, cfg, key, compute_dtype)
    return logits_from_hidden(params, h, compute_dtype)


def loss_fn(params: Params, x, y, cfg: LlamaConfig, key=None, compute_dtype=None):
    """Mean next-token cross-entropy in nats (float32), the head and the loss fused as in
    GPT-2's ``loss_fn`` (:func:`blu.nn.linear_cross_entropy`). ``x``, ``y``: ``(B, T)`` int."""
    h = hidden_states(params, x, cfg, key, compute_dtype)
    return nn.linear_cross_entropy(_mm(h, compute_dtype), _mm(params["head"], compute_dtype), y)
