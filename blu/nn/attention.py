"""Scaled dot-product attention (Vaswani et al. 2017) and GPT-2's causal self-attention block.

Layout: ``(..., T, heads, head_dim)`` — sequence before heads, as produced by reshaping a
``(..., T, C)`` projection — so GPT-2's ``(B, T, H, D)`` goes in and comes out without
transposes at the call site.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import blu.numpy as bnp
from blu import lax
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax import attention_decomp
from blu.nn.layers import linear

IMPLEMENTATIONS = (None, "reference", "cudnn", "blu", "xla")


def causal_mask(t_q: int, t_k: int) -> Any:
    """Bool ``(t_q, t_k)``: query i may attend key j iff ``j <= i`` (top-left aligned, as
    ``is_causal`` in ``dot_product_attention`` and JAX). Built from iota comparisons."""
    rows = lax.iota(dtypes.int32, (t_q, t_k), 0)
    cols = lax.iota(dtypes.int32, (t_q, t_k), 1)
    return rows >= cols


def _err(kind: type, msg: str) -> Exception:
    return kind(with_user_line(f"nn.dot_product_attention: {msg}"))


def _fold(x: Any, name: str, batch: tuple[int, ...], n: int, t: int, s: int, dtype: Any) -> Any:
    """A bias or mask broadcastable to ``(*batch, N, T, S)`` as ``(1|B, 1|N, T, S)``."""
    x = bnp.asarray(x)
    if dtype is not None:
        x = x.astype(dtype)
    full = batch + (n, t, s)
    try:
        target = np.broadcast_shapes(x.shape, full)
    except ValueError:
        target = None
    if target != full:
        raise _err(BluShapeError, f"{name} {get_aval(x).str_short()} does not broadcast to "
                                  f"(*batch, N, T, S) = {full}")  # fmt: skip
    lead = (1,) * (len(full) - x.ndim) + x.shape
    one_b = all(d == 1 for d in lead[: len(batch)])
    nb = lead[len(batch)]
    b = 1 if one_b else math.prod(batch)
    x = bnp.broadcast_to(bnp.reshape(x, lead), (batch if not one_b else lead[: len(batch)])
                         + (nb, t, s))  # fmt: skip
    return bnp.reshape(x, (b, nb, t, s))


def _lengths(x: Any, name: str, batch: tuple[int, ...]) -> Any:
    """Per-batch-entry sequence lengths as int32 ``(B,)`` (``B`` the product of ``batch``)."""
    x = bnp.asarray(x)
    if not dtypes.is_int(x.dtype):
        raise _err(BluTypeError, f"{name} must be integers, got {get_aval(x).str_short()}")
    b = math.prod(batch)
    if x.shape not in (batch, (b,)):
        raise _err(BluShapeError, f"{name} {get_aval(x).str_short()} must have the batch shape "
                                  f"{batch} of q (or ({b},))")  # fmt: skip
    return bnp.reshape(x, (b,)).astype(dtypes.int32)


def _window(size: Any) -> tuple[int, int]:
    """``local_window_size`` as ``(left, right)``, both ints >= 0."""
    pair = (size, size) if isinstance(size, (int, np.integer)) else size
    ok = isinstance(pair, (tuple, list)) and len(pair) == 2
    ok = ok and all(isinstance(w, (int, np.integer)) and not isinstance(w, bool) for w in pair)
    if not ok or min(pair) < 0:
        raise _err(BluValueError, "local_window_size must be an int or a pair (left, right) of "
                                  f"ints >= 0, got {size!r}")  # fmt: skip
    return int(pair[0]), int(pair[1])


def _extra_mask(batch: tuple[int, ...], t: int, s: int, q_len: Any, kv_len: Any,
                window: Any) -> Any:  # fmt: skip
    """The mask that ``query_seq_lengths``, ``key_value_seq_lengths`` and ``local_window_size``
    make, as ``(1|B, 1, T, S)`` bool (None where all three are None), JAX's semantics: query
    ``i`` of batch entry ``b`` attends key ``j`` iff ``i < q_len[b]``, ``j < kv_len[b]`` and
    ``i - left <= j <= i + right``."""
    out = None
    if window is not None:
        left, right = _window(window)
        rows = lax.iota(dtypes.int32, (t, s), 0)
        cols = lax.iota(dtypes.int32, (t, s), 1)
        out = bnp.reshape((rows <= cols + left) & (cols <= rows + right), (1, 1, t, s))
    for lengths, name, dim in ((q_len, "query_seq_lengths", 2),
                               (kv_len, "key_value_seq_lengths", 3)):  # fmt: skip
        if lengths is None:
            continue
        lengths = _lengths(lengths, name, batch)
        b = lengths.shape[0]
        shape = (b, 1, t if dim == 2 else 1, s if dim == 3 else 1)
        ok = lax.iota(dtypes.int32, shape, dim) < bnp.reshape(lengths, (b, 1, 1, 1))
        out = ok if out is None else out & ok
    return None if out is None else bnp.broadcast_to(out, (out.shape[0], 1, t, s))


def dot_product_attention(
    q: Any,
    k: Any,
    v: Any,
    bias: Any = None,
    mask: Any = None,
    *,
    scale: float | None = None,
    is_causal: bool = False,
    query_seq_lengths: Any = None,
    key_value_seq_lengths: Any = None,
    local_window_size: int | tuple[int, int] | None = None,
    implementation: str | None = None,
) -> Any:
    """``softmax(q k^T * scale + bias, masked) v`` per batch entry and head, fused.

    JAX's ``jax.nn.dot_product_attention`` signature and layout. Runs one fused primitive
    (``blu.lax.attention``): FlashAttention-2's online softmax over key blocks (Dao 2023), so
    neither the output nor ``grad`` builds the ``(T, S)`` scores, except where the primitive is
    lowered to its unfused decomposition (float32 on the GPU for now).

    Args:
        q: ``(..., T, N, H)`` queries (``...``: any batch axes, maybe none).
        k: ``(..., S, K, H)`` keys; ``K`` must divide ``N`` (grouped-query attention: query
            head ``n`` uses key/value head ``n // (N // K)``).
        v: ``(..., S, K, Hv)`` values.
        bias: optional additive bias broadcastable to ``(..., N, T, S)`` (added after scaling,
            converted to ``q``'s dtype); differentiable.
        mask: optional bool array broadcastable to ``(..., N, T, S)``; True: may attend.
        scale: multiplies ``q k^T``; default ``1 / sqrt(H)``.
        is_causal: query ``i`` attends keys ``j <= i`` only (top-left aligned, as JAX).
        query_seq_lengths: optional integer array of the batch shape (or ``(B,)``, ``B`` the
            product of the batch axes): queries at positions ``>= query_seq_lengths[b]`` are
            padding and get zeros.
        key_value_seq_lengths: the same for keys: positions ``>= key_value_seq_lengths[b]``
            are never attended.
        local_window_size: an int ``w`` or a pair ``(left, right)`` of ints >= 0: query ``i``
            attends keys ``i - left <= j <= i + right`` only (``w``: ``(w, w)``), as JAX.
        implementation: None (blu chooses: cuDNN for bfloat16/float16 on the GPU where it
            applies, else blu's own kernels), ``"reference"`` (the unfused lax computation),
            ``"cudnn"`` (cuDNN's fused SDPA: bfloat16/float16 on a CUDA device, no mask),
            ``"blu"`` (blu's kernels, never cuDNN), ``"xla"`` (JAX's name for its non-cuDNN
            implementation: ``"blu"``'s).

    Returns:
        ``(..., T, N, Hv)`` in the operands' (promoted) dtype. Scores and softmax are computed
        in float32 (float64 for float64). A query with every key masked gets zeros (and no
        gradient), not NaN.

    Raises:
        BluShapeError: shapes that do not fit (named in the message).
        BluTypeError: non-float operands, a non-bool mask or non-integer sequence lengths.
        BluValueError: an unknown ``implementation``, ``"cudnn"`` for what cuDNN cannot do, or
            a ``local_window_size`` that is not an int or a pair of ints >= 0.
    """
    if implementation not in IMPLEMENTATIONS:
        raise _err(BluValueError, f"implementation must be one of {IMPLEMENTATIONS}, "
                                  f"got {implementation!r}")  # fmt: skip
    if implementation == "xla":
        implementation = "blu"
    q, k, v = bnp.asarray(q), bnp.asarray(k), bnp.asarray(v)
    dt = dtypes.result_type(q, k, v)
    if not dtypes.is_float(dt):
        raise _err(BluTypeError, f"q, k, v must be floating point, got "
                                 f"{get_aval(q).str_short()}, {get_aval(k).str_short()}, "
                                 f"{get_aval(v).str_short()}")  # fmt: skip
    q, k, v = q.astype(dt), k.astype(dt), v.astype(dt)
    ok = q.ndim >= 3 and k.ndim == q.ndim and v.ndim == q.ndim
    ok = ok and q.shape[:-3] == k.shape[:-3] == v.shape[:-3]
    ok = ok and q.shape[-1] == k.shape[-1] and k.shape[-3:-1] == v.shape[-3:-1]
    if not ok:
        raise _err(BluShapeError, "expected q (..., T, N, H), k (..., S, K, H), v (..., S, K, Hv), "
                                  f"got {get_aval(q).str_short()}, {get_aval(k).str_short()}, "
                                  f"{get_aval(v).str_short()}")  # fmt: skip
    batch = q.shape[:-3]
    (t, n, h), (s, kh) = q.shape[-3:], k.shape[-3:-1]
    if kh == 0 or n % kh:
        raise _err(BluShapeError, f"the key/value heads ({kh}) must divide the query heads ({n})")
    if scale is None:
        scale = 1.0 / math.sqrt(h) if h else 1.0
    if mask is not None:
        mask = bnp.asarray(mask)
        if mask.dtype != dtypes.bool_:
            raise _err(BluTypeError, f"mask must be bool, got {get_aval(mask).str_short()}")
        mask = _fold(mask, "mask", batch, n, t, s, None)
    extra = _extra_mask(batch, t, s, query_seq_lengths, key_value_seq_lengths, local_window_size)
    if extra is not None:  # JAX's: these are masks too, and'ed with the others
        mask = extra if mask is None else mask & extra
    if bias is not None:
        bias = _fold(bias, "bias", batch, n, t, s, dt)
    if implementation == "cudnn":
        if dt not in (dtypes.bfloat16, dtypes.float16) or mask is not None:
            raise _err(BluValueError, "implementation='cudnn' needs bfloat16/float16 operands "
                                      "and no mask, sequence lengths or local window (got "
                                      f"{dtypes.short_name(dt)}"
                                      f"{', a mask' if mask is not None else ''})")  # fmt: skip
    b = math.prod(batch)
    q4, k4, v4 = (bnp.reshape(a, (b,) + a.shape[-3:]) for a in (q, k, v))
    args = dict(scale=float(scale), is_causal=bool(is_causal))
    if implementation == "reference":
        out = attention_decomp.forward(q4, k4, v4, bias, mask, **args)[0]
    else:
        out = lax.dot_product_attention_fwd(q4, k4, v4, bias, mask, implementation=implementation,
                                            **args)[0]  # fmt: skip
    return bnp.reshape(out, batch + out.shape[1:])


def causal_self_attention(
    x: Any, w_qkv: Any, b_qkv: Any, w_proj: Any, b_proj: Any, n_head: int
) -> Any:
    """GPT-2's attention block: ``proj(attention(split_heads(x @ w_qkv + b_qkv)))`` with a
    causal mask.

    Args:
        x: ``(..., T, C)``.
        w_qkv: ``(C, 3C)``, the query, key and value projections side by side (in that order).
        b_qkv: ``(3C,)`` or None.
        w_proj: ``(C, C)``; b_proj: ``(C,)`` or None.
        n_head: number of heads H, dividing C (head_dim = C / H).

    Returns:
        ``(..., T, C)``.

    Raises:
        BluShapeError: the weights do not fit ``x`` or ``n_head`` does not divide C.
    """
    x = bnp.asarray(x)
    c = x.shape[-1] if x.ndim >= 2 else -1
    if x.ndim < 2 or n_head <= 0 or c % n_head:
        raise BluShapeError(
            with_user_line(
                f"nn.causal_self_attention: x {get_aval(x).str_short()} must be (..., T, C) with "
                f"C divisible by n_head={n_head}"
            )
        )
    if get_aval(w_qkv).shape != (c, 3 * c) or get_aval(w_proj).shape != (c, c):
        raise BluShapeError(
            with_user_line(
                f"nn.causal_self_attention: w_qkv {get_aval(w_qkv).str_short()} must be ({c}, "
                f"{3 * c}) and w_proj {get_aval(w_proj).str_short()} ({c}, {c})"
            )
        )
    qkv = linear(x, w_qkv, b_qkv)
    heads = x.shape[:-1] + (n_head, c // n_head)
    q, k, v = (bnp.reshape(a, heads) for a in bnp.split(qkv, 3, axis=-1))
    y = dot_product_attention(q, k, v, is_causal=True)
    return linear(bnp.reshape(y, x.shape), w_proj, b_proj)
