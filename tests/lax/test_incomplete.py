"""``lax.igamma``, ``igammac``, ``igamma_grad_a`` and ``betainc`` (compositions of ``while_loop``
and elementwise operations) against ``scipy.special`` in float64 over hypothesis-drawn
parameters (small and large ``a``, ``x`` near ``a``, tiny ``x``), their special values, float32
and half floats, derivatives against central differences and closed forms, jit and vmap."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sc
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu import lax
from blu.core.errors import BluTypeError

EPS64 = np.finfo(np.float64).eps
EPS32 = np.finfo(np.float32).eps


def _rel(got, want, rtol, atol=0.0):
    np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=atol)


# The hypothesis tests below draw 3 to 8 points per example and check each point as a scalar test
# would, but call blu once for all of them (an eager call traces the while loops and the
# custom_jvp rule whatever its size): a third of the profile's examples, as many points or more.
_FEWER = settings(max_examples=max(1, settings.default.max_examples // 3))


def _points(*strategies):
    """3 to 8 points, each a tuple of the strategies' draws; as float64 arrays, one per strategy."""
    rows = st.lists(st.tuples(*strategies), min_size=3, max_size=8)
    return rows.map(lambda r: [np.array(c, np.float64) for c in zip(*r, strict=True)])


# ---- igamma / igammac ------------------------------------------------------------------------

# a over five decades; x = a * exp(s): far below, near and far above a (scipy is accurate here)
_A = st.floats(0.01, 1000.0)
_S = st.one_of(st.floats(-4.0, 1.5), st.floats(-0.02, 0.02))


@_FEWER
@given(_points(_A, _S))
def test_igamma_igammac_against_scipy(points):
    a_s, s_s = points
    x_s = a_s * np.exp(s_s)
    ps, qs = np.asarray(lax.igamma(a_s, x_s)), np.asarray(lax.igammac(a_s, x_s))
    for a, x, p, q in zip(a_s, x_s, ps, qs, strict=True):
        # the factor x^a e^-x / Gamma(a) carries ~|x - a| + log terms of rounding (a few ulps each);
        # plus scipy's own error: against mpmath at 40 digits over 4,000 such points it reached
        # 5.7 a ulps (1.75e-12 at a = 781) and 127 ulps at a = 0.5, x = 0.65 (blu's stayed within
        # half of the first term), so a tight bound on blu needs room for the reference
        tol = 64 * EPS64 * (1.0 + np.sqrt(a)) + EPS64 * (256.0 + 8.0 * a)
        np.testing.assert_allclose(p, sc.gammainc(a, x), rtol=tol, atol=1e-300)
        np.testing.assert_allclose(q, sc.gammaincc(a, x), rtol=tol, atol=1e-300)


def test_igamma_tiny_x_and_large_a_near_x():
    a = np.array([0.5, 3.0, 1e-3, 200.0, 5000.0, 5000.0, 20000.0])
    x = np.array([1e-30, 1e-8, 1e-200, 200.5, 4999.0, 5003.0, 20000.0])
    want = sc.gammainc(a, x)
    _rel(lax.igamma(a, x), want, 1e-12)
    _rel(lax.igammac(a, x), sc.gammaincc(a, x), 1e-12)


def test_special_values_are_jaxs():
    a = np.array([2.0, 2.0, 2.0, -1.0, 0.0, np.nan, 2.0, 2.0, np.inf])
    x = np.array([0.0, np.inf, -1.0, 1.0, 1.0, 1.0, np.nan, 1.0, 3.0])
    p, q = np.asarray(lax.igamma(a, x)), np.asarray(lax.igammac(a, x))
    nan = [False, False, True, True, False, True, True, False, False]
    np.testing.assert_array_equal(np.isnan(p), nan)
    np.testing.assert_array_equal(np.isnan(q), nan)
    assert p[0] == 0 and q[0] == 1 and p[1] == 1 and q[1] == 0 and p[4] == 1 and q[4] == 0
    assert p[8] == 0 and q[8] == 1
    np.testing.assert_allclose(p[7], sc.gammainc(2.0, 1.0), rtol=1e-15)


@pytest.mark.parametrize("dt, tol", [(np.float32, 256 * EPS32), (np.float16, 8e-3)])
def test_low_precision_keeps_its_dtype(dt, tol):
    a = np.array([0.3, 1.0, 4.5, 30.0, 60.0], dt)
    x = np.array([0.2, 2.0, 4.0, 33.0, 50.0], dt)
    a64, x64 = a.astype(np.float64), x.astype(np.float64)
    for fn, ref in ((lax.igamma, sc.gammainc), (lax.igammac, sc.gammaincc)):
        got = fn(a, x)
        assert got.dtype == dt
        _rel(got, ref(a64, x64), tol, atol=tol)


def test_refuses_integers_and_mixed_dtypes():
    with pytest.raises(BluTypeError, match="igamma"):
        lax.igamma(np.array([1, 2]), np.array([1, 2]))
    with pytest.raises(BluTypeError):
        lax.igammac(np.ones(2, np.float32), np.ones(2))


def _fd(f, v, h):
    return (f(v + h) - f(v - h)) / (2 * h)


@_FEWER
@given(_points(st.floats(0.1, 50.0), st.floats(-2.0, 1.0)))
def test_gradients_against_differences(points):
    a_s, s_s = points
    x_s = a_s * np.exp(s_s)
    # elementwise functions: the gradient of the sum is each point's derivative
    ga_s, gx_s = blu.grad(lambda a, x: bnp.sum(lax.igamma(a, x)), argnums=(0, 1))(a_s, x_s)
    da_s = np.asarray(lax.igamma_grad_a(a_s, x_s))
    qa_s, qx_s = blu.grad(lambda a, x: bnp.sum(lax.igammac(a, x)), argnums=(0, 1))(a_s, x_s)
    for a, x, ga, gx, da, qa, qx in zip(a_s, x_s, *map(np.asarray, (ga_s, gx_s, da_s, qa_s, qx_s)),
                                        strict=True):  # fmt: skip
        # in x the density; in a central differences of scipy (of Q above a + 1: P rounds to 1)
        dens = np.exp((a - 1) * np.log(x) - x - sc.gammaln(a))
        np.testing.assert_allclose(float(gx), dens, rtol=1e-12)
        h = 1e-5 * a
        if x > a + 1:
            want = -_fd(lambda v: sc.gammaincc(v, x), a, h)
        else:
            want = _fd(lambda v: sc.gammainc(v, x), a, h)
        np.testing.assert_allclose(float(ga), want, rtol=1e-6, atol=1e-300)
        np.testing.assert_allclose(float(da), float(ga), rtol=1e-14)
        assert float(qa) == -float(ga) and float(qx) == -float(gx)


def test_second_derivatives():
    a, x = np.float64(2.5), np.float64(3.0)
    h = 1e-4
    # d2P/dx2 = density * ((a - 1) / x - 1); d2P/dadx = density * (log x - digamma a)
    dens = np.exp((a - 1) * np.log(x) - x - sc.gammaln(a))
    hxx = blu.grad(blu.grad(lax.igamma, argnums=1), argnums=1)(a, x)
    np.testing.assert_allclose(float(hxx), dens * ((a - 1) / x - 1), rtol=1e-12)
    hax = blu.grad(blu.grad(lax.igamma, argnums=0), argnums=1)(a, x)
    np.testing.assert_allclose(float(hax), dens * (np.log(x) - sc.digamma(a)), rtol=1e-12)
    haa = blu.grad(blu.grad(lax.igamma, argnums=0), argnums=0)(a, x)
    want = (sc.gammainc(a + h, x) - 2 * sc.gammainc(a, x) + sc.gammainc(a - h, x)) / h**2
    np.testing.assert_allclose(float(haa), want, rtol=1e-5)


def test_third_derivatives_in_a():
    # they were 0 (the second derivative in a was cut from the graph): d3P/da3 against central
    # differences of scipy (five points, h = 1e-2: truncation ~1e-6 relative), d3P/da2dx
    # against second differences of the density in a
    a, x = np.float64(2.5), np.float64(3.0)
    h = 1e-2
    g = [sc.gammainc(a + k * h, x) for k in (-2, -1, 1, 2)]
    want = (g[3] - 2 * g[2] + 2 * g[1] - g[0]) / (2 * h**3)
    d = blu.grad
    np.testing.assert_allclose(float(d(d(d(lax.igamma, 0), 0), 0)(a, x)), want, rtol=1e-4)
    jf = blu.jacfwd
    np.testing.assert_allclose(float(jf(jf(jf(lax.igamma)))(a, x)), want, rtol=1e-4)

    def dens(a):
        return np.exp((a - 1) * np.log(x) - x - sc.gammaln(a))

    h = 1e-4
    want = (dens(a + h) - 2 * dens(a) + dens(a - h)) / h**2
    np.testing.assert_allclose(float(d(d(d(lax.igamma, 0), 0), 1)(a, x)), want, rtol=1e-6)


def test_jit_vmap_and_grad_under_vmap():
    a = np.array([[0.5, 3.0, 10.0], [40.0, 0.05, 7.0]])
    x = np.array([[0.1, 5.0, 9.5], [45.0, 1e-3, 20.0]])
    want = sc.gammainc(a, x)
    _rel(blu.jit(lax.igamma)(a, x), want, 1e-13)
    _rel(blu.vmap(lax.igamma)(a, x), want, 1e-13)
    _rel(blu.vmap(lax.igammac, (None, 0))(np.float64(3.0), x[0]), sc.gammaincc(3.0, x[0]), 1e-13)
    g = blu.vmap(blu.vmap(blu.grad(lax.igamma, argnums=1)))(a, x)
    _rel(g, np.exp((a - 1) * np.log(x) - x - sc.gammaln(a)), 1e-12)
    gj = blu.jit(blu.grad(lambda a: bnp.sum(lax.igamma(a, x))))(a)
    _rel(gj, np.asarray(lax.igamma_grad_a(a, x)), 1e-12)


# ---- betainc ---------------------------------------------------------------------------------

_AB = st.floats(0.02, 300.0)


@_FEWER
@given(_points(_AB, _AB, st.one_of(st.floats(1e-6, 1 - 1e-6), st.floats(0.0, 1.0))))
def test_betainc_against_scipy(points):
    got_s = np.asarray(lax.betainc(*points))
    for a, b, x, got in zip(*points, got_s, strict=True):
        # the factor x^a (1-x)^b / B(a, b) in logs: its rounding grows with a + b
        tol = 64 * EPS64 * (4.0 + a + b)
        np.testing.assert_allclose(got, sc.betainc(a, b, x), rtol=tol, atol=1e-300)


@_FEWER
@given(_points(st.floats(1.0, 5.0), st.floats(-1.5, 1.5), st.floats(-6.0, 6.0)))
def test_betainc_large_a_b_near_the_mean(points):
    # a, b in [10, 1e5] within a factor 30 of each other, x within 6 standard deviations of the
    # mean: x^a (1-x)^b / B(a, b) taken as the exp of a difference of (a + b)-sized logs lost
    # ~(a + b) ulps (3e-10 at a = b = 1e5); the answer is a few hundred ulps of scipy's
    log_a, log_ratio, k = points
    a = 10.0**log_a
    b = np.clip(a * 10.0**log_ratio, 10.0, 1e5)
    c = a + b
    x = a / c + k * np.sqrt(a * b / (c * c * (c + 1)))
    got = np.asarray(lax.betainc(a, b, x))
    np.testing.assert_allclose(got, sc.betainc(a, b, x), rtol=4096 * EPS64, atol=1e-300)


def test_betainc_special_values_and_dtypes():
    a = np.array([2.0, 2.0, 0.0, -1.0, 2.0, 2.0, 2.0, np.nan, 1.0])
    b = np.array([3.0, 3.0, 1.0, 1.0, 0.0, 3.0, 3.0, 1.0, 1.0])
    x = np.array([0.0, 1.0, 0.5, 0.5, 0.5, -0.1, 1.1, 0.5, 0.25])
    got = np.asarray(lax.betainc(a, b, x))
    np.testing.assert_array_equal(np.isnan(got), [0, 0, 1, 1, 1, 1, 1, 1, 0])
    assert got[0] == 0 and got[1] == 1 and got[8] == 0.25
    for dt, tol in ((np.float32, 512 * EPS32), (np.float16, 8e-3)):
        a, b, x = (np.array(v, dt) for v in ([0.5, 3.0, 20.0], [2.0, 0.7, 30.0], [0.3, 0.9, 0.4]))
        got = lax.betainc(a, b, x)
        assert got.dtype == dt
        _rel(got, sc.betainc(*(v.astype(np.float64) for v in (a, b, x))), tol, atol=tol)


def test_betainc_one_small_parameter_one_huge_in_float32():
    # x^a (1-x)^b took log(1 - x) of 1 - x rounded: b log(1 - 1e-8) was 0 in float32, so
    # I_x(0.5, 5e7) at 1e-8 was 1.13 (and t.cdf at df = 1e6 1% off); now log1p(-x)
    a = np.array([0.5, 0.5, 2.0, 5e5], np.float32)
    b = np.array([5e5, 5e7, 5e5, 0.5], np.float32)
    x = np.array([1e-6, 1e-8, 1e-6, 1 - 1e-6], np.float32)
    want = sc.betainc(*(v.astype(np.float64) for v in (a, b, x)))
    _rel(lax.betainc(a, b, x), want, 64 * EPS32, atol=64 * EPS32)


@_FEWER
@given(_points(st.floats(0.3, 30.0), st.floats(0.3, 30.0), st.floats(0.02, 0.98)))
def test_betainc_gradients(points):
    # elementwise: the gradient of the sum is each point's derivative
    grads = blu.grad(lambda a, b, x: bnp.sum(lax.betainc(a, b, x)), argnums=(0, 1, 2))(*points)
    for a, b, x, ga, gb, gx in zip(*points, *map(np.asarray, grads), strict=True):
        dens = np.exp((a - 1) * np.log(x) + (b - 1) * np.log1p(-x) - sc.betaln(a, b))
        np.testing.assert_allclose(float(gx), dens, rtol=1e-11)
        h = 1e-5
        # differences of the smaller of I and 1 - I (scipy's complement is I_{1-x}(b, a))
        if sc.betainc(a, b, x) < 0.5:
            da = _fd(lambda v: sc.betainc(v, b, x), a, h * a)
            db = _fd(lambda v: sc.betainc(a, v, x), b, h * b)
        else:
            da = -_fd(lambda v: sc.betainc(b, v, 1 - x), a, h * a)
            db = -_fd(lambda v: sc.betainc(v, a, 1 - x), b, h * b)
        np.testing.assert_allclose(float(ga), da, rtol=1e-5, atol=1e-12)
        np.testing.assert_allclose(float(gb), db, rtol=1e-5, atol=1e-12)


def test_betainc_second_derivatives_jit_vmap():
    a, b, x = np.float64(2.5), np.float64(4.0), np.float64(0.3)
    h = 1e-4
    hab = blu.grad(blu.grad(lax.betainc, argnums=0), argnums=1)(a, b, x)
    want = (sc.betainc(a + h, b + h, x) - sc.betainc(a + h, b - h, x)
            - sc.betainc(a - h, b + h, x) + sc.betainc(a - h, b - h, x)) / (4 * h * h)  # fmt: skip
    np.testing.assert_allclose(float(hab), want, rtol=1e-5)
    # d2I/dx2 = density * ((a - 1) / x - (b - 1) / (1 - x))
    dens = np.exp((a - 1) * np.log(x) + (b - 1) * np.log1p(-x) - sc.betaln(a, b))
    hxx = blu.grad(blu.grad(lax.betainc, argnums=2), argnums=2)(a, b, x)
    np.testing.assert_allclose(float(hxx), dens * ((a - 1) / x - (b - 1) / (1 - x)), rtol=1e-11)
    A, B, X = np.array([[1.0, 2.0], [0.3, 50.0]]), np.array([[3.0, 4.0], [9.0, 45.0]]), 0.6
    X = np.full((2, 2), X)
    want = sc.betainc(A, B, X)
    _rel(blu.jit(lax.betainc)(A, B, X), want, 1e-13)
    _rel(blu.vmap(blu.vmap(lax.betainc))(A, B, X), want, 1e-13)
    g = blu.vmap(blu.grad(lax.betainc, argnums=2))(A[0], B[0], X[0])
    _rel(g, np.exp((A[0] - 1) * np.log(0.6) + (B[0] - 1) * np.log(0.4) - sc.betaln(A[0], B[0])),
         1e-12)  # fmt: skip


def test_igamma_at_a_zero_is_scipys_and_jaxs():
    # P(0, x) = 1 and Q(0, x) = 0 for x > 0 (scipy's gammainc and JAX 0.10's igamma); it was
    # NaN. P(0, 0) stays NaN; the derivative in a at a = 0 is NaN (not the select's 0)
    a = np.array([0.0, 0.0, 0.0, 0.0, -1.0])
    x = np.array([1.0, 5.0, np.inf, 0.0, 1.0])
    for fn, ref in ((lax.igamma, sc.gammainc), (lax.igammac, sc.gammaincc)):
        for f in (fn, blu.jit(fn)):
            np.testing.assert_array_equal(np.asarray(f(a, x)), ref(a, x))
    da = blu.jvp(lax.igamma, (a[:2], x[:2]), (np.ones(2), np.zeros(2)))[1]
    assert np.isnan(np.asarray(da)).all()
