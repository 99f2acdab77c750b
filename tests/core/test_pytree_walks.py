"""The walks of a treedef written out once (``blu/core/pytree_walks.py``): trees walked and
built in parts (each part at most ``_INLINE`` nodes), every difference still falling back to a
full flatten, and leaf types registered as nodes after a walk was made."""

from __future__ import annotations

import collections
from typing import Any, NamedTuple

from blu.core import pytree, pytree_walks
from blu.core.pytree import register_pytree_node, tree_flatten, tree_leaves, tree_structure


class Point(NamedTuple):
    x: Any
    y: Any


def test_flatten_like_of_a_tree_walked_in_parts(monkeypatch):
    # a walk writes out so many nodes and calls the walks of larger subtrees (a model's layers:
    # one walk, shared); a difference inside any part still falls back to a full flatten
    monkeypatch.setattr(pytree_walks, "_INLINE", 8)

    def layer(i):
        return {"w_part": i, "b_part": (i, None), "c_part": {"z_part": i}}

    def tree(layers, mixed):
        return {"layers_part": layers, "mixed_part": mixed, "n_part": 0}

    mixed = [layer(0), {"q_part": [1, 2]}, 3, {"r_part": (4,)}, layer(1), 5]
    base = tree([layer(i) for i in range(20)], mixed)
    guide = tree_structure(base)
    deep = [layer(i) for i in range(20)]
    variants = [
        base,
        tree([*deep[:15], {**layer(15), "c_part": {"y_part": 15}}, *deep[16:]], mixed),
        tree([*deep[:19], {**layer(19), "w_part": [19]}], mixed),  # a node for a leaf
        tree(deep[:19], mixed),  # one layer fewer
        tree(deep, [*mixed[:4], {**layer(1), "b_part": (1, 2)}, 5]),  # a leaf for None
        tree(deep, [*mixed[:1], {"q_part": (1, 2)}, *mixed[2:]]),  # a tuple for a list
    ]
    for v in variants:
        leaves, td = pytree.tree_flatten_like(v, guide)
        want_leaves, want_td = tree_flatten(v)
        assert leaves == want_leaves and td == want_td
        assert (td is guide) == (want_td == guide)


def test_unflatten_built_in_parts(monkeypatch):
    # a build writes out so many nodes and nests so deep, and calls the builds of the other
    # subtrees (a list of layers: one build, shared, each on its slice of the leaves); the
    # trees' structures are new (keys of their own): their first build goes through the handlers
    monkeypatch.setattr(pytree_walks, "_INLINE", 8)
    monkeypatch.setattr(pytree_walks, "_DEPTH", 3)

    def layer(i):
        return {"w_build": i, "b_build": (i, None, []), "c_build": {"z_build": Point(i, ())}}

    deep: Any = 0
    for i in range(10):
        deep = [deep, (i,)] if i % 2 else {"d_build": deep, "e_build": i}
    trees = [
        {"layers_build": [layer(i) for i in range(20)], "n_build": 0},
        ([layer(0), {"q_build": [1, 2]}, 3, collections.OrderedDict(b=4, a=5)] * 4, None),
        (tuple(layer(i) for i in range(12)), collections.defaultdict(list, {"k": [6, 7]})),
        deep,
        {"empty": ({}, (), [], None)},
    ]
    for tree in trees:
        leaves, td = tree_flatten(tree)
        for _ in range(2):  # (the first build through the handlers, then written out)
            rebuilt = td.unflatten(leaves)
            assert rebuilt == tree and type(rebuilt) is type(tree)
            assert tree_structure(rebuilt) is td and tree_leaves(rebuilt) == leaves


def test_flatten_like_after_a_leaf_type_is_registered():
    # the leaves' types are checked once per type after the walk: a type registered as a node
    # since the treedef was made is a node there now
    class Box:
        def __init__(self, v):
            self.v = v

    tree = {"a": Box(1), "b": [Box(2), 3]}
    guide = tree_structure(tree)
    assert pytree.tree_flatten_like(tree, guide)[1] is guide
    register_pytree_node(Box, lambda b: ((b.v,), None), lambda _, c: Box(*c))
    leaves, td = pytree.tree_flatten_like(tree, guide)
    assert leaves == [1, 2, 3] and td != guide and td == tree_structure(tree)


def test_keystr_simple_and_separator():
    # JAX's keystr(keys, *, simple=False, separator=""): both raised a raw TypeError
    import collections

    from blu import tree_util as tu

    nt = collections.namedtuple("NT", "w b")
    paths = [p for p, _ in tu.tree_flatten_with_path({"layer": [nt(1, (2,))], "x": 4.0})[0]]
    assert [tu.keystr(p) for p in paths] == ["['layer'][0].w", "['layer'][0].b[0]", "['x']"]
    assert [tu.keystr(p, simple=True, separator="/") for p in paths] == [
        "layer/0/w",
        "layer/0/b/0",
        "x",
    ]
    assert [tu.keystr(p, separator=" ") for p in paths][0] == "['layer'] [0] .w"
    assert tu.keystr((), simple=True, separator="/") == ""
