"""Spectral analysis of ``blu.scipy.signal`` (``jax.scipy.signal``'s ``stft``, ``istft``,
``csd``, ``welch``): the windowed FFTs of overlapping segments (``scipy.signal``'s
``_spectral_helper``), their averages and the overlap-add inverse. Segments are cut by static
slices of the signal viewed as blocks of the step, and added back by pads of those blocks, so
every piece stages, differentiates and batches; windows named by a string (or a tuple) are
``scipy.signal.get_window``'s, computed on the host as constants."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import blu.numpy as bnp
from blu import lax
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import (
    asarray_operand,
    broadcast_shapes,
    canonicalize_axis,
    is_concrete,
    promote_dtypes,
    to_inexact,
)
from blu.scipy._detrend import detrend as detrend_

__all__ = ["csd", "istft", "stft", "welch"]

_BOUNDARIES = (None, "even", "odd", "constant", "zeros")


def _error(name: str, msg: str) -> BluValueError:
    return BluValueError(with_user_line(f"scipy.signal.{name}: {msg}"))


def _warn(msg: str) -> None:
    """A UserWarning attributed to the first caller outside this module (welch calls csd)."""
    level, frame = 1, sys._getframe(0)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame, level = frame.f_back, level + 1
    warnings.warn(msg, stacklevel=level)


def _static(v: Any, what: str, name: str) -> int:
    return dtypes.static_int(v, f"scipy.signal.{name}: {what}")


def _host_window(window: Any, n: int, name: str) -> np.ndarray:
    """``scipy.signal.get_window(window, n)`` (periodic), float64 on the host."""
    import scipy.signal  # imported on first use: it would slow down `import blu`

    try:
        return np.asarray(scipy.signal.get_window(window, n), np.float64)
    except (ValueError, TypeError) as e:
        raise _error(name, f"window {window!r}: {e}") from e


def _array_window(window: Any, name: str) -> Any:
    win = asarray_operand(window)
    if get_aval(win).ndim != 1:
        raise BluShapeError(
            with_user_line(
                f"scipy.signal.{name}: an array window must be 1-d, got {get_aval(win).str_short()}"
            )
        )
    return win


def _host(win: Any) -> np.ndarray | None:
    """The window's float64 values when they are known on the host."""
    if isinstance(win, np.ndarray):
        return win
    if is_concrete(win) and not dtypes.is_complex(get_aval(win).dtype):
        return np.asarray(win, np.float64)
    return None


def _frames(x: Any, nperseg: int, step: int) -> Any:
    """``(..., L)`` -> ``(..., nseg, nperseg)``, segment ``j`` being ``x[..., j*step:][:nperseg]``
    (``nseg = (L - nperseg) // step + 1``): ``x`` viewed as blocks of ``step``, segment ``j``
    the blocks ``j .. j+q-1`` and ``r`` elements of block ``j+q`` (``nperseg = q step + r``)."""
    *batch, length = get_aval(x).shape
    nseg = (length - nperseg) // step + 1
    q, r = divmod(nperseg, step)
    nblocks = nseg + q + (1 if r else 0)
    need = nblocks * step
    if length >= need:
        x = x[..., :need]
    else:
        x = bnp.pad(x, [(0, 0)] * len(batch) + [(0, need - length)])
    blocks = bnp.reshape(x, (*batch, nblocks, step))
    pieces = [blocks[..., i : i + nseg, :] for i in range(q)]
    if r:
        pieces.append(blocks[..., q : q + nseg, :r])
    return pieces[0] if len(pieces) == 1 else bnp.concatenate(pieces, -1)


def _overlap_add(frames: Any, step: int) -> Any:
    """``(..., nseg, n)`` -> ``(..., (nseg - 1) step + n)``: each frame added at ``j * step``."""
    *batch, nseg, n = get_aval(frames).shape
    k = -(-n // step)  # the blocks of `step` a frame spans
    nb = len(batch)
    frames = bnp.pad(frames, [(0, 0)] * (nb + 1) + [(0, k * step - n)])
    frames = bnp.reshape(frames, (*batch, nseg, k, step))
    out = None
    for i in range(k):
        part = bnp.pad(frames[..., i, :], [(0, 0)] * nb + [(i, k - 1 - i), (0, 0)])
        out = part if out is None else out + part
    out = bnp.reshape(out, (*batch, (nseg + k - 1) * step))
    return out[..., : (nseg - 1) * step + n]


def _overlap_add_host(frames: np.ndarray, step: int) -> np.ndarray:
    nseg, n = frames.shape
    out = np.zeros((nseg - 1) * step + n, frames.dtype)
    for j in range(nseg):
        out[j * step : j * step + n] += frames[j]
    return out


def _extend(x: Any, n: int, boundary: str | None) -> Any:
    """``x`` extended by ``n`` points at both ends of its last axis (SciPy's ``even_ext``,
    ``odd_ext``, ``const_ext``, ``zero_ext``)."""
    if boundary is None or n < 1:
        return x
    width = [(0, 0)] * (get_aval(x).ndim - 1) + [(n, n)]
    if boundary in ("even", "odd"):  # (n < length: n <= nperseg // 2, nperseg <= length)
        return bnp.pad(x, width, "reflect", reflect_type=boundary)
    if boundary == "constant":
        return bnp.pad(x, width, "edge")
    return bnp.pad(x, width)


def _detrend_func(detrend: Any, axis: int, mode: str) -> Callable[[Any], Any]:
    """Each segment's detrending. A function gets the segments ``(..., nseg, nperseg)``, their
    points last, in ``csd`` and ``welch`` (SciPy's since 1.12); in ``stft`` with their points
    moved to ``axis`` unless it is ``-1`` (SciPy's ``_spectral_helper``)."""
    if detrend is None or detrend is False:
        return lambda d: d
    if not callable(detrend):
        return lambda d: detrend_(d, type=detrend, axis=-1)
    if mode == "stft" and axis != -1:

        def moved(d: Any) -> Any:
            return bnp.moveaxis(detrend(bnp.moveaxis(d, -1, axis)), axis, -1)

        return moved
    return detrend


def _spectral(
    x: Any, y: Any, fs: Any, window: Any, nperseg: Any, noverlap: Any, nfft: Any, detrend: Any,
    return_onesided: bool, scaling: str, axis: Any, mode: str, boundary: str | None,
    padded: bool, name: str,
) -> tuple[Any, Any, Any]:  # fmt: skip
    """``(freqs, times, result)``: ``scipy.signal._spectral_helper`` (``y=None`` for one
    signal; ``mode`` ``'psd'`` or ``'stft'``), the frequency axis at ``axis``, the segments
    last."""
    if boundary not in _BOUNDARIES:
        raise _error(name, f"boundary must be one of {list(_BOUNDARIES)}, got {boundary!r}")
    if scaling not in ("density", "spectrum"):
        raise _error(name, f"scaling must be 'density' or 'spectrum', got {scaling!r}")
    raw_axis = dtypes.index_int(axis, f"scipy.signal.{name}: axis")
    if y is None:
        x = to_inexact(asarray_operand(x))
        ya = None
    else:
        x, ya = promote_dtypes(asarray_operand(x), asarray_operand(y))
        x, ya = to_inexact(x), to_inexact(ya)
        ax, ay = get_aval(x), get_aval(ya)
        if ax.ndim != ay.ndim:
            raise BluShapeError(
                with_user_line(
                    f"scipy.signal.{name}: x and y need the same number of dimensions, got "
                    f"{ax.str_short()} and {ay.str_short()}"
                )
            )
    nd = get_aval(x).ndim
    if nd == 0:
        raise BluShapeError(with_user_line(f"scipy.signal.{name}: x must have an axis, got 0-d"))
    axis = canonicalize_axis(raw_axis, nd)
    xshape = get_aval(x).shape
    outer = xshape[:axis] + xshape[axis + 1 :]
    if ya is not None:
        yshape = get_aval(ya).shape
        try:
            outer = broadcast_shapes(outer, yshape[:axis] + yshape[axis + 1 :])
        except BluShapeError as e:
            raise BluShapeError(
                with_user_line(
                    f"scipy.signal.{name}: x {xshape} and y {yshape} do not broadcast outside "
                    f"axis {axis}"
                )
            ) from e
    result_dtype = dtypes.complex_dtype(get_aval(x).dtype)
    freq_dtype = dtypes.real_dtype(result_dtype)
    if nperseg is not None:
        nperseg = _static(nperseg, "nperseg", name)
        if nperseg < 1:
            raise _error(name, f"nperseg must be a positive integer, got {nperseg}")
    if get_aval(x).size == 0 or (ya is not None and get_aval(ya).size == 0):
        shape = xshape
        if ya is not None:
            shape = outer[:axis] + (min(xshape[axis], yshape[axis]),) + outer[axis:]
        z = bnp.zeros(shape, freq_dtype)
        return z, z, bnp.zeros(shape, result_dtype)

    x = bnp.moveaxis(x, axis, -1)
    if ya is not None:
        ya = bnp.moveaxis(ya, axis, -1)
        lx, ly = get_aval(x).shape[-1], get_aval(ya).shape[-1]
        if lx < ly:
            x = bnp.pad(x, [(0, 0)] * (nd - 1) + [(0, ly - lx)])
        elif ly < lx:
            ya = bnp.pad(ya, [(0, 0)] * (nd - 1) + [(0, lx - ly)])
    length = get_aval(x).shape[-1]

    # the window and the segment length (SciPy's _triage_segments)
    if isinstance(window, (str, tuple)):
        if nperseg is None:
            nperseg = 256
        if nperseg > length:
            _warn(
                f"scipy.signal.{name}: nperseg = {nperseg} is greater than the input length "
                f"{length}, using nperseg = {length}"
            )
            nperseg = length
        win = _host_window(window, nperseg, name)
    else:
        win = _array_window(window, name)
        wlen = get_aval(win).shape[0]
        if length < wlen:
            raise _error(name, f"the window (length {wlen}) is longer than the signal ({length})")
        if nperseg is None:
            nperseg = wlen
        elif nperseg != wlen:
            raise _error(name, f"nperseg = {nperseg} differs from the window's length {wlen}")
    noverlap = nperseg // 2 if noverlap is None else _static(noverlap, "noverlap", name)
    nfft = nperseg if nfft is None else _static(nfft, "nfft", name)
    if nfft < nperseg:
        raise _error(name, f"nfft = {nfft} must be at least nperseg = {nperseg}")
    if noverlap >= nperseg:
        raise _error(name, f"noverlap = {noverlap} must be less than nperseg = {nperseg}")
    step = nperseg - noverlap

    def prepare(s: Any) -> Any:
        s = _extend(s, nperseg // 2, boundary)
        if padded:
            nadd = (-(get_aval(s).shape[-1] - nperseg) % step) % nperseg
            s = bnp.pad(s, [(0, 0)] * (nd - 1) + [(0, nadd)])
        return s

    x = prepare(x)
    ya = None if ya is None else prepare(ya)
    ext_length = get_aval(x).shape[-1]

    sides = "onesided" if return_onesided else "twosided"
    complex_in = dtypes.is_complex(get_aval(x).dtype)
    if return_onesided and complex_in:
        _warn(f"scipy.signal.{name}: the input is complex, switching to return_onesided=False")
        sides = "twosided"

    # the scale (and the doubling of a one-sided PSD's inner frequencies)
    hw = _host(win)
    fs_host = float(fs) if is_concrete(fs) and np.ndim(fs) == 0 else None
    nfreq = nfft if sides == "twosided" else nfft // 2 + 1
    factor = np.ones(nfreq)
    if sides == "onesided" and mode == "psd":
        factor[1 : None if nfft % 2 else -1] = 2.0
    if hw is not None:
        wsum = hw.sum() ** 2 if scaling == "spectrum" else (hw * hw).sum()
        if scaling == "density" and fs_host is not None:
            wsum = wsum * fs_host
        scale: Any = 1.0 / wsum
        if scaling == "density" and fs_host is None:
            scale = bnp.asarray(scale, freq_dtype) / fs
    else:
        wsum = bnp.sum(win) ** 2 if scaling == "spectrum" else bnp.sum(win * win)
        scale = 1.0 / (wsum if scaling == "spectrum" else fs * wsum)
    if mode == "stft":
        scale = np.sqrt(scale) if isinstance(scale, float) else bnp.sqrt(scale)
    if isinstance(scale, float):
        scale = bnp.asarray(scale * factor, freq_dtype)
    else:
        scale = scale * bnp.asarray(factor, freq_dtype)

    detrend_func = _detrend_func(detrend, raw_axis, mode)
    if hw is not None:
        win = bnp.asarray(hw, get_aval(x).dtype)

    def windowed_fft(s: Any) -> Any:
        seg = detrend_func(_frames(s, nperseg, step))
        seg = seg * win
        if sides == "twosided":
            return bnp.fft.fft(seg, n=nfft)
        return bnp.fft.rfft(bnp.real(seg), n=nfft)

    res = windowed_fft(x)
    if ya is not None:
        res = bnp.conj(res) * windowed_fft(ya)
    elif mode == "psd":
        res = bnp.real(res) ** 2 + bnp.imag(res) ** 2
    res = res * scale
    if ya is None and mode == "psd":
        res = bnp.real(res).astype(freq_dtype)
    else:
        res = res.astype(result_dtype)

    d = 1.0 / fs_host if fs_host is not None else 1.0 / fs
    freqfn = bnp.fft.fftfreq if sides == "twosided" else bnp.fft.rfftfreq
    freqs = freqfn(nfft, d, dtype=freq_dtype)
    t = np.arange(nperseg / 2, ext_length - nperseg / 2 + 1, step, dtype=np.float64)
    if boundary is not None:
        t = t - nperseg / 2
    if fs_host is not None:
        times = bnp.asarray(t / fs_host, freq_dtype)
    else:
        times = bnp.asarray(t, freq_dtype) / fs
    return freqs, times, bnp.moveaxis(res, -1, axis)


def _median_bias(n: int) -> float:
    """The median's bias against the mean of ``n`` periodograms (SciPy's ``_median_bias``)."""
    ii = np.arange(2.0, n, 2)
    return float(1 + np.sum(1.0 / (ii + 1) - 1.0 / ii))


def stft(
    x: Any,
    fs: Any = 1.0,
    window: Any = "hann",
    nperseg: int = 256,
    noverlap: int | None = None,
    nfft: int | None = None,
    detrend: Any = False,
    return_onesided: bool = True,
    boundary: str | None = "zeros",
    padded: bool = True,
    axis: int = -1,
) -> tuple[Any, Any, Any]:
    """The short-time Fourier transform (``scipy.signal.stft``, ``jax.scipy.signal.stft``).

    Segments of ``nperseg`` points, ``nperseg - noverlap`` apart, are detrended, windowed and
    Fourier transformed, scaled by ``1 / sum(window)``.

    Args:
        x: the signal (integers and bools become the default float), time along ``axis``.
        fs: the sampling frequency (a scalar; may be traced).
        window: a name or tuple for ``scipy.signal.get_window`` (computed on the host, in
            ``x``'s dtype), or a 1-d array of length ``nperseg``.
        nperseg: the segment length (static; at most the signal's length for a named
            window, else it is cut to it with a warning).
        noverlap: the points shared by neighbouring segments (default ``nperseg // 2``).
        nfft: the FFT length, at least ``nperseg`` (default ``nperseg``).
        detrend: ``False``, ``'constant'``, ``'linear'`` or a function of a segment array.
        return_onesided: the ``rfft`` half of the spectrum for real ``x`` (complex ``x`` is
            two-sided, with a warning).
        boundary: how ``x`` is extended by ``nperseg // 2`` points at both ends: ``'zeros'``,
            ``'even'``, ``'odd'``, ``'constant'`` or ``None``.
        padded: zero-pad the end so that the segments cover the whole signal.
        axis: the time axis.

    Returns:
        ``(f, t, Zxx)``: the frequencies and segment times (real, of ``x``'s precision) and
        the complex STFT, ``x``'s shape with ``axis`` replaced by the frequencies and the
        segments last.

    Raises:
        BluValueError: a bad ``nperseg``, ``noverlap``, ``nfft``, ``boundary`` or window.
        BluShapeError: a 0-d ``x`` or a window that is not 1-d.
    """
    return _spectral(
        x, None, fs, window, nperseg, noverlap, nfft, detrend, return_onesided,
        "spectrum", axis, "stft", boundary, padded, "stft",
    )  # fmt: skip


def csd(
    x: Any,
    y: Any,
    fs: Any = 1.0,
    window: Any = "hann",
    nperseg: int | None = None,
    noverlap: int | None = None,
    nfft: int | None = None,
    detrend: Any = "constant",
    return_onesided: bool = True,
    scaling: str = "density",
    axis: int = -1,
    average: str = "mean",
) -> tuple[Any, Any]:
    """The cross power spectral density by Welch's method (``scipy.signal.csd``,
    ``jax.scipy.signal.csd``).

    The average over segments of ``conj(X) * Y``, ``X`` and ``Y`` the windowed FFTs of ``x``'s
    and ``y``'s segments, scaled by ``1 / (fs sum(window**2))`` (``'density'``) or
    ``1 / sum(window)**2`` (``'spectrum'``), the inner frequencies of a one-sided spectrum
    doubled.

    Args:
        x, y: the signals; ``y=None`` gives ``x``'s (real) power spectral density, as JAX's.
            The shorter one is zero-padded along ``axis``; the other axes broadcast.
        fs, window, noverlap, nfft, detrend, return_onesided, axis: as :func:`stft` (detrend
            default ``'constant'``).
        nperseg: the segment length (default the window's length, 256 for a named window).
        scaling: ``'density'`` (per unit frequency) or ``'spectrum'``.
        average: ``'mean'`` or ``'median'`` (of the real and imaginary parts, divided by the
            median's bias).

    Returns:
        ``(f, Pxy)``: the frequencies and the spectral density, complex when ``y`` is given.

    Raises:
        BluValueError: a bad ``nperseg``, ``noverlap``, ``nfft``, ``scaling``, ``average`` or
            window.
        BluShapeError: ``x`` and ``y`` of different ranks or outer shapes that do not broadcast.
    """
    if average not in ("mean", "median"):
        raise _error("csd", f"average must be 'mean' or 'median', got {average!r}")
    freqs, _, pxy = _spectral(
        x, y, fs, window, nperseg, noverlap, nfft, detrend, return_onesided, scaling, axis,
        "psd", None, False, "csd",
    )  # fmt: skip
    shape = get_aval(pxy).shape
    if len(shape) >= 2 and get_aval(pxy).size > 0:
        if shape[-1] > 1:
            if average == "median":
                bias = _median_bias(shape[-1])
                if dtypes.is_complex(get_aval(pxy).dtype):
                    re = bnp.median(bnp.real(pxy), axis=-1)
                    im = bnp.median(bnp.imag(pxy), axis=-1)
                    pxy = lax.complex(re, im)
                else:
                    pxy = bnp.median(pxy, axis=-1)
                pxy = pxy / bias
            else:
                pxy = bnp.mean(pxy, axis=-1)
        else:
            pxy = bnp.reshape(pxy, shape[:-1])
    return freqs, pxy


def welch(
    x: Any,
    fs: Any = 1.0,
    window: Any = "hann",
    nperseg: int | None = None,
    noverlap: int | None = None,
    nfft: int | None = None,
    detrend: Any = "constant",
    return_onesided: bool = True,
    scaling: str = "density",
    axis: int = -1,
    average: str = "mean",
) -> tuple[Any, Any]:
    """The power spectral density by Welch's method (``scipy.signal.welch``,
    ``jax.scipy.signal.welch``): :func:`csd` of ``x`` with itself, real.

    Args:
        x: the signal.
        fs, window, nperseg, noverlap, nfft, detrend, return_onesided, scaling, axis, average:
            as :func:`csd`.

    Returns:
        ``(f, Pxx)``: the frequencies and the (real) power spectral density.

    Raises:
        BluValueError, BluShapeError: as :func:`csd`.
    """
    freqs, pxx = csd(
        x, None, fs, window, nperseg, noverlap, nfft, detrend, return_onesided, scaling, axis,
        average,
    )  # fmt: skip
    return freqs, bnp.real(pxx)


def istft(
    Zxx: Any,
    fs: Any = 1.0,
    window: Any = "hann",
    nperseg: int | None = None,
    noverlap: int | None = None,
    nfft: int | None = None,
    input_onesided: bool = True,
    boundary: bool = True,
    time_axis: int = -1,
    freq_axis: int = -2,
) -> tuple[Any, Any]:
    """The inverse short-time Fourier transform (``scipy.signal.istft``,
    ``jax.scipy.signal.istft``): the inverse FFT of each segment, windowed and overlap-added,
    divided by the overlap-added squared window where that exceeds ``1e-10``.

    Args:
        Zxx: the STFT, at least 2-d (real inputs are made complex).
        fs: the sampling frequency (a scalar; may be traced).
        window: as :func:`stft`'s.
        nperseg: the segment length (default from the frequency axis: ``2 (m - 1)`` one-sided,
            ``m`` two-sided).
        noverlap: the points shared by neighbouring segments (default ``nperseg // 2``; 0 is
            honoured, SciPy's).
        nfft: the FFT length (default from the frequency axis, ``nperseg`` for an odd one).
        input_onesided: ``Zxx`` holds the ``rfft`` half (the signal comes out real), else the
            whole spectrum (the signal comes out complex).
        boundary: drop the ``nperseg // 2`` points that :func:`stft`'s boundary added at each
            end.
        time_axis, freq_axis: the segment and frequency axes of ``Zxx`` (different).

    Returns:
        ``(t, x)``: the sample times ``arange(x.shape[0]) / fs`` (SciPy's) and the signal,
        ``Zxx``'s other axes with the time axis where ``time_axis`` was.

    Raises:
        BluShapeError: ``Zxx`` of fewer than 2 axes, a window that is not 1-d.
        BluValueError: equal axes, a bad ``nperseg``, ``noverlap``, ``nfft`` or window.
    """
    z = asarray_operand(Zxx)
    aval = get_aval(z)
    if aval.ndim < 2:
        raise BluShapeError(
            with_user_line(f"scipy.signal.istft: Zxx must be at least 2-d, got {aval.str_short()}")
        )
    freq_axis = canonicalize_axis(freq_axis, aval.ndim, "freq_axis")
    time_axis = canonicalize_axis(time_axis, aval.ndim, "time_axis")
    if freq_axis == time_axis:
        raise _error("istft", f"time_axis and freq_axis must differ, both are {time_axis}")
    if dtypes.is_complex(aval.dtype):
        cdtype = aval.dtype
    elif dtypes.is_float(aval.dtype):
        cdtype = dtypes.complex_dtype(aval.dtype)
    else:
        cdtype = dtypes.default_complex
    z = z.astype(cdtype)
    nfreq = aval.shape[freq_axis]
    n_default = 2 * (nfreq - 1) if input_onesided else nfreq
    nperseg = n_default if nperseg is None else _static(nperseg, "nperseg", "istft")
    if nperseg < 1:
        raise _error("istft", f"nperseg must be a positive integer, got {nperseg}")
    if nfft is None:
        nfft = n_default + (1 if input_onesided and nperseg == n_default + 1 else 0)
    else:
        nfft = _static(nfft, "nfft", "istft")
    if nfft < nperseg:
        raise _error("istft", f"nfft = {nfft} must be at least nperseg = {nperseg}")
    noverlap = nperseg // 2 if noverlap is None else _static(noverlap, "noverlap", "istft")
    if noverlap >= nperseg:
        raise _error("istft", f"noverlap = {noverlap} must be less than nperseg = {nperseg}")
    step = nperseg - noverlap
    nd = aval.ndim
    if time_axis != nd - 1 or freq_axis != nd - 2:
        outer = tuple(i for i in range(nd) if i not in (time_axis, freq_axis))
        z = bnp.transpose(z, outer + (freq_axis, time_axis))
    nseg = get_aval(z).shape[-1]
    if input_onesided:
        xsubs = bnp.fft.irfft(z, n=nfft, axis=-2)
    else:
        xsubs = bnp.fft.ifft(z, n=nfft, axis=-2)
    xsubs = xsubs[..., :nperseg, :]
    rdtype = dtypes.real_dtype(cdtype)
    if isinstance(window, (str, tuple)):
        win: Any = _host_window(window, nperseg, "istft")
    else:
        win = _array_window(window, "istft")
        if get_aval(win).shape[0] != nperseg:
            raise _error(
                "istft", f"the window's length {get_aval(win).shape[0]} is not nperseg = {nperseg}"
            )
    hw = _host(win)
    if hw is not None:
        xsubs = xsubs * bnp.asarray(hw * hw.sum(), rdtype)[:, None]
        norm = _overlap_add_host(np.tile(hw * hw, (nseg, 1)), step)
    else:
        xsubs = xsubs * (win * bnp.sum(win))[:, None]
        norm = _overlap_add(bnp.broadcast_to(win * win, (nseg, nperseg)), step)
    x = _overlap_add(bnp.swapaxes(xsubs, -2, -1), step)
    if boundary:
        h, n = nperseg // 2, get_aval(x).shape[-1]
        x, norm = x[..., h : n - h], norm[..., h : n - h]
    if hw is not None:
        x = x / bnp.asarray(np.where(norm > 1e-10, norm, 1.0), rdtype)
    else:
        x = x / bnp.where(norm > 1e-10, norm, 1.0)
    if get_aval(x).ndim > 1 and time_axis != nd - 1:
        x = bnp.moveaxis(x, -1, time_axis - 1 if freq_axis < time_axis else time_axis)
    t = np.arange(get_aval(x).shape[0], dtype=np.float64)
    if is_concrete(fs) and np.ndim(fs) == 0:
        times = bnp.asarray(t / float(fs), rdtype)
    else:
        times = bnp.asarray(t, rdtype) / fs
    return times, x
