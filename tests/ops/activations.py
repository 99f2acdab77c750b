"""OpInfo entries: the ``jax.nn`` activations of blu.nn.activations, linear_cross_entropy."""

from __future__ import annotations

import numpy as np
import scipy.special

import blu.nn as bnn
from ops.base import nonempty_shape, op, rand_shape, unary_sampler, uniform


def avoiding(lo, hi, points, gap=0.2):
    """Uniform in [lo, hi], at least ``gap`` from each of ``points`` (kinks: finite
    differences across a kink are not the derivative)."""

    def s(rng, shape):
        x = rng.uniform(lo, hi, shape)
        for p in points:
            x = np.where(np.abs(x - p) < gap, p + gap * np.where(x >= p, 1.0, -1.0), x)
        return x

    return s


# float64 references written from the papers' definitions, not from blu's formulas
_SELU_ALPHA = 1.6732632423543772848170429916717  # Klambauer et al. 2017, eq. 14
_SELU_SCALE = 1.0507009873554804934193349852946


def _elu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


def _celu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0) / alpha))


def _squareplus(x, b=4):
    # (x + sqrt(x^2 + b)) / 2 = sqrt(b)/2 * exp(asinh(x / sqrt(b))): no cancellation for x << 0
    return np.sqrt(b) / 2 * np.exp(np.arcsinh(x / np.sqrt(b)))


def _sparse_plus(x):
    return np.piecewise(
        x, [x <= -1, (x > -1) & (x < 1), x >= 1], [0, lambda t: (t + 1) ** 2 / 4, lambda t: t]
    )


def _sparse_sigmoid(x):
    return np.clip((x + 1) / 2, 0, 1)


_EDGES = np.array([-np.inf, -800.0, -3.0, -1.0, 0.0, 1.0, 3.0, 6.0, 800.0, np.inf])
_U = {  # name -> (reference, sample values, special points, gradient finite there)
    "celu": (_celu, uniform(-3, 3), _EDGES, True),
    "elu": (_elu, uniform(-3, 3), _EDGES, True),
    "selu": (lambda x: _SELU_SCALE * _elu(x, _SELU_ALPHA), uniform(-3, 3), _EDGES, True),
    "hard_sigmoid": (lambda x: np.clip(x + 3, 0, 6) / 6, avoiding(-5, 5, (-3, 3)), _EDGES, True),
    "hard_silu": (
        lambda x: x * np.clip(x + 3, 0, 6) / 6,
        avoiding(-5, 5, (-3, 3)),
        _EDGES[1:-1],
        True,
    ),
    "hard_swish": (
        lambda x: x * np.clip(x + 3, 0, 6) / 6,
        avoiding(-5, 5, (-3, 3)),
        _EDGES[1:-1],
        True,
    ),
    "hard_tanh": (lambda x: np.clip(x, -1, 1), avoiding(-3, 3, (-1, 1)), _EDGES, True),
    "identity": (lambda x: x, uniform(), _EDGES, True),
    "leaky_relu": (lambda x: np.where(x >= 0, x, 0.01 * x), avoiding(-3, 3, (0,)), _EDGES, True),
    "log_sigmoid": (lambda x: -np.logaddexp(0, -x), uniform(-5, 5), _EDGES, True),
    "mish": (lambda x: x * np.tanh(np.logaddexp(0, x)), uniform(-5, 5), _EDGES[1:-1], True),
    "relu6": (lambda x: np.clip(x, 0, 6), avoiding(-2, 8, (0, 6)), _EDGES, True),
    # x / (|x| + 1) is NaN at +-inf, as JAX's and the formula's: finite points only
    "soft_sign": (lambda x: x / (1 + np.abs(x)), uniform(-5, 5), _EDGES[1:-1], True),
    "softplus": (lambda x: np.logaddexp(0, x), uniform(-5, 5), _EDGES, True),
    "sparse_plus": (_sparse_plus, avoiding(-3, 3, (-1, 1)), _EDGES, True),
    "sparse_sigmoid": (_sparse_sigmoid, avoiding(-3, 3, (-1, 1)), _EDGES, True),
    "squareplus": (_squareplus, uniform(-5, 5), np.array([-1e4, -1.0, 0.0, 1.0, 1e4]), True),
    "tanh": (np.tanh, uniform(), _EDGES, True),
}
_KW = {
    "celu": [{"alpha": 0.5}],
    "elu": [{"alpha": 0.5}],
    "leaky_relu": [{"negative_slope": 0.2}],
    "squareplus": [{"b": 1.0}],
}
_REF_KW = {  # the reference's keyword for blu's (same names except leaky_relu's slope)
    "leaky_relu": lambda x, negative_slope=0.01: np.where(x >= 0, x, negative_slope * x),
}
for _n, (_ref, _vals, _sp, _fin) in _U.items():
    op(
        f"nn.{_n}",
        (lambda f: lambda x, **kw: f(x, **kw))(getattr(bnn, _n)),
        _REF_KW.get(_n, _ref),
        unary_sampler(_vals),
        special=[(_sp,)],
        finite_grad_at_special=_fin,
        kwargs=_KW.get(_n, ()),
        n_ops=8,
    )


def _glu(x, axis=-1):
    a, b = np.split(x, 2, axis=axis)
    return a * scipy.special.expit(b)


def _glu_sample(rng):
    s = list(nonempty_shape(rng, 2, 3))
    s[-1] *= 2
    s[0] = 2 * int(rng.integers(1, 3))
    return (uniform()(rng, tuple(s)),)


op(
    "nn.glu",
    lambda x, **kw: bnn.glu(x, **kw),
    _glu,
    _glu_sample,
    special=[(np.array([[1.0, -1.0, -np.inf, np.inf], [0.0, 2.0, 800.0, -800.0]]),)],
    kwargs=[{"axis": 0}],
    n_ops=8,
)


def _standardize(x, axis=-1, mean=None, variance=None, epsilon=1e-5, where=None):
    if mean is None:
        mean = np.mean(x, axis=axis, keepdims=True, where=True if where is None else where)
    if variance is None:
        w = True if where is None else where
        variance = np.mean((x - mean) ** 2, axis=axis, keepdims=True, where=w)
    return (x - mean) / np.sqrt(variance + epsilon)


def _std_sample(rng):
    return (uniform()(rng, nonempty_shape(rng, 2, 3)),)


_COLS = np.array([True, False, True])
op(
    "nn.standardize",
    lambda x, **kw: bnn.standardize(x, **kw),
    _standardize,
    lambda rng: (uniform()(rng, (int(rng.integers(1, 4)), 3)),),
    special=[(np.array([[1.0, 1.0, 1.0], [0.0, 2.0, 4.0]]),)],  # a constant row: variance 0
    kwargs=[
        {"axis": None},
        {"axis": 0},
        {"epsilon": 0.5},
        {"mean": 0.25, "variance": 2.0},
        {"where": _COLS},
    ],
    n_ops=10,
)

# ---- linear_cross_entropy: against the logits x @ w.T, in float64 --------------------------------


def _lce(x, w, labels, ignore_index=None, label_smoothing=0.0, reduction="mean"):
    z = x @ w.T
    lse = scipy.special.logsumexp(z, axis=-1)
    safe = np.where(labels == ignore_index, 0, labels) if ignore_index is not None else labels
    zy = np.take_along_axis(z, safe[..., None], -1)[..., 0]
    row = (1 - label_smoothing) * (lse - zy) + label_smoothing * (lse - z.mean(-1))
    keep = np.ones(labels.shape, bool) if ignore_index is None else labels != ignore_index
    row = np.where(keep, row, 0.0)
    if reduction == "none":
        return row
    if reduction == "sum":
        return row.sum()
    return row.sum() / keep.sum()


def _lce_sample(rng):
    lead = rand_shape(rng, 1, 2, 5)
    lead = tuple(max(d, 1) for d in lead)
    c, v = int(rng.integers(1, 4)), int(rng.integers(1, 6))
    labels = rng.integers(0, v, lead).astype(np.int32)
    labels.flat[0] = v - 1  # so ignore_index = v - 1 drops a row
    labels.flat[-1] = 0
    return uniform()(rng, lead + (c,)), uniform()(rng, (v, c)), labels


_LCE_SPECIAL = [
    (
        np.array([[800.0, -800.0], [1.0, 2.0]]),
        np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]),
        np.array([2, 0], np.int32),
    ),
]
op(
    "nn.linear_cross_entropy",
    lambda x, w, y, **kw: bnn.linear_cross_entropy(x, w, y, **kw),
    _lce,
    _lce_sample,
    special=_LCE_SPECIAL,
    diff_args=(0, 1),
    kwargs=[
        {"reduction": "sum"},
        {"reduction": "none"},
        {"label_smoothing": 0.3},
        {"ignore_index": 0},
    ],
    n_ops=20,
    skip={
        "grad": "a custom_vjp: no forward mode (as JAX); reverse mode against finite differences "
        "and the unfused gradient in test_nn_classifier"
    },
)
op(
    "nn.linear_cross_entropy(chunk_size=1)",  # chunking must not change the value
    lambda x, w, y, **kw: bnn.linear_cross_entropy(x, w, y, chunk_size=1, **kw),
    _lce,
    _lce_sample,
    covers=("nn.linear_cross_entropy",),
    special=_LCE_SPECIAL,
    diff_args=(0, 1),
    n_ops=20,
    skip={"grad": "a custom_vjp (see the entry above)", "vmap": "as the entry above"},
)
