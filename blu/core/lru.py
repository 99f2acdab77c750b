"""A bounded, thread-safe mapping that drops its least recently used entries: blu's in-process
caches (jit's traces per function, the executable cache, the loaded-kernel tables).

    traces = LRU("jit_cache_size")   # the bound is the blu.config flag's current value
    hit = traces.get(key)            # O(1): a lock, a dict look-up, a move to the end
    entry = traces.setdefault(key, made)

The bound is read from ``blu.config`` when an entry is added (so ``config.update`` and
``config.override`` take effect at the next miss); a hit costs the same whatever the size.
Evicted values are dropped after the lock is released, so what their destruction releases
(compiled code, shared objects) never runs under the cache's lock.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from blu.core import forks
from blu.core.config import FLAGS, config
from blu.core.errors import BluValueError

_MISSING = object()
_all: weakref.WeakSet = weakref.WeakSet()  # every LRU alive (clear_all, the fork handler)


def clear_all() -> None:
    """Empty every in-process LRU cache (``blu.clear_caches``): jit traces, executables and
    loaded kernels are made again at their next use; the on-disk kernel cache is kept."""
    for cache in list(_all):
        cache.clear()


def cache_bound(flag: str) -> int:
    """The positive entry count of a cache-size flag of ``blu.config``.

    Raises:
        BluValueError: the flag's value is not a whole number >= 1 (naming the flag and its
            environment variable).
    """
    n = getattr(config, flag)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise BluValueError(
            f"blu.config.{flag} = {n!r} ({FLAGS[flag][0]}): expected a whole number of entries >= 1"
        )
    return n


class LRU:
    """A mapping bounded by a ``blu.config`` flag (or a fixed count), least recently used out.

    Args:
        bound: the name of an int flag of ``blu.config``, or a positive int.
        on_evict: called as ``on_evict(key, value)`` for each evicted entry, outside the lock.

    Attributes:
        evictions: entries dropped so far for the bound (not by ``pop``/``clear``).
    """

    __slots__ = ("_d", "_lock", "_bound", "_on_evict", "evictions", "__weakref__")

    def __init__(self, bound: str | int, on_evict: Callable[[Any, Any], None] | None = None):
        self._d: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = forks.lock()
        _all.add(self)
        self._bound = bound
        self._on_evict = on_evict
        self.evictions = 0

    def maxsize(self) -> int:
        """The bound now (the flag's current value)."""
        return self._bound if isinstance(self._bound, int) else cache_bound(self._bound)

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value of ``key`` (made most recently used), or ``default``."""
        with self._lock:
            v = self._d.get(key, _MISSING)
            if v is _MISSING:
                return default
            self._d.move_to_end(key)
            return v

    def setdefault(self, key: Hashable, value: Any) -> Any:
        """The value already under ``key`` if any (threads racing on one miss agree on the
        first), else ``value``, added; evicts down to the bound."""
        return self._add(key, value, replace=False)

    def __setitem__(self, key: Hashable, value: Any) -> None:
        self._add(key, value, replace=True)

    def _add(self, key: Hashable, value: Any, replace: bool) -> Any:
        limit = self.maxsize()  # outside the lock: a bad flag raises before anything changes
        evicted = []
        with self._lock:
            old = self._d.get(key, _MISSING)
            if old is not _MISSING and not replace:
                self._d.move_to_end(key)
                return old
            self._d[key] = value
            self._d.move_to_end(key)
            while len(self._d) > limit:
                evicted.append(self._d.popitem(last=False))
            self.evictions += len(evicted)
        if self._on_evict is not None:
            for k, v in evicted:
                self._on_evict(k, v)
        del evicted  # the values' last references (if nothing else holds them) go here
        return value

    def pop(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            return self._d.pop(key, default)

    def clear(self) -> None:
        with self._lock:
            old, self._d = self._d, OrderedDict()
        del old

    def __contains__(self, key: Hashable) -> bool:
        return key in self._d

    def __len__(self) -> int:
        return len(self._d)

    def __iter__(self) -> Iterator[Hashable]:
        with self._lock:
            return iter(list(self._d))

    def keys(self) -> list[Hashable]:
        """The keys, least recently used first (a copy)."""
        with self._lock:
            return list(self._d)

    def values(self) -> list[Any]:
        """The values, least recently used first (a copy)."""
        with self._lock:
            return list(self._d.values())


@forks.in_child
def _after_fork() -> None:
    """A child forked while another thread used a cache gets that cache's lock fresh."""
    for c in list(_all):
        c._lock = forks.renew(c._lock)
