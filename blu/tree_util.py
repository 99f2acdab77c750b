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
from collections.abc import Hashable
from typing import Any, TypeVar

from blu.core import errors as _errors
from blu.core.pytree import (
    DictKey,
    FlattenedIndexKey,
    GetAttrKey,
    KeyPath,
    PyTreeDef,
    SequenceKey,
    _flatten_up_to,
    _interned,
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
from blu.core.pytree_registry import _lookup

KeyEntry = TypeVar("KeyEntry", bound=Any)
"""The type of one entry of a ``KeyPath`` (``DictKey``, ``SequenceKey``, ``GetAttrKey``,
``FlattenedIndexKey`` or a registered node's own key object), as JAX's type variable."""

__all__ = [
    "DictKey",
    "FlattenedIndexKey",
    "GetAttrKey",
    "KeyEntry",
    "KeyPath",
    "Partial",
    "PyTreeDef",
    "SequenceKey",
    "all_leaves",
    "default_registry",
    "flatten_one_level",
    "flatten_one_level_with_keys",
    "is_tree_node",
    "keystr",
    "register_dataclass",
    "register_pytree_node",
    "register_pytree_node_class",
    "register_pytree_with_keys",
    "register_pytree_with_keys_class",
    "register_static",
    "tree_all",
    "tree_broadcast",
    "tree_flatten",
    "tree_flatten_with_path",
    "tree_leaves",
    "tree_leaves_with_path",
    "tree_map",
    "tree_map_with_path",
    "tree_reduce",
    "tree_reduce_associative",
    "tree_structure",
    "tree_transpose",
    "tree_unflatten",
    "treedef_children",
    "treedef_is_leaf",
    "treedef_tuple",
]


def treedef_children(treedef: PyTreeDef) -> list[PyTreeDef]:
    """The treedefs of the root node's children (``[]`` for a leaf)."""
    return treedef.children()


class _DefaultRegistry:
    """The node registry as an object, as ``jax.tree_util.default_registry`` (jaxlib's
    ``PyTreeRegistry``): blu has one registry, shared with the ``tree_*`` functions, so a
    node registered here is a node everywhere."""

    def flatten(self, tree: Any, leaf_predicate: Any = None) -> tuple[list[Any], PyTreeDef]:
        """``tree_flatten(tree, is_leaf=leaf_predicate)``."""
        return tree_flatten(tree, leaf_predicate)

    def flatten_with_path(
        self, tree: Any, leaf_predicate: Any = None
    ) -> tuple[list[tuple[KeyPath, Any]], PyTreeDef]:
        """``tree_flatten_with_path(tree, is_leaf=leaf_predicate)``."""
        return tree_flatten_with_path(tree, leaf_predicate)

    def flatten_one_level(self, tree: Any) -> tuple[tuple[Any, ...], Hashable] | None:
        """``(children, aux_data)`` of the node ``tree``, or None for a leaf."""
        h = _lookup(type(tree))
        if h is None:
            return None
        children, aux = h.flatten(tree)
        return tuple(children), aux

    def flatten_one_level_with_keys(
        self, tree: Any
    ) -> tuple[tuple[tuple[Any, Any], ...], Hashable] | None:
        """``((key, child), ...), aux_data`` of the node ``tree``, or None for a leaf."""
        h = _lookup(type(tree))
        if h is None:
            return None
        pairs, aux = h.flatten_with_keys(tree)
        return tuple((k, c) for k, c in pairs), aux

    def is_node(self, typ: type) -> bool:
        """Whether values of type ``typ`` are nodes (see ``is_tree_node``)."""
        return is_tree_node(typ)

    def register_node(
        self,
        nodetype: type,
        to_iterable: Any,
        from_iterable: Any,
        to_iterable_with_keys: Any = None,
    ) -> None:
        """``register_pytree_node`` (``register_pytree_with_keys`` when
        ``to_iterable_with_keys`` is given), as jaxlib's."""
        if to_iterable_with_keys is None:
            register_pytree_node(nodetype, to_iterable, from_iterable)
        else:
            register_pytree_with_keys(nodetype, to_iterable_with_keys, from_iterable, to_iterable)

    def register_dataclass_node(self, nodetype: type, data_fields: Any, meta_fields: Any) -> None:
        """``register_dataclass(nodetype, data_fields=..., meta_fields=...)``."""
        register_dataclass(nodetype, data_fields=data_fields, meta_fields=meta_fields)

    def __repr__(self) -> str:
        return "blu.tree_util.default_registry"

    def __reduce__(self) -> str:
        return "default_registry"  # pickles by reference, as JAX's


default_registry = _DefaultRegistry()


def flatten_one_level(tree: Any) -> tuple[tuple[Any, ...], Hashable]:
    """The children of the pytree node ``tree`` (not flattened further) and its aux data, as
    ``jax.tree_util.flatten_one_level``: ``flatten_one_level({"b": 1, "a": [2]})`` is
    ``(([2], 1), ("a", "b"))`` (dict keys sorted); ``None`` gives ``((), None)``.

    Raises:
        BluValueError: ``tree`` is a leaf (also a ValueError, as JAX's).
    """
    out = default_registry.flatten_one_level(tree)
    if out is None:
        _raise_leaf(tree, "flatten_one_level")
    return out


def flatten_one_level_with_keys(tree: Any) -> tuple[tuple[tuple[Any, Any], ...], Hashable]:
    """``flatten_one_level`` with each child paired with its key entry (``DictKey``,
    ``SequenceKey``, ``GetAttrKey`` or ``FlattenedIndexKey``), as JAX's.

    Raises:
        BluValueError: ``tree`` is a leaf (also a ValueError, as JAX's).
    """
    out = default_registry.flatten_one_level_with_keys(tree)
    if out is None:
        _raise_leaf(tree, "flatten_one_level_with_keys")
    return out


def _raise_leaf(tree: Any, fn_name: str) -> None:
    msg = f"{fn_name}: can't tree-flatten type: {type(tree)} (a leaf, not a pytree node)"
    raise _errors.BluValueError(_errors.with_user_line(msg))


def is_tree_node(typ: type) -> bool:
    """Whether values of type ``typ`` are pytree nodes (built in, registered, or a namedtuple
    class), as ``jax.tree_util.is_tree_node``: ``is_tree_node(dict)`` and
    ``is_tree_node(type(None))`` are True, ``is_tree_node(int)`` is False.

    Raises:
        BluTypeError: ``typ`` is not a type.
    """
    if not isinstance(typ, type):
        msg = f"is_tree_node: expects a type, got {typ!r} of type {type(typ).__name__}"
        raise _errors.BluTypeError(_errors.with_user_line(msg))
    return _lookup(typ) is not None


def treedef_tuple(treedefs: Any) -> PyTreeDef:
    """The treedef of a tuple whose children have the structures ``treedefs`` (an iterable of
    treedefs), as ``jax.tree_util.treedef_tuple``: ``treedef_tuple([tree_structure(x),
    tree_structure(y)]) == tree_structure((x, y))``.

    Raises:
        BluTypeError: an element of ``treedefs`` is not a ``PyTreeDef`` (names its index).
    """
    children = tuple(treedefs)
    for i, td in enumerate(children):
        if not isinstance(td, PyTreeDef):
            msg = f"treedef_tuple: treedefs[{i}] is a {type(td).__name__}, not a PyTreeDef: {td!r}"
            raise _errors.BluTypeError(_errors.with_user_line(msg))
    return _interned(_lookup(tuple), None, children)


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


def tree_broadcast(prefix_tree: Any, full_tree: Any, is_leaf: Any = None) -> Any:
    """``full_tree``'s structure with each leaf of ``prefix_tree`` (a tree prefix of it)
    repeated over the leaves of the subtree it stands for, as ``jax.tree_util.tree_broadcast``:
    ``tree_broadcast((1, 2), ((3, 4), {"a": 5}))`` is ``((1, 1), {"a": 2})``.

    ``is_leaf`` stops the flattening of ``prefix_tree`` (as JAX's); ``full_tree`` is flattened
    in full.

    Raises:
        BluValueError: ``prefix_tree`` is not a prefix of ``full_tree`` (names the key path).
    """
    prefix_leaves, prefix_def = tree_flatten(prefix_tree, is_leaf)
    subtrees = _flatten_up_to(prefix_def, full_tree, "tree_broadcast")
    leaves: list[Any] = []
    for x, sub in zip(prefix_leaves, subtrees):
        leaves.extend([x] * tree_structure(sub).num_leaves)
    return tree_structure(full_tree).unflatten(leaves)


_NO_IDENTITY: Any = object()


def tree_reduce_associative(
    operation: Any, tree: Any, *, identity: Any = _NO_IDENTITY, is_leaf: Any = None
) -> Any:
    """Combine the leaves of ``tree`` with the associative ``operation`` as a balanced tree
    (depth ``log2(n)``, where ``tree_reduce`` folds from the left), as
    ``jax.tree_util.tree_reduce_associative``: the leaves are split at ``n // 2`` and each half
    reduced the same way, so leaves ``a b c`` give ``op(a, op(b, c))``. One leaf is returned
    as is; no leaves give ``identity``.

    Raises:
        BluTypeError: ``tree`` has no leaves and no ``identity`` is given (JAX's TypeError).
    """
    leaves = tree_leaves(tree, is_leaf)
    if not leaves:
        if identity is _NO_IDENTITY:
            msg = (
                "tree_reduce_associative: the tree has no leaves; pass identity= for the "
                "reduction of an empty tree"
            )
            raise _errors.BluTypeError(_errors.with_user_line(msg))
        return identity

    def reduce(lo: int, hi: int) -> Any:
        if hi - lo == 1:
            return leaves[lo]
        mid = lo + (hi - lo) // 2
        return operation(reduce(lo, mid), reduce(mid, hi))

    return reduce(0, len(leaves))


def register_static(cls: type) -> type:
    """Class decorator registering ``cls`` as a pytree node without children whose instances
    are their own aux data (as ``jax.tree_util.register_static``): a ``cls`` value has no
    leaves, passes through ``tree_map`` unchanged and is static under ``jit`` (so it should be
    hashable and comparable).

    Raises:
        BluTypeError: ``cls`` is not a class.
        BluValueError: ``cls`` is already registered.
    """
    register_pytree_with_keys(cls, lambda obj: ((), obj), lambda obj, _children: obj)
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
