"""``jax.scipy.integrate``: ``trapezoid`` (the trapezoidal rule, as ``blu.numpy.trapezoid``)."""

from __future__ import annotations

from typing import Any

from blu.numpy.extras import trapezoid as _trapezoid

__all__ = ["trapezoid"]


def trapezoid(y: Any, x: Any = None, dx: Any = 1.0, axis: int = -1) -> Any:
    """The trapezoidal rule along ``axis`` (``jax.scipy.integrate.trapezoid``): ``sum((y[1:] +
    y[:-1]) / 2 * diff(x))`` with sample points ``x`` (1-d along ``axis``, or of ``y``'s
    shape) or the spacing ``dx``.

    Returns:
        ``y``'s shape without ``axis``, in the promoted float dtype of ``y`` and ``x``.

    Raises:
        BluAxisError: ``axis`` out of range.
    """
    return _trapezoid(y, x, dx, axis)
