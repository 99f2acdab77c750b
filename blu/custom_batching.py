"""``jax.custom_batching``: functions with their own batching rule (``custom_vmap``) and
functions that ``vmap`` runs one batch element at a time (``sequential_vmap``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blu import lax
from blu.core import pytree
from blu.transforms.custom_batching import custom_vmap

__all__ = ["custom_vmap", "sequential_vmap"]


def sequential_vmap(f: Callable) -> custom_vmap:
    """``f`` as a ``custom_vmap`` whose batching rule maps it over the batch with ``lax.map``
    (one call per element, in a loop), as ``jax.custom_batching.sequential_vmap``: for a
    function that cannot be batched (a host callback, a solver with data-dependent control)
    or whose batched form would be too large. Every output is batched.

    Source: ``jax.custom_batching.sequential_vmap`` (``jax/_src/custom_batching.py``).
    """
    fun = custom_vmap(f)

    @fun.def_vmap
    def rule(axis_size: int, in_batched: list, *args: Any) -> tuple:
        leaves, tree = pytree.tree_flatten(list(args))
        flags = pytree.tree_leaves(in_batched)
        mapped = [x for x, b in zip(leaves, flags) if b]

        def one(m: list) -> Any:
            it = iter(m)
            full = [next(it) if b else x for x, b in zip(leaves, flags)]
            return fun(*pytree.tree_unflatten(tree, full))

        out = lax.map(one, mapped)
        return out, pytree.tree_map(lambda _: True, out)

    return fun
