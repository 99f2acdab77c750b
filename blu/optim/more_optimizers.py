"""optax's other first-order optimizers (``optax.rmsprop``, ``optax.adagrad``, ``optax.lion``)
and the transformations they chain (``scale_by_rms``, ``scale_by_stddev``, ``trace``,
``scale_by_rss``, ``scale_by_lion``), with optax's names, arguments and update equations
(``optax/_src/alias.py``, ``optax/_src/transform.py``).

Each optimizer is the ``chain`` optax builds, returned as an ``Optimizer`` (``init``,
``update``, and ``step``: ``update`` then ``apply_updates``). Statistics follow ``adamw``'s
dtype rule: a parameter's dtype, float32 for bfloat16/float16 ones; the updates come back in
that dtype. A learning rate is a float, a schedule ``count -> lr`` (of the updates so far, from
0) or a traced scalar (a jit argument).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import blu.numpy as bnp
from blu import lax
from blu.core import dtypes, pytree
from blu.core.errors import BluValueError, with_user_line
from blu.optim.optimizers import (
    GradientTransformation,
    Optimizer,
    Schedule,
    _cast,
    _check_float_params,
    _moment_dtype,
    _step0,
    _with_step,
    _zeros_like_moment,
)
from blu.optim.transforms import (
    EmptyState,
    add_decayed_weights,
    chain,
    identity,
    scale_by_learning_rate,
)

__all__ = [
    "adagrad",
    "lion",
    "ScaleByLionState",
    "ScaleByRStdDevState",
    "ScaleByRStdDevWithCountState",
    "ScaleByRmsState",
    "ScaleByRmsWithCountState",
    "ScaleByRssState",
    "TraceState",
    "rmsprop",
    "scale_by_lion",
    "scale_by_rms",
    "scale_by_rss",
    "scale_by_stddev",
    "trace",
]


class ScaleByRmsState(NamedTuple):
    """The state of :func:`blu.optim.scale_by_rms` (optax's): the second moments."""

    nu: Any


class ScaleByRmsWithCountState(NamedTuple):
    """The state of :func:`blu.optim.scale_by_rms` with ``bias_correction``: the count too."""

    count: Any  # int32 scalar: updates so far
    nu: Any


class ScaleByRStdDevState(NamedTuple):
    """The state of :func:`blu.optim.scale_by_stddev` (optax's): first and second moments."""

    mu: Any
    nu: Any


class ScaleByRStdDevWithCountState(NamedTuple):
    """The state of :func:`blu.optim.scale_by_stddev` with ``bias_correction``."""

    count: Any
    mu: Any
    nu: Any


class ScaleByRssState(NamedTuple):
    """The state of :func:`blu.optim.scale_by_rss` (optax's): the sums of squared gradients."""

    sum_of_squares: Any


class ScaleByLionState(NamedTuple):
    """The state of :func:`blu.optim.scale_by_lion` (optax's): the count and the momentum."""

    count: Any  # int32 scalar: updates so far
    mu: Any


class TraceState(NamedTuple):
    """The state of :func:`blu.optim.trace` (optax's): the momentum buffers."""

    trace: Any


# ---- helpers -----------------------------------------------------------------------------------


def _full_like_moment(p: Any, value: float) -> Any:
    p = bnp.asarray(p)
    return lax.full(p.shape, value, _moment_dtype(p.dtype))


def _abs_sq(g: Any) -> Any:
    """``|g|^2`` elementwise (``re^2 + im^2`` for complex ``g``, in the real dtype), as optax's
    ``numerics.abs_sq``."""
    if dtypes.is_complex(g.dtype):
        re, im = bnp.real(g), bnp.imag(g)
        return re * re + im * im
    return g * g


def _as(g: Any, like: Any) -> Any:
    """``g`` as an array in ``like``'s dtype (a statistic's)."""
    return bnp.asarray(g).astype(bnp.asarray(like).dtype)


def _leaves_like_updates(tree: Any, treedef: Any, what: str, name: str) -> list[Any]:
    leaves, td = pytree.tree_flatten(tree)
    if td != treedef:
        raise BluValueError(
            with_user_line(
                f"optim.{name}: {what} has structure {td} but the updates have {treedef}"
            )
        )
    return leaves


def _zip_map(
    fn: Any, name: str, updates: Any, *trees: Any, what: str = "the state", n_out: int = 0
) -> tuple[Any, list[Any]]:
    """``fn(u, *t)`` over the leaves of ``updates`` and of each tree in ``trees`` (checked to
    have the updates' structure; ``what`` names them in the error); ``fn`` returns ``n_out``
    values (0: ``1 + len(trees)``). Returns the tree of ``fn``'s first results and the list of
    the trees of the others."""
    leaves, treedef = pytree.tree_flatten(updates)
    rest = [_leaves_like_updates(t, treedef, what, name) for t in trees]
    outs = [fn(*xs) for xs in zip(leaves, *rest)]
    n_out = n_out or 1 + len(trees)
    first = pytree.tree_unflatten(treedef, [o[0] for o in outs])
    others = [pytree.tree_unflatten(treedef, [o[k] for o in outs]) for k in range(1, n_out)]
    return first, others


def _bias_correction(count: Any, decay: float, dtype: Any) -> Any:
    """``1 - decay ** count`` in ``dtype`` (optax's ``tree_bias_correction`` divides by it)."""
    return 1.0 - bnp.power(bnp.asarray(decay, dtype), bnp.asarray(count).astype(dtype))


def _scale_by_lr(learning_rate: float | Schedule, flip_sign: bool = True) -> GradientTransformation:
    """Updates times ``-learning_rate`` (optax's ``scale_by_learning_rate``); a traced or numpy
    scalar rate is cast to each update's dtype (a float64 jit argument keeps float32 updates)."""
    if callable(learning_rate):
        return scale_by_learning_rate(learning_rate, flip_sign=flip_sign)
    s = -learning_rate if flip_sign else learning_rate

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        def one(u: Any) -> Any:
            u = bnp.asarray(u)
            return u * _cast(s, u.dtype)

        return pytree.tree_map(one, updates), state

    return GradientTransformation(lambda params: EmptyState(), update)


def _optimizer(name: str, *transforms: GradientTransformation) -> Optimizer:
    """``chain(*transforms)`` as an ``Optimizer``; ``init`` checks the params are floats."""
    tx = chain(*transforms)

    def init(params: Any) -> Any:
        _check_float_params(params, name)
        return tx.init(params)

    return _with_step(init, tx.update)


# ---- transformations ---------------------------------------------------------------------------


def trace(decay: float, nesterov: bool = False, accumulator_dtype: Any = None):
    """Momentum, as ``optax.trace``: ``t = g + decay * t``; the updates are ``t`` (or
    ``g + decay * t`` with ``nesterov``). The buffers are kept in ``accumulator_dtype`` (None:
    the parameters' moment dtype)."""
    acc = None if accumulator_dtype is None else bnp.dtype(accumulator_dtype)

    def init(params: Any) -> TraceState:
        if acc is None:
            return TraceState(pytree.tree_map(_zeros_like_moment, params))
        return TraceState(pytree.tree_map(lambda p: lax.full(bnp.shape(p), 0, acc), params))

    def update(updates: Any, state: TraceState, params: Any = None):
        def one(g: Any, t: Any) -> tuple[Any, Any]:
            g = bnp.asarray(g)
            t = bnp.asarray(t)
            new_t = g + decay * t
            out = g + decay * new_t if nesterov else new_t
            return out, new_t.astype(t.dtype)

        out, (new_trace,) = _zip_map(one, "trace", updates, state.trace)
        return out, TraceState(new_trace)

    return GradientTransformation(init, update)


def scale_by_rms(
    decay: float = 0.9,
    eps: float = 1e-8,
    initial_scale: float = 0.0,
    eps_in_sqrt: bool = True,
    bias_correction: bool = False,
) -> GradientTransformation:
    """RMSProp's rescaling (Tieleman & Hinton 2012), as ``optax.scale_by_rms``::

        nu = decay * nu + (1 - decay) * |g|^2          (nu starts at initial_scale)
        g / sqrt(nu_hat + eps)       if eps_in_sqrt    else    g / (sqrt(nu_hat) + eps)

    with ``nu_hat = nu / (1 - decay^count)`` under ``bias_correction``, else ``nu``."""

    def init(params: Any) -> Any:
        nu = pytree.tree_map(lambda p: _full_like_moment(p, initial_scale), params)
        return ScaleByRmsWithCountState(_step0(), nu) if bias_correction else ScaleByRmsState(nu)

    def update(updates: Any, state: Any, params: Any = None):
        count = bnp.asarray(state.count) + 1 if bias_correction else None

        def one(g: Any, nu: Any) -> tuple[Any, Any]:
            nu = bnp.asarray(nu)
            g = _as(g, nu)
            nu = decay * nu + (1.0 - decay) * _abs_sq(g)
            nu_hat = nu / _bias_correction(count, decay, nu.dtype) if bias_correction else nu
            scaling = lax.rsqrt(nu_hat + eps) if eps_in_sqrt else 1.0 / (bnp.sqrt(nu_hat) + eps)
            return scaling * g, nu

        out, (nu,) = _zip_map(one, "scale_by_rms", updates, state.nu)
        if bias_correction:
            return out, ScaleByRmsWithCountState(count, nu)
        return out, ScaleByRmsState(nu)

    return GradientTransformation(init, update)


def scale_by_stddev(
    decay: float = 0.9,
    eps: float = 1e-8,
    initial_scale: float = 0.0,
    eps_in_sqrt: bool = True,
    bias_correction: bool = False,
) -> GradientTransformation:
    """Centered RMSProp's rescaling (Graves 2013), as ``optax.scale_by_stddev``::

        mu = decay * mu + (1 - decay) * g;   nu = decay * nu + (1 - decay) * |g|^2
        g / sqrt(nu_hat - |mu_hat|^2 + eps)    (or g / (sqrt(nu_hat - |mu_hat|^2) + eps))

    ``mu`` starts at 0 and ``nu`` at ``initial_scale``; the hats divide by
    ``1 - decay^count`` under ``bias_correction``."""

    def init(params: Any) -> Any:
        mu = pytree.tree_map(_zeros_like_moment, params)
        nu = pytree.tree_map(lambda p: _full_like_moment(p, initial_scale), params)
        if bias_correction:
            return ScaleByRStdDevWithCountState(_step0(), mu, nu)
        return ScaleByRStdDevState(mu, nu)

    def update(updates: Any, state: Any, params: Any = None):
        count = bnp.asarray(state.count) + 1 if bias_correction else None

        def one(g: Any, mu: Any, nu: Any) -> tuple[Any, Any, Any]:
            mu, nu = bnp.asarray(mu), bnp.asarray(nu)
            g = _as(g, mu)
            mu = decay * mu + (1.0 - decay) * g
            nu = decay * nu + (1.0 - decay) * _abs_sq(g)
            mu_hat, nu_hat = mu, nu
            if bias_correction:
                mu_hat = mu / _bias_correction(count, decay, mu.dtype)
                nu_hat = nu / _bias_correction(count, decay, nu.dtype)
            var = nu_hat - _abs_sq(mu_hat)
            scaling = lax.rsqrt(var + eps) if eps_in_sqrt else 1.0 / (bnp.sqrt(var) + eps)
            return scaling * g, mu, nu

        out, (mu, nu) = _zip_map(one, "scale_by_stddev", updates, state.mu, state.nu)
        if bias_correction:
            return out, ScaleByRStdDevWithCountState(count, mu, nu)
        return out, ScaleByRStdDevState(mu, nu)

    return GradientTransformation(init, update)


def scale_by_rss(initial_accumulator_value: float = 0.1, eps: float = 1e-7):
    """Adagrad's rescaling (Duchi et al. 2011), as ``optax.scale_by_rss``::

        s = s + |g|^2        (s starts at initial_accumulator_value)
        g / sqrt(s + eps)    where s > 0, else 0

    (the ``where``, optax's, keeps a zero sum's update 0 for ``eps = 0``)."""

    def init(params: Any) -> ScaleByRssState:
        return ScaleByRssState(
            pytree.tree_map(lambda p: _full_like_moment(p, initial_accumulator_value), params)
        )

    def update(updates: Any, state: ScaleByRssState, params: Any = None):
        def one(g: Any, s: Any) -> tuple[Any, Any]:
            s = bnp.asarray(s)
            g = _as(g, s)
            s = s + _abs_sq(g)
            inv = bnp.where(s > 0, lax.rsqrt(s + eps), bnp.zeros((), s.dtype))
            return inv * g, s

        out, (s,) = _zip_map(one, "scale_by_rss", updates, state.sum_of_squares)
        return out, ScaleByRssState(s)

    return GradientTransformation(init, update)


def scale_by_lion(b1: float = 0.9, b2: float = 0.99, mu_dtype: Any = None):
    """Lion's direction (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"), as
    ``optax.scale_by_lion``::

        update = sign((1 - b1) * g + b1 * mu);   mu = b2 * mu + (1 - b2) * g

    ``mu`` is kept in ``mu_dtype`` (None: the parameters' moment dtype)."""
    if not (0.0 <= b1 <= 1.0 and 0.0 <= b2 <= 1.0):
        raise BluValueError(
            with_user_line(f"optim.scale_by_lion: need 0 <= b1, b2 <= 1, got {b1}, {b2}")
        )
    md = None if mu_dtype is None else bnp.dtype(mu_dtype)

    def init(params: Any) -> ScaleByLionState:
        if md is None:
            mu = pytree.tree_map(_zeros_like_moment, params)
        else:
            mu = pytree.tree_map(lambda p: lax.full(bnp.shape(p), 0, md), params)
        return ScaleByLionState(_step0(), mu)

    def update(updates: Any, state: ScaleByLionState, params: Any = None):
        def one(g: Any, mu: Any) -> tuple[Any, Any]:
            mu = bnp.asarray(mu)
            g = bnp.asarray(g)
            g = g.astype(_moment_dtype(g.dtype))
            out = bnp.sign((1.0 - b1) * g + b1 * mu)
            return out, (b2 * mu + (1.0 - b2) * g).astype(mu.dtype)

        out, (mu,) = _zip_map(one, "scale_by_lion", updates, state.mu)
        return out, ScaleByLionState(bnp.asarray(state.count) + 1, mu)

    return GradientTransformation(init, update)


# ---- optimizers --------------------------------------------------------------------------------


def rmsprop(
    learning_rate: float | Schedule,
    decay: float = 0.9,
    eps: float = 1e-8,
    initial_scale: float = 0.0,
    eps_in_sqrt: bool = True,
    centered: bool = False,
    momentum: float | None = None,
    nesterov: bool = False,
    bias_correction: bool = False,
) -> Optimizer:
    """RMSProp (Tieleman & Hinton 2012; centered: Graves 2013), as ``optax.rmsprop``: the chain
    ``scale_by_rms`` (``scale_by_stddev`` where ``centered``), ``-learning_rate``, then
    ``trace(momentum, nesterov)`` where ``momentum`` is not None. Per leaf, uncentered, without
    momentum::

        nu = decay * nu + (1 - decay) * g^2;   p = p - lr * g / sqrt(nu + eps)

    (``g / (sqrt(nu) + eps)`` where ``not eps_in_sqrt``). With momentum the buffer holds the
    learning-rate-scaled steps (``b = -lr * g / ... + momentum * b``), as optax's.

    Returns:
        An ``Optimizer``; its state is the tuple of the chain's states.

    Raises:
        BluTypeError: ``init`` of parameters that are not floats.
        BluValueError: ``momentum < 0``.
    """
    if momentum is not None and not momentum >= 0:
        raise BluValueError(with_user_line(f"optim.rmsprop: need momentum >= 0, got {momentum}"))
    scaler = scale_by_stddev if centered else scale_by_rms
    return _optimizer(
        "rmsprop",
        scaler(decay, eps, initial_scale, eps_in_sqrt, bias_correction),
        _scale_by_lr(learning_rate),
        identity() if momentum is None else trace(momentum, nesterov),
    )


def adagrad(
    learning_rate: float | Schedule,
    initial_accumulator_value: float = 0.1,
    eps: float = 1e-7,
) -> Optimizer:
    """Adagrad (Duchi et al. 2011), as ``optax.adagrad``: the chain ``scale_by_rss`` then
    ``-learning_rate``. Per leaf::

        s = s + g^2;   p = p - lr * g / sqrt(s + eps)     (0 where s is 0)

    with ``s`` starting at ``initial_accumulator_value``.

    Returns:
        An ``Optimizer``; its state is the tuple of the chain's states.

    Raises:
        BluTypeError: ``init`` of parameters that are not floats.
        BluValueError: ``initial_accumulator_value < 0``.
    """
    if not initial_accumulator_value >= 0:
        raise BluValueError(
            with_user_line(
                "optim.adagrad: need initial_accumulator_value >= 0 (a sum of squares), got "
                f"{initial_accumulator_value}"
            )
        )
    return _optimizer(
        "adagrad", scale_by_rss(initial_accumulator_value, eps), _scale_by_lr(learning_rate)
    )


def lion(
    learning_rate: float | Schedule,
    b1: float = 0.9,
    b2: float = 0.99,
    mu_dtype: Any = None,
    weight_decay: float = 1e-3,
    mask: Any = None,
) -> Optimizer:
    """Lion (Chen et al. 2023), as ``optax.lion``: the chain ``scale_by_lion``,
    ``add_decayed_weights(weight_decay, mask)`` then ``-learning_rate``. Per leaf::

        p = p - lr * (sign((1 - b1) * g + b1 * mu) + weight_decay * p)
        mu = b2 * mu + (1 - b2) * g

    (the decay term only where ``mask``, a pytree of bools or a callable ``params -> that``,
    is True).

    Returns:
        An ``Optimizer``; its state is the tuple of the chain's states. ``update`` needs
        ``params`` (for the decay), as optax's.

    Raises:
        BluTypeError: ``init`` of parameters that are not floats.
        BluValueError: ``b1`` or ``b2`` outside [0, 1]; ``update`` without ``params``.
    """
    return _optimizer(
        "lion",
        scale_by_lion(b1, b2, mu_dtype),
        add_decayed_weights(weight_decay, mask),
        _scale_by_lr(learning_rate),
    )
