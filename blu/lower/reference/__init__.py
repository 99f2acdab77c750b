"""The numpy reference backend: jit runs each primitive's numpy impl, equation by equation
(``BLU_JIT_BACKEND=numpy``, or where the MLIR bindings are not installed)."""

from blu.lower.reference.backend import NumpyExecutable, ReferenceBackend, run_numpy

__all__ = ["NumpyExecutable", "ReferenceBackend", "run_numpy"]
