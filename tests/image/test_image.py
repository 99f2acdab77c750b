"""blu.image (jax.image) against a float64 numpy resampler written from the same formula (output
pixel j samples the input at (j + 0.5 - t) / s - 0.5, kernel weights normalised per sample,
widened by 1/s when downsampling with antialias), loop by loop with scalar kernels; exact cases
(identity, nearest upsampling = repeat, constants and linear ramps kept); dtypes; derivatives by
finite differences; jit and vmap against eager; errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu import image
from blu.core.errors import BluShapeError, BluValueError
from tests.helpers import check_grads, check_jit, check_vmap

METHODS = ["linear", "cubic", "lanczos3", "lanczos5"]


def _kernel(method, x):
    x = abs(x)
    if method == "linear":
        return max(0.0, 1.0 - x)
    if method == "cubic":  # Keys (1981), a = -0.5
        a = -0.5
        if x < 1:
            return (a + 2) * x**3 - (a + 3) * x**2 + 1
        if x < 2:
            return a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a
        return 0.0
    r = {"lanczos3": 3.0, "lanczos5": 5.0}[method]
    if x == 0:
        return 1.0
    if x >= r:
        return 0.0
    return r * math.sin(math.pi * x) * math.sin(math.pi * x / r) / (math.pi * x) ** 2


def _weights(m, n, s, t, method, antialias):
    """(m, n): column j holds the normalised weights of output sample j."""
    w = np.zeros((m, n))
    ks = max(1.0 / s, 1.0) if antialias else 1.0
    for j in range(n):
        c = (j + 0.5 - t) / s - 0.5
        if not -0.5 <= c <= m - 0.5:
            continue
        col = np.array([_kernel(method, (c - i) / ks) for i in range(m)])
        if abs(col.sum()) > 1000 * np.finfo(np.float32).eps:
            w[:, j] = col / col.sum()
    return w


def _ref(x, shape, dims, scales, translations, method, antialias=True):
    x = np.asarray(x, np.float64)
    for d, s, t in zip(dims, scales, translations):
        w = _weights(x.shape[d], shape[d], s, t, method, antialias)
        x = np.moveaxis(np.tensordot(x, w, axes=([d], [0])), -1, d)
    return x


def _ref_resize(x, shape, method, antialias=True):
    dims = [d for d in range(x.ndim) if x.shape[d] != shape[d]]
    scales = [shape[d] / x.shape[d] if shape[d] else 1.0 for d in dims]
    return _ref(x, shape, dims, scales, [0.0] * len(dims), method, antialias)


# ---- resize against the float64 reference ------------------------------------------------------


@settings(deadline=None, max_examples=40)
@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=3),
    st.data(),
    st.sampled_from(METHODS),
    st.booleans(),
)
def test_resize_matches_the_reference(in_shape, data, method, antialias):
    out_shape = tuple(data.draw(st.integers(1, 9)) for _ in in_shape)
    rng = np.random.default_rng(sum(in_shape) * 31 + sum(out_shape))
    x = rng.standard_normal(in_shape)
    got = image.resize(x, out_shape, method, antialias=antialias)
    assert got.dtype == np.float64 and got.shape == out_shape
    np.testing.assert_allclose(np.asarray(got), _ref_resize(x, out_shape, method, antialias),
                               rtol=1e-12, atol=1e-12)  # fmt: skip


@pytest.mark.parametrize("method", METHODS)
def test_resize_float32_and_a_channel_axis(method):
    x = np.random.default_rng(1).standard_normal((2, 5, 7, 3)).astype(np.float32)
    got = image.resize(x, (2, 9, 4, 3), method)
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), _ref_resize(x, (2, 9, 4, 3), method),
                               rtol=1e-5, atol=1e-5)  # fmt: skip


def test_method_names_and_enum():
    x = np.random.default_rng(2).standard_normal((4, 5))
    for names, m in [
        (("linear", "bilinear", "trilinear", "triangle"), image.ResizeMethod.LINEAR),
        (("cubic", "bicubic", "tricubic"), image.ResizeMethod.CUBIC),
        (("lanczos3",), image.ResizeMethod.LANCZOS3),
        (("nearest",), image.ResizeMethod.NEAREST),
    ]:
        want = np.asarray(image.resize(x, (7, 3), m))
        for n in names:
            assert image.ResizeMethod.from_string(n) is m
            np.testing.assert_allclose(np.asarray(image.resize(x, (7, 3), n)), want, rtol=1e-15)


# ---- exact cases -------------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS + ["nearest"])
def test_identity_resize(method):
    x = np.random.default_rng(3).standard_normal((3, 4, 2))
    np.testing.assert_array_equal(np.asarray(image.resize(x, x.shape, method)), x)


def test_nearest_upsample_by_two_repeats_and_keeps_ints():
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    got = image.resize(x, (6, 8), "nearest")
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), np.repeat(np.repeat(x, 2, 0), 2, 1))


@settings(deadline=None, max_examples=30)
@given(st.lists(st.integers(1, 7), min_size=1, max_size=3), st.data())
def test_nearest_takes_the_pixel_under_each_centre(in_shape, data):
    out_shape = tuple(data.draw(st.integers(1, 11)) for _ in in_shape)
    x = np.arange(np.prod(in_shape)).reshape(in_shape)
    want = x
    for d, (m, n) in enumerate(zip(in_shape, out_shape)):
        idx = [int((j + 0.5) * m // n) for j in range(n)]  # floor((j + 0.5) m / n), exactly
        want = np.take(want, idx, axis=d)
    got = image.resize(x, out_shape, "nearest")
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(got), want)


def test_nearest_downsample_picks_floor_of_the_centre():
    x = np.arange(10.0)
    want = x[np.floor((np.arange(3) + 0.5) * 10 / 3).astype(int)]
    np.testing.assert_array_equal(np.asarray(image.resize(x, (3,), "nearest")), want)


@pytest.mark.parametrize("antialias", [True, False])
@pytest.mark.parametrize("method", METHODS)
def test_downsampling_a_constant_keeps_it(method, antialias):
    x = np.full((9, 7), 2.5)
    got = image.resize(x, (4, 3), method, antialias=antialias)
    np.testing.assert_allclose(np.asarray(got), np.full((4, 3), 2.5), rtol=1e-14)


@pytest.mark.parametrize("method", ["linear", "cubic"])
def test_linear_upsampling_keeps_a_ramp_away_from_the_borders(method):
    m, n = 6, 15
    x = 0.7 * np.arange(m) - 1.2
    got = np.asarray(image.resize(x, (n,), method))
    c = (np.arange(n) + 0.5) * m / n - 0.5
    inner = (c >= 1) & (c <= m - 2)  # the cubic's support (2 pixels) inside the image
    np.testing.assert_allclose(got[inner], 0.7 * c[inner] - 1.2, rtol=1e-13, atol=1e-13)


# ---- dtypes and errors -------------------------------------------------------------------------


def test_dtypes():
    assert image.resize(np.arange(4), (8,), "linear").dtype == np.float32
    assert image.resize(np.ones(4, np.float32), (8,), "cubic").dtype == np.float32
    z = image.resize(np.arange(4) * (1 + 1j), (8,), "linear")
    assert z.dtype == np.complex128
    np.testing.assert_allclose(np.asarray(z).imag, _ref_resize(np.arange(4.0), (8,), "linear"))


def test_errors():
    x = np.ones((3, 4))
    with pytest.raises(BluShapeError, match=r"\(5,\).*f64\[3,4\]|float64\[3,4\]"):
        image.resize(x, (5,), "linear")
    with pytest.raises(BluValueError, match="unknown resize method 'box'"):
        image.resize(x, (5, 5), "box")
    with pytest.raises(BluValueError, match="nearest"):
        image.scale_and_translate(x, (5, 4), (0,), np.ones(1), np.zeros(1), "nearest")
    with pytest.raises(BluShapeError, match="dimension 1 is not spatial"):
        image.scale_and_translate(x, (5, 5), (0,), np.ones(1), np.zeros(1), "linear")
    with pytest.raises(BluShapeError, match="scale"):
        image.scale_and_translate(x, (5, 4), (0,), np.ones(2), np.zeros(1), "linear")


# ---- scale_and_translate -----------------------------------------------------------------------


@settings(deadline=None, max_examples=40)
@given(
    st.integers(1, 6),
    st.integers(1, 9),
    st.floats(0.3, 3.0),
    st.floats(-2.0, 2.0),
    st.sampled_from(METHODS),
    st.booleans(),
)
def test_scale_and_translate_matches_the_reference(m, n, s, t, method, antialias):
    x = np.random.default_rng(m * 10 + n).standard_normal((2, m))
    got = image.scale_and_translate(
        x, (2, n), (-1,), np.array([s]), np.array([t]), method, antialias
    )
    want = _ref(x, (2, n), [1], [s], [t], method, antialias)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)


def test_scale_and_translate_two_dims_float32():
    x = np.random.default_rng(4).standard_normal((5, 6)).astype(np.float32)
    s, t = np.array([1.5, 0.6], np.float32), np.array([0.25, -1.0], np.float32)
    got = image.scale_and_translate(x, (7, 4), (0, 1), s, t, "lanczos3")
    assert got.dtype == np.float32
    want = _ref(x, (7, 4), [0, 1], s.astype(float), t.astype(float), "lanczos3")
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", ["lanczos3", "lanczos5"])
def test_lanczos_samples_just_off_the_pixels(method):
    """Samples 4e-4 from the pixel centres (the kernel's Taylor branch, below 1e-3)."""
    x = np.random.default_rng(8).standard_normal(7)
    got = image.scale_and_translate(x, (7,), (0,), np.array([1.0]), np.array([4e-4]), method)
    want = _ref(x, (7,), [0], [1.0], [4e-4], method)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)


def test_zero_sizes():
    x = np.ones((3, 4))
    assert image.resize(x, (0, 4), "linear").shape == (0, 4)
    assert image.resize(x, (0, 5), "nearest").shape == (0, 5)
    assert image.resize(np.ones((0, 4)), (0, 6), "cubic").shape == (0, 6)


def test_a_jitted_resize_is_contractions_of_constant_weights():
    jaxpr = blu.make_jaxpr(lambda x: image.resize(x, (6, 2), "lanczos3"))(np.ones((4, 5)))
    assert {e.primitive.name for e in jaxpr.jaxpr.eqns} <= {"dot_general", "transpose"}


# ---- derivatives, jit, vmap --------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_resize_grad_by_the_image(method):
    x = np.random.default_rng(5).standard_normal((4, 5))
    check_grads(lambda x: image.resize(x, (7, 3), method), [x])
    check_grads(lambda x: image.resize(x, (2, 8), "nearest"), [x])


@pytest.mark.parametrize("method", ["cubic", "lanczos3"])
def test_scale_and_translate_grad_by_scale_and_translation(method):
    x = np.random.default_rng(6).standard_normal((5, 6))

    def f(img, s, t):
        return image.scale_and_translate(img, (7, 4), (0, 1), s, t, method)

    # (a scale and translation putting no sample at a kink of the kernel's second derivative,
    # where central differences are off by O(eps))
    check_grads(f, [x, np.array([1.3, 0.77]), np.array([0.2, -0.31])], atol=1e-6, rtol=1e-6)


def test_jit_and_vmap():
    x = np.random.default_rng(7).standard_normal((3, 4, 5))
    check_jit(lambda x: image.resize(x, (3, 6, 2), "cubic"), [x])
    check_jit(lambda x: image.resize(x, (3, 8, 10), "nearest"), [x])
    check_vmap(lambda x: image.resize(x, (7, 3), "lanczos5"), [x], [0], atol=1e-12, rtol=1e-12)
    s = np.array([[1.5], [0.8], [2.0]])
    check_vmap(
        lambda s: image.scale_and_translate(x[0], (4, 7), (1,), s, bnp.zeros(1), "linear"),
        [s],
        [0],
        atol=1e-12,
        rtol=1e-12,
    )
    g = blu.jit(blu.grad(lambda x: bnp.sum(image.resize(x, (6, 2), "linear") ** 2)))(x[0])
    w0 = _weights(4, 6, 1.5, 0.0, "linear", True)
    w1 = _weights(5, 2, 0.4, 0.0, "linear", True)
    np.testing.assert_allclose(np.asarray(g), 2 * w0 @ (w0.T @ x[0] @ w1) @ w1.T, rtol=1e-12)
