"""The blocking pool's threads and the tasks handed to them, safe against interrupts.

``concurrent.futures.ThreadPoolExecutor`` is not: its ``submit`` takes the idle semaphore's
condition through ``Condition.__enter__``, a Python method, so a ``KeyboardInterrupt`` landing
right after that lock was taken (on the bytecode after the call) left it held for good, and
every later ``submit`` of the process waited for ever (issue #41, measured: 1 hang in about
2,000 interrupts of split products). Here the caller only calls C: ``SimpleQueue.put`` hands a
``Task`` over, and an ``RLock`` per task says who runs it.

    task = Task(fn, lo, hi)           # made before it is submitted
    pool.submit(task, contextvars.copy_context())
    ...
    ran, err = task.finish()          # waits while a pool thread runs it, or takes it back
    if not ran: task.run_here()       # (it never started: the caller may run it itself)

A task runs at most once on the pool and never after ``finish`` returned, however the caller is
interrupted (``finish`` waits on through interrupts, and a second call returns at once), so no
part of an interrupted call writes into the buffers of the next one.
"""

from __future__ import annotations

import contextvars
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Pool", "Task"]


class Pool:
    """Daemon threads taking ``(task, context)`` pairs from one queue (``grow`` adds threads;
    a task no thread takes is taken back by its caller, so fewer threads never hang)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []

    def grow(self, n: int) -> None:
        """At least ``n`` threads (the caller serializes calls)."""
        while len(self.threads) < n:
            t = threading.Thread(target=self._loop, name=f"{self.name}_{len(self.threads)}",
                                 daemon=True)  # fmt: skip
            self.threads.append(t)
            t.start()

    def submit(self, task: Task, context: contextvars.Context | None = None) -> None:
        """Queue ``task`` (run in ``context``, a copy of the caller's: its flags)."""
        self.queue.put((task, context))

    def _loop(self) -> None:
        while True:
            task, context = self.queue.get()
            if context is None:
                task()
            else:
                context.run(task)


class Task:
    """``fn(*args)`` handed to a pool thread, which runs it only if its caller has not finished
    it first (``finish``: waits while it runs, or takes it back if it has not started): each
    task runs at most once on the pool, never after ``finish`` returned, and ``finish`` returns
    however it is interrupted (an interrupt raised right after a lock was taken included: the
    claim is an ``RLock``, so the caller can tell that it holds it)."""

    __slots__ = ("fn", "args", "_claim", "started", "err", "end")

    def __init__(self, fn: Callable[..., None], *args: Any) -> None:
        self.fn, self.args = fn, args
        self._claim = threading.RLock()  # held by the pool thread while it runs it; by the
        # caller, for good, once it finished it
        self.started = False
        self.err: BaseException | None = None
        self.end = 0.0  # when it ended (``time.perf_counter``)

    def __call__(self) -> None:  # on the pool thread
        if not self._claim.acquire(blocking=False):
            return  # the caller took it back
        try:
            self.started = True
            self._run()
        finally:
            self._claim.release()

    def _run(self) -> None:
        try:
            self.fn(*self.args)
        except BaseException as e:  # handed to the caller (``finish``)
            self.err = e
        finally:
            self.end = time.perf_counter()

    def finish(self) -> tuple[bool, BaseException | None]:
        """Wait until the pool thread has run it, or take it back if it has not started (it
        then never will): (whether it ran, its error or else an interrupt of the wait)."""
        interrupt = None
        while not self._claim._is_owned():  # type: ignore[attr-defined]
            try:
                self._claim.acquire()
            except BaseException as e:  # (a KeyboardInterrupt): wait on
                interrupt = interrupt or e
        return self.started, self.err or interrupt

    def run_here(self) -> tuple[bool, BaseException | None]:
        """Run a task taken back (``finish`` said it had not run) on this thread."""
        self.started = True
        self._run()
        return True, self.err
