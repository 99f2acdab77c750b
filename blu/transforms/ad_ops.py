"""Primitives that exist for differentiation: stop_gradient, optimization_barrier.

They belong to the transforms (``checkpoint`` needs the barrier), as JAX's ``ad_util`` owns
``stop_gradient_p``; ``blu.lax`` re-exports ``stop_gradient`` and ``optimization_barrier``.
"""

from __future__ import annotations

from typing import Any

from blu.core import pytree
from blu.core.primitive import Primitive
from blu.transforms.ad_util import zero_like
from blu.transforms.batching import defvectorized

__all__ = ["optimization_barrier", "stop_gradient"]

stop_gradient_p = Primitive("stop_gradient")
stop_gradient_p.def_impl(lambda x: x)
stop_gradient_p.def_abstract_eval(lambda x: x)


@stop_gradient_p.def_jvp
def _stop_gradient_jvp(primals, tangents):
    (x,) = primals
    return stop_gradient_p.bind(x), zero_like(x)


@stop_gradient_p.def_transpose
def _stop_gradient_transpose(ct, x):
    # reached only where a linear value goes through it (a custom rule's tangents, e.g. in a
    # cond it runs in lockstep inside blu.shard): the adjoint of the identity map it computes,
    # as the rule's JVP computed it (JAX has no transpose: it raises there)
    return [ct]


defvectorized(stop_gradient_p)


def stop_gradient(x: Any) -> Any:
    """The identity, with zero derivative: gradients do not flow through ``x`` (any pytree)."""
    return pytree.tree_map(stop_gradient_p.bind, x)


optimization_barrier_p = Primitive("optimization_barrier")
optimization_barrier_p.def_impl(lambda x: x)
optimization_barrier_p.def_abstract_eval(lambda x: x)


@optimization_barrier_p.def_jvp
def _barrier_jvp(primals, tangents):
    return optimization_barrier_p.bind(primals[0]), tangents[0]


@optimization_barrier_p.def_transpose
def _barrier_transpose(ct, x):
    return [ct]


defvectorized(optimization_barrier_p)


def optimization_barrier(x: Any) -> Any:
    """The identity (on any pytree), which the compiler may not look through: values computed
    from ``optimization_barrier(x)`` are never merged with the same values computed from ``x``
    (common-subexpression elimination stops at it). ``checkpoint`` uses it so the backward pass
    really recomputes what it chose not to save. As JAX's ``lax.optimization_barrier``; it costs
    nothing at run time (a compiled kernel reads ``x`` itself)."""
    return pytree.tree_map(optimization_barrier_p.bind, x)
