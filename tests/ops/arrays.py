"""OpInfo entries: blu.numpy's reductions, shape functions, products, selection and indexing,
creation."""

from __future__ import annotations

import dataclasses  # noqa: F401
import math  # noqa: F401
from collections.abc import Callable, Sequence  # noqa: F401
from typing import Any  # noqa: F401

import numpy as np

import blu.numpy as bnp
from ops.base import (
    away,
    axis_sampler,
    nonempty_shape,
    op,
    rand_shape,
    unary_sampler,
    uniform,
)

# ---- reductions --------------------------------------------------------------------------------

_R = {  # name -> (reference, values, differentiable, special points)
    "sum": (np.sum, uniform(), True, [0.0, 0.0, np.inf]),
    "prod": (np.prod, uniform(), True, [0.0, 2.0, 3.0]),
    "product": (np.prod, uniform(), True, [0.0, 0.0, 3.0]),
    "mean": (np.mean, uniform(), True, [1.0, 2.0]),
    "max": (np.max, uniform(), True, [1.0, 1.0, 0.0]),
    "min": (np.min, uniform(), True, [1.0, 1.0, 2.0]),
    "amax": (np.amax, uniform(), True, [np.nan, 1.0]),
    "amin": (np.amin, uniform(), True, [-np.inf, 1.0]),
    "nanmax": (np.nanmax, uniform(), True, [np.nan, 1.0]),
    "nanmin": (np.nanmin, uniform(), True, [np.nan, 1.0]),
    "nansum": (np.nansum, uniform(), True, [np.nan, 1.0]),
    "nanmean": (np.nanmean, uniform(), True, [np.nan, 1.0]),
    "std": (np.std, uniform(), True, [1.0, 2.0, 4.0]),
    "var": (np.var, uniform(), True, [1.0, 1.0, 4.0]),
    "median": (np.median, uniform(), True, [1.0, 3.0, 2.0]),
    "ptp": (np.ptp, uniform(), True, [1.0, 3.0]),
    "average": (np.average, uniform(), True, [1.0, 2.0]),
    "all": (np.all, uniform(), False, [0.0, 1.0]),
    "any": (np.any, uniform(), False, [0.0, 0.0]),
    "argmax": (np.argmax, uniform(), False, [1.0, 1.0, 0.0]),
    "argmin": (np.argmin, uniform(), False, [1.0, 1.0, 2.0]),
    "count_nonzero": (np.count_nonzero, uniform(), False, [0.0, 1.0]),
}
for _n, (_ref, _vals, _d, _sp) in _R.items():
    op(
        f"numpy.{_n}",
        (lambda f: lambda x, axis: f(x, axis=axis))(getattr(bnp, _n)),
        (lambda f: lambda x, axis: f(x, axis=axis))(_ref),
        axis_sampler(_vals),
        special=[(np.array(_sp), None), (np.array(_sp), 0)],
        grad=_d,
        n_ops=8,
    )
for _n, _ref in {
    "cumsum": np.cumsum,
    "cumprod": np.cumprod,
    "cumulative_sum": np.cumsum,
    "cumulative_prod": np.cumprod,
}.items():
    op(
        f"numpy.{_n}",
        (lambda f: lambda x, axis: f(x, axis=axis))(getattr(bnp, _n)),
        (lambda f: lambda x, axis: f(x, axis=0 if axis is None and x.ndim == 1 else axis))(_ref),
        lambda rng: (uniform()(rng, nonempty_shape(rng, 1, 1, 6)), 0),
        special=[(np.array([0.0, 0.0, 3.0, 2.0]), 0), (np.array([2.0, 0.0, 3.0]), 0)],
        n_ops=8,
    )
op(
    "numpy.quantile",
    lambda x, q: bnp.quantile(x, q),
    lambda x, q: np.quantile(x, q),
    lambda rng: (uniform()(rng, nonempty_shape(rng, 1, 1, 6)), 0.3),
    diff_args=(0,),
    n_ops=8,
)
op(
    "numpy.percentile",
    lambda x, q: bnp.percentile(x, q),
    lambda x, q: np.percentile(x, q),
    lambda rng: (uniform()(rng, nonempty_shape(rng, 1, 1, 6)), 30.0),
    diff_args=(0,),
    n_ops=8,
)
op(
    "numpy.trace",
    bnp.trace,
    np.trace,
    lambda rng: (uniform()(rng, nonempty_shape(rng, 2, 3)),),
    kwargs=[{"offset": 1}],
)

# ---- shapes and manipulation -------------------------------------------------------------------


def _sh(rng, nd=2):
    return uniform()(rng, rand_shape(rng, nd, nd))


_M = {  # name -> (blu fn of x, numpy fn of x, min dims)
    "reshape": (lambda x: bnp.reshape(x, (-1,)), lambda x: np.reshape(x, (-1,)), 0),
    "transpose": (bnp.transpose, np.transpose, 0),
    "permute_dims": (lambda x: bnp.permute_dims(x, tuple(range(x.ndim))[::-1]), np.transpose, 2),
    "matrix_transpose": (bnp.matrix_transpose, lambda x: np.swapaxes(x, -1, -2), 2),
    "swapaxes": (lambda x: bnp.swapaxes(x, 0, -1), lambda x: np.swapaxes(x, 0, -1), 1),
    "moveaxis": (lambda x: bnp.moveaxis(x, 0, -1), lambda x: np.moveaxis(x, 0, -1), 1),
    "expand_dims": (lambda x: bnp.expand_dims(x, 0), lambda x: np.expand_dims(x, 0), 0),
    "squeeze": (bnp.squeeze, np.squeeze, 0),
    "flip": (bnp.flip, np.flip, 1),
    "fliplr": (bnp.fliplr, np.fliplr, 2),
    "flipud": (bnp.flipud, np.flipud, 1),
    "roll": (lambda x: bnp.roll(x, 2, axis=0), lambda x: np.roll(x, 2, axis=0), 1),
    "tile": (lambda x: bnp.tile(x, (2, 1)), lambda x: np.tile(x, (2, 1)), 0),
    "repeat": (lambda x: bnp.repeat(x, 2, axis=0), lambda x: np.repeat(x, 2, axis=0), 1),
    "broadcast_to": (
        lambda x: bnp.broadcast_to(x, (2,) + x.shape),
        lambda x: np.broadcast_to(x, (2,) + x.shape),
        0,
    ),
    "atleast_1d": (bnp.atleast_1d, np.atleast_1d, 0),
    "atleast_2d": (bnp.atleast_2d, np.atleast_2d, 0),
    "atleast_3d": (bnp.atleast_3d, np.atleast_3d, 0),
    "diagonal": (bnp.diagonal, np.diagonal, 2),
    "diag": (bnp.diag, np.diag, 1),
    "tril": (bnp.tril, np.tril, 2),
    "triu": (bnp.triu, np.triu, 2),
    "pad": (lambda x: bnp.pad(x, 1), lambda x: np.pad(x, 1), 0),
    "split": (lambda x: bnp.split(x, 1), lambda x: np.split(x, 1), 1),
    "array_split": (lambda x: bnp.array_split(x, 2), lambda x: np.array_split(x, 2), 1),
    "hsplit": (lambda x: bnp.hsplit(x, 1), lambda x: np.hsplit(x, 1), 1),
    "vsplit": (lambda x: bnp.vsplit(x, 1), lambda x: np.vsplit(x, 1), 2),
    "astype": (lambda x: bnp.astype(x, bnp.float32), lambda x: x.astype(np.float32), 0),
    "asarray": (bnp.asarray, np.asarray, 0),
    "array": (bnp.array, np.array, 0),
    "zeros_like": (bnp.zeros_like, np.zeros_like, 0),
    "ones_like": (bnp.ones_like, np.ones_like, 0),
    "full_like": (lambda x: bnp.full_like(x, 3.0), lambda x: np.full_like(x, 3.0), 0),
    "empty_like": (lambda x: bnp.empty_like(x) * 0, lambda x: np.zeros_like(x), 0),
    "getitem": (
        lambda x: bnp.getitem(x, (Ellipsis, slice(None, None, -1))),
        lambda x: x[..., ::-1],
        1,
    ),
}
_M_KW = {
    "diagonal": [{"offset": 1}],
    "tril": [{"k": -1}],
    "triu": [{"k": 1}],
    "diag": [{"k": 1}],
    "flip": [{"axis": 0}],
    "squeeze": [{"axis": ()}],
    "transpose": [{"axes": None}],
}
_M_KW["squeeze"] = []
_M_KW["transpose"] = []
for _n, (_f, _ref, _nd) in _M.items():
    op(
        f"numpy.{_n}",
        _f,
        _ref,
        (
            lambda nd, hi: (
                lambda rng: (
                    uniform()(rng, nonempty_shape(rng, nd, hi) if nd else rand_shape(rng)),
                )
            )
        )(_nd, 1 if _n == "diag" else 2 if _n in ("tril", "triu") else max(_nd, 3)),
        kwargs=[{k: v} for d in _M_KW.get(_n, []) for k, v in d.items()],
        special=[(np.arange(6.0).reshape(2, 3),)] if _n != "diag" else [(np.arange(3.0),)],
        grad=_n not in ("zeros_like", "ones_like", "full_like", "empty_like"),
        skip={"grad": "float32 output: central differences in float32 are too coarse"}
        if _n == "astype"
        else {},
    )

_CAT = {
    "concatenate": (lambda a, b: bnp.concatenate([a, b]), lambda a, b: np.concatenate([a, b])),
    "concat": (lambda a, b: bnp.concat([a, b]), lambda a, b: np.concatenate([a, b])),
    "stack": (lambda a, b: bnp.stack([a, b]), lambda a, b: np.stack([a, b])),
    "hstack": (lambda a, b: bnp.hstack([a, b]), lambda a, b: np.hstack([a, b])),
    "vstack": (lambda a, b: bnp.vstack([a, b]), lambda a, b: np.vstack([a, b])),
    "dstack": (lambda a, b: bnp.dstack([a, b]), lambda a, b: np.dstack([a, b])),
    "column_stack": (lambda a, b: bnp.column_stack([a, b]), lambda a, b: np.column_stack([a, b])),
    "append": (bnp.append, np.append),
    "broadcast_arrays": (bnp.broadcast_arrays, np.broadcast_arrays),
}
for _n, (_f, _ref) in _CAT.items():
    op(
        f"numpy.{_n}",
        _f,
        _ref,
        lambda rng: (lambda s: (uniform()(rng, s), uniform()(rng, s)))(nonempty_shape(rng, 1, 2)),
    )

# ---- products ----------------------------------------------------------------------------------


def _mm_sampler(rng):
    n, k, m = (int(rng.integers(0, 4)) for _ in range(3))
    b = nonempty_shape(rng, 0, 1, 2)
    return rng.standard_normal(b + (n, k)), rng.standard_normal((k, m))


def _vec_pair(rng):
    n = int(rng.integers(0, 5))
    return rng.standard_normal(n), rng.standard_normal(n)


_P = {
    "matmul": (bnp.matmul, np.matmul, _mm_sampler),
    "dot": (
        bnp.dot,
        np.dot,
        lambda rng: tuple(a[0] if a.ndim > 2 else a for a in _mm_sampler(rng)),
    ),
    "inner": (bnp.inner, np.inner, _vec_pair),
    "outer": (bnp.outer, np.outer, _vec_pair),
    "vdot": (bnp.vdot, np.vdot, _vec_pair),
    "vecdot": (bnp.vecdot, lambda a, b: np.sum(np.conj(a) * b, -1), _vec_pair),
    "tensordot": (
        lambda a, b: bnp.tensordot(a, b, 1),
        lambda a, b: np.tensordot(a, b, 1),
        lambda rng: tuple(a[0] if a.ndim > 2 else a for a in _mm_sampler(rng)),
    ),
    "kron": (
        bnp.kron,
        np.kron,
        lambda rng: (rng.standard_normal((2, 2)), rng.standard_normal((1, 3))),
    ),
    "einsum": (
        lambda a, b: bnp.einsum("...ij,jk->...ik", a, b),
        lambda a, b: np.einsum("...ij,jk->...ik", a, b),
        _mm_sampler,
    ),
}
for _n, (_f, _ref, _s) in _P.items():
    op(f"numpy.{_n}", _f, _ref, _s, n_ops=8)

# ---- selection, sorting, indexing ---------------------------------------------------------------


def _take_sampler(rng):
    x = uniform()(rng, nonempty_shape(rng, 1, 2))
    idx = rng.integers(-x.shape[0], x.shape[0], int(rng.integers(0, 5)))
    return x, idx


_OOB = (
    np.array([1.0, 2.0, 3.0, 4.0, 5.0]),
    np.array([0, 7, -1, -9, 0, 0]),
)  # repeated, out of range
op(
    "numpy.take",
    lambda x, i, **kw: bnp.take(x, i, axis=0, **kw),
    lambda x, i, mode=None, fill_value=None: _np_take(x, i, mode, fill_value),
    _take_sampler,
    special=[_OOB],
    kwargs=[{"mode": "wrap"}, {"mode": "fill"}, {"mode": "fill", "fill_value": -1.0}],
)


def _np_take(x, i, mode, fill_value):
    n = x.shape[0]
    if mode == "wrap":
        return np.take(x, np.mod(i, n), axis=0)
    if mode == "fill":
        bad = (i < -n) | (i >= n)
        out = np.take(x, np.clip(np.where(i < 0, i + n, i), 0, n - 1), axis=0)
        fill = np.nan if fill_value is None else fill_value  # JAX's default for floats
        return np.where(bad.reshape(bad.shape + (1,) * (x.ndim - 1)), fill, out)
    if mode in (None, "normalize"):
        i = np.where(i < 0, i + n, i)
    return np.take(x, np.clip(i, 0, n - 1), axis=0)


op(
    "numpy.take_along_axis",
    lambda x, i, **kw: bnp.take_along_axis(x, i, axis=0, **kw),
    lambda x, i, mode=None, fill_value=None: (
        _np_take(x, i, "fill" if mode == "fill" else mode or "normalize", fill_value)
        if mode != "wrap"
        else np.take(x, np.mod(i, x.shape[0]))
    ),
    lambda rng: (lambda x: (x, rng.integers(-x.shape[0], x.shape[0], 4)))(
        uniform()(rng, (int(rng.integers(1, 5)),))
    ),
    special=[_OOB],
    kwargs=[{"mode": "wrap"}, {"mode": "fill"}, {"mode": "fill", "fill_value": -1.0}],
)


def _at_get(x, i, **kw):
    return bnp.asarray(x).at[i].get(**kw)


def _np_at_get(x, i, mode=None, fill_value=None):
    if mode == "fill":
        return _np_take(x, i, "fill", np.nan if fill_value is None else fill_value)
    return _np_take(x, i, "normalize", None)


op(
    "numpy.IndexUpdateRef.get",
    _at_get,
    _np_at_get,
    _take_sampler,
    special=[_OOB],
    kwargs=[{"mode": "fill"}, {"mode": "fill", "fill_value": -1.0}],
    covers=("numpy.IndexUpdateRef", "numpy.IndexUpdateHelper", "numpy.IndexUpdateRef.get"),
)


def _np_update(op_name):
    def ref(x, i, u, mode=None):
        x = np.array(x, np.float64)
        n = x.shape[0]
        i = np.where(i < 0, i + n, i)
        if mode == "clip":
            i = np.clip(i, 0, n - 1)
        keep = (i >= 0) & (i < n)
        i, u = i[keep], np.broadcast_to(u, keep.shape + x.shape[1:])[keep]
        if op_name == "set":
            x[i] = u  # numpy keeps the last of repeated indices, as blu
        else:
            getattr(
                np,
                {"add": "add", "multiply": "multiply", "min": "minimum", "max": "maximum"}[op_name],
            ).at(x, i, u)
        return x

    return ref


def _upd_sampler(rng):
    x = uniform()(rng, nonempty_shape(rng, 1, 2))
    i = rng.integers(-x.shape[0] - 2, x.shape[0] + 2, int(rng.integers(0, 6)))
    return x, i, uniform(0.5, 2)(rng, i.shape + x.shape[1:])


for _n in ("set", "add", "multiply", "min", "max"):
    op(
        f"numpy.IndexUpdateRef.{_n}",
        (lambda n: lambda x, i, u, **kw: getattr(bnp.asarray(x).at[i], n)(u, **kw))(_n),
        _np_update(_n),
        _upd_sampler,
        diff_args=(0, 2),
        special=[
            (
                np.array([1.0, 2.0, 3.0]),
                np.array([0, 0, 1, 5, -1]),
                np.array([2.0, 3.0, 4.0, 5.0, 6.0]),
            ),
            (np.array([1.0, 2.0, 3.0]), np.array([0, 0, 5]), np.array([2.0, 3.0, 0.5])),
            (np.array([1.0, 2.0, 3.0]), np.array([0, 0, 5]), np.array([2.0, 3.0, 9.0])),
        ],
        kwargs=[{"mode": "clip"}],
        finite_grad_at_special=True,
    )
op(
    "numpy.where",
    lambda c, x, y: bnp.where(c, x, y),
    np.where,
    lambda rng: (lambda s: (rng.random(s) < 0.5, uniform()(rng, s), uniform()(rng, s)))(
        rand_shape(rng)
    ),
    diff_args=(1, 2),
)
op(
    "numpy.clip",
    lambda x: bnp.clip(x, -0.5, 0.5),
    lambda x: np.clip(x, -0.5, 0.5),
    unary_sampler(away(-2, 2, 0.5, 0.1)),
    special=[(np.array([-0.5, 0.5, np.nan]),)],
)
op(
    "numpy.sort",
    lambda x: bnp.sort(x, axis=-1),
    lambda x: np.sort(x, axis=-1),
    lambda rng: (uniform()(rng, rand_shape(rng, 1)),),
    special=[(np.array([1.0, 1.0, np.nan, -np.inf]),)],
)
op(
    "numpy.argsort",
    lambda x: bnp.argsort(x, axis=-1),
    lambda x: np.argsort(x, axis=-1, kind="stable"),
    lambda rng: (uniform()(rng, rand_shape(rng, 1)),),
    grad=False,
    special=[(np.array([1.0, 1.0, 0.0, -np.inf]),)],
)
op(
    "numpy.searchsorted",
    bnp.searchsorted,
    np.searchsorted,
    lambda rng: (np.sort(uniform()(rng, (5,))), uniform()(rng, (3,))),
    grad=False,
    kwargs=[{"side": "right"}],
    special=[(np.array([1.0, 2.0, 2.0, 3.0]), np.array([2.0, 0.0, 9.0]))],
)
op(
    "numpy.nonzero",
    lambda x: bnp.nonzero(x, size=x.size),
    lambda x: _np_nonzero(x),
    lambda rng: (np.round(uniform()(rng, (5,))),),
    grad=False,
    skip={"vmap": "size-fixed output; vmap covered by test_numpy_indexing"},
)


def _np_nonzero(x):
    (i,) = np.nonzero(x)
    return (np.concatenate([i, np.zeros(x.size - i.size, i.dtype)]),)


# ---- creation (no array input to differentiate) ------------------------------------------------

_C = {
    "arange": (lambda: bnp.arange(1, 7, 2), lambda: np.arange(1, 7, 2)),
    "linspace": (lambda: bnp.linspace(0.0, 1.0, 5), lambda: np.linspace(0.0, 1.0, 5)),
    "logspace": (lambda: bnp.logspace(0.0, 1.0, 4), lambda: np.logspace(0.0, 1.0, 4)),
    "zeros": (lambda: bnp.zeros((2, 0, 1)), lambda: np.zeros((2, 0, 1))),
    "ones": (lambda: bnp.ones((2, 3)), lambda: np.ones((2, 3))),
    "empty": (lambda: bnp.empty((2, 3)) * 0, lambda: np.zeros((2, 3))),
    "full": (lambda: bnp.full((2, 1), 7.0), lambda: np.full((2, 1), 7.0)),
    "eye": (lambda: bnp.eye(3, 4, k=1), lambda: np.eye(3, 4, k=1)),
    "identity": (lambda: bnp.identity(3), lambda: np.identity(3)),
    "tri": (lambda: bnp.tri(3, 4, k=-1), lambda: np.tri(3, 4, k=-1)),
    "meshgrid": (
        lambda: bnp.meshgrid(bnp.arange(3), bnp.arange(2)),
        lambda: np.meshgrid(np.arange(3), np.arange(2)),
    ),
}
for _n, (_f, _ref) in _C.items():
    op(
        f"numpy.{_n}",
        _f,
        _ref,
        lambda rng: (),
        grad=False,
        skip={"vmap": "no array argument", "jit": "no array argument"},
    )
