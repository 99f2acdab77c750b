"""The Primitive: one object per operation, with its rules as visible slots.

A primitive's rules sit on it (as in MLX), so a missing rule is obvious and an error can name both
the primitive and the transform:

- ``impl(*np_arrays, **params)``: the eager numpy implementation (the oracle).
- ``abstract_eval(*avals, **params)``: output aval(s); it is also where shapes and dtypes are
  checked, so every path (eager, traced, jitted) gives the same error.
- ``jvp(primals, tangents, **params) -> (primal_out, tangent_out)``: forward mode; tangents may be
  the symbolic ``Zero``. Written with ordinary blu operations, it runs under the parent
  interpreter, so it is itself differentiable, batchable and stageable.
- ``transpose(ct, *args, **params) -> cotangents``: for linear primitives only; linear
  arguments arrive as ``UndefinedPrimal``; return one cotangent (or ``None``) per argument.
- ``batch(axis_size, args, dims, **params) -> (out, out_dim)``: the vmap rule; ``dims[i]`` is
  the batched axis of ``args[i]`` or ``None``.
- ``partial_eval(interp, args, params)``: only for primitives holding jaxprs (jit, control flow),
  which split themselves into a known and an unknown part.
- ``batch_named(axis_size, axis_name, args, dims, **params) -> (out, out_dim)``: only for
  collectives over named axes (psum, all_gather, axis_index...). Unlike ``batch`` it is called by
  every vmap/shard level, even when no argument is batched, and gets that level's axis name.

Arrays are positional, static parameters are hashable keywords (as in JAX).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

from blu.core.errors import BluError, BluOutOfMemoryError, out_of_memory, with_user_line
from blu.core.interpreter import current_interpreter, get_aval


class MissingRuleError(BluError, NotImplementedError):
    """A transform met a primitive that has no rule for it."""


_TOO_LARGE = ("iterator is too large", "array is too big", "maximum allowed size exceeded",
              "maximum supported dimension", "maximum allowed dimension exceeded")  # fmt: skip


def _is_allocation_failure(e: BaseException) -> bool:
    """numpy's MemoryError, or its ValueErrors for arrays too large to address."""
    return isinstance(e, MemoryError) or any(m in str(e).lower() for m in _TOO_LARGE)


class Primitive:
    """A named operation with its rules.

    Args:
        name: how it prints in jaxprs.
        multiple_results: the rules return tuples of outputs.
    """

    registry: dict[str, Primitive] = {}  # every primitive by name (for docs/primitives.md)

    def __init__(self, name: str, *, multiple_results: bool = False):
        self.name = name
        self.multiple_results = multiple_results
        self.impl: Callable | None = None
        self.abstract_eval: Callable | None = None
        self.jvp: Callable | None = None
        self.transpose: Callable | None = None
        self.batch: Callable | None = None
        self.partial_eval: Callable | None = None
        self.batch_named: Callable | None = None
        # filled from blu.lower (core and lax never import it): kind -> lowering rule, e.g.
        # "elementwise", "index", "reduce", "view", "library" (see blu/lower/lowering.py)
        self.lowerings: dict[str, Any] = {}
        # a function of the operands written with lax operations, inlined by blu.lower's
        # prepare where no lowering applies for the target
        self.decomposition: Callable | None = None
        # ``params -> per operand, whether the impl may read a user's numpy buffer as it is``
        # (it only reads it during the call and its results never alias it); None: every
        # writable numpy operand is copied first
        self.borrows_operands: Callable[[dict], Any] | None = None
        # the defining module, for docs/primitives.md and error messages; a primitive made by a
        # helper function of lax's base or elementwise modules is named after the helper's caller
        frame = sys._getframe(1)
        self.module = frame.f_globals.get("__name__", "?")
        in_helper = frame.f_code.co_name != "<module>"
        if in_helper and self.module.startswith(("blu.lax._base", "blu.lax.elementwise")):
            self.module = sys._getframe(2).f_globals.get("__name__", self.module)
        Primitive.registry[name] = self

    def bind(self, *args: Any, **params: Any) -> Any:
        """Apply the primitive under the current interpreter (eval, trace, jvp, vmap, ...)."""
        try:
            return current_interpreter().process(self, args, params)
        except (MemoryError, ValueError, OverflowError) as e:
            if isinstance(e, BluError):
                raise
            if not _is_allocation_failure(e) and not self._unaddressable(args, params):
                raise
            raise self._out_of_memory(args, params, e) from None

    def _unaddressable(self, args: tuple, params: dict) -> bool:
        """Whether an output of this primitive on ``args`` is larger than a 64-bit address space
        (numpy then fails with a message of its own, or an ``OverflowError``)."""
        try:
            out = self.abstract_eval(*[get_aval(a) for a in args], **params)
        except Exception:  # noqa: BLE001 - only asked to word an error better
            return False
        outs = out if isinstance(out, (list, tuple)) else [out]
        return any(math.prod(a.shape) * a.dtype.itemsize >= 2**63 for a in outs)

    def _out_of_memory(self, args: tuple, params: dict, e: BaseException) -> BluError:
        """The failed allocation as a BluOutOfMemoryError: numpy's MemoryError names the
        shape; else (numpy's "iterator is too large") the largest output of this primitive."""
        shape, dtype = getattr(e, "shape", None), getattr(e, "dtype", None)
        if shape is None or dtype is None:
            try:
                out = self.abstract_eval(*[get_aval(a) for a in args], **params)
                outs = out if isinstance(out, (list, tuple)) else [out]
                big = max(outs, key=lambda a: math.prod(a.shape) * a.dtype.itemsize)
                shape, dtype = big.shape, big.dtype
            except Exception:  # the message is still better than numpy's
                return BluOutOfMemoryError(with_user_line(f"{self.name}: {e}"))
        what = f"{self.name}({params['name']})" if isinstance(params.get("name"), str) else None
        return out_of_memory(tuple(shape), dtype, what or self.name, str(e).splitlines()[0])

    def rule(self, kind: str) -> Callable:
        """The rule of the given kind, or a MissingRuleError naming the primitive and rule."""
        fn = getattr(self, kind)
        if fn is None:
            raise MissingRuleError(f"primitive '{self.name}' has no {kind} rule")
        return fn

    # decorators, so definitions read `@add_p.def_jvp`
    def def_impl(self, fn: Callable) -> Callable:
        self.impl = fn
        return fn

    def def_abstract_eval(self, fn: Callable) -> Callable:
        self.abstract_eval = fn
        return fn

    def def_jvp(self, fn: Callable) -> Callable:
        self.jvp = fn
        return fn

    def def_transpose(self, fn: Callable) -> Callable:
        self.transpose = fn
        return fn

    def def_batch(self, fn: Callable) -> Callable:
        self.batch = fn
        return fn

    def def_batch_named(self, fn: Callable) -> Callable:
        self.batch_named = fn
        return fn

    def def_partial_eval(self, fn: Callable) -> Callable:
        self.partial_eval = fn
        return fn

    def __repr__(self) -> str:
        return self.name
