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
import queue
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from blu.core.config import config
from blu.lower.cpu import address, locks
from blu.lower.cpu.spin_loop import (  # noqa: F401 - the layout and op kinds, re-exported
    _S,
    COPY,
    DGEMM32,
    DGEMM64,
    KERNEL,
    MAX_OPS,
    SGEMM32,
    SGEMM64,
    SPIN_NS,
    YIELD_NS,
    _Slot,
    _source,
)

__all__ = ["MAX_OPS", "NotRecordable", "Worker", "available", "call", "copy_rows", "enter",
           "gemm_op", "leave", "record", "recording", "workers"]  # fmt: skip

log = logging.getLogger("blu.jit")

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
