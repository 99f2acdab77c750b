"""Parameter initializers: each is ``init(key, shape, dtype=float32) -> array``.

As in ``jax.nn.initializers``: ``zeros`` and ``ones`` are initializers themselves; the others
are factories (``normal(0.02)``, ``xavier_uniform()``) returning one. Fans follow JAX's
convention for a weight of shape ``(..., in, out)``: ``fan_in = in * receptive``,
``fan_out = out * receptive`` with ``receptive`` the product of the leading dimensions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from blu import lax, random
from blu.core import dtypes
from blu.core.aval import canonical_shape
from blu.core.errors import (
    BluAxisError,
    BluShapeError,
    BluTypeError,
    BluValueError,
    with_user_line,
)

Initializer = Callable[..., Any]

__all__ = [
    "Initializer",
    "constant",
    "delta_orthogonal",
    "glorot_normal",
    "glorot_uniform",
    "he_normal",
    "he_uniform",
    "kaiming_normal",
    "kaiming_uniform",
    "lecun_normal",
    "lecun_uniform",
    "normal",
    "ones",
    "orthogonal",
    "truncated_normal",
    "uniform",
    "variance_scaling",
    "xavier_normal",
    "xavier_uniform",
    "zeros",
]


def zeros(key: Any, shape: Sequence[int], dtype: Any = dtypes.float32) -> Any:
    """All zeros (``key`` is ignored)."""
    return lax.full(canonical_shape(shape), 0, dtypes.canonicalize(dtype))


def ones(key: Any, shape: Sequence[int], dtype: Any = dtypes.float32) -> Any:
    """All ones (``key`` is ignored)."""
    return lax.full(canonical_shape(shape), 1, dtypes.canonicalize(dtype))


def constant(value: float, dtype: Any = dtypes.float32) -> Initializer:
    """An initializer filling with ``value``; ``dtype`` is the default of its ``dtype``."""
    default_dtype = dtype

    def init(key: Any, shape: Sequence[int], dtype: Any = None) -> Any:
        dt = default_dtype if dtype is None else dtype
        return lax.full(canonical_shape(shape), value, dtypes.canonicalize(dt))

    return init


def normal(stddev: float = 1e-2, dtype: Any = dtypes.float32) -> Initializer:
    """Normal with mean 0 and standard deviation ``stddev`` (GPT-2 uses 0.02); ``dtype`` is
    the default of the initializer's ``dtype``, as JAX's."""
    default_dtype = dtype

    def init(key: Any, shape: Sequence[int], dtype: Any = None) -> Any:
        dt = default_dtype if dtype is None else dtype
        return lax.mul(random.normal(key, shape, dt), stddev)

    return init


def uniform(scale: float = 1e-2, dtype: Any = dtypes.float32) -> Initializer:
    """Uniform in ``[0, scale)`` (as ``jax.nn.initializers.uniform``); ``dtype`` is the
    default of the initializer's ``dtype``."""
    default_dtype = dtype

    def init(key: Any, shape: Sequence[int], dtype: Any = None) -> Any:
        dt = default_dtype if dtype is None else dtype
        return random.uniform(key, shape, dt, 0.0, scale)

    return init


def truncated_normal(
    stddev: float = 1e-2, dtype: Any = dtypes.float32, lower: float = -2.0, upper: float = 2.0
) -> Initializer:
    """``stddev`` times a standard normal truncated to ``[lower, upper]`` (JAX's argument
    order: ``dtype``, the default of the initializer's ``dtype``, comes second)."""
    default_dtype = dtype

    def init(key: Any, shape: Sequence[int], dtype: Any = None) -> Any:
        dt = default_dtype if dtype is None else dtype
        return lax.mul(random.truncated_normal(key, lower, upper, shape, dt), stddev)

    return init


# std of a standard normal truncated to [-2, 2], so the truncated draws have unit variance
_TRUNC_STD_2 = 0.87962566103423978


_MODES = ("fan_in", "fan_out", "fan_avg")
_DISTRIBUTIONS = ("truncated_normal", "normal", "uniform")


Axes = int | Sequence[int]


def _is_axis(a: Any) -> bool:
    return isinstance(a, (int, np.integer))


def _check_axis(a: Any, shape: tuple[int, ...], what: str, name: str) -> int:
    """``a`` as an axis of ``shape`` in ``[0, ndim)``: an integer in ``[-ndim, ndim)``, else a
    BluTypeError (not an integer) or a BluAxisError (out of range), naming ``what``, ``a`` and
    ``shape`` (JAX fails at the same point with a raw TypeError or IndexError)."""
    ndim = len(shape)
    if not _is_axis(a):
        raise BluTypeError(
            with_user_line(
                f"initializers.{name}: {what} {a!r} ({type(a).__name__}) must be an integer "
                f"axis of the shape {shape}"
            )
        )
    if not -ndim <= a < ndim:
        raise BluAxisError(
            with_user_line(
                f"initializers.{name}: {what} {a!r} out of range for the shape {shape} "
                f"(rank {ndim})"
            )
        )
    return int(a) % ndim


def _axis_set(axes: Axes, shape: tuple[int, ...], what: str, name: str) -> tuple[int, ...]:
    if _is_axis(axes):
        axes = (axes,)
    elif isinstance(axes, (Sequence, np.ndarray)) and not isinstance(axes, (str, bytes)):
        axes = tuple(axes)
    else:
        raise BluTypeError(
            with_user_line(
                f"initializers.{name}: {what} {axes!r} ({type(axes).__name__}) must be an "
                f"integer axis or a sequence of them, of the shape {shape}"
            )
        )
    return tuple(sorted({_check_axis(a, shape, what, name) for a in axes}))


def _fans_at(
    shape: tuple[int, ...], in_axis: Axes, out_axis: Axes, batch_axis: Axes, name: str
) -> tuple[int, int]:
    """JAX's fans: ``in_size * receptive`` and ``out_size * receptive``, ``receptive`` the
    product of the axes that are none of ``in_axis``, ``out_axis``, ``batch_axis`` (each an
    axis or a sequence of axes)."""
    if len(shape) < 2:
        raise BluShapeError(
            with_user_line(f"initializers.{name}: needs a shape of rank >= 2, got {shape}")
        )
    ins = _axis_set(in_axis, shape, "in_axis", name)
    outs = _axis_set(out_axis, shape, "out_axis", name)
    batch = _axis_set(batch_axis, shape, "batch_axis", name)
    receptive = math.prod(d for i, d in enumerate(shape) if i not in ins + outs + batch)
    in_size = math.prod(shape[i] for i in ins)
    out_size = math.prod(shape[i] for i in outs)
    return in_size * receptive, out_size * receptive


def variance_scaling(
    scale: float,
    mode: str,
    distribution: str,
    in_axis: Axes = -2,
    out_axis: Axes = -1,
    batch_axis: Axes = (),
    dtype: Any = dtypes.float32,
) -> Initializer:
    """Draws with variance ``scale / n``, ``n`` the fan named by ``mode`` (as
    ``jax.nn.initializers.variance_scaling``; He et al. 2015, Glorot & Bengio 2010).

    Args:
        scale: the variance's numerator (1 for LeCun, 2 for He, 1 with ``fan_avg`` for Glorot).
        mode: ``"fan_in"``, ``"fan_out"`` or ``"fan_avg"`` (the mean of the two).
        distribution: ``"truncated_normal"`` (truncated at two standard deviations, rescaled
            to keep the variance), ``"normal"`` or ``"uniform"`` (in ``[-l, l)``,
            ``l = sqrt(3 * scale / n)``).
        in_axis, out_axis: the weight's input and output axes (an axis or a sequence of
            axes); the other axes are the receptive field (fan = its size times the axes'
            sizes).
        batch_axis: axes (an axis or a sequence) that count in neither fan nor the receptive
            field (independent weights stacked), as JAX's.
        dtype: the default dtype of the draws (float32).

    Returns:
        ``init(key, shape, dtype)``; ``shape`` needs rank >= 2.

    Raises:
        BluValueError: an unknown ``mode`` or ``distribution``, a negative ``scale``; its
            subclass BluAxisError (also an IndexError) an axis out of range (at ``init``).
        BluTypeError: an axis that is not an integer (at ``init``).
        BluShapeError: a shape of rank < 2 (at ``init``).
    """
    if isinstance(scale, (int, float, np.number)) and not scale >= 0:
        raise BluValueError(with_user_line(f"variance_scaling: scale {scale} must be >= 0"))
    if mode not in _MODES:
        raise BluValueError(f"variance_scaling: mode {mode!r}, expected one of {_MODES}")
    if distribution not in _DISTRIBUTIONS:
        raise BluValueError(
            f"variance_scaling: distribution {distribution!r}, expected one of {_DISTRIBUTIONS}"
        )
    default_dtype = dtype

    def init(key: Any, shape: Sequence[int], dtype: Any = None) -> Any:
        dt = dtypes.canonicalize(default_dtype if dtype is None else dtype)
        shape = canonical_shape(shape)
        fan_in, fan_out = _fans_at(shape, in_axis, out_axis, batch_axis, "variance_scaling")
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]
        variance = scale / max(1.0, n)
        if distribution == "truncated_normal":
            std = math.sqrt(variance) / _TRUNC_STD_2
            return lax.mul(random.truncated_normal(key, -2.0, 2.0, shape, dt), std)
        if distribution == "normal":
            return lax.mul(random.normal(key, shape, dt), math.sqrt(variance))
        limit = math.sqrt(3.0 * variance)
        return random.uniform(key, shape, dt, -limit, limit)

    return init


def glorot_uniform(
    in_axis: Axes = -2, out_axis: Axes = -1, batch_axis: Axes = (), dtype: Any = dtypes.float32
) -> Initializer:
    """Glorot & Bengio (2010), uniform: ``variance_scaling(1, "fan_avg", "uniform")``."""
    return variance_scaling(1.0, "fan_avg", "uniform", in_axis, out_axis, batch_axis, dtype)


def glorot_normal(
    in_axis: Axes = -2, out_axis: Axes = -1, batch_axis: Axes = (), dtype: Any = dtypes.float32
) -> Initializer:
    """Glorot & Bengio (2010), truncated normal: ``variance_scaling(1, "fan_avg",
    "truncated_normal")``."""
    return variance_scaling(
        1.0, "fan_avg", "truncated_normal", in_axis, out_axis, batch_axis, dtype
    )


def he_uniform(
    in_axis: Axes = -2, out_axis: Axes = -1, batch_axis: Axes = (), dtype: Any = dtypes.float32
) -> Initializer:
    """He et al. (2015), uniform: ``variance_scaling(2, "fan_in", "uniform")``."""
    return variance_scaling(2.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


def he_normal(
    in_axis: Axes = -2, out_axis: Axes = -1, batch_axis: Axes = (), dtype: Any = dtypes.float32
) -> Initializer:
    """He et al. (2015), truncated normal: ``variance_scaling(2, "fan_in",
    "truncated_normal")``."""
    return variance_scaling(2.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis, dtype)


def lecun_uniform(
    in_axis: Axes = -2, out_axis: Axes = -1, batch_axis: Axes = (), dtype: Any = dtypes.float32
) -> Initializer:
    """LeCun et al. (1998), uniform: ``variance_scaling(1, "fan_in", "uniform")``."""
    return variance_scaling(1.0, "fan_in", "uniform", in_axis, out_axis, batch_axis, dtype)


def lecun_normal(
    in_axis: Axes = -2, out_axis: Axes = -1, batch_axis: Axes = (), dtype: Any = dtypes.float32
) -> Initializer:
    """LeCun et al. (1998), truncated normal: ``variance_scaling(1, "fan_in",
    "truncated_normal")`` (variance ``1 / fan_in``, truncated at two standard deviations and
    rescaled to keep it)."""
    return variance_scaling(1.0, "fan_in", "truncated_normal", in_axis, out_axis, batch_axis, dtype)


xavier_uniform = glorot_uniform
xavier_normal = glorot_normal
kaiming_uniform = he_uniform
kaiming_normal = he_normal


def orthogonal(scale: float = 1.0, column_axis: int = -1, dtype: Any = dtypes.float32):
    """A (semi-)orthogonal matrix times ``scale`` (Saxe et al. 2014), as
    ``jax.nn.initializers.orthogonal``: the Q of a QR of a standard normal matrix, signs fixed
    by R's diagonal so the draw is uniform (Haar) over orthogonal matrices.

    The shape's ``column_axis`` gives the columns, the other axes (flattened) the rows; the
    result has orthonormal rows or columns, whichever are fewer.

    Raises:
        BluShapeError: a shape of rank < 2 (at ``init``).
        BluAxisError: ``column_axis`` out of range for the shape (at ``init``).
        BluTypeError: ``column_axis`` not an integer (at ``init``).
    """
    default_dtype = dtype

    def init(key: Any, shape: Sequence[int], dtype: Any = None) -> Any:
        from blu import numpy as bnp  # the user API's sibling (linalg.qr)

        dt = dtypes.canonicalize(default_dtype if dtype is None else dtype)
        shape = canonical_shape(shape)
        if len(shape) < 2:
            raise BluShapeError(
                with_user_line(f"initializers.orthogonal: needs a shape of rank >= 2, got {shape}")
            )
        col = _check_axis(column_axis, shape, "column_axis", "orthogonal")
        n_cols = shape[col]
        n_rows = math.prod(shape) // n_cols
        big, small = max(n_rows, n_cols), min(n_rows, n_cols)
        a = random.normal(key, (big, small), dt)
        q, r = bnp.linalg.qr(a)
        q = q * bnp.sign(bnp.diagonal(r))
        if n_rows < n_cols:
            q = q.T
        q = bnp.reshape(q, tuple(d for i, d in enumerate(shape) if i != col) + (n_cols,))
        q = bnp.moveaxis(q, -1, col)
        return q * scale

    return init


def delta_orthogonal(scale: float = 1.0, column_axis: int = -1, dtype: Any = dtypes.float32):
    """A convolution kernel that is an orthogonal matrix at its spatial center and zero
    elsewhere, as ``jax.nn.initializers.delta_orthogonal`` (Xiao and others, 2018).

    Dynamical isometry for CNNs: "Dynamical Isometry and a Mean Field Theory of CNNs: How to
    Train 10,000-Layer Vanilla Convolutional Neural Networks", arXiv:1806.05393, Algorithm 2.
    For a kernel of shape ``(k, in, out)``, ``(k1, k2, in, out)`` or ``(k1, k2, k3, in,
    out)`` (JAX's ``WIO``/``HWIO``/``DHWIO``), the tap at ``((k1 - 1) // 2, ...)`` is
    ``orthogonal(scale, column_axis)`` drawn on ``(in, out)``, so its rows are orthonormal
    times ``scale`` (``W[c] @ W[c].T = scale**2 I``); every other tap is zero.

    Args:
        scale: the factor of the orthogonal matrix.
        column_axis: the columns' axis of the ``(in, out)`` matrix (``-1``, ``0`` ... as in
            ``orthogonal``).
        dtype: the default dtype (a call's ``dtype`` wins).

    Raises:
        BluShapeError: a shape of rank other than 3, 4 or 5, or with ``in > out`` (at
            ``init``).
        BluAxisError: ``column_axis`` out of range for the 2-D matrix (at ``init``).
    """
    default_dtype = dtype

    def init(key: Any, shape: Sequence[int], dtype: Any = None) -> Any:
        from blu import numpy as bnp  # the user API's sibling (.at[].set)

        dt = dtypes.canonicalize(default_dtype if dtype is None else dtype)
        shape = canonical_shape(shape)
        if len(shape) not in (3, 4, 5):
            raise BluShapeError(
                with_user_line(
                    "initializers.delta_orthogonal: needs a 3-D, 4-D or 5-D kernel shape "
                    f"(spatial..., in, out), got {shape}"
                )
            )
        if shape[-1] < shape[-2]:
            raise BluShapeError(
                with_user_line(
                    f"initializers.delta_orthogonal: the shape {shape} has fan_in {shape[-2]} > "
                    f"fan_out {shape[-1]}; fan_in must be at most fan_out"
                )
            )
        matrix = orthogonal(scale, column_axis, dt)(key, shape[-2:])
        center = tuple((k - 1) // 2 for k in shape[:-2])
        return bnp.zeros(shape, dt).at[center].set(matrix)

    return init
