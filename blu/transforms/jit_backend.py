"""jit's seam to the compiler: the registered backend (``register_jit_backend``; ``blu.lower``
registers its own when imported), the trace cache's entries (``CacheEntry``: one signature's
jaxpr, constants and output tree) and the hoisted jaxpr made once per entry
(``stable_hoisted``), which executables cache on. ``jit.py`` (calls) and ``aot.py``
(``lower``/``compile``) both read them from here.
"""

from __future__ import annotations

import weakref
from typing import Any

from blu.core.jaxpr import Jaxpr
from blu.core.staging import hoist_consts

__all__ = ["CacheEntry", "jit_backend", "register_jit_backend", "stable_hoisted"]

_backend: Any = None  # registered by blu.lower (register_jit_backend)


def register_jit_backend(backend: Any) -> None:
    """Make ``backend`` run and lower jitted programs. It has ``call(jaxpr, name,
    donated_invars, args) -> list`` (``jit_p``'s impl), ``lower(jaxpr, name, target,
    donated_invars)`` (an object with ``as_text()``, ``memory_analysis()``, ``cache_keys()``,
    ``compile()``) and ``adopt(jaxpr, donated_invars, executable)`` (calls of that program run
    that executable). ``blu.lower`` registers its backend when imported."""
    global _backend
    _backend = backend


def jit_backend() -> Any:
    """The registered backend, or None (jit then evaluates the jaxpr by reference)."""
    return _backend


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
