"""blu.tree_util: pytree utilities under ``jax.tree_util``'s names.

A thin public module over ``blu.core.pytree`` (where flattening, the node registry and key
paths live), plus :class:`Partial`, a ``functools.partial`` that is a pytree (its bound
arguments are children, the function is static), so it can be passed through ``jit``/``vmap``::

    import blu.tree_util as tu
    tu.tree_map(lambda x, y: x + y, {"a": 1, "b": (2, 3)}, {"a": 10, "b": (20, 30)})
    # {'a': 11, 'b': (22, 33)}
    tu.keystr(tu.tree_flatten_with_path({"w": [0, 1]})[0][1][0])   # "['w'][1]"

Containers (tuple, list, dict, None, namedtuples, ``OrderedDict``, ``defaultdict`` and
registered classes) are nodes; everything else is a leaf; dict keys are sorted when flattening.
"""

from __future__ import annotations

import functools
from typing import Any

from blu.core.pytree import (
    DictKey,
    FlattenedIndexKey,
    GetAttrKey,
    KeyPath,
    PyTreeDef,
    SequenceKey,
    all_leaves,
    keystr,
    register_dataclass,
    register_pytree_node,
    register_pytree_node_class,
    register_pytree_with_keys,
    tree_all,
    tree_flatten,
    tree_flatten_with_path,
    tree_leaves,
    tree_leaves_with_path,
    tree_map,
    tree_map_with_path,
    tree_reduce,
    tree_structure,
    tree_transpose,
    tree_unflatten,
    treedef_is_leaf,
)

__all__ = [
    "DictKey",
    "FlattenedIndexKey",
    "GetAttrKey",
    "KeyPath",
    "Partial",
    "PyTreeDef",
    "SequenceKey",
    "all_leaves",
    "keystr",
    "register_dataclass",
    "register_pytree_node",
    "register_pytree_node_class",
    "register_pytree_with_keys",
    "register_pytree_with_keys_class",
    "tree_all",
    "tree_flatten",
    "tree_flatten_with_path",
    "tree_leaves",
    "tree_leaves_with_path",
    "tree_map",
    "tree_map_with_path",
    "tree_reduce",
    "tree_structure",
    "tree_transpose",
    "tree_unflatten",
    "treedef_children",
    "treedef_is_leaf",
]


def treedef_children(treedef: PyTreeDef) -> list[PyTreeDef]:
    """The treedefs of the root node's children (``[]`` for a leaf)."""
    return treedef.children()


def register_pytree_with_keys_class(cls: type) -> type:
    """Class decorator: ``cls`` defines ``tree_flatten_with_keys(self) -> (((key, child), ...),
    aux)`` and a classmethod ``tree_unflatten(cls, aux, children)``; its leaves get key paths.

    Raises:
        BluValueError: ``cls`` is already registered.
    """
    flatten = getattr(cls, "tree_flatten", None)
    register_pytree_with_keys(
        cls,
        lambda x: x.tree_flatten_with_keys(),
        cls.tree_unflatten,  # type: ignore[attr-defined]
        (lambda x: x.tree_flatten()) if flatten is not None else None,
    )
    return cls


class Partial(functools.partial):
    """``functools.partial`` as a pytree: the bound arguments are its leaves, ``func`` is static.

    So a ``Partial`` can be an argument or result of ``jit``/``vmap``/``grad`` functions (as
    ``jax.tree_util.Partial``). Two ``Partial``s with equal ``func`` have equal treedefs.
    """


def _partial_flatten(p: Partial) -> tuple[tuple, Any]:
    return (p.args, p.keywords), p.func


def _partial_unflatten(func: Any, children: tuple) -> Partial:
    args, keywords = children
    return Partial(func, *args, **keywords)


register_pytree_node(Partial, _partial_flatten, _partial_unflatten)
