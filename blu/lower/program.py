"""What the seam hands out: a ``Program`` (a jaxpr prepared for a target: its text, its kernels'
cache keys, its memory) and the ``Executable`` interface every backend's executables share
(``__call__``, ``memory_analysis()``, ``as_text()``, ``name``, ``target``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from blu.core.errors import BluError
from blu.core.jaxpr import Jaxpr
from blu.lower.backend import Options, backend_for
from blu.lower.mlir.program import cache_keys, program_text
from blu.lower.plan.memory import MemoryAnalysis
from blu.lower.plan.prepare import Prepared
from blu.lower.plan.steps import Steps

log = logging.getLogger("blu.jit")


class BluFloatingPointError(BluError, FloatingPointError):
    """``BLU_DEBUG_NANS``: a jitted computation produced a NaN."""


class Program:
    """A jaxpr prepared for a target (``prepare``): no kernel compiled yet.

    Args:
        jaxpr: the program (no constvars; ``jit`` hoists them into arguments).
        name: for logs, errors and the text.
        target: ``"cpu"`` or ``"cuda:sm_XX"``.
        donated: per argument, whether the program may reuse its buffer.
        options: the ``Options`` it is built for.
        prepared: the ``prepare`` result, if already made.
    """

    def __init__(
        self,
        jaxpr: Jaxpr,
        name: str,
        target: str,
        donated: Sequence[bool] | None,
        options: Options,
        prepared: Prepared | None = None,
    ):
        self.name, self.target, self.source_jaxpr, self.options = name, target, jaxpr, options
        self.donated = tuple(donated or ()) or (False,) * len(jaxpr.invars)
        self.backend = backend_for((), target)
        self.prepared = prepared or self.backend.prepare(jaxpr, self.donated, options)
        self.jaxpr, self.plan, self.memory = self.prepared

    def as_text(self) -> str:
        """The launch plan (as comments) and the MLIR of every distinct kernel."""
        return program_text(self.name, self.backend, self.plan, self.backend.heading())

    def cache_keys(self) -> list[str]:
        """The keys of its kernels in the kernel cache (``BLU_CACHE_DIR``)."""
        return cache_keys(self.plan, self.backend)

    def memory_analysis(self) -> MemoryAnalysis:
        """Argument, output, temporary and peak bytes of the plan."""
        return self.memory.analysis

    def check_memory(self, device_bytes: int, in_use: int = 0) -> None:
        """Raise the out-of-memory report now (no kernel, no GPU needed) when the program's
        footprint (arguments, arena, fresh outputs: ``plan.memory_report.footprint_bytes``) does
        not fit in ``device_bytes`` with ``in_use`` bytes held by other arrays.

        Raises:
            BluOutOfMemoryError: naming the bytes asked and free and the plan's largest buffers
                at its peak with their shapes, dtypes, equations and source lines.
        """
        from blu.lower.plan.memory_report import check_fits

        check_fits(self.name, self.plan, self.memory, device_bytes, in_use, self.donated)

    def memory_timeline(self, path: str, **kwargs: Any) -> str:
        """Draw the plan's buffers over the program to ``path`` (``.png`` or ``.html``)."""
        from blu.lower.plan.memory_timeline import draw_timeline

        return draw_timeline(self.plan, self.memory, path, **kwargs)


class Lowered(Program):
    """A program lowered for a target, not compiled yet (``jit(f).lower(...)``'s program):
    ``as_text()`` is the MLIR (no ``mlir`` import needed); ``compile()`` gives the executable
    (kernels from the persistent cache, or compiled into it); ``memory_analysis()`` the plan's
    bytes; ``cache_keys()`` the keys of its kernels in ``BLU_CACHE_DIR``."""

    executable: type = None  # type: ignore[assignment]  # set by each target's subclass

    def compile(self) -> Executable:
        return self.executable(self.source_jaxpr, self.name, self.donated,
                               options=self.options, prepared=self.prepared)  # fmt: skip


class Executable(Program):
    """A program whose kernels are compiled, runnable: ``exe(*args) -> list of outputs``.

    Subclasses (``CpuExecutable``, ``GpuExecutable``) compile their kernels and run the shared
    ``steps`` (``plan.steps.Steps``) with their own step runners.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.steps = Steps(self.plan, self.memory, self.donated)

    def __call__(self, *args: Any) -> list[Any]:
        raise NotImplementedError
