"""The attention primitives' numpy kernels: FlashAttention-2's blocked online softmax over keys.

Every kernel works on the primitives' layouts — ``q (B, T, N, H)``, ``k (B, S, K, H)``,
``v (B, S, K, Hv)`` with ``K`` dividing ``N`` (grouped-query attention: query head ``n`` reads
key/value head ``n // (N // K)``), ``bias``/``mask`` ``(1|B, 1|N, T, S)``, ``lse (B, N, T)`` —
and never holds more than one ``(tq, tk)`` block of scores per (batch, head): the keys are
visited in blocks of ``tk`` and the queries in blocks of ``tq`` (chosen so a block of scores
over all batches and heads stays under ``BLOCK_ELEMENTS``), so memory stays linear in ``T``.

Arithmetic is float32 (float64 when the inputs are float64): bfloat16/float16 inputs are
converted once. ``is_causal`` is top-left aligned, as in JAX: query ``i`` sees keys ``j <= i``.
A query whose keys are all masked gets an output of zeros and ``lse = -inf`` and passes no
gradient.

Source: Dao 2023, "FlashAttention-2: Faster Attention with Better Parallelism and Work
Partitioning" (arXiv:2307.08691), Algorithm 1 (forward with the log-sum-exp statistics) and
Algorithm 2 (backward recomputing the probabilities ``P = exp(S - L)`` from them, with
``D = rowsum(dO * O)``). The JVP kernel is the forward-mode counterpart:
``dO = P (dS - c) V + P dV`` with ``c = rowsum(P * dS)`` (which is also ``dL``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from blu.core import dtypes

BLOCK_KEYS = 128  # keys per block
BLOCK_ELEMENTS = 1 << 22  # scores per block, over all batches and heads (16 MiB in float32)


def acc_dtype(dt: Any) -> np.dtype:
    """The accumulation (and ``lse``) dtype for inputs of dtype ``dt``."""
    return np.dtype(np.float64) if np.dtype(dt) == np.float64 else np.dtype(np.float32)


class _Problem:
    """The operands in the kernels' grouped layout (``(B, K, G, T, H)`` queries, ``(B, K, S, H)``
    keys and values, ``(1|B, 1|K, 1|G, T, S)`` bias and mask), in the accumulation dtype."""

    def __init__(self, q, k, v, bias, mask, scale: float, is_causal: bool):
        self.acc = acc_dtype(q.dtype)
        self.b, self.t, self.n, self.h = q.shape
        self.s, self.kh = k.shape[1], k.shape[2]
        self.g = self.n // self.kh
        self.hv = v.shape[-1]
        self.scale, self.is_causal = self.acc.type(scale), is_causal
        self.q = self.grouped(q)
        self.k = np.ascontiguousarray(np.asarray(k, self.acc).transpose(0, 2, 1, 3))
        self.v = np.ascontiguousarray(np.asarray(v, self.acc).transpose(0, 2, 1, 3))
        self.bias = None if bias is None else self.grouped_bs(np.asarray(bias, self.acc))
        self.mask = None if mask is None else self.grouped_bs(np.asarray(mask, bool))
        tk = max(1, min(self.s, BLOCK_KEYS))
        rows = max(1, self.b * self.n * tk)
        self.tk, self.tq = tk, max(1, min(self.t, BLOCK_ELEMENTS // rows))

    def grouped(self, x: np.ndarray) -> np.ndarray:
        """``(B, T, N, D)`` -> ``(B, K, G, T, D)`` in the accumulation dtype."""
        b, t, _, d = x.shape
        x = np.asarray(x, self.acc).reshape(b, t, self.kh, self.g, d)
        return np.ascontiguousarray(x.transpose(0, 2, 3, 1, 4))

    def ungrouped(self, x: np.ndarray, dt: Any) -> np.ndarray:
        """``(B, K, G, T, D)`` -> ``(B, T, N, D)`` of dtype ``dt``."""
        b, _, _, t, d = x.shape
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2, 4).reshape(b, t, self.n, d)).astype(dt)

    def grouped_bs(self, x: np.ndarray) -> np.ndarray:
        """A bias or mask ``(1|B, 1|N, T, S)`` -> ``(1|B, 1|K, 1|G, T, S)`` (a view)."""
        nb = x.shape[1]
        kk, gg = (self.kh, self.g) if nb == self.n else (1, 1)
        return x.reshape(x.shape[0], kk, gg, x.shape[2], x.shape[3])

    def grouped_rows(self, x: np.ndarray) -> np.ndarray:
        """``(B, N, T)`` -> ``(B, K, G, T)``."""
        return np.asarray(x, self.acc).reshape(self.b, self.kh, self.g, self.t)

    def blocks(self) -> Iterator[tuple[slice, Iterator[slice]]]:
        """Query blocks, each with the key blocks it may see (causal: keys ``j <= i``)."""
        for i0 in range(0, self.t, self.tq):
            i1 = min(self.t, i0 + self.tq)
            s_end = min(self.s, i1) if self.is_causal else self.s
            ks = (slice(j0, min(s_end, j0 + self.tk)) for j0 in range(0, s_end, self.tk))
            yield slice(i0, i1), ks

    def scores(self, qi: slice, kj: slice, q: np.ndarray | None = None):
        """Scaled, biased scores of a block ``(B, K, G, tq, tk)`` and the allowed entries
        (a bool array, or None when every entry is allowed); disallowed scores are ``-inf``."""
        q = self.q[:, :, :, qi] if q is None else q
        s = np.matmul(q, self.k[:, :, None, kj].swapaxes(-1, -2)) * self.scale
        if self.bias is not None:
            s += self.bias[..., qi, kj]
        ok = None if self.mask is None else self.mask[..., qi, kj]
        if self.is_causal and kj.stop - 1 > qi.start:  # some key of the block is after a query
            c = np.arange(kj.start, kj.stop)[None, :] <= np.arange(qi.start, qi.stop)[:, None]
            ok = c if ok is None else ok & c
        if ok is not None:
            s = np.where(ok, s, -np.inf)
        return s, ok

    def probabilities(self, qi: slice, kj: slice, lse_safe: np.ndarray):
        """``P = exp(S - L)`` of a block, exact zeros where masked (``lse_safe``: ``+inf`` for
        rows with nothing to attend, so their ``P`` is 0 rather than NaN)."""
        s, _ = self.scores(qi, kj)
        return np.exp(s - lse_safe[..., qi, None])


def _safe_lse(lse: np.ndarray) -> np.ndarray:
    return np.where(lse == -np.inf, np.inf, lse)


def forward(q, k, v, bias=None, mask=None, *, scale: float, is_causal: bool):
    """Attention output ``(B, T, N, Hv)`` in ``q``'s dtype and ``lse (B, N, T)`` (the natural
    log-sum-exp of each query's scaled, biased, masked scores) in the accumulation dtype."""
    p = _Problem(q, k, v, bias, mask, scale, is_causal)
    out = np.zeros((p.b, p.kh, p.g, p.t, p.hv), p.acc)
    lse = np.full((p.b, p.kh, p.g, p.t), -np.inf, p.acc)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for qi, kblocks in p.blocks():
            m = np.full(lse[..., qi].shape, -np.inf, p.acc)
            l = np.zeros_like(m)
            acc = np.zeros(out[..., qi, :].shape, p.acc)
            for kj in kblocks:
                s, _ = p.scores(qi, kj)
                m_new = np.maximum(m, s.max(axis=-1))
                m_safe = np.where(np.isfinite(m_new), m_new, 0)
                e = np.exp(s - m_safe[..., None])
                alpha = np.exp(m - m_safe)
                l = alpha * l + e.sum(axis=-1)
                acc = alpha[..., None] * acc + np.matmul(e, p.v[:, :, None, kj])
                m = m_new
            has = l > 0
            out[..., qi, :] = np.where(has[..., None], acc / np.where(has, l, 1)[..., None], 0)
            lse[..., qi] = np.where(has, m + np.log(np.where(has, l, 1)), -np.inf)
    return p.ungrouped(out, q.dtype), lse.reshape(p.b, p.n, p.t)


def backward(q, k, v, bias, mask, out, lse, dout, dlse=None, *, scale: float, is_causal: bool,
             need_dbias: bool = False):  # fmt: skip
    """Gradients ``(dq, dk, dv, dbias or None)`` of the forward's output (cotangent ``dout``)
    and log-sum-exp (cotangent ``dlse`` or None), recomputing the probabilities from ``lse``.
    ``dbias`` has ``bias``'s (broadcast) shape: the gradient summed over broadcast axes."""
    p = _Problem(q, k, v, bias, mask, scale, is_causal)
    do = p.grouped(dout)
    dd = (do * p.grouped(out)).sum(axis=-1)  # D = rowsum(dO * O)
    if dlse is not None:
        dd -= p.grouped_rows(dlse)  # dS = P (dP - D + dL)
    lse_safe = _safe_lse(p.grouped_rows(lse))
    dq = np.zeros_like(p.q)
    dk = np.zeros_like(p.k)
    dv = np.zeros_like(p.v)
    dbias = None
    if need_dbias:
        dbias = np.zeros(p.bias.shape[:3] + (p.t, p.s), p.acc)
    with np.errstate(invalid="ignore", over="ignore"):
        for qi, kblocks in p.blocks():
            for kj in kblocks:
                pr = p.probabilities(qi, kj, lse_safe)
                dob = do[..., qi, :]
                dv[:, :, kj] += np.matmul(pr.swapaxes(-1, -2), dob).sum(axis=2)
                ds = pr * (np.matmul(dob, p.v[:, :, None, kj].swapaxes(-1, -2)) - dd[..., qi, None])
                if dbias is not None:  # the bias is added after the scale
                    dbias[..., qi, kj] += _reduce_to(ds, dbias.shape[:3])
                ds *= p.scale
                dq[..., qi, :] += np.matmul(ds, p.k[:, :, None, kj])
                dk[:, :, kj] += np.matmul(ds.swapaxes(-1, -2), p.q[..., qi, :]).sum(axis=2)
    dkv = lambda x, like: np.ascontiguousarray(x.transpose(0, 2, 1, 3)).astype(like.dtype)
    if dbias is not None:
        dbias = dbias.reshape(bias.shape).astype(bias.dtype)
    return p.ungrouped(dq, q.dtype), dkv(dk, k), dkv(dv, v), dbias


def _reduce_to(x: np.ndarray, lead: tuple[int, ...]) -> np.ndarray:
    """Sum ``x (B, K, G, ...)`` over the leading axes where ``lead`` has 1 (broadcast axes)."""
    axes = tuple(i for i, n in enumerate(lead) if n == 1 and x.shape[i] != 1)
    return x.sum(axis=axes, keepdims=True) if axes else x


def jvp(q, k, v, bias, mask, out, lse, tq, tk, tv, tbias, *, scale: float, is_causal: bool):
    """Forward-mode tangents ``(dout, dlse)`` of the forward at ``(q, k, v, bias)`` along the
    tangents ``tq, tk, tv, tbias`` (any may be None: zero), given its ``out`` and ``lse``."""
    p = _Problem(q, k, v, bias, mask, scale, is_causal)
    lse_safe = _safe_lse(p.grouped_rows(lse))
    gq = None if tq is None else p.grouped(tq)
    gk = None if tk is None else np.asarray(tk, p.acc).transpose(0, 2, 1, 3)
    gv = None if tv is None else np.asarray(tv, p.acc).transpose(0, 2, 1, 3)
    gb = None if tbias is None else p.grouped_bs(np.asarray(tbias, p.acc))
    c = np.zeros((p.b, p.kh, p.g, p.t), p.acc)
    dout = np.zeros((p.b, p.kh, p.g, p.t, p.hv), p.acc)
    with np.errstate(invalid="ignore", over="ignore"):
        for qi, kblocks in p.blocks():
            for kj in kblocks:
                pr = p.probabilities(qi, kj, lse_safe)
                ds = np.zeros_like(pr)
                if gq is not None:
                    ds += np.matmul(gq[..., qi, :], p.k[:, :, None, kj].swapaxes(-1, -2))
                if gk is not None:
                    ds += np.matmul(p.q[..., qi, :], gk[:, :, None, kj].swapaxes(-1, -2))
                ds *= p.scale
                if gb is not None:
                    ds += gb[..., qi, kj]
                pds = np.where(pr > 0, pr * ds, 0)  # masked entries: P = 0 whatever dS is
                c[..., qi] += pds.sum(axis=-1)
                dout[..., qi, :] += np.matmul(pds, p.v[:, :, None, kj])
                if gv is not None:
                    dout[..., qi, :] += np.matmul(pr, gv[:, :, None, kj])
    dout -= c[..., None] * p.grouped(out)
    return p.ungrouped(dout, q.dtype), c.reshape(p.b, p.n, p.t).astype(lse.dtype)


def is_low_precision(dt: Any) -> bool:
    return np.dtype(dt) in (np.dtype(dtypes.bfloat16), np.dtype(dtypes.float16))
