"""``conv_general_dilated`` (XLA's ConvGeneralDilated, ``jax.lax``'s signature), written with
``pad``, strided ``slice`` and one ``dot_general``, so it differentiates (any order), batches
and jits through those primitives' rules; no new primitive.

The computation, in ``(N, C, spatial...)`` / ``(O, I, spatial...)`` layout::

    lhs' = pad(lhs, 0, [(lo, hi, lhs_dilation - 1) per spatial axis])      # dilate and pad
    out[n, o, y] = sum_{c, k} lhs'[n, g(o) * C/G + c, y * stride + k * rhs_dilation]
                              * rhs[o, c, k]                                # cross-correlation

with ``G = feature_group_count`` and ``g(o)`` the group of output feature ``o``. The patches
``lhs'[..., y * stride + k * rhs_dilation]`` are gathered with one strided slice per kernel
offset ``k`` (prod(kernel) slices), then contracted with the kernel in a single ``dot_general``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax.dot import dot_general
from blu.lax.shapes import concatenate, expand_dims, full, pad, reshape, transpose
from blu.lax.slicing import slice as _slice

__all__ = [
    "ConvDimensionNumbers",
    "conv",
    "conv_dimension_numbers",
    "conv_general_dilated",
    "conv_with_general_padding",
    "padtype_to_pads",
]


class ConvDimensionNumbers(NamedTuple):
    """Where each role sits in the operands: ``lhs_spec = (batch, feature, spatial...)``,
    ``rhs_spec = (out feature, in feature, spatial...)``, ``out_spec = (batch, feature,
    spatial...)``, each a tuple of axis indices (as ``jax.lax.ConvDimensionNumbers``)."""

    lhs_spec: tuple[int, ...]
    rhs_spec: tuple[int, ...]
    out_spec: tuple[int, ...]


def conv_dimension_numbers(
    lhs_shape: Sequence[int], rhs_shape: Sequence[int], dimension_numbers: Any
) -> ConvDimensionNumbers:
    """Normalize ``dimension_numbers`` to a ``ConvDimensionNumbers``.

    Args:
        lhs_shape, rhs_shape: the operands' shapes (same rank ``2 + s``).
        dimension_numbers: None (``NCHW``/``OIHW``/``NCHW`` order: axis indices in order), a
            ``ConvDimensionNumbers``, or three strings such as ``("NHWC", "HWIO", "NHWC")``
            (``N`` batch, ``C`` feature, ``O``/``I`` kernel out/in feature, other letters
            spatial; the spatial axes are ordered as in the kernel's string).

    Raises:
        BluValueError: ranks differ, or the strings do not name the same axes.
    """
    nd = len(lhs_shape)
    if len(rhs_shape) != nd or nd < 2:
        raise BluShapeError(
            with_user_line(
                f"conv: lhs {tuple(lhs_shape)} and rhs {tuple(rhs_shape)} need the same rank >= 2"
            )
        )
    if dimension_numbers is None:
        iota = tuple(range(nd))
        return ConvDimensionNumbers(iota, iota, iota)
    if isinstance(dimension_numbers, ConvDimensionNumbers):
        return dimension_numbers
    try:
        lhs_s, rhs_s, out_s = dimension_numbers
    except (TypeError, ValueError) as e:
        raise BluValueError(
            with_user_line(f"conv: bad dimension_numbers {dimension_numbers!r}")
        ) from e
    if not all(isinstance(s, str) for s in (lhs_s, rhs_s, out_s)):
        return ConvDimensionNumbers(*(tuple(int(i) for i in s) for s in (lhs_s, rhs_s, out_s)))
    pairs = (("N", "C"), ("O", "I"), ("N", "C"))
    for spec, pair in zip((lhs_s, rhs_s, out_s), pairs):
        if len(spec) != nd or not set(pair) <= set(spec) or len(set(spec)) != nd:
            raise BluValueError(
                with_user_line(
                    f"conv: dimension_numbers {dimension_numbers!r}: {spec!r} must have {nd} "
                    f"distinct letters including {pair[0]!r} and {pair[1]!r}"
                )
            )
    spatial = set(rhs_s) - {"O", "I"}
    if not set(lhs_s) - {"N", "C"} == spatial == set(out_s) - {"N", "C"}:
        raise BluValueError(
            with_user_line(
                f"conv: dimension_numbers {dimension_numbers!r} name different spatial axes"
            )
        )

    def perm(spec: str, pair: tuple[str, str]) -> tuple[int, ...]:
        sp = [i for i, c in enumerate(spec) if c not in pair]
        if spec is not rhs_s:
            sp.sort(key=lambda i: rhs_s.index(spec[i]))
        return (spec.index(pair[0]), spec.index(pair[1]), *sp)

    return ConvDimensionNumbers(perm(lhs_s, pairs[0]), perm(rhs_s, pairs[1]), perm(out_s, pairs[2]))


def padtype_to_pads(
    in_shape: Sequence[int],
    window_shape: Sequence[int],
    window_strides: Sequence[int],
    padding: str,
) -> list[tuple[int, int]]:
    """``"SAME"`` / ``"SAME_LOWER"`` / ``"VALID"`` as explicit ``(low, high)`` pads per axis.

    ``SAME`` pads so that ``out = ceil(in / stride)``, the odd element on the high side
    (``SAME_LOWER``: on the low side); ``VALID`` pads nothing.

    Raises:
        BluValueError: an unknown padding string.
    """
    p = padding.upper()
    if p == "VALID":
        return [(0, 0)] * len(in_shape)
    if p not in ("SAME", "SAME_LOWER"):
        raise BluValueError(
            with_user_line(
                f"conv: padding must be 'SAME', 'SAME_LOWER', 'VALID' or pairs, got {padding!r}"
            )
        )
    out = []
    for n, w, s in zip(in_shape, window_shape, window_strides):
        total = max((-(-n // s) - 1) * s + w - n, 0)
        lo, hi = total // 2, total - total // 2
        out.append((lo, hi) if p == "SAME" else (hi, lo))
    return out


def _ints(v: Any, n: int, name: str, minimum: int) -> tuple[int, ...]:
    v = (1,) * n if v is None else tuple(int(x) for x in v)
    if len(v) != n or any(x < minimum for x in v):
        raise BluValueError(with_user_line(f"conv: {name} must be {n} ints >= {minimum}, got {v}"))
    return v


def conv_general_dilated(
    lhs: Any,
    rhs: Any,
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: Any = None,
    feature_group_count: int = 1,
    batch_group_count: int = 1,
    precision: Any = None,
    preferred_element_type: Any = None,
) -> Any:
    """General n-d convolution (cross-correlation, as XLA and ``jax.lax``), with strides,
    padding, input ("transposed convolution") and kernel ("atrous") dilation and groups.

    Args:
        lhs: input, rank ``2 + s``: batch ``N``, features ``C`` and ``s`` spatial axes in the
            layout of ``dimension_numbers``.
        rhs: kernel, rank ``2 + s``: out features ``O``, in features ``C / G``, spatial window;
            the same dtype as ``lhs``.
        window_strides: ``s`` ints >= 1.
        padding: ``"SAME"``, ``"SAME_LOWER"``, ``"VALID"`` or ``s`` pairs ``(low, high)``
            (negative values crop), applied after ``lhs_dilation``.
        lhs_dilation: ``s`` ints >= 1: ``d - 1`` zeros between input elements (default 1).
        rhs_dilation: ``s`` ints >= 1: ``d - 1`` gaps between kernel taps (default 1).
        dimension_numbers: the layouts (see ``conv_dimension_numbers``), e.g.
            ``("NHWC", "HWIO", "NHWC")``; None is ``NCHW``/``OIHW``/``NCHW``.
        feature_group_count: ``G``: ``C`` and ``O`` split into ``G`` groups, group ``g`` of the
            output seeing group ``g`` of the input (``G = C`` is a depthwise convolution).
        batch_group_count: only 1 is supported.
        precision, preferred_element_type: as ``dot_general``'s (the output dtype).

    Returns:
        An array in ``out_spec`` layout with batch ``N``, ``O`` features and spatial sizes
        ``floor((dilated_in + lo + hi - dilated_window) / stride) + 1`` (0 if negative).

    Raises:
        BluTypeError: lhs and rhs dtypes differ (as ``dot_general``).
        BluShapeError: ranks or feature sizes that do not match ``G``.
        BluValueError: bad strides/dilations/padding/dimension numbers, or
            ``batch_group_count != 1``.
    """
    la, ra = get_aval(lhs), get_aval(rhs)
    dn = conv_dimension_numbers(la.shape, ra.shape, dimension_numbers)
    s = la.ndim - 2
    strides = _ints(window_strides, s, "window_strides", 1)
    ld = _ints(lhs_dilation, s, "lhs_dilation", 1)
    rd = _ints(rhs_dilation, s, "rhs_dilation", 1)
    if int(batch_group_count) != 1:
        raise BluValueError(
            with_user_line(f"conv: batch_group_count={batch_group_count} is not supported (only 1)")
        )
    if la.dtype != ra.dtype:
        raise BluTypeError(
            with_user_line(
                f"conv: lhs {la.str_short()} and rhs {ra.str_short()} must have the same dtype"
            )
        )
    x = transpose(lhs, dn.lhs_spec)  # (N, C, spatial...)
    w = transpose(rhs, dn.rhs_spec)  # (O, I, window...)
    n, c, in_sp = get_aval(x).shape[0], get_aval(x).shape[1], get_aval(x).shape[2:]
    o, i, win = get_aval(w).shape[0], get_aval(w).shape[1], get_aval(w).shape[2:]
    g = int(feature_group_count)
    if g < 1 or c % g or o % g or c // g != i:
        raise BluShapeError(
            with_user_line(
                f"conv: lhs has {c} features and rhs {o} out / {i} in features; with "
                f"feature_group_count={g} they must satisfy C = G * I and G | O"
            )
        )
    eff_win = [(k - 1) * r + 1 if k else 0 for k, r in zip(win, rd)]
    if isinstance(padding, str):
        pads = padtype_to_pads(in_sp, eff_win, strides, padding)
    else:
        pads = [tuple(int(p) for p in pr) for pr in padding]
        if len(pads) != s or any(len(pr) != 2 for pr in pads):
            raise BluValueError(
                with_user_line(f"conv: padding must be {s} (low, high) pairs, got {padding!r}")
            )
    cfg = [(0, 0, 0), (0, 0, 0)] + [(lo, hi, d - 1) for (lo, hi), d in zip(pads, ld)]
    x = pad(x, _zero(la.dtype), cfg)
    padded = get_aval(x).shape[2:]
    out_sp = [max((p - e) // st + 1, 0) for p, e, st in zip(padded, eff_win, strides)]
    # one strided slice per kernel offset: patches (N, C, K, out...), K = prod(window)
    slices = []
    for ks in itertools.product(*(range(k) for k in win)):
        start, limit = [0, 0], [n, c]
        for k, r, m, st in zip(ks, rd, out_sp, strides):
            b = k * r if m else 0  # an empty output takes an empty slice at 0
            start.append(b)
            limit.append(b + (m - 1) * st + 1 if m else 0)
        slices.append(expand_dims(_slice(x, start, limit, [1, 1, *strides]), (2,)))
    kk = math.prod(win)
    if not slices:  # an empty window: every output is an empty sum
        patches = full((n, c, 0, *out_sp), 0, la.dtype)
    else:
        patches = concatenate(slices, 2) if len(slices) > 1 else slices[0]
    patches = reshape(patches, (n, g, c // g, kk, *out_sp))
    w = reshape(w, (g, o // g, i, kk))
    # (G, N, out..., O/G): batch G, lhs free (N, out...), rhs free O/G
    y = dot_general(patches, w, (((2, 3), (2, 3)), ((1,), (0,))), precision, preferred_element_type)
    y = transpose(y, (1, 0, s + 2, *range(2, s + 2)))  # (N, G, O/G, out...)
    y = reshape(y, (n, o, *out_sp))
    inv = [0] * (s + 2)
    for j, axis in enumerate(dn.out_spec):
        inv[axis] = j
    return transpose(y, inv)


def _zero(dtype: Any) -> Any:
    return full((), 0, dtype)


def conv_with_general_padding(
    lhs: Any,
    rhs: Any,
    window_strides: Sequence[int],
    padding: Any,
    lhs_dilation: Sequence[int] | None,
    rhs_dilation: Sequence[int] | None,
    precision: Any = None,
    preferred_element_type: Any = None,
) -> Any:
    """``conv_general_dilated`` in ``NCHW``/``OIHW`` layout (``jax.lax``'s name)."""
    return conv_general_dilated(
        lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
        precision=precision, preferred_element_type=preferred_element_type,
    )  # fmt: skip


def conv(
    lhs: Any,
    rhs: Any,
    window_strides: Sequence[int],
    padding: Any,
    precision: Any = None,
    preferred_element_type: Any = None,
) -> Any:
    """``conv_general_dilated`` in ``NCHW``/``OIHW`` layout without dilation (``jax.lax.conv``)."""
    return conv_general_dilated(
        lhs, rhs, window_strides, padding,
        precision=precision, preferred_element_type=preferred_element_type,
    )  # fmt: skip
