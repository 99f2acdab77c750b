"""OpInfo entries: the window functions (bartlett, blackman, hamming, hanning, kaiser), i0, and
the polynomial helpers (polyval, polyadd, polysub, polymul, polyder, polyint, polydiv, polyfit,
poly, roots), gradient and unwrap."""

from __future__ import annotations

import numpy as np

import blu.numpy as bnp
from ops.base import away, nonempty_shape, op, rand_shape, unary_sampler, uniform

for _n in ("bartlett", "blackman", "hamming", "hanning"):
    for _m in (0, 1, 6):
        op(
            f"numpy.{_n}[M={_m}]",
            lambda _n=_n, _m=_m: getattr(bnp, _n)(_m),
            lambda _n=_n, _m=_m: getattr(np, _n)(_m),
            lambda rng: (),
            covers=[f"numpy.{_n}"],
            grad=False,
            skip={"vmap": "no array argument", "jit": "no array argument"},
        )

op(
    "numpy.kaiser",
    lambda beta: bnp.kaiser(7, beta),
    lambda beta: np.kaiser(7, float(beta)),
    lambda rng: (rng.uniform(0.5, 6.0, ()),),
    special=[(np.array(0.0),)],
    skip={
        "grad": "computed in the default float (float32) as JAX's, too coarse for float64 finite "
        "differences: test_numpy_windows checks d/dbeta against numpy's"
    },
)
op(
    "numpy.i0",
    bnp.i0,
    np.i0,
    unary_sampler(uniform(-5.0, 5.0)),
    special=[(np.array([0.0, -0.0, 1e-8, -20.0, 20.0]),)],
    finite_grad_at_special=True,
)


# ---- polynomials -------------------------------------------------------------------------------


def _coefs(rng, lo=0):
    return rng.uniform(-2.0, 2.0, int(rng.integers(lo, 6)))


def _np_conv(a, b):
    a = a if a.size else np.zeros(1)
    b = b if b.size else np.zeros(1)
    return np.convolve(a, b)


def _pad_front(r, n):
    return np.concatenate([np.zeros(n - r.size), r])


op(
    "numpy.polyval",
    bnp.polyval,
    np.polyval,
    lambda rng: (_coefs(rng), rng.uniform(-2.0, 2.0, rand_shape(rng))),
    special=[(np.zeros(0), np.array([1.0, 2.0])), (np.array([0.0, 0.0, 3.0]), np.array(0.0))],
)
op("numpy.polyadd", bnp.polyadd, np.polyadd, lambda rng: (_coefs(rng), _coefs(rng)),
   special=[(np.array([0.0, 0.0, 1.0]), np.array([2.0]))])  # fmt: skip
op("numpy.polysub", bnp.polysub, np.polysub, lambda rng: (_coefs(rng), _coefs(rng)),
   special=[(np.array([0.0, 1.0]), np.zeros(0))])  # fmt: skip
op("numpy.polymul", bnp.polymul, _np_conv, lambda rng: (_coefs(rng), _coefs(rng)),
   special=[(np.array([0.0, 0.0, 1.0]), np.array([0.0, 2.0]))])  # fmt: skip
op(
    "numpy.polyder",
    lambda p, m=1: bnp.polyder(p, m),
    lambda p, m=1: np.polyder(p, m) if m < p.size else p[:0],
    lambda rng: (_coefs(rng, 1),),
    kwargs=[{"m": 2}],
)
op(
    "numpy.polyint",
    lambda p, k, m=1: bnp.polyint(p, m, k),
    lambda p, k, m=1: np.polyint(p, m, np.broadcast_to(k, (m,))),
    lambda rng: (_coefs(rng, 1), rng.uniform(-2.0, 2.0, ())),
    kwargs=[{"m": 2}],
)
op(
    "numpy.polydiv",
    bnp.polydiv,
    lambda u, v: (np.polydiv(u, v)[0], _pad_front(np.polydiv(u, v)[1], u.size)),
    lambda rng: (_coefs(rng, 3), away(-2.0, 2.0, 0.0, 0.5)(rng, int(rng.integers(1, 3)))),
    skip={"value": "numpy trims the remainder's leading zeros by tolerance: test_numpy_poly"},
)
op(
    "numpy.polyfit",
    lambda x, y, deg=2: bnp.polyfit(x, y, deg),
    lambda x, y, deg=2: np.polyfit(x, y, deg),
    lambda rng: (
        np.linspace(-1.0, 1.0, 6) + rng.uniform(-0.05, 0.05, 6),
        rng.uniform(-2.0, 2.0, (6,) + (() if rng.random() < 0.5 else (2,))),
    ),  # fmt: skip
    kwargs=[{"deg": 1}],
    n_ops=50,
)
op(
    "numpy.poly",
    bnp.poly,
    np.poly,
    lambda rng: (_coefs(rng),),
    special=[(np.zeros(0),), (np.array([0.0, 0.0]),)],
)
op(
    "numpy.roots",
    bnp.roots,
    lambda p: np.sort_complex(np.roots(p)),
    lambda rng: (np.concatenate([[1.0], rng.uniform(-2.0, 2.0, int(rng.integers(0, 4)))]),),
    grad=False,
    skip={
        "value": "unordered eigenvalues, and strip_zeros needs concrete input (jit, vmap): "
        "test_numpy_poly sorts them",
        "jit": "strip_zeros needs a concrete p",
        "vmap": "strip_zeros needs a concrete p",
    },
)


# ---- finite differences ------------------------------------------------------------------------


def _gradient_sample(rng):
    shape = tuple(max(s, 2) for s in nonempty_shape(rng))
    return uniform()(rng, shape), float(rng.uniform(0.5, 2.0))


op(
    "numpy.gradient",
    lambda f, h, axis=None: bnp.gradient(f, h, axis=axis),
    lambda f, h, axis=None: np.gradient(f, h, axis=axis),
    _gradient_sample,
    special=[(np.array([[0.0, 1.0, 4.0], [2.0, -1.0, 3.0]]), 0.5)],
    kwargs=[{"axis": -1}],
)
op(
    "numpy.unwrap",
    lambda p, axis=-1, period=2 * np.pi: bnp.unwrap(p, axis=axis, period=period),
    lambda p, axis=-1, period=2 * np.pi: np.unwrap(p, axis=axis, period=period),
    lambda rng: (rng.uniform(-8.0, 8.0, nonempty_shape(rng)),),
    special=[(np.array([[0.0, 4.0, -3.0, 2.9], [5.0, -2.0, 6.0, 0.1]]),)],
    kwargs=[{"axis": 0}, {"period": 5.0}],
)
