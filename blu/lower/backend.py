"""The backend seam: from a jaxpr and its arguments to an executable, for every caller.

    backend = backend_for(args, target)          # CPU (MLIR or the numpy reference) or CUDA
    exe = backend.compile(jaxpr, donated, backend.options())
    exe(*args); exe.memory_analysis(); exe.as_text(); exe.name; exe.target

``jit`` calls (``jit_p``'s impl), AOT ``Compiled`` objects and eager operations on device arrays
all find their executables in ONE cache (``executable_for``), keyed by the program's identity
(the jaxpr object), the donation pattern, the target and the ``Options`` that
change the executable (matrix-product precision and row-group form on the GPU; the CPU engine),
bounded by ``blu.config.executable_cache_size`` (least recently used programs dropped first).
``blu.lower`` registers ``JIT_BACKEND`` with ``blu.transforms.jit.register_jit_backend`` and the
device dispatch (``gpu.dispatch.apply_on_device``) with the core's interpreter when imported.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core.config import config
from blu.core.errors import BluValueError
from blu.core.jaxpr import Jaxpr
from blu.core.lru import LRU
from blu.lower import mlir
from blu.lower.plan.prepare import Prepared, prepare
from blu.lower.program import Options

CUDA_DEFAULT = "cuda:sm_90"  # the GPUs blu runs on (``mlir_gpu.DEFAULT_TARGET``)


class Backend:
    """Prepares and compiles programs for one target.

    Attributes:
        target: ``"cpu"`` or ``"cuda:sm_XX"``.
    """

    target: str = "cpu"

    def options(self) -> Options:
        """The ``Options`` in effect now (read from ``blu.config`` and the environment)."""
        return Options()

    def prepare(self, jaxpr: Jaxpr, donated: Sequence[bool], options: Options) -> Prepared:
        """The simplified jaxpr, launch plan and memory plan (``plan.prepare``)."""
        return prepare(jaxpr, _donated(jaxpr, donated), self.target)

    def compile(self, jaxpr: Jaxpr, donated: Sequence[bool], options: Options,
                name: str = "jit", args: Sequence[Any] = ()) -> Any:  # fmt: skip
        """A new executable of ``jaxpr`` (callers go through ``executable_for``'s cache);
        ``args``, where given, are the arguments of the call it is compiled for."""
        raise NotImplementedError

    def lower(self, jaxpr: Jaxpr, name: str, donated: Sequence[bool], options: Options) -> Any:
        """The program prepared for this target, not compiled (``Lowered``)."""
        raise NotImplementedError


class CpuBackend(Backend):
    """Fused kernels compiled through MLIR to the host's machine code (``cpu.executable``)."""

    def compile(self, jaxpr, donated, options, name="jit", args=()):
        from blu.lower.cpu.executable import CpuExecutable

        return CpuExecutable(jaxpr, name, donated, options)

    def lower(self, jaxpr, name, donated, options):
        from blu.lower.cpu.executable import Lowered

        return Lowered(jaxpr, name, "cpu", donated, options)


class ReferenceBackend(Backend):
    """Each primitive's numpy impl, equation by equation (``reference.NumpyExecutable``):
    ``BLU_JIT_BACKEND=numpy``, or where the MLIR bindings are not installed (the GPU machine)."""

    def options(self) -> Options:
        return Options(engine="numpy")

    def compile(self, jaxpr, donated, options, name="jit", args=()):
        from blu.lower.reference import NumpyExecutable

        return NumpyExecutable(jaxpr, name)

    def lower(self, jaxpr, name, donated, options):
        return CpuBackend().lower(jaxpr, name, donated, options)


class CudaBackend(Backend):
    """Fused kernels compiled to PTX/cubin, products through cuBLASLt, run on a device's stream
    (``gpu.executable``)."""

    def __init__(self, target: str = CUDA_DEFAULT):
        self.target = target

    def options(self) -> Options:
        from blu.lower.cuda import codegen_rows

        return Options(config.default_matmul_precision, codegen_rows.key_suffix())

    def compile(self, jaxpr, donated, options, name="jit", args=()):
        """The executable; with the call's ``args`` (device arrays), the memory plan is first
        checked against what their device can still give (``gpu.run.check_device_memory``), so
        a program that cannot fit raises its out-of-memory report before any kernel is compiled
        or looked up."""
        from blu.lower.cuda.executable import GpuExecutable


        prepared = None
        if any(getattr(a, "_blu_device_array", False) for a in args):
            from blu.lower.cuda.run import check_device_memory


            prepared = self.prepare(jaxpr, donated, options)
            check_device_memory(name, prepared, _donated(jaxpr, donated), args)
        return GpuExecutable(jaxpr, name, donated, self.target, options=options,
                             prepared=prepared)  # fmt: skip

    def lower(self, jaxpr, name, donated, options):
        from blu.lower.cuda.executable import Lowered


        return Lowered(jaxpr, name, self.target, donated, options)


def _donated(jaxpr: Jaxpr, donated: Sequence[bool] | None) -> tuple[bool, ...]:
    return tuple(donated or ()) or (False,) * len(jaxpr.invars)


def cpu_engine() -> str:
    """``"mlir"`` (default where the MLIR bindings are installed) or ``"numpy"``
    (``BLU_JIT_BACKEND``).

    Raises:
        BluValueError: ``BLU_JIT_BACKEND`` is set to something else.
    """
    choice = (config.jit_backend or "").lower()
    if choice in ("mlir", "numpy"):
        return choice
    if choice:
        raise BluValueError(f"BLU_JIT_BACKEND={choice!r}: expected 'mlir' or 'numpy'")
    return "mlir" if mlir._mlir_available() else "numpy"


def backend_for(args: Sequence[Any] = (), target: str | None = None) -> Backend:
    """The backend for a call: ``target`` if given (``"cpu"``, ``"cuda:sm_XX"``), else CUDA
    when an argument is a device array, else the CPU default (``cpu_engine``).

    Raises:
        BluValueError: an unknown target, or a bad ``BLU_JIT_BACKEND``.
    """
    if target is None:
        if any(getattr(a, "_blu_device_array", False) for a in args):
            return CudaBackend(CUDA_DEFAULT)
        return CpuBackend() if cpu_engine() == "mlir" else ReferenceBackend()
    if target.startswith("cuda"):
        return CudaBackend(target)
    if target == "cpu":
        return CpuBackend()
    raise BluValueError(f"target {target!r}: expected 'cpu' or 'cuda:sm_XX' (e.g. 'cuda:sm_90')")


# ---- the one executable cache ------------------------------------------------------------------

# (jaxpr, donation, target, options) -> executable, at most ``blu.config.executable_cache_size``
# of them, least recently used dropped first. The jaxpr is held: an executable refers to its
# jaxpr, so a weak key would never die (it grew without bound); the bound is what frees them.
_executables = LRU("executable_cache_size")


def _key(jaxpr: Jaxpr, donated: Sequence[bool], target: str, options: Options) -> tuple:
    return (jaxpr, tuple(donated), target, options)  # a jaxpr hashes by identity


def executable_for(
    jaxpr: Jaxpr, name: str, donated: Sequence[bool], backend: Backend, args: Sequence[Any] = ()
) -> Any:
    """The cached executable of ``jaxpr`` for ``backend`` (compiled on first use, for a call
    with ``args`` where given), per donation pattern, target and the backend's current
    ``Options``."""
    options = backend.options()
    key = _key(jaxpr, donated, backend.target, options)
    exe = _executables.get(key)
    if exe is None:  # of two threads compiling one program at once, both use the first
        exe = _executables.setdefault(key, backend.compile(jaxpr, donated, options, name, args))
    return exe


def adopt(jaxpr: Jaxpr, donated: Sequence[bool], executable: Any) -> None:
    """Make ``executable`` (from ``jit(f).lower(...).compile()``) the one calls of ``jaxpr``
    with this donation run, on its target with its options."""
    _executables[_key(jaxpr, donated, executable.target, executable.options)] = executable


class JitBackend:
    """What ``blu.transforms.jit`` calls (``register_jit_backend``)."""

    @staticmethod
    def call(jaxpr: Jaxpr, name: str, donated_invars: Sequence[bool], args: Sequence[Any]):
        """``jit_p``'s impl: run ``jaxpr`` on ``args`` (device arrays: on their GPU)."""
        exe = executable_for(jaxpr, name, tuple(donated_invars), backend_for(args), args)
        if not getattr(exe, "borrows_inputs", False):  # its results may alias its operands
            args = [a.copy() if isinstance(a, np.ndarray) and a.flags.writeable else a
                    for a in args]  # fmt: skip
        return exe(*args)

    @staticmethod
    def fast_callable(jaxpr: Jaxpr, name: str, donated_invars: Sequence[bool], args: Sequence[Any]):
        """The executable a call like this one runs, for ``jit``'s fast path
        (``blu/transforms/dispatch.py``), or None: it is on a GPU, or it would have to copy
        its operands (``call`` does that)."""
        backend = backend_for(args)
        if backend.target != "cpu":
            return None
        exe = executable_for(jaxpr, name, tuple(donated_invars), backend, args)
        return exe if getattr(exe, "borrows_inputs", False) else None

    @staticmethod
    def lower(jaxpr: Jaxpr, name: str, target: str | None, donated_invars: Sequence[bool]):
        """The program lowered for ``target`` (None: the CPU)."""
        backend = backend_for((), target or "cpu")
        return backend.lower(jaxpr, name, tuple(donated_invars), backend.options())

    @staticmethod
    def adopt(jaxpr: Jaxpr, donated_invars: Sequence[bool], executable: Any) -> None:
        adopt(jaxpr, tuple(donated_invars), executable)


JIT_BACKEND = JitBackend()


def make_executable(jaxpr: Jaxpr, name: str = "jit", donated_invars: Sequence[bool] | None = None):
    """A new executable of ``jaxpr`` on the CPU default (``cpu_engine``), not cached."""
    backend = backend_for((), None)
    return backend.compile(jaxpr, _donated(jaxpr, donated_invars), backend.options(), name)
