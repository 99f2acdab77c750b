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
from blu.core.errors import BluShapeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.nn.functions import linear, softmax
from blu.transforms.remat import checkpoint


def _large_negative(dtype: Any) -> float:
    # finite (so fully masked rows give a uniform row, not NaN) and safe to add to scores
    return -0.7 * float(dtypes.finfo(dtype).max)


def causal_mask(t_q: int, t_k: int) -> Any:
    """Bool ``(t_q, t_k)``: query i may attend key j iff ``j <= i + (t_k - t_q)`` (queries are
    the last ``t_q`` positions of the ``t_k`` keys). Built from iota comparisons."""
    rows = lax.iota(dtypes.int32, (t_q, t_k), 0)
    cols = lax.iota(dtypes.int32, (t_q, t_k), 1)
    return rows + (t_k - t_q) >= cols


def dot_product_attention(
    q: Any,
    k: Any,
    v: Any,
    causal: bool = False,
    mask: Any = None,
    scale: float | None = None,
) -> Any:
    """``softmax(q k^T * scale + masking) v``, per batch entry and head.

    Args:
        q: ``(..., Tq, H, D)`` queries.
        k: ``(..., Tk, H, D)`` keys.
        v: ``(..., Tk, H, Dv)`` values.
        causal: mask out keys after each query (aligned at the end when ``Tq != Tk``).
        mask: optional bool array broadcastable to ``(..., H, Tq, Tk)``; True = may attend.
        scale: multiplies the scores; default ``1 / sqrt(D)``.

    Returns:
        ``(..., Tq, H, Dv)`` in ``v``'s dtype (after promotion). Scores and the softmax are
        computed in float32 for bfloat16/float16 inputs. A query with every key masked
        attends uniformly. Under ``grad`` the probabilities are recomputed from the scores in
        the backward pass (``checkpoint``) rather than saved with their float32 intermediates.

    Raises:
        BluShapeError: the shapes do not fit together.
    """
    q, k, v = bnp.asarray(q), bnp.asarray(k), bnp.asarray(v)
    ok = q.ndim >= 3 and k.ndim == q.ndim and v.ndim == q.ndim
    ok = ok and q.shape[:-3] == k.shape[:-3] == v.shape[:-3]
    ok = ok and q.shape[-2:] == k.shape[-2:] and k.shape[-3:-1] == v.shape[-3:-1]
    if not ok:
        raise BluShapeError(
            with_user_line(
                "nn.dot_product_attention: expected q (..., Tq, H, D), k (..., Tk, H, D), "
                f"v (..., Tk, H, Dv), got {get_aval(q).str_short()}, {get_aval(k).str_short()}, "
                f"{get_aval(v).str_short()}"
            )
        )
    t_q, t_k, d = q.shape[-3], k.shape[-3], q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d) if d else 1.0
    qh, kh, vh = (bnp.swapaxes(a, -2, -3) for a in (q, k, v))  # (..., H, T, D)
    scores = bnp.matmul(qh, bnp.swapaxes(kh, -1, -2))  # (..., H, Tq, Tk)
    if mask is not None:
        mask = bnp.asarray(mask)
        if mask.dtype != dtypes.bool_:
            raise BluValueError(
                with_user_line(
                    f"nn.dot_product_attention: mask must be bool, got {get_aval(mask).str_short()}"
                )
            )
        try:
            target = np.broadcast_shapes(mask.shape, scores.shape)
        except ValueError:
            target = None
        if target != scores.shape:
            raise BluShapeError(
                with_user_line(
                    f"nn.dot_product_attention: mask {get_aval(mask).str_short()} does not "
                    f"broadcast to the scores' shape (..., H, Tq, Tk) = {scores.shape}"
                )
            )

    def probabilities(scores: Any, mask: Any) -> Any:
        if scores.dtype in (dtypes.bfloat16, dtypes.float16):
            scores = scores.astype(dtypes.float32)
        scores = scores * scale
        allowed = causal_mask(t_q, t_k) if causal else None
        if mask is not None:
            allowed = mask if allowed is None else bnp.logical_and(allowed, mask)
        if allowed is not None:
            allowed = bnp.broadcast_to(allowed, scores.shape)
            scores = bnp.where(allowed, scores, _large_negative(scores.dtype))
        return softmax(scores, axis=-1).astype(vh.dtype)

    # recomputed in the backward pass from the scores (as flash attention does): the float32
    # softmax intermediates, several times the size of the scores, are never kept
    probs = checkpoint(probabilities)(scores, mask)
    out = bnp.matmul(probs, vh)  # (..., H, Tq, Dv)
    return bnp.swapaxes(out, -2, -3)


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
    y = dot_product_attention(q, k, v, causal=True)
    return linear(bnp.reshape(y, x.shape), w_proj, b_proj)
