"""``expm``, the matrix exponential of ``jax.scipy.linalg``, by Padé approximation with
scaling and squaring (N. J. Higham, "The scaling and squaring method for the matrix exponential
revisited", SIAM J. Matrix Anal. Appl. 26(4), 2005, Algorithm 2.3), composed from ordinary blu
operations (products, one LU solve, ``lax.switch`` and ``lax.fori_loop``), so it
differentiates, batches and compiles; ``expm_frechet``, its derivative (``expm``'s JVP)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax import linalg as lax_linalg
from blu.numpy import linalg as np_linalg
from blu.numpy.creation import eye, full_like
from blu.numpy.extras import vectorize
from blu.numpy.linalg._util import dtype, promote_inexact, shape
from blu.numpy.products import matmul
from blu.numpy.reductions import max as _max
from blu.numpy.reductions import sum as _sum
from blu.numpy.transcendental import log2
from blu.numpy.ufuncs import abs as _abs
from blu.numpy.ufuncs import ceil, maximum
from blu.scipy.linalg._checks import matrices
from blu.transforms.ad_api import jvp

# Higham (2005), Table 2.3: the largest 1-norm for which the degree-m Padé approximant of
# exp(A) meets the unit roundoff of IEEE double (m = 3, 5, 7, 9, 13) and single (m = 3, 5, 7)
# precision, and the coefficients b_0 .. b_m of the approximants (Higham's (2.3)).
_THETA = {
    64: (1.495585217958292e-2, 2.539398330063230e-1, 9.504178996162932e-1,
         2.097847961257068e0, 5.371920351148152e0),
    32: (4.258730016922831e-1, 1.880152677804762e0, 3.925724783138660e0),
}  # fmt: skip
_DEGREES = {64: (3, 5, 7, 9, 13), 32: (3, 5, 7)}
_B = {
    3: (120.0, 60.0, 12.0, 1.0),
    5: (30240.0, 15120.0, 3360.0, 420.0, 30.0, 1.0),
    7: (17297280.0, 8648640.0, 1995840.0, 277200.0, 25200.0, 1512.0, 56.0, 1.0),
    9: (17643225600.0, 8821612800.0, 2075673600.0, 302702400.0, 30270240.0, 2162160.0,
        110880.0, 3960.0, 90.0, 1.0),
    13: (64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0,
         129060195264000.0, 10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0,
         40840800.0, 960960.0, 16380.0, 182.0, 1.0),
}  # fmt: skip


def _pade(m: int):
    """``A -> (U, V)``: the odd and even parts of the degree-``m`` Padé numerator, so that
    ``r_m(A) = (V - U)^-1 (V + U)`` (Higham's (2.3); degree 13 by his (2.4)-(2.5) with
    three products for the even powers and three more)."""
    b = _B[m]

    def uv(A: Any) -> tuple[Any, Any]:
        ident = eye(shape(A)[-1], dtype=dtype(A))
        A2 = matmul(A, A)
        if m == 13:
            A4 = matmul(A2, A2)
            A6 = matmul(A4, A2)
            u = matmul(A6, b[13] * A6 + b[11] * A4 + b[9] * A2)
            u = u + b[7] * A6 + b[5] * A4 + b[3] * A2 + b[1] * ident
            v = matmul(A6, b[12] * A6 + b[10] * A4 + b[8] * A2)
            v = v + b[6] * A6 + b[4] * A4 + b[2] * A2 + b[0] * ident
            return matmul(A, u), v
        powers = [ident, A2]
        while len(powers) <= m // 2:
            powers.append(matmul(powers[-1], A2))
        u = sum(b[2 * k + 1] * p for k, p in enumerate(powers))
        v = sum(b[2 * k] * p for k, p in enumerate(powers))
        return matmul(A, u), v

    return uv


def _expm(A: Any, upper_triangular: bool, max_squarings: int) -> Any:
    """``exp(A)`` of one ``(n, n)`` matrix."""
    bits = 64 if dtypes.finfo(dtype(A)).bits == 64 else 32
    theta, degrees = _THETA[bits], _DEGREES[bits]
    norm = lax.stop_gradient(_max(_sum(_abs(A), axis=-2), axis=-1))  # the 1-norm
    # the smallest degree whose theta bounds the norm; else the largest, after scaling A by
    # 2^-s with s = ceil(log2(norm / theta_max)) (Higham's Algorithm 2.3)
    index = _sum(norm > np.asarray(theta[:-1], dtype=dtype(norm)), dtype=np.int32)
    s = maximum(0, ceil(log2(norm / theta[-1]))).astype(np.int32)
    A = A / (2.0 ** s.astype(dtype(norm))).astype(dtype(A))
    u, v = lax.switch(index, [_pade(m) for m in degrees], A)
    p, q = v + u, v - u
    if upper_triangular:
        r = lax_linalg.triangular_solve(q, p, left_side=True, lower=False)
    else:
        r = np_linalg.solve(q, p)

    def square(i: Any, r: Any) -> Any:
        return lax.cond(i < s, lambda r: matmul(r, r), lambda r: r, r)

    r = lax.fori_loop(0, max_squarings, square, r)
    return lax.cond(s > max_squarings, lambda r: full_like(r, math.nan), lambda r: r, r)


def expm(A: Any, *, upper_triangular: bool = False, max_squarings: int = 16) -> Any:
    """Matrix exponential ``exp(A)`` (``jax.scipy.linalg.expm``).

    Padé approximation with scaling and squaring (Higham 2005, Algorithm 2.3): the smallest
    Padé degree whose bound ``theta_m`` covers ``A``'s 1-norm (3, 5, 7, 9 or 13 in float64 and
    complex128; 3, 5 or 7, with single-precision bounds, in float32 and complex64), else the
    largest after scaling ``A`` by ``2^-s``, ``s = ceil(log2(|A|_1 / theta_max))``, and ``s``
    squarings of the result.

    Args:
        A: ``(..., n, n)`` array; integers and bools are promoted to the default float.
        upper_triangular: ``A`` is upper triangular (the Padé solve is then triangular).
        max_squarings: the most squarings; an ``A`` whose norm needs more gives NaN (as JAX).

    Returns:
        ``(..., n, n)`` in ``A``'s (promoted) dtype. Differentiable (through the approximant,
        whose degree and scaling are piecewise constant in ``A``).

    Raises:
        BluShapeError: ``A`` is not ``(..., n, n)``. BluTypeError: a half-precision dtype
        (float16, bfloat16: JAX's has no bounds for them either).
    """
    A = matrices(A, "expm")
    if dtypes.finfo(dtype(A)).bits < 32:
        raise BluTypeError(
            with_user_line(
                f"scipy.linalg.expm: {dtype(A)} is not supported (float32, "
                "float64, complex64 or complex128)"
            )
        )
    if shape(A)[-1] == 0:
        return A
    one = vectorize(
        lambda a: _expm(a, bool(upper_triangular), int(max_squarings)), signature="(n,n)->(n,n)"
    )
    return one(A)


def expm_frechet(A: Any, E: Any, *, method: str | None = None, compute_expm: bool = True) -> Any:
    """The Fréchet derivative of the matrix exponential at ``A`` in the direction ``E``
    (``jax.scipy.linalg.expm_frechet``): the forward-mode derivative (JVP) of :func:`expm`, as
    JAX's (SciPy's 'SPS' method differentiates the same Padé approximant).

    Args:
        A, E: ``(..., n, n)`` arrays of one shape; promoted to one float dtype.
        method: accepted and unused (JAX's is too).
        compute_expm: also return ``expm(A)``.

    Returns:
        ``(expm(A), L(A, E))`` or ``L(A, E)``, both ``(..., n, n)``. Differentiable (the
        derivative of the approximant's derivative).

    Raises:
        BluShapeError: ``A`` or ``E`` not ``(..., n, n)``, or of different shapes.
    """
    del method
    A, E = matrices(A, "expm_frechet"), matrices(E, "expm_frechet")
    if shape(A) != shape(E):
        raise BluShapeError(
            with_user_line(
                f"scipy.linalg.expm_frechet: A {get_aval(A).str_short()} and E "
                f"{get_aval(E).str_short()} must have the same shape"
            )
        )
    A, E = promote_inexact(A, E)
    expm_A, frechet = jvp(expm, (A,), (E,))
    return (expm_A, frechet) if compute_expm else frechet
