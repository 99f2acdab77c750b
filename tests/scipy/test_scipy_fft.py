"""blu.scipy.fft (dct, idct, dctn, idctn) against SciPy in float64, finite differences, jit
and vmap."""

import numpy as np
import pytest
import scipy.fft as sfft
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.scipy.fft as bfft
from blu.core.errors import BluValueError
from tests.helpers import check_grads, loop_vmap, shapes

_EPS = np.finfo(np.float64).eps


def _close(got, want, scale=1.0):
    got = np.asarray(got)
    assert got.shape == np.shape(want) and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=64 * _EPS * scale)


# ---- fft -----------------------------------------------------------------------------------------


@settings(deadline=None, max_examples=25)
@given(shapes(min_dims=1, max_dims=3, min_side=1, max_side=6), st.data())
def test_dct_idct_against_scipy(shape, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rng.standard_normal(shape)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = data.draw(st.one_of(st.none(), st.integers(1, 8)))
    norm = data.draw(st.sampled_from([None, "backward", "ortho"]))
    scale = max(1.0, np.abs(x).sum())
    _close(bfft.dct(x, n=n, axis=axis, norm=norm), sfft.dct(x, n=n, axis=axis, norm=norm), scale)
    _close(bfft.idct(x, n=n, axis=axis, norm=norm), sfft.idct(x, n=n, axis=axis, norm=norm), scale)
    # the inverse undoes the transform
    _close(bfft.idct(bfft.dct(x, axis=axis, norm=norm), axis=axis, norm=norm), x, scale)


@settings(deadline=None, max_examples=20)
@given(shapes(min_dims=1, max_dims=3, min_side=1, max_side=5), st.data())
def test_dctn_idctn_against_scipy(shape, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rng.standard_normal(shape)
    axes = data.draw(st.one_of(st.none(), st.permutations(range(len(shape)))))
    s = None
    if axes is not None and data.draw(st.booleans()):
        s = [data.draw(st.integers(1, 6)) for _ in axes]
    norm = data.draw(st.sampled_from([None, "ortho"]))
    scale = max(1.0, np.abs(x).sum()) * 2 ** len(shape)
    _close(bfft.dctn(x, s=s, axes=axes, norm=norm), sfft.dctn(x, s=s, axes=axes, norm=norm), scale)
    want = sfft.idctn(x, s=s, axes=axes, norm=norm)
    _close(bfft.idctn(x, s=s, axes=axes, norm=norm), want, scale)


def test_dct_dtypes_complex_and_errors():
    assert bfft.dct(np.arange(4)).dtype == np.float32  # integers: the default float
    assert bfft.dct(np.ones(4, np.float32)).dtype == np.float32
    z = np.array([1.0 + 2j, -0.5 + 0.1j, 3.0 - 1j])
    np.testing.assert_allclose(np.asarray(bfft.dct(z)), sfft.dct(z), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(bfft.idctn(z)), sfft.idctn(z), rtol=1e-12, atol=1e-14)
    with pytest.raises(BluValueError, match="type 2"):
        bfft.dct(np.ones(3), type=1)
    with pytest.raises(BluValueError, match="type 2"):
        bfft.idctn(np.ones((2, 2)), type=3)
    with pytest.raises(BluValueError, match="norm"):
        bfft.idct(np.ones(3), norm="forward")
    with pytest.raises(BluValueError, match="differ in length"):
        bfft.dctn(np.ones((2, 2)), s=(2,), axes=(0, 1))


def test_dct_grads_jit_vmap():
    x = np.random.default_rng(0).standard_normal((3, 5))
    for f in (bfft.dct, bfft.idct):
        for norm in (None, "ortho"):
            check_grads(lambda v, f=f, norm=norm: f(v, n=4, axis=1, norm=norm), [x])
            want = np.asarray(f(x, axis=0, norm=norm))
            np.testing.assert_allclose(
                np.asarray(blu.jit(lambda v, f=f, norm=norm: f(v, axis=0, norm=norm))(x)),
                want, rtol=1e-12, atol=1e-13)  # fmt: skip
            g = blu.vmap(lambda v, f=f, norm=norm: f(v, norm=norm), in_axes=1)
            ref = loop_vmap(lambda v, f=f, norm=norm: f(v, norm=norm), [x], [1])
            np.testing.assert_allclose(np.asarray(g(x)), ref, rtol=1e-12, atol=1e-13)
    check_grads(lambda v: bfft.dctn(v, norm="ortho"), [x])
