"""The LLaMA-style decoder in PyTorch, the same math as blu's (``examples/gpt2/llama.py``).

``torch_gpt2.py --arch llama`` builds it (the step, timing, peak memory and fidelity run are
that script's): pre-RMSNorm (statistics in float32, ``eps`` 1e-5), RoPE on queries and keys in
the "rotate half" layout (dimension ``i < D/2`` pairs with ``i + D/2``, angle
``pos * theta^(-2i/D)``, tables computed in float64 and cast to the activations' dtype as blu
does), grouped-query causal attention through SDPA (query head ``n`` reads K/V head
``n // (H/K)``: ``enable_gqa`` in bf16 from torch 2.5, else ``repeat_interleave`` of K and V;
``TORCH_LLAMA_GQA=repeat|sdpa`` forces one), a SwiGLU MLP, no biases, an untied output head;
the loss is the mean cross-entropy of float32 logits.

Weights load from blu's ``.npz`` (:func:`blu_name_map`): blu stores projections ``(in, out)``
(``y = x @ w``), torch's ``Linear`` ``(out, in)``, so they are transposed; the embedding and the
head are ``(vocab, d)`` in both.
"""

from __future__ import annotations

import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# SDPA reads fewer K/V heads itself from torch 2.5 (``enable_gqa``), but only its flash kernel
# does (fp16/bf16): for float32, enable_gqa falls back to the unfused math kernel, so K/V are
# repeated instead. TORCH_LLAMA_GQA=repeat|sdpa overrides the choice (auto by default).
_GQA_OK = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 5)
GQA_MODE = os.environ.get("TORCH_LLAMA_GQA", "auto")
if GQA_MODE not in ("auto", "repeat", "sdpa"):
    raise ValueError(f"TORCH_LLAMA_GQA must be auto, repeat or sdpa, got {GQA_MODE!r}")


def sdpa_reads_gqa(dtype: torch.dtype) -> bool:
    """Whether SDPA gets the fewer K/V heads (``enable_gqa``) rather than repeated ones."""
    if GQA_MODE != "auto":
        return GQA_MODE == "sdpa"
    return _GQA_OK and dtype in (torch.float16, torch.bfloat16)


def rope_tables(T: int, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosines and sines ``(T, head_dim)`` float32, as blu's ``llama.rope_tables``."""
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv_freq[None, :]
    ang = np.concatenate([ang, ang], axis=-1)
    return (torch.from_numpy(np.cos(ang).astype(np.float32)),
            torch.from_numpy(np.sin(ang).astype(np.float32)))  # fmt: skip


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` for ``x`` ``(B, heads, T, D)``, tables ``(T, D)``."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x²) + eps) * g`` with the statistics in float32, output in x's dtype."""

    def __init__(self, d: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


class Block(nn.Module):
    """Pre-RMSNorm block: GQA with RoPE, then SwiGLU."""

    def __init__(self, d: int, n_head: int, n_kv_head: int, d_ff: int, eps: float):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = n_head, n_kv_head, d // n_head
        kv = n_kv_head * self.head_dim
        self.attn_norm, self.mlp_norm = RMSNorm(d, eps), RMSNorm(d, eps)
        self.wq, self.wk = nn.Linear(d, d, bias=False), nn.Linear(d, kv, bias=False)
        self.wv, self.wo = nn.Linear(d, kv, bias=False), nn.Linear(d, d, bias=False)
        self.w_gate, self.w_up = nn.Linear(d, d_ff, bias=False), nn.Linear(d, d_ff, bias=False)
        self.w_down = nn.Linear(d_ff, d, bias=False)

    def attention(self, x, cos, sin):
        B, T, d = x.shape
        H, K, D = self.n_head, self.n_kv_head, self.head_dim
        q = self.wq(x).view(B, T, H, D).transpose(1, 2)
        k = self.wk(x).view(B, T, K, D).transpose(1, 2)
        v = self.wv(x).view(B, T, K, D).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # query head n reads K/V head n // (H / K), as blu and Meta's repeat_kv
        native = H != K and sdpa_reads_gqa(q.dtype)
        if H != K and not native:
            k, v = k.repeat_interleave(H // K, dim=1), v.repeat_interleave(H // K, dim=1)
        gqa = dict(enable_gqa=True) if native else {}
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
        return self.wo(y.transpose(1, 2).reshape(B, T, d))

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attn_norm(x), cos, sin)
        h = self.mlp_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Llama(nn.Module):
    """The decoder with an untied head; ``forward(idx, tgt)`` returns the mean loss."""

    def __init__(self, vocab: int, n_layer: int, n_head: int, d: int, n_ctx: int,
                 n_kv_head: int, d_ff: int, rope_theta: float, norm_eps: float):  # fmt: skip
        super().__init__()
        if d % n_head or n_head % n_kv_head or (d // n_head) % 2:
            raise ValueError(
                f"d_model {d}, n_head {n_head}, n_kv_head {n_kv_head}: the heads must divide "
                "d_model, the K/V heads the heads, and the head size must be even"
            )
        self.vocab = vocab
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(
            Block(d, n_head, n_kv_head, d_ff, norm_eps) for _ in range(n_layer)
        )
        self.norm = RMSNorm(d, norm_eps)
        self.head = nn.Linear(d, vocab, bias=False)
        cos, sin = rope_tables(n_ctx, d // n_head, rope_theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, tgt):
        T = idx.shape[1]
        cos, sin = self.cos[:T], self.sin[:T]
        x = self.embed(idx)
        for b in self.layers:
            x = b(x, cos, sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, self.vocab), tgt.view(-1))


def blu_name_map(n_layer: int) -> dict[str, tuple[str, bool]]:
    """``{blu tensor name: (torch parameter name, transpose?)}`` for blu's LLaMA parameters."""
    m = {"params.embed": ("embed.weight", False), "params.head": ("head.weight", False),
         "params.norm.g": ("norm.weight", False)}  # fmt: skip
    for i in range(n_layer):
        for norm in ("attn_norm", "mlp_norm"):
            m[f"params.layers.{i}.{norm}.g"] = (f"layers.{i}.{norm}.weight", False)
        for group, names in (("attn", ("wq", "wk", "wv", "wo")),
                             ("mlp", ("w_gate", "w_up", "w_down"))):  # fmt: skip
            for n in names:
                m[f"params.layers.{i}.{group}.{n}"] = (f"layers.{i}.{n}.weight", True)
    return m
