"""Partition a (simplified) jaxpr into a launch plan: an ordered list of nodes (``NodeKind``).

- ``kernel``: a fused group of elementwise, data-movement and reduction equations, compiled
  to one function (``fusion.py`` lays out its loops). Elementwise chains fuse into each
  other and into the reductions that consume them, and the consumers of a reduction fuse with
  it (softmax, layer norm, bias + GELU, the AdamW update, the cross-entropy each become one
  kernel).
- ``dot``: ``dot_general`` as a library call (numpy's matmul on the CPU, cuBLASLt on the GPU).
- ``scatter``: ``scatter_add`` / ``scatter``, a kernel of its own (``mlir/scatter.py``): it
  writes at computed places, possibly in place over its operand.
- ``view``: data movement whose consumers are library calls or outputs, done as a numpy view
  (no copy; BLAS takes transposed operands as they are).
- ``library``: a primitive with a library lowering for the target (``blu.lower.library``).
- ``loop``: control flow on the CPU (``scan``, ``while``, ``cond``): bodies compiled as
  executables of their own (``cpu/control_flow.py``).
- ``fallback``: a primitive without a lowering for the target (sort, control flow, ...), run
  with its numpy impl.

What an equation may become is read from its primitive's ``lowerings`` (``blu/lower/lowering.py``).
An ``optimization_barrier`` (``blu.checkpoint``'s recomputation reads the saved values through
one) never joins its producer's group: fused there, the recomputation would run in the forward
pass and keep its results alive until the backward. Fusion never creates a cycle: an
equation joins a group only when no path leads from the group to the equation through a node
outside it (checked with ancestor bitsets).
"""

from __future__ import annotations

import heapq
import math
from typing import Any

from blu.core.jaxpr import Jaxpr, JaxprEqn, Literal, Var
from blu.lax.shapes import broadcast_in_dim_p
from blu.lower import library
from blu.lower.mlir.scatter import scatter_supported
from blu.lower.plan.fusion import KernelLayout, can_fuse, is_elementwise, is_reduction
from blu.lower.plan.memory import nbytes
from blu.lower.plan.nodes import Node, NodeKind, Plan

MAX_KERNEL_EQNS = 400  # bounds a kernel's compile time
MAX_EXPANSION = 16  # most equations recomputed in a reader instead of reading their result
SMALL_MAP = 1 << 16  # most elements of a map fused horizontally with others of its shape
SMALL_MAP_OPEN = 8  # horizontal groups of one shape still taking members (bounds the search)
SMALL_MAP_BYTES = 4 << 20  # most bytes a horizontal group's results take


class _Host:
    """The capabilities ``partition`` assumes without a backend (a CPU-like target with no
    library calls and no compiled loops; tests of the partition alone)."""

    target = "cpu"
    caps = None

    @staticmethod
    def runs_dot(eqn: Any) -> bool:
        return True


def classify(jaxpr: Jaxpr, backend: Any = None) -> list[str]:
    """The node kind of each equation on ``backend``'s target (``blu.lower.backend.Backend``;
    None: ``_Host``), or "fuse" / "const" for equations that go into kernels."""
    backend = backend or _Host()
    caps = backend.caps
    loops = caps is not None and caps.compiles_loops
    strided = caps is None or caps.strided_views
    eqns = jaxpr.eqns
    kinds: list[str] = []
    for e in eqns:
        lw = e.primitive.lowerings
        if "dot" in lw:
            kinds.append(NodeKind.DOT if backend.runs_dot(e) else NodeKind.FALLBACK)
        elif ("scatter" in lw and scatter_supported(e)
              and all(isinstance(a, Var) for a in e.invars)):  # fmt: skip
            kinds.append(NodeKind.SCATTER)
        elif (caps is not None and all(isinstance(a, Var) for a in e.invars)
              and library.lowering_for(e, backend.target)):  # fmt: skip
            kinds.append(NodeKind.LIBRARY)
        elif loops and "loop" in lw and lw["loop"](e):
            kinds.append(NodeKind.LOOP)
        elif can_fuse(e):
            kinds.append("fuse")
        else:
            kinds.append(NodeKind.FALLBACK)
    producer: dict[Var, int] = {v: i for i, e in enumerate(eqns) for v in e.outvars}
    for i, e in enumerate(eqns):  # no variable inputs, or only constant-like ones
        if kinds[i] == "fuse" and all(
            not isinstance(a, Var) or (a in producer and kinds[producer[a]] == "const")
            for a in e.invars
        ):
            kinds[i] = "const"
    consumers: dict[Var, list[int]] = {}
    for i, e in enumerate(eqns):
        for a in e.invars:
            if isinstance(a, Var):
                consumers.setdefault(a, []).append(i)
    # data movement read only by library calls, fallbacks, views or the outputs: a numpy view
    for i in reversed(range(len(eqns))):
        e = eqns[i]
        view = e.primitive.lowerings.get("view")  # numpy does it without copying
        # on the GPU a view must be the same contiguous buffer; other data movement is a copy
        viewable = view is not None and (view.contiguous or strided)
        if kinds[i] != "fuse" or not viewable or not isinstance(e.invars[0], Var):
            continue
        users = consumers.get(e.outvars[0], [])
        # (a GPU view is contiguous, which every library call takes; on the CPU a library call
        # may be given a strided numpy view, so there it stays a copy)
        feeds = caps is not None and caps.views_feed_libraries
        readers = (NodeKind.DOT, NodeKind.FALLBACK, NodeKind.VIEW) + ((NodeKind.LIBRARY,) * feeds)
        read = [kinds[u] in readers for u in users]
        x = e.invars[0]
        in_memory = x not in producer or kinds[producer[x]] not in ("fuse", "const", NodeKind.VIEW)
        if all(read):
            kinds[i] = NodeKind.VIEW
        elif view.contiguous and any(read) and in_memory:
            # read by a library call (it must be in memory) and by kernels: its operand is in
            # memory already (an argument or a library call's result, contiguous), so the
            # kernels read the same bytes through the view instead of one of them writing a
            # copy (GPT-2's query-key-value gradient: 75 MB a layer, for two products and a sum)
            kinds[i] = NodeKind.VIEW
    return kinds


def partition(jaxpr: Jaxpr, backend: Any = None) -> Plan:
    """Group the equations of ``jaxpr`` into launch-plan nodes (see the module docstring) for
    ``backend``'s target: which products it runs, whether it compiles loops, which views it
    allows (``Backend.caps``)."""
    kinds = classify(jaxpr, backend)
    groups = _group(jaxpr.eqns, kinds, jaxpr.outvars)
    nodes = _build(jaxpr, kinds, groups)
    caps = getattr(backend, "caps", None)
    limit = caps.kernel_buffers if caps is not None else None
    while limit:  # a GPU kernel's buffers are parameters of each of its launches: halve wide groups
        wide = {n.group for n in nodes if n.kind == NodeKind.KERNEL and n.group is not None
                and len(n.group) > 1 and _buffers(n, limit) > limit}  # fmt: skip
        if not wide:
            break
        # (program order: the first half never reads the second, and no node outside reads
        # one half and is read by the other, which would have been a cycle through the group)
        groups = [
            h
            for g in groups
            for h in ((g[: len(g) // 2], g[len(g) // 2 :]) if tuple(g) in wide else (g,))
        ]
        nodes = _build(jaxpr, kinds, groups)
    order = _toposort(nodes)
    if order is None:  # a cycle between groups: give up fusing the groups on it
        done = {id(n) for n in _toposort(nodes, partial=True)}
        split = []
        stuck = {n.group for n in nodes if id(n) not in done and n.group is not None}
        for g in groups:
            split.extend([[i] for i in g] if tuple(g) in stuck else [g])
        order = _toposort(_build(jaxpr, kinds, split))
        assert order is not None
    return Plan(jaxpr, order)


def _group(eqns: list[JaxprEqn], kinds: list[str], outvars: list[Any] = ()) -> list[list[int]]:
    """Greedy fusion in program order: each fusible equation joins the groups of its fusible
    producers, unless that would make the graph of nodes cyclic (a path leaving the merged
    group and coming back, through other nodes or other groups)."""
    producer: dict[Var, int] = {v: i for i, e in enumerate(eqns) for v in e.outvars}
    preds = [
        sorted({producer[a] for a in e.invars if isinstance(a, Var) and a in producer
                and kinds[producer[a]] != "const"})
        for e in eqns
    ]  # fmt: skip
    group = list(range(len(eqns)))  # union-find over fusible equations
    mlist: dict[int, list[int]] = {}  # group root -> members
    lo: dict[int, int] = {}  # group root -> smallest member
    hi: dict[int, int] = {}  # group root -> largest member

    def find(i: int) -> int:
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i

    def reaches(starts: list[int], target: set[int], inside: set[int]) -> bool:
        """Whether a node-graph path from a group member in ``target`` leads to ``starts``
        (walking backwards: predecessors, and every member of a group once one is reached),
        without passing through ``inside``."""
        floor = min(lo[find(t)] for t in target)
        seen: set[int] = set()
        groups_seen: set[int] = set()
        stack = list(starts)
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            if x in target:
                return True
            if x in inside:
                continue
            if x < floor and (kinds[x] != "fuse" or hi[find(x)] < floor):
                continue  # everything upstream of x precedes the target group
            stack.extend(preds[x])
            if kinds[x] == "fuse":
                g = find(x)
                if g not in groups_seen:
                    groups_seen.add(g)
                    stack.extend(mlist[g])
        return False

    def external_preds(ms: list[int], inside: set[int]) -> list[int]:
        return [p for m in ms for p in preds[m] if p not in inside]

    def merge(g: int, root: int) -> int:
        """Join group ``root`` into group ``g`` unless that closes a cycle; the root after."""
        a, b = set(mlist[g]), set(mlist[root])
        both = a | b
        if reaches(external_preds(mlist[root], both), a, both) or reaches(
            external_preds(mlist[g], both), b, both
        ):
            return root
        group[root] = g
        mlist[g].extend(mlist.pop(root))
        lo[g] = min(lo[g], lo.pop(root))
        hi[g] = max(hi[g], hi.pop(root))
        return g

    for i in range(len(eqns)):
        if kinds[i] != "fuse":
            continue
        root, mlist[i], lo[i], hi[i] = i, [i], i, i
        for p in preds[i]:
            if kinds[p] != "fuse":
                continue
            g = find(p)
            if g == root or len(mlist[g]) + len(mlist[root]) > MAX_KERNEL_EQNS:
                continue
            if eqns[i].primitive.name == "optimization_barrier":
                # a barrier starts a group: what reads it (a rematerialized value) runs where
                # it is used, not fused into its producer's kernel in the forward pass
                continue
            root = merge(g, root)
    # what the cap kept out, an equation or two reading a full group (an optimizer's last sum,
    # the parameter plus its update, read the update back from memory): joined at the end, so
    # the cap still shapes every other group, up to twice the cap
    for root in [r for r, ms in mlist.items() if len(ms) <= 2]:
        if any(eqns[m].primitive.name == "optimization_barrier" for m in mlist[root]):
            continue
        into = {find(p) for m in mlist[root] for p in preds[m] if kinds[p] == "fuse"} - {root}
        for g in sorted(into, key=lambda g: len(mlist[g])):
            if len(mlist[g]) + len(mlist[root]) <= 2 * MAX_KERNEL_EQNS and merge(g, root) == g:
                break

    def ancestor(s: int, g: int) -> bool:
        """Whether group ``s`` runs before group ``g`` can (a path leads from it to ``g``)."""
        return reaches(external_preds(mlist[g], set(mlist[g])), set(mlist[s]), set(mlist[g]))

    _merge_small_maps(eqns, kinds, preds, outvars, mlist, find, merge, ancestor)
    return sorted(sorted(m) for m in mlist.values())


def _small_map_shape(eqns: list[JaxprEqn], members: list[int]) -> tuple[int, ...] | None:
    """The one shape of a group of elementwise equations and broadcasts whose results all
    have it and at most ``SMALL_MAP`` elements; else None."""
    shapes = {tuple(v.aval.shape) for m in members for v in eqns[m].outvars}
    if len(shapes) != 1:
        return None
    (shape,) = shapes
    if math.prod(shape) > SMALL_MAP:
        return None
    for m in members:
        e = eqns[m]
        if e.primitive.name == "optimization_barrier" or not (
            is_elementwise(e) or e.primitive is broadcast_in_dim_p
        ):
            return None
    return shape


def _merge_small_maps(eqns, kinds, preds, outvars, mlist, find, merge, ancestor) -> None:
    """Horizontal fusion: independent small maps of one shape become one kernel (XLA's
    horizontal loop fusion). An optimizer's update of each bias and norm scale had been a
    launch each: a few KB for ~3 us of a launch's latency (GPT-2 124M: 68 launches a step
    fewer, GPT-2 1.5B: 345). Two groups join only when neither would run at another time than
    alone:

    - each reads from some node (a group reading only arguments runs where the program order
      puts it; joined to an earlier one, its results would be held longer);
    - every node either reads from is one the other reads from too, or a kernel that must run
      before the other can (so the merged kernel waits for nothing more than each did alone);
    - the same nodes read their results (or only the program's outputs), so neither result
      is made before it is needed;
    - the merged results stay under ``SMALL_MAP_BYTES``, bounding what an earlier start could
      still hold.

    ``merge`` refuses a join that would close a cycle."""
    buckets: dict[tuple[int, ...], list[int]] = {}
    for root in sorted(mlist, key=lambda r: min(mlist[r])):
        shape = _small_map_shape(eqns, mlist[root])
        if shape is not None:
            buckets.setdefault(shape, []).append(root)

    def node(i: int) -> int:  # a group's root, or an equation of its own
        return find(i) if kinds[i] == "fuse" else i

    def sources(root: int) -> set[int]:
        inside = set(mlist[root])
        return {node(p) for m in mlist[root] for p in preds[m] if p not in inside}

    users: dict[int, list[int]] = {}
    for i, ps in enumerate(preds):
        for p in ps:
            users.setdefault(p, []).append(i)
    outputs = {v for v in outvars if isinstance(v, Var)}

    def readers(root: int) -> set[int]:  # -1: the program's outputs
        inside = set(mlist[root])
        got = {node(u) for m in mlist[root] for u in users.get(m, ()) if u not in inside}
        if any(v in outputs for m in mlist[root] for v in eqns[m].outvars):
            got.add(-1)
        return got

    def out_bytes(root: int) -> int:
        return sum(nbytes(v.aval) for m in mlist[root] for v in eqns[m].outvars)

    for roots in buckets.values():
        # merged groups still taking members: [root, sources, readers, result bytes]
        open_: list[list[Any]] = []
        for root in roots:
            src = sources(root)
            if not src:
                continue
            rdr, size = readers(root), out_bytes(root)
            for entry in open_:
                g, gsrc, grdr, gsize = entry
                if (len(mlist[g]) + len(mlist[root]) <= MAX_KERNEL_EQNS
                        and gsize + size <= SMALL_MAP_BYTES
                        and grdr == rdr
                        and all(s in mlist and ancestor(s, g) for s in src - gsrc)
                        and all(s in mlist and ancestor(s, root) for s in gsrc - src)
                        and merge(g, root) == g):  # fmt: skip
                    gsrc |= src
                    entry[3] += size
                    break
            else:
                open_.append([root, src, rdr, size])
                del open_[:-SMALL_MAP_OPEN]


def _build(jaxpr: Jaxpr, kinds: list[str], groups: list[list[int]]) -> list[Node]:
    """Nodes from groups: constant-like equations (no variable inputs: broadcast scalars,
    iota) are copied into every kernel that reads them; other readers get them from a kernel
    of their own."""
    eqns = jaxpr.eqns
    producer: dict[Var, int] = {v: i for i, e in enumerate(eqns) for v in e.outvars}

    def const_closure(idxs: list[int]) -> list[int]:
        need, stack = set(), [a for i in idxs for a in eqns[i].invars]
        while stack:
            a = stack.pop()
            p = producer.get(a) if isinstance(a, Var) else None
            if p is not None and kinds[p] == "const" and p not in need:
                need.add(p)
                stack.extend(eqns[p].invars)
        return sorted(need)

    def expansion(p: int) -> list[int] | None:
        """The equations that make ``eqns[p]``'s value from smaller arrays, if it is cheap to
        recompute: a broadcast of a variable, or an elementwise equation whose operands are
        constant-like or such expansions themselves (e.g. a one-hot mask ``labels[:, None] ==
        iota``); else None."""
        if p in memo:
            return memo[p]
        e, got = eqns[p], None
        if kinds[p] == "fuse" and e.primitive is broadcast_in_dim_p:
            got = [p] if isinstance(e.invars[0], Var) else None
        elif kinds[p] == "fuse" and "elementwise" in e.primitive.lowerings:
            got = [p]
            for a in e.invars:
                q = producer.get(a) if isinstance(a, Var) else None
                if q is None and isinstance(a, Var):
                    got = None  # a full-size argument: nothing to gain
                elif q is not None and kinds[q] != "const":
                    sub = expansion(q)
                    got = None if sub is None or got is None else got + sub
                if got is None or len(got) > MAX_EXPANSION:
                    got = None
                    break
        memo[p] = got
        return got

    memo: dict[int, list[int] | None] = {}
    group_of = {i: k for k, g in enumerate(groups) for i in g}

    def recomputation(p: int, depth: int = 0) -> tuple[list[int], list[Var]] | None:
        """``(equations, leaves)``: the cheap equations (elementwise without transcendentals,
        broadcasts, a barrier's identity) that make ``eqns[p]``'s value from the values
        ``leaves``, following an operand made in ``p``'s group while that reads fewer bytes;
        else None. E.g. ``ct == 0`` of a float32 ``ct = convert(g_bf16)``: leaves
        ``[g_bf16]``; AdamW's ``(1 - b1) * g``: leaves ``[g]``, which its reader reads anyway."""
        e = eqns[p]
        if kinds[p] == "fuse" and e.primitive.name == "optimization_barrier" and len(e.invars) == 1:
            # an identity: its operand precedes it, so reading that closes no cycle either
            return [p], [a for a in e.invars if isinstance(a, Var)]
        lw = e.primitive.lowerings
        if kinds[p] == "fuse" and e.primitive is broadcast_in_dim_p and depth <= MAX_EXPANSION:
            return [p], [a for a in e.invars if isinstance(a, Var)]  # (its operand is smaller)
        if (kinds[p] != "fuse" or "elementwise" not in lw or "expensive" in lw
                or depth > MAX_EXPANSION):  # fmt: skip
            return None
        chain, leaves = [p], []
        for a in e.invars:
            q = producer.get(a) if isinstance(a, Var) else None
            if not isinstance(a, Var) or (q is not None and kinds[q] == "const"):
                continue
            # made in the group: followed while that narrows; else an input of the group (its
            # producer runs before the group, so before the reader too: no cycle)
            own = q is not None and group_of.get(q) == group_of.get(p)
            sub = recomputation(q, depth + 1) if own else None
            if sub is not None and _bytes(sub[1]) < _bytes([a]):
                chain, leaves = chain + sub[0], leaves + sub[1]
            else:
                leaves.append(a)
        if len(chain) > MAX_EXPANSION:
            return None
        return chain, list(dict.fromkeys(leaves))

    def copied_recomputations(idxs: list[int], have: set[int]) -> list[int]:
        """Values of other kernels that ``idxs`` read and that are cheap there
        (``recomputation``): recomputed here instead, when the bytes their leaves add to what
        the group reads are fewer than theirs. A float32 cast of a bfloat16 activation and its
        comparison with 0 (a product's transpose, ``_mul_transpose``) had been written as 5
        bytes an element and read back (ResNet's shortcut batch norms; the bfloat16 value is
        2); an optimizer's scaled gradient, 4 bytes an element, from the gradient its reader
        reads anyway (LLaMA's 1 GB embedding and classifier gradients). A remat barrier's
        result (an identity) is read as its operand: its kernel had written a copy."""
        defined = {v for i in idxs for v in eqns[i].outvars}
        reads = {a for i in idxs for a in eqns[i].invars if isinstance(a, Var) and a not in defined}
        out = []
        for a in sorted(reads, key=lambda v: -_bytes([v])):  # widest first: later ones reuse
            p = producer.get(a)
            if p is None or p in have or group_of.get(p) is None:
                continue
            got = recomputation(p)
            if got is None:
                continue
            more, barrier = (
                _bytes([v for v in got[1] if v not in reads]),
                got[0] == [p] and (eqns[p].primitive.name == "optimization_barrier"),
            )
            if more > _bytes([a]) or more == _bytes([a]) and not barrier:
                continue
            reads.update(got[1])
            for q in got[0]:
                if q not in have:
                    have.add(q)
                    out.append(q)
        return out

    def copied_broadcasts(idxs: list[int]) -> list[int]:
        """Broadcasts made in other kernels that these equations read, and elementwise values
        made from such broadcasts and constants (``expansion``): recomputed here from their
        smaller operands, so the full-size array is never materialized (a row statistic or a
        bias broadcast to a full activation would otherwise be held as one, e.g. from the
        forward pass to the backward one; the fused classifier's one-hot target would be
        written and read back per chunk)."""
        have, out = set(idxs), []
        for i in idxs:
            for a in eqns[i].invars:
                p = producer.get(a) if isinstance(a, Var) else None
                if p is None or p in have:
                    continue
                for q in expansion(p) or ():
                    if q not in have:
                        have.add(q)
                        out.append(q)
        return out

    specs: list[tuple[str, list[int]]] = []
    copies: dict[int, set[int]] = {}  # spec position -> equations copied into it
    for g in groups:
        extra = copied_broadcasts(g)
        extra += copied_recomputations(g + extra, set(g + extra))
        if extra:
            copies[len(specs)] = set(extra)
        specs.append((NodeKind.KERNEL, sorted(const_closure(g + extra) + g + extra)))
    for i, k in enumerate(kinds):
        if k not in ("fuse", "const"):
            specs.append((k, [i]))
    order = sorted(range(len(specs)), key=lambda k: specs[k][1][-1])
    specs = [specs[k] for k in order]
    copies = {pos: copies[k] for pos, k in enumerate(order) if k in copies}
    defined_in = [{v for i in idxs for v in eqns[i].outvars} for _, idxs in specs]
    needed: dict[Var, None] = {}  # constant-like values some node reads from memory
    reads: list[list[Var]] = []
    for (_, idxs), defined in zip(specs, defined_in):
        ins: list[Var] = []
        for i in idxs:
            for a in eqns[i].invars:
                if isinstance(a, Var) and a not in defined and a not in ins:
                    ins.append(a)
        reads.append(ins)
        needed.update((a, None) for a in ins if a in producer and kinds[producer[a]] == "const")
    for v in jaxpr.outvars:
        if isinstance(v, Var) and v in producer and kinds[producer[v]] == "const":
            needed[v] = None
    for v in needed:  # one kernel per constant-like value that must be in memory
        idxs = const_closure([producer[v]]) + [producer[v]]
        specs.append(("const", idxs))
        defined_in.append({v})
        reads.append([])
    outset = {v for v in jaxpr.outvars if isinstance(v, Var)}
    read_by_other = {a for ins in reads for a in ins}
    nodes = []
    for pos, ((kind, idxs), defined, ins) in enumerate(zip(specs, defined_in, reads)):
        es = [eqns[i] for i in idxs]
        copied = copies.get(pos, set())
        if kind == "const":
            (v,) = defined
            node = Node(NodeKind.KERNEL, es, [], [v])
        else:
            outs = [v for i in idxs if i not in copied for v in eqns[i].outvars
                    if v in defined and (v in outset or v in read_by_other)
                    and kinds[producer[v]] != "const"]  # fmt: skip
            node = Node(kind, es, ins, outs)
        if node.kind == NodeKind.KERNEL:
            node.jaxpr = Jaxpr([], node.inputs, es, node.outputs)
            node.group = tuple(i for i in idxs if kinds[i] == "fuse" and i not in copied) or None
        nodes.append(node)
    return nodes


def _buffers(node: Node, limit: int) -> int:
    """How many buffers a kernel node's launches take: its inputs and outputs, and its private
    buffers (``KernelLayout.scratch``, each reduction's split partials counted once more); a
    bound when that is within ``limit``."""
    n = len(node.inputs) + len(node.outputs)
    reductions = sum(1 for e in node.eqns if is_reduction(e))
    if n + len(node.eqns) + reductions <= limit:  # (at most a buffer an equation)
        return n + len(node.eqns) + reductions
    return n + len(KernelLayout(node.jaxpr).scratch) + reductions


def _bytes(vs: list[Var]) -> int:
    return sum(nbytes(v.aval) for v in vs)


def _toposort(nodes: list[Node], partial: bool = False) -> list[Node] | None:
    """Order nodes so each runs after its inputs' producers (a group may sit after equations
    it does not depend on), preferring the original order (Kahn's algorithm with a heap).
    None if there is a cycle (``partial``: the nodes that could be ordered)."""
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
    if len(order) != len(nodes) and not partial:
        return None
    return order


def is_literal(a: Any) -> bool:
    return isinstance(a, Literal)
