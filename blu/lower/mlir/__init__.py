"""MLIR text emission and compilation: lowering rules, kernel code generators (CPU, GPU), the
kernel cache and the MLIR/LLVM drivers (``mlir_cpu``, ``mlir_gpu``)."""

import functools
import importlib.util


@functools.cache
def _mlir_available() -> bool:
    """Whether the MLIR Python bindings are installed (``import mlir`` happens only to compile)."""
    return importlib.util.find_spec("mlir") is not None
