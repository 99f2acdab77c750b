"""``linear_transpose``: the transpose of a linear function, as ``jax.linear_transpose``.

The function is traced once to a jaxpr on the primals' shapes and dtypes (their values are
never read); the transposed function runs ``backward_pass`` on that jaxpr with every input
undefined, so no forward pass runs and only linear primitives (those with a transpose rule)
may depend on the inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from blu.core import dtypes, pytree
from blu.core.array import Array
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer, canonicalize_arg, get_aval
from blu.core.jaxpr import dce_jaxpr
from blu.core.staging import trace_to_jaxpr
from blu.transforms import ops
from blu.transforms.ad import backward_pass
from blu.transforms.ad_util import UndefinedPrimal, Zero, eager_arrays, instantiate

__all__ = ["linear_transpose"]


def _aval_of(x: Any) -> ShapedArray:
    """A primal's aval: an array's, a Python scalar's (weakly typed), or that of any object with
    ``shape`` and ``dtype`` (a ``ShapeDtypeStruct``), as JAX reads only those."""
    if isinstance(x, (Array, Tracer)) or not (hasattr(x, "shape") and hasattr(x, "dtype")):
        return get_aval(canonicalize_arg(x))
    return ShapedArray(tuple(x.shape), dtypes.canonicalize(x.dtype))


def _fun_name(fun: Callable) -> str:
    return getattr(fun, "__name__", type(fun).__name__)


def linear_transpose(fun: Callable, *primals: Any, reduce_axes: tuple = ()) -> Callable:
    """The transpose of ``fun``, a function promised to be linear in its arguments.

    For a linear ``fun`` this is ``vjp(fun, *primals)[1]`` without the forward pass: the result
    takes a cotangent with the structure, shapes and dtypes of ``fun(*primals)`` and returns a
    tuple with one cotangent per primal, each with the primal's structure, shape and dtype
    (values cast to it, as JAX's: a complex cotangent of a float primal loses its imaginary
    part). Only the shapes and dtypes of ``primals`` are read: they may be arrays, scalars,
    ``ShapeDtypeStruct`` s or pytrees of these.

    ``fun`` is traced once, here; its jaxpr is transposed at each call of the result
    (``backward_pass``), under whatever transform is running then (``jit``, ``vmap``).

    Example: ``linear_transpose(lambda x: A @ x, x)(y)`` is ``(A.T @ y,)``.

    Args:
        fun: a function of pytrees of arrays, linear in all of them, returning a pytree.
        primals: the example arguments (float or complex leaves, or integer ones when every
            input and output is an integer, as JAX).
        reduce_axes: JAX's deprecated argument; only ``()``.

    Returns:
        ``f_transpose(out_cotangent) -> tuple`` of the primals' cotangents.

    Raises:
        BluTypeError: the inputs and outputs mix float or complex with integer dtypes; ``fun``
            is not linear (a primitive without a transpose rule, such as ``sin``, depends on
            an input: raised when the result is called); a cotangent whose structure or dtype
            differs from ``fun``'s output (a weakly typed Python scalar is cast to it).
        BluShapeError: a cotangent leaf whose shape differs from the output's.
        BluValueError: a non-empty ``reduce_axes``.

    Source: ``jax.linear_transpose`` (``jax/_src/api.py``).
    """
    if reduce_axes:
        raise BluValueError(
            with_user_line(
                f"linear_transpose: reduce_axes={reduce_axes!r} is not supported (JAX deprecated "
                "it); reduce the result with a collective yourself"
            )
        )
    name = _fun_name(fun)
    leaves, in_tree = pytree.tree_flatten(primals)
    in_avals = [_aval_of(x).strip_weak_type() for x in leaves]
    box: dict = {}

    def flat_fun(*args: Any) -> list[Any]:
        out = fun(*pytree.tree_unflatten(in_tree, list(args)))
        out_leaves, box["out_tree"] = pytree.tree_flatten(out)
        return out_leaves

    jaxpr, consts = trace_to_jaxpr(flat_fun, in_avals)
    jaxpr = dce_jaxpr(jaxpr)
    out_tree = box["out_tree"]
    out_avals = [a.strip_weak_type() for a in jaxpr.out_avals]
    kinds = [a.dtype for a in in_avals + out_avals]
    inexact = all(dtypes.is_inexact(d) for d in kinds)
    if not (inexact or all(np.issubdtype(d, np.integer) for d in kinds)):
        ins = [str(a.dtype) for a in in_avals]
        outs = [str(a.dtype) for a in out_avals]
        raise BluTypeError(
            with_user_line(
                "linear_transpose only supports [float or complex] -> [float or complex] and "
                f"integer -> integer functions, but {name} maps {ins} -> {outs}"
            )
        )

    def transposed(out_cotangent: Any) -> tuple:
        cts = check_cotangents(f"linear_transpose({name})", out_cotangent, out_tree, out_avals)
        args = [UndefinedPrimal(a) for a in in_avals]
        try:
            in_cts = backward_pass(jaxpr, consts, args, cts)
        except NotImplementedError as e:  # MissingRuleError, or a product of two inputs
            raise BluTypeError(
                with_user_line(
                    f"linear_transpose({name}): the function is not linear in its inputs ({e}); "
                    "use blu.vjp for non-linear functions"
                )
            ) from None
        outs = []
        for c, a in zip(in_cts, in_avals):
            c = instantiate(Zero(a) if c is None else c)
            if get_aval(c).dtype != a.dtype:
                c = ops.convert_element_type(c, a.dtype)
            outs.append(c)
        return pytree.tree_unflatten(in_tree, eager_arrays(outs, in_avals))

    transposed.__name__ = f"linear_transpose({name})"
    return transposed


def check_cotangents(
    who: str, ct: Any, out_tree: Any, out_avals: Sequence[Any], inexact_only: bool = False
) -> list[Any]:
    """The leaves of ``ct``, a cotangent of an output of structure ``out_tree`` and leaves
    ``out_avals``: a weakly typed leaf (a Python scalar) cast to its output's dtype.

    ``inexact_only``: only float and complex outputs' dtypes are checked (an integer output's
    cotangent is ignored by the backward pass, as ``vjp``'s).

    Raises:
        BluTypeError: the structure differs, or a leaf's dtype (not weakly typed).
        BluShapeError: a leaf's shape differs from its output's.
    """
    ct_leaves, ct_tree = pytree.tree_flatten(ct)
    if ct_tree != out_tree:
        raise BluTypeError(
            with_user_line(
                f"{who}: the cotangent's structure {ct_tree} does not match the function's "
                f"output {out_tree}"
            )
        )
    cts = []
    for i, (c, oa) in enumerate(zip(ct_leaves, out_avals)):
        c = canonicalize_arg(c)
        ca = get_aval(c)
        pair = f"{who}: cotangent leaf {i} is {ca.str_short()} but the output it pairs with is"
        if ca.shape != oa.shape:
            raise BluShapeError(with_user_line(f"{pair} {oa.str_short()}"))
        if ca.dtype != oa.dtype and (dtypes.is_inexact(oa.dtype) or not inexact_only):
            if not ca.weak_type:
                raise BluTypeError(with_user_line(f"{pair} {oa.str_short()} (dtypes differ)"))
            c = ops.convert_element_type(c, oa.dtype)
        cts.append(c)
    return cts
