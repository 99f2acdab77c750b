"""blu.scipy.special's fresnel, dawsn, sici, owens_t and wofz against scipy.special in float64
(hypothesis-drawn points and special values), float32 with tolerances from its epsilon, jit and
vmap against eager, and gradients against the closed forms and central differences."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special as ss
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu.core.errors import BluTypeError, BluValueError
from blu.scipy import special as S

EPS64 = np.finfo(np.float64).eps
EPS32 = float(np.finfo(np.float32).eps)
SPECIAL = np.array([0.0, -0.0, 1e-300, -1e-12, 1.6, -1.6008, 3.25, 4.0, 6.25, 8.0, -40.0, 36974.0,
                    1e9, 2e9, np.inf, -np.inf, np.nan])  # fmt: skip

_REALS = st.lists(
    st.floats(-10.0, 10.0) | st.floats(-1e4, 1e4) | st.floats(-1e-3, 1e-3), min_size=1, max_size=8
)


def _close(got, want, rtol, atol=0.0):
    got = np.asarray(got)
    assert got.shape == np.shape(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], np.asarray(want)[ok], rtol=rtol, atol=atol)


@settings(deadline=None, max_examples=15)
@given(_REALS)
def test_fresnel_dawsn_sici_against_scipy_float64(xs):
    x = np.array(xs)
    s, c = S.fresnel(x)
    want_s, want_c = ss.fresnel(x)
    # the (1/2 - ...) tails: 1/(pi x) times cos/sin of pi x^2/2, whose rounding scipy's
    # angle keeps (x^2 formed in float64) and ours reduces first: an absolute 4 eps x^2 / x
    atol = 8 * EPS64 * np.max(np.abs(x) + 1.0)
    _close(s, want_s, 16 * EPS64, atol)
    _close(c, want_c, 16 * EPS64, atol)
    _close(S.dawsn(x), ss.dawsn(x), 16 * EPS64)
    si, ci = S.sici(x)
    want_si, want_ci = ss.sici(x)
    _close(si, want_si, 16 * EPS64)
    _close(ci, want_ci, 16 * EPS64, 4 * EPS64)  # (Ci has a zero at 0.6165: absolute there)


def test_special_values_against_scipy():
    x = SPECIAL
    with np.errstate(all="ignore"):
        fs, fc = ss.fresnel(x)
        si, ci = ss.sici(x)
        d = ss.dawsn(x)
    got_s, got_c = S.fresnel(x)
    _close(got_s, fs, 16 * EPS64, 1e-14)
    _close(got_c, fc, 16 * EPS64, 1e-14)
    _close(S.dawsn(x), d, 16 * EPS64)
    got_si, got_ci = S.sici(x)
    _close(got_si, si, 16 * EPS64)
    _close(got_ci, ci, 16 * EPS64)
    np.testing.assert_array_equal(np.asarray(got_s)[-3:-1], [0.5, -0.5])
    np.testing.assert_array_equal(np.asarray(got_si)[-3:-1], [np.pi / 2, -np.pi / 2])
    np.testing.assert_array_equal(np.asarray(got_ci)[[0, -3, -2]], [-np.inf, 0.0, np.nan])
    assert np.signbit(np.asarray(S.dawsn(-np.inf)))


@pytest.mark.parametrize("name", ["fresnel", "dawsn", "sici"])
def test_float32_and_half_dtypes(name):
    x = np.concatenate([np.linspace(-20.0, 20.0, 161), [0.05, 1e-3, 3.3, 7.0]]).astype(np.float32)
    got = getattr(S, name)(x)
    want = getattr(ss, name)(x.astype(np.float64))
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        assert g.dtype == np.float32
        # x itself is rounded: the relative error of f(x) is x f'(x) / f(x) times eps; the
        # tails' angles pi x^2 / 2 reduced in float32 give an absolute 4 eps
        _close(g, w, 16 * EPS32, 4 * EPS32)
    h = getattr(S, name)(np.float16(1.5))
    h = h if isinstance(h, tuple) else (h,)
    assert all(v.dtype == np.float16 for v in h)
    i = getattr(S, name)(3)
    assert all(v.dtype == np.float32 for v in (i if isinstance(i, tuple) else (i,)))


@pytest.mark.parametrize("name", ["fresnel", "dawsn", "sici"])
def test_jit_and_vmap_agree_with_eager(name):
    x = np.array([-7.5, -2.0, -0.3, 0.0, 0.9, 1.6, 3.3, 5.0, 9.0, 120.0])
    f = getattr(S, name)
    eager = f(x)
    for other in (blu.jit(f)(x), blu.vmap(f)(x), blu.jit(blu.vmap(f))(x.reshape(2, 5))):
        for e, o in zip(_tuple(eager), _tuple(other)):
            np.testing.assert_allclose(np.asarray(o).ravel(), np.asarray(e), rtol=4 * EPS64)


def _tuple(v):
    return v if isinstance(v, tuple) else (v,)


def _central(f, x, h=1e-6):
    return (f(x + h) - f(x - h)) / (2 * h)


@pytest.mark.parametrize(
    "name, k, closed",
    [
        ("fresnel", 0, lambda x: np.sin(np.pi * x * x / 2)),
        ("fresnel", 1, lambda x: np.cos(np.pi * x * x / 2)),
        ("dawsn", None, lambda x: 1 - 2 * x * ss.dawsn(x)),
        ("sici", 0, lambda x: np.sin(x) / x),
        ("sici", 1, lambda x: np.cos(x) / x),
    ],
)
def test_gradients_closed_forms_and_central_differences(name, k, closed):
    x = np.array([-5.3, -1.2, 0.4, 1.55, 1.65, 3.7, 4.2, 6.0, 7.9, 8.1, 11.0])
    f = getattr(S, name)
    fk = (lambda v: f(v)) if k is None else (lambda v: f(v)[k])
    g = np.asarray(blu.vmap(blu.grad(fk))(x))
    # (numpy's sin(pi x^2 / 2) rounds x^2 first: an absolute eps x^2 in the reference)
    want = closed(x)
    assert np.all(np.abs(g - want) <= 64 * EPS64 * np.abs(want) + 8 * EPS64 * (1 + x * x)), g
    ref = getattr(ss, name)
    rk = (lambda v: ref(v)) if k is None else (lambda v: ref(v)[k])
    np.testing.assert_allclose(g, _central(rk, x), rtol=1e-7, atol=1e-8)


def test_gradient_limits_and_complex_rejected():
    assert float(blu.grad(S.dawsn)(np.inf)) == 0.0
    assert float(blu.grad(lambda v: S.sici(v)[0])(0.0)) == 1.0
    assert float(blu.grad(lambda v: S.fresnel(v)[1])(0.0)) == 1.0
    for name in ("fresnel", "dawsn", "sici"):
        with pytest.raises(BluTypeError, match=name):
            getattr(S, name)(np.complex64(1.0))


# ---- wofz ----------------------------------------------------------------------------------------

_PARTS = st.floats(-6.0, 6.0) | st.floats(-1e4, 1e4) | st.floats(-1e-3, 1e-3)


@settings(deadline=None, max_examples=15)
@given(st.lists(st.tuples(_PARTS, _PARTS), min_size=1, max_size=8))
def test_wofz_against_scipy_float64(parts):
    z = np.array([complex(a, b) for a, b in parts])
    with np.errstate(all="ignore"):
        want = ss.wofz(z)
    keep = np.abs(want) < 1e300  # (the lower half-plane overflows as exp(-z^2) does)
    got = np.asarray(S.wofz(z))
    assert got.dtype == np.complex128 and got.shape == z.shape
    # Weideman's N = 32 rational: a relative error of up to about 3e-13 of |w| (measured)
    assert np.all((np.abs(got - want) <= 1e-12 * np.abs(want)) | ~keep), (z, got, want)


def test_wofz_real_axis_special_values_and_dtypes():
    x = np.concatenate([np.linspace(-30.0, 30.0, 121), [0.0, 1e-300]])
    got = np.asarray(S.wofz(x))
    want = ss.wofz(x)
    # on the real axis exp(-x^2) and dawsn: both parts to the last digits, the tiny real ones too
    np.testing.assert_allclose(got.real, want.real, rtol=16 * EPS64, atol=0)
    np.testing.assert_allclose(got.imag, want.imag, rtol=16 * EPS64, atol=0)
    inf, nan = np.inf, np.nan
    z = np.array([complex(inf, 0), complex(-inf, 0), complex(1, inf), complex(inf, 1),
                  complex(-inf, 1), complex(inf, inf), complex(nan, 0), complex(0, nan),
                  complex(1, -inf)])  # fmt: skip
    got = np.asarray(S.wofz(z))
    np.testing.assert_array_equal(got[:6], 0)
    assert np.all(np.isnan(got[6:]))
    assert S.wofz(1).dtype == np.complex64 and S.wofz(np.float16(1.0)).dtype == np.complex64
    assert S.wofz(np.float32(1.0)).dtype == np.complex64
    assert S.wofz(np.complex128(1.0)).dtype == np.complex128
    zs = np.array([0.3 + 0.2j, -2.5 + 1.0j, 7.0 + 0.5j, 0.6 - 0.8j, -1.5 - 1.5j, 120.0 + 3.0j])
    got32 = np.asarray(S.wofz(zs.astype(np.complex64)))
    assert got32.dtype == np.complex64
    want = ss.wofz(zs.astype(np.complex64).astype(np.complex128))
    # the input's rounding moves w by |z w'| eps relative, w' = -2 z w + 2i / sqrt(pi)
    cond = np.abs(zs * (-2 * zs * want + 2j / np.sqrt(np.pi))) / np.abs(want)
    assert np.all(np.abs(got32 - want) <= 16 * EPS32 * (1 + cond) * np.abs(want)), got32


def test_wofz_overflow_below_the_real_axis_is_scipys_infinity():
    # 2 exp(-z^2) - w(-z) where exp(-z^2) overflows: an infinity along the angle's direction
    # (the imaginary part 0 on the imaginary axis), not a complex product's inf * 0 = NaN
    z = np.array([-30j, 0.1 - 30j, -0.1 - 30j, 0.3 - 26j])
    got, want = np.asarray(S.wofz(z)), ss.wofz(z)
    np.testing.assert_array_equal(np.isinf(got.real), np.isinf(want.real))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.sign(got.real), np.sign(want.real))
    np.testing.assert_array_equal(np.sign(got.imag), np.sign(want.imag))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-12)


def test_wofz_jit_vmap_and_derivative():
    z = np.array([0.3 + 0.2j, -1.5 + 2.0j, 2.0 - 1.0j, -0.7 - 0.4j, 4.0 + 0.0j, 35.0 + 20.0j])
    eager = np.asarray(S.wofz(z))
    np.testing.assert_allclose(np.asarray(blu.jit(S.wofz)(z)), eager, rtol=4 * EPS64)
    np.testing.assert_allclose(np.asarray(blu.vmap(S.wofz)(z)), eager, rtol=4 * EPS64)
    _, tangent = blu.jvp(S.wofz, (z,), (np.ones_like(z),))
    w = ss.wofz(z)
    # (-2 z w and 2i / sqrt(pi) cancel far out: an absolute error of |2 z w| 1e-13)
    want = -2 * z * w + 2j / np.sqrt(np.pi)
    assert np.all(np.abs(np.asarray(tangent) - want) <= 1e-13 * (1 + np.abs(2 * z * w)))
    h = 1e-6
    np.testing.assert_allclose(
        np.asarray(tangent), (ss.wofz(z + h) - ss.wofz(z - h)) / (2 * h), rtol=1e-8, atol=1e-9
    )
    x = np.array([-2.0, -0.4, 0.3, 1.2, 5.0])
    g = blu.vmap(blu.grad(lambda v: blu.numpy.imag(S.wofz(v))))(x)
    np.testing.assert_allclose(np.asarray(g), 2 / np.sqrt(np.pi) * (1 - 2 * x * ss.dawsn(x)),
                               rtol=64 * EPS64, atol=64 * EPS64)  # fmt: skip


# ---- owens_t -------------------------------------------------------------------------------------


def _owens_quad(h, a):
    """T(h, a) by adaptive quadrature of its defining integral, exp(-h^2/2) taken out (and the
    range cut where exp(-h^2 x^2 / 2) < e^-800, so quad sees the peak at 0)."""
    from scipy.integrate import quad

    top = abs(a) if h == 0 else min(abs(a), 40.0 / abs(h))
    v, _ = quad(lambda x: np.exp(-h * h * x * x / 2) / (1 + x * x), 0, top, epsabs=0,
                epsrel=1e-13, limit=200)  # fmt: skip
    return np.sign(a) * np.exp(-h * h / 2) / (2 * np.pi) * v


_H = st.floats(-8.0, 8.0) | st.floats(-30.0, 30.0) | st.floats(-1e-3, 1e-3)
_A = st.floats(-3.0, 3.0) | st.floats(-1e3, 1e3) | st.floats(-1e-4, 1e-4)


@settings(deadline=None, max_examples=15)
@given(st.lists(st.tuples(_H, _A), min_size=1, max_size=6))
def test_owens_t_against_quadrature_and_scipy(pairs):
    h, a = np.array(pairs).T
    got = np.asarray(S.owens_t(h, a))
    assert got.dtype == np.float64
    want = np.array([_owens_quad(x, y) for x, y in pairs])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)
    # scipy's T2 forms Phi(ah) - 1/2 as ndtr(ah) - 0.5, which loses eps / |ah| of it: compared
    # where that is below 1e-11
    keep = np.abs(a * h) > 1e-5
    np.testing.assert_allclose(got[keep], ss.owens_t(h, a)[keep], rtol=1e-10, atol=1e-300)


def test_owens_t_special_values_broadcasting_and_dtypes():
    v = np.array([0.0, -0.0, 1e-300, 0.5, 1.0, -2.0, np.inf, -np.inf, np.nan])
    got = np.asarray(S.owens_t(v[:, None], v[None, :]))
    assert got.shape == (9, 9)
    _close(got, ss.owens_t(v[:, None], v[None, :]), 1e-14, 1e-300)
    np.testing.assert_allclose(got[0, 5], np.arctan(-2.0) / (2 * np.pi), rtol=1e-15)
    np.testing.assert_allclose(got[3, 6], ss.ndtr(-0.5) / 2, rtol=1e-15)
    assert got[6, 3] == 0.0 and np.isnan(got[8, 0]) and np.isnan(got[0, 8])
    assert S.owens_t(1, 2).dtype == np.float32
    assert S.owens_t(np.float16(1.0), np.float16(2.0)).dtype == np.float16
    h = np.linspace(-6.0, 6.0, 25).astype(np.float32)[:, None]
    a = np.array([-200.0, -3.0, -0.7, 0.2, 0.95, 1.0, 1.3, 50.0], np.float32)
    got32 = np.asarray(S.owens_t(h, a))
    assert got32.dtype == np.float32
    want = ss.owens_t(h.astype(np.float64), a.astype(np.float64))
    np.testing.assert_allclose(got32, want, rtol=4 * EPS32, atol=1e-37)
    with pytest.raises(BluTypeError, match="owens_t"):
        S.owens_t(np.complex64(1.0), 0.5)


def test_owens_t_jit_vmap_and_gradients():
    h = np.array([-2.5, -0.3, 0.0, 0.7, 1.9, 3.45, 5.2])
    a = np.array([0.4, -1.7, 0.8, 0.999, 12.0, 0.6, -0.05])
    eager = np.asarray(S.owens_t(h, a))
    np.testing.assert_allclose(np.asarray(blu.jit(S.owens_t)(h, a)), eager, rtol=4 * EPS64)
    np.testing.assert_allclose(np.asarray(blu.vmap(S.owens_t)(h, a)), eager, rtol=4 * EPS64)
    gh, ga = blu.vmap(blu.grad(S.owens_t, argnums=(0, 1)))(h, a)
    want_h = -np.exp(-h * h / 2) * ss.erf(a * h / np.sqrt(2)) / (2 * np.sqrt(2 * np.pi))
    want_a = np.exp(-(1 + a * a) * h * h / 2) / (2 * np.pi * (1 + a * a))
    np.testing.assert_allclose(np.asarray(gh), want_h, rtol=64 * EPS64, atol=1e-300)
    np.testing.assert_allclose(np.asarray(ga), want_a, rtol=64 * EPS64, atol=1e-300)
    d = 1e-6
    fd_h = (ss.owens_t(h + d, a) - ss.owens_t(h - d, a)) / (2 * d)
    fd_a = (ss.owens_t(h, a + d) - ss.owens_t(h, a - d)) / (2 * d)
    np.testing.assert_allclose(np.asarray(gh), fd_h, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(np.asarray(ga), fd_a, rtol=1e-6, atol=1e-9)


# ---- sph_harm_y ----------------------------------------------------------------------------------


def _sph_tol(n, m, phi, eps):
    """The angle m phi rounds to eps |m phi|, each recurrence step adds eps: of |Y|'s scale."""
    n = np.maximum(n, 0)
    return 16 * eps * (1 + np.abs(m * phi) + n) * np.sqrt((2 * n + 1) / (4 * np.pi))


@settings(deadline=None, max_examples=15)
@given(
    st.lists(
        st.tuples(st.integers(-2, 25), st.integers(-27, 27), st.floats(-1.0, 4.2),
                  st.floats(-7.0, 7.0)),
        min_size=1, max_size=8,
    )
)  # fmt: skip
def test_sph_harm_y_against_scipy(rows):
    n, m, theta, phi = (np.array(c) for c in zip(*rows))
    got = np.asarray(S.sph_harm_y(n, m, theta, phi))
    assert got.dtype == np.complex128 and got.shape == n.shape
    want = ss.sph_harm_y(n, m, theta, phi)
    assert np.all(np.abs(got - want) <= _sph_tol(n, m, phi, EPS64)), (got, want)


def test_sph_harm_y_values_shapes_dtypes_and_errors():
    # closed forms: Y_1^1 = -sqrt(3 / 8 pi) sin(theta) e^(i phi), Y_2^0 = sqrt(5 / 16 pi) (3c^2 - 1)
    th, ph = np.array([0.4, 1.9, 2.8]), np.array([0.3, -2.0, 5.0])
    y11 = -np.sqrt(3 / (8 * np.pi)) * np.sin(th) * np.exp(1j * ph)
    np.testing.assert_allclose(np.asarray(S.sph_harm_y(1, 1, th, ph)), y11, rtol=8 * EPS64)
    np.testing.assert_allclose(np.asarray(S.sph_harm_y(1, -1, th, ph)), -np.conj(y11),
                               rtol=8 * EPS64)  # fmt: skip
    y20 = np.sqrt(5 / (16 * np.pi)) * (3 * np.cos(th) ** 2 - 1)
    np.testing.assert_allclose(np.asarray(S.sph_harm_y(2, 0, th, ph)), y20, rtol=8 * EPS64)
    # broadcasting over n and m; 0 for n < 0 and |m| > n (scipy's)
    n, m = np.arange(-1, 5)[:, None], np.arange(-5, 6)[None, :]
    got = np.asarray(S.sph_harm_y(n, m, 0.7, np.float64(1.3)))
    assert got.shape == (6, 11)
    want = ss.sph_harm_y(n, m, 0.7, 1.3)
    assert np.all(np.abs(got - want) <= _sph_tol(n, m, 1.3, EPS64))
    assert np.all(got[0] == 0) and got[2, 0] == 0
    # n_max clips the degree (JAX's)
    clipped = S.sph_harm_y(np.array([10]), np.array([2]), np.array([0.7]), np.array([1.3]), n_max=6)
    np.testing.assert_allclose(np.asarray(clipped), [ss.sph_harm_y(6, 2, 0.7, 1.3)], rtol=1e-13)
    # float32 angles give complex64
    t32, p32 = np.float32([0.3, 2.2, 1.0]), np.float32([1.0, -3.0, 6.0])
    n3, m3 = np.array([3, 8, 15]), np.array([-2, 8, 4])
    got32 = np.asarray(S.sph_harm_y(n3, m3, t32, p32))
    assert got32.dtype == np.complex64
    want = ss.sph_harm_y(n3, m3, t32.astype(np.float64), p32.astype(np.float64))
    assert np.all(np.abs(got32 - want) <= _sph_tol(n3, m3, p32, EPS32))
    with pytest.raises(BluValueError, match="diff_n"):
        S.sph_harm_y(1, 0, 0.5, 0.5, diff_n=1)
    with pytest.raises(BluTypeError, match="integer"):
        S.sph_harm_y(1.5, 0, 0.5, 0.5)
    with pytest.raises(BluTypeError, match="n_max"):
        blu.jit(lambda k: S.sph_harm_y(k, 0, 0.5, 0.5))(np.array([2]))


def test_sph_harm_y_jit_vmap_and_gradients():
    n, m = np.array([0, 1, 3, 7, 12]), np.array([0, -1, 2, -5, 12])
    th, ph = np.array([0.3, 1.1, 2.0, 0.9, 1.4]), np.array([0.2, -1.0, 2.5, 0.7, 3.0])

    def f(nn, mm, t, p):
        return S.sph_harm_y(nn, mm, t, p, n_max=12)

    eager = np.asarray(f(n, m, th, ph))
    np.testing.assert_allclose(np.asarray(blu.jit(f)(n, m, th, ph)), eager, rtol=4 * EPS64)
    np.testing.assert_allclose(np.asarray(blu.vmap(f)(n, m, th, ph)), eager, rtol=4 * EPS64)
    for part in (blu.numpy.real, blu.numpy.imag):
        g = blu.vmap(blu.grad(lambda t, p, nn, mm: part(f(nn, mm, t, p)), argnums=(0, 1)))
        gt, gp = g(th, ph, n, m)
        d = 1e-6
        npart = np.real if part is blu.numpy.real else np.imag
        fd_t = npart(ss.sph_harm_y(n, m, th + d, ph) - ss.sph_harm_y(n, m, th - d, ph)) / (2 * d)
        fd_p = npart(ss.sph_harm_y(n, m, th, ph + d) - ss.sph_harm_y(n, m, th, ph - d)) / (2 * d)
        np.testing.assert_allclose(np.asarray(gt), fd_t, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(np.asarray(gp), fd_p, rtol=1e-6, atol=1e-8)
        # d/dphi of Y = i m Y: the closed form
        dp = npart(1j * m * ss.sph_harm_y(n, m, th, ph))
        np.testing.assert_allclose(np.asarray(gp), dp, rtol=1e-12, atol=1e-14)
