"""Eigen-decomposition of general (non-symmetric) square matrices: ``eig`` and ``eigvals``, as
``numpy.linalg`` / ``jax.numpy.linalg`` spell them.

The eigenvalues of a real matrix are complex in general, so the results are complex64 (float32
or complex64 input) or complex128 (float64 or complex128 input). They are computed by LAPACK's
``geev`` on the host (numpy's ``linalg.eig``) through a pure callback, under ``jit`` and
``vmap`` too, as JAX computes them on the CPU only. Like numpy's, the eigenvectors are the
columns of ``eigenvectors``, each of unit 2-norm, in the order of the eigenvalues; their phase is
LAPACK's. A matrix holding inf or NaN gets NaN eigenvalues and eigenvectors (as JAX; numpy
raises), the other matrices of a stack their own. No derivative is defined here: asking for one
raises (JAX differentiates the eigenvalues; for symmetric matrices use ``eigh``, which has
derivatives).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from blu.core.interpreter import get_aval
from blu.lax.callback import pure_callback_p
from blu.numpy.linalg._util import matrices

__all__ = ["EigResult", "eig", "eigvals"]


class EigResult(NamedTuple):
    """What :func:`blu.numpy.linalg.eig` returns: the ``eigenvalues`` (unordered) and the right
    ``eigenvectors`` (columns, unit norm)."""

    eigenvalues: Any
    eigenvectors: Any


def _complex_of(dtype: np.dtype) -> np.dtype:
    """complex128 for double-precision input, else complex64 (float32, bfloat16, float16)."""
    wide = dtype in (np.dtype(np.float64), np.dtype(np.complex128))
    return np.dtype(np.complex128 if wide else np.complex64)


def _geev(vectors: bool, out_dtype: np.dtype):
    def host(a: np.ndarray) -> list[np.ndarray]:
        a = np.asarray(a)
        if a.dtype not in (np.float32, np.float64, np.complex64, np.complex128):
            a = a.astype(np.float32)  # bfloat16 / float16: LAPACK has no such kind
        n = a.shape[-1]
        # a matrix holding inf/NaN gets NaN eigenvalues and vectors (numpy raises for the
        # whole stack; JAX's geev returns NaNs), the others are computed as usual
        flat = a.reshape((int(np.prod(a.shape[:-2])), n, n))
        ok = np.isfinite(flat).all(axis=(-2, -1))
        w = np.full(flat.shape[:-1], np.nan, out_dtype)
        v = np.full(flat.shape, np.nan, out_dtype)
        if n == 0:
            w, v = np.zeros(flat.shape[:-1], out_dtype), np.zeros(flat.shape, out_dtype)
        elif ok.any():
            w[ok], v[ok] = np.linalg.eig(flat[ok])
        w, v = w.reshape(a.shape[:-1]), v.reshape(a.shape)
        return [w, v] if vectors else [w]

    return host


def eig(a: Any) -> EigResult:
    """Eigenvalues and right eigenvectors of general square matrices, as ``numpy.linalg.eig``.

    Args:
        a: ``(..., n, n)`` float or complex matrices (integers become float32).

    Returns:
        ``EigResult(eigenvalues (..., n), eigenvectors (..., n, n))``, complex64 or complex128:
        ``a @ v[..., :, i] = w[..., i] * v[..., :, i]``.

    Raises:
        BluShapeError: ``a`` is not a stack of square matrices.
        BluTypeError: a derivative is asked for (none is defined; ``eigh`` has them).
    """
    a = matrices(a, "eig", square=True)
    aval = get_aval(a)
    out = _complex_of(aval.dtype)
    w_aval = (tuple(aval.shape[:-1]), out)
    v_aval = (tuple(aval.shape), out)
    w, v = pure_callback_p.bind(a, callback=_geev(True, out), result_avals=(w_aval, v_aval),
                                vmap_method="expand_dims")  # fmt: skip
    return EigResult(w, v)


def eigvals(a: Any) -> Any:
    """Eigenvalues of general square matrices, as ``numpy.linalg.eigvals`` (see :func:`eig`).

    Args:
        a: ``(..., n, n)`` float or complex matrices.

    Returns:
        ``(..., n)`` complex64 or complex128 eigenvalues, unordered.
    """
    a = matrices(a, "eigvals", square=True)
    aval = get_aval(a)
    out = _complex_of(aval.dtype)
    (w,) = pure_callback_p.bind(a, callback=_geev(False, out),
                                result_avals=((tuple(aval.shape[:-1]), out),),
                                vmap_method="expand_dims")  # fmt: skip
    return w
