"""The lowering rules of ``dynamic_slice``, ``dynamic_update_slice`` (``blu/lax/slicing.py``) and
``take_along_axis`` (``blu/lax/sorting.py``): ``INDEX`` rules, like gather's
(``rules_gather.py``), so each is computed point by point inside a fused kernel, on the CPU
(LLVM) and on CUDA GPUs (PTX) alike: the value at an output point is an operand read at a point
computed from indices that are read from memory at run time (no host round trip, no device
synchronization for a traced offset such as a KV-cache position or ``x[i]``).

Semantics (the numpy impls are the oracle):

- ``dynamic_slice(x, *starts, slice_sizes)``: ``out[p] = x[s + p]`` where each start is clamped
  into ``[0, dim - size]`` so the window fits (XLA's rule, ``slicing._clamped_starts``): a
  negative start reads from 0, one past the end reads the last window; a start of any integer
  dtype (signed values sign-extended, unsigned ones zero-extended, so a huge ``uint64`` clamps to
  ``dim - size``).
- ``dynamic_update_slice(x, update, *starts)``: ``out[p] = update[p - s]`` where ``p`` lies in the
  window ``[s, s + update.shape)`` (starts clamped the same way), else ``x[p]``: a select per
  output point (both reads stay in bounds: the update is read at a clamped point). The whole
  output is written, so it costs a pass over ``x``; ``x`` is read only at the output's own
  point (the ``"own_point"`` slot), so the memory plan may write ``out`` over the buffer of a
  dead or donated ``x`` (no second copy of a KV cache).
- ``take_along_axis(x, idx, axis)``: ``out[p] = x[p with p[axis] = i]``, ``i = idx[p]``; a negative
  ``i`` counts from the end (numpy's ``take_along_axis``), then ``i`` is clamped into
  ``[0, n - 1]``: where numpy raises for an index outside ``[-n, n)``, the kernel reads the
  nearest end (as ``gather``'s ``'clip'`` mode does). An axis of size 0 has nothing to read:
  the result is zeros.

Sources: XLA's operation semantics (DynamicSlice, DynamicUpdateSlice: "start indices are
clamped"), ``jax.lax.dynamic_slice`` / ``dynamic_update_slice``, ``numpy.take_along_axis``.

Importing this module registers the ``"index"`` rules and their ``"fuses"`` predicates
(``dynamic_supported``; ``fusion.can_fuse`` asks it).
"""

from __future__ import annotations

from typing import Any

from blu.core import dtypes
from blu.core.jaxpr import Literal
from blu.lax.slicing import dynamic_slice_p, dynamic_update_slice_p
from blu.lax.sorting import take_along_axis_p
from blu.lower.mlir.emit import Builder, Idx, compute_type
from blu.lower.mlir.rules_gather import coordinate, zero
from blu.lower.slots import lowering

__all__ = ["DYNAMIC", "dynamic_supported"]

DYNAMIC = ("dynamic_slice", "dynamic_update_slice", "take_along_axis")
_KNOWN = frozenset(dtypes.SUPPORTED)  # complex too (``rules_complex.py``)


def dynamic_supported(eqn: Any) -> bool:
    """Whether a ``dynamic_slice`` / ``dynamic_update_slice`` / ``take_along_axis`` equation can
    be compiled (inside a fused kernel): every configuration of blu's primitives (any rank,
    size-0 and size-1 dims, any integer index dtype, literal or traced starts) for blu's
    dtypes (complex ones too: ``rules_complex.py``); False only for a dtype the code generator
    has no storage type for."""
    if eqn.primitive.name not in DYNAMIC:
        return False
    data = eqn.invars[:2] if eqn.primitive.name == "dynamic_update_slice" else eqn.invars[:1]
    index = eqn.invars[len(data) :]
    return all(v.aval.dtype in _KNOWN for v in data) and all(
        dtypes.is_int(v.aval.dtype) for v in index
    )


def _start(k: Any, atom: Any, hi: int) -> str:
    """A start index clamped into ``[0, hi]`` (``hi >= 0``), as an ``index`` SSA value: folded
    when the start is a literal or the window spans the axis (``hi == 0``); read from its 0-d
    buffer and clamped once, at the function's entry, when it is an input of the kernel (so the
    loops neither reload it nor fear that their stores change it: they vectorize); else
    computed inline and clamped at the point."""
    b: Builder = k.b
    if hi == 0:
        return b.index(0)
    if isinstance(atom, Literal):
        return b.index(min(max(int(atom.val), 0), hi))
    if atom not in k.layout.jaxpr.invars:
        raw = k.value(atom, Idx((), ()))
        return coordinate(b, raw, atom.aval.dtype, hi + 1, check=False)[0]
    key = ("dynamic start", atom, hi)
    hit = k.cache.get(key)
    if hit is None:
        lines, depth = b.lines, b.depth
        b.lines, b.depth = [], 2  # the entry block, after the constants (``const_lines``)
        try:
            raw = b.load(k.arg[atom], atom.aval, b.index(0))
            hit = coordinate(b, raw, atom.aval.dtype, hi + 1, check=False)[0]
            b.const_lines.extend(b.lines)
        finally:
            b.lines, b.depth = lines, depth
        k.cache[key] = hit
    return hit


def _dynamic_slice(k: Any, eqn: Any, idx: Idx) -> str:
    """``out[p] = x[clamped starts + p]``."""
    x, *starts = eqn.invars
    shape, sizes = x.aval.shape, eqn.params["slice_sizes"]
    b = k.b
    if x.aval.size == 0:  # then the output is empty too: nothing is ever read
        return zero(b, x.aval.dtype)
    p = b.multi(idx)
    coords = [b.iadd(_start(k, s, n - m), i) for s, n, m, i in zip(starts, shape, sizes, p)]
    return k.value(x, Idx(shape, coords))


def _dynamic_update_slice(k: Any, eqn: Any, idx: Idx) -> str:
    """``out[p] = update[p - s]`` inside the window at the clamped starts ``s``, else ``x[p]``."""
    x, u, *starts = eqn.invars
    shape, ushape = x.aval.shape, u.aval.shape
    b = k.b
    if u.aval.size == 0:  # an empty window: out = x
        return k.value(x, idx)
    p = b.multi(idx)
    inside, coords = None, []
    for s, n, m, i in zip(starts, shape, ushape, p):
        if m == n:  # the window spans the axis: inside, at the same coordinate
            coords.append(i)
            continue
        rel = b.op(f"arith.subi {i}, {_start(k, s, n - m)} : index", "i")
        ok = b.op(f"arith.cmpi ult, {rel}, {b.index(m)} : index")  # 0 <= rel < m
        inside = ok if inside is None else b.op(f"arith.andi {inside}, {ok} : i1")
        # where outside, any in-bounds point of the update will do (the select drops it)
        rel = b.op(f"arith.maxsi {rel}, {b.index(0)} : index", "i")
        coords.append(b.op(f"arith.minsi {rel}, {b.index(m - 1)} : index", "i"))
    new = k.value(u, Idx(ushape, coords))
    if inside is None:  # the update is the whole operand
        return new
    old = k.value(x, idx)  # at the output's own point (``"own_point"``: see below)
    ty = compute_type(x.aval.dtype)
    return b.op(f"arith.select {inside}, {new}, {old} : {ty}")


def _take_along_axis(k: Any, eqn: Any, idx: Idx) -> str:
    """``out[p] = x[p with p[axis] = wrap_and_clamp(indices[p])]``."""
    x, ind = eqn.invars
    axis, shape = eqn.params["axis"], x.aval.shape
    n = shape[axis]
    b = k.b
    if n == 0:
        return zero(b, x.aval.dtype)
    raw = k.value(ind, idx)
    dt = ind.aval.dtype
    if not dtypes.is_unsigned(dt):  # numpy's negative indices count from the end
        ty = compute_type(dt)
        neg = b.op(f"arith.cmpi slt, {raw}, {b.const(0, ty)} : {ty}")
        t = b.op(f"arith.index_cast {raw} : {ty} to index", "i")
        wrapped = b.op(f"arith.addi {t}, {b.index(n)} : index", "i")
        t = b.op(f"arith.select {neg}, {wrapped}, {t} : index", "i")
        t = b.op(f"arith.maxsi {t}, {b.index(0)} : index", "i")
        c = b.op(f"arith.minsi {t}, {b.index(n - 1)} : index", "i")
    else:
        c = coordinate(b, raw, dt, n, check=False)[0]
    coords = list(b.multi(idx))
    coords[axis] = c
    return k.value(x, Idx(shape, coords))


for _prim, _rule in (
    (dynamic_slice_p, _dynamic_slice),
    (dynamic_update_slice_p, _dynamic_update_slice),
    (take_along_axis_p, _take_along_axis),
):
    lowering("index", _prim)(_rule)
    lowering("fuses", _prim)(dynamic_supported)
# the operand of ``dynamic_update_slice`` is read only at the output's own point, so the memory
# plan may write the output over a dead or donated operand (``KernelLayout.inplace_safe``)
lowering("own_point", dynamic_update_slice_p)((0,))
