"""The attention primitives' decompositions: the same computations unfused, in lax operations.

A lowering inlines these where no library lowering applies (float32 on the GPU until blu has
its own flash kernel), so they fuse like any other code; ``nn.dot_product_attention(...,
implementation="reference")`` calls ``forward`` directly. They build the ``(B, K, G, T, S)``
scores (and probabilities) that the fused forms avoid. Layouts and conventions as in
``blu.lax.attention``: the scores are computed in float32 (float64 for float64 inputs) and the
probabilities multiply ``v`` in its own dtype (as flash kernels do), accumulating in float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blu.core.interpreter import get_aval
from blu.lax import attention_numpy as kern
from blu.lax.dot import dot_general
from blu.lax.elementwise import (
    add,
    convert_element_type,
    div,
    exp,
    gt,
    is_finite,
    le,
    log,
    mul,
    select,
    sub,
)
from blu.lax.reductions import reduce_max, reduce_sum
from blu.lax.shapes import broadcast_in_dim, full_like, iota, reshape, transpose


def _cast(x: Any, dt: Any) -> Any:
    return x if get_aval(x).dtype == np.dtype(dt) else convert_element_type(x, dt)


def _grouped(x: Any, kh: int) -> Any:
    """``(B, T, N, D)`` -> ``(B, K, G, T, D)``."""
    b, t, n, d = get_aval(x).shape
    return transpose(reshape(x, (b, t, kh, n // kh, d)), (0, 2, 3, 1, 4))


def _ungrouped(x: Any) -> Any:
    """``(B, K, G, T, D)`` -> ``(B, T, N, D)``."""
    b, kh, g, t, d = get_aval(x).shape
    return reshape(transpose(x, (0, 3, 1, 2, 4)), (b, t, kh * g, d))


def _kv(x: Any) -> Any:
    """``(B, S, K, D)`` -> ``(B, K, S, D)``."""
    return transpose(x, (0, 2, 1, 3))


def _rows(x: Any, shape5: tuple[int, ...]) -> Any:
    """``(B, N, T)`` -> ``(B, K, G, T)``."""
    return reshape(x, shape5[:4])


def _bs(x: Any, shape5: tuple[int, ...]) -> Any:
    """A bias or mask ``(1|B, 1|N, T, S)`` broadcast to the scores' ``(B, K, G, T, S)``."""
    bb, nb, t, s = get_aval(x).shape
    kk, gg = shape5[1:3] if nb > 1 or shape5[1] * shape5[2] == 1 else (1, 1)
    return broadcast_in_dim(reshape(x, (bb, kk, gg, t, s)), shape5, (0, 1, 2, 3, 4))


def _mm(a: Any, b: Any, contract: tuple, acc: Any) -> Any:
    """Batched (over B, K) product in ``b``'s dtype, accumulated and returned in ``acc``."""
    dt = get_aval(b).dtype
    return dot_general(_cast(a, dt), b, (contract, ((0, 1), (0, 1))), preferred_element_type=acc)


class _Scores:
    """Scaled, biased, masked scores ``(B, K, G, T, S)`` (``-inf`` where not allowed)."""

    def __init__(self, q, k, v, bias, mask, scale, is_causal):
        self.kh = get_aval(k).shape[2]
        self.acc = kern.acc_dtype(get_aval(q).dtype)
        self.qg, self.kt, self.vt = _grouped(q, self.kh), _kv(k), _kv(v)
        s = mul(_mm(self.qg, self.kt, ((4,), (3,)), self.acc), float(scale))
        shape5 = get_aval(s).shape
        self.shape5 = shape5
        if bias is not None:
            s = add(s, _cast(_bs(bias, shape5), self.acc))
        ok = None if mask is None else _bs(mask, shape5)
        if is_causal:
            t, sk = shape5[3:]
            c = le(iota(np.int32, (t, sk), 1), iota(np.int32, (t, sk), 0))
            c = broadcast_in_dim(c, shape5, (3, 4))
            ok = c if ok is None else select(ok, c, ok)  # ok & c
        if ok is not None:
            s = select(ok, s, full_like(s, -np.inf))
        self.s = s

    def probabilities(self, lse: Any) -> Any:
        """``exp(S - L)``; rows with ``L = -inf`` (nothing to attend) give zeros."""
        lse = _rows(lse, self.shape5)
        lse = select(is_finite(lse), lse, full_like(lse, np.inf))
        return exp(sub(self.s, broadcast_in_dim(lse, self.shape5, (0, 1, 2, 3))))


def _col(x: Any, shape5: tuple[int, ...]) -> Any:
    return broadcast_in_dim(x, shape5, (0, 1, 2, 3))


def forward(q, k, v, bias, mask, *, scale: float, is_causal: bool) -> list[Any]:
    """``[out (B, T, N, Hv), lse (B, N, T)]``, unfused."""
    sc = _Scores(q, k, v, bias, mask, scale, is_causal)
    m = reduce_max(sc.s, (4,))
    m = select(is_finite(m), m, full_like(m, 0.0))
    e = exp(sub(sc.s, _col(m, sc.shape5)))
    l = reduce_sum(e, (4,))
    has = gt(l, full_like(l, 0.0))
    l_safe = select(has, l, full_like(l, 1.0))
    o = _mm(e, sc.vt, ((4,), (2,)), sc.acc)  # (B, K, G, T, Hv)
    o = div(o, broadcast_in_dim(l_safe, get_aval(o).shape, (0, 1, 2, 3)))
    lse = select(has, add(m, log(l_safe)), full_like(l, -np.inf))
    b, t, n, _ = get_aval(q).shape
    return [_cast(_ungrouped(o), get_aval(q).dtype), reshape(lse, (b, n, t))]


def backward(q, k, v, bias, mask, out, lse, dout, dlse, *, scale: float, is_causal: bool,
             need_dbias: bool) -> list[Any]:  # fmt: skip
    """``[dq, dk, dv] (+ [dbias])``, unfused (FlashAttention-2's backward on whole rows)."""
    sc = _Scores(q, k, v, bias, mask, scale, is_causal)
    p = sc.probabilities(lse)
    do = _grouped(dout, sc.kh)
    dd = reduce_sum(mul(_cast(do, sc.acc), _cast(_grouped(out, sc.kh), sc.acc)), (4,))
    if dlse is not None:
        dd = sub(dd, _rows(dlse, sc.shape5))
    dv = _mm(p, do, ((2, 3), (2, 3)), sc.acc)  # (B, K, S, Hv)
    dp = _mm(do, sc.vt, ((4,), (3,)), sc.acc)  # (B, K, G, T, S)
    ds = mul(p, sub(dp, _col(dd, sc.shape5)))
    dq = mul(_mm(ds, sc.kt, ((4,), (2,)), sc.acc), float(scale))
    dk = mul(_mm(ds, sc.qg, ((2, 3), (2, 3)), sc.acc), float(scale))
    dt = get_aval(q).dtype
    res = [_cast(_ungrouped(dq), dt), _cast(_kv(dk), dt), _cast(_kv(dv), dt)]
    if need_dbias:
        res.append(_cast(_reduce_bias(ds, get_aval(bias).shape), get_aval(bias).dtype))
    return res


def _reduce_bias(ds: Any, shape: tuple[int, ...]) -> Any:
    """``ds (B, K, G, T, S)`` summed to a bias of ``shape (1|B, 1|N, T, S)``."""
    b, kh, g, t, s = get_aval(ds).shape
    x = reshape(ds, (b, kh * g, t, s))
    axes = tuple(i for i in (0, 1) if shape[i] == 1 and get_aval(x).shape[i] != 1)
    if axes:
        kept = tuple(i for i in range(4) if i not in axes)
        x = broadcast_in_dim(reduce_sum(x, axes), shape, kept)
    return x


def jvp(q, k, v, bias, mask, out, lse, tq, tk, tv, tbias, *, scale: float, is_causal: bool):
    """``[dout, dlse]``: the forward's tangents along ``tq, tk, tv, tbias`` (None: zero)."""
    sc = _Scores(q, k, v, bias, mask, scale, is_causal)
    p = sc.probabilities(lse)
    ds = None
    if tq is not None:
        ds = _mm(_grouped(tq, sc.kh), sc.kt, ((4,), (3,)), sc.acc)
    if tk is not None:
        t2 = _mm(sc.qg, _kv(tk), ((4,), (3,)), sc.acc)
        ds = t2 if ds is None else add(ds, t2)
    ds = full_like(p, 0.0) if ds is None else mul(ds, float(scale))
    if tbias is not None:
        ds = add(ds, _cast(_bs(tbias, sc.shape5), sc.acc))
    pds = mul(p, ds)
    c = reduce_sum(pds, (4,))
    o = _mm(pds, sc.vt, ((4,), (2,)), sc.acc)
    if tv is not None:
        o = add(o, _mm(p, _kv(tv), ((4,), (2,)), sc.acc))
    o = sub(o, mul(_col(c, get_aval(o).shape), _cast(_grouped(out, sc.kh), sc.acc)))
    b, t, n, _ = get_aval(q).shape
    dlse = _cast(reshape(c, (b, n, t)), get_aval(lse).dtype)
    return [_cast(_ungrouped(o), get_aval(q).dtype), dlse]
