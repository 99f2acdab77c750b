"""Where operations on GPU arrays go: the core's eval interpreter hands every primitive whose
operands include a ``DeviceArray`` to ``apply_on_device`` (registered with
``blu.core.interpreter.register_device_dispatch`` when ``blu.lower`` is imported).

- ``jit`` (``jit_p``): its impl, i.e. the jitted program as one ``GpuExecutable`` from the
  seam's one executable cache (``backend.executable_for``).
- any other primitive (eager code, e.g. ``x + y`` on DeviceArrays): a one-equation program,
  made once per primitive, operand avals and params, compiled and cached by the same cache, so
  eager operations run as single-primitive kernels from the kernel cache, asynchronously.

Host operands (numpy arrays, Python scalars, ``blu.Array``) mixed in are copied to the device.
"""

from __future__ import annotations

from typing import Any

from blu.core.jaxpr import Jaxpr, JaxprEqn, Var
from blu.core.lru import LRU
from blu.lower.backend import CUDA_DEFAULT, CudaBackend, executable_for
from blu.lower.mlir.cache import _param
from blu.transforms.jit import jit_p

# one-equation programs of eager operations; as many as the executable cache keeps
_programs = LRU("executable_cache_size")


def eager_program(prim: Any, avals: list, params: dict) -> Jaxpr:
    """The one-equation jaxpr of ``prim`` on operands of ``avals`` (made once, then reused, so
    the executable cache finds its executable by identity)."""
    key = (
        prim,
        tuple((a.shape, a.dtype.name, a.weak_type) for a in avals),
        tuple(sorted((k, _param(v)) for k, v in params.items())),
    )
    j = _programs.get(key)
    if j is None:
        invars = [Var(a) for a in avals]
        out_avals = prim.rule("abstract_eval")(*avals, **params)
        outs = list(out_avals) if prim.multiple_results else [out_avals]
        outvars = [Var(a) for a in outs]
        j = Jaxpr([], invars, [JaxprEqn(prim, invars, dict(params), outvars)], outvars)
        j = _programs.setdefault(key, j)
    return j


def apply_on_device(prim: Any, args: tuple, avals: list, params: dict) -> Any:
    """Run ``prim`` on the device of its DeviceArray operands; returns DeviceArrays."""
    if prim is jit_p:
        return prim.impl(*args, **params)  # the seam's jit backend: CUDA for device arrays
    j = eager_program(prim, avals, params)
    exe = executable_for(j, prim.name, (False,) * len(avals), CudaBackend(CUDA_DEFAULT), args)
    res = exe(*args)
    return res if prim.multiple_results else res[0]
