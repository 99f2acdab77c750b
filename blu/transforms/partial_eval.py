"""Partial evaluation: compute what is known now, stage what is not.

The ``PartialEvalInterpreter`` is a staging interpreter that forwards any operation whose inputs
are all *known* (not its own tracers) to its parent, and stages the rest. Under ``linearize``
the primals are known and the tangents unknown, so the staged jaxpr is exactly the linear part of
the JVP, and the known values it uses become its constants: the residuals.

``partial_eval_jaxpr`` does the same to a whole jaxpr, splitting it into a known jaxpr (which
also outputs the residuals) and an unknown jaxpr (which takes them). Primitives that hold jaxprs
(jit, control flow) use it in their ``partial_eval`` rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from blu.core.interpreter import Interpreter, set_interpreter
from blu.core.jaxpr import Jaxpr, eval_jaxpr
from blu.core.staging import StagedTracer, StagingInterpreter, hoist_consts


class PartialEvalInterpreter(StagingInterpreter):
    """Stages only the operations that depend on its own (unknown) tracers."""

    def __init__(self, parent: Interpreter):
        super().__init__(parent)

    def is_unknown(self, x: Any) -> bool:
        return isinstance(x, StagedTracer) and x._interp is self

    def process(self, prim: Any, args: tuple, params: dict) -> Any:
        if not any(self.is_unknown(a) for a in args):
            with set_interpreter(self.parent):
                return prim.bind(*args, **params)
        if prim.partial_eval is not None:
            return prim.partial_eval(self, args, params)
        return super().process(prim, args, params)


def partial_eval_jaxpr(
    jaxpr: Jaxpr,
    in_unknowns: Sequence[bool],
    instantiate: Sequence[bool] | bool,
    parent: Interpreter,
) -> tuple[Jaxpr, list[Any], Jaxpr, list[bool], int]:
    """Split a jaxpr (no constvars) into a known and an unknown part.

    Args:
        jaxpr: a jaxpr without constvars.
        in_unknowns: which invars are unknown.
        instantiate: per output (or for all), make it unknown even when it is known (a loop
            carry that must stay unknown).
        parent: the interpreter the known part will run under (its tracers may appear as
            constants).

    Returns:
        ``(known, known_consts, unknown, out_unknowns, num_res)``: ``known`` takes
        ``known_consts, known inputs`` and returns ``known outputs, residuals``; ``unknown``
        takes ``residuals, unknown inputs`` and returns the unknown outputs; ``out_unknowns``
        says which outputs ``unknown`` computes.
    """
    if isinstance(instantiate, bool):
        instantiate = [instantiate] * len(jaxpr.outvars)
    known_builder = StagingInterpreter(parent)
    pe = PartialEvalInterpreter(known_builder)
    args = [
        pe.new_arg(v.aval) if u else known_builder.new_arg(v.aval)
        for v, u in zip(jaxpr.invars, in_unknowns, strict=True)
    ]
    with set_interpreter(pe):
        outs = eval_jaxpr(jaxpr, [], *args)
    out_uk = [pe.is_unknown(o) or bool(i) for o, i in zip(outs, instantiate, strict=True)]
    # residuals are values the unknown part needs from the known part: its leading inputs
    unknown, residuals = pe.build([o for o, u in zip(outs, out_uk) if u])
    known, known_consts = known_builder.build(
        [o for o, u in zip(outs, out_uk) if not u] + list(residuals)
    )
    return hoist_consts(known), list(known_consts), hoist_consts(unknown), out_uk, len(residuals)
