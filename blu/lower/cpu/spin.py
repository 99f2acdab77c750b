"""Spinning worker threads: native loops that run a part of a split step (BLAS products,
compiled kernels, row copies) with no Python, no GIL and no wake-up on the hot path.

Why: a part handed to a blocking pool thread starts when its core wakes up, and on the 2-core
development VM (no cpuidle driver: an idle vCPU halts) that took tens of microseconds (the MLP
training step's split steps; docs/benchmarks/cpu_backend.md, session 9);
a part then runs Python (its product's argument checks) before its first BLAS call. Here the
other core's thread waits in a native loop for the next part while an executable runs, and runs
it as soon as it is posted (``Worker.post``): a list of calls (``Ops``) made by running the part's
Python once on the caller's thread in *recording* mode (``record``): ``blas.gemm`` and the kernel
calls (``call``) append what they would call to the list instead of calling it.

The loop (``_source``, the LLVM dialect) is compiled in this process by MLIR's execution engine
when a split step first posts, and never written to the kernel cache, so nothing on disk is ever
run; its indirect calls go only to the addresses blu puts in the list (the BLAS's
``cblas_?gemm``, blu's own compiled kernels, libc's ``clock_gettime`` and ``sched_yield``). It
follows this protocol, over one ``int64`` control block per worker (``_Slot`` names its fields):

- the caller writes the ops, then ``post`` raises ``SEQ`` (a release store);
- whoever moves ``CLAIMED`` from ``SEQ - 1`` to ``SEQ`` first (a compare-and-swap) runs them: the
  worker, or the caller itself in ``finish`` when the worker has not started them (asleep, or
  its core busy: the part is never left waiting for a thread that does not come); the runner
  stores the end time (``T_END``, ``CLOCK_MONOTONIC`` like ``time.perf_counter``) and ``DONE``;
- the worker spins (x86 ``pause``) while the executable that woke it runs, yields its core
  (``sched_yield``) after ``YIELD_NS`` without work, and returns to Python (where it blocks on an
  ``Event``) when ``PARK`` is set (the outermost executable call ended: ``leave``) or after
  ``SPIN_NS`` without work. Nothing spins outside blu's calls.

``config.cpu_spin`` (``BLU_CPU_SPIN``) turns it off: the parts then go to the blocking pool of
``blas.py``, as they do where MLIR cannot compile the loop or a part does something the list
cannot hold (numpy's own matmul, more than ``MAX_OPS`` calls).
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import importlib.util
import logging
import os
import platform
import queue
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from blu.core.config import config
from blu.lower.cpu import address, locks

__all__ = ["MAX_OPS", "NotRecordable", "Worker", "available", "call", "copy_rows", "enter",
           "gemm_op", "leave", "record", "recording", "workers"]  # fmt: skip

log = logging.getLogger("blu.jit")

MAX_OPS = 256  # calls one posted part may hold
SPIN_NS = 5_000_000  # a worker with no work for this long goes back to sleep (5 ms)
YIELD_NS = 50_000  # ... and after this long it yields its core at each check (50 us)


class _Slot:
    """Positions in a worker's control block (``int64``; 8 per 64-byte cache line: what the caller
    writes, the claim, and what the runner writes sit on separate lines)."""

    SEQ, PARK, SPIN_NS, CLOCK, YIELD, N_OPS, STOLEN, YIELD_NS = range(8)
    CLAIMED = 8
    DONE, T_END, ACTIVE = 16, 17, 18
    TS_WORKER, TS_CALLER = 24, 26  # struct timespec scratch (2 slots each)
    OPS, OP_SLOTS = 32, 16


# op kinds (slot 0 of an op; slot 1: the function's address)
KERNEL = 1  # fn(void **packed): blu's compiled kernels (``mlir_cpu.Kernel``)
SGEMM32, SGEMM64, DGEMM32, DGEMM64 = 2, 3, 4, 5  # cblas_?gemm, 32- or 64-bit integers
COPY = 6  # rows x bytes, strided: [dst, src, rows, row bytes, dst stride, src stride]

_S = _Slot
_GEMMS = {SGEMM32: ("i32", "f32"), SGEMM64: ("i64", "f32"), DGEMM32: ("i32", "f64"),
          DGEMM64: ("i64", "f64")}  # fmt: skip


def _slot(ptr: str, i: int | str, name: str) -> str:
    return f"    %{name} = llvm.getelementptr {ptr}[{i}] : (!llvm.ptr) -> !llvm.ptr, i64\n"


def _slots(**fields: int) -> str:
    """Pointers to the control block's fields: ``%name = &ctl[index]`` for each."""
    return "".join(_slot("%ctl", i, name) for name, i in fields.items())


def _gemm_block(kind: int) -> str:
    """The block of ``run_ops`` that calls a ``cblas_?gemm`` (row-major flags first: CBLAS enums
    are C ``int``; alpha and beta sit in their slots as float64 bits)."""
    it, rt = _GEMMS[kind]
    lines = [f"  ^g{kind}:"]
    args, types = [], []
    for j in range(2, 16):
        lines.append(_slot("%base", j, f"g{kind}p{j}").rstrip())
        if j in (9, 11, 14):  # a, b, c
            lines.append(f"    %g{kind}a{j} = llvm.load %g{kind}p{j} : !llvm.ptr -> !llvm.ptr")
            types.append("!llvm.ptr")
        elif j in (8, 13):  # alpha, beta
            lines.append(f"    %g{kind}r{j} = llvm.load %g{kind}p{j} : !llvm.ptr -> f64")
            if rt == "f32":
                lines.append(f"    %g{kind}a{j} = llvm.fptrunc %g{kind}r{j} : f64 to f32")
            else:
                lines.append(f"    %g{kind}a{j} = llvm.fadd %g{kind}r{j}, %zero_f : f64")
            types.append(rt)
        else:
            t = "i32" if j in (2, 3, 4) else it
            lines.append(f"    %g{kind}w{j} = llvm.load %g{kind}p{j} : !llvm.ptr -> i64")
            if t == "i32":
                lines.append(f"    %g{kind}a{j} = llvm.trunc %g{kind}w{j} : i64 to i32")
            else:
                lines.append(f"    %g{kind}a{j} = llvm.add %g{kind}w{j}, %zero : i64")
            types.append(t)
        args.append(f"%g{kind}a{j}")
    lines.append(f"    llvm.call %fn({', '.join(args)}) : !llvm.ptr, ({', '.join(types)}) -> ()")
    lines.append("    llvm.br ^next")
    return "\n".join(lines) + "\n"


def _pause() -> str:
    if platform.machine().lower() in ("x86_64", "amd64"):
        return '    llvm.call_intrinsic "llvm.x86.sse2.pause"() : () -> ()\n'
    return ""


def _source() -> str:
    s = _S
    gemms = "".join(_gemm_block(k) for k in _GEMMS)
    cases = ", ".join(f"{k}: ^g{k}" for k in _GEMMS)
    worker_fields = _slots(
        pact=s.ACTIVE,
        ppark=s.PARK,
        pseq=s.SEQ,
        pclaim=s.CLAIMED,
        pdone=s.DONE,
        pend=s.T_END,
        pclock=s.CLOCK,
        pyield=s.YIELD,
        pspin=s.SPIN_NS,
        pyns=s.YIELD_NS,
        ts=s.TS_WORKER,
    )
    finish_fields = _slots(
        pseq=s.SEQ,
        pclaim=s.CLAIMED,
        pdone=s.DONE,
        pend=s.T_END,
        pstolen=s.STOLEN,
        pclock=s.CLOCK,
        pyield=s.YIELD,
        ts=s.TS_CALLER,
    )
    return f"""module {{
  llvm.func @blu_now(%clock: !llvm.ptr, %ts: !llvm.ptr) -> i64 {{
    %mono = llvm.mlir.constant(1 : i32) : i32
    %r = llvm.call %clock(%mono, %ts) : !llvm.ptr, (i32, !llvm.ptr) -> i32
    %sec = llvm.load %ts : !llvm.ptr -> i64
{_slot("%ts", 1, "pns")}    %ns = llvm.load %pns : !llvm.ptr -> i64
    %g = llvm.mlir.constant(1000000000 : i64) : i64
    %t = llvm.mul %sec, %g : i64
    %u = llvm.add %t, %ns : i64
    llvm.return %u : i64
  }}

  llvm.func @blu_run_ops(%ctl: !llvm.ptr) {{
    %zero = llvm.mlir.constant(0 : i64) : i64
    %zero_f = llvm.mlir.constant(0.0 : f64) : f64
    %one = llvm.mlir.constant(1 : i64) : i64
    %width = llvm.mlir.constant({s.OP_SLOTS} : i64) : i64
    %first = llvm.mlir.constant({s.OPS} : i64) : i64
{_slot("%ctl", s.N_OPS, "pn")}    %n = llvm.load %pn : !llvm.ptr -> i64
    llvm.br ^loop(%zero : i64)
  ^loop(%i: i64):
    %more = llvm.icmp "slt" %i, %n : i64
    llvm.cond_br %more, ^body, ^exit
  ^body:
    %scaled = llvm.mul %i, %width : i64
    %off = llvm.add %scaled, %first : i64
    %base = llvm.getelementptr %ctl[%off] : (!llvm.ptr, i64) -> !llvm.ptr, i64
    %kind = llvm.load %base : !llvm.ptr -> i64
{_slot("%base", 1, "pfn")}    %fn = llvm.load %pfn : !llvm.ptr -> !llvm.ptr
    llvm.switch %kind : i64, ^next [
      {KERNEL}: ^kernel,
      {cases},
      {COPY}: ^copy
    ]
  ^kernel:
{_slot("%base", 2, "pk")}    %packed = llvm.load %pk : !llvm.ptr -> !llvm.ptr
    llvm.call %fn(%packed) : !llvm.ptr, (!llvm.ptr) -> ()
    llvm.br ^next
{gemms}  ^copy:
{_slot("%base", 2, "pc2")}{_slot("%base", 3, "pc3")}{_slot("%base", 4, "pc4")}\
{_slot("%base", 5, "pc5")}{_slot("%base", 6, "pc6")}{_slot("%base", 7, "pc7")}\
    %dst = llvm.load %pc2 : !llvm.ptr -> !llvm.ptr
    %src = llvm.load %pc3 : !llvm.ptr -> !llvm.ptr
    %rows = llvm.load %pc4 : !llvm.ptr -> i64
    %bytes = llvm.load %pc5 : !llvm.ptr -> i64
    %dstep = llvm.load %pc6 : !llvm.ptr -> i64
    %sstep = llvm.load %pc7 : !llvm.ptr -> i64
    llvm.br ^row(%zero : i64)
  ^row(%r: i64):
    %rmore = llvm.icmp "slt" %r, %rows : i64
    llvm.cond_br %rmore, ^rowbody, ^next
  ^rowbody:
    %doff = llvm.mul %r, %dstep : i64
    %soff = llvm.mul %r, %sstep : i64
    %d = llvm.getelementptr %dst[%doff] : (!llvm.ptr, i64) -> !llvm.ptr, i8
    %sp = llvm.getelementptr %src[%soff] : (!llvm.ptr, i64) -> !llvm.ptr, i8
    "llvm.intr.memcpy"(%d, %sp, %bytes) <{{isVolatile = false}}> : (!llvm.ptr, !llvm.ptr, i64) -> ()
    %r1 = llvm.add %r, %one : i64
    llvm.br ^row(%r1 : i64)
  ^next:
    %i1 = llvm.add %i, %one : i64
    llvm.br ^loop(%i1 : i64)
  ^exit:
    llvm.return
  }}

  llvm.func @blu_worker(%ctl: !llvm.ptr) {{
    %zero = llvm.mlir.constant(0 : i64) : i64
    %one = llvm.mlir.constant(1 : i64) : i64
    %mask = llvm.mlir.constant(255 : i64) : i64
{worker_fields}    llvm.store %one, %pact atomic release {{alignment = 8 : i64}} : i64, !llvm.ptr
    %clock = llvm.load %pclock : !llvm.ptr -> !llvm.ptr
    %yield = llvm.load %pyield : !llvm.ptr -> !llvm.ptr
    %spin = llvm.load %pspin : !llvm.ptr -> i64
    %yns = llvm.load %pyns : !llvm.ptr -> i64
    %t0 = llvm.call @blu_now(%clock, %ts) : (!llvm.ptr, !llvm.ptr) -> i64
    llvm.br ^loop(%t0, %zero : i64, i64)
  ^loop(%last: i64, %spins: i64):
    %park = llvm.load %ppark atomic acquire {{alignment = 8 : i64}} : !llvm.ptr -> i64
    %parked = llvm.icmp "ne" %park, %zero : i64
    llvm.cond_br %parked, ^exit, ^check
  ^check:
    %seq = llvm.load %pseq atomic acquire {{alignment = 8 : i64}} : !llvm.ptr -> i64
    %claimed = llvm.load %pclaim atomic acquire {{alignment = 8 : i64}} : !llvm.ptr -> i64
    %new = llvm.icmp "ne" %seq, %claimed : i64
    llvm.cond_br %new, ^claim, ^idle
  ^claim:
    %cas = llvm.cmpxchg %pclaim, %claimed, %seq acq_rel acquire : !llvm.ptr, i64
    %won = llvm.extractvalue %cas[1] : !llvm.struct<(i64, i1)>
    llvm.cond_br %won, ^run, ^loop(%last, %spins : i64, i64)
  ^run:
    llvm.call @blu_run_ops(%ctl) : (!llvm.ptr) -> ()
    %t = llvm.call @blu_now(%clock, %ts) : (!llvm.ptr, !llvm.ptr) -> i64
    llvm.store %t, %pend {{alignment = 8 : i64}} : i64, !llvm.ptr
    llvm.store %seq, %pdone atomic release {{alignment = 8 : i64}} : i64, !llvm.ptr
    llvm.br ^loop(%t, %zero : i64, i64)
  ^idle:
{_pause()}    %s1 = llvm.add %spins, %one : i64
    %low = llvm.and %s1, %mask : i64
    %tick = llvm.icmp "eq" %low, %zero : i64
    llvm.cond_br %tick, ^time, ^loop(%last, %s1 : i64, i64)
  ^time:
    %now = llvm.call @blu_now(%clock, %ts) : (!llvm.ptr, !llvm.ptr) -> i64
    %idle = llvm.sub %now, %last : i64
    %over = llvm.icmp "sgt" %idle, %spin : i64
    llvm.cond_br %over, ^exit, ^polite
  ^polite:
    %long = llvm.icmp "sgt" %idle, %yns : i64
    llvm.cond_br %long, ^yield, ^loop(%last, %s1 : i64, i64)
  ^yield:
    %y = llvm.call %yield() : !llvm.ptr, () -> i32
    llvm.br ^loop(%last, %s1 : i64, i64)
  ^exit:
    llvm.store %zero, %pact atomic release {{alignment = 8 : i64}} : i64, !llvm.ptr
    llvm.return
  }}

  llvm.func @blu_post(%ctl: !llvm.ptr) {{
    %one = llvm.mlir.constant(1 : i64) : i64
    %seq = llvm.load %ctl atomic acquire {{alignment = 8 : i64}} : !llvm.ptr -> i64
    %next = llvm.add %seq, %one : i64
    llvm.store %next, %ctl atomic release {{alignment = 8 : i64}} : i64, !llvm.ptr
    llvm.return
  }}

  llvm.func @blu_finish(%ctl: !llvm.ptr) {{
    %zero = llvm.mlir.constant(0 : i64) : i64
    %one = llvm.mlir.constant(1 : i64) : i64
    %mask = llvm.mlir.constant(1023 : i64) : i64
{finish_fields}    %seq = llvm.load %pseq atomic acquire {{alignment = 8 : i64}} : !llvm.ptr -> i64
    %claimed = llvm.load %pclaim atomic acquire {{alignment = 8 : i64}} : !llvm.ptr -> i64
    %open = llvm.icmp "ne" %seq, %claimed : i64
    llvm.cond_br %open, ^steal, ^wait
  ^steal:
    %cas = llvm.cmpxchg %pclaim, %claimed, %seq acq_rel acquire : !llvm.ptr, i64
    %won = llvm.extractvalue %cas[1] : !llvm.struct<(i64, i1)>
    llvm.cond_br %won, ^mine, ^wait
  ^mine:
    llvm.store %one, %pstolen {{alignment = 8 : i64}} : i64, !llvm.ptr
    llvm.call @blu_run_ops(%ctl) : (!llvm.ptr) -> ()
    %clock = llvm.load %pclock : !llvm.ptr -> !llvm.ptr
    %t = llvm.call @blu_now(%clock, %ts) : (!llvm.ptr, !llvm.ptr) -> i64
    llvm.store %t, %pend {{alignment = 8 : i64}} : i64, !llvm.ptr
    llvm.store %seq, %pdone atomic release {{alignment = 8 : i64}} : i64, !llvm.ptr
    llvm.return
  ^wait:
    llvm.store %zero, %pstolen {{alignment = 8 : i64}} : i64, !llvm.ptr
    llvm.br ^spin(%zero : i64)
  ^spin(%k: i64):
    %done = llvm.load %pdone atomic acquire {{alignment = 8 : i64}} : !llvm.ptr -> i64
    %finished = llvm.icmp "eq" %done, %seq : i64
    llvm.cond_br %finished, ^out, ^pause
  ^pause:
{_pause()}    %k1 = llvm.add %k, %one : i64
    %low = llvm.and %k1, %mask : i64
    %tick = llvm.icmp "eq" %low, %zero : i64
    llvm.cond_br %tick, ^yield, ^spin(%k1 : i64)
  ^yield:
    %yield = llvm.load %pyield : !llvm.ptr -> !llvm.ptr
    %y = llvm.call %yield() : !llvm.ptr, () -> i32
    llvm.br ^spin(%k1 : i64)
  ^out:
    llvm.return
  }}
}}
"""


_PACKED = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _Code:
    """The compiled loop: its functions (packed calling convention) and libc's addresses."""

    def __init__(self) -> None:
        from blu.lower.mlir import llvm as mlir_cpu  # (imports MLIR only now)

        self.engine = mlir_cpu._engine(_source(), run_passes=True)
        self.worker, self.post, self.finish = (
            _PACKED(self.engine.raw_lookup(n)) for n in ("blu_worker", "blu_post", "blu_finish")
        )
        libc = ctypes.CDLL(None)
        self.clock = ctypes.cast(libc.clock_gettime, ctypes.c_void_p).value
        self.sched_yield = ctypes.cast(libc.sched_yield, ctypes.c_void_p).value


@functools.cache
def _code() -> _Code | None:
    try:
        return _Code()
    except Exception as e:  # no MLIR here, or it rejected the loop: the blocking pool does it
        log.info("blu: spinning CPU workers unavailable (%s); using the blocking pool", e)
        return None


class Worker:
    """One spinning worker thread and its control block (see the module docstring). ``lock``:
    held by the caller that posts to it (a concurrent caller uses the blocking pool)."""

    def __init__(self, code: _Code):
        self.code = code
        raw = np.zeros(_S.OPS + _S.OP_SLOTS * MAX_OPS + 8, np.int64)
        skip = (-raw.ctypes.data % 64) // 8  # the block starts on a cache line
        self.ctl = raw[skip : skip + _S.OPS + _S.OP_SLOTS * MAX_OPS]
        self._raw = raw
        c = self.ctl
        c[_S.SPIN_NS], c[_S.YIELD_NS] = SPIN_NS, YIELD_NS
        c[_S.CLOCK], c[_S.YIELD] = code.clock, code.sched_yield
        c[_S.PARK] = 1
        self._ptrs = (ctypes.c_void_p * 1)(c.ctypes.data)
        self.packed = (ctypes.c_void_p * 1)(ctypes.addressof(self._ptrs))
        self.lock = locks.TryLock()  # (released on every exit path, ``threads._run_native``)
        self.keep: list = []  # what the posted ops point into, held until they are done
        self._wake: queue.SimpleQueue = queue.SimpleQueue()  # (C: an interrupt in put is safe)
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="blu-spin", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            self._wake.get()  # (an extra wake-up runs the loop once more: harmless)
            if self._closed:
                return
            self.code.worker(self.packed)  # (ctypes releases the GIL for the call)

    def post(self, ops: Ops) -> None:
        """Hand ``ops`` over (the caller holds ``lock``; ``finish`` must follow)."""
        c, n = self.ctl, len(ops.slots) // _S.OP_SLOTS
        c[_S.OPS : _S.OPS + len(ops.slots)] = ops.slots
        c[_S.N_OPS] = n
        self.keep = ops.keep
        self.code.post(self.packed)
        if not c[_S.ACTIVE]:
            c[_S.PARK] = 0
            self._wake.put(None)

    def finish(self) -> tuple[float, bool]:
        """Wait until the posted ops are done (run them here if the worker has not started them):
        (when they ended, in ``time.perf_counter`` seconds; whether this thread ran them)."""
        self.code.finish(self.packed)
        self.keep = []
        c = self.ctl
        return float(c[_S.T_END]) * 1e-9, bool(c[_S.STOLEN])

    def park(self) -> None:
        self.ctl[_S.PARK] = 1

    def close(self) -> None:
        self._closed = True
        self.park()
        self._wake.put(None)


_workers: list[Worker] = []
_workers_lock = threading.Lock()
_depth = 0  # executable calls in progress (nested or on other threads)


def workers(n: int) -> list[Worker] | None:
    """``n`` spinning workers (made on first use), or None: ``config.cpu_spin`` off, or the loop
    cannot be compiled here."""
    if n <= 0 or not config.cpu_spin:
        return None
    if len(_workers) >= n:
        return _workers[:n]
    code = _code()
    if code is None:
        return None
    with _workers_lock:
        while len(_workers) < n:
            _workers.append(Worker(code))
        for w in _workers:
            if _depth > 0:
                w.ctl[_S.PARK] = 0
    return _workers[:n]


def available() -> bool:
    """Whether split steps run on spinning workers here: ``config.cpu_spin`` and MLIR at hand
    to compile the loop. Until a split step first needs the loop, this only looks for MLIR (a
    process that loads every kernel from the cache never imports it)."""
    if not config.cpu_spin:
        return False
    if _code.cache_info().currsize:
        return _code() is not None
    return _mlir_installed()


@functools.cache
def _mlir_installed() -> bool:
    try:
        return importlib.util.find_spec("mlir") is not None
    except (ImportError, ValueError):
        return False


def enter() -> None:
    """An executable call begins: the workers may spin until the outermost one ends."""
    global _depth
    with _workers_lock:
        _depth += 1
        if _depth == 1:
            for w in _workers:
                w.ctl[_S.PARK] = 0


def leave() -> None:
    """An executable call ended: after the outermost one, the workers stop spinning."""
    global _depth
    with _workers_lock:
        _depth = max(_depth - 1, 0)  # (an interrupt may have skipped an ``enter``)
        if _depth == 0:
            for w in _workers:
                w.park()


@atexit.register
def _shutdown() -> None:
    """At exit: every worker out of the native loop before the engine holding it goes."""
    for w in list(_workers):
        w.close()
    deadline = time.monotonic() + 0.1
    while any(w.ctl[_S.ACTIVE] for w in _workers) and time.monotonic() < deadline:
        time.sleep(0.001)


def _after_fork() -> None:  # the child has none of the parent's threads
    global _workers, _workers_lock, _depth
    _workers, _workers_lock, _depth = [], threading.Lock(), 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


# ---- recording a part ----------------------------------------------------------------------------


class NotRecordable(Exception):
    """A part does something the op list cannot hold (it then runs on the blocking pool)."""


class Ops:
    """A recorded part: the op slots (``int64``, ``_S.OP_SLOTS`` per call) and the arrays they
    point into (kept alive until the part is done)."""

    __slots__ = ("slots", "keep")

    def __init__(self) -> None:
        self.slots: list[int] = []
        self.keep: list = []

    def add(self, kind: int, fn: int, args: list[int], keep: Any = None) -> None:
        if len(self.slots) >= _S.OP_SLOTS * MAX_OPS:
            raise NotRecordable("too many calls")
        self.slots += [kind, fn, *args] + [0] * (_S.OP_SLOTS - 2 - len(args))
        if keep is not None:
            self.keep.append(keep)


_local = threading.local()


def recording() -> Ops | None:
    """The ops being recorded on this thread, or None (calls run now)."""
    return getattr(_local, "ops", None)


def record(fn: Callable[[int, int], None], lo: int, hi: int) -> Ops | None:
    """Run ``fn(lo, hi)`` in recording mode: the calls it would make, or None (it did something
    the list cannot hold; nothing of it ran)."""
    ops = Ops()
    _local.ops = ops
    try:
        fn(lo, hi)
    except NotRecordable:
        return None
    finally:
        _local.ops = None
    return ops


_addresses: dict[int, tuple[Any, int]] = {}


def code_address(fn: Any) -> int:
    """The code address of a ctypes function (cached: one per kernel or BLAS function)."""
    got = _addresses.get(id(fn))
    if got is None or got[0] is not fn:
        got = _addresses[id(fn)] = (fn, ctypes.cast(fn, ctypes.c_void_p).value or 0)
    return got[1]


def call(fn: Any, packed: Any, keep: Any = None) -> None:
    """``fn(packed)`` for a compiled kernel (packed calling convention), or recorded (``keep``:
    what must live until it runs, besides ``packed``: the pointer array it points into)."""
    ops = recording()
    if ops is None:
        fn(packed)
        return
    ops.add(KERNEL, code_address(fn), [ctypes.addressof(packed)], packed if keep is None else keep)


def gemm_op(ops: Ops, fn: Any, double: bool, args: tuple, keep: Any) -> None:
    """Record a ``cblas_?gemm`` call: ``args`` as ``blas.gemm`` passes them (layout, transposes,
    m, n, k, alpha, a, lda, b, ldb, beta, c, ldc; ``fn.int_max``: its integers' range);
    ``keep``: the arrays it reads and writes."""
    wide = fn.int_max > _INT32_MAX
    kind = (DGEMM64 if wide else DGEMM32) if double else (SGEMM64 if wide else SGEMM32)
    lay, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc = args
    slots = [lay, ta, tb, m, n, k, _bits(alpha), a, lda, b, ldb, _bits(beta), c, ldc]
    ops.add(kind, code_address(fn), slots, keep)


_INT32_MAX = 2**31 - 1


def _bits(x: float) -> int:
    """A float64's bits as an int64 (an op slot holds alpha and beta so)."""
    return struct.unpack("<q", struct.pack("<d", float(x)))[0]


def copy_rows(dst: np.ndarray, src: np.ndarray) -> None:
    """``np.copyto(dst, src)`` for 2-D arrays of one dtype and shape, recorded as a row copy when
    recording (rows contiguous in both), else done now."""
    ops = recording()
    if ops is None:
        np.copyto(dst, src)
        return
    if dst.shape != src.shape or dst.dtype != src.dtype or dst.ndim != 2:
        raise NotRecordable("copy")
    it = dst.itemsize
    if dst.size == 0 or address.data(dst) == address.data(src) and dst.strides == src.strides:
        return
    if dst.shape[1] > 1 and (dst.strides[1] != it or src.strides[1] != it):
        raise NotRecordable("copy")
    rows, cols = dst.shape
    ops.add(COPY, 0, [address.data(dst), address.data(src), rows, cols * it, dst.strides[0],
                      src.strides[0]], (dst, src))  # fmt: skip
