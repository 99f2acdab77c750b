"""blu.scipy.stats against scipy.stats in float64: values (NaN and infinity positions too) over
broadcast shapes with size-0 and size-1 axes and special values, JAX's promotion of integers,
-inf log densities off the support, and derivatives against finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as sst
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu.core.errors import BluShapeError, BluValueError
from blu.scipy import stats as S
from tests.helpers import check_grads

# argument kinds: real x (support edges and infinities), positive parameters, probabilities,
# integer counts, quantiles
_KINDS = {
    "x": st.one_of(
        st.floats(-12, 12).map(lambda v: round(v, 2)),
        st.sampled_from([0.0, -0.0, 1.0, 0.5, -1.0, 2.0, np.inf, -np.inf, np.nan]),
    ),
    "pos": st.one_of(
        st.floats(0.05, 9.0).map(lambda v: round(v, 2)), st.sampled_from([0.5, 1.0, 2.0])
    ),
    "prob": st.one_of(st.floats(0, 1), st.sampled_from([0.0, 1.0, 0.5])),
    "count": st.integers(-2, 12).map(float),
    "n": st.integers(0, 12).map(float),
    "loc": st.one_of(st.floats(-12, 12).map(lambda v: round(v, 2)), st.just(np.nan)),
    "q": st.one_of(st.floats(0, 1), st.sampled_from([0.0, 1.0, 0.5, 1e-300, -0.5, 1.5, np.nan])),
    # probabilities of success in (0, 1] (scipy's geom and nbinom are NaN at 0, JAX's not)
    "psucc": st.one_of(st.floats(0.01, 1), st.sampled_from([1.0, 0.5])),
    # wrapcauchy's c: (0, 1) and its edges (NaN there)
    "c": st.one_of(st.floats(0, 1), st.sampled_from([0.0, 1.0, 0.5])),
}

# (module, function, scipy's, kinds of the arguments in JAX's order)
CASES = [
    *[("norm", f, ("x", "x", "pos")) for f in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")],
    ("norm", "ppf", ("q", "loc", "pos")),
    ("norm", "isf", ("q", "loc", "pos")),
    ("t", "logpdf", ("x", "pos", "x", "pos")),
    ("t", "pdf", ("x", "pos", "x", "pos")),
    ("gamma", "logpdf", ("x", "pos", "x", "pos")),
    ("gamma", "pdf", ("x", "pos", "x", "pos")),
    ("beta", "logpdf", ("x", "pos", "pos", "x", "pos")),
    ("beta", "pdf", ("x", "pos", "pos", "x", "pos")),
    *[("uniform", f, ("x", "x", "pos")) for f in ("logpdf", "pdf", "cdf")],
    ("uniform", "ppf", ("q", "loc", "pos")),
    *[("expon", f, ("x", "x", "pos")) for f in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")],
    ("expon", "ppf", ("q", "loc", "pos")),
    *[("laplace", f, ("x", "x", "pos")) for f in ("logpdf", "pdf", "cdf")],
    *[("logistic", f, ("x", "x", "pos")) for f in ("logpdf", "pdf", "cdf", "sf")],
    ("logistic", "ppf", ("q", "loc", "pos")),
    ("logistic", "isf", ("q", "loc", "pos")),
    *[("cauchy", f, ("x", "x", "pos")) for f in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")],
    ("cauchy", "ppf", ("q", "loc", "pos")),
    ("cauchy", "isf", ("q", "loc", "pos")),
    ("poisson", "logpmf", ("count", "pos", "count")),
    ("poisson", "pmf", ("count", "pos", "count")),
    ("bernoulli", "logpmf", ("count", "prob", "count")),
    ("bernoulli", "pmf", ("count", "prob", "count")),
    ("bernoulli", "cdf", ("x", "prob")),
    ("bernoulli", "ppf", ("q", "prob")),
    ("binom", "logpmf", ("count", "n", "prob", "count")),
    ("binom", "pmf", ("count", "n", "prob", "count")),
    ("geom", "logpmf", ("count", "psucc", "count")),
    ("geom", "pmf", ("count", "psucc", "count")),
    ("nbinom", "logpmf", ("count", "pos", "psucc", "count")),
    ("nbinom", "pmf", ("count", "pos", "psucc", "count")),
    ("betabinom", "logpmf", ("count", "n", "pos", "pos", "count")),
    ("betabinom", "pmf", ("count", "n", "pos", "pos", "count")),
    *[
        ("pareto", f, ("x", "pos", "x", "pos"))
        for f in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")
    ],
    ("pareto", "ppf", ("q", "pos", "loc", "pos")),
    *[
        ("truncnorm", f, ("x", "x", "x", "x", "pos"))
        for f in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")
    ],
    ("gennorm", "logpdf", ("x", "pos")),
    ("gennorm", "pdf", ("x", "pos")),
    ("vonmises", "logpdf", ("x", "pos")),
    ("vonmises", "pdf", ("x", "pos")),
    ("wrapcauchy", "logpdf", ("x", "c")),
    ("wrapcauchy", "pdf", ("x", "c")),
    *[
        (m, f, ("x", "x", "pos"))
        for m in ("gumbel_r", "gumbel_l")
        for f in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")
    ],
    ("gumbel_r", "ppf", ("q", "loc", "pos")),
    ("gumbel_l", "ppf", ("q", "loc", "pos")),
]
# over the incomplete gamma and beta functions (while_loops: each jit compiles for ~1 s)
LOOP_CASES = [
    *[("gamma", f, ("x", "pos", "x", "pos")) for f in ("cdf", "logcdf", "sf", "logsf")],
    *[
        ("chi2", f, ("x", "pos", "x", "pos"))
        for f in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf")
    ],
    *[("beta", f, ("x", "pos", "pos", "x", "pos")) for f in ("cdf", "logcdf", "sf", "logsf")],
    ("t", "cdf", ("x", "pos", "x", "pos")),
    ("poisson", "cdf", ("x", "pos", "count")),
    ("binom", "cdf", ("x", "n", "prob", "count")),
    ("gennorm", "cdf", ("x", "pos")),
]


@st.composite
def _broadcast_args(draw, kinds):
    """Arguments of the given kinds whose shapes broadcast: each the full shape, a scalar, or the
    shape with some axes 1 (sizes 0 and 1 included)."""
    shape = tuple(draw(st.lists(st.sampled_from([0, 1, 2, 3]), max_size=2)))
    out = []
    for kind in kinds:
        form = draw(st.sampled_from(["full", "scalar", "ones"]))
        s = () if form == "scalar" else shape
        if form == "ones":
            s = tuple(1 if draw(st.booleans()) else d for d in shape)
        size = int(np.prod(s, dtype=int))
        vals = draw(st.lists(_KINDS[kind], min_size=size, max_size=size))
        out.append(np.array(vals, np.float64).reshape(s))
    return out


def _compare(got, want, rtol=1e-9, atol=1e-300):
    got = np.asarray(got)
    assert got.dtype == np.float64 and got.shape == np.shape(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _atol(fn: str) -> float:
    """A log-probability is a sum of O(1) terms: one that cancels to 0 keeps their rounding
    (beta.logpdf(0, 1, 3, scale=3) is log 3 - log 3, -2.2e-16), so it is held to an absolute
    float64 tolerance (an absolute error in log space is a relative one in the probability)."""
    return 1e-13 if fn.startswith("log") else 1e-300


@pytest.mark.parametrize("mod, fn, kinds", CASES, ids=[f"{c[0]}.{c[1]}" for c in CASES])
@settings(deadline=None, max_examples=20)
@given(data=st.data())
def test_against_scipy_float64(mod, fn, kinds, data):
    args = data.draw(_broadcast_args(kinds))
    if (mod, fn) == ("bernoulli", "ppf"):  # JAX's 0 at q = 0 (scipy: -1, below the support)
        args[0] = np.where(args[0] == 0, 0.5, args[0])
    ours = getattr(getattr(S, mod), fn)
    with np.errstate(all="ignore"):
        want = np.asarray(getattr(getattr(sst, mod), fn)(*args), np.float64)
    _compare(ours(*args), want, atol=_atol(fn))
    _compare(blu.jit(ours)(*args), want, rtol=1e-9, atol=_atol(fn))


@pytest.mark.parametrize("mod, fn, kinds", LOOP_CASES, ids=[f"{c[0]}.{c[1]}" for c in LOOP_CASES])
@settings(deadline=None, max_examples=6)
@given(data=st.data())
def test_cdfs_against_scipy_float64(mod, fn, kinds, data):
    """As test_against_scipy_float64, with fewer examples (each jit compiles while_loops)."""
    args = data.draw(_broadcast_args(kinds))
    ours = getattr(getattr(S, mod), fn)
    with np.errstate(all="ignore"):
        want = np.asarray(getattr(getattr(sst, mod), fn)(*args), np.float64)
    _compare(ours(*args), want, atol=_atol(fn))
    _compare(blu.jit(ours)(*args), want, rtol=1e-9, atol=_atol(fn))


def test_defaults_promotion_and_support():
    """``loc=0, scale=1`` by default; integers become float32 (JAX's promotion); log densities
    are -inf off the support."""
    assert S.norm.logpdf(np.arange(3)).dtype == np.float32
    assert S.poisson.logpmf(np.arange(3), 2).dtype == np.float32
    # an integer array beside a float16 one stays float16 (JAX's promote_args_inexact; float32)
    h, i = np.array([0.5, 1.5], np.float16), np.array([2, 3], np.int32)
    assert S.gamma.logpdf(h, i).dtype == np.float16
    np.testing.assert_allclose(
        np.asarray(S.gamma.logpdf(h, i), np.float64), sst.gamma.logpdf([0.5, 1.5], [2, 3]), 2e-3
    )
    assert S.binom.logpmf(i, i, h[:1]).dtype == np.float16
    x = np.array([-1.0, 0.5, 3.0])
    np.testing.assert_allclose(np.asarray(S.norm.logpdf(x)), sst.norm.logpdf(x), rtol=1e-14)
    assert np.asarray(S.gamma.logpdf(-0.5, 2.0))[()] == -np.inf
    assert np.asarray(S.beta.logpdf(1.5, 2.0, 3.0))[()] == -np.inf
    assert np.asarray(S.uniform.logpdf(1.5))[()] == -np.inf
    assert np.asarray(S.expon.logpdf(-1e-9))[()] == -np.inf
    assert np.asarray(S.poisson.logpmf(2.5, 3.0))[()] == -np.inf
    assert np.asarray(S.binom.logpmf(6.0, 5.0, 0.3))[()] == -np.inf
    assert np.asarray(S.bernoulli.ppf(0.0, 0.3))[()] == 0.0  # JAX's
    # a Python number stays weakly typed: float64 with float64 arrays, not rounded to float32
    got = S.multivariate_normal.logpdf(np.array([0.5]), np.zeros(1), 1.7)
    assert float(got) == pytest.approx(sst.norm.logpdf(0.5, 0, np.sqrt(1.7)), rel=1e-14)


def test_uniform_cdf_nan_where_the_quotient_is():
    # scipy's: NaN where (x - loc) / scale is NaN (inf - inf, inf / inf), the clip elsewhere
    inf = np.inf
    x = np.array([inf, -inf, inf, 0.0, inf, -inf, 0.5, 2.0])
    loc = np.array([inf, -inf, 0.0, -inf, -inf, 0.0, 0.0, 0.0])
    scale = np.array([1.0, 1.0, inf, inf, 1.0, 1.0, 1.0, 1.0])
    with np.errstate(invalid="ignore"):
        want = sst.uniform.cdf(x, loc=loc, scale=scale)
    np.testing.assert_array_equal(np.asarray(S.uniform.cdf(x, loc=loc, scale=scale)), want)


@pytest.mark.parametrize(
    "f, args",
    [
        (S.norm.logpdf, (np.array([-1.2, 0.3, 2.5]), 0.4, 1.7)),
        (S.norm.logcdf, (np.array([-7.0, 0.3, 2.5]), 0.4, 1.7)),
        (S.norm.ppf, (np.array([0.01, 0.4, 0.97]), 0.4, 1.7)),
        (S.t.logpdf, (np.array([-1.2, 0.3, 2.5]), 3.5, 0.2, 1.3)),
        (S.gamma.logpdf, (np.array([0.7, 1.3, 4.5]), 2.5, 0.1, 1.3)),
        (S.beta.logpdf, (np.array([0.2, 0.5, 0.9]), 2.5, 1.5, 0.0, 1.0)),
        (S.expon.logcdf, (np.array([0.2, 0.9, 5.0]), 0.1, 1.3)),
        (S.laplace.logpdf, (np.array([-1.2, 0.3, 2.5]), 0.1, 1.3)),
        (S.logistic.logpdf, (np.array([-1.2, 0.3, 2.5]), 0.1, 1.3)),
        (S.cauchy.cdf, (np.array([-1.2, 0.3, 2.5]), 0.1, 1.3)),
        (S.poisson.logpmf, (np.array([0.0, 2.0, 5.0]), 2.5)),
        (S.binom.logpmf, (np.array([0.0, 2.0, 5.0]), 7.0, 0.3)),
        (S.bernoulli.logpmf, (np.array([0.0, 1.0]), 0.3)),
        (S.gamma.cdf, (np.array([0.7, 1.3, 4.5]), 2.5, 0.1, 1.3)),
        (S.gamma.logsf, (np.array([0.7, 1.3, 4.5]), 2.5, 0.1, 1.3)),
        (S.chi2.logcdf, (np.array([0.7, 1.3, 4.5]), 3.5, 0.1, 1.3)),
        (S.chi2.logpdf, (np.array([0.7, 1.3, 4.5]), 3.5, 0.1, 1.3)),
        (S.beta.cdf, (np.array([0.2, 0.5, 0.9]), 2.5, 1.5, 0.0, 1.0)),
        (S.beta.logsf, (np.array([0.2, 0.5, 0.9]), 2.5, 1.5, 0.0, 1.0)),
        (S.t.cdf, (np.array([-1.2, 0.3, 2.5]), 3.5, 0.2, 1.3)),
        (S.poisson.cdf, (np.array([0.0, 2.0, 5.0]), 2.5)),
        (S.binom.cdf, (np.array([0.0, 2.0, 5.0]), 7.0, 0.3)),
        (S.geom.logpmf, (np.array([1.0, 2.0, 5.0]), 0.3)),
        (S.nbinom.logpmf, (np.array([0.0, 2.0, 5.0]), 2.5, 0.3)),
        (S.betabinom.logpmf, (np.array([0.0, 2.0, 5.0]), 7.0, 2.5, 1.5)),
        (S.pareto.logpdf, (np.array([1.5, 2.0, 5.0]), 2.5, 0.1, 1.3)),
        (S.pareto.logcdf, (np.array([1.5, 2.0, 5.0]), 2.5, 0.1, 1.3)),
        (S.pareto.ppf, (np.array([0.01, 0.4, 0.97]), 2.5, 0.1, 1.3)),
        (S.truncnorm.logpdf, (np.array([-0.9, 0.3, 1.5]), -1.2, 1.8, 0.1, 1.3)),
        (S.truncnorm.logcdf, (np.array([-0.9, 0.3, 1.5]), -1.2, 1.8, 0.1, 1.3)),
        (S.truncnorm.logsf, (np.array([2.5, 3.0, 4.0]), 1.5, 3.5, 0.1, 1.3)),
        (S.gennorm.logpdf, (np.array([-1.2, 0.3, 2.5]), 1.7)),
        (S.vonmises.logpdf, (np.array([-1.2, 0.3, 2.5]), 1.7)),
        (S.wrapcauchy.logpdf, (np.array([0.2, 1.3, 4.5]), 0.4)),
        (S.gumbel_r.logpdf, (np.array([-1.2, 0.3, 2.5]), 0.1, 1.3)),
        (S.gumbel_r.logsf, (np.array([-1.2, 0.3, 2.5]), 0.1, 1.3)),
        (S.gumbel_l.logcdf, (np.array([-1.2, 0.3, 2.5]), 0.1, 1.3)),
        (S.gumbel_l.ppf, (np.array([0.01, 0.4, 0.97]), 0.1, 1.3)),
    ],
)
def test_gradients_central_differences(f, args):
    """Derivatives in every float argument (not the integer counts) against central differences."""
    counts = f in (S.poisson.logpmf, S.binom.logpmf, S.bernoulli.logpmf, S.poisson.cdf,
                   S.binom.cdf, S.geom.logpmf, S.nbinom.logpmf, S.betabinom.logpmf)  # fmt: skip
    first = np.asarray(args[0])
    rest = [np.full(first.shape, a, np.float64) for a in args[1:]]
    if counts:
        check_grads(lambda *r: f(first, *r), rest)
    else:
        check_grads(f, [first, *rest])


@settings(deadline=None, max_examples=20)
@given(st.integers(1, 4), st.sampled_from([(), (0,), (1,), (3,), (2, 3)]), st.data())
def test_multivariate_normal_against_scipy(n, batch, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    mean = rng.normal(size=n)
    m = rng.normal(size=(n, n))
    cov = m @ m.T + n * np.eye(n)
    x = rng.normal(size=batch + (n,)) * 2
    want = sst.multivariate_normal.logpdf(x, mean, cov) if x.size else np.zeros(batch)
    want = np.reshape(want, batch)
    _compare(S.multivariate_normal.logpdf(x, mean, cov), want, rtol=1e-11)
    _compare(S.multivariate_normal.pdf(x, mean, cov), np.exp(want), rtol=1e-11)
    # a scalar covariance (cov * I) and a scalar mean (univariate)
    want_iso = np.reshape(sst.multivariate_normal.logpdf(x, mean, 1.7) if x.size else [], batch)
    _compare(S.multivariate_normal.logpdf(x, mean, 1.7), want_iso, rtol=1e-11)
    _compare(
        S.multivariate_normal.logpdf(x[..., 0], 0.3, 1.7),
        sst.norm.logpdf(x[..., 0], 0.3, np.sqrt(1.7)),
        rtol=1e-11,
    )
    check_grads(
        lambda mu, c: S.multivariate_normal.logpdf(x[:1] if x.ndim > 1 else x, mu, c @ c.T),
        (mean, m + n * np.eye(n)),
    )
    with pytest.raises(BluShapeError, match="cov"):
        S.multivariate_normal.logpdf(x, mean, np.eye(n + 1))


@settings(deadline=None, max_examples=20)
@given(st.integers(2, 4), st.sampled_from([(), (0,), (1,), (3,)]), st.data())
def test_dirichlet_against_scipy(k, batch, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    alpha = rng.uniform(0.3, 4.0, size=k)
    x = rng.dirichlet(alpha, size=batch).transpose((len(batch), *range(len(batch))))
    want = np.reshape(sst.dirichlet.logpdf(x, alpha) if x.size else [], batch)
    _compare(S.dirichlet.logpdf(x, alpha), want, rtol=1e-10)
    _compare(S.dirichlet.logpdf(x[:-1], alpha), want, rtol=1e-10)  # the last one implied
    _compare(S.dirichlet.pdf(x, alpha), np.exp(want), rtol=1e-10)
    off = x.copy()
    if off.size:
        off[0] += 0.1  # off the simplex: -inf, as JAX
        assert np.all(np.asarray(S.dirichlet.logpdf(off, alpha)) == -np.inf)
    if x.size:
        check_grads(lambda a: S.dirichlet.logpdf(x, a), (alpha,))
    with pytest.raises(BluShapeError, match="alpha"):
        S.dirichlet.logpdf(x, alpha[:, None])


def test_poisson_entropy_against_a_float64_sum():
    """``-sum pmf log pmf`` over k < 2000 in numpy float64 (scipy's ``expect`` stops converging
    for large ``mu``): the sum below ``mu = 100``, the asymptotic series above; ``loc`` only
    broadcasts; NaN for ``mu < 0``."""
    mu = np.array([0.0, 1e-3, 0.7, 9.5, 10.0, 55.0, 99.9, 100.0, 150.0, 1000.0])
    k = np.arange(2000.0)[:, None]
    logp = sst.poisson.logpmf(k, mu)
    with np.errstate(invalid="ignore"):  # 0 * -inf where the mass underflows
        want = -np.sum(np.where(np.isfinite(logp), np.exp(logp) * logp, 0.0), axis=0)
    got = S.poisson.entropy(mu, np.zeros((2, 1)))
    assert got.shape == (2, mu.size)
    _compare(got[0], want, rtol=1e-9)
    _compare(blu.jit(S.poisson.entropy)(mu), want, rtol=1e-9)
    assert np.isnan(np.asarray(S.poisson.entropy(-1.0)))
    assert S.poisson.entropy(np.arange(3)).dtype == np.float32


@settings(deadline=None, max_examples=15)
@given(st.integers(1, 4), st.sampled_from([(), (0,), (1,), (3,)]), st.data())
def test_multinomial_against_scipy(k, batch, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    p = rng.dirichlet(np.ones(k))
    n = int(rng.integers(0, 8))
    x = rng.multinomial(n, p, size=batch)
    x_off = x + (np.arange(k) == 0)  # counts summing to n + 1: -inf
    want = np.reshape(sst.multinomial.logpmf(x, n, p) if x.size else [], batch)
    _compare(S.multinomial.logpmf(x, n, p), want, rtol=1e-11)
    _compare(blu.jit(S.multinomial.pmf)(x, n, p), np.exp(want), rtol=1e-11)
    assert np.all(np.asarray(S.multinomial.logpmf(x_off, n, p)) == -np.inf)
    check_grads(lambda q: S.multinomial.logpmf(x, n, q), (p,))
    assert S.multinomial.logpmf(x, n, p.astype(np.float32)).dtype == np.float32
    with pytest.raises(BluValueError, match="integer"):
        S.multinomial.logpmf(x.astype(np.float64), n, p)


def test_new_distributions_defaults_and_promotion():
    """JAX's defaults (``loc=0``, ``scale=1``), integers to float32, Python floats weakly typed,
    and JAX's values where they differ from scipy's (unmasked non-integer counts)."""
    assert S.geom.logpmf(np.arange(1, 4), 0.3).dtype == np.float32
    assert S.pareto.logpdf(np.arange(2, 5), 2).dtype == np.float32
    assert S.truncnorm.logpdf(np.arange(3), -1, 5).dtype == np.float32
    assert S.vonmises.logpdf(np.ones(2, np.float32), 1.5).dtype == np.float32  # weak 1.5
    x = np.array([1.5, 2.0, 7.0])
    _compare(S.pareto.logpdf(x, 2.5), sst.pareto.logpdf(x, 2.5), rtol=1e-14)
    _compare(S.truncnorm.cdf(x - 2, -1.0, 2.0), sst.truncnorm.cdf(x - 2, -1.0, 2.0), rtol=1e-13)
    assert np.isnan(np.asarray(S.wrapcauchy.logpdf(np.nan, 0.5)))  # scipy's (JAX's: -inf)
    # JAX's: a non-integer k is not masked for geom (scipy: -inf)
    assert np.isfinite(np.asarray(S.geom.logpmf(1.5, 0.3)))
    # betabinom floors k (JAX's)
    k = np.array([0.2, 2.7, 4.9])
    _compare(S.betabinom.logpmf(k, 5.0, 1.5, 2.0), sst.betabinom.logpmf(np.floor(k), 5, 1.5, 2.0))


@settings(deadline=None, max_examples=15)
@given(st.sampled_from([(5,), (3, 4), (2, 0, 3), (2, 3, 4)]), st.data())
def test_rankdata_mode_sem_against_scipy(shape, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    a = rng.integers(0, 4, size=shape).astype(np.float64)  # ties
    axis = data.draw(st.sampled_from([None, *range(-len(shape), len(shape))]))
    method = data.draw(st.sampled_from(["average", "min", "max", "dense", "ordinal"]))
    r = S.rankdata(a, method, axis=axis)
    assert r.dtype == np.float32  # the default float dtype, as JAX's
    np.testing.assert_array_equal(np.asarray(r), sst.rankdata(a, method, axis=axis))
    jitted = blu.jit(lambda v: S.rankdata(v, method, axis=axis))(a)
    np.testing.assert_array_equal(np.asarray(jitted), sst.rankdata(a, method, axis=axis))
    if a.size:
        b = a.copy()
        b.flat[0] = np.nan
        np.testing.assert_array_equal(
            np.asarray(S.rankdata(b, method, axis=axis)), sst.rankdata(b, method, axis=axis)
        )
    ax = 0 if axis is None else axis
    if a.shape[ax] and a.size:
        keep = data.draw(st.booleans())
        got, want = S.mode(a, axis, keepdims=keep), sst.mode(a, axis, keepdims=keep)
        np.testing.assert_array_equal(np.asarray(got.mode), want.mode)
        np.testing.assert_array_equal(np.asarray(got.count), want.count)
    if a.size and (axis is None or a.shape[axis] > 1):
        _compare(S.sem(a, axis), sst.sem(a, axis=axis), rtol=1e-12)
        _compare(S.sem(a, axis, ddof=0, keepdims=True), sst.sem(a, axis, ddof=0, keepdims=True))


def test_rankdata_mode_sem_edges():
    """NaN ranks in a row with a NaN, scipy's smallest-of-ties mode, NaN and 0 over an empty
    axis (JAX's), sem's nan_policy='omit', and refusals."""
    a = np.array([[3.0, 1.0, np.nan, 1.0], [2.0, 2.0, 5.0, 5.0]])
    want = [[np.nan] * 4, [1.5, 1.5, 3.5, 3.5]]
    np.testing.assert_array_equal(np.asarray(S.rankdata(a, axis=1)), want)
    m = S.mode(np.array([4.0, 2.0, 4.0, 2.0, 7.0]))
    assert float(m.mode) == 2.0 and int(m.count) == 2
    e = S.mode(np.zeros((0, 3)))
    assert np.all(np.isnan(np.asarray(e.mode))) and np.all(np.asarray(e.count) == 0)
    _compare(S.sem(a, 1, nan_policy="omit"), sst.sem(a, axis=1, nan_policy="omit"), rtol=1e-12)
    with pytest.raises(BluValueError, match="method"):
        S.rankdata(a, "first")
    with pytest.raises(BluValueError, match="nan_policy"):
        S.rankdata(a, nan_policy="omit")
    with pytest.raises(BluValueError, match="nan_policy"):
        S.mode(a, nan_policy="bogus")


def test_t_large_and_infinite_df_and_cdf_near_the_centre_in_float32():
    # gammaln(df/2 + 1/2) - gammaln(df/2) cancelled (logpdf at df = 1e6 was 0.08 off), df = inf
    # was NaN (the normal's), the CDF near z = 0 rounded to 1/2 and at df = 1e6 was 1-5% off
    z = np.array([-10.0, -5.0, -2.0, -0.3, -4e-4, 0.0, 1e-3, 1.0, 3.0], np.float32)
    z64 = z.astype(np.float64)
    for df in (3.0, 30.0, 1e3, 1e6, np.inf):
        d = np.float32(df)
        logpdf = np.asarray(S.t.logpdf(z, d), np.float64)
        np.testing.assert_allclose(logpdf, sst.t.logpdf(z64, df), rtol=2e-6, atol=2e-6)
        cdf = np.asarray(S.t.cdf(z, d), np.float64)
        want = sst.t.cdf(z64, df)
        np.testing.assert_allclose(cdf, want, rtol=1e-4, atol=1e-6)  # relative in the left tail
    assert np.asarray(S.t.cdf(np.float32(-4e-4), np.float32(30.0), 0.0, 1.0)) < 0.5


def test_vonmises_at_zero_concentration_is_uniform():
    # kappa = 0 is the uniform density on the circle (scipy's); it was NaN (JAX's too)
    x = np.array([-4.0, 0.0, 1.0, 3.0])
    np.testing.assert_allclose(np.asarray(S.vonmises.logpdf(x, 0.0)), sst.vonmises.logpdf(x, 0.0))
    np.testing.assert_allclose(np.asarray(S.vonmises.pdf(x, 0.0)), 1 / (2 * np.pi))
    assert np.all(np.isnan(np.asarray(S.vonmises.logpdf(x, -1.0))))


def test_gamma_chi2_logcdf_where_the_cdf_underflows_float32():
    # log(gammainc) was -inf where gammainc underflows (JAX's too); the series' log instead
    x = np.array([1e-3, 0.5, 20.0, 0.0], np.float32)
    want = sst.chi2.logcdf(x.astype(np.float64), 30.0)
    got = np.asarray(S.chi2.logcdf(x, np.float32(30.0)), np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    y = np.array([1e-3, 0.1, 1.0], np.float32)
    got = np.asarray(S.gamma.logcdf(y, np.float32(20.0), 0.0, 2.0), np.float64)
    np.testing.assert_allclose(got, sst.gamma.logcdf(y.astype(np.float64), 20.0, 0.0, 2.0), 1e-6)


def test_chi2_with_no_positive_degrees_of_freedom_is_nan():
    # scipy's: df <= 0 is no distribution (gammainc(0, y) = 1, gamma's limit, must not leak in)
    x, df = np.array([1.0, 1.0, 0.5, 2.0]), np.array([0.0, -1.0, 3.0, 0.5])
    for name in ("cdf", "logcdf", "sf", "logsf"):
        got = np.asarray(getattr(S.chi2, name)(x, df))
        want = getattr(sst.chi2, name)(x, df)
        np.testing.assert_allclose(got, want, rtol=1e-12, equal_nan=True)
        assert np.isnan(got[:2]).all(), name
