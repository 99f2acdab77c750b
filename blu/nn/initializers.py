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

from blu import lax, random
from blu.core import dtypes
from blu.core.aval import canonical_shape
from blu.core.errors import BluShapeError, with_user_line

Initializer = Callable[..., Any]

__all__ = [
    "Initializer",
    "constant",
    "lecun_normal",
    "normal",
    "ones",
    "truncated_normal",
    "uniform",
    "xavier_uniform",
    "zeros",
]


def zeros(key: Any, shape: Sequence[int], dtype: Any = dtypes.float32) -> Any:
    """All zeros (``key`` is ignored)."""
    return lax.full(canonical_shape(shape), 0, dtypes.canonicalize(dtype))


def ones(key: Any, shape: Sequence[int], dtype: Any = dtypes.float32) -> Any:
    """All ones (``key`` is ignored)."""
    return lax.full(canonical_shape(shape), 1, dtypes.canonicalize(dtype))


def constant(value: float) -> Initializer:
    """An initializer filling with ``value``."""

    def init(key: Any, shape: Sequence[int], dtype: Any = dtypes.float32) -> Any:
        return lax.full(canonical_shape(shape), value, dtypes.canonicalize(dtype))

    return init


def normal(stddev: float = 1e-2) -> Initializer:
    """Normal with mean 0 and standard deviation ``stddev`` (GPT-2 uses 0.02)."""

    def init(key: Any, shape: Sequence[int], dtype: Any = dtypes.float32) -> Any:
        return lax.mul(random.normal(key, shape, dtype), stddev)

    return init


def uniform(scale: float = 1e-2) -> Initializer:
    """Uniform in ``[0, scale)`` (as ``jax.nn.initializers.uniform``)."""

    def init(key: Any, shape: Sequence[int], dtype: Any = dtypes.float32) -> Any:
        return random.uniform(key, shape, dtype, 0.0, scale)

    return init


def truncated_normal(stddev: float = 1e-2, lower: float = -2.0, upper: float = 2.0) -> Initializer:
    """``stddev`` times a standard normal truncated to ``[lower, upper]``."""

    def init(key: Any, shape: Sequence[int], dtype: Any = dtypes.float32) -> Any:
        return lax.mul(random.truncated_normal(key, lower, upper, shape, dtype), stddev)

    return init


def _fans(shape: tuple[int, ...], name: str) -> tuple[int, int]:
    if len(shape) < 2:
        raise BluShapeError(
            with_user_line(f"initializers.{name}: needs a shape of rank >= 2, got {shape}")
        )
    receptive = math.prod(shape[:-2])
    return shape[-2] * receptive, shape[-1] * receptive


def xavier_uniform() -> Initializer:
    """Glorot & Bengio (2010): uniform in ``[-l, l)`` with ``l = sqrt(6 / (fan_in + fan_out))``,
    variance ``2 / (fan_in + fan_out)``."""

    def init(key: Any, shape: Sequence[int], dtype: Any = dtypes.float32) -> Any:
        shape = canonical_shape(shape)
        fan_in, fan_out = _fans(shape, "xavier_uniform")
        limit = math.sqrt(6.0 / max(1, fan_in + fan_out))
        return random.uniform(key, shape, dtype, -limit, limit)

    return init


# std of a standard normal truncated to [-2, 2], so the truncated draws have unit variance
_TRUNC_STD_2 = 0.87962566103423978


def lecun_normal() -> Initializer:
    """LeCun et al. (1998): variance ``1 / fan_in``, drawn from a normal truncated at two
    standard deviations (rescaled to keep the variance), as ``jax.nn.initializers``."""

    def init(key: Any, shape: Sequence[int], dtype: Any = dtypes.float32) -> Any:
        shape = canonical_shape(shape)
        fan_in, _ = _fans(shape, "lecun_normal")
        std = math.sqrt(1.0 / max(1, fan_in)) / _TRUNC_STD_2
        return lax.mul(random.truncated_normal(key, -2.0, 2.0, shape, dtype), std)

    return init
