"""The backend seam: what every target provides, and how a call finds its backend.

    backend = backend_for(args, target)      # "cpu", "cuda:sm_XX", or chosen from the arguments
    prepared = backend.prepare(jaxpr, donated)   # target-neutral plan + this backend's passes
    exe = backend.compile(jaxpr, donated, backend.options())
    exe(*args); exe.memory_analysis(); exe.as_text(); exe.name; exe.target

A backend is one object (one folder each: ``blu/lower/cpu``, ``blu/lower/cuda``,
``blu/lower/reference``) with typed ``Options``, ``Capabilities`` the target-neutral partition
reads, and the passes the target-neutral ``plan.prepare`` calls at fixed points (``early_passes``
before simplification, ``late_passes`` after it, ``lay_out_kernel`` per fused kernel,
``concurrent_nodes`` before memory planning). Each backend registers itself
(``register_backend``) when its folder is imported; nothing here imports a backend. The
executable cache and the hook into the core live in ``execution.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar

from blu.core.config import config
from blu.core.errors import BluValueError
from blu.core.jaxpr import Jaxpr
from blu.lower import mlir
from blu.lower.plan.prepare import Prepared, prepare_plan
from blu.lower.target import CPU, CUDA_DEFAULT, parse_target


@dataclasses.dataclass(frozen=True)
class Options:
    """What besides the program, its donation and its target changes an executable; each
    backend subclasses it with its own typed fields (the executable cache keys on it)."""


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a target's plans may contain (read by the target-neutral ``plan.partition``).

    Attributes:
        compiles_loops: control flow whose bodies compile becomes a ``loop`` node (else it
            runs on the host).
        strided_views: data movement numpy does without a copy may be a strided view (else a
            view must be the operand's contiguous buffer).
        views_feed_libraries: library calls may read views (they take contiguous buffers).
        kernel_buffers: the most buffers a kernel may take (each launch's parameters: a GPU
            launch's 4352 bytes of 8-byte pointers); None: no limit.
    """

    compiles_loops: bool = False
    strided_views: bool = False
    views_feed_libraries: bool = False
    kernel_buffers: int | None = None


class Backend:
    """Prepares, lowers and compiles programs for one target (subclassed per backend).

    Attributes:
        platform: ``"cpu"`` or ``"cuda"`` (the key of its lowering slots and registrations).
        target: the target string (``"cpu"``, ``"cuda:sm_90"``).
        caps: its ``Capabilities``.
    """

    platform: ClassVar[str] = CPU
    caps: ClassVar[Capabilities] = Capabilities()

    def __init__(self, target: str = CPU):
        self.target = target

    def options(self) -> Options:
        """The ``Options`` in effect now (read from ``blu.config``)."""
        return Options()

    def prepare(self, jaxpr: Jaxpr, donated: Sequence[bool], options: Any = None) -> Prepared:
        """The simplified jaxpr, launch plan and memory plan (``plan.prepare``)."""
        return prepare_plan(jaxpr, _donated(jaxpr, donated), self)

    # ---- the passes ``plan.prepare`` calls -------------------------------------------------------

    def early_passes(self, jaxpr: Jaxpr) -> Jaxpr:
        """Rewrites before simplification (which inlines custom-derivative calls)."""
        return jaxpr

    def late_passes(self, jaxpr: Jaxpr) -> Jaxpr:
        """Rewrites of the simplified program, before partition."""
        return jaxpr

    def prepare_loop(self, node: Any) -> None:
        """Prepare a ``loop`` node's bodies for this target where its executables run them
        from planned buffers (``node.bodies``, ``node.workspace``: the bytes of the outer
        arena they take); by default nothing (the CPU compiles them with the executable)."""

    def runs_dot(self, eqn: Any) -> bool:
        """Whether a ``dot_general`` equation is a product node (else a host fallback)."""
        return True

    def lay_out_kernel(self, layout: Any) -> None:
        """Target-specific planning of a fused kernel's layout (e.g. split-reduction scratch)."""

    def concurrent_nodes(self, plan: Any) -> frozenset:
        """Pairs of plan nodes that run side by side (their buffers must not be shared)."""
        return frozenset()

    # ---- kernels --------------------------------------------------------------------------------

    def heading(self) -> str:
        """What a program's text says of its target after its name (``as_text()``)."""
        return ""

    def key_target(self) -> str:
        """The target string of this backend's kernel-cache keys."""
        return self.target

    def kernel_text(self, node: Any) -> str:
        """The canonical text a compiled node is cached under on this target."""
        raise NotImplementedError

    def emit_node(self, node: Any, sym: str) -> str:
        """The MLIR text of a compiled node (kernel or scatter) named ``sym``."""
        raise NotImplementedError

    def describe(self, prim: Any) -> str:
        """How ``prim`` runs on this target, for ``docs/primitives.md``."""
        raise NotImplementedError

    # ---- executables ----------------------------------------------------------------------------

    def compile(self, jaxpr: Jaxpr, donated: Sequence[bool], options: Options,
                name: str = "jit", args: Sequence[Any] = ()) -> Any:  # fmt: skip
        """A new executable of ``jaxpr`` (callers go through ``execution.executable_for``'s
        cache); ``args``, where given, are the arguments of the call it is compiled for."""
        raise NotImplementedError

    def lower(self, jaxpr: Jaxpr, name: str, donated: Sequence[bool], options: Options) -> Any:
        """The program prepared for this target, not compiled (``Lowered``)."""
        raise NotImplementedError


def _donated(jaxpr: Jaxpr, donated: Sequence[bool] | None) -> tuple[bool, ...]:
    return tuple(donated or ()) or (False,) * len(jaxpr.invars)


# ---- the registry -------------------------------------------------------------------------------

_BACKENDS: dict[str, type[Backend]] = {}


def register_backend(name: str, cls: type[Backend]) -> None:
    """Make ``cls`` the backend named ``name``: a platform (``"cpu"``, ``"cuda"``) or
    ``"reference"`` (the numpy reference executor)."""
    _BACKENDS[name] = cls


def registered_backends() -> dict[str, type[Backend]]:
    return dict(_BACKENDS)


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
            target = CUDA_DEFAULT
        elif cpu_engine() == "numpy":
            return _BACKENDS["reference"](CPU)
        else:
            target = CPU
    t = parse_target(target)
    return _BACKENDS[t.platform](str(t))


def prepare(jaxpr: Jaxpr, donated: Sequence[bool], target: str = CPU) -> Prepared:
    """``backend_for((), target).prepare(jaxpr, donated)``: a program's plan for ``target``."""
    return backend_for((), target).prepare(jaxpr, donated)
