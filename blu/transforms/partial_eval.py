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
from blu.core.staging import StagedTracer, StagingInterpreter


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
    jaxpr: Jaxpr, in_unknowns: Sequence[bool], parent: Interpreter
) -> tuple[Jaxpr, list[Any], Jaxpr, list[Any], list[bool], int]:
    """Split ``jaxpr`` into known and unknown parts.

    Args:
        jaxpr: a jaxpr without constvars.
        in_unknowns: which invars are unknown.
        parent: the interpreter the known part will run under (its tracers may appear as
            constants).

    Returns:
        ``(known, known_consts, unknown, unknown_consts, out_unknowns, num_res)`` where ``known``
        maps the known inputs to (known outputs + residuals) and ``unknown`` maps (residuals +
        unknown inputs) to the unknown outputs. Outputs that are known are computed by
        ``known``; ``out_unknowns`` tells which.
    """
    known_builder = StagingInterpreter(parent)
    pe = PartialEvalInterpreter(known_builder)
    args = []
    for v, unk in zip(jaxpr.invars, in_unknowns, strict=True):
        args.append(pe.new_arg(v.aval) if unk else known_builder.new_arg(v.aval))
    with set_interpreter(pe):
        outs = eval_jaxpr(jaxpr, [], *args)
    out_unknowns = [pe.is_unknown(o) for o in outs]
    unknown_jaxpr, residuals = pe.build([o for o, u in zip(outs, out_unknowns) if u])
    # residuals are values the unknown part needs from the known part
    known_jaxpr, known_consts = known_builder.build(
        [o for o, u in zip(outs, out_unknowns) if not u] + list(residuals)
    )
    num_res = len(residuals)
    # the unknown jaxpr takes residuals as leading inputs instead of constvars
    unknown_jaxpr = Jaxpr([], unknown_jaxpr.constvars + unknown_jaxpr.invars,
                          unknown_jaxpr.eqns, unknown_jaxpr.outvars)  # fmt: skip
    return known_jaxpr, known_consts, unknown_jaxpr, [], out_unknowns, num_res
