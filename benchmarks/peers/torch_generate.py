"""GPT-2 generation with a KV cache in PyTorch: the peer of ``examples/gpt2/decode.py``.

The same model as blu's (tied embeddings, tanh GELU, LayerNorm eps 1e-5), loaded from the same
numpy arrays (``params.<key path>`` names, linear weights stored ``(in, out)``). Decoding is
written as PyTorch users write it for speed (gpt-fast's way): a static cache per layer,
``(B, n_head, L, head_dim)`` buffers of the module written with ``index_copy_`` at a position
held in a device tensor, attention of the one new query over the cache with a position mask
(``scaled_dot_product_attention``), top-k sampling without a host synchronisation
(``torch.topk``, then the exponential race: ``argmax(p / Exp(1))`` draws from ``p``). The loop
is a Python loop over decode steps; the tokens stay on the device until the end (one ``.cpu()``
per call). ``compile=True`` wraps the decode step (model + sampling) in
``torch.compile(mode="reduce-overhead", fullgraph=True)`` (CUDA graphs); the prefill runs eager
in both.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    """Pre-LayerNorm block with a static KV cache (buffers ``k_cache``, ``v_cache``)."""

    def __init__(self, d: int, n_head: int):
        super().__init__()
        self.d, self.n_head = d, n_head
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.register_buffer("k_cache", None)
        self.register_buffer("v_cache", None)

    def forward(self, x, pos, mask):
        """``x`` (B, T, d) at positions ``pos`` (T,) long; ``mask`` (T, L) bool or None
        (causal over the first T positions: the prefill)."""
        B, T, d = x.shape
        h = self.n_head
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (t.view(B, T, h, d // h).transpose(1, 2) for t in (q, k, v))
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=mask)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    """GPT-2 with a tied output projection; ``setup_cache`` sizes the caches."""

    def __init__(self, vocab: int, n_layer: int, n_head: int, d: int, n_ctx: int):
        super().__init__()
        self.n_head, self.d = n_head, d
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(n_ctx, d)
        self.blocks = nn.ModuleList(Block(d, n_head) for _ in range(n_layer))
        self.lnf = nn.LayerNorm(d)
        self.register_buffer("arange", None)

    def setup_cache(self, batch: int, length: int) -> None:
        """Zeroed caches ``(batch, n_head, length, head_dim)`` per layer, as buffers."""
        p = self.wte.weight
        shape = (batch, self.n_head, length, self.d // self.n_head)
        for b in self.blocks:
            b.register_buffer("k_cache", torch.zeros(shape, dtype=p.dtype, device=p.device))
            b.register_buffer("v_cache", torch.zeros(shape, dtype=p.dtype, device=p.device))
        self.register_buffer("arange", torch.arange(length, device=p.device))

    def forward(self, idx, pos, mask=None):
        """Float32 logits ``(B, vocab)`` of the token after the last of ``idx`` (B, T)."""
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x, pos, mask)
        return (self.lnf(x[:, -1]) @ self.wte.weight.T).float()


def load_weights(model: GPT, named: dict[str, np.ndarray]) -> None:
    """Copy blu's parameters (``params.<key path>`` names, linears ``(in, out)``) into ``model``."""
    dev, dt = model.wte.weight.device, model.wte.weight.dtype

    def put(t: torch.Tensor, a: np.ndarray, transpose: bool = False) -> None:
        a = np.asarray(a, np.float32)
        with torch.no_grad():
            t.copy_(torch.from_numpy(a.T.copy() if transpose else a).to(dev, dt))

    put(model.wte.weight, named["params.wte"])
    put(model.wpe.weight, named["params.wpe"])
    put(model.lnf.weight, named["params.ln_f.g"])
    put(model.lnf.bias, named["params.ln_f.b"])
    for i, b in enumerate(model.blocks):
        pre = f"params.h.{i}."
        for mod, name in ((b.ln1, "ln_1"), (b.ln2, "ln_2")):
            put(mod.weight, named[pre + name + ".g"])
            put(mod.bias, named[pre + name + ".b"])
        for mod, name in ((b.qkv, "attn.c_attn"), (b.proj, "attn.c_proj"),
                          (b.fc, "mlp.c_fc"), (b.out, "mlp.c_proj")):  # fmt: skip
            put(mod.weight, named[pre + name + ".w"], transpose=True)
            put(mod.bias, named[pre + name + ".b"])


def sample(logits, temperature: float, top_k: int, n_valid: int, generator=None):
    """int64 ``(B,)``: greedy (``temperature == 0``) or top-k sampling, no host sync."""
    if n_valid < logits.shape[-1]:
        logits = logits[:, :n_valid]
    if temperature == 0.0:
        return logits.argmax(-1)
    logits = logits / temperature
    if 0 < top_k < logits.shape[-1]:
        vals, idx = torch.topk(logits, top_k, dim=-1)
        p = torch.softmax(vals, dim=-1)
        choice = (p / torch.empty_like(p).exponential_(1, generator=generator)).argmax(-1)
        return idx.gather(1, choice[:, None])[:, 0]
    p = torch.softmax(logits, dim=-1)
    return (p / torch.empty_like(p).exponential_(1, generator=generator)).argmax(-1)


class TorchGenerator:
    """``n_new`` tokens after a prompt with the cached model (see the module's docstring).

    Args:
        model: a :class:`GPT` on its device, in its dtype.
        n_new: tokens per sequence; temperature, top_k, n_valid: as ``sample``.
        compile: compile the decode step with ``torch.compile(mode="reduce-overhead")``.
    """

    def __init__(self, model: GPT, n_new: int, temperature: float, top_k: int, n_valid: int,
                 compile: bool = False):  # fmt: skip
        self.model, self.n_new = model, n_new
        self.how = (temperature, top_k, n_valid)
        self.step = self._step
        if compile:
            self.step = torch.compile(self._step, mode="reduce-overhead", fullgraph=True)
        self.sized: tuple[int, int] | None = None

    def _step(self, tok, pos):
        """Token ``tok`` (B,) long at position ``pos`` (1,) long: the next token (B,)."""
        mask = (self.model.arange <= pos)[None, :]  # (1, L)
        logits = self.model(tok[:, None], pos, mask)
        return sample(logits, *self.how)

    @torch.no_grad()
    def __call__(self, prompt: torch.Tensor) -> np.ndarray:
        """int64 ``(B, n_new)`` tokens (on the host) after ``prompt`` (B, P) long on the device."""
        B, P = prompt.shape
        if self.sized != (B, P):
            self.model.setup_cache(B, P + self.n_new)
            self.sized = (B, P)
        dev = prompt.device
        out = torch.empty((B, self.n_new), dtype=torch.long, device=dev)
        logits = self.model(prompt, torch.arange(P, device=dev))
        tok = sample(logits, *self.how)
        out[:, 0] = tok
        for i in range(1, self.n_new):
            pos = torch.full((1,), P - 1 + i, dtype=torch.long, device=dev)
            tok = self.step(tok.clone(), pos)
            out[:, i] = tok
        return out.cpu().numpy()


def make_model(named: dict[str, np.ndarray], n_layer: int, n_head: int, n_ctx: int,
               device: str, dtype: torch.dtype) -> GPT:  # fmt: skip
    """The peer model with blu's weights ``named``, on ``device`` in ``dtype``, eval mode."""
    vocab, d = named["params.wte"].shape
    model = GPT(vocab, n_layer, n_head, d, n_ctx).to(device=device, dtype=dtype).eval()
    load_weights(model, named)
    return model
