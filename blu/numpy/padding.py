"""``pad`` (numpy's ``pad``, as ``jax.numpy.pad``): a ``lax.pad`` for constants, slices and
concatenations for the other modes, so it stages, differentiates and batches."""

from __future__ import annotations

from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import (
    asarray_operand,
    asarray_operand_in,
    broadcast_to,
    concrete_value,
    is_concrete,
)
from blu.numpy.extras import apply_along_axis
from blu.numpy.manipulation import _aval, _slice_axis, concatenate
from blu.numpy.reductions import max as _max
from blu.numpy.reductions import mean, median
from blu.numpy.reductions import min as _min
from blu.numpy.ufuncs import add, floor, multiply, subtract, true_divide
from blu.numpy.ufuncs import round as round_

__all__ = ["pad"]


def _pad_widths(pad_width: Any, nd: int) -> list[tuple[int, int]]:
    if isinstance(pad_width, dict):
        raise BluTypeError(
            with_user_line(
                "pad: pad_width must be ints, not a dict (as JAX's; numpy 2.3 takes one)"
            )
        )
    pw = concrete_value(pad_width, "pad (pad_width)")
    if pw.size and pw.dtype.kind not in "iu":
        raise BluTypeError(
            with_user_line(f"pad: pad_width must be of integral type, got {pad_width!r}")
        )
    pw = pw.astype(np.int64)
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


_MODES = ("constant", "edge", "wrap", "reflect", "symmetric", "maximum", "minimum", "mean",
          "median", "linear_ramp", "empty")  # fmt: skip
# the keyword arguments each mode takes (numpy's and JAX's table)
_MODE_KWARGS = {
    "constant": ("constant_values",),
    "linear_ramp": ("end_values",),
    "reflect": ("reflect_type",),
    "symmetric": ("reflect_type",),
    **{m: ("stat_length",) for m in ("maximum", "minimum", "mean", "median")},
}


class _Unset:
    """A keyword argument's default, to tell it from a value the caller passed."""

    def __repr__(self) -> str:
        return "<default>"


_UNSET: Any = _Unset()


def pad(
    array: Any,
    pad_width: Any,
    mode: str = "constant",
    constant_values: Any = _UNSET,
    *,
    stat_length: Any = _UNSET,
    end_values: Any = _UNSET,
    reflect_type: Any = _UNSET,
    **kwargs: Any,
) -> Any:
    """``array`` padded along each axis as ``numpy.pad`` (and ``jax.numpy.pad``) does, one axis
    after the other (so later axes pad the corners too).

    Modes: 'constant' (``constant_values``), 'edge' (the edge values), 'wrap' (wrapping
    around), 'reflect' / 'symmetric' (mirrored without / with the edge value; with
    ``reflect_type='odd'`` the mirror image is subtracted from twice the edge),
    'maximum' / 'minimum' / 'mean' / 'median' (a statistic of the ``stat_length`` elements
    nearest each side, all of them by default; integer means and medians round half to even),
    'linear_ramp' (a ramp from ``end_values`` to the edge value, rounded down for integers),
    'empty' (zeros, as JAX: numpy leaves them undefined). A callable ``mode`` is numpy's and
    JAX's padding function ``mode(vector, (before, after), axis, kwargs)``: ``array`` is padded
    with zeros, then each 1-d slice along each axis in turn is replaced by what the function
    returns for it (it must return the padded vector: blu arrays are immutable, as JAX's);
    ``kwargs`` are the extra keyword arguments of ``pad``.

    Args:
        pad_width: an int, ``(before, after)``, or one ``(before, after)`` per axis;
            ``constant_values`` (default 0), ``stat_length`` (default: the whole axis) and
            ``end_values`` (default 0) take the same forms. ``reflect_type`` defaults to
            'even'. Each is taken only by the modes above that use it (as numpy's and JAX's).

    Raises:
        BluValueError: an unknown mode or ``reflect_type``, a keyword argument the mode does not
            take, a bad pad_width, a stat_length of 0, or padding an empty axis with a mode that
            reads its values.
    """
    array = asarray_operand(array)
    aval = _aval(array)
    widths = _pad_widths(pad_width, aval.ndim)
    if callable(mode):
        return _pad_with_function(array, widths, mode, kwargs)
    if kwargs:
        raise BluValueError(
            with_user_line(f"pad: mode {mode!r} does not take {', '.join(sorted(kwargs))}")
        )
    if mode not in _MODES:
        raise BluValueError(
            with_user_line(f"pad: unknown mode {mode!r} (one of {', '.join(_MODES)})")
        )
    given = {"constant_values": constant_values, "stat_length": stat_length,
             "end_values": end_values, "reflect_type": reflect_type}  # fmt: skip
    unsupported = sorted(k for k, v in given.items() if v is not _UNSET
                         and k not in _MODE_KWARGS.get(mode, ()))  # fmt: skip
    if unsupported:
        raise BluValueError(
            with_user_line(f"pad: mode {mode!r} does not take {', '.join(unsupported)}")
        )
    constant_values = 0 if constant_values is _UNSET else constant_values
    stat_length = None if stat_length is _UNSET else stat_length
    end_values = 0 if end_values is _UNSET else end_values
    reflect_type = "even" if reflect_type is _UNSET else reflect_type
    if mode == "empty":
        return lax.pad(array, np.zeros((), aval.dtype)[()], [(lo, hi, 0) for lo, hi in widths])
    if mode in ("reflect", "symmetric", "maximum", "minimum", "mean", "median", "linear_ramp"):
        return _pad_other(array, widths, mode, stat_length, end_values, reflect_type)
    if mode == "constant":
        cv = (
            concrete_value(constant_values, "pad (constant_values)")
            if is_concrete(constant_values)
            else None
        )
        if cv is not None and cv.ndim == 0:
            value = asarray_operand_in(constant_values, aval.dtype)
            value = lax.convert_element_type(value, aval.dtype)
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
    raise AssertionError(mode)  # every mode is handled above


def _pad_with_function(array: Any, widths: list, func: Any, kwargs: dict) -> Any:
    """A callable mode: zeros padded, then ``func(vector, (before, after), axis, kwargs)`` maps
    each 1-d slice along each axis in turn (numpy's order; the result replaces the slice)."""
    out = lax.pad(array, np.zeros((), _aval(array).dtype)[()], [(lo, hi, 0) for lo, hi in widths])
    for ax, width in enumerate(widths):
        n = _aval(out).shape[ax]

        def one(vector: Any, width: tuple = width, ax: int = ax, n: int = n) -> Any:
            r = func(vector, width, ax, kwargs)
            if r is None or np.shape(r) != (n,):
                raise BluValueError(
                    with_user_line(
                        f"pad: the padding function must return the padded vector of shape "
                        f"({n},) (blu arrays are immutable, as JAX's), got "
                        f"{'None' if r is None else np.shape(r)}"
                    )
                )
            return lax.convert_element_type(asarray_operand(r), _aval(out).dtype)

        out = apply_along_axis(one, ax, out)
    return out


def _per_axis(value: Any, nd: int, name: str) -> np.ndarray:
    """A concrete ``value`` broadcast to ``(nd, 2)``: (before, after) for each axis."""
    v = concrete_value(value, f"pad ({name})")
    try:
        return np.broadcast_to(v, (nd, 2))
    except ValueError as e:
        raise BluValueError(
            with_user_line(f"pad: {name} {value!r} does not fit (before, after) for {nd} axes")
        ) from e


def _pad_other(x: Any, widths: list, mode: str, stat_length: Any, end_values: Any,
               reflect_type: str) -> Any:  # fmt: skip
    """The reflecting, statistic and ramp modes, one axis after the other (numpy's order)."""
    nd = _aval(x).ndim
    if mode in ("reflect", "symmetric") and reflect_type not in ("even", "odd"):
        raise BluValueError(
            with_user_line(f"pad: reflect_type must be 'even' or 'odd', got {reflect_type!r}")
        )
    stat = None if stat_length is None else _per_axis(stat_length, nd, "stat_length")
    if stat is not None and (stat <= 0).any():
        raise BluValueError(with_user_line(f"pad: stat_length {stat_length!r} must be > 0"))
    ends = _per_axis(end_values, nd, "end_values") if mode == "linear_ramp" else None
    for ax, (lo, hi) in enumerate(widths):
        if lo == hi == 0:
            continue
        n = _aval(x).shape[ax]
        if n == 0:
            raise BluValueError(with_user_line(f"pad: mode {mode!r} on an empty axis {ax}"))
        if mode in ("reflect", "symmetric"):
            x = _mirror(x, lo, hi, ax, mode, reflect_type)
        elif mode == "linear_ramp":
            x = concatenate([_ramp(x, lo, ax, ends[ax, 0], True), x,
                             _ramp(x, hi, ax, ends[ax, 1], False)], ax)  # fmt: skip
        else:
            kb, ka = (
                (n, n) if stat is None else (min(int(stat[ax, 0]), n), min(int(stat[ax, 1]), n))
            )
            before = _stat(_slice_axis(x, 0, kb, ax), ax, mode)
            after = _stat(_slice_axis(x, n - ka, n, ax), ax, mode)
            x = concatenate([_stretch(before, lo, ax), x, _stretch(after, hi, ax)], ax)
    return x


def _stat(part: Any, ax: int, mode: str) -> Any:
    """The statistic of ``part`` along ``ax`` (kept as size 1), in ``part``'s dtype."""
    dtype = _aval(part).dtype
    if mode == "maximum":
        return _max(part, axis=ax, keepdims=True)
    if mode == "minimum":
        return _min(part, axis=ax, keepdims=True)
    v = (mean if mode == "mean" else median)(part, axis=ax, keepdims=True)
    if dtypes.is_int(dtype):  # (not bool: numpy converts its mean 0.5 to True, unrounded)
        v = round_(v)  # numpy's and JAX's: round half to even, then the integer dtype
    return lax.convert_element_type(v, dtype)


def _mirror(x: Any, lo: int, hi: int, ax: int, mode: str, reflect_type: str) -> Any:
    """'reflect' / 'symmetric' along ``ax``: numpy's (and JAX's) repeated mirroring in chunks
    no longer than the axis (one less for 'reflect', which leaves out the edge value)."""
    n = _aval(x).shape[ax]
    off = 1 if mode == "reflect" else 0
    if n == 1 and off:  # nothing to mirror but the edge itself
        off = 0
    for before, width in ((True, lo), (False, hi)):
        while width > 0:
            m = _aval(x).shape[ax]
            k = min(width, n - off)
            chunk = (
                _slice_axis(x, off, off + k, ax)
                if before
                else _slice_axis(x, m - off - k, m - off, ax)
            )
            chunk = lax.rev(chunk, (ax,))
            if reflect_type == "odd":
                edge = _slice_axis(x, 0, 1, ax) if before else _slice_axis(x, m - 1, m, ax)
                # (in x's dtype, as numpy's assignment: a bool is any nonzero value)
                chunk = lax.convert_element_type(subtract(multiply(edge, 2), chunk), _aval(x).dtype)
            x = concatenate([chunk, x] if before else [x, chunk], ax)
            width -= k
    return x


def _ramp(x: Any, width: int, ax: int, end: Any, before: bool) -> Any:
    """``width`` values from ``end`` towards the edge value along ``ax`` (the edge itself
    excluded), as numpy's ``linspace(end, edge, width, endpoint=False)``: ``end + i * step``
    (in float64 for integers and bools, then rounded down for integers)."""
    m = _aval(x).shape[ax]
    dtype = _aval(x).dtype
    edge = _slice_axis(x, 0, 1, ax) if before else _slice_axis(x, m - 1, m, ax)
    # (float16 / bfloat16 in float32, rounded once: their own steps drifted by ulps)
    ft = dtype if dtypes.is_inexact(dtype) else dtypes.float64
    ft = dtypes.float32 if np.dtype(ft).itemsize == 2 else ft
    edge = lax.convert_element_type(edge, ft)
    end = lax.convert_element_type(asarray_operand(end), ft)
    shape = list(_aval(edge).shape)
    shape[ax] = width
    i = lax.convert_element_type(lax.iota(dtypes.int32, tuple(shape), ax), ft)
    ramp = add(multiply(i, true_divide(subtract(edge, end), width)), end)
    if dtypes.is_int(dtype):  # (numpy's linspace floors integers; a bool is any nonzero)
        ramp = floor(ramp)
    ramp = lax.convert_element_type(ramp, dtype)
    return ramp if before else lax.rev(ramp, (ax,))
