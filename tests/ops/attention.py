"""OpInfo entries: nn.dot_product_attention and the fused attention primitives of blu.lax
(forward, backward, JVP), against float64 numpy written from the definition
``softmax(q k^T * scale + bias, masked) v`` and its derivatives."""

from __future__ import annotations

import numpy as np

import blu
import blu.nn as bnn
from blu import lax
from ops.base import op


def _probs(q, k, bias, mask, scale, is_causal):
    """Scores and probabilities (..., N, T, S) and the log-sum-exp (..., N, T); k repeated over
    the query heads of its group (grouped-query attention)."""
    k = np.repeat(k, q.shape[-2] // k.shape[-2], axis=-2)
    s = np.einsum("...tnh,...snh->...nts", q, k) * scale
    if bias is not None:
        s = s + bias
    t, n = q.shape[-3], k.shape[-3]
    ok = np.ones(s.shape, bool)
    if mask is not None:
        ok &= mask
    if is_causal:
        ok &= np.arange(n)[None, :] <= np.arange(t)[:, None]
    s = np.where(ok, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.where(ok, np.exp(s - m), 0.0)
    z = e.sum(-1, keepdims=True)
    p = np.where(z > 0, e / np.where(z > 0, z, 1.0), 0.0)  # a query with no key: zeros
    return s, p, (np.log(z) + m)[..., 0], ok


def attention_ref(q, k, v, bias=None, mask=None, scale=None, is_causal=False):
    """(out (..., T, N, Hv), lse (..., N, T)) in float64."""
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    _, p, lse, _ = _probs(q, k, bias, mask, scale, is_causal)
    v = np.repeat(v, q.shape[-2] // v.shape[-2], axis=-2)
    return np.einsum("...nts,...snh->...tnh", p, v), lse


def _group(d, kh):
    """Sum a (..., S, N, H) gradient over the query heads of each key/value head."""
    *lead, s, n, h = d.shape
    return d.reshape(*lead, s, kh, n // kh, h).sum(-2)


def _attn_sample(rng, bias_mask=True, batch=None, ts=None):
    """q (B.., T, N, H), k, v (B.., S, K, H|Hv), and maybe bias and mask (1|B, 1|N, T, S) with
    a fully masked query row."""
    b = (
        batch
        if batch is not None
        else tuple(int(x) for x in rng.integers(1, 3, rng.integers(0, 2)))
    )
    t, s = ts or (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    kh = int(rng.integers(1, 3))
    n = kh * int(rng.integers(1, 3))
    h, hv = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    q = rng.standard_normal(b + (t, n, h))
    k = rng.standard_normal(b + (s, kh, h))
    v = rng.standard_normal(b + (s, kh, hv))
    if not bias_mask:
        return q, k, v
    bias = rng.standard_normal(b[:1] + (1 if rng.random() < 0.5 else n, t, s))
    mask = rng.random(b + (n, t, s)) < 0.7
    mask[..., 0, :] = False  # the first query of each head sees no key
    return q, k, v, bias, mask


def _rng():
    return np.random.default_rng(7)


# (T, S) = (3, 3) and (3, 2): the causal mask and grouped-query heads always in play
_SPECIAL_QKV = [_attn_sample(_rng(), False, (2,), (3, 3)), _attn_sample(_rng(), False, (), (3, 2))]
_SPECIAL_BM = [_attn_sample(_rng(), True, (2,), (3, 3))]
op(
    "nn.dot_product_attention",
    lambda q, k, v, **kw: bnn.dot_product_attention(q, k, v, **kw),
    lambda q, k, v, **kw: attention_ref(q, k, v, **kw)[0],
    lambda rng: _attn_sample(rng, bias_mask=False),
    special=_SPECIAL_QKV,
    kwargs=[{"is_causal": True}, {"scale": 0.3}],
    n_ops=20,
)
op(
    "nn.dot_product_attention(bias, mask)",
    lambda q, k, v, b, m, **kw: bnn.dot_product_attention(q, k, v, b, m, **kw),
    lambda q, k, v, b, m, **kw: attention_ref(q, k, v, b, m, **kw)[0],
    _attn_sample,
    special=_SPECIAL_BM,
    covers=("nn.dot_product_attention",),
    kwargs=[{"is_causal": True}],
    n_ops=20,
)
op(
    "nn.dot_product_attention(implementation=reference)",  # the unfused path, same values
    lambda q, k, v, b, m, **kw: bnn.dot_product_attention(
        q, k, v, b, m, implementation="reference", **kw
    ),
    lambda q, k, v, b, m, **kw: attention_ref(q, k, v, b, m, **kw)[0],
    _attn_sample,
    special=_SPECIAL_BM,
    covers=("nn.dot_product_attention",),
    kwargs=[{"is_causal": True}],
    n_ops=20,
    skip={"grad": "derivatives of the fused path in the entries above; unfused: plain lax ops"},
)

# ---- the primitives, on (B, T, N, H) operands ----------------------------------------------------


def _prim_sample(rng, ts=None):
    q, k, v, bias, mask = _attn_sample(rng, batch=(int(rng.integers(1, 3)),), ts=ts)
    if rng.random() < 0.3:
        mask = None
    return q, k, v, bias, mask


def _fwd(q, k, v, bias, mask, scale=0.5, is_causal=False):
    return tuple(
        lax.dot_product_attention_fwd(q, k, v, bias, mask, scale=scale, is_causal=is_causal)
    )


op(
    "lax.dot_product_attention_fwd",
    _fwd,
    lambda q, k, v, b, m, scale=0.5, is_causal=False: attention_ref(
        q, k, v, b, m, scale, is_causal
    ),
    _prim_sample,
    special=[_prim_sample(_rng(), (3, 3))],
    covers=("lax.dot_product_attention_fwd", "prim:dot_product_attention_fwd"),
    kwargs=[{"is_causal": True}, {"scale": 1.5}],
    n_ops=20,
)


def _jvp(q, k, v, bias, mask, tq, tk, tv, tb, scale=0.5, is_causal=False):
    f = lambda q, k, v, b: _fwd(q, k, v, b, mask, scale, is_causal)  # noqa: E731
    return blu.jvp(f, (q, k, v, bias), (tq, tk, tv, tb))[1]


def _jvp_ref(q, k, v, bias, mask, tq, tk, tv, tb, scale=0.5, is_causal=False):
    """d out = dP v + P dv, d lse = sum P dS with dS = (dq k + q dk) scale + dbias and
    dP = P (dS - sum P dS): the derivative of softmax."""
    rep = q.shape[-2] // k.shape[-2]
    kk, vv, tkk, tvv = (np.repeat(a, rep, axis=-2) for a in (k, v, tk, tv))
    _, p, _, ok = _probs(q, k, bias, mask, scale, is_causal)
    ds = (np.einsum("btnh,bsnh->bnts", tq, kk) + np.einsum("btnh,bsnh->bnts", q, tkk)) * scale
    ds = np.where(ok, ds + tb, 0.0)
    dlse = (p * ds).sum(-1)
    dp = p * (ds - dlse[..., None])
    dout = np.einsum("bnts,bsnh->btnh", dp, vv) + np.einsum("bnts,bsnh->btnh", p, tvv)
    return dout, dlse  # a query with no key: lse = -inf whatever the inputs, so dlse = 0


def _jvp_sample(rng, ts=None):
    q, k, v, bias, mask = _prim_sample(rng, ts)
    return (q, k, v, bias, mask) + tuple(rng.standard_normal(a.shape) for a in (q, k, v, bias))


op(
    "lax.dot_product_attention_jvp",
    _jvp,
    _jvp_ref,
    _jvp_sample,
    special=[_jvp_sample(_rng(), (3, 3))],
    covers=("prim:dot_product_attention_jvp",),
    kwargs=[{"is_causal": True}],
    n_ops=30,
)


def _bwd(q, k, v, bias, mask, dout, dlse, scale=0.5, is_causal=False, need_dbias=False):
    out, lse = _fwd(q, k, v, bias, mask, scale, is_causal)
    return tuple(
        lax.dot_product_attention_bwd(
            q, k, v, out, lse, dout, bias, mask, dlse,
            scale=scale, is_causal=is_causal, need_dbias=need_dbias,
        )
    )  # fmt: skip


def _bwd_ref(q, k, v, bias, mask, dout, dlse, scale=0.5, is_causal=False, need_dbias=False):
    """The vector-Jacobian product of (out, lse): dv = P^T dout, dS = P (dP - sum(P dP)) +
    P dlse with dP = dout v^T, dq = dS k scale, dk = dS^T q scale, dbias = dS summed to bias's
    shape."""
    kh = k.shape[-2]
    rep = q.shape[-2] // kh
    kk, vv = (np.repeat(a, rep, axis=-2) for a in (k, v))
    _, p, _, _ = _probs(q, k, bias, mask, scale, is_causal)
    dp = np.einsum("btnh,bsnh->bnts", dout, vv)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    if dlse is not None:
        ds = ds + p * dlse[..., None]
    dq = np.einsum("bnts,bsnh->btnh", ds, kk) * scale
    dk = _group(np.einsum("bnts,btnh->bsnh", ds, q) * scale, kh)
    dv = _group(np.einsum("bnts,btnh->bsnh", p, dout), kh)
    out = (dq, dk, dv)
    if need_dbias:
        out += (ds.sum(axis=tuple(i for i in range(2) if bias.shape[i] == 1), keepdims=True),)
    return out


def _bwd_sample(rng, ts=None):
    q, k, v, bias, mask = _prim_sample(rng, ts)
    dout = rng.standard_normal(q.shape[:-1] + v.shape[-1:])
    dlse = rng.standard_normal((q.shape[0], q.shape[2], q.shape[1])) if rng.random() < 0.6 else None
    return q, k, v, bias, mask, dout, dlse


op(
    "lax.dot_product_attention_bwd",
    _bwd,
    _bwd_ref,
    _bwd_sample,
    special=[_bwd_sample(_rng(), (3, 3))],
    covers=("lax.dot_product_attention_bwd", "prim:dot_product_attention_bwd"),
    kwargs=[{"is_causal": True}, {"scale": 1.5}],
    n_ops=30,
)
op(
    "lax.dot_product_attention_bwd(need_dbias=True)",  # one more result: dbias
    lambda *a, **kw: _bwd(*a, need_dbias=True, **kw),
    lambda *a, **kw: _bwd_ref(*a, need_dbias=True, **kw),
    _bwd_sample,
    special=[_bwd_sample(_rng(), (3, 3))],
    covers=("lax.dot_product_attention_bwd",),
    kwargs=[{"is_causal": True}],
    n_ops=30,
)
