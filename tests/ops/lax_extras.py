"""OpInfo entries: approx_max_k, approx_min_k, bessel_i0e, bessel_i1e, broadcast_to_rank,
cumlogsumexp, nextafter, reduce_precision, reduce_xor, split, zeta, igamma, igammac,
igamma_grad_a, betainc, custom_root, custom_linear_solve (blu.lax); log1mexp, logmeanexp
(blu.nn)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import scipy.special

import blu.nn as bnn
import blu.numpy as bnp
from blu import lax
from ops.base import ints, nonempty_shape, op, rand_shape, unary_sampler, uniform


def _row_sample(rng):
    return (uniform()(rng, (int(rng.integers(1, 3)), int(rng.integers(2, 6)))),)


def _np_k(x, k, largest):
    i = np.argsort(-x if largest else x, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, i, -1), i


op("lax.approx_max_k", lambda x: lax.approx_max_k(x, 2), lambda x: _np_k(x, 2, True),
   _row_sample, special=[(np.array([[0.0, 3.0, -1.0, 2.0]]),)])  # fmt: skip
op("lax.approx_min_k", lambda x: lax.approx_min_k(x, 2), lambda x: _np_k(x, 2, False),
   _row_sample, special=[(np.array([[0.0, 3.0, -1.0, 2.0]]),)])  # fmt: skip

for _n, _ref in (("bessel_i0e", scipy.special.i0e), ("bessel_i1e", scipy.special.i1e)):
    op(
        f"lax.{_n}",
        getattr(lax, _n),
        _ref,
        unary_sampler(uniform(-4, 4)),
        special=[(np.array([0.0, 30.0, -30.0, np.inf, -np.inf]),)],
        n_ops=8,
    )

op(
    "lax.broadcast_to_rank",
    lambda x: lax.broadcast_to_rank(x, 4),
    lambda x: x.reshape((1,) * (4 - x.ndim) + x.shape),
    unary_sampler(),
    special=[(np.array(2.0),)],
)


def _np_cumlse(x, reverse=False):
    if reverse:
        return np.logaddexp.accumulate(x[::-1], 0)[::-1]
    return np.logaddexp.accumulate(x, 0)


op(
    "lax.cumlogsumexp",
    lambda x, **kw: lax.cumlogsumexp(x, 0, **kw),
    _np_cumlse,
    lambda rng: (uniform()(rng, nonempty_shape(rng, 1, 2, 5)),),
    kwargs=[{"reverse": True}],
    special=[(np.array([-np.inf, -np.inf, 0.0, 800.0]),)],
    n_ops=8,
)


def _fd_a(f, a, *rest):
    """``df/da`` by central differences (relative step 1e-6) in float64."""
    h = 1e-6 * a
    return (f(a + h, *rest) - f(a - h, *rest)) / (2 * h)


def _same_shape_pair(vx, vy):
    def s(rng):
        shape = rand_shape(rng)
        return vx(rng, shape), vy(rng, shape)

    return s


op(
    "lax.nextafter",
    lax.nextafter,
    np.nextafter,
    _same_shape_pair(uniform(), uniform()),
    special=[(np.array([0.0, 1.0, 1.0, -0.0, np.inf]), np.array([1.0, 2.0, 1.0, -1.0, 0.0]))],
    grad=False,
)

_RP_DTYPES = {(8, 7): ml_dtypes.bfloat16, (5, 10): np.float16, (4, 3): ml_dtypes.float8_e4m3fn}


def _np_reduce_precision(x, exponent_bits=8, mantissa_bits=7):
    small = _RP_DTYPES[exponent_bits, mantissa_bits]
    return x.astype(small).astype(x.dtype)


op(
    "lax.reduce_precision",
    lambda x, exponent_bits=8, mantissa_bits=7: lax.reduce_precision(
        x, exponent_bits, mantissa_bits
    ),
    _np_reduce_precision,
    unary_sampler(),
    special=[(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1 + 2.0**-8, 1 + 3 * 2.0**-8]),)],
    kwargs=[{"exponent_bits": 5, "mantissa_bits": 10}],
    skip={
        "grad": "piecewise constant (its derivative is taken as the identity): central "
        "differences see the rounding steps"
    },
)

op(
    "lax.reduce_xor",
    lambda x: lax.reduce_xor(x, 0),
    lambda x: np.bitwise_xor.reduce(x, 0),
    lambda rng: (ints(rng, nonempty_shape(rng)),),
    special=[(np.array([1, 3, 7, -1], np.int32),)],
    grad=False,
)


def _split_sample(rng):
    shape = nonempty_shape(rng)
    ax = int(rng.integers(-len(shape), len(shape)))
    n = shape[ax]
    cut = int(rng.integers(0, n + 1))
    return uniform()(rng, shape), [cut, n - cut], ax


op(
    "lax.split",
    lax.split,
    lambda x, sizes, ax: np.split(x, np.cumsum(sizes)[:-1], ax),
    _split_sample,
)

op(
    "lax.zeta",
    lax.zeta,
    scipy.special.zeta,
    _same_shape_pair(uniform(1.5, 4), uniform(0.5, 3)),
    special=[(np.array([2.0, 4.0, 1.0]), np.array([1.0, 1.0, 1.0]))],
    diff_args=(1,),
    n_ops=16,
)

_GAMMA_EDGES = (
    np.array([2.0, 2.0, 0.5, -1.0, 2.0, 3.0]),
    np.array([0.0, np.inf, 1e-3, 1.0, -1.0, 30.0]),
)
for _n, _ref in (("igamma", scipy.special.gammainc), ("igammac", scipy.special.gammaincc)):
    op(
        f"lax.{_n}",
        getattr(lax, _n),
        lambda a, x, _ref=_ref: np.where(a > 0, _ref(a, x), np.nan),  # JAX's NaN at a <= 0
        _same_shape_pair(uniform(0.5, 5.0), uniform(0.1, 8.0)),
        special=[_GAMMA_EDGES],
        n_ops=32,
    )
op(
    "lax.igamma_grad_a",
    lax.igamma_grad_a,
    lambda a, x: _fd_a(scipy.special.gammainc, a, x),
    _same_shape_pair(uniform(0.5, 5.0), uniform(0.1, 8.0)),
    grad=False,  # a first derivative itself: forward mode through a while_loop (as JAX's)
    n_ops=2**14,  # the central differences of the reference (1e-6 relative steps) set it
)


def _same_shape_triple(rng):
    shape = rand_shape(rng)
    return (
        uniform(0.5, 5.0)(rng, shape),
        uniform(0.5, 5.0)(rng, shape),
        uniform(0.05, 0.95)(rng, shape),
    )


op(
    "lax.betainc",
    lax.betainc,
    lambda a, b, x: np.where((a > 0) & (b > 0), scipy.special.betainc(a, b, x), np.nan),
    _same_shape_triple,
    special=[
        (
            np.array([2.0, 2.0, 0.5, -1.0, 2.0, 3.0]),
            np.array([3.0, 3.0, 0.5, 1.0, 0.0, 40.0]),
            np.array([0.0, 1.0, 1e-3, 0.5, 0.5, 0.02]),
        )
    ],
    n_ops=32,
)

op(
    "nn.log1mexp",
    bnn.log1mexp,
    lambda x: np.log(-np.expm1(-x)),
    unary_sampler(uniform(0.1, 5)),
    special=[(np.array([0.0, np.log(2), 40.0, np.inf]),)],
    n_ops=4,
)


def _np_logmeanexp(x, axis=None, keepdims=False):
    n = x.size if axis is None else x.shape[axis]
    return scipy.special.logsumexp(x, axis=axis, keepdims=keepdims) - np.log(n)


op(
    "nn.logmeanexp",
    lambda x, **kw: bnn.logmeanexp(x, **kw),
    _np_logmeanexp,
    lambda rng: (uniform()(rng, nonempty_shape(rng, 2)),),
    special=[(np.array([-np.inf, 0.0]),), (np.array([[-np.inf, -np.inf], [0.0, 1.0]]),)],
    kwargs=[{"axis": -1}, {"axis": 0, "keepdims": True}],
    n_ops=8,
)


def _newton_sqrt(y):
    """sqrt(y) as the root of x*x - y by 30 Newton steps (a fori_loop) from 1."""
    solve = lambda f, x0: lax.fori_loop(0, 30, lambda i, x: x - f(x) / (2 * x), x0)  # noqa: E731
    return lax.custom_root(
        lambda x: x * x - y, bnp.ones_like(y), solve, lambda g, r: r / g(bnp.ones_like(r))
    )


op(
    "lax.custom_root",
    _newton_sqrt,
    np.sqrt,
    unary_sampler(uniform(0.25, 4.0)),
    n_ops=8,
)


def _dense_solve(a, b):
    return lax.custom_linear_solve(
        lambda x: a @ x,
        b,
        lambda _, r: bnp.linalg.solve(a, r),
        lambda _, r: bnp.linalg.solve(a.T, r),
    )


def _solve_sample(rng):
    n = int(rng.integers(1, 5))
    return rng.standard_normal((n, n)) + n * np.eye(n), rng.standard_normal(n)


op(
    "lax.custom_linear_solve",
    _dense_solve,
    np.linalg.solve,
    _solve_sample,
    covers=("lax.custom_linear_solve", "prim:custom_linear_solve"),
    n_ops=64,
)
