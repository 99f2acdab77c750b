"""GPT-2 decoding with a KV cache: prefill, one-token decode steps, and a generation loop that
runs whole on the device.

The cache holds, per layer, the keys and the values of every position seen so far:
``{"k": [(B, n_head, L, head_dim)] * n_layer, "v": [...]}`` in the parameters' dtype, ``L`` the
cache length (``<= cfg.n_ctx``; :class:`Generator` uses prompt + new tokens). Heads come before
positions so that a decode step's two products (``q @ K^T`` and ``p @ V``) are batched matrix
products over ``(B, n_head)`` that read the cache where it lies (no transpose of the cache per
step). A step writes its key and value at position ``pos`` with ``lax.dynamic_update_slice``
and attends over the positions ``<= pos`` by a mask on position: every step has the same
shapes, so one compiled step serves them all, and inside a loop the cache is a carry updated in
place.

:class:`Generator` is one jitted program ``(params, prompt, key) -> tokens``: the prefill, then
a loop of decode steps with top-k sampling (``lax.top_k``, then ``random.categorical`` over the
``k`` best logits), the tokens written into an output buffer with ``dynamic_update_slice``. The
loop is a ``lax.while_loop`` (``loop="while"``: stops after ``n_new`` tokens or once every
sequence has drawn ``eos_id``; on the GPU its predicate is read by the host once per token) or
a ``lax.fori_loop`` with static bounds (``loop="fori"``: a scan, ``n_new`` steps whatever is
drawn; on the GPU every step is queued without waiting, so the only host synchronisation of a
sequence is reading its tokens). Both draw the same tokens from the same key: step ``i`` samples
with ``random.fold_in(key, i)``.

Numerics: the prefill is the training model's computation (``model._attention``'s products and
``nn.dot_product_attention``); a decode step computes the attention of its one query in float32
(scores, softmax) with the products in the parameters' dtype, as the fused attention does.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

import blu
import blu.numpy as bnp
import blu.random as random
from blu import lax, nn
from examples.gpt2 import ExampleError
from examples.gpt2.model import GPTConfig, Params, _layer_norm, _linear, _mlp

Cache = dict[str, list[Any]]
LOOPS = ("while", "fori")

__all__ = ["LOOPS", "Generator", "decode_step", "generate", "init_cache", "prefill", "sample"]


def init_cache(cfg: GPTConfig, batch: int, length: int | None = None, dtype=np.float32) -> Cache:
    """An empty cache: zeros ``(batch, n_head, length, head_dim)`` per layer, for K and V.

    Args:
        cfg: the architecture.
        batch: sequences decoded together.
        length: positions the cache holds (default ``cfg.n_ctx``; at most that).
        dtype: the parameters' dtype (a step computes in it).

    Raises:
        ExampleError: ``length`` outside ``[1, cfg.n_ctx]`` or ``batch < 1``.
    """
    length = cfg.n_ctx if length is None else int(length)
    if not 0 < length <= cfg.n_ctx:
        raise ExampleError(f"cache length must be in [1, n_ctx={cfg.n_ctx}], got {length}")
    if batch < 1:
        raise ExampleError(f"batch must be >= 1, got {batch}")
    shape = (batch, cfg.n_head, length, cfg.d_model // cfg.n_head)
    return {
        "k": [bnp.zeros(shape, dtype) for _ in range(cfg.n_layer)],
        "v": [bnp.zeros(shape, dtype) for _ in range(cfg.n_layer)],
    }


def _qkv(p, x, n_head):
    """Queries, keys, values of ``x`` ``(B, T, C)``: three ``(B, T, n_head, head_dim)``."""
    B, T, C = x.shape
    qkv = _linear(x, p["c_attn"]).reshape(B, T, 3, n_head, C // n_head)
    return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]


def prefill(params: Params, prompt_ids, cfg: GPTConfig, length: int | None = None):
    """Run the prompt through the model, keeping its keys and values.

    Args:
        params: the model's parameters (float32 or bfloat16: the compute follows them).
        prompt_ids: int32 ``(B, P)``, ``1 <= P <= length``.
        cfg: the architecture.
        length: the cache's length (default ``cfg.n_ctx``).

    Returns:
        ``(logits_last, cache)``: the next token's logits after the prompt, float32
        ``(B, vocab_size)``, and the cache (see :func:`init_cache`) holding positions
        ``[0, P)``.

    Raises:
        ExampleError: an empty prompt, or one longer than the cache.
    """
    B, P = prompt_ids.shape
    length = cfg.n_ctx if length is None else int(length)
    if not 0 < P <= length:
        raise ExampleError(f"prompt of {P} tokens does not fit a cache of {length} positions")
    dtype = params["wte"].dtype
    cache = init_cache(cfg, B, length, dtype)
    x = nn.embedding(params["wte"], prompt_ids) + params["wpe"][:P]
    for i, blk in enumerate(params["h"]):
        q, k, v = _qkv(blk["attn"], _layer_norm(x, blk["ln_1"]), cfg.n_head)
        y = nn.dot_product_attention(q, k, v, is_causal=True)  # (B, P, H, D)
        x = x + _linear(y.reshape(B, P, cfg.d_model), blk["attn"]["c_proj"])
        x = x + _mlp(blk["mlp"], _layer_norm(x, blk["ln_2"]))
        for name, new in (("k", k), ("v", v)):  # (B, P, H, D) -> (B, H, P, D) at position 0
            cache[name][i] = lax.dynamic_update_slice(
                cache[name][i], new.transpose(0, 2, 1, 3), (0, 0, 0, 0)
            )
    h = _layer_norm(x[:, P - 1], params["ln_f"])  # (B, d)
    return (h @ params["wte"].T).astype(np.float32), cache


def _cached_attention(q, k_cache, v_cache, pos):
    """One query per sequence over the cached positions ``<= pos``.

    ``q`` ``(B, H, 1, D)``; caches ``(B, H, L, D)``; returns ``(B, H, 1, D)`` in ``q``'s dtype
    (scores and softmax in float32)."""
    L, D = k_cache.shape[2], q.shape[-1]
    s = (q @ k_cache.swapaxes(-1, -2)).astype(np.float32) * np.float32(1.0 / math.sqrt(D))
    s = bnp.where(bnp.arange(L, dtype=np.int32) <= pos, s, -np.inf)  # (B, H, 1, L)
    p = nn.softmax(s, axis=-1)
    return p.astype(q.dtype) @ v_cache


def decode_step(params: Params, cache: Cache, token, pos, cfg: GPTConfig):
    """One token per sequence through the model, its key and value added to the cache.

    Args:
        params: the model's parameters.
        cache: from :func:`prefill` (or :func:`init_cache`), holding positions ``< pos``.
        token: int32 ``(B,)``, the tokens at position ``pos``.
        pos: int32 scalar (maybe traced), ``0 <= pos < cache length``; the same for the batch.
        cfg: the architecture.

    Returns:
        ``(logits, cache)``: float32 ``(B, vocab_size)`` logits of the token after ``pos``, and
        the cache with position ``pos`` written.
    """
    (B,) = token.shape
    H, C = cfg.n_head, cfg.d_model
    pos = bnp.asarray(pos).astype(np.int32)
    wpe = lax.dynamic_slice(params["wpe"], (pos, 0), (1, C))  # (1, C)
    x = nn.embedding(params["wte"], token[:, None]) + wpe  # (B, 1, C)
    ks, vs = list(cache["k"]), list(cache["v"])
    zero = np.int32(0)
    for i, blk in enumerate(params["h"]):
        q, k, v = _qkv(blk["attn"], _layer_norm(x, blk["ln_1"]), H)  # (B, 1, H, D)
        at = (zero, zero, pos, zero)
        ks[i] = lax.dynamic_update_slice(ks[i], k.transpose(0, 2, 1, 3), at)
        vs[i] = lax.dynamic_update_slice(vs[i], v.transpose(0, 2, 1, 3), at)
        y = _cached_attention(q.transpose(0, 2, 1, 3), ks[i], vs[i], pos)  # (B, H, 1, D)
        x = x + _linear(y.reshape(B, 1, C), blk["attn"]["c_proj"])
        x = x + _mlp(blk["mlp"], _layer_norm(x, blk["ln_2"]))
    h = _layer_norm(x[:, 0], params["ln_f"])  # (B, C)
    return (h @ params["wte"].T).astype(np.float32), {"k": ks, "v": vs}


def sample(logits, key, temperature: float, top_k: int, n_valid: int | None = None):
    """Draw one token per row.

    Args:
        logits: float32 ``(B, V)``.
        key: a ``blu.random`` key.
        temperature: divides the logits; 0 takes the most likely token (greedy, no key used).
        top_k: draw among the ``top_k`` most likely tokens only (0: all of them).
        n_valid: tokens ``>= n_valid`` (vocabulary padding) are never drawn; default all.

    Returns:
        int32 ``(B,)``.
    """
    V = logits.shape[-1]
    if n_valid is not None and n_valid < V:
        logits = bnp.where(bnp.arange(V, dtype=np.int32) < n_valid, logits, -np.inf)
    if temperature == 0.0:
        return bnp.argmax(logits, axis=-1).astype(np.int32)
    logits = logits / np.float32(temperature)
    if 0 < top_k < V:
        vals, idx = lax.top_k(logits, top_k)  # (B, k), largest first
        choice = random.categorical(key, vals)  # (B,)
        return bnp.take_along_axis(idx, choice[:, None], axis=1)[:, 0].astype(np.int32)
    return random.categorical(key, logits).astype(np.int32)


class Generator:
    """``n_new`` tokens after a prompt, as one jitted program (prefill + a device loop).

    Args:
        cfg: the architecture.
        n_new: tokens to draw per sequence (>= 1).
        temperature: divides the logits; 0 is greedy.
        top_k: sample among the ``top_k`` most likely tokens (0: all).
        loop: ``"while"`` (``lax.while_loop``: stops early once every sequence drew
            ``eos_id``) or ``"fori"`` (``lax.fori_loop`` with static bounds: always ``n_new``
            steps, no host synchronisation inside).
        eos_id: an end token: after drawing it a sequence only repeats it (None: no end token).
        n_valid: tokens ``>= n_valid`` are never drawn (vocabulary padding); default all.

    Call it as ``gen(params, prompt, key)`` with ``prompt`` int32 ``(B, P)``; it returns int32
    ``(B, n_new)`` tokens (a device array where the inputs live on the device). The program is
    traced once per prompt shape and parameter dtype (``trace_count`` counts traces); the cache
    holds ``P + n_new`` positions.

    Raises:
        ExampleError: a bad setting, or (on call) a prompt longer than ``cfg.n_ctx - n_new``.
    """

    def __init__(
        self,
        cfg: GPTConfig,
        n_new: int,
        temperature: float = 1.0,
        top_k: int = 0,
        loop: str = "while",
        eos_id: int | None = None,
        n_valid: int | None = None,
    ):
        self.cfg, self.n_new = cfg, int(n_new)
        self.temperature, self.top_k = float(temperature), int(top_k or 0)
        self.loop, self.eos_id = loop, eos_id
        self.n_valid = cfg.vocab_size if n_valid is None else int(n_valid)
        if self.n_new < 1:
            raise ExampleError(f"tokens to generate must be >= 1, got {n_new}")
        if self.n_new >= cfg.n_ctx:
            raise ExampleError(f"{n_new} new tokens leave no room for a prompt (n_ctx={cfg.n_ctx})")
        if self.temperature < 0:
            raise ExampleError(f"temperature must be >= 0, got {temperature}")
        if not 0 < self.n_valid <= cfg.vocab_size:
            raise ExampleError(f"n_valid must be in [1, {cfg.vocab_size}], got {n_valid}")
        if not 0 <= self.top_k <= self.n_valid:
            raise ExampleError(f"top-k must be in [0, {self.n_valid}], got {top_k}")
        if loop not in LOOPS:
            raise ExampleError(f"loop must be one of {LOOPS}, got {loop!r}")
        if eos_id is not None and not 0 <= eos_id < cfg.vocab_size:
            raise ExampleError(f"eos_id must be a token id in [0, {cfg.vocab_size}), got {eos_id}")
        self.trace_count = 0
        self.fn = blu.jit(self._generate)

    def check_prompt(self, prompt) -> None:
        """Raise ExampleError unless ``prompt`` is ``(B, P)`` with ``1 <= P <= n_ctx - n_new``."""
        shape = np.shape(prompt)
        room = self.cfg.n_ctx - self.n_new
        if len(shape) != 2 or shape[0] < 1 or not 0 < shape[1] <= room:
            raise ExampleError(
                f"prompt must be (batch, P) token ids with 1 <= P <= n_ctx - n_new = {room}, "
                f"got shape {shape}"
            )

    def __call__(self, params: Params, prompt, key):
        """int32 ``(B, n_new)``: the tokens drawn after ``prompt`` ``(B, P)`` with ``key``."""
        self.check_prompt(prompt)
        if isinstance(prompt, (list, tuple, np.ndarray)):
            prompt = np.asarray(prompt, np.int32)
        return self.fn(params, prompt, key)

    def _draw(self, logits, key, i, done):
        """Token ``i`` of each sequence (``eos_id`` again where the sequence is done)."""
        tok = sample(logits, random.fold_in(key, i), self.temperature, self.top_k, self.n_valid)
        if self.eos_id is None:
            return tok, done
        eos = np.int32(self.eos_id)
        tok = bnp.where(done, eos, tok)
        return tok, done | (tok == eos)

    def _generate(self, params, prompt, key):
        self.trace_count += 1  # runs only while tracing
        B, P = prompt.shape
        n, cfg = self.n_new, self.cfg
        logits, cache = prefill(params, prompt.astype(np.int32), cfg, P + n)
        tok, done = self._draw(logits, key, np.int32(0), bnp.zeros((B,), np.bool_))
        out = bnp.full((B, n), np.int32(self.eos_id or 0))
        out = lax.dynamic_update_slice(out, tok[:, None], (0, 0))
        zero = np.int32(0)

        def step(i, tok, done, out, cache):
            logits, cache = decode_step(params, cache, tok, P - 1 + i, cfg)
            tok, done = self._draw(logits, key, i, done)
            return tok, done, lax.dynamic_update_slice(out, tok[:, None], (zero, i)), cache

        if self.loop == "fori":

            def body(i, c):
                return step(i, *c)

            _, _, out, _ = lax.fori_loop(1, n, body, (tok, done, out, cache))
            return out

        def cond(c):
            i, _, done, _, _ = c
            return (i < n) & ~bnp.all(done)

        def wbody(c):
            i = c[0]
            return (i + np.int32(1), *step(i, *c[1:]))

        _, _, _, out, _ = lax.while_loop(cond, wbody, (np.int32(1), tok, done, out, cache))
        return out


@functools.lru_cache(maxsize=16)
def _generator(cfg, n_new, temperature, top_k, loop, eos_id, n_valid) -> Generator:
    return Generator(cfg, n_new, temperature, top_k, loop, eos_id, n_valid)


def generate(
    params: Params,
    prompt,
    n_new: int,
    key,
    cfg: GPTConfig,
    temperature: float = 1.0,
    top_k: int = 0,
    loop: str = "while",
    eos_id: int | None = None,
    n_valid: int | None = None,
):
    """``n_new`` tokens after ``prompt`` (int32 ``(B, P)``): int32 ``(B, n_new)``.

    One jitted program per setting (see :class:`Generator`, whose arguments these are; the
    programs are kept for the next call with the same settings).

    Raises:
        ExampleError: bad settings, or a prompt longer than ``cfg.n_ctx - n_new``.
    """
    gen = _generator(cfg, int(n_new), float(temperature), int(top_k or 0), loop, eos_id, n_valid)
    return gen(params, prompt, key)
