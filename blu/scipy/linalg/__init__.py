"""``blu.scipy.linalg`` (``jax.scipy.linalg``): SciPy's linear algebra on blu arrays, with
JAX's names, signatures, defaults and return types, differentiable, batchable (leading axes are
batch axes, as JAX's) and jittable, composed from the ``blu.lax.linalg`` primitives and
``blu.numpy.linalg``.

- Factorizations and solvers (``decompositions``): ``cholesky`` (upper by default, as SciPy),
  ``cho_factor``/``cho_solve``, ``solve_triangular``, ``solve`` (``assume_a`` 'gen', 'sym',
  'her' or 'pos'), ``lu``/``lu_factor`` (rectangular matrices too, as JAX's: ``_lu_rect``),
  ``lu_solve``, ``inv``, ``det``, ``eigh``, ``qr``, ``qr_multiply``, ``svd``, ``polar``.
- ``expm`` (``matrix_functions``): Padé approximation with scaling and squaring (Higham 2005);
  ``expm_frechet``, its JVP.
- ``hessenberg``, ``schur`` (real and complex forms), ``rsf2csf`` (``schur``): Householder
  reduction and the shifted QR algorithm in ``lax`` loops (no host callback); from the complex
  Schur form (``schur_functions``) ``sqrtm``, ``funm`` and ``solve_sylvester``.
- ``eigh_tridiagonal`` (``tridiagonal``): ``eigh`` of the dense tridiagonal matrix.
- Special matrices (``special_matrices``): ``block_diag``, ``toeplitz``, ``hilbert``; and
  (``structured_matrices``) ``hankel``, ``circulant``, ``leslie``, ``companion``, ``fiedler``,
  ``fiedler_companion``, ``convolution_matrix``, ``invhilbert``, ``pascal``, ``invpascal``,
  ``helmert``, ``hadamard``, ``dft``.

Integers and bools are promoted to the default float (float32), as JAX's
``promote_dtypes_inexact``; SciPy's ``overwrite_*`` and ``check_finite`` arguments are accepted
and ignored. Degenerate input gives NaN/inf as in ``blu.numpy.linalg`` (``LinAlgError`` under
``blu.config.debug_nans``). What of ``jax.scipy.linalg`` is not built is listed in
``docs/coming_from_jax.md``.
"""

from blu.scipy.linalg.decompositions import (
    cho_factor,
    cho_solve,
    cholesky,
    det,
    eigh,
    inv,
    lu,
    lu_factor,
    lu_solve,
    polar,
    qr,
    qr_multiply,
    solve,
    solve_triangular,
    svd,
)
from blu.scipy.linalg.matrix_functions import expm, expm_frechet
from blu.scipy.linalg.schur import hessenberg, rsf2csf, schur
from blu.scipy.linalg.schur_functions import funm, solve_sylvester, sqrtm
from blu.scipy.linalg.structured_matrices import (
    circulant,
    companion,
    convolution_matrix,
    dft,
    fiedler,
    fiedler_companion,
    hadamard,
    hankel,
    helmert,
    invhilbert,
    invpascal,
    leslie,
    pascal,
)
from blu.scipy.linalg.tridiagonal import eigh_tridiagonal
from blu.scipy.linalg.special_matrices import block_diag, hilbert, toeplitz

__all__ = [
    "block_diag",
    "cho_factor",
    "cho_solve",
    "cholesky",
    "circulant",
    "companion",
    "convolution_matrix",
    "det",
    "dft",
    "eigh",
    "eigh_tridiagonal",
    "expm",
    "expm_frechet",
    "fiedler",
    "fiedler_companion",
    "funm",
    "hadamard",
    "hankel",
    "helmert",
    "hessenberg",
    "hilbert",
    "inv",
    "invhilbert",
    "invpascal",
    "leslie",
    "lu",
    "lu_factor",
    "lu_solve",
    "pascal",
    "polar",
    "qr",
    "qr_multiply",
    "rsf2csf",
    "schur",
    "solve",
    "solve_sylvester",
    "solve_triangular",
    "sqrtm",
    "svd",
    "toeplitz",
]
