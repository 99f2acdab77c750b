"""More special matrices of ``jax.scipy.linalg``: those built from arrays (``hankel``,
``circulant``, ``leslie``, ``companion``, ``fiedler``, ``fiedler_companion``,
``convolution_matrix``; leading axes are batch axes, as JAX's) by gathers and selects, and those
of a static size (``invhilbert``, ``pascal``, ``invpascal``, ``helmert``, ``hadamard``,
``dft``), whose entries are computed exactly on the host when the program is built (constants,
as ``hilbert``'s)."""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from blu import numpy as bnp
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import asarray_operand, broadcast_shapes, promote_dtypes, to_inexact
from blu.scipy.linalg.special_matrices import toeplitz


def _vector(x: Any, name: str, inexact: bool = False) -> Any:
    x = bnp.atleast_1d(asarray_operand(x))
    return to_inexact(x) if inexact else x


def _batch(name: str, *xs: Any) -> tuple[int, ...]:
    try:
        return broadcast_shapes(*(get_aval(x).shape[:-1] for x in xs))
    except Exception:
        shapes = " and ".join(get_aval(x).str_short() for x in xs)
        raise BluShapeError(
            with_user_line(f"scipy.linalg.{name}: the batch shapes of {shapes} do not broadcast")
        ) from None


def _length(x: Any, least: int, name: str, arg: str) -> int:
    n = get_aval(x).shape[-1]
    if n < least:
        raise BluShapeError(
            with_user_line(
                f"scipy.linalg.{name}: {arg} needs at least {least} entries on its last axis, "
                f"got {get_aval(x).str_short()}"
            )
        )
    return n


def hankel(c: Any, r: Any = None) -> Any:
    """The Hankel matrix ``H[..., i, j] = v[..., i + j]``, ``v = concatenate([c, r[1:]])``
    (``jax.scipy.linalg.hankel``): first column ``c`` ``(..., m)``, last row ``r`` ``(..., n)``
    (default zeros like ``c``; ``r[0]`` is ignored). Returns ``(..., m, n)`` in the promoted
    dtype. Raises BluShapeError when the batch shapes do not broadcast."""
    c = _vector(c, "hankel")
    r = bnp.zeros_like(c) if r is None else _vector(r, "hankel")
    c, r = promote_dtypes(c, r)
    batch = _batch("hankel", c, r)
    m, n = get_aval(c).shape[-1], get_aval(r).shape[-1]
    c, r = bnp.broadcast_to(c, batch + (m,)), bnp.broadcast_to(r, batch + (n,))
    if m == 0 or n == 0:
        return bnp.zeros(batch + (m, n), get_aval(c).dtype)
    v = bnp.concatenate([c, r[..., 1:]], axis=-1)
    return v[..., np.arange(m)[:, None] + np.arange(n)[None, :]]


def circulant(c: Any) -> Any:
    """The circulant matrix ``C[..., i, j] = c[..., (i - j) % n]`` of ``c`` ``(..., n)``
    (``jax.scipy.linalg.circulant``), ``(..., n, n)`` in ``c``'s dtype."""
    c = _vector(c, "circulant")
    n = get_aval(c).shape[-1]
    return c[..., (np.arange(n)[:, None] - np.arange(n)[None, :]) % max(n, 1)]


def leslie(f: Any, s: Any) -> Any:
    """The Leslie matrix (``jax.scipy.linalg.leslie``): fecundities ``f`` ``(..., n)``, ``n >=
    2``, on the first row and survival rates ``s`` ``(..., n - 1)`` on the subdiagonal;
    ``(..., n, n)`` in the promoted dtype. Raises BluShapeError for other lengths."""
    f, s = promote_dtypes(_vector(f, "leslie"), _vector(s, "leslie"))
    n = _length(f, 2, "leslie", "f")
    if get_aval(s).shape[-1] != n - 1:
        raise BluShapeError(
            with_user_line(
                f"scipy.linalg.leslie: s needs one entry fewer than f on the last axis, got f "
                f"{get_aval(f).str_short()} and s {get_aval(s).str_short()}"
            )
        )
    batch = _batch("leslie", f, s)
    f, s = bnp.broadcast_to(f, batch + (n,)), bnp.broadcast_to(s, batch + (n - 1,))
    r, c = np.arange(n)[:, None], np.arange(n)[None, :]
    sub = bnp.concatenate([s, bnp.zeros(batch + (1,), get_aval(s).dtype)], axis=-1)
    out = bnp.where(r == c + 1, sub[..., None, :], bnp.zeros((), get_aval(f).dtype))
    return bnp.where(r == 0, f[..., None, :], out)


def companion(a: Any) -> Any:
    """The companion matrix of the polynomial with coefficients ``a`` ``(..., n)``, ``n >= 2``,
    highest degree first (``jax.scipy.linalg.companion``): first row ``-a[1:] / a[0]``, ones on
    the subdiagonal; ``(..., n - 1, n - 1)``, integers promoted to the default float."""
    a = _vector(a, "companion", inexact=True)
    n = _length(a, 2, "companion", "a")
    first = -a[..., 1:] / a[..., :1]
    r, c = np.arange(n - 1)[:, None], np.arange(n - 1)[None, :]
    sub = bnp.asarray(r == c + 1, dtype=get_aval(a).dtype)
    return bnp.where(r == 0, first[..., None, :], sub)


def fiedler(a: Any) -> Any:
    """The Fiedler matrix ``F[..., i, j] = |a[..., i] - a[..., j]|`` of ``a`` ``(..., n)``
    (``jax.scipy.linalg.fiedler``), in ``a``'s dtype."""
    a = _vector(a, "fiedler")
    return bnp.abs(a[..., :, None] - a[..., None, :])


def fiedler_companion(a: Any) -> Any:
    """Fiedler's pentadiagonal companion matrix of the coefficients ``a`` ``(..., n)``, ``n >=
    1``, highest degree first (``jax.scipy.linalg.fiedler_companion``), ``(..., n - 1, n -
    1)``, integers promoted to the default float; its eigenvalues are the polynomial's roots."""
    a = _vector(a, "fiedler_companion", inexact=True)
    n = _length(a, 1, "fiedler_companion", "a") - 1
    batch, t = get_aval(a).shape[:-1], get_aval(a).dtype
    if n == 0:
        return bnp.zeros(batch + (0, 0), t)
    a = a / a[..., :1]
    if n == 1:
        return -a[..., 1:, None]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    even, odd = i % 2 == 0, i % 2 == 1
    sup = -a[..., np.minimum(i + 2, n)[:, 0]][..., :, None]  # -a[i + 2] on row i
    sub = -a[..., np.minimum(i + 1, n)[:, 0]][..., :, None]  # -a[i + 1] on row i
    zero = bnp.zeros((), t)
    one = bnp.ones((), t)
    out = bnp.where((j == i - 2) & odd & (i >= 3), one, zero)
    out = bnp.where((j == i - 1) & even & (i >= 2), sub, out)
    out = bnp.where((j == i + 2) & even, one, out)
    out = bnp.where((j == i + 1) & even, sup, out)
    out = bnp.where((i == 1) & (j == 0), one, out)
    return bnp.where((i == 0) & (j == 0), -a[..., 1, None, None], out)


def _static_int(n: Any, name: str, arg: str = "n") -> int:
    try:
        return operator.index(n)
    except TypeError:
        raise BluTypeError(
            with_user_line(f"scipy.linalg.{name}: {arg} must be a Python int, got {n!r}")
        ) from None


def convolution_matrix(a: Any, n: int, mode: str = "full") -> Any:
    """The Toeplitz matrix ``A`` with ``A @ v == convolve(a, v, mode)`` for ``v`` of length ``n``
    (``jax.scipy.linalg.convolution_matrix``).

    Args:
        a: ``(..., m)``, ``m >= 1``; leading axes are batch axes.
        n: the length of ``v`` (a positive Python int).
        mode: 'full' (``m + n - 1`` rows), 'valid' (``max(m, n) - min(m, n) + 1``) or 'same'
            (``max(m, n)``), as ``numpy.convolve``.

    Returns:
        ``(..., rows, n)`` in ``a``'s dtype.

    Raises:
        BluValueError: ``n < 1`` or another mode. BluShapeError: ``a`` empty or a scalar.
    """
    n = _static_int(n, "convolution_matrix")
    if n < 1:
        raise BluValueError(
            with_user_line(f"scipy.linalg.convolution_matrix: n must be positive, got {n}")
        )
    if mode not in ("full", "valid", "same"):
        raise BluValueError(
            with_user_line(
                "scipy.linalg.convolution_matrix: mode must be 'full', 'valid' or 'same', "
                f"got {mode!r}"
            )
        )
    a = asarray_operand(a)
    if get_aval(a).ndim == 0:
        raise BluShapeError(
            with_user_line("scipy.linalg.convolution_matrix: a must be 1-D or more, got a scalar")
        )
    m = _length(a, 1, "convolution_matrix", "a")
    width = [(0, 0)] * (get_aval(a).ndim - 1) + [(0, n - 1)]
    az, raz = bnp.pad(a, width), bnp.pad(a[..., ::-1], width)
    total = m + n - 1
    if mode == "same":
        trim = min(n, m) - 1
        tb, te = trim // 2, trim - trim // 2
    elif mode == "valid":
        tb = te = min(n, m) - 1
    else:
        tb = te = 0
    return toeplitz(az[..., tb : total - te], raz[..., total - n - tb : total - tb])


def _static_matrix(values: np.ndarray, dtype: Any) -> Any:
    return bnp.asarray(values.astype(dtypes.canonicalize(dtype)))


def _size(n: Any, name: str, least: int = 0) -> int:
    n = _static_int(n, name)
    if n < least:
        raise BluValueError(with_user_line(f"scipy.linalg.{name}: n must be >= {least}, got {n}"))
    return n


def invhilbert(n: int) -> Any:
    """The inverse of the ``(n, n)`` Hilbert matrix (``jax.scipy.linalg.invhilbert``), its
    integer entries ``(-1)^(i+j) (i+j+1) C(n+i, n-j-1) C(n+j, n-i-1) C(i+j, i)^2`` computed
    exactly and rounded to the default float (float32, as JAX's without x64)."""
    n = _size(n, "invhilbert")
    c = math.comb
    vals = [[(-1) ** (i + j) * (i + j + 1) * c(n + i, n - j - 1) * c(n + j, n - i - 1)
             * c(i + j, i) ** 2 for j in range(n)] for i in range(n)]  # fmt: skip
    return _static_matrix(np.array(vals, dtype=float).reshape(n, n), np.float32)


def _pascal_lower(n: int, inverse: bool) -> np.ndarray:
    sign = (lambda i, j: (-1) ** (i - j)) if inverse else (lambda i, j: 1)
    vals = [[sign(i, j) * math.comb(i, j) for j in range(n)] for i in range(n)]
    return np.array(vals, dtype=float).reshape(n, n)


def _kind(kind: Any, name: str) -> str:
    kind = "symmetric" if kind is None else kind
    if kind not in ("symmetric", "lower", "upper"):
        raise BluValueError(
            with_user_line(
                f"scipy.linalg.{name}: kind must be 'symmetric', 'lower' or 'upper', got {kind!r}"
            )
        )
    return kind


def pascal(n: int, kind: str | None = None) -> Any:
    """The ``(n, n)`` Pascal matrix (``jax.scipy.linalg.pascal``): binomial coefficients
    ``C(i + j, i)`` ('symmetric', the default), ``C(i, j)`` ('lower') or its transpose
    ('upper'), exact and rounded to float32 (JAX's dtype)."""
    n, kind = _size(n, "pascal"), _kind(kind, "pascal")
    low = _pascal_lower(n, False)
    out = {"lower": low, "upper": low.T, "symmetric": low @ low.T}[kind]
    return _static_matrix(out, np.float32)


def invpascal(n: int, kind: str | None = None) -> Any:
    """The inverse of :func:`pascal` ``(n, kind)`` (``jax.scipy.linalg.invpascal``), exact
    integers rounded to the default float (float32)."""
    n, kind = _size(n, "invpascal"), _kind(kind, "invpascal")
    low = _pascal_lower(n, True)
    out = {"lower": low, "upper": low.T, "symmetric": low.T @ low}[kind]
    return _static_matrix(out, np.float32)


def helmert(n: int, full: bool = False) -> Any:
    """The Helmert matrix (``jax.scipy.linalg.helmert``): ``(n - 1, n)`` orthonormal rows
    orthogonal to the ones vector, row ``k`` ``(1, ..., 1, -(k+1), 0, ...) / sqrt((k+1)(k+2))``;
    with ``full`` the row ``1 / sqrt(n)`` first, ``(n, n)``. Default float (float32)."""
    n = _size(n, "helmert", least=1)
    k = np.arange(1, n)[:, None].astype(float)
    j = np.arange(n)[None, :]
    denom = np.sqrt(k * (k + 1))
    H = np.where(j < k, 1.0 / denom, np.where(j == k, -k / denom, 0.0))
    if full:
        H = np.concatenate([np.full((1, n), 1.0 / np.sqrt(n)), H], axis=0)
    return _static_matrix(H, np.float32)


def hadamard(n: int, dtype: Any = int) -> Any:
    """The ``(n, n)`` Hadamard matrix of Sylvester's construction, ``n`` a power of two, in
    ``dtype`` (default int: int32, as JAX's; ``jax.scipy.linalg.hadamard``).

    Raises:
        BluValueError: ``n`` is not a positive power of two.
    """
    n = _static_int(n, "hadamard")
    if n < 1 or n & (n - 1):
        raise BluValueError(
            with_user_line(f"scipy.linalg.hadamard: n must be a positive power of 2, got {n}")
        )
    H = np.ones((1, 1))
    while H.shape[0] < n:
        H = np.block([[H, H], [H, -H]])
    return _static_matrix(H, np.int32 if dtype is int else dtype)


def dft(n: int, scale: str | None = None, *, dtype: Any = None) -> Any:
    """The ``(n, n)`` discrete Fourier transform matrix ``W[j, k] = exp(-2 pi i j k / n)``
    (``jax.scipy.linalg.dft``), divided by ``sqrt(n)`` (``scale='sqrtn'``) or ``n`` ('n'), in a
    complex ``dtype`` (default complex64, as JAX's without x64).

    Raises:
        BluValueError: another ``scale``, or a ``dtype`` that is not complex.
    """
    n = _size(n, "dft")
    if scale not in (None, "sqrtn", "n"):
        raise BluValueError(
            with_user_line(f"scipy.linalg.dft: scale must be None, 'sqrtn' or 'n', got {scale!r}")
        )
    dtype = np.complex64 if dtype is None else dtypes.canonicalize(dtype)
    if not dtypes.is_complex(np.dtype(dtype)):
        raise BluValueError(
            with_user_line(f"scipy.linalg.dft: dtype must be complex, got {np.dtype(dtype)}")
        )
    jk = np.outer(np.arange(n), np.arange(n)) % max(n, 1)  # exact phases
    W = np.exp(-2j * np.pi * jk / max(n, 1))
    W = W / {None: 1.0, "sqrtn": np.sqrt(n), "n": float(n)}[scale] if n else W
    return _static_matrix(W, dtype)
