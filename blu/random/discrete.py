"""Discrete samplers of ``jax.random``: ``geometric``, with ``jax.random``'s signatures, shapes
and dtypes.

They are correct in distribution (tested against scipy.stats by chi-square tests) but do not
reproduce ``jax.random``'s bits. Parameters broadcast to ``shape`` as JAX's ``_check_shape``
requires (each parameter's shape must broadcast *to* ``shape``), else ``BluShapeError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluTypeError, with_user_line
from blu.core.interpreter import get_aval
from blu.random.prng import _as_array, _broadcast, _check_key, _shape_arg
from blu.random.samplers import uniform

__all__ = ["geometric"]


def _int_dtype(dtype: Any, name: str) -> np.dtype:
    dtype = dtypes.canonicalize(dtype)
    if not dtypes.is_int(dtype):
        raise BluTypeError(with_user_line(f"random.{name}: dtype must be an integer, got {dtype}"))
    return dtype


def _open_unit(key: Any, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """Uniform in the open interval (0, 1): the smallest normal number replaces 0."""
    return uniform(key, shape, dtype, minval=float(dtypes.finfo(dtype).tiny), maxval=1.0)


def geometric(
    key: Any, p: Any, shape: Sequence[int] | None = None, dtype: Any = dtypes.int32
) -> Any:
    """Geometric draws: the number of Bernoulli(``p``) trials up to and including the first
    success, on ``{1, 2, ...}`` (mean ``1 / p``), as ``floor(log(u) / log1p(-p)) + 1`` with
    ``u`` uniform in (0, 1) (JAX's; ``floor`` of an exponential of rate ``-log1p(-p)``).

    Computed in ``p``'s float dtype (float32 for Python floats, integers and 16-bit floats);
    draws beyond ``dtype``'s maximum (``p`` near 0, or ``p = 0``) are clipped to that maximum.
    ``p = 1`` gives 1.

    Args:
        key: ``uint32[2]``.
        p: success probabilities in (0, 1], broadcastable to ``shape``.
        shape: output shape (default ``p``'s shape).
        dtype: an integer dtype.

    Returns:
        An array of ``shape`` and ``dtype``, values >= 1.

    Raises:
        BluShapeError: ``p`` does not broadcast to ``shape``.
        BluTypeError: ``key`` is not a key, or ``dtype`` is not an integer.
    """
    dtype = _int_dtype(dtype, "geometric")
    key = _check_key(key, "geometric")
    p = _as_array(p)
    aval = get_aval(p)
    fdt = aval.dtype if aval.dtype in (dtypes.float32, dtypes.float64) else dtypes.float32
    shape = aval.shape if shape is None else _shape_arg(shape, "geometric")
    p = _broadcast(lax.convert_element_type(p, fdt), shape, "p", "geometric")
    log_u = lax.log(_open_unit(key, shape, fdt))
    g = lax.add(lax.floor(lax.div(log_u, lax.log1p(lax.neg(p)))), lax.full(shape, 1.0, fdt))
    # clip in float before the cast (a float above the integer range has no defined cast);
    # the largest float not above dtype's max (float32(2**31 - 1) rounds up to 2**31)
    top = np.asarray(np.iinfo(dtype).max, fdt)
    if float(top) > np.iinfo(dtype).max:
        top = np.nextafter(top, np.asarray(0, fdt))
    g = lax.min(g, lax.full(shape, float(top), fdt))
    return lax.convert_element_type(g, dtype)
