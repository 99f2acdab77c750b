"""blu.scipy.special against scipy.special in float64 (values, NaN positions), float32 input,
gradients against central differences, and jit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special as ss
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu.scipy import special as S

X = np.linspace(-4.7, 6.3, 23)  # avoids the poles of gamma at non-positive integers
P = np.linspace(0.01, 0.99, 17)
POS = np.abs(X) + 0.1

CASES = [
    ("erf", (X,)),
    ("erfc", (X,)),
    ("erfinv", (2 * P - 1,)),
    ("gammaln", (X,)),
    ("gamma", (X,)),
    ("gammasgn", (X,)),
    ("digamma", (X,)),
    ("betaln", (POS, 2.5)),
    ("poch", (X, 2.3)),
    ("expit", (X,)),
    ("logit", (P,)),
    ("ndtr", (X,)),
    ("ndtri", (P,)),
    ("log_ndtr", (np.linspace(-60, 8, 35),)),
    ("entr", (X,)),
    ("xlogy", (np.concatenate([X, [0.0]]), np.concatenate([POS, [0.0]]))),
    ("xlog1py", (np.concatenate([X, [0.0]]), np.concatenate([POS, [-1.0]]))),
    ("rel_entr", (np.abs(X) - 1, np.abs(X[::-1]))),
    ("kl_div", (np.abs(X) - 1, np.abs(X[::-1]))),
    ("factorial", (np.arange(-2.0, 9.0),)),
]


@pytest.mark.parametrize("name, args", CASES, ids=[c[0] for c in CASES])
def test_against_scipy_float64(name, args):
    got = np.asarray(getattr(S, name)(*args))
    with np.errstate(all="ignore"):
        want = getattr(ss, name)(*args)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-12)
    jitted = np.asarray(blu.jit(getattr(S, name))(*args))
    np.testing.assert_allclose(jitted, want, rtol=1e-5, atol=1e-6)


def test_multigammaln_polygamma_softmax_family():
    a = np.array([3.0, 5.5, 10.25])
    np.testing.assert_allclose(np.asarray(S.multigammaln(a, 3)), ss.multigammaln(a, 3), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(S.polygamma(2, a)), ss.polygamma(2, a), rtol=1e-10)
    m = np.random.default_rng(0).normal(size=(3, 4))
    np.testing.assert_allclose(
        np.asarray(S.logsumexp(m, axis=1)), ss.logsumexp(m, axis=1), rtol=1e-12
    )
    np.testing.assert_allclose(np.asarray(S.softmax(m, axis=0)), ss.softmax(m, axis=0), rtol=1e-12)
    np.testing.assert_allclose(
        np.asarray(S.log_softmax(m, axis=-1)), ss.log_softmax(m, axis=-1), rtol=1e-12
    )


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4)])
def test_softmax_and_log_softmax_default_to_all_elements(shape):
    """``axis=None`` by default, as ``jax.scipy.special`` and SciPy (it was ``blu.nn``'s -1):
    the whole array sums to 1; the float64 closed form over all elements is the reference."""
    x = np.random.default_rng(1).normal(size=shape) * 3
    lse = np.log(np.exp(x - x.max()).sum()) + x.max()
    tol = 16 * np.finfo(np.float64).eps * x.size
    np.testing.assert_allclose(np.asarray(S.softmax(x)), np.exp(x - lse), rtol=tol, atol=tol)
    np.testing.assert_allclose(np.asarray(S.log_softmax(x)), x - lse, rtol=tol, atol=tol)
    jitted = blu.jit(S.softmax)(x.astype(np.float32))
    tol32 = 16 * np.finfo(np.float32).eps * x.size
    np.testing.assert_allclose(np.asarray(jitted), np.exp(x - lse), rtol=tol32, atol=tol32)


def test_integers_become_float32_and_errors():
    assert S.gammaln(np.arange(1, 4)).dtype == np.float32
    assert S.erf(np.float32(0.5)).dtype == np.float32
    with pytest.raises(blu.errors.BluValueError, match="math.factorial"):
        S.factorial(5, exact=True)


@pytest.mark.parametrize("name", ["log_ndtr", "ndtr", "gammaln", "expit", "entr", "logit"])
def test_gradients_central_differences(name):
    f = getattr(S, name)
    xs = (
        np.array([0.2, 0.7, 1.9])
        if name in ("entr", "logit")
        else np.array([-11.7, -1.3, 0.4, 2.2])
    )
    xs = xs[xs < 1] if name == "logit" else xs
    g = np.asarray(blu.vmap(blu.grad(f))(xs))
    h = 1e-6
    fd = (np.asarray(f(xs + h)) - np.asarray(f(xs - h))) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-8)


def test_normal_quantile_and_log_cdf_in_the_tails():
    # 2p - 1 rounds to -1 for small p: ndtri gave -inf below ~1e-17 (float64), ~1e-8 (float32)
    p = np.concatenate([np.logspace(-300, -1, 300), [1e-310, 0.02425, 0.5, 1 - 1e-12]])
    want = ss.ndtri(p)
    np.testing.assert_allclose(np.asarray(S.ndtri(p)), want, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(blu.jit(S.ndtri)(p)), want, rtol=1e-14)
    p32 = np.logspace(-37, -1, 80).astype(np.float32)
    want32 = ss.ndtri(p32.astype(np.float64))
    np.testing.assert_allclose(np.asarray(S.ndtri(p32)), want32, rtol=4e-6)
    edges = np.array([0.0, -0.0, 1.0, -0.5, 1.5, np.nan])
    np.testing.assert_array_equal(np.asarray(S.ndtri(edges)), ss.ndtri(edges))
    # the upper tail of log_ndtr: log1p(-ndtr(-x)), tiny and negative, not 0
    x = np.array([1.0, 5.0, 10.0, 20.0, 37.0])
    np.testing.assert_allclose(np.asarray(S.log_ndtr(x)), ss.log_ndtr(x), rtol=1e-11)


def test_gamma_and_poch_at_the_poles():
    # (gammasgn(NaN) was -1: NaN fell through every comparison to the negative branch)
    z = np.array([0.0, -0.0, -1.0, -2.0, np.nan, np.inf, -np.inf])
    np.testing.assert_array_equal(np.asarray(S.gamma(z)), ss.gamma(z))
    np.testing.assert_array_equal(np.asarray(S.gammasgn(z)), ss.gammasgn(z))
    z = np.array([0.0, 0.0, 1.0, -1.0, -2.0, -3.0, -2.0, 0.5, -1.5, 3.0])
    m = np.array([0.0, 1.0, 0.0, 2.0, 1.0, 2.0, 0.5, 2.5, 2.0, -1.0])
    np.testing.assert_allclose(np.asarray(S.poch(z, m)), ss.poch(z, m), rtol=1e-13, atol=0)


def test_gradients_at_the_branch_points():
    # a tie between two branches (clip, maximum) halves the gradient there
    for x0 in (0.0, -10.0):
        want = np.exp(-x0 * x0 / 2) / math.sqrt(2 * math.pi) / ss.ndtr(x0)
        # (below -10 the asymptotic series: its truncation leaves ~1e-8)
        assert float(blu.grad(S.log_ndtr)(np.float64(x0))) == pytest.approx(want, rel=1e-7)
    p0 = 0.02425
    want = math.sqrt(2 * math.pi) * math.exp(ss.ndtri(p0) ** 2 / 2)
    assert float(blu.grad(S.ndtri)(np.float64(p0))) == pytest.approx(want, rel=1e-8)


@settings(deadline=None, max_examples=40)
@given(st.integers(1, 4), st.floats(np.log(8.0), np.log(1e12)), st.booleans())
def test_betaln_keeps_its_digits_for_a_large_argument(n, log_b, swap):
    """``B(n, b) = (n-1)! / (b (b+1) ... (b+n-1))`` for an integer ``n``: the closed form, summed
    in float64 logs. ``gammaln(b) - gammaln(n + b)`` of two huge values lost every digit
    (float32 ``betaln(1, 1e6)`` was -13.0 for -13.8155; float64 ``betaln(1, 1e15)`` was 0)."""
    b = float(np.exp(log_b))
    want = math.lgamma(n) - sum(math.log(b + k) for k in range(n))
    dwant = -sum(1.0 / (b + k) for k in range(n))  # d/db, the closed form's derivative
    args = (b, float(n)) if swap else (float(n), b)
    got = float(S.betaln(*map(np.float64, args)))
    assert got == pytest.approx(want, rel=1e-13, abs=1e-13)
    grad = blu.grad(S.betaln, argnums=0 if swap else 1)(*map(np.float64, args))
    assert float(grad) == pytest.approx(dwant, rel=1e-9)
    if b < 1e6:  # float32: a few ulps of the result
        got32 = float(S.betaln(*map(np.float32, args)))
        assert got32 == pytest.approx(want, rel=16 * float(np.finfo(np.float32).eps), abs=1e-6)


@pytest.mark.parametrize(
    "n",
    [1, 2.0, 1.5, -1, np.array([0, 1, 2, 3]), np.array([[0.0], [2.0]]), [np.nan, 1, -2, 0.5]],
    ids=str,
)
def test_polygamma_orders_as_arrays_and_non_integers(n):
    """``n`` is integer-valued array-like, broadcast against ``x`` (JAX's and scipy's); NaN for a
    negative or fractional order. An array raised Python's TypeError from ``int(n)`` and 1.5
    was silently taken as 1. References: scipy's values, and closed forms for orders 0 and 1
    at the integers (``-gamma_E + H_{x-1}``, ``pi^2/6 - sum_{k<x} 1/k^2``)."""
    x = np.array([0.5, 2.0, 3.5, -1.5])
    got = np.asarray(S.polygamma(n, x))
    with np.errstate(invalid="ignore"):
        want = ss.polygamma(n, x)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-10)
    jitted = np.asarray(blu.jit(lambda x: S.polygamma(n, x))(x))
    np.testing.assert_allclose(jitted, want, rtol=1e-10)
    k = np.array([1.0, 2.0, 3.0])
    both = np.asarray(S.polygamma(np.array([0, 1, 1]), k))
    h = np.array([0.0, 1.0, 1.5])  # H_{x-1}
    assert both[0] == pytest.approx(-np.euler_gamma + h[0], rel=1e-12)
    assert both[1] == pytest.approx(math.pi**2 / 6 - 1.0, rel=1e-12)
    assert both[2] == pytest.approx(math.pi**2 / 6 - 1.25, rel=1e-12)


def test_log_ndtr_float64_keeps_full_precision_in_the_lower_tail():
    """float64 switches to the asymptotic series at -20 (with terms to 1/x^14), not -10: below
    -10 the 5-term series left ~1.6e-9 relative error (first omitted term 945/x^10). scipy's
    float64 log_ndtr is the reference; the derivative is ``pdf(x) / ndtr(x)``."""
    x = np.concatenate([np.linspace(-60.0, -5.0, 1101), [-20.0, -10.0]])
    want = ss.log_ndtr(x)
    np.testing.assert_allclose(np.asarray(S.log_ndtr(x)), want, rtol=4e-15)
    np.testing.assert_allclose(np.asarray(blu.jit(S.log_ndtr)(x)), want, rtol=4e-15)
    xs = np.array([-30.0, -20.0, -19.99, -12.0])
    dwant = np.exp(-xs * xs / 2) / math.sqrt(2 * math.pi) / ss.ndtr(xs)
    np.testing.assert_allclose(np.asarray(blu.vmap(blu.grad(S.log_ndtr))(xs)), dwant, rtol=1e-12)


# i0, i1, i0e, i1e, zeta, beta, comb, boxcox, boxcox1p: scipy's float64 values are the reference
_NEW = {
    "i0": (ss.i0, 1),
    "i1": (ss.i1, 1),
    "i0e": (ss.i0e, 1),
    "i1e": (ss.i1e, 1),
    "zeta": (ss.zeta, 2),
    "beta": (ss.beta, 2),
    "comb": (ss.comb, 2),
    "boxcox": (ss.boxcox, 2),
    "boxcox1p": (ss.boxcox1p, 2),
}
_SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, -2.5, 30.0, -30.0, np.inf, -np.inf, np.nan]


def _values(n):
    ordinary = st.floats(-40, 40, allow_nan=False).map(lambda v: round(v, 3))
    return st.lists(st.one_of(ordinary, st.sampled_from(_SPECIAL)), min_size=n, max_size=n)


@st.composite
def _operands(draw, arity):
    shape = tuple(draw(st.lists(st.sampled_from([0, 1, 2, 3]), min_size=0, max_size=2)))
    size = int(np.prod(shape, dtype=int))
    xs = [np.array(draw(_values(size)), np.float64).reshape(shape) for _ in range(arity)]
    if arity == 2 and draw(st.booleans()):  # a scalar second operand broadcasts
        xs[1] = np.float64(draw(st.sampled_from(_SPECIAL[:10])))
    return xs


@pytest.mark.parametrize("name", sorted(_NEW))
@settings(deadline=None, max_examples=25)
@given(data=st.data())
def test_new_special_functions_against_scipy(name, data):
    ref, arity = _NEW[name]
    args = data.draw(_operands(arity))
    with np.errstate(all="ignore"):
        want = np.asarray(ref(*args), np.float64)
    got = np.asarray(getattr(S, name)(*args))
    assert got.dtype == np.float64 and got.shape == want.shape
    if name == "beta":  # JAX's formula at the gammas' poles (0, -1, ...): not scipy's limits
        a, b = np.broadcast_arrays(*args)
        with np.errstate(all="ignore"):
            pole = [(v <= 0) & (np.floor(v) == v) | np.isinf(v) for v in (a, b, a + b)]
        keep = ~(pole[0] | pole[1] | pole[2])
    elif name == "zeta":  # XLA's domain, x >= 1 and q > 0 (scipy continues it beyond)
        x, q = np.broadcast_arrays(*args)
        keep = (x >= 1) & (q > 0)
    else:
        keep = np.ones(want.shape, bool)
    jitted = np.asarray(blu.jit(getattr(S, name))(*args))
    for out in (got, jitted):
        np.testing.assert_array_equal(np.isnan(out[keep]), np.isnan(want[keep]))
        np.testing.assert_allclose(out[keep], want[keep], rtol=1e-9, atol=1e-300)


@pytest.mark.parametrize(
    "name, args",
    [
        ("i0", (np.array([-3.0, -0.4, 0.0, 0.7, 9.0]),)),
        ("i1", (np.array([-3.0, -0.4, 0.0, 0.7, 9.0]),)),
        ("i0e", (np.array([-3.0, -0.4, 0.7, 9.0]),)),
        ("i1e", (np.array([-3.0, -0.4, 0.0, 0.7, 9.0]),)),
        ("zeta", (np.array([1.5, 2.0, 4.5]), np.array([0.3, 1.0, 7.0]))),
        ("beta", (np.array([0.5, 2.0, 3.5, -0.5]), np.array([1.5, 0.3, 12.0, 2.2]))),
        ("comb", (np.array([5.0, 7.5, 20.0]), np.array([2.0, 3.2, 10.5]))),
        ("boxcox", (np.array([0.5, 2.0, 7.0]), np.array([0.3, -1.2, 2.0]))),
        ("boxcox1p", (np.array([-0.5, 2.0, 7.0]), np.array([0.3, -1.2, 2.0]))),
    ],
)
def test_new_special_gradients_central_differences(name, args):
    f = getattr(S, name)
    h = 1e-6
    for i in range(len(args)):
        if name == "zeta" and i == 0:
            continue  # JAX defines no derivative in x
        g = np.asarray(blu.vmap(blu.grad(f, argnums=i))(*args))
        up = [a + h if j == i else a for j, a in enumerate(args)]
        dn = [a - h if j == i else a for j, a in enumerate(args)]
        fd = (np.asarray(f(*up)) - np.asarray(f(*dn))) / (2 * h)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_new_special_dtypes_and_errors():
    assert S.i0(np.arange(3)).dtype == np.float32
    assert S.comb(5, 2).dtype == np.float32
    assert S.i1e(np.float32(0.5)).dtype == np.float32
    eps32 = float(np.finfo(np.float32).eps)
    assert float(S.comb(10, 3)) == pytest.approx(120.0, rel=16 * eps32)
    # Python numbers: float32 (the promotion with Python scalars raised BluTypeError)
    assert S.betaln(5, 2).dtype == np.float32
    assert float(S.betaln(5, 2)) == pytest.approx(-math.log(30.0), rel=16 * eps32)
    assert float(S.comb(4, 3, repetition=True)) == pytest.approx(math.comb(6, 3), rel=16 * eps32)
    with pytest.raises(blu.errors.BluValueError, match="math.comb"):
        S.comb(5, 2, exact=True)
    with pytest.raises(blu.errors.BluValueError, match="Riemann"):
        S.zeta(2.0)


def test_incomplete_gamma_and_beta_promote_broadcast_and_differentiate():
    a = np.array([[0.5], [3.0], [40.0]])
    x = np.array([0.1, 2.5, 45.0])
    np.testing.assert_allclose(np.asarray(S.gammainc(a, x)), ss.gammainc(a, x), rtol=1e-13)
    np.testing.assert_allclose(np.asarray(S.gammaincc(a, x)), ss.gammaincc(a, x), rtol=1e-13)
    b, p = np.array([2.0, 0.5, 30.0]), np.array([[0.1], [0.5], [0.97]])
    np.testing.assert_allclose(np.asarray(S.betainc(a, b, p)), ss.betainc(a, b, p), rtol=1e-13)
    got = S.gammainc(2, np.int32(3))  # integers computed in float32, as JAX
    assert got.dtype == np.float32
    np.testing.assert_allclose(float(got), ss.gammainc(2, 3), rtol=4e-7)
    assert S.betainc(2, 3, np.float32(0.25)).dtype == np.float32
    assert float(S.gammainc(0.0, 1.0)) == ss.gammainc(0.0, 1.0) == 1.0
    assert np.isnan(float(S.betainc(1.0, 1.0, 1.5)))
    g = blu.grad(lambda x: S.gammainc(np.float64(3.0), x))(np.float64(2.0))
    np.testing.assert_allclose(float(g), 4.0 * np.exp(-2.0) / 2.0, rtol=1e-13)


_XS = st.lists(st.floats(1e-6, 700.0) | st.floats(1e-3, 2.0), min_size=1, max_size=8)


@settings(deadline=None, max_examples=10)
@given(st.lists(st.floats(-25.0, 25.0) | st.floats(25.0, 1e8) | st.floats(1e-12, 1e-3),
                min_size=1, max_size=8))  # fmt: skip
def test_erfcx_against_scipy(xs):
    x = np.array(xs)
    # exp(x^2) amplifies the rounding of x^2 for negative x: its condition number is ~2 x^2
    tol = 32 * np.finfo(np.float64).eps * (1.0 + np.where(x < 0, x * x, 0.0))
    np.testing.assert_array_less(np.abs(np.asarray(S.erfcx(x)) / ss.erfcx(x) - 1), tol)


@settings(deadline=None, max_examples=10)
@given(_XS)
def test_exponential_integrals_against_scipy(xs):
    x = np.array(xs)
    # E_n and Ei change by a relative ~x per unit relative change of x: tolerances grow with x
    tol = 64 * np.finfo(np.float64).eps * (1.0 + x)

    def close(got, want, keep=True):
        err = np.abs(np.asarray(got) - want)
        assert np.all((err <= tol * np.abs(want) + 1e-300) | ~keep), (x, got, want)

    close(S.exp1(x), ss.exp1(x))
    close(S.expi(-x), ss.expi(-x))
    close(S.expi(x), ss.expi(x), np.abs(x - 0.3725) > 0.05)  # Ei's zero: relative digits lost
    ns = np.array([0, 2, 3, 7, 40])[:, None]  # one call for the five orders (n broadcasts)
    close(S.expn(ns, x), ss.expn(ns, x))


def test_exponential_integrals_special_values_dtypes_and_derivatives():
    x = np.array([0.0, np.inf, -1.0, np.nan, -np.inf])
    with np.errstate(all="ignore"):
        for name in ("exp1", "expi", "erfcx"):
            got, want = np.asarray(getattr(S, name)(x)), getattr(ss, name)(x)
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
            np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-14)
    n = np.array([0.0, 1.0, 3.0, -1.0, 2.0, 1.5])
    got = np.asarray(S.expn(n, np.array([0.0, 0.0, 0.0, 1.0, -1.0, 1.0])))
    np.testing.assert_array_equal(got[:3], [np.inf, np.inf, 0.5])
    assert np.all(np.isnan(got[3:]))  # n < 0, x < 0, a non-integer n
    assert S.erfcx(np.float32(30.0)).dtype == np.float32 and S.expi(2).dtype == np.float32
    assert S.expn(2, np.float16(3.0)).dtype == np.float16
    np.testing.assert_allclose(float(S.exp1(np.float32(0.5))), ss.exp1(0.5), rtol=1e-6)
    x = np.float64(1.7)
    np.testing.assert_allclose(float(blu.grad(S.exp1)(x)), -np.exp(-x) / x, rtol=1e-14)
    np.testing.assert_allclose(float(blu.grad(S.expi)(x)), np.exp(x) / x, rtol=1e-14)
    np.testing.assert_allclose(float(blu.grad(S.expi)(-x)), np.exp(-x) / -x, rtol=1e-14)
    g = blu.grad(lambda v: S.expn(4, v))(x)
    np.testing.assert_allclose(float(g), -ss.expn(3, x), rtol=1e-13)
    g = blu.grad(S.erfcx)(x)
    np.testing.assert_allclose(float(g), 2 * x * ss.erfcx(x) - 2 / math.sqrt(math.pi), rtol=1e-12)
    v = np.array([0.2, 3.0, 60.0])
    np.testing.assert_allclose(np.asarray(blu.jit(S.expi)(v)), ss.expi(v), rtol=1e-13)
    np.testing.assert_allclose(np.asarray(blu.vmap(S.exp1)(v)), ss.exp1(v), rtol=1e-13)
    gv = blu.vmap(blu.grad(lambda v: S.expn(2, v)))(v)
    np.testing.assert_allclose(np.asarray(gv), -ss.expn(1, v), rtol=1e-13)
