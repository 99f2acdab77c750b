"""blu.tree_util's one-level flattening, node predicate, static registration, prefix
broadcasting, associative reduction and tuple treedefs, against hand-written expectations
(JAX's ``jax.tree_util`` semantics)."""

from __future__ import annotations

import collections
import dataclasses
import pickle
import typing
from typing import NamedTuple

import pytest

import blu.tree_util as tu
from blu.core.errors import BluError


class Point(NamedTuple):
    x: object
    y: object


class Box:
    """A registered node with two children and aux data ``tag``."""

    def __init__(self, a, b, tag="t"):
        self.a, self.b, self.tag = a, b, tag

    def __eq__(self, other):
        return type(other) is Box and (self.a, self.b, self.tag) == (other.a, other.b, other.tag)


tu.register_pytree_with_keys(
    Box,
    lambda bx: (((tu.GetAttrKey("a"), bx.a), (tu.GetAttrKey("b"), bx.b)), bx.tag),
    lambda tag, ch: Box(ch[0], ch[1], tag),
)


# ---- flatten_one_level, flatten_one_level_with_keys, is_tree_node -------------------------------


def test_flatten_one_level():
    assert tu.flatten_one_level({"b": {"c": 3}, "a": [1, 2]}) == (([1, 2], {"c": 3}), ("a", "b"))
    assert tu.flatten_one_level((1, (2, 3))) == ((1, (2, 3)), None)
    assert tu.flatten_one_level([None, 4]) == ((None, 4), None)
    assert tu.flatten_one_level(None) == ((), None)
    assert tu.flatten_one_level(Point(5, [6])) == ((5, [6]), None)
    assert tu.flatten_one_level(Box(1, (2,), tag="k")) == ((1, (2,)), "k")
    od = collections.OrderedDict([("z", 1), ("a", 2)])
    assert tu.flatten_one_level(od) == ((1, 2), ("z", "a"))  # insertion order kept


def test_flatten_one_level_with_keys():
    pairs, aux = tu.flatten_one_level_with_keys({"b": 2, "a": (1,)})
    assert pairs == ((tu.DictKey("a"), (1,)), (tu.DictKey("b"), 2)) and aux == ("a", "b")
    pairs, aux = tu.flatten_one_level_with_keys([7, None])
    assert pairs == ((tu.SequenceKey(0), 7), (tu.SequenceKey(1), None)) and aux is None
    pairs, _ = tu.flatten_one_level_with_keys(Point(1, 2))
    assert pairs == ((tu.GetAttrKey("x"), 1), (tu.GetAttrKey("y"), 2))
    pairs, aux = tu.flatten_one_level_with_keys(Box(3, 4, tag="q"))
    assert pairs == ((tu.GetAttrKey("a"), 3), (tu.GetAttrKey("b"), 4)) and aux == "q"
    assert tu.flatten_one_level_with_keys(None) == ((), None)


@pytest.mark.parametrize("fn", [tu.flatten_one_level, tu.flatten_one_level_with_keys])
@pytest.mark.parametrize("leaf", [3, 2.5, "s", object()])
def test_flatten_one_level_of_a_leaf_is_a_value_error(fn, leaf):
    with pytest.raises(BluError, match="can't tree-flatten type") as info:
        fn(leaf)
    assert isinstance(info.value, ValueError) and type(leaf).__name__ in str(info.value)


def test_is_tree_node():
    for typ in (tuple, list, dict, type(None), collections.OrderedDict, Point, Box):
        assert tu.is_tree_node(typ), typ
    for typ in (int, float, str, object, set):
        assert not tu.is_tree_node(typ), typ
    with pytest.raises(BluError, match="expects a type") as info:
        tu.is_tree_node((1, 2))
    assert isinstance(info.value, TypeError)


# ---- register_static ----------------------------------------------------------------------------


def test_register_static():
    @tu.register_static
    class Tag:
        def __init__(self, name):
            self.name = name

        def __eq__(self, other):
            return type(other) is type(self) and other.name == self.name

        def __hash__(self):
            return hash(self.name)

    tag = Tag("w")
    tree = {"a": 1, "t": tag, "b": (2, tag)}
    leaves, treedef = tu.tree_flatten(tree)
    assert leaves == [1, 2]  # a static value has no leaves
    assert tu.flatten_one_level(tag) == ((), tag)
    out = tu.tree_map(lambda x: 10 * x, tree)
    assert out == {"a": 10, "t": tag, "b": (20, tag)} and out["t"] is tag
    assert tu.tree_structure({"t": Tag("w")}) == tu.tree_structure({"t": Tag("w")})
    assert tu.tree_structure({"t": Tag("w")}) != tu.tree_structure({"t": Tag("v")})
    assert tu.tree_unflatten(treedef, [5, 6])["t"] is tag
    with pytest.raises(BluError, match="already registered"):
        tu.register_static(Tag)
    with pytest.raises(BluError, match="must be a class") as info:
        tu.register_static(tag)
    assert isinstance(info.value, TypeError)


# ---- tree_broadcast -----------------------------------------------------------------------------


def test_tree_broadcast():
    assert tu.tree_broadcast(1, {"a": 2, "b": (3, 4)}) == {"a": 1, "b": (1, 1)}
    assert tu.tree_broadcast((1, 2), ((3, 4), {"a": 5})) == ((1, 1), {"a": 2})
    full = {"w": [0, 0, 0], "b": Point(0, None), "c": Box(0, (0, 0))}
    prefix = {"w": "W", "b": Point("x", None), "c": "C"}
    assert tu.tree_broadcast(prefix, full) == {
        "w": ["W", "W", "W"],
        "b": Point("x", None),
        "c": Box("C", ("C", "C")),
    }
    assert tu.tree_broadcast(7, None) is None  # a subtree without leaves takes none
    assert tu.tree_broadcast([5], [()]) == [()]
    # is_leaf stops the prefix's flattening: the tuple is one prefix leaf
    got = tu.tree_broadcast((1, 2), [[0, 0], [0]], is_leaf=lambda x: isinstance(x, tuple))
    assert got == [[(1, 2), (1, 2)], [(1, 2)]]


@pytest.mark.parametrize(
    "prefix, full, where",
    [
        ({"a": 1, "b": 2}, {"a": 1, "c": 2}, "<root>"),
        ((1, 2), (1, 2, 3), "<root>"),
        ([1, (2, 3)], [1, 2], "[1]"),
        ({"a": [1]}, {"a": (1,)}, "['a']"),
    ],
)
def test_tree_broadcast_not_a_prefix(prefix, full, where):
    with pytest.raises(BluError, match="tree_broadcast") as info:
        tu.tree_broadcast(prefix, full)
    assert isinstance(info.value, ValueError) and where in str(info.value)


# ---- tree_reduce_associative --------------------------------------------------------------------


def test_tree_reduce_associative_balanced_order():
    def op(a, b):
        return f"({a}{b})"

    tree = {"x": ["a", "b"], "y": ("c", {"d": "d", "e": "e"})}  # leaves a b c d e
    assert tu.tree_reduce_associative(op, tree) == "((ab)(c(de)))"
    assert tu.tree_reduce_associative(op, ["a", "b", "c", "d"]) == "((ab)(cd))"
    assert tu.tree_reduce_associative(op, Point("a", Box("b", "c"))) == "(a(bc))"
    assert tu.tree_reduce_associative(op, ("only",)) == "only"  # no call for one leaf
    assert tu.tree_reduce_associative(op, [None, "z"], identity="I") == "z"
    assert tu.tree_reduce_associative(op, {"a": None, "b": ()}, identity="I") == "I"
    total = tu.tree_reduce_associative(
        lambda a, b: a + b, [(1, 2), (3, 4)], is_leaf=lambda x: isinstance(x, tuple)
    )
    assert total == (1, 2, 3, 4)  # the tuples are leaves, concatenated
    assert tu.tree_reduce_associative(lambda a, b: a + b, list(range(1, 101))) == 5050


def test_tree_reduce_associative_empty_without_identity():
    with pytest.raises(BluError, match="identity") as info:
        tu.tree_reduce_associative(lambda a, b: a + b, {"a": None})
    assert isinstance(info.value, TypeError)


# ---- treedef_tuple ------------------------------------------------------------------------------


def test_treedef_tuple():
    x, y, z = [1, (2, 3)], {"b": None, "a": Point(4, 5)}, Box(6, 7, tag="k")
    parts = [tu.tree_structure(t) for t in (x, y, z)]
    td = tu.treedef_tuple(parts)
    assert td == tu.tree_structure((x, y, z)) and hash(td) == hash(tu.tree_structure((x, y, z)))
    assert td.num_leaves == 3 + 2 + 2 and tu.treedef_children(td) == parts
    assert td.unflatten(range(7)) == ([0, (1, 2)], {"a": Point(3, 4), "b": None}, Box(5, 6, "k"))
    assert tu.treedef_tuple(iter(parts[:1])) == tu.tree_structure((x,))  # any iterable
    empty = tu.treedef_tuple([])
    assert empty == tu.tree_structure(()) and empty.num_leaves == 0
    leaf = tu.tree_structure(1.0)
    assert tu.treedef_tuple([leaf, leaf]).unflatten(["p", "q"]) == ("p", "q")


def test_treedef_tuple_of_a_non_treedef():
    with pytest.raises(BluError, match=r"treedefs\[1\] is a list") as info:
        tu.treedef_tuple([tu.tree_structure(1), [1, 2]])
    assert isinstance(info.value, TypeError)


# ---- KeyEntry -----------------------------------------------------------------------------------


def test_key_entry_is_a_type_variable():
    assert isinstance(tu.KeyEntry, typing.TypeVar) and tu.KeyEntry.__name__ == "KeyEntry"
    assert typing.get_args(tuple[tu.KeyEntry, ...]) == (tu.KeyEntry, Ellipsis)

    def first_key(path: tuple[tu.KeyEntry, ...]) -> tu.KeyEntry:
        return path[0]

    (path, _), *_ = tu.tree_leaves_with_path({"a": [1]})
    assert first_key(path) == tu.DictKey("a")


# ---- default_registry ---------------------------------------------------------------------------


def test_default_registry():
    reg = tu.default_registry
    tree = {"b": [1, None], "a": Point(2, 3)}
    leaves, treedef = reg.flatten(tree)
    assert leaves == [2, 3, 1] and treedef == tu.tree_structure(tree)
    leaves, _ = reg.flatten(tree, lambda x: isinstance(x, Point))
    assert leaves == [Point(2, 3), 1]
    pairs, _ = reg.flatten_with_path({"k": (5,)})
    assert pairs == [((tu.DictKey("k"), tu.SequenceKey(0)), 5)]
    assert reg.flatten_one_level(tree) == ((Point(2, 3), [1, None]), ("a", "b"))
    assert reg.flatten_one_level(4) is None and reg.flatten_one_level_with_keys("s") is None
    assert reg.flatten_one_level_with_keys([9]) == (((tu.SequenceKey(0), 9),), None)
    assert reg.is_node(dict) and reg.is_node(Box) and not reg.is_node(int)
    assert pickle.loads(pickle.dumps(reg)) is reg


def test_default_registry_register_node():
    class Pair:
        def __init__(self, l, r):
            self.l, self.r = l, r

    class KeyedPair(Pair):
        pass

    tu.default_registry.register_node(Pair, lambda p: ((p.l, p.r), "P"), lambda a, c: Pair(*c))
    assert tu.tree_leaves([Pair(1, (2, 3))]) == [1, 2, 3]  # a node for the tree_* functions too
    tu.default_registry.register_node(
        KeyedPair,
        lambda p: ((p.l, p.r), None),
        lambda a, c: KeyedPair(*c),
        lambda p: (((tu.GetAttrKey("l"), p.l), (tu.GetAttrKey("r"), p.r)), None),
    )
    (path, leaf), _ = tu.tree_leaves_with_path(KeyedPair(7, 8))
    assert tu.keystr(path) == ".l" and leaf == 7
    with pytest.raises(BluError, match="already registered"):
        tu.default_registry.register_node(Pair, lambda p: ((), None), lambda a, c: Pair(0, 0))

    @dataclasses.dataclass
    class Layer:
        w: object
        name: str

    tu.default_registry.register_dataclass_node(Layer, ["w"], ["name"])
    leaves, treedef = tu.tree_flatten(Layer(w=(1, 2), name="fc"))
    assert leaves == [1, 2] and tu.tree_unflatten(treedef, [3, 4]) == Layer((3, 4), "fc")
