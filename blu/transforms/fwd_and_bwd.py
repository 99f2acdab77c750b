"""``fwd_and_bwd``: a function's forward and backward passes as two functions, as
``jax.fwd_and_bwd``.

``fwd`` linearizes the function (``linearize_flat``) and returns its residuals as a pytree whose
leaves are the residual arrays and whose static part is the linear jaxpr, so a jitted ``fwd``
can return it and a jitted ``bwd`` (which transposes that jaxpr by ``backward_pass``) compiles
once for every call of the same signature.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from blu.core import pytree
from blu.core.errors import BluTypeError, with_user_line
from blu.core.interpreter import canonicalize_arg, get_aval
from blu.transforms.ad import backward_pass
from blu.transforms.ad_api import (
    linearize_with_aux,
    replace_args,
    resolve_argnums,
    single_argnum,
)
from blu.transforms.ad_util import UndefinedPrimal, Zero, eager_arrays, instantiate, tangent_aval
from blu.transforms.jit import jit
from blu.transforms.linear_transpose import check_cotangents

__all__ = ["fwd_and_bwd"]


class _Residuals:
    """``fwd``'s residuals: the arrays the backward pass reads (the pytree's leaves) and, as its
    static part, the linear jaxpr with the structures and avals ``bwd`` checks against."""

    def __init__(self, static: tuple, arrays: list):
        self.static, self.arrays = static, arrays

    def __repr__(self) -> str:
        return f"Residuals({len(self.arrays)} arrays)"


pytree.register_pytree_node(
    _Residuals, lambda r: (list(r.arrays), r.static), lambda s, xs: _Residuals(s, list(xs))
)


def fwd_and_bwd(
    fun: Callable, argnums: int | Sequence[int], has_aux: bool = False, jitted: bool = True
) -> tuple[Callable, Callable]:
    """The forward and backward passes of ``fun`` as two functions, ``fwd`` and ``bwd``.

    ``fwd(*args)`` is ``(fun(*args), residuals)`` (``(out, residuals, aux)`` with ``has_aux``),
    as ``blu.vjp``'s first half, but the residuals are a pytree of arrays, not a closure: a
    jitted ``fwd`` returns them and ``bwd(residuals, ct)`` returns the cotangents of the
    arguments ``argnums`` names (one array or pytree for an int ``argnums``, a tuple for a
    sequence), as ``vjp``'s ``f_vjp(ct)``. With ``jitted`` (the default) both are
    ``blu.jit``-ed, so ``bwd`` compiles once per signature instead of once per ``vjp``.

    Example::

        fwd, bwd = blu.fwd_and_bwd(lambda x, w: x @ w, argnums=(0, 1))
        y, res = fwd(x, w)
        dx, dw = bwd(res, ct)

    Raises:
        BluTypeError: ``argnums`` not valid positions (at ``fwd``); with ``has_aux``, ``fun``
            not returning a pair; a cotangent whose structure or dtype differs from the
            output's (a weakly typed Python scalar is cast to it).
        BluShapeError: a cotangent leaf whose shape differs from the output's.

    Source: ``jax.fwd_and_bwd`` (``jax/_src/api.py``).
    """
    if not callable(fun):
        raise BluTypeError(
            with_user_line(f"fwd_and_bwd: fun must be callable, got {type(fun).__name__}")
        )
    single = single_argnum(argnums)

    def fwd(*args: Any) -> tuple:
        nums = resolve_argnums("fwd_and_bwd", argnums, len(args))

        def partial_fun(*diff: Any) -> Any:
            return fun(*replace_args(args, nums, diff))

        leaves, in_tree = pytree.tree_flatten(tuple(args[i] for i in nums))
        leaves = [canonicalize_arg(x) for x in leaves]
        outs, jaxpr, residuals, aux_vals, out_tree, aux_tree = linearize_with_aux(
            "fwd_and_bwd: ", partial_fun, in_tree, leaves, has_aux
        )
        in_avals = tuple(tangent_aval(get_aval(x)) for x in leaves)
        out_avals = tuple(tangent_aval(get_aval(o)) for o in outs)
        res = _Residuals((jaxpr, in_tree, in_avals, out_tree, out_avals), list(residuals))
        out = pytree.tree_unflatten(out_tree, eager_arrays(outs))
        if has_aux:
            return out, res, pytree.tree_unflatten(aux_tree, eager_arrays(aux_vals))
        return out, res

    def bwd(residuals: Any, ct: Any) -> Any:
        if not isinstance(residuals, _Residuals):
            raise BluTypeError(
                with_user_line(
                    "fwd_and_bwd: bwd takes the residuals fwd returned, got "
                    f"{type(residuals).__name__}"
                )
            )
        jaxpr, in_tree, in_avals, out_tree, out_avals = residuals.static
        cts = check_cotangents("fwd_and_bwd", ct, out_tree, out_avals, inexact_only=True)
        got = backward_pass(jaxpr, residuals.arrays, [UndefinedPrimal(a) for a in in_avals], cts)
        got = [instantiate(Zero(a) if c is None else c) for c, a in zip(got, in_avals)]
        g = pytree.tree_unflatten(in_tree, eager_arrays(got, list(in_avals)))
        return g[0] if single else g

    fwd.__name__ = f"fwd({getattr(fun, '__name__', 'fun')})"
    bwd.__name__ = f"bwd({getattr(fun, '__name__', 'fun')})"
    return (jit(fwd), jit(bwd)) if jitted else (fwd, bwd)
