"""Primitives that exist for differentiation: stop_gradient."""

from __future__ import annotations

from typing import Any

from blu.core import pytree
from blu.core.primitive import Primitive
from blu.transforms.ad_util import zero_like
from blu.transforms.batching import defvectorized

__all__ = ["stop_gradient"]

stop_gradient_p = Primitive("stop_gradient")
stop_gradient_p.def_impl(lambda x: x)
stop_gradient_p.def_abstract_eval(lambda x: x)


@stop_gradient_p.def_jvp
def _stop_gradient_jvp(primals, tangents):
    (x,) = primals
    return stop_gradient_p.bind(x), zero_like(x)


defvectorized(stop_gradient_p)


def stop_gradient(x: Any) -> Any:
    """The identity, with zero derivative: gradients do not flow through ``x`` (any pytree)."""
    return pytree.tree_map(stop_gradient_p.bind, x)
