"""Patches and unshared ("locally connected") convolutions, composed of existing primitives as
``jax.lax``'s (``jax/_src/lax/other.py``): ``conv_general_dilated_patches`` is one
``conv_general_dilated`` with a one-hot kernel of ``feature_group_count = C``, and
``conv_general_dilated_local`` those patches contracted with per-location weights by one
``dot_general``. No primitive of their own: grad, vmap and jit are the convolution's and the
product's."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core.errors import BluShapeError, BluTypeError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax.conv_args import int_tuple
from blu.lax.conv_shapes import ConvGeneralDilatedDimensionNumbers, check_cropping, check_padding
from blu.lax.convolution import conv_dimension_numbers, conv_general_dilated
from blu.lax.dot import _canonical_precision, dot_general
from blu.lax.shapes import transpose

__all__ = ["conv_general_dilated_local", "conv_general_dilated_patches"]


def _window_args(la, filter_shape, window_strides, padding, lhs_dilation, rhs_dilation,
                 dimension_numbers, where):  # fmt: skip
    """The checked arguments: ``(filter_shape, dn, strides, pads, ld, rd)``."""
    try:
        fs = tuple(int(k) for k in filter_shape)
    except (TypeError, ValueError):
        raise BluTypeError(
            with_user_line(
                f"{where}: filter_shape must be a sequence of ints, got {filter_shape!r}"
            )
        ) from None
    s = la.ndim - 2
    if la.ndim < 2 or len(fs) != s:
        raise BluShapeError(
            with_user_line(
                f"{where}: filter_shape {fs} needs one size per spatial axis of lhs "
                f"{la.str_short()} ({max(s, 0)} after its batch and feature axes)"
            )
        )
    fs = int_tuple(fs, s, "filter_shape", 1, where)
    dn = conv_dimension_numbers(la.shape, (1, 1, *fs), dimension_numbers)
    strides = int_tuple(window_strides, s, "window_strides", 1, where)
    ld = int_tuple(lhs_dilation, s, "lhs_dilation", 1, where)
    rd = int_tuple(rhs_dilation, s, "rhs_dilation", 1, where)
    pads = check_padding(padding, s, f"{where}: lhs {la.str_short()}")
    if not isinstance(pads, str):  # a string never crops; conv_general_dilated resolves it
        in_sp = [la.shape[a] for a in dn.lhs_spec[2:]]
        check_cropping(in_sp, ld, pads, f"{where}: lhs {la.str_short()}")
    return fs, dn, strides, pads, ld, rd


def _kernel(dtype: np.dtype, c: int, fs: tuple[int, ...], rhs_spec: Sequence[int]) -> np.ndarray:
    """The one-hot kernel: out feature ``c * S + p`` (``S = prod(fs)``) reads input feature
    ``c`` (by ``feature_group_count = C``) at window offset ``p``, row-major over ``fs``; laid
    out with ``O``, ``I`` at ``rhs_spec[:2]`` and ``fs`` on the other axes in increasing order
    (JAX's ``moveaxis`` of the ``(C * S, 1, *fs)`` kernel)."""
    size = math.prod(fs)
    eye = np.broadcast_to(np.eye(size, dtype=dtype), (c, size, size))
    k = eye.reshape((c * size, 1, *fs))
    return np.ascontiguousarray(np.moveaxis(k, (0, 1), (rhs_spec[0], rhs_spec[1])))


def conv_general_dilated_patches(
    lhs: Any,
    filter_shape: Sequence[int],
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: ConvGeneralDilatedDimensionNumbers = None,
    precision: Any = None,
    preferred_element_type: Any = None,
) -> Any:
    """The patches a convolution's windows see, flattened into the feature axis
    (``jax.lax.conv_general_dilated_patches``).

    ``out[n, c * S + p, y] = lhs'[n, c, y * stride + offset(p) * rhs_dilation]`` with ``lhs'``
    the dilated and padded input, ``S = prod(filter_shape)`` and ``offset(p)`` the ``p``-th
    window offset, row-major over ``filter_shape``: the feature axis is ``"c" + the kernel's
    spatial letters``, channel-major, as JAX's. Computed as JAX's: one ``conv_general_dilated``
    with a one-hot kernel and ``feature_group_count = C``, so an infinity or NaN in a window
    makes NaN of that channel's other entries at that output position (``inf * 0``), as JAX's.

    Args:
        lhs: input of rank ``2 + s`` (batch ``N``, features ``C``, ``s`` spatial axes in the
            layout of ``dimension_numbers``); any dtype the convolution takes.
        filter_shape: ``s`` ints >= 1, the window, in the order of the kernel string's spatial
            letters (the order of ``rhs_spec[2:]``).
        window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers: as
            ``conv_general_dilated``'s (the kernel string fixes only the spatial order).
        precision: as ``conv_general_dilated``'s, for the input (a pair's first entry; the
            one-hot kernel is exact).
        preferred_element_type: the output dtype, as ``conv_general_dilated``'s.

    Returns:
        An array in ``out_spec`` layout: batch ``N``, ``C * prod(filter_shape)`` features and
        ``conv_general_dilated``'s spatial sizes; ``lhs``'s dtype unless
        ``preferred_element_type``.

    Raises:
        BluShapeError: ``filter_shape`` has not one size per spatial axis of ``lhs``, or
            ``lhs`` has no features (``C = 0``).
        BluValueError: bad strides, dilations, padding (an unknown string, not ``s`` pairs, a
            pad cropping an axis below 0) or dimension numbers.
        BluTypeError: ``filter_shape`` or the window arguments are not ints.
    """
    where = "conv_general_dilated_patches"
    la = get_aval(lhs)
    fs, dn, strides, pads, ld, rd = _window_args(
        la, filter_shape, window_strides, padding, lhs_dilation, rhs_dilation,
        dimension_numbers, where,
    )  # fmt: skip
    prec = _canonical_precision(precision)
    prec = prec[0] if isinstance(prec, tuple) else prec  # the input's; the kernel is exact
    c = la.shape[dn.lhs_spec[1]]
    if c == 0:  # feature_group_count = C must be >= 1 (as JAX's)
        raise BluShapeError(with_user_line(f"{where}: lhs {la.str_short()} has no features"))
    rhs = _kernel(la.dtype, c, fs, dn.rhs_spec)
    return conv_general_dilated(
        lhs, rhs, strides, pads, ld, rd, dn, feature_group_count=c,
        precision=None if prec is None else (prec, "default"),
        preferred_element_type=preferred_element_type,
    )  # fmt: skip


def conv_general_dilated_local(
    lhs: Any,
    rhs: Any,
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    filter_shape: Sequence[int],
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: ConvGeneralDilatedDimensionNumbers = None,
    precision: Any = None,
) -> Any:
    """An unshared convolution ("locally connected" layer): a separate kernel at each output
    position (``jax.lax.conv_general_dilated_local``).

    ``out[n, o, y] = sum_i patches[n, i, y] * rhs[o, i, y]`` with ``patches`` those of
    ``conv_general_dilated_patches`` (``i`` runs over ``C * prod(filter_shape)``, channel-major,
    then the window row-major), computed as JAX's: the patches, then one ``dot_general``
    batched over the output positions.

    Args:
        lhs: input of rank ``2 + s`` in the layout of ``dimension_numbers``.
        rhs: weights of rank ``2 + s`` in the layout of ``rhs_spec``, as JAX's: ``O`` out
            features, ``I = C * prod(filter_shape)`` (the patches' feature order) and, on the
            spatial axes, the output's spatial sizes (one kernel per output position); the dtype
            of ``lhs``.
        window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers: as
            ``conv_general_dilated_patches``'s (``rhs_dilation`` dilates the window).
        filter_shape: ``s`` ints >= 1, the window, in the order of ``rhs_spec[2:]``.
        precision: as ``dot_general``'s; the one precision, or a pair's first entry, also sets
            the patches'.

    Returns:
        An array in ``out_spec`` layout: batch ``N``, ``O`` features, the patches' spatial
        sizes; ``lhs``'s dtype.

    Raises:
        BluShapeError: ``rhs``'s rank differs from ``lhs``'s, or its ``I`` or spatial sizes are
            not ``C * prod(filter_shape)`` and the output's (naming both shapes); the errors of
            ``conv_general_dilated_patches``.
        BluTypeError: ``rhs``'s dtype differs from ``lhs``'s.
    """
    where = "conv_general_dilated_local"
    la, ra = get_aval(lhs), get_aval(rhs)
    if ra.ndim != la.ndim:
        raise BluShapeError(
            with_user_line(
                f"{where}: rhs {ra.str_short()} must have the rank of lhs {la.str_short()}"
            )
        )
    if ra.dtype != la.dtype:
        raise BluTypeError(
            with_user_line(
                f"{where}: lhs {la.str_short()} and rhs {ra.str_short()} must have the same dtype"
            )
        )
    prec = _canonical_precision(precision)
    patches = conv_general_dilated_patches(
        lhs, filter_shape, window_strides, padding, lhs_dilation, rhs_dilation,
        dimension_numbers, precision=prec[0] if isinstance(prec, tuple) else prec,
    )  # fmt: skip
    fs = tuple(int(k) for k in filter_shape)
    lhs_spec, rhs_spec, out_spec = conv_dimension_numbers(la.shape, (1, 1, *fs), dimension_numbers)
    pa = get_aval(patches)
    want = [0] * la.ndim
    want[rhs_spec[1]] = pa.shape[out_spec[1]]
    for o_ax, r_ax in zip(out_spec[2:], rhs_spec[2:]):
        want[r_ax] = pa.shape[o_ax]
    want[rhs_spec[0]] = ra.shape[rhs_spec[0]]
    if tuple(want) != ra.shape:
        raise BluShapeError(
            with_user_line(
                f"{where}: rhs {ra.str_short()} must have shape {tuple(want)} (I = C * "
                f"prod(filter_shape) = {pa.shape[out_spec[1]]} and the output's spatial sizes "
                f"{tuple(pa.shape[a] for a in out_spec[2:])} in the layout of rhs_spec "
                f"{tuple(rhs_spec)}) for lhs {la.str_short()} and filter_shape {fs}"
            )
        )
    # batch over the output positions (in increasing patches axis order), contract I
    order = sorted(range(len(out_spec) - 2), key=lambda j: out_spec[2 + j])
    lhs_b = [out_spec[2 + j] for j in order]
    rhs_b = [rhs_spec[2 + j] for j in order]
    out = dot_general(
        patches, rhs, (([out_spec[1]], [rhs_spec[1]]), (lhs_b, rhs_b)), precision=precision
    )
    # dot_general's (spatial..., N, O) to the out_spec layout
    nd = la.ndim
    perm = [0] * nd
    spatial = iter(range(nd - 2))
    for pos in range(nd):
        if pos == out_spec[0]:
            perm[pos] = nd - 2
        elif pos == out_spec[1]:
            perm[pos] = nd - 1
        else:
            perm[pos] = next(spatial)
    return transpose(out, perm)
