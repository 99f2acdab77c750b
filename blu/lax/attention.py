"""Fused scaled dot-product attention: three primitives with their rules.

- ``dot_product_attention_fwd(q, k, v, [bias], [mask]) -> (out, lse)``: ``out =
  softmax(q k^T * scale + bias, masked) v`` per batch entry and head, and ``lse``, the natural
  log-sum-exp of each query's scores (FlashAttention-2's statistics, Dao 2023).
- ``dot_product_attention_bwd(q, k, v, [bias], [mask], out, lse, dout, [dlse]) -> (dq, dk, dv,
  [dbias])``: the vector-Jacobian product, recomputing the probabilities ``exp(S - lse)`` block
  by block instead of saving them (Dao 2023, Algorithm 2).
- ``dot_product_attention_jvp(q, k, v, [bias], [mask], out, lse, *tangents) -> (dout, dlse)``:
  the forward primitive's tangent, linear in the tangents. Its transpose is the backward
  primitive, so reverse mode (``grad``: JVP, partial evaluation, transpose) saves only
  ``q, k, v, out, lse`` and calls ``dot_product_attention_bwd``: no ``(T, S)`` product is
  built. Forward mode evaluates it with the blocked numpy kernel (or its unfused decomposition
  when inlined).

Layouts: ``q (B, T, N, H)``, ``k (B, S, K, H)``, ``v (B, S, K, Hv)`` with ``K`` dividing ``N``
(grouped-query attention), ``bias``/``mask`` ``(1|B, 1|N, T, S)`` (a bool mask: True may
attend), ``out (B, T, N, Hv)``, ``lse (B, N, T)`` in float32 (float64 for float64 inputs).
``is_causal`` is top-left aligned (query ``i`` sees keys ``j <= i``), as in JAX. A query with
no key to attend gets zeros (and ``lse = -inf``), never NaN.

Each primitive has: abstract eval (shape/dtype checks), a numpy impl (``attention_numpy``:
blocked over keys, float32 accumulation), batching (extra batch axes fold into ``B``), a JVP
(the forward's through the JVP primitive; the other two through the JVP of their
decomposition — unfused, used for higher derivatives only), and ``decomposition``: the same
computation unfused in lax operations, which a lowering inlines on targets where no library
lowering applies (it builds the ``(B, N, T, S)`` scores).

Params: ``scale`` (float), ``is_causal``, ``has_bias``, ``has_mask`` (bools),
``implementation`` (None: any; ``"cudnn"``: cuDNN or an error; ``"blu"``: never cuDNN);
the JVP primitive adds ``has_tangent`` (which of q, k, v, bias have one), the backward primitive
``has_dlse`` and ``need_dbias``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax import attention_decomp as decomp
from blu.lax import attention_numpy as kern
from blu.lax.reductions import reduce_sum
from blu.lax.shapes import broadcast_in_dim, reshape
from blu.transforms.ad import jvp_flat
from blu.transforms.ad_util import Zero, instantiate, is_undefined
from blu.transforms.batching import bdim_to_front

IMPLEMENTATIONS = (None, "cudnn", "blu")

fwd_p = Primitive("dot_product_attention_fwd", multiple_results=True)
jvp_p = Primitive("dot_product_attention_jvp", multiple_results=True)
bwd_p = Primitive("dot_product_attention_bwd", multiple_results=True)


# ---- operands and checks -------------------------------------------------------------------------


def split_args(args, has_bias: bool, has_mask: bool):
    """``(q, k, v, bias or None, mask or None, rest)`` of a primitive's operand list."""
    q, k, v, *rest = args
    bias = rest.pop(0) if has_bias else None
    mask = rest.pop(0) if has_mask else None
    return q, k, v, bias, mask, rest


def _err(kind: type, msg: str) -> Exception:
    return kind(with_user_line(f"dot_product_attention: {msg}"))


def check_avals(q, k, v, bias=None, mask=None) -> tuple[int, ...]:
    """Check the operands' avals; returns ``(B, T, S, N, K, H, Hv)``.

    Raises:
        BluShapeError: ranks or sizes that do not fit together.
        BluTypeError: non-float or different dtypes, a non-bool mask, a bias of another dtype.
    """
    s = lambda a: a.str_short()
    if not (q.ndim == k.ndim == v.ndim == 4):
        raise _err(BluShapeError, f"q, k, v must be (B, T, N, H), (B, S, K, H), (B, S, K, Hv); "
                                  f"got {s(q)}, {s(k)}, {s(v)}")  # fmt: skip
    if not (dtypes.is_float(q.dtype) and q.dtype == k.dtype == v.dtype):
        raise _err(BluTypeError, f"q, k, v need one float dtype, got {s(q)}, {s(k)}, {s(v)}")
    b, t, n, h = q.shape
    sk, kh = k.shape[1], k.shape[2]
    if k.shape[0] != b or v.shape[0] != b or k.shape[3] != h or v.shape[1:3] != (sk, kh):
        raise _err(BluShapeError, f"q {s(q)}, k {s(k)}, v {s(v)} do not fit (B, T, N, H), "
                                  "(B, S, K, H), (B, S, K, Hv)")  # fmt: skip
    if kh == 0 or n % kh:
        raise _err(BluShapeError, f"the key/value heads ({kh}) must divide the query heads "
                                  f"({n}): q {s(q)}, k {s(k)}")  # fmt: skip
    for name, a, want in (("bias", bias, q.dtype), ("mask", mask, np.dtype(bool))):
        if a is None:
            continue
        ok = a.ndim == 4 and a.shape[0] in (1, b) and a.shape[1] in (1, n)
        if not (ok and a.shape[2:] == (t, sk)):
            raise _err(BluShapeError, f"{name} {s(a)} must be (1 or {b}, 1 or {n}, {t}, {sk}) "
                                      f"for q {s(q)} and k {s(k)}")  # fmt: skip
        if a.dtype != want:
            raise _err(BluTypeError, f"{name} {s(a)} must have dtype {dtypes.short_name(want)}")
    return b, t, sk, n, kh, h, v.shape[3]


def _check_implementation(impl: Any) -> None:
    if impl not in IMPLEMENTATIONS:
        raise _err(BluValueError, f"implementation must be one of {IMPLEMENTATIONS}, got {impl!r}")


def lse_aval(q: ShapedArray) -> ShapedArray:
    b, t, n, _ = q.shape
    return ShapedArray((b, n, t), kern.acc_dtype(q.dtype))


def _out_aval(q: ShapedArray, v: ShapedArray) -> ShapedArray:
    return ShapedArray(q.shape[:3] + v.shape[3:], q.dtype)


def _check_rows(name: str, a: ShapedArray, want: ShapedArray) -> None:
    if a.shape != want.shape or a.dtype != want.dtype:
        raise _err(BluShapeError, f"{name} {a.str_short()} must be {want.str_short()}")


# ---- forward -------------------------------------------------------------------------------------


@fwd_p.def_abstract_eval
def _fwd_abstract_eval(*avals, scale, is_causal, has_bias, has_mask, implementation):
    q, k, v, bias, mask, rest = split_args(avals, has_bias, has_mask)
    if rest:
        raise _err(BluValueError, f"forward takes {3 + has_bias + has_mask} operands")
    check_avals(q, k, v, bias, mask)
    _check_implementation(implementation)
    return [_out_aval(q, v), lse_aval(q)]


def _no_cudnn_here(implementation: Any) -> None:
    if implementation == "cudnn":
        raise _err(BluValueError, "implementation='cudnn' needs a CUDA device (the arrays are on "
                                  "the CPU); use implementation=None or 'blu'")  # fmt: skip


@fwd_p.def_impl
def _fwd_impl(*args, scale, is_causal, has_bias, has_mask, implementation):
    _no_cudnn_here(implementation)
    q, k, v, bias, mask, _ = split_args(args, has_bias, has_mask)
    return list(kern.forward(q, k, v, bias, mask, scale=scale, is_causal=is_causal))


@fwd_p.def_jvp
def _fwd_jvp(primals, tangents, *, scale, is_causal, has_bias, has_mask, implementation):
    params = dict(scale=scale, is_causal=is_causal, has_bias=has_bias, has_mask=has_mask)
    out, lse = fwd_p.bind(*primals, implementation=implementation, **params)
    tq, tk, tv = tangents[:3]
    tbias = tangents[3] if has_bias else None
    present = tuple(t is not None and not isinstance(t, Zero) for t in (tq, tk, tv, tbias))
    ts = [t for t, p in zip((tq, tk, tv, tbias), present) if p]
    dout, dlse = jvp_p.bind(*primals, out, lse, *ts, has_tangent=present,
                            implementation=implementation, **params)  # fmt: skip
    return [out, lse], [dout, dlse]


# ---- JVP (linear in the tangents; its transpose is the backward) ---------------------------------


def _jvp_split(args, has_bias, has_mask, has_tangent):
    q, k, v, bias, mask, rest = split_args(args, has_bias, has_mask)
    out, lse, *ts = rest
    it = iter(ts)
    tq, tk, tv, tbias = (next(it) if p else None for p in has_tangent)
    return q, k, v, bias, mask, out, lse, (tq, tk, tv, tbias)


@jvp_p.def_abstract_eval
def _jvp_abstract_eval(*avals, scale, is_causal, has_bias, has_mask, implementation, has_tangent):
    q, k, v, bias, mask, out, lse, ts = _jvp_split(avals, has_bias, has_mask, has_tangent)
    check_avals(q, k, v, bias, mask)
    _check_rows("out", out, _out_aval(q, v))
    _check_rows("lse", lse, lse_aval(q))
    for name, t, like in zip(("q", "k", "v", "bias"), ts, (q, k, v, bias)):
        if t is not None and (like is None or t.shape != like.shape or t.dtype != like.dtype):
            raise _err(BluShapeError, f"the tangent of {name} {t.str_short()} does not match it")
    return [out, lse]


@jvp_p.def_impl
def _jvp_impl(*args, scale, is_causal, has_bias, has_mask, implementation, has_tangent):
    q, k, v, bias, mask, out, lse, ts = _jvp_split(args, has_bias, has_mask, has_tangent)
    return list(kern.jvp(q, k, v, bias, mask, out, lse, *ts, scale=scale, is_causal=is_causal))


@jvp_p.def_transpose
def _jvp_transpose(cts, *args, scale, is_causal, has_bias, has_mask, implementation, has_tangent):
    q, k, v, bias, mask, out, lse, ts = _jvp_split(args, has_bias, has_mask, has_tangent)
    n_primal = len(args) - sum(has_tangent)
    if any(is_undefined(a) for a in args[:n_primal]):
        raise NotImplementedError("dot_product_attention_jvp is linear in its tangents only")
    ct_out, ct_lse = cts
    if isinstance(ct_out, Zero) and isinstance(ct_lse, Zero):
        return [None] * len(args)
    need_dbias = ts[3] is not None and is_undefined(ts[3])
    has_dlse = not isinstance(ct_lse, Zero)
    primals = args[:n_primal]
    grads = bwd_p.bind(
        *primals, instantiate(ct_out), *([ct_lse] if has_dlse else []),
        scale=scale, is_causal=is_causal, has_bias=has_bias, has_mask=has_mask,
        implementation=implementation, has_dlse=has_dlse, need_dbias=need_dbias,
    )  # fmt: skip
    grads = list(grads) + [None] * (4 - len(grads))
    res = [g if t is not None and is_undefined(t) else None for g, t in zip(grads, ts)]
    return [None] * n_primal + [r for r, t in zip(res, ts) if t is not None]


# ---- backward ------------------------------------------------------------------------------------


def _bwd_split(args, has_bias, has_mask, has_dlse):
    q, k, v, bias, mask, rest = split_args(args, has_bias, has_mask)
    out, lse, dout, *r = rest
    return q, k, v, bias, mask, out, lse, dout, (r[0] if has_dlse else None)


@bwd_p.def_abstract_eval
def _bwd_abstract_eval(*avals, scale, is_causal, has_bias, has_mask, implementation, has_dlse,
                       need_dbias):  # fmt: skip
    q, k, v, bias, mask, out, lse, dout, dlse = _bwd_split(avals, has_bias, has_mask, has_dlse)
    check_avals(q, k, v, bias, mask)
    _check_implementation(implementation)
    _check_rows("out", out, _out_aval(q, v))
    _check_rows("dout", dout, _out_aval(q, v))
    _check_rows("lse", lse, lse_aval(q))
    if dlse is not None:
        _check_rows("dlse", dlse, lse_aval(q))
    if need_dbias and bias is None:
        raise _err(BluValueError, "need_dbias without a bias")
    outs = [q, k, v] + ([bias] if need_dbias else [])
    return [a.strip_weak_type() for a in outs]


@bwd_p.def_impl
def _bwd_impl(*args, scale, is_causal, has_bias, has_mask, implementation, has_dlse, need_dbias):
    _no_cudnn_here(implementation)
    q, k, v, bias, mask, out, lse, dout, dlse = _bwd_split(args, has_bias, has_mask, has_dlse)
    dq, dk, dv, db = kern.backward(q, k, v, bias, mask, out, lse, dout, dlse, scale=scale,
                                   is_causal=is_causal, need_dbias=need_dbias)  # fmt: skip
    return [dq, dk, dv] + ([db] if need_dbias else [])


# ---- decompositions and the JVPs through them ----------------------------------------------------


def _fwd_decomposition(*args, scale, is_causal, has_bias, has_mask, implementation):
    q, k, v, bias, mask, _ = split_args(args, has_bias, has_mask)
    return decomp.forward(q, k, v, bias, mask, scale=scale, is_causal=is_causal)


def _jvp_decomposition(*args, scale, is_causal, has_bias, has_mask, implementation, has_tangent):
    q, k, v, bias, mask, out, lse, ts = _jvp_split(args, has_bias, has_mask, has_tangent)
    return decomp.jvp(q, k, v, bias, mask, out, lse, *ts, scale=scale, is_causal=is_causal)


def _bwd_decomposition(*args, scale, is_causal, has_bias, has_mask, implementation, has_dlse,
                       need_dbias):  # fmt: skip
    q, k, v, bias, mask, out, lse, dout, dlse = _bwd_split(args, has_bias, has_mask, has_dlse)
    return decomp.backward(q, k, v, bias, mask, out, lse, dout, dlse, scale=scale,
                           is_causal=is_causal, need_dbias=need_dbias)  # fmt: skip


fwd_p.decomposition = _fwd_decomposition
jvp_p.decomposition = _jvp_decomposition
bwd_p.decomposition = _bwd_decomposition


def _jvp_of_decomposition(prim: Primitive) -> None:
    """JVP rule: forward mode through the unfused decomposition (second derivatives only)."""

    def rule(primals, tangents, **params):
        outs, touts = jvp_flat(lambda *xs: prim.decomposition(*xs, **params), primals, tangents)
        return outs, touts

    prim.def_jvp(rule)


_jvp_of_decomposition(jvp_p)
_jvp_of_decomposition(bwd_p)


# ---- batching: extra batch axes fold into B ------------------------------------------------------


def _roles(prim: Primitive, params: dict) -> list[str]:
    """Per operand: ``"x"`` (leading axis B) or ``"b"`` (leading axis 1 or B: bias, mask)."""
    roles = ["x", "x", "x"] + ["b"] * (params["has_bias"] + params["has_mask"])
    if prim is fwd_p:
        return roles
    roles += ["x", "x"]  # out, lse
    if prim is jvp_p:
        t = params["has_tangent"]
        return roles + ["x"] * sum(t[:3]) + ["b"] * t[3]
    return roles + ["x"] + ["x"] * params["has_dlse"]


def _batch_rule(prim: Primitive):
    def rule(axis_size, args, dims, **params):
        roles = _roles(prim, params)
        qd = dims[0]
        qshape = get_aval(args[0]).shape
        b = qshape[:qd] + qshape[qd + 1 :] if qd is not None else qshape
        b = b[0]
        vb = axis_size * b
        full_bias = prim is bwd_p and params["need_dbias"]
        bias_b = None
        unbatched = [d is None and get_aval(a).shape[0] == 1 for a, d, r in zip(args, dims, roles)]
        # the JVP's bias and its tangent must keep one shape: both (1, ...) or both folded
        tied = [3, len(args) - 1] if prim is jvp_p and params["has_tangent"][3] else []
        if not all(unbatched[i] for i in tied):
            for i in tied:
                unbatched[i] = False
        new = []
        for i, (a, d, r) in enumerate(zip(args, dims, roles)):
            aval = get_aval(a)
            shape = aval.shape if d is None else aval.shape[:d] + aval.shape[d + 1 :]
            is_bias = full_bias and r == "b" and i == 3
            if is_bias:
                bias_b = shape[0]
            if r == "b" and unbatched[i] and not is_bias:
                new.append(a)  # broadcast over every batch entry: stays (1, ...)
                continue
            a = bdim_to_front(a, d, axis_size)  # (V, 1|B, ...)
            if shape[0] != b:
                a = broadcast_in_dim(a, (axis_size, b) + shape[1:], tuple(range(len(shape) + 1)))
            new.append(reshape(a, (vb,) + shape[1:]))
        outs = prim.bind(*new, **params)
        res = []
        for j, o in enumerate(outs):
            shape = get_aval(o).shape
            o = reshape(o, (axis_size, b) + shape[1:])
            if prim is bwd_p and j == 3 and bias_b == 1:  # dbias of a bias broadcast over B
                o = broadcast_in_dim(reduce_sum(o, (1,)), (axis_size, 1) + shape[1:],
                                     (0,) + tuple(range(2, len(shape) + 1)))  # fmt: skip
            res.append(o)
        return res, [0] * len(res)

    return rule


for _p in (fwd_p, jvp_p, bwd_p):
    _p.def_batch(_batch_rule(_p))


# ---- public functions ----------------------------------------------------------------------------


def dot_product_attention_fwd(
    q, k, v, bias=None, mask=None, *, scale: float, is_causal: bool = False,
    implementation: str | None = None,
):  # fmt: skip
    """Fused attention forward on ``(B, T, N, H)`` operands (see the module docstring).

    Args:
        q: ``(B, T, N, H)`` queries; k: ``(B, S, K, H)`` keys; v: ``(B, S, K, Hv)`` values, one
            float dtype, ``K`` dividing ``N``.
        bias: optional ``(1|B, 1|N, T, S)`` additive bias of ``q``'s dtype.
        mask: optional ``(1|B, 1|N, T, S)`` bool, True where a query may attend a key.
        scale: multiplies ``q k^T`` (before the bias).
        is_causal: query ``i`` attends keys ``j <= i`` only.
        implementation: None, ``"cudnn"`` or ``"blu"`` (chooses the lowering).

    Returns:
        ``(out (B, T, N, Hv) in q's dtype, lse (B, N, T) float32 (float64 for float64))``.

    Raises:
        BluShapeError, BluTypeError: operands that do not fit (names their shapes and dtypes).
    """
    args = [a for a in (q, k, v, bias, mask) if a is not None]
    return fwd_p.bind(*args, scale=float(scale), is_causal=bool(is_causal),
                      has_bias=bias is not None, has_mask=mask is not None,
                      implementation=implementation)  # fmt: skip


def dot_product_attention_bwd(q, k, v, out, lse, dout, bias=None, mask=None, dlse=None, *,
                              scale: float, is_causal: bool = False, need_dbias: bool = False,
                              implementation: str | None = None):  # fmt: skip
    """Fused attention backward: ``[dq, dk, dv]`` (``+ [dbias]`` with ``need_dbias``) for the
    cotangent ``dout`` of the forward's output (and ``dlse`` of its log-sum-exp), recomputing
    the probabilities from ``lse`` (FlashAttention-2, Dao 2023, Algorithm 2). Operands as in
    ``dot_product_attention_fwd``; ``out``, ``lse`` are its results.
    """
    args = [a for a in (q, k, v, bias, mask) if a is not None] + [out, lse, dout]
    args += [dlse] if dlse is not None else []
    return bwd_p.bind(*args, scale=float(scale), is_causal=bool(is_causal),
                      has_bias=bias is not None, has_mask=mask is not None,
                      implementation=implementation, has_dlse=dlse is not None,
                      need_dbias=bool(need_dbias))  # fmt: skip


__all__ = ["dot_product_attention_fwd", "dot_product_attention_bwd"]
