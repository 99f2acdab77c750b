"""The one hook from the core into execution: ``blu.lower`` registers an executor when imported,
and the core asks it to run jitted programs (``jit_p``'s impl, ``blu/transforms/jit.py``) and
primitives whose operands are device arrays (the eval interpreter). The core knows no backend:
with none registered, jit evaluates its jaxpr and device arrays are an error.

An executor has ``call(jaxpr, name, donated_invars, args) -> list``, ``fast_callable(...)``
(the executable a repeated call may run directly, or None), ``lower(jaxpr, name, target,
donated_invars)``, ``adopt(jaxpr, donated_invars, executable)`` and
``apply_on_device(prim, args, avals, params)``.
"""

from __future__ import annotations

from typing import Any

_executor: Any = None


def register_executor(executor: Any) -> None:
    """Make ``executor`` run jitted programs and operations on device arrays."""
    global _executor
    _executor = executor


def executor() -> Any:
    """The registered executor, or None."""
    return _executor
