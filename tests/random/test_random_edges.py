"""jax.random's samplers at the edges of their arguments (infinite and far-tail bounds), eager
and jitted, with fixed keys so the tests are deterministic."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import scipy.special as ssp
import scipy.stats as st

import blu
from blu import random
from blu.core.errors import BluShapeError, BluTypeError

KEY = random.key(3)
N = 50_000


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
@pytest.mark.parametrize(
    "lower, upper", [(5.0, np.inf), (-np.inf, -5.0), (-np.inf, np.inf), (-1.0, 1.0), (3.0, 4.0)]
)
def test_truncated_normal_is_finite_and_inside_the_open_interval(dtype, lower, upper):
    # JAX's: the draw is clamped to (nextafter(lower, inf), nextafter(upper, -inf)); u rounding
    # to erf(upper / sqrt 2) = 1 used to give erf_inv(1) = inf (5% of the draws for lower = 5)
    def draw(k):
        return random.truncated_normal(k, lower, upper, (N,), dtype)

    for x in (np.asarray(draw(KEY)), np.asarray(blu.jit(draw)(KEY))):
        x = x.astype(np.float64)
        assert x.dtype == np.float64 and np.all(np.isfinite(x))
        assert np.all(x > lower) and np.all(x < upper)


@pytest.mark.parametrize(
    "draw",
    [
        lambda k: random.beta(k, np.ones(2), np.ones(3)),
        lambda k: random.truncated_normal(k, -np.ones(2), np.ones(3)),
    ],
)
def test_parameters_that_do_not_broadcast_are_a_shape_error(draw):
    # without shape=, the parameters' broadcast was numpy's (a raw ValueError)
    with pytest.raises(BluShapeError, match=r"f\d\d\[2\], .* f\d\d\[3\] do not broadcast"):
        draw(KEY)


@pytest.mark.parametrize("bad", [None, "a", 1.5, np.array([0, 1]), float("inf"), -np.inf, np.nan])
@pytest.mark.parametrize(
    "name, draw",
    [
        ("categorical", lambda k, a: random.categorical(k, np.zeros((2, 3)), axis=a)),
        ("permutation", lambda k, a: random.permutation(k, np.zeros((2, 3)), axis=a)),
        ("choice", lambda k, a: random.choice(k, np.zeros((2, 3)), (1,), axis=a)),
    ],
)
def test_an_axis_that_is_no_int_is_a_type_error(name, draw, bad):
    # raw TypeErrors/ValueErrors from comparing or indexing with it (an infinite float:
    # Python's OverflowError from int())
    with pytest.raises(BluTypeError, match=f"random.{name}: axis must be an int"):
        draw(KEY, bad)


# A Python float parameter with dtype=float64 is float64's value (JAX's with x64), not float32's
# (~3e-8 relatively off). References: closed forms in numpy float64 from the unit draws of the
# same key (the samplers' own formulas).
F64 = np.float64
S, T = 1 / 3, 2.3
TINY = F64(np.finfo(F64).tiny)


def _unit(k):
    return np.asarray(random.uniform(k, (64,), F64))


def _open_unit(k):  # uniform in (0, 1): float64 bounds, always exact
    return np.asarray(random.uniform(k, (64,), F64, TINY, F64(1.0)))


_CLOSED_FORMS = {
    "uniform": (
        lambda k: random.uniform(k, (64,), F64, -S, T),
        lambda k: -S + _unit(k) * (T + S),
    ),
    "truncated_normal": (
        lambda k: random.truncated_normal(k, -S, T, (64,), F64),
        lambda k: np.sqrt(2) * ssp.erfinv(_erf(-S) + _unit(k) * (_erf(T) - _erf(-S))),
    ),
    "weibull_min": (
        lambda k: random.weibull_min(k, S, T, (64,), F64),
        lambda k: S * (-np.log(_open_unit(k))) ** (1 / T),
    ),
    "rayleigh": (
        lambda k: random.rayleigh(k, S, (64,), F64),
        lambda k: S * np.sqrt(-2 * np.log(_open_unit(k))),
    ),
    "pareto": (
        lambda k: random.pareto(k, S, (64,), F64),
        lambda k: np.exp(-np.log(_open_unit(k)) / S),
    ),
    "lognormal": (
        lambda k: random.lognormal(k, S, (64,), F64),
        lambda k: np.exp(np.asarray(random.normal(k, (64,), F64)) * S),
    ),
    "double_sided_maxwell": (
        lambda k: random.double_sided_maxwell(k, S, T, (64,), F64),
        lambda k: S + T * np.asarray(random.double_sided_maxwell(k, F64(0), F64(1), (64,), F64)),
    ),
}


def _erf(x):
    return ssp.erf(x / np.sqrt(2))


@pytest.mark.parametrize("name", sorted(_CLOSED_FORMS))
def test_python_float_parameters_take_float64_values(name):
    draw, ref = _CLOSED_FORMS[name]
    got, want = np.asarray(draw(KEY)), ref(KEY)
    assert got.dtype == F64
    np.testing.assert_allclose(got, want, rtol=1e-13)


@pytest.mark.parametrize(
    "name, draw",
    [
        ("gamma", lambda k, s, t: random.gamma(k, s, (8,), F64)),
        ("loggamma", lambda k, s, t: random.loggamma(k, s, (8,), F64)),
        ("beta", lambda k, s, t: random.beta(k, s, t, (8,), F64)),
        ("chisquare", lambda k, s, t: random.chisquare(k, t, (8,), F64)),
        ("f", lambda k, s, t: random.f(k, s, t, (8,), F64)),
        ("t", lambda k, s, t: random.t(k, t, (8,), F64)),
        ("wald", lambda k, s, t: random.wald(k, s, (8,), F64)),
        ("generalized_normal", lambda k, s, t: random.generalized_normal(k, t, (8,), F64)),
        ("triangular", lambda k, s, t: random.triangular(k, -s, s, t, (8,), F64)),
        ("ball", lambda k, s, t: random.ball(k, 3, t, (8,), F64)),
    ],
)
def test_python_float_parameters_draw_as_float64_scalars(name, draw):
    # no closed form: the draws with Python floats are those with the same values as float64
    # scalars (strongly typed, always converted exactly); float32's parameters moved them ~1e-8
    got = np.asarray(draw(KEY, S, T))
    want = np.asarray(draw(KEY, F64(S), F64(T)))
    assert got.dtype == F64
    np.testing.assert_allclose(got, want, rtol=1e-13)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lower, upper", [(8.0, np.inf), (-np.inf, -8.0), (3.0, 5.0), (12.0, 13.0)])
def test_truncated_normal_far_tails_follow_scipy(dtype, lower, upper):
    # erf(8 / sqrt 2) rounds to 1 in float32: every draw was the largest float (JAX's too); the
    # tails invert erfc. KS against scipy's truncnorm (p > 1e-4 for a fixed key) and the mean
    # within 6 standard errors
    dist = st.truncnorm(lower, upper)
    x = np.asarray(random.truncated_normal(KEY, lower, upper, (N,), dtype), np.float64)
    assert np.all((x > lower) & (x < upper))
    assert st.kstest(x, dist.cdf).pvalue > 1e-4
    assert abs(x.mean() - dist.mean()) < 6 * dist.std() / np.sqrt(N)


def test_gamma_family_invalid_parameters_are_nan_not_a_hang():
    # Marsaglia-Tsang's loop never accepted a draw for d = a - 1/3 <= 0, NaN or inf: gamma(key,
    # -1.) (and beta, dirichlet, chisquare, t, f through it) looped forever; JAX's give NaN
    a = np.array([-1.0, np.nan, np.inf, 0.0, 2.0], np.float32)
    for g in (np.asarray(random.gamma(KEY, a)), np.asarray(blu.jit(random.gamma)(KEY, a))):
        np.testing.assert_array_equal(np.isnan(g), [1, 1, 0, 0, 0])
        assert g[2] == np.inf and g[3] == 0 and 0 < g[4] < np.inf
    assert np.all(np.isnan(np.asarray(random.beta(KEY, -1.0, 1.0, (3,)))))
    assert np.all(np.isnan(np.asarray(random.dirichlet(KEY, np.array([-1.0, 1.0]), (2,)))))
    assert np.all(np.isnan(np.asarray(random.chisquare(KEY, -2.0, (2,)))))
    assert np.all(np.isnan(np.asarray(random.t(KEY, np.nan, (2,)))))


def test_poisson_large_rates_have_the_right_mean_and_variance():
    # k log lam - lam - lgamma(k + 1) cancelled in float32: at lam = 3e4 the variance was 1.6 lam
    # and the mean 9 standard errors off (0.002 lam at 1e7); -1 for a negative or NaN lam (JAX's)
    n = 5000
    lam = np.array([3e4, 2e5], np.float32)
    x = np.asarray(random.poisson(KEY, lam, (n, 2)), np.float64)
    sd = np.sqrt(lam.astype(np.float64))
    np.testing.assert_array_less(np.abs(x.mean(0) - lam), 6 * sd / np.sqrt(n))
    np.testing.assert_array_less(np.abs(x.var(0) / lam - 1), 6 * np.sqrt(2 / n))
    bad = np.asarray(random.poisson(KEY, np.array([-1.0, np.nan, 0.0], np.float32)))
    np.testing.assert_array_equal(bad, [-1, -1, 0])
