"""Pytrees: nested containers of leaves, flattened to a leaf list plus a ``PyTreeDef``.

Modelled on ``jax.tree_util``. Containers (tuple, list, dict, None, namedtuples,
``OrderedDict``, ``defaultdict`` and registered classes) are *nodes*; everything else
(arrays, scalars, strings, ...) is a *leaf*. Dict and defaultdict keys are sorted when
flattening, so unflattening rebuilds them in sorted key order; ``OrderedDict`` keeps its
order. Node types are matched exactly: an unregistered subclass of ``dict`` or ``list`` is
a leaf (namedtuples, i.e. tuple subclasses with ``_fields``, are recognised automatically).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import Any

from blu.core.errors import BluTypeError, BluValueError, with_user_line

IsLeafFn = Callable[[Any], bool] | None
FlattenFn = Callable[[Any], tuple[Iterable[Any], Any]]
FlattenWithKeysFn = Callable[[Any], tuple[Iterable[tuple[Any, Any]], Any]]
UnflattenFn = Callable[[Any, Sequence[Any]], Any]


# ----------------------------------------------------------------------------- key paths


@dataclasses.dataclass(frozen=True)
class SequenceKey:
    """Key-path entry for the ``idx``-th element of a tuple or list."""

    idx: int

    def __str__(self) -> str:
        return f"[{self.idx!r}]"


@dataclasses.dataclass(frozen=True)
class DictKey:
    """Key-path entry for the value stored under ``key`` in a dict-like node."""

    key: Hashable

    def __str__(self) -> str:
        return f"[{self.key!r}]"


@dataclasses.dataclass(frozen=True)
class GetAttrKey:
    """Key-path entry for attribute ``name`` (namedtuples and dataclasses)."""

    name: str

    def __str__(self) -> str:
        return f".{self.name}"


@dataclasses.dataclass(frozen=True)
class FlattenedIndexKey:
    """Key-path entry for the ``key``-th child of a node registered without keys."""

    key: int

    def __str__(self) -> str:
        return f"[{self.key!r}]"


KeyPath = tuple[Any, ...]


def keystr(path: KeyPath) -> str:
    """Render a key path as a string, e.g. ``"['params'][0].weight"`` ('' for the root)."""
    return "".join(str(k) for k in path)


# ----------------------------------------------------------------------------- registry


class _NodeHandler:
    """How to take apart and rebuild one node type.

    ``kind`` selects the repr style: "tuple", "list", "none", "dict", "OrderedDict",
    "defaultdict", "namedtuple" or "custom".
    """

    __slots__ = ("flatten", "flatten_with_keys", "kind", "node_type", "unflatten")

    def __init__(
        self,
        node_type: type,
        kind: str,
        flatten: FlattenFn,
        unflatten: UnflattenFn,
        flatten_with_keys: FlattenWithKeysFn | None = None,
    ) -> None:
        self.node_type = node_type
        self.kind = kind
        self.flatten = flatten
        self.unflatten = unflatten
        self.flatten_with_keys = flatten_with_keys or functools.partial(_index_keys, flatten)


def _index_keys(flatten: FlattenFn, x: Any) -> tuple[list[tuple[Any, Any]], Any]:
    children, aux = flatten(x)
    return [(FlattenedIndexKey(i), c) for i, c in enumerate(children)], aux


def _sequence_keys(x: Sequence) -> tuple[list[tuple[Any, Any]], None]:
    return [(SequenceKey(i), c) for i, c in enumerate(x)], None


def _sorted_keys(d: dict) -> tuple:
    try:
        return tuple(sorted(d))
    except TypeError as e:
        msg = f"pytree dict keys must be mutually sortable, got {list(d)!r}: {e}"
        raise BluTypeError(with_user_line(msg)) from None


def _dict_handler(node_type: type, kind: str) -> _NodeHandler:
    """Handler for dict-likes; aux is the key tuple, plus the factory for defaultdict."""
    is_default = node_type is collections.defaultdict
    get_keys = tuple if node_type is collections.OrderedDict else _sorted_keys

    def flatten(d: dict) -> tuple[list[Any], Any]:
        keys = get_keys(d)
        return [d[k] for k in keys], ((d.default_factory, keys) if is_default else keys)

    def flatten_with_keys(d: dict) -> tuple[list[tuple[Any, Any]], Any]:
        children, aux = flatten(d)
        return [(DictKey(k), c) for k, c in zip(aux[1] if is_default else aux, children)], aux

    def unflatten(aux: Any, children: Sequence[Any]) -> dict:
        if is_default:
            return collections.defaultdict(aux[0], zip(aux[1], children))
        return node_type(zip(aux, children))

    return _NodeHandler(node_type, kind, flatten, unflatten, flatten_with_keys)


def _namedtuple_handler(cls: type) -> _NodeHandler:
    fields = cls._fields  # type: ignore[attr-defined]
    return _NodeHandler(
        cls,
        "namedtuple",
        lambda x: (x, None),
        lambda _, children: cls(*children),
        lambda x: ([(GetAttrKey(f), c) for f, c in zip(fields, x)], None),
    )


def _identity_flatten(x: Any) -> tuple[Any, None]:
    return x, None


_registry: dict[type, _NodeHandler] = {
    tuple: _NodeHandler(tuple, "tuple", _identity_flatten, lambda _, c: tuple(c), _sequence_keys),
    list: _NodeHandler(list, "list", _identity_flatten, lambda _, c: list(c), _sequence_keys),
    type(None): _NodeHandler(type(None), "none", lambda _: ((), None), lambda _, c: None),
    dict: _dict_handler(dict, "dict"),
    collections.OrderedDict: _dict_handler(collections.OrderedDict, "OrderedDict"),
    collections.defaultdict: _dict_handler(collections.defaultdict, "defaultdict"),
}
# type -> handler, or None for leaf types; filled lazily, cleared on every registration.
_lookup_cache: dict[type, _NodeHandler | None] = {}
_MISSING: Any = object()


def _lookup(t: type) -> _NodeHandler | None:
    """The handler of node type ``t``, or None if values of type ``t`` are leaves."""
    h = _lookup_cache.get(t, _MISSING)
    if h is _MISSING:
        h = _registry.get(t)
        if h is None and issubclass(t, tuple) and hasattr(t, "_fields"):
            h = _namedtuple_handler(t)
        _lookup_cache[t] = h
    return h


def _register(handler: _NodeHandler) -> None:
    cls = handler.node_type
    if not isinstance(cls, type):
        raise BluTypeError(with_user_line(f"pytree node type must be a class, got {cls!r}"))
    if cls in _registry:
        msg = f"pytree node type {cls.__qualname__} is already registered"
        raise BluValueError(with_user_line(msg))
    _registry[cls] = handler
    _lookup_cache.clear()


def register_pytree_node(cls: type, flatten_fn: FlattenFn, unflatten_fn: UnflattenFn) -> None:
    """Register ``cls`` as a pytree node type.

    Args:
        cls: The node type (matched exactly, not by subclass).
        flatten_fn: ``obj -> (children, aux_data)``; aux_data must be hashable and comparable.
        unflatten_fn: ``(aux_data, children) -> obj``; children is a tuple.

    Raises:
        BluValueError: If ``cls`` is already registered.
    """
    _register(_NodeHandler(cls, "custom", flatten_fn, lambda a, c: unflatten_fn(a, tuple(c))))


def register_pytree_with_keys(
    cls: type,
    flatten_with_keys_fn: FlattenWithKeysFn,
    unflatten_fn: UnflattenFn,
    flatten_fn: FlattenFn | None = None,
) -> None:
    """Register ``cls`` as a pytree node type whose children carry key-path entries.

    Args:
        cls: The node type.
        flatten_with_keys_fn: ``obj -> (iterable of (key_entry, child), aux_data)``.
        unflatten_fn: ``(aux_data, children) -> obj``; children is a tuple.
        flatten_fn: Optional faster ``obj -> (children, aux_data)``; derived if omitted.

    Raises:
        BluValueError: If ``cls`` is already registered.
    """
    if flatten_fn is None:

        def flatten_fn(x: Any) -> tuple[list[Any], Any]:
            pairs, aux = flatten_with_keys_fn(x)
            return [c for _, c in pairs], aux

    def unflatten(aux: Any, children: Sequence[Any]) -> Any:
        return unflatten_fn(aux, tuple(children))

    _register(_NodeHandler(cls, "custom", flatten_fn, unflatten, flatten_with_keys_fn))


def register_pytree_node_class(cls: type) -> type:
    """Class decorator registering a class that defines its own flattening.

    The class needs ``tree_flatten(self) -> (children, aux_data)`` and a classmethod
    ``tree_unflatten(cls, aux_data, children) -> obj``.
    """
    register_pytree_node(cls, lambda x: x.tree_flatten(), cls.tree_unflatten)  # type: ignore
    return cls


def register_dataclass(
    cls: type | None = None,
    *,
    data_fields: Sequence[str] | None = None,
    meta_fields: Sequence[str] | None = None,
) -> Any:
    """Register a dataclass as a pytree node; usable as ``@register_dataclass`` or called.

    Data fields are the children; meta fields go into the treedef's aux data and must be
    hashable. For a ``dataclasses.dataclass`` an omitted list is inferred from the
    ``init=True`` fields: a field is meta if listed in ``meta_fields`` or declared with
    ``dataclasses.field(metadata={"static": True})``, data otherwise. Instances are rebuilt
    with ``cls(**fields)``.

    Args:
        cls: The class; omit it to get a decorator.
        data_fields: Names of the child fields.
        meta_fields: Names of the static fields.

    Returns:
        ``cls``, or a decorator when ``cls`` is None.

    Raises:
        BluValueError: If the fields do not cover each init field exactly once, or ``cls``
            is already registered.
        BluTypeError: If ``cls`` is not a dataclass and a field list is missing.
    """
    if cls is None:
        return functools.partial(
            register_dataclass, data_fields=data_fields, meta_fields=meta_fields
        )
    if dataclasses.is_dataclass(cls):
        init = [f for f in dataclasses.fields(cls) if f.init]
        names = [f.name for f in init]
        if meta_fields is None:
            given = set(data_fields or ())
            meta_fields = [f.name for f in init if f.metadata.get("static") and f.name not in given]
        if data_fields is None:
            data_fields = [n for n in names if n not in set(meta_fields)]
        if sorted([*data_fields, *meta_fields]) != sorted(names):
            msg = (
                f"register_dataclass({cls.__qualname__}): data_fields {list(data_fields)} and "
                f"meta_fields {list(meta_fields)} must list each init field {names} exactly once"
            )
            raise BluValueError(with_user_line(msg))
    elif data_fields is None or meta_fields is None:
        msg = f"register_dataclass({cls!r}): a non-dataclass needs data_fields and meta_fields"
        raise BluTypeError(with_user_line(msg))
    data, meta = tuple(data_fields), tuple(meta_fields)

    def flatten(x: Any) -> tuple[list[Any], tuple]:
        return [getattr(x, n) for n in data], tuple([getattr(x, n) for n in meta])

    def flatten_with_keys(x: Any) -> tuple[list[tuple[Any, Any]], tuple]:
        children, aux = flatten(x)
        return [(GetAttrKey(n), c) for n, c in zip(data, children)], aux

    def unflatten(aux: tuple, children: Sequence[Any]) -> Any:
        return cls(**dict(zip(data, children)), **dict(zip(meta, aux)))

    _register(_NodeHandler(cls, "custom", flatten, unflatten, flatten_with_keys))
    return cls


# ----------------------------------------------------------------------------- PyTreeDef


def _aux_equal(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except (TypeError, ValueError):  # e.g. ambiguous truth value of an array comparison
        return False


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
        "_children",
        "_handler",
        "_hash",
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
        return _unflatten(self, iter(leaves))

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


def _unflatten(td: PyTreeDef, leaves: Iterator[Any]) -> Any:
    h = td._handler
    if h is None:
        return next(leaves)
    return h.unflatten(td._aux, [next(leaves) if c._handler is None else _unflatten(c, leaves)
                                 for c in td._children])  # fmt: skip


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


def _same(td: PyTreeDef, x: Any, leaves: list[Any]) -> bool:
    """Append ``x``'s leaves to ``leaves`` if ``x`` has exactly the structure ``td`` (the same
    node types, dict keys and node data, and leaves where ``td`` has leaves); else False."""
    h = td._handler
    if h is None:
        if _lookup_cache.get(type(x), _MISSING) is not None:  # a node (or a type not seen yet)
            return False
        leaves.append(x)
        return True
    if type(x) is not td._node_type:
        return False
    kids = td._children
    kind = h.kind
    if kind == "dict":  # aux: the sorted keys; the same number of them, each present
        if len(x) != len(kids):
            return False
        try:
            children = [x[k] for k in td._aux]
        except (KeyError, TypeError):
            return False
    elif kind in ("tuple", "list"):
        if len(x) != len(kids):
            return False
        children = x
    else:
        children, aux = h.flatten(x)
        children = list(children)
        if len(children) != len(kids) or not _aux_equal(aux, td._aux):
            return False
    for c, ctd in zip(children, kids):
        if ctd._handler is None and _lookup_cache.get(type(c), _MISSING) is None:
            leaves.append(c)  # (a leaf, inline: most children are)
        elif not _same(ctd, c, leaves):
            return False
    return True


def tree_flatten_like(tree: Any, treedef: PyTreeDef) -> tuple[list[Any], PyTreeDef]:
    """``tree_flatten(tree)``, faster when ``tree`` has the structure ``treedef`` (a training
    step's state passed back on every call): the walk follows ``treedef`` (no key sorting, no
    new treedef) and falls back to a full flatten at the first difference."""
    leaves: list[Any] = []
    if _same(treedef, tree, leaves):
        return leaves, treedef
    return tree_flatten(tree)


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
