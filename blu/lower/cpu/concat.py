"""Concatenations the CPU does as plain copies: a sum of zero-padded operands whose interiors tile
the output (the transpose of slicing an array into parts, e.g. the gradient of
``q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]``) that a reduction reads becomes one
``cpu_concat`` equation, and so does a ``concatenate`` that a reduction reads.

Fused, such a sum is a kernel in which every output element divides its flat index and reads
every padded operand under a mask. Alone that runs near copy speed, but fused with a reduction
after it (a bias gradient: a sum over the rows) LLVM vectorizes neither, several times slower
than a copy and a separate reduction (``benchmarks/cpu_concat.py``, BENCHMARKS.md).
``cpu_concat`` is a library call
(``np.concatenate`` into the planned output buffer: one strided copy per operand), so the
reduction gets a kernel of its own. The rewrite (``rewrite_concats``) runs in the CPU's plan
preparation only; GPU programs and their kernels are untouched.

    # a, b, c: (n, 1)
    y = pad(a, 0, ((0,0,0), (0,2,0))) + pad(b, 0, ((0,0,0), (1,1,0))) + pad(c, 0, ((0,0,0),(2,0,0)))
    # becomes  y = cpu_concat(a, b, c, dimension=1, shapes=((n,1),)*3, shape=(n,3))

A reshape that only feeds a tiling pad is folded into the copy (``shapes``: each operand's shape
after it), and so is a reshape that is the only reader of the sum (``shape``: the result's shape):
numpy reshapes a contiguous array without copying.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blu.core.aval import ShapedArray
from blu.core.jaxpr import Jaxpr, JaxprEqn, Literal, Var, dce_jaxpr
from blu.core.primitive import Primitive
from blu.lower.library import LibraryLowering, register_library
from blu.lower.plan.fusion import is_reduction

__all__ = ["MIN_ELEMENTS", "concat_p", "rewrite_concats", "tiling"]

# below this many output elements the fused kernel is as fast as a call (a few microseconds)
MIN_ELEMENTS = 1 << 12


# ---- the primitive -------------------------------------------------------------------------------


def _concat(xs, dimension: int, shapes: tuple, shape: tuple, out: np.ndarray | None = None):
    parts = [np.reshape(x, s) for x, s in zip(xs, shapes, strict=True)]
    if out is None:
        return np.concatenate(parts, axis=dimension).reshape(shape)
    if out.flags.c_contiguous:  # (planned buffers are) reshaped without a copy
        np.concatenate(parts, axis=dimension, out=out.reshape(_joined(shapes, dimension)))
    else:
        out[...] = np.concatenate(parts, axis=dimension).reshape(out.shape)
    return out


def _joined(shapes: tuple, dimension: int) -> tuple:
    s = list(shapes[0])
    s[dimension] = sum(p[dimension] for p in shapes)
    return tuple(s)


concat_p = Primitive("cpu_concat")
concat_p.def_impl(lambda *xs, dimension, shapes, shape: _concat(xs, dimension, shapes, shape))


@concat_p.def_abstract_eval
def _abstract(*xs: ShapedArray, dimension: int, shapes: tuple, shape: tuple) -> ShapedArray:
    return ShapedArray(tuple(shape), xs[0].dtype)


def _decomposition(*xs, dimension: int, shapes: tuple, shape: tuple):
    # where no library call applies (a GPU target: the rewrite never makes one there)
    from blu import lax

    parts = [lax.reshape(x, s) for x, s in zip(xs, shapes, strict=True)]
    return lax.reshape(lax.concatenate(parts, dimension), shape)


concat_p.decomposition = _decomposition


def _cpu_call(ins, outs, workspace, *, dimension, shapes, shape) -> None:
    _concat(ins, dimension, shapes, shape, out=outs[0])


register_library(
    concat_p,
    LibraryLowering(workspace=lambda avals, params, target: 0, cpu=_cpu_call, gpu=None),
    platform="cpu",
)  # fmt: skip


# ---- the pattern ---------------------------------------------------------------------------------


def _is_zero(a: Any) -> bool:
    return isinstance(a, Literal) and np.all(np.asarray(a.val) == 0)


def tiling(pads: list[tuple[tuple, tuple]], out_shape: tuple) -> int | None:
    """The axis along which zero-padded operands tile ``out_shape`` exactly, or None.

    Args:
        pads: per operand, ``(shape, padding_config)`` of a ``pad`` by zero (config: per axis
            ``(low, high, interior)``).
        out_shape: the shape of the padded operands (all alike).

    Returns:
        ``d`` when every operand is padded only on axis ``d``, without interior or negative
        padding, and the operands' intervals ``[low, low + n)`` on that axis are disjoint and
        cover it; None otherwise (overlaps would add, gaps would need zeros written).
    """
    if len(pads) < 2:
        return None
    axis = None
    spans = []
    for shape, config in pads:
        if len(config) != len(out_shape) or len(shape) != len(out_shape):
            return None
        for d, (lo, hi, interior) in enumerate(config):
            if interior != 0 or lo < 0 or hi < 0:
                return None
            if (lo, hi) != (0, 0):
                if axis is not None and axis != d:
                    return None
                axis = d
        spans.append(config)
    if axis is None:  # every operand covers the whole output: they overlap
        return None
    for shape, _ in pads:  # equal shapes except on the axis (a pad keeps them)
        if any(shape[d] != out_shape[d] for d in range(len(out_shape)) if d != axis):
            return None
    at = 0
    for shape, config in sorted(pads, key=lambda p: p[1][axis][0]):
        lo, hi, _ = config[axis]
        if lo + shape[axis] + hi != out_shape[axis] or (shape[axis] and lo != at):
            return None  # (an empty part covers nothing, wherever it is)
        at += shape[axis]
    return axis if at == out_shape[axis] else None


def rewrite_concats(jaxpr: Jaxpr, min_elements: int | None = None) -> Jaxpr:
    """Replace each sum (a tree of ``add``) of zero-padded operands that tile its output along
    one axis (``tiling``) and each ``concatenate``, where a reduction reads the result (fused
    with it, the reduction's loops are not vectorized), by one ``cpu_concat`` equation; results
    of fewer than ``min_elements`` elements (default ``MIN_ELEMENTS``) stay as they are. The
    result computes the same outputs."""
    min_elements = MIN_ELEMENTS if min_elements is None else min_elements
    eqns = jaxpr.eqns
    producer: dict[Var, JaxprEqn] = {v: e for e in eqns for v in e.outvars}
    uses: dict[Var, int] = {}
    readers: dict[Var, list[JaxprEqn]] = {}
    for e in eqns:
        for a in e.invars:
            if isinstance(a, Var):
                uses[a] = uses.get(a, 0) + 1
                readers.setdefault(a, []).append(e)
    for v in jaxpr.outvars:
        if isinstance(v, Var):
            uses[v] = uses.get(v, 0) + 2  # an output is never folded away

    def private(v: Any) -> JaxprEqn | None:
        """The equation making ``v`` when ``v`` is read only once (by the sum)."""
        return producer.get(v) if isinstance(v, Var) and uses.get(v, 0) == 1 else None

    def leaves(v: Any, out: list) -> bool:
        e = private(v)
        if e is not None and e.primitive.name == "add" and e.outvars[0].aval == v.aval:
            return all(leaves(a, out) for a in e.invars)
        if e is not None and e.primitive.name == "pad" and _is_zero(e.invars[1]):
            out.append(e)
            return True
        return False

    def reduced(v: Var, reshaped: bool = False) -> bool:
        """Whether a reduction reads ``v`` (or a reshape of it)."""
        return any(is_reduction(r) or (r.primitive.name == "reshape" and not reshaped
                                       and reduced(r.outvars[0], True))
                   for r in readers.get(v, []))  # fmt: skip

    replace: dict[int, JaxprEqn] = {}  # id of a sum's root (or its reshape) -> the copy
    for e in eqns:
        if e.primitive.name == "concatenate":  # fused, fine; fused with a reduction after, slow
            out = e.outvars[0]
            if (all(isinstance(a, Var) for a in e.invars) and reduced(out)
                    and math.prod(out.aval.shape) >= min_elements):  # fmt: skip
                params = {"dimension": e.params["dimension"], "shape": tuple(out.aval.shape),
                          "shapes": tuple(tuple(a.aval.shape) for a in e.invars)}  # fmt: skip
                replace[id(e)] = JaxprEqn(concat_p, list(e.invars), params, [out], e.source)
            continue
        if e.primitive.name != "add" or id(e) in replace:
            continue
        out = e.outvars[0]
        r = readers.get(out, [])
        if len(r) == 1 and r[0].primitive.name == "add" and uses[out] == 1:
            continue  # not the root of its sum
        if math.prod(out.aval.shape) < min_elements or not reduced(out):
            continue  # alone, the fused sum runs near copy speed
        pads: list[JaxprEqn] = []
        if not all(leaves(a, pads) for a in e.invars):
            continue
        shape = out.aval.shape
        axis = tiling([(p.invars[0].aval.shape, p.params["padding_config"]) for p in pads],
                      shape)  # fmt: skip
        if axis is None or any(p.invars[0].aval.dtype != out.aval.dtype for p in pads):
            continue
        pads.sort(key=lambda p: p.params["padding_config"][axis][0])
        ops = []
        for p in pads:  # a reshape read only by this pad: its operand, reshaped by the copy
            x = p.invars[0]
            q = private(x)
            ops.append(q.invars[0] if q is not None and q.primitive.name == "reshape" else x)
        shapes = tuple(tuple(p.invars[0].aval.shape) for p in pads)
        root, result = e, out
        if len(r) == 1 and r[0].primitive.name == "reshape" and uses[out] == 1:
            root, result = r[0], r[0].outvars[0]  # the sum's only reader: its reshape
        params = {"dimension": axis, "shapes": shapes, "shape": tuple(result.aval.shape)}
        replace[id(root)] = JaxprEqn(concat_p, ops, params, [result], e.source)
        replace[id(e)] = replace[id(root)] if root is e else None
    if not replace:
        return jaxpr
    new = [replace.get(id(e), e) for e in eqns]
    new = [e for e in new if e is not None]
    return dce_jaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, new, jaxpr.outvars))
