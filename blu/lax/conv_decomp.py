"""``conv_general_dilated``'s decomposition (im2col), for targets with no convolution kernel
(CUDA where cuDNN does not take the equation: ``blu.lower.cuda.convolution``): ``pad``, one
strided ``slice`` per kernel offset and one ``dot_general``.

In ``(N, C, spatial...)`` / ``(O, I, window...)`` layout::

    lhs' = pad(lhs, 0, [(lo, hi, lhs_dilation - 1) per spatial axis])      # dilate and pad
    out[n, o, y] = sum_{c, k} lhs'[n, g(o) * C/G + c, y * stride + k * rhs_dilation]
                              * rhs[o, c, k]                                # cross-correlation

with ``G = feature_group_count`` and ``g(o)`` the group of output feature ``o``; with batch
groups ``B``, output feature ``o`` reads the batch block ``b(o)`` of ``lhs``. The patches are
gathered with ``prod(window)`` strided slices (so the kernel's offsets each copy the input),
then contracted with the kernel in a single ``dot_general``.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from blu.core.interpreter import get_aval
from blu.lax.dot import dot_general
from blu.lax.shapes import concatenate, expand_dims, full, pad, reshape, transpose
from blu.lax.slicing import slice as _slice


def conv_im2col(
    lhs: Any,
    rhs: Any,
    *,
    window_strides,
    padding,
    lhs_dilation,
    rhs_dilation,
    dimension_numbers,
    feature_group_count,
    batch_group_count,
    precision,
    preferred_element_type,
) -> Any:
    """The primitive's decomposition (resolved params, as bound)."""
    la = get_aval(lhs)
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    s = la.ndim - 2
    x = transpose(lhs, lhs_spec)  # (N, C, spatial...)
    w = transpose(rhs, rhs_spec)  # (O, I, window...)
    n, c = get_aval(x).shape[:2]
    o, i, win = get_aval(w).shape[0], get_aval(w).shape[1], get_aval(w).shape[2:]
    cfg = [(0, 0, 0), (0, 0, 0)] + [(lo, hi, d - 1) for (lo, hi), d in zip(padding, lhs_dilation)]
    x = pad(x, full((), 0, la.dtype), cfg)
    padded = get_aval(x).shape[2:]
    eff = [(k - 1) * r + 1 if k else 0 for k, r in zip(win, rhs_dilation)]
    out_sp = [max((p - e) // st + 1, 0) for p, e, st in zip(padded, eff, window_strides)]
    slices = []
    for ks in itertools.product(*(range(k) for k in win)):
        start, limit = [0, 0], [n, c]
        for k, r, m, st in zip(ks, rhs_dilation, out_sp, window_strides):
            b = k * r if m else 0  # an empty output takes an empty slice at 0
            start.append(b)
            limit.append(b + (m - 1) * st + 1 if m else 0)
        slices.append(expand_dims(_slice(x, start, limit, [1, 1, *window_strides]), (2,)))
    kk = math.prod(win)
    if not slices:  # an empty window: every output is an empty sum
        patches = full((n, c, 0, *out_sp), 0, la.dtype)
    else:
        patches = concatenate(slices, 2) if len(slices) > 1 else slices[0]
    dot = (precision, preferred_element_type)
    if batch_group_count > 1:
        bg = batch_group_count
        patches = reshape(patches, (bg, n // bg, c, kk, *out_sp))
        w = reshape(w, (bg, o // bg, i, kk))
        # (B, N/B, out..., O/B): batch B, lhs free (N/B, out...), rhs free O/B
        y = dot_general(patches, w, (((2, 3), (2, 3)), ((0,), (0,))), *dot)
        y = transpose(y, (1, 0, s + 2, *range(2, s + 2)))  # (N/B, B, O/B, out...)
        y = reshape(y, (n // bg, o, *out_sp))
    else:
        g = feature_group_count
        patches = reshape(patches, (n, g, c // g, kk, *out_sp))
        w = reshape(w, (g, o // g, i, kk))
        # (G, N, out..., O/G): batch G, lhs free (N, out...), rhs free O/G
        y = dot_general(patches, w, (((2, 3), (2, 3)), ((1,), (0,))), *dot)
        y = transpose(y, (1, 0, s + 2, *range(2, s + 2)))  # (N, G, O/G, out...)
        y = reshape(y, (n, o, *out_sp))
    inv = [0] * (s + 2)
    for j, axis in enumerate(out_spec):
        inv[axis] = j
    return transpose(y, inv)
