"""``TryLock``: a lock taken without waiting (the executable's arena, a spinning worker), whose
holder can always tell that it holds it, so it is released on every exit path: an exception
raised right after the acquire returned (an asynchronous ``KeyboardInterrupt`` lands on the
bytecode after a call) included.

    lock = TryLock()
    mine = lock.free_here()           # False: this thread holds it already (a nested call)
    try:
        got = mine and lock.try_acquire()
        ...                           # got: the resource is this call's
    finally:
        lock.release_if_held(mine)    # released if this call took it, whatever happened

It is a ``threading.RLock`` that one thread never takes twice (``try_acquire`` refuses when the
thread holds it), so "held by this thread" (``RLock._is_owned``, kept by the lock itself)
means "taken by this call or an enclosing one", which ``mine`` tells apart. A plain ``Lock``
cannot say who holds it: an interrupt between its acquire and the line recording it left it
held for good (every later call of the executable then made an arena of its own).
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["TryLock"]


class TryLock:
    """See the module docstring; ``with lock:`` and ``acquire``/``release``/``locked`` as a
    ``threading.Lock`` (a blocking ``acquire`` by the holding thread raises, as it would
    deadlock a ``Lock``)."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.RLock()

    def free_here(self) -> bool:
        """Whether this thread does not hold the lock (so a ``try_acquire`` now is its own)."""
        return not self._lock._is_owned()  # type: ignore[attr-defined]

    def try_acquire(self) -> bool:
        """Take the lock if no thread holds it (this one included), without waiting."""
        return self.free_here() and self._lock.acquire(blocking=False)

    def release_if_held(self, mine: bool = True) -> None:
        """Release the lock if ``mine`` (it was free here before this call tried) and this
        thread holds it."""
        if mine and self._lock._is_owned():  # type: ignore[attr-defined]
            self._lock.release()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self.free_here():
            if blocking:
                raise RuntimeError("TryLock: this thread holds it already")
            return False
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        """Whether some thread (this one included) holds the lock."""
        if not self.free_here():
            return True
        if self._lock.acquire(blocking=False):
            self._lock.release()
            return False
        return True

    def __enter__(self) -> TryLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
