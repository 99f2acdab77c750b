"""The walks of a ``PyTreeDef`` that run at every call of a jitted function, written out as
Python functions for it: ``gatherer`` (``pytree.leaves_like``: the leaves of a tree with that
structure) and ``builder`` (``PyTreeDef.unflatten``). Each is made once per treedef (cached on
it: treedefs are interned, so a structure flattened again gets its walks back), with the node
types, dict keys and child counts bound in as constants and no call per node. A jitted training
step walks its state and rebuilds its outputs (GPT-2's: 783 nodes, 448 leaves) at every call
while the GPU waits: the leaves' walk took 167 us with a closure per node checking each leaf,
34 us written out; the rebuild 121 us with a closure per node, 32 us written out (from the
second build of a structure on: the first goes through the handlers).

A walk writes out at most ``_INLINE`` nodes and calls the walks of larger subtrees (their own,
shared: a model's layers have one), so what is compiled stays small: a 46,664-node tree's walk
took 1.5 s to compile written out whole, 4 ms so. A built expression nests at most ``_DEPTH``
nodes (Python's parser limits nesting).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

__all__ = ["aux_equal", "builder", "gatherer"]

_INLINE = 256  # nodes a walk writes out
_DEPTH = 48  # nodes a built expression nests


def aux_equal(a: Any, b: Any) -> bool:
    """Whether two nodes' aux data are equal (False where comparing them raises)."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except (TypeError, ValueError):  # e.g. ambiguous truth value of an array comparison
        return False


def _compiled(src: str, env: dict, name: str, what: str) -> Callable:
    exec(compile(src, f"<{what}>", "exec"), env)  # noqa: S102
    return env[name]


# ----------------------------------------------------------------------------- the leaves


def gatherer(td: Any) -> Callable[[Any, list], bool]:
    """The walk of ``td`` (``(tree, out) -> bool``): appends what ``tree`` holds at the leaf
    positions to ``out``, False at the first node that differs (type, dict keys, node data,
    number of children). Whether those are leaves is the caller's check (``leaves_like``)."""
    gather = td._match
    if gather is None:
        gather = _gather_leaf if td._handler is None else _write_gatherer(td)
        object.__setattr__(td, "_match", gather)
    return gather


def _gather_leaf(x: Any, out: list) -> bool:
    out.append(x)
    return True


def _write_gatherer(td: Any) -> Callable[[Any, list], bool]:
    env: dict[str, Any] = {"aux_equal": aux_equal}
    lines: list[str] = []
    budget = [_INLINE]

    def const(value: Any) -> str:
        name = f"c{len(env)}"
        env[name] = value
        return name

    def node(t: Any, v: str, whole: bool) -> None:
        """Lines checking the node ``t`` held in ``v`` and appending its leaves (``whole``: its
        subtree written out whole, else each child subtree while the budget lasts)."""
        h, kids = t._handler, t._children
        n, kind, nt = len(kids), h.kind, const(t._node_type)
        if kind in ("dict", "tuple", "list"):
            lines.append(f"if type({v}) is not {nt} or len({v}) != {n}: return False")
            if kind == "dict" and n == 1:  # (the same number of keys, each present)
                vals = f"({v}[{const(t._aux[0])}],)"
            elif kind == "dict" and n:
                vals = f"{const(itemgetter(*t._aux))}({v})"
            else:
                vals = v
        elif kind == "none":
            lines.append(f"if {v} is not None: return False")
        else:  # a namedtuple, a registered class: its handler's children and node data
            lines.append(f"if type({v}) is not {nt}: return False")
            lines.append(f"c, a = {const(h.flatten)}({v})")
            lines.append("c = list(c)")
            lines.append(f"if len(c) != {n} or not aux_equal(a, {const(t._aux)}): return False")
            vals = "c"
        if not n:
            return
        if all(c._handler is None for c in kids):  # (most: a layer's weight and bias)
            lines.append(f"out += {vals}")
            return
        if not whole and all(c is kids[0] for c in kids):  # (a model's list of layers)
            lines.append(f"for x in {vals}:")
            lines.append(f"    if not {const(gatherer(kids[0]))}(x, out): return False")
            return
        names = [f"x{len(lines)}_{i}" for i in range(n)]
        lines.append(f"{''.join(k + ', ' for k in names)}= {vals}")
        leaves: list[str] = []  # a run of leaves, appended at once
        for c, k in zip(kids, names):
            if c._handler is None:
                leaves.append(k)
                continue
            if leaves:
                lines.append(f"out += ({', '.join(leaves)},)")
                leaves = []
            if whole or c._num_nodes <= budget[0]:
                if not whole:
                    budget[0] -= c._num_nodes
                node(c, k, True)
            else:
                lines.append(f"if not {const(gatherer(c))}({k}, out): return False")
        if leaves:
            lines.append(f"out += ({', '.join(leaves)},)")

    node(td, "tree", td._num_nodes <= _INLINE)
    body = "".join(f"        {line}\n" for line in lines)
    src = (f"def gather(tree, out):\n    try:\n{body}        return True\n"
           "    except (KeyError, TypeError):  # a dict without one of the keys\n"
           "        return False\n")  # fmt: skip
    return _compiled(src, env, "gather", f"leaves of {td._num_nodes} nodes")


# ----------------------------------------------------------------------------- the rebuild


def builder(td: Any) -> Callable[[list], Any]:
    """The build of ``td`` from the list of its leaves (``td.unflatten``, which checks their
    number): one expression, dicts, tuples and lists as displays (a dict's keys in the
    treedef's order), other nodes through their handler's ``unflatten``. Written out from the
    second build of a structure on: the first goes through the handlers (most structures
    ``tree_map`` builds are built once, and writing out costs more)."""
    build = td._build
    if build is None:
        object.__setattr__(td, "_build", _BUILT_ONCE)
        return lambda leaves: _by_handlers(td, iter(leaves))
    return _written_builder(td) if build is _BUILT_ONCE else build


_BUILT_ONCE: Any = object()


def _by_handlers(td: Any, leaves: Any) -> Any:
    h = td._handler
    if h is None:
        return next(leaves)
    return h.unflatten(td._aux, [_by_handlers(c, leaves) for c in td._children])


def _written_builder(td: Any) -> Callable[[list], Any]:
    build = td._build
    if build is None or build is _BUILT_ONCE:
        build = _build_leaf if td._handler is None else _write_builder(td)
        object.__setattr__(td, "_build", build)
    return build


def _build_leaf(leaves: list) -> Any:
    return leaves[0]


def _write_builder(td: Any) -> Callable[[list], Any]:
    env: dict[str, Any] = {}
    budget = [_INLINE]

    def const(value: Any) -> str:
        name = f"c{len(env)}"
        env[name] = value
        return name

    def expr(t: Any, at: int, depth: int, whole: bool) -> str:
        """The expression of the node ``t`` whose leaves start at ``l[at]`` (``whole``: its
        subtree written out whole, but for ``_DEPTH``; else each child subtree while the
        budget lasts)."""
        h, kids = t._handler, t._children
        if h.kind == "none":
            return "None"
        seq, same = h.kind in ("tuple", "list"), kids and all(c is kids[0] for c in kids)
        if seq and same and kids[0]._handler is None:  # (a list of leaves: a slice)
            items = f"l[{at}:{at + len(kids)}]"
            return items if h.kind == "list" else f"tuple({items})"
        k = kids[0]._num_leaves if kids else 0
        if not whole and seq and same and k:
            sub = const(_written_builder(kids[0]))  # (a model's list of layers)
            items = f"[{sub}(l[i:i + {k}]) for i in range({at}, {at + k * len(kids)}, {k})]"
            return items if h.kind == "list" else f"tuple({items})"
        parts = []
        for c in kids:
            if c._handler is None:
                parts.append(f"l[{at}]")
            elif (whole or c._num_nodes <= budget[0]) and depth < _DEPTH:
                if not whole:
                    budget[0] -= c._num_nodes
                parts.append(expr(c, at, depth + 1, True))
            else:
                parts.append(f"{const(_written_builder(c))}(l[{at}:{at + c._num_leaves}])")
            at += c._num_leaves
        if h.kind == "dict":
            return "{" + "".join(f"{const(key)}: {p}, " for key, p in zip(t._aux, parts)) + "}"
        if h.kind == "tuple":
            return "(" + "".join(p + ", " for p in parts) + ")"
        if h.kind == "list":
            return "[" + ", ".join(parts) + "]"
        return f"{const(h.unflatten)}({const(t._aux)}, [{', '.join(parts)}])"

    body = expr(td, 0, 0, td._num_nodes <= _INLINE)
    return _compiled(f"def build(l):\n    return {body}\n", env, "build",
                     f"build of {td._num_nodes} nodes")  # fmt: skip
