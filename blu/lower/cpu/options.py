"""The CPU backend's ``Options`` (what besides a program changes its executable)."""

from __future__ import annotations

import dataclasses

from blu.lower.backend import Options


@dataclasses.dataclass(frozen=True)
class CpuOptions(Options):
    """The CPU's executables depend on no option (its flags change the kernels' text and so
    their cache keys, not the plan)."""
