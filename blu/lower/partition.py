"""Partition a (simplified) jaxpr into a launch plan: an ordered list of nodes.

- ``kernel``: a fused group of elementwise, data-movement and reduction equations, compiled
  to one CPU function (``fusion.py`` lays out its loops). Elementwise chains fuse into each
  other and into the reductions that consume them, and the consumers of a reduction fuse with
  it (softmax, layer norm, bias + GELU, the AdamW update, the cross-entropy each become one
  kernel).
- ``dot``: ``dot_general`` as a library call (numpy's matmul, i.e. BLAS for floats).
- ``view``: data movement whose consumers are library calls or outputs, done as a numpy view
  (no copy; BLAS takes transposed operands as they are).
- ``fallback``: a primitive without a lowering rule (sort, gather, control flow, ...), run with
  its numpy impl.

Fusion never creates a cycle: an equation joins a group only when no path leads from the group
to the equation through a node outside it (checked with ancestor bitsets).
"""

from __future__ import annotations

import heapq
from typing import Any

from blu.core.jaxpr import Jaxpr, JaxprEqn, Literal, Var
from blu.lower.fusion import can_fuse

# numpy does these without copying
VIEWABLE = {"reshape", "transpose", "broadcast_in_dim", "squeeze", "slice", "rev"}
MAX_KERNEL_EQNS = 400  # bounds a kernel's compile time


class Node:
    """One step of the launch plan.

    Attributes:
        kind: "kernel" | "dot" | "view" | "fallback".
        eqns: its equations (one, except for kernels).
        inputs / outputs: the plan-level variables it reads / defines.
        jaxpr: for kernels, the kernel as a jaxpr (inputs -> outputs).
    """

    __slots__ = ("kind", "eqns", "inputs", "outputs", "jaxpr", "extra")

    def __init__(self, kind: str, eqns: list[JaxprEqn], inputs: list[Var], outputs: list[Var]):
        self.kind, self.eqns, self.inputs, self.outputs = kind, eqns, inputs, outputs
        self.jaxpr: Jaxpr | None = None
        self.extra: Any = None

    def label(self) -> str:
        names = [e.primitive.name for e in self.eqns]
        short = ",".join(names[:6]) + (f",...(+{len(names) - 6})" if len(names) > 6 else "")
        return f"{self.kind}[{short}]"

    def __repr__(self) -> str:
        return self.label()


class Plan:
    """The launch plan of a jaxpr: ``nodes`` in execution order."""

    def __init__(self, jaxpr: Jaxpr, nodes: list[Node]):
        self.jaxpr = jaxpr
        self.nodes = nodes

    def __str__(self) -> str:
        return "\n".join(f"{i}: {n.label()}" for i, n in enumerate(self.nodes))


def classify(jaxpr: Jaxpr) -> list[str]:
    """The node kind of each equation."""
    eqns = jaxpr.eqns
    kinds = []
    for e in eqns:
        if e.primitive.name == "dot_general":
            kinds.append("dot")
        elif can_fuse(e):
            kinds.append("fuse")
        else:
            kinds.append("fallback")
    consumers: dict[Var, list[int]] = {}
    for i, e in enumerate(eqns):
        for a in e.invars:
            if isinstance(a, Var):
                consumers.setdefault(a, []).append(i)
    # data movement read only by library calls, fallbacks, views or the outputs: a numpy view
    for i in reversed(range(len(eqns))):
        e = eqns[i]
        if kinds[i] != "fuse" or e.primitive.name not in VIEWABLE or not isinstance(e.invars[0], Var):
            continue
        users = consumers.get(e.outvars[0], [])
        if all(kinds[u] in ("dot", "fallback", "view") for u in users):
            kinds[i] = "view"
    return kinds


def partition(jaxpr: Jaxpr) -> Plan:
    """Group the equations of ``jaxpr`` into launch-plan nodes (see the module docstring)."""
    eqns = jaxpr.eqns
    kinds = classify(jaxpr)
    producer: dict[Var, int] = {v: i for i, e in enumerate(eqns) for v in e.outvars}
    group = list(range(len(eqns)))  # union-find over fusible equations

    def find(i: int) -> int:
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i

    members: dict[int, int] = {}  # group root -> bitset of its equations
    size: dict[int, int] = {}
    anc = [0] * len(eqns)  # ancestors (including itself)
    via_lib = [0] * len(eqns)  # ancestors reached through a non-fused node
    for i, e in enumerate(eqns):
        preds = {producer[a] for a in e.invars if isinstance(a, Var) and a in producer}
        a, lib = 1 << i, 0
        for p in preds:
            a |= anc[p]
            lib |= via_lib[p] | (anc[p] if kinds[p] != "fuse" else 0)
        anc[i], via_lib[i] = a, lib
        if kinds[i] != "fuse":
            continue
        root, members[i], size[i] = i, 1 << i, 1
        for p in sorted(preds):
            if kinds[p] != "fuse":
                continue
            g = find(p)
            if g == root or members[g] & lib or size[g] + size[root] > MAX_KERNEL_EQNS:
                continue
            group[root] = g
            members[g] |= members.pop(root)
            size[g] += size.pop(root)
            root = g
    # collect nodes
    by_root: dict[int, list[int]] = {}
    for i in range(len(eqns)):
        if kinds[i] == "fuse":
            by_root.setdefault(find(i), []).append(i)
    used_later: dict[Var, set] = {}
    node_of_eqn: dict[int, int] = {}
    specs: list[tuple[str, list[int]]] = []
    for i in range(len(eqns)):
        if kinds[i] == "fuse":
            if by_root[find(i)][0] != i:
                continue  # the group is emitted at its first equation
            specs.append(("kernel", by_root[find(i)]))
        else:
            specs.append((kinds[i], [i]))
    for n, (_, idxs) in enumerate(specs):
        for i in idxs:
            node_of_eqn[i] = n
    for i, e in enumerate(eqns):
        for a in e.invars:
            if isinstance(a, Var):
                used_later.setdefault(a, set()).add(node_of_eqn[i])
    outset = {v for v in jaxpr.outvars if isinstance(v, Var)}
    nodes = []
    for n, (kind, idxs) in enumerate(specs):
        es = [eqns[i] for i in idxs]
        defined = {v for e in es for v in e.outvars}
        inputs: list[Var] = []
        for e in es:
            for a in e.invars:
                if isinstance(a, Var) and a not in defined and a not in inputs:
                    inputs.append(a)
        outputs = [
            v
            for e in es
            for v in e.outvars
            if v in outset or (used_later.get(v, set()) - {n})
        ]
        node = Node(kind, es, inputs, outputs)
        if kind == "kernel":
            node.jaxpr = Jaxpr([], inputs, es, outputs)
        nodes.append(node)
    return Plan(jaxpr, _toposort(nodes))


def _toposort(nodes: list[Node]) -> list[Node]:
    """Order nodes so each runs after its inputs' producers (a group may sit after equations
    it does not depend on), preferring the original order (Kahn's algorithm with a heap)."""
    prod = {v: k for k, n in enumerate(nodes) for v in n.outputs}
    users: list[list[int]] = [[] for _ in nodes]
    indeg = [0] * len(nodes)
    for k, n in enumerate(nodes):
        for d in {prod[v] for v in n.inputs if v in prod}:
            users[d].append(k)
            indeg[k] += 1
    ready = [k for k in range(len(nodes)) if indeg[k] == 0]
    heapq.heapify(ready)
    order: list[Node] = []
    while ready:
        k = heapq.heappop(ready)
        order.append(nodes[k])
        for u in users[k]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):  # pragma: no cover - partition guarantees acyclicity
        raise AssertionError("cycle in the launch plan")
    return order


def is_literal(a: Any) -> bool:
    return isinstance(a, Literal)
