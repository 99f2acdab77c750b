"""Normalization: ``layer_norm`` and ``rms_norm``, and with state ``batch_norm`` (its running
statistics threaded functionally, the train / eval switch explicit) and ``group_norm`` (channels
last)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

import blu.numpy as bnp
from blu import lax
from blu.core.errors import BluShapeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.nn.operands import _axes, _float_operand, _upcast
from blu.transforms.custom_derivatives import custom_jvp
from blu.transforms.remat import checkpoint, checkpoint_name, checkpoint_policies

__all__ = ["BATCH_NORM_STATISTICS", "batch_norm", "group_norm", "layer_norm", "rms_norm"]

# the ``checkpoint_name`` tags of batch norm's training statistics (per feature, float32): save
# them (``checkpoint_policies.save_only_these_names(*BATCH_NORM_STATISTICS)``) to rematerialize a
# block around a batch norm without recomputing its reductions
BATCH_NORM_STATISTICS = ("batch_norm_mean", "batch_norm_var", "batch_norm_rstd")


def _param_for(p: Any, x: Any, axes: tuple[int, ...], what: str, name: str) -> Any:
    """Reshape a scale/shift parameter of the normalized axes' shape so it broadcasts against
    ``x`` (e.g. gamma (C,) for axis=1 of (N, C, L) becomes (C, 1))."""
    p = bnp.asarray(p)
    norm_shape = tuple(x.shape[a] for a in axes)
    if p.shape == norm_shape:
        first = axes[0]
        shape = tuple(x.shape[i] if i in axes else 1 for i in range(first, x.ndim))
        return bnp.reshape(p, shape)
    try:
        np.broadcast_shapes(p.shape, x.shape)
    except ValueError:
        raise BluShapeError(
            with_user_line(
                f"nn.{name}: {what} {get_aval(p).str_short()} must have the normalized shape "
                f"{norm_shape} (or broadcast to x {get_aval(x).str_short()})"
            )
        ) from None
    return p


@functools.cache
def _layer_norm_fn(axes: tuple[int, ...], eps: float, has_g: bool, has_b: bool) -> custom_jvp:
    """The custom_jvp normalization ``f(x, params)`` (params: ``(g, b)``, those present, already
    broadcastable to ``x`` and in the compute dtype) for one static configuration."""

    def mean(v: Any) -> Any:
        return bnp.mean(v, axis=axes, keepdims=True)

    def stats(x: Any) -> tuple[Any, Any]:
        """``xhat`` (compute dtype) and the per-row ``rstd = 1 / sqrt(var + eps)``."""
        x32 = _upcast(x)
        xc = x32 - mean(x32)
        rstd = lax.rsqrt(mean(xc * xc) + eps)  # mean of squared deviations: no cancellation
        return xc * rstd, rstd

    def affine(xhat: Any, params: tuple) -> Any:
        it = iter(params)
        y = xhat * next(it) if has_g else xhat
        return y + next(it) if has_b else y

    @custom_jvp
    def f(x: Any, params: tuple) -> Any:
        return affine(stats(x)[0], params).astype(x.dtype)

    @f.defjvp
    def f_jvp(primals: tuple, tangents: tuple) -> tuple[Any, Any]:
        (x, params), (tx, tparams) = primals, tangents
        xhat, rstd = stats(x)
        # the tangent reads xhat rounded to x's dtype (the one activation reverse mode keeps,
        # as PyTorch and llm.c keep it), rstd per row and g
        xh = _upcast(xhat.astype(x.dtype))
        t = _upcast(tx)
        # d xhat = rstd (t - mean(t) - xhat mean(t xhat)) (Ba et al. 2016, the standard closed
        # form; its transpose is the usual dx = rstd (g dy - mean(g dy) - xhat mean(g dy xhat)))
        dxhat = (t - mean(t) - xh * mean(t * xh)) * rstd
        it, tit = iter(params), iter(tparams)
        if has_g:
            g, tg = next(it), next(tit)
            dy = dxhat * g + xh * tg
        else:
            dy = dxhat
        if has_b:
            next(it)
            dy = dy + next(tit)
        return f(x, params), dy.astype(x.dtype)

    return f


def layer_norm(
    x: Any,
    gamma: Any = None,
    beta: Any = None,
    eps: float = 1e-5,
    axis: int | Sequence[int] = -1,
) -> Any:
    """Layer normalization (Ba, Kiros & Hinton 2016): ``(x - mean) / sqrt(var + eps) * gamma +
    beta`` with the mean and (biased) variance over ``axis``.

    Its derivative is a custom JVP rule in the closed form, so reverse mode keeps one array the
    size of ``x`` per call (the normalized values, rounded to ``x``'s dtype) plus the per-row
    reciprocal standard deviation (and ``gamma``), not every intermediate; forward mode and
    higher derivatives work (they differentiate the rule). A ``gamma``/``beta`` that is not
    differentiated still gets a zero tangent through the rule.

    Args:
        x: float array (bfloat16/float16: statistics and the affine map in float32).
        gamma, beta: optional scale and shift of the normalized axes' shape (e.g. ``(C,)``).
        eps: added to the variance.
        axis: the normalized axis or axes.

    Returns:
        An array of ``x``'s shape and dtype.

    Raises:
        BluShapeError: gamma/beta do not fit the normalized axes.
    """
    x = _float_operand(x)
    axes = _axes(axis, x.ndim, "layer_norm")
    cd = _upcast(x).dtype
    params = []
    if gamma is not None:
        params.append(_param_for(gamma, x, axes, "gamma", "layer_norm").astype(cd))
    if beta is not None:
        params.append(_param_for(beta, x, axes, "beta", "layer_norm").astype(cd))
    f = _layer_norm_fn(axes, float(eps), gamma is not None, beta is not None)
    return f(x, tuple(params))


def rms_norm(x: Any, gamma: Any = None, eps: float = 1e-6, axis: int | Sequence[int] = -1) -> Any:
    """Root-mean-square normalization (Zhang & Sennrich 2019): ``x / sqrt(mean(x^2) + eps) *
    gamma``, statistics in float32 for bfloat16/float16. Shapes as in ``layer_norm``."""
    x = _float_operand(x)
    axes = _axes(axis, x.ndim, "rms_norm")
    x32 = _upcast(x)
    y = x32 * lax.rsqrt(bnp.mean(x32 * x32, axis=axes, keepdims=True) + eps)
    if gamma is not None:
        y = y * _param_for(gamma, x, axes, "gamma", "rms_norm").astype(y.dtype)
    return y.astype(x.dtype)


def _feature_param(p: Any, c: int, what: str, name: str) -> Any:
    p = bnp.asarray(p)
    if p.shape != (c,):
        raise BluShapeError(
            with_user_line(f"nn.{name}: {what} {get_aval(p).str_short()} must have shape ({c},)")
        )
    return p


def batch_norm(
    x: Any,
    scale: Any,
    bias: Any,
    running_mean: Any,
    running_var: Any,
    *,
    train: bool,
    momentum: float = 0.9,
    eps: float = 1e-5,
    axis: int = -1,
) -> tuple[Any, tuple[Any, Any]]:
    """Batch normalization (Ioffe & Szegedy 2015) as a pure function of its state.

    ``y = (x - mu) / sqrt(var + eps) * scale + bias`` per feature (the entries of ``axis``).
    With ``train=True``, ``mu`` and ``var`` are the batch's mean and biased variance over every
    axis but ``axis``, and the running statistics are updated (flax's momentum convention)::

        new_mean = momentum * running_mean + (1 - momentum) * mu
        new_var  = momentum * running_var  + (1 - momentum) * var * n / (n - 1)

    with ``n`` the number of values per feature: the running variance takes the *unbiased*
    batch variance, as ``torch.nn.BatchNorm`` does (flax's ``BatchNorm`` takes the biased one;
    the normalization itself uses the biased variance in both). No gradient flows into the new
    running statistics. With ``train=False``, ``mu`` and ``var`` are ``running_mean`` and
    ``running_var``, returned unchanged. Thread the returned statistics into the next step
    (flax's ``batch_stats`` collection, kept apart from the trained parameters).

    Args:
        x: float array, features on ``axis`` (NHWC: the default ``-1``). bfloat16/float16:
            statistics and the affine map in float32, ``y`` rounded back to ``x``'s dtype.
        scale, bias: ``(C,)`` with ``C = x.shape[axis]``.
        running_mean, running_var: ``(C,)`` (usually float32); the new ones keep their dtype.
        train: batch statistics and an update (True) or the running ones (False); keyword-only
            so that the switch is always explicit.
        momentum: weight of the old running statistics (flax's 0.9 = PyTorch's 0.1).
        eps: added to the variance.
        axis: the feature axis.

    Returns:
        ``(y, (new_mean, new_var))``: ``y`` of ``x``'s shape and dtype.

    Raises:
        BluShapeError: a parameter or statistic is not ``(C,)``.
        BluValueError: ``axis`` out of range; ``train=True`` with one value per feature (the
            unbiased variance is undefined, as PyTorch refuses).
    """
    x = _float_operand(x)
    (ax,) = _axes(axis, x.ndim, "batch_norm")
    c = x.shape[ax]
    scale, bias, running_mean, running_var = (
        _feature_param(p, c, w, "batch_norm")
        for p, w in (
            (scale, "scale"),
            (bias, "bias"),
            (running_mean, "running_mean"),
            (running_var, "running_var"),
        )
    )
    red = tuple(i for i in range(x.ndim) if i != ax)
    bshape = tuple(c if i == ax else 1 for i in range(x.ndim))
    x32 = _upcast(x)
    cd = x32.dtype
    if train:
        n = int(np.prod([x.shape[i] for i in red], dtype=np.int64))
        if n < 2:
            raise BluValueError(
                with_user_line(
                    f"nn.batch_norm: train=True needs more than one value per feature, got x "
                    f"{get_aval(x).str_short()} with features on axis {ax}"
                )
            )
        y, mu, var = _train_normalize(x, scale, bias, red, bshape, float(eps))
        m = float(momentum)
        bm = lax.stop_gradient(bnp.reshape(mu, (c,)))
        bv = lax.stop_gradient(bnp.reshape(var, (c,))) * (n / (n - 1))
        sd = running_mean.dtype
        new_mean = (m * _upcast(running_mean) + (1.0 - m) * bm).astype(sd)
        new_var = (m * _upcast(running_var) + (1.0 - m) * bv).astype(running_var.dtype)
        return y, (new_mean, new_var)
    x32 = _upcast(x)
    cd = x32.dtype
    mu = bnp.reshape(_upcast(running_mean).astype(cd), bshape)
    var = bnp.reshape(_upcast(running_var).astype(cd), bshape)
    y = (x32 - mu) * lax.rsqrt(var + eps)
    y = y * bnp.reshape(scale.astype(cd), bshape) + bnp.reshape(bias.astype(cd), bshape)
    return y.astype(x.dtype), (running_mean, running_var)


@functools.partial(
    checkpoint,
    policy=checkpoint_policies.save_only_these_names(*BATCH_NORM_STATISTICS),
    static_argnums=(3, 4, 5),
)
def _train_normalize(x, scale, bias, red, bshape, eps):
    """``(y, mu, var)`` of training mode. Rematerialized (``blu.checkpoint``): the backward pass
    keeps ``x`` in its own dtype and the per-feature statistics, and recomputes the centred and
    normalized values where it reads them, as a fused batch norm's backward does (PyTorch,
    cuDNN), instead of keeping two float32 copies of every activation."""
    x32 = _upcast(x)
    cd = x32.dtype
    xhat, mu, var = _standardize(x32, red, eps)
    y = xhat * bnp.reshape(scale.astype(cd), bshape) + bnp.reshape(bias.astype(cd), bshape)
    return y.astype(x.dtype), mu, var


# the shift's sample holds at least 1 / _SHIFT_SAMPLE of each feature's values (_statistics)
_SHIFT_SAMPLE = 64


def _shift_sample(x: Any, red: tuple[int, ...]) -> Any:
    """A leading block of ``x`` holding at least ``1 / _SHIFT_SAMPLE`` of each feature's values
    (and under twice that where the sizes allow): the first ``ceil(n_i / (64 F))`` entries along
    each reduced axis in turn, ``F`` the fraction kept so far, so that a batch of 256 images
    keeps 4 whole images and a batch of one keeps rows of its image."""
    idx = [slice(None)] * x.ndim
    num, den = 1, 1  # the fraction kept so far
    for i in red:
        n = x.shape[i]
        k = min(n, max(1, -(-n * den // (_SHIFT_SAMPLE * num))))
        idx[i] = slice(0, k)
        num, den = num * k, den * n
    return x[tuple(idx)]


def _statistics(x: Any, red: tuple[int, ...], eps: float) -> tuple[Any, Any, Any]:
    """``(mu, var, rstd)`` over ``red`` (kept dims), named for the checkpoint policy.

    One pass over ``x`` (both sums read it together, where the mean and then the mean of
    squared deviations read it twice before the normalization's pass): the "shifted data" variance
    (Chan, Golub & LeVeque 1983), ``var = mean((x - c)^2) - mean(x - c)^2``, with ``c`` the
    mean of a sample ``S`` holding a fraction ``f >= 1/64`` of each feature's values
    (``_shift_sample``; reading it costs ``f`` of a pass). The subtraction multiplies the sums'
    rounding error by ``1 + (mu - c)^2 / var``, and ``var >= f (c - mu)^2`` (the deviations
    of ``S`` alone, by Jensen's inequality), so by at most ``1 + 1/f = 65`` whatever the data,
    and by about 1 where ``S`` is typical of the batch. Unshifted sums (``E[x^2] - E[x]^2``)
    lose a variance of 1 under a mean of 3e3 in float32; sums shifted by one value lose it when
    that value is an outlier (1e3 among N(0, 1)). The identity holds for every ``c`` (held
    constant), so its derivatives are the variance's."""
    c = lax.stop_gradient(bnp.mean(_shift_sample(x, red), axis=red, keepdims=True))
    xs = x - c
    d = bnp.mean(xs, axis=red, keepdims=True)
    mu = checkpoint_name(c + d, BATCH_NORM_STATISTICS[0])
    var = bnp.maximum(bnp.mean(xs * xs, axis=red, keepdims=True) - d * d, 0.0)  # biased
    var = checkpoint_name(var, BATCH_NORM_STATISTICS[1])
    return mu, var, checkpoint_name(lax.rsqrt(var + eps), BATCH_NORM_STATISTICS[2])


@functools.partial(custom_jvp, nondiff_argnums=(1, 2))
def _standardize(x: Any, red: tuple[int, ...], eps: float) -> tuple[Any, Any, Any]:
    """``(xhat, mu, var)``: ``xhat = (x - mu) / sqrt(var + eps)`` with the batch's mean and
    biased variance over ``red``. Its own JVP rule (``_standardize_jvp``)."""
    mu, var, rstd = _statistics(x, red, eps)
    return (x - mu) * rstd, mu, var


@_standardize.defjvp
def _standardize_jvp(red, eps, primals, tangents):
    """``dxhat = rstd * (dx - mean(dx) - xhat * mean(xhat * dx))`` (the derivative of the
    standardization with ``mean(xhat) = 0`` used, as the batch norm backward of Ioffe & Szegedy
    2015, eq. in section 3, is written), ``dmu = mean(dx)``, ``dvar = 2 mean(xhat * dx) / rstd``.

    Differentiating the statistics' formulas instead chains the reductions: the mean's
    cotangent sums a term made from the variance's, so reverse mode read every activation three
    times (two column reductions one after the other, then the input gradient). Here both
    reductions of the transpose (``sum(g)``, ``sum(g * xhat)``) read only the cotangent and the
    forward values: one pass, as cuDNN's and PyTorch's batch norm backward. The expressions are
    the exact derivative (``mean(xhat)`` is identically 0), so higher orders stay exact."""
    (x,), (dx,) = primals, tangents
    mu, var, rstd = _statistics(x, red, eps)
    xhat = (x - mu) * rstd
    dmu = bnp.mean(dx, axis=red, keepdims=True)
    m2 = bnp.mean(xhat * dx, axis=red, keepdims=True)
    dxhat = rstd * (dx - dmu) - xhat * (rstd * m2)
    return (xhat, mu, var), (dxhat, dmu, 2.0 * m2 / rstd)


def group_norm(
    x: Any, num_groups: int, scale: Any = None, bias: Any = None, eps: float = 1e-5
) -> Any:
    """Group normalization (Wu & He 2018), channels last.

    The ``C`` channels of ``x`` ``(N, *spatial, C)`` are split into ``num_groups`` groups of
    ``C // num_groups`` consecutive channels; each example's group is normalized by its own
    mean and biased variance over the spatial axes and the group's channels, then the per-
    channel ``scale`` and ``bias`` apply (``torch.nn.GroupNorm`` / flax's ``GroupNorm`` with
    channels last). No state, the same in training and evaluation. ``num_groups=1`` is layer
    normalization over all but the batch axis; ``num_groups=C`` is instance normalization.

    Args:
        x: float ``(N, *spatial, C)`` (rank >= 2); bfloat16/float16: statistics in float32.
        num_groups: a divisor of ``C``.
        scale, bias: optional ``(C,)``.
        eps: added to the variance.

    Returns:
        An array of ``x``'s shape and dtype.

    Raises:
        BluShapeError: ``x`` of rank < 2, or ``scale``/``bias`` not ``(C,)``.
        BluValueError: ``num_groups`` does not divide ``C``.
    """
    x = _float_operand(x)
    if x.ndim < 2:
        raise BluShapeError(
            with_user_line(
                f"nn.group_norm: x {get_aval(x).str_short()} needs rank >= 2 (N, ..., C)"
            )
        )
    c, g = x.shape[-1], int(num_groups)
    if g < 1 or c % g:
        raise BluValueError(
            with_user_line(f"nn.group_norm: num_groups {num_groups} must divide the {c} channels")
        )
    xg = bnp.reshape(x, (*x.shape[:-1], g, c // g))
    axes = (*range(1, x.ndim - 1), x.ndim)  # spatial axes and the channels within a group
    # scale and bias of xg's full rank (1, ..., 1, G, C/G), never mistaken for the normalized
    # axes' shape: they broadcast, and layer_norm applies them in the compute dtype before the
    # one rounding to x's dtype
    full = (1,) * (x.ndim - 1) + (g, c // g)
    sb = [
        None if p is None else bnp.reshape(_feature_param(p, c, w, "group_norm"), full)
        for p, w in ((scale, "scale"), (bias, "bias"))
    ]
    return bnp.reshape(layer_norm(xg, sb[0], sb[1], eps=eps, axis=axes), x.shape)
