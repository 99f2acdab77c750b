"""The SPMD partitioner's interpreter: a jaxpr run on per-device blocks with their layouts.

``run_partitioned`` walks the equations with each value's ``(block, Layout)``, applying each
primitive's rule (``spmd_rules``, ``spmd_nested``); ``PartitionContext`` holds the mesh, the
collectives inserted so far (``spmd.collectives``), the moves already made (each value is
moved to a layout once) and the broadcasts that can be made again in another layout.
``stage`` traces a jaxpr partitioned at its blocks' shapes (for calls and loop bodies).
"""

from __future__ import annotations

from typing import Any

from blu.core.jaxpr import Jaxpr, Literal, use_counts
from blu.core.primitive import Primitive
from blu.core.staging import hoist_consts, trace_to_jaxpr
from blu.parallel.mesh import Mesh
from blu.parallel.spmd_layout import Layout, drop_trivial, reshard
from blu.parallel.spmd_rules import RULES, elementwise, rebroadcast, replicate_all


class PartitionContext:
    def __init__(self, mesh: Mesh):
        self.mesh = mesh
        self.log: list[str] = []  # the collectives inserted (``collectives``)
        self.eqn: Any = None  # the equation being partitioned
        self._done: dict = {}  # (id(x), src, dst) -> (x, resharded): each move made once
        self._broadcasts: dict = {}  # id(y) -> (y, operand, its layout, the broadcast eqn)
        self.hints: dict = {}  # var -> dims its consumers (the outputs) want
        self.uses: dict = {}  # var -> how many equations (and outputs) read it

    def note_broadcast(self, y: Any, x: Any, lay: Layout, eqn: Any) -> None:
        self._broadcasts[id(y)] = (y, x, lay, eqn)

    def is_broadcast(self, y: Any) -> bool:
        hit = self._broadcasts.get(id(y))
        return hit is not None and hit[0] is y

    def hint(self, var: Any) -> tuple | None:
        return self.hints.get(var)

    def reshard(self, x: Any, src: Layout, dst: Layout) -> Any:
        if src == dst or drop_trivial(src, self.mesh) == drop_trivial(dst, self.mesh):
            return x
        key = (id(x), src, dst)
        hit = self._done.get(key)
        if hit is not None and hit[0] is x:
            return hit[1]
        n = len(self.log)
        if self.is_broadcast(x):  # made again in the wanted layout from its small operand
            _, source, lay, eqn = self._broadcasts[id(x)]
            y = rebroadcast(self, eqn, source, lay, dst)
            self._done[key] = (x, y)
            return y
        y = reshard(x, src, dst, self.mesh, self.log)
        for i in range(n, len(self.log)):  # the user's line that needed it
            self.log[i] += (
                f" for {self.eqn.primitive.name} at {self.eqn.source}" if self.eqn else ""
            )
        self._done[key] = (x, y)  # (x kept alive, so its id is not reused)
        return y


def _rule_of(prim: Primitive):
    found = RULES.get(prim.name)
    if found is not None:
        return found
    return elementwise if getattr(prim, "elementwise", False) else replicate_all


def run_partitioned(ctx: PartitionContext, jaxpr: Jaxpr, vals: list, lays: list[Layout]) -> list:
    """Run ``jaxpr`` on per-device blocks: ``(block, Layout)`` per output."""
    env: dict = {}

    def read(v):
        if isinstance(v, Literal):
            return v.val, Layout.replicated(len(v.aval.shape))
        return env[v]

    ctx.uses.update(use_counts(jaxpr))
    for v, x, lay in zip([*jaxpr.constvars, *jaxpr.invars], vals, lays, strict=True):
        env[v] = (x, lay)
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        ctx.eqn = eqn
        outs = _rule_of(eqn.primitive)(ctx, eqn, [x for x, _ in ins], [lay for _, lay in ins])
        env.update(zip(eqn.outvars, outs, strict=True))
    return [read(v) for v in jaxpr.outvars]


def output_hints(jaxpr: Jaxpr, out_dims: list) -> dict:
    """Per variable, the split the outputs want, carried back through elementwise equations
    (an optimizer's update chain ends in the parameter's layout: computing it split is ZeRO)."""
    hints = {
        v: d
        for v, d in zip(jaxpr.outvars, out_dims)
        if d is not None and not isinstance(v, Literal)
    }
    for eqn in reversed(jaxpr.eqns):
        if not getattr(eqn.primitive, "elementwise", False) or eqn.outvars[0] not in hints:
            continue
        h = hints[eqn.outvars[0]]
        for v in eqn.invars:
            if not isinstance(v, Literal) and v.aval.shape == eqn.outvars[0].aval.shape:
                hints.setdefault(v, h)
    return hints


def stage(
    ctx: PartitionContext,
    jaxpr: Jaxpr,
    avals: list,
    lays: list,
    whole_outputs: bool = False,
    out_lays_wanted: list | None = None,
) -> tuple:
    """``jaxpr`` partitioned and traced at these blocks' avals: ``(jaxpr with its consts as
    leading inputs, consts, output layouts, the collectives it inserted)``; ``whole_outputs``:
    the outputs replicated (a loop's predicate); ``out_lays_wanted``: the outputs moved to
    these layouts (the branches of a ``cond`` agree)."""
    sub = PartitionContext(ctx.mesh)
    out_lays: list = []

    def per_device(*xs):
        outs = run_partitioned(sub, jaxpr, list(xs), lays)
        want = out_lays_wanted
        if whole_outputs:
            want = [Layout.replicated(len(lay.dims)) for _, lay in outs]
        if want is not None:
            outs = [(sub.reshard(o, lay, w), w) for (o, lay), w in zip(outs, want)]
        out_lays[:] = [lay for _, lay in outs]
        return [o for o, _ in outs]

    local, consts = trace_to_jaxpr(per_device, avals)
    return hoist_consts(local), consts, out_lays, sub.log
