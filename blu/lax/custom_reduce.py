"""``reduce`` with a user's combiner (``jax.lax.reduce``), composed of existing primitives.

A ``computation`` that traces to one ``add``, ``mul``, ``max``, ``min``, ``and``, ``or`` or
``xor`` of its two scalar arguments, with a concrete ``init_values`` equal to that monoid's
identity, is the named reduction (``reduce_sum``, ``reduce_prod``, ``reduce_max``,
``reduce_min``, ``reduce_and``, ``reduce_or``, ``reduce_xor``), as JAX's ``_get_monoid_reducer``
dispatches. Any other combiner, over one operand or a pytree of them, is applied as a sequential
fold: the reduced dimensions are moved to the front and flattened to one axis, and a ``scan``
over it folds ``carry = computation(carry, x[i])`` from ``init_values``, the combiner traced on
scalars and vectorized (``vmap``) over the kept elements. JAX leaves the order of combination to
XLA (the combiner must be associative and commutative, ``init_values`` its identity); the fold is
one valid order, and for a combiner that is not, the left fold from ``init_values`` once.
Derivatives come from the scan's; the fold is ``n`` sequential steps for ``n`` reduced elements.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from blu.core import dtypes, pytree
from blu.core.aval import ShapeDtypeStruct
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.staging import make_jaxpr
from blu.lax import bits
from blu.lax import elementwise as ew
from blu.lax.casts import convert_element_type
from blu.lax.control_flow import scan
from blu.lax.reductions import (
    reduce_and,
    reduce_max,
    reduce_min,
    reduce_or,
    reduce_prod,
    reduce_sum,
    reduce_xor,
)
from blu.lax.shapes import broadcast_in_dim, reshape, transpose
from blu.transforms.batching import vmap

__all__ = ["reduce"]


def _is_bool(dt: np.dtype) -> bool:
    return dt == dtypes.bool_


def _is_numeric(dt: np.dtype) -> bool:
    return dt != dtypes.bool_


def _is_int_or_bool(dt: np.dtype) -> bool:
    return dtypes.is_int(dt) or dt == dtypes.bool_


def _lowest(dt: np.dtype) -> Any:
    if dt == dtypes.bool_:
        return False
    return -np.inf if dtypes.is_inexact(dt) else np.iinfo(dt).min


def _highest(dt: np.dtype) -> Any:
    if dt == dtypes.bool_:
        return True
    return np.inf if dtypes.is_inexact(dt) else np.iinfo(dt).max


# primitive -> (named reduction, the dtypes it takes, the identity in a dtype)
_MONOIDS: dict[Any, tuple[Callable, Callable, Callable]] = {
    ew.add_p: (reduce_sum, _is_numeric, lambda dt: 0),
    ew.mul_p: (reduce_prod, _is_numeric, lambda dt: 1),
    ew.max_p: (reduce_max, lambda dt: True, _lowest),
    ew.min_p: (reduce_min, lambda dt: True, _highest),
    bits.and_p: (reduce_and, _is_bool, lambda dt: True),
    bits.or_p: (reduce_or, _is_bool, lambda dt: False),
    bits.xor_p: (reduce_xor, _is_int_or_bool, lambda dt: 0),
}


def check_scalar_results(name: str, leaves: list, avals: list) -> None:
    """A combiner's results ``leaves`` must be scalars of the operands' dtypes (``avals``): a
    BluTypeError naming both otherwise."""
    got = [get_aval(v) for v in leaves]
    if any(g.shape != () or g.dtype != a.dtype for g, a in zip(got, avals)):
        raise BluTypeError(
            with_user_line(
                f"{name}: computation must return scalars of the operands' dtypes "
                f"({', '.join(str(a.dtype) for a in avals)}), got "
                f"{', '.join(g.str_short() for g in got)}"
            )
        )


def binary_primitive(computation: Callable, dtype: Any) -> Any:
    """The primitive ``computation`` is, on two scalars of ``dtype``: one equation of it taking
    both arguments (in either order) and giving the result; else None (``windowed`` and
    ``reduce`` recognize their monoids so)."""
    scalar = ShapeDtypeStruct((), dtype)
    try:
        jaxpr = make_jaxpr(computation)(scalar, scalar).jaxpr
    except Exception:  # noqa: BLE001  (anything that does not trace on scalars is no monoid)
        return None
    if len(jaxpr.eqns) != 1 or len(jaxpr.outvars) != 1:
        return None
    (eqn,) = jaxpr.eqns
    if (
        sorted(str(v) for v in eqn.invars) != sorted(str(v) for v in jaxpr.invars)
        or eqn.outvars[0] is not jaxpr.outvars[0]
    ):
        return None
    return eqn.primitive


def _monoid_reducer(computation: Callable, operand: Any, init: Any) -> Callable | None:
    """The named reduction when ``computation`` is one monoid primitive of its two scalar
    arguments and ``init`` its identity (concrete), else None."""
    dt = get_aval(operand).dtype
    prim = binary_primitive(computation, dt)
    if prim not in _MONOIDS:
        return None
    reducer, takes, identity = _MONOIDS[prim]
    if not takes(dt):
        return None
    try:
        value = np.asarray(init)
    except Exception:  # noqa: BLE001  (a tracer: not concrete, no dispatch)
        return None
    if value.shape != () or not np.equal(value, np.asarray(identity(dt)).astype(value.dtype)):
        return None
    return reducer


def _dimensions(dimensions: Any, ndim: int, shape: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in dimensions)
    except TypeError as e:
        raise BluTypeError(
            with_user_line(f"reduce: dimensions must be a sequence of ints, got {dimensions!r}")
        ) from e
    if any(not 0 <= d < ndim for d in dims) or len(set(dims)) != len(dims):
        raise BluValueError(
            with_user_line(
                f"reduce: dimensions {dims} must be distinct axes in [0, {ndim}) of the "
                f"operands {shape}"
            )
        )
    return dims


def init_scalar(init: Any, dtype: np.dtype, label: str) -> Any:
    """``init`` as a scalar of ``dtype``: a Python or numpy scalar is converted, an array must
    already have it (as JAX's ``reduce`` requires). ``label`` names it in errors
    (``"reduce: init_values[0]"``)."""
    if isinstance(init, (bool, int, float, complex)):
        value = complex(init)
        integral = math.isfinite(value.real) and value.real == int(value.real)
        kind = np.dtype(dtype).kind
        if (value.imag != 0 and kind != "c") or (kind in "iub" and not integral):
            raise BluTypeError(
                with_user_line(
                    f"{label} {init!r} cannot be held by its operand's dtype "
                    f"{np.dtype(dtype)}; pass an init value of that dtype"
                )
            )
        return convert_element_type(np.asarray(init), dtype)
    aval = get_aval(init)
    if aval.shape != ():
        raise BluShapeError(with_user_line(f"{label} must be a scalar, got {aval.str_short()}"))
    if aval.dtype != dtype:
        raise BluTypeError(
            with_user_line(f"{label} {aval.str_short()} must have its operand's dtype {dtype}")
        )
    return init


def reduce(
    operands: Any,
    init_values: Any,
    computation: Callable[[Any, Any], Any],
    dimensions: Sequence[int],
) -> Any:
    """Reduce ``operands`` over ``dimensions`` with ``computation`` (``jax.lax.reduce``).

    ``computation(a, b)`` combines two pytrees like ``operands`` whose leaves are scalars and
    returns one of the same structure and dtypes; ``init_values`` (a pytree like ``operands`` of
    scalars) must be its identity and ``computation`` associative and commutative for the
    result not to depend on the order (JAX's requirement). A single operand whose combiner is
    ``add``, ``mul``, ``max``, ``min``, ``and``, ``or`` or ``xor`` (``lax``'s or
    ``blu.numpy``'s) with that monoid's identity becomes the named reduction (``reduce_sum``
    ...); anything else is folded in order over the reduced elements, starting from
    ``init_values`` (see the module's docstring). Differentiable, jit and vmap as a ``scan``.

    Args:
        operands: an array or a pytree of arrays of one shape.
        init_values: a pytree like ``operands`` of scalars of their dtypes (Python scalars are
            converted).
        computation: ``(a, b) -> c`` on pytrees like ``operands`` of scalars; ``c`` may have
            another structure with as many leaves (JAX's), paired with the operands in order.
        dimensions: distinct axes in ``[0, ndim)`` to reduce.

    Returns:
        A pytree of ``computation``'s output structure (that of ``operands`` for a named
        reduction), each leaf without ``dimensions``; over size-0 dimensions, ``init_values``
        broadcast.

    Raises:
        BluShapeError: operands of different shapes, a non-scalar init value.
        BluTypeError: an init value of another dtype than its operand, ``computation`` returning
            other dtypes or shapes.
        BluValueError: structures that differ (``computation``'s: another number of leaves),
            no operands, bad ``dimensions``.
    """
    flat, tree = pytree.tree_flatten(operands)
    flat_init, init_tree = pytree.tree_flatten(init_values)
    if tree != init_tree:
        raise BluValueError(
            with_user_line(
                f"reduce: operands and init_values must have one structure, got {tree} and "
                f"{init_tree}"
            )
        )
    if not flat:
        raise BluValueError(with_user_line("reduce: operands has no arrays"))
    avals = [get_aval(x) for x in flat]
    shown = ", ".join(a.str_short() for a in avals)
    if any(a.shape != avals[0].shape for a in avals):
        raise BluShapeError(with_user_line(f"reduce: operands must have one shape, got {shown}"))
    shape = avals[0].shape
    dims = _dimensions(dimensions, len(shape), shown)
    if len(flat) == 1 and tree == pytree.tree_structure(0):
        reducer = _monoid_reducer(computation, flat[0], flat_init[0])
        if reducer is not None:
            return reducer(flat[0], dims)
    inits = [
        init_scalar(v, a.dtype, f"reduce: init_values[{i}]")
        for i, (v, a) in enumerate(zip(flat_init, avals))
    ]
    kept = [d for d in range(len(shape)) if d not in dims]
    kept_shape = tuple(shape[d] for d in kept)
    n, size = math.prod(shape[d] for d in dims), math.prod(kept_shape)
    out_trees: list[Any] = []  # the result has the computation's structure (JAX's)

    def combine(a: list[Any], b: list[Any]) -> list[Any]:
        out = computation(pytree.tree_unflatten(tree, a), pytree.tree_unflatten(tree, b))
        leaves, out_tree = pytree.tree_flatten(out)
        if len(leaves) != len(flat):
            raise BluValueError(
                with_user_line(
                    f"reduce: computation returned structure {out_tree} of {len(leaves)} "
                    f"arrays, expected {len(flat)} like {tree}"
                )
            )
        out_trees.append(out_tree)
        check_scalar_results("reduce", leaves, avals)
        return leaves

    if n == 0 or size == 0:
        scalars = [ShapeDtypeStruct((), a.dtype) for a in avals]
        make_jaxpr(combine)(scalars, scalars)  # (its checks and structure only)
        outs = [broadcast_in_dim(v, kept_shape, ()) for v in inits]
        return pytree.tree_unflatten(out_trees[-1], outs)

    step = vmap(combine)
    xs = [reshape(transpose(x, dims + tuple(kept)), (n, size)) for x in flat]
    carry0 = [broadcast_in_dim(v, (size,), ()) for v in inits]
    carry, _ = scan(lambda c, x: (step(c, x), None), carry0, xs)
    return pytree.tree_unflatten(out_trees[-1], [reshape(c, kept_shape) for c in carry])
