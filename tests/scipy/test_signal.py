"""blu.scipy.signal against scipy.signal in float64 (real and complex, 1-3 dimensions with
size-1 axes, every mode, direct and FFT methods, in2 larger than in1 too); JAX's dtypes (integers
kept by the direct method, made floats by the FFT); derivatives against finite differences; jit
and vmap against eager; the errors on bad shapes and arguments."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal as ss
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from blu.scipy import signal
from tests.helpers import check_grads, check_jit, check_vmap

MODES = ["full", "same", "valid"]


def _close(got, want, tol=1e-10):
    got = np.asarray(got)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@st.composite
def _pair(draw, ndim=None):
    """Two shapes of one rank, one at least as large as the other everywhere (either order)."""
    nd = draw(st.integers(1, 3)) if ndim is None else ndim
    small = [draw(st.integers(1, 4)) for _ in range(nd)]
    big = [s + draw(st.integers(0, 3)) for s in small]
    return (big, small) if draw(st.booleans()) else (small, big)


def _arrays(shapes, complex_, seed):
    rng = np.random.default_rng(seed)
    out = [rng.standard_normal(s) for s in shapes]
    if complex_:
        out = [a + 1j * rng.standard_normal(a.shape) for a in out]
    return out


@settings(deadline=None, max_examples=40)
@given(_pair(), st.sampled_from(MODES), st.sampled_from(["direct", "fft", "auto"]), st.booleans())
def test_convolve_and_correlate_match_scipy(shapes, mode, method, complex_):
    a, b = _arrays(shapes, complex_, sum(map(sum, shapes)))
    m = "fft" if method == "fft" else "direct"
    _close(signal.convolve(a, b, mode, method), ss.convolve(a, b, mode, m))
    _close(signal.correlate(a, b, mode, method), ss.correlate(a, b, mode, m))


@settings(deadline=None, max_examples=40)
@given(_pair(ndim=2), st.sampled_from(MODES), st.booleans())
def test_convolve2d_and_correlate2d_match_scipy(shapes, mode, complex_):
    a, b = _arrays(shapes, complex_, sum(map(sum, shapes)) + 7)
    _close(signal.convolve2d(a, b, mode), ss.convolve2d(a, b, mode))
    _close(signal.correlate2d(a, b, mode), ss.correlate2d(a, b, mode))


def test_correlate2d_same_shapes_and_swapped_valid():
    a, b = _arrays([(3, 4), (3, 4)], True, 1)
    for mode in MODES:
        _close(signal.correlate2d(a, b, mode), ss.correlate2d(a, b, mode))
    a, b = _arrays([(2, 3), (4, 5)], True, 2)
    _close(signal.correlate2d(a, b, "valid"), ss.correlate2d(a, b, "valid"))


@settings(deadline=None, max_examples=30)
@given(st.data(), st.sampled_from(MODES), st.booleans())
def test_fftconvolve_over_axes_matches_scipy(data, mode, complex_):
    nd = data.draw(st.integers(2, 3))
    axes = data.draw(
        st.lists(st.integers(-nd, nd - 1), min_size=1, max_size=2, unique_by=lambda a: a % nd)
    )
    axes_c = {a % nd for a in axes}
    s1, s2 = [], []
    for d in range(nd):
        if d in axes_c:
            small, extra = data.draw(st.integers(1, 4)), data.draw(st.integers(0, 3))
            s1.append(small + extra)
            s2.append(small)
        else:  # broadcast: equal sizes or 1
            n = data.draw(st.integers(1, 3))
            s1.append(n)
            s2.append(data.draw(st.sampled_from([n, 1])))
    a, b = _arrays([s1, s2], complex_, nd + len(axes))
    _close(signal.fftconvolve(a, b, mode, axes), ss.fftconvolve(a, b, mode, axes))
    _close(signal.fftconvolve(b, a, mode, axes), ss.fftconvolve(b, a, mode, axes))


@settings(deadline=None, max_examples=30)
@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=3),
    st.data(),
    st.sampled_from(["linear", "constant"]),
)
def test_detrend_matches_scipy(shape, data, kind):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[axis]
    bp = data.draw(st.integers(0, n) | st.lists(st.integers(0, n), min_size=1, max_size=3))
    x = np.random.default_rng(sum(shape) + n).standard_normal(shape)
    _close(signal.detrend(x, axis, kind, bp), ss.detrend(x, axis, kind, bp), 1e-12)


# ---- dtypes ------------------------------------------------------------------------------------


def test_dtypes():
    a, b = np.arange(7, dtype=np.int32), np.array([1, -2, 3], np.int32)
    got = signal.convolve(a, b)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), np.convolve(a, b))
    got = signal.convolve(a, b, method="fft")
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), np.convolve(a, b), atol=1e-4)
    f32 = np.linspace(0, 1, 6, dtype=np.float32)
    assert signal.correlate(f32, f32[:3]).dtype == np.float32
    assert signal.fftconvolve(f32, f32).dtype == np.float32
    assert signal.detrend(np.arange(5)).dtype == np.float32
    np.testing.assert_allclose(np.asarray(signal.detrend(np.arange(5) ** 2)),
                               ss.detrend(np.arange(5.0) ** 2), atol=1e-5)  # fmt: skip


# ---- derivatives, jit, vmap --------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_grads(mode):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((5, 4)), rng.standard_normal((2, 3))
    check_grads(lambda a, b: signal.convolve(a, b, mode), [a, b])
    check_grads(lambda a, b: signal.correlate2d(b, a, mode), [a, b])
    check_grads(lambda a, b: signal.fftconvolve(a, b, mode), [a, b])
    check_grads(lambda a: signal.detrend(a, 0, bp=[2]), [a])


def test_jit_and_vmap():
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((3, 8)), rng.standard_normal((3, 3))
    for f in (
        lambda a, b: signal.convolve(a, b, "same"),
        lambda a, b: signal.correlate(a, b, "valid", "fft"),
        lambda a, b: signal.fftconvolve(a, b, "full"),
    ):
        check_jit(f, [a[0], b[0]])
        check_vmap(f, [a, b], [0, 0], atol=1e-12, rtol=1e-12)
    check_jit(lambda a: signal.detrend(a, bp=3), [a])
    check_vmap(lambda a: signal.detrend(a, bp=[3]), [a], [0], atol=1e-12, rtol=1e-12)


# ---- errors ------------------------------------------------------------------------------------


def test_errors():
    a = np.ones((4, 5))
    with pytest.raises(BluShapeError, match="same number of dimensions"):
        signal.convolve(a, np.ones(3))
    with pytest.raises(BluShapeError, match=r"at least as large.*\(4, 5\) and \(5, 4\)"):
        signal.convolve(a, np.ones((5, 4)))
    with pytest.raises(BluValueError, match="mode"):
        signal.correlate(a, a, "middle")
    with pytest.raises(BluValueError, match="method"):
        signal.convolve(a, a, method="winograd")
    with pytest.raises(BluValueError, match="zero-size"):
        signal.fftconvolve(a, np.ones((0, 2)))
    with pytest.raises(BluTypeError, match="bool"):
        signal.convolve(a > 0, a > 0)
    with pytest.raises(NotImplementedError, match="boundary"):
        signal.convolve2d(a, a, boundary="wrap")
    with pytest.raises(NotImplementedError, match="fillvalue"):
        signal.correlate2d(a, a, fillvalue=1.0)
    with pytest.raises(BluShapeError, match="2-d"):
        signal.convolve2d(np.ones(3), np.ones(3))
    with pytest.raises(BluShapeError, match="do not broadcast"):
        signal.fftconvolve(a, np.ones((3, 2)), axes=1)
    with pytest.raises(BluValueError, match="axes must be non-empty and unique"):
        signal.fftconvolve(a, a, axes=[])
    with pytest.raises(BluValueError, match="axes must be non-empty and unique"):
        signal.fftconvolve(a, a, axes=[1, -1])
    with pytest.raises(BluValueError, match="type"):
        signal.detrend(a, type="quadratic")
    with pytest.raises(BluValueError, match=r"breakpoints.*\[0, 5\]"):
        signal.detrend(a, bp=[7])
    with pytest.raises(NotImplementedError):
        signal.detrend(a, overwrite_data=True)
    assert blu.scipy.signal is signal
