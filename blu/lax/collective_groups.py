"""``axis_index_groups=`` of ``psum``/``pmean``/``pmax``/``pmin``/``all_gather`` (JAX's): the
collective runs within each group of device indices along the named axes (indices over their
product, first name major, as ``axis_index`` of the tuple) instead of over all of them.

It is built from the ungrouped collectives: an ``all_gather`` over the axes, then each device
picks its group's rows (a table indexed by ``axis_index``) and combines them in group order.
Values, ``grad``, ``vmap`` and ``jit`` follow from those primitives; the communication is that
of the whole axes, not of one group.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.array import Array
from blu.core.errors import BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax.collective_prims import all_gather_p, axis_index_p
from blu.lax.elementwise import add, mul
from blu.lax.shapes import concatenate, full, reshape
from blu.lax.slicing import dynamic_index_in_dim, index_in_dim


def check_groups(what: str, groups: Any, names: tuple, n: int, equal: bool = False) -> tuple:
    """``groups`` as a tuple of tuples of ints, checked to cover ``0 .. n - 1`` exactly once
    (and, with ``equal``, to be of one size).

    Raises:
        BluTypeError: not a sequence of sequences of integers.
        BluValueError: an empty group, an index repeated, missing or out of range, or (with
            ``equal``) groups of different sizes.
    """
    try:
        gs = tuple(tuple(operator.index(i) for i in g) for g in groups)
    except TypeError:
        raise BluTypeError(
            with_user_line(
                f"{what}: axis_index_groups must be a list of lists of device indices, got "
                f"{groups!r}"
            )
        ) from None
    flat = sorted(i for g in gs for i in g)
    if any(not g for g in gs) or flat != list(range(n)):
        raise BluValueError(
            with_user_line(
                f"{what}: axis_index_groups {groups!r} must cover the indices 0..{n - 1} of axes "
                f"{names} (size {n}) exactly once, with no empty group"
            )
        )
    if equal and len({len(g) for g in gs}) > 1:
        raise BluValueError(
            with_user_line(
                f"{what}: axis_index_groups {groups!r} must all be of the same size (as JAX's)"
            )
        )
    return gs


def my_index(names: tuple, sizes: tuple) -> Any:
    """This device's index over ``names`` (first name major), an int32 scalar."""
    out: Any = full((), 0, dtypes.int32)
    for name, size in zip(names, sizes):
        out = add(mul(out, full((), size, dtypes.int32)), axis_index_p.bind(axis_name=name))
    return out


def group_rows(v: Any, names: tuple, sizes: tuple, groups: tuple, pad_zero: bool) -> list:
    """The values of ``v`` on the members of this device's group, in group order: as many as
    the largest group has (a smaller group's list is padded with zeros if ``pad_zero``, else
    with its first member's value)."""
    n = math.prod(sizes)
    aval = get_aval(v)
    g = reshape(all_gather_p.bind(v, axis_name=names, axis_sizes=sizes), (n,) + aval.shape)
    k = max(len(grp) for grp in groups)
    table = np.empty((n, k), np.int32)
    for grp in groups:
        table[list(grp)] = list(grp) + [n if pad_zero else grp[0]] * (k - len(grp))
    if pad_zero and any(len(grp) < k for grp in groups):
        g = concatenate([g, full((1,) + aval.shape, 0, aval.dtype)], 0)
    rows = dynamic_index_in_dim(
        Array(table), my_index(names, sizes), 0, False, allow_negative_indices=False
    )
    return [
        dynamic_index_in_dim(
            g, index_in_dim(rows, t, 0, False), 0, False, allow_negative_indices=False
        )  # fmt: skip
        for t in range(k)
    ]


def group_size(names: tuple, sizes: tuple, groups: tuple) -> Any:
    """The size of this device's group: a Python int if every group has it, else an int32
    scalar."""
    if len({len(g) for g in groups}) == 1:
        return len(groups[0])
    table = np.empty((math.prod(sizes),), np.int32)
    for grp in groups:
        table[list(grp)] = len(grp)
    return dynamic_index_in_dim(
        Array(table), my_index(names, sizes), 0, False, allow_negative_indices=False
    )
