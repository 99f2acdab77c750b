"""blu.numpy.linalg: ``numpy.linalg`` on blu arrays, differentiable, batchable and jittable.

Every function works on stacks of matrices (leading axes are batch axes) and is composed from
the primitives of ``blu.lax.linalg`` (cholesky, triangular_solve, lu, qr, eigh, svd) with
ordinary blu operations:

- ``solve``, ``inv``, ``det``, ``slogdet``: one LU factorization with partial pivoting.
- ``lstsq``, ``pinv``, ``matrix_rank``, ``cond``, the spectral/nuclear norms: the SVD.
- ``matrix_power``: repeated squaring (static exponent).
- ``multi_dot``: ``einsum`` in ``opt_einsum``'s order; ``tensorinv``, ``tensorsolve``: ``inv`` and
  ``solve`` of the flattened operator.

Degenerate input (documented behaviour): an exactly singular matrix gives inf/NaN from
``solve``/``inv`` (numpy raises), a zero ``det`` and ``slogdet`` sign 0 / logabsdet -inf; a
matrix that is not positive definite gives a NaN Cholesky factor. With
``blu.config.debug_nans`` on (``BLU_DEBUG_NANS=1``) these raise ``LinAlgError`` instead.
Gradients: see each function (``eigh``/``svd`` with repeated eigen/singular values, ``det``
at singular matrices).
"""

from __future__ import annotations

from blu.lax.linalg import LinAlgError
from blu.numpy.linalg.decompositions import (
    EighResult,
    QRResult,
    SVDResult,
    cholesky,
    eigh,
    eigvalsh,
    qr,
    svd,
    svdvals,
)
from blu.numpy.linalg.general import EigResult, eig, eigvals
from blu.numpy.linalg.norms import cond, matrix_norm, norm, vector_norm
from blu.numpy.linalg.standard import (
    cross,
    diagonal,
    matmul,
    matrix_transpose,
    outer,
    tensordot,
    trace,
    vecdot,
)
from blu.numpy.linalg.solvers import (
    SlogdetResult,
    det,
    inv,
    lstsq,
    matrix_power,
    matrix_rank,
    pinv,
    slogdet,
    solve,
    solve_triangular,
)
from blu.numpy.linalg.tensor import multi_dot, tensorinv, tensorsolve

__all__ = [
    "LinAlgError",
    "EigResult",
    "EighResult",
    "QRResult",
    "SVDResult",
    "SlogdetResult",
    "cholesky",
    "cond",
    "det",
    "eig",
    "eigh",
    "eigvals",
    "eigvalsh",
    "inv",
    "lstsq",
    "matrix_norm",
    "matrix_power",
    "matrix_rank",
    "multi_dot",
    "norm",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "solve_triangular",
    "svd",
    "svdvals",
    "tensorinv",
    "tensorsolve",
    "vector_norm",
    # the Array API's functions on the last axes
    "cross",
    "diagonal",
    "matmul",
    "matrix_transpose",
    "outer",
    "tensordot",
    "trace",
    "vecdot",
]
