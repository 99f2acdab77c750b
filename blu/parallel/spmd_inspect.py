"""``inspect_sharding_p``: the partitioner tells ``blu.debug.inspect_array_sharding`` a value's
layout.

Bound only while ``jit`` traces a function it partitions over a mesh (``blu.debug`` calls back
at once everywhere else). The equation is an effect (dead-code elimination keeps it) whose one
int32 token result is unused; the partitioner's rule calls the callback with
``NamedSharding(mesh, spec)`` of the layout propagation gave the value, and stages nothing, so
the per-device program has no trace of it. The callback thus runs when the function is
partitioned (its first call per signature, as JAX's runs when the function is compiled), once
per time the partitioner walks the equation (a loop body's carries are iterated to a fixed
point, so more than once there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from blu.core.aval import ShapedArray
from blu.core.jaxpr import _EFFECTFUL
from blu.core.primitive import Primitive
from blu.lower.slots import host_callback
from blu.parallel.mesh import NamedSharding
from blu.parallel.spmd_layout import Layout
from blu.parallel.spmd_rules import rule
from blu.transforms.ad_util import Zero, tangent_aval
from blu.transforms.batching import bdim_to_front

__all__: list[str] = []  # the public function is blu.debug.inspect_array_sharding

inspect_sharding_p = Primitive("inspect_sharding", multiple_results=True)
_EFFECTFUL.add(inspect_sharding_p.name)  # its result is unused: DCE must keep it
_TOKEN = ShapedArray((), np.dtype(np.int32))
host_callback(
    "calls inspect_array_sharding's callback; the partitioner consumes it (never in a kernel)",
    inspect_sharding_p,
)


@inspect_sharding_p.def_impl
def _impl(x: Any, *, callback: Callable) -> list:
    callback(x.sharding)  # (not bound outside a partitioned jit; an array's own, as JAX's)
    return [np.zeros((), np.int32)]


@inspect_sharding_p.def_abstract_eval
def _abstract(aval: Any, *, callback: Callable) -> list:
    return [_TOKEN]


@inspect_sharding_p.def_jvp
def _jvp(primals, tangents, *, callback):
    return inspect_sharding_p.bind(*primals, callback=callback), [Zero(tangent_aval(_TOKEN))]


@inspect_sharding_p.def_batch
def _batch(axis_size, args, dims, *, callback):
    # the batched value (its batch axis first), as JAX's rule binds the batched operand
    (x,), (d,) = args, dims
    x = x if d is None else bdim_to_front(x, d, axis_size)
    return inspect_sharding_p.bind(x, callback=callback), [None]


@rule("inspect_sharding")
def _inspect(ctx, eqn, vals, lays):
    (lay,) = lays
    eqn.params["callback"](NamedSharding(ctx.mesh, Layout(lay.dims).spec()))
    return [(np.zeros((), np.int32), Layout.replicated(0))]
