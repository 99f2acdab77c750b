"""``scipy.signal.detrend`` (``jax.scipy.signal.detrend``), apart from ``signal`` so that the
spectral functions (``_spectral``), which ``signal`` re-exports, can detrend their segments
without importing ``signal`` back."""

from __future__ import annotations

from typing import Any

import numpy as np

import blu.numpy as bnp
from blu.core.errors import BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import asarray_operand, canonicalize_axis, to_inexact

__all__ = ["detrend"]


def detrend(
    data: Any,
    axis: int = -1,
    type: str = "linear",
    bp: Any = 0,
    overwrite_data: Any = None,
) -> Any:
    """Remove a linear or constant trend along ``axis`` (``scipy.signal.detrend``).

    ``"linear"`` subtracts each segment's least-squares line (segments between the sorted
    breakpoints ``bp``, with 0 and ``n``); ``"constant"`` subtracts the mean (``bp`` unused).
    The line is fitted in closed form: ``y - mean(y) - (t - mean(t)) cov(t, y) / var(t)``.

    Args:
        data: an array; integers and bools become the default float.
        axis: the axis along which to detrend.
        type: ``"linear"`` or ``"constant"``.
        bp: static breakpoints (an int or a sequence of ints in ``[0, n]``).
        overwrite_data: not supported (``None`` only, as JAX).

    Returns:
        The detrended array, of ``data``'s (inexact) shape and dtype.

    Raises:
        BluValueError: an unknown ``type``, or breakpoints outside ``[0, n]``.
        NotImplementedError: ``overwrite_data`` given.
    """
    if overwrite_data is not None:
        raise NotImplementedError("scipy.signal.detrend: overwrite_data is not supported")
    if type not in ("linear", "constant"):
        raise BluValueError(
            with_user_line(
                f"scipy.signal.detrend: type must be 'linear' or 'constant', got {type!r}"
            )
        )
    data = to_inexact(asarray_operand(data))
    aval = get_aval(data)
    axis = canonicalize_axis(axis, aval.ndim)
    if type == "constant":
        return data - bnp.mean(data, axis, keepdims=True)
    n = aval.shape[axis]
    bps = np.sort(np.unique(np.r_[0, np.asarray(bp, dtype=np.int64).ravel(), n]))
    if bps[0] < 0 or bps[-1] > n:
        raise BluValueError(
            with_user_line(
                f"scipy.signal.detrend: breakpoints {bp!r} must lie in [0, {n}] "
                f"(the length of axis {axis} of {aval.str_short()})"
            )
        )
    x = bnp.moveaxis(data, axis, 0)
    rdtype = np.finfo(aval.dtype).dtype
    pieces = []
    for lo, hi in zip(bps[:-1].tolist(), bps[1:].tolist()):
        y = x[lo:hi]
        npts = hi - lo
        t = np.arange(1, npts + 1, dtype=np.float64) / npts
        tc = (t - t.mean()).reshape((npts,) + (1,) * (aval.ndim - 1))
        resid = y - bnp.mean(y, 0, keepdims=True)
        if npts > 1:
            tcb = bnp.asarray(tc, rdtype)
            slope = bnp.sum(tcb * y, 0, keepdims=True) / rdtype.type((tc**2).sum())
            resid = resid - tcb * slope
        pieces.append(resid)
    if not pieces:  # an empty axis
        return data
    x = pieces[0] if len(pieces) == 1 else bnp.concatenate(pieces, 0)
    return bnp.moveaxis(x, 0, axis)
