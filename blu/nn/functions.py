"""Activations, softmax and friends, normalization, layers and losses (pure functions)."""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

import blu.numpy as bnp
from blu import lax, random
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer, get_aval
from blu.nn.logsumexp_weighted import weighted_logsumexp
from blu.nn.operands import _axes, _float_operand, _stable_max, _upcast
from blu.nn.softmax_masked import masked_softmax
from blu.transforms.ad_api import jvp
from blu.transforms.custom_derivatives import custom_jvp

# ---- activations -------------------------------------------------------------------------------


@custom_jvp
def _relu(x: Any) -> Any:
    return bnp.maximum(x, bnp.zeros_like(x))  # NaN stays NaN (as maximum, relu6, leaky_relu)


# derivative 0 at 0 (JAX's convention) and at NaN (JAX's ``select(x > 0, g, 0)``)
_relu.defjvps(lambda t, y, x: bnp.where(x > 0, t, bnp.zeros_like(t)))


def relu(x: Any) -> Any:
    """``max(x, 0)`` elementwise (NaN gives NaN); its derivative at 0 is taken as 0 (at NaN
    too, as JAX's)."""
    return _relu(bnp.asarray(x))


def sigmoid(x: Any) -> Any:
    """The logistic function ``1 / (1 + exp(-x))`` elementwise."""
    return lax.logistic(_float_operand(x))


def silu(x: Any) -> Any:
    """``x * sigmoid(x)`` (a.k.a. swish; Elfwing et al. 2017) elementwise."""
    x = _float_operand(x)
    return x * lax.logistic(x)


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_CUBIC = 0.044715
# beyond this |x| the tanh form's sech^2 term is below 1e-37 and the erf form's density below
# 1e-300: the derivatives clip x there, so that inf * 0 never makes a NaN
_GELU_CLIP = 10.0
_ERF_GELU_CLIP = 40.0


@custom_jvp
def _gelu_tanh(x: Any) -> Any:
    # tanh of x clipped as the derivative clips it (the same values: +-1 beyond |x| = 10 to
    # float64 precision), so that for float32/float64 x common-subexpression elimination leaves
    # one tanh per element for the value and its gradient
    xs = bnp.clip(x, -_GELU_CLIP, _GELU_CLIP)
    inner = _SQRT_2_OVER_PI * (xs + _GELU_CUBIC * (xs * xs * xs))
    return 0.5 * x * (1.0 + bnp.tanh(inner))


@custom_jvp
def _gelu_erf(x: Any) -> Any:
    return 0.5 * x * (1.0 + lax.erf(x * (1.0 / math.sqrt(2.0))))


def _gelu_tanh_grad_fun(x: Any) -> Any:
    """d/dx of the tanh form, from ``x`` alone (float32 for half floats, cast back):
    ``0.5 (1 + th) + 0.5 x (1 - th^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)``, ``th = tanh(u)``."""
    # tanh(u) is +-1 to float64 precision beyond |x| = 10 (u > 43), so clipping there changes
    # nothing and keeps x^3 from overflowing
    xs = bnp.clip(_upcast(x), -_GELU_CLIP, _GELU_CLIP)
    th = bnp.tanh(_SQRT_2_OVER_PI * (xs + _GELU_CUBIC * (xs * xs * xs)))
    poly = _SQRT_2_OVER_PI * (1.0 + (3.0 * _GELU_CUBIC) * (xs * xs))
    return (0.5 * (1.0 + th) + 0.5 * xs * (1.0 - th * th) * poly).astype(x.dtype)


def _gelu_erf_grad(x: Any) -> Any:
    """d/dx of the erf form: ``Phi(x) + x phi(x)`` (the normal CDF and density)."""
    x32 = _upcast(x)
    xs = bnp.clip(x32, -_ERF_GELU_CLIP, _ERF_GELU_CLIP)
    cdf = 0.5 * (1.0 + lax.erf(x32 * (1.0 / math.sqrt(2.0))))
    pdf = bnp.exp(-0.5 * (xs * xs)) * (1.0 / math.sqrt(2.0 * math.pi))
    return (cdf + xs * pdf).astype(x.dtype)


# The derivative as a call of its own that a backend recognizes: the CUDA plan computes
# ``g * gelu_tanh_grad(pre)`` in the product that makes ``g`` (cuBLASLt's DGELU epilogue, reading
# the pre-activation the forward's GELU_AUX_BIAS product kept), so the derivative is never stored.
# Differentiated (higher derivatives) as its body.
_gelu_tanh_grad = custom_jvp(_gelu_tanh_grad_fun)
_gelu_tanh_grad.defjvp(lambda p, t: jvp(_gelu_tanh_grad_fun, p, t))
_gelu_tanh_grad.lowering_name = "gelu_tanh_grad"

# The rules multiply the tangent by a derivative computed from x alone, so reverse mode keeps
# one residual per call instead of every intermediate of the elementwise chain.
_gelu_tanh.defjvp(lambda p, t: (_gelu_tanh(p[0]), t[0] * _gelu_tanh_grad(p[0])))
_gelu_tanh.lowering_name = "gelu_tanh"  # a GPU product before it takes it as its epilogue
_gelu_erf.defjvp(lambda p, t: (_gelu_erf(p[0]), t[0] * _gelu_erf_grad(p[0])))


def gelu(x: Any, approximate: bool = True) -> Any:
    """Gaussian error linear unit (Hendrycks & Gimpel 2016), elementwise.

    The derivative is a custom JVP rule computed from ``x`` alone (in float32 for
    bfloat16/float16, rounded to ``x``'s dtype), so reverse mode saves one array per call, not
    the intermediates of the chain; higher derivatives differentiate that rule.

    Args:
        x: float array.
        approximate: True: the tanh form ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``
            (GPT-2's); False: the exact ``0.5 x (1 + erf(x / sqrt(2)))``.

    Returns:
        An array of ``x``'s shape and dtype.
    """
    x = _float_operand(x)
    return _gelu_tanh(x) if approximate else _gelu_erf(x)


# ---- softmax family ----------------------------------------------------------------------------


def logsumexp(
    x: Any,
    axis: int | Sequence[int] | None = None,
    b: Any = None,
    keepdims: bool = False,
    return_sign: bool = False,
    where: Any = None,
) -> Any:
    """``log(sum(exp(x)))`` over ``axis``, computed stably (shifted by the max).

    ``-inf`` entries contribute nothing and get a zero (finite) gradient; the gradient is
    ``softmax(x)`` over the axes. An empty reduction gives ``-inf``; a group of only ``-inf``
    gives ``-inf`` with gradient 0 (docs/conventions.md).

    Args:
        x: float array (bfloat16/float16 are computed in float32).
        axis: an axis, a tuple of axes, or None for all.
        b: real weights broadcast with ``x``: ``log(|sum(b * exp(x))|)`` (JAX's ``b=``); the
            axes are those of the two shapes' broadcast, which may be larger than ``x``'s.
            Third, as in JAX's and SciPy's signatures (``logsumexp(a, axis, b, keepdims)``).
        keepdims: keep the reduced axes as size 1.
        return_sign: also return the sum's sign; without it a negative sum gives NaN.
        where: a boolean mask broadcast with ``x`` (and ``b``); False entries are left out.

    Returns:
        ``x``'s dtype (promoted with ``b``'s), of the broadcast shape of ``x``, ``b`` and
        ``where``, the axes removed (or size 1); ``(out, sign)`` with ``return_sign``.

    Raises:
        BluTypeError: complex ``b``.
        BluShapeError: ``b`` or ``where`` does not broadcast with ``x``.
        BluValueError: an axis out of range or repeated.
    """
    x = _float_operand(x)
    if b is not None or return_sign or where is not None:
        return weighted_logsumexp(x, axis, keepdims, b, return_sign, where)
    axes = _axes(axis, x.ndim, "logsumexp")
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    if any(x.shape[a] == 0 for a in axes):
        out = bnp.full(shape, -np.inf, x.dtype)
    else:
        x32 = _upcast(x)
        m = _stable_max(x32, axes)
        s = bnp.sum(bnp.exp(x32 - m), axis=axes, keepdims=True)
        # all -inf: s is 0; log(1) in its place keeps the gradient finite (0, not 0/0)
        empty = bnp.equal(s, 0)
        out = bnp.log(bnp.where(empty, bnp.ones_like(s), s)) + m
        out = bnp.where(empty, bnp.full_like(s, -np.inf), out).astype(x.dtype)
    if not keepdims:
        out = bnp.reshape(out, tuple(d for i, d in enumerate(x.shape) if i not in axes))
    return out


def softmax(x: Any, axis: int | Sequence[int] = -1, where: Any = None) -> Any:
    """``exp(x) / sum(exp(x))`` over ``axis``, computed stably; ``-inf`` entries give 0.

    Args:
        x: float array (bfloat16/float16 are computed in float32).
        axis: the normalized axis or axes (None: all).
        where: a boolean mask broadcast with ``x`` (JAX's ``where=``; a larger one gives the
            result its shape): False entries are left out of the sum and give 0 with gradient
            0; a group left empty gives 0s.

    Returns:
        An array of ``x``'s dtype and shape (broadcast with ``where``'s).

    Raises:
        BluShapeError: ``where`` does not broadcast with ``x``'s shape.
        BluValueError: an axis out of range or repeated.
    """
    x = _float_operand(x)
    if where is not None:
        return masked_softmax(x, axis, where, log=False)
    axes = _axes(axis, x.ndim, "softmax")  # (checked for empty x too)
    if x.size == 0:
        return x
    x32 = _upcast(x)
    e = bnp.exp(x32 - _stable_max(x32, axes))
    return (e / bnp.sum(e, axis=axes, keepdims=True)).astype(x.dtype)


def log_softmax(x: Any, axis: int | Sequence[int] = -1, where: Any = None) -> Any:
    """``x - logsumexp(x)`` over ``axis``, computed stably.

    Args:
        x: float array (bfloat16/float16 are computed in float32).
        axis: the normalized axis or axes (None: all).
        where: a boolean mask broadcast with ``x`` (JAX's ``where=``; a larger one gives the
            result its shape): False entries are left out of the sum and give ``-inf`` with
            gradient 0; a group left empty gives -infs.

    Returns:
        An array of ``x``'s dtype and shape (broadcast with ``where``'s).

    Raises:
        BluShapeError: ``where`` does not broadcast with ``x``'s shape.
        BluValueError: an axis out of range or repeated.
    """
    x = _float_operand(x)
    if where is not None:
        return masked_softmax(x, axis, where, log=True)
    axes = _axes(axis, x.ndim, "log_softmax")  # (checked for empty x too)
    if x.size == 0:
        return x
    x32 = _upcast(x)
    shifted = x32 - _stable_max(x32, axes)
    lse = bnp.log(bnp.sum(bnp.exp(shifted), axis=axes, keepdims=True))
    return (shifted - lse).astype(x.dtype)


# ---- normalization -----------------------------------------------------------------------------


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


# ---- layers ------------------------------------------------------------------------------------


def linear(x: Any, w: Any, b: Any = None) -> Any:
    """An affine map ``x @ w + b``.

    Args:
        x: ``(..., in)``.
        w: ``(in, out)``.
        b: optional ``(out,)``.

    Returns:
        ``(..., out)`` in the promoted dtype of the operands.

    Raises:
        BluShapeError: ``x``'s last axis is not ``w``'s first, or ``b`` is not ``(out,)``.
    """
    x, w = bnp.asarray(x), bnp.asarray(w)
    if w.ndim != 2 or x.ndim < 1 or x.shape[-1] != w.shape[0]:
        raise BluShapeError(
            with_user_line(
                f"nn.linear: x {get_aval(x).str_short()} and w {get_aval(w).str_short()} do not "
                "fit: w must be (in, out) with in = x.shape[-1]"
            )
        )
    y = bnp.matmul(x, w)
    if b is not None:
        b = bnp.asarray(b)
        if b.shape != (w.shape[1],):
            raise BluShapeError(
                with_user_line(
                    f"nn.linear: bias {get_aval(b).str_short()} must have shape ({w.shape[1]},)"
                )
            )
        y = y + b
    return y


def _check_int(x: Any, what: str, name: str) -> Any:
    x = bnp.asarray(x)
    if not dtypes.is_int(x.dtype):
        raise BluTypeError(
            with_user_line(f"nn.{name}: {what} must be integers, got {get_aval(x).str_short()}")
        )
    return x


def embedding(table: Any, ids: Any) -> Any:
    """Look up rows of ``table``: ``table[ids]``.

    Args:
        table: ``(num_embeddings, dim)``.
        ids: integer array of any shape, values in ``[0, num_embeddings)``.

    Returns:
        ``ids.shape + (dim,)`` in ``table``'s dtype. The gradient w.r.t. ``table`` scatter-adds
        into the looked-up rows.
    """
    table = bnp.asarray(table)
    ids = _check_int(ids, "ids", "embedding")
    if table.ndim != 2:
        raise BluShapeError(
            with_user_line(
                "nn.embedding: table must be (num_embeddings, dim), got "
                f"{get_aval(table).str_short()}"
            )
        )
    return bnp.take(table, ids, axis=0)


def one_hot(labels: Any, num_classes: int, dtype: Any = dtypes.float32, *, axis: int = -1) -> Any:
    """One-hot encoding: ``out[..., c] = (labels[...] == c)``.

    Args:
        labels: integer array; values outside ``[0, num_classes)`` give all-zero rows.
        num_classes: the length of the new axis.
        dtype: output dtype.
        axis: where the new axis goes in the result (``jax.nn.one_hot``'s ``axis``).

    Returns:
        ``labels.shape`` with ``num_classes`` inserted at ``axis``, of ``dtype``.

    Raises:
        BluValueError: ``axis`` is out of range for ``labels.ndim + 1``, or ``num_classes < 0``.
        BluTypeError: ``num_classes`` is not an integer.
    """
    labels = _check_int(labels, "labels", "one_hot")
    if isinstance(num_classes, Tracer):
        num_classes = int(num_classes)  # a ConcretizationError saying what to do
    try:  # JAX's operator.index: 2.5 was truncated to 2 and None was Python's TypeError
        if np.ndim(num_classes) != 0:  # operator.index refuses a 1-element (1,) array too
            raise TypeError
        n = operator.index(np.asarray(num_classes).item())
    except TypeError:
        raise BluTypeError(with_user_line(f"nn.one_hot: num_classes must be an int, got "
                                          f"{num_classes!r}")) from None  # fmt: skip
    if n < 0:
        raise BluValueError(with_user_line(f"nn.one_hot: num_classes {n} < 0"))
    labels = labels.astype(dtypes.int32) if labels.dtype.itemsize < 4 else labels  # no wrap
    shape = labels.shape + (n,)
    classes = lax.iota(labels.dtype, shape, len(shape) - 1)
    out = (bnp.expand_dims(labels, -1) == classes).astype(dtype)
    (ax,) = _axes(axis, len(shape), "one_hot")
    return out if ax == len(shape) - 1 else bnp.moveaxis(out, -1, ax)


def dropout(key: Any, x: Any, rate: float, deterministic: bool = False) -> Any:
    """Inverted dropout (Srivastava et al. 2014): zero each entry with probability ``rate`` and
    scale the survivors by ``1 / (1 - rate)``, so the expectation is ``x``.

    Args:
        key: ``uint32[2]`` PRNG key (``blu.random.key``).
        x: float array.
        rate: drop probability in ``[0, 1]`` (a Python float).
        deterministic: return ``x`` unchanged (evaluation mode).

    Returns:
        An array of ``x``'s shape and dtype.

    Raises:
        BluValueError: ``rate`` outside ``[0, 1]``.
    """
    x = bnp.asarray(x)
    rate = float(rate)
    if not 0.0 <= rate <= 1.0:
        raise BluValueError(with_user_line(f"nn.dropout: rate must be in [0, 1], got {rate}"))
    if deterministic or rate == 0.0:
        return x
    if rate == 1.0:
        return bnp.zeros_like(x)
    # keep an entry iff its 32 random bits fall below (1 - rate) * 2**32: one integer compare
    threshold = min(round((1.0 - rate) * 2.0**32), 2**32 - 1)
    keep = random.bits(key, x.shape) < np.uint32(threshold)
    return bnp.where(keep, x * (1.0 / (1.0 - rate)), bnp.zeros_like(x))


# ---- losses ------------------------------------------------------------------------------------


def cross_entropy(
    logits: Any, labels: Any, reduction: str = "mean", ignore_index: int | None = None
) -> Any:
    """Softmax cross-entropy with integer labels: ``logsumexp(logits) - logits[label]``.

    Numerically stable for any finite logits (no probabilities are formed in the forward
    pass; the backward pass is ``softmax(logits) - one_hot(labels)``).

    Labels outside ``[0, num_classes)``: positions whose label equals ``ignore_index`` (as in
    PyTorch, e.g. padding) contribute a zero loss and a zero gradient and are left out of the
    "mean". Any other out-of-range label is an error: a ``BluValueError`` where the labels are
    concrete; under ``jit`` (traced labels, which cannot be checked) its loss is NaN and so is
    its gradient, so the mistake shows in the loss instead of training on a wrong target (the
    loss and its gradient always agree).

    Args:
        logits: ``(..., num_classes)`` floats.
        labels: ``(...)`` integers in ``[0, num_classes)`` (or ``ignore_index``).
        reduction: "mean" (over the positions not ignored) or "sum" over all positions, or
            "none".
        ignore_index: a label value marking positions to leave out (None: none).

    Returns:
        A scalar (or ``(...)`` for "none"), float32 for bfloat16/float16 logits, otherwise in
        the logits' dtype.

    Raises:
        BluShapeError: ``labels`` is not ``logits.shape[:-1]``; BluValueError: bad reduction,
        or a concrete label out of range.
    """
    if reduction not in ("mean", "sum", "none"):
        raise BluValueError(
            with_user_line(
                f"nn.cross_entropy: reduction must be mean, sum or none, not {reduction!r}"
            )
        )
    x = _upcast(_float_operand(logits))
    labels = _check_int(labels, "labels", "cross_entropy")
    if x.ndim < 1 or labels.shape != x.shape[:-1]:
        raise BluShapeError(
            with_user_line(
                f"nn.cross_entropy: labels {get_aval(labels).str_short()} must have the shape of "
                f"logits {get_aval(x).str_short()} without its last axis"
            )
        )
    n = x.shape[-1]
    _check_labels(labels, n, ignore_index)
    classes = lax.iota(labels.dtype, x.shape, x.ndim - 1)
    hit = bnp.expand_dims(labels, -1) == classes
    if n == 0:
        loss = bnp.full(labels.shape, np.inf, x.dtype)
    else:
        # both terms relative to the max: the picked logit's large magnitude cancels exactly
        shifted = x - _stable_max(x, (x.ndim - 1,))
        picked = bnp.sum(bnp.where(hit, shifted, bnp.zeros_like(shifted)), axis=-1)
        loss = bnp.log(bnp.sum(bnp.exp(shifted), axis=-1)) - picked
    bad = (labels < 0) | (labels >= n)
    kept = None
    if ignore_index is not None:
        ignored = labels == ignore_index
        bad = bad & ~ignored
        kept = ~ignored
        # a product, not a select: the ignored positions' gradient is zero too
        loss = loss * kept.astype(loss.dtype)
    # NaN times the loss: NaN value and NaN gradient at an unchecked bad label
    loss = loss * bnp.where(bad, np.nan, 1.0).astype(loss.dtype)
    if reduction == "mean":
        if kept is None:
            return bnp.mean(loss)
        return bnp.sum(loss) / bnp.sum(kept.astype(loss.dtype))
    if reduction == "sum":
        return bnp.sum(loss)
    return loss


def _check_labels(labels: Any, n: int, ignore_index: int | None) -> None:
    """Raise for out-of-range concrete labels (traced ones are handled in the loss)."""
    from blu.core.interpreter import Tracer

    if isinstance(labels, Tracer):
        return
    v = np.asarray(labels)
    bad = (v < 0) | (v >= n)
    if ignore_index is not None:
        bad &= v != ignore_index
    if bad.any():
        pos = tuple(int(i) for i in np.argwhere(bad)[0])
        raise BluValueError(
            with_user_line(
                f"nn.cross_entropy: label {int(v[pos])} at position {pos} is out of range for "
                f"{n} classes (labels must be in [0, {n})); {int(bad.sum())} such label(s). "
                "Pass ignore_index=<label> for positions to leave out (e.g. padding)"
            )
        )
