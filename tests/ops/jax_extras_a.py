"""OpInfo entries of the JAX-surface names added in session 10 (part a): blu.lax's bitwise
spellings, clamp, collapse, reciprocal, select_n, broadcasted_iota, and pure_callback."""

from __future__ import annotations

import numpy as np

import blu
from blu import lax
from ops.base import (
    away,
    ints,
    nonempty_shape,
    op,
    rand_shape,
    unary_sampler,
    uniform,
)


def _int_pair(rng):
    a = b = rand_shape(rng)  # lax's binary operations take equal shapes
    dt = rng.choice([np.int8, np.int32, np.uint16, np.int64])
    return ints(rng, a, 0 if dt == np.uint16 else -50, 50, dt), ints(
        rng, b, 0 if dt == np.uint16 else -50, 50, dt
    )


_BOOLS = (np.array([True, True, False, False]), np.array([True, False, True, False]))
for _n, _ref in (
    ("bitwise_and", np.bitwise_and),
    ("bitwise_or", np.bitwise_or),
    ("bitwise_xor", np.bitwise_xor),
):
    op(
        f"lax.{_n}",
        getattr(lax, _n),
        _ref,
        _int_pair,
        grad=False,
        special=[_BOOLS, (np.array([-1, 0, 127], np.int8), np.array([1, -128, -1], np.int8))],
    )
op(
    "lax.bitwise_not",
    lax.bitwise_not,
    np.invert,
    lambda rng: _int_pair(rng)[:1],
    grad=False,
    special=[(_BOOLS[0],), (np.array([0, 255], np.uint8),), (np.array([-128, 127], np.int8),)],
)


def _clamp_sampler(rng):
    shape = rand_shape(rng)
    if rng.random() < 0.5:  # scalar bounds
        return np.array(-0.5), uniform()(rng, shape), np.array(0.7)
    lo = uniform(-2.0, 0.0)(rng, shape)
    return lo, uniform()(rng, shape), lo + uniform(0.0, 2.0)(rng, shape)


op(
    "lax.clamp",
    lax.clamp,
    lambda lo, x, hi: np.minimum(np.maximum(x, lo), hi),
    _clamp_sampler,
    diff_args=(1,),  # the bounds' gradients are tested with max/min
    special=[
        (np.array(0.0), np.array([-np.inf, -0.0, 0.5, 2.0, np.inf, np.nan]), np.array(1.0)),
        (np.array(-1.0), np.array([[3.0, -3.0]]), np.array(-1.0)),  # an empty interval
    ],
)
op(
    "lax.reciprocal",
    lax.reciprocal,
    np.reciprocal,
    unary_sampler(away(-2.0, 2.0, 0.0, 0.3)),
    special=[(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-310]),)],
)


def _collapse_sampler(rng):
    shape = rand_shape(rng, 1, 4)
    start = int(rng.integers(0, len(shape)))
    stop = int(rng.integers(start + 1, len(shape) + 1))
    return uniform()(rng, shape), start, stop


def _np_collapse(x, start, stop=None):
    stop = x.ndim if stop is None else stop
    return (
        x.reshape(x.shape[:start] + (-1,) + x.shape[stop:])
        if x.size
        else x.reshape(x.shape[:start] + (int(np.prod(x.shape[start:stop])),) + x.shape[stop:])
    )


op(
    "lax.collapse",
    lax.collapse,
    _np_collapse,
    _collapse_sampler,
    special=[(np.zeros((2, 0, 3)), 0, 2), (np.ones((1, 1)), 0, 2)],
)


def _select_n_sampler(rng):
    shape = rand_shape(rng)
    n = int(rng.integers(1, 4))
    cases = tuple(uniform()(rng, shape) for _ in range(n))
    if n == 2 and rng.random() < 0.5:
        which = rng.random(shape) < 0.5
    else:
        which = rng.integers(0, n, shape).astype(np.int32)
        if rng.random() < 0.3:  # a scalar predicate
            which = np.array(int(rng.integers(0, n)), np.int32)
    return (which, *cases)


def _np_select_n(which, *cases):
    return np.choose(np.broadcast_to(which.astype(np.int64), cases[0].shape), cases)


op(
    "lax.select_n",
    lax.select_n,
    _np_select_n,
    _select_n_sampler,
    covers=("lax.select_n", "prim:select_n"),
    special=[
        (np.array([True, False, True]), np.array([1.0, np.nan, -np.inf]), np.array([2.0, 3, 4])),
        (np.array([2, 0, 1], np.uint8), np.zeros(3), np.ones(3), np.full(3, np.nan)),
    ],
)
op(
    "lax.broadcasted_iota",
    lambda dimension=1, shape=(2, 3): lax.broadcasted_iota(np.int32, shape, dimension),
    lambda dimension=1, shape=(2, 3): np.broadcast_to(
        np.arange(shape[dimension], dtype=np.int32).reshape(
            [-1 if i == dimension else 1 for i in range(len(shape))]
        ),
        shape,
    ),
    lambda rng: (),
    grad=False,
    kwargs=[{"dimension": 0}, {"shape": (4, 0, 2)}, {"shape": (1, 5), "dimension": 1}],
    skip={"vmap": "no array argument", "jit": "no array argument"},
)


def _host_sin(x):
    assert isinstance(x, np.ndarray)  # the callback sees numpy arrays, not tracers
    return np.sin(x)


def _pure_sin(x, vmap_method="sequential"):
    x = blu.numpy.asarray(x)
    return blu.pure_callback(_host_sin, blu.ShapeDtypeStruct(x.shape, x.dtype), x,
                             vmap_method=vmap_method)  # fmt: skip


op(
    "pure_callback",
    _pure_sin,
    lambda x, vmap_method=None: np.sin(x),
    lambda rng: (uniform()(rng, nonempty_shape(rng, 0)),),
    covers=("prim:pure_callback",),
    grad=False,  # JAX's rule: no derivative unless a custom_jvp gives one
    special=[(np.array([0.0, np.inf, np.nan]),)],
)
