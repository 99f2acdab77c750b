"""blu.tree: the short names of ``jax.tree`` (``blu.tree.map``, ``blu.tree.leaves``, ...).

Each is the ``blu.tree_util`` function of the longer name (``map`` is ``tree_map``), see there.
"""

from __future__ import annotations

from blu.core import pytree as _pt

all = _pt.tree_all  # noqa: A001
flatten = _pt.tree_flatten
flatten_with_path = _pt.tree_flatten_with_path
leaves = _pt.tree_leaves
leaves_with_path = _pt.tree_leaves_with_path
map = _pt.tree_map  # noqa: A001
map_with_path = _pt.tree_map_with_path
reduce = _pt.tree_reduce
structure = _pt.tree_structure
transpose = _pt.tree_transpose
unflatten = _pt.tree_unflatten

__all__ = [
    "all",
    "flatten",
    "flatten_with_path",
    "leaves",
    "leaves_with_path",
    "map",
    "map_with_path",
    "reduce",
    "structure",
    "transpose",
    "unflatten",
]
