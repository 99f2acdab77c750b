"""The linear-algebra primitives with their rules: abstract eval (shape and dtype checks),
JVP (from the standard matrix-derivative results, cited at each rule), transpose (for
``triangular_solve``, linear in ``b``) and batching (leading axes are batch axes), and the
public wrappers. The impls are the CPU kernels of ``cpu.py``."""

from __future__ import annotations

from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core import lapack as cpu
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax.complex import complex as make_complex
from blu.lax.complex import imag, real
from blu.lax.elementwise import add, convert_element_type, eq, mul, neg, sub
from blu.lax.linalg._helpers import (
    batch_to_front,
    check_matrix,
    col,
    conj_if_complex,
    const_like,
    diag,
    eye_like,
    is_complex,
    matmul,
    mH,
    mT,
    recip,
    row,
    symmetrize,
    tril,
    triu,
    zero_of,
)
from blu.lax.linalg._qr_pivoted import qr_pivots
from blu.lax.shapes import broadcast_in_dim, concatenate, full_like, iota
from blu.lax.slicing import slice_in_dim
from blu.lax.sorting import take_along_axis
from blu.transforms.ad_util import Zero, add_tangents, instantiate, is_undefined

# ---- cholesky ----------------------------------------------------------------------------------

cholesky_p = Primitive("cholesky")
cholesky_p.def_impl(cpu.cholesky)


@cholesky_p.def_abstract_eval
def _cholesky_abstract_eval(a: ShapedArray) -> ShapedArray:
    check_matrix("cholesky", a, square=True, allow_complex=True)
    return a


@cholesky_p.def_jvp
def _cholesky_jvp(primals, tangents):
    """``dL = L Phi(L^-1 dA L^-H)``, ``Phi`` the lower triangle with half its diagonal: Murray
    2016, "Differentiation of the Cholesky decomposition", eq. (10) (arXiv:1602.07527), with
    ``A = L L^H`` for complex matrices (``L^-H``: the conjugate transpose; the diagonal of the
    middle term is real for a Hermitian ``dA``). Assumes a symmetric (Hermitian) tangent (the
    wrapper symmetrizes its input)."""
    (a,), (ta,) = primals, tangents
    L = cholesky_p.bind(a)
    if isinstance(ta, Zero):
        return L, zero_of(L)
    tmp = tsolve_h(L, ta, left_side=False, lower=True)  # dA L^-H
    x = _tsolve(L, tmp, left_side=True, lower=True, transpose_a=False, unit_diagonal=False)
    n = get_aval(a).shape[-1]
    half = np.tri(n, n, dtype=get_aval(a).dtype) - 0.5 * np.eye(n, dtype=get_aval(a).dtype)
    phi = mul(x, const_like(half, x))
    return L, matmul(L, phi)


batch_to_front(cholesky_p)


def cholesky(x: Any, *, symmetrize_input: bool = True) -> Any:
    """Cholesky factor ``L`` (lower triangular, ``x = L @ L^H``, ``L^H`` the conjugate transpose)
    of symmetric (Hermitian) positive-definite matrices ``x`` of shape ``(..., n, n)``.

    Args:
        x: ``(..., n, n)`` float or complex array.
        symmetrize_input: use ``(x + x^H) / 2`` (so the derivative is that of a symmetric
            input); otherwise only the lower triangle of ``x`` is read.

    Returns:
        ``(..., n, n)`` lower-triangular factor; all NaN for a matrix that is not positive
        definite (``LinAlgError`` under ``blu.config.debug_nans``).
    """
    if symmetrize_input:
        x = symmetrize(x, "cholesky")
    return cholesky_p.bind(x)


# ---- triangular_solve ----------------------------------------------------------------------------

triangular_solve_p = Primitive("triangular_solve")
triangular_solve_p.def_impl(cpu.triangular_solve)


@triangular_solve_p.def_abstract_eval
def _triangular_solve_abstract_eval(a, b, *, left_side, lower, transpose_a, unit_diagonal):
    check_matrix("triangular_solve", a, square=True, allow_complex=True)
    check_matrix("triangular_solve", b, allow_complex=True)
    m = a.shape[-1]
    k = b.shape[-2] if left_side else b.shape[-1]
    if a.ndim != b.ndim or a.shape[:-2] != b.shape[:-2] or k != m:
        side = "rows" if left_side else "columns"
        raise BluShapeError(
            with_user_line(
                f"triangular_solve: a {a.str_short()} and b {b.str_short()} need equal batch "
                f"dimensions and b's {side} equal to a's size (left_side={left_side})"
            )
        )
    if a.dtype != b.dtype:
        raise BluTypeError(
            with_user_line(
                f"triangular_solve: operands must have equal dtypes, got a {a.str_short()} "
                f"and b {b.str_short()}"
            )
        )
    return ShapedArray(b.shape, b.dtype, a.weak_type and b.weak_type)


def _tsolve(a, b, **params):
    return triangular_solve_p.bind(a, b, **params)


def tsolve_h(a: Any, b: Any, *, left_side: bool, lower: bool, unit_diagonal: bool = False):
    """Solve with the conjugate transpose ``a^H`` (``a^T`` for reals): ``a^H x = b`` is
    ``a^T conj(x) = conj(b)``, so one plain transposed solve between two conjugations."""
    x = _tsolve(a, conj_if_complex(b), left_side=left_side, lower=lower, transpose_a=True,
                unit_diagonal=unit_diagonal)  # fmt: skip
    return conj_if_complex(x)


@triangular_solve_p.def_jvp
def _triangular_solve_jvp(primals, tangents, **params):
    """Linear in ``b``; for ``a``: ``d(op(a)^-1 b) = -op(a)^-1 op(da) x`` (and
    ``-x op(da) op(a)^-1`` on the right side), ``da`` restricted to the triangle that is read
    (Giles 2008, "An extended collection of matrix derivative results", sec. 2.2.3). ``op`` has
    no conjugation, so the map is holomorphic and the rule holds as it is for complex ``a``."""
    (a, b), (ta, tb) = primals, tangents
    x = _tsolve(a, b, **params)
    t = zero_of(x)
    if not isinstance(tb, Zero):
        t = _tsolve(a, tb, **params)
    if not isinstance(ta, Zero):
        k = -1 if params["unit_diagonal"] else 0
        da = tril(ta, k) if params["lower"] else triu(ta, -k)
        if params["transpose_a"]:
            da = mT(da)
        g = matmul(da, x) if params["left_side"] else matmul(x, da)
        t = add_tangents(t, neg(_tsolve(a, g, **params)))
    return x, t


@triangular_solve_p.def_transpose
def _triangular_solve_transpose(ct, a, b, *, transpose_a, **params):
    """``x = op(a)^-1 b`` is linear in ``b``; its transpose solves with ``op(a)^T`` (no
    conjugation, for complex too: blu's transposes are plain linear transposes, JAX's
    convention, ``blu/lax/complex.py``)."""
    if is_undefined(a):
        raise NotImplementedError("triangular_solve is linear in b only, not in a")
    if isinstance(ct, Zero):
        return [None, None]
    return [None, _tsolve(a, instantiate(ct), transpose_a=not transpose_a, **params)]


batch_to_front(triangular_solve_p)


def triangular_solve(
    a: Any,
    b: Any,
    *,
    left_side: bool = False,
    lower: bool = False,
    transpose_a: bool = False,
    conjugate_a: bool = False,
    unit_diagonal: bool = False,
) -> Any:
    """Solve ``op(a) @ x = b`` (``left_side``) or ``x @ op(a) = b`` for triangular ``a``.

    Args:
        a: ``(..., m, m)`` triangular matrices; only the ``lower`` (or upper) triangle is read,
            and not the diagonal when ``unit_diagonal`` (taken as ones).
        b: ``(..., m, n)`` if ``left_side`` else ``(..., n, m)``, same batch shape and dtype.
        left_side, lower, transpose_a, unit_diagonal: as in ``jax.lax.linalg``; ``op(a)`` is
            ``a.T`` with ``transpose_a``.
        conjugate_a: ``op(a)`` is conjugated too (``a^H`` with ``transpose_a``); no effect for
            real ``a``. Computed as ``conj(solve(op'(a), conj(b)))``, ``op'`` without it.

    Returns:
        ``x`` with ``b``'s shape. A zero on the diagonal gives inf/NaN (``LinAlgError`` under
        ``blu.config.debug_nans``).
    """
    conj = conjugate_a and is_complex(a)
    x = triangular_solve_p.bind(
        a, conj_if_complex(b) if conj else b, left_side=bool(left_side), lower=bool(lower),
        transpose_a=bool(transpose_a), unit_diagonal=bool(unit_diagonal),
    )  # fmt: skip
    return conj_if_complex(x) if conj else x


# ---- lu ------------------------------------------------------------------------------------------

lu_p = Primitive("lu", multiple_results=True)
lu_p.def_impl(cpu.lu)


@lu_p.def_abstract_eval
def _lu_abstract_eval(a: ShapedArray) -> list[ShapedArray]:
    check_matrix("lu", a, square=True, allow_complex=True)
    idx = ShapedArray(a.shape[:-1], dtypes.int32)
    return [a, idx, idx]


@lu_p.def_jvp
def _lu_jvp(primals, tangents):
    """``dL = L tril(X, -1)``, ``dU = triu(X) U`` with ``X = L^-1 P dA U^-1`` (the standard
    result, e.g. de Hoog, Anderssen & Lukas 2011, "Differentiation of matrix functionals using
    triangular factorization"; the rule of jax.lax.linalg)."""
    (a,), (ta,) = primals, tangents
    lu, piv, perm = lu_p.bind(a)
    outs = [lu, piv, perm]
    zeros = [zero_of(lu), zero_of(piv), zero_of(perm)]
    if isinstance(ta, Zero):
        return outs, zeros
    pa = matmul(permutation_matrix(perm, get_aval(a).dtype), ta)  # P dA
    la = _tsolve(lu, pa, left_side=True, lower=True, transpose_a=False, unit_diagonal=True)
    x = _tsolve(lu, la, left_side=False, lower=False, transpose_a=False, unit_diagonal=False)
    L = add(tril(lu, -1), eye_like(lu))
    dlu = add(matmul(L, tril(x, -1)), matmul(triu(x), triu(lu)))
    return outs, [dlu, zeros[1], zeros[2]]


def permutation_matrix(perm: Any, dtype: Any) -> Any:
    """``P`` with ``P @ a == a[..., perm, :]`` for a ``(..., n)`` integer permutation."""
    aval = get_aval(perm)
    n = aval.shape[-1]
    shape = aval.shape + (n,)
    rows = broadcast_in_dim(perm, shape, tuple(range(aval.ndim)))
    return convert_element_type(eq(rows, iota(aval.dtype, shape, aval.ndim)), dtype)


batch_to_front(lu_p)


def lu(x: Any) -> tuple[Any, Any, Any]:
    """LU decomposition with partial pivoting of square matrices ``x`` ``(..., n, n)``.

    Returns:
        ``(lu, pivots, permutation)``: ``lu`` holds the unit-lower ``L`` below the diagonal and
        ``U`` on and above it; ``pivots`` ``(..., n)`` int32 are LAPACK's 0-based row swaps;
        ``permutation`` ``(..., n)`` int32 satisfies ``x[..., permutation, :] == L @ U``. A
        singular matrix gives a zero on ``U``'s diagonal (``LinAlgError`` under
        ``blu.config.debug_nans``).
    """
    return tuple(lu_p.bind(x))


# ---- qr ------------------------------------------------------------------------------------------

qr_p = Primitive("qr", multiple_results=True)
qr_p.def_impl(cpu.qr)


@qr_p.def_abstract_eval
def _qr_abstract_eval(a: ShapedArray, *, full_matrices: bool) -> list[ShapedArray]:
    check_matrix("qr", a, allow_complex=True)
    *batch, m, n = a.shape
    k = m if full_matrices else min(m, n)
    return [a.update(shape=(*batch, m, k)), a.update(shape=(*batch, k, n))]


@qr_p.def_jvp
def _qr_jvp(primals, tangents, *, full_matrices):
    """For ``m >= n``: with ``X = Q^H dA R^-1`` and ``W = tril(X, -1) - tril(X, -1)^H``,
    ``dR = (X - W) R`` and ``dQ = dA R^-1 - Q (X - W)`` (Walter & Lehmann 2018, "Algorithmic
    differentiation of linear algebra functions with application in optimum experimental
    design"; Seeger et al. 2017, "Auto-differentiating linear algebra"). For complex matrices
    ``W`` also holds ``i Im(diag X)`` (``Q^H dQ`` is skew-Hermitian and LAPACK's ``R`` has a real
    diagonal; the rule of jax.lax.linalg). For ``m < n``, ``x = [x1 x2]``: the square rule for
    ``x1 = Q R1`` and ``dR2 = dQ^H x2 + Q^H dx2``."""
    (a,), (ta,) = primals, tangents
    q, r = qr_p.bind(a, full_matrices=full_matrices)
    if isinstance(ta, Zero):
        return [q, r], [zero_of(q), zero_of(r)]
    m, n = get_aval(a).shape[-2:]
    if full_matrices and m > n:
        raise NotImplementedError(
            with_user_line(
                f"qr: no derivative with full_matrices=True for tall matrices {m}x{n} (the last "
                f"{m - n} columns of Q are not unique); use full_matrices=False"
            )
        )
    nd = get_aval(a).ndim
    if m < n:
        a2 = slice_in_dim(a, m, n, axis=nd - 1)
        t1, t2 = slice_in_dim(ta, 0, m, axis=nd - 1), slice_in_dim(ta, m, n, axis=nd - 1)
        r1 = slice_in_dim(r, 0, m, axis=nd - 1)
        dq, dr1 = _qr_jvp_tall(q, r1, t1)
        dr2 = add(matmul(mH(dq), a2), matmul(mH(q), t2))
        return [q, r], [dq, concatenate([dr1, dr2], nd - 1)]
    dq, dr = _qr_jvp_tall(q, r, ta)
    return [q, r], [dq, dr]


def _qr_jvp_tall(q, r, ta):
    ts = dict(left_side=False, lower=False, transpose_a=False, unit_diagonal=False)
    da_rinv = _tsolve(r, ta, **ts)  # dA R^-1
    x = matmul(mH(q), da_rinv)
    low = tril(x, -1)
    w = sub(low, mH(low))
    if is_complex(x):  # the imaginary part of the diagonal is Q^H dQ's too
        im = imag(x)
        w = add(w, mul(eye_like(x), make_complex(full_like(im, 0), im)))
    x_minus_w = sub(x, w)
    return sub(da_rinv, matmul(q, x_minus_w)), matmul(x_minus_w, r)


batch_to_front(qr_p)


def qr(
    x: Any, *, pivoting: bool = False, full_matrices: bool = True, use_magma: bool | None = None
) -> tuple[Any, ...]:
    """QR decomposition ``x = Q @ R`` of ``(..., m, n)`` matrices, or with ``pivoting`` the
    column-pivoted ``x[..., :, p] = Q @ R`` (rank-revealing: ``|R[i, i]|`` non-increasing).

    Args:
        x: ``(..., m, n)`` float or complex array.
        pivoting: also choose the column permutation ``p`` as LAPACK's ``?geqp3`` (Householder
            QR with column pivoting: each step takes the remaining column of largest norm; a
            blu program, see ``_qr_pivoted``), then factor ``x[..., :, p]``.
        full_matrices: ``Q`` ``(..., m, m)`` and ``R`` ``(..., m, n)``; else ``k = min(m, n)``
            columns of ``Q`` and rows of ``R``. Differentiable unless ``full_matrices`` and
            ``m > n`` (with ``pivoting`` too, ``p`` held fixed: JAX's rule).
        use_magma: ignored (JAX's GPU switch for its pivoted QR).

    Returns:
        ``(q, r)`` with orthonormal columns of ``q`` and upper-triangular ``r``; with
        ``pivoting``, ``(q, r, p)``, ``p`` ``(..., n)`` int32.

    Raises:
        BluTypeError: ``x`` is not floating point or complex. BluShapeError: rank < 2.
    """
    del use_magma
    if not pivoting:
        return tuple(qr_p.bind(x, full_matrices=bool(full_matrices)))
    p = qr_pivots(x)
    xp = take_along_axis(x, row(p, x), get_aval(x).ndim - 1)
    q, r = qr_p.bind(xp, full_matrices=bool(full_matrices))
    return q, r, p


# ---- eigh ----------------------------------------------------------------------------------------

eigh_p = Primitive("eigh", multiple_results=True)
eigh_p.def_impl(cpu.eigh)


@eigh_p.def_abstract_eval
def _eigh_abstract_eval(a: ShapedArray, *, lower: bool) -> list[ShapedArray]:
    check_matrix("eigh", a, square=True, allow_complex=True)
    return [a, a.update(shape=a.shape[:-1], dtype=dtypes.real_dtype(a.dtype))]  # w: real


@eigh_p.def_jvp
def _eigh_jvp(primals, tangents, *, lower):
    """``dw = Re diag(V^H dA V)``, ``dV = V (F * (V^H dA V))`` with ``F_ij = 1 / (w_j - w_i)``
    off the diagonal (Giles 2008, "An extended collection of matrix derivative results for
    forward and reverse mode AD", sec. 3.1; ``V^H`` the conjugate transpose for complex
    Hermitian matrices, as jax.lax.linalg). Repeated eigenvalues make ``F`` (and ``dV``)
    inf/NaN. ``V^H dV`` has a zero diagonal: of the eigenvectors' free phases (signs for reals)
    the tangent moves none, so only phase-invariant functions of ``V`` (``|V|``, ``V f(w) V^H``)
    have this as their derivative. Assumes a symmetric (Hermitian) tangent (the wrapper
    symmetrizes its input)."""
    (a,), (ta,) = primals, tangents
    v, w = eigh_p.bind(a, lower=lower)
    if isinstance(ta, Zero):
        return [v, w], [zero_of(v), zero_of(w)]
    vt_da_v = matmul(mH(v), matmul(ta, v))
    eye = eye_like(v)
    wc = convert_element_type(w, get_aval(v).dtype) if is_complex(v) else w
    f = sub(recip(add(eye, sub(row(wc, v), col(wc, v)))), eye)  # 1 / (w_j - w_i), 0 on diag
    dv = matmul(v, mul(f, vt_da_v))
    dw = diag(vt_da_v)
    return [v, w], [dv, real(dw) if is_complex(dw) else dw]


batch_to_front(eigh_p)


def eigh(
    x: Any, *, lower: bool = True, symmetrize_input: bool = True, sort_eigenvalues: bool = True
) -> tuple[Any, Any]:
    """Eigen-decomposition of symmetric (Hermitian) matrices ``x`` ``(..., n, n)``.

    Args:
        x: ``(..., n, n)`` float or complex array.
        lower: read the lower (else upper) triangle when not symmetrizing.
        symmetrize_input: use ``(x + x^H) / 2`` (so the derivative is that of a symmetric
            input).
        sort_eigenvalues: accepted for JAX compatibility; eigenvalues are always ascending.

    Returns:
        ``(v, w)``: eigenvectors ``(..., n, n)`` in the columns of ``v`` and eigenvalues
        ``(..., n)`` in ascending order. Eigenvector derivatives are inf/NaN at repeated
        eigenvalues; eigenvalue derivatives stay finite (see the module docstring).
    """
    del sort_eigenvalues
    if symmetrize_input:
        x = symmetrize(x, "eigh")
    return tuple(eigh_p.bind(x, lower=bool(lower)))


# ---- svd -----------------------------------------------------------------------------------------

svd_p = Primitive("svd", multiple_results=True)
svd_p.def_impl(cpu.svd)


@svd_p.def_abstract_eval
def _svd_abstract_eval(a: ShapedArray, *, full_matrices: bool, compute_uv: bool):
    check_matrix("svd", a, allow_complex=True)
    *batch, m, n = a.shape
    k = min(m, n)
    s = a.update(shape=(*batch, k), dtype=dtypes.real_dtype(a.dtype))  # singular values: real
    if not compute_uv:
        return [s]
    ku, kv = (m, n) if full_matrices else (k, k)
    return [s, a.update(shape=(*batch, m, ku)), a.update(shape=(*batch, kv, n))]


@svd_p.def_jvp
def _svd_jvp(primals, tangents, *, full_matrices, compute_uv):
    """``ds = diag(U^T dA V)``; ``dU = U (F * (dP S + S dP^T)) + (I - U U^T) dA V S^-1`` and
    ``dV = V (F * (S dP + dP^T S)) + (I - V V^T) dA^T U S^-1`` with ``dP = U^T dA V`` and
    ``F_ij = 1 / (s_j^2 - s_i^2)`` (Townsend 2016, "Differentiating the singular value
    decomposition"; the rule of jax.lax.linalg). Where ``s_i == s_j`` the singular vectors are
    not differentiable and ``F`` is set to 0 (finite but meaningless ``dU``/``dV``); a zero
    singular value of a non-square matrix gives inf/NaN in ``dU``/``dV``."""
    from blu.lax.elementwise import add, convert_element_type, div, eq, mul, sub

    (a,), (ta,) = primals, tangents
    m, n = get_aval(a).shape[-2:]
    if dtypes.is_complex(get_aval(a).dtype):
        return _complex_svd_jvp(a, ta, full_matrices, compute_uv)
    if compute_uv and full_matrices and m != n:
        raise NotImplementedError(
            with_user_line(
                f"svd: no derivative with full_matrices=True for non-square {m}x{n} matrices "
                "(the extra singular vectors are not unique); use full_matrices=False"
            )
        )
    # the vectors are needed even for compute_uv=False; full == reduced for square matrices
    s, u, vt = svd_p.bind(a, full_matrices=full_matrices and compute_uv, compute_uv=True)
    outs = [s, u, vt] if compute_uv else [s]
    if isinstance(ta, Zero):
        return outs, [zero_of(o) for o in outs]
    v = mT(vt)
    dp = matmul(mT(u), matmul(ta, v))  # (k, k)
    ds = diag(dp)
    if not compute_uv:
        return outs, [ds]
    s_row, s_col = row(s, dp), col(s, dp)
    diffs = mul(add(s_row, s_col), sub(s_row, s_col))  # s_j^2 - s_i^2
    same = convert_element_type(eq(diffs, 0.0), get_aval(s).dtype)
    f = sub(recip(add(diffs, same)), same)
    dps, sdp = mul(dp, s_row), mul(s_col, dp)
    du = matmul(u, mul(f, add(dps, mT(dps))))
    dv = matmul(v, mul(f, add(sdp, mT(sdp))))
    if m > n:  # the part of dA V outside span(U)
        dav = matmul(ta, v)
        du = add(du, div(sub(dav, matmul(u, matmul(mT(u), dav))), row(s, dav)))
    if n > m:
        datu = matmul(mT(ta), u)
        dv = add(dv, div(sub(datu, matmul(v, matmul(vt, datu))), row(s, datu)))
    return outs, [ds, du, mT(dv)]


def _complex_svd_jvp(a: Any, ta: Any, full_matrices: bool, compute_uv: bool):
    """Singular values only: ``ds = Re diag(U^H dA V)``; complex singular vectors have no
    derivative here (their phases are not unique)."""
    from blu.lax.complex import conj, real

    if compute_uv:
        raise BluTypeError(
            with_user_line("svd: no derivative of complex singular vectors; use compute_uv=False")
        )
    s, u, vt = svd_p.bind(a, full_matrices=False, compute_uv=True)
    if isinstance(ta, Zero):
        return [s], [zero_of(s)]
    dp = matmul(conj(mT(u)), matmul(ta, conj(mT(vt))))
    return [s], [real(diag(dp))]


batch_to_front(svd_p)


def svd(x: Any, *, full_matrices: bool = True, compute_uv: bool = True) -> Any:
    """Singular value decomposition ``x = U @ diag(s) @ Vt`` of ``(..., m, n)`` matrices.

    Args:
        x: ``(..., m, n)`` float or complex array.
        full_matrices: ``U`` ``(..., m, m)``, ``Vt`` ``(..., n, n)``; else ``k = min(m, n)``
            vectors each. Derivatives of ``U``/``Vt`` need ``full_matrices=False`` unless
            ``m == n``.
        compute_uv: else return only ``s``.

    Returns:
        ``(u, s, vt)``, or ``s`` ``(..., k)`` (descending, non-negative).
    """
    outs = svd_p.bind(x, full_matrices=bool(full_matrices), compute_uv=bool(compute_uv))
    if not compute_uv:
        return outs[0]
    s, u, vt = outs
    return u, s, vt
