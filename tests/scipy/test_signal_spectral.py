"""blu.scipy.signal's spectral analysis (stft, istft, csd, welch) against scipy.signal in float64
over drawn lengths, segment lengths, overlaps (0 and nperseg - 1 too), FFT lengths (odd ones),
windows (named, tuples, arrays), boundaries, detrending, scalings, averages and axes; float32
within tolerances from the dtype; jit and vmap against eager; derivatives against finite
differences; the errors on bad arguments."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.signal as ss
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from blu.scipy import signal
from tests.helpers import check_grads, check_jit, check_vmap, tolerance

WINDOWS = ["hann", "hamming", "boxcar", ("tukey", 0.5), ("kaiser", 4.0), "array"]


def _close(got, want, tol=1e-10):
    got = np.asarray(got)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    scale = max(1.0, float(np.max(np.abs(want)))) if np.size(want) else 1.0
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def _quiet(f, *args, **kw):
    """``f(*args, **kw)`` with SciPy's and blu's warnings (nperseg cut to the input, complex
    input made two-sided, the NOLA check) silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return f(*args, **kw)


@st.composite
def _segments(draw, length, stft_boundary=False):
    """``(window, nperseg, noverlap, nfft)`` for a signal of ``length`` points."""
    window = draw(st.sampled_from(WINDOWS))
    nperseg = draw(st.integers(1, length + (3 if window != "array" else 0)))
    if stft_boundary:  # even/odd extensions need nperseg // 2 <= length - 1
        nperseg = min(nperseg, 2 * length - 1)
    n = min(nperseg, length)
    noverlap = draw(st.none() | st.integers(0, n - 1) | st.just(n - 1))
    nfft = draw(st.none() | st.integers(n, n + 4))
    if window == "array":
        window = np.random.default_rng(nperseg).uniform(0.2, 1.0, nperseg)
    return window, nperseg, noverlap, nfft


def _signal(shape, complex_, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    return x + 1j * rng.standard_normal(shape) if complex_ else x


# ---- against scipy.signal, float64 -------------------------------------------------------------


@settings(deadline=None, max_examples=60)
@given(
    st.integers(1, 40),
    st.data(),
    st.sampled_from([None, "zeros", "even", "odd", "constant"]),
    st.booleans(),
    st.sampled_from([False, "constant", "linear"]),
    st.booleans(),
    st.booleans(),
)
def test_stft_and_istft_match_scipy(length, data, boundary, padded, detrend, onesided, complex_):
    window, nperseg, noverlap, nfft = data.draw(_segments(length, boundary in ("even", "odd")))
    batch = data.draw(st.sampled_from([(), (2,), (1, 3)]))
    axis = data.draw(st.integers(0, len(batch)))
    shape = batch[:axis] + (length,) + batch[axis:]
    x = _signal(shape, complex_, length + nperseg)
    kw = dict(window=window, nperseg=nperseg, noverlap=noverlap, nfft=nfft, detrend=detrend,
              return_onesided=onesided, boundary=boundary, padded=padded, axis=axis)  # fmt: skip
    got = _quiet(signal.stft, x, 2.5, **kw)
    want = _quiet(ss.stft, x, 2.5, **kw)
    for g, w in zip(got, want):
        _close(g, w)
    zxx = want[2]
    n = min(nperseg, length)
    if n < 2 and boundary is not None:
        return  # SciPy's istft drops x[0:-0] (everything) there; blu's keeps the signal
    ikw = dict(window=window, nperseg=n,
               noverlap=noverlap, nfft=nfft, input_onesided=onesided and not complex_,
               boundary=boundary is not None, time_axis=-1, freq_axis=axis)  # fmt: skip
    for g, w in zip(_quiet(signal.istft, zxx, 2.5, **ikw), _quiet(ss.istft, zxx, 2.5, **ikw)):
        _close(g, w)


@settings(deadline=None, max_examples=60)
@given(
    st.integers(1, 40),
    st.data(),
    st.sampled_from([False, "constant", "linear"]),
    st.sampled_from(["density", "spectrum"]),
    st.sampled_from(["mean", "median"]),
    st.booleans(),
    st.booleans(),
)
def test_csd_and_welch_match_scipy(length, data, detrend, scaling, average, onesided, complex_):
    window, nperseg, noverlap, nfft = data.draw(_segments(length))
    if isinstance(window, str) and data.draw(st.booleans()):
        nperseg = nfft = None  # the default: 256, cut to the signal's length
    batch = data.draw(st.sampled_from([(), (2,), (2, 3)]))
    axis = data.draw(st.integers(0, len(batch)))
    shape = batch[:axis] + (length,) + batch[axis:]
    x = _signal(shape, complex_, length)
    if data.draw(st.booleans()):  # y longer, zero-padded x (same outer shape: SciPy's rule)
        yshape = batch[:axis] + (length + data.draw(st.integers(1, 5)),) + batch[axis:]
    else:  # y broadcast against x outside the axis
        yshape = tuple(1 if (i != axis and data.draw(st.booleans())) else s
                       for i, s in enumerate(shape))  # fmt: skip
    y = _signal(yshape, False, length + 1)
    kw = dict(window=window, nperseg=nperseg, noverlap=noverlap, nfft=nfft, detrend=detrend,
              return_onesided=onesided, scaling=scaling, axis=axis, average=average)  # fmt: skip
    for got, want in [
        (_quiet(signal.csd, x, y, 3.0, **kw), _quiet(ss.csd, x, y, 3.0, **kw)),
        (_quiet(signal.welch, x, 3.0, **kw), _quiet(ss.welch, x, 3.0, **kw)),
        (_quiet(signal.welch, y, 3.0, **kw), _quiet(ss.welch, y, 3.0, **kw)),
    ]:
        for g, w in zip(got, want):
            _close(g, w)
    # csd(x, None) is the (real) PSD, as JAX's
    _close(_quiet(signal.csd, x, None, 3.0, **kw)[1], _quiet(ss.welch, x, 3.0, **kw)[1])


def test_edge_cases_match_scipy():
    x = np.random.default_rng(0).standard_normal(16)
    for kw in [
        dict(nperseg=16),  # one segment: nperseg == len
        dict(nperseg=16, noverlap=0, nfft=17),
        dict(nperseg=5, noverlap=0, nfft=7),
        dict(nperseg=6, noverlap=5),  # a step of 1
        dict(nperseg=4, noverlap=-2),  # gaps between segments
        dict(window=np.hanning(9), nperseg=9),
    ]:
        for g, w in zip(signal.welch(x, **kw), ss.welch(x, **kw)):
            _close(g, w)
        for g, w in zip(signal.stft(x, **kw), ss.stft(x, **kw)):
            _close(g, w)
    for g, w in zip(_quiet(signal.welch, x), _quiet(ss.welch, x)):  # nperseg 256 cut to 16
        _close(g, w)
    # a detrending function sees the segments' points last in csd and welch, moved to the
    # data's axis in stft (SciPy's)
    x2 = np.random.default_rng(1).standard_normal((12, 13))
    for axis in (0, -2, 1, -1):
        kw = dict(nperseg=6, axis=axis, detrend=lambda d: d - d[..., :1])
        for g, w in zip(signal.welch(x2, **kw), ss.welch(x2, **kw)):
            _close(g, w)
        for g, w in zip(signal.stft(x2, **kw), ss.stft(x2, **kw)):
            _close(g, w)
    # an empty signal gives empty arrays (SciPy's and JAX's)
    for g in signal.stft(np.zeros((2, 0))):
        assert g.shape == (2, 0)
    f, p = signal.csd(np.zeros((2, 0)), np.zeros((2, 5)))
    assert f.shape == p.shape == (2, 0)


def test_warnings_name_the_callers_line():
    for f in (signal.stft, signal.welch, lambda x: signal.csd(x, x)):
        with pytest.warns(UserWarning, match="nperseg = 256 is greater") as record:
            f(np.ones(10))
        assert record[0].filename == __file__


def test_round_trip_and_nperseg_one():
    x = np.random.default_rng(1).standard_normal((3, 21))
    for kw in [dict(nperseg=8), dict(nperseg=7, noverlap=3, nfft=9), dict(nperseg=1)]:
        _, _, z = signal.stft(x, **kw)
        _, back = signal.istft(z, **kw)
        np.testing.assert_allclose(np.asarray(back)[:, :21], x, atol=1e-12)


# ---- dtypes ------------------------------------------------------------------------------------


@settings(deadline=None, max_examples=20)
@given(st.integers(8, 60), st.integers(2, 8), st.sampled_from(["mean", "median"]))
def test_float32_within_the_dtypes_tolerance(length, nperseg, average):
    x64 = np.random.default_rng(length).standard_normal((2, length))
    x = x64.astype(np.float32)
    tol = tolerance(np.float32, n_ops=nperseg + 8)
    f, p = signal.welch(x, nperseg=nperseg, average=average)
    assert f.dtype == p.dtype == np.float32
    _close(p, ss.welch(x64, nperseg=nperseg, average=average)[1], tol)
    f, p = signal.csd(x, x[::-1], nperseg=nperseg)
    assert f.dtype == np.float32 and p.dtype == np.complex64
    _close(p, ss.csd(x64, x64[::-1], nperseg=nperseg)[1], tol)
    f, t, z = signal.stft(x, nperseg=nperseg)
    assert f.dtype == t.dtype == np.float32 and z.dtype == np.complex64
    _close(z, ss.stft(x64, nperseg=nperseg)[2], tol)
    t, back = signal.istft(z, nperseg=nperseg)
    assert t.dtype == back.dtype == np.float32
    _close(np.asarray(back)[:, :length], x64, tol)


def test_integer_and_complex_dtypes():
    f, p = signal.welch(np.arange(20), nperseg=8)
    assert f.dtype == p.dtype == np.float32
    _close(p, ss.welch(np.arange(20.0), nperseg=8)[1], tolerance(np.float32, 16))
    with pytest.warns(UserWarning, match="complex") as record:
        f, t, z = signal.stft(np.ones(8, np.complex64), nperseg=4)
    assert record[0].filename == __file__
    assert z.shape == (4, 5) and z.dtype == np.complex64
    t, x = signal.istft(np.ones((5, 4), np.float32))
    assert x.dtype == np.float32
    t, x = signal.istft(np.ones((8, 4), np.complex128), input_onesided=False)
    assert x.dtype == np.complex128


# ---- jit, vmap, derivatives --------------------------------------------------------------------


def _ri(z):
    """A complex result as its real and imaginary parts (for check_jit and check_vmap)."""
    return bnp.real(z), bnp.imag(z)


def test_jit_and_vmap():
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((3, 30)), rng.standard_normal((3, 30))
    z = ss.stft(x, nperseg=8)[2]
    fns = [
        (lambda x: _ri(signal.stft(x, nperseg=8, noverlap=5, nfft=9)[2]), [x]),
        (lambda x: signal.welch(x, nperseg=7, average="median", detrend="linear")[1], [x]),
        (lambda x, y: _ri(signal.csd(x, y, nperseg=8, scaling="spectrum")[1]), [x, y]),
        (lambda z: signal.istft(z, nperseg=8)[1], [z]),
    ]
    for f, args in fns:
        check_jit(f, args)
        check_vmap(f, args, [0] * len(args), atol=1e-12, rtol=1e-12)
    # a traced sampling frequency and a traced window
    got = blu.jit(lambda fs, w: signal.welch(x, fs, w))(2.0, np.hanning(8))
    for g, w in zip(got, ss.welch(x, 2.0, np.hanning(8))):
        _close(g, w)
    got = blu.jit(lambda fs, w: signal.istft(z, fs, w))(2.0, ss.get_window("hann", 8))
    for g, w in zip(got, ss.istft(z, 2.0, nperseg=8)):
        _close(g, w)


def test_grads():
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((2, 20)), rng.standard_normal((2, 20))
    weights = rng.standard_normal(5)
    check_grads(lambda x: signal.welch(x, nperseg=8)[1] @ weights, [x])
    check_grads(lambda x: signal.welch(x, nperseg=6, average="median")[1], [x])
    check_grads(lambda x, y: bnp.real(signal.csd(x, y, nperseg=8)[1] * (1 + 2j)), [x, y])
    check_grads(lambda x: bnp.abs(signal.stft(x, nperseg=8, boundary="odd")[2]) ** 2, [x])
    z = ss.stft(x, nperseg=8)[2]
    check_grads(lambda re, im: signal.istft(re + 1j * im, nperseg=8)[1], [z.real, z.imag])
    check_grads(lambda w: signal.welch(x, window=w)[1], [np.hanning(8) + 0.1])


# ---- errors ------------------------------------------------------------------------------------


def test_errors():
    x = np.ones(20)
    with pytest.raises(BluValueError, match="nperseg must be a positive"):
        signal.stft(x, nperseg=0)
    with pytest.raises(BluTypeError, match="nperseg"):
        signal.welch(x, nperseg=2.5)
    with pytest.raises(BluValueError, match="noverlap = 8 must be less than nperseg = 8"):
        signal.welch(x, nperseg=8, noverlap=8)
    with pytest.raises(BluValueError, match="nfft = 7 must be at least nperseg = 8"):
        signal.csd(x, x, nperseg=8, nfft=7)
    with pytest.raises(BluValueError, match="boundary"):
        signal.stft(x, boundary="wrap")
    with pytest.raises(BluValueError, match="scaling"):
        signal.welch(x, scaling="power")
    with pytest.raises(BluValueError, match="average"):
        signal.welch(x, average="max")
    with pytest.raises(BluShapeError, match="1-d"):
        signal.welch(x, window=np.ones((2, 4)))
    with pytest.raises(BluValueError, match="differs from the window's length 4"):
        signal.welch(x, window=np.ones(4), nperseg=5)
    with pytest.raises(BluValueError, match="longer than the signal"):
        signal.welch(np.ones(3), window=np.ones(4))
    with pytest.raises(BluValueError, match="window 'nope'"):
        signal.welch(x, window="nope", nperseg=8)
    with pytest.raises(BluShapeError, match="same number of dimensions"):
        signal.csd(x, np.ones((2, 20)))
    with pytest.raises(BluShapeError, match="do not broadcast"):
        signal.csd(np.ones((2, 20)), np.ones((3, 20)))
    with pytest.raises(BluShapeError, match="0-d"):
        signal.welch(1.0)
    with pytest.raises(BluShapeError, match="at least 2-d"):
        signal.istft(np.ones(5))
    with pytest.raises(BluValueError, match="must differ"):
        signal.istft(np.ones((5, 4)), time_axis=0, freq_axis=-2)
    with pytest.raises(BluValueError, match="noverlap"):
        signal.istft(np.ones((5, 4)), noverlap=8)
    with pytest.raises(BluValueError, match="window's length 3"):
        signal.istft(np.ones((5, 4)), window=np.ones(3))
