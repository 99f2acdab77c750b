"""The discrete Fourier transform as one primitive, ``fft`` (as ``jax.lax.fft``).

``fft(x, fft_type, fft_lengths)`` transforms the trailing ``len(fft_lengths)`` axes of ``x``
(1 to 3 of them), unnormalized forward and ``1/n``-normalized inverse, as numpy:

- ``"FFT"`` / ``"IFFT"``: complex -> complex of the same shape;
- ``"RFFT"``: real float32/float64 -> complex64/complex128, the last axis ``n -> n // 2 + 1``;
- ``"IRFFT"``: complex -> real, the last axis ``n // 2 + 1 -> n = fft_lengths[-1]``.

The impl is numpy's pocketfft (single precision stays single). The transform is linear, so
its JVP is itself on the tangent; its transpose is again a DFT: ``FFT`` and ``IFFT`` are
symmetric matrices (their own transposes), ``RFFT``'s transpose is ``real(FFT(pad(ct)))``
(zero-padding the half spectrum to ``n``), and ``IRFFT``'s is ``conj`` of a weighted
``RFFT / n`` (the bins other than 0 and n/2 appear twice in the real signal), as in JAX
(``jax/_src/lax/fft.py``). Batching moves the batch axis to the front. In a compiled program
the primitive is a library node: pocketfft writing into the planned buffer on the CPU
(``blu/lower/cpu/libraries.py``), cuFFT on CUDA targets (``blu/cuda/fft.py``).
"""

from __future__ import annotations

__all__ = ["fft", "FFT_TYPES"]

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.array import Array
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax.complex import conj, real
from blu.lax.elementwise import mul
from blu.lax.shapes import broadcast_in_dim, pad
from blu.transforms.ad_util import Zero, deflinear
from blu.transforms.batching import moveaxis

FFT_TYPES = ("FFT", "IFFT", "RFFT", "IRFFT")


def _axes(ndim: int, k: int) -> tuple[int, ...]:
    return tuple(range(ndim - k, ndim))


def _fft_impl(x: np.ndarray, *, fft_type: str, fft_lengths: tuple[int, ...]) -> np.ndarray:
    axes = _axes(x.ndim, len(fft_lengths))
    if x.size == 0 or 0 in fft_lengths:  # pocketfft rejects empty transforms
        shape, dt = _out_shape_dtype(x.shape, x.dtype, fft_type, fft_lengths)
        return np.zeros(shape, dt)
    if fft_type == "FFT":
        out = np.fft.fftn(x, s=fft_lengths, axes=axes)
    elif fft_type == "IFFT":
        out = np.fft.ifftn(x, s=fft_lengths, axes=axes)
    elif fft_type == "RFFT":
        out = np.fft.rfftn(x, s=fft_lengths, axes=axes)
    else:
        out = np.fft.irfftn(x, s=fft_lengths, axes=axes)
    _, dt = _out_shape_dtype(x.shape, x.dtype, fft_type, fft_lengths)
    return np.ascontiguousarray(out, dtype=dt)


def _out_shape_dtype(shape, dtype, fft_type, fft_lengths):
    k = len(fft_lengths)
    if fft_type in ("FFT", "IFFT"):
        return tuple(shape), dtype
    if fft_type == "RFFT":
        return tuple(shape[:-1]) + (fft_lengths[-1] // 2 + 1,), dtypes.complex_dtype(dtype)
    return tuple(shape[:-k]) + tuple(fft_lengths), dtypes.real_dtype(dtype)


def _fft_abstract_eval(x: ShapedArray, *, fft_type: str, fft_lengths: tuple[int, ...]):
    k = len(fft_lengths)
    if fft_type not in FFT_TYPES:
        raise BluValueError(with_user_line(f"fft: fft_type must be one of {FFT_TYPES}"))
    if not 1 <= k <= 3 or k > x.ndim:
        raise BluShapeError(
            with_user_line(
                f"fft: 1 to 3 transformed axes, at most the rank of {x.str_short()}, "
                f"got fft_lengths={fft_lengths}"
            )
        )
    real_in = fft_type == "RFFT"
    ok = x.dtype in (dtypes.float32, dtypes.float64) if real_in else dtypes.is_complex(x.dtype)
    if not ok:
        need = "float32/float64" if real_in else "complex"
        raise BluTypeError(with_user_line(f"fft {fft_type} needs {need} input, got "
                                          f"{x.str_short()}"))  # fmt: skip
    want = tuple(fft_lengths)
    if fft_type == "IRFFT":
        want = want[:-1] + (fft_lengths[-1] // 2 + 1,)
    if tuple(x.shape[-k:]) != want:
        raise BluShapeError(
            with_user_line(
                f"fft {fft_type}: the trailing axes of {x.str_short()} must be {want} for "
                f"fft_lengths={fft_lengths}"
            )
        )
    shape, dt = _out_shape_dtype(x.shape, x.dtype, fft_type, fft_lengths)
    return ShapedArray(shape, dt)


fft_p = Primitive("fft")
fft_p.def_impl(_fft_impl)
fft_p.def_abstract_eval(_fft_abstract_eval)


def _rfft_transpose(ct: Any, fft_lengths: tuple[int, ...]) -> Any:
    # RFFT(x) = FFT(x + 0j)[..., :n//2+1]: transpose the slice (zero-pad), the FFT (itself)
    # and the real -> complex cast (the real part)
    n = fft_lengths[-1]
    ndim = get_aval(ct).ndim
    config = [(0, 0, 0)] * (ndim - 1) + [(0, n - (n // 2 + 1), 0)]
    full = pad(ct, 0, config)
    return real(fft(full, "FFT", fft_lengths))


def _irfft_transpose(ct: Any, fft_lengths: tuple[int, ...]) -> Any:
    x = fft(ct, "RFFT", fft_lengths)
    xa = get_aval(x)
    m = xa.shape[-1]
    odd = fft_lengths[-1] % 2
    weights = np.concatenate([[1.0], np.full(m - 2 + odd, 2.0), np.ones(1 - odd)])[:m]
    weights = (weights / math.prod(fft_lengths)).astype(xa.dtype)
    w = broadcast_in_dim(Array(weights), xa.shape, (xa.ndim - 1,))
    return conj(mul(x, w))


def _fft_transpose(ct: Any, x: Any, *, fft_type: str, fft_lengths: tuple[int, ...]) -> list:
    if isinstance(ct, Zero):
        return [None]
    if fft_type == "RFFT":
        return [_rfft_transpose(ct, fft_lengths)]
    if fft_type == "IRFFT":
        return [_irfft_transpose(ct, fft_lengths)]
    return [fft(ct, fft_type, fft_lengths)]  # the DFT matrix is symmetric


deflinear(fft_p, _fft_transpose)


def _fft_batch(axis_size, args, dims, **params):
    (x,), (d,) = args, dims
    return fft_p.bind(moveaxis(x, d, 0), **params), 0


fft_p.def_batch(_fft_batch)


def fft(x: Any, fft_type: str, fft_lengths: Sequence[int]) -> Any:
    """The DFT of the trailing ``len(fft_lengths)`` axes of ``x`` (see the module docstring).

    Args:
        x: complex array for ``"FFT"``/``"IFFT"``/``"IRFFT"``, float32/float64 for ``"RFFT"``.
        fft_type: ``"FFT"``, ``"IFFT"``, ``"RFFT"`` or ``"IRFFT"``.
        fft_lengths: the transform sizes (1 to 3); for ``"IRFFT"`` the *output* sizes.

    Raises:
        BluTypeError: a wrong input dtype. BluShapeError: trailing axes that do not match.
    """
    fft_type = str(getattr(fft_type, "name", fft_type)).upper()
    return fft_p.bind(x, fft_type=fft_type, fft_lengths=tuple(int(n) for n in fft_lengths))
