"""Decompositions: cholesky, qr, eigh/eigvalsh, svd/svdvals (numpy.linalg signatures, batched
over leading axes, differentiable through the ``blu.lax.linalg`` primitives)."""

from __future__ import annotations

from typing import Any, NamedTuple

from blu.core.errors import BluValueError, with_user_line
from blu.lax import linalg as lax_linalg
from blu.numpy.linalg._util import matrices, mH, mT


class QRResult(NamedTuple):
    """What :func:`blu.numpy.linalg.qr` returns: ``Q`` and ``R``, with ``a = Q @ R``."""

    Q: Any
    R: Any


class EighResult(NamedTuple):
    """What :func:`blu.numpy.linalg.eigh` returns: the ``eigenvalues`` (ascending) and the
    ``eigenvectors`` (columns)."""

    eigenvalues: Any
    eigenvectors: Any


class SVDResult(NamedTuple):
    """What :func:`blu.numpy.linalg.svd` returns: ``U``, the singular values ``S`` and ``Vh``."""

    U: Any
    S: Any
    Vh: Any


def cholesky(a: Any, *, upper: bool = False, symmetrize_input: bool = True) -> Any:
    """Cholesky factor of symmetric positive-definite matrices, as ``numpy.linalg.cholesky``.

    Args:
        a: ``(..., n, n)`` array.
        upper: return the upper factor ``U = L^H`` (``a = U^H @ U``; ``^H`` the conjugate
            transpose, ``.T`` for reals).
        symmetrize_input: factor ``(a + a.T) / 2`` (so gradients are those of a symmetric
            input, as in JAX); with False only the lower triangle is read.

    Returns:
        ``(..., n, n)`` triangular factor. A matrix that is not positive definite gives an
        all-NaN factor (numpy raises; ``LinAlgError`` under ``blu.config.debug_nans``).
    """
    L = lax_linalg.cholesky(matrices(a, "cholesky", True), symmetrize_input=symmetrize_input)
    return mH(L) if upper else L


def qr(a: Any, mode: str = "reduced") -> Any:
    """QR decomposition, as ``numpy.linalg.qr``.

    Args:
        a: ``(..., m, n)`` array.
        mode: 'reduced' (``Q`` ``(..., m, k)``, ``R`` ``(..., k, n)``, ``k = min(m, n)``),
            'complete' (``Q`` ``(..., m, m)``, ``R`` ``(..., m, n)``), 'r' (``R`` only) or
            'raw' (LAPACK's Householder reflectors, ``blu.lax.linalg.geqrf``).

    Returns:
        ``QRResult(Q, R)``, or ``R`` for mode 'r'. Signs follow LAPACK (as numpy). The
        derivative is defined for 'reduced' and 'r', and for 'complete' when ``m <= n``. For
        'raw', numpy's ``(h, tau)`` (as a ``QRResult``, JAX's): ``h`` ``(..., n, m)`` is
        geqrf's output transposed (numpy's Fortran order: ``R`` in its lower triangle, the
        reflectors above it), ``tau`` ``(..., k)`` their scales; not differentiable.

    Raises:
        BluValueError: an unknown mode.
    """
    if mode == "raw":
        h, tau = lax_linalg.geqrf(matrices(a, "qr"))
        return QRResult(mT(h), tau)
    if mode not in ("reduced", "complete", "r"):
        raise BluValueError(with_user_line(f"linalg.qr: unsupported mode {mode!r}"))
    q, r = lax_linalg.qr(matrices(a, "qr"), full_matrices=mode == "complete")
    return r if mode == "r" else QRResult(q, r)


def eigh(a: Any, UPLO: str | None = None, *, symmetrize_input: bool = True) -> EighResult:
    """Eigenvalues and eigenvectors of symmetric matrices, as ``numpy.linalg.eigh``.

    Args:
        a: ``(..., n, n)`` array.
        UPLO: 'L' (default) or 'U': the triangle read when ``symmetrize_input`` is False.
        symmetrize_input: decompose ``(a + a.T) / 2`` (as JAX; numpy reads one triangle).

    Returns:
        ``EighResult(eigenvalues (..., n) ascending, eigenvectors (..., n, n) as columns)``.
        Eigenvalue gradients are finite, and exact at repeated eigenvalues for functions
        symmetric in them (sums, traces, log-determinants); eigenvector gradients are inf/NaN
        when eigenvalues repeat.
    """
    lower = _uplo(UPLO)
    v, w = lax_linalg.eigh(
        matrices(a, "eigh", True), lower=lower, symmetrize_input=symmetrize_input
    )
    return EighResult(w, v)


def eigvalsh(a: Any, UPLO: str | None = None, *, symmetrize_input: bool = True) -> Any:
    """Eigenvalues ``(..., n)``, ascending, of symmetric matrices (``numpy.linalg.eigvalsh``);
    its gradient is finite even for repeated eigenvalues (see ``eigh``)."""
    return eigh(a, UPLO, symmetrize_input=symmetrize_input).eigenvalues


def _uplo(UPLO: str | None) -> bool:
    if UPLO not in (None, "L", "U", "l", "u"):
        raise BluValueError(with_user_line(f"linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}"))
    return UPLO is None or UPLO.upper() == "L"


def svd(
    a: Any, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False
) -> Any:
    """Singular value decomposition, as ``numpy.linalg.svd``: ``a = U @ diag(S) @ Vh``.

    Args:
        a: ``(..., m, n)`` array.
        full_matrices: ``U`` ``(..., m, m)`` and ``Vh`` ``(..., n, n)``; else ``k = min(m, n)``
            vectors each.
        compute_uv: else return only ``S``.
        hermitian: ``a`` must then be square (numpy's and JAX's rule); the general SVD is
            used either way.

    Returns:
        ``SVDResult(U, S, Vh)`` with ``S`` ``(..., k)`` descending, or ``S``. Gradients of ``S``
        are finite, and exact at repeated singular values for functions symmetric in them
        (e.g. the nuclear norm). Gradients of ``U``/``Vh`` need ``full_matrices=False`` unless
        ``m == n``; at repeated singular values the singular vectors are not differentiable
        and their gradients, though finite, are not derivatives (as in JAX; ``pinv`` and
        ``lstsq`` use their own formula and are exact there); a zero singular value of a
        non-square matrix makes them inf/NaN.
    """
    x = matrices(a, "svd", bool(hermitian))
    if not compute_uv:
        return lax_linalg.svd(x, compute_uv=False)
    return SVDResult(*lax_linalg.svd(x, full_matrices=full_matrices))


def svdvals(x: Any) -> Any:
    """Singular values ``(..., min(m, n))``, descending (``numpy.linalg.svdvals``)."""
    return lax_linalg.svd(matrices(x, "svdvals"), compute_uv=False)
