"""``custom_gradient``: a function that returns its value and its VJP function together, as
``jax.custom_gradient``, built on ``custom_vjp``.

``fwd`` calls the function, traces the VJP function it returned to a jaxpr on the output's
tangent avals and hands the jaxpr's constants (what the VJP function closed over) to ``bwd`` as
the residuals; ``bwd`` evaluates the jaxpr on the cotangent.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from blu.core import pytree
from blu.core.errors import BluTypeError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.jaxpr import Jaxpr, eval_jaxpr
from blu.core.staging import trace_to_jaxpr
from blu.transforms.ad_util import tangent_aval
from blu.transforms.custom_common import fun_name
from blu.transforms.custom_vjp import custom_vjp

__all__ = ["custom_gradient"]


class _Rule:
    """The traced VJP function: its jaxpr (static) and constants (the residuals, leaves)."""

    def __init__(self, jaxpr: Jaxpr, out_tree: Any, cts_tree: Any, consts: list):
        self.jaxpr, self.out_tree, self.cts_tree, self.consts = jaxpr, out_tree, cts_tree, consts


pytree.register_pytree_node(
    _Rule,
    lambda r: (list(r.consts), (r.jaxpr, r.out_tree, r.cts_tree)),
    lambda aux, consts: _Rule(*aux, list(consts)),
)


def _pair(name: str, res: Any) -> tuple[Any, Callable]:
    if not (isinstance(res, (tuple, list)) and len(res) == 2 and callable(res[1])):
        raise BluTypeError(
            with_user_line(
                f"custom_gradient {name}: the function must return a pair (value, vjp_fn) with "
                f"vjp_fn callable, got {type(res).__name__}"
            )
        )
    return res[0], res[1]


def custom_gradient(fun: Callable) -> Callable:
    """A function with the gradient its own body gives, as ``jax.custom_gradient``.

    ``fun(*args)`` returns ``(value, vjp_fn)``: ``vjp_fn(ct)`` takes a cotangent with the
    structure, shapes and dtypes of ``value`` and returns one cotangent per positional argument
    of ``fun`` (a tuple; for a function of one argument, a single array is taken as the
    1-tuple). The result is a function returning ``value`` alone, whose reverse-mode
    derivative (``grad``, ``vjp``, ``jacrev``) is ``vjp_fn``; ``vjp_fn`` may close over
    values computed in ``fun``.

    Example::

        @blu.custom_gradient
        def f(x):
            return x ** 2, lambda g: (g * x,)   # the "gradient" x instead of 2 x

    Built on ``custom_vjp``: it composes with ``jit`` and ``vmap``; forward mode
    (``jvp``, ``jacfwd``) raises ``CustomVJPForwardModeError``.

    Raises:
        BluTypeError: ``fun`` does not return a pair ``(value, callable)``; ``vjp_fn``'s
            result does not have one cotangent per argument, or one of the argument's shape.

    Source: ``jax.custom_gradient`` (``jax/_src/custom_derivatives.py``).
    """
    name = fun_name(fun)

    @functools.wraps(fun)  # the signature: custom_vjp binds keyword arguments by it
    def value_only(*args: Any) -> Any:
        return _pair(name, fun(*args))[0]

    def fwd(*args: Any) -> tuple[Any, _Rule]:
        value, vjp_fn = _pair(name, fun(*args))
        out_leaves, out_tree = pytree.tree_flatten(value)
        box: dict = {}

        def flat_rule(*cts: Any) -> list[Any]:
            got = vjp_fn(pytree.tree_unflatten(out_tree, list(cts)))
            leaves, box["tree"] = pytree.tree_flatten(got)
            return leaves

        avals = [tangent_aval(get_aval(o)) for o in out_leaves]
        jaxpr, consts = trace_to_jaxpr(flat_rule, avals)
        return value, _Rule(jaxpr, out_tree, box["tree"], consts)

    def bwd(rule: _Rule, ct: Any) -> Any:
        ct_leaves, ct_tree = pytree.tree_flatten(ct)
        if ct_tree != rule.out_tree:  # custom_vjp hands the output's structure; kept honest
            raise BluTypeError(
                with_user_line(f"custom_gradient {name}: cotangent {ct_tree} != {rule.out_tree}")
            )
        cts = pytree.tree_unflatten(rule.cts_tree, eval_jaxpr(rule.jaxpr, rule.consts, *ct_leaves))
        return (cts,) if rule.cts_tree.num_nodes == 1 else cts  # a bare leaf (or None)

    wrapped = custom_vjp(value_only)
    wrapped.defvjp(fwd, bwd)
    return wrapped
