"""OpInfo entries: blu.lax (and through it the primitives of docs/primitives.md)."""

from __future__ import annotations

import dataclasses  # noqa: F401
import math  # noqa: F401
from collections.abc import Callable, Sequence  # noqa: F401
from typing import Any  # noqa: F401

import numpy as np
import scipy.linalg
import scipy.special

import blu.numpy as bnp
from blu import lax
from ops.arrays import _mm_sampler, _np_take  # noqa: F401
from ops.base import (
    away,
    ints,
    nonempty_shape,
    op,
    rand_shape,
    unary_sampler,
    uniform,
)

# ---- lax (and through it every primitive) -------------------------------------------------------

_LU = {  # lax name -> (reference, values, differentiable, special)
    "abs": (np.abs, away(-2, 2), True, [0.0]),
    "acos": (np.arccos, uniform(-0.9, 0.9), True, [1.0]),
    "acosh": (np.arccosh, uniform(1.2, 3), True, [1.0]),
    "asin": (np.arcsin, uniform(-0.9, 0.9), True, [1.0]),
    "asinh": (np.arcsinh, uniform(), True, [0.0]),
    "atan": (np.arctan, uniform(), True, [np.inf]),
    "atanh": (np.arctanh, uniform(-0.9, 0.9), True, [1.0]),
    "cbrt": (np.cbrt, away(-2, 2), True, [0.0]),
    "ceil": (np.ceil, uniform(), False, [0.5]),
    "cos": (np.cos, uniform(), True, [0.0]),
    "cosh": (np.cosh, uniform(), True, [0.0]),
    "digamma": (scipy.special.digamma, uniform(0.3, 3), True, [1.0]),
    "erf": (scipy.special.erf, uniform(), True, [0.0, np.inf]),
    "erf_inv": (scipy.special.erfinv, uniform(-0.9, 0.9), True, [0.0, 1.0]),
    "erfc": (scipy.special.erfc, uniform(), True, [0.0]),
    "exp": (np.exp, uniform(), True, [-np.inf]),
    "exp2": (np.exp2, uniform(), True, [0.0]),
    "expm1": (np.expm1, uniform(), True, [0.0]),
    "floor": (np.floor, uniform(), False, [0.5]),
    "is_finite": (np.isfinite, uniform(), False, [np.inf, np.nan]),
    "lgamma": (scipy.special.gammaln, uniform(0.3, 3), True, [1.0, 2.0]),
    "log": (np.log, uniform(0.2, 3), True, [0.0]),
    "log1p": (np.log1p, uniform(-0.5, 2), True, [0.0]),
    "logistic": (scipy.special.expit, uniform(), True, [0.0, -800.0]),
    "neg": (np.negative, uniform(), True, [0.0]),
    "round": (lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5), uniform(), False, [0.5, -0.5, 2.5]),
    "rsqrt": (lambda x: 1 / np.sqrt(x), uniform(0.2, 3), True, [1.0]),
    "sign": (np.sign, uniform(), False, [0.0]),
    "sin": (np.sin, uniform(), True, [0.0]),
    "sinh": (np.sinh, uniform(), True, [0.0]),
    "sqrt": (np.sqrt, uniform(0.2, 3), True, [0.0]),
    "square": (np.square, uniform(), True, [0.0]),
    "tan": (np.tan, uniform(-1.2, 1.2), True, [0.0]),
    "tanh": (np.tanh, uniform(), True, [0.0]),
    "stop_gradient": (lambda x: x, uniform(), False, [0.0]),
    "optimization_barrier": (lambda x: x, uniform(), True, [0.0]),
}
for _n, (_ref, _vals, _d, _sp) in _LU.items():
    op(
        f"lax.{_n}",
        getattr(lax, _n),
        _ref,
        unary_sampler(_vals),
        covers=(f"lax.{_n}", f"prim:{_n}"),
        special=[(np.array(_sp),)],
        grad=_d,
    )

_LB = {
    "add": (np.add, uniform(), uniform(), True),
    "sub": (np.subtract, uniform(), uniform(), True),
    "mul": (np.multiply, uniform(), uniform(), True),
    "div": (np.divide, uniform(), away(-2, 2, gap=0.3), True),
    "rem": (np.fmod, uniform(), away(0.5, 2, gap=0.2), False),
    "pow": (np.power, uniform(0.2, 2), uniform(), True),
    "atan2": (np.arctan2, uniform(), away(-2, 2), True),
    "max": (np.maximum, uniform(), uniform(), True),
    "min": (np.minimum, uniform(), uniform(), True),
    "eq": (np.equal, uniform(), uniform(), False),
    "ne": (np.not_equal, uniform(), uniform(), False),
    "lt": (np.less, uniform(), uniform(), False),
    "le": (np.less_equal, uniform(), uniform(), False),
    "gt": (np.greater, uniform(), uniform(), False),
    "ge": (np.greater_equal, uniform(), uniform(), False),
}
for _n, (_ref, _vx, _vy, _d) in _LB.items():
    op(
        f"lax.{_n}",
        getattr(lax, _n),
        _ref,
        lambda rng, vx=_vx, vy=_vy: (lambda s: (vx(rng, s), vy(rng, s)))(rand_shape(rng)),
        covers=(f"lax.{_n}", f"prim:{_n}"),
        grad=_d,
        special=[(np.array([0.0, 1.0, 0.0]), np.array([0.0, 1.0, 2.0]))],
    )

_LBITS = {
    "and_": ("and", np.bitwise_and),
    "or_": ("or", np.bitwise_or),
    "xor": ("xor", np.bitwise_xor),
    "shift_left": ("shift_left", np.left_shift),
    "shift_right_arithmetic": ("shift_right_arithmetic", np.right_shift),
    "shift_right_logical": (
        "shift_right_logical",
        lambda x, y: (x.view(np.uint32) >> y.astype(np.uint32)).view(np.int32),
    ),
}
for _n, (_p, _ref) in _LBITS.items():
    op(
        f"lax.{_n}",
        getattr(lax, _n),
        _ref,
        lambda rng: (ints(rng, (6,), -100, 100), ints(rng, (6,), 0, 31)),
        covers=(f"lax.{_n}", f"prim:{_p}"),
        grad=False,
    )
op(
    "lax.not_",
    lax.not_,
    np.invert,
    lambda rng: (ints(rng, (4,)),),
    covers=("lax.not_", "prim:not"),
    grad=False,
)
op(
    "lax.population_count",
    lax.population_count,
    lambda x: np.array([bin(int(v) & 0xFFFFFFFF).count("1") for v in x.ravel()], np.int32),
    lambda rng: (ints(rng, (5,), -100, 100),),
    covers=("lax.population_count", "prim:population_count"),
    grad=False,
)
op(
    "lax.clz",
    lax.clz,
    lambda x: np.array([32 - (int(v) & 0xFFFFFFFF).bit_length() for v in x.ravel()], np.int32),
    lambda rng: (ints(rng, (5,), -100, 100),),
    covers=("lax.clz", "prim:clz"),
    grad=False,
)
op(
    "lax.bitcast_convert_type",
    lambda x: lax.bitcast_convert_type(x, np.int64),
    lambda x: x.view(np.int64),
    unary_sampler(),
    grad=False,
    covers=("lax.bitcast_convert_type", "prim:bitcast_convert_type"),
)
op(
    "lax.convert_element_type",
    lambda x: lax.convert_element_type(x, np.float32),
    lambda x: x.astype(np.float32),
    unary_sampler(),
    skip={"grad": "float32 output: central differences in float32 are too coarse"},
    covers=("lax.convert_element_type", "prim:convert_element_type"),
)
op(
    "lax.integer_pow",
    lambda x: lax.integer_pow(x, 3),
    lambda x: x**3,
    unary_sampler(),
    covers=("lax.integer_pow", "prim:integer_pow"),
    special=[(np.array([0.0]),)],
    finite_grad_at_special=True,
)
op(
    "lax.integer_pow0",
    lambda x: lax.integer_pow(x, 0),
    lambda x: x**0,
    unary_sampler(),
    covers=("lax.integer_pow",),
    special=[(np.array([0.0]),)],
    finite_grad_at_special=True,
)
op(
    "lax.polygamma",
    lambda x: lax.polygamma(1, x),
    lambda x: scipy.special.polygamma(1, x),
    unary_sampler(uniform(0.5, 3)),
    covers=("lax.polygamma", "prim:polygamma"),
    n_ops=30,
)
op(
    "lax.select",
    lax.select,
    np.where,
    lambda rng: (lambda s: (rng.random(s) < 0.5, uniform()(rng, s), uniform()(rng, s)))(
        rand_shape(rng)
    ),
    covers=("lax.select", "prim:select"),
    diff_args=(1, 2),
)

_LRED = {
    "reduce_sum": np.sum,
    "reduce_prod": np.prod,
    "reduce_max": np.max,
    "reduce_min": np.min,
    "argmax": None,
    "argmin": None,
}
for _n, _ref in _LRED.items():
    if _ref is None:
        op(
            f"lax.{_n}",
            (lambda f: lambda x: f(x, 0))(getattr(lax, _n)),
            (lambda f: lambda x: f(x, 0))(getattr(np, _n)),
            lambda rng: (uniform()(rng, nonempty_shape(rng)),),
            covers=(f"lax.{_n}", f"prim:{_n}"),
            grad=False,
        )
    else:
        op(
            f"lax.{_n}",
            (lambda f: lambda x: f(x, 0))(getattr(lax, _n)),
            (lambda f: lambda x: f(x, 0))(_ref),
            lambda rng: (uniform()(rng, nonempty_shape(rng)),),
            covers=(f"lax.{_n}", f"prim:{_n}"),
            special=[(np.array([0.0, 0.0, 2.0]),), (np.array([1.0, 1.0]),)],
        )
for _n in ("reduce_and", "reduce_or"):
    op(
        f"lax.{_n}",
        (lambda f: lambda x: f(x, 0))(getattr(lax, _n)),
        (lambda f: lambda x: f(x, 0))(np.all if _n == "reduce_and" else np.any),
        lambda rng: (rng.random(nonempty_shape(rng)) < 0.5,),
        covers=(f"lax.{_n}", f"prim:{_n}"),
        grad=False,
    )
for _n in ("cumsum", "cumprod", "cummax", "cummin"):
    _npf = {
        "cumsum": np.cumsum,
        "cumprod": np.cumprod,
        "cummax": np.maximum.accumulate,
        "cummin": np.minimum.accumulate,
    }[_n]
    op(
        f"lax.{_n}",
        (lambda f: lambda x, **kw: f(x, 0, **kw))(getattr(lax, _n)),
        (lambda f: lambda x, reverse=False: f(x[::-1], 0)[::-1] if reverse else f(x, 0))(_npf),
        lambda rng: (uniform()(rng, nonempty_shape(rng, 1, 2, 5)),),
        covers=(f"lax.{_n}", f"prim:{_n}")
        + (("prim:cumulative_argextremum",) if _n == "cummax" else ()),
        kwargs=[{"reverse": True}],
        special=[(np.array([0.0, 0.0, 2.0, 2.0]),)],
        n_ops=8,
    )

_LSH = {
    "reshape": (lambda x: lax.reshape(x, (x.size,)), lambda x: x.reshape(-1), "reshape"),
    "transpose": (lambda x: lax.transpose(x, (1, 0)), lambda x: x.T, "transpose"),
    "rev": (lambda x: lax.rev(x, (0,)), lambda x: x[::-1], "rev"),
    "squeeze": (lambda x: lax.squeeze(lax.expand_dims(x, 0), 0), lambda x: x, "squeeze"),
    "expand_dims": (lambda x: lax.expand_dims(x, 1), lambda x: np.expand_dims(x, 1), None),
    "broadcast": (
        lambda x: lax.broadcast(x, (2,)),
        lambda x: np.broadcast_to(x, (2,) + x.shape),
        None,
    ),
    "broadcast_in_dim": (
        lambda x: lax.broadcast_in_dim(x, (3,) + x.shape, (1, 2)),
        lambda x: np.broadcast_to(x, (3,) + x.shape),
        "broadcast_in_dim",
    ),
    "pad": (lambda x: lax.pad(x, -1.0, [(1, -1, 1), (0, 2, 0)]), lambda x: _lax_pad(x), "pad"),
    "slice": (
        lambda x: lax.slice(x, (0, 0), (x.shape[0], x.shape[1]), (2, 1)),
        lambda x: x[::2],
        "slice",
    ),
    "slice_in_dim": (lambda x: lax.slice_in_dim(x, 0, 1, axis=1), lambda x: x[:, :1], None),
    "index_in_dim": (
        lambda x: lax.index_in_dim(x, 0, axis=1, keepdims=False),
        lambda x: x[:, 0],
        None,
    ),
    "concatenate": (
        lambda x: lax.concatenate([x, x], 1),
        lambda x: np.concatenate([x, x], 1),
        "concatenate",
    ),
    "dynamic_slice": (
        lambda x: lax.dynamic_slice(x, (bnp.asarray(5), 0), (1, 1)),
        lambda x: x[-1:, :1],
        "dynamic_slice",
    ),
    "dynamic_slice_in_dim": (
        lambda x: lax.dynamic_slice_in_dim(x, bnp.asarray(0), 1, axis=1),
        lambda x: x[:, :1],
        None,
    ),
    "dynamic_index_in_dim": (
        lambda x: lax.dynamic_index_in_dim(x, bnp.asarray(0), 1, False),
        lambda x: x[:, 0],
        None,
    ),
    "dynamic_update_slice": (
        lambda x: lax.dynamic_update_slice(x, x[:1, :1] * 3, (bnp.asarray(9), 0)),
        lambda x: _dus(x),
        "dynamic_update_slice",
    ),
    "dynamic_update_slice_in_dim": (
        lambda x: lax.dynamic_update_slice_in_dim(x, x[:1] * 3, bnp.asarray(0), 0),
        lambda x: np.concatenate([x[:1] * 3, x[1:]]),
        None,
    ),
    "dynamic_update_index_in_dim": (
        lambda x: lax.dynamic_update_index_in_dim(x, x[0] * 3, bnp.asarray(0), 0),
        lambda x: np.concatenate([x[:1] * 3, x[1:]]),
        None,
    ),
    "full_like": (lambda x: lax.full_like(x, 2.0), lambda x: np.full_like(x, 2.0), None),
}


def _lax_pad(x):
    n0, n1 = x.shape
    out = np.full((2 * n0 - 1 + 0, n1 + 2), -1.0) if n0 else np.full((0, n1 + 2), -1.0)
    out[1::2][: max(n0 - 1, 0)] = -1.0
    inter = np.full((max(2 * n0 - 1, 0), n1), -1.0)
    inter[::2] = x
    out = np.concatenate([np.full((1, n1), -1.0), inter], 0)[:-1] if n0 else np.zeros((0, n1))
    return np.concatenate([out, np.full((out.shape[0], 2), -1.0)], 1)


def _dus(x):
    x = x.copy()
    x[-1:, :1] = x[-1:, :1] * 3 if False else x[:1, :1] * 3
    return x


for _n, (_f, _ref, _p) in _LSH.items():
    op(
        f"lax.{_n}",
        _f,
        _ref,
        lambda rng: (uniform()(rng, nonempty_shape(rng, 2, 2)),),
        covers=(f"lax.{_n}",) + ((f"prim:{_p}",) if _p else ()),
        grad=_n != "full_like",
    )
op(
    "lax.iota",
    lambda: lax.iota(np.int32, (2, 3), 1),
    lambda: np.broadcast_to(np.arange(3), (2, 3)),
    lambda rng: (),
    covers=("lax.iota", "prim:iota"),
    grad=False,
    skip={"vmap": "no array argument", "jit": "no array argument"},
)
op(
    "lax.full",
    lambda: lax.full((2, 0), 1.0),
    lambda: np.full((2, 0), 1.0),
    lambda rng: (),
    grad=False,
    skip={"vmap": "no array argument", "jit": "no array argument"},
)


def _gather_sampler(rng):
    x = uniform()(rng, nonempty_shape(rng, 2, 2))
    i = rng.integers(-1, x.shape[0] + 1, (int(rng.integers(0, 5)), 1))
    return x, i


op(
    "lax.gather",
    lambda x, i, **kw: lax.gather(x, i, axes=(0,), **kw),
    lambda x, i, mode="clip": _lax_gather_ref(x, i[:, 0], mode),
    _gather_sampler,
    covers=("lax.gather", "prim:gather"),
    diff_args=(0,),
    kwargs=[{"mode": "fill"}],
    special=[(np.arange(6.0).reshape(3, 2), np.array([[0], [0], [5], [-1]]))],
)


def _lax_gather_ref(x, i, mode):
    """lax-level: no negative-index normalization; 'clip' clamps, 'fill' reads 0."""
    n = x.shape[0]
    out = x[np.clip(i, 0, n - 1)]
    if mode == "fill":
        out = np.where(((i < 0) | (i >= n))[:, None], 0.0, out)
    return out


def _np_scatter(acc):
    def ref(x, i, u, mode="drop"):
        x = np.array(x, np.float64)
        i = i[:, 0]
        if mode == "clip":
            i = np.clip(i, 0, x.shape[0] - 1)
        keep = (i >= 0) & (i < x.shape[0])
        if acc:
            np.add.at(x, i[keep], u[keep])
        else:
            x[i[keep]] = u[keep]
        return x

    return ref


def _scatter_sampler(rng):
    x, i = _gather_sampler(rng)
    return x, i, uniform()(rng, (i.shape[0],) + x.shape[1:])


_SC_SPECIAL = [(np.zeros((3, 2)), np.array([[1], [1], [5], [-1]]), np.arange(8.0).reshape(4, 2))]
op(
    "lax.scatter",
    lambda x, i, u, **kw: lax.scatter(x, i, u, axes=(0,), **kw),
    _np_scatter(False),
    _scatter_sampler,
    covers=("lax.scatter", "prim:scatter"),
    diff_args=(0, 2),
    kwargs=[{"mode": "clip"}],
    special=_SC_SPECIAL,
)
op(
    "lax.scatter_add",
    lambda x, i, u, **kw: lax.scatter_add(x, i, u, axes=(0,), **kw),
    _np_scatter(True),
    _scatter_sampler,
    covers=("lax.scatter_add", "prim:scatter_add"),
    diff_args=(0, 2),
    kwargs=[{"mode": "clip"}],
    special=_SC_SPECIAL,
)
op(
    "lax.dot_general",
    lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ()))),
    lambda a, b: a @ b,
    lambda rng: tuple(a[0] if a.ndim > 2 else a for a in _mm_sampler(rng)),
    covers=("lax.dot_general", "prim:dot_general"),
    n_ops=8,
)
op(
    "lax.dot",
    lax.dot,
    np.dot,
    lambda rng: tuple(a[0] if a.ndim > 2 else a for a in _mm_sampler(rng)),
    n_ops=8,
)
op(
    "lax.batch_matmul",
    lax.batch_matmul,
    np.matmul,
    lambda rng: (rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 1))),
    n_ops=8,
)
op(
    "lax.sort",
    lambda x: lax.sort(x, 0),
    lambda x: np.sort(x, 0),
    lambda rng: (uniform()(rng, nonempty_shape(rng)),),
    covers=("lax.sort", "prim:sort"),
    special=[(np.array([1.0, 1.0, 0.0]),)],
)
op(
    "lax.sort_key_val",
    lambda k, v: lax.sort_key_val(k, v, 0),
    lambda k, v: (np.sort(k, 0, kind="stable"), v[np.argsort(k, 0, kind="stable")]),
    lambda rng: (uniform()(rng, (5,)), uniform()(rng, (5,))),
    diff_args=(1,),
)
op(
    "lax.top_k",
    lambda x: lax.top_k(x, 2),
    lambda x: _top_k(x, 2),
    lambda rng: (uniform()(rng, (int(rng.integers(2, 6)),)),),
    covers=("lax.top_k", "prim:top_k"),
)


def _top_k(x, k):
    i = np.argsort(-x, kind="stable")[:k]
    return x[i], i


op(
    "lax.take_along_axis_prim",
    lambda x, i: bnp.take_along_axis(x, i, axis=1),
    lambda x, i: np.take_along_axis(x, i, 1),
    lambda rng: (uniform()(rng, (2, 4)), rng.integers(0, 4, (2, 3))),
    covers=("prim:take_along_axis", "prim:scatter_add_along_axis"),
    diff_args=(0,),
)

# control flow
op(
    "lax.cond",
    lambda p, x: lax.cond(p, lambda x: bnp.log(x), lambda x: x * 2, x),
    lambda p, x: np.log(x) if p else x * 2,
    lambda rng: (np.bool_(rng.random() < 0.5), uniform(0.2, 2)(rng, (3,))),
    covers=("lax.cond", "prim:cond"),
    diff_args=(1,),
    special=[(np.bool_(False), np.array([0.0, -1.0]))],
    finite_grad_at_special=True,
)
op(
    "lax.switch",
    lambda i, x: lax.switch(i, [bnp.sqrt, lambda x: x * 2, bnp.sin], x),
    lambda i, x: [np.sqrt, lambda x: x * 2, np.sin][int(np.clip(i, 0, 2))](x),
    lambda rng: (np.int32(rng.integers(0, 3)), uniform(0.2, 2)(rng, (3,))),
    diff_args=(1,),
    special=[(np.int32(1), np.array([0.0, -1.0]))],
    finite_grad_at_special=True,
)
op(
    "lax.while_loop",
    lambda x: lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 1.5), (0, x))[1],
    lambda x: x * 1.5**3,
    unary_sampler(),
    covers=("lax.while_loop", "prim:while"),
    skip={"grad": "reverse mode of while_loop is not defined (forward only, as JAX)"},
)
op(
    "lax.fori_loop",
    lambda x: lax.fori_loop(0, 3, lambda i, c: c * bnp.sin(c), x),
    lambda x: _fori(x),
    unary_sampler(),
    n_ops=6,
)


def _fori(x):
    for _ in range(3):
        x = x * np.sin(x)
    return x


op(
    "lax.scan",
    lambda c, xs: lax.scan(lambda c, x: (c * x, c + x), c, xs),
    lambda c, xs: _scan_ref(c, xs),
    lambda rng: (uniform()(rng, ()), uniform()(rng, (int(rng.integers(0, 4)),))),
    covers=("lax.scan", "prim:scan"),
    special=[(np.array(0.0), np.array([0.0, 0.0, 2.0]))],
    n_ops=6,
)


def _scan_ref(c, xs):
    ys = []
    for x in xs:
        c, y = c * x, c + x
        ys.append(y)
    return c, np.array(ys)


op(
    "lax.map",
    lambda xs: lax.map(bnp.sin, xs),
    np.sin,
    lambda rng: (uniform()(rng, nonempty_shape(rng)),),
)


def _gamma_sample_da_quad(a, x):
    """dx/da = -(dP/da) / (dP/dx) with dP/da from quadrature: ``int_0^x t^(a-1) log t e^-t dt``
    (an independent reference for lax.random_gamma_grad; its kernel uses series)."""
    import scipy.integrate

    out = np.zeros(np.shape(a))
    for i in np.ndindex(np.shape(a)):
        ai, xi = float(a[i]), float(x[i])
        dgam = scipy.integrate.quad(
            lambda t: t ** (ai - 1) * np.log(t) * np.exp(-t), 0, xi, epsabs=0, epsrel=1e-12,
            limit=200,
        )[0]  # fmt: skip
        gam = scipy.special.gammainc(ai, xi) * scipy.special.gamma(ai)
        out[i] = -(dgam - gam * scipy.special.digamma(ai)) / (xi ** (ai - 1) * np.exp(-xi))
    return out


def _gamma_pair(rng):
    shape = rand_shape(rng, max_dims=2)
    a = uniform(0.5, 5.0)(rng, shape)
    return a, scipy.special.gammaincinv(a, uniform(0.05, 0.95)(rng, shape))


op(
    "lax.random_gamma_grad",
    lax.random_gamma_grad,
    _gamma_sample_da_quad,
    _gamma_pair,
    covers=("lax.random_gamma_grad", "prim:random_gamma_grad"),
    grad=False,  # a first derivative itself (tests/lax/test_random_gamma_grad.py)
    n_ops=1000,  # the reference's quadrature, not the kernel, sets the tolerance (1.4e-11)
)
