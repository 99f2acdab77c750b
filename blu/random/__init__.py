"""blu.random: counter-based pseudo-random numbers from the Threefry-2x32 block cipher.

A *key* is a raw ``uint32[2]`` array (like JAX's ``PRNGKey``): ``key(seed)`` makes one,
``split`` and ``fold_in`` derive new independent keys, and every sampler is a pure function of
its key. The numbers are computed with ``blu.lax`` uint32 operations (add wraps modulo 2**32,
shifts, or, xor), so they are bit-identical eagerly and under ``jit``, and samplers ``vmap``
over batches of keys (``vmap(lambda k: uniform(k, (3,)))(split(k, 8))``).

The generator is Threefry-2x32 with 20 rounds, from J. K. Salmon, M. A. Moraes, R. O. Dror and
D. E. Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011 (the Random123 library).
Derivations follow JAX's "partitionable" Threefry scheme: element ``i`` of a sample of any shape
encrypts the counter ``(hi32(i), lo32(i))`` under the key, so each element is independent of the
shape's layout and of how the work is split across devices. ``key``, ``split``, ``fold_in``,
``bits``, ``uniform`` and ``randint`` give the same numbers as ``jax.random`` with raw
``PRNGKey``s (its default ``jax_threefry_partitionable=True``); ``normal`` agrees to an ulp.

``exponential``, ``gamma``/``loggamma``, ``beta`` and ``dirichlet`` (``blu.random.distributions``)
and ``laplace``, ``logistic``, ``cauchy``, ``poisson``, ``multivariate_normal``...
(``blu.random.more``), ``chisquare``, ``f``, ``t``... (``blu.random.derived``) and
``geometric``... (``blu.random.discrete``) are correct in distribution but do not reproduce
``jax.random``'s bits.

Modules: ``blu.random.prng`` (the cipher, keys, raw bits), ``blu.random.samplers``,
``blu.random.distributions``, ``blu.random.more``, ``blu.random.derived`` and
``blu.random.discrete``.
"""

from blu.random.prng import PRNGKey, bits, fold_in, key, split, threefry2x32
from blu.random.discrete import binomial, geometric, multinomial
from blu.random.distributions import beta, dirichlet, exponential, gamma, loggamma
from blu.random.derived import (
    ball,
    chisquare,
    double_sided_maxwell,
    f,
    generalized_normal,
    maxwell,
    orthogonal,
    t,
    triangular,
    wald,
)
from blu.random.more import (
    cauchy,
    clone,
    key_data,
    laplace,
    logistic,
    lognormal,
    multivariate_normal,
    pareto,
    poisson,
    rademacher,
    rayleigh,
    weibull_min,
    wrap_key_data,
)
from blu.random.samplers import (
    bernoulli,
    categorical,
    choice,
    gumbel,
    normal,
    permutation,
    randint,
    truncated_normal,
    uniform,
)

__all__ = [
    "clone",
    "multinomial",
    "binomial",
    "geometric",
    "orthogonal",
    "triangular",
    "wald",
    "ball",
    "generalized_normal",
    "double_sided_maxwell",
    "maxwell",
    "chisquare",
    "f",
    "t",
    "cauchy",
    "key_data",
    "laplace",
    "logistic",
    "lognormal",
    "multivariate_normal",
    "pareto",
    "poisson",
    "rademacher",
    "rayleigh",
    "weibull_min",
    "wrap_key_data",
    "PRNGKey",
    "bernoulli",
    "beta",
    "bits",
    "categorical",
    "choice",
    "dirichlet",
    "exponential",
    "fold_in",
    "gamma",
    "gumbel",
    "key",
    "loggamma",
    "normal",
    "permutation",
    "randint",
    "split",
    "threefry2x32",
    "truncated_normal",
    "uniform",
]
