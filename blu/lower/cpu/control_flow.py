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

A product hoisted out of a scan (``plan/scan_hoist.py``: ``xs @ W`` made before the loop, read
row by row) is streamed (``_Stream``): the executable hands it to the loop node
(``_LoopStep.stream``), which computes it in chunks of rows on another core while the loop
consumes the rows already made, waiting only where it catches up. The loop's own products run
one after the other on one core; the other core would otherwise idle through the whole loop.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from blu.core.config import config
from blu.core.jaxpr import Jaxpr
from blu.lower.cpu import blas
from blu.lower.cpu.pool import Pool, Task
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
        """A session ``(env, arena, owned)``; ``owned``: it took the body's own arena (then
        ``finish`` gives it back; on an error here, this does)."""
        exe = self.exe
        mine = exe._arena_lock.free_here()
        try:
            arena, owned = exe._take_arena(mine)
            if owned:  # (a concurrent call runs its kernels with pointer arrays of its own)
                for k in self.kernels:
                    k.remember(True)
            env: list[Any] = [None] * exe.n_slots
            for allocs, _, _ in exe.runners:
                for slot, place, aval in allocs:  # a body donates nothing: arena or fresh
                    env[slot] = exe._buffer(place, aval, arena, env, ())
            return env, arena, owned
        except BaseException:  # (an interrupt too: the arena's lock is not left held)
            if mine and not exe._arena_lock.free_here():  # (taken here)
                for k in self.kernels:
                    k.remember(False)
            exe._arena_lock.release_if_held(mine)
            raise

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
            try:
                for k in self.kernels:
                    k.remember(False)
            finally:
                self.exe._arena_lock.release_if_held()


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


class _Pins:
    """The addresses a scan body's kernels read and write per iteration, set by the loop
    (``pins(env, i, n)``) instead of read from the arrays by the kernels: a row's address is the
    stacked array's plus ``i`` rows, a carry's one of two made once per call; reading an
    array's address (``.ctypes.data``, which builds an object) would cost a large part of the
    kernel's time on an RNN's rows. Only while the body's kernels remember their arrays
    (``_Kernel.remember``:
    they then skip an argument whose array is the one pinned)."""

    def __init__(self, body, owned, c_slots, x_slots, placed, direct, cur, spare, xs, ys):
        feeds: dict[int, list] = {}
        if owned:
            for k in body.kernels:
                if getattr(k, "last", None) is not None and hasattr(k, "ptrs"):
                    for pos, sl in enumerate(k.args):
                        feeds.setdefault(sl, []).append((k.last, k.ptrs, pos))
        rows = [(sl, x) for sl, x in zip(x_slots, xs)] + [(sl, ys[j]) for j, sl in direct]
        self.rows = [(sl, f, a.ctypes.data, a.strides[0] if a.ndim else 0)
                     for sl, a in rows if a.ndim and (f := feeds.get(sl))]  # fmt: skip
        # a carry's buffers swap every iteration: in even iterations the body reads ``cur``
        # and writes ``spare``, in odd ones the other way round
        bufs = [(sl, f, cur[k], spare[k]) for k, sl in enumerate(c_slots) if (f := feeds.get(sl))]
        bufs += [(sl, f, spare[k], cur[k]) for k, sl in placed if (f := feeds.get(sl))]
        self.bufs = [(sl, f, (a, a.ctypes.data), (b, b.ctypes.data)) for sl, f, a, b in bufs]
        self.on = bool(self.rows or self.bufs)

    def __call__(self, env: list, i: int, n: int) -> None:
        for sl, feed, base, stride in self.rows:
            x, addr = env[sl], base + i * stride
            for last, ptrs, pos in feed:
                last[pos] = x
                ptrs[pos] = addr
        for _sl, feed, even, odd in self.bufs:
            x, addr = odd if n & 1 else even
            for last, ptrs, pos in feed:
                last[pos] = x
                ptrs[pos] = addr


class _LoopStep:
    """The step runner of a loop node: ``run(env, arena, owned)``; ``bodies`` its compiled
    bodies (``Body``); ``streams`` the products it computes while it runs (``stream``)."""

    def __init__(self, bodies: list[Body], run: Callable[[list], None], xs: list | None = None):
        self.bodies, self._run = bodies, run
        self.xs = xs  # a scan's scanned-over inputs (their slots), else None
        self.ins: list = []  # the slots the loop reads (set by the loop's maker)
        self.streams: list[tuple[int, int, int, int]] = []

    def __call__(self, env: list, arena: Any, owned: bool) -> None:
        self._run(env)

    def can_stream(self, eqn: Any, ins: list, out: int) -> bool:
        """Whether this loop can compute product ``eqn`` (``out = dot(ins)``, the step just
        before it) itself, streamed (see the module docstring): ``out`` is a scanned-over input
        of this scan, a product of a stacked lhs (its rows, axis 0, the scan's) and an rhs in
        the layouts one 2-D BLAS product reads, both read by the loop too (so alive and
        unchanged until it ends)."""
        if self.xs is None or out not in self.xs or not all(isinstance(a, int) for a in ins):
            return False
        (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
        la, ra, oa = (v.aval for v in (*eqn.invars, eqn.outvars[0]))
        nl = len(la.shape)
        return (
            not lb and not rb and nl >= 2 and 0 not in lc
            and tuple(lc) == tuple(range(nl - len(lc), nl)) and tuple(rc) == tuple(range(len(rc)))
            and la.dtype == ra.dtype == oa.dtype and np.dtype(oa.dtype) in _BLAS_DTYPES
            and all(a in self.ins for a in ins)
        )  # fmt: skip

    def stream(self, eqn: Any, ins: list, out: int) -> None:
        """Compute ``out = ins[0] @ ins[1]`` (``can_stream``) in this loop's call from now on."""
        (lc, _), _ = eqn.params["dimension_numbers"]
        self.streams.append((ins[0], ins[1], out, len(lc)))


_BLAS_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
STREAM_THREADS = 4  # threads of the stream pool (loops streaming at once)
STREAM_MIN_LENGTH = 8  # shorter loops compute their hoisted products before they start
STREAM_FIRST_ROWS = 4  # rows of a streamed product made before the loop starts
# while a loop streams, the interpreter hands the GIL over after this long (seconds) instead of
# its default 5 ms: the worker needs the GIL for a moment between chunks, and a loop busy with
# short calls takes it back before the waiting worker wakes (it would wait out the interval)
STREAM_SWITCH_INTERVAL = 1e-4


class _Stream:
    """Hoisted products ``out[t] = lhs[t] @ rhs`` computed in chunks of rows, in the loop's
    order, on a worker thread: ``wait_at[n]`` (where present) is released once the rows of the
    loop's ``n``-th iteration and those after it in its chunk exist; ``close()`` waits for the
    worker (always called: it writes into the loop's inputs) and raises what it raised."""

    def __init__(self, products: list[tuple], order: range):
        self.order = order
        n = len(order)
        # the first rows are made here, while the worker wakes up; then chunks twice as large
        # each time (the worker gets ahead of the loop, and takes the GIL between chunks only)
        self.cuts = [0, min(n, STREAM_FIRST_ROWS)]
        while self.cuts[-1] < n:
            self.cuts.append(min(n, 2 * self.cuts[-1]))
        # one lock per chunk, taken here and released by the worker once its rows exist: the
        # loop waits with ``acquire`` (C; an ``Event``'s wait goes through ``Condition.__enter__``,
        # Python: an interrupt there left its lock held, and the worker's ``set`` hung)
        self.events = [threading.Lock() for _ in self.cuts[2:]]
        for ev in self.events:
            ev.acquire()
        self.wait_at = dict(zip(self.cuts[1:], self.events))
        self.products = [_as_2d(*p) for p in products]
        # the worker's task, made before it is submitted: ``close`` waits for it or takes it
        # back, whatever interrupts what (it writes into buffers the next call uses)
        self.task = Task(self._work)
        try:  # (in this thread's context: its flags, ``config.override`` included)
            _stream_pool().submit(self.task, contextvars.copy_context())
            self._chunk(0, self.cuts[1])
        except BaseException:
            self.task.finish()
            raise

    def _chunk(self, c0: int, c1: int) -> None:
        lo, hi = sorted((self.order[c0], self.order[c1 - 1]))
        with np.errstate(over="ignore", invalid="ignore"):  # as the products in the loop
            for lhs, rhs, out, m in self.products:
                blas.mm(lhs[lo * m : (hi + 1) * m], rhs, out[lo * m : (hi + 1) * m])

    def _work(self) -> None:
        blas.use_threads(1)
        done = 0
        try:
            for c0, c1, ev in zip(self.cuts[1:], self.cuts[2:], self.events):
                self._chunk(c0, c1)
                done += 1
                ev.release()
        finally:
            for ev in self.events[done:]:  # a failed product: the loop stops waiting (close
                ev.release()  # raises)

    def close(self) -> None:
        """Wait for the worker (also when interrupted while waiting: it writes into buffers the
        next call uses); raise what it raised, or the interrupt."""
        _, err = self.task.finish()
        if err is not None:
            raise err


def _as_2d(lhs: np.ndarray, rhs: np.ndarray, out: np.ndarray, k: int) -> tuple:
    """``(lhs2, rhs2, out2, m)``: the product's operands as 2-D matrices whose rows ``t * m``
    to ``(t + 1) * m`` are row ``t`` of the stacked ``lhs`` / ``out`` (``k``: the number of
    contracted axes, the trailing ones of ``lhs``, the leading ones of ``rhs``)."""
    size = lambda shape: int(np.prod(shape, dtype=np.int64))  # noqa: E731
    t, kk = lhs.shape[0], size(rhs.shape[:k])
    m, n = size(lhs.shape[1 : lhs.ndim - k]), size(rhs.shape[k:])
    return lhs.reshape(t * m, kk), rhs.reshape(kk, n), out.reshape(t * m, n), m


def _product(lhs: np.ndarray, rhs: np.ndarray, out: np.ndarray, k: int) -> None:
    """A streamed product made at once (``out`` may be any array of its shape)."""
    dense = out if out.flags.c_contiguous else np.empty(out.shape, out.dtype)
    lhs2, rhs2, out2, _ = _as_2d(lhs, rhs, dense, k)
    flops = 2.0 * lhs2.shape[0] * lhs2.shape[1] * rhs2.shape[1]
    blas.matmul(lhs2[None], rhs2[None], out2[None], blas.threads_for(flops))
    if dense is not out:
        np.copyto(out, dense)


_switch_lock = threading.Lock()
_switch_users = 0
_switch_saved = 0.005


@contextlib.contextmanager
def _quick_switches() -> Iterator[None]:
    """``sys.setswitchinterval(STREAM_SWITCH_INTERVAL)`` while any loop streams (the previous
    interval back when the last one ends)."""
    global _switch_users, _switch_saved
    with _switch_lock:
        if _switch_users == 0:
            _switch_saved = sys.getswitchinterval()
            sys.setswitchinterval(min(_switch_saved, STREAM_SWITCH_INTERVAL))
        _switch_users += 1
    try:
        yield
    finally:
        with _switch_lock:
            _switch_users -= 1
            if _switch_users == 0:
                sys.setswitchinterval(_switch_saved)


_pool: Pool | None = None
_pool_lock = threading.Lock()


def _after_fork() -> None:
    """A forked child has none of the parent's stream threads: a pool it inherited takes the
    products and never runs them (the loop then waits for their rows for ever); the switch
    interval a streaming loop of the parent had set is put back."""
    global _pool, _pool_lock, _switch_lock, _switch_users
    _pool, _pool_lock, _switch_lock = None, threading.Lock(), threading.Lock()
    if _switch_users:
        sys.setswitchinterval(_switch_saved)
    _switch_users = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _stream_pool() -> Pool:
    """The threads of streamed products (their own: a loop body's products split on blas's
    pool must not queue behind a stream that lasts the whole loop)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = Pool("blu-stream")
            _pool.grow(STREAM_THREADS)
        return _pool


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
        products = [(env[a], env[b], env[o], k) for a, b, o, k in loop.streams]
        if config.debug_nans:  # the product's own step made it (and checked it)
            products = []
        if (products and length >= STREAM_MIN_LENGTH and blas.threads_for(float("inf")) > 1
                and all(p[2].flags.c_contiguous for p in products)):  # fmt: skip
            with _quick_switches():
                stream = _Stream(products, order)
                try:
                    _run(env, stream)
                finally:
                    stream.close()
            return
        for lhs, rhs, out, k in products:  # (no other core, or too short to pay): before
            _product(lhs, rhs, out, k)
        _run(env, None)

    b_in = body.in_slots
    c_slots, x_slots = b_in[nc : nc + nk], b_in[nc + nk :]
    c_spec, y_spec = body.out_spec[:nk], body.out_spec[nk:]
    # outputs the body writes itself, into the loop's buffers: the next carry, a stacked row
    placed = [(k, body.out_slots[k]) for k in range(nk) if body.out_slots[k] is not None]
    direct = [(j, body.out_slots[nk + j]) for j in range(len(y_spec))
              if body.out_slots[nk + j] is not None]  # fmt: skip
    copied = [j for j in range(len(y_spec)) if body.out_slots[nk + j] is None]

    def _run(env: list, stream: _Stream | None) -> None:
        vals = [_read(env, a) for a in ins]
        consts, xs = vals[:nc], vals[nc + nk :]
        ys = [env[o] for o in outs[nk:]]
        cur = [np.array(c, order="C", copy=True) for c in vals[nc : nc + nk]]
        spare = [np.empty_like(c) for c in cur]
        wait_at = stream.wait_at if stream is not None else {}
        session = body.start()
        try:
            benv, arena, owned = session
            for sl, c in zip(b_in[:nc], consts):
                benv[sl] = c
            pins = _Pins(body, owned, c_slots, x_slots, placed, direct, cur, spare, xs, ys)
            for n, i in enumerate(order):
                ev = wait_at.get(n)
                if ev is not None:
                    ev.acquire()  # (the worker released it: its rows are there)
                for sl, c in zip(c_slots, cur):
                    benv[sl] = c
                for k, sl in placed:
                    benv[sl] = spare[k]
                for sl, x in zip(x_slots, xs):
                    benv[sl] = x[i, ...]  # (a view: ``x[i]`` of a vector is a scalar)
                for j, sl in direct:
                    benv[sl] = ys[j][i, ...]
                if pins.on:
                    pins(benv, i, n)
                for r in body.runs:
                    r(benv, arena, owned)
                for c, (kind, x) in zip(spare, c_spec):
                    r = benv[x] if kind == "var" else x
                    if r is not c:
                        np.copyto(c, r)
                for j in copied:
                    kind, x = y_spec[j]
                    ys[j][i, ...] = benv[x] if kind == "var" else x
                cur, spare = spare, cur
        finally:
            body.finish(session)
        for o, c in zip(outs[:nk], cur):
            np.copyto(env[o], c)

    loop = _LoopStep([body], run, [a for a in ins[nc + nk :]])
    loop.ins = ins
    return loop


def _while(step: Step, p: dict, compile_body: Callable) -> _LoopStep:
    cond = Body(compile_body(p["cond_jaxpr"], "while_cond"))
    body = Body(compile_body(p["body_jaxpr"], "while_body"))
    ncc, nbc = p["cond_nconsts"], p["body_nconsts"]
    ins, outs = step.ins, step.outs

    def run(env: list) -> None:
        vals = [_read(env, a) for a in ins]
        cc, bc = vals[:ncc], vals[ncc : ncc + nbc]
        cs = cond.start()
        try:
            bs = body.start()
            try:
                carry = _Carry(vals[ncc + nbc :], body, bs)
                while bool(cond.run(cs, cc + carry.cur)[0]):
                    carry.update(body.run(bs, bc + carry.cur))
            finally:
                body.finish(bs)
        finally:
            cond.finish(cs)
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
