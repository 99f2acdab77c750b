"""jit's trace cache entries (``CacheEntry``: one signature's jaxpr, constants and output tree)
and the hoisted jaxpr made once per entry (``stable_hoisted``), which executables cache on.
``jit.py`` (calls) and ``aot.py`` (``lower``/``compile``) both read them from here; what runs
them is the executor ``blu.lower`` registers with the core (``blu.core.execution``).
"""

from __future__ import annotations

import weakref

from blu.core.jaxpr import Jaxpr
from blu.core.staging import hoist_consts

__all__ = ["CacheEntry", "stable_hoisted"]


class CacheEntry:
    """One traced signature of a jitted function."""

    __slots__ = ("jaxpr", "consts", "out_tree", "uses_shard")

    def __init__(self, jaxpr, consts, out_tree, uses_shard=False):
        self.jaxpr, self.consts, self.out_tree = jaxpr, consts, out_tree
        self.uses_shard = uses_shard


_hoisted: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def stable_hoisted(entry: CacheEntry) -> Jaxpr:
    """The hoisted jaxpr of a cache entry, made once so executables cache on its identity."""
    j = entry.jaxpr
    if not j.constvars:
        return j
    h = _hoisted.get(j)
    if h is None:  # setdefault: threads agree on one hoisted jaxpr (executables key on it)
        h = _hoisted.setdefault(j, hoist_consts(j))
    return h
