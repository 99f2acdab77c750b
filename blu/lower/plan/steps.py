"""One plan-to-steps builder for the CPU and GPU executables: every value of a launch plan gets
a slot, every node becomes a ``Step`` naming the slots it reads and writes, its scratch offsets
and the planned buffers of its outputs. The executables keep only their step runners (what a
step of each ``NodeKind`` does on numpy arrays or on a device)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from blu.core.aval import ShapedArray
from blu.core.jaxpr import Literal, Var
from blu.lower.plan.memory import MemoryPlan
from blu.lower.plan.nodes import Node, NodeKind, Plan


@dataclasses.dataclass
class Step:
    """One node of the plan, in slots.

    Attributes:
        kind: the node's kind.
        node: the node.
        index: its position in the plan (the memory plan's key for its scratch).
        ins: per operand read, its slot (an int) or a ``Literal`` (fallbacks and CPU products
            may read literals; kernels read only their inputs' slots).
        outs: the slots it writes.
        scratch: arena offsets of its scratch buffers (kernel scratch, library workspace).
        allocs: ``(slot, place, aval)`` of the outputs that own a planned buffer (``place`` is
            the memory plan's: ``("arena", offset)``, ``("out",)``, ``("donated", i)``).
    """

    kind: NodeKind
    node: Node
    index: int
    ins: list[Any]
    outs: list[int]
    scratch: list[int]
    allocs: list[tuple[int, tuple, ShapedArray]]


def literal_value(a: Literal) -> np.ndarray:
    return np.asarray(a.val, a.aval.dtype)


class Steps:
    """The steps of a prepared program (see the module docstring).

    Attributes:
        slot: plan variable -> slot.
        n_slots: number of slots.
        in_slots: the arguments' slots.
        donated_slots: the slots of donated arguments.
        steps: one ``Step`` per node, in plan order.
        allocs: every step's ``allocs``, in order.
        out_spec: per output, ``("var", slot)`` or ``("lit", value)``.
    """

    def __init__(self, plan: Plan, memory: MemoryPlan, donated: tuple[bool, ...]):
        j = plan.jaxpr
        slot: dict[Var, int] = {}

        def s(v: Var) -> int:
            if v not in slot:
                slot[v] = len(slot)
            return slot[v]

        self.in_slots = [s(v) for v in j.invars]
        self.steps: list[Step] = []
        for k, node in enumerate(plan.nodes):
            kind = node.kind
            allocs = []
            if kind.owns_buffers:  # a library call writes every result, read later or not
                for v in node.eqns[0].outvars if kind.writes_every_result else node.outputs:
                    if memory.root[v] is v:
                        allocs.append((s(v), memory.place[v], v.aval))
            if kind == NodeKind.KERNEL:
                reads, writes = node.inputs, node.outputs
            elif kind == NodeKind.SCATTER:
                reads, writes = node.eqns[0].invars, node.outputs
            else:
                reads, writes = node.eqns[0].invars, node.eqns[0].outvars
            ins = [a if isinstance(a, Literal) else s(a) for a in reads]
            outs = [s(v) for v in writes]
            self.steps.append(Step(kind, node, k, ins, outs, memory.scratch.get(k, []), allocs))
        self.allocs = [a for st in self.steps for a in st.allocs]
        self.out_spec = [
            ("lit", literal_value(v)) if isinstance(v, Literal) else ("var", s(v))
            for v in j.outvars
        ]
        self.slot = slot
        self.n_slots = len(slot)
        self.donated_slots = [sl for sl, d in zip(self.in_slots, donated) if d]
