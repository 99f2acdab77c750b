"""Collectives over named axes: psum, pmean, pmax, pmin, all_gather, psum_scatter, ppermute,
all_to_all, axis_index, axis_size and pvary (``jax.lax``'s names; ``blu.parallel`` re-exports
them). Their primitives and rules are in ``blu.lax.collective_prims``; ``ragged_all_to_all``,
composed of these, is in ``blu.lax.ragged_collective``.

Each is a primitive with a *named* batching rule (``batch_named``): at the vmap/shard level that
binds its axis name it becomes ordinary array operations over the batch axis (``psum`` sums it,
``all_gather`` stacks it, ...); at other levels it passes through. So on virtual CPU devices,
where ``blu.shard`` is nested vmaps, collectives vanish into plain programs, and ``grad``,
``jit`` and ``vmap`` compose through the usual rules. With one process per device the ``impl``
runs instead and calls the process group's communicator (NCCL on GPUs).

Derivatives inside ``blu.shard`` follow JAX's shard_map rule (``blu.transforms.vma``): each
value varies over some mesh axes or is invariant over them; ``psum``/``pmean``/``pmax``/``pmin``
/``all_gather`` over an axis give an invariant value, ``psum_scatter``/``ppermute``/
``all_to_all``/``axis_index``/``pvary`` a varying one. ``psum`` of an invariant value is the
product by the axis size (``psum(1, 'i')`` is the size); ``psum`` of a varying one transposes to
the identity; where an invariant value meets a varying one, an implicit ``pvary`` transposes to
a ``psum`` of the cotangent. So the gradient of a ``psum``-reduced loss is the global gradient.
Under ``vmap(axis_name=...)`` (no mesh) the rule is pmap's: ``psum`` transposes to ``psum``, and
the gradient is that of the sum over the batch of the per-member outputs.

Multi-axis collectives (``psum(x, ('x', 'y'))``) index devices by the axis tuple, first name
major. The primitives gather/scatter over *stacked* leading axes (one per name), which lets each
batching level handle its own name and leave the rest to outer levels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from blu.core import dtypes, pytree
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax.casts import convert_element_type
from blu.lax.collective_groups import check_groups, group_rows, group_size
from blu.lax.collective_prims import (  # noqa: F401  (the primitives are used as parallel.*_p)
    all_gather_p,
    all_to_all_p,
    axis_index_p,
    invariant_names,
    pmax_p,
    pmin_p,
    ppermute_p,
    psum_p,
    pvary_p,
    reduce_scatter_p,
    take_blocks,
    times_size,
)
from blu.lax.elementwise import add, mul
from blu.lax.elementwise import max as lax_max
from blu.lax.elementwise import min as lax_min
from blu.lax.shapes import concatenate, full, reshape
from blu.transforms import vma
from blu.transforms.axes import axis_size, axis_sizes, normalize_names
from blu.transforms.batching import moveaxis

__all__ = [
    "psum",
    "pmean",
    "pmax",
    "pmin",
    "all_gather",
    "psum_scatter",
    "ppermute",
    "all_to_all",
    "axis_index",
    "axis_size",
    "pvary",
]


# ---- the public functions -----------------------------------------------------------------------


def _names_and_sizes(axis_name: Any, what: str) -> tuple[tuple, tuple[int, ...]]:
    names = normalize_names(axis_name, what)
    return names, axis_sizes(names, what)


def _tree(fn, x):
    return pytree.tree_map(fn, x)


def _numeric(what: str, v: Any) -> Any:
    # checked here too: under vmap/shard the rule runs before any abstract eval would
    aval = get_aval(v)
    if aval.dtype == dtypes.bool_:
        raise BluTypeError(
            with_user_line(f"{what} requires a numeric operand, got {aval.str_short()}")
        )
    return v


def psum(x: Any, axis_name: Any, *, axis_index_groups: Any = None) -> Any:
    """Sum of ``x`` over the devices along the named axis (or tuple of axes).

    Args:
        x: an array or pytree of numeric or boolean arrays (any shape).
        axis_name: a mesh axis name bound by ``blu.shard`` or ``vmap(axis_name=...)``, or a
            tuple of them.
        axis_index_groups: optional list of lists of device indices along the axes (over their
            product, first name major), covering each exactly once: the sum is within each
            group (JAX's; ``blu.lax.collective_groups`` says how it runs).

    Returns:
        the same shapes and dtypes, except that booleans are converted to int32 before the
        reduction (the count of True, as JAX's); equal on every device of the group.
    """
    names, sizes = _names_and_sizes(axis_name, "psum")
    if axis_index_groups is not None:
        groups = _groups("psum", axis_index_groups, names, sizes)
        return _tree(lambda v: _grouped_sum(v, names, sizes, groups), x)
    if not names:
        return x

    def one(v):
        if get_aval(v).dtype == dtypes.bool_:  # JAX's: counted as int32
            v = convert_element_type(v, dtypes.int32)
        inv = invariant_names(v, names)
        if inv:  # the same on every device of those axes: the sum is a product
            v = times_size(v, math.prod(axis_size(n) for n in inv))
        rest = tuple(n for n in names if n not in inv)
        return psum_p.bind(v, axis_name=rest) if rest else v

    return _tree(one, x)


def pmean(x: Any, axis_name: Any, *, axis_index_groups: Any = None) -> Any:
    """Mean of ``x`` over the devices along the named axis (or axes). Integers and booleans
    are summed (as ``psum``) and divided in floating point, as JAX's (``pmean`` of
    ``arange(4)`` over 4 devices is 1.5 on each); floats and complex keep their dtype.
    ``axis_index_groups``: as ``psum``'s (the mean within each group)."""
    names, sizes = _names_and_sizes(axis_name, "pmean")
    n = math.prod(sizes)
    if axis_index_groups is not None:
        groups = _groups("pmean", axis_index_groups, names, sizes)
        k = group_size(names, sizes, groups)

        def mean(v):
            s = _grouped_sum(v, names, sizes, groups)
            if isinstance(k, int):
                return s / k
            if not dtypes.is_inexact(get_aval(s).dtype):
                s = convert_element_type(s, dtypes.float32)
            return s / convert_element_type(k, get_aval(s).dtype)

        return _tree(mean, x)

    def one(v):
        if not dtypes.is_inexact(get_aval(v).dtype):  # true division: a float result
            return (psum(v, names) if names else v) / n
        return psum(v, names) / n if names else v

    return _tree(one, x)


def pmax(x: Any, axis_name: Any, *, axis_index_groups: Any = None) -> Any:
    """Elementwise maximum of ``x`` over the devices along the named axis (or axes);
    ``axis_index_groups``: as ``psum``'s (the maximum within each group)."""
    names, sizes = _names_and_sizes(axis_name, "pmax")
    if axis_index_groups is not None:
        groups = _groups("pmax", axis_index_groups, names, sizes)
        return _tree(lambda v: _grouped_extremum(lax_max, "pmax", v, names, sizes, groups), x)
    return _tree(lambda v: _extremum(pmax_p, "pmax", v, names), x) if names else x


def pmin(x: Any, axis_name: Any, *, axis_index_groups: Any = None) -> Any:
    """Elementwise minimum of ``x`` over the devices along the named axis (or axes);
    ``axis_index_groups``: as ``psum``'s (the minimum within each group)."""
    names, sizes = _names_and_sizes(axis_name, "pmin")
    if axis_index_groups is not None:
        groups = _groups("pmin", axis_index_groups, names, sizes)
        return _tree(lambda v: _grouped_extremum(lax_min, "pmin", v, names, sizes, groups), x)
    return _tree(lambda v: _extremum(pmin_p, "pmin", v, names), x) if names else x


def _extremum(prim: Primitive, what: str, v: Any, names: tuple) -> Any:
    inv = invariant_names(_numeric(what, v), names)  # equal on those devices: nothing to do
    rest = tuple(n for n in names if n not in inv)
    return prim.bind(v, axis_name=rest) if rest else v


def _groups(what: str, groups: Any, names: tuple, sizes: tuple, equal: bool = False) -> tuple:
    if not names:
        raise BluValueError(with_user_line(f"{what}: axis_index_groups needs an axis name"))
    return check_groups(what, groups, names, math.prod(sizes), equal)


def _grouped_sum(v: Any, names: tuple, sizes: tuple, groups: tuple) -> Any:
    if get_aval(v).dtype == dtypes.bool_:  # JAX's: counted as int32
        v = convert_element_type(v, dtypes.int32)
    rows = group_rows(v, names, sizes, groups, pad_zero=True)
    acc = rows[0]
    for r in rows[1:]:  # in group order
        acc = add(acc, r)
    return acc


def _grouped_extremum(op, what: str, v: Any, names: tuple, sizes: tuple, groups: tuple) -> Any:
    rows = group_rows(_numeric(what, v), names, sizes, groups, pad_zero=False)
    acc = rows[0]
    for r in rows[1:]:
        acc = op(acc, r)
    return acc


def _check_axis(what: str, axis: int, ndim: int, inclusive: bool) -> int:
    hi = ndim + 1 if inclusive else ndim
    if not -hi <= axis < hi:
        raise BluValueError(with_user_line(f"{what}: axis {axis} out of range for rank {ndim}"))
    return axis % hi


def all_gather(x: Any, axis_name: Any, *, axis_index_groups: Any = None, axis: int = 0,
               tiled: bool = False) -> Any:  # fmt: skip
    """Gather every device's ``x`` along the named axis (or axes; first name major).

    Args:
        x: array (or pytree) of shape ``s``.
        axis_index_groups: optional list of equal-size lists of device indices (as ``psum``'s):
            each device gathers its group's values, in group order (N is the group size).
        axis: where the gathered axis goes.
        tiled: False: a new axis of size N at ``axis`` (result rank ``len(s) + 1``);
            True: concatenate along the existing axis ``axis`` (size ``N * s[axis]``).
    """
    names, sizes = _names_and_sizes(axis_name, "all_gather")
    n = math.prod(sizes)
    groups = None
    if axis_index_groups is not None:
        groups = _groups("all_gather", axis_index_groups, names, sizes, equal=True)
        n = len(groups[0])

    def one(v):
        shape = get_aval(v).shape
        if tiled and not shape:
            raise BluShapeError(
                with_user_line("all_gather(tiled=True) needs an operand of rank >= 1")
            )
        ax = _check_axis("all_gather", axis, len(shape), inclusive=not tiled)
        if groups is not None:
            y = concatenate([r[None] for r in group_rows(v, names, sizes, groups, False)], 0)
        else:
            y = all_gather_p.bind(v, axis_name=names, axis_sizes=sizes) if names else v[None]
        y = reshape(y, (n,) + shape)
        y = moveaxis(y, 0, ax)
        if tiled:
            new = shape[:ax] + (n * shape[ax],) + shape[ax + 1 :]
            y = reshape(y, new)
        return y

    return _tree(one, x)


def psum_scatter(x: Any, axis_name: Any, *, scatter_dimension: int = 0, tiled: bool = False):
    """Sum over the named axis (or axes), each device keeping its block of the result.

    Args:
        x: array (or pytree); ``x.shape[scatter_dimension]`` must be N (the group size) when
            not tiled (that axis is removed), or a multiple of N when tiled (it shrinks N-fold).
    """
    names, sizes = _names_and_sizes(axis_name, "psum_scatter")
    n = math.prod(sizes)

    def one(v):
        shape = get_aval(v).shape
        if not shape:
            raise BluShapeError(with_user_line("psum_scatter needs an operand of rank >= 1"))
        _numeric("psum_scatter", v)
        ax = _check_axis("psum_scatter", scatter_dimension, len(shape), inclusive=False)
        m = shape[ax]
        if (not tiled and m != n) or (tiled and m % n):
            need = f"equal to {n}" if not tiled else f"a multiple of {n}"
            raise BluShapeError(
                with_user_line(
                    f"psum_scatter: dimension {ax} of {get_aval(v).str_short()} must be {need} "
                    f"(the size of {names}), got {m}"
                )
            )
        if tiled:
            v = reshape(v, shape[:ax] + (n, m // n) + shape[ax + 1 :])
        v = moveaxis(v, ax, 0)
        v = reshape(v, tuple(sizes) + get_aval(v).shape[1:])
        if not names:
            return reshape(v, get_aval(v).shape)
        inv = invariant_names(v, names)
        if inv:  # the same on every device of those axes: N times this device's block
            v = times_size(take_blocks(v, names, sizes, inv), math.prod(axis_size(n) for n in inv))
        rest = tuple((n, s) for n, s in zip(names, sizes) if n not in inv)
        if not rest:
            return v
        r_names, r_sizes = zip(*rest)
        return reduce_scatter_p.bind(v, axis_name=r_names, axis_sizes=r_sizes)

    return _tree(one, x)


def ppermute(x: Any, axis_name: Any, perm: Sequence[tuple[int, int]]) -> Any:
    """Send ``x`` from device ``src`` to device ``dst`` for each ``(src, dst)`` in ``perm``.

    Devices that receive nothing get zeros. Sources and destinations must each be distinct
    indices along ``axis_name``; for a tuple of names (as JAX's), indices over their product,
    first name major (``axis_index`` of the tuple).
    """
    names, sizes = _names_and_sizes(axis_name, "ppermute")
    if not names:
        raise BluValueError(with_user_line(f"ppermute: takes an axis name, got {axis_name!r}"))
    n = math.prod(sizes)
    perm = tuple((int(s), int(d)) for s, d in perm)
    srcs, dsts = [s for s, _ in perm], [d for _, d in perm]
    if len(set(srcs)) != len(srcs) or len(set(dsts)) != len(dsts):
        raise BluValueError(
            with_user_line(f"ppermute: perm {perm} repeats a source or destination")
        )
    if any(not 0 <= i < n for i in srcs + dsts):
        what = f"axis {names[0]!r}" if len(names) == 1 else f"axes {names}"
        raise BluValueError(
            with_user_line(f"ppermute: perm {perm} has indices outside {what} of size {n}")
        )
    name = names[0] if len(names) == 1 else names  # (one name: bound as before, a bare name)
    return _tree(lambda v: ppermute_p.bind(v, axis_name=name, perm=perm), x)


def all_to_all(x: Any, axis_name: Any, split_axis: int, concat_axis: int, *, tiled: bool = False):
    """Split ``x`` along ``split_axis`` into N chunks, send chunk j to device j, and join the
    received chunks (in device order) along ``concat_axis``.

    Not tiled: ``x.shape[split_axis]`` must be N; that axis is removed and a new axis of size N
    is inserted at ``concat_axis``. Tiled: ``x.shape[split_axis]`` must be a multiple of N; it
    shrinks N-fold and ``concat_axis`` grows N-fold. For a tuple of names (as JAX's), N is the
    size of their product and devices are indexed over it first name major; it runs as one
    all-to-all per name (chunk ``(j1, j2, ...)`` travels along each name in turn).
    """
    names, sizes = _names_and_sizes(axis_name, "all_to_all")
    if not names:
        raise BluValueError(with_user_line(f"all_to_all: takes an axis name, got {axis_name!r}"))
    n = math.prod(sizes)
    shown = repr(names[0]) if len(names) == 1 else str(names)

    def one(v):
        shape = get_aval(v).shape
        s = _check_axis("all_to_all", split_axis, len(shape), inclusive=False)
        c = _check_axis("all_to_all", concat_axis, len(shape), inclusive=False)
        m = shape[s]
        if (not tiled and m != n) or (tiled and m % n):
            need = f"equal to {n}" if not tiled else f"a multiple of {n}"
            raise BluShapeError(
                with_user_line(
                    f"all_to_all: split axis {s} of {get_aval(v).str_short()} must be {need} "
                    f"(the size of {shown}), got {m}"
                )
            )
        if tiled:
            v = reshape(v, shape[:s] + (n, m // n) + shape[s + 1 :])
        y = moveaxis(v, s, 0)
        if len(names) == 1:
            y = all_to_all_p.bind(y, axis_name=names[0], axis_size=n)
        else:  # chunk axes (j1, j2, ...); each all-to-all turns its axis into the source's index
            rest = get_aval(y).shape[1:]
            y = reshape(y, tuple(sizes) + rest)
            for i, (name, size) in enumerate(zip(names, sizes)):
                y = moveaxis(all_to_all_p.bind(moveaxis(y, i, 0), axis_name=name,
                                               axis_size=size), 0, i)  # fmt: skip
            y = reshape(y, (n,) + rest)
        if not tiled:
            return moveaxis(y, 0, c)
        rest = get_aval(y).shape[1:]  # x's shape with the split axis m // n
        y = moveaxis(y, 0, c)
        return reshape(y, rest[:c] + (n * rest[c],) + rest[c + 1 :])

    return _tree(one, x)


def pvary(x: Any, axis_name: Any) -> Any:
    """``x`` marked as varying over the named mesh axes (``jax.lax.pvary``): the identity on
    values, whose transpose is ``psum``. Inside ``blu.shard`` the gradient w.r.t. ``pvary(p)``
    of a replicated ``p`` is this device's own gradient, not the sum over the devices (e.g. to
    reduce-scatter it yourself, ZeRO); ``blu.shard`` inserts it implicitly where an invariant
    value meets a varying one.

    Args:
        x: an array or pytree of arrays.
        axis_name: a mesh axis name or a tuple of them.
    """
    names, _ = _names_and_sizes(axis_name, "pvary")

    def one(v):
        got = vma.vma_of(v)
        rest = names if got is None else tuple(n for n in names if n not in got)
        return pvary_p.bind(v, axis_name=rest) if rest else v

    return _tree(one, x) if names else x


def axis_index(axis_name: Any) -> Any:
    """This device's index along the named axis (an int32 scalar); for a tuple of names, the
    index over their product, first name major."""
    names, sizes = _names_and_sizes(axis_name, "axis_index")
    out: Any = full((), 0, dtypes.int32)
    for name, size in zip(names, sizes):
        out = add(mul(out, full((), size, dtypes.int32)), axis_index_p.bind(axis_name=name))
    return out
