"""Grouped (ragged) matrix products: ``ragged_dot`` and ``ragged_dot_general`` (``jax.lax``'s).

No primitive of their own: like JAX's reference implementation (``_ragged_dot_general_impl`` in
``jax/_src/lax/lax.py``) the ragged dimension of an operand is made dense with a leading group
axis, each group keeping its own rows and zeros elsewhere (``select`` on a mask built from the
``cumsum`` of ``group_sizes``), and one ``dot_general`` contracts that group axis with the rhs's
group dimension (mode 1) or keeps it as a batch dimension (mode 2). The result traces, jits,
vmaps and differentiates as those operations do (no derivative for ``group_sizes``).

Cost: the dense operand holds ``g`` copies of the ragged one, so ``ragged_dot`` of ``lhs[m, k]``
and ``rhs[g, k, n]`` does one product of ``[m, g * k]`` by ``[g * k, n]``: ``O(m * k * n * g)``
multiply-adds and ``O(g * m * k)`` memory, ``g`` times a dense ``dot`` (a grouped kernel would
skip the zero blocks).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax.bits import and_
from blu.lax.cumulative import cumsum
from blu.lax.dot import dot_general
from blu.lax.elementwise import convert_element_type, le, lt, select, sub
from blu.lax.select_n import broadcasted_iota
from blu.lax.shapes import broadcast_in_dim, full, transpose

__all__ = ["ragged_dot", "ragged_dot_general", "RaggedDotDimensionNumbers"]


@dataclasses.dataclass(frozen=True)
class RaggedDotDimensionNumbers:
    """The dimensions of a ``ragged_dot_general`` (``jax.lax.RaggedDotDimensionNumbers``).

    Attributes:
        dot_dimension_numbers: ``((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))``
            as for ``dot_general``.
        lhs_ragged_dimensions: one lhs dimension, split into ``g`` consecutive groups.
        rhs_group_dimensions: the rhs dimension of size ``g`` indexing the groups (exactly one
            when the ragged dimension is non-contracting, none otherwise).
    """

    dot_dimension_numbers: tuple[
        tuple[tuple[int, ...], tuple[int, ...]], tuple[tuple[int, ...], tuple[int, ...]]
    ]
    lhs_ragged_dimensions: tuple[int, ...]
    rhs_group_dimensions: tuple[int, ...]

    def __init__(
        self, dot_dimension_numbers: Any, lhs_ragged_dimensions: Any, rhs_group_dimensions: Any
    ) -> None:
        try:
            (lc, rc), (lb, rb) = dot_dimension_numbers
            dn = tuple(tuple(tuple(int(a) for a in t) for t in p) for p in ((lc, rc), (lb, rb)))
        except (TypeError, ValueError) as e:
            raise BluValueError(
                with_user_line(
                    "RaggedDotDimensionNumbers: dot_dimension_numbers must be "
                    "((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch)), got "
                    f"{dot_dimension_numbers!r}"
                )
            ) from e
        object.__setattr__(self, "dot_dimension_numbers", dn)
        object.__setattr__(
            self, "lhs_ragged_dimensions", tuple(int(a) for a in lhs_ragged_dimensions)
        )
        object.__setattr__(
            self, "rhs_group_dimensions", tuple(int(a) for a in rhs_group_dimensions)
        )


_BASIC = RaggedDotDimensionNumbers((((1,), (1,)), ((), ())), (0,), (0,))


def _group_mask(group_sizes: Any, size: int) -> Any:
    """``mask[..., i, r]``: row ``r`` of a dimension of ``size`` is in group ``i``, the groups
    being consecutive runs of ``group_sizes[..., i]`` rows from row 0 (rows past their sum are in
    none). Shape ``group_sizes.shape + (size,)``, bool."""
    gs = convert_element_type(group_sizes, np.int64)
    shape = get_aval(gs).shape + (size,)
    nd = len(shape)
    ends = cumsum(gs, axis=nd - 2)
    starts = sub(ends, gs)
    rows = broadcasted_iota(np.int64, shape, nd - 1)
    keep = tuple(range(nd - 1))
    return and_(
        le(broadcast_in_dim(starts, shape, keep), rows),
        lt(rows, broadcast_in_dim(ends, shape, keep)),
    )


def _expand(x: Any, ragged: int, group_sizes: Any, prefix: Sequence[int]) -> Any:
    """``x`` with a leading group axis: ``out[i, ...]`` is ``x`` on the rows of dimension
    ``ragged`` in group ``i``, zero elsewhere. ``group_sizes`` has shape ``[g]`` or
    ``[x.shape[p] for p in prefix] + [g]``."""
    xa = get_aval(x)
    gs_nd = get_aval(group_sizes).ndim
    g = get_aval(group_sizes).shape[-1]
    mask = _group_mask(group_sizes, xa.shape[ragged])  # [prefix..., g, ragged]
    prefix = tuple(prefix) if gs_nd > 1 else ()
    p = len(prefix)
    mask = transpose(mask, (p,) + tuple(range(p)) + (p + 1,))  # [g, prefix..., ragged]
    target = (0,) + tuple(d + 1 for d in prefix) + (ragged + 1,)
    order = sorted(range(len(target)), key=lambda i: target[i])
    mask = transpose(mask, order)
    shape = (g,) + xa.shape
    mask = broadcast_in_dim(mask, shape, tuple(sorted(target)))
    dense = broadcast_in_dim(x, shape, tuple(range(1, len(shape))))
    return select(mask, dense, full(shape, 0, xa.dtype))


def _fail(msg: str, lhs: Any, rhs: Any, gs: Any, cls: type = BluShapeError) -> Exception:
    return cls(
        with_user_line(
            f"ragged_dot_general: {msg} (lhs {lhs.str_short()}, rhs {rhs.str_short()}, "
            f"group_sizes {gs.str_short()})"
        )
    )


def ragged_dot_general(
    lhs: Any,
    rhs: Any,
    group_sizes: Any,
    ragged_dot_dimension_numbers: RaggedDotDimensionNumbers,
    precision: Any = None,
    preferred_element_type: Any = None,
    group_offset: Any = None,
) -> Any:
    """A ``dot_general`` whose lhs has one dimension split into groups (``jax.lax``'s).

    With ``b`` the batch, ``k`` the contracting, ``m``/``n`` the free dimensions and ``g`` groups
    of consecutive rows (``group_sizes[..., i]`` rows each, from row 0), the three modes are as
    JAX's:

    1. ragged non-contracting lhs dimension ``m``, ``[b, m, k] x [g, b, k, n] -> [b, m, n]``:
       rows of group ``i`` use the rhs's group ``i``; rows past ``sum(group_sizes)`` are zero.
    2. ragged contracting dimension ``k``, ``[b, m, k] x [b, k, n] -> [g, b, m, n]``: output
       ``i`` contracts the rows of ``k`` in group ``i`` only.
    3. ragged batch dimension: the ``dot_general`` (``group_sizes`` unused, as JAX's).

    Computed with ``select`` and one ``dot_general`` (see the module's docstring): about ``g``
    times the work of the dense product; differentiable in ``lhs`` and ``rhs``.

    Args:
        lhs, rhs: arrays of one dtype.
        group_sizes: integer array ``[g]``, or the lhs sizes of the batch dimensions and of the
            free (mode 1) or contracting (mode 2) dimensions before the ragged one, then ``g``.
        ragged_dot_dimension_numbers: a ``RaggedDotDimensionNumbers``.
        precision, preferred_element_type: as ``dot_general``'s.
        group_offset: must be None (JAX's implementation does not support it either).

    Returns:
        The ``dot_general`` of ``lhs`` and ``rhs`` (with a leading ``g`` axis in mode 2).

    Raises:
        BluShapeError: dimensions out of range or of mismatched sizes, a ``group_sizes`` or rhs
            group dimension of the wrong shape.
        BluTypeError: ``group_sizes`` not integer, ``lhs`` and ``rhs`` of different dtypes.
        BluValueError: a ``group_offset``, or not a ``RaggedDotDimensionNumbers``.
    """
    if group_offset is not None:
        raise BluValueError(
            with_user_line(
                "ragged_dot_general: group_offset is not supported (JAX's ragged_dot raises "
                "NotImplementedError too); slice group_sizes and rhs instead"
            )
        )
    dn = ragged_dot_dimension_numbers
    if not isinstance(dn, RaggedDotDimensionNumbers):
        raise BluValueError(
            with_user_line(
                "ragged_dot_general: ragged_dot_dimension_numbers must be a "
                f"RaggedDotDimensionNumbers, got {dn!r}"
            )
        )
    la, ra, ga = get_aval(lhs), get_aval(rhs), get_aval(group_sizes)
    if not dtypes.is_int(ga.dtype):
        raise _fail("group_sizes must be an integer array", la, ra, ga, BluTypeError)
    if la.dtype != ra.dtype:
        raise _fail("lhs and rhs must have one dtype", la, ra, ga, BluTypeError)
    (lc, rc), (lb, rb) = dn.dot_dimension_numbers
    for name, axes, nd in (("lhs", lc + lb, la.ndim), ("rhs", rc + rb, ra.ndim)):
        if any(not 0 <= a < nd for a in axes) or len(set(axes)) != len(axes):
            raise _fail(
                f"{name} contracting/batch dimensions {axes} are not distinct axes in range",
                la,
                ra,
                ga,
            )
    if len(dn.lhs_ragged_dimensions) != 1 or not 0 <= dn.lhs_ragged_dimensions[0] < la.ndim:
        raise _fail(
            f"lhs_ragged_dimensions {dn.lhs_ragged_dimensions} must be one lhs dimension",
            la,
            ra,
            ga,
        )
    (r,) = dn.lhs_ragged_dimensions
    if ga.ndim == 0:
        raise _fail("group_sizes must have rank >= 1", la, ra, ga)
    g = ga.shape[-1]
    free = [d for d in range(la.ndim) if d not in lc and d not in lb]
    if r in lb:
        mode, prefix = 3, list(lb[: lb.index(r)])
    elif r in lc:
        mode, prefix = 2, list(lb) + list(lc[: lc.index(r)])
    else:
        mode, prefix = 1, list(lb) + free[: free.index(r)]
    if ga.ndim > 1 and ga.shape != tuple(la.shape[d] for d in prefix) + (g,):
        want = tuple(la.shape[d] for d in prefix) + (g,)
        raise _fail(f"group_sizes must have shape (g,) or {want}", la, ra, ga)
    groups = dn.rhs_group_dimensions
    if mode == 1:
        if len(groups) != 1 or not 0 <= groups[0] < ra.ndim or groups[0] in rc + rb:
            raise _fail(
                f"rhs_group_dimensions {groups} must be one rhs dimension, not "
                "contracting or batch, for a free ragged dimension",
                la,
                ra,
                ga,
            )
        if ra.shape[groups[0]] != g:
            raise _fail(
                f"the rhs group dimension has size {ra.shape[groups[0]]}, group_sizes {g}",
                la,
                ra,
                ga,
            )
    elif groups:
        raise _fail(
            f"rhs_group_dimensions {groups} must be empty when the ragged dimension "
            "is contracting or batch",
            la,
            ra,
            ga,
        )

    def inc(axes: Sequence[int]) -> tuple[int, ...]:
        return tuple(a + 1 for a in axes)

    kw = dict(precision=precision, preferred_element_type=preferred_element_type)
    if mode == 3:
        return dot_general(lhs, rhs, dn.dot_dimension_numbers, **kw)
    dense_lhs = _expand(lhs, r, group_sizes, prefix)
    if mode == 1:
        contract = (inc(lc) + (0,), tuple(rc) + (groups[0],))
        return dot_general(dense_lhs, rhs, (contract, (inc(lb), tuple(rb))), **kw)
    rr = rc[lc.index(r)]
    r_prefix = list(rb) + list(rc[: rc.index(rr)])
    dense_rhs = _expand(rhs, rr, group_sizes, r_prefix)
    batch = ((0,) + inc(lb), (0,) + inc(rb))
    return dot_general(dense_lhs, dense_rhs, ((inc(lc), inc(rc)), batch), **kw)


def ragged_dot(
    lhs: Any,
    rhs: Any,
    group_sizes: Any,
    precision: Any = None,
    preferred_element_type: Any = None,
    group_offset: Any = None,
) -> Any:
    """Grouped matrix product (``jax.lax.ragged_dot``): row ``r`` of ``lhs`` times ``rhs[i]``
    for the group ``i`` holding it.

    The groups are consecutive runs of rows from row 0, ``group_sizes[i]`` rows in group ``i``
    (a group may be empty); rows past ``sum(group_sizes)`` give zeros. Computed as one
    ``dot_general`` of the lhs masked per group (``O(m * k * n * g)``, ``g`` times a dense
    ``dot``); differentiable in ``lhs`` and ``rhs``; jit and vmap as its operations do.

    Args:
        lhs: ``[m, k]`` array.
        rhs: ``[g, k, n]`` array of ``lhs``'s dtype.
        group_sizes: ``[g]`` integer array.
        precision, preferred_element_type: as ``dot_general``'s.
        group_offset: must be None (JAX's implementation does not support it either).

    Returns:
        ``[m, n]`` array (``preferred_element_type`` or the operands' dtype).

    Raises:
        BluShapeError: ranks other than 2, 3, 1, or sizes of ``k`` or ``g`` that differ.
        BluTypeError: ``group_sizes`` not integer, ``lhs`` and ``rhs`` of different dtypes.
        BluValueError: a ``group_offset``.
    """
    la, ra, ga = get_aval(lhs), get_aval(rhs), get_aval(group_sizes)
    if la.ndim != 2 or ra.ndim != 3 or ga.ndim != 1:
        raise BluShapeError(
            with_user_line(
                f"ragged_dot: expected lhs [m, k], rhs [g, k, n] and group_sizes [g], got lhs "
                f"{la.str_short()}, rhs {ra.str_short()}, group_sizes {ga.str_short()}"
            )
        )
    if la.shape[1] != ra.shape[1] or ra.shape[0] != ga.shape[0]:
        raise BluShapeError(
            with_user_line(
                f"ragged_dot: lhs [m, k] {la.str_short()}, rhs [g, k, n] {ra.str_short()} and "
                f"group_sizes [g] {ga.str_short()} disagree on k or g"
            )
        )
    return ragged_dot_general(
        lhs, rhs, group_sizes, _BASIC, precision, preferred_element_type, group_offset
    )
