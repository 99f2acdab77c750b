"""Symbolic zeros, undefined primals and helpers for writing JVP and transpose rules.

``Zero(aval)`` is a tangent or cotangent known to be zero: rules skip work for it and it is never
materialised unless a rule asks (``instantiate``). ``UndefinedPrimal(aval)`` marks the linear
arguments of a primitive being transposed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blu.core import dtypes
from blu.core.array import Array
from blu.core.aval import ShapedArray
from blu.core.interpreter import Tracer, at_root, canonicalize_arg, get_aval
from blu.transforms import ops


class Zero:
    """A symbolic zero tangent/cotangent of the given aval."""

    __slots__ = ("aval",)

    def __init__(self, aval: ShapedArray):
        self.aval = aval

    def __repr__(self) -> str:
        return f"Zero({self.aval.str_short()})"


class UndefinedPrimal:
    """A linear input of a primitive being transposed: only its aval is known (and, inside
    ``blu.shard``, the mesh axes its primal varies over: ``vma``, None when unknown)."""

    __slots__ = ("aval", "vma")

    def __init__(self, aval: ShapedArray, vma: Any = None):
        self.aval = aval
        self.vma = vma

    def __repr__(self) -> str:
        return f"UndefinedPrimal({self.aval.str_short()})"


def is_undefined(x: Any) -> bool:
    return isinstance(x, UndefinedPrimal)


def tangent_aval(aval: ShapedArray) -> ShapedArray:
    """Tangents of floats are floats of the same dtype (never weak); of ints/bools, the same
    aval (they are always symbolic zeros)."""
    return aval.strip_weak_type()


def zeros_like_aval(aval: ShapedArray) -> Any:
    return ops.zeros(aval)


def instantiate(t: Any) -> Any:
    """A real array for a tangent that may be a symbolic Zero."""
    return zeros_like_aval(t.aval) if isinstance(t, Zero) else t


def add_tangents(a: Any, b: Any) -> Any:
    """Sum of two tangents/cotangents, either of which may be a symbolic Zero."""
    if isinstance(a, Zero):
        return b
    if isinstance(b, Zero):
        return a
    return ops.add(a, b)


def zero_like(x: Any) -> Zero:
    return Zero(tangent_aval(get_aval(x)))


def is_differentiable(aval: ShapedArray) -> bool:
    return dtypes.is_inexact(aval.dtype)


# ---- rule builders -----------------------------------------------------------------------------


def defjvp(prim: Any, *jvp_fns: Callable | None) -> None:
    """Define ``prim``'s JVP as a sum of per-argument contributions.

    ``jvp_fns[i](t_i, *primals, **params)`` gives the tangent contribution of argument i (linear
    in ``t_i``); ``None`` marks a non-differentiable argument. Zero tangents are skipped.
    """

    def rule(primals, tangents, **params):
        out = prim.bind(*primals, **params)
        total: Any = Zero(tangent_aval(get_aval(out)))
        if not is_differentiable(get_aval(out)):
            return out, total
        for fn, t in zip(jvp_fns, tangents):
            if fn is not None and not isinstance(t, Zero):
                total = add_tangents(total, fn(t, *primals, **params))
        return out, total

    prim.def_jvp(rule)


def defjvp_with_output(prim: Any, *jvp_fns: Callable | None) -> None:
    """Like ``defjvp`` but each contribution is ``fn(t_i, out, *primals, **params)`` so it can
    reuse the primal output (e.g. exp, tanh, logistic)."""

    def rule(primals, tangents, **params):
        out = prim.bind(*primals, **params)
        total: Any = Zero(tangent_aval(get_aval(out)))
        for fn, t in zip(jvp_fns, tangents):
            if fn is not None and not isinstance(t, Zero):
                total = add_tangents(total, fn(t, out, *primals, **params))
        return out, total

    prim.def_jvp(rule)


def deflinear(prim: Any, transpose_fn: Callable) -> None:
    """A primitive linear in all its array arguments: its JVP applies it to the tangents;
    ``transpose_fn(ct, *args, **params)`` gives the cotangents of the arguments."""

    def jvp(primals, tangents, **params):
        out = prim.bind(*primals, **params)
        if all(isinstance(t, Zero) for t in tangents):
            zero_out = [zero_like(o) for o in out] if prim.multiple_results else zero_like(out)
            return out, zero_out
        return out, prim.bind(*map(instantiate, tangents), **params)

    prim.def_jvp(jvp)
    prim.def_transpose(transpose_fn)


def nondifferentiable(prim: Any) -> None:
    """JVP of a primitive whose outputs have no tangent (comparisons, argmax, integer ops)."""

    def jvp(primals, tangents, **params):
        out = prim.bind(*primals, **params)
        if prim.multiple_results:
            return out, [zero_like(o) for o in out]
        return out, zero_like(out)

    prim.def_jvp(jvp)


def eager_arrays(xs: list[Any], avals: list[ShapedArray] | None = None) -> list[Any]:
    """Leaves handed back to the user by ``jvp`` / ``vjp`` / ``linearize``: where nothing is
    tracing, a Python or numpy value that flowed through untouched (a constant output, a
    cotangent passed straight back, a rule's literal zero) becomes an ``Array`` (of the dtype
    of ``avals`` where given), as every other leaf is; under a trace leaves are kept."""
    if not at_root():
        return list(xs)
    out = []
    for i, x in enumerate(xs):
        if not isinstance(x, (Array, Tracer)):
            x = canonicalize_arg(x)
            if isinstance(x, Array) and avals is not None and x.dtype != avals[i].dtype:
                x = ops.convert_element_type(x, avals[i].dtype)
        out.append(x)
    return out
