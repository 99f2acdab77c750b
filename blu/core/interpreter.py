"""Interpreters and tracers: the "stackless" core (after JAX's autodidax2).

There is one *current interpreter* per thread. ``prim.bind(*args)`` hands the operation to it. Each
interpreter remembers its *parent*, the interpreter that was current when it was made; a rule
runs under that parent, so rules are written with ordinary operations and transforms nest with
no levels or stacks: ``grad(vmap(f))`` is a JVP interpreter whose parent is a batching
interpreter whose parent is the eval interpreter.

A *tracer* is a value owned by one interpreter. An interpreter treats a value it does not own
as a constant of its own transform (zero tangent, unbatched, staged constant) — provided the
owner is one of its ancestors. A tracer whose owner is not an ancestor escaped its transform.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from blu.core import dtypes, execution
from blu.core.array import Array, ArrayOps, immutable
from blu.core.aval import ShapedArray, shaped
from blu.core.errors import (
    BluError,
    BluTypeError,
    ConcretizationError,
    EscapedTracerError,
    with_user_line,
)


class Interpreter:
    """Base class: receives every primitive application while it is current."""

    parent: Interpreter | None = None
    finished: bool = False  # set when its transform returned; its tracers must not be used again

    def process(self, prim: Any, args: tuple, params: dict) -> Any:
        raise NotImplementedError

    def owns(self, x: Any) -> bool:
        return isinstance(x, Tracer) and x._interp is self

    def check_value(self, x: Any) -> None:
        """Raise EscapedTracerError when ``x`` is a tracer of neither this interpreter nor an
        ancestor (so it leaked out of a finished transform)."""
        if not isinstance(x, Tracer) or x._interp is self:
            return
        interp = self.parent
        while interp is not None:
            if x._interp is interp:
                return
            interp = interp.parent
        raise EscapedTracerError(
            with_user_line(
                f"a tracer {x.aval.str_short()} created by {type(x._interp).__name__} was used "
                "outside the transformation that created it (it escaped, e.g. by being stored in "
                "a global or a Python closure that outlived jit/grad/vmap). Return values out of "
                "transformed functions instead of storing them."
            )
        )


class EvalInterpreter(Interpreter):
    """The root interpreter: runs each primitive's numpy implementation eagerly."""

    def process(self, prim: Any, args: tuple, params: dict) -> Any:
        for a in args:
            if isinstance(a, Tracer):
                self.check_value(a)
        avals = [get_aval(a) for a in args]
        out_avals = prim.rule("abstract_eval")(*avals, **params)
        if any(getattr(a, "_blu_device_array", False) for a in args):
            ex = execution.executor()
            if ex is None:
                raise BluError(
                    f"{prim.name}: an operand is a device array, but no device backend is "
                    "registered; `import blu` (it registers the GPU backend, blu.lower)"
                )
            return ex.apply_on_device(prim, args, avals, params)  # operands on a GPU: run there
        borrow = prim.borrows_operands(params) if prim.borrows_operands is not None else ()
        if any(borrow):  # e.g. a jitted call on the CPU reads the user's arrays in place
            vals = [a if b and isinstance(a, np.ndarray) else to_numpy(a, av)
                    for a, av, b in zip(args, avals, borrow)]  # fmt: skip
        else:
            vals = [to_numpy(a, av) for a, av in zip(args, avals)]
        outs = prim.impl(*vals, **params)
        if prim.multiple_results:
            return [_wrap(o, av) for o, av in zip(outs, out_avals)]
        return _wrap(outs, out_avals)


def _wrap(x: Any, aval: ShapedArray) -> Array:
    x = np.asarray(x)
    if x.dtype != aval.dtype:
        x = x.astype(aval.dtype)
    return Array(x, aval.weak_type)


_root = EvalInterpreter()


class _TraceContext(threading.local):
    """The current interpreter, per thread (as JAX's trace state): a trace in one thread never
    sees another thread's tracers, and each new thread starts at the root eval interpreter."""

    def __init__(self) -> None:
        self.current: Interpreter = _root


_context = _TraceContext()
# for jit's fast path (``transforms/dispatch.py``), which reads ``thread_context.current is
# root_interpreter`` inline: ``at_root``'s answer without a call
thread_context, root_interpreter = _context, _root


def at_root() -> bool:
    """Whether this thread's operations run eagerly (no transform is tracing them)."""
    return _context.current is _root


def current_interpreter() -> Interpreter:
    """The interpreter ``bind`` hands operations to in this thread."""
    return _context.current


@contextlib.contextmanager
def set_interpreter(interp: Interpreter) -> Iterator[Interpreter]:
    """Make ``interp`` current in this thread for the duration of the block."""
    ctx = _context
    prev, ctx.current = ctx.current, interp
    try:
        yield interp
    finally:
        ctx.current = prev


class Tracer(ArrayOps):
    """A value owned by an interpreter; subclasses hold what the transform needs."""

    __slots__ = ("_interp",)
    __array_priority__ = 1000

    @property
    def aval(self) -> ShapedArray:
        raise NotImplementedError

    @property
    def shape(self) -> tuple[int, ...]:
        return self.aval.shape

    @property
    def dtype(self) -> np.dtype:
        return self.aval.dtype

    @property
    def weak_type(self) -> bool:
        return self.aval.weak_type

    @property
    def ndim(self) -> int:
        return self.aval.ndim

    @property
    def size(self) -> int:
        return self.aval.size

    def __len__(self) -> int:
        if not self.shape:
            raise BluTypeError(with_user_line("len() of a 0-d array"))
        return self.shape[0]

    def _concretization_error(self, what: str) -> ConcretizationError:
        return ConcretizationError(
            with_user_line(
                f"{what} of a traced array {self.aval.str_short()} "
                f"(traced by {type(self._interp).__name__}): its value is not known while "
                "tracing. Mark the argument static (jit(..., static_argnums=...) / "
                "static_argnames=...), or express the branch/loop with blu.numpy.where, "
                "blu.lax.cond, blu.lax.fori_loop or blu.lax.while_loop."
            )
        )

    def __bool__(self) -> bool:
        raise self._concretization_error("bool()")

    def __int__(self) -> int:
        raise self._concretization_error("int()")

    def __float__(self) -> float:
        raise self._concretization_error("float()")

    def __index__(self) -> int:
        raise self._concretization_error("using as a Python index")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise self._concretization_error("converting to a numpy array (np.asarray)")

    def tolist(self) -> Any:
        raise self._concretization_error("tolist()")

    def item(self) -> Any:
        raise self._concretization_error("item()")

    def __repr__(self) -> str:
        return f"Traced<{self.aval.str_short()}> by {type(self._interp).__name__}"

    __hash__ = None  # type: ignore[assignment]


def get_aval(x: Any) -> ShapedArray:
    """The abstract value of anything that can be an operand.

    Raises:
        BluTypeError: ``x`` is not an array, tracer or Python/numpy scalar.
    """
    if isinstance(x, (Tracer, Array)):
        return x.aval
    if getattr(x, "_blu_device_array", False):  # blu.cuda.DeviceArray (not imported here)
        return x.aval
    if isinstance(x, (np.ndarray, np.generic)):
        return shaped(x.shape, x.dtype)
    if isinstance(x, (bool, int, float, complex)):
        dtype, weak = dtypes.dtype_and_weak(x)
        return ShapedArray((), dtype, weak)
    raise BluTypeError(
        with_user_line(f"value of type {type(x).__name__} is not a valid blu array: {x!r:.80}")
    )


def to_numpy(x: Any, aval: ShapedArray | None = None) -> np.ndarray:
    """The numpy value of a concrete operand (Array, numpy array or Python scalar)."""
    if isinstance(x, Array):
        return x._value
    if isinstance(x, np.ndarray):
        # a user's buffer is copied unless nothing can write it (not even through its base), so
        # later writes cannot change blu arrays
        return x if immutable(x) else x.copy()
    aval = aval or get_aval(x)
    if isinstance(x, int) and not isinstance(x, bool) and dtypes.is_int(aval.dtype):
        info = np.iinfo(aval.dtype)
        if not info.min <= x <= info.max:
            raise BluTypeError(with_user_line(f"Python int {x} does not fit in {aval.dtype}"))
    return np.asarray(x, aval.dtype)


def canonicalize_arg(x: Any) -> Any:
    """A transform's input leaf as an operand: Python scalars become weakly typed 0-d Arrays
    and numpy scalars 0-d Arrays, so rules never see bare scalars as primals; a numpy array
    becomes an Array of its own copy unless ``immutable`` (a function returning its input, as
    ``vmap(lambda x: x)``, gave the user's buffer back: writing it changed the result)."""
    if isinstance(x, np.generic):  # first: np.float64 subclasses float
        return Array(np.asarray(x))
    if type(x) is np.ndarray:
        return Array(to_numpy(x))
    if isinstance(x, (bool, int, float, complex)):
        dtype, weak = dtypes.dtype_and_weak(x)
        return Array(np.asarray(x, dtype), weak)
    return x


def is_concrete(x: Any) -> bool:
    return not isinstance(x, Tracer)


class _CompileTimeEval(Interpreter):
    """``ensure_compile_time_eval``'s interpreter: an operation none of whose operands is a
    tracer runs eagerly at the root; any other goes to the interpreter it wraps (its parent,
    so tracers of that one and its ancestors are still recognised)."""

    def __init__(self, parent: Interpreter):
        self.parent = parent

    def process(self, prim: Any, args: tuple, params: dict) -> Any:
        if any(isinstance(a, Tracer) for a in args):
            return self.parent.process(prim, args, params)
        return _root.process(prim, args, params)


@contextlib.contextmanager
def ensure_compile_time_eval() -> Iterator[None]:
    """A context manager under which operations on concrete values run eagerly, even while
    ``jit``, ``grad`` or ``vmap`` trace the surrounding function, as JAX's.

    Inside the block an operation whose operands are all concrete (arrays, Python or numpy
    scalars: none a tracer) is evaluated now and gives a concrete ``Array``, usable as a
    Python number (a shape, a loop bound, an ``if``); an operation with a traced operand is
    traced as usual. Outside a transform the block changes nothing. What runs eagerly is not
    part of the traced program (its result is a constant of it).

    Example::

        @blu.jit
        def f(x):
            with blu.ensure_compile_time_eval():
                n = int(bnp.sum(bnp.arange(4)))   # 6, a Python int while tracing
            return x * n

    Source: ``jax.ensure_compile_time_eval`` (``jax/_src/core.py``; JAX's eager constant
    folding).
    """
    ctx = _context
    if ctx.current is _root:
        yield
        return
    with set_interpreter(_CompileTimeEval(ctx.current)):
        yield
