"""OpInfo entries: blu.numpy.linalg and blu.nn."""

from __future__ import annotations

import dataclasses  # noqa: F401
import math  # noqa: F401
from collections.abc import Callable, Sequence  # noqa: F401
from typing import Any  # noqa: F401

import numpy as np
import scipy.linalg
import scipy.special

import blu
import blu.nn as bnn
import blu.numpy as bnp
from ops.attention import attention_ref
from ops.base import (
    away,
    matrix_sampler,
    nonempty_shape,
    op,
    rand_shape,
    unary_sampler,
    uniform,
)

# ---- linalg -----------------------------------------------------------------------------------

_SING = (np.array([[1.0, 2.0], [2.0, 4.0]]),)  # rank 1
_ZERO3 = (np.zeros((3, 3)),)
la = bnp.linalg
op(
    "linalg.det",
    la.det,
    np.linalg.det,
    matrix_sampler(0, 4),
    special=[_SING, _ZERO3],
    finite_grad_at_special=True,
    n_ops=30,
)
op(
    "linalg.slogdet",
    lambda a: tuple(la.slogdet(a)),
    lambda a: tuple(np.linalg.slogdet(a)),
    matrix_sampler(1, 4),
    n_ops=30,
)
op("linalg.inv", la.inv, np.linalg.inv, matrix_sampler(1, 4), n_ops=30)
op(
    "linalg.solve",
    la.solve,
    np.linalg.solve,
    lambda rng: (lambda a: (a, rng.standard_normal(a.shape[:-1] + (2,))))(
        matrix_sampler(1, 4)(rng)[0]
    ),
    n_ops=30,
)
op(
    "linalg.solve_triangular",
    lambda a, b, **kw: la.solve_triangular(a, b, **kw),
    lambda a, b, lower=False, trans=0: scipy.linalg.solve_triangular(
        a, b, lower=lower, trans=trans
    ),
    lambda rng: (np.triu(rng.standard_normal((3, 3))) + 3 * np.eye(3), rng.standard_normal((3, 2))),
    kwargs=[{"lower": True}, {"trans": 1}],
    n_ops=30,
    skip={"vmap": "scipy reference is unbatched"},
)
op(
    "linalg.cholesky",
    la.cholesky,
    np.linalg.cholesky,
    matrix_sampler(1, 4, spd=True),
    n_ops=30,
    skip={"grad": "finite differences leave the symmetric set; covered by test_linalg_transforms"},
)
op(
    "linalg.eigh",
    lambda a: la.eigh(a)[0],
    lambda a: np.linalg.eigh(a)[0],
    matrix_sampler(1, 4, spd=True),
    n_ops=50,
    skip={"grad": "finite differences leave the symmetric set; covered by test_linalg_transforms"},
)
op(
    "linalg.eigvalsh",
    la.eigvalsh,
    np.linalg.eigvalsh,
    matrix_sampler(1, 4, spd=True),
    n_ops=50,
    skip={"grad": "finite differences leave the symmetric set; covered by test_linalg_transforms"},
)
op("linalg.qr", lambda a: tuple(la.qr(a)), lambda a: _qr_ref(a), matrix_sampler(1, 4), n_ops=50)
op(
    "linalg.svd",
    lambda a: la.svd(a)[1],
    lambda a: np.linalg.svd(a)[1],
    matrix_sampler(1, 4),
    n_ops=80,
)
op(
    "linalg.svdvals",
    la.svdvals,
    lambda a: np.linalg.svd(a, compute_uv=False),
    matrix_sampler(1, 4),
    n_ops=80,
)
op("linalg.pinv", la.pinv, np.linalg.pinv, matrix_sampler(1, 4), n_ops=80)
op(
    "linalg.lstsq",
    lambda a, b: la.lstsq(a, b)[0],
    lambda a, b: np.linalg.lstsq(a, b)[0],
    lambda rng: (rng.standard_normal((4, 3)), rng.standard_normal((4, 2))),
    n_ops=80,
)
op(
    "linalg.matrix_power",
    lambda a: la.matrix_power(a, 3),
    lambda a: np.linalg.matrix_power(a, 3),
    matrix_sampler(1, 3),
    n_ops=10,
)
op(
    "linalg.multi_dot",
    lambda a, b, c: la.multi_dot([a, b, c]),
    lambda a, b, c: np.linalg.multi_dot([a, b, c]),
    lambda rng: (rng.standard_normal(3), rng.standard_normal((3, 4)), rng.standard_normal((4, 2))),
    n_ops=10,
)
op(
    "linalg.tensorinv",
    lambda a: la.tensorinv(a, 1),
    lambda a: np.linalg.tensorinv(a, 1),
    lambda rng: ((rng.standard_normal((6, 6)) + 4 * np.eye(6)).reshape(6, 2, 3),),
    n_ops=30,
)
op(
    "linalg.tensorsolve",
    la.tensorsolve,
    np.linalg.tensorsolve,
    lambda rng: (
        (rng.standard_normal((6, 6)) + 4 * np.eye(6)).reshape(2, 3, 6),
        rng.standard_normal((2, 3)),
    ),
    n_ops=30,
)
op(
    "linalg.matrix_rank",
    la.matrix_rank,
    np.linalg.matrix_rank,
    matrix_sampler(1, 4),
    special=[_SING, _ZERO3],
    grad=False,
    n_ops=80,
)
op("linalg.cond", la.cond, np.linalg.cond, matrix_sampler(1, 4), n_ops=80)
op(
    "linalg.norm",
    lambda x, **kw: la.norm(x, **kw),
    lambda x, **kw: np.linalg.norm(x, **kw),
    lambda rng: (uniform()(rng, nonempty_shape(rng, 1, 1, 5)),),
    special=[(np.zeros(3),), (np.array([0.0, 3.0, 4.0]),)],
    finite_grad_at_special=True,
    kwargs=[{"ord": 1}, {"ord": np.inf}, {"ord": 3}],
    n_ops=8,
)
op(
    "linalg.vector_norm",
    lambda x, **kw: la.vector_norm(x, **kw),
    lambda x, ord=2: np.linalg.norm(x.ravel(), ord=ord),
    lambda rng: (uniform()(rng, nonempty_shape(rng, 1, 2)),),
    special=[(np.zeros(3),), (np.array([3.0, -4.0]),)],
    finite_grad_at_special=True,
    kwargs=[{"ord": 1}, {"ord": -np.inf}],
    n_ops=8,
)
op(
    "linalg.matrix_norm",
    lambda x, **kw: la.matrix_norm(x, **kw),
    lambda x, ord="fro": np.linalg.norm(x, ord=ord),
    matrix_sampler(1, 3, batch=False),
    special=[(np.zeros((2, 2)),), (np.array([[1.0, -2.0], [3.0, 0.5]]),)],
    finite_grad_at_special=True,
    kwargs=[{"ord": 1}, {"ord": np.inf}],
    n_ops=8,
)


def _qr_ref(a):
    return np.linalg.qr(a)  # the same LAPACK sign convention as blu


# ---- nn ----------------------------------------------------------------------------------------


def _softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _lse(x, axis=None):
    return scipy.special.logsumexp(x, axis=axis)


_LSE_SPECIAL = [
    (np.array([-np.inf, -np.inf]),),
    (np.array([-np.inf, 0.0]),),
    (np.array([[-np.inf, -np.inf], [0.0, 1.0]]),),
]
op(
    "nn.logsumexp",
    lambda x, **kw: bnn.logsumexp(x, **kw),
    lambda x, axis=None: _lse(x, axis),
    lambda rng: (uniform()(rng, rand_shape(rng, 1)),),
    special=_LSE_SPECIAL,
    finite_grad_at_special=True,
    kwargs=[{"axis": -1}],
    n_ops=8,
)
op(
    "nn.softmax",
    bnn.softmax,
    _softmax,
    lambda rng: (uniform()(rng, nonempty_shape(rng)),),
    special=[(np.array([-np.inf, 0.0, 0.0]),)],
    n_ops=8,
)
op(
    "nn.log_softmax",
    bnn.log_softmax,
    lambda x: x - _lse(x, -1)[..., None],
    lambda rng: (uniform()(rng, nonempty_shape(rng)),),
    n_ops=8,
)
op(
    "nn.relu",
    bnn.relu,
    lambda x: np.maximum(x, 0),
    unary_sampler(away(-2, 2)),
    special=[(np.array([0.0]),)],
)
op(
    "nn.sigmoid",
    bnn.sigmoid,
    scipy.special.expit,
    unary_sampler(),
    special=[(np.array([-800.0, 800.0, 0.0]),)],
)
op(
    "nn.silu",
    bnn.silu,
    lambda x: x * scipy.special.expit(x),
    unary_sampler(),
    covers=("nn.silu", "nn.swish"),  # swish is silu
)
op(
    "nn.gelu",
    lambda x, **kw: bnn.gelu(x, **kw),
    lambda x, approximate=True: (
        0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
        if approximate
        else 0.5 * x * (1 + scipy.special.erf(x / np.sqrt(2)))
    ),
    unary_sampler(),
    kwargs=[{"approximate": False}],
    n_ops=8,
    special=[(np.array([-2.0, -0.5, 0.0, 1.0, 3.0]),)],
)


def _ln(x, gamma=None, beta=None, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = x.var(-1, keepdims=True)
    y = (x - m) / np.sqrt(v + eps)
    return y * (1 if gamma is None else gamma) + (0 if beta is None else beta)


op(
    "nn.layer_norm",
    lambda x, g, b, **kw: bnn.layer_norm(x, g, b, **kw),
    _ln,
    lambda rng: (lambda s: (uniform()(rng, s), uniform()(rng, s[-1:]), uniform()(rng, s[-1:])))(
        nonempty_shape(rng, 1, 3)
    ),
    kwargs=[{"eps": 0.5}],
    n_ops=10,
    special=[(np.array([[1.0, 2.0, 4.0]]), np.ones(3), np.zeros(3))],
)


def _bn_train(x, scale, bias, mean, var, momentum=0.9, eps=1e-5):
    """Batch norm in training mode over all but the last axis, float64: (y, new statistics)."""
    axes = tuple(range(x.ndim - 1))
    m, v = x.mean(axes), x.var(axes)
    n = x.size // x.shape[-1]
    y = (x - m) / np.sqrt(v + eps) * scale + bias
    return y, (
        momentum * mean + (1 - momentum) * m,
        momentum * var + (1 - momentum) * v * n / (n - 1),
    )


def _bn_sample(rng):
    s = (3,) + nonempty_shape(rng, 1, 2)
    c = s[-1:]
    var = rng.uniform(0.5, 2.0, c)
    return uniform()(rng, s), uniform()(rng, c), uniform()(rng, c), uniform()(rng, c), var


op(
    "nn.batch_norm",
    # (the output; the running statistics carry no gradient: tests/nn/test_normalization.py)
    lambda x, g, b, m, v, **kw: bnn.batch_norm(x, g, b, m, v, train=True, **kw)[0],
    lambda *args, **kw: _bn_train(*args, **kw)[0],
    _bn_sample,
    kwargs=[{"eps": 0.5}],
    diff_args=(0, 1, 2),
    n_ops=12,
)


def _gn(x, scale, bias, groups=2, eps=1e-5):
    g = x.reshape(x.shape[0], -1, groups, x.shape[-1] // groups)
    m = g.mean((1, 3), keepdims=True)
    v = g.var((1, 3), keepdims=True)
    return ((g - m) / np.sqrt(v + eps)).reshape(x.shape) * scale + bias


op(
    "nn.group_norm",
    lambda x, g, b, **kw: bnn.group_norm(x, 2, g, b, **kw),
    _gn,
    lambda rng: (uniform()(rng, (2, 3, 4)), uniform()(rng, (4,)), uniform()(rng, (4,))),
    kwargs=[{"eps": 0.5}],
    n_ops=12,
)
op(
    "nn.rms_norm",
    lambda x, g, **kw: bnn.rms_norm(x, g, **kw),
    lambda x, g, eps=1e-6: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g,
    lambda rng: (lambda s: (uniform()(rng, s), uniform()(rng, s[-1:])))(nonempty_shape(rng, 1, 3)),
    kwargs=[{"eps": 0.5}],
    n_ops=10,
)
op(
    "nn.linear",
    bnn.linear,
    lambda x, w, b: x @ w + b,
    lambda rng: (rng.standard_normal((2, 3)), rng.standard_normal((3, 4)), rng.standard_normal(4)),
    n_ops=4,
)
op(
    "nn.embedding",
    bnn.embedding,
    lambda t, i: t[i],
    lambda rng: (rng.standard_normal((5, 3)), np.array([0, 4, 4, 1])),
    diff_args=(0,),
)
op(
    "nn.one_hot",
    lambda i: bnn.one_hot(i, 4),
    lambda i: np.eye(4)[np.clip(i, 0, 3)] * (i[..., None] < 4),
    lambda rng: (np.array([0, 3, 3, 5]),),
    grad=False,
)


def _ce(logits, labels, reduction="mean"):
    lp = logits - _lse(logits, -1)[..., None]
    nll = -np.take_along_axis(lp, labels[..., None], -1)[..., 0]
    return {"mean": nll.mean(), "sum": nll.sum(), "none": nll}[reduction]


op(
    "nn.cross_entropy",
    lambda lo, la_, **kw: bnn.cross_entropy(lo, la_, **kw),
    _ce,
    lambda rng: (rng.standard_normal((3, 4)), np.array([0, 3, 3])),
    diff_args=(0,),
    kwargs=[{"reduction": "sum"}, {"reduction": "none"}],
    n_ops=10,
)


def _attn(q, k, v, causal=False):
    """q, k, v: (..., T, H, D), as blu.nn.dot_product_attention (see ops.attention)."""
    return attention_ref(q, k, v, is_causal=causal)[0]


op(
    "nn.causal_self_attention",
    lambda x, wq, bq, wp, bp: bnn.causal_self_attention(x, wq, bq, wp, bp, n_head=2),
    lambda x, wq, bq, wp, bp: _csa(x, wq, bq, wp, bp, 2),
    lambda rng: (
        rng.standard_normal((1, 3, 4)),
        rng.standard_normal((4, 12)) * 0.5,
        rng.standard_normal(12) * 0.1,
        rng.standard_normal((4, 4)) * 0.5,
        rng.standard_normal(4) * 0.1,
    ),
    n_ops=40,
)


def _csa(x, wq, bq, wp, bp, h):
    b, t, c = x.shape
    q, k, v = np.split(x @ wq + bq, 3, -1)
    sp = lambda a: a.reshape(b, t, h, c // h)  # noqa: E731
    o = _attn(sp(q), sp(k), sp(v), causal=True).reshape(b, t, c)
    return o @ wp + bp


op(
    "nn.dropout",
    lambda x, **kw: bnn.dropout(blu.random.key(0), x, 0.5, **kw),
    lambda x, deterministic=False: x if deterministic else None,
    lambda rng: (uniform()(rng, nonempty_shape(rng)),),
    kwargs=[{"deterministic": True}],
    skip={
        "value": "random mask: covered by test_nn",
        "grad": "random mask",
        "jacobians": "random mask",
        "vmap": "random mask",
    },
)
op(
    "nn.initializers",
    lambda: bnn.initializers,
    lambda: bnn.initializers,
    lambda rng: (),
    grad=False,
    skip={
        "value": "a module of initializer functions: covered by test_nn",
        "vmap": "module",
        "jit": "module",
    },
)
