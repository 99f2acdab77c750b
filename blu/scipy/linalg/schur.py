"""``hessenberg``, ``schur`` and ``rsf2csf`` of ``jax.scipy.linalg``, as blu programs (``lax``
loops over slices; no host callback), so they batch and compile on any backend.

- ``hessenberg``: Householder reduction ``A = Q H Q^H`` with LAPACK's reflectors (``?larfg``:
  ``H_k = I - tau v v^H``, ``v[0] = 1``, a real subdiagonal), as ``?gehrd``/``?orghr``.
- ``schur``: the Hessenberg form, then the shifted QR algorithm with deflation (Golub & Van
  Loan, "Matrix Computations", 4th ed., Algorithms 7.5.1-7.5.2; LAPACK's ``?lahqr``): Francis's
  implicit double shift with ``3 x 3`` reflectors for the real Schur form, whose ``2 x 2``
  diagonal blocks (complex-conjugate eigenvalue pairs) are standardized to equal diagonals and
  those with real eigenvalues split (as ``dlanv2``); Wilkinson's single shift with Givens
  rotations for the complex form; an exceptional shift every tenth sweep without deflation. An
  iteration that does not converge within ``30 max(10, n)`` sweeps for one eigenvalue gives NaN.
- ``rsf2csf``: real to complex Schur form by one Givens rotation per ``2 x 2`` block (SciPy's
  algorithm).

The real Schur form is not unique: ``T`` and ``Z`` may differ from LAPACK's (the order of the
eigenvalues on the diagonal, signs), with ``A = Z T Z^H`` and ``Z`` unitary either way.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blu import lax
from blu import numpy as bnp
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy.extras import vectorize
from blu.numpy.linalg._util import dtype, mH, shape
from blu.scipy.linalg._checks import matrices

_i32 = np.int32


def _at(x: Any, i: Any, j: Any) -> Any:
    """``x[i, j]`` for traced non-negative ``i``, ``j``."""
    return lax.dynamic_slice(x, (i, j), (1, 1))[0, 0]


def _larfg(x: Any) -> tuple[Any, Any, Any]:
    """LAPACK's ``?larfg`` for a vector ``x`` ``(p,)``: ``(v, tau, beta)`` with ``v[0] = 1``,
    ``(I - tau v v^H)^H x = beta e_0`` and ``beta`` real (``tau = 0``, the identity, when
    ``x[1:]`` is zero and ``x[0]`` real)."""
    alpha, rest = x[0], x[1:]
    xnorm = bnp.sqrt(bnp.sum(bnp.real(rest * bnp.conj(rest))))
    trivial = (xnorm == 0) & (bnp.imag(alpha) == 0)
    norm = bnp.sqrt(bnp.real(alpha * bnp.conj(alpha)) + xnorm * xnorm)
    beta = bnp.where(bnp.real(alpha) >= 0, -norm, norm).astype(dtype(x))
    safe_beta = bnp.where(trivial, 1, beta)
    tau = bnp.where(trivial, 0, (beta - alpha) / safe_beta)
    v = bnp.concatenate([bnp.ones(1, dtype(x)), rest / bnp.where(trivial, 1, alpha - beta)])
    return v, tau, bnp.where(trivial, alpha, beta)


def _reflect(H: Any, Z: Any, k: Any, v: Any, tau: Any) -> tuple[Any, Any]:
    """``H <- R^H H R`` and ``Z <- Z R`` for ``R = I - tau v v^H`` acting on the ``p =
    len(v)`` coordinates from ``k``."""
    n, p = shape(H)[-1], shape(v)[0]
    rows = lax.dynamic_slice(H, (k, 0), (p, n))
    rows = rows - bnp.conj(tau) * v[:, None] * (bnp.conj(v) @ rows)[None, :]
    H = lax.dynamic_update_slice(H, rows, (k, 0))
    cols = lax.dynamic_slice(H, (0, k), (n, p))
    H = lax.dynamic_update_slice(H, cols - tau * (cols @ v)[:, None] * bnp.conj(v), (0, k))
    zc = lax.dynamic_slice(Z, (0, k), (n, p))
    return H, lax.dynamic_update_slice(Z, zc - tau * (zc @ v)[:, None] * bnp.conj(v), (0, k))


def _rotate(H: Any, Z: Any, k: Any, G: Any) -> tuple[Any, Any]:
    """``H <- G' H G'^H`` and ``Z <- Z G'^H`` for the unitary ``G`` ``(2, 2)`` acting on the
    coordinates ``k``, ``k + 1``."""
    n = shape(H)[-1]
    rows = lax.dynamic_slice(H, (k, 0), (2, n))
    H = lax.dynamic_update_slice(H, G @ rows, (k, 0))
    Gh = mH(G)
    H = lax.dynamic_update_slice(H, lax.dynamic_slice(H, (0, k), (n, 2)) @ Gh, (0, k))
    return H, lax.dynamic_update_slice(Z, lax.dynamic_slice(Z, (0, k), (n, 2)) @ Gh, (0, k))


def _hessenberg(a: Any) -> tuple[Any, Any]:
    """``(H, Q)`` of one ``(n, n)`` matrix: ``a = Q H Q^H`` (LAPACK's reflectors)."""
    n = shape(a)[-1]
    idx = bnp.arange(n)
    Q = bnp.eye(n, dtype=dtype(a))
    if n <= 1:
        return a, Q

    def step(k: Any, hq: tuple[Any, Any]) -> tuple[Any, Any]:
        H, Q = hq
        col = H[:, k]
        alpha = bnp.sum(bnp.where(idx == k + 1, col, 0))
        below = bnp.where(idx > k + 1, col, 0)
        v, tau, beta = _larfg(bnp.concatenate([alpha[None], below]))
        v = bnp.where(idx == k + 1, 1, v[1:]).astype(dtype(a))  # full length: zero above k+1
        H = H - bnp.conj(tau) * v[:, None] * (bnp.conj(v) @ H)[None, :]
        H = H - tau * (H @ v)[:, None] * bnp.conj(v)
        # column k is beta e_{k+1} exactly below the diagonal (as LAPACK stores it)
        at_k = idx[None, :] == k
        H = bnp.where(at_k & (idx[:, None] == k + 1), beta, H)
        H = bnp.where(at_k & (idx[:, None] > k + 1), 0, H)
        return H, Q - tau * (Q @ v)[:, None] * bnp.conj(v)

    return lax.fori_loop(0, n - 1, step, (a, Q))  # the last step: a real subdiagonal


def _deflate(H: Any, h: Any, eps: float, tiny: float) -> tuple[Any, Any]:
    """The start ``l <= h`` of the unreduced block ending at ``h`` (``H[l, l-1]`` negligible
    next to its diagonal neighbours, or ``l = 0``), with ``H[l, l-1]`` set to zero."""
    n = shape(H)[-1]
    d, sub = bnp.abs(bnp.diagonal(H)), bnp.abs(bnp.diagonal(H, -1))
    i = bnp.arange(1, n)
    small = (sub <= eps * (d[:-1] + d[1:])) | (sub <= tiny)
    l = bnp.max(bnp.where(small & (i <= h), i, 0)).astype(_i32)
    r, c = bnp.arange(n)[:, None], bnp.arange(n)[None, :]
    return bnp.where((l > 0) & (r == l) & (c == l - 1), 0, H), l


def _standardize(H: Any, Z: Any, p: Any) -> tuple[Any, Any]:
    """Rotate the ``2 x 2`` block at ``p`` of the real ``H`` to upper triangular (real
    eigenvalues) or to equal diagonal entries (a complex pair), as LAPACK's ``dlanv2``."""
    a, b, c, d = _at(H, p, p), _at(H, p, p + 1), _at(H, p + 1, p), _at(H, p + 1, p + 1)
    half = (a - d) / 2
    disc = half * half + b * c
    # real eigenvalues: the first column of the rotation is an eigenvector (z, c), z = l1 - d
    z = half + bnp.where(half >= 0, 1, -1) * bnp.sqrt(bnp.maximum(disc, 0))
    u1, u2 = bnp.where((z == 0) & (c == 0), 1, z), c
    r = bnp.hypot(u1, u2)
    # a complex pair: the angle that equalizes the diagonal, tan(2 theta) = (d - a) / (b + c)
    theta = bnp.arctan2(d - a, b + c) / 2
    cs = bnp.where(disc >= 0, u1 / r, bnp.cos(theta)).astype(dtype(H))
    sn = bnp.where(disc >= 0, u2 / r, bnp.sin(theta)).astype(dtype(H))
    H, Z = _rotate(H, Z, p, bnp.stack([bnp.stack([cs, sn]), bnp.stack([-sn, cs])]))
    n = shape(H)[-1]
    r_, c_ = bnp.arange(n)[:, None], bnp.arange(n)[None, :]
    return bnp.where((disc >= 0) & (r_ == p + 1) & (c_ == p), 0, H), Z


def _francis_sweep(H: Any, Z: Any, l: Any, h: Any, exceptional: Any) -> tuple[Any, Any]:
    """One implicit double-shift QR sweep over the unreduced real block ``l..h`` (``h - l >=
    2``): shifts the eigenvalues of the trailing ``2 x 2`` (or an exceptional pair), the bulge
    chased down by ``3 x 3`` reflectors and a last ``2 x 2`` one."""
    hh, h1 = _at(H, h, h), _at(H, h - 1, h - 1)
    s_ex = bnp.abs(_at(H, h, h - 1)) + bnp.abs(_at(H, h - 1, h - 2))
    e11 = 0.75 * s_ex + hh
    trace = bnp.where(exceptional, 2 * e11, h1 + hh)
    det = bnp.where(exceptional, e11 * e11 + 0.4375 * s_ex * s_ex,
                    h1 * hh - _at(H, h - 1, h) * _at(H, h, h - 1))  # fmt: skip
    w = lax.dynamic_slice(H, (l, l), (3, 2))
    first = bnp.stack([
        w[0, 0] * w[0, 0] + w[0, 1] * w[1, 0] - trace * w[0, 0] + det,
        w[1, 0] * (w[0, 0] + w[1, 1] - trace),
        w[1, 0] * w[2, 1],
    ])  # fmt: skip
    scale = bnp.sum(bnp.abs(first))
    first = first / bnp.where(scale == 0, 1, scale)

    def chase(k: Any, hz: tuple[Any, Any]) -> tuple[Any, Any]:
        H, Z = hz
        x = bnp.where(k == l, first, lax.dynamic_slice(H, (k, bnp.maximum(k - 1, 0)), (3, 1))[:, 0])
        v, tau, _ = _larfg(x)
        return _reflect(H, Z, k, v, tau)

    H, Z = lax.fori_loop(l, h - 1, chase, (H, Z))
    v, tau, _ = _larfg(lax.dynamic_slice(H, (h - 1, h - 2), (2, 1))[:, 0])
    H, Z = _reflect(H, Z, h - 1, v, tau)
    return bnp.triu(H, -1), Z


def _givens(x: Any, y: Any) -> Any:
    """The unitary ``G`` ``(2, 2)`` with ``G @ [x, y] = [r, 0]``, ``r >= 0`` (the identity for
    ``x = y = 0``)."""
    r = bnp.sqrt(bnp.real(x * bnp.conj(x)) + bnp.real(y * bnp.conj(y))).astype(dtype(x))
    zero = r == 0
    r = bnp.where(zero, 1, r)
    x, y = bnp.where(zero, 1, x) / r, y / r
    return bnp.stack([bnp.stack([bnp.conj(x), bnp.conj(y)]), bnp.stack([-y, x])])


def _wilkinson_sweep(H: Any, Z: Any, l: Any, h: Any, exceptional: Any) -> tuple[Any, Any]:
    """One implicit single-shift QR sweep over the unreduced complex block ``l..h`` (``h > l``):
    the eigenvalue of the trailing ``2 x 2`` nearer its last entry (Wilkinson's shift), the
    bulge chased down by Givens rotations."""
    a, b = _at(H, h - 1, h - 1), _at(H, h - 1, h)
    c, d = _at(H, h, h - 1), _at(H, h, h)
    half = (a - d) / 2
    root = bnp.sqrt(half * half + b * c)
    den = bnp.where(bnp.abs(half + root) >= bnp.abs(half - root), half + root, half - root)
    mu = bnp.where(den == 0, d, d - b * c / bnp.where(den == 0, 1, den))
    mu = bnp.where(exceptional, d + 0.75 * bnp.abs(c), mu)

    def chase(k: Any, hz: tuple[Any, Any]) -> tuple[Any, Any]:
        H, Z = hz
        col = lax.dynamic_slice(H, (k, bnp.maximum(k - 1, 0)), (2, 1))[:, 0]
        x = bnp.where(k == l, _at(H, l, l) - mu, col[0])
        y = bnp.where(k == l, _at(H, l + 1, l), col[1])
        return _rotate(H, Z, k, _givens(x, y))

    H, Z = lax.fori_loop(l, h, chase, (H, Z))
    return bnp.triu(H, -1), Z


def _schur(a: Any) -> tuple[Any, Any]:
    """``(T, Z)`` of one ``(n, n)`` matrix, ``n >= 2``: the real Schur form for a real ``a``,
    the complex one for a complex ``a``."""
    n = shape(a)[-1]
    real = not dtypes.is_complex(dtype(a))
    finfo = dtypes.finfo(dtype(a))
    eps, tiny = float(finfo.eps), float(finfo.tiny) * n / float(finfo.eps)
    itmax = 30 * max(10, n)
    H, Z = _hessenberg(a)
    if real:
        sweep = _francis_sweep if n >= 3 else None
    else:
        sweep = _wilkinson_sweep

    def body(state: tuple[Any, ...]) -> tuple[Any, ...]:
        H, Z, h, its = state
        H, l = _deflate(H, h, eps, tiny)

        def one(H, Z, l, h, its):  # H[h, h] has converged
            return H, Z, h - 1, its * 0

        def two(H, Z, l, h, its):  # a 2 x 2 block at h - 1 (real form)
            H, Z = _standardize(H, Z, h - 1)
            return H, Z, h - 2, its * 0

        def more(H, Z, l, h, its):
            H, Z = sweep(H, Z, l, h, its % 10 == 9)
            return H, Z, h, its + 1

        if real:
            branches = [one, two] + ([more] if sweep is not None else [])
            index = bnp.minimum(h - l, len(branches) - 1)
        else:
            branches, index = [one, more], bnp.minimum(h - l, 1)
        return lax.switch(index, branches, H, Z, l, h, its)

    def cond(state: tuple[Any, ...]) -> Any:
        return (state[2] >= 1) & (state[3] < itmax)

    H, Z, h, _ = lax.while_loop(cond, body, (H, Z, _i32(n - 1), _i32(0)))
    failed = h >= 1
    nan = math.nan if real else complex(math.nan, math.nan)
    return bnp.where(failed, nan, H), bnp.where(failed, nan, Z)


def hessenberg(
    a: Any, *, calc_q: bool = False, overwrite_a: bool = False, check_finite: bool = True
) -> Any:
    """Hessenberg form ``a = Q H Q^H`` (``jax.scipy.linalg.hessenberg``).

    Args:
        a: ``(..., n, n)`` array; integers and bools are promoted to the default float.
        calc_q: also return ``Q``.

    Returns:
        ``H`` ``(..., n, n)``, zero below the first subdiagonal (LAPACK's: a real subdiagonal),
        or ``(H, Q)`` with ``Q`` unitary. Differentiable (through the reduction's loop).

    Raises:
        BluShapeError: ``a`` is not ``(..., n, n)``.
    """
    del overwrite_a, check_finite
    a = matrices(a, "hessenberg")
    h, q = vectorize(_hessenberg, signature="(n,n)->(n,n),(n,n)")(a)
    return (h, q) if calc_q else h


def schur(a: Any, output: str = "real") -> tuple[Any, Any]:
    """Schur decomposition ``a = Z T Z^H`` (``jax.scipy.linalg.schur``).

    Args:
        a: ``(..., n, n)`` array; integers and bools are promoted to the default float.
        output: 'real' (a real ``a`` gives the real Schur form: ``T`` quasi-upper-triangular,
            ``2 x 2`` diagonal blocks with equal diagonal entries for complex-conjugate
            eigenvalue pairs) or 'complex' (``T`` upper triangular, complex). A complex ``a``
            gives the complex form either way.

    Returns:
        ``(T, Z)``, both ``(..., n, n)``, ``Z`` unitary. NaN where the QR iteration does not
        converge. The diagonal order and signs may differ from LAPACK's (the decomposition is
        not unique). No derivative rule (JAX's has none); forward mode differentiates the
        iteration.

    Raises:
        BluValueError: another ``output``. BluShapeError: ``a`` is not ``(..., n, n)``.
    """
    if output not in ("real", "complex"):
        raise BluValueError(
            with_user_line(
                f"scipy.linalg.schur: output must be 'real' or 'complex', got {output!r}"
            )
        )
    a = matrices(a, "schur")
    if output == "complex" and not dtypes.is_complex(dtype(a)):
        a = a.astype(dtypes.complex_dtype(dtype(a)))
    n = shape(a)[-1]
    if n <= 1:
        return a, bnp.ones_like(a)
    return vectorize(_schur, signature="(n,n)->(n,n),(n,n)")(a)


def _rsf2csf(T: Any, Z: Any) -> tuple[Any, Any]:
    n = shape(T)[-1]
    eps = float(dtypes.finfo(dtype(T)).eps)
    r, c = bnp.arange(n)[:, None], bnp.arange(n)[None, :]

    def step(i: Any, tz: tuple[Any, Any]) -> tuple[Any, Any]:
        T, Z = tz
        m = n - i
        a, b = _at(T, m - 1, m - 1), _at(T, m - 1, m)
        cc, d = _at(T, m, m - 1), _at(T, m, m)
        coupled = bnp.abs(cc) > eps * (bnp.abs(a) + bnp.abs(d))
        # the eigenvalue of the block with the larger imaginary part, less T[m, m]
        half = (a - d) / 2
        root = bnp.sqrt(half * half + b * cc)
        root = bnp.where(bnp.imag(root) < 0, -root, root)
        mu = half + root
        G = _givens(mu, cc)
        G = bnp.where(coupled, G, bnp.eye(2, dtype=dtype(T)))
        rows = lax.dynamic_slice(T, (m - 1, 0), (2, n))
        rows = bnp.where(bnp.arange(n) >= m - 1, G @ rows, rows)
        T = lax.dynamic_update_slice(T, rows, (m - 1, 0))
        cols = lax.dynamic_slice(T, (0, m - 1), (n, 2))
        cols = bnp.where(bnp.arange(n)[:, None] < m + 1, cols @ mH(G), cols)
        T = lax.dynamic_update_slice(T, cols, (0, m - 1))
        zc = lax.dynamic_slice(Z, (0, m - 1), (n, 2))
        Z = lax.dynamic_update_slice(Z, zc @ mH(G), (0, m - 1))
        return bnp.where((r == m) & (c == m - 1), 0, T), Z

    return lax.fori_loop(1, n, step, (T, Z))


def rsf2csf(T: Any, Z: Any, check_finite: bool = True) -> tuple[Any, Any]:
    """Real Schur form to complex Schur form (``jax.scipy.linalg.rsf2csf``): each ``2 x 2``
    block of ``T`` is made triangular by a unitary rotation, applied to ``Z`` too.

    Args:
        T: ``(..., n, n)`` real Schur form, as :func:`schur` gives it.
        Z: ``(..., n, n)`` its Schur vectors; batch dimensions broadcast with ``T``'s.

    Returns:
        ``(T, Z)`` complex (complex64 from float32, complex128 from float64), ``T`` upper
        triangular, ``Z T Z^H`` unchanged. Differentiable.

    Raises:
        BluShapeError: ``T`` or ``Z`` not square matrices, or of different sizes.
    """
    del check_finite
    T, Z = matrices(T, "rsf2csf"), matrices(Z, "rsf2csf")
    if shape(T)[-1] != shape(Z)[-1]:
        raise BluShapeError(
            with_user_line(
                f"scipy.linalg.rsf2csf: T {get_aval(T).str_short()} and Z "
                f"{get_aval(Z).str_short()} must have the same size"
            )
        )
    ctype = dtypes.complex_dtype(np.result_type(dtype(T), dtype(Z)))
    T, Z = T.astype(ctype), Z.astype(ctype)
    if shape(T)[-1] <= 1:
        return bnp.broadcast_arrays(T, Z)
    return vectorize(_rsf2csf, signature="(n,n),(n,n)->(n,n),(n,n)")(T, Z)
