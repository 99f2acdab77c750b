"""Special matrices of ``jax.scipy.linalg``: ``block_diag``, ``toeplitz`` and ``hilbert``."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import (
    asarray_operand,
    asarray_operands,
    broadcast_shapes,
    broadcast_to,
    promote_dtypes,
)
from blu.numpy.complexes import conj
from blu.numpy.creation import arange, zeros
from blu.numpy.manipulation import atleast_1d, atleast_2d, concatenate
from blu.numpy.padding import pad


def block_diag(*arrs: Any) -> Any:
    """The block-diagonal matrix of the arguments, in order (``jax.scipy.linalg.block_diag``).

    Args:
        *arrs: arrays of at most two dimensions (a scalar is a ``(1, 1)`` block and a vector
            ``(n,)`` a ``(1, n)`` block), promoted to one dtype (integers stay integers).

    Returns:
        ``(sum of rows, sum of columns)``; with no arguments a float ``(1, 0)`` array (as
        SciPy and JAX).

    Raises:
        BluShapeError: an argument with more than two dimensions.
    """
    if not arrs:
        return zeros((1, 0))
    arrs = tuple(promote_dtypes(*asarray_operands(*arrs)))
    for i, a in enumerate(arrs):
        if get_aval(a).ndim > 2:
            raise BluShapeError(
                with_user_line(f"scipy.linalg.block_diag: arguments must have at most 2 "
                               f"dimensions, got {get_aval(a).str_short()} at argument {i}")
            )  # fmt: skip
    blocks = [atleast_2d(a) for a in arrs]
    cols = sum(get_aval(b).shape[1] for b in blocks)
    rows, left = [], 0
    for b in blocks:
        c = get_aval(b).shape[1]
        rows.append(pad(b, ((0, 0), (left, cols - left - c))))
        left += c
    return concatenate(rows, axis=0)


def toeplitz(c: Any, r: Any = None) -> Any:
    """The Toeplitz matrix with first column ``c`` and first row ``r``
    (``jax.scipy.linalg.toeplitz``): ``T[..., i, j] = c[..., i - j]`` for ``i >= j``, else
    ``r[..., j - i]`` (``r[0]`` is ignored).

    Args:
        c: ``(..., m)`` (a scalar is ``(1,)``); leading axes are batch axes, as JAX's.
        r: ``(..., n)``; default ``conj(c)`` (a Hermitian matrix for real ``c[0]``). The batch
            shapes of ``c`` and ``r`` broadcast.

    Returns:
        ``(..., m, n)`` in the promoted dtype of ``c`` and ``r`` (integers stay integers).

    Raises:
        BluShapeError: the batch shapes do not broadcast.
    """
    c = atleast_1d(asarray_operand(c))
    r = conj(c) if r is None else atleast_1d(asarray_operand(r))
    c, r = promote_dtypes(c, r)
    (m,), (n,) = get_aval(c).shape[-1:], get_aval(r).shape[-1:]
    try:
        batch = broadcast_shapes(get_aval(c).shape[:-1], get_aval(r).shape[:-1])
    except Exception:
        raise BluShapeError(
            with_user_line(
                f"scipy.linalg.toeplitz: the batch shapes of c "
                f"{get_aval(c).str_short()} and r {get_aval(r).str_short()} do not "
                "broadcast"
            )
        ) from None
    c, r = broadcast_to(c, batch + (m,)), broadcast_to(r, batch + (n,))
    if m == 0 or n == 0:
        return zeros(batch + (m, n), get_aval(c).dtype)
    # elems = c reversed, then r[1:]: T[i, j] = elems[m - 1 - i + j]
    elems = concatenate([c[..., ::-1], r[..., 1:]], axis=-1)
    idx = (m - 1) - np.arange(m)[:, None] + np.arange(n)[None, :]
    return elems[..., idx]


def hilbert(n: int) -> Any:
    """The ``(n, n)`` Hilbert matrix ``H[i, j] = 1 / (i + j + 1)`` in the default float dtype
    (``jax.scipy.linalg.hilbert``; float32, as JAX's without x64).

    Raises:
        BluTypeError: ``n`` is not an integer. BluValueError: ``n`` is negative.
    """
    try:
        n = operator.index(n)
    except TypeError:
        raise BluTypeError(
            with_user_line(f"scipy.linalg.hilbert: n must be a Python int, got {n!r}")
        ) from None
    if n < 0:
        raise BluValueError(with_user_line(f"scipy.linalg.hilbert: n must be >= 0, got {n}"))
    i = arange(n, dtype=np.float32)
    return 1.0 / (i[:, None] + i[None, :] + 1.0)
