"""Locks a forked child can use: ``os.fork`` copies a process with only the forking thread, so a
lock another thread held at that moment stays held in the child for ever (the child hung at its
next compile when a thread of the parent was compiling, issue #41).

    _lock = forks.lock()

    @forks.in_child
    def _after_fork() -> None:
        global _lock
        _lock = forks.renew(_lock)

``lock()`` is an ``RLock`` so that ``renew`` can tell a lock the forking thread itself holds (it
is still inside the ``with`` block in the child, and releases it there: kept) from one another
thread held (replaced by a fresh one). Module-level pools of threads are reset the same way
(``blu/lower/cpu/threads.py``, ``spin.py``, ``control_flow.py``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

__all__ = ["in_child", "lock", "renew"]


def lock() -> threading.RLock:
    """A lock ``renew`` can hand over to a forked child (an ``RLock``; take it with ``with``)."""
    return threading.RLock()


def renew(old: threading.RLock) -> threading.RLock:
    """In a forked child: ``old`` if the forking thread holds it (it releases it), else a fresh
    lock (no thread of the child could ever release ``old``)."""
    return old if old._is_owned() else threading.RLock()  # type: ignore[attr-defined]


def in_child(fn: Callable[[], None]) -> Callable[[], None]:
    """Register ``fn`` to run in every child forked from now on (``os.register_at_fork``)."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=fn)
    return fn
