"""The numpy kernel of ``conv_general_dilated``: a direct convolution with one copy of the
input, not one copy per kernel offset (im2col's ``prod(window)`` copies).

The input is laid out once as ``(N, spatial..., C)``; then for each kernel offset ``k`` the
strided view of the input elements that offset meets (``y * stride + k * rhs_dilation - lo =
i * lhs_dilation``: on each axis the stride or the input dilation is 1, the others take the
dilated, padded input) is multiplied by the ``(C/G, O/G)`` matrix ``W[k]`` of each group and
accumulated into the matching outputs of ``(N, out..., O)``: BLAS products on strided views,
``prod(window)`` of them, none over the zeros of padding or input dilation (the input's
gradient of a strided convolution does ``stride**2`` times fewer products than on the dilated
cotangent). A kernel larger than the output (the kernel's gradient) loops over the output
positions instead. Feature groups take blocks of ``C`` and
``O``; batch groups take blocks of ``N`` and ``O`` (group-major, as XLA's ConvGeneralDilated).

It is the primitive's eager impl and its CPU library node (``blu/lower/cpu/libraries.py``),
which passes the planned output buffer as ``out``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core import dtypes


def dilate_dim(d: int, dilation: int) -> int:
    """The size of an axis of ``d`` elements with ``dilation - 1`` zeros between them."""
    return 0 if d == 0 else 1 + dilation * (d - 1)


def _acc_dtype(out_dtype: np.dtype) -> np.dtype:
    # half floats have no BLAS: accumulate in float32 and round once (as dot_general's impl)
    if out_dtype in (dtypes.float16, dtypes.bfloat16):
        return np.dtype(np.float32)
    return np.dtype(out_dtype)


def dilate_pad(
    x: np.ndarray, pads: Sequence[tuple[int, int]], dilation: Sequence[int], fill: Any, dtype: Any
) -> np.ndarray:
    """``x`` with ``dilation - 1`` holes between elements and ``pads`` (negative: crop) on each
    axis, holes and pads holding ``fill`` (``lax.pad``'s semantics), in a new array of ``dtype``."""
    shape, dst, src = [], [], []
    for n, (lo, hi), d in zip(x.shape, pads, dilation):
        size = max(dilate_dim(n, d) + lo + hi, 0)
        # the input elements i whose position lo + i * d lands in [0, size)
        first = min((-lo + d - 1) // d if lo < 0 else 0, n)
        last = min(max((size - lo + d - 1) // d, first), n)
        shape.append(size)
        if last > first:
            start = lo + first * d
            dst.append(slice(start, start + (last - first - 1) * d + 1, d))
            src.append(slice(first, last))
        else:
            dst.append(slice(0, 0))
            src.append(slice(0, 0))
    xp = np.full(shape, fill, dtype)
    xp[tuple(dst)] = x[tuple(src)]
    return xp


def _taps(k, r, pads, st, ld, n, m) -> tuple[slice, slice] | None:
    """On one axis, the outputs ``y`` that kernel tap ``k`` reaches from an input element and
    those elements: ``y * st + k * r - lo = i * ld`` with ``0 <= i < n``, ``0 <= y < m``
    (``st == 1`` or ``ld == 1``); None if there are none."""
    c = k * r - pads[0]
    if ld == 1:
        y_lo, y_hi = max(0, (-c + st - 1) // st), min(m, (n - 1 - c) // st + 1)
        if y_hi <= y_lo:
            return None
        return slice(y_lo, y_hi), slice(y_lo * st + c, (y_hi - 1) * st + c + 1, st)
    y0 = (-c) % ld  # st == 1: the outputs landing on input elements, every ld-th
    i0 = (y0 + c) // ld
    t_lo, t_hi = max(0, -i0), min((m - y0 + ld - 1) // ld if m > y0 else 0, n - i0)
    if t_hi <= t_lo:
        return None
    return slice(y0 + ld * t_lo, y0 + ld * (t_hi - 1) + 1, ld), slice(i0 + t_lo, i0 + t_hi)


def _blocks(n: int, c: int, o: int, fg: int, bg: int) -> list[tuple[slice, slice, slice]]:
    """(batch, input feature, output feature) blocks that meet: batch block b feeds output
    block b (batch groups); input feature group g feeds output group g (feature groups)."""
    if bg > 1:
        nb, ob = n // bg, o // bg
        return [
            (slice(b * nb, (b + 1) * nb), slice(None), slice(b * ob, (b + 1) * ob))
            for b in range(bg)
        ]
    ci, og = c // fg, o // fg
    return [
        (slice(None), slice(g * ci, (g + 1) * ci), slice(g * og, (g + 1) * og)) for g in range(fg)
    ]


def conv_numpy(
    lhs: np.ndarray,
    rhs: np.ndarray,
    *,
    window_strides,
    padding,
    lhs_dilation,
    rhs_dilation,
    dimension_numbers,
    feature_group_count,
    batch_group_count,
    precision=None,
    preferred_element_type=None,
    out: Any = None,
) -> np.ndarray:
    """``conv_general_dilated`` of numpy arrays with resolved params (explicit pads,
    ``ConvDimensionNumbers``); written into ``out`` (``out_spec`` layout) when given."""
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    s = lhs.ndim - 2
    out_dtype = np.dtype(preferred_element_type or lhs.dtype)
    acc_dt = _acc_dtype(out_dtype)
    x = np.transpose(lhs, (lhs_spec[0], *lhs_spec[2:], lhs_spec[1]))  # (N, sp..., C)
    w = np.transpose(rhs, (*rhs_spec[2:], rhs_spec[1], rhs_spec[0]))  # (win..., I, O)
    w = w.astype(acc_dt, copy=False)
    n, c, win, o = x.shape[0], x.shape[-1], w.shape[:s], w.shape[-1]
    out_sp = []
    for d, (lo, hi), ld, k, r, st in zip(
        x.shape[1:-1], padding, lhs_dilation, win, rhs_dilation, window_strides
    ):
        p, e = dilate_dim(d, ld) + lo + hi, dilate_dim(k, r)
        out_sp.append((p - e) // st + 1 if p >= e else 0)
    fg, bg = feature_group_count, batch_group_count
    acc = np.zeros((n // bg, *out_sp, o), acc_dt)
    blocks = _blocks(n, c, o, fg, bg)
    direct = all(st == 1 or ld == 1 for st, ld in zip(window_strides, lhs_dilation))
    if acc.size and c and direct and math.prod(win) <= math.prod(out_sp):
        # a small kernel (the forward pass, the input's gradient): one product per kernel
        # offset, reading the input where it meets that offset's outputs, never the zeros of
        # padding or input dilation (one contiguous copy of the input, no padded one)
        xc = np.ascontiguousarray(x, dtype=acc_dt)
        for ks in itertools.product(*(range(k) for k in win)):
            taps = [
                _taps(*a)
                for a in zip(
                    ks, rhs_dilation, padding, window_strides, lhs_dilation, x.shape[1:-1], out_sp
                )
            ]
            if any(t is None for t in taps):
                continue
            o_idx, i_idx = tuple(t[0] for t in taps), tuple(t[1] for t in taps)
            view = xc[(slice(None), *i_idx)]  # (N, out..., C): a strided view
            for bs, cs, os_ in blocks:
                acc[(slice(None), *o_idx, os_)] += view[bs][..., cs] @ w[ks][:, os_]
    elif acc.size and c and math.prod(win) <= math.prod(out_sp):
        # both a stride and an input dilation on one axis: the dilated, padded input
        no = ((0, 0),)
        xp = dilate_pad(x, no + tuple(padding) + no, (1, *lhs_dilation, 1), 0, acc_dt)
        for ks in itertools.product(*(range(k) for k in win)):
            idx = tuple(
                slice(k * r, k * r + (m - 1) * st + 1, st)
                for k, r, m, st in zip(ks, rhs_dilation, out_sp, window_strides)
            )
            view = xp[(slice(None), *idx)]  # (N, out..., C): a strided view, no copy
            for bs, cs, os_ in blocks:
                acc[..., os_] += view[bs][..., cs] @ w[ks][:, os_]
    elif acc.size and c:
        no = ((0, 0),)
        xp = dilate_pad(x, no + tuple(padding) + no, (1, *lhs_dilation, 1), 0, acc_dt)
        # a kernel larger than the output (the kernel's gradient, whose "kernel" is the
        # cotangent): one product per output position over the whole window
        axes = (list(range(1, s + 2)), list(range(s + 1)))
        for pos in itertools.product(*(range(m) for m in out_sp)):
            idx = tuple(
                slice(p * st, p * st + (k - 1) * r + 1, r)
                for p, st, k, r in zip(pos, window_strides, win, rhs_dilation)
            )
            view = xp[(slice(None), *idx)]  # (N, window..., C)
            for bs, cs, os_ in blocks:
                acc[(slice(None), *pos, os_)] = np.tensordot(view[bs][..., cs], w[..., os_], axes)
    y = np.transpose(acc, (0, s + 1, *range(1, s + 1)))  # (N, O, out...)
    inv = [0] * (s + 2)
    for j, axis in enumerate(out_spec):
        inv[axis] = j
    y = np.transpose(y, inv)
    if out is None:
        return np.ascontiguousarray(y, dtype=out_dtype)
    out[...] = y
    return out
