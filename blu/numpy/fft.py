"""``blu.numpy.fft``: discrete Fourier transforms (numpy's and the Array API's ``fft``
extension), built on the ``blu.lax.fft`` primitive, so each is differentiable (the transforms
are linear), batchable and jittable.

Conventions are numpy's: ``norm="backward"`` (default) leaves the forward transform unscaled
and divides the inverse by ``n``; ``"ortho"`` scales both by ``1/sqrt(n)``; ``"forward"``
divides the forward one by ``n``. ``n``/``s`` crop or zero-pad the input along the transformed
axes (for ``irfft*`` and ``hfft`` they are the *output* lengths, default ``2 * (m - 1)``).
Real inputs to the complex transforms are promoted to complex (float64 -> complex128, other
reals -> complex64); integer inputs become the default float first. The arguments after the
array may be given positionally, as numpy and JAX allow (``fft(x, 8)``, ``fftn(x, s, axes)``,
``fftfreq(n, d)``, ``fftshift(x, axes)``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu import lax
from blu.core import dtypes
from blu.core.array import Array
from blu.core.errors import BluTypeError, BluValueError, ConcretizationError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import asarray_operand, canonicalize_axes, canonicalize_axis, to_inexact
from blu.numpy.devices import with_device
from blu.numpy.manipulation import roll as _roll
from blu.numpy.ufuncs import true_divide

# fmt: off
__all__ = ["fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft",
           "fft2", "ifft2", "rfft2", "irfft2", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]
# fmt: on

_NORMS = ("backward", "ortho", "forward")


def _to_complex(x: Any) -> Any:
    x = to_inexact(asarray_operand(x))
    d = get_aval(x).dtype
    return x if dtypes.is_complex(d) else lax.convert_element_type(x, dtypes.complex_dtype(d))


def _to_real(x: Any, name: str) -> Any:
    x = to_inexact(asarray_operand(x))
    d = get_aval(x).dtype
    if dtypes.is_complex(d):
        raise BluValueError(with_user_line(f"fft.{name} needs real input, got {d}"))
    return lax.convert_element_type(x, dtypes.float64 if d == dtypes.float64 else dtypes.float32)


def _resize(x: Any, axis: int, n: int) -> Any:
    """``x`` cropped or zero-padded to length ``n`` along ``axis``."""
    size = get_aval(x).shape[axis]
    if n == size:
        return x
    if n < size:
        return lax.slice_in_dim(x, 0, n, axis=axis)
    config = [(0, 0, 0)] * get_aval(x).ndim
    config[axis] = (0, n - size, 0)
    return lax.pad(x, 0, config)


def _last_axes(x: Any, axes: Sequence[int]) -> tuple[Any, list[int]]:
    """``x`` with ``axes`` moved to the end (in order), and the permutation that undoes it."""
    nd = get_aval(x).ndim
    rest = [a for a in range(nd) if a not in axes]
    perm = rest + list(axes)
    inv = [perm.index(i) for i in range(nd)]
    return lax.transpose(x, tuple(perm)), inv


def _scale(x: Any, norm: str | None, n: int, inverse: bool) -> Any:
    norm = "backward" if norm is None else norm
    if norm not in _NORMS:
        raise BluValueError(with_user_line(f"fft: norm must be one of {_NORMS}, got {norm!r}"))
    if n == 0:
        return x
    # the lax transforms: forward unscaled, inverse divided by n ("backward")
    factor = {
        ("backward", False): 1.0,
        ("backward", True): 1.0,
        ("ortho", False): 1.0 / math.sqrt(n),
        ("ortho", True): math.sqrt(n),
        ("forward", False): 1.0 / n,
        ("forward", True): float(n),
    }[(norm, inverse)]
    return x if factor == 1.0 else lax.mul(x, factor)


def _c2c(x: Any, axes: Sequence[int], inverse: bool) -> Any:
    """Complex transforms over ``axes`` (trailing after ``_last_axes``), 3 axes at a time."""
    kind = "IFFT" if inverse else "FFT"
    axes = list(axes)
    while axes:
        chunk, axes = axes[-3:], axes[:-3]
        y, inv = _last_axes(x, chunk)
        lengths = get_aval(y).shape[-len(chunk) :]
        x = lax.transpose(lax.fft(y, kind, lengths), tuple(inv))
    return x


def _norm_axes(x: Any, s: Any, axes: Any, name: str) -> tuple[list[int], list[int] | None]:
    nd = get_aval(x).ndim
    if s is not None:
        if not isinstance(s, Sequence) and not (isinstance(s, np.ndarray) and s.ndim == 1):
            raise BluTypeError(
                with_user_line(f"fft.{name}: s must be a sequence of ints, got {s!r}")
            )
        s = [_index(v, name, "s must hold ints (n for the 1-D transforms)") for v in s]
    if axes is None:
        if s is not None and len(s) > nd:  # (numpy's axes range(-len(s), 0) are out of range)
            raise BluValueError(
                with_user_line(f"fft.{name}: s {tuple(s)} has more entries than x has axes ({nd})")
            )
        axes = list(range(nd)) if s is None else list(range(nd - len(s), nd))
    else:
        axes = list(canonicalize_axes(axes, nd, name))
    if s is not None:
        if len(s) != len(axes):
            raise BluValueError(with_user_line(f"fft.{name}: s and axes differ in length"))
    return axes, s


def _index(v: Any, name: str, what: str) -> int:
    """``v`` as a Python int; ``what`` says what it must be, for the error."""
    try:
        return operator.index(v)
    except TypeError:
        raise BluTypeError(with_user_line(f"fft.{name}: {what}, got {v!r}")) from None


def _check_n(n: int, name: str) -> int:
    n = _index(n, name, "n must be an int")
    if n < 1:
        raise BluValueError(with_user_line(f"fft.{name}: n must be >= 1, got {n}"))
    return n


def fftn(x: Any, /, s: Any = None, axes: Any = None, norm: str = "backward") -> Any:
    """The n-dimensional DFT over ``axes`` (default all, or the last ``len(s)``), complex
    output; ``s`` crops/pads each transformed axis."""
    x = _to_complex(x)
    axes, s = _norm_axes(x, s, axes, "fftn")
    for i, a in enumerate(axes):
        x = _resize(x, a, _check_n(s[i], "fftn")) if s is not None else x
    n = math.prod(get_aval(x).shape[a] for a in axes)
    return _scale(_c2c(x, axes, False), norm, n, False)


def ifftn(x: Any, /, s: Any = None, axes: Any = None, norm: str = "backward") -> Any:
    """The inverse n-dimensional DFT (see ``fftn``)."""
    x = _to_complex(x)
    axes, s = _norm_axes(x, s, axes, "ifftn")
    for i, a in enumerate(axes):
        x = _resize(x, a, _check_n(s[i], "ifftn")) if s is not None else x
    n = math.prod(get_aval(x).shape[a] for a in axes)
    return _scale(_c2c(x, axes, True), norm, n, True)


def fft(x: Any, /, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """The one-dimensional DFT along ``axis`` (``n``: crop/zero-pad to that length)."""
    return fftn(x, s=None if n is None else [n], axes=[axis], norm=norm)


def ifft(x: Any, /, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """The inverse one-dimensional DFT along ``axis``."""
    return ifftn(x, s=None if n is None else [n], axes=[axis], norm=norm)


def fft2(x: Any, /, s: Any = None, axes: Any = (-2, -1), norm: str = "backward") -> Any:
    """``fftn`` over two axes (default the last two)."""
    return fftn(x, s=s, axes=axes, norm=norm)


def ifft2(x: Any, /, s: Any = None, axes: Any = (-2, -1), norm: str = "backward") -> Any:
    """``ifftn`` over two axes (default the last two)."""
    return ifftn(x, s=s, axes=axes, norm=norm)


def rfftn(x: Any, /, s: Any = None, axes: Any = None, norm: str = "backward") -> Any:
    """The DFT of a real array over ``axes``: the last transformed axis keeps ``n // 2 + 1``
    frequencies (the others are Hermitian-redundant)."""
    x = _to_real(x, "rfftn")
    axes, s = _norm_axes(x, s, axes, "rfftn")
    if not axes:
        return _to_complex(x)
    for i, a in enumerate(axes):
        x = _resize(x, a, _check_n(s[i], "rfftn")) if s is not None else x
    n = math.prod(get_aval(x).shape[a] for a in axes)
    y, inv = _last_axes(x, [axes[-1]])
    last = get_aval(y).shape[-1]
    if last == 0:  # (numpy's "Invalid number of FFT data points (0)"; JAX's fails to lower)
        raise BluValueError(with_user_line(f"fft.rfftn: the real transform's axis {axes[-1]} "
                                           "has length 0; give n or s >= 1"))  # fmt: skip
    y = lax.transpose(lax.fft(y, "RFFT", (last,)), tuple(inv))
    return _scale(_c2c(y, axes[:-1], False), norm, n, False)


def irfftn(x: Any, /, s: Any = None, axes: Any = None, norm: str = "backward") -> Any:
    """The inverse of ``rfftn``: real output, the last axis of length ``s[-1]`` (default
    ``2 * (m - 1)`` for an input of ``m`` frequencies)."""
    x = _to_complex(x)
    axes, s = _norm_axes(x, s, axes, "irfftn")
    if not axes:
        return lax.real(x)
    shape = get_aval(x).shape
    if s is None:
        s = [shape[a] for a in axes[:-1]] + [2 * (shape[axes[-1]] - 1)]
    for i, a in enumerate(axes[:-1]):
        x = _resize(x, a, _check_n(s[i], "irfftn"))
    last_n = _check_n(s[-1], "irfftn")
    x = _resize(x, axes[-1], last_n // 2 + 1)
    x = _c2c(x, axes[:-1], True)
    y, inv = _last_axes(x, [axes[-1]])
    y = lax.transpose(lax.fft(y, "IRFFT", (last_n,)), tuple(inv))
    return _scale(y, norm, math.prod(s), True)


def rfft(x: Any, /, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """The DFT of a real array along ``axis``: ``n // 2 + 1`` frequencies."""
    return rfftn(x, s=None if n is None else [n], axes=[axis], norm=norm)


def irfft(x: Any, /, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """The inverse of ``rfft``: a real array of length ``n`` (default ``2 * (m - 1)``)."""
    return irfftn(x, s=None if n is None else [n], axes=[axis], norm=norm)


def rfft2(x: Any, /, s: Any = None, axes: Any = (-2, -1), norm: str = "backward") -> Any:
    """``rfftn`` over two axes (default the last two)."""
    return rfftn(x, s=s, axes=axes, norm=norm)


def irfft2(x: Any, /, s: Any = None, axes: Any = (-2, -1), norm: str = "backward") -> Any:
    """``irfftn`` over two axes (default the last two)."""
    return irfftn(x, s=s, axes=axes, norm=norm)


_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho", None: "forward"}


def hfft(x: Any, /, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """The DFT of a Hermitian-symmetric signal given by its first half: real output of length
    ``n`` (default ``2 * (m - 1)``); ``irfft(conj(x))`` with the norm's direction swapped."""
    if norm not in _SWAP:
        raise BluValueError(with_user_line(f"fft: norm must be one of {_NORMS}, got {norm!r}"))
    x = _to_complex(x)
    return irfft(lax.conj(x), n=n, axis=axis, norm=_SWAP[norm])


def ihfft(x: Any, /, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """The inverse of ``hfft`` for a real signal: ``conj(rfft(x))`` with the norm's direction
    swapped (``n // 2 + 1`` frequencies)."""
    if norm not in _SWAP:
        raise BluValueError(with_user_line(f"fft: norm must be one of {_NORMS}, got {norm!r}"))
    return lax.conj(rfft(x, n=n, axis=axis, norm=_SWAP[norm]))


def _freq_dtype(dtype: Any) -> np.dtype:
    d = dtypes.default_float if dtype is None else dtypes.canonicalize(dtype)
    if not dtypes.is_float(d):
        raise BluValueError(with_user_line(f"fftfreq: dtype must be a real float, got {d}"))
    return d


def _freqs(freqs: Any, n: int, d: Any, dtype: Any) -> Any:
    """``freqs(n, d)`` (numpy's), computed once in float64 when ``d`` is known; a traced ``d``
    (JAX takes any scalar array) divides the static ``freqs(n, 1)``."""
    out_dtype = _freq_dtype(dtype)
    try:
        d_value = float(d)
    except ConcretizationError:
        scale = lax.convert_element_type(asarray_operand(d), out_dtype)
        return true_divide(Array(freqs(n, 1.0).astype(out_dtype)), scale)
    return Array(freqs(n, d=d_value).astype(out_dtype))


@with_device
def fftfreq(n: int, /, d: Any = 1.0, *, dtype: Any = None) -> Any:
    """The sample frequencies of an ``n``-point DFT with sample spacing ``d`` (a scalar, which
    may be traced): ``[0, 1, ..., ceil(n/2) - 1, -floor(n/2), ..., -1] / (d n)``."""
    return _freqs(np.fft.fftfreq, _check_n(n, "fftfreq"), d, dtype)


@with_device
def rfftfreq(n: int, /, d: Any = 1.0, *, dtype: Any = None) -> Any:
    """The sample frequencies of ``rfft``: ``[0, 1, ..., n // 2] / (d n)`` (``d`` as for
    ``fftfreq``)."""
    return _freqs(np.fft.rfftfreq, _check_n(n, "rfftfreq"), d, dtype)


def _shift(x: Any, axes: Any, inverse: bool) -> Any:
    x = asarray_operand(x)
    shape = get_aval(x).shape
    if axes is None:
        axes = tuple(range(len(shape)))
    elif isinstance(axes, int):
        axes = (canonicalize_axis(axes, len(shape)),)
    else:
        axes = tuple(canonicalize_axis(a, len(shape)) for a in axes)
    if not axes:
        return x
    shifts = tuple(-(shape[a] // 2) if inverse else shape[a] // 2 for a in axes)
    return _roll(x, shifts, axes)


def fftshift(x: Any, /, axes: Any = None) -> Any:
    """Move the zero frequency to the centre: roll each axis in ``axes`` (default all) by
    ``n // 2``."""
    return _shift(x, axes, False)


def ifftshift(x: Any, /, axes: Any = None) -> Any:
    """The inverse of ``fftshift``: roll by ``-(n // 2)``."""
    return _shift(x, axes, True)
