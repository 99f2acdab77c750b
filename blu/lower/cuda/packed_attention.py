"""Fused attention on slices of the QKV product's array: no copies in, no reassembly out.

A transformer block computes ``qkv = x @ W`` and gives the attention its three parts,
``q, k, v = qkv.reshape(B, T, 3, N, H)[:, :, 0]`` (``[:, :, 1]``, ``[:, :, 2]``), or
``split(qkv, 3, axis=-1)`` reshaped to heads. Lowered as traced, each part is a ``slice`` (a copy
kernel) and the gradient ``dqkv`` is three zero ``pad``s of ``dq, dk, dv`` summed (a kernel that
writes ``dqkv`` again): on the H200 the copies and the reassembly were a sizeable part of the
GPT-2 124M bf16 step (docs/benchmarks/gpt2_gpu.md, session 7). cuDNN's SDPA and blu's flash
kernels read and write
strided operands, so ``pack_attention`` rewrites the jaxpr of a CUDA program (before the plan):

    q = reshape(slice(X)); k = ...; v = ...; out, lse = dot_product_attention_fwd(q, k, v)
    dq, dk, dv = dot_product_attention_bwd(q, k, v, out, lse, dout)
    dX = pad(reshape(dq)) + pad(reshape(dk)) + pad(reshape(dv))
    # becomes  out, lse = attention_fwd_packed(X);  dX = attention_bwd_packed(X, out, lse, dout)

What is matched: ``X`` of shape ``(B, T, ...)``, each of ``q, k, v`` (``(B, T, N, H)``, the same
``N`` and ``H``: no grouped-query attention) a slice of ``X`` along its axis 2 alone (optionally
reshaped), so that each token's part is ``N * H`` consecutive elements of ``X``'s token row; no
bias or mask; an implementation (``blu.lower.cuda.attention.gpu_choice``) that takes the packed
operands and is the one the plain equation would get (cuDNN: bf16/fp16, tokens 16-byte aligned;
blu's flash kernels: float32). The backward's ``dq, dk, dv`` must be read only by the pads (after
a reshape each) whose sum tiles ``X`` exactly; its output is then written whole by the call. The
forward and the backward are matched independently; the slices and pads left unread are
dropped. ``config.packed_attention`` (``BLU_PACKED_ATTENTION=0``) turns the rewrite off.

Numerics: the same kernels on the same values (only where they are read and written changes).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blu.core.aval import ShapedArray
from blu.core.config import config
from blu.core.errors import BluError
from blu.core.jaxpr import Jaxpr, JaxprEqn, Literal, Var, dce_jaxpr, producers, readers, use_counts
from blu.core.primitive import Primitive
from blu.lax import attention as att
from blu.lower.cuda import attention as lower_att
from blu.lower.library import LibraryLowering, register_library
from blu.lower.slots import made_by_plan

__all__ = ["fwd_packed_p", "bwd_packed_p", "pack_attention", "plain_avals"]

# (X) -> (out, lse);  (X, out, lse, dout) -> (dX): made by the CUDA plan only. Params: the plain
# primitive's, ``offsets`` (of q, k, v in a token row of X, in elements) and ``heads`` (N, H).
fwd_packed_p = Primitive("dot_product_attention_fwd_packed", multiple_results=True)
bwd_packed_p = Primitive("dot_product_attention_bwd_packed", multiple_results=True)


# ---- operands ------------------------------------------------------------------------------------


def _row(x: ShapedArray) -> int:
    """Elements in one token row of ``X`` (its axes after ``(B, T)``): the packed stride."""
    return math.prod(x.shape[2:])


def plain_avals(avals, params) -> tuple[list[ShapedArray], int]:
    """The plain primitive's avals (``q, k, v[, out, lse, dout]``) of a packed equation's, and
    the token stride of ``X``."""
    x, rest = avals[0], list(avals[1:])
    n, h = params["heads"]
    part = ShapedArray((x.shape[0], x.shape[1], n, h), x.dtype)
    return [part] * 3 + rest, _row(x)


def _plain_params(params: dict) -> dict:
    return {k: v for k, v in params.items() if k not in ("offsets", "heads")}


def _parts(x: np.ndarray, params: dict) -> list[np.ndarray]:
    """``q, k, v`` of ``X`` (numpy views)."""
    n, h = params["heads"]
    rows = np.reshape(x, (x.shape[0], x.shape[1], -1))
    return [rows[:, :, o : o + n * h].reshape(x.shape[0], x.shape[1], n, h)
            for o in params["offsets"]]  # fmt: skip


# ---- the primitives ------------------------------------------------------------------------------


@fwd_packed_p.def_abstract_eval
def _fwd_abstract(x, **params):
    avals, _ = plain_avals([x], params)
    return att.fwd_p.abstract_eval(*avals, **_plain_params(params))


@fwd_packed_p.def_impl
def _fwd_impl(x, **params):
    return att.fwd_p.impl(*_parts(np.asarray(x), params), **_plain_params(params))


@bwd_packed_p.def_abstract_eval
def _bwd_abstract(x, out, lse, dout, **params):
    avals, _ = plain_avals([x, out, lse, dout], params)
    att.bwd_p.abstract_eval(*avals, **_plain_params(params))
    return [x]


@bwd_packed_p.def_impl
def _bwd_impl(x, out, lse, dout, **params):
    x = np.asarray(x)
    grads = att.bwd_p.impl(*_parts(x, params), out, lse, dout, **_plain_params(params))
    dx = np.zeros(x.shape, x.dtype)  # (the rewrite checked that the parts tile it)
    for part, g in zip(_parts(dx, params), grads[:3], strict=True):
        part[...] = g
    return [dx]


# ---- lowerings -----------------------------------------------------------------------------------


def _cpu(prim: Primitive):
    def call(ins, outs, workspace, **params) -> None:  # the simulated GPU (BLU_FAKE_GPU=1)
        for dst, r in zip(outs, prim.impl(*ins, **params), strict=True):
            dst[...] = r

    return call


def _pointers(base: int, aval: ShapedArray, params: dict) -> list[int]:
    size = np.dtype(aval.dtype).itemsize
    return [base + o * size for o in params["offsets"]]


def _gpu_fwd(dev, stream, ins, outs, workspace, in_avals, out_avals, _modules=(), **params):
    avals, row = plain_avals(in_avals, params)
    q, k, v = _pointers(ins[0], in_avals[0], params)
    lower_att.forward_gpu(dev, stream, [q, k, v], outs, workspace, avals, _modules,
                          _plain_params(params), row)  # fmt: skip


def _gpu_bwd(dev, stream, ins, outs, workspace, in_avals, out_avals, _modules=(), **params):
    avals, row = plain_avals(in_avals, params)
    q, k, v = _pointers(ins[0], in_avals[0], params)
    dq, dk, dv = _pointers(outs[0], in_avals[0], params)
    lower_att.backward_gpu(dev, stream, [q, k, v, *ins[1:]], [dq, dk, dv], workspace, avals,
                           _modules, _plain_params(params), row)  # fmt: skip


def _applies(backward: bool):
    def applies(avals, params, target: str) -> bool:
        plain, row = plain_avals(avals, params)
        return lower_att.gpu_choice(plain, _plain_params(params), backward, row) is not None

    return applies


def _unpack(avals, params) -> tuple[list[ShapedArray], int]:
    return plain_avals(avals, params)


made_by_plan("cuda", fwd_packed_p, bwd_packed_p)
for _prim, _backward, _gpu in ((fwd_packed_p, False, _gpu_fwd), (bwd_packed_p, True, _gpu_bwd)):
    register_library(_prim, LibraryLowering(
        workspace=lower_att.workspace_rule(_backward, _unpack), cpu=_cpu(_prim), gpu=_gpu,
        applies=_applies(_backward), kernels=lower_att.kernels_rule(_backward, _unpack),
    ), platform="cuda")  # fmt: skip


# ---- the rewrite ---------------------------------------------------------------------------------


def pack_attention(jaxpr: Jaxpr) -> Jaxpr:
    """``jaxpr`` with each attention forward and backward on slices of one array made a packed
    call (see the module docstring); the same jaxpr when nothing matches or
    ``config.packed_attention`` is off."""
    if not config.packed_attention:
        return jaxpr
    eqns = jaxpr.eqns
    if not any(e.primitive is att.fwd_p or e.primitive is att.bwd_p for e in eqns):
        return jaxpr
    producer, reader = producers(jaxpr), readers(jaxpr)
    uses = use_counts(jaxpr, output_uses=2)  # (an output is never folded away)
    replace: dict[int, JaxprEqn | None] = {}
    for e in eqns:
        backward = e.primitive is att.bwd_p
        if not (backward or e.primitive is att.fwd_p) or e.params["has_bias"] \
                or e.params["has_mask"]:  # fmt: skip
            continue
        if backward and (e.params["has_dlse"] or e.params["need_dbias"]):
            continue
        src = _source(e.invars[:3], producer)
        if src is None or not _packable(e, src, backward):
            continue
        x, offsets = src
        n, h = e.invars[0].aval.shape[2:]
        params = {**e.params, "offsets": offsets, "heads": (n, h)}
        if not backward:
            replace[id(e)] = JaxprEqn(fwd_packed_p, [x], params, list(e.outvars), e.source)
            continue
        chain = _reassembly(e, x, offsets, producer, reader, uses)
        if chain is None:
            continue
        root, dropped = chain
        replace[id(e)] = JaxprEqn(bwd_packed_p, [x, *e.invars[3:]], params, [root], e.source)
        replace.update((id(d), None) for d in dropped)
    if not replace:
        return jaxpr
    new = [replace.get(id(e), e) for e in eqns]
    return dce_jaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, [e for e in new if e is not None],
                           jaxpr.outvars))  # fmt: skip


def _source(parts, producer: dict) -> tuple[Var, tuple[int, int, int]] | None:
    """``(X, offsets)`` when ``q, k, v`` are slices of one ``X`` along its axis 2 (each maybe
    reshaped), each ``N * H`` consecutive elements of a token row; else None."""
    x, offsets = None, []
    for p in parts:
        if not isinstance(p, Var) or p.aval.ndim != 4:
            return None
        e = producer.get(p)
        if e is not None and e.primitive.name == "reshape":
            e = producer.get(e.invars[0]) if isinstance(e.invars[0], Var) else None
        if e is None or e.primitive.name != "slice" or not isinstance(e.invars[0], Var):
            return None
        src = e.invars[0]
        shape, start, limit = src.aval.shape, e.params["start_indices"], e.params["limit_indices"]
        strides = e.params.get("strides") or (1,) * len(shape)
        if x is None:
            x = src
        if src is not x or len(shape) < 3 or any(s != 1 for s in strides):
            return None
        if tuple(shape[:2]) != tuple(p.aval.shape[:2]):
            return None
        full = all((start[d], limit[d]) == (0, shape[d]) for d in range(len(shape)) if d != 2)
        inner = math.prod(shape[3:])
        if not full or (limit[2] - start[2]) * inner != math.prod(p.aval.shape[2:]):
            return None
        offsets.append(start[2] * inner)
    return x, tuple(offsets)


def _packable(e: JaxprEqn, src, backward: bool) -> bool:
    """Whether the implementation the plain equation gets takes the packed operands."""
    x, _ = src
    avals = [v.aval for v in e.invars]
    try:
        plain = lower_att.gpu_choice(avals, e.params, backward)
        return plain is not None and \
            lower_att.gpu_choice(avals, e.params, backward, _row(x.aval)) == plain  # fmt: skip
    except BluError:  # implementation="cudnn" that the packed form cannot take
        return False


def _is_zero(a: Any) -> bool:
    return isinstance(a, Literal) and np.all(np.asarray(a.val) == 0)


def _reassembly(bwd: JaxprEqn, x: Var, offsets, producer, reader, uses):
    """``(root, dropped)``: the variable that sums the zero-padded ``dq, dk, dv`` into ``X``'s
    shape and the equations that compute it, when that is all they feed; else None."""
    inner = math.prod(x.aval.shape[3:])
    dropped: list[JaxprEqn] = []
    pads = []
    for g, off in zip(bwd.outvars[:3], offsets, strict=True):
        r = reader.get(g, [])
        if uses.get(g) != 1 or len(r) != 1:
            return None
        e = r[0]
        if e.primitive.name == "reshape":
            dropped.append(e)
            out = e.outvars[0]
            r = reader.get(out, [])
            if uses.get(out) != 1 or len(r) != 1:
                return None
            e = r[0]
        config_ = e.params.get("padding_config") if e.primitive.name == "pad" else None
        if config_ is None or not _is_zero(e.invars[1]) or e.outvars[0].aval.shape != x.aval.shape:
            return None
        if any(c != (0, 0, 0) for d, c in enumerate(config_) if d != 2) or config_[2][2] != 0:
            return None
        if config_[2][0] * inner != off:
            return None
        dropped.append(e)
        pads.append(e.outvars[0])
    # the pads' sum: a tree of adds whose inner sums have no other reader
    top = pads[0]
    while True:
        r = reader.get(top, [])
        if uses.get(top) != 1 or len(r) != 1 or r[0].primitive.name not in ("add", "add_any"):
            break
        top = r[0].outvars[0]
    leaves: list[Var] = []
    adds: list[JaxprEqn] = []

    def collect(v: Var) -> bool:
        e = producer.get(v)
        if v in pads:
            leaves.append(v)
            return True
        if (
            e is None
            or e.primitive.name not in ("add", "add_any")
            or (v is not top and uses.get(v) != 1)
        ):
            return False
        adds.append(e)
        return all(isinstance(a, Var) and collect(a) for a in e.invars)

    if top is pads[0] or not collect(top) or sorted(map(id, leaves)) != sorted(map(id, pads)):
        return None
    n_h = math.prod(bwd.outvars[0].aval.shape[2:])
    spans = sorted(offsets)
    if any(b - a < n_h for a, b in zip(spans, spans[1:])) or 3 * n_h != _row(x.aval):
        return None  # the parts overlap or leave gaps: dX would not be written whole
    return top, dropped + adds
