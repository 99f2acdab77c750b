"""OpInfo entries: the lax.linalg primitives, the transforms that are primitives, collectives."""

from __future__ import annotations

import dataclasses  # noqa: F401
import math  # noqa: F401
from collections.abc import Callable, Sequence  # noqa: F401
from typing import Any  # noqa: F401

import numpy as np
import scipy.linalg
import scipy.special

import blu
import blu.numpy as bnp
from blu.lax import linalg as lax_linalg
from ops.base import (
    matrix_sampler,
    op,
    unary_sampler,
    uniform,
)

# ---- lax.linalg primitives ---------------------------------------------------------------------

op(
    "lax.linalg.cholesky",
    lambda a: lax_linalg.cholesky(a),
    np.linalg.cholesky,
    matrix_sampler(1, 4, spd=True),
    covers=("prim:cholesky",),
    n_ops=30,
    skip={"grad": "finite differences leave the symmetric set; covered by test_linalg_transforms"},
)
op(
    "lax.linalg.eigh",
    lambda a: lax_linalg.eigh(a)[1],
    lambda a: np.linalg.eigh(a)[0],
    matrix_sampler(1, 4, spd=True),
    covers=("prim:eigh",),
    n_ops=50,
    skip={"grad": "finite differences leave the symmetric set; covered by test_linalg_transforms"},
)
op(
    "lax.linalg.lu",
    lambda a: lax_linalg.lu(a)[0],
    lambda a: _lu_ref(a),
    matrix_sampler(1, 4),
    covers=("prim:lu",),
    n_ops=30,
)
op(
    "lax.linalg.qr",
    lambda a: bnp.abs(lax_linalg.qr(a)[1]),
    lambda a: np.abs(np.linalg.qr(a)[1]),
    matrix_sampler(1, 4),
    covers=("prim:qr",),
    n_ops=30,
    skip={"grad": "abs of r is not smooth where r has a zero; qr's derivative is in linalg.qr"},
)
op(
    "lax.linalg.svd",
    lambda a: lax_linalg.svd(a)[1],
    lambda a: np.linalg.svd(a)[1],
    matrix_sampler(1, 4),
    covers=("prim:svd",),
    n_ops=80,
)
op(
    "lax.linalg.triangular_solve",
    lambda a, b: lax_linalg.triangular_solve(a, b, left_side=True, lower=True),
    lambda a, b: scipy.linalg.solve_triangular(a, b, lower=True),
    lambda rng: (np.tril(rng.standard_normal((3, 3))) + 3 * np.eye(3), rng.standard_normal((3, 2))),
    covers=("prim:triangular_solve",),
    n_ops=30,
    skip={"vmap": "scipy reference is unbatched"},
)

op(
    "lax.linalg.geqrf",
    lambda a: tuple(lax_linalg.geqrf(a)),
    lambda a: _geqrf_ref(a),
    lambda rng: (_well_conditioned(rng),),
    covers=("prim:geqrf",),
    grad=False,
    n_ops=30,
)
op(
    "lax.linalg.householder_product",
    lambda a, taus: lax_linalg.householder_product(a, taus),
    lambda a, taus: _householder_product_ref(a, taus),
    lambda rng: _reflectors_sample(rng),
    covers=("prim:householder_product",),
    grad=False,
    n_ops=30,
)


def _batch(rng):
    return tuple(int(d) for d in rng.integers(1, 3, int(rng.integers(0, 2))))


def _well_conditioned(rng):
    """Householder steps away from cancellation (raw reflectors then agree to rounding): tall,
    singular values in [0.5, 2]; wide, such a square block first."""
    b, (m, n) = _batch(rng), (int(d) for d in rng.integers(1, 5, 2))
    k = min(m, n)
    q1 = np.linalg.qr(rng.standard_normal(b + (m, m)))[0][..., :k]
    q2 = np.linalg.qr(rng.standard_normal(b + (k, k)))[0]
    a = (q1 * rng.uniform(0.5, 2.0, b + (1, k))) @ np.swapaxes(q2, -1, -2)
    return np.concatenate([a, rng.standard_normal(b + (m, n - k))], axis=-1)


def _geqrf_ref(a):
    h, tau = np.linalg.qr(a, mode="raw")  # LAPACK's geqrf, its output transposed
    return np.swapaxes(h, -1, -2), tau


def _reflectors_sample(rng):
    n = int(rng.integers(1, 4))
    m, k = n + int(rng.integers(0, 3)), int(rng.integers(0, n + 1))
    b = _batch(rng)
    return rng.standard_normal(b + (m, n)), rng.uniform(0.0, 2.0, b + (k,))


def _householder_product_ref(a, taus):
    """The reflectors ``I - tau v v^T`` (``v``: a unit entry, then column ``i`` of ``a`` below
    the diagonal) multiplied out, first ``n`` columns."""
    out = np.empty(a.shape)
    m, n = a.shape[-2:]
    for i in np.ndindex(*a.shape[:-2]):
        q = np.eye(m)
        for j, tau in enumerate(taus[i]):
            v = np.concatenate([np.zeros(j), [1.0], a[i][j + 1 :, j]])
            q = q @ (np.eye(m) - tau * np.outer(v, v))
        out[i] = q[:, :n]
    return out


def _lu_ref(a):
    out = []
    for m in a.reshape((-1,) + a.shape[-2:]):
        p, l_, u = scipy.linalg.lu(m)
        out.append(np.tril(l_, -1) + u)
    return np.array(out).reshape(a.shape)


# ---- transforms that are primitives -----------------------------------------------------------

op(
    "transforms.jit",
    lambda x: blu.jit(lambda y: bnp.sin(y) * y)(x),
    lambda x: np.sin(x) * x,
    unary_sampler(),
    covers=("prim:jit",),
    n_ops=3,
)
op(
    "transforms.checkpoint",
    lambda x: blu.checkpoint(lambda y: bnp.sin(y) * y)(x),
    lambda x: np.sin(x) * x,
    unary_sampler(),
    covers=("prim:checkpoint",),
    n_ops=3,
)
op(
    "transforms.checkpoint_name",
    lambda x: blu.checkpoint(lambda y: blu.checkpoint_name(bnp.sin(y), "s") * y)(x),
    lambda x: np.sin(x) * x,
    unary_sampler(),
    covers=("prim:checkpoint_name",),
    n_ops=3,
)


@blu.custom_jvp
def _cj(x):
    return bnp.sin(x)


_cj.defjvp(lambda p, t: (bnp.sin(p[0]), bnp.cos(p[0]) * t[0]))


@blu.custom_vjp
def _cv(x):
    return bnp.sin(x)


_cv.defvjp(lambda x: (bnp.sin(x), x), lambda x, g: (bnp.cos(x) * g,))
op("transforms.custom_jvp", _cj, np.sin, unary_sampler(), covers=("prim:custom_jvp_call",))
op(
    "transforms.custom_vjp",
    _cv,
    np.sin,
    unary_sampler(),
    covers=("prim:custom_vjp_call", "prim:custom_lin"),
    skip={"grad": "custom_vjp has no forward mode (as JAX); reverse in test_custom_derivatives"},
)


@blu.custom_batching.custom_vmap
def _cvm(x):
    return bnp.sin(x)


_cvm.def_vmap(lambda n, batched, xs: (bnp.sin(xs), batched[0]))
op("transforms.custom_vmap", _cvm, np.sin, unary_sampler(), covers=("prim:custom_vmap_call",))

# ---- collectives: under vmap with a named axis ---------------------------------------------------

from blu import parallel as _par  # noqa: E402


def _named(f):
    return lambda x: blu.vmap(f, axis_name="i")(x)


_COLL = {
    "psum": (lambda v: _par.psum(v, "i"), lambda x: np.broadcast_to(x.sum(0), x.shape)),
    "pmax": (lambda v: _par.pmax(v, "i"), lambda x: np.broadcast_to(x.max(0), x.shape)),
    "pmin": (lambda v: _par.pmin(v, "i"), lambda x: np.broadcast_to(x.min(0), x.shape)),
    "all_gather": (
        lambda v: _par.all_gather(v, "i"),
        lambda x: np.broadcast_to(x, (x.shape[0],) + x.shape),
    ),
    "axis_index": (
        lambda v: v * _par.axis_index("i"),
        lambda x: x * np.arange(x.shape[0])[:, None],
    ),
    "ppermute": (lambda v: _par.ppermute(v, "i", [(0, 1), (1, 0)]), lambda x: x[::-1]),
    "all_to_all": (lambda v: _par.all_to_all(v, "i", 0, 0), lambda x: np.swapaxes(x, 0, 1)),
    "pmean": (lambda v: _par.pmean(v, "i"), lambda x: np.broadcast_to(x.mean(0), x.shape)),
    "axis_size": (lambda v: v * _par.axis_size("i"), lambda x: x * x.shape[0]),
    "reduce_scatter": (
        lambda v: _par.psum_scatter(v, "i", scatter_dimension=0, tiled=True),
        lambda x: x.sum(0).reshape(x.shape[0], -1),
    ),
}
_COLL["pvary"] = (lambda v: _par.pvary(v, "i"), lambda x: x)  # (a value already varying: itself)
_LAX = {"reduce_scatter": "psum_scatter"}
_NOT_PRIM = ("pmean", "axis_size")  # psum divided by the size; a static int
for _n, (_f, _ref) in _COLL.items():
    op(
        f"parallel.{_n}",
        _named(_f),
        _ref,
        lambda rng: (uniform()(rng, (2, 2)),),
        # blu.lax re-exports blu.parallel's collectives (the same functions)
        covers=(f"lax.{_LAX.get(_n, _n)}",) + ((f"prim:{_n}",) if _n not in _NOT_PRIM else ()),
        n_ops=4,
        skip={
            "vmap": "already a vmap with a named axis; nested in test_parallel_collectives",
            "jit": "covered by test_parallel_collectives",
        },
    )


def _ragged_a2a(v):
    # device s sends row j of v to device j, landing at row j * 2 + s there: the received rows
    # interleave with the untouched second half of `output`
    me = _par.axis_index("i")
    out = blu.lax.concatenate([v, v * 0.5], 0)
    offs = bnp.arange(2, dtype=np.int32) * 2 + me
    ones = np.ones(2, np.int32)
    return blu.lax.ragged_all_to_all(v, out, np.arange(2, dtype=np.int32), ones, offs, ones,
                                     axis_name="i")  # fmt: skip


def _np_ragged_a2a(x):
    out = np.concatenate([x, x * 0.5], 1)
    for s in range(2):
        for j in range(2):
            out[j, j * 2 + s] = x[s, j]
    return out


op(
    "lax.ragged_all_to_all",
    _named(_ragged_a2a),
    _np_ragged_a2a,
    lambda rng: (uniform()(rng, (2, 2)),),
    n_ops=4,
    skip={
        "vmap": "already a vmap with a named axis; nested in test_parallel_ragged_all_to_all",
        "jit": "covered by test_parallel_ragged_all_to_all",
    },
)
