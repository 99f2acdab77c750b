"""From jaxprs to executables: the backend seam (``backend``), launch plans (``plan/``), MLIR
emission and kernel compilation (``mlir/``), the CPU and GPU executables (``cpu/``, ``gpu/``),
library lowerings (``library``) and the numpy reference executable (``reference``).

Importing ``blu.lower`` registers its jit backend with ``blu.transforms.jit`` and the dispatch of
eager operations on device arrays with the core's interpreter (``blu/__init__.py`` imports it),
and fills the primitives' lowering slots (``lowering``).
"""

from blu.core.interpreter import register_device_dispatch
from blu.lower.cuda import attention as _attention  # noqa: F401  (attention's library lowerings)
from blu.lower import lowering  # noqa: F401  (fills each primitive's ``lowerings``)
from blu.lower.backend import JIT_BACKEND, backend_for
from blu.lower.cuda.dispatch import apply_on_device

from blu.lower.library import LibraryLowering, register_library
from blu.transforms.jit import register_jit_backend

register_jit_backend(JIT_BACKEND)
register_device_dispatch(apply_on_device)
