"""The numpy reference backend: a jaxpr run with each primitive's numpy impl, equation by
equation (``blu.core.numpy_eval``, the one reference evaluator, which the control-flow impls
also use for their bodies). ``BLU_JIT_BACKEND=numpy`` selects it, and so does a machine without
the MLIR bindings (the GPU machine's host code). Lowering (``jit(f).lower()``) shows the CPU's
plan: the reference has none of its own."""

from __future__ import annotations

import dataclasses

from blu.core.numpy_eval import NumpyExecutable, run_numpy
from blu.lower.backend import Backend, Options, backend_for, register_backend

__all__ = ["NumpyExecutable", "ReferenceBackend", "run_numpy"]


@dataclasses.dataclass(frozen=True)
class ReferenceOptions(Options):
    """Keeps the reference's executables apart from the CPU's in the one executable cache."""

    engine: str = "numpy"


class ReferenceBackend(Backend):
    """Each primitive's numpy impl, equation by equation (``NumpyExecutable``)."""

    def options(self) -> ReferenceOptions:
        return ReferenceOptions()

    def compile(self, jaxpr, donated, options, name="jit", args=()):
        return NumpyExecutable(jaxpr, name)

    def lower(self, jaxpr, name, donated, options):
        cpu = backend_for((), self.target)
        return cpu.lower(jaxpr, name, donated, cpu.options())

    def describe(self, prim) -> str:
        return "numpy impl"


register_backend("reference", ReferenceBackend)
