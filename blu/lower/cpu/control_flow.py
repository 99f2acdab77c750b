"""Control flow on the CPU: ``scan``, ``while`` and ``cond`` as ``loop`` nodes.

Each body (a scan body, a while loop's condition and body, each branch of a cond) is compiled
once, with the program, as a ``CpuExecutable`` of its own: its fused kernels, products and
memory plan are made like any program's. A loop node's step then runs the body's step runners
directly, iteration after iteration, on buffers placed once per call (the body's arena, its
outputs), instead of interpreting the body's jaxpr with the numpy impls per iteration. The carry
lives in two buffers that swap roles each iteration; a scan's stacked outputs are written
straight into the node's planned buffers.

Nothing of a body is re-planned or re-dispatched per iteration: what remains on the host per
iteration is the loop itself and one call per body step (a few microseconds each).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from blu.core.jaxpr import Jaxpr
from blu.lower.plan.steps import Step, literal_value

__all__ = ["Body", "loop_runner"]


class Body:
    """A body jaxpr compiled as an executable, run repeatedly on buffers placed once per call.

    ``start()`` takes an arena and places every planned buffer; ``run(session, args)`` runs the
    body's steps on ``args`` and returns its outputs (views of the body's buffers: valid until
    the next ``run`` of the same session); ``finish(session)`` gives the arena back.
    """

    def __init__(self, exe: Any):
        self.exe = exe
        self.runs = [run for _, run, _ in exe.runners]
        self.kernels = [run for run in self.runs if hasattr(run, "remember")]
        self.in_slots = exe.in_slots
        self.out_spec = exe.out_spec
        # per output, the slot of the buffer the body writes it into, where the loop may choose
        # that buffer (an output of its own, returned once), else None (it is copied)
        own = {slot for st in exe.steps.steps for slot, place, _ in st.allocs if place[0] == "out"}
        slots = [x if kind == "var" else None for kind, x in self.out_spec]
        self.out_slots = [s if s in own and slots.count(s) == 1 else None for s in slots]

    def start(self) -> tuple[list, np.ndarray, bool]:
        exe = self.exe
        arena, owned = exe._take_arena()
        if owned:  # (a concurrent call runs its kernels with pointer arrays of its own)
            for k in self.kernels:
                k.remember(True)
        env: list[Any] = [None] * exe.n_slots
        for allocs, _, _ in exe.runners:
            for slot, place, aval in allocs:  # a body donates nothing: arena or fresh arrays
                env[slot] = exe._buffer(place, aval, arena, env, ())
        return env, arena, owned

    def run(self, session: tuple[list, np.ndarray, bool], args: list) -> list:
        env, arena, owned = session
        for s, a in zip(self.in_slots, args):
            env[s] = a
        for run in self.runs:
            run(env, arena, owned)
        return [env[x] if kind == "var" else x for kind, x in self.out_spec]

    def place(self, session: tuple[list, np.ndarray, bool], k: int, buf: np.ndarray) -> None:
        """Make the body write output ``k`` into ``buf`` (``out_slots[k]`` is not None; ``buf``
        is dense, of the output's shape and dtype, and not read by the body)."""
        session[0][self.out_slots[k]] = buf

    def finish(self, session: tuple[list, np.ndarray, bool]) -> None:
        if session[2]:
            for k in self.kernels:
                k.remember(False)
            self.exe._arena_lock.release()


def _read(env: list, a: Any) -> np.ndarray:
    x = env[a] if isinstance(a, int) else literal_value(a)
    return x if x.flags.c_contiguous else np.ascontiguousarray(x)


class _Carry:
    """A loop carry in two sets of buffers: the body reads one set and writes its results into
    the other, then they swap. Where the body's result is a buffer of its own, the body is made
    to write it straight into the spare set (``Body.place``); other results (an input returned
    as it is, two carries swapped) are copied there."""

    def __init__(self, init: list[np.ndarray], body: Body, session: tuple, first: int = 0):
        self.cur = [np.array(c, order="C", copy=True) for c in init]
        self.spare = [np.empty_like(c) for c in self.cur]
        self.body, self.session = body, session
        self.placed = [k for k in range(len(init)) if body.out_slots[first + k] is not None]
        self.first = first
        self._place()

    def _place(self) -> None:
        for k in self.placed:
            self.body.place(self.session, self.first + k, self.spare[k])

    def update(self, results: list) -> None:
        for s, r in zip(self.spare, results):
            if r is not s:
                np.copyto(s, r)
        self.cur, self.spare = self.spare, self.cur
        self._place()


class _LoopStep:
    """The step runner of a loop node: ``run(env, arena, owned)``; ``bodies`` its compiled
    bodies (``Body``)."""

    def __init__(self, bodies: list[Body], run: Callable[[list], None]):
        self.bodies, self._run = bodies, run

    def __call__(self, env: list, arena: Any, owned: bool) -> None:
        self._run(env)


def loop_runner(step: Step, compile_body: Callable[[Jaxpr, str], Any]) -> _LoopStep:
    """The runner of a ``loop`` step; ``compile_body(jaxpr, tag)`` compiles a body."""
    e = step.node.eqns[0]
    name = e.primitive.name
    if name == "scan":
        return _scan(step, e.params, compile_body)
    if name == "while":
        return _while(step, e.params, compile_body)
    if name == "cond":
        return _cond(step, e.params, compile_body)
    raise NotImplementedError(f"no CPU loop for {name}")


def _scan(step: Step, p: dict, compile_body: Callable) -> _LoopStep:
    body = Body(compile_body(p["jaxpr"], "scan"))
    nc, nk, length, reverse = p["num_consts"], p["num_carry"], p["length"], p["reverse"]
    ins, outs = step.ins, step.outs
    order = range(length - 1, -1, -1) if reverse else range(length)

    def run(env: list) -> None:
        vals = [_read(env, a) for a in ins]
        consts, xs = vals[:nc], vals[nc + nk :]
        ys = [env[o] for o in outs[nk:]]
        session = body.start()
        carry = _Carry(vals[nc : nc + nk], body, session)
        # a stacked output the body writes itself is written straight into its row
        direct = [j for j in range(len(ys)) if body.out_slots[nk + j] is not None]
        try:
            for i in order:
                rows = [y[i, ...] for y in ys]
                for j in direct:
                    body.place(session, nk + j, rows[j])
                res = body.run(session, consts + carry.cur + [x[i, ...] for x in xs])
                for row, r in zip(rows, res[nk:]):
                    if r is not row:
                        row[...] = r
                carry.update(res[:nk])
        finally:
            body.finish(session)
        for o, c in zip(outs[:nk], carry.cur):
            np.copyto(env[o], c)

    return _LoopStep([body], run)


def _while(step: Step, p: dict, compile_body: Callable) -> _LoopStep:
    cond = Body(compile_body(p["cond_jaxpr"], "while_cond"))
    body = Body(compile_body(p["body_jaxpr"], "while_body"))
    ncc, nbc = p["cond_nconsts"], p["body_nconsts"]
    ins, outs = step.ins, step.outs

    def run(env: list) -> None:
        vals = [_read(env, a) for a in ins]
        cc, bc = vals[:ncc], vals[ncc : ncc + nbc]
        cs, bs = cond.start(), body.start()
        carry = _Carry(vals[ncc + nbc :], body, bs)
        try:
            while bool(cond.run(cs, cc + carry.cur)[0]):
                carry.update(body.run(bs, bc + carry.cur))
        finally:
            cond.finish(cs)
            body.finish(bs)
        for o, c in zip(outs, carry.cur):
            np.copyto(env[o], c)

    return _LoopStep([cond, body], run)


def _cond(step: Step, p: dict, compile_body: Callable) -> _LoopStep:
    branches = [Body(compile_body(b, f"branch{i}")) for i, b in enumerate(p["branches"])]
    ins, outs = step.ins, step.outs

    def run(env: list) -> None:
        vals = [_read(env, a) for a in ins]
        i = min(max(int(vals[0]), 0), len(branches) - 1)  # out-of-range indices clamp, as in XLA
        br = branches[i]
        session = br.start()
        try:
            for o, r in zip(outs, br.run(session, vals[1:])):
                np.copyto(env[o], r)
        finally:
            br.finish(session)

    return _LoopStep(branches, run)
