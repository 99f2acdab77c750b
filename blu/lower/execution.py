"""Where programs run: the one executable cache, and what the core calls.

    executor().call(jaxpr, name, donated, args)        # jit_p's impl
    executor().apply_on_device(prim, args, avals, params)   # an eager op on device arrays
    executor().lower(jaxpr, name, target, donated)      # jit(f).lower(...)

``jit`` calls (``jit_p``'s impl), AOT ``Compiled`` objects and eager operations on device arrays
all find their executables in ONE cache (``executable_for``), keyed by the program's identity
(the jaxpr object), the donation pattern, the target and the backend's ``Options``, bounded by
``blu.config.executable_cache_size`` (least recently used programs dropped first).
``blu.lower`` registers ``EXECUTOR`` with the core (``blu.core.execution.register_executor``),
the one hook from the core into execution.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core.array import immutable
from blu.core.jaxpr import Jaxpr, JaxprEqn, Var
from blu.core.lru import LRU
from blu.lower.backend import Backend, _donated, backend_for
from blu.lower.mlir.cache import _param
from blu.transforms.jit import jit_p

# (jaxpr, donation, target, options) -> executable, at most ``blu.config.executable_cache_size``
# of them, least recently used dropped first. The jaxpr is held: an executable refers to its
# jaxpr, so a weak key would never die (it grew without bound); the bound is what frees them.
_executables = LRU("executable_cache_size")


def _key(jaxpr: Jaxpr, donated: Sequence[bool], target: str, options: Any) -> tuple:
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


# one-equation programs of eager operations on device arrays; as many as the cache keeps
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


class Executor:
    """What the core calls (``blu.core.execution.register_executor``): jitted programs and
    eager operations on device arrays, through the one cache."""

    @staticmethod
    def call(jaxpr: Jaxpr, name: str, donated_invars: Sequence[bool], args: Sequence[Any]):
        """``jit_p``'s impl: run ``jaxpr`` on ``args`` (device arrays: on their GPU)."""
        exe = executable_for(jaxpr, name, tuple(donated_invars), backend_for(args), args)
        if not getattr(exe, "borrows_inputs", False):  # its results may alias its operands
            args = [a.copy() if isinstance(a, np.ndarray) and not immutable(a) else a
                    for a in args]  # fmt: skip
        return exe(*args)

    @staticmethod
    def fast_callable(jaxpr: Jaxpr, name: str, donated_invars: Sequence[bool], args: Sequence[Any]):
        """The executable a call like this one runs, for ``jit``'s fast path
        (``blu/transforms/dispatch.py``), or None: it does not read host arrays in place
        (an executable whose results may alias its operands). With device arrays, the
        executable's ``runner`` for their device (a list of arguments -> the outputs). Where the
        executable has a lean call (``lean()``: the CPU's ``cpu/lean.py``) and the arguments
        have the program's dtypes (no conversion per call), that call; it holds for the
        current flags (the fast path checks ``config.generation`` per call)."""
        if any(getattr(a, "_blu_device_array", False) for a in args):
            # on a GPU: the executable bound to the arguments' device (``runner``), which
            # reads host arguments and donates as the full path does
            exe = executable_for(jaxpr, name, tuple(donated_invars), backend_for(args), args)
            runner = getattr(exe, "runner", None)
            return runner(args) if runner is not None else None
        exe = executable_for(jaxpr, name, tuple(donated_invars), backend_for(args), args)
        if not getattr(exe, "borrows_inputs", False):
            return None
        lean = getattr(exe, "lean", None)
        if lean is not None and all(getattr(a, "dtype", None) == v.aval.dtype
                                    for a, v in zip(args, jaxpr.invars)):  # fmt: skip
            return lean() or exe
        return exe

    @staticmethod
    def lower(jaxpr: Jaxpr, name: str, target: str | None, donated_invars: Sequence[bool]):
        """The program lowered for ``target`` (None: the CPU)."""
        backend = backend_for((), target or "cpu")
        return backend.lower(jaxpr, name, tuple(donated_invars), backend.options())

    @staticmethod
    def adopt(jaxpr: Jaxpr, donated_invars: Sequence[bool], executable: Any) -> None:
        adopt(jaxpr, tuple(donated_invars), executable)

    @staticmethod
    def apply_on_device(prim: Any, args: tuple, avals: list, params: dict) -> Any:
        """Run ``prim`` on the device of its device-array operands (host operands are copied
        there): a one-equation program per primitive, operand avals and params, compiled and
        cached like any other; ``jit_p`` runs its own program. Returns device arrays."""
        if prim is jit_p:
            return prim.impl(*args, **params)
        j = eager_program(prim, avals, params)
        exe = executable_for(j, prim.name, (False,) * len(avals), backend_for(args), args)
        res = exe(*args)
        return res if prim.multiple_results else res[0]


EXECUTOR = Executor()


def make_executable(jaxpr: Jaxpr, name: str = "jit", donated_invars: Sequence[bool] | None = None):
    """A new executable of ``jaxpr`` on the CPU default (``cpu_engine``), not cached."""
    backend = backend_for((), None)
    return backend.compile(jaxpr, _donated(jaxpr, donated_invars), backend.options(), name)
