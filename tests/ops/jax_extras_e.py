"""OpInfo entries: scatter_sub, scatter_mul, scatter_min, scatter_max, scatter_apply, index_take,
mulhi, ragged_dot, reduce (blu.lax); bitwise_count, dsplit, block, fromfunction, mask_indices,
sort_complex, histogramdd, histogram2d (blu.numpy)."""

from __future__ import annotations

import numpy as np

import blu.numpy as bnp
from blu import lax
from ops.base import nonempty_shape, op, rand_shape, uniform


def _scatter_sample(rng):
    x = uniform()(rng, nonempty_shape(rng, 2, 2))
    i = rng.integers(-1, x.shape[0] + 1, (int(rng.integers(0, 6)), 1))  # repeats, out of bounds
    return x, i, uniform()(rng, (i.shape[0],) + x.shape[1:])


def _lax_scatter(name):
    fn = getattr(lax, name)
    return lambda x, i, u, **kw: fn(x, i, u, axes=(0,), **kw)


def _np_scatter(ufunc):
    def ref(x, i, u, mode="drop"):
        x = np.array(x, copy=True)
        i = i[:, 0]
        if mode == "clip":
            i = np.clip(i, 0, x.shape[0] - 1)
        keep = (i >= 0) & (i < x.shape[0])
        ufunc.at(x, i[keep], u[keep])
        return x

    return ref


_SPECIAL = [(np.full((3, 2), 2.0), np.array([[1], [1], [5], [-1]]),
             np.array([[0.0, 1.0], [2.0, 3.0], [-4.0, 5.0], [6.0, -7.0]]))]  # fmt: skip
for _name, _ufunc in (("scatter_sub", np.subtract), ("scatter_mul", np.multiply),
                      ("scatter_min", np.minimum), ("scatter_max", np.maximum)):  # fmt: skip
    op(
        f"lax.{_name}",
        _lax_scatter(_name),
        _np_scatter(_ufunc),
        _scatter_sample,
        diff_args=(0, 2),
        kwargs=[{"mode": "clip"}],
        special=_SPECIAL,
        n_ops=6 if _name == "scatter_mul" else 1,
    )


def _np_scatter_apply(x, i, mode="drop"):
    x = np.array(x, copy=True)
    i = i[:, 0]
    if mode == "clip":
        i = np.clip(i, 0, x.shape[0] - 1)
    for r in i[(i >= 0) & (i < x.shape[0])]:  # once per occurrence, in turn
        x[r] = x[r] * np.sin(x[r]) + 0.5
    return x


op(
    "lax.scatter_apply",
    lambda x, i, **kw: lax.scatter_apply(x, i, lambda v: v * lax.sin(v) + 0.5, axes=(0,), **kw),
    _np_scatter_apply,
    lambda rng: _scatter_sample(rng)[:2],
    diff_args=(0,),
    kwargs=[{"mode": "clip"}],
    special=[(np.full((3, 2), 2.0), np.array([[1], [1], [5], [-1]]))],
    n_ops=12,
)


def _index_take_sample(rng):
    x = uniform()(rng, nonempty_shape(rng, 2, 3))
    n = int(rng.integers(0, 5))
    return x, rng.integers(-4, 4, n), rng.integers(-4, 4, n)


def _np_index_take(x, i, j):
    return np.moveaxis(x, -1, 0)[np.mod(i, x.shape[-1]), np.mod(j, x.shape[0])]


op(
    "lax.index_take",
    lambda x, i, j: lax.index_take(x, (i, j), (-1, 0)),
    _np_index_take,
    _index_take_sample,
    diff_args=(0,),
    special=[(np.arange(6.0).reshape(2, 3), np.array([0, -1, 5]), np.array([2, -3, 7]))],
)


def _mulhi_sample(rng):
    dt = [np.int8, np.uint16, np.int32, np.uint32, np.int64, np.uint64][int(rng.integers(0, 6))]
    info = np.iinfo(dt)
    shape = nonempty_shape(rng, 1, 2)
    return tuple(rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True) for _ in "xy")


def _np_mulhi(x, y):
    bits = x.dtype.itemsize * 8
    hi = [(int(a) * int(b)) >> bits for a, b in zip(x.ravel(), y.ravel())]
    return np.array(hi, dtype=object).astype(x.dtype).reshape(x.shape)


op(
    "lax.mulhi",
    lax.mulhi,
    _np_mulhi,
    _mulhi_sample,
    grad=False,
    special=[(np.array([-(2**63), 2**63 - 1, -1]), np.array([-(2**63), 2**63 - 1, 2**63 - 1]))],
)


def _bitwise_count_sample(rng):
    dt = [np.bool_, np.int8, np.uint8, np.int32, np.int64, np.uint64][int(rng.integers(0, 6))]
    if dt == np.bool_:
        return (rng.integers(0, 2, rand_shape(rng)).astype(bool),)
    info = np.iinfo(dt)
    return (rng.integers(info.min, info.max, rand_shape(rng), dtype=dt, endpoint=True),)


op(
    "numpy.bitwise_count",
    bnp.bitwise_count,
    np.bitwise_count,
    _bitwise_count_sample,
    grad=False,
    special=[(np.array([-128, 127, 0, -1], np.int8),), (np.array([True, False]),)],
)


def _dsplit_sample(rng):
    shape = rand_shape(rng, 3, 4)
    return (uniform()(rng, shape), [int(i) for i in rng.integers(0, shape[2] + 1, 2)])


op(
    "numpy.dsplit",
    bnp.dsplit,
    np.dsplit,
    _dsplit_sample,
    special=[(np.arange(24.0).reshape(2, 3, 4), 2), (np.ones((1, 1, 3)), [1, -1, 5])],
)


def _block_sample(rng):
    h1, h2, w1, w2 = (int(v) for v in rng.integers(0, 3, 4))
    return tuple(uniform()(rng, s) for s in ((h1, w1), (h1, w2), (h2, w1 + w2)))


op(
    "numpy.block",
    lambda a, b, c: bnp.block([[a, b], [c]]),
    lambda a, b, c: np.block([[a, b], [c]]),
    _block_sample,
    special=[(np.ones((1, 1)), np.zeros((1, 2)), np.arange(3.0)[None])],
)
op(
    "numpy.fromfunction",
    lambda shape=(2, 3), dtype=float: bnp.fromfunction(lambda i, j: i * 3 - j * j, shape,
                                                       dtype=dtype),
    lambda shape=(2, 3), dtype=float: np.fromfunction(lambda i, j: i * 3 - j * j, shape,
                                                      dtype=dtype),
    lambda rng: (),
    grad=False,
    kwargs=[{"shape": (4, 0)}, {"shape": (1, 5)}, {"dtype": np.uint8}],
    skip={"vmap": "no array argument", "jit": "no array argument"},
)  # fmt: skip
op(
    "numpy.mask_indices",
    lambda n=4, k=0: bnp.mask_indices(n, bnp.triu, k),
    lambda n=4, k=0: np.mask_indices(n, np.triu, k),
    lambda rng: (),
    grad=False,
    kwargs=[{"k": 1}, {"n": 0}, {"n": 3, "k": -1}],
    skip={"vmap": "no array argument", "jit": "no array argument"},
)

op(
    "numpy.sort_complex",
    bnp.sort_complex,
    np.sort_complex,
    # no ties (a derivative through a sort is not defined at one; test_sort_complex_against_numpy
    # has them)
    lambda rng: (uniform()(rng, rand_shape(rng, 1)),),
    special=[(np.array([[2.0, np.nan, -1.0], [0.0, -0.0, 1.0]]),)],
)


def _histdd_sample(rng):
    n, d = int(rng.integers(1, 12)), int(rng.integers(1, 4))
    return uniform()(rng, (n, d)), uniform(0.5, 2.0)(rng, (n,))


op(
    "numpy.histogramdd",
    lambda s, w, **kw: bnp.histogramdd(s, 3, weights=w, **kw),
    lambda s, w, **kw: np.histogramdd(s, 3, weights=w, **kw),
    _histdd_sample,
    diff_args=(1,),
    kwargs=[{"density": True}],
    special=[(np.array([[0.0, 1.0], [1.0, 1.0], [3.0, 2.0]]), np.ones(3))],  # points on edges
    n_ops=8,
)
op(
    "numpy.histogramdd:counts",
    lambda s, bins=2, **kw: bnp.histogramdd(s, bins, **kw)[0],
    lambda s, bins=2, **kw: np.histogramdd(s, bins, **kw)[0],
    lambda rng: (uniform()(rng, (int(rng.integers(1, 12)), 2)),),
    covers=("numpy.histogramdd",),
    grad=False,  # piecewise constant counts
    kwargs=[{"bins": [np.array([-2.0, -0.5, 0.0, 2.0]), 3]}, {"range": [(-1.0, 1.0), None]}],
    special=[(np.array([[0.0, 1.0], [1.0, 1.0], [3.0, 2.0]]),)],
)
op(
    "numpy.histogram2d",
    lambda x, y, w, **kw: bnp.histogram2d(x, y, [2, 3], weights=w, **kw),
    lambda x, y, w, **kw: np.histogram2d(x, y, [2, 3], weights=w, **kw),
    lambda rng: tuple(uniform()(rng, (7,)) for _ in "xy") + (uniform(0.5, 2.0)(rng, (7,)),),
    diff_args=(2,),
    kwargs=[{"density": True}, {"range": [(-1.0, 1.0), (0.0, 2.0)]}],
    n_ops=8,
)


def _ragged_sample(rng):
    m, k, n, g = (int(rng.integers(1, 5)) for _ in range(4))
    sizes = rng.multinomial(int(rng.integers(0, m + 1)), [1 / g] * g).astype(np.int32)
    return uniform()(rng, (m, k)), uniform()(rng, (g, k, n)), sizes  # some groups empty


def _np_ragged_dot(lhs, rhs, sizes):
    out, start = np.zeros((lhs.shape[0], rhs.shape[2])), 0
    for g, size in enumerate(sizes):  # each group's rows by its own matrix; the rest zero
        out[start : start + size] = lhs[start : start + size] @ rhs[g]
        start += size
    return out


op(
    "lax.ragged_dot",
    lax.ragged_dot,
    _np_ragged_dot,
    _ragged_sample,
    covers=("lax.ragged_dot", "lax.ragged_dot_general", "lax.RaggedDotDimensionNumbers"),
    diff_args=(0, 1),
    special=[(np.ones((3, 2)), np.arange(8.0).reshape(2, 2, 2), np.array([0, 2], np.int32))],
    n_ops=4,
)


def _np_logaddexp_reduce(x):
    if x.shape[0] == 0:
        return np.full(x.shape[1:], -np.inf)
    return np.logaddexp.reduce(x, axis=0)  # a combiner that is no named reduction: the fold


op(
    "lax.reduce",
    lambda x: lax.reduce(x, -np.inf, bnp.logaddexp, (0,)),
    _np_logaddexp_reduce,
    lambda rng: (uniform()(rng, rand_shape(rng, 1, 3)),),
    special=[(np.array([[0.0, -np.inf], [1.0, 2.0], [-np.inf, -np.inf]]),)],
    n_ops=8,
)
