"""Labels of launch-plan steps for timeline traces (``blu.core.trace``): the jaxpr equations a
step runs and the user's source lines they came from. Computed here, where jaxprs are known, and
passed to the writer (and to the CUDA runtime's profiler) as plain strings."""

from __future__ import annotations

from typing import Any

from blu.core.jaxpr import JaxprEqn, Literal

_MAX_EQNS = 12


def _operand(a: Any) -> str:
    if isinstance(a, Literal):
        return repr(a.val)
    return a.aval.str_short()


def eqn_text(e: JaxprEqn) -> str:
    """``f32[4,8] = exp f32[4,8]``: an equation with its operands' types."""
    outs = ", ".join(v.aval.str_short() for v in e.outvars)
    return f"{outs} = {e.primitive.name} {', '.join(_operand(a) for a in e.invars)}".rstrip()


def step_args(node: Any) -> dict[str, str]:
    """The trace ``args`` of a plan node: its kind, its equations and source lines."""
    eqns = list(node.eqns)
    text = [eqn_text(e) for e in eqns[:_MAX_EQNS]]
    if len(eqns) > _MAX_EQNS:
        text.append(f"... {len(eqns) - _MAX_EQNS} more")
    sources = list(dict.fromkeys(e.source for e in eqns if e.source))
    return {
        "kind": str(node.kind),
        "eqns": "\n".join(text),
        "source": "\n".join(sources[:4])
        + (f"\n... {len(sources) - 4} more" if len(sources) > 4 else ""),
    }
