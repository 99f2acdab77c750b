"""jax.random's further samplers against scipy.stats (Kolmogorov-Smirnov and chi-square tests
on large draws, fixed keys so the tests are deterministic), their parameters' broadcasting,
clone / key_data / wrap_key_data."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as st
from hypothesis import given
from hypothesis import strategies as hs

import blu
from blu import random

KEY = random.key(42)
N = 20000


@pytest.mark.parametrize(
    "draw, dist",
    [
        (lambda k: random.laplace(k, (N,)), st.laplace),
        (lambda k: random.logistic(k, (N,)), st.logistic),
        (lambda k: random.cauchy(k, (N,)), st.cauchy),
        (lambda k: random.lognormal(k, 0.5, (N,)), st.lognorm(0.5)),
        (lambda k: random.rayleigh(k, 2.0, (N,)), st.rayleigh(scale=2.0)),
        (lambda k: random.pareto(k, 3.0, (N,)), st.pareto(3.0)),
        (lambda k: random.weibull_min(k, 2.0, 1.5, (N,)), st.weibull_min(1.5, scale=2.0)),
    ],
)
def test_continuous_against_scipy(draw, dist):
    x = np.asarray(draw(KEY), np.float64)
    assert x.shape == (N,) and np.all(np.isfinite(x))
    assert st.kstest(x, dist.cdf).pvalue > 1e-3
    # jit gives the same numbers
    np.testing.assert_allclose(np.asarray(blu.jit(draw)(KEY)), x, rtol=1e-4, atol=1e-5)


def test_rademacher():
    x = np.asarray(random.rademacher(KEY, (N,)))
    assert x.dtype == np.int32 and set(np.unique(x)) == {-1, 1}
    assert abs(x.mean()) < 4 / np.sqrt(N)


@pytest.mark.parametrize("lam", [0.3, 4.0, 60.0, 800.0])
def test_poisson_against_scipy_pmf(lam):
    k = np.asarray(random.poisson(KEY, lam, (N,)))
    assert k.dtype == np.int32 and k.min() >= 0
    # chi-square over bins holding >= 5 expected counts (tails merged)
    dist = st.poisson(lam)
    lo, hi = int(dist.ppf(1e-4)), int(dist.ppf(1 - 1e-4))
    edges = np.arange(lo, hi + 2)
    observed = np.histogram(np.clip(k, lo, hi), edges)[0]
    expected = N * np.diff(np.concatenate([[0.0], dist.cdf(edges[1:-1] - 1), [1.0]]))
    keep = expected >= 5
    stat = ((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum()
    assert st.chi2(keep.sum() - 1).sf(stat) > 1e-3


def test_poisson_rates_array_zero_and_jit():
    lam = np.array([0.0, 2.0, 30.0], np.float32)
    k = np.asarray(blu.jit(lambda key: random.poisson(key, lam, (5000, 3)))(KEY))
    assert np.all(k[:, 0] == 0)
    np.testing.assert_allclose(k.mean(0)[1:], lam[1:], rtol=0.03)
    assert random.poisson(KEY, 3.0, (2,), dtype=np.int16).dtype == np.int16


@pytest.mark.parametrize("method", ["cholesky", "eigh", "svd"])
def test_multivariate_normal_moments(method):
    mean = np.array([1.0, -2.0, 0.5])
    cov = np.array([[2.0, 0.6, 0.2], [0.6, 1.0, -0.3], [0.2, -0.3, 0.5]])
    x = np.asarray(random.multivariate_normal(KEY, mean, cov, (N,), method=method), np.float64)
    assert x.shape == (N, 3)
    np.testing.assert_allclose(x.mean(0), mean, atol=0.05)
    np.testing.assert_allclose(np.cov(x.T), cov, atol=0.06)
    # each projection is normal with the projected variance
    v = np.array([0.3, -1.0, 2.0])
    assert st.kstest(x @ v, st.norm(mean @ v, np.sqrt(v @ cov @ v)).cdf).pvalue > 1e-3


def test_multivariate_normal_batch_shapes_and_errors():
    mean = np.zeros((4, 2), np.float32)
    cov = np.broadcast_to(np.eye(2, dtype=np.float32), (4, 2, 2))
    assert random.multivariate_normal(KEY, mean, cov).shape == (4, 2)
    with pytest.raises(blu.errors.BluValueError, match="cov must end in"):
        random.multivariate_normal(KEY, np.zeros(3), np.eye(2))
    with pytest.raises(blu.errors.BluValueError, match="method"):
        random.multivariate_normal(KEY, np.zeros(2), np.eye(2), method="qr")


def test_key_data_round_trip():
    data = random.key_data(KEY)
    np.testing.assert_array_equal(np.asarray(data), np.asarray(KEY))
    k2 = random.wrap_key_data(np.asarray(data))
    np.testing.assert_array_equal(
        np.asarray(random.uniform(k2, (3,))), np.asarray(random.uniform(KEY, (3,)))
    )
    with pytest.raises(blu.errors.BluTypeError):
        random.wrap_key_data(np.zeros(2, np.float32))
    with pytest.raises(blu.errors.BluValueError, match="threefry2x32"):
        random.wrap_key_data(data, impl="rbg")
    # a batch of keys (JAX's take them; blu raised BluShapeError)
    keys = random.split(KEY, (2, 3))
    np.testing.assert_array_equal(np.asarray(random.key_data(keys)), np.asarray(keys))
    again = random.wrap_key_data(np.asarray(random.key_data(keys)))
    assert again.shape == (2, 3, 2) and again.dtype == np.uint32
    np.testing.assert_array_equal(
        np.asarray(random.normal(again[1, 2], (3,))), np.asarray(random.normal(keys[1, 2], (3,)))
    )
    with pytest.raises(blu.errors.BluShapeError, match=r"\(\.\.\., 2\)"):
        random.key_data(np.zeros((3, 4), np.uint32))
    with pytest.raises(blu.errors.BluTypeError, match="uint32"):
        random.wrap_key_data(np.zeros((3, 2), np.int32))


def test_clone_gives_the_key_itself():
    keys = random.split(KEY, 3)
    np.testing.assert_array_equal(np.asarray(random.clone(KEY)), np.asarray(KEY))
    np.testing.assert_array_equal(np.asarray(random.clone(keys)), np.asarray(keys))
    got = blu.jit(blu.vmap(lambda k: random.uniform(random.clone(k), (2,))))(keys)
    want = np.stack([np.asarray(random.uniform(keys[i], (2,))) for i in range(3)])
    np.testing.assert_array_equal(np.asarray(got), want)
    with pytest.raises(blu.errors.BluTypeError, match=r"random.clone: .* got f32\[2\]"):
        random.clone(np.zeros(2, np.float32))
    with pytest.raises(blu.errors.BluTypeError, match="uint32"):
        random.clone(np.zeros(3, np.uint32))


# ---- samplers built from gammas and normals (blu.random.derived) --------------------------------

P_MIN = 1e-4  # a correct sampler fails one fixed key in 10,000


def _moments_ok(x, dist, se=5.0):
    """Sample mean and variance within ``se`` standard errors of ``dist``'s (the variance's
    standard error from the excess kurtosis: var * sqrt((kurt + 2) / n))."""
    m, v, kurt = (float(s) for s in dist.stats(moments="mvk"))
    n = x.size
    assert abs(x.mean() - m) < se * np.sqrt(v / n), (x.mean(), m)
    assert abs(x.var() - v) < se * v * np.sqrt((kurt + 2) / n), (x.var(), v)


def _jit_vmap_matches(draw, rtol=1e-5):
    """``jit(vmap(draw))`` over three keys gives each key's eager draws (a tuple of arrays)."""
    keys = random.split(KEY, 3)
    got = blu.jit(blu.vmap(draw))(keys)
    for i in range(3):
        for g, w in zip(got, draw(keys[i]), strict=True):
            np.testing.assert_allclose(np.asarray(g)[i], np.asarray(w), rtol=rtol, atol=1e-6)


@pytest.mark.parametrize(
    "draw, dist, moments",
    [
        (lambda k: random.chisquare(k, 0.7, (N,)), st.chi2(0.7), True),
        (lambda k: random.chisquare(k, 6.0, (N,)), st.chi2(6.0), True),
        (lambda k: random.f(k, 3.0, 12.0, (N,)), st.f(3.0, 12.0), True),
        (lambda k: random.f(k, 0.5, 2.0, (N,)), st.f(0.5, 2.0), False),
        (lambda k: random.t(k, 10.0, (N,)), st.t(10.0), True),
        (lambda k: random.t(k, 0.8, (N,)), st.t(0.8), False),
    ],
)
def test_chisquare_f_t_against_scipy(draw, dist, moments):
    x = np.asarray(draw(KEY), np.float64)
    assert x.shape == (N,) and np.all(np.isfinite(x))
    assert st.kstest(x, dist.cdf).pvalue > P_MIN
    if moments:
        _moments_ok(x, dist)


def test_chisquare_f_t_shapes_dtypes_broadcasting():
    df = np.array([1.0, 4.0, 15.0], np.float32)
    fns = [(random.chisquare, (df,), (5.0,)), (random.f, (df, 20.0), (2.0, 5.0)),
           (random.t, (df,), (5.0,))]  # fmt: skip
    for fn, args, scalars in fns:
        assert fn(KEY, *args, shape=None).shape == (3,)
        assert fn(KEY, *args, shape=(0, 3)).shape == (0, 3)
        x = fn(KEY, *scalars, shape=())
        assert x.shape == () and x.dtype == np.float32
        assert fn(KEY, *scalars, shape=(), dtype=np.float64).dtype == np.float64
    assert random.chisquare(KEY, 3.0, (2,), np.float16).dtype == np.float16
    assert random.chisquare(KEY, df).shape == (3,)  # JAX's default: df's shape
    assert random.t(KEY, 3.0).shape == ()
    assert random.t(KEY, df).shape == (3,)  # JAX's default: df's shape (it failed)
    # each column follows its own df
    x = np.asarray(random.chisquare(KEY, df, (5000, 3)), np.float64)
    np.testing.assert_array_less(np.abs(x.mean(0) - df), 5 * np.sqrt(2 * df / 5000))
    v = np.asarray(random.f(KEY, 5.0, df[None, 1:], (5000, 2)), np.float64)
    assert st.kstest(v[:, 1], st.f(5.0, 15.0).cdf).pvalue > P_MIN


def test_chisquare_f_t_bad_arguments():
    for fn, args in [(random.chisquare, (3.0,)), (random.f, (3.0, 4.0)), (random.t, (3.0,))]:
        with pytest.raises(blu.errors.BluTypeError, match="dtype must be a float"):
            fn(KEY, *args, shape=(2,), dtype=np.int32)
    with pytest.raises(blu.errors.BluShapeError, match=r"df .* does not broadcast to \(4,\)"):
        random.chisquare(KEY, np.ones(3), (4,))
    with pytest.raises(blu.errors.BluShapeError, match="dfden"):
        random.f(KEY, 1.0, np.ones(3), (4, 2))
    with pytest.raises(blu.errors.BluShapeError, match="do not broadcast together"):
        random.f(KEY, np.ones(2), np.ones(3))
    with pytest.raises(blu.errors.BluShapeError, match=r"does not broadcast to \(2,\)"):
        random.t(KEY, np.ones(3), (2,))


def test_chisquare_f_t_jit_vmap():
    df = np.array([1.0, 3.0, 30.0, 2.0], np.float32)  # (chisquare is f's numerator)
    _jit_vmap_matches(lambda k: (random.f(k, 2.0, 7.0, (4,)), random.t(k, df, None)))


def test_chisquare_f_t_derivatives_by_df_are_unbiased():
    # through loggamma's implicit reparameterization: the mean of the per-draw derivatives
    # d x_i / d df (a jvp) is d E[x] / d df within 5 standard errors
    def mean_and_se(fn, df, want):
        x, dx = blu.jvp(fn, (np.float32(df),), (np.float32(1.0),))
        dx = np.asarray(dx, np.float64)
        assert abs(dx.mean() - want) < 5 * dx.std() / np.sqrt(dx.size), (dx.mean(), want)

    mean_and_se(lambda d: random.chisquare(KEY, d, (N,)), 3.0, 1.0)  # E = df
    mean_and_se(lambda d: random.t(KEY, d, (N,)) ** 2, 9.0, -2 / 7**2)  # E t^2 = df / (df - 2)
    mean_and_se(lambda d: random.f(KEY, 3.0, d, (N,)), 12.0, -2 / 10**2)  # E = d / (d - 2)


def test_maxwell_and_double_sided_against_scipy():
    x = np.asarray(random.maxwell(KEY, (N,)), np.float64)
    assert x.shape == (N,) and x.min() >= 0
    assert st.kstest(x, st.maxwell.cdf).pvalue > P_MIN
    _moments_ok(x, st.maxwell)
    y = np.asarray(random.double_sided_maxwell(KEY, 1.5, 2.0, (N,)), np.float64)
    # |y - loc| / scale is Maxwell, the sign a fair coin independent of it
    r = (y - 1.5) / 2.0
    assert st.kstest(np.abs(r), st.maxwell.cdf).pvalue > P_MIN
    assert st.binomtest(int((r > 0).sum()), N).pvalue > P_MIN
    assert st.ks_2samp(np.abs(r[r > 0]), np.abs(r[r < 0])).pvalue > P_MIN
    assert abs(y.mean() - 1.5) < 5 * np.sqrt(3 * 4.0 / N)  # variance 3 scale**2


def test_maxwell_shapes_dtypes_errors_jit_vmap():
    assert random.maxwell(KEY).shape == () and random.maxwell(KEY).dtype == np.float32
    assert random.maxwell(KEY, (0, 2)).shape == (0, 2)
    assert random.maxwell(KEY, (2,), np.float64).dtype == np.float64
    # JAX's shape rule: the draws' batch shape in front of broadcast(loc, scale)
    loc, scale = np.zeros((1, 3), np.float32), np.array([1.0, 10.0, 100.0], np.float32)
    assert random.double_sided_maxwell(KEY, loc, scale).shape == (1, 3)
    z = np.asarray(random.double_sided_maxwell(KEY, loc, scale, (2000,)), np.float64)
    assert z.shape == (2000, 1, 3)
    np.testing.assert_allclose(np.sqrt((z**2).mean(0)[0]), np.sqrt(3) * scale, rtol=0.08)
    assert random.double_sided_maxwell(KEY, 0.0, 1.0, (0,)).shape == (0,)
    with pytest.raises(blu.errors.BluTypeError, match="dtype must be a float"):
        random.maxwell(KEY, (2,), np.int32)
    with pytest.raises(blu.errors.BluTypeError, match="double_sided_maxwell: dtype"):
        random.double_sided_maxwell(KEY, 0.0, 1.0, (2,), np.int32)
    with pytest.raises(blu.errors.BluShapeError, match="do not broadcast together"):
        random.double_sided_maxwell(KEY, np.zeros(2), np.ones(3))
    _jit_vmap_matches(
        lambda k: (random.maxwell(k, (4,)), random.double_sided_maxwell(k, loc, scale, (2,)))
    )


@pytest.mark.parametrize("p", [0.6, 1.0, 2.0, 5.0])
def test_generalized_normal_against_scipy(p):
    x = np.asarray(random.generalized_normal(KEY, p, (N,)), np.float64)
    assert x.shape == (N,) and np.all(np.isfinite(x))
    assert st.kstest(x, st.gennorm(p).cdf).pvalue > P_MIN
    _moments_ok(x, st.gennorm(p))


def test_generalized_normal_shapes_dtypes_errors():
    p = np.array([1.0, 2.0, 4.0], np.float32)
    assert random.generalized_normal(KEY, 2.0).shape == ()  # JAX's default shape ()
    assert random.generalized_normal(KEY, p, None).shape == (3,)
    assert random.generalized_normal(KEY, p, (0, 3)).shape == (0, 3)
    assert random.generalized_normal(KEY, 2.0, (2,), np.float64).dtype == np.float64
    x = np.asarray(random.generalized_normal(KEY, p, (N // 4, 3)), np.float64)
    for j in range(3):  # each column its own power
        assert st.kstest(x[:, j], st.gennorm(p[j]).cdf).pvalue > P_MIN
    with pytest.raises(blu.errors.BluShapeError, match=r"p f32\[3\] does not broadcast to \(\)"):
        random.generalized_normal(KEY, p)
    with pytest.raises(blu.errors.BluTypeError, match="dtype must be a float"):
        random.generalized_normal(KEY, 2.0, (2,), np.int32)


@pytest.mark.parametrize("d, p", [(3, 2.0), (2, 1.0), (1, 0.5)])
def test_ball_is_uniform_in_the_p_ball(d, p):
    x = np.asarray(random.ball(KEY, d, p, (N,)), np.float64)
    assert x.shape == (N, d)
    r = (np.abs(x) ** p).sum(1) ** (1 / p)
    assert r.max() < 1
    # uniform in the ball: the volume fraction inside the radius, r**d, is uniform on [0, 1)
    assert st.kstest(r**d, st.uniform.cdf).pvalue > P_MIN
    if (d, p) == (3, 2.0):  # each coordinate of a uniform direction in R^3 is uniform on [-1, 1]
        assert st.kstest(x[:, 0] / r, st.uniform(-1, 2).cdf).pvalue > P_MIN
    if (d, p) == (2, 1.0):  # a coordinate of the uniform diamond has density 1 - |x|
        assert st.kstest(x[:, 1], st.triang(0.5, -1, 2).cdf).pvalue > P_MIN


def test_ball_shapes_errors_jit_vmap():
    assert random.ball(KEY, 3).shape == (3,) and random.ball(KEY, 3).dtype == np.float32
    assert random.ball(KEY, 2, shape=(4, 5)).shape == (4, 5, 2)
    assert random.ball(KEY, 0, shape=(2,)).shape == (2, 0)
    assert random.ball(KEY, 2, shape=(0,), dtype=np.float64).shape == (0, 2)
    with pytest.raises(blu.errors.BluTypeError, match="d must be a static int"):
        random.ball(KEY, 2.5)
    with pytest.raises(blu.errors.BluValueError, match="d must be >= 0"):
        random.ball(KEY, -1)
    with pytest.raises(blu.errors.BluShapeError, match="p must be a scalar"):
        random.ball(KEY, 2, np.ones(2))
    with pytest.raises(blu.errors.BluTypeError, match="random.ball: dtype"):
        random.ball(KEY, 2, dtype=np.int32)
    # (ball draws its generalized normals through generalized_normal's sampler)
    _jit_vmap_matches(lambda k: (random.ball(k, 2, 3.0, (2,)),))


@pytest.mark.parametrize("left, mode, right", [(-1.0, 0.5, 3.0), (0.0, 0.0, 1.0), (2.0, 5.0, 5.0)])
def test_triangular_against_scipy(left, mode, right):
    x = np.asarray(random.triangular(KEY, left, mode, right, (N,)), np.float64)
    assert x.shape == (N,) and x.min() >= left and x.max() <= right
    dist = st.triang((mode - left) / (right - left), left, right - left)
    assert st.kstest(x, dist.cdf).pvalue > P_MIN
    _moments_ok(x, dist)


@pytest.mark.parametrize("mean", [0.3, 1.0, 20.0])
def test_wald_against_scipy(mean):
    x = np.asarray(random.wald(KEY, mean, (N,)), np.float64)
    assert x.shape == (N,) and x.min() > 0 and np.all(np.isfinite(x))
    assert st.kstest(x, st.invgauss(mean).cdf).pvalue > P_MIN
    if mean < 5:  # (the kurtosis 15 mean grows: the variance's error is too wide to check)
        _moments_ok(x, st.invgauss(mean))


def test_triangular_wald_shapes_dtypes_errors_jit_vmap():
    left = np.array([0.0, -2.0], np.float32)
    assert random.triangular(KEY, left, 0.5, 1.0).shape == (2,)  # the parameters' shape
    assert random.triangular(KEY, 0.0, 0.5, 1.0).shape == ()
    assert random.triangular(KEY, left, 0.5, 1.0, (0, 2)).shape == (0, 2)
    assert random.triangular(KEY, 0.0, 0.5, 1.0, (3,), np.float64).dtype == np.float64
    assert random.wald(KEY, np.ones((2, 1), np.float32), (2, 3)).shape == (2, 3)
    assert random.wald(KEY, 1.0, (2,), np.float64).dtype == np.float64
    assert random.wald(KEY, 1.0, (0,)).shape == (0,) and random.wald(KEY, 2.0).shape == ()
    with pytest.raises(blu.errors.BluShapeError, match=r"right f32\[3\] does not broadcast"):
        random.triangular(KEY, 0.0, 0.5, np.ones(3, np.float32), (2,))
    with pytest.raises(blu.errors.BluShapeError, match="do not broadcast together"):
        random.triangular(KEY, left, 0.5, np.ones(3))
    with pytest.raises(blu.errors.BluShapeError, match="mean"):
        random.wald(KEY, np.ones(3), (2,))
    with pytest.raises(blu.errors.BluTypeError, match="random.wald: dtype must be a float"):
        random.wald(KEY, 1.0, (2,), np.int32)
    with pytest.raises(blu.errors.BluTypeError, match="random.triangular: dtype"):
        random.triangular(KEY, 0.0, 0.5, 1.0, (2,), np.int32)
    _jit_vmap_matches(
        lambda k: (random.triangular(k, left, 0.5, 1.0, (3, 2)), random.wald(k, 2.0, (3,)))
    )


def test_orthogonal_is_haar():
    q = np.asarray(random.orthogonal(KEY, 3, (N,)), np.float64)
    assert q.shape == (N, 3, 3)
    np.testing.assert_allclose(
        q.transpose(0, 2, 1) @ q, np.broadcast_to(np.eye(3), q.shape), atol=1e-5
    )
    # Haar on O(3): each entry is uniform on [-1, 1] (a coordinate of a uniform point of the
    # sphere S^2), and the determinant is +1 or -1 with probability 1/2
    for i, j in [(0, 0), (2, 1)]:
        assert st.kstest(q[:, i, j], st.uniform(-1, 2).cdf).pvalue > P_MIN
    det = np.linalg.det(q)
    np.testing.assert_allclose(np.abs(det), 1.0, atol=1e-5)
    assert st.binomtest(int((det > 0).sum()), N).pvalue > P_MIN
    # the rotation angle of the SO(3) part follows (1 - cos t) / pi on [0, pi] (Weyl)
    rot = q * np.sign(det)[:, None, None]
    cos_t = np.clip((np.trace(rot, axis1=1, axis2=2) - 1) / 2, -1, 1)
    t = np.arccos(cos_t)
    assert st.kstest(t, lambda x: (x - np.sin(x)) / np.pi).pvalue > P_MIN


@pytest.mark.parametrize("n, m", [(4, 2), (2, 5)])
def test_orthogonal_rectangular(n, m):
    q = np.asarray(random.orthogonal(KEY, n, (N // 2,), np.float64, m=m), np.float64)
    assert q.shape == (N // 2, n, m)
    k = min(n, m)
    gram = q.transpose(0, 2, 1) @ q if n >= m else q @ q.transpose(0, 2, 1)
    np.testing.assert_allclose(gram, np.broadcast_to(np.eye(k), gram.shape), atol=1e-12)
    # each column (rows when wide) is uniform on the sphere S^(d-1) of R^d, d = max(n, m):
    # (x + 1) / 2 of a coordinate is Beta((d - 1) / 2, (d - 1) / 2)
    d = max(n, m)
    x = q[:, -1, 0] if n >= m else q[:, 0, -1]
    assert st.kstest((x + 1) / 2, st.beta((d - 1) / 2, (d - 1) / 2).cdf).pvalue > P_MIN


def test_orthogonal_shapes_errors_jit_vmap():
    assert random.orthogonal(KEY, 2).shape == (2, 2)
    assert random.orthogonal(KEY, 2).dtype == np.float32
    assert random.orthogonal(KEY, 3, (0,)).shape == (0, 3, 3)
    assert random.orthogonal(KEY, 0, (2,)).shape == (2, 0, 0)
    assert random.orthogonal(KEY, 3, m=0).shape == (3, 0)
    with pytest.raises(blu.errors.BluTypeError, match="n must be a static int"):
        random.orthogonal(KEY, 2.0)
    with pytest.raises(blu.errors.BluValueError, match="m must be >= 0"):
        random.orthogonal(KEY, 2, m=-1)
    with pytest.raises(blu.errors.BluTypeError, match="random.orthogonal: dtype"):
        random.orthogonal(KEY, 2, dtype=np.int32)
    _jit_vmap_matches(lambda k: (random.orthogonal(k, 3, (2,)), random.orthogonal(k, 2, m=3)))


# ---- parameters broadcast to shape (JAX's _check_shape) -----------------------------------------

_WITH_PARAMS = {  # each sampler with its parameters from one array ``a`` of ones
    "chisquare": lambda k, a, s: random.chisquare(k, 2 * a, s),
    "f": lambda k, a, s: random.f(k, 2 * a, 3 * a, s),
    "t": lambda k, a, s: random.t(k, 3 * a, s),
    "generalized_normal": lambda k, a, s: random.generalized_normal(k, 2 * a, s),
    "triangular": lambda k, a, s: random.triangular(k, 0 * a, 0.5 * a, a, s),
    "wald": lambda k, a, s: random.wald(k, a, s),
    "geometric": lambda k, a, s: random.geometric(k, 0.3 * a, s),
    "binomial": lambda k, a, s: random.binomial(k, 5 * a, 0.3 * a, s),
    "lognormal": lambda k, a, s: random.lognormal(k, 0.5 * a, s),
    "rayleigh": lambda k, a, s: random.rayleigh(k, 2 * a, s),
    "pareto": lambda k, a, s: random.pareto(k, 3 * a, s),
}


@given(
    hs.sampled_from(sorted(_WITH_PARAMS)),
    hs.lists(hs.integers(0, 3), max_size=3).map(tuple),
    hs.data(),
)
def test_parameters_broadcast_to_shape(name, shape, data):
    draw = _WITH_PARAMS[name]
    # parameters of a shape that broadcasts to ``shape``: a suffix of it, some axes of size 1
    rank = data.draw(hs.integers(0, len(shape)))
    pshape = tuple(1 if data.draw(hs.booleans()) else d for d in shape[len(shape) - rank :])
    a = np.ones(pshape, np.float32)
    x = np.asarray(draw(KEY, a, shape))
    assert x.shape == shape
    # the same draws as with the parameters broadcast by numpy first
    want = np.asarray(draw(KEY, np.broadcast_to(a, shape).copy(), shape))
    np.testing.assert_allclose(x, want, rtol=1e-6)
    # a parameter of higher rank never broadcasts to ``shape``
    with pytest.raises(blu.errors.BluShapeError, match=f"random.{name}: .* does not broadcast"):
        draw(KEY, np.ones((2,) + shape, np.float32), shape)


# ---- float64 parameters give draws of the dtype asked for (JAX converts them) -------------------


def _open_unit(k, shape):
    tiny = float(np.finfo(np.float32).tiny)
    return np.asarray(random.uniform(k, shape, np.float32, tiny, 1.0), np.float64)


@pytest.mark.parametrize(
    "name, draw, want",
    [
        (
            "lognormal",
            lambda k, a: random.lognormal(k, a, (2, 3), np.float32),
            lambda k, a: np.exp(a * np.asarray(random.normal(k, (2, 3)), np.float64)),
        ),
        (
            "rayleigh",
            lambda k, a: random.rayleigh(k, a, (2, 3), np.float32),
            lambda k, a: a * np.sqrt(-2 * np.log(_open_unit(k, (2, 3)))),
        ),
        (
            "pareto",
            lambda k, a: random.pareto(k, a, (2, 3), np.float32),
            lambda k, a: _open_unit(k, (2, 3)) ** (-1 / a),
        ),
    ],
)
def test_float64_parameters_give_the_dtype_asked_for(name, draw, want):
    a = np.array([0.5, 1.5, 2.5])  # float64
    x = draw(KEY, a)
    assert x.dtype == np.float32, name
    np.testing.assert_allclose(np.asarray(x, np.float64), want(KEY, a), rtol=1e-5)


def test_weibull_min_float64_parameters_and_jax_broadcasting():
    # JAX's weibull_min broadcasts u of ``shape`` with the parameters (numpy's rules)
    scale, conc = np.array([0.5, 1.0, 2.0]), np.array([[1.5], [3.0]])  # float64
    x = random.weibull_min(KEY, scale, conc, (2, 1), np.float32)
    assert x.dtype == np.float32 and x.shape == (2, 3)
    want = scale * (-np.log(_open_unit(KEY, (2, 1)))) ** (1 / conc)
    np.testing.assert_allclose(np.asarray(x, np.float64), want, rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.bool_])
def test_poisson_dtype_must_be_an_integer(dtype):
    with pytest.raises(blu.errors.BluTypeError, match="random.poisson: dtype must be an integer"):
        random.poisson(KEY, 3.0, (2,), dtype=dtype)
    # integer dtypes give counts of that dtype, lam's float64 notwithstanding
    x = random.poisson(KEY, np.array([0.0, 2.5]), dtype=np.int16)
    assert x.dtype == np.int16 and x.shape == (2,) and int(x[0]) == 0


def test_multivariate_normal_batch_must_broadcast_to_shape():
    mean = np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])  # batch (3,)
    cov = np.array([[2.0, 0.5], [0.5, 1.0]])
    for shape in [(), (2,), (3, 2)]:  # JAX's _check_shape: (3,) must broadcast to shape
        with pytest.raises(blu.errors.BluShapeError, match="random.multivariate_normal: mean"):
            random.multivariate_normal(KEY, mean, cov, shape)
    with pytest.raises(blu.errors.BluShapeError, match="random.multivariate_normal: cov"):
        random.multivariate_normal(KEY, mean[0], np.broadcast_to(cov, (4, 2, 2)), (2,))
    x = random.multivariate_normal(KEY, mean, cov, (2, 3), np.float32)
    z = np.asarray(random.normal(KEY, (2, 3, 2), np.float32), np.float64)
    want = mean + z @ np.linalg.cholesky(cov).T
    assert x.shape == (2, 3, 2)
    np.testing.assert_allclose(np.asarray(x, np.float64), want, rtol=1e-5, atol=1e-5)


def test_poisson_lam_must_broadcast_to_shape():
    lam = np.array([1.0, 2.0, 3.0])
    for shape in [(), (2,), (3, 2)]:
        with pytest.raises(blu.errors.BluShapeError, match="random.poisson: lam f32.3. does not"):
            random.poisson(KEY, lam, shape)
    assert random.poisson(KEY, lam, (2, 3)).shape == (2, 3)
