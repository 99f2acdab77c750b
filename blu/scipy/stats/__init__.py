"""``blu.scipy.stats`` (``jax.scipy.stats``): densities, mass functions, distribution functions
and quantiles of SciPy's distributions on blu arrays, one module per distribution
(``blu.scipy.stats.norm.logpdf``), with JAX's argument names and defaults (``loc=0``,
``scale=1``), broadcasting, promotion (integers become float32) and ``-inf`` log densities
outside the support. The CDFs of ``gamma``, ``chi2``, ``t``, ``beta``, ``poisson`` and ``binom``
are the incomplete gamma and beta functions of ``blu.scipy.special``. ``mode``, ``rankdata`` and
``sem`` work on samples, ``gaussian_kde`` (in ``kde``) estimates a density from them; JAX's
pieces not built yet are listed in ``docs/coming_from_jax.md``.
"""

from blu.scipy.stats._core import ModeResult, mode, rankdata, sem
from blu.scipy.stats.kde import gaussian_kde
from blu.scipy.stats import (
    bernoulli,
    beta,
    betabinom,
    binom,
    cauchy,
    chi2,
    dirichlet,
    expon,
    gamma,
    gennorm,
    geom,
    gumbel_l,
    gumbel_r,
    laplace,
    logistic,
    multinomial,
    multivariate_normal,
    nbinom,
    norm,
    pareto,
    poisson,
    t,
    truncnorm,
    uniform,
    vonmises,
    wrapcauchy,
)

__all__ = [
    "ModeResult",
    "gaussian_kde",
    "mode",
    "rankdata",
    "sem",
    "bernoulli",
    "beta",
    "betabinom",
    "binom",
    "cauchy",
    "chi2",
    "dirichlet",
    "expon",
    "gamma",
    "gennorm",
    "geom",
    "gumbel_l",
    "gumbel_r",
    "laplace",
    "logistic",
    "multinomial",
    "multivariate_normal",
    "nbinom",
    "norm",
    "pareto",
    "poisson",
    "t",
    "truncnorm",
    "uniform",
    "vonmises",
    "wrapcauchy",
]
