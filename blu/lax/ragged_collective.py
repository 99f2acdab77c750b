"""``ragged_all_to_all`` (``jax.lax``'s): an all-to-all of ragged row slices over a named axis.

No primitive of its own: it is composed of the collectives of ``blu.lax.parallel``. Every
device ``all_gather``s the operand and the senders' ``input_offsets`` / ``output_offsets``
over the axis, cuts out the slices addressed to it (``dynamic_slice`` at its own index), and
builds its result row by row: row ``r`` of the result is the row of the last received slice
that covers ``r`` (a ``gather`` from the gathered operands), or ``output[r]`` where none does
(a ``select``). So it runs wherever those collectives run (``blu.shard`` on virtual CPU
devices, one process per GPU through NCCL, ``vmap(axis_name=...)``), and ``grad``, ``vmap``
and ``jit`` follow from their rules: the derivative w.r.t. the operand is the cotangent sent
back along the same slices (an ``all_gather``'s transpose is a ``psum_scatter``), which is
JAX's transpose (a ``ragged_all_to_all`` back) where the slices do not overlap; w.r.t.
``output``, the cotangent on the rows not written.

Cost: each device receives the whole operand of every device of the axis, ``N * R`` rows
(``N`` devices, ``R = operand.shape[0]``) where XLA's ``ragged-all-to-all`` moves only the rows
sent; plus two ``(N, K)`` int32 tables, and ``O(K * M)`` index work for ``M`` output rows.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.array import Array
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax.bits import and_
from blu.lax.casts import convert_element_type
from blu.lax.collective_groups import check_groups
from blu.lax.elementwise import add, ge, le, lt, mul, select, sub
from blu.lax.elementwise import max as lax_max
from blu.lax.elementwise import min as lax_min
from blu.lax.parallel import all_gather, axis_index
from blu.lax.reductions import reduce_max
from blu.lax.select_n import broadcasted_iota
from blu.lax.shapes import broadcast_in_dim, concatenate, full, reshape
from blu.lax.slicing import dynamic_index_in_dim, dynamic_slice, gather, slice_in_dim
from blu.transforms.axes import axis_sizes, normalize_names

__all__ = ["ragged_all_to_all"]

_INDEX_ARGS = ("input_offsets", "send_sizes", "output_offsets", "recv_sizes")


def _index_arg(what: str, v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        v = np.asarray(v)
    aval = get_aval(v)
    if aval.dtype == dtypes.bool_ or not np.issubdtype(aval.dtype, np.integer):
        raise BluTypeError(
            with_user_line(f"ragged_all_to_all: {what} must be integers, got {aval.str_short()}")
        )
    if aval.ndim != 1:
        raise BluShapeError(
            with_user_line(f"ragged_all_to_all: {what} must be 1-D, got {aval.str_short()}")
        )
    return convert_element_type(v, dtypes.int32)


def _check_data(operand: Any, output: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    a, b = get_aval(operand), get_aval(output)
    if a.ndim == 0 or b.ndim == 0 or a.shape[1:] != b.shape[1:]:
        raise BluShapeError(
            with_user_line(
                f"ragged_all_to_all: operand {a.str_short()} and output {b.str_short()} must be "
                "of rank >= 1 with the same dimensions after the first"
            )
        )
    if a.dtype != b.dtype:
        raise BluTypeError(
            with_user_line(
                f"ragged_all_to_all: operand {a.str_short()} and output {b.str_short()} must "
                "have one dtype"
            )
        )
    return a.shape, b.shape


def ragged_all_to_all(
    operand: Any,
    output: Any,
    input_offsets: Any,
    send_sizes: Any,
    output_offsets: Any,
    recv_sizes: Any,
    *,
    axis_name: Any,
    axis_index_groups: Any = None,
) -> Any:
    """Send ragged row slices of ``operand`` to the devices along ``axis_name`` and write the
    slices received into a copy of ``output`` (``jax.lax.ragged_all_to_all``).

    With ``N`` devices along the axis (or in each group) and ``K = N * k`` entries in each of
    the four index arrays, slice ``i`` of this device, the rows
    ``operand[input_offsets[i] : input_offsets[i] + send_sizes[i]]``, goes to device
    ``i // k``, which writes it into its result at rows starting at ``output_offsets[i]``: the
    offsets are in the *receiver's* output, given by the sender. ``recv_sizes[i]`` is the
    number of rows this device receives from device ``i // k`` in its slice ``i % k``, and
    ``send_sizes`` must equal ``all_to_all(recv_sizes, axis_name, 0, 0, tiled=True)`` (as
    JAX's; the rows written are ``recv_sizes``'s, this is not checked). Rows of ``output`` no
    slice covers keep their values; where received slices overlap, the one of the larger index
    ``i`` in receive order (source device major) wins, as JAX's sequential description.
    Offsets and sizes are not checked against the shapes (traced values): slices that reach
    outside ``operand`` read clamped rows, rows outside ``output`` are not written.

    Example, over an axis of size 2 (JAX's)::

        device 0: operand [1, 2, 2], output [0, 0, 0, 0], input_offsets [0, 1],
                  send_sizes [1, 2], output_offsets [0, 0], recv_sizes [1, 1]
        device 1: operand [3, 4, 0], output [0, 0, 0, 0], input_offsets [0, 1],
                  send_sizes [1, 1], output_offsets [1, 2], recv_sizes [2, 1]
        result:   device 0 [1, 3, 0, 0]; device 1 [2, 2, 4, 0]

    Args:
        operand: ``(R, *rest)`` array of any dtype, the rows to send.
        output: ``(M, *rest)`` array of operand's dtype, the result's values where nothing
            is received.
        input_offsets, send_sizes, output_offsets, recv_sizes: 1-D integer arrays of one
            length ``K``, a positive multiple of ``N``.
        axis_name: a mesh axis name bound by ``blu.shard`` or ``vmap(axis_name=...)``, or a
            tuple of them (devices indexed over their product, first name major).
        axis_index_groups: optional list of equal-size lists of device indices covering each
            once (as ``all_gather``'s): the exchange is within each group, ``N`` its size,
            devices indexed by their position in the group.

    Returns:
        ``(M, *rest)`` array of output's dtype.

    Raises:
        BluValueError: an axis name unbound here, no axis name, bad ``axis_index_groups``.
        BluTypeError: index arrays not integers; operand and output of different dtypes.
        BluShapeError: index arrays not 1-D, of different lengths or not a multiple of ``N``;
            operand or output a scalar, or their dimensions after the first differ.

    Cost: the module docstring (the whole operand is gathered on every device, ``N * R`` rows).
    """
    names = normalize_names(axis_name, "ragged_all_to_all")
    if not names:
        raise BluValueError(
            with_user_line(f"ragged_all_to_all: takes an axis name, got {axis_name!r}")
        )
    sizes = axis_sizes(names, "ragged_all_to_all")
    (r_in, *rest), (m_out, *_) = _check_data(operand, output)
    given = (input_offsets, send_sizes, output_offsets, recv_sizes)
    io, ss, oo, rs = (_index_arg(w, v) for w, v in zip(_INDEX_ARGS, given))
    n_all = math.prod(sizes)
    if axis_index_groups is None:
        n, groups, me = n_all, None, axis_index(names)
    else:
        groups = check_groups("ragged_all_to_all", axis_index_groups, names, n_all, equal=True)
        n = len(groups[0])
        where = np.empty((n_all,), np.int32)  # device index -> its position in its group
        for grp in groups:
            where[list(grp)] = range(n)
        me = dynamic_index_in_dim(Array(where), axis_index(names), 0, False,
                                  allow_negative_indices=False)  # fmt: skip
    lengths = [get_aval(v).shape[0] for v in (io, ss, oo, rs)]
    big_k = lengths[0]
    if len(set(lengths)) > 1 or big_k == 0 or big_k % n:
        shown = ", ".join(f"{w} of length {m}" for w, m in zip(_INDEX_ARGS, lengths))
        raise BluShapeError(
            with_user_line(
                f"ragged_all_to_all: the index arrays must have one length, a positive multiple "
                f"of the {n} devices along {names}; got {shown}"
            )
        )
    # (send_sizes is only checked: the receiver writes recv_sizes rows; JAX's requires them equal)
    k = big_k // n

    def received(v: Any) -> Any:
        # the senders' entries for the slices addressed here, in receive order (source major)
        g = all_gather(v, names, axis_index_groups=groups)  # (n, K)
        start = mul(me, full((), k, dtypes.int32))
        return reshape(dynamic_slice(g, (0, start), (n, k)), (big_k,))

    start_in, start_out = received(io), received(oo)
    # slice j covers result rows [start_out[j], start_out[j] + rs[j]); the last one wins
    cov_shape = (big_k, m_out)
    rows = broadcasted_iota(dtypes.int32, cov_shape, 1)
    lo = broadcast_in_dim(start_out, cov_shape, (0,))
    hi = broadcast_in_dim(add(start_out, rs), cov_shape, (0,))
    covers = and_(le(lo, rows), lt(rows, hi))
    none = full(cov_shape, -1, dtypes.int32)
    win = reduce_max(select(covers, broadcasted_iota(dtypes.int32, cov_shape, 0), none), 0)
    hit = ge(win, full((m_out,), 0, dtypes.int32))
    # per slice: the first flat row of its sender's operand, and the shift to it from the result
    first = Array((np.arange(big_k, dtype=np.int32) // k) * np.int32(r_in))
    table = concatenate(
        [reshape(first, (big_k, 1)), reshape(sub(add(first, start_in), start_out), (big_k, 1))], 1
    )
    picked = gather(table, reshape(lax_max(win, full((m_out,), 0, dtypes.int32)), (m_out, 1)),
                    axes=(0,))  # fmt: skip
    base, shift = (reshape(slice_in_dim(picked, c, c + 1, axis=1), (m_out,)) for c in (0, 1))
    src = add(shift, broadcasted_iota(dtypes.int32, (m_out,), 0))
    src = lax_min(lax_max(src, base), add(base, full((m_out,), max(r_in - 1, 0), dtypes.int32)))
    flat = reshape(all_gather(operand, names, axis_index_groups=groups), (n * r_in, *rest))
    vals = gather(flat, reshape(src, (m_out, 1)), axes=(0,))
    return select(broadcast_in_dim(hit, (m_out, *rest), (0,)), vals, output)
