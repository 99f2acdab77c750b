"""Where operations on GPU arrays go: the root interpreter hands every primitive whose operands
include a ``DeviceArray`` to ``apply_on_device``.

- ``jit`` (``jit_p``): the jitted program runs as one ``GpuExecutable``, cached per program,
  donation pattern, target and matrix-product precision.
- any other primitive (eager code, e.g. ``x + y`` on DeviceArrays): a one-equation program,
  compiled and cached the same way, so eager operations run as single-primitive kernels from
  the kernel cache, asynchronously.

Host operands (numpy arrays, Python scalars, ``blu.Array``) mixed in are copied to the device.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from blu.core.config import config
from blu.core.jaxpr import Jaxpr, JaxprEqn, Var
from blu.lower import codegen_rows

_lock = threading.Lock()
_by_jaxpr: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_eager: dict[tuple, Any] = {}


def executable_for(jaxpr: Jaxpr, name: str, donated: tuple[bool, ...], target: str) -> Any:
    """The cached ``GpuExecutable`` of ``jaxpr`` (per donation, target and precision)."""
    from blu.lower.gpu import GpuExecutable

    key = (donated, target, config.default_matmul_precision, codegen_rows.key_suffix())
    with _lock:
        per = _by_jaxpr.get(jaxpr)
        if per is None:
            per = _by_jaxpr[jaxpr] = {}
        exe = per.get(key)
    if exe is None:
        exe = GpuExecutable(jaxpr, name, donated, target, config.default_matmul_precision)
        with _lock:
            per[key] = exe
    return exe


def register(jaxpr: Jaxpr, donated: tuple[bool, ...], exe: Any) -> None:
    """Make ``exe`` (from ``jit(f).lower(..., target=...).compile()``) the one calls use."""
    with _lock:
        per = _by_jaxpr.setdefault(jaxpr, {})
        per[(tuple(donated), exe.target, exe.precision, codegen_rows.key_suffix())] = exe


def apply_on_device(prim: Any, args: tuple, avals: list, params: dict) -> Any:
    """Run ``prim`` on the device of its DeviceArray operands; returns DeviceArrays."""
    from blu.lower.mlir_gpu import DEFAULT_TARGET as target  # the GPUs blu runs on: sm_90

    if prim.name == "jit":
        exe = executable_for(params["jaxpr"], params["name"], tuple(params["donated_invars"]),
                             target)  # fmt: skip
        return exe(*args)
    from blu.lower.cache import _param

    key = (
        prim.name,
        tuple((a.shape, a.dtype.name, a.weak_type) for a in avals),
        tuple(sorted((k, _param(v)) for k, v in params.items())),
        target,
        config.default_matmul_precision,
    )
    exe = _eager.get(key)
    if exe is None:
        invars = [Var(a) for a in avals]
        out_avals = prim.rule("abstract_eval")(*avals, **params)
        outs = list(out_avals) if prim.multiple_results else [out_avals]
        outvars = [Var(a) for a in outs]
        j = Jaxpr([], invars, [JaxprEqn(prim, invars, dict(params), outvars)], outvars)
        from blu.lower.gpu import GpuExecutable

        exe = GpuExecutable(j, prim.name, None, target, config.default_matmul_precision)
        with _lock:
            _eager[key] = exe
    res = exe(*args)
    return res if prim.multiple_results else res[0]
