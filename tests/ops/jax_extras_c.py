"""OpInfo entries of the JAX-surface names added in session 10 (part c): blu.numpy's
statistics, sets, index helpers, nan-reductions and shape helpers."""

from __future__ import annotations

import numpy as np

import blu.numpy as bnp
from ops.base import (
    broadcast_pair,
    nonempty_shape,
    op,
    rand_shape,
    unary_sampler,
    uniform,
)

_NAN, _INF = np.nan, np.inf


def _small_ints(rng, shape):
    return rng.integers(-3, 4, shape).astype(np.float64)


def _pad(v, size, fill):
    return np.concatenate([v, np.full(size - v.size, fill, v.dtype)])


# ---- elementwise and products ------------------------------------------------------------------

op(
    "numpy.sinc",
    bnp.sinc,
    np.sinc,
    unary_sampler(uniform(-3.0, 3.0)),
    special=[(np.array([0.0, -0.0, 1.0, -2.0, 0.5, 1e-20]),)],
    finite_grad_at_special=True,  # sinc'(0) = 0
    n_ops=4,
)


def _vecmat_sampler(rng):
    a, b = broadcast_pair(rng)
    m, n = int(rng.integers(0, 4)), int(rng.integers(0, 4))
    return rng.standard_normal(a + (m,)), rng.standard_normal(b + (m, n))


op("numpy.vecmat", bnp.vecmat, np.vecmat, _vecmat_sampler, n_ops=4)


def _cross_sampler(rng):
    a, b = broadcast_pair(rng)
    return uniform()(rng, a + (3,)), uniform()(rng, b + (3,))


op(
    "numpy.cross",
    bnp.cross,
    np.cross,
    _cross_sampler,
    kwargs=[{"axisc": 0}],
    special=[
        (np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0])),
        (np.array([[1.0, 2.0, 3.0], [0.0, -1.0, _INF]]), np.array([2.0, 0.5, -1.0])),
    ],
    n_ops=2,
)
op(
    "numpy.cross:axis",
    lambda a, b, **kw: bnp.cross(a, b, **kw),
    lambda a, b, **kw: np.cross(a, b, **kw),
    lambda rng: (uniform()(rng, (3, 2)), uniform()(rng, (3, 2))),
    covers=("numpy.cross",),
    kwargs=[{"axis": 0}, {"axisa": 0, "axisb": 0, "axisc": 0}],
    skip={
        "value": "only the keywords apply to this shape (the last axis has 2 entries)",
        "grad": "covered by numpy.cross",
        "vmap": "covered by numpy.cross",
        "jit": "covered by numpy.cross",
    },  # fmt: skip
)

# ---- statistics --------------------------------------------------------------------------------


def _obs_sampler(rng):
    """variables x observations, at least two observations."""
    return (uniform()(rng, (int(rng.integers(1, 4)), int(rng.integers(2, 6)))),)


op(
    "numpy.cov",
    bnp.cov,
    np.cov,
    _obs_sampler,
    kwargs=[{"rowvar": False}, {"bias": True}, {"ddof": 0}],
    special=[(np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.5]]),), (np.array([1.0, 3.0, 2.0, 8.0]),)],
    n_ops=8,
)
op(
    "numpy.corrcoef",
    bnp.corrcoef,
    np.corrcoef,
    lambda rng: (uniform()(rng, (int(rng.integers(2, 4)), int(rng.integers(3, 6)))),),
    kwargs=[{"rowvar": False}],
    special=[(np.array([[1.0, 2.0, 3.0], [3.0, 1.0, 2.0]]),)],
    n_ops=16,
)


def _bincount_sampler(rng):
    shape = (int(rng.integers(0, 8)),)
    return rng.integers(0, 6, shape).astype(np.int32), uniform(0.5, 2.0)(rng, shape)


op(
    "numpy.bincount",
    lambda x, w, **kw: bnp.bincount(x, w, length=6, **kw),
    lambda x, w, **kw: np.bincount(x, w, minlength=6)[:6],
    _bincount_sampler,
    special=[(np.array([0, 0, 5, 5, 5], np.int32), np.array([1.0, -1.0, _INF, 2.0, 0.0]))],
)
op(
    "numpy.bincount:counts",
    lambda x, **kw: bnp.bincount(x, **kw),
    lambda x, **kw: np.bincount(x, **kw),
    lambda rng: (rng.integers(0, 5, (int(rng.integers(1, 8)),)).astype(np.int32),),
    covers=("numpy.bincount",),
    grad=False,
    kwargs=[{"minlength": 9}],
    skip={
        "jit": "the length comes from the values (length= under jit)",
        "vmap": "the length comes from the values (length= under vmap)",
    },  # fmt: skip
)


def _digitize_sampler(rng):
    bins = np.sort(_small_ints(rng, (int(rng.integers(1, 5)),)))
    return _small_ints(rng, rand_shape(rng)) + rng.choice([0.0, 0.5], 1), bins


op(
    "numpy.digitize",
    bnp.digitize,
    np.digitize,
    _digitize_sampler,
    grad=False,
    kwargs=[{"right": True}],
    special=[
        (np.array([-1.0, 0.0, 0.5, 1.0, 2.0, 3.0, _INF, -_INF]), np.array([0.0, 1.0, 1.0, 2.0])),
        (np.array([0.0, 1.0, 2.0]), np.array([2.0, 1.0, 0.0])),  # decreasing bins
    ],
)
op(
    "numpy.trapezoid",
    bnp.trapezoid,
    np.trapezoid,
    lambda rng: (uniform()(rng, nonempty_shape(rng, 1, 3)),),
    kwargs=[{"dx": 0.5}, {"axis": 0}],
    special=[(np.array([1.0, _INF]),), (np.array([[1.0], [2.0]]),), (np.array([[1.0, 3.0]]),)],
    n_ops=4,
)
op(
    "numpy.trapezoid:x",
    lambda y, x: bnp.trapezoid(y, x),
    lambda y, x: np.trapezoid(y, x),
    lambda rng: (lambda n: (uniform()(rng, (2, n)), np.cumsum(uniform(0.1, 1)(rng, (n,)))))(
        int(rng.integers(1, 6))
    ),
    covers=("numpy.trapezoid",),
    n_ops=4,
)


def _spread_axis_sampler(rng):
    """An array whose every side is >= 2 (a spread > 0 along any axis: std's derivative is
    infinite at a spread of 0) and an axis or None."""
    shape = tuple(s + 2 for s in rand_shape(rng, 1, 3, 2))
    axis = None if rng.random() < 0.3 else int(rng.integers(-len(shape), len(shape)))
    return uniform(0.5, 1.5)(rng, shape), axis


def _nan_reduction(name, **extra):
    f, ref = getattr(bnp, name), getattr(np, name)
    op(
        f"numpy.{name}",
        lambda x, axis, **kw: f(x, axis=axis, **kw),
        lambda x, axis, **kw: ref(x, axis=axis, **kw),
        _spread_axis_sampler,  # NaNs in the special points (check_grads hashes the inputs)
        kwargs=[{"keepdims": True}, *extra.pop("kwargs", [])],
        special=[
            (np.array([_NAN, 2.0, 0.5, _NAN, 3.0]), 0),
            (np.array([[_NAN, _NAN], [1.5, -2.0]]), 1),
            (np.array([[_NAN, 4.0], [1.5, _INF]]), None),
        ],
        n_ops=8,
        **extra,
    )


_nan_reduction("nanprod")
_nan_reduction("nanvar", kwargs=[{"ddof": 1}])
_nan_reduction("nanstd", kwargs=[{"ddof": 1}])
for _n in ("nanprod", "nanvar", "nanstd"):
    op(
        f"numpy.{_n}:nan",
        (lambda f: lambda x: f(x, axis=0))(getattr(bnp, _n)),
        (lambda f: lambda x: f(x, axis=0))(getattr(np, _n)),
        lambda rng: (
            np.array([[_NAN, 1.5], [-0.5, _NAN], [2.0, 1.0]]) * uniform(0.5, 1.5)(rng, (3, 2)),
        ),
        covers=(f"numpy.{_n}",),
        grad=False,  # finite differences through NaN inputs
        n_ops=8,
    )

# ---- sets --------------------------------------------------------------------------------------


def _np_unique(x, size, fill_value=None, **kw):
    out = np.unique(x, **kw)
    if not isinstance(out, tuple):
        return _pad(out, size, out.min() if fill_value is None else fill_value)
    vals, *rest = out
    # the padding's index is the smallest value's (JAX's); counts are 0
    pads = [r[0] if k == 0 and kw.get("return_index") else 0 for k, r in enumerate(rest)]
    return (_pad(vals, size, vals.min()), *(_pad(r, size, p) for r, p in zip(rest, pads)))


op(
    "numpy.unique",
    lambda x, **kw: bnp.unique(x, size=x.size, **kw),
    lambda x, **kw: _np_unique(x.ravel(), x.size, **kw),
    lambda rng: (_small_ints(rng, nonempty_shape(rng)),),
    grad=False,
    kwargs=[{"fill_value": -9.0}],
    special=[(np.array([3.0, 1.0, 3.0, -0.0, 0.0, 1.0]),), (np.array([[2.0, 2.0]]),)],
)
for _k in ("return_index", "return_inverse", "return_counts"):
    op(
        f"numpy.unique:{_k}",
        (lambda k: lambda x: bnp.unique(x, size=x.size, **{k: True})[1])(_k),
        (lambda k: lambda x: _np_unique(x.ravel(), x.size, **{k: True})[1].ravel())(_k),
        lambda rng: (_small_ints(rng, nonempty_shape(rng, 1, 1, 8)),),
        covers=("numpy.unique",),
        grad=False,
        special=[(np.array([3.0, 1.0, 3.0, -0.0, 0.0, 1.0]),)],
    )


def _set_op(name, fill_default):
    f, ref = getattr(bnp, name), getattr(np, name)

    def np_ref(a, b, fill_value=None):
        v = ref(a, b)
        if not v.size and fill_value is None:
            return None  # an empty result pads with a value JAX leaves unspecified
        fill = fill_default(v, a, b) if fill_value is None else fill_value
        return _pad(v, a.size + b.size, fill)

    op(
        f"numpy.{name}",
        lambda a, b, **kw: f(a, b, size=a.size + b.size, **kw),
        np_ref,
        lambda rng: (
            _small_ints(rng, nonempty_shape(rng, 1, 2)),
            _small_ints(rng, rand_shape(rng, 1, 2)),
        ),
        grad=False,
        kwargs=[{"fill_value": -7.0}],
        special=[
            (np.array([3.0, 1.0, 3.0, 2.0]), np.array([0.0, 3.0, 5.0])),
            (np.array([1.0, 1.0]), np.array([1.0])),
        ],
    )


_set_op("union1d", lambda v, a, b: v.min())
_set_op("setdiff1d", lambda v, a, b: v.min())
_set_op("setxor1d", lambda v, a, b: v.min())

# ---- index helpers -----------------------------------------------------------------------------


def _np_argwhere(x, fill_value=0):
    w = np.argwhere(x)
    return np.concatenate([w, np.full((x.size - len(w), x.ndim), fill_value, w.dtype)])


op(
    "numpy.argwhere",
    lambda x, **kw: bnp.argwhere(x, size=x.size, **kw),
    _np_argwhere,
    lambda rng: (np.round(uniform()(rng, rand_shape(rng, 1))),),
    grad=False,
    kwargs=[{"fill_value": -1}],
    special=[(np.array([[0.0, _NAN], [-0.0, 2.0]]),), (np.zeros((2, 2)),)],
)


def _multi_index_sampler(rng):
    shape = rand_shape(rng, 0, 2)
    return rng.integers(0, 3, shape).astype(np.int32), rng.integers(0, 4, shape).astype(np.int32)


op(
    "numpy.ravel_multi_index",
    lambda i, j, **kw: bnp.ravel_multi_index((i, j), (3, 4), **kw),
    lambda i, j, **kw: np.ravel_multi_index((i, j), (3, 4), **kw),
    _multi_index_sampler,
    grad=False,
    kwargs=[{"order": "F"}],
    special=[(np.array([0, 2], np.int32), np.array([3, 0], np.int32))],
)
op(
    "numpy.ravel_multi_index:clip",
    lambda i, j, **kw: bnp.ravel_multi_index((i, j), (3, 4), mode="clip", **kw),
    lambda i, j, **kw: np.ravel_multi_index((i, j), (3, 4), mode="clip", **kw),
    lambda rng: tuple(rng.integers(-5, 9, (4,)).astype(np.int32) for _ in range(2)),
    covers=("numpy.ravel_multi_index",),
    grad=False,
)
op(
    "numpy.unravel_index",
    lambda i: bnp.unravel_index(i, (3, 1, 4)),
    lambda i: np.unravel_index(i, (3, 1, 4)),
    lambda rng: (rng.integers(0, 12, rand_shape(rng, 0, 2)).astype(np.int32),),
    grad=False,
    special=[(np.array([0, 11, 4], np.int64),)],
)
for _n in ("tril_indices", "triu_indices"):
    op(
        f"numpy.{_n}",
        (lambda f: lambda **kw: f(4, **kw))(getattr(bnp, _n)),
        (lambda f: lambda **kw: f(4, **kw))(getattr(np, _n)),
        lambda rng: (),
        grad=False,
        kwargs=[{"k": 1}, {"k": -2}, {"k": 3, "m": 6}],
        skip={"vmap": "no array argument", "jit": "no array argument"},
    )

# ---- shapes and selection ----------------------------------------------------------------------

op(
    "numpy.diagflat",
    bnp.diagflat,
    np.diagflat,
    lambda rng: (uniform()(rng, rand_shape(rng)),),
    kwargs=[{"k": 1}, {"k": -2}],
)


def _rollaxis_sampler(rng):
    shape = rand_shape(rng, 1, 4)
    n = len(shape)
    return uniform()(rng, shape), int(rng.integers(-n, n)), int(rng.integers(-n, n + 1))


op("numpy.rollaxis", bnp.rollaxis, np.rollaxis, _rollaxis_sampler)


def _rot_sampler(rng):
    return (uniform()(rng, rand_shape(rng, 2, 3)),)


op(
    "numpy.rot90",
    bnp.rot90,
    np.rot90,
    _rot_sampler,
    kwargs=[{"k": 2}, {"k": -1}, {"axes": (1, 0)}],
    special=[(np.arange(6.0).reshape(2, 3),)],
)


def _ediff_sampler(rng):
    return (uniform()(rng, rand_shape(rng)),)


op(
    "numpy.ediff1d",
    bnp.ediff1d,
    np.ediff1d,
    _ediff_sampler,
    kwargs=[{"to_begin": np.array([9.0, 8.0])}, {"to_end": np.array(-1.0)}],
    special=[(np.array([1.0, _INF, _INF]),)],
)
op(
    "numpy.array_equiv",
    bnp.array_equiv,
    np.array_equiv,
    lambda rng: (lambda a, b: (_small_ints(rng, a) * 0, _small_ints(rng, b) * 0))(
        *broadcast_pair(rng)
    ),
    grad=False,
    special=[
        (np.array([1.0, 2.0]), np.array([[1.0, 2.0], [1.0, 2.0]])),
        (np.array([1.0, 2.0]), np.array([[1.0, 2.0], [1.0, 3.0]])),
        (np.array([1.0, 2.0]), np.array([1.0, 2.0, 3.0])),  # shapes that do not broadcast
        (np.array([_NAN]), np.array([_NAN])),
    ],
)


def _select_sampler(rng):
    shape = rand_shape(rng)
    c1, c2 = rng.random(shape) < 0.4, rng.random(shape) < 0.5
    return c1, c2, uniform()(rng, shape), uniform()(rng, shape)


op(
    "numpy.select",
    lambda c1, c2, a, b, **kw: bnp.select([c1, c2], [a, b], **kw),
    lambda c1, c2, a, b, **kw: np.select([c1, c2], [a, b], **kw),
    _select_sampler,
    kwargs=[{"default": -5.0}],
    special=[
        (
            np.array([True, True, False]),
            np.array([False, True, False]),
            np.ones(3),
            np.full(3, 2.0),
        ),
    ],
)


def _sumsq(v):
    return (v * v).sum()


op(
    "numpy.apply_along_axis",
    lambda x, axis: bnp.apply_along_axis(lambda v: bnp.stack([_sumsq(v), v[0]]), axis, x),
    lambda x, axis: np.apply_along_axis(lambda v: np.stack([_sumsq(v), v[0]]), axis, x),
    lambda rng: (lambda s: (uniform()(rng, s), int(rng.integers(-len(s), len(s)))))(
        nonempty_shape(rng)
    ),
    n_ops=4,
)
op(
    "numpy.vectorize",
    lambda a, b: bnp.vectorize(lambda x, y: x * y + 1.0)(a, b),
    lambda a, b: np.vectorize(lambda x, y: x * y + 1.0, otypes=[float])(a, b),
    lambda rng: (lambda a, b: (uniform()(rng, a), uniform()(rng, b)))(*broadcast_pair(rng)),
    n_ops=2,
)
op(
    "numpy.vectorize:signature",
    lambda a, b: bnp.vectorize(lambda x, y: bnp.sum(x * y), signature="(n),(n)->()")(a, b),
    lambda a, b: np.vectorize(lambda x, y: np.sum(x * y), signature="(n),(n)->()", otypes=[float])(
        a, b
    ),
    lambda rng: (lambda s, n: (uniform()(rng, s + (n,)), uniform()(rng, (n,))))(
        rand_shape(rng, 0, 2), int(rng.integers(1, 4))
    ),
    covers=("numpy.vectorize",),
    n_ops=4,
)

# ---- general eigen-decomposition (LAPACK geev through a pure callback) ---------------------------


def _known_spectrum(rng):
    """``P diag(lam) P^-1`` with distinct real eigenvalues ``lam`` (a well-conditioned P)."""
    n = int(rng.integers(1, 5))
    b = tuple(max(d, 1) for d in rand_shape(rng, 0, 1, 2))
    lam = np.sort(rng.uniform(-3, 3, b + (n,))) + np.arange(n)  # at least ~1 apart
    p = rng.standard_normal(b + (n, n)) + 3 * np.eye(n)
    return (p @ (lam[..., :, None] * np.linalg.inv(p)),)


def _sorted_spectrum(w):
    """The eigenvalues by real then imaginary part, as float64 (real, imaginary) pairs."""
    w = np.asarray(w).astype(np.complex128)
    w = np.take_along_axis(w, np.lexsort((np.round(w.imag, 6), np.round(w.real, 6)), axis=-1), -1)
    return np.stack([w.real, w.imag])


op(
    "linalg.eigvals",
    lambda a: _sorted_spectrum(bnp.linalg.eigvals(a)),
    # an independent route: the roots of the characteristic polynomial (np.poly of the matrix
    # is from its own eigenvalues, so the reference is the companion matrix's instead)
    lambda a: _sorted_spectrum(
        np.vectorize(lambda m: np.roots(np.poly(m)), signature="(n,n)->(n)")(a)
        if a.shape[-1] > 1
        else a[..., 0].astype(np.complex128)
    ),
    _known_spectrum,
    covers=("linalg.eigvals",),
    grad=False,  # no derivative (docs: eigh has them)
    n_ops=64,
    special=[(np.array([[0.0, -1.0], [1.0, 0.0]]),), (np.array([[2.0, 1.0], [0.0, 3.0]]),)],
    skip={
        "jit": "sorting the complex eigenvalues happens outside blu (numpy)",
        "vmap": "sorting the complex eigenvalues happens outside blu (numpy)",
    },  # fmt: skip
)


def _eig_residual(a):
    w, v = bnp.linalg.eig(a)
    return bnp.abs(bnp.matmul(a.astype(w.dtype), v) - v * w[..., None, :]), bnp.linalg.norm(
        v, axis=-2
    )


op(
    "linalg.eig",
    _eig_residual,
    lambda a: (np.zeros(a.shape), np.ones(a.shape[:-1])),  # A V = V diag(w); unit columns
    _known_spectrum,
    covers=("linalg.eig",),
    grad=False,
    n_ops=64,
    special=[(np.array([[0.0, -1.0], [1.0, 0.0]]),), (np.array([[1.0, 1.0], [0.0, 1.0 + 1e-3]]),)],
)
