"""Windowed reductions: ``reduce_window`` for the add, max and min monoids, as the primitives
``reduce_window_sum``, ``reduce_window_max`` and ``reduce_window_min`` (JAX's names).

Each output element reduces one window of the operand after it is dilated by
``base_dilation`` and padded by ``padding`` (holes and pads hold the monoid's identity)::

    out[y] = reduce_{k in window} x'[y * window_strides + k * window_dilation]

Rules (after ``jax/_src/lax/windowed_reductions.py``): the sum is linear; its transpose pads
the cotangent (``window_strides - 1`` holes, the convolution's lhs-transpose padding) and sums
its windows again with ``base_dilation`` as strides. The max and min have the JVP of
select-and-gather: each output takes the tangent at its window's first extremum (row-major
order, as XLA's select-and-scatter with ``>=``), written with ``pad``, strided ``slice`` and
``select``, whose transposes make the reverse mode (the cotangent scattered to that element).
vmap adds a window axis of size 1. The impls are numpy (one padded copy, one strided view per
window offset); compiled programs inline the decomposition (the same, as ``pad``, strided
``slice`` and ``add``/``max``/``min``, which the kernel compiler fuses) on every target.

``reduce_window`` sends any other computation, init value or pytree of operands to
``custom_window.py`` (composed of existing primitives); ``reduce_window_shape_tuple`` is the
output shape's arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from blu.core import dtypes, pytree
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax import elementwise as ew
from blu.lax.conv_args import int_tuple, pad_pairs
from blu.lax.conv_numpy import dilate_dim, dilate_pad
from blu.lax.convolution import padtype_to_pads, vjp_lhs_padding
from blu.lax.custom_reduce import binary_primitive
from blu.lax.custom_window import general_reduce_window
from blu.lax.elementwise import convert_element_type
from blu.lax.shapes import full, pad
from blu.lax.window_select import (
    offsets_dtype,
    out_spatial,
    window_gather,
    window_slices,
    window_views,
)
from blu.transforms.ad_util import Zero, deflinear, tangent_aval
from blu.transforms.batching import moveaxis
from blu.transforms.remat import checkpoint_name

__all__ = ["reduce_window", "reduce_window_shape_tuple"]

_UFUNCS = {"sum": np.add, "max": np.maximum, "min": np.minimum}


def identity(monoid: str, dtype: Any) -> Any:
    """The monoid's identity in ``dtype`` (0; the lowest value; the highest value)."""
    dt = np.dtype(dtype)
    if monoid == "sum":
        return dt.type(0)
    if dt == np.bool_:
        return np.bool_(monoid == "min")
    if dtypes.is_inexact(dt):
        return dt.type(-np.inf if monoid == "max" else np.inf)
    info = np.iinfo(dt)
    return dt.type(info.min if monoid == "max" else info.max)


def _impl(monoid: str) -> Callable[..., np.ndarray]:
    def impl(x, *, window_dimensions, window_strides, padding, base_dilation, window_dilation):
        half = x.dtype in (dtypes.float16, dtypes.bfloat16) and monoid == "sum"
        acc_dt = np.float32 if half else x.dtype  # sum half floats in float32, round once
        ident = identity(monoid, x.dtype)
        xp = dilate_pad(x, padding, base_dilation, ident, acc_dt)
        out_sp = out_spatial(
            x.shape, window_dimensions, window_strides, padding, base_dilation, window_dilation
        )
        acc = np.full(out_sp, ident, acc_dt)
        ufunc = _UFUNCS[monoid]
        if acc.size:
            for view in window_views(
                xp, out_sp, window_dimensions, window_strides, window_dilation
            ):
                ufunc(acc, view, out=acc)
        return acc.astype(x.dtype, copy=False)

    return impl


def _abstract_eval(name: str) -> Callable[..., ShapedArray]:
    def rule(
        x: ShapedArray,
        *,
        window_dimensions,
        window_strides,
        padding,
        base_dilation,
        window_dilation,
    ) -> ShapedArray:
        params = (window_dimensions, window_strides, padding, base_dilation, window_dilation)
        if any(len(p) != x.ndim for p in params):
            raise BluValueError(
                with_user_line(
                    f"{name}: operand {x.str_short()} needs window_dimensions, window_strides, "
                    f"padding, base_dilation and window_dilation of length {x.ndim}, got "
                    f"{params}"
                )
            )
        if any(v < 1 for p in params if p is not padding for v in p):
            raise BluValueError(
                with_user_line(
                    f"{name}: window sizes, strides and dilations must be >= 1, got {params}"
                )
            )
        for ax, (n, (lo, hi), bd) in enumerate(zip(x.shape, padding, base_dilation)):
            if dilate_dim(n, bd) + lo + hi < 0:
                raise BluValueError(
                    with_user_line(
                        f"{name}: padding {(lo, hi)} crops axis {ax} of {x.str_short()} below 0"
                    )
                )
        return ShapedArray(tuple(out_spatial(x.shape, *params)), x.dtype)

    return rule


def _decomposition(monoid: str) -> Callable[..., Any]:
    op = {"sum": ew.add, "max": ew.max, "min": ew.min}[monoid]

    def decomposition(
        x, *, window_dimensions, window_strides, padding, base_dilation, window_dilation
    ) -> Any:
        dt = get_aval(x).dtype
        if dt in (dtypes.float16, dtypes.bfloat16) and monoid == "sum":  # as the impl: in f32
            return convert_element_type(
                decomposition(
                    convert_element_type(x, dtypes.float32),
                    window_dimensions=window_dimensions,
                    window_strides=window_strides,
                    padding=padding,
                    base_dilation=base_dilation,
                    window_dilation=window_dilation,
                ),
                dt,
            )
        xa = get_aval(x)
        ident = identity(monoid, xa.dtype)
        xp = pad(
            x,
            full((), ident, xa.dtype),
            [(lo, hi, bd - 1) for (lo, hi), bd in zip(padding, base_dilation)],
        )
        out_sp = out_spatial(
            xa.shape, window_dimensions, window_strides, padding, base_dilation, window_dilation
        )
        acc = None
        for sl in window_slices(xp, out_sp, window_dimensions, window_strides, window_dilation):
            acc = sl if acc is None else op(acc, sl)
        return full(out_sp, ident, xa.dtype) if acc is None else acc

    return decomposition


def _batch(prim: Primitive):
    def rule(
        axis_size,
        args,
        dims,
        *,
        window_dimensions,
        window_strides,
        padding,
        base_dilation,
        window_dilation,
    ):
        (x,), (d,) = args, dims
        out = prim.bind(
            moveaxis(x, d, 0),
            window_dimensions=(1, *window_dimensions),
            window_strides=(1, *window_strides),
            padding=((0, 0), *padding),
            base_dilation=(1, *base_dilation),
            window_dilation=(1, *window_dilation),
        )
        return out, 0

    prim.def_batch(rule)


def _make(monoid: str) -> Primitive:
    p = Primitive(f"reduce_window_{monoid}")
    p.def_impl(_impl(monoid))
    p.def_abstract_eval(_abstract_eval(p.name))
    p.decomposition = _decomposition(monoid)
    _batch(p)
    return p


reduce_window_sum_p = _make("sum")
reduce_window_max_p = _make("max")
reduce_window_min_p = _make("min")


def _sum_transpose(
    ct, x, *, window_dimensions, window_strides, padding, base_dilation, window_dilation
) -> list:
    if isinstance(ct, Zero):
        return [None]
    in_shape = x.aval.shape
    pads = vjp_lhs_padding(
        in_shape,
        window_dimensions,
        window_strides,
        get_aval(ct).shape,
        padding,
        base_dilation,
        window_dilation,
    )
    # each input element receives the cotangents of the windows holding it: the windows of
    # the cotangent spread out by the strides (the window is all ones, so needs no flip)
    ctp = pad(
        ct,
        full((), 0, get_aval(ct).dtype),
        [(lo, hi, s - 1) for (lo, hi), s in zip(pads, window_strides)],
    )
    out = reduce_window_sum_p.bind(
        ctp,
        window_dimensions=window_dimensions,
        window_strides=base_dilation,
        padding=((0, 0),) * len(in_shape),
        base_dilation=(1,) * len(in_shape),
        window_dilation=window_dilation,
    )
    return [out]


deflinear(reduce_window_sum_p, _sum_transpose)


def _chooser_jvp(prim: Primitive, monoid: str):
    better = ew.gt if monoid == "max" else ew.lt

    def jvp(primals, tangents, **params):
        (x,), (t,) = primals, tangents
        out = prim.bind(x, **params)
        if isinstance(t, Zero) or not dtypes.is_inexact(get_aval(out).dtype):
            return out, Zero(tangent_aval(get_aval(out)))
        xa = get_aval(x)
        cfg = [(lo, hi, bd - 1) for (lo, hi), bd in zip(params["padding"], params["base_dilation"])]
        xp = pad(x, full((), identity(monoid, xa.dtype), xa.dtype), cfg)
        out_sp = out_spatial(xa.shape, *(params[k] for k in _WINDOW))
        win = (params["window_dimensions"], params["window_strides"], params["window_dilation"])
        best = which = None
        odt = offsets_dtype(params["window_dimensions"])
        for i, xs in enumerate(window_slices(xp, out_sp, *win)):
            if best is None:
                best, which = xs, full(out_sp, 0, odt)
                continue
            take = better(xs, best)  # strictly better: the first extremum keeps the tangent
            best = ew.select(take, xs, best)
            which = ew.select(take, full(out_sp, i, odt), which)
        if which is None:  # an empty window: no element, no tangent
            return out, Zero(tangent_aval(get_aval(out)))
        # named for rematerialization policies: a block can keep these offsets (one byte an
        # output) instead of recomputing its input to find them again (a padded copy, every
        # window offset read) in the backward pass, as torch.compile keeps max pooling's
        which = checkpoint_name(which, WINDOW_OFFSETS)
        return out, window_gather(t, which, **params)

    prim.def_jvp(jvp)


# the ``checkpoint_name`` of a windowed max's or min's chosen offsets (``which``, the output's
# shape, int8 for windows up to 127 elements): ``save_only_these_names(WINDOW_OFFSETS)`` keeps them
WINDOW_OFFSETS = "reduce_window_offsets"
_WINDOW = ("window_dimensions", "window_strides", "padding", "base_dilation", "window_dilation")
_chooser_jvp(reduce_window_max_p, "max")
_chooser_jvp(reduce_window_min_p, "min")

_MONOIDS = {
    ew.add_p: ("sum", reduce_window_sum_p),
    ew.max_p: ("max", reduce_window_max_p),
    ew.min_p: ("min", reduce_window_min_p),
}


def _recognize(computation: Callable, dtype: Any) -> tuple[str, Primitive] | None:
    """The monoid of ``computation`` if it is one ``add``/``max``/``min`` of its arguments."""
    return _MONOIDS.get(binary_primitive(computation, dtype))


def _monoid_primitive(computation: Callable, operand: Any, init_value: Any) -> Primitive | None:
    """The primitive of ``computation`` when it is one ``add``/``max``/``min`` of its arguments
    and ``init_value`` is that monoid's identity (a concrete scalar), else None."""
    xa = get_aval(operand)
    monoid = _recognize(computation, xa.dtype)
    if monoid is None:
        return None
    name, prim = monoid
    try:
        init = np.asarray(init_value)
    except Exception:  # noqa: BLE001  (a tracer: not concrete, the general path)
        return None
    with np.errstate(invalid="ignore"):  # -inf as an integer: not the identity
        if init.shape != () or init.astype(xa.dtype) != identity(name, xa.dtype):
            return None
        if not np.all(init.astype(xa.dtype) == init):  # 0.9 for an integer operand: the
            return None  # general path's init check names it
    return prim


def _window_params(
    shape, what, window_dimensions, window_strides, padding, base_dilation, window_dilation
):
    """The window arguments checked for an operand of ``shape`` (``what`` names the call in
    errors), the padding strings as pairs."""
    r = len(shape)

    def ints(v, name):
        return int_tuple(v, r, name, 1, what)

    wdims, strides = ints(window_dimensions, "window_dimensions"), ints(window_strides, "strides")
    bd, wd = ints(base_dilation, "base_dilation"), ints(window_dilation, "window_dilation")
    if isinstance(padding, str):
        # JAX's: the window's extent after window_dilation sets the 'SAME' padding
        eff = tuple((w - 1) * d + 1 for w, d in zip(wdims, wd))
        pads = tuple(padtype_to_pads(shape, eff, strides, padding))
    else:
        pads = pad_pairs(padding, r, what)
    return wdims, strides, pads, bd, wd


def reduce_window_shape_tuple(
    operand_shape: Sequence[int],
    window_dimensions: Sequence[int],
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    base_dilation: Sequence[int] | None = None,
    window_dilation: Sequence[int] | None = None,
) -> tuple[int, ...]:
    """The shape of ``reduce_window``'s result for an operand of ``operand_shape``
    (``jax.lax.reduce_window_shape_tuple``): axis ``i`` has
    ``max(0, (dilated_in + lo + hi - dilated_window) // stride + 1)`` elements, where
    ``dilated_in = (n - 1) * base_dilation + 1`` (0 for ``n = 0``) and
    ``dilated_window = (w - 1) * window_dilation + 1``. Shape arithmetic on Python ints, no
    arrays.

    Args:
        operand_shape: ``r`` ints >= 0.
        window_dimensions, window_strides: ``r`` ints >= 1.
        padding: ``r`` pairs ``(low, high)`` (JAX's), or ``"SAME"``, ``"SAME_LOWER"``,
            ``"VALID"`` as ``reduce_window`` takes.
        base_dilation, window_dilation: ``r`` ints >= 1 (default 1).

    Returns:
        A tuple of ``r`` Python ints.

    Raises:
        BluTypeError: ``operand_shape`` or a parameter is not a sequence of ints.
        BluValueError: a negative size, a parameter of another length than ``r`` or below 1.
    """
    try:
        shape = tuple(int(n) for n in operand_shape)
    except (TypeError, ValueError):
        raise BluTypeError(
            with_user_line(
                "reduce_window_shape_tuple: operand_shape must be a sequence of ints, got "
                f"{operand_shape!r}"
            )
        ) from None
    if any(n < 0 for n in shape):
        raise BluValueError(
            with_user_line(f"reduce_window_shape_tuple: negative size in operand_shape {shape}")
        )
    params = _window_params(
        shape,
        f"reduce_window_shape_tuple of {shape}",
        window_dimensions,
        window_strides,
        padding,
        base_dilation,
        window_dilation,
    )
    return tuple(int(n) for n in out_spatial(shape, *params))


def reduce_window(
    operand: Any,
    init_value: Any,
    computation: Callable[[Any, Any], Any],
    window_dimensions: Sequence[int],
    window_strides: Sequence[int] | None = None,
    padding: str | Sequence[tuple[int, int]] = "VALID",
    base_dilation: Sequence[int] | None = None,
    window_dilation: Sequence[int] | None = None,
) -> Any:
    """Reduce each window of ``operand`` with ``computation`` (``jax.lax.reduce_window``).

    ``operand`` is an array or a pytree of arrays of one shape (variadic, as ``lax.reduce``);
    ``computation(a, b)`` combines two pytrees like it of scalars into one, and ``init_value``,
    a pytree like it of scalars, fills the pads and dilation holes and starts each window's
    fold. One operand with ``lax.add``, ``lax.max`` or ``lax.min`` (or a function tracing to one
    of them) and that monoid's identity as a concrete init value (0; ``-inf``, the lowest
    integer, False; ``inf``, the highest, True) is the primitive ``reduce_window_sum``,
    ``reduce_window_max`` or ``reduce_window_min``; anything else is composed of ``pad``,
    strided ``slice``s and ``lax.reduce``'s fold of the window in row-major order
    (``blu/lax/custom_window.py``), differentiable in forward and reverse mode through the
    combiner's derivative (operands and init values) and batched by vmap. As JAX's, the result
    does not depend on the order of combination when ``computation`` is associative and
    commutative with ``init_value`` its identity.

    Args:
        operand: an array of rank ``r``, or a pytree of them of one shape.
        init_value: a pytree like ``operand`` of scalars of the operands' dtypes (Python
            scalars are converted when the dtype holds them).
        computation: ``(a, b) -> c`` on pytrees like ``operand`` of scalars, returning one of
            the same structure and dtypes.
        window_dimensions, window_strides: ``r`` ints >= 1 (strides default 1, as JAX's).
        padding: ``"SAME"``, ``"SAME_LOWER"``, ``"VALID"`` (the default) or ``r`` pairs
            ``(low, high)`` (negative: crop), applied after ``base_dilation``; pads hold
            ``init_value``. The strings pad for the window as ``window_dilation`` spreads it
            (as JAX's).
        base_dilation, window_dilation: ``r`` ints >= 1 (default 1).

    Returns:
        A pytree like ``operand`` of arrays of its dtypes, axis ``i`` of size
        ``floor((dilated_in + lo + hi - dilated_window) / stride) + 1`` (0 if negative:
        ``reduce_window_shape_tuple``); where it has no element, nothing is reduced.

    Raises:
        BluShapeError: operands of different shapes, a non-scalar init value.
        BluTypeError: an init value of another dtype than its operand, ``computation``
            returning other dtypes or non-scalars.
        BluValueError: ``operand`` and ``init_value`` of different structures (counts), no
            operand, ``computation`` returning another structure, window parameters of another
            length than the rank or below 1, padding cropping an axis below 0.
    """
    flat, tree = pytree.tree_flatten(operand)
    flat_init, init_tree = pytree.tree_flatten(init_value)
    if tree != init_tree:
        raise BluValueError(
            with_user_line(
                f"reduce_window: operand ({len(flat)} array(s), structure {tree}) and "
                f"init_value ({len(flat_init)} value(s), structure {init_tree}) must have one "
                "structure"
            )
        )
    if not flat:
        raise BluValueError(with_user_line("reduce_window: operand has no arrays"))
    avals = [get_aval(x) for x in flat]
    if window_strides is None:
        window_strides = (1,) * avals[0].ndim
    if any(a.shape != avals[0].shape for a in avals):
        shown = ", ".join(a.str_short() for a in avals)
        raise BluShapeError(
            with_user_line(f"reduce_window: operands must have one shape, got {shown}")
        )
    params = _window_params(
        avals[0].shape,
        f"reduce_window of {avals[0].str_short()}",
        window_dimensions,
        window_strides,
        padding,
        base_dilation,
        window_dilation,
    )
    if len(flat) == 1 and tree == pytree.tree_structure(0):
        prim = _monoid_primitive(computation, operand, init_value)
        if prim is not None:
            return prim.bind(operand, **dict(zip(_KEYS, params)))
    return general_reduce_window(flat, flat_init, tree, computation, *params)


_KEYS = ("window_dimensions", "window_strides", "padding", "base_dilation", "window_dilation")
