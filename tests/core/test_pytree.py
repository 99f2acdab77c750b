"""Tests for blu.core.pytree."""

from __future__ import annotations

import collections
import copy
import dataclasses
import operator
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from blu.core import pytree
from blu.core.errors import BluError, BluTypeError, BluValueError
from blu.core.pytree import (
    DictKey,
    FlattenedIndexKey,
    GetAttrKey,
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


class Point(NamedTuple):
    x: Any
    y: Any


# ----------------------------------------------------------------------------- references
# Hand-written recursive references, independent of the implementation under test.


def ref_leaves(t: Any) -> list[Any]:
    if t is None:
        return []
    if isinstance(t, (tuple, list)):  # includes namedtuples
        return [leaf for c in t for leaf in ref_leaves(c)]
    if isinstance(t, dict):
        return [leaf for k in sorted(t) for leaf in ref_leaves(t[k])]
    return [t]


def ref_num_nodes(t: Any) -> int:
    if isinstance(t, (tuple, list)):
        return 1 + sum(ref_num_nodes(c) for c in t)
    if isinstance(t, dict):
        return 1 + sum(ref_num_nodes(v) for v in t.values())
    return 1  # None or leaf


def ref_map(f: Any, t: Any, *rest: Any) -> Any:
    if t is None:
        return None
    if isinstance(t, Point):
        return Point(*(ref_map(f, *cs) for cs in zip(t, *rest)))
    if isinstance(t, tuple):
        return tuple(ref_map(f, *cs) for cs in zip(t, *rest))
    if isinstance(t, list):
        return [ref_map(f, *cs) for cs in zip(t, *rest)]
    if isinstance(t, dict):
        return {k: ref_map(f, t[k], *(r[k] for r in rest)) for k in t}
    return f(t, *rest)


def strict_equal(a: Any, b: Any) -> bool:
    """Equality that also checks container types (Point(1, 2) != (1, 2) here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(strict_equal(a[k], b[k]) for k in a)
    return a == b


def get_by_path(t: Any, path: tuple) -> Any:
    for k in path:
        if isinstance(k, SequenceKey):
            t = t[k.idx]
        elif isinstance(k, DictKey):
            t = t[k.key]
        elif isinstance(k, GetAttrKey):
            t = getattr(t, k.name)
        else:
            raise TypeError(f"unexpected key {k!r}")
    return t


trees = st.recursive(
    st.integers() | st.none(),
    lambda children: (
        st.lists(children, max_size=4).map(tuple)
        | st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=3), children, max_size=4)
        | st.builds(Point, children, children)
    ),
    max_leaves=20,
)


# ----------------------------------------------------------------------------- properties


@given(trees)
def test_flatten_roundtrip(tree):
    leaves, treedef = tree_flatten(tree)
    assert leaves == ref_leaves(tree)
    assert treedef.num_leaves == len(ref_leaves(tree))
    assert treedef.num_nodes == ref_num_nodes(tree)
    assert strict_equal(tree_unflatten(treedef, leaves), tree)
    assert tree_leaves(tree) == leaves
    assert tree_structure(tree) == treedef


@given(trees)
def test_tree_map_matches_reference(tree):
    def f(x):
        return 3 * x - 1

    assert strict_equal(tree_map(f, tree), ref_map(f, tree))
    negated = ref_map(operator.neg, tree)
    assert strict_equal(tree_map(operator.sub, tree, negated), ref_map(operator.sub, tree, negated))


@given(trees)
def test_treedef_equality_ignores_leaves(tree):
    other = ref_map(lambda x: x + 1, tree)
    td = tree_structure(tree)
    assert td == tree_structure(other)
    assert hash(td) == hash(tree_structure(other))
    assert td != tree_structure([tree])


@given(trees)
def test_paths_point_at_leaves(tree):
    pairs, treedef = tree_flatten_with_path(tree)
    assert [leaf for _, leaf in pairs] == ref_leaves(tree)
    assert treedef == tree_structure(tree)
    for path, leaf in pairs:
        assert get_by_path(tree, path) == leaf
    paths = [p for p, _ in pairs]
    assert len(set(paths)) == len(paths)


# ----------------------------------------------------------------------------- structure


@given(trees, trees)
def test_flatten_like_equals_flatten(tree, other):
    # guided by a treedef (its own, or another tree's): the leaves and treedef of a full flatten
    for guide in (tree_structure(tree), tree_structure(other)):
        leaves, td = pytree.tree_flatten_like(tree, guide)
        want_leaves, want_td = tree_flatten(tree)
        assert leaves == want_leaves == ref_leaves(tree)
        assert td == want_td


def test_flatten_like_falls_back_on_every_difference():
    base = {"a": [1, (2, None)], "b": {"c": 3}, "p": Point(4, 5)}
    guide = tree_structure(base)
    variants = [
        {"a": [1, (2, None)], "b": {"c": 3}, "p": Point(4, 5)},  # the same
        {"a": [1, (2, None)], "b": {"d": 3}, "p": Point(4, 5)},  # another key
        {"a": [1, (2, None)], "b": {"c": 3, "d": 4}, "p": Point(4, 5)},  # one key more
        {"a": [1, (2, None), 6], "b": {"c": 3}, "p": Point(4, 5)},  # a longer list
        {"a": (1, (2, None)), "b": {"c": 3}, "p": Point(4, 5)},  # a tuple for a list
        {"a": [1, (2, 7)], "b": {"c": 3}, "p": Point(4, 5)},  # a leaf for None
        {"a": [[1], (2, None)], "b": {"c": 3}, "p": Point(4, 5)},  # a node for a leaf
        {"a": [1, (2, None)], "b": collections.OrderedDict(c=3), "p": Point(4, 5)},
        {"a": [1, (2, None)], "b": {"c": 3}, "p": (4, 5)},  # a tuple for a custom node
        {"a": [1, (2, None)], "b": {"c": [3]}, "p": Point(4, 5)},  # a node in a leaves' dict
        {"a": [1, (2, None)], "b": {"c": None}, "p": Point(4, 5)},  # None in a leaves' dict
        {"a": [1, (2, None)], "b": {}, "p": Point(4, 5)},  # no keys
        {"a": [1, (2, None)], "b": {"c": 3}, "p": Point((4,), 5)},  # a node in a custom node
        {"a": [1, (2, None)], "b": {"c": 3}, "p": Point(4, 5), "q": 6},  # one more at the root
    ]
    for v in variants:
        leaves, td = pytree.tree_flatten_like(v, guide)
        want_leaves, want_td = tree_flatten(v)
        assert leaves == want_leaves and td == want_td
        assert (td is guide) == (want_td == guide)


def test_repr():
    assert repr(tree_structure((1, {"a": 2, "b": None}))) == "PyTreeDef((*, {'a': *, 'b': None}))"
    assert repr(tree_structure([(1,), Point(2, 3)])) == "PyTreeDef([(*,), Point(x=*, y=*)])"
    assert repr(tree_structure(5)) == "PyTreeDef(*)"


def test_treedef_distinguishes_node_types_and_keys():
    assert tree_structure((1, 2)) != tree_structure([1, 2])
    assert tree_structure((1, 2)) != tree_structure(Point(1, 2))
    assert tree_structure({"a": 1}) != tree_structure({"b": 1})
    assert tree_structure(None) != tree_structure(1)
    assert tree_structure({"a": 1}) != tree_structure(collections.OrderedDict(a=1))
    assert tree_structure([1, (2, 3)]) == tree_structure(["x", ("y", "z")])
    assert len({tree_structure((1, 2)), tree_structure((3, 4)), tree_structure([1, 2])}) == 2


def test_treedef_properties_and_children():
    td = tree_structure((1, [2, 3], None))
    assert isinstance(td, PyTreeDef)
    assert td.num_leaves == 3
    assert td.num_nodes == 6
    assert td.children() == [tree_structure(0), tree_structure([0, 0]), tree_structure(None)]
    assert td.unflatten("abc") == ("a", ["b", "c"], None)
    assert td.node_data() == (tuple, None)
    assert tree_structure(0).node_data() is None


def test_treedef_is_immutable():
    td = tree_structure((1, 2))
    with pytest.raises(AttributeError):
        td._children = ()
    assert copy.deepcopy(td) is td


def test_none_is_node_and_dict_keys_sorted():
    assert tree_leaves([None, 1, {"b": 2, "a": 3}]) == [1, 3, 2]
    assert tree_unflatten(tree_structure({"b": 0, "a": 0}), [1, 2]) == {"a": 1, "b": 2}
    assert list(tree_unflatten(tree_structure({"b": 0, "a": 0}), [1, 2])) == ["a", "b"]


def test_ordered_and_default_dict():
    od = collections.OrderedDict([("b", 1), ("a", 2)])
    leaves, td = tree_flatten(od)
    assert leaves == [1, 2]
    rebuilt = tree_unflatten(td, [3, 4])
    assert type(rebuilt) is collections.OrderedDict and list(rebuilt.items()) == [
        ("b", 3),
        ("a", 4),
    ]
    dd = collections.defaultdict(list, {"b": 1, "a": 2})
    leaves, td = tree_flatten(dd)
    assert leaves == [2, 1]
    rebuilt = tree_unflatten(td, [5, 6])
    assert type(rebuilt) is collections.defaultdict and rebuilt.default_factory is list
    assert dict(rebuilt) == {"a": 5, "b": 6}
    assert td != tree_structure(collections.defaultdict(dict, {"b": 1, "a": 2}))


def test_leaves_are_unregistered_objects():
    arr = np.arange(3)
    leaves = tree_leaves({"w": arr, "s": "str", "f": 1.5})
    assert leaves[:2] == [1.5, "str"] and leaves[2] is arr
    assert tree_leaves("abc") == ["abc"]

    class MyDict(dict):
        pass

    assert tree_leaves(MyDict(a=1)) == [MyDict(a=1)]


def test_is_leaf():
    tree = {"a": (1, 2), "b": [3, (4,)]}
    assert tree_leaves(tree, is_leaf=lambda x: isinstance(x, tuple)) == [(1, 2), 3, (4,)]
    assert tree_leaves([None, 1]) == [1]
    assert tree_leaves([None, 1], is_leaf=lambda x: x is None) == [None, 1]
    out = tree_map(
        lambda x: len(x) if isinstance(x, tuple) else -x,
        tree,
        is_leaf=lambda x: isinstance(x, tuple),
    )
    assert out == {"a": 2, "b": [-3, 1]}
    assert tree_structure(tree, is_leaf=lambda x: x is tree).num_leaves == 1


def test_tree_map_leaf_may_match_subtree():
    out = tree_map(lambda x, y: (x, y), [1, 2], [(3, 4), {"a": 5}])
    assert out == [(1, (3, 4)), (2, {"a": 5})]


def test_tree_all_reduce_is_leaf_helpers():
    assert tree_all([1, (True, {"a": 2})])
    assert not tree_all([1, (0, {"a": 2})])
    assert tree_all([None, ()])
    assert tree_reduce(operator.add, [1, (2, {"a": 3})]) == 6
    assert tree_reduce(operator.add, [], initializer=10) == 10
    assert tree_reduce(lambda a, b: a + [b], (1, 2), initializer=[]) == [1, 2]
    with pytest.raises(BluTypeError):
        tree_reduce(operator.add, [None])
    assert treedef_is_leaf(tree_structure(1))
    assert not treedef_is_leaf(tree_structure(None))
    assert not treedef_is_leaf(tree_structure([1]))
    assert all_leaves([1, "a", np.zeros(2)])
    assert not all_leaves([1, (2,)])
    assert not all_leaves([1, None])
    assert all_leaves([1, (2,)], is_leaf=lambda x: isinstance(x, tuple))


def test_tree_transpose():
    outer = tree_structure([0, 0, 0])
    inner = tree_structure((0, {"k": 0}))
    tree = [(1, {"k": 2}), (3, {"k": 4}), (5, {"k": 6})]
    assert tree_transpose(outer, inner, tree) == ([1, 3, 5], {"k": [2, 4, 6]})
    # Inner leaves may be subtrees in the input.
    out = tree_transpose(tree_structure((0, 0)), tree_structure([0, 0]), ([1, (2,)], [3, (4,)]))
    assert out == [(1, 3), ((2,), (4,))]
    with pytest.raises(BluValueError, match=r"\[1\]"):
        tree_transpose(outer, inner, [(1, {"k": 2}), (3, 4), (5, {"k": 6})])


# ----------------------------------------------------------------------------- key paths


@register_dataclass
@dataclasses.dataclass
class Linear:
    weight: Any
    bias: Any
    name: str = dataclasses.field(default="lin", metadata={"static": True})


def test_key_paths_and_keystr():
    tree = {"params": [Linear(1, 2), (3, Point(4, None))], "step": 5}
    pairs = tree_leaves_with_path(tree)
    got = [(keystr(p), leaf) for p, leaf in pairs]
    assert got == [
        ("['params'][0].weight", 1),
        ("['params'][0].bias", 2),
        ("['params'][1][0]", 3),
        ("['params'][1][1].x", 4),
        ("['step']", 5),
    ]
    assert pairs[0][0] == (DictKey("params"), SequenceKey(0), GetAttrKey("weight"))
    assert keystr(()) == ""
    assert str(FlattenedIndexKey(3)) == "[3]"


def test_tree_map_with_path():
    tree = {"a": [1, 2], "b": Point(3, 4)}
    out = tree_map_with_path(lambda p, x, y: f"{keystr(p)}={x + y}", tree, tree)
    assert out == {"a": ["['a'][0]=2", "['a'][1]=4"], "b": Point("['b'].x=6", "['b'].y=8")}


# ----------------------------------------------------------------------------- registration


def test_register_dataclass_variants():
    assert tree_leaves(Linear(1, 2, "x")) == [1, 2]
    td = tree_structure(Linear(1, 2, "x"))
    assert td != tree_structure(Linear(1, 2, "y"))
    assert td == tree_structure(Linear(7, 8, "x"))
    out = tree_map(lambda v: v * 10, Linear(1, 2, "x"))
    assert out == Linear(10, 20, "x")

    @register_dataclass(meta_fields=["act"])
    @dataclasses.dataclass(frozen=True)
    class Mlp:
        hidden: Any
        act: str

    m = Mlp(hidden=[1, 2], act="relu")
    leaves, td = tree_flatten(m)
    assert leaves == [1, 2]
    assert tree_unflatten(td, [3, 4]) == Mlp(hidden=[3, 4], act="relu")
    assert [keystr(p) for p, _ in tree_leaves_with_path(m)] == [".hidden[0]", ".hidden[1]"]

    class Plain:
        def __init__(self, a, b):
            self.a, self.b = a, b

    register_dataclass(Plain, data_fields=["a"], meta_fields=["b"])
    p = tree_map(lambda v: v + 1, Plain(1, "meta"))
    assert (p.a, p.b) == (2, "meta")


def test_register_dataclass_bad_fields():
    @dataclasses.dataclass
    class D:
        a: int
        b: int

    with pytest.raises(BluValueError, match="exactly once"):
        register_dataclass(D, data_fields=["a"], meta_fields=["c"])

    class NotDc:
        pass

    with pytest.raises(BluTypeError):
        register_dataclass(NotDc, data_fields=["a"])


def test_unhashable_node_data():
    class Holder:
        pass

    register_pytree_node(Holder, lambda h: ((), [1, 2]), lambda aux, c: Holder())
    td = tree_structure(Holder())
    assert td == tree_structure(Holder())
    with pytest.raises(BluTypeError, match="unhashable"):
        hash(td)


def test_array_node_data_compares_without_raising():
    class Masked:
        def __init__(self, mask):
            self.mask = mask

    register_pytree_node(Masked, lambda m: ((), m.mask), lambda mask, c: Masked(mask))
    mask = np.array([True, False])
    assert tree_structure(Masked(mask)) == tree_structure(Masked(mask))
    assert tree_structure(Masked(mask)) != tree_structure(Masked(np.array([False, True])))


def test_register_pytree_node_and_class():
    class Box:
        def __init__(self, items, label):
            self.items, self.label = items, label

    register_pytree_node(Box, lambda b: (b.items, b.label), lambda label, c: Box(list(c), label))
    leaves, td = tree_flatten({"b": Box([1, (2, 3)], "L")})
    assert leaves == [1, 2, 3]
    rebuilt = tree_unflatten(td, [4, 5, 6])["b"]
    assert (rebuilt.items, rebuilt.label) == ([4, (5, 6)], "L")
    assert repr(td) == "PyTreeDef({'b': CustomNode(Box['L'], [*, (*, *)])})"
    assert [keystr(p) for p, _ in tree_leaves_with_path(Box([1, 2], "L"))] == ["[0]", "[1]"]
    assert tree_flatten_with_path(Box([1], "L"))[0][0][0] == (FlattenedIndexKey(0),)

    @register_pytree_node_class
    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b

        def tree_flatten(self):
            return (self.a, self.b), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)

    out = tree_map(operator.add, Pair(1, 2), Pair(10, 20))
    assert isinstance(out, Pair) and (out.a, out.b) == (11, 22)


def test_register_with_keys():
    class Named:
        def __init__(self, **kw):
            self.kw = kw

    register_pytree_with_keys(
        Named,
        lambda n: ([(GetAttrKey(k), n.kw[k]) for k in sorted(n.kw)], tuple(sorted(n.kw))),
        lambda keys, c: Named(**dict(zip(keys, c))),
    )
    pairs = tree_leaves_with_path(Named(y=1, x=[2]))
    assert [(keystr(p), v) for p, v in pairs] == [(".x[0]", 2), (".y", 1)]
    assert tree_map(lambda v: -v, Named(a=1)).kw == {"a": -1}


def test_double_registration_raises():
    class Thing:
        pass

    register_pytree_node(Thing, lambda t: ((), None), lambda a, c: Thing())
    with pytest.raises(BluValueError, match="already registered"):
        register_pytree_node(Thing, lambda t: ((), None), lambda a, c: Thing())
    with pytest.raises(BluValueError, match="already registered"):
        register_pytree_node(tuple, lambda t: (t, None), lambda a, c: tuple(c))
    with pytest.raises(BluValueError, match="already registered"):
        register_dataclass(Linear)


# ----------------------------------------------------------------------------- errors


def test_structure_mismatch_names_path_and_types():
    with pytest.raises(BluValueError) as e:
        tree_map(operator.add, {"a": [1, (2, 3)]}, {"a": [1, [2, 3]]})
    msg = str(e.value)
    assert "['a'][1]" in msg and "tuple" in msg and "list" in msg

    with pytest.raises(BluValueError) as e:
        tree_map(operator.add, {"a": [1, {"x": 2}]}, {"a": [1, {"y": 2}]})
    assert "['a'][1]" in str(e.value) and "'x'" in str(e.value) and "'y'" in str(e.value)

    with pytest.raises(BluValueError) as e:
        tree_map(operator.add, Point(1, [1, 2]), Point(1, [1, 2, 3]))
    assert ".y" in str(e.value) and "2 children" in str(e.value) and "3 children" in str(e.value)

    with pytest.raises(BluValueError) as e:
        tree_map(operator.add, [None, 1], [5, 1])
    assert "[0]" in str(e.value) and "None" in str(e.value) and "int" in str(e.value)

    with pytest.raises(BluValueError, match="<root>"):
        tree_map(operator.add, (1,), [1])

    with pytest.raises(BluValueError, match=r"\['k'\]"):
        tree_map_with_path(lambda p, x, y: x, {"k": (1,)}, {"k": 1})


def test_wrong_leaf_count():
    td = tree_structure({"a": (1, 2), "b": 3})
    with pytest.raises(BluValueError) as e:
        tree_unflatten(td, [1, 2])
    assert "expected 3 leaves, got 2" in str(e.value)
    assert isinstance(e.value, BluError) and isinstance(e.value, ValueError)
    with pytest.raises(BluValueError, match="expected 3 leaves, got 4"):
        td.unflatten([1, 2, 3, 4])


def test_unsortable_dict_keys():
    with pytest.raises(BluTypeError, match="sortable"):
        tree_flatten({1: 1, "a": 2})


def test_flattening_a_structure_again_gives_the_same_treedef_object():
    # hash-consed treedefs: jit's cache key compares a training state's structure by identity
    a = {"w": [np.zeros(2), (1.0, None)], "b": {"c": 3}}
    b = {"b": {"c": 4}, "w": [np.ones(2), (2.0, None)]}
    ta, tb = pytree.tree_structure(a), pytree.tree_structure(b)
    assert ta is tb and ta == tb and hash(ta) == hash(tb)
    assert pytree.tree_structure({"w": [0, 0]}) is not ta  # another structure, another object
    assert pytree.tree_unflatten(tb, pytree.tree_leaves(a))["b"] == {"c": 3}
