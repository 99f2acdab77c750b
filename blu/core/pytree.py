"""Pytrees: nested containers of leaves, flattened to a leaf list plus a ``PyTreeDef``.

Modelled on ``jax.tree_util``. Containers (tuple, list, dict, None, namedtuples,
``OrderedDict``, ``defaultdict`` and registered classes) are *nodes*; everything else
(arrays, scalars, strings, ...) is a *leaf*. Dict and defaultdict keys are sorted when
flattening, so unflattening rebuilds them in sorted key order; ``OrderedDict`` keeps its
order. Node types are matched exactly: an unregistered subclass of ``dict`` or ``list`` is
a leaf (namedtuples, i.e. tuple subclasses with ``_fields``, are recognised automatically).

This module flattens and rebuilds (``PyTreeDef``, the ``tree_*`` functions); the node registry
and key paths are in ``blu.core.pytree_registry`` and re-exported here; the walks a jitted call
makes at every call (``leaves_like``, ``PyTreeDef.unflatten``), written out per treedef, are in
``blu.core.pytree_walks``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

from blu.core.errors import BluTypeError, BluValueError, with_user_line
from blu.core.pytree_registry import (  # noqa: F401  (the public names are re-exported)
    _MISSING,
    DictKey,
    FlattenedIndexKey,
    FlattenFn,
    FlattenWithKeysFn,
    GetAttrKey,
    IsLeafFn,
    KeyPath,
    SequenceKey,
    UnflattenFn,
    _lookup,
    _lookup_cache,
    _NodeHandler,
    keystr,
    register_dataclass,
    register_pytree_node,
    register_pytree_node_class,
    register_pytree_with_keys,
)
from blu.core.pytree_walks import aux_equal as _aux_equal
from blu.core.pytree_walks import builder, gatherer

# ----------------------------------------------------------------------------- PyTreeDef


def _type_name(t: type) -> str:
    return "None" if t is type(None) else t.__qualname__


def _node_repr(h: _NodeHandler, aux: Any, children: list[str]) -> str:
    """Repr of one node given the reprs of its children."""
    if h.kind == "tuple":
        return "(" + ", ".join(children) + ("," if len(children) == 1 else "") + ")"
    if h.kind == "list":
        return "[" + ", ".join(children) + "]"
    if h.kind == "none":
        return "None"
    if h.kind == "namedtuple":
        fields = h.node_type._fields  # type: ignore[attr-defined]
        return f"{h.node_type.__name__}({', '.join(f'{f}={c}' for f, c in zip(fields, children))})"
    if h.kind in ("dict", "OrderedDict", "defaultdict"):
        keys = aux[1] if h.kind == "defaultdict" else aux
        body = "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(keys, children)) + "}"
        if h.kind == "dict":
            return body
        return (
            f"OrderedDict({body})"
            if h.kind == "OrderedDict"
            else f"defaultdict({aux[0]!r}, {body})"
        )
    return f"CustomNode({h.node_type.__name__}[{aux!r}], [{', '.join(children)}])"


class PyTreeDef:
    """Immutable, hashable description of a pytree's structure (everything but the leaves).

    Two treedefs are equal when their node types, node aux data (dict keys, dataclass meta
    fields, ...) and children are equal.
    """

    __slots__ = (
        "_aux",
        "_build",
        "_children",
        "_handler",
        "_hash",
        "_match",
        "_node_type",
        "_num_leaves",
        "_num_nodes",
    )

    def __init__(
        self, handler: _NodeHandler | None, aux: Any = None, children: tuple[PyTreeDef, ...] = ()
    ) -> None:
        setattr_ = object.__setattr__
        setattr_(self, "_handler", handler)
        setattr_(self, "_node_type", None if handler is None else handler.node_type)
        setattr_(self, "_aux", aux)
        setattr_(self, "_children", children)
        leaves = 1 if handler is None else sum([c._num_leaves for c in children])
        setattr_(self, "_num_leaves", leaves)
        setattr_(self, "_num_nodes", 1 + sum([c._num_nodes for c in children]))
        setattr_(self, "_hash", None)  # computed on first use
        setattr_(self, "_build", None)  # ``pytree_walks.builder``'s, made on first use
        setattr_(self, "_match", None)  # ``pytree_walks.gatherer``'s, made on first use

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("PyTreeDef is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("PyTreeDef is immutable")

    def __copy__(self) -> PyTreeDef:
        return self

    def __deepcopy__(self, memo: dict) -> PyTreeDef:
        return self

    @property
    def num_leaves(self) -> int:
        """Number of leaves."""
        return self._num_leaves

    @property
    def num_nodes(self) -> int:
        """Number of nodes, counting leaves and None nodes."""
        return self._num_nodes

    def children(self) -> list[PyTreeDef]:
        """Treedefs of the root's direct children (empty for a leaf)."""
        return list(self._children)

    def node_data(self) -> tuple[type, Any] | None:
        """``(node_type, aux_data)`` of the root, or None for a leaf."""
        return None if self._handler is None else (self._node_type, self._aux)

    def unflatten(self, leaves: Iterable[Any]) -> Any:
        """Build a pytree with this structure from ``leaves``; see ``tree_unflatten``."""
        leaves = list(leaves)
        if len(leaves) != self._num_leaves:
            msg = f"tree_unflatten: {self!r} expected {self._num_leaves} leaves, got {len(leaves)}"
            raise BluValueError(with_user_line(msg))
        return builder(self)(leaves)

    def flatten_up_to(self, tree: Any) -> list[Any]:
        """Flatten ``tree`` down to this treedef's leaves, which may be subtrees in ``tree``.

        Raises:
            BluValueError: If ``tree`` lacks this structure; names the key path and types.
        """
        return _flatten_up_to(self, tree, "flatten_up_to")

    def compose(self, inner: PyTreeDef) -> PyTreeDef:
        """The treedef obtained by replacing every leaf of ``self`` with ``inner``."""
        if self._handler is None:
            return inner
        return PyTreeDef(self._handler, self._aux, tuple(c.compose(inner) for c in self._children))

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, PyTreeDef):
            return NotImplemented
        return (
            self._num_nodes == other._num_nodes
            and self._num_leaves == other._num_leaves
            and self._node_type is other._node_type
            and _aux_equal(self._aux, other._aux)
            and self._children == other._children
        )

    def __hash__(self) -> int:
        if self._hash is None:
            try:
                h = hash((self._node_type, self._aux, self._children))
            except TypeError as e:
                msg = f"PyTreeDef is unhashable because its node data is: {e}"
                raise BluTypeError(with_user_line(msg)) from None
            object.__setattr__(self, "_hash", h)
        return self._hash

    def __repr__(self) -> str:
        return f"PyTreeDef({self._repr_body()})"

    def _repr_body(self) -> str:
        if self._handler is None:
            return "*"
        return _node_repr(self._handler, self._aux, [c._repr_body() for c in self._children])


_LEAF = PyTreeDef(None)


def _flatten(x: Any, is_leaf: IsLeafFn, leaves: list[Any]) -> PyTreeDef:
    if is_leaf is not None and is_leaf(x):
        leaves.append(x)
        return _LEAF
    h = _lookup_cache.get(type(x), _MISSING)  # inlined fast path of _lookup
    if h is _MISSING:
        h = _lookup(type(x))
    if h is None:
        leaves.append(x)
        return _LEAF
    children, aux = h.flatten(x)
    if is_leaf is None:  # leaves among the children without a call each (hundreds per step)
        tds = []
        for c in children:
            if _lookup_cache.get(type(c), _MISSING) is None:
                leaves.append(c)
                tds.append(_LEAF)
            else:
                tds.append(_flatten(c, None, leaves))
        return _interned(h, aux, tuple(tds))
    return _interned(h, aux, tuple([_flatten(c, is_leaf, leaves) for c in children]))


_INTERNED: dict[tuple, PyTreeDef] = {}


def _interned(h: _NodeHandler, aux: Any, children: tuple[PyTreeDef, ...]) -> PyTreeDef:
    """The one ``PyTreeDef`` of this node (hash-consed: treedefs are immutable). A structure
    flattened again (a training step's state on every call) gets the same objects back, so
    comparing and hashing it (jit's cache key) is an identity check, not a walk of every node.
    Nodes whose aux data is unhashable are built fresh."""
    key = (h, aux, children)
    try:
        td = _INTERNED.get(key)
    except TypeError:  # unhashable aux data
        return PyTreeDef(h, aux, children)
    if td is None:
        if len(_INTERNED) >= 1 << 16:  # many distinct structures: start over
            _INTERNED.clear()
        td = _INTERNED[key] = PyTreeDef(h, aux, children)
    return td


def _flatten_with_path(
    x: Any, is_leaf: IsLeafFn, path: KeyPath, out: list[tuple[KeyPath, Any]]
) -> PyTreeDef:
    if is_leaf is not None and is_leaf(x):
        out.append((path, x))
        return _LEAF
    h = _lookup(type(x))
    if h is None:
        out.append((path, x))
        return _LEAF
    pairs, aux = h.flatten_with_keys(x)
    children = tuple([_flatten_with_path(c, is_leaf, (*path, k), out) for k, c in pairs])
    return PyTreeDef(h, aux, children)


class _MismatchError(Exception):
    """Internal: structure mismatch; ``path`` collects key entries (innermost first)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[Any] = []


def _up_to(td: PyTreeDef, x: Any, out: list[Any]) -> None:
    h = td._handler
    if h is None:
        out.append(x)
        return
    xh = _lookup(type(x))
    name = _type_name(h.node_type)
    if xh is None or xh.node_type is not h.node_type:
        what = "leaf" if xh is None else "node"
        raise _MismatchError(f"expected a {name} node, got a {what} of type {_type_name(type(x))}")
    children, aux = xh.flatten(x)
    children = list(children)
    if not _aux_equal(aux, td._aux):
        what = "keys" if h.kind in ("dict", "OrderedDict") else "node data"
        raise _MismatchError(f"{name} {what} differ: expected {td._aux!r}, got {aux!r}")
    if len(children) != len(td._children):
        raise _MismatchError(
            f"expected a {name} node with {len(td._children)} children, got one with "
            f"{len(children)} children"
        )
    for i, (child_td, child) in enumerate(zip(td._children, children)):
        try:
            _up_to(child_td, child, out)
        except _MismatchError as e:
            e.path.append(list(xh.flatten_with_keys(x)[0])[i][0])
            raise


def tree_flatten_like(tree: Any, treedef: PyTreeDef) -> tuple[list[Any], PyTreeDef]:
    """``tree_flatten(tree)``, faster when ``tree`` has the structure ``treedef`` (a training
    step's state passed back on every call): the walk follows ``treedef`` (no key sorting, no
    new treedef) and falls back to a full flatten at the first difference."""
    leaves = leaves_like(tree, treedef)
    if leaves is not None and all_leaf_types(set(map(type, leaves))):
        return leaves, treedef
    return tree_flatten(tree)


def leaves_like(tree: Any, treedef: PyTreeDef) -> list[Any] | None:
    """What ``tree`` holds where ``treedef`` has its leaves, if ``tree`` has the nodes of
    ``treedef`` (node types, dict keys, node data, numbers of children), else None. Whether
    those are leaves is not checked (a node may sit where a leaf belongs): the caller checks
    their types (``all_leaf_types``), once per distinct type, not once per leaf."""
    leaves: list[Any] = []
    return leaves if gatherer(treedef)(tree, leaves) else None


def all_leaf_types(types: Iterable[type]) -> bool:
    """Whether values of each of ``types`` are leaves (not pytree nodes)."""
    return all(_lookup(t) is None for t in types)


def _flatten_up_to(td: PyTreeDef, tree: Any, fn_name: str) -> list[Any]:
    out: list[Any] = []
    try:
        _up_to(td, tree, out)
    except _MismatchError as e:
        where = keystr(tuple(reversed(e.path))) or "<root>"
        msg = f"{fn_name}: pytree structure mismatch at key path {where}: {e.reason}"
        raise BluValueError(with_user_line(msg)) from None
    return out


# ----------------------------------------------------------------------------- public API


def tree_flatten(tree: Any, is_leaf: IsLeafFn = None) -> tuple[list[Any], PyTreeDef]:
    """Flatten ``tree`` into its leaves and its ``PyTreeDef``.

    Args:
        tree: The pytree.
        is_leaf: Optional predicate; a subtree for which it returns True is kept as a leaf.

    Returns:
        ``(leaves, treedef)``, leaves in depth-first order with dict keys sorted.
    """
    leaves: list[Any] = []
    treedef = _flatten(tree, is_leaf, leaves)
    return leaves, treedef


def tree_unflatten(treedef: PyTreeDef, leaves: Iterable[Any]) -> Any:
    """Rebuild a pytree with structure ``treedef`` from ``leaves``.

    Raises:
        BluValueError: If the number of leaves differs from ``treedef.num_leaves``.
    """
    if not isinstance(treedef, PyTreeDef):
        raise BluTypeError(with_user_line(f"tree_unflatten: expected a PyTreeDef, got {treedef!r}"))
    return treedef.unflatten(leaves)


def tree_leaves(tree: Any, is_leaf: IsLeafFn = None) -> list[Any]:
    """The leaves of ``tree``, in flattening order."""
    leaves: list[Any] = []
    _flatten(tree, is_leaf, leaves)
    return leaves


def tree_structure(tree: Any, is_leaf: IsLeafFn = None) -> PyTreeDef:
    """The ``PyTreeDef`` of ``tree``."""
    return _flatten(tree, is_leaf, [])


def tree_map(f: Callable[..., Any], tree: Any, *rest: Any, is_leaf: IsLeafFn = None) -> Any:
    """Apply ``f`` leafwise: ``f(leaf, *matching entries of rest)``, keeping the structure.

    Each tree in ``rest`` must have ``tree``'s structure down to ``tree``'s leaves; the
    entry of a rest tree at one of those leaves may itself be a subtree.

    Raises:
        BluValueError: On a structure mismatch, naming the key path and both node types.
    """
    leaves, treedef = tree_flatten(tree, is_leaf)
    others = [_flatten_up_to(treedef, r, "tree_map") for r in rest]
    return treedef.unflatten([f(*xs) for xs in zip(leaves, *others)])


def tree_flatten_with_path(
    tree: Any, is_leaf: IsLeafFn = None
) -> tuple[list[tuple[KeyPath, Any]], PyTreeDef]:
    """Like ``tree_flatten``, but each leaf comes as a ``(key_path, leaf)`` pair."""
    out: list[tuple[KeyPath, Any]] = []
    treedef = _flatten_with_path(tree, is_leaf, (), out)
    return out, treedef


def tree_leaves_with_path(tree: Any, is_leaf: IsLeafFn = None) -> list[tuple[KeyPath, Any]]:
    """The ``(key_path, leaf)`` pairs of ``tree``."""
    return tree_flatten_with_path(tree, is_leaf)[0]


def tree_map_with_path(
    f: Callable[..., Any], tree: Any, *rest: Any, is_leaf: IsLeafFn = None
) -> Any:
    """Like ``tree_map``, but calls ``f(key_path, leaf, *rest_leaves)``."""
    pairs, treedef = tree_flatten_with_path(tree, is_leaf)
    others = [_flatten_up_to(treedef, r, "tree_map_with_path") for r in rest]
    return treedef.unflatten([f(p, x, *xs) for (p, x), *xs in zip(pairs, *others)])


def tree_all(tree: Any, is_leaf: IsLeafFn = None) -> bool:
    """True if every leaf of ``tree`` is truthy (also for a tree without leaves)."""
    return all(tree_leaves(tree, is_leaf))


def tree_reduce(
    f: Callable[[Any, Any], Any], tree: Any, initializer: Any = _MISSING, is_leaf: IsLeafFn = None
) -> Any:
    """Fold ``f`` over the leaves of ``tree`` from the left, like ``functools.reduce``.

    Raises:
        BluTypeError: If ``tree`` has no leaves and no initializer is given.
    """
    leaves = tree_leaves(tree, is_leaf)
    if initializer is not _MISSING:
        return functools.reduce(f, leaves, initializer)
    if not leaves:
        raise BluTypeError(with_user_line("tree_reduce: no leaves and no initializer"))
    return functools.reduce(f, leaves)


def tree_transpose(
    outer_treedef: PyTreeDef, inner_treedef: PyTreeDef, pytree_to_transpose: Any
) -> Any:
    """Turn an outer tree of inner trees into an inner tree of outer trees.

    ``pytree_to_transpose`` must have structure ``outer_treedef.compose(inner_treedef)``
    (its entries at the inner leaves may themselves be subtrees).

    Raises:
        BluValueError: On a structure mismatch, naming the key path.
    """
    composed = outer_treedef.compose(inner_treedef)
    flat = _flatten_up_to(composed, pytree_to_transpose, "tree_transpose")
    n_inner = inner_treedef.num_leaves
    columns = [flat[j::n_inner] for j in range(n_inner)]
    return inner_treedef.unflatten([outer_treedef.unflatten(col) for col in columns])


def treedef_is_leaf(treedef: PyTreeDef) -> bool:
    """True if ``treedef`` describes a single leaf (None is a node, so it is not one)."""
    return treedef._handler is None


def all_leaves(iterable: Iterable[Any], is_leaf: IsLeafFn = None) -> bool:
    """True if every element of ``iterable`` is a leaf (None is a node, not a leaf)."""
    return all(_flatten(x, is_leaf, []) is _LEAF for x in iterable)
