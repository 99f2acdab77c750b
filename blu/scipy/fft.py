"""``jax.scipy.fft``: the type-2 discrete cosine transform (``dct``, ``dctn``) and its inverse
(``idct``, ``idctn``), composed from ``blu.numpy.fft`` by Makhoul's algorithm: one complex FFT
of the even samples followed by the reversed odd ones, and a quarter-sample twiddle (J. Makhoul,
"A fast cosine transform in one and two dimensions", IEEE Trans. ASSP 28(1), 1980, pp. 27-34).

As JAX's: only ``type=2`` (others raise), ``norm`` None / 'backward' (SciPy's unnormalised
``2 sum x[n] cos(pi k (2n + 1) / (2N))``) or 'ortho'; integers become float32, a complex input
is transformed in its real and imaginary parts; ``n`` / ``s`` pad with zeros or truncate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu import lax
from blu import numpy as bnp
from blu.core import dtypes
from blu.core.errors import BluValueError, with_user_line
from blu.numpy._promote import asarray_operand, canonicalize_axes, canonicalize_axis, to_inexact

__all__ = ["dct", "dctn", "idct", "idctn"]


def _check(name: str, type: int, norm: str | None) -> None:
    if type != 2:
        raise BluValueError(
            with_user_line(f"scipy.fft.{name}: only DCT type 2 is implemented (JAX's), got {type}")
        )
    if norm not in (None, "backward", "ortho"):
        raise BluValueError(
            with_user_line(
                f"scipy.fft.{name}: norm must be None, 'backward' or 'ortho', got {norm!r}"
            )
        )


def _resize(x: Any, axis: int, n: int | None, name: str) -> Any:
    """``x`` zero-padded or truncated to length ``n`` along ``axis``."""
    if n is None:
        return x
    n = int(n)
    if n < 1:
        raise BluValueError(with_user_line(f"scipy.fft.{name}: n must be >= 1, got {n}"))
    size = x.shape[axis]
    if n < size:
        return lax.slice_in_dim(x, 0, n, axis=axis)
    if n > size:
        pads = [(0, n - size if a == axis else 0, 0) for a in range(x.ndim)]
        return lax.pad(x, np.zeros((), x.dtype)[()], pads)
    return x


def _order(n: int) -> np.ndarray:
    """Makhoul's reordering: the even samples, then the odd ones reversed."""
    return np.concatenate([np.arange(0, n, 2), np.arange(n - 1 - n % 2, 0, -2)])


def _along(v: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    return v.reshape([-1 if a == axis else 1 for a in range(ndim)])


def _ortho(n: int, dtype: np.dtype) -> np.ndarray:
    """'ortho' scale per coefficient: sqrt(1/(4N)) for k = 0, sqrt(1/(2N)) otherwise."""
    f = np.full(n, math.sqrt(1 / (2 * n)))
    f[0] = math.sqrt(1 / (4 * n))
    return f.astype(dtype)


def _real_float(x: Any, name: str) -> Any:
    x = to_inexact(asarray_operand(x))
    if x.ndim == 0:
        raise BluValueError(with_user_line(f"scipy.fft.{name}: x must have at least 1 axis"))
    return x


def _dct_axis(x: Any, axis: int, norm: str | None) -> Any:
    n = x.shape[axis]
    v = bnp.take(x, _order(n), axis=axis)
    big = bnp.fft.fft(v, axis=axis)
    k = np.arange(n)
    twiddle = _along(2 * np.exp(-1j * np.pi * k / (2 * n)), x.ndim, axis)
    out = bnp.real(big * twiddle.astype(big.dtype))
    if norm == "ortho":
        out = out * _along(_ortho(n, out.dtype), x.ndim, axis)
    return out


def _idct_axis(y: Any, axis: int, norm: str | None) -> Any:
    n = y.shape[axis]
    if norm == "ortho":
        y = y / _along(_ortho(n, y.dtype), y.ndim, axis)
    # V[k] = exp(i pi k / 2N) (y[k] - i y[N-k]) / 2 with y[N] = 0 (Makhoul's inverse)
    shifted = bnp.take(y, np.concatenate([[0], np.arange(n - 1, 0, -1)]), axis=axis)
    shifted = shifted * _along((np.arange(n) > 0).astype(y.dtype), y.ndim, axis)
    k = np.arange(n)
    twiddle = _along(0.5 * np.exp(1j * np.pi * k / (2 * n)), y.ndim, axis)
    cdt = dtypes.result_type(y.dtype, np.dtype(np.complex64))
    big = lax.complex(y, -shifted) * twiddle.astype(cdt)
    v = bnp.real(bnp.fft.ifft(big, axis=axis))
    return bnp.take(v, np.argsort(_order(n)), axis=axis)


def _complex_parts(f: Any, x: Any) -> Any:
    if dtypes.is_complex(x.dtype):
        return lax.complex(f(bnp.real(x)), f(bnp.imag(x)))
    return f(x)


def dct(x: Any, type: int = 2, n: int | None = None, axis: int = -1, norm: str | None = None):
    """The type-2 DCT of ``x`` along ``axis`` (``jax.scipy.fft.dct``): ``y[k] = 2 sum_n x[n]
    cos(pi k (2n + 1) / (2N))``, times sqrt(1/(4N)) (k = 0) or sqrt(1/(2N)) with
    ``norm='ortho'``.

    Args:
        x: a real or complex array (integers become float32).
        type: 2 only.
        n: the transform length (``x`` zero-padded or truncated to it along ``axis``).
        axis: the axis transformed.
        norm: None / 'backward' or 'ortho'.

    Returns:
        An array of ``x``'s float (or complex) dtype, ``n`` long along ``axis``.

    Raises:
        BluValueError: another ``type`` or ``norm``, ``n < 1``, a 0-d ``x``.
    """
    _check("dct", type, norm)
    x = _real_float(x, "dct")
    axis = canonicalize_axis(axis, x.ndim, "scipy.fft.dct")
    x = _resize(x, axis, n, "dct")
    return _complex_parts(lambda r: _dct_axis(r, axis, norm), x)


def idct(x: Any, type: int = 2, n: int | None = None, axis: int = -1, norm: str | None = None):
    """The inverse of ``dct`` along ``axis`` (``jax.scipy.fft.idct``): the type-3 DCT divided
    by 2N (``norm=None``), or its orthonormal form (``norm='ortho'``), so
    ``idct(dct(x)) == x``.

    Args and raises as ``dct``.
    """
    _check("idct", type, norm)
    x = _real_float(x, "idct")
    axis = canonicalize_axis(axis, x.ndim, "scipy.fft.idct")
    x = _resize(x, axis, n, "idct")
    return _complex_parts(lambda r: _idct_axis(r, axis, norm), x)


def _nd(name: str, one: Any, x: Any, type: int, s: Any, axes: Any, norm: str | None) -> Any:
    _check(name, type, norm)
    x = _real_float(x, name)
    if axes is None:
        axes = tuple(range(x.ndim)) if s is None else tuple(range(x.ndim - len(s), x.ndim))
    axes = canonicalize_axes(axes, x.ndim, f"scipy.fft.{name}")
    if s is not None:
        s = [s] if isinstance(s, int) else list(s)
        if len(s) != len(axes):
            raise BluValueError(
                with_user_line(f"scipy.fft.{name}: s {tuple(s)} and axes {axes} differ in length")
            )
        for a, length in zip(axes, s):
            x = _resize(x, a, length, name)

    def each(r: Any) -> Any:
        for a in axes:
            r = one(r, a, norm)
        return r

    return _complex_parts(each, x)


def dctn(x: Any, type: int = 2, s: Sequence[int] | None = None, axes: Any = None,
         norm: str | None = None) -> Any:  # fmt: skip
    """The type-2 DCT over several axes (``jax.scipy.fft.dctn``): ``dct`` along each of
    ``axes`` (all by default; the last ``len(s)`` with only ``s``), each ``s[i]`` long.

    Raises:
        BluValueError: as ``dct``; ``s`` and ``axes`` of different lengths; a repeated axis.
    """
    return _nd("dctn", _dct_axis, x, type, s, axes, norm)


def idctn(x: Any, type: int = 2, s: Sequence[int] | None = None, axes: Any = None,
          norm: str | None = None) -> Any:  # fmt: skip
    """The inverse of ``dctn`` (``jax.scipy.fft.idctn``): ``idct`` along each of ``axes``.

    Raises:
        BluValueError: as ``dctn``.
    """
    return _nd("idctn", _idct_axis, x, type, s, axes, norm)
