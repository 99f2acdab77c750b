"""A fused classifier: the linear output projection and softmax cross-entropy in row chunks.

The logits of a language model's output layer are ``(tokens, vocabulary)``: for GPT-2 124M at
16 x 1024 tokens, 16384 x 50304 floats (3.3 GB in float32), and their gradient as much again.
:func:`linear_cross_entropy` never forms them whole. It splits the rows into chunks (a Python
loop unrolled at trace time, so the static memory plan frees one chunk's logits before the next
chunk's are made) and computes, per chunk and in one pass over the logits, their log-sum-exp, the
loss, and the logits' gradient, which it contracts at once into ``dx`` and ``dw``. This is
llm.c's fused classifier (Karpathy, ``llm.c`` ``train_gpt2.cu``, ``fused_classifier``) and
Liger-Kernel's fused linear cross-entropy (Hsu et al. 2024, arXiv:2410.10989), built as a
``custom_vjp`` from blu operations (the fusion pass makes the kernels, cuBLASLt the products).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

import blu.numpy as bnp
from blu import lax
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval, is_concrete
from blu.parallel import spmd
from blu.transforms.custom_derivatives import custom_vjp

_LOW_PRECISION = (dtypes.bfloat16, dtypes.float16)
# at most this many chunks by default: each chunk after the first reads and writes dw's float32
# accumulator (2 x 4 V C bytes: 309 MB for GPT-2's tied embedding, 2.1 GB for a 128K x 2048 one)
# and reads w twice more, while each chunk's logits and their gradient hold 4 V bytes a row in
# bfloat16. GPT-2 124M, B=16, bf16 (f32 logits then) on an H200: 8 chunks beat 16 and matched
# 4 (docs/benchmarks/gpt2_gpu.md, session 6, issue #18); with bfloat16 logits, 4 chunks move
# 1.9 GB a step less than 8 for 0.19 GiB more peak (benchmarks/plan_traffic.py)
_MAX_DEFAULT_CHUNKS = 4


def linear_cross_entropy(
    x: Any,
    w: Any,
    labels: Any,
    *,
    ignore_index: int | None = None,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    chunk_size: int | None = None,
) -> Any:
    """Softmax cross-entropy of the logits ``x @ w.T`` without holding all the logits.

    Equal (up to rounding) to ``cross_entropy(x @ w.T, labels)`` with PyTorch's
    ``ignore_index`` and ``label_smoothing`` (``torch.nn.functional.cross_entropy``): a row with
    label ``y`` and logits ``z`` (``V`` classes) costs
    ``(1 - eps) * (lse(z) - z[y]) + eps * (lse(z) - mean(z))``.

    Mixed precision as ``torch.autocast``: bfloat16/float16 ``x``/``w`` are multiplied in that
    dtype with float32 accumulation, the logits rounded to that dtype (autocast's linear layer:
    float16 logits beyond 65504 overflow to inf and give NaN, as there; bfloat16 has float32's
    range), and the softmax, the log-sum-exp and the loss computed in float32;
    the gradients come back in the inputs' dtypes. ``x`` and ``w`` of different dtypes are
    promoted to one (the gradient is cast back to each).

    Memory: the logits exist one chunk of ``chunk_size`` rows at a time, with their gradient.
    Under differentiation with ``reduction`` "mean" or "sum" the forward pass also computes
    ``dx`` and ``dw`` (scaled by the loss's cotangent in the backward pass); with "none" the
    backward pass recomputes each chunk's logits from the saved log-sum-exp (one more product).

    Args:
        x: ``(..., C)`` floats (e.g. a transformer's final hidden states).
        w: ``(V, C)`` floats, one row per class (GPT-2's tied token embedding).
        labels: ``(...)`` integers (``x.shape[:-1]``) in ``[0, V)``, or ``ignore_index``.
        ignore_index: rows with this label contribute no loss and no gradient, and "mean"
            averages over the other rows only (all rows ignored: NaN, as PyTorch). None: none.
        label_smoothing: ``eps`` in ``[0, 1]``: the target is ``(1 - eps)`` on the label plus
            ``eps / V`` on every class (Szegedy et al. 2016, as PyTorch defines it).
        reduction: "mean" (over the counted rows), "sum", or "none" (the ``(...)`` row losses,
            0 for ignored rows).
        chunk_size: rows per chunk (any positive size; the last chunk may be smaller). None:
            about ``N / ceil(V / C)`` rows (each chunk's logits about the size of ``x``, as
            Liger chooses), at most 4 chunks.

    Returns:
        A scalar ("mean", "sum") or ``labels.shape`` ("none"): float32 for bfloat16/float16
        inputs, otherwise the inputs' float dtype.

    Raises:
        BluShapeError: ``w`` is not ``(V, C)`` with ``V >= 1`` and ``C = x.shape[-1]``, or
            ``labels`` is not ``x.shape[:-1]``.
        BluTypeError: ``labels`` are not integers.
        BluValueError: a bad ``reduction``, ``label_smoothing`` or ``chunk_size``; or concrete
            ``labels`` outside ``[0, V)`` that are not ``ignore_index``.

    Under ``jit`` (traced labels) a label outside ``[0, V)`` that is not ``ignore_index`` is not
    checked: it selects no class, so its row's loss is ``(1 - eps) * lse(z) + eps * (lse(z) -
    mean(z))`` (the target logit taken as 0) and its gradient ``softmax(z) - eps / V``, the exact
    gradient of that loss (loss and gradient agree).
    """
    name = "nn.linear_cross_entropy"
    if reduction not in ("mean", "sum", "none"):
        raise BluValueError(
            with_user_line(f"{name}: reduction must be mean, sum or none, not {reduction!r}")
        )
    eps = float(label_smoothing)
    if not 0.0 <= eps <= 1.0:
        raise BluValueError(
            with_user_line(f"{name}: label_smoothing must be in [0, 1], got {label_smoothing}")
        )
    if chunk_size is not None and (int(chunk_size) != chunk_size or chunk_size < 1):
        raise BluValueError(
            with_user_line(f"{name}: chunk_size must be a positive integer, got {chunk_size!r}")
        )
    x, w, labels = _float(x), _float(w), bnp.asarray(labels)
    if not dtypes.is_int(labels.dtype):
        raise BluTypeError(
            with_user_line(f"{name}: labels must be integers, got {get_aval(labels).str_short()}")
        )
    if x.ndim < 1 or w.ndim != 2 or w.shape[1] != x.shape[-1] or w.shape[0] < 1:
        raise BluShapeError(
            with_user_line(
                f"{name}: x {get_aval(x).str_short()} and w {get_aval(w).str_short()} do not fit: "
                "w must be (V, C) with V >= 1 classes and C = x.shape[-1]"
            )
        )
    if labels.shape != x.shape[:-1]:
        raise BluShapeError(
            with_user_line(
                f"{name}: labels {get_aval(labels).str_short()} must have the shape of x "
                f"{get_aval(x).str_short()} without its last axis"
            )
        )
    V, C = w.shape
    if ignore_index is not None:
        ignore_index = int(ignore_index)
    _check_labels(labels, V, ignore_index, name)
    cd = dtypes.result_type(x.dtype, w.dtype)
    acc = dtypes.float32 if cd in _LOW_PRECISION else cd
    x, w = x.astype(cd), w.astype(cd)
    lead = labels.shape
    n = int(np.prod(lead, dtype=np.int64))
    if n == 0:  # no rows: the empty sum, or PyTorch's 0/0 for the mean
        empty = {"none": lambda: bnp.zeros(lead, acc), "sum": lambda: bnp.zeros((), acc)}
        return empty.get(reduction, lambda: bnp.full((), np.nan, acc))()
    mesh = spmd.partitioning_mesh()
    if chunk_size is None and mesh is not None and mesh.size > 1:
        # under jit's partitioner the rows are split over devices; slicing them into chunks
        # would gather every row onto every device, so each device takes its rows whole
        chunk_size = n
    if chunk_size is None:
        chunks = min(-(-V // max(C, 1)), _MAX_DEFAULT_CHUNKS, n)
        chunk_size = -(-n // chunks)
    fn = _fused(reduction, ignore_index, eps, int(chunk_size))
    out = fn(bnp.reshape(x, (n, C)), w, bnp.reshape(labels, (n,)))
    return bnp.reshape(out, lead) if reduction == "none" else out


def _float(a: Any) -> Any:
    a = bnp.asarray(a)
    return a if dtypes.is_float(a.dtype) else a.astype(dtypes.float32)


def _check_labels(labels: Any, V: int, ignore_index: int | None, name: str) -> None:
    """Concrete host labels outside ``[0, V)`` (and not ignored) raise; device arrays and
    traced labels are not read back (see the docstring for what they do)."""
    if not is_concrete(labels) or getattr(labels, "_blu_device_array", False):
        return
    lab = np.asarray(labels)
    bad = (lab < 0) | (lab >= V)
    if ignore_index is not None:
        bad &= lab != ignore_index
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise BluValueError(
            with_user_line(
                f"{name}: label {int(lab[at])} at index {at} of labels {lab.shape} is outside "
                f"[0, {V}) for w with {V} classes"
                + ("" if ignore_index is None else f" and is not ignore_index={ignore_index}")
            )
        )


def _after(x: Any, dep: Any) -> Any:
    """``x`` unchanged, but computed after ``dep``: a data dependency that orders the unrolled
    chunks, so the launch plan runs (and frees) one chunk before the next chunk's product and
    the fusion pass cannot merge the chunks' kernels into one (which would hold every chunk's
    logits at once). ``dep > inf`` is false for every value, NaN included."""
    if dep is None:
        return x
    first = lax.slice(bnp.reshape(dep, (-1,)), (0,), (1,))
    return bnp.where(first > np.inf, bnp.zeros_like(x), x)


def _logits(xc: Any, w: Any, acc: Any) -> Any:
    """One chunk's logits ``xc @ w.T`` in ``acc``. bfloat16/float16 inputs: the product is
    rounded to their dtype, as ``torch.autocast``'s linear layer rounds it (and llm.c's and
    Liger's classifiers), then widened: the chunk's logits cross memory in half the bytes (GPT-2
    124M: 3.3 GB a step less), and the reductions after it run in ``acc``."""
    dims = (((1,), (1,)), ((), ()))
    if xc.dtype in _LOW_PRECISION:
        return lax.dot_general(xc, w, dims, preferred_element_type=xc.dtype).astype(acc)
    return lax.dot_general(xc, w, dims, preferred_element_type=acc)


@functools.cache
def _fused(reduction: str, ignore_index: int | None, eps: float, chunk: int) -> custom_vjp:
    """The custom_vjp for one static configuration: ``(x (N, C), w (V, C), labels (N,))``."""

    def bounds(n: int) -> list[tuple[int, int]]:
        return [(i, min(i + chunk, n)) for i in range(0, n, chunk)]

    def valid_of(lab: Any) -> Any:
        return None if ignore_index is None else lab != ignore_index

    def count(lab: Any, acc: Any) -> Any:
        v = valid_of(lab)
        return bnp.asarray(lab.shape[0], acc) if v is None else bnp.sum(v.astype(acc))

    def reduce(rows: list[Any], lab: Any, acc: Any) -> Any:
        if reduction == "none":
            return bnp.concatenate(rows) if len(rows) > 1 else rows[0]
        total = rows[0]
        for r in rows[1:]:
            total = total + r
        return total / count(lab, acc) if reduction == "mean" else total

    def chunk_loss(xc: Any, w: Any, lc: Any, acc: Any) -> tuple[Any, ...]:
        """Loss rows, and what the gradient needs: exp(z - m), their sum, the hits."""
        z = _logits(xc, w, acc)
        m = lax.stop_gradient(bnp.max(z, axis=1, keepdims=True))
        shifted = z - m
        e = bnp.exp(shifted)
        s = bnp.sum(e, axis=1, keepdims=True)
        hit = bnp.expand_dims(lc, 1) == lax.iota(lc.dtype, z.shape, 1)
        log_s = bnp.log(s[:, 0])
        # both terms relative to the max: the large magnitudes cancel exactly. The picked logit
        # is summed from the raw row (a sum of zeros and one logit: exact), so it joins the
        # max's pass and the sum of exponentials is alone in its own: the GPU's online
        # normalizer (codegen_online) then reads the row once. A label outside [0, V) picks no
        # class, i.e. a target logit of 0 (-m shifted).
        picked = bnp.sum(bnp.where(hit, z, bnp.zeros_like(z)), axis=1) - m[:, 0]
        loss = log_s - picked
        if eps:
            smooth = log_s - bnp.mean(shifted, axis=1)
            loss = np.asarray(1.0 - eps, acc) * loss + np.asarray(eps, acc) * smooth
        v = valid_of(lc)
        if v is not None:
            loss = bnp.where(v, loss, bnp.zeros_like(loss))
        # the softmax as exp times the row's reciprocal: one multiply an element where a
        # division is about ten instructions on a GPU (llm.c's and Liger's kernels do the same)
        return loss, e * (1 / s), hit, log_s + m[:, 0]

    def chunk_grads(xc: Any, w: Any, lc: Any, p: Any, hit: Any, scale: Any) -> tuple[Any, Any]:
        """``dz = (softmax - target) * scale`` and its products ``dz @ w``, ``dz.T @ xc``."""
        acc = p.dtype
        target = hit.astype(acc) * np.asarray(1.0 - eps, acc)
        if eps:
            target = target + np.asarray(eps / w.shape[0], acc)
        dz = (p - target) * scale
        v = valid_of(lc)
        if v is not None:
            dz = bnp.where(bnp.expand_dims(v, 1), dz, bnp.zeros_like(dz))
        dz = dz.astype(w.dtype)
        dx = lax.dot_general(dz, w, (((1,), (0,)), ((), ())), preferred_element_type=acc)
        dw = lax.dot_general(dz, xc, (((0,), (0,)), ((), ())), preferred_element_type=acc)
        return dx.astype(xc.dtype), dw

    def acc_of(x: Any) -> Any:
        return dtypes.float32 if x.dtype in _LOW_PRECISION else x.dtype

    def primal(x: Any, w: Any, lab: Any) -> Any:
        acc = acc_of(x)
        rows: list[Any] = []
        for a, b in bounds(x.shape[0]):
            dep = rows[-1] if rows else None
            loss = chunk_loss(_after(x[a:b], dep), w, _after(lab[a:b], dep), acc)[0]
            rows.append(loss if reduction == "none" else bnp.sum(loss))
        return reduce(rows, lab, acc)

    def fwd(x: Any, w: Any, lab: Any) -> tuple[Any, Any]:
        acc = acc_of(x)
        if reduction == "none":  # per-row cotangents: the backward pass recomputes the logits
            parts: list[tuple[Any, ...]] = []
            for a, b in bounds(x.shape[0]):
                dep = parts[-1][3] if parts else None
                parts.append(chunk_loss(_after(x[a:b], dep), w, _after(lab[a:b], dep), acc))
            lse = bnp.concatenate([q[3] for q in parts]) if len(parts) > 1 else parts[0][3]
            return reduce([q[0] for q in parts], lab, acc), (x, w, lab, lse)
        scale = bnp.asarray(1, acc)
        if reduction == "mean":
            c = count(lab, acc)
            scale = bnp.where(c > 0, 1 / bnp.maximum(c, 1), bnp.zeros_like(c))
        rows, dxs, dw = [], [], None
        for a, b in bounds(x.shape[0]):
            xc, lc = _after(x[a:b], dw), _after(lab[a:b], dw)
            loss, p, hit, _ = chunk_loss(xc, w, lc, acc)
            dx_c, dw_c = chunk_grads(xc, w, lc, p, hit, scale)
            rows.append(bnp.sum(loss))
            dxs.append(dx_c)
            dw = dw_c if dw is None else dw + dw_c
        dx = bnp.concatenate(dxs) if len(dxs) > 1 else dxs[0]
        return reduce(rows, lab, acc), (dx, dw)

    def bwd(res: tuple, g: Any) -> tuple[Any, Any, None]:
        """Cotangents of ``x`` and ``w`` (both in the compute dtype ``x.dtype``)."""
        if reduction != "none":
            dx, dw = res
            g = g.astype(dw.dtype)
            return (dx * g).astype(dx.dtype), (dw * g).astype(dx.dtype), None
        x, w, lab, lse = res
        acc = lse.dtype
        dxs, dw = [], None
        for a, b in bounds(x.shape[0]):
            dep = g if dw is None else dw  # g: not merged with the forward pass's first chunk
            xc, lc = _after(x[a:b], dep), _after(lab[a:b], dep)
            z = _logits(xc, w, acc)
            p = bnp.exp(z - bnp.expand_dims(_after(lse[a:b], dep), 1))
            hit = bnp.expand_dims(lc, 1) == lax.iota(lc.dtype, z.shape, 1)
            gc = bnp.expand_dims(_after(g[a:b].astype(acc), dep), 1)
            dx_c, dw_c = chunk_grads(xc, w, lc, p, hit, gc)
            dxs.append(dx_c)
            dw = dw_c if dw is None else dw + dw_c
        dx = bnp.concatenate(dxs) if len(dxs) > 1 else dxs[0]
        return dx, dw.astype(x.dtype), None

    f = custom_vjp(primal)
    f.defvjp(fwd, bwd)
    return f
