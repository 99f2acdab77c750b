"""Linear-algebra primitives (``jax.lax.linalg``): cholesky, triangular_solve, lu, qr, eigh, svd,
and LAPACK's compact Householder QR (geqrf, householder_product).

Use as ``from blu.lax import linalg``. Every primitive acts on the last two axes of its operands
and treats the leading axes as batch dimensions, so a batching rule only moves the mapped axis
to the front. Real and complex floating dtypes; float16/bfloat16 are computed in float32.

Modules: ``primitives`` (the primitives, their rules and the public functions),
``blu.core.lapack`` (the CPU kernels: LAPACK through numpy/scipy, used as the impls, so compiled
programs run them as library nodes), ``_helpers`` (checks, batching, lax helpers for the rules),
``_qr_pivoted`` (the pivoted QR's column permutation, a blu program), ``householder`` (``geqrf``
and ``householder_product``: LAPACK's reflectors, no derivative, as JAX's). A GPU backend
supplies kernels with the same parameters and output conventions on cuSOLVER/cuBLAS (potrf,
trsm, getrf, geqrf+orgqr, syevd, gesvd; geqrf and orgqr for the two Householder primitives):

- ``cholesky``: lower factor ``L`` (upper triangle zero); reads only the lower triangle.
- ``triangular_solve``: reads only the ``lower``/upper triangle (and not the diagonal with
  ``unit_diagonal``).
- ``lu``: ``(lu, pivots, permutation)`` with unit-lower ``L`` below the diagonal of ``lu`` and
  ``U`` on and above; 0-based int32 LAPACK pivots; ``a[..., permutation, :] == L @ U``.
- ``qr``: LAPACK's Householder signs (diagonal of ``R`` may be negative). The public ``qr``'s
  ``pivoting=True`` chooses the column permutation by a blu program (``_qr_pivoted``), then
  binds the primitive on the permuted columns.
- ``eigh``: ``(v, w)`` with eigenvalues ascending, eigenvectors in the columns of ``v``.
- ``svd``: ``(s, u, vt)`` as outputs (the wrapper returns ``(u, s, vt)``), ``s`` descending.

Degenerate input (documented behaviour, no exception): a matrix that is not positive definite
gives an all-NaN Cholesky factor; an exactly singular matrix gives a zero pivot in ``lu``, and
solves against a zero diagonal give inf/NaN (IEEE division, as JAX; numpy would raise); a
failed eigen/singular value iteration (non-finite input) gives NaN. With
``blu.config.debug_nans`` set these raise ``LinAlgError`` instead.

Derivatives: forward-mode rules from the standard matrix-derivative results (cited at each
rule); reverse mode transposes them (``triangular_solve`` is linear in ``b`` and has a
transpose rule). Complex matrices follow JAX's convention (``blu/lax/complex.py``): ``lu`` and
``triangular_solve`` are holomorphic and keep the real rules; ``cholesky``, ``qr`` and ``eigh``
use conjugate transposes where their factorizations do (``A = L L^H``, ``Q^H Q = I``,
``A = V diag(w) V^H``), complex ``svd`` has derivatives of its singular values only.

With repeated eigenvalues the eigenvector tangents of ``eigh`` are inf/NaN (the eigenvectors are
not differentiable there); with repeated singular values the singular vectors are not
differentiable either and the ``svd`` rule sets the undefined terms to zero (as JAX does):
``u``/``vt`` tangents stay finite but are not derivatives there. Eigenvalue and singular-value
tangents are always finite; at repeated values they are exact for functions symmetric in the
repeated values (sums, traces, norms, log-determinants), the individual repeated values being only
directionally differentiable.
"""

from blu.lax.linalg._helpers import LinAlgError
from blu.lax.linalg.householder import (
    geqrf,
    geqrf_p,
    householder_product,
    householder_product_p,
)
from blu.lax.linalg.primitives import (
    cholesky,
    cholesky_p,
    eigh,
    eigh_p,
    lu,
    lu_p,
    permutation_matrix,
    qr,
    qr_p,
    svd,
    svd_p,
    triangular_solve,
    triangular_solve_p,
)

# the *_p primitives are importable too (for backends registering kernels), but not in __all__
__all__ = [
    "LinAlgError",
    "cholesky",
    "eigh",
    "geqrf",
    "householder_product",
    "lu",
    "permutation_matrix",
    "qr",
    "svd",
    "triangular_solve",
]
