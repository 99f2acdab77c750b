"""OpInfo entries: partition, argpartition, choose, delete, insert, put, piecewise, compress,
extract, place, fill_diagonal, resize, vander, tril/triu_indices_from, diag_indices(_from),
trim_zeros, apply_over_axes, packbits, unpackbits, gcd, lcm, frexp, spacing, put_along_axis,
nanquantile, nanpercentile, nanmedian.
Index and mask arguments are Python lists (closed over by the generic tests: their values
decide the result's shape, so they are static, as in JAX)."""

from __future__ import annotations

import numpy as np

import blu.numpy as bnp
from ops.base import away, broadcast_pair, nonempty_shape, op, rand_shape, uniform


def _axis(rng, nd):
    return int(rng.integers(-nd, nd))


def _partition_sample(rng):
    shape = nonempty_shape(rng)
    ax = _axis(rng, len(shape))
    return uniform()(rng, shape), int(rng.integers(-shape[ax], shape[ax])), ax


op("numpy.partition", lambda x, k, ax: bnp.partition(x, k, ax),
   lambda x, k, ax: np.sort(x, ax), _partition_sample)  # fmt: skip
op("numpy.argpartition", lambda x, k, ax: bnp.argpartition(x, k, ax),
   lambda x, k, ax: np.argsort(x, ax, kind="stable"), _partition_sample, grad=False)  # fmt: skip


def _choose_sample(rng):
    shape = rand_shape(rng)
    return (rng.integers(-3, 6, shape), uniform()(rng, shape), uniform()(rng, shape[1:]),
            uniform()(rng, shape))  # fmt: skip


op(
    "numpy.choose",
    lambda a, c0, c1, c2, mode="wrap": bnp.choose(a, [c0, c1, c2], mode=mode),
    lambda a, c0, c1, c2, mode="wrap": np.choose(a, [c0, c1, c2], mode=mode),
    _choose_sample,
    special=[(np.array([-1, 0, 1, 4]), np.zeros(4), np.ones(1), np.full(4, 2.0))],
    kwargs=[{"mode": "clip"}],
)


def _delete_sample(rng):
    shape = nonempty_shape(rng)
    ax = _axis(rng, len(shape))
    n = shape[ax]
    obj = [int(i) for i in rng.integers(-n, n, int(rng.integers(0, 3)))]
    return uniform()(rng, shape), obj, ax


op("numpy.delete", bnp.delete, np.delete, _delete_sample)


def _insert_sample(rng):
    shape = nonempty_shape(rng)
    ax = _axis(rng, len(shape))
    n = shape[ax]
    obj = [int(i) for i in rng.integers(-n, n + 1, int(rng.integers(1, 3)))]
    vshape = list(shape)
    vshape[ax % len(shape)] = len(obj)
    return uniform()(rng, shape), obj, uniform()(rng, tuple(vshape)), ax


op("numpy.insert", bnp.insert, np.insert, _insert_sample)


def _np_put(x, ind, v, mode=None):
    out = x.copy()
    np.put(out, ind, v, mode=mode or "raise")
    return out


def _put_sample(rng):
    shape = nonempty_shape(rng)
    size = int(np.prod(shape))
    ind = [int(i) for i in rng.permutation(size)[: min(size, 3)]]
    ind = [i - size if rng.random() < 0.3 else i for i in ind]
    return uniform()(rng, shape), ind, uniform()(rng, (len(ind),))


op("numpy.put", lambda x, ind, v: bnp.put(x, ind, v, inplace=False), _np_put, _put_sample)

_PIECES_B, _PIECES_N = [lambda x: x * x, bnp.sin, 0.25], [lambda x: x * x, np.sin, 0.25]
op(
    "numpy.piecewise",
    lambda x: bnp.piecewise(x, [x < -0.5, x > 0.5], _PIECES_B),
    lambda x: np.piecewise(x, [x < -0.5, x > 0.5], _PIECES_N),
    lambda rng: (away(-2.0, 2.0, 0.5, 0.1)(rng, rand_shape(rng)) * np.float64(1.0),),
    special=[(np.array([-0.9, 0.0, 0.9]),)],
)


def _compress_sample(rng):
    shape = nonempty_shape(rng)
    ax = _axis(rng, len(shape))
    cond = [bool(b) for b in rng.random(shape[ax]) < 0.5]
    return cond, uniform()(rng, shape), ax


op("numpy.compress", bnp.compress, np.compress, _compress_sample)


def _extract_sample(rng):
    x = uniform()(rng, rand_shape(rng))
    return [bool(b) for b in (rng.random(x.size) < 0.5)], x


op("numpy.extract", bnp.extract, lambda c, x: np.extract(np.array(c, bool), x), _extract_sample)


def _np_place(x, mask, vals):
    out = x.copy()
    np.place(out, np.array(mask, bool).reshape(x.shape), vals)
    return out


def _place_sample(rng):
    x = uniform()(rng, nonempty_shape(rng))
    return x, (rng.random(x.shape) < 0.5).tolist(), uniform()(rng, (int(rng.integers(1, 3)),))


op(
    "numpy.place",
    lambda x, mask, vals: bnp.place(x, mask, vals, inplace=False),
    _np_place,
    _place_sample,
)


def _np_fill_diagonal(x, val, wrap=False):
    out = x.copy()
    np.fill_diagonal(out, val, wrap)
    return out


op(
    "numpy.fill_diagonal",
    lambda x, val, wrap=False: bnp.fill_diagonal(x, val, wrap, inplace=False),
    _np_fill_diagonal,
    lambda rng: (uniform()(rng, (7, 3)), uniform()(rng, (2,))),
    kwargs=[{"wrap": True}],
)
op(
    "numpy.resize",
    bnp.resize,
    np.resize,
    lambda rng: (uniform()(rng, rand_shape(rng)), rand_shape(rng)),
)
op(
    "numpy.vander",
    lambda x, n, increasing=False: bnp.vander(x, n, increasing),
    lambda x, n, increasing=False: np.vander(x, n, increasing),
    lambda rng: (uniform()(rng, rand_shape(rng, 1, 1)), int(rng.integers(0, 5))),
    kwargs=[{"increasing": True}],
    n_ops=4,
)
op(
    "numpy.tril_indices_from",
    bnp.tril_indices_from,
    np.tril_indices_from,
    lambda rng: (uniform()(rng, rand_shape(rng, 2, 2)), int(rng.integers(-2, 3))),
    grad=False,
)
op(
    "numpy.triu_indices_from",
    bnp.triu_indices_from,
    np.triu_indices_from,
    lambda rng: (uniform()(rng, rand_shape(rng, 2, 2)), int(rng.integers(-2, 3))),
    grad=False,
)
op("numpy.diag_indices", bnp.diag_indices, np.diag_indices,
   lambda rng: (int(rng.integers(0, 4)), int(rng.integers(1, 4))), grad=False)  # fmt: skip
op("numpy.diag_indices_from", bnp.diag_indices_from, np.diag_indices_from,
   lambda rng: (uniform()(rng, (3, 3, 3)),), grad=False)  # fmt: skip
op(
    "numpy.trim_zeros",
    bnp.trim_zeros,
    np.trim_zeros,
    lambda rng: (np.round(uniform()(rng, rand_shape(rng, 1, 1, 8))),),
    grad=False,  # the result's length depends on the values: concrete only (JAX's rule)
    skip={"jit": "needs a concrete filt (JAX's rule)", "vmap": "needs a concrete filt"},
)
op(
    "numpy.apply_over_axes",
    lambda x, axes: bnp.apply_over_axes(bnp.sum, x, axes),
    lambda x, axes: np.apply_over_axes(np.sum, x, axes),
    lambda rng: (uniform()(rng, (2, 3, 4)), [int(a) for a in rng.permutation(3)[:2]]),
)
op(
    "numpy.packbits",
    lambda x, ax, bitorder="big": bnp.packbits(x, ax, bitorder),
    lambda x, ax, bitorder="big": np.packbits(x, ax, bitorder=bitorder),
    lambda rng: (rng.integers(-1, 2, (3, 10)), int(rng.integers(-2, 2))),
    kwargs=[{"bitorder": "little"}],
)
op(
    "numpy.unpackbits",
    lambda x, ax, count=None, bitorder="big": bnp.unpackbits(x, ax, count, bitorder),
    lambda x, ax, count=None, bitorder="big": np.unpackbits(x, ax, count, bitorder=bitorder),
    lambda rng: (rng.integers(0, 256, (2, 3)).astype(np.uint8), int(rng.integers(-2, 2))),
    kwargs=[{"bitorder": "little"}, {"count": 5}],
)


def _int_pair(rng):
    a, b = broadcast_pair(rng)
    return rng.integers(-30, 31, a), rng.integers(-30, 31, b)


op("numpy.gcd", bnp.gcd, np.gcd, _int_pair, grad=False)
op("numpy.lcm", bnp.lcm, np.lcm, _int_pair, grad=False)
op("numpy.frexp", bnp.frexp, np.frexp, lambda rng: (uniform(-1e3, 1e3)(rng, rand_shape(rng)),),
   grad=False)  # fmt: skip
op("numpy.spacing", bnp.spacing, np.spacing,
   lambda rng: (uniform(-1e3, 1e3)(rng, rand_shape(rng)),), grad=False)  # fmt: skip


def _np_put_along_axis(a, v, idx, axis):
    out = a.copy()
    np.put_along_axis(out, np.asarray(idx), v, axis)
    return out


op(
    "numpy.put_along_axis",
    lambda a, v, idx, axis: bnp.put_along_axis(a, np.asarray(idx), v, axis, inplace=False),
    _np_put_along_axis,  # distinct indices along the axis: the result does not depend on order
    lambda rng: (uniform()(rng, (3, 4)), uniform()(rng, (2, 4)),
                 np.stack([rng.permutation(3)[:2] for _ in range(4)], 1).tolist(), 0),
)  # fmt: skip


def _with_nans(rng):
    """A finite sample and a mask of where NaNs go (put in by the op: finite differences and the
    samplers' seeds need finite inputs)."""
    x = uniform()(rng, nonempty_shape(rng, 1, 2, 6))
    mask = rng.random(x.shape) < 0.3
    mask[..., 0] = False  # an all-NaN row's value is NaN (its finite differences too)
    return x, mask


def _nan_at(x, mask):
    return np.where(mask, np.nan, x)


op("numpy.nanquantile", lambda x, m, q, axis: bnp.nanquantile(bnp.where(m, np.nan, x), q, axis),
   lambda x, m, q, axis: np.nanquantile(_nan_at(x, m), q, axis),
   lambda rng: (*_with_nans(rng), 0.3, -1), diff_args=(0,))  # fmt: skip
op("numpy.nanpercentile",
   lambda x, m, q, axis: bnp.nanpercentile(bnp.where(m, np.nan, x), q, axis),
   lambda x, m, q, axis: np.nanpercentile(_nan_at(x, m), q, axis),
   lambda rng: (*_with_nans(rng), 30.0, -1), diff_args=(0,))  # fmt: skip
op("numpy.nanmedian", lambda x, m, axis: bnp.nanmedian(bnp.where(m, np.nan, x), axis),
   lambda x, m, axis: np.nanmedian(_nan_at(x, m), axis),
   lambda rng: (*_with_nans(rng), -1), diff_args=(0,))  # fmt: skip
