"""The pytree node registry: which types are nodes (tuple, list, dict, None, namedtuples,
``OrderedDict``, ``defaultdict`` and registered classes), how each is taken apart and rebuilt
(``_NodeHandler``), and the keys that name a node's children in key paths (``SequenceKey``,
``DictKey``, ``GetAttrKey``, ``FlattenedIndexKey``; ``keystr``).

Flattening, ``PyTreeDef`` and the ``tree_*`` functions are in ``blu.core.pytree``, which
re-exports the public names here.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Callable, Hashable, Iterable, Sequence
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


def _simple_entry(k: Any) -> str:
    for cls, field in ((SequenceKey, "idx"), (DictKey, "key"), (GetAttrKey, "name"),
                       (FlattenedIndexKey, "key")):  # fmt: skip
        if isinstance(k, cls):
            return str(getattr(k, field))
    return str(k)


def keystr(path: KeyPath, *, simple: bool = False, separator: str = "") -> str:
    """Render a key path as a string, e.g. ``"['params'][0].weight"`` ('' for the root), as
    ``jax.tree_util.keystr``: ``simple=True`` writes each entry's bare key or index
    (``params``, ``0``, ``weight``), joined by ``separator`` (e.g. ``"/"``)."""
    return separator.join(_simple_entry(k) if simple else str(k) for k in path)


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
