"""Registering lowerings on primitives: every rule goes into its primitive's ``lowerings`` slot
(``Primitive.lowerings``), keyed by the kind of rule and, where targets differ, the platform.

    @lowering("elementwise", add_p)
    def _add(b, eqn, x, y): ...

    lowering("index", gather_p)(gather_rule)            # a rule made elsewhere
    lowering("library", cholesky_p, platform="cuda")(LibraryLowering(...))
    host_fallback("no kernel for this yet", some_p)

``slot(prim, kind, platform)`` reads a rule back (the platform's first, then the shared one).
A host fallback is a slot of its own carrying its reason (``"host"``): ``docs/primitives.md``
lists them, and ``tests/lower/test_lowering_slots.py`` fails for a primitive that has neither
a lowering nor a stated reason. Two kinds of primitive run their impl on the host without being
fallbacks: host callbacks (``"callback"``: a Python function, on the host by definition) and
primitives only one target's plan makes (``"made_by"``: a platform's rewrite; other targets
never see them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blu.core.primitive import Primitive


def lowering(kind: str, *prims: Primitive, platform: str | None = None) -> Callable[[Any], Any]:
    """A decorator registering its argument as the ``kind`` rule of each of ``prims``
    (on ``platform`` only, when given); returns the argument unchanged."""

    def register(rule: Any) -> Any:
        for p in prims:
            p.lowerings[kind if platform is None else (kind, platform)] = rule
        return rule

    return register


def slot(prim: Primitive, kind: str, platform: str | None = None) -> Any:
    """The ``kind`` rule of ``prim`` on ``platform`` (its own, else the shared one), or None."""
    lw = prim.lowerings
    if platform is not None and (kind, platform) in lw:
        return lw[(kind, platform)]
    return lw.get(kind)


def host_fallback(reason: str, *prims: Primitive) -> None:
    """Record that ``prims`` run their numpy impl on the host where no lowering applies, and
    why (a synchronization on the GPU)."""
    for p in prims:
        p.lowerings["host"] = reason


def fallback_reason(prim: Primitive) -> str | None:
    """Why ``prim`` runs on the host, if it is declared to."""
    return prim.lowerings.get("host")


def host_callback(reason: str, *prims: Primitive) -> None:
    """Record that ``prims`` call back into Python on the host by definition (not a missing
    lowering), and why."""
    for p in prims:
        p.lowerings["callback"] = reason


def made_by_plan(platform: str, *prims: Primitive) -> None:
    """Record that only ``platform``'s plan makes ``prims`` (a rewrite of its own): other
    targets never see them in their programs."""
    for p in prims:
        p.lowerings["made_by"] = platform
