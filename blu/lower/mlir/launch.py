"""How a GPU kernel is launched: ``Launch`` (one ``cuLaunchKernel``: function, grid, block) and
the grid-stride defaults shared by the CUDA code generators (``blu/lower/cuda/codegen.py``) and
the scatter kernels (``scatter.py``), which emit for either target."""

from __future__ import annotations

import dataclasses

BLOCK = 256
MAX_MAP_GRID = 1 << 16  # grid-stride loops: enough blocks to fill every SM many times over


@dataclasses.dataclass(frozen=True)
class Launch:
    """One ``cuLaunchKernel`` of a fused kernel: the ``gpu.func``'s name, grid, block and
    dynamic shared memory (bytes: a row group's stash, ``blu.lower.cuda.codegen_stash``)."""

    func: str
    grid: int
    block: int
    shared: int = 0
