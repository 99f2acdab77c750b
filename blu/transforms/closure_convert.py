"""``closure_convert``: a function's closed-over traced values as explicit arguments, as
``jax.closure_convert`` (for ``custom_vjp`` / ``custom_jvp`` rules that must differentiate with
respect to what a function closes over)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blu.core import pytree
from blu.core.errors import BluTypeError, with_user_line
from blu.core.interpreter import Tracer, canonicalize_arg, get_aval
from blu.core.jaxpr import eval_jaxpr
from blu.core.staging import trace_to_jaxpr

__all__ = ["closure_convert"]


def closure_convert(fun: Callable, *example_args: Any) -> tuple[Callable, list[Any]]:
    """``fun`` with the traced values it closes over hoisted out as trailing arguments.

    ``fun`` is traced once on the shapes and dtypes of ``example_args`` (a pytree of arrays or
    scalars; their values are not read). Every value it closes over that a running transform
    traces (the tracer of a ``grad``, ``jvp``, ``vmap`` or ``jit`` around the call) becomes a
    *constant* of the result; concrete arrays it closes over stay inside, as JAX's (they
    cannot carry a derivative).

    Returns:
        ``(converted, consts)``: ``consts`` is the list of hoisted values and
        ``converted(*args, *consts)`` equals ``fun(*args)`` for arguments with the structure,
        shapes and dtypes of ``example_args``; with other ``consts`` it computes ``fun`` as if
        it had closed over them, so derivatives with respect to them flow (pass ``consts`` to
        a ``custom_vjp`` function as arguments and differentiate ``converted`` in its rules).

    Raises:
        BluTypeError: ``converted`` called with arguments whose structure differs from
            ``example_args``', or with the wrong number of constants.

    Source: ``jax.closure_convert`` (``jax/_src/custom_derivatives.py``).
    """
    leaves, in_tree = pytree.tree_flatten(example_args)
    avals = [get_aval(canonicalize_arg(x)) for x in leaves]
    box: dict = {}

    def flat_fun(*args: Any) -> list[Any]:
        out = fun(*pytree.tree_unflatten(in_tree, list(args)))
        out_leaves, box["out_tree"] = pytree.tree_flatten(out)
        return out_leaves

    jaxpr, consts = trace_to_jaxpr(flat_fun, avals)
    out_tree = box["out_tree"]
    hoisted_at = [i for i, c in enumerate(consts) if isinstance(c, Tracer)]
    hoisted = [consts[i] for i in hoisted_at]
    name = getattr(fun, "__name__", "fun")

    def converted(*args_and_consts: Any) -> Any:
        n_args = len(args_and_consts) - len(hoisted)
        args, new = args_and_consts[:n_args], args_and_consts[n_args:]
        arg_leaves, tree = pytree.tree_flatten(tuple(args))
        if n_args < 0 or tree != in_tree:
            raise BluTypeError(
                with_user_line(
                    f"closure_convert({name}): the converted function takes arguments with the "
                    f"structure of the example arguments, {in_tree}, then {len(hoisted)} "
                    f"constants; got {len(args_and_consts)} values, arguments {tree}"
                )
            )
        all_consts = list(consts)
        for i, c in zip(hoisted_at, new):
            all_consts[i] = c
        return pytree.tree_unflatten(out_tree, eval_jaxpr(jaxpr, all_consts, *arg_leaves))

    converted.__name__ = f"closure_convert({name})"
    return converted, hoisted
