"""From jaxprs to executables: the target parser (``target``), the backend seam (``backend``:
the ``Backend`` object every target provides, and the registry), launch plans (``plan/``:
target-neutral), the shared kernel emission (``mlir/``: per-element rules, the MLIR builder, the
math library, the kernel cache, the host compiler), one folder per backend (``cpu/``, ``cuda/``,
``reference/``), the lowering slots (``lowering``), library lowerings (``library``) and the one
executable cache with the executor the core calls (``execution``).

Importing ``blu.lower`` fills the primitives' lowering slots, registers each backend and
registers the executor with the core (``blu.core.execution``; ``blu/__init__.py`` imports it).
"""

from blu.core.execution import register_executor
from blu.lower import lowering  # noqa: F401  (fills each primitive's ``lowerings``)
from blu.lower.backend import backend_for
from blu.lower.cpu import backend as _cpu  # noqa: F401  (registers the CPU backend)
from blu.lower.cuda import backend as _cuda  # noqa: F401  (registers the CUDA backend)
from blu.lower.execution import EXECUTOR
from blu.lower.library import LibraryLowering, register_library
from blu.lower.reference import backend as _reference  # noqa: F401  (registers the reference)

register_executor(EXECUTOR)
