"""The launch plan's data: its node kinds (``NodeKind``), its nodes and the plan itself."""

from __future__ import annotations

import enum
from typing import Any

from blu.core.jaxpr import Jaxpr, JaxprEqn, Var


class NodeKind(enum.StrEnum):
    """What a launch-plan node is (a ``str`` enum: it prints as its value, e.g. ``kernel``).

    - ``KERNEL``: a fused group of elementwise, data-movement and reduction equations, one
      compiled function (``fusion.KernelLayout`` lays out its loops).
    - ``DOT``: ``dot_general`` as a library product (numpy's matmul on the CPU, cuBLASLt on
      the GPU).
    - ``SCATTER``: ``scatter_add`` / ``scatter``, a kernel of its own (``mlir/scatter.py``).
    - ``VIEW``: data movement done without a copy (a numpy view; on the GPU the same buffer).
    - ``LIBRARY``: one equation done by a library call (``blu.lower.library``): outputs in
      planned buffers, its workspace planned scratch, queued on the executable's stream.
    - ``LOOP``: control flow (``scan``, ``while``, ``cond``): its bodies compiled as executables
      of their own, run by a loop over their steps (``cpu/control_flow.py``,
      ``cuda/loops.py``), the results in planned buffers.
    - ``FALLBACK``: a primitive without a lowering for the target, run with its numpy impl (on
      a host copy on the GPU).
    """

    KERNEL = "kernel"
    DOT = "dot"
    SCATTER = "scatter"
    VIEW = "view"
    LIBRARY = "library"
    LOOP = "loop"
    FALLBACK = "fallback"

    @property
    def compiled(self) -> bool:
        """Whether nodes of this kind are compiled kernels (emitted as MLIR, in the cache)."""
        return self in (NodeKind.KERNEL, NodeKind.SCATTER)

    @property
    def owns_buffers(self) -> bool:
        """Whether the node's outputs live in planned buffers (arena, outputs, donated)."""
        return self in (
            NodeKind.KERNEL, NodeKind.DOT, NodeKind.SCATTER, NodeKind.LIBRARY, NodeKind.LOOP
        )  # fmt: skip

    @property
    def writes_every_result(self) -> bool:
        """Whether the node writes each result of its equation, read later or not (it is
        handed a buffer for each)."""
        return self in (NodeKind.LIBRARY, NodeKind.LOOP)


class Node:
    """One step of the launch plan.

    Attributes:
        kind: its ``NodeKind``.
        eqns: its equations (one, except for kernels).
        inputs / outputs: the plan-level variables it reads / defines.
        jaxpr: for kernels, the kernel as a jaxpr (inputs -> outputs).
        layout: for kernels, the ``fusion.KernelLayout`` (set by ``prepare``).
        workspace: for library nodes, the bytes of scratch the call needs; for loop nodes on
            targets that plan them (``Backend.prepare_loop``), their bodies' buffers (set by
            ``prepare``).
        bodies: for loop nodes, what the backend prepared of their bodies (or None).
        inplace: for kernels, ``(output, input)`` positions whose buffers the memory plan made
            one (an output written over an input); the CPU kernel writes such an output through
            the input's pointer (set by ``MemoryPlan``).
        overwrites: for library nodes, the input its result may be written over, if any
            (``LibraryLowering.inplace``: cuBLASLt's ``C`` of ``dot_acc``; set by ``prepare``).
    """

    __slots__ = ("kind", "eqns", "inputs", "outputs", "jaxpr", "group", "layout", "workspace",
                 "inplace", "bodies", "overwrites")  # fmt: skip

    def __init__(self, kind: NodeKind, eqns: list[JaxprEqn], inputs: list[Var], outputs: list[Var]):
        self.kind, self.eqns, self.inputs, self.outputs = NodeKind(kind), eqns, inputs, outputs
        self.jaxpr: Jaxpr | None = None
        self.group: tuple[int, ...] | None = None  # the fusion group it came from
        self.layout: Any = None  # kernels: their fusion.KernelLayout
        self.workspace: int = 0  # library and loop nodes: scratch bytes
        self.inplace: tuple[tuple[int, int], ...] = ()
        self.bodies: Any = None  # loop nodes: the backend's prepared bodies
        self.overwrites: Var | None = None  # library nodes: an input the result may reuse

    def label(self) -> str:
        names = [e.primitive.name for e in self.eqns]
        short = ",".join(names[:6]) + (f",...(+{len(names) - 6})" if len(names) > 6 else "")
        return f"{self.kind}[{short}]"

    def __repr__(self) -> str:
        return self.label()


class Plan:
    """The launch plan of a jaxpr: ``nodes`` in execution order."""

    def __init__(self, jaxpr: Jaxpr, nodes: list[Node]):
        self.jaxpr = jaxpr
        self.nodes = nodes

    def __str__(self) -> str:
        return "\n".join(f"{i}: {n.label()}" for i, n in enumerate(self.nodes))
