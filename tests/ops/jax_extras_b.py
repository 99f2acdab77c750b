"""OpInfo entries of the JAX-surface names added in session 10 (part b)."""

from __future__ import annotations

import numpy as np

import blu.numpy as bnp
from ops.base import (
    axis_sampler,
    binary_sampler,
    broadcast_pair,
    ints,
    nonempty_shape,
    op,
    rand_shape,
    unary_sampler,
    uniform,
)

_NAN, _INF = np.nan, np.inf


def _with_nans(vals):
    """``vals`` with about a quarter of the entries NaN."""

    def s(rng, shape):
        x = vals(rng, shape)
        return np.where(rng.random(shape) < 0.25, _NAN, x)

    return s


# ---- elementwise -------------------------------------------------------------------------------

op(
    "numpy.heaviside",
    bnp.heaviside,
    np.heaviside,
    binary_sampler(),
    special=[
        (np.array([-1.0, -0.0, 0.0, 2.0, -_INF, _INF]), np.array(0.5)),
        (np.array([0.0, 0.0, 1.0]), np.array([0.0, 1.0, _NAN])),
        (np.array([_NAN, -1.0, 1.0]), np.array(0.5)),  # NaN stays NaN (blu: x2)
    ],
)
op(
    "numpy.modf",
    bnp.modf,
    np.modf,
    unary_sampler(uniform(-4.0, 4.0)),
    special=[(np.array([-2.5, -0.0, 0.0, 3.0, -1.0, 0.75, _NAN, _INF, -_INF]),)],  # (+-0, +-inf)
)
op(
    "numpy.ldexp",
    bnp.ldexp,
    np.ldexp,
    lambda rng: (lambda a, b: (uniform()(rng, a), ints(rng, b)))(*broadcast_pair(rng)),
    special=[
        (np.array([1.0, -3.0, 0.0, _INF, _NAN]), np.array([3, -2, 5, 1, 0], np.int32)),
        (np.array([2.0**-1074, 2.0**1000]), np.array([1100, -1100], np.int32)),  # 2**x2 overflows
    ],
)
for _n in ("isposinf", "isneginf"):
    op(
        f"numpy.{_n}",
        getattr(bnp, _n),
        getattr(np, _n),
        unary_sampler(lambda rng, shape: rng.choice([-_INF, _INF, _NAN, 0.0, 1.5, -2.0], shape)),
        grad=False,
        special=[(np.array([-_INF, _INF, _NAN, 0.0, -0.0, 1e308, -1e308]),)],
    )

# ---- nan-ignoring reductions and scans ---------------------------------------------------------


for _n in ("nancumsum", "nancumprod"):
    op(
        f"numpy.{_n}",
        (lambda f: lambda x, axis: f(x, axis=axis))(getattr(bnp, _n)),
        (lambda f: lambda x, axis: f(x, axis=axis))(getattr(np, _n)),
        axis_sampler(uniform()),  # NaNs in the special points (check_grads hashes the inputs)
        special=[
            (np.array([_NAN, 2.0, 0.0, _NAN, 3.0]), 0),
            (np.array([[_NAN, _NAN], [1.5, _INF]]), None),
            (np.array([[_NAN, _NAN], [1.5, -2.0]]), 1),
        ],
        n_ops=8,
    )


def _nanarg_ref(f):
    """numpy's nanargmax/nanargmin, -1 on an all-NaN slice (JAX's convention; numpy raises)."""

    def ref(x, axis):
        allnan = np.all(np.isnan(x), axis=axis, keepdims=axis is not None)
        i = f(np.where(allnan, 0.0, x), axis=axis)
        return np.where(np.all(np.isnan(x), axis=axis), -1, i)

    return ref


for _n in ("nanargmax", "nanargmin"):
    op(
        f"numpy.{_n}",
        (lambda f: lambda x, axis: f(x, axis=axis))(getattr(bnp, _n)),
        _nanarg_ref(getattr(np, _n)),
        axis_sampler(_with_nans(uniform())),
        grad=False,
        special=[
            (np.array([_NAN, 1.0, 3.0, 3.0, _NAN]), None),
            (np.array([[_NAN, _NAN], [2.0, -1.0]]), 0),
            (np.array([[_NAN, _NAN], [2.0, -1.0]]), 1),
            (np.array([-_INF, _INF, 0.0]), None),
        ],
    )

for _n in ("nancumsum", "nancumprod"):
    op(
        f"numpy.{_n}:nan",
        (lambda f: lambda x, axis: f(x, axis=axis))(getattr(bnp, _n)),
        (lambda f: lambda x, axis: f(x, axis=axis))(getattr(np, _n)),
        lambda rng: (np.array([_NAN, 1.5, -0.5, _NAN, 2.0]) * uniform(0.5, 1.5)(rng, (5,)), 0),
        covers=(f"numpy.{_n}",),
        grad=False,
        n_ops=8,
    )

# ---- products ----------------------------------------------------------------------------------


def _matvec_sampler(rng):
    a, b = broadcast_pair(rng)
    m, n = int(rng.integers(0, 4)), int(rng.integers(0, 4))
    return rng.standard_normal(a + (m, n)), rng.standard_normal(b + (n,))


op(
    "numpy.matvec",
    bnp.matvec,
    np.matvec if hasattr(np, "matvec") else (lambda a, v: (a @ v[..., None])[..., 0]),
    _matvec_sampler,
    n_ops=4,
)

# ---- creation ----------------------------------------------------------------------------------


def _geom_sampler(rng):
    shape = rand_shape(rng, 0, 2)
    return uniform(0.5, 4.0)(rng, shape), uniform(0.5, 4.0)(rng, shape)


op(
    "numpy.geomspace",
    lambda start, stop, **kw: bnp.geomspace(start, stop, 5, **kw),
    lambda start, stop, **kw: np.geomspace(start, stop, 5, **kw),
    _geom_sampler,
    kwargs=[{"endpoint": False}, {"axis": -1}],
    special=[
        (np.array(1.0), np.array(1000.0)),
        (np.array([2.0, 3.0]), np.array([2.0, 0.5])),
        (np.array(-1.0), np.array(-1000.0)),  # negative (same sign): numpy and JAX allow it
    ],
    n_ops=8,
)
op(
    "numpy.indices",
    lambda **kw: (
        bnp.indices((2, 0, 3), **kw) if kw.pop("empty", False) else bnp.indices((2, 3), **kw)
    ),
    lambda **kw: (
        np.indices((2, 0, 3), **kw) if kw.pop("empty", False) else np.indices((2, 3), **kw)
    ),
    lambda rng: (),
    grad=False,
    kwargs=[{"sparse": True}, {"empty": True}],
    skip={"vmap": "no array argument", "jit": "no array argument"},
)

# ---- statistics --------------------------------------------------------------------------------


def _hist_sampler(rng):
    shape = nonempty_shape(rng, 1, 2, 6)
    return uniform()(rng, shape), uniform(0.5, 2.0)(rng, shape)


op(
    "numpy.histogram",
    lambda a, w, **kw: bnp.histogram(a, 4, weights=w, **kw),
    lambda a, w, **kw: np.histogram(a, 4, weights=w, **kw),
    _hist_sampler,
    kwargs=[{"density": True}, {"range": (-1.0, 1.0)}],
    special=[
        (np.array([0.0, 1.0, 1.0, 2.0, 3.0, 4.0]), np.ones(6)),  # values on the edges
        (np.array([2.0, 2.0]), np.array([1.0, 3.0])),  # an empty range: widened by 1/2
    ],
    n_ops=8,
)
op(
    "numpy.histogram:counts",
    lambda a, bins=3, **kw: bnp.histogram(a, bins, **kw)[0],
    lambda a, bins=3, **kw: np.histogram(a, bins, **kw)[0],
    lambda rng: (uniform()(rng, nonempty_shape(rng, 1, 2, 6)),),
    covers=("numpy.histogram",),
    grad=False,  # piecewise constant counts
    kwargs=[{"bins": np.array([-2.0, -0.5, 0.0, 2.0])}],
    special=[(np.array([0.0, 1.0, 1.0, 2.0, 3.0]),)],
)
op(
    "numpy.histogram_bin_edges",
    lambda a, **kw: bnp.histogram_bin_edges(a, 4, **kw),
    lambda a, **kw: np.histogram_bin_edges(a, 4, **kw),
    lambda rng: (uniform()(rng, nonempty_shape(rng, 1, 2, 6)),),
    kwargs=[{"range": (-1.0, 3.0)}],
    special=[(np.array([1.5, 1.5]),), (np.array([-1.0, 0.0, 7.0]),)],
    n_ops=8,
)


def _interp_sampler(rng):
    n = int(rng.integers(1, 6))
    xp = np.cumsum(rng.uniform(0.5, 1.5, n)) - 2.0  # increasing, knots >= 0.5 apart
    fp = uniform()(rng, (n,))
    x = uniform(-3.0, 4.0)(rng, rand_shape(rng, 0, 2))
    return x, xp, fp


op(
    "numpy.interp",
    bnp.interp,
    np.interp,
    _interp_sampler,
    kwargs=[{"left": -9.0, "right": 9.0}, {"period": 3.0}],
    special=[
        (
            np.array([-1.0, 0.0, 0.5, 1.0, 2.0, 3.0, _NAN]),
            np.array([0.0, 1.0, 1.0, 2.0]),
            np.array([1.0, 2.0, 4.0, -1.0]),
        ),  # on the knots, a repeated knot, outside
        (np.array([-_INF, 0.3, _INF]), np.array([0.5]), np.array([7.0])),
    ],
    n_ops=8,
)

# ---- sets, selection, sorting ------------------------------------------------------------------


def _small_ints(rng, shape):
    return rng.integers(-3, 4, shape).astype(np.float64)


op(
    "numpy.isin",
    bnp.isin,
    np.isin,
    lambda rng: (_small_ints(rng, rand_shape(rng)), _small_ints(rng, rand_shape(rng, 0, 2))),
    grad=False,
    kwargs=[{"invert": True}],
    special=[
        (np.array([1.0, _NAN, -0.0, _INF]), np.array([_NAN, 0.0, _INF])),
        (np.array([[1.0, 2.0]]), np.zeros((0,))),
    ],
)


def _pad(v, size, fill):
    return np.concatenate([v, np.full(size - v.size, fill, v.dtype)])


def _np_flatnonzero(x, fill_value=0):
    return _pad(np.flatnonzero(x), x.size, fill_value)


op(
    "numpy.flatnonzero",
    lambda x, **kw: bnp.flatnonzero(x, size=x.size, **kw),
    _np_flatnonzero,
    lambda rng: (np.round(uniform()(rng, rand_shape(rng))),),
    grad=False,
    kwargs=[{"fill_value": -1}],
    special=[(np.array([[0.0, _NAN], [-0.0, 2.0]]),), (np.zeros((3,)),)],
)


def _intersect_sampler(rng):
    a = _small_ints(rng, nonempty_shape(rng, 1, 2))
    b = _small_ints(rng, rand_shape(rng, 1, 2))
    return a, np.append(b, a.flat[0])  # the intersection is not empty


def _np_intersect1d(a, b, fill_value=None):
    v = np.intersect1d(a, b)
    return _pad(v, a.size, v[0] if fill_value is None else fill_value)


op(
    "numpy.intersect1d",
    lambda a, b, **kw: bnp.intersect1d(a, b, size=a.size, **kw),
    _np_intersect1d,
    _intersect_sampler,
    grad=False,  # ties: a finite-difference step changes which values are equal
    kwargs=[{"fill_value": -7.0}],
    special=[
        (np.array([3.0, 1.0, 3.0, -0.0, 2.0]), np.array([0.0, 3.0, 3.0, 5.0])),
        (np.array([[1.0, 1.0]]), np.array([1.0])),
    ],
)


def _lexsort_sampler(rng):
    k = int(rng.integers(1, 4))
    return (_small_ints(rng, (k,) + rand_shape(rng, 1, 2)),)


op(
    "numpy.lexsort",
    bnp.lexsort,
    np.lexsort,
    _lexsort_sampler,
    grad=False,
    kwargs=[{"axis": 0}],
    special=[
        (np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 1.0]]),),
        (np.array([[[2.0, 1.0], [1.0, 1.0]], [[0.0, 0.0], [1.0, 0.0]]]),),
        (np.array([[_INF, -_INF, 0.0]]),),
    ],
)
