"""``eigh_tridiagonal`` of ``jax.scipy.linalg``: eigenvalues (and eigenvectors) of a real
symmetric or complex Hermitian tridiagonal matrix, from ``blu.lax.linalg.eigh`` of the dense
matrix (``O(n^3)``; JAX's bisects Sturm sequences for the eigenvalues, ``O(n^2)``, and finds the
eigenvectors by inverse iteration), so it batches, compiles and differentiates as ``eigh``."""

from __future__ import annotations

import operator
from typing import Any

from blu import numpy as bnp
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax import linalg as lax_linalg
from blu.numpy.linalg._util import dtype, promote_inexact, shape
from blu.scipy.linalg._checks import floats


def eigh_tridiagonal(
    d: Any, e: Any, *, eigvals_only: bool = False, select: str = "a",
    select_range: tuple[Any, Any] | None = None, tol: float | None = None, key: Any = None,
) -> Any:  # fmt: skip
    """Eigenvalues (ascending) and eigenvectors of the Hermitian tridiagonal matrix with
    diagonal ``d`` and off-diagonal ``e`` (``jax.scipy.linalg.eigh_tridiagonal``).

    Args:
        d: ``(..., n)`` diagonal (its real part is used); e: ``(..., n - 1)`` the first
            superdiagonal (the subdiagonal is its conjugate). Promoted to one float dtype;
            leading axes are batch axes (JAX's takes one matrix).
        eigvals_only: return only the eigenvalues.
        select: 'a' (all) or 'i' (those of indices ``select_range[0] .. select_range[1]``,
            inclusive, in ascending order); 'v' is not built (nor in JAX).
        tol, key: accepted and unused (JAX's bisection tolerance and inverse-iteration seed).

    Returns:
        ``w`` ``(..., k)`` real, or ``(w, v)`` with the eigenvectors in the columns of ``v``
        ``(..., n, k)``. Differentiable as :func:`blu.scipy.linalg.eigh`.

    Raises:
        BluShapeError: ``e`` is not one shorter than ``d``. BluValueError: another ``select``,
            or a bad ``select_range``.
    """
    del tol, key
    d, e = promote_inexact(floats(d), floats(e))
    if len(shape(d)) < 1 or len(shape(e)) < 1 or shape(e)[-1] != max(shape(d)[-1] - 1, 0):
        raise BluShapeError(
            with_user_line(
                f"scipy.linalg.eigh_tridiagonal: d {get_aval(d).str_short()} and e "
                f"{get_aval(e).str_short()} need shapes (..., n) and (..., n - 1)"
            )
        )
    n = shape(d)[-1]
    if select == "a":
        lo, hi = 0, n - 1
    elif select == "i":
        if select_range is None or len(select_range) != 2:
            raise BluValueError(
                with_user_line("scipy.linalg.eigh_tridiagonal: select='i' needs select_range")
            )
        lo, hi = (operator.index(i) for i in select_range)
        if not 0 <= lo <= hi < n:
            raise BluValueError(
                with_user_line(
                    f"scipy.linalg.eigh_tridiagonal: select_range {select_range!r} is not an "
                    f"index range 0 <= lo <= hi < {n}"
                )
            )
    else:
        raise BluValueError(
            with_user_line(
                f"scipy.linalg.eigh_tridiagonal: select must be 'a' or 'i' ('v' is not "
                f"built), got {select!r}"
            )
        )
    batch = bnp.broadcast_shapes(shape(d)[:-1], shape(e)[:-1])
    d = bnp.broadcast_to(bnp.real(d).astype(dtype(d)), batch + (n,))
    e = bnp.broadcast_to(e, batch + (max(n - 1, 0),))
    r, c = bnp.arange(n)[:, None], bnp.arange(n)[None, :]
    pad = bnp.zeros(batch + (1,), dtype(e))
    upper = bnp.concatenate([e, pad], axis=-1)[..., :, None]  # T[i, i + 1] = e[i]
    a = bnp.where(r == c, d[..., :, None], 0)
    a = bnp.where(c == r + 1, upper, a)
    a = bnp.where(r == c + 1, bnp.conj(bnp.swapaxes(upper, -1, -2)), a)  # T[j + 1, j] = e[j]^*
    v, w = lax_linalg.eigh(a.astype(dtype(e)))
    w = w[..., lo : hi + 1].astype(dtypes.real_dtype(dtype(d)))
    return w if eigvals_only else (w, v[..., :, lo : hi + 1])
