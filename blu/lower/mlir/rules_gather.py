"""The lowering rule of ``gather`` (``blu/lax/gather_scatter.py``): an ``INDEX`` rule, so a
gather fuses like any data movement: the value at an output point is the operand read at the
point the indices name (an embedding lookup ``wte[tokens]`` becomes one pass over its output,
with the index arithmetic of ``blu.numpy``'s negative-index wrap fused in front of it).

Semantics (the numpy impl ``_gather_impl`` is the oracle): for ``indices`` of shape
``batch_shape + (len(axes),)``, ``out[b..., r...] = operand[c]`` with ``c[axes[k]] =
indices[b..., k]`` and the other coordinates ``r`` in order. Each coordinate is an integer of the
indices' dtype (signed or unsigned, 8 to 64 bits), widened to ``index`` (sign- or zero-extended)
and then, by ``mode``:

- ``'clip'``: clamped into ``[0, n - 1]`` (a huge unsigned value clamps to ``n - 1``, as the
  impl's ``_coords`` does);
- ``'fill_or_drop'``: the read happens at the clamped point (always in bounds), and a row with any
  coordinate outside ``[0, n)`` reads 0 instead.

An indexed axis of size 0 has nothing to read: the gather is all zeros (in both modes).

Importing this module registers the ``"index"`` rule of ``gather``; ``fusion.can_fuse`` asks
``gather_supported`` whether an equation may join a kernel.
"""

from __future__ import annotations

from typing import Any

from blu.core import dtypes
from blu.lax.gather_scatter import gather_p
from blu.lower.mlir.emit import Builder, Idx, compute_type, is_float
from blu.lower.slots import lowering

__all__ = ["gather_supported", "coordinate"]

_KNOWN = frozenset(dtypes.SUPPORTED)  # complex too (``rules_complex.py``)


def gather_supported(eqn: Any) -> bool:
    """Whether a ``gather`` equation can be compiled (inside a fused kernel).

    Every configuration of blu's gather (any ``axes``, both modes, size-0 and size-1 dims,
    any integer index dtype) is supported for blu's dtypes; False only for a dtype the code
    generator has no storage type for.
    """
    if eqn.primitive.name != "gather":
        return False
    operand, indices = (v.aval for v in eqn.invars)
    return (
        operand.dtype in _KNOWN
        and dtypes.is_int(indices.dtype)
        and eqn.params["mode"] in ("clip", "fill_or_drop")
    )


def coordinate(
    b: Builder, raw: str, index_dtype: Any, n: int, check: bool = True
) -> tuple[str, str | None]:
    """One coordinate for an axis of size ``n >= 1``: (clamped into ``[0, n - 1]``, ``i1`` whether
    it was in bounds, or None unless ``check``), from ``raw``, an integer SSA value of
    ``index_dtype``'s compute type.

    Signed values are sign-extended, unsigned ones zero-extended, so ``ult n`` on the ``index``
    value is the bounds check for both (a negative value is a huge unsigned one).
    """
    ty = compute_type(index_dtype)
    unsigned = dtypes.is_unsigned(index_dtype)
    cast = "index_castui" if unsigned else "index_cast"
    t = b.op(f"arith.{cast} {raw} : {ty} to index", "i")
    last = b.index(n - 1)
    valid = b.op(f"arith.cmpi ult, {t}, {b.index(n)} : index") if check else None
    if unsigned:
        return b.op(f"arith.minui {t}, {last} : index", "i"), valid
    t = b.op(f"arith.maxsi {t}, {b.index(0)} : index", "i")
    return b.op(f"arith.minsi {t}, {last} : index", "i"), valid


def zero(b: Builder, dt: Any) -> str:
    """0 (or False) in ``dt``'s compute type."""
    ty = compute_type(dt)
    if ty == "i1":
        return b.const(False, ty)
    return b.const(0.0 if is_float(dt) else 0, ty)


def _gather(k: Any, eqn: Any, idx: Idx) -> str:
    """The ``"index"`` rule of ``gather``: the value at output point ``idx`` (``k`` is the
    kernel emitter: ``k.b`` its Builder, ``k.value(atom, Idx)`` an operand's value at a
    point)."""
    operand, indices = eqn.invars
    axes, mode = eqn.params["axes"], eqn.params["mode"]
    b = k.b
    oshape = operand.aval.shape
    if any(oshape[a] == 0 for a in axes):
        return zero(b, operand.aval.dtype)
    out = b.multi(idx)
    nb = indices.aval.ndim - 1
    batch, rest = tuple(out[:nb]), iter(out[nb:])
    coords: list[str | None] = [None] * len(oshape)
    ok, fill = None, mode == "fill_or_drop"
    for j, a in enumerate(axes):
        raw = k.value(indices, Idx(indices.aval.shape, batch + (b.index(j),)))
        coords[a], valid = coordinate(b, raw, indices.aval.dtype, oshape[a], fill)
        if fill:
            ok = valid if ok is None else b.op(f"arith.andi {ok}, {valid} : i1")
    for d in range(len(oshape)):
        if coords[d] is None:
            coords[d] = next(rest)
    v = k.value(operand, Idx(oshape, coords))
    if ok is None:
        return v
    ty = compute_type(operand.aval.dtype)
    return b.op(f"arith.select {ok}, {v}, {zero(b, operand.aval.dtype)} : {ty}")


lowering("index", gather_p)(_gather)
