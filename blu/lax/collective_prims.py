"""The collective primitives behind ``blu.lax.parallel``: abstract evaluation, impls (the
process group's communicator), named batching rules (array operations over a ``blu.shard`` /
``vmap(axis_name=...)`` level), transposes, and their varying-manual-axes rules
(``blu.transforms.vma``). ``blu.lax.parallel`` holds the public functions and the semantics.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.array import Array
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax.casts import convert_element_type
from blu.lax.elementwise import add, div, eq, mul
from blu.lax.reductions import reduce_max, reduce_min, reduce_sum
from blu.lax.shapes import concatenate, full, iota
from blu.lax.slicing import dynamic_index_in_dim, index_in_dim
from blu.transforms import vma
from blu.transforms.ad_util import Zero, deflinear, instantiate, nondifferentiable
from blu.transforms.axes import axis_size, process_env_for
from blu.transforms.batching import bdim_to_front, moveaxis


def _collective(name: str) -> Primitive:
    p = Primitive(name)
    p.collective = True  # type: ignore[attr-defined]  # control flow asks: needs axis names?
    return p


psum_p = _collective("psum")
pmax_p = _collective("pmax")
pmin_p = _collective("pmin")
all_gather_p = _collective("all_gather")  # (x) -> stacked (*sizes, *x.shape)
reduce_scatter_p = _collective("reduce_scatter")  # stacked (*sizes, *s) -> summed block s
ppermute_p = _collective("ppermute")
all_to_all_p = _collective("all_to_all")  # (N, ...) chunks -> (N, ...) received chunks
axis_index_p = _collective("axis_index")
pvary_p = _collective("pvary")  # identity; marks a value as varying over the axes


def _rest(names: tuple, name: Any) -> tuple:
    return tuple(n for n in names if n != name)


def _check_size(prim: str, name: Any, want: int, got: int) -> None:
    if want != got:
        raise BluValueError(
            f"{prim}: axis {name!r} had size {want} when traced but is bound with size {got} "
            "(a jitted function traced under another mesh?)"
        )


def _comm(names: tuple, what: str):
    return process_env_for(names, what).comm_for(names)


# ---- psum, pmax, pmin ---------------------------------------------------------------------------


def _reduce_abstract_eval(prim: str):
    def rule(x, *, axis_name):
        if x.dtype == dtypes.bool_:
            raise BluTypeError(
                with_user_line(f"{prim} requires a numeric operand, got {x.str_short()}")
            )
        return ShapedArray(x.shape, x.dtype, x.weak_type)

    return rule


for _p, _op in ((psum_p, "sum"), (pmax_p, "max"), (pmin_p, "min")):
    _p.def_abstract_eval(_reduce_abstract_eval(_p.name))

    def _impl(x, *, axis_name, _op=_op, _name=_p.name):
        return _comm(axis_name, _name).all_reduce(np.asarray(x), _op)

    _p.def_impl(_impl)


def _psum_transpose(ct, x, *, axis_name):
    if isinstance(ct, Zero):
        return [Zero(x.aval)]
    manual = vma.manual_axes()
    if all(n in manual for n in axis_name):
        # shard_map's rule: psum is bound only over axes its operand varies over (``psum``
        # scales an invariant one), so its invariant cotangent goes to each device unchanged
        return [ct]
    return [psum_p.bind(ct, axis_name=axis_name)]  # pmap's rule (vmap with an axis_name)


deflinear(psum_p, _psum_transpose)


def _reduction_batch(prim: Primitive, reduce_fn, unbatched_fn):
    def rule(size, name, args, dims, *, axis_name):
        (x,), (d,) = args, dims
        if name not in axis_name:
            return prim.bind(x, axis_name=axis_name), d
        y = unbatched_fn(x, size) if d is None else reduce_fn(x, (d,))
        rest = _rest(axis_name, name)
        return (prim.bind(y, axis_name=rest) if rest else y), None

    prim.def_batch_named(rule)


def times_size(x, n):
    aval = get_aval(x)
    return mul(x, full(aval.shape, n, aval.dtype))


vma.register_psum(lambda ct, names: psum_p.bind(ct, axis_name=names))


def _minus_axes(vmas, *, axis_name, **_):
    return frozenset().union(*vmas) - set(axis_name)


def _plus_axes(vmas, *, axis_name, **_):
    names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    return frozenset().union(*vmas) | set(names)


for _p in (psum_p, pmax_p, pmin_p, all_gather_p):
    vma.rules[_p] = _minus_axes
for _p in (reduce_scatter_p, ppermute_p, all_to_all_p, axis_index_p):
    vma.rules[_p] = _plus_axes


def invariant_names(v: Any, names: tuple) -> set:
    """The manual axes among ``names`` that ``v`` is known to be invariant over."""
    got = vma.vma_of(v)
    if got is None:
        return set()
    manual = vma.manual_axes()
    return {n for n in names if n in manual and n not in got}


def take_blocks(x, names: tuple, sizes: tuple, keep: set):
    """From ``x`` of shape ``(*sizes, *block)`` (one leading axis per name), index this device's
    entry along the names in ``keep``; the other leading axes stay."""
    for i in reversed(range(len(names))):
        if names[i] in keep:
            x = dynamic_index_in_dim(
                x, axis_index_p.bind(axis_name=names[i]), i, False, allow_negative_indices=False
            )
    return x


_reduction_batch(psum_p, reduce_sum, times_size)
_reduction_batch(pmax_p, reduce_max, lambda x, n: x)
_reduction_batch(pmin_p, reduce_min, lambda x, n: x)


def _extremum_jvp(prim: Primitive):
    # as reduce_max: the tangent of the winners, averaged over ties
    def jvp(primals, tangents, *, axis_name):
        (x,), (t,) = primals, tangents
        m = prim.bind(x, axis_name=axis_name)
        if isinstance(t, Zero):
            return m, Zero(get_aval(m).strip_weak_type())
        dt = get_aval(x).dtype
        hit = convert_element_type(eq(x, m), dt)
        num = psum_p.bind(mul(instantiate(t), hit), axis_name=axis_name)
        den = psum_p.bind(hit, axis_name=axis_name)
        return m, div(num, den)

    prim.def_jvp(jvp)


_extremum_jvp(pmax_p)
_extremum_jvp(pmin_p)


# ---- all_gather and reduce_scatter (stacked forms) ----------------------------------------------


@all_gather_p.def_abstract_eval
def _all_gather_abstract_eval(x, *, axis_name, axis_sizes):
    return ShapedArray(tuple(axis_sizes) + x.shape, x.dtype, x.weak_type)


@all_gather_p.def_impl
def _all_gather_impl(x, *, axis_name, axis_sizes):
    out = _comm(axis_name, "all_gather").all_gather(np.asarray(x))
    return out.reshape(tuple(axis_sizes) + np.shape(x))


@reduce_scatter_p.def_abstract_eval
def _reduce_scatter_abstract_eval(x, *, axis_name, axis_sizes):
    k = len(axis_sizes)
    if x.shape[:k] != tuple(axis_sizes) or x.dtype == dtypes.bool_:
        raise BluShapeError(
            with_user_line(
                f"psum_scatter: operand {x.str_short()} must be numeric with leading axes "
                f"{tuple(axis_sizes)} (the sizes of {axis_name})"
            )
        )
    return ShapedArray(x.shape[k:], x.dtype, x.weak_type)


@reduce_scatter_p.def_impl
def _reduce_scatter_impl(x, *, axis_name, axis_sizes):
    n = math.prod(axis_sizes)
    k = len(axis_sizes)
    x = np.asarray(x)
    return _comm(axis_name, "psum_scatter").reduce_scatter(x.reshape((n,) + x.shape[k:]))


def _all_gather_transpose(ct, x, *, axis_name, axis_sizes):
    if isinstance(ct, Zero):
        return [Zero(x.aval)]
    # an invariant cotangent (shard_map): each device takes its own block; a varying one is
    # summed over the devices (psum_scatter)
    inv = invariant_names(ct, axis_name)
    ct = take_blocks(ct, axis_name, axis_sizes, inv)
    rest = tuple((n, s) for n, s in zip(axis_name, axis_sizes) if n not in inv)
    if not rest:
        return [ct]
    names, sizes = zip(*rest)
    return [reduce_scatter_p.bind(ct, axis_name=names, axis_sizes=sizes)]


deflinear(all_gather_p, _all_gather_transpose)
deflinear(
    reduce_scatter_p,
    lambda ct, x, **p: [Zero(x.aval) if isinstance(ct, Zero) else all_gather_p.bind(ct, **p)],
)


@all_gather_p.def_batch_named
def _all_gather_batch(size, name, args, dims, *, axis_name, axis_sizes):
    (x,), (d,) = args, dims
    k = len(axis_name)
    if name not in axis_name:
        out = all_gather_p.bind(x, axis_name=axis_name, axis_sizes=axis_sizes)
        return out, (None if d is None else d + k)
    i = axis_name.index(name)
    _check_size("all_gather", name, axis_sizes[i], size)
    x = bdim_to_front(x, d, size)  # (size, *block): the gather over this axis
    rest = _rest(axis_name, name)
    if rest:
        sizes = axis_sizes[:i] + axis_sizes[i + 1 :]
        x = all_gather_p.bind(x, axis_name=rest, axis_sizes=sizes)  # (*rest, size, *block)
    return moveaxis(x, k - 1, i), None


@reduce_scatter_p.def_batch_named
def _reduce_scatter_batch(size, name, args, dims, *, axis_name, axis_sizes):
    (x,), (d,) = args, dims
    k = len(axis_name)
    if name not in axis_name:
        if d is None:
            return reduce_scatter_p.bind(x, axis_name=axis_name, axis_sizes=axis_sizes), None
        x = moveaxis(x, d, k)  # the batch axis belongs to the block, after the stacked axes
        return reduce_scatter_p.bind(x, axis_name=axis_name, axis_sizes=axis_sizes), 0
    i = axis_name.index(name)
    _check_size("psum_scatter", name, axis_sizes[i], size)
    z = times_size(x, size) if d is None else reduce_sum(x, (d,))
    z = moveaxis(z, i, k - 1)
    rest = _rest(axis_name, name)
    if rest:
        sizes = axis_sizes[:i] + axis_sizes[i + 1 :]
        z = reduce_scatter_p.bind(z, axis_name=rest, axis_sizes=sizes)  # (size, *block)
    return z, 0  # device j of this axis keeps row j


# ---- ppermute -----------------------------------------------------------------------------------


@ppermute_p.def_abstract_eval
def _ppermute_abstract_eval(x, *, axis_name, perm):
    return ShapedArray(x.shape, x.dtype, x.weak_type)


def _names(axis_name: Any) -> tuple:
    return tuple(axis_name) if isinstance(axis_name, tuple) else (axis_name,)


@ppermute_p.def_impl
def _ppermute_impl(x, *, axis_name, perm):
    # (a tuple of names: the group over their product, first name major, as ``comm_for``'s)
    return _comm(_names(axis_name), "ppermute").permute(np.asarray(x), perm)


def _ppermute_transpose(ct, x, *, axis_name, perm):
    if isinstance(ct, Zero):
        return [Zero(x.aval)]
    inverse = tuple((dst, src) for src, dst in perm)
    return [ppermute_p.bind(ct, axis_name=axis_name, perm=inverse)]


deflinear(ppermute_p, _ppermute_transpose)


@ppermute_p.def_batch_named
def _ppermute_batch(size, name, args, dims, *, axis_name, perm):
    (x,), (d,) = args, dims
    names = _names(axis_name)
    if name not in names:
        return ppermute_p.bind(x, axis_name=axis_name, perm=perm), d
    x = bdim_to_front(x, d, size)
    aval = get_aval(x)
    zero = full((1,) + aval.shape[1:], 0, aval.dtype)
    if len(names) == 1:
        src_of = {dst: src for src, dst in perm}
        parts = [index_in_dim(x, src_of[j], 0) if j in src_of else zero for j in range(size)]
        return concatenate(parts, 0), 0
    return _ppermute_batch_one_of(x, size, names, names.index(name), perm, zero[0]), 0


def _ppermute_batch_one_of(x, size, names, i, perm, zero):
    """A ppermute over several names at the level of ``names[i]`` (``x``: this axis in front):
    destination row j at a device of the other names gets, from the row s that sends to it,
    a ppermute over the other names of the pairs between row s and row j; the rows that send
    are picked per device (an index over the other names)."""
    rest = names[:i] + names[i + 1 :]
    r_sizes = tuple(axis_size(n, "ppermute") for n in rest)  # (bound outside this level)
    sizes = r_sizes[:i] + (size,) + r_sizes[i:]

    def split(k):  # flat index over names -> (index along names[i], flat index over rest)
        c = list(np.unravel_index(k, sizes))
        own = c.pop(i)
        return int(own), int(np.ravel_multi_index(c, r_sizes)) if c else 0

    pairs: dict = {}  # (row s, row j) -> pairs over rest
    for src, dst in perm:
        (s, rs), (j, rd) = split(src), split(dst)
        pairs.setdefault((s, j), []).append((rs, rd))
    me = None
    rows = []
    for j in range(size):
        got, pick = [zero], np.zeros(math.prod(r_sizes), np.int32)  # (row 0: nothing received)
        for s in range(size):
            p = pairs.get((s, j))
            if p:
                r_perm = tuple(p)
                r_name = rest if len(rest) > 1 else rest[0]
                got.append(ppermute_p.bind(index_in_dim(x, s, 0, False), axis_name=r_name,
                                           perm=r_perm))  # fmt: skip
                for _, rd in r_perm:
                    pick[rd] = len(got) - 1
        if len(got) == 1:
            rows.append(zero[None])
            continue
        if me is None:
            me = _flat_index(rest, r_sizes)
        k = dynamic_index_in_dim(_constant(pick), me, 0, False, allow_negative_indices=False)
        stacked = concatenate([g[None] for g in got], 0)
        rows.append(dynamic_index_in_dim(stacked, k, 0, True, allow_negative_indices=False))
    return concatenate(rows, 0)


def _flat_index(names: tuple, sizes: tuple):
    out = full((), 0, dtypes.int32)
    for n, s in zip(names, sizes):
        out = add(mul(out, full((), s, dtypes.int32)), axis_index_p.bind(axis_name=n))
    return out


def _constant(a: np.ndarray):
    return Array(a)


# ---- all_to_all ---------------------------------------------------------------------------------


@all_to_all_p.def_abstract_eval
def _all_to_all_abstract_eval(x, *, axis_name, axis_size):
    if x.ndim == 0 or x.shape[0] != axis_size:
        raise BluShapeError(
            with_user_line(
                f"all_to_all: operand {x.str_short()} must have a leading axis of size "
                f"{axis_size} (the size of {axis_name!r})"
            )
        )
    return ShapedArray(x.shape, x.dtype, x.weak_type)


@all_to_all_p.def_impl
def _all_to_all_impl(x, *, axis_name, axis_size):
    return _comm((axis_name,), "all_to_all").all_to_all(np.asarray(x))


deflinear(
    all_to_all_p,
    lambda ct, x, **p: [Zero(x.aval) if isinstance(ct, Zero) else all_to_all_p.bind(ct, **p)],
)


@all_to_all_p.def_batch_named
def _all_to_all_batch(size, name, args, dims, *, axis_name, axis_size):
    (x,), (d,) = args, dims
    if name != axis_name:
        if d is None:
            return all_to_all_p.bind(x, axis_name=axis_name, axis_size=axis_size), None
        x = moveaxis(x, d, 1)  # keep the chunk axis in front
        return all_to_all_p.bind(x, axis_name=axis_name, axis_size=axis_size), 1
    _check_size("all_to_all", name, axis_size, size)
    x = bdim_to_front(x, d, size)  # [device, chunk, ...]
    return moveaxis(x, 1, 0), 0  # device j receives chunk j of every device


# ---- axis_index ---------------------------------------------------------------------------------


@axis_index_p.def_abstract_eval
def _axis_index_abstract_eval(*, axis_name):
    return ShapedArray((), dtypes.int32)


@axis_index_p.def_impl
def _axis_index_impl(*, axis_name):
    return np.asarray(process_env_for((axis_name,), "axis_index").coords[axis_name], np.int32)


nondifferentiable(axis_index_p)


@axis_index_p.def_batch_named
def _axis_index_batch(size, name, args, dims, *, axis_name):
    if name != axis_name:
        return axis_index_p.bind(axis_name=axis_name), None
    return iota(dtypes.int32, size), 0


# ---- pvary --------------------------------------------------------------------------------------


@pvary_p.def_abstract_eval
def _pvary_abstract_eval(x, *, axis_name):
    return ShapedArray(x.shape, x.dtype, x.weak_type)


pvary_p.def_impl(lambda x, *, axis_name: np.asarray(x))
vma.rules[pvary_p] = _plus_axes
# the transpose of "the same value on every device" is the sum of the devices' cotangents
deflinear(
    pvary_p,
    lambda ct, x, *, axis_name: [
        Zero(x.aval) if isinstance(ct, Zero) else psum_p.bind(ct, axis_name=axis_name)
    ],
)


@pvary_p.def_batch_named
def _pvary_batch(size, name, args, dims, *, axis_name):
    (x,), (d,) = args, dims
    if name not in axis_name:
        return pvary_p.bind(x, axis_name=axis_name), d
    rest = _rest(axis_name, name)
    x = pvary_p.bind(x, axis_name=rest) if rest else x
    return (x, d) if d is not None else (bdim_to_front(x, None, size), 0)  # one copy each
