"""Ahead-of-time staging of a jitted function: ``jit(f).lower(*args, target=...)`` gives a
``Lowered`` (the program for one signature, its IR, its memory plan), ``.compile()`` a
``Compiled`` (an executable that calls of that signature then run). Arguments may be arrays or
``ShapeDtypeStruct`` specs (``_spec_to_aval_holder``: value-less stand-ins with an aval).
"""

from __future__ import annotations

from typing import Any

from blu.core import execution, pytree
from blu.core.aval import ShapedArray, ShapeDtypeStruct
from blu.core.errors import BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer, get_aval
from blu.core.jaxpr import ClosedJaxpr, pp_jaxpr
from blu.transforms.jit_cache import CacheEntry, stable_hoisted

__all__ = ["Compiled", "Lowered", "Signature"]

# ``jitted`` below is a ``blu.transforms.jit.Jitted`` (typed ``Any``: jit.py imports this module,
# and this one imports nothing of jit.py's)


def _is_spec(x: Any) -> bool:
    return isinstance(x, ShapeDtypeStruct)


def _spec_to_aval_holder(x: Any) -> Any:
    if isinstance(x, ShapeDtypeStruct):
        return _SpecTracer(ShapedArray(x.shape, x.dtype))
    return x


class _SpecTracer(Tracer):
    """A value-less placeholder with an aval, used by ``lower`` for ShapeDtypeStruct specs."""

    __slots__ = ("_aval",)

    def __init__(self, aval: ShapedArray):
        self._interp = None
        self._aval = aval

    @property
    def aval(self) -> ShapedArray:
        return self._aval


class Signature:
    """What a ``lower`` call fixed: the static arguments' values (``("arg", position, value)``
    / ``("kw", name, value)``, as ``Jitted._split`` gives them), the treedef of the dynamic
    ``(args, kwargs)`` and their avals. A ``Compiled`` is called with the dynamic arguments only
    (as JAX's), of these shapes and dtypes."""

    def __init__(self, statics: tuple, in_tree: Any, in_avals: list[ShapedArray]):
        self.statics, self.in_tree, self.in_avals = statics, in_tree, in_avals

    def full_args(self, name: str, args: tuple, kwargs: dict) -> tuple[list, dict]:
        """The call's arguments with the static ones put back, after checking the others.

        Raises:
            BluTypeError: the arguments' structure, shapes or dtypes differ from ``lower``'s.
        """
        leaves, tree = pytree.tree_flatten((list(args), dict(kwargs)))
        if tree != self.in_tree:
            n_static = sum(1 for kind, _, _ in self.statics if kind == "arg")
            raise BluTypeError(
                with_user_line(
                    f"jit({name}).lower(...).compile(): called with arguments structured as "
                    f"{tree}, but it was compiled for {self.in_tree}"
                    + (f" (its {n_static} static positional argument(s) are fixed by lower: "
                       "leave them out of the call)" if n_static else "")
                )
            )  # fmt: skip
        bad = [
            f"argument leaf {i} compiled with {a.str_short()} and called with {b.str_short()}"
            for i, (a, b) in enumerate(zip(self.in_avals, map(get_aval, leaves)))
            if a.shape != b.shape or a.dtype != b.dtype
        ]
        if bad:
            raise BluTypeError(
                with_user_line(
                    f"jit({name}).lower(...).compile(): argument types differ from those it was "
                    "compiled for: " + "; ".join(bad)
                )
            )
        full, kw = list(args), dict(kwargs)
        for kind, where, value in self.statics:  # positions ascending
            if kind == "arg":
                full.insert(where, value)
            else:
                kw[where] = value
        return full, kw


class Lowered:
    """A staged program for one signature (``jit(f).lower(*args, target=...)``).

    ``as_text()`` is the compiler's IR for the target (the launch plan and the MLIR of every
    kernel; the CPU when no target is named, as JAX shows StableHLO), ``as_text("jaxpr")`` the
    staged jaxpr; ``memory_analysis()`` the memory plan's bytes (JAX's field names);
    ``memory_timeline(path)`` draws the plan's buffers over the program; ``compile()`` makes it
    runnable. Lowering for the default target happens on first use, so ``lower`` stays cheap.
    """

    def __init__(self, jitted: Any, entry: CacheEntry, target: str | None = None,
                 donated_invars: tuple[bool, ...] = (),
                 signature: Signature | None = None):  # fmt: skip
        self.jitted = jitted
        self.entry = entry
        self.target = target
        self.donated_invars = donated_invars
        self.signature = signature
        self._lowered = None
        if target is not None:
            self._lowered = self._lower()

    def _lower(self) -> Any:
        backend = execution.executor()
        if backend is None:
            raise BluValueError(
                f"jit({self.jitted.name}).lower(target={self.target!r}): no backend is "
                "registered; `import blu` (it registers blu.lower)"
            )
        return backend.lower(
            stable_hoisted(self.entry), self.jitted.name, self.target, self.donated_invars
        )

    @property
    def _program(self) -> Any:
        if self._lowered is None:
            self._lowered = self._lower()
        return self._lowered

    @property
    def jaxpr(self) -> ClosedJaxpr:
        return ClosedJaxpr(self.entry.jaxpr, self.entry.consts)

    def as_text(self, dialect: str | None = None) -> str:
        """The launch plan and the MLIR of every kernel for the target (default: the CPU);
        ``dialect="jaxpr"``: the staged jaxpr."""
        if dialect == "jaxpr":
            return pp_jaxpr(self.entry.jaxpr)
        if dialect not in (None, "mlir"):
            raise BluValueError(f"as_text(dialect={dialect!r}): expected None, 'mlir' or 'jaxpr'")
        return self._program.as_text()

    def memory_analysis(self) -> Any:
        """Argument, output, alias, temporary and peak bytes of the memory plan."""
        return self._program.memory_analysis()

    def memory_timeline(self, path: str, **kwargs: Any) -> str:
        """Draw the plan's buffers over the program to ``path`` (``.png`` or ``.html``)."""
        return self._program.memory_timeline(path, title=self.jitted.name, **kwargs)

    def check_memory(self, device_bytes: int, in_use: int = 0) -> None:
        """Raise the out-of-memory report before anything runs (no kernel or GPU needed) when
        the program's footprint (arguments, its arena of temporaries, its fresh outputs) does
        not fit in ``device_bytes`` with ``in_use`` bytes held by other arrays.

        Raises:
            BluOutOfMemoryError: the bytes asked and free, and the plan's largest buffers at
                its peak (shape, dtype, the equation making each, the user's source line).
        """
        self._program.check_memory(device_bytes, in_use)

    def compile(self) -> Compiled:
        # no target: calls run through jit's own cache on the arguments' device
        exe = self._program.compile() if self.target is not None else None
        return Compiled(self.jitted, self.entry, exe, self.donated_invars, lowered=self)


class Compiled:
    """A compiled program for one signature; call it with arrays of that signature."""

    def __init__(self, jitted: Any, entry: CacheEntry, executable: Any = None,
                 donated_invars: tuple[bool, ...] = (),
                 lowered: Lowered | None = None):  # fmt: skip
        self.jitted = jitted
        self.entry = entry
        self.executable = executable
        self._lowered = lowered
        backend = execution.executor()
        if executable is not None and backend is not None:  # calls of this program run it
            backend.adopt(stable_hoisted(entry), donated_invars, executable)
            jitted._fast = None  # (its fast path would run the executable it had before)

    def memory_analysis(self) -> Any:
        """Argument, output, alias, temporary and peak bytes of the memory plan (of the default
        target's plan when compiled without one, as JAX reports its default backend's)."""
        if self.executable is not None:
            return self.executable.memory_analysis()
        return None if self._lowered is None else self._lowered.memory_analysis()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run with the dynamic arguments (those ``lower`` did not take as static), of the
        shapes and dtypes it was lowered for (``BluTypeError`` otherwise, as JAX's)."""
        signature = None if self._lowered is None else self._lowered.signature
        if signature is not None:
            args, kwargs = signature.full_args(self.jitted.name, args, kwargs)
        return self.jitted(*args, **kwargs)

    def as_text(self, dialect: str | None = None) -> str:
        """The generated code: the launch plan and each kernel's MLIR, then (CUDA targets) each
        kernel's PTX; ``dialect="jaxpr"``: the staged jaxpr."""
        if dialect == "jaxpr" or self.executable is None:
            return pp_jaxpr(self.entry.jaxpr)
        text = self.executable.as_text()
        ptx = getattr(self.executable, "ptx", None)
        if callable(ptx):
            for sym, code in ptx().items():
                code = code.decode() if isinstance(code, bytes) else code
                text += f"\n// ---- PTX of {sym}\n{code}"
        return text
