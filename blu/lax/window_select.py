"""The derivative of the windowed max and min: ``window_gather`` (select-and-gather: each output
takes the tangent at its window's chosen offset) and its transpose ``window_scatter``
(select-and-scatter-add: each cotangent goes back to that element), after XLA's
SelectAndScatter and JAX's ``select_and_gather_add``.

``which`` (the output's shape) holds each window's chosen offset as a row-major index into the
window (computed from the primal by ``reduce_window_max``'s JVP), in the narrowest signed
integer that holds every offset (``offsets_dtype``: int8 for a window of up to 127 elements, as
every pooling window): a max pool's backward pads and reads it at each window offset, 4x fewer
bytes than int32. Both primitives are linear in their first operand; ``which`` is an integer
with no tangent.

``window_scatter`` is written as JAX writes ``reduce_window_sum``'s transpose: the cotangent and
``which`` are padded once (``window_strides - 1`` holes, the convolution's lhs-transpose
padding), then each input element reads the ``prod(window)`` flipped offsets of the window
around it and keeps those whose ``which`` names it: one pad and strided slices the kernel
compiler fuses, not a full-size pad per window offset (the transpose of ``prod(window)``
slices). The helpers shared with ``blu/lax/windowed.py`` (output sizes, the strided slice of
each window offset) live here.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax import elementwise as ew
from blu.lax.bits import or_
from blu.lax.casts import convert_element_type
from blu.lax.conv_numpy import dilate_dim, dilate_pad
from blu.lax.convolution import vjp_lhs_padding
from blu.lax.shapes import broadcast_in_dim, full, iota, pad, reshape
from blu.lax.slicing import slice as _slice
from blu.transforms.ad_util import Zero, tangent_aval
from blu.transforms.batching import moveaxis


def out_spatial(
    shape, window_dimensions, window_strides, padding, base_dilation, window_dilation
) -> list[int]:
    """The output sizes of a windowed reduction of an operand of ``shape``."""
    out = []
    for n, w, s, (lo, hi), bd, wd in zip(
        shape, window_dimensions, window_strides, padding, base_dilation, window_dilation
    ):
        padded, eff = dilate_dim(n, bd) + lo + hi, dilate_dim(w, wd)
        out.append((padded - eff) // s + 1 if padded >= eff else 0)
    return out


def _bounds(ks, out_sp, window_strides, window_dilation):
    start, limit = [], []
    for k, d, m, s in zip(ks, window_dilation, out_sp, window_strides):
        b = k * d if m else 0  # an empty output takes an empty slice at 0
        start.append(b)
        limit.append(b + (m - 1) * s + 1 if m else 0)
    return start, limit


def window_slices(xp, out_sp, window_dimensions, window_strides, window_dilation):
    """The strided slices of ``xp`` (lax), one per window offset, in row-major order."""
    for ks in itertools.product(*(range(w) for w in window_dimensions)):
        start, limit = _bounds(ks, out_sp, window_strides, window_dilation)
        yield _slice(xp, start, limit, window_strides)


def window_views(xp, out_sp, window_dimensions, window_strides, window_dilation):
    """``window_slices`` for numpy arrays: strided views, no copies."""
    for ks in itertools.product(*(range(w) for w in window_dimensions)):
        start, limit = _bounds(ks, out_sp, window_strides, window_dilation)
        yield xp[tuple(slice(b, e, s) for b, e, s in zip(start, limit, window_strides))]


def _flipped(window_dimensions) -> list[int]:
    """For each offset (row-major), the row-major index of the offset mirrored in the window."""
    return [
        int(
            np.ravel_multi_index(
                [w - 1 - k for w, k in zip(window_dimensions, ks)], window_dimensions
            )
        )
        for ks in itertools.product(*(range(w) for w in window_dimensions))
    ]


def _scatter_pads(operand_shape, out_shape, p) -> tuple:
    return vjp_lhs_padding(
        operand_shape,
        p["window_dimensions"],
        p["window_strides"],
        out_shape,
        p["padding"],
        p["base_dilation"],
        p["window_dilation"],
    )


# ---- window_gather: out[y] = t'[y * stride + k(which[y]) * window_dilation] -----------------

window_gather_p = Primitive("window_gather")


@window_gather_p.def_impl
def _gather_impl(t, which, **p):
    tp = dilate_pad(t, p["padding"], p["base_dilation"], 0, t.dtype)
    out = np.zeros(which.shape, t.dtype)
    views = window_views(
        tp, which.shape, p["window_dimensions"], p["window_strides"], p["window_dilation"]
    )
    for i, view in enumerate(views):
        np.copyto(out, view, where=which == i)
    return out


_OFFSET_DTYPES = (np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32))


def offsets_dtype(window_dimensions: tuple[int, ...]) -> np.dtype:
    """The dtype of ``which`` for a window of these dimensions: int8, int16 or int32, the
    narrowest that holds its largest offset (and the pads' -1)."""
    n = math.prod(window_dimensions)
    return next(t for t in _OFFSET_DTYPES if n <= np.iinfo(t).max)


def _check(name, t: ShapedArray, which: ShapedArray, out_shape, operand_shape, p) -> None:
    if which.dtype not in _OFFSET_DTYPES or not dtypes.is_inexact(t.dtype):
        raise BluTypeError(
            with_user_line(
                f"{name}: needs a float operand and int8/int16/int32 offsets, "
                f"got {t.str_short()} and {which.str_short()}"
            )
        )
    want = tuple(out_spatial(operand_shape, *(p[k] for k in _PARAMS)))
    if tuple(out_shape) != want or len(operand_shape) != len(p["window_dimensions"]):
        raise BluShapeError(
            with_user_line(
                f"{name}: {t.str_short()} and {which.str_short()} do not match the window {p}"
            )
        )


_PARAMS = ("window_dimensions", "window_strides", "padding", "base_dilation", "window_dilation")


@window_gather_p.def_abstract_eval
def _gather_abstract_eval(t: ShapedArray, which: ShapedArray, **p) -> ShapedArray:
    _check("window_gather", t, which, which.shape, t.shape, p)
    return ShapedArray(which.shape, t.dtype)


def _gather_decomposition(t, which, **p):
    ta, wa = get_aval(t), get_aval(which)
    cfg = [(lo, hi, bd - 1) for (lo, hi), bd in zip(p["padding"], p["base_dilation"])]
    tp = pad(t, full((), 0, ta.dtype), cfg)
    acc = full(wa.shape, 0, ta.dtype)
    slices = window_slices(
        tp, wa.shape, p["window_dimensions"], p["window_strides"], p["window_dilation"]
    )
    for i, sl in enumerate(slices):
        acc = ew.select(ew.eq(which, full(wa.shape, i, wa.dtype)), sl, acc)
    return acc


window_gather_p.decomposition = _gather_decomposition


# ---- window_scatter: the transpose, each cotangent added to its window's chosen element --------

window_scatter_p = Primitive("window_scatter")


@window_scatter_p.def_impl
def _scatter_impl(ct, which, *, operand_shape, **p):
    pads = _scatter_pads(operand_shape, ct.shape, p)
    ctp = dilate_pad(ct, pads, p["window_strides"], 0, ct.dtype)
    whp = dilate_pad(which, pads, p["window_strides"], -1, which.dtype)
    out = np.zeros(operand_shape, ct.dtype)
    if out.size == 0:
        return out
    win = (p["window_dimensions"], p["base_dilation"], p["window_dilation"])
    views = zip(window_views(ctp, operand_shape, *win), window_views(whp, operand_shape, *win))
    for k, (c, w) in zip(_flipped(p["window_dimensions"]), views):
        out += np.where(w == k, c, 0)
    return out


@window_scatter_p.def_abstract_eval
def _scatter_abstract_eval(ct: ShapedArray, which: ShapedArray, *, operand_shape, **p):
    _check("window_scatter", ct, which, ct.shape, operand_shape, p)
    if ct.shape != which.shape:
        raise BluShapeError(
            with_user_line(
                f"window_scatter: {ct.str_short()} and {which.str_short()} differ in shape"
            )
        )
    return ShapedArray(tuple(operand_shape), ct.dtype)


def _scatter_decomposition(ct, which, *, operand_shape, **p):
    ca, wa = get_aval(ct), get_aval(which)
    if math.prod(operand_shape) == 0:
        return full(operand_shape, 0, ca.dtype)
    if all(d == 1 for d in (*p["base_dilation"], *p["window_dilation"])):
        return _scatter_windows(ct, which, tuple(operand_shape), p)
    pads = _scatter_pads(operand_shape, ca.shape, p)
    cfg = [(lo, hi, s - 1) for (lo, hi), s in zip(pads, p["window_strides"])]
    ctp = pad(ct, full((), 0, ca.dtype), cfg)
    whp = pad(which, full((), -1, wa.dtype), cfg)
    win = (p["window_dimensions"], p["base_dilation"], p["window_dilation"])
    acc = full(operand_shape, 0, ca.dtype)
    zero = full(operand_shape, 0, ca.dtype)
    slices = zip(window_slices(ctp, operand_shape, *win), window_slices(whp, operand_shape, *win))
    for k, (c, w) in zip(_flipped(p["window_dimensions"]), slices):
        acc = ew.add(acc, ew.select(ew.eq(w, full(operand_shape, k, wa.dtype)), c, zero))
    return acc


def _scatter_windows(ct, which, operand_shape, p):
    """``window_scatter`` without dilations, as a gather over the windows that hold each
    element: along a dimension of window ``w``, stride ``s`` and low padding ``lo``, element
    ``y`` lies in windows ``i = (y + lo) // s - j`` at offset ``t = (y + lo) % s + j s`` for
    ``j < ceil(w / s)`` (and ``t < w``, ``0 <= i < out``). So each element reads
    ``prod(ceil(w / s))`` windows (4 for a 3x3 max pool of stride 2), not the ``prod(w)``
    offsets of the cotangent padded with stride holes (9, of which 2.25 on average are not
    holes): the cotangent and ``which`` repeated ``s`` times along each dimension (a broadcast
    and a reshape: no holes), padded once, then one unit-stride slice per window ``j``, whose
    ``which`` must name the offset ``t`` (from an iota; -2 where ``t >= w``: never)."""
    ca, wa = get_aval(ct), get_aval(which)
    W, S, out = p["window_dimensions"], p["window_strides"], ca.shape
    lows = [lo for lo, _ in p["padding"]]
    J = [-(-w // s) for w, s in zip(W, S)]
    # the repeat: [.., m, ..] -> [.., m, s, ..] -> [.., m s, ..]
    wide = [n * s for n, s in zip(out, S)]
    if any(s > 1 for s in S):
        split = [x for n, s in zip(out, S) for x in ((n, s) if s > 1 else (n,))]
        dims, k = [], 0
        for s in S:
            dims.append(k)
            k += 2 if s > 1 else 1
        ct = reshape(broadcast_in_dim(ct, split, dims), wide)
        which = reshape(broadcast_in_dim(which, split, dims), wide)
    pads = [(max(0, (j - 1) * s - lo), max(0, lo + n - m))
            for j, s, lo, n, m in zip(J, S, lows, operand_shape, wide)]  # fmt: skip
    if any(a or b for a, b in pads):
        ct = pad(ct, full((), 0, ca.dtype), [(a, b, 0) for a, b in pads])
        which = pad(which, full((), -1, wa.dtype), [(a, b, 0) for a, b in pads])
    strides = [math.prod(W[d + 1 :]) for d in range(len(W))]
    acc = None
    for js in itertools.product(*(range(j) for j in J)):
        start = [lo - j * s + a for lo, j, s, (a, _) in zip(lows, js, S, pads)]
        c = _slice(ct, start, [b + n for b, n in zip(start, operand_shape)])
        w = _slice(which, start, [b + n for b, n in zip(start, operand_shape)])
        target, bad = None, None
        for d, (n, s, lo, j) in enumerate(zip(operand_shape, S, lows, js)):
            if W[d] == 1 and s == 1:
                continue  # (t = 0)
            t = ew.add(iota(np.int32, n), full((n,), lo, np.int32))
            t = ew.rem(t, full((n,), s, np.int32)) if s > 1 else full((n,), 0, np.int32)
            t = ew.add(t, full((n,), j * s, np.int32)) if j else t
            if (j + 1) * s > W[d]:  # some t of this window lie past its end
                over = broadcast_in_dim(ew.ge(t, full((n,), W[d], np.int32)), operand_shape,
                                        (d,))  # fmt: skip
                bad = over if bad is None else or_(bad, over)
            t = ew.mul(t, full((n,), strides[d], np.int32)) if strides[d] > 1 else t
            t = broadcast_in_dim(t, operand_shape, (d,))
            target = t if target is None else ew.add(target, t)
        if target is None:
            target = full(operand_shape, 0, wa.dtype)
        target = convert_element_type(target, wa.dtype)
        if bad is not None:
            target = ew.select(bad, full(operand_shape, -2, wa.dtype), target)
        term = ew.select(ew.eq(w, target), c, full(operand_shape, 0, ca.dtype))
        acc = term if acc is None else ew.add(acc, term)
    return acc


window_scatter_p.decomposition = _scatter_decomposition


# ---- rules shared by the pair: linear in the first operand, batched with a window axis of 1 ---


def window_gather(t: Any, which: Any, **params: Any) -> Any:
    return window_gather_p.bind(t, which, **params)


def window_scatter(ct: Any, which: Any, operand_shape: tuple, **params: Any) -> Any:
    return window_scatter_p.bind(ct, which, operand_shape=tuple(operand_shape), **params)


def _linear_jvp(prim: Primitive):
    def jvp(primals, tangents, **params):
        (x, which), (tx, _) = primals, tangents
        out = prim.bind(x, which, **params)
        if isinstance(tx, Zero):
            return out, Zero(tangent_aval(get_aval(out)))
        return out, prim.bind(tx, which, **params)

    prim.def_jvp(jvp)


_linear_jvp(window_gather_p)
_linear_jvp(window_scatter_p)


@window_gather_p.def_transpose
def _gather_transpose(ct, t, which, **p):
    if isinstance(ct, Zero):
        return [None, None]
    return [window_scatter(ct, which, t.aval.shape, **p), None]


@window_scatter_p.def_transpose
def _scatter_transpose(ct, c, which, *, operand_shape, **p):
    if isinstance(ct, Zero):
        return [None, None]
    return [window_gather(ct, which, **p), None]


def _front(x, d, size):
    if d is None:
        a = get_aval(x)
        return broadcast_in_dim(x, (size, *a.shape), tuple(range(1, a.ndim + 1)))
    return moveaxis(x, d, 0)


def _batched_params(p: dict) -> dict:
    return dict(
        p,
        window_dimensions=(1, *p["window_dimensions"]),
        window_strides=(1, *p["window_strides"]),
        padding=((0, 0), *p["padding"]),
        base_dilation=(1, *p["base_dilation"]),
        window_dilation=(1, *p["window_dilation"]),
    )


@window_gather_p.def_batch
def _gather_batch(axis_size, args, dims, **p):
    (t, which), (dt, dw) = args, dims
    out = window_gather_p.bind(
        _front(t, dt, axis_size), _front(which, dw, axis_size), **_batched_params(p)
    )
    return out, 0


@window_scatter_p.def_batch
def _scatter_batch(axis_size, args, dims, *, operand_shape, **p):
    (c, which), (dc, dw) = args, dims
    out = window_scatter_p.bind(
        _front(c, dc, axis_size),
        _front(which, dw, axis_size),
        operand_shape=(axis_size, *operand_shape),
        **_batched_params(p),
    )
    return out, 0
