"""The CPU reference executable (interprets a jaxpr with each primitive's numpy impl); it lives
in ``blu.core.numpy_eval`` so the impl rules of control flow can run sub-jaxprs without
importing the lowering."""

from blu.core.numpy_eval import NumpyExecutable, run_numpy

__all__ = ["NumpyExecutable", "run_numpy"]
