"""``reduce_window`` with a user's computation (the general case of ``jax.lax.reduce_window``),
composed of existing primitives; no primitive of its own.

``windowed.reduce_window`` sends here every call that is not one operand reduced by ``add``,
``max`` or ``min`` with that monoid's identity as a concrete init value (those bind the
``reduce_window_sum``/``_max``/``_min`` primitives): any other combiner, a non-identity or traced
init value, a pytree of operands (variadic, as ``lax.reduce``). Each operand is padded with its
init value (``base_dilation - 1`` holes between elements, ``padding`` at the ends, negative
crops), its windows are cut by strided ``slice``s, one per window offset in row-major order, and
stacked (``concatenate``) on a new leading window axis of size ``prod(window_dimensions)``; then
``lax.reduce`` (``custom_reduce.py``) folds that axis with the computation from the init values::

    out[y] = computation(...computation(init, x'[y * s + k_0 * d]), ..., x'[y * s + k_last * d])

where ``x'`` is the dilated and padded operand (holes and pads hold ``init``). This is XLA's
ReduceWindow with the window's elements combined in row-major order, one of the orders XLA may
choose (JAX requires an associative, commutative computation with ``init`` its identity for the
result not to depend on it). A single operand whose computation is a monoid ``lax.reduce`` knows
(``mul`` with 1, ``and``, ``or``, ``xor`` ...) becomes that named reduction over the window axis.

Derivatives and vmap are those of the pieces (``pad``, ``slice``, ``concatenate`` and
``reduce``'s ``scan``): forward and reverse mode and higher orders, with respect to the operands
and the init values, through the combiner's own derivative. Costs: the stacked windows hold
``prod(window_dimensions)`` times the output's elements, and the fold is that many sequential
steps of the combiner vmapped over the output.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from blu.core import pytree
from blu.core.errors import BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax.conv_numpy import dilate_dim
from blu.lax.custom_reduce import check_scalar_results, init_scalar, reduce
from blu.lax.shapes import broadcast_in_dim, concatenate, pad, reshape
from blu.lax.window_select import out_spatial, window_slices

__all__: list[str] = []


def _checked(computation: Callable, tree: pytree.PyTreeDef, avals: list) -> Callable:
    """``computation``, its result checked to be a pytree like the operands of scalars of their
    dtypes (a BluError naming what it returned, before ``reduce``'s own checks)."""

    def combine(a: Any, b: Any) -> Any:
        out = computation(a, b)
        leaves, out_tree = pytree.tree_flatten(out)
        if out_tree != tree:
            raise BluValueError(
                with_user_line(
                    f"reduce_window: computation returned {len(leaves)} value(s) of structure "
                    f"{out_tree}; it must return one like the operand, {len(avals)} value(s) of "
                    f"structure {tree}"
                )
            )
        check_scalar_results("reduce_window", leaves, avals)
        return out

    return combine


def general_reduce_window(
    flat: list[Any],
    flat_init: list[Any],
    tree: pytree.PyTreeDef,
    computation: Callable,
    window_dimensions: tuple[int, ...],
    window_strides: tuple[int, ...],
    padding: tuple[tuple[int, int], ...],
    base_dilation: tuple[int, ...],
    window_dilation: tuple[int, ...],
) -> Any:
    """The windowed fold of ``computation`` over the operands ``flat`` (one shape, checked by
    the caller, as the window parameters are) from ``flat_init`` (see the module's docstring).

    Raises:
        BluShapeError: a non-scalar init value.
        BluTypeError: an init value of another dtype than its operand (a Python scalar it cannot
            hold), ``computation`` returning other dtypes or non-scalars.
        BluValueError: ``computation`` returning another structure, padding that crops an axis
            below size 0.
    """
    avals = [get_aval(x) for x in flat]
    shape = avals[0].shape
    single = len(flat) == 1
    inits = [
        init_scalar(v, a.dtype, "reduce_window: init_value" + ("" if single else f"[{i}]"))
        for i, (v, a) in enumerate(zip(flat_init, avals))
    ]
    for ax, (n, (lo, hi), bd) in enumerate(zip(shape, padding, base_dilation)):
        if dilate_dim(n, bd) + lo + hi < 0:
            raise BluValueError(
                with_user_line(
                    f"reduce_window: padding {(lo, hi)} crops axis {ax} of "
                    f"{avals[0].str_short()} below 0"
                )
            )
    out_sp = tuple(
        out_spatial(
            shape, window_dimensions, window_strides, padding, base_dilation, window_dilation
        )
    )
    if math.prod(out_sp) == 0:  # no window: the init values, as reduce over nothing gives
        return pytree.tree_unflatten(tree, [broadcast_in_dim(v, out_sp, ()) for v in inits])
    cfg = [(lo, hi, bd - 1) for (lo, hi), bd in zip(padding, base_dilation)]
    stacked = []
    for x, v in zip(flat, inits):
        xp = pad(x, v, cfg) if any(c != (0, 0, 0) for c in cfg) else x
        cuts = [
            reshape(sl, (1, *out_sp))
            for sl in window_slices(xp, out_sp, window_dimensions, window_strides, window_dilation)
        ]
        stacked.append(cuts[0] if len(cuts) == 1 else concatenate(cuts, 0))
    return reduce(
        pytree.tree_unflatten(tree, stacked),
        pytree.tree_unflatten(tree, inits),
        _checked(computation, tree, avals),
        (0,),
    )
