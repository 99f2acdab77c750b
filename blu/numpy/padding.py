"""``pad`` (numpy's ``pad``, as ``jax.numpy.pad``): a ``lax.pad`` for constants, slices and
concatenations for the other modes, so it stages, differentiates and batches."""

from __future__ import annotations

from typing import Any

import numpy as np

from blu import lax
from blu.core.errors import BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import asarray_operand, broadcast_to, concrete_value, is_concrete
from blu.numpy.manipulation import _aval, _slice_axis, concatenate

__all__ = ["pad"]


def _pad_widths(pad_width: Any, nd: int) -> list[tuple[int, int]]:
    pw = concrete_value(pad_width, "pad (pad_width)").astype(np.int64)
    if pw.size == 0 and nd == 0:
        return []
    try:
        pw = np.broadcast_to(pw, (nd, 2))
    except ValueError as e:
        raise BluValueError(
            with_user_line(f"pad: pad_width {pad_width!r} does not fit rank {nd}")
        ) from e
    if (pw < 0).any():
        raise BluValueError(with_user_line(f"pad: negative pad_width {pad_width!r}"))
    return [(int(lo), int(hi)) for lo, hi in pw]


def _stretch(x: Any, k: int, axis: int) -> Any:
    """``x`` (size 1 along ``axis``) broadcast to size ``k`` there."""
    shape = list(_aval(x).shape)
    shape[axis] = k
    return broadcast_to(x, tuple(shape))


def pad(array: Any, pad_width: Any, mode: str = "constant", constant_values: Any = 0) -> Any:
    """Pad with ``constant_values`` (mode 'constant'), or with the edge values ('edge'), or by
    wrapping around ('wrap').

    Args:
        pad_width: an int, ``(before, after)``, or one ``(before, after)`` per axis.

    Raises:
        BluValueError: an unsupported mode or a bad pad_width.
    """
    array = asarray_operand(array)
    aval = _aval(array)
    widths = _pad_widths(pad_width, aval.ndim)
    if mode == "constant":
        cv = (
            concrete_value(constant_values, "pad (constant_values)")
            if is_concrete(constant_values)
            else None
        )
        if cv is not None and cv.ndim == 0:
            value = lax.convert_element_type(asarray_operand(constant_values), aval.dtype)
            return lax.pad(array, value, [(lo, hi, 0) for lo, hi in widths])
        if cv is None and get_aval(constant_values).ndim == 0:
            value = lax.convert_element_type(constant_values, aval.dtype)
            return lax.pad(array, value, [(lo, hi, 0) for lo, hi in widths])
        # per-axis (before, after) constants: pad one axis at a time
        cshape = get_aval(constant_values).shape if cv is None else cv.shape
        try:
            np.broadcast_shapes(cshape, (aval.ndim, 2))
        except ValueError as e:
            raise BluValueError(
                with_user_line(
                    f"pad: constant_values of shape {cshape} does not fit (before, after) for "
                    f"each of the {aval.ndim} axes"
                )
            ) from e
        if cv is None:  # traced: each constant is a scalar slice of them
            vals = broadcast_to(constant_values, (aval.ndim, 2))
            pick = lambda ax, k: lax.convert_element_type(  # noqa: E731
                lax.reshape(lax.slice(vals, (ax, k), (ax + 1, k + 1)), ()), aval.dtype
            )
        else:
            vals = np.broadcast_to(cv, (aval.ndim, 2))
            pick = lambda ax, k: np.asarray(vals[ax, k], aval.dtype)[()]  # noqa: E731
        out = array
        for ax, (lo, hi) in enumerate(widths):
            cfg = [(0, 0, 0)] * aval.ndim
            cfg[ax] = (lo, 0, 0)
            out = lax.pad(out, pick(ax, 0), cfg)
            cfg[ax] = (0, hi, 0)
            out = lax.pad(out, pick(ax, 1), cfg)
        return out
    if mode in ("edge", "wrap"):
        out = array
        for ax, (lo, hi) in enumerate(widths):
            n = _aval(out).shape[ax]
            if lo == hi == 0:
                continue
            if n == 0:
                raise BluValueError(with_user_line(f"pad: mode {mode!r} on an empty axis"))
            if mode == "edge":
                first = _slice_axis(out, 0, 1, ax)
                last = _slice_axis(out, n - 1, n, ax)
                parts = [_stretch(first, lo, ax), out, _stretch(last, hi, ax)]
            else:
                reps = -(-(lo + hi) // n) + 2
                tiled = concatenate([out] * reps, ax)
                start = (n - lo % n) % n
                parts = [_slice_axis(tiled, start, start + lo + n + hi, ax)]
            out = concatenate(parts, ax)
        return out
    raise BluValueError(
        with_user_line(f"pad: mode {mode!r} is not supported (use 'constant', 'edge' or 'wrap')")
    )
