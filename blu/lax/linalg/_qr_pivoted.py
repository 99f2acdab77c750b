"""The column permutation of a pivoted QR decomposition (``jax.lax.linalg.qr(x, pivoting=True)``)
as a blu program: Householder QR with column pivoting (Businger & Golub 1965, "Linear least
squares solutions by Householder transformations"; LAPACK's ``?geqp3``/``?laqp2``), a ``lax``
loop over ``min(m, n)`` steps, batched over the leading axes.

Step ``j`` takes, among the columns at positions ``j, ..., n - 1``, the first of largest norm of
its rows ``j, ..., m - 1`` (recomputed at each step, where LAPACK downdates them), swaps it to
position ``j`` (LAPACK's swap, so the columns left after ``min(m, n)`` steps are in LAPACK's
order) and reflects that column onto ``e_j`` by ``I - tau v v^H``. ``qr`` then factors
``x[..., :, p]`` with the ``qr`` primitive, so ``Q`` and ``R`` carry its signs, kernels and
derivative (the permutation is piecewise constant, so this is the derivative: JAX's rule).
Columns of equal norm (ties within rounding) may be taken in another order than LAPACK's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.interpreter import get_aval
from blu.lax.casts import convert_element_type
from blu.lax.complex import complex as make_complex
from blu.lax.complex import conj, real
from blu.lax.control_flow import fori_loop
from blu.lax.elementwise import abs as abs_
from blu.lax.elementwise import add, div, eq, ge, gt, mul, neg, select, sub
from blu.lax.linalg._helpers import check_matrix, col, row
from blu.lax.reductions import argmax, reduce_sum
from blu.lax.shapes import broadcast_in_dim, full_like, iota
from blu.lax.sorting import take_along_axis
from blu.lax.special import sqrt
from blu.transforms.ad_ops import stop_gradient

_i32 = np.int32


def _abs2(x: Any) -> Any:
    """``|x|^2``, real."""
    return real(mul(x, conj(x))) if dtypes.is_complex(get_aval(x).dtype) else mul(x, x)


def _scalar(j: Any, like: Any) -> Any:
    """The scalar ``j`` broadcast to ``like``'s shape."""
    return broadcast_in_dim(j, get_aval(like).shape, ())


def _batch(v: Any, like: Any) -> Any:
    """``v`` ``(...)`` broadcast over the last axis of ``like`` ``(..., p)``."""
    nd = get_aval(like).ndim
    return broadcast_in_dim(v, get_aval(like).shape, tuple(range(nd - 1)))


def _householder(A: Any, j: Any, rows: Any, pos: Any) -> Any:
    """``A`` with rows ``j, ...`` of every column reflected by the Householder reflector that maps
    rows ``j, ...`` of column ``j`` onto ``e_j`` (``v = x + phase(x_j) |x| e_j``)."""
    nd = get_aval(A).ndim
    at_col = row(eq(pos, _scalar(j, pos)), A)
    x = reduce_sum(select(at_col, A, full_like(A, 0)), nd - 1)
    zeros = full_like(x, 0)
    x = select(ge(rows, _scalar(j, rows)), x, zeros)  # (..., m): rows j, ... of column j
    at_j = eq(rows, _scalar(j, rows))
    alpha = reduce_sum(select(at_j, x, zeros), nd - 2)  # (...)
    xnorm = sqrt(reduce_sum(_abs2(x), nd - 2))
    absalpha = abs_(alpha)
    if dtypes.is_complex(get_aval(A).dtype):
        tiny = eq(absalpha, full_like(absalpha, 0))
        safe = select(tiny, full_like(absalpha, 1), absalpha)
        phase = div(alpha, make_complex(safe, full_like(safe, 0)))
        phase = select(tiny, full_like(phase, 1), phase)
        s = mul(phase, make_complex(xnorm, full_like(xnorm, 0)))
    else:
        s = select(ge(alpha, full_like(alpha, 0)), xnorm, neg(xnorm))
    v = add(x, select(at_j, _batch(s, x), zeros))
    vhv = mul(full_like(xnorm, 2), mul(xnorm, add(xnorm, absalpha)))  # v^H v
    nonzero = gt(vhv, full_like(vhv, 0))
    tau = select(nonzero, div(full_like(vhv, 2), select(nonzero, vhv, full_like(vhv, 1))),
                 full_like(vhv, 0))  # fmt: skip
    tau = convert_element_type(tau, get_aval(A).dtype)
    w = reduce_sum(mul(col(conj(v) if dtypes.is_complex(get_aval(v).dtype) else v, A), A), nd - 2)
    return sub(A, mul(col(v, A), row(mul(_batch(tau, w), w), A)))


def qr_pivots(x: Any) -> Any:
    """The column permutation ``p`` ``(..., n)`` int32 of the pivoted QR of ``x`` ``(..., m, n)``:
    ``x[..., :, p] = Q R`` with ``|R[i, i]|`` non-increasing. No derivative flows through it
    (``stop_gradient``; it is piecewise constant).

    Raises:
        BluTypeError: ``x`` is not floating point or complex. BluShapeError: rank < 2.
    """
    aval = get_aval(x)
    check_matrix("qr", aval, allow_complex=True)
    *batch, m, n = aval.shape
    nd = aval.ndim
    A = stop_gradient(x)
    if np.dtype(aval.dtype).itemsize < 4:  # float16 / bfloat16: pivot in float32, as qr computes
        A = convert_element_type(A, np.float32)
    pos = broadcast_in_dim(iota(_i32, n), (*batch, n), (nd - 2,))
    rows = broadcast_in_dim(iota(_i32, m), (*batch, m), (nd - 2,))
    rows_mn = col(rows, A)

    def step(j: Any, carry: tuple[Any, Any]) -> tuple[Any, Any]:
        A, perm = carry
        sq = _abs2(A)
        norms = reduce_sum(select(ge(rows_mn, _scalar(j, rows_mn)), sq, full_like(sq, 0)), nd - 2)
        jn = _scalar(j, pos)
        free = ge(pos, jn)
        pvt = _batch(argmax(select(free, norms, full_like(norms, -1)), nd - 2), pos)
        swap = select(eq(pos, jn), pvt, select(eq(pos, pvt), jn, pos))  # LAPACK's column swap
        A = take_along_axis(A, row(swap, A), nd - 1)
        return _householder(A, j, rows, pos), take_along_axis(perm, swap, nd - 2)

    k = min(m, n)
    if k == 0:
        return pos
    return fori_loop(0, k, step, (A, pos))[1]
