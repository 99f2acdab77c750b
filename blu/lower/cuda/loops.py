"""Control flow on CUDA targets: ``scan``, ``while`` and ``cond`` as ``loop`` nodes.

Each body (a scan body, a while loop's condition and body, each branch of a cond) is prepared
with the program (``prepare_loop``: its own launch and memory plan) and compiled as a
``GpuExecutable`` of its own. Its temporaries, its fresh outputs and the loop's spare carry
live in the loop node's *workspace*, planned scratch of the outer program's arena: nothing is
allocated per iteration or per call, and a CUDA graph of the outer program captures a scan
whole (every iteration's launches, at addresses that stay valid between replays).

A scan queues its iterations' launches without waiting for the GPU: iteration ``i`` reads its
rows of the scanned-over inputs at ``base + i * row_bytes`` and writes its stacked outputs
there (a row whose address is not ``ALIGN``-aligned, which the kernels' vector accesses need,
goes through an aligned row buffer); the carry lives in two sets of buffers (the node's output
and the workspace's spare) that swap roles each iteration, chosen so the last iteration writes
the node's output. A body output that is a buffer of its own is written straight where the
loop wants it; other outputs (an input returned as it is, a literal, one buffer returned
twice) are copied there on the stream.

A ``while`` whose bodies can be captured runs as a CUDA graph with a conditional WHILE node,
and a ``cond`` as one with a SWITCH node (``blu.cuda.conditional``; drivers >= 12.4 / 12.8): the
predicate and the index never go to the host. Elsewhere (a body with a host fallback, an older
driver, ``BLU_CUDA_CONDITIONAL_NODES=0``) a ``while`` reads its predicate on the host once per
iteration and a ``cond`` its index once. Either way an executable holding one is not captured
whole as a CUDA graph: it runs its steps launch by launch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from blu.core.jaxpr import Literal, Var
from blu.cuda.array import _put_one
from blu.cuda.profile import profiler
from blu.lower.cuda.codegen_strided import ALIGN
from blu.lower.cuda.outputs import out_recipes
from blu.lower.plan.memory import ALIGN as ARENA_ALIGN
from blu.lower.plan.steps import Steps, literal_value
from blu.lower.program import log

__all__ = ["LoopLayout", "LoopStep", "bodies_of", "prepare_loop"]

MAX_WHILE_GRAPHS = 4  # a while loop's graphs kept (one per set of addresses)


def _conditional_supported(name: str) -> bool:
    from blu.cuda import conditional

    return conditional.supported_switch() if name == "cond" else conditional.supported()


def _nbytes(aval: Any) -> int:
    return int(aval.size) * np.dtype(aval.dtype).itemsize


def _up(n: int) -> int:
    return -(-n // ARENA_ALIGN) * ARENA_ALIGN


def bodies_of(eqn: Any) -> list[tuple[str, Any]]:
    """``(tag, jaxpr)`` of each body of a control-flow equation, in the loop's order."""
    p, name = eqn.params, eqn.primitive.name
    if name == "scan":
        return [("scan", p["jaxpr"])]
    if name == "while":
        return [("while_cond", p["cond_jaxpr"]), ("while_body", p["body_jaxpr"])]
    if name == "cond":
        return [(f"branch{i}", b) for i, b in enumerate(p["branches"])]
    raise NotImplementedError(f"no CUDA loop for {name}")


class _BodyLayout:
    """One prepared body's buffers in the loop's workspace: its arena at ``arena`` and each
    fresh output (``("out",)`` place) at ``outs[slot]`` (offsets from the workspace's start)."""

    def __init__(self, prepared: Any, donated: tuple, at: int):
        steps = Steps(prepared.plan, prepared.memory, donated)
        self.arena = at
        at += _up(max(prepared.memory.arena_size, 1))
        self.outs: dict[int, int] = {}
        for sl, place, aval in steps.allocs:
            if place[0] == "out":  # a fresh output (a donated one is written over its input)
                self.outs[sl] = at
                at += _up(max(_nbytes(aval), 1))
        self.end = at


class LoopLayout:
    """A loop node's workspace: its bodies' buffers, the spare carry (scan and while), the
    aligned row buffers of a scan's rows that are not ``ALIGN``-aligned, a while's predicate.
    ``size``: its bytes."""

    def __init__(self, node: Any):
        e = node.eqns[0]
        at = 0
        self.bodies = []
        for _, _, prepared, donated, _ in node.bodies:
            b = _BodyLayout(prepared, donated, at)
            self.bodies.append(b)
            at = b.end
        self.spare: list[int | None] = []  # per carry (None: updated in place)
        self.inplace: list[bool] = []
        self.x_rows: dict[int, int] = {}
        self.y_rows: dict[int, int] = {}
        self.pred = 0
        name = e.primitive.name
        if name in ("scan", "while"):
            self.inplace = node.bodies[-1][4]
            for a, inplace in zip(_carry_avals(e), self.inplace, strict=True):
                self.spare.append(None if inplace else at)
                if not inplace:
                    at += _up(max(_nbytes(a), 1))
        if name == "scan":
            p = e.params
            nc, nk = p["num_consts"], p["num_carry"]
            for j, a in enumerate(e.invars[nc + nk :]):
                if _row_bytes(a.aval) % ALIGN:
                    self.x_rows[j] = at
                    at += _up(max(_row_bytes(a.aval), 1))
            for j, v in enumerate(e.outvars[nk:]):
                if _row_bytes(v.aval) % ALIGN:
                    self.y_rows[j] = at
                    at += _up(max(_row_bytes(v.aval), 1))
        if name == "while":
            self.pred = at
            at += ARENA_ALIGN
        self.size = at


def _carry_avals(e: Any) -> list[Any]:
    p = e.params
    if e.primitive.name == "scan":
        nk = p["num_carry"]
        return [v.aval for v in e.outvars[:nk]]
    return [v.aval for v in e.outvars]


def _row_bytes(aval: Any) -> int:
    return _nbytes(aval) // aval.shape[0] if aval.shape and aval.shape[0] else 0


def _carry_positions(eqn: Any) -> list[tuple[int, int, int]]:
    """Per body, ``(first carry input, carry count, first carry output)`` of the bodies whose
    carry may be updated in place (a scan's body, a while's body), else ``None``."""
    p, name = eqn.params, eqn.primitive.name
    if name == "scan":
        return [(p["num_consts"], p["num_carry"], 0)]
    if name == "while":
        return [None, (p["body_nconsts"], len(eqn.outvars), 0)]
    return [None] * len(p["branches"])


def in_place(prepared: Any, first: int, n: int) -> list[bool] | None:
    """Per carry, whether the body's memory plan writes its new value over its own input
    (``("donated", first + k)``, the whole buffer); None where the plan wrote some output over
    another input (a swapped carry...): the loop then prepares the body without donation."""
    mem, outs = prepared.memory, prepared.jaxpr.outvars
    flags = []
    for k, v in enumerate(outs):
        if not isinstance(v, Var):  # a literal
            flags.append(False)
            continue
        r = mem.root.get(v, v)
        place = mem.place.get(r, ("",))
        if place[0] != "donated":
            flags.append(False)
        elif k < n and place[1] == first + k and r is v:
            flags.append(True)
        else:
            return None
    return flags[:n]


def prepare_loop(node: Any, prepare_body: Callable[[Any, tuple], Any]) -> None:
    """Prepare ``node``'s bodies (``prepare_body(jaxpr, donated)``: a ``Prepared``) and size its
    workspace. A scan's or while's body is prepared with its carry donated, so a carry it
    updates in place (a KV cache through ``dynamic_update_slice``) stays in one buffer; where
    its plan moves values between carries, without donation (the carry then alternates
    between two buffers). Sets ``node.bodies``: ``(tag, jaxpr, prepared, donated, inplace)``
    per body, and ``node.workspace``."""
    bodies = []
    for (tag, j), pos in zip(bodies_of(node.eqns[0]), _carry_positions(node.eqns[0])):
        n_in = len(j.invars)
        inplace = None
        if pos is not None:
            first, n, _ = pos
            donated = tuple(first <= i < first + n for i in range(n_in))
            prepared = prepare_body(j, donated)
            inplace = in_place(prepared, first, n)
        if inplace is None or not any(inplace):
            donated = (False,) * n_in
            prepared = prepare_body(j, donated)
            inplace = [False] * (pos[1] if pos is not None else 0)
        bodies.append((tag, j, prepared, donated, inplace))
    node.bodies = bodies
    node.workspace = LoopLayout(node).size


# ---- running ---------------------------------------------------------------------------------


class _Body:
    """A body executable bound to the device, run on addresses the loop gives it."""

    def __init__(self, bound: Any, layout: _BodyLayout):
        self.bound, self.layout = bound, layout
        self.in_slots = bound.in_slots
        arena = [(sl, place[1]) for sl, place, _ in bound.allocs if place[0] == "arena"]
        self._arena = arena
        # outputs written over their (donated) carry input: the input's address
        self._donated = [(sl, bound.in_slots[place[1]]) for sl, place, _ in bound.allocs
                         if place[0] == "donated"]  # fmt: skip
        self.recipes = out_recipes(bound)
        roots = [r[2] for r in self.recipes if r[0] == "own"]
        # per output: the slot whose address the loop may set to make the body write it where
        # the loop wants it (a buffer of its own, returned once, as a whole or through a view
        # of all its bytes: a reshape), else None
        self.place_slot = [
            r[2] if r[0] == "own" and roots.count(r[2]) == 1
            and (r[6] or _nbytes(r[4]) == _nbytes(r[5])) else None
            for r in self.recipes
        ]  # fmt: skip
        self.nbytes = [_nbytes(r[4]) if r[4] is not None else np.asarray(r[1]).nbytes
                       for r in self.recipes]  # fmt: skip
        self.lits: list[Any] = [None] * len(self.recipes)
        for j, r in enumerate(self.recipes):
            if r[0] == "lit":  # a literal output: copied from a device buffer made once
                self.lits[j] = _put_one(np.asarray(r[1]), bound.dev, None)
        self.graph_safe = bound.graph_safe()

    def base(self, ws: int) -> list[int]:
        """The body's address list for a call whose workspace starts at ``ws``."""
        ptr = [0] * self.bound.n_slots
        for sl, off in self._arena:
            ptr[sl] = ws + self.layout.arena + off
        for sl, off in self.layout.outs.items():
            ptr[sl] = ws + off
        return ptr

    def run(self, ptr: list[int], arena: int, dests: list[int | None]) -> list[int]:
        """Queue the body on ``ptr`` (inputs set); output ``j`` goes to ``dests[j]`` where not
        None. Returns each output's address."""
        b = self.bound
        for sl, src in self._donated:
            ptr[sl] = ptr[src]
        for j, d in enumerate(dests):
            sl = self.place_slot[j]
            if d is not None and sl is not None:
                ptr[sl] = d
        keep: list[Any] = [None] * b.n_slots
        if profiler.enabled:  # BLU_PROFILE=1: each body step a row of its own
            for step, (name, nbytes, flops, peak) in zip(b.steps, b.work):
                with profiler.region(name, b.dev.stream_id, nbytes, flops, None, peak):
                    b._step(step, ptr, keep, arena)
        else:
            for step in b.steps:
                b._step(step, ptr, keep, arena)
        addrs = []
        for j, r in enumerate(self.recipes):
            kind, sl = r[0], r[3]
            src = self.lits[j].ptr if kind == "lit" else ptr[sl]
            d = dests[j]
            if d is not None and self.place_slot[j] is None and d != src and self.nbytes[j]:
                b.dev.copy_d2d(d, src, self.nbytes[j])
                src = d
            addrs.append(d if d is not None else src)
        self._keep = keep  # fallback results live until the next run queues after them
        return addrs


class LoopStep:
    """A loop node bound to a device: ``run(ptr, keep, arena_ptr)`` queues it on the stream
    (``ptr``: the outer program's addresses); ``graph_safe``: nothing in it waits for the GPU
    (a scan whose bodies are graph-safe); ``launches``: steps it queues per call (at least)."""

    def __init__(self, bound: Any, step: Any, body_bounds: list[Any]):
        e = step.node.eqns[0]
        self.e, self.name, self.dev = e, e.primitive.name, bound.dev
        self.layout = LoopLayout(step.node)
        self.bodies = [_Body(b, lay) for b, lay in zip(body_bounds, self.layout.bodies)]
        self.ins = step.ins
        self.outs = step.outs
        self.ws = step.scratch[0] if step.scratch else 0
        # literal operands: device buffers made once
        self.lit_bufs = {j: _put_one(literal_value(a), self.dev, None)
                         for j, a in enumerate(self.ins) if isinstance(a, Literal)}  # fmt: skip
        self.in_bytes = [_nbytes(a.aval) for a in e.invars]
        self.out_bytes = [_nbytes(v.aval) for v in e.outvars]
        inner = all(b.graph_safe for b in self.bodies)
        self.graph_safe = self.name == "scan" and inner
        # a while loop decided on the device (a conditional WHILE node) where its bodies can
        # be captured and the driver has such nodes; else the host reads each predicate
        self.on_device = (
            self.name in ("while", "cond")
            and inner
            and not bound.fake
            and bool(getattr(bound.exe.options, "conditional_nodes", True))
            and _conditional_supported(self.name)
        )
        self._graphs: dict[tuple, Any] = {}
        per = sum(len(b.bound.steps) for b in self.bodies)
        self.launches = per * (e.params["length"] if self.name == "scan" else 1)

    def _in(self, ptr: list[int]) -> list[int]:
        return [self.lit_bufs[j].ptr if j in self.lit_bufs else ptr[a]
                for j, a in enumerate(self.ins)]  # fmt: skip

    def run(self, ptr: list[int], keep: list[Any], arena_ptr: int) -> None:
        ws = arena_ptr + self.ws
        ins = self._in(ptr)
        outs = [ptr[o] for o in self.outs]
        if self.name == "scan":
            self._scan(ins, outs, ws)
        elif self.name == "while":
            self._while(ins, outs, ws)
        else:
            self._cond(ins, outs, ws)

    def _scan(self, ins: list[int], outs: list[int], ws: int) -> None:
        p, dev, lay = self.e.params, self.dev, self.layout
        nc, nk, length = p["num_consts"], p["num_carry"], p["length"]
        body = self.bodies[0]
        consts, init, xs = ins[:nc], ins[nc : nc + nk], ins[nc + nk :]
        carry_out, ys = outs[:nk], outs[nk:]
        spare = [None if off is None else ws + off for off in lay.spare]
        if length == 0:
            for d, s, n in zip(carry_out, init, self.out_bytes):
                if n and d != s:
                    dev.copy_d2d(d, s, n)
            return
        inplace = lay.inplace
        read = self._start_in_place(init, carry_out, inplace)
        x_rb = [_row_bytes(v.aval) for v in self.e.invars[nc + nk :]]
        y_rb = [_row_bytes(v.aval) for v in self.e.outvars[nk:]]
        order = range(length - 1, -1, -1) if p["reverse"] else range(length)
        base = body.base(ws)
        arena = ws + body.layout.arena
        b_in = body.in_slots
        for n, i in enumerate(order):
            bp = list(base)
            for sl, a in zip(b_in, consts):
                bp[sl] = a
            for sl, a in zip(b_in[nc : nc + nk], read):
                bp[sl] = a
            for j, (sl, x, rb) in enumerate(zip(b_in[nc + nk :], xs, x_rb)):
                row = x + i * rb
                if j in lay.x_rows:  # an unaligned row: through an aligned buffer
                    tmp = ws + lay.x_rows[j]
                    if rb:
                        dev.copy_d2d(tmp, row, rb)
                    row = tmp
                bp[sl] = row
            # the last iteration writes the node's outputs; the ones before alternate (a carry
            # updated in place stays where it is)
            last = (length - 1 - n) % 2 == 0
            dests: list[int | None] = [
                None if inplace[k] else (carry_out[k] if last else spare[k]) for k in range(nk)
            ]
            for j, (y, rb) in enumerate(zip(ys, y_rb)):
                dests.append(ws + lay.y_rows[j] if j in lay.y_rows else y + i * rb)
            got = body.run(bp, arena, dests)
            for j, (y, rb) in enumerate(zip(ys, y_rb)):
                if j in lay.y_rows and rb:
                    dev.copy_d2d(y + i * rb, got[nk + j], rb)
            read = got[:nk]

    def _start_in_place(self, init: list[int], outs: list[int], inplace: list[bool]) -> list:
        """The carry's first addresses: a carry updated in place starts as a copy of its
        initial value in the node's output (the initial value may be read after the loop)."""
        read = list(init)
        for k, (d, s, nb) in enumerate(zip(outs, init, self.out_bytes)):
            if inplace[k]:
                if nb and d != s:
                    self.dev.copy_d2d(d, s, nb)
                read[k] = d
        return read

    def _while(self, ins: list[int], outs: list[int], ws: int) -> None:
        if self.on_device and not profiler.enabled:
            self._while_on_device(ins, outs, ws)
            return
        p, dev, lay = self.e.params, self.dev, self.layout
        ncc, nbc = p["cond_nconsts"], p["body_nconsts"]
        cond, body = self.bodies
        cc, bc, init = ins[:ncc], ins[ncc : ncc + nbc], ins[ncc + nbc :]
        spare = [None if off is None else ws + off for off in lay.spare]
        inplace = lay.inplace
        read = self._start_in_place(init, outs, inplace)
        c_base, b_base = cond.base(ws), body.base(ws)
        c_arena, b_arena = ws + cond.layout.arena, ws + body.layout.arena
        pred_addr = ws + lay.pred
        flag = np.zeros((), np.bool_)
        n = 0
        while True:
            cp = list(c_base)
            for sl, a in zip(cond.in_slots, [*cc, *read]):
                cp[sl] = a
            cond.run(cp, c_arena, [pred_addr])
            dev.copy_d2h(flag, pred_addr)  # (waits: the trip count is data)
            if not flag:
                break
            write = outs if n % 2 == 0 else spare
            bp = list(b_base)
            for sl, a in zip(body.in_slots, [*bc, *read]):
                bp[sl] = a
            dests = [None if inplace[k] else w for k, w in enumerate(write)]
            read = body.run(bp, b_arena, dests)
            n += 1
        for d, s, nb in zip(outs, read, self.out_bytes):
            if nb and d != s:
                dev.copy_d2d(d, s, nb)

    def _while_on_device(self, ins: list[int], outs: list[int], ws: int) -> None:
        """The loop as a graph with a conditional WHILE node (``blu.cuda.conditional``): the
        carry lives in the node's outputs (a carry not updated in place is written to the
        spare and copied back each iteration); nothing waits for the GPU."""
        p, dev, lay = self.e.params, self.dev, self.layout
        ncc, nbc = p["cond_nconsts"], p["body_nconsts"]
        cond, body = self.bodies
        cc, bc, init = ins[:ncc], ins[ncc : ncc + nbc], ins[ncc + nbc :]
        spare = [None if off is None else ws + off for off in lay.spare]
        inplace = lay.inplace
        for d, s, nb in zip(outs, init, self.out_bytes):  # the carry starts in the outputs
            if nb and d != s:
                dev.copy_d2d(d, s, nb)
        c_arena, b_arena = ws + cond.layout.arena, ws + body.layout.arena
        pred_addr = ws + lay.pred

        def condition() -> None:
            cp = cond.base(ws)
            for sl, a in zip(cond.in_slots, [*cc, *outs]):
                cp[sl] = a
            cond.run(cp, c_arena, [pred_addr])

        def iteration() -> None:
            bp = body.base(ws)
            for sl, a in zip(body.in_slots, [*bc, *outs]):
                bp[sl] = a
            dests = [None if inplace[k] else spare[k] for k in range(len(outs))]
            got = body.run(bp, b_arena, dests)
            for d, s, nb in zip(outs, got, self.out_bytes):
                if nb and d != s:
                    dev.copy_d2d(d, s, nb)
            condition()

        condition()  # the first decision, queued before the graph
        from blu.cuda.conditional import WhileGraph

        if not self._launch_graph((*ins, *outs, ws), lambda: WhileGraph(dev, pred_addr, iteration)):
            self._while(ins, outs, ws)  # (on the host from now on)

    def _launch_graph(self, key: tuple, make: Callable[[], Any]) -> bool:
        """Launch the conditional graph of these addresses (``make()`` builds it, the last
        ``MAX_WHILE_GRAPHS`` are kept); False where the driver refused to build it (a body it
        cannot hold): the loop then decides on the host, from now on."""
        g = self._graphs.pop(key, None)
        if g is None:
            if len(self._graphs) >= MAX_WHILE_GRAPHS:
                self._graphs.pop(next(iter(self._graphs))).destroy()
            try:
                g = make()
            except Exception as e:  # noqa: BLE001 - named in the log, then the host decides
                log.warning("%s %s: no conditional graph (%s: %s); the host decides",
                            self.name, self.e.source or "", type(e).__name__, e)  # fmt: skip
                self.on_device = False
                return False
        self._graphs[key] = g  # (most recent last)
        g.launch()
        return True

    def _branch(self, br: _Body, ins: list[int], outs: list[int], ws: int) -> None:
        bp = br.base(ws)
        for sl, a in zip(br.in_slots, ins[1:]):
            bp[sl] = a
        br.run(bp, ws + br.layout.arena, list(outs))

    def _cond(self, ins: list[int], outs: list[int], ws: int) -> None:
        idx_aval = self.e.invars[0].aval
        if 0 in self.lit_bufs:
            i = int(literal_value(self.ins[0]))
        elif self.on_device and not profiler.enabled and self._cond_on_device(ins, outs, ws):
            return
        else:
            h = np.empty((), idx_aval.dtype)
            self.dev.copy_d2h(h, ins[0])  # (waits: the branch is data)
            i = int(h)
        br = self.bodies[min(max(i, 0), len(self.bodies) - 1)]  # clamped, as in XLA
        self._branch(br, ins, outs, ws)

    def _cond_on_device(self, ins: list[int], outs: list[int], ws: int) -> bool:
        """The branch chosen on the device: a graph with a conditional SWITCH node
        (``blu.cuda.conditional``), keyed by the addresses; False where the driver refused it
        (then the host reads the index, from now on)."""
        from blu.cuda.conditional import SwitchGraph

        branches = [lambda br=br: self._branch(br, ins, outs, ws) for br in self.bodies]
        return self._launch_graph((*ins, *outs, ws),
                                  lambda: SwitchGraph(self.dev, ins[0], branches))  # fmt: skip
