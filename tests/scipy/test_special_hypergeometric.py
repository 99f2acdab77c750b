"""blu.scipy.special's loggamma, bernoulli, spence, bessel_jn, hyp1f1 and hyp2f1 against
scipy.special in float64 (hypothesis-drawn points and special values), float32 with tolerances
from its eps, jit and vmap, and gradients against central differences in float64."""

from __future__ import annotations

import itertools
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
import scipy.special as ss
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu.core.errors import BluTypeError, BluValueError
from blu.scipy import special as S

EPS32 = float(np.finfo(np.float32).eps)
EPS64 = float(np.finfo(np.float64).eps)


def _floats(lo: float, hi: float, n: int = 8):
    return st.lists(
        st.floats(lo, hi, allow_nan=False, allow_infinity=False, allow_subnormal=False),
        min_size=1,
        max_size=n,
    ).map(np.array)


def _close(got, want, rtol, atol=0.0):
    got = np.asarray(got)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _central(f, x, h):
    return (f(x + h) - f(x - h)) / (2 * h)


# ---- loggamma ------------------------------------------------------------------------------


@settings(deadline=None, max_examples=30)
@given(_floats(1e-3, 1e3))
def test_loggamma_positive_against_scipy(x):
    got = S.loggamma(x)
    assert got.dtype == np.float64
    _close(got, ss.loggamma(x), rtol=100 * EPS64, atol=100 * EPS64)


def test_loggamma_special_values_dtypes_and_grad():
    x = np.array([-2.5, -1.0, 0.0, np.nan, np.inf, 1.0, 2.0])
    got = np.asarray(S.loggamma(x))
    want = np.array([np.nan, np.nan, np.nan, np.nan, np.inf, 0.0, 0.0])  # JAX's: NaN at x <= 0
    _close(got, want, rtol=0, atol=1e-15)
    assert S.loggamma(3).dtype == np.float32
    x32 = np.linspace(0.1, 30, 17).astype(np.float32)
    _close(S.loggamma(x32), ss.loggamma(x32.astype(np.float64)), rtol=50 * EPS32, atol=50 * EPS32)
    g = blu.grad(S.loggamma)(np.float64(3.7))
    np.testing.assert_allclose(g, ss.digamma(3.7), rtol=1e-12)
    with pytest.raises(BluTypeError, match="complex"):
        S.loggamma(np.array([1 + 1j]))


# ---- bernoulli -----------------------------------------------------------------------------


def _bernoulli_fractions(n):
    """B_0 .. B_n by the recurrence sum_k C(m+1, k) B_k = 0 (B_1 = -1/2)."""
    from math import comb

    b = [Fraction(1)]
    for m in range(1, n + 1):
        b.append(-sum(comb(m + 1, k) * b[k] for k in range(m)) / (m + 1))
    return np.array([float(v) for v in b])


@pytest.mark.parametrize("n", [0, 1, 2, 3, 10, 31, 60])
def test_bernoulli_against_fractions(n):
    got = S.bernoulli(n)
    assert got.shape == (n + 1,) and got.dtype == np.float32
    np.testing.assert_allclose(got, _bernoulli_fractions(n), rtol=2 * EPS32, atol=0)


def test_bernoulli_large_overflow_and_errors():
    got = np.asarray(S.bernoulli(300))
    with np.errstate(over="ignore"):
        want = ss.bernoulli(300).astype(np.float32)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_allclose(got[np.isfinite(want)], want[np.isfinite(want)], rtol=4 * EPS32)
    with pytest.raises(BluValueError, match="non-negative"):
        S.bernoulli(-1)
    with pytest.raises(BluTypeError, match="concrete integer"):
        S.bernoulli(2.5)
    with pytest.raises(BluTypeError, match="concrete integer"):
        blu.jit(S.bernoulli)(3)


# ---- spence --------------------------------------------------------------------------------


@settings(deadline=None, max_examples=40)
@given(_floats(0.0, 1e6))
def test_spence_against_scipy(x):
    got = S.spence(x)
    assert got.dtype == np.float64
    _close(got, ss.spence(x), rtol=20 * EPS64, atol=20 * EPS64)


def test_spence_special_values_float32_jit_vmap_and_grad():
    x = np.array([-1.0, -0.0, 0.0, 0.5, 1.0, 2.0, np.inf, np.nan, 1e-300])
    with np.errstate(all="ignore"):
        want = ss.spence(x)
    _close(S.spence(x), want, rtol=20 * EPS64, atol=1e-300)
    x32 = np.linspace(0.0, 12.0, 37).astype(np.float32)
    got32 = S.spence(x32)
    assert got32.dtype == np.float32
    _close(got32, ss.spence(x32.astype(np.float64)), rtol=20 * EPS32, atol=20 * EPS32)
    xs = np.linspace(0.01, 9.0, 13)
    _close(blu.jit(S.spence)(xs), ss.spence(xs), rtol=20 * EPS64, atol=20 * EPS64)
    _close(blu.vmap(S.spence)(xs), ss.spence(xs), rtol=20 * EPS64, atol=20 * EPS64)
    for x0 in [0.2, 0.5, 1.0, 1.7, 3.0, 40.0]:
        g = blu.grad(S.spence)(np.float64(x0))
        fd = _central(lambda v: ss.spence(v), x0, 1e-6 * max(x0, 1.0))
        np.testing.assert_allclose(g, fd, rtol=1e-7)
    with pytest.raises(BluTypeError, match="float32 or float64"):
        S.spence(np.array([1, 2]))


# ---- bessel_jn -----------------------------------------------------------------------------


@settings(deadline=None, max_examples=30)
@given(_floats(-20.0, 20.0), st.integers(0, 15))
def test_bessel_jn_against_scipy(z, v):
    got = S.bessel_jn(z, v=v)
    assert got.shape == (v + 1, *z.shape) and got.dtype == np.float64
    _close(got, ss.jv(np.arange(v + 1)[:, None], z), rtol=0, atol=200 * EPS64)


def test_bessel_jn_special_values_float32_transforms_and_grad():
    z = np.array([0.0, -0.0, 1e-300, 3e-5, -2e-3, np.inf, -np.inf, np.nan, 35.0])
    got = S.bessel_jn(z, v=6, n_iter=80)
    _close(got, ss.jv(np.arange(7)[:, None], z), rtol=0, atol=1e-14)
    z32 = np.linspace(-15, 15, 31).astype(np.float32)
    got32 = S.bessel_jn(z32, v=5)
    assert got32.dtype == np.float32
    want = ss.jv(np.arange(6)[:, None], z32.astype(np.float64))
    _close(got32, want, rtol=0, atol=50 * EPS32)
    assert S.bessel_jn(2, v=1).dtype == np.float32
    zz = np.linspace(-9, 9, 12).reshape(3, 4)
    want = ss.jv(np.arange(4)[:, None, None], zz)
    _close(blu.jit(lambda x: S.bessel_jn(x, v=3))(zz), want, rtol=0, atol=100 * EPS64)
    vm = blu.vmap(lambda x: S.bessel_jn(x, v=3))(zz)  # (3, 4, 4): the batch axis first
    _close(vm, np.moveaxis(want, 1, 0), rtol=0, atol=100 * EPS64)
    for n, z0 in [(0, 0.7), (1, 2.3), (3, -4.1), (5, 12.0)]:
        g = blu.grad(lambda x, n=n: S.bessel_jn(x, v=5)[n])(np.float64(z0))
        fd = _central(lambda x, n=n: ss.jv(n, x), z0, 1e-6)
        np.testing.assert_allclose(g, fd, rtol=1e-7, atol=1e-9)


def test_bessel_jn_errors():
    with pytest.raises(BluTypeError, match="v must be a concrete integer"):
        S.bessel_jn(1.0, v=1.5)
    with pytest.raises(BluTypeError, match="n_iter must be a concrete integer"):
        S.bessel_jn(1.0, v=1, n_iter=None)
    with pytest.raises(BluValueError, match=r"v must be in \[0, n_iter\]"):
        S.bessel_jn(1.0, v=60)
    with pytest.raises(BluValueError, match=r"v must be in \[0, n_iter\]"):
        S.bessel_jn(1.0, v=-1)
    with pytest.raises(BluValueError, match="complex"):
        S.bessel_jn(np.array([1j]), v=1)


# ---- hyp1f1 --------------------------------------------------------------------------------


def _hyp1f1_bound(a, b, x):
    """The sum of the moduli of the series' terms, in the better of the frames x and -x
    (Kummer's): at most 1F1(|a|; b; |x|) and e^x 1F1(|b - a|; b; |x|) for b > 0; a float64
    evaluation is off by a small multiple of eps times it where the terms cancel."""
    with np.errstate(over="ignore"):
        return np.minimum(
            ss.hyp1f1(np.abs(a), b, np.abs(x)), np.exp(x) * ss.hyp1f1(np.abs(b - a), b, np.abs(x))
        )


@settings(deadline=None, max_examples=40)
@given(_floats(-12.0, 12.0), _floats(0.05, 12.0), _floats(-120.0, 120.0))
def test_hyp1f1_against_scipy(a, b, x):
    a, b, x = np.broadcast_arrays(a[:, None, None], b[None, :, None], x[None, None, :])
    got = np.asarray(S.hyp1f1(a, b, x))
    assert got.shape == a.shape and got.dtype == np.float64
    want = ss.hyp1f1(a, b, x)
    err = np.abs(got - want)
    np.testing.assert_array_less(err, 1e3 * EPS64 * (np.abs(want) + _hyp1f1_bound(a, b, x)))


def test_hyp1f1_special_values_and_large_x():
    inf, nan = np.inf, np.nan
    cases = [  # (a, b, x, want): JAX's conventions at a = 0, a = b, b = 0
        (0.0, 0.0, 1.0, 1.0),
        (0.0, 3.0, 2.0, 1.0),
        (2.0, 2.0, 3.0, np.exp(3.0)),
        (1.0, 0.0, 2.0, inf),
        (1.0, -2.0, 2.0, inf),
        (-1.0, -2.0, 2.0, 2.0),
        (1.0, 2.0, inf, inf),
        (1.0, 2.0, -inf, 0.0),
        (nan, 1.0, 1.0, nan),
        (1.0, 1.5, nan, nan),
        (1.5, -2.5, 3.0, ss.hyp1f1(1.5, -2.5, 3.0)),
        (1.5, -2.5, -3.0, ss.hyp1f1(1.5, -2.5, -3.0)),
        (-3.0, 2.5, -400.0, ss.hyp1f1(-3.0, 2.5, -400.0)),
        (2.0, 3.0, 0.0, 1.0),
        (0.5, 1.5, -1000.0, ss.hyp1f1(0.5, 1.5, -1000.0)),
        (3.0, 1.0, -700.0, ss.hyp1f1(3, 1, -700.0)),
        (0.5, 1.5, 600.0, ss.hyp1f1(0.5, 1.5, 600.0)),
        (2.5, 4.0, 300.0, ss.hyp1f1(2.5, 4.0, 300.0)),
    ]
    a, b, x, want = (np.array(v) for v in zip(*cases, strict=True))
    _close(S.hyp1f1(a, b, x), want, rtol=1e3 * EPS64)


def test_hyp1f1_float32_dtypes_jit_vmap_and_grad():
    a = np.array([0.5, 1.5, 3.0], np.float32)[:, None]
    x = np.linspace(-30, 30, 13).astype(np.float32)
    got = S.hyp1f1(a, np.float32(2.25), x)
    assert got.dtype == np.float32
    _close(got, ss.hyp1f1(a.astype(np.float64), 2.25, x.astype(np.float64)), rtol=100 * EPS32)
    assert S.hyp1f1(1, 2, 3).dtype == np.float32
    assert S.hyp1f1(np.float64(1), 2, 3).dtype == np.float64
    xs = np.linspace(-50, 150, 9)
    want = ss.hyp1f1(1.5, 2.5, xs)
    _close(blu.jit(S.hyp1f1)(1.5, 2.5, xs), want, rtol=1e3 * EPS64)
    _close(blu.vmap(lambda v: S.hyp1f1(1.5, 2.5, v))(xs), want, rtol=1e3 * EPS64)
    g = blu.grad(S.hyp1f1, argnums=(0, 1, 2))
    h = 1e-6
    for a0, b0, x0 in [(1.3, 2.2, 0.7), (0.5, 1.5, -20.0), (-1.5, 2.0, 3.0), (1.2, 3.4, -40.0)]:
        got = g(np.float64(a0), np.float64(b0), np.float64(x0))
        fd = [
            _central(lambda v: ss.hyp1f1(v, b0, x0), a0, h),
            _central(lambda v: ss.hyp1f1(a0, v, x0), b0, h),
            a0 / b0 * ss.hyp1f1(a0 + 1, b0 + 1, x0),  # DLMF 13.3.15
        ]
        np.testing.assert_allclose(np.array(got), fd, rtol=1e-7, atol=1e-10)
        np.testing.assert_allclose(got[2], _central(lambda v: ss.hyp1f1(a0, b0, v), x0, 1e-4))
    with pytest.raises(BluTypeError, match="hyp1f1: complex"):
        S.hyp1f1(1.0, 2.0, np.array([1j]))


# ---- hyp2f1 --------------------------------------------------------------------------------


def _hyp2f1_decimal(a, b, c, x):
    """2F1 and the sum of its terms' moduli in 50-digit decimals: the series, for x < 0 after
    Pfaff's transformation (1 - x)^-a 2F1(a, c - b; c; x / (x - 1)) (DLMF 15.8.1)."""
    with localcontext() as ctx:
        ctx.prec = 50
        a, b, c, x = (Decimal(float(v)) for v in (a, b, c, x))
        pref = Decimal(1)
        if x < 0:
            pref, b, x = (1 - x) ** (-a), c - b, x / (x - 1)
        t = s = moduli = Decimal(1)
        for k in range(50000):
            t = t * (a + k) * (b + k) / ((c + k) * (k + 1)) * x
            s, moduli = s + t, moduli + abs(t)
            if t == 0 or (k > -c and k > 30 and abs(t) < abs(s) * Decimal(10) ** -30):
                break
        return float(pref * s), float(abs(pref) * moduli)


def _nonpos_int(v):
    return (v <= 0) & (np.floor(v) == v)


_PARAM = st.one_of(
    st.floats(-8.0, 8.0, allow_subnormal=False), st.integers(-32, 32).map(lambda k: k / 4)
)


# ~100 points in 10 calls (each call of hyp2f1 costs a trace of its loops and rules, whatever
# its size; it was 40 calls of 1 to 4 points)
@settings(deadline=None, max_examples=10)
@given(st.lists(st.tuples(_PARAM, _PARAM, _PARAM, st.floats(-20.0, 0.98)), min_size=4, max_size=16))
def test_hyp2f1_against_decimal_series(points):
    """Off by at most a multiple of eps times the sum of the terms' moduli (the cancellation)."""
    a, b, c, x = (np.array(v) for v in zip(*points, strict=True))
    got = np.asarray(S.hyp2f1(a, b, c, x))
    assert got.dtype == np.float64
    for i in range(len(a)):
        if _nonpos_int(c[i]):
            continue
        want, moduli = _hyp2f1_decimal(a[i], b[i], c[i], x[i])
        assert abs(got[i] - want) <= 1e3 * EPS64 * (abs(want) + moduli), (points[i], got[i], want)


def _poly_fraction(a: int, b: int, c: int, x: Fraction) -> tuple[Fraction, Fraction]:
    """The terminating series of 2F1(a, b; c; x) in exact fractions, to its first 0 term, and
    the sum of its terms' moduli."""
    total = moduli = term = Fraction(1)
    for k in range(64):
        term = term * (a + k) * (b + k) / ((c + k) * (k + 1)) * x
        if term == 0:
            return total, moduli
        total, moduli = total + term, moduli + abs(term)
    raise AssertionError("no terminating series")


def test_hyp2f1_two_polynomial_parameters_around_a_pole_of_c():
    """b = -n ends the series before c = -n - gap's pole, a below c (JAX's is inf there): the
    lower degree is the polynomial, through Pfaff's (x < 0) and Euler's (x > 0.75)
    transformations too, whichever of a and b it is."""
    rows = []
    for n, gap, past, x, swap in itertools.product(
        range(5), (1, 3), (1, 4), (-20.0, -0.5, 0.3, 0.8, 0.98), (False, True)
    ):
        b, c = -n, -n - gap
        a = c - past
        want, moduli = _poly_fraction(a, b, c, Fraction(x))
        rows.append(((b, a) if swap else (a, b)) + (c, x, float(want), float(moduli)))
    a, b, c, x, want, moduli = (np.array(v, dtype=np.float64) for v in zip(*rows, strict=True))
    got = np.asarray(S.hyp2f1(a, b, c, x))
    np.testing.assert_array_less(np.abs(got - want), 1e3 * EPS64 * moduli)


def test_hyp2f1_polynomials_at_one_are_chu_vandermonde():
    """A polynomial at x = 1 is (c - b)_n / (c)_n for a = -n (DLMF 15.4.24), whatever the sign
    of c - a - b (JAX's is inf for c - a - b <= 0) and for c a pole above its degree."""
    rows = []
    for n, b, c in itertools.product(range(1, 6), (-7, -2, 0.5, 2.5, 5), (-8, -6, 0.5, 1, 3.5)):
        if c <= 0 and c >= -n or b == c:
            continue  # c's pole before the series ends; b = c is (1 - x)^n
        want = Fraction(1)
        for k in range(n):
            want *= Fraction(c - b + k) / Fraction(c + k)
        rows += [(-n, b, c, float(want)), (b, -n, c, float(want))]
    a, b, c, want = (np.array(v, dtype=np.float64) for v in zip(*rows, strict=True))
    got = np.asarray(S.hyp2f1(a, b, c, np.ones_like(a)))
    scale = np.maximum(1.0, np.abs(want))
    np.testing.assert_array_less(np.abs(got - want), 1e4 * EPS64 * scale)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_hyp2f1_high_degree_polynomials_at_one_keep_their_digits(dtype):
    """(c - b)_n / (c)_n as a product: hyp2f1(-30, 40, 2, 1) is 1577532 (the series and the
    connection formula cancel terms of 1e15 there)."""
    rows = []
    for n, b, c in itertools.product((15, 30), (20.0, 40.0, -35.0), (2.0, 7.5)):
        want = Fraction(1)
        for k in range(n):
            want *= Fraction(c - b + k) / Fraction(c + k)
        rows += [(-n, b, c, float(want))]
    a, b, c, want = (np.array(v, dtype=np.float64) for v in zip(*rows, strict=True))
    got = np.asarray(S.hyp2f1(*(v.astype(dtype) for v in (a, b, c, np.ones_like(a)))))
    eps = np.finfo(dtype).eps
    np.testing.assert_array_less(np.abs(got - want), 8 * 30 * eps * np.maximum(1, np.abs(want)))


def test_hyp2f1_against_scipy_and_special_values():
    rng = np.random.default_rng(0)
    a, b, c = rng.uniform(0.1, 5, (3, 200))
    x = rng.uniform(-5, 0.9, 200)
    _close(S.hyp2f1(a, b, c, x), ss.hyp2f1(a, b, c, x), rtol=1e-10)
    inf, nan = np.inf, np.nan
    cases = [  # JAX's conventions (and scipy's where they agree)
        (1.5, 2.0, 4.5, 1.0, ss.hyp2f1(1.5, 2.0, 4.5, 1.0)),
        (1.5, 2.0, 3.5, 1.0, inf),
        (1.5, 2.0, 3.0, 1.5, inf),
        (1.5, 2.0, -2.0, 0.5, inf),
        (1.5, 2.0, 0.0, 0.5, inf),
        (-2.0, 2.5, -3.0, 0.5, ss.hyp2f1(-2.0, 2.5, -3.0, 0.5)),
        (0.0, 2.0, 3.0, 0.5, 1.0),
        (1.5, 3.0, 3.0, 0.5, 0.5**-1.5),
        (3.0, 1.5, 3.0, -2.0, 3.0**-1.5),
        (2.0, 3.0, 4.0, 0.0, 1.0),
        (nan, 1.0, 2.0, 0.5, nan),
        (1.0, 1.0, 2.0, nan, nan),
        (-3.0, 1.5, 2.5, -50.0, ss.hyp2f1(-3.0, 1.5, 2.5, -50.0)),
        (1.0, 1.0, 2.0, 0.99, -np.log(0.01) / 0.99),
    ]
    a, b, c, x, want = (np.array(v) for v in zip(*cases, strict=True))
    _close(S.hyp2f1(a, b, c, x), want, rtol=1e3 * EPS64)


def test_hyp2f1_float32_dtypes_jit_vmap_and_grad():
    x32 = np.linspace(-5, 0.95, 9).astype(np.float32)
    got = S.hyp2f1(np.float32(1.5), np.float32(2.25), np.float32(3.5), x32)
    assert got.dtype == np.float32
    _close(got, ss.hyp2f1(1.5, 2.25, 3.5, x32.astype(np.float64)), rtol=100 * EPS32)
    assert S.hyp2f1(1, 2, 3, 0.5).dtype == np.float32
    xs = np.linspace(-30, 0.95, 9)
    want = ss.hyp2f1(1.5, 2.5, 4.25, xs)
    _close(blu.jit(S.hyp2f1)(1.5, 2.5, 4.25, xs), want, rtol=1e3 * EPS64)
    _close(blu.vmap(lambda v: S.hyp2f1(1.5, 2.5, 4.25, v))(xs), want, rtol=1e3 * EPS64)
    g = blu.grad(S.hyp2f1, argnums=(0, 1, 2, 3))
    h = 1e-5

    def ref(*p):
        return _hyp2f1_decimal(*p)[0]

    for p in [
        (1.3, 2.2, 3.1, 0.5),
        (0.5, 1.5, 2.5, -3.0),
        (-1.5, 2.0, 3.5, 0.7),
        (1.2, 3.4, 2.2, -0.4),
    ]:
        got = g(*map(np.float64, p))
        fd = [_central(lambda v, i=i: ref(*p[:i], v, *p[i + 1 :]), p[i], h) for i in range(4)]
        np.testing.assert_allclose(np.array(got), fd, rtol=1e-8, atol=1e-10)
        a0, b0, c0, x0 = p
        np.testing.assert_allclose(got[3], a0 * b0 / c0 * ref(a0 + 1, b0 + 1, c0 + 1, x0))
    with pytest.raises(BluTypeError, match="hyp2f1: complex"):
        S.hyp2f1(1.0, 2.0, 3.0, np.array([0.5j]))
