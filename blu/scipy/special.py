"""``blu.scipy.special`` (``jax.scipy.special``): special functions on blu arrays, built from
``blu.lax`` primitives so they stage, differentiate and batch.

Integer inputs are computed in float32 (as JAX). Formulas: Abramowitz & Stegun (ch. 6, 7, 26);
``log_ndtr`` uses ``log(erfc(-x / sqrt 2) / 2)`` for ``x > -10`` (-20 in float64) and the
asymptotic series ``-x^2/2 - log(-x) - log(2 pi)/2 + log(1 - 1/x^2 + 3/x^4 - 15/x^6 ...)`` below
(A&S 26.2.12), so it stays finite far into the lower tail. The incomplete gamma
and beta functions are :func:`blu.lax.igamma`, :func:`blu.lax.igammac` and
:func:`blu.lax.betainc` (series and continued fractions in ``while_loop``s). The functions
with their own algorithms (exponential integrals, ``fresnel``, ``wofz``, ``owens_t``,
``sph_harm_y``, ``spence``, ``bessel_jn``, ``hyp1f1``, ``hyp2f1``) live in the private modules
imported below; where they differ from JAX's is listed in ``docs/coming_from_jax.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu import lax
from blu import numpy as bnp
from blu.core.errors import BluError, BluTypeError, with_user_line
from blu.nn import softmax_family as _nn
from blu.nn.softmax_family import logsumexp
from blu.numpy._promote import asarray_operand_in, is_python_scalar
from blu.scipy._bessel_jn import bessel_jn
from blu.scipy._dilog import bernoulli, loggamma, spence
from blu.scipy._exp_integrals import erfcx, exp1, expi, expn
from blu.scipy._faddeeva import wofz
from blu.scipy._fresnel_dawson import dawsn, fresnel, sici
from blu.scipy._hypergeometric import hyp1f1, hyp2f1
from blu.scipy._owens_t import owens_t
from blu.scipy._sph_harm import sph_harm_y

__all__ = [
    "bernoulli",
    "bessel_jn",
    "beta",
    "betainc",
    "betaln",
    "boxcox",
    "boxcox1p",
    "comb",
    "dawsn",
    "digamma",
    "entr",
    "exp1",
    "expi",
    "erf",
    "erfc",
    "erfcx",
    "erfinv",
    "expit",
    "expn",
    "factorial",
    "fresnel",
    "gamma",
    "gammainc",
    "gammaincc",
    "gammaln",
    "gammasgn",
    "hyp1f1",
    "hyp2f1",
    "i0",
    "i0e",
    "i1",
    "i1e",
    "kl_div",
    "log_ndtr",
    "log_softmax",
    "loggamma",
    "logit",
    "logsumexp",
    "multigammaln",
    "ndtr",
    "ndtri",
    "owens_t",
    "poch",
    "polygamma",
    "rel_entr",
    "sici",
    "softmax",
    "spence",
    "sph_harm_y",
    "wofz",
    "xlog1py",
    "xlogy",
    "zeta",
]


def _float(x: Any) -> Any:
    x = bnp.asarray(x)
    return x if bnp.issubdtype(x.dtype, bnp.inexact) else x.astype(np.float32)


def _floats(*xs: Any) -> list:
    arrs = [bnp.asarray(x) for x in xs]
    # JAX's promote_args_inexact: the operands' common type, float32 if that is no float (an
    # integer beside float16 stays float16: it was float32)
    dt = bnp.result_type(*arrs)
    if not bnp.issubdtype(dt, bnp.inexact):
        dt = bnp.result_type(dt, np.dtype(np.float32))
    # a Python float beside float64 is float64's value, not float32's widened
    arrs = [asarray_operand_in(x, dt) if is_python_scalar(x) else a for x, a in zip(xs, arrs)]
    return [x.astype(dt) for x in bnp.broadcast_arrays(*arrs)]


def erf(x: Any) -> Any:
    """The error function ``2/sqrt(pi) * integral_0^x exp(-t^2) dt``."""
    return lax.erf(_float(x))


def erfc(x: Any) -> Any:
    """``1 - erf(x)``, accurate for large ``x``."""
    return lax.erfc(_float(x))


def erfinv(x: Any) -> Any:
    """The inverse of ``erf`` on (-1, 1) (±inf at ±1)."""
    return lax.erf_inv(_float(x))


def gammaln(x: Any) -> Any:
    """``log |Gamma(x)|``."""
    return lax.lgamma(_float(x))


def gammasgn(x: Any) -> Any:
    """The sign of ``Gamma(x)``: 1 for ``x > 0``, ``(-1)^ceil(-x)`` for negative non-integers,
    the sign of zero at ``+-0`` (``Gamma(+-0) = +-inf``), NaN at the poles ``-1, -2, ...``
    and at NaN (scipy's and JAX's values)."""
    x = _float(x)
    fl = bnp.floor(x)
    neg = bnp.where(bnp.remainder(fl, 2) == 0, 1.0, -1.0).astype(x.dtype)
    out = bnp.where(x > 0, bnp.ones_like(x), neg)
    out = bnp.where(x == 0, bnp.copysign(bnp.ones_like(x), x), out)
    return bnp.where(((x < 0) & (fl == x)) | bnp.isnan(x), bnp.nan, out)


def gamma(x: Any) -> Any:
    """The gamma function ``Gamma(x)`` (``gammasgn(x) * exp(gammaln(x))``)."""
    x = _float(x)
    return gammasgn(x) * bnp.exp(lax.lgamma(x))


# DiDonato & Morris (1992), "Algorithm 708", the minimax coefficients of their D0: the error
# ``lgamma(x) - ((x - 1/2) log x - x + log(2 pi) / 2)`` of Stirling's formula, for x >= 8
_STIRLING_ERR = (0.833333333333333e-01, -0.277777777760991e-02, 0.793650666825390e-03,
                 -0.595202931351870e-03, 0.837308034031215e-03, -0.165322962780713e-02)  # fmt: skip


def _stirling_err(x: Any) -> Any:
    t = 1.0 / (x * x)
    return _horner(_STIRLING_ERR[::-1], t) / x


def betaln(a: Any, b: Any) -> Any:
    """``log |B(a, b)| = gammaln(a) + gammaln(b) - gammaln(a + b)``. For ``0 <= a <= b`` with
    ``b >= 8`` (as JAX) the difference ``gammaln(b) - gammaln(a + b)`` is Stirling's formula
    with its cancelling terms taken out and DiDonato & Morris's correction, so a large ``b``
    keeps its digits (the plain difference of two huge ``gammaln`` lost them all)."""
    a, b = _floats(a, b)
    a, b = bnp.minimum(a, b), bnp.maximum(a, b)
    small = lax.lgamma(a) + lax.lgamma(b) - lax.lgamma(a + b)
    big = (a >= 0) & (b >= 8)
    x, y = bnp.where(big, a, 1.0), bnp.where(big, b, 8.0)
    diff = -(x + y - 0.5) * bnp.log1p(x / y) - x * bnp.log(y) + x
    diff = diff + (_stirling_err(y) - _stirling_err(x + y))
    return bnp.where(big, lax.lgamma(a) + diff, small)


def gammainc(a: Any, x: Any) -> Any:
    """The regularized lower incomplete gamma function ``P(a, x)`` (:func:`blu.lax.igamma`
    after JAX's promotion and broadcasting): NaN where ``a < 0``, ``x < 0`` or ``a = x = 0``,
    0 at ``x = 0``, 1 at ``x = inf`` and at ``a = 0`` (scipy's and JAX's); differentiable in
    ``a`` and ``x``."""
    a, x = _floats(a, x)
    return lax.igamma(a, x)


def gammaincc(a: Any, x: Any) -> Any:
    """The regularized upper incomplete gamma function ``Q(a, x) = 1 - P(a, x)``
    (:func:`blu.lax.igammac`, its small values kept by the continued fraction)."""
    a, x = _floats(a, x)
    return lax.igammac(a, x)


def betainc(a: Any, b: Any, x: Any) -> Any:
    """The regularized incomplete beta function ``I_x(a, b)`` (:func:`blu.lax.betainc` after
    JAX's promotion and broadcasting): NaN where ``a <= 0``, ``b <= 0`` or ``x`` is outside
    [0, 1]; differentiable in ``x`` and (unlike JAX's) in ``a`` and ``b``."""
    a, b, x = _floats(a, b, x)
    return lax.betainc(a, b, x)


def digamma(x: Any) -> Any:
    """``d/dx log Gamma(x)``."""
    return lax.digamma(_float(x))


def polygamma(n: Any, x: Any) -> Any:
    """The ``n``-th derivative of ``digamma``: ``n`` integer-valued, a Python number or a
    concrete array broadcast against ``x`` (as JAX's and scipy's); NaN where ``n`` is negative
    or not an integer (scipy's values).

    Raises:
        BluTypeError: ``n`` is traced (each order is its own computation, chosen when tracing).
    """
    try:
        orders = np.asarray(n)
    except BluError:
        raise BluTypeError(
            with_user_line("polygamma: n must be concrete (a Python int or a concrete array)")
        ) from None
    if not np.issubdtype(orders.dtype, np.number) and orders.dtype != np.bool_:
        raise BluTypeError(with_user_line(f"polygamma: n must be integer-valued, got {n!r}"))
    x = _float(x)
    with np.errstate(invalid="ignore"):
        valid = np.isfinite(orders) & (orders == np.floor(orders)) & (orders >= 0)
    if orders.ndim == 0 and valid:
        return lax.polygamma(int(orders), x)
    shape = np.broadcast_shapes(orders.shape, x.shape)
    xb = bnp.broadcast_to(x, shape)
    out = bnp.full(shape, np.nan, x.dtype)
    for k in np.unique(orders[valid]):
        out = bnp.where(np.broadcast_to(orders == k, shape), lax.polygamma(int(k), xb), out)
    return out


def factorial(n: Any, exact: bool = False) -> Any:
    """``n!`` as ``Gamma(n + 1)`` (0 for negative ``n``); ``exact=True`` is not available
    (it needs arbitrary-precision integers; use ``math.factorial``).

    Raises:
        ValueError-compatible BluValueError: ``exact=True``.
    """
    if exact:
        from blu.core.errors import BluValueError

        raise BluValueError("factorial(exact=True) is not available: use math.factorial")
    n = _float(n)
    return bnp.where(n < 0, 0.0, bnp.exp(lax.lgamma(n + 1.0))).astype(n.dtype)


def multigammaln(a: Any, d: int) -> Any:
    """The log of the multivariate gamma function of dimension ``d`` (an int):
    ``d(d-1)/4 log(pi) + sum_j gammaln(a - j/2)``."""
    a = _float(a)
    d = int(d)
    out = sum(lax.lgamma(a - 0.5 * j) for j in range(d))
    return out + d * (d - 1) / 4.0 * math.log(math.pi)


def poch(z: Any, m: Any) -> Any:
    """The rising factorial ``Gamma(z + m) / Gamma(z)``: 1 for ``m == 0``; at a pole ``z`` of
    ``Gamma`` (0, -1, ...), 0, or where ``z + m`` is a pole too, the finite limit
    ``(-1)^m Gamma(1 - z) / Gamma(1 - z - m)`` (scipy's values)."""
    z, m = _floats(z, m)
    zm = z + m
    out = gammasgn(zm) * gammasgn(z) * bnp.exp(lax.lgamma(zm) - lax.lgamma(z))
    pole = (z <= 0) & (bnp.floor(z) == z)
    both = pole & (zm <= 0) & (bnp.floor(zm) == zm)
    one_z, one_zm = bnp.where(both, 1.0 - z, 1.0), bnp.where(both, 1.0 - zm, 1.0)
    sign = bnp.where(bnp.remainder(m, 2) == 0, 1.0, -1.0)
    limit = sign * bnp.exp(lax.lgamma(one_z) - lax.lgamma(one_zm))
    out = bnp.where(pole, bnp.where(both, limit, 0.0), out)
    return bnp.where(m == 0, 1.0, out).astype(z.dtype)


def expit(x: Any) -> Any:
    """The logistic sigmoid ``1 / (1 + exp(-x))``."""
    return lax.logistic(_float(x))


def logit(p: Any) -> Any:
    """``log(p / (1 - p))``."""
    p = _float(p)
    return bnp.log(p) - bnp.log1p(-p)


def xlogy(x: Any, y: Any) -> Any:
    """``x * log(y)``, 0 where ``x == 0``."""
    x, y = _floats(x, y)
    safe = bnp.where(x == 0, bnp.ones_like(y), y)
    return bnp.where(x == 0, bnp.zeros_like(x), x * bnp.log(safe))


def xlog1py(x: Any, y: Any) -> Any:
    """``x * log1p(y)``, 0 where ``x == 0``."""
    x, y = _floats(x, y)
    safe = bnp.where(x == 0, bnp.zeros_like(y), y)
    return bnp.where(x == 0, bnp.zeros_like(x), x * bnp.log1p(safe))


def entr(x: Any) -> Any:
    """``-x log x`` for ``x > 0``, 0 at 0, ``-inf`` for ``x < 0``."""
    x = _float(x)
    return bnp.where(x < 0, -bnp.inf, -xlogy(x, x))


def rel_entr(p: Any, q: Any) -> Any:
    """``p log(p / q)`` for ``p, q > 0``; 0 where ``p == 0, q >= 0``; ``inf`` otherwise."""
    p, q = _floats(p, q)
    both = (p > 0) & (q > 0)
    safe_p = bnp.where(both, p, 1.0)
    safe_q = bnp.where(both, q, 1.0)
    val = safe_p * (bnp.log(safe_p) - bnp.log(safe_q))
    return bnp.where(both, val, bnp.where((p == 0) & (q >= 0), 0.0, bnp.inf)).astype(p.dtype)


def kl_div(p: Any, q: Any) -> Any:
    """``p log(p / q) - p + q`` (``rel_entr(p, q) - p + q``)."""
    p, q = _floats(p, q)
    return bnp.where((p >= 0) & (q >= 0), rel_entr(p, q) - p + q, bnp.inf).astype(p.dtype)


_SQRT1_2 = 1.0 / math.sqrt(2.0)


def ndtr(x: Any) -> Any:
    """The standard normal CDF ``erfc(-x / sqrt 2) / 2``."""
    x = _float(x)
    return 0.5 * lax.erfc(-x * _SQRT1_2)


# P. J. Acklam's rational approximation of the lower tail of the normal quantile (relative
# error 1.15e-9), refined by one Halley step on ndtr below
_TAIL_NUM = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00,
             -2.549732539343734e00, 4.374664141464968e00, 2.938163982698783e00)  # fmt: skip
_TAIL_DEN = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00,
             3.754408661907416e00, 1.0)  # fmt: skip
_P_LOW = 0.02425


def _horner(c: tuple, x: Any) -> Any:
    out = bnp.full_like(x, c[0])
    for a in c[1:]:
        out = out * x + a
    return out


def ndtri(p: Any) -> Any:
    """The inverse of ``ndtr``: ``sqrt 2 * erfinv(2p - 1)`` for ``p >= 0.02425``; below, where
    ``2p - 1`` would round to -1, Acklam's rational approximation in ``sqrt(-2 log p)`` and one
    Halley step on ``ndtr(x) - p`` (finite down to the smallest normal ``p``; ``-inf`` at 0,
    NaN outside [0, 1])."""
    p = _float(p)
    # (where, not maximum: at p = _P_LOW a tie would halve the gradient)
    central = math.sqrt(2.0) * lax.erf_inv(2.0 * bnp.where(p < _P_LOW, _P_LOW, p) - 1.0)
    low = (p > 0) & (p < _P_LOW)
    pl = bnp.where(low, p, _P_LOW)
    q = bnp.sqrt(-2.0 * bnp.log(pl))
    x = _horner(_TAIL_NUM, q) / _horner(_TAIL_DEN, q)
    e = 0.5 * lax.erfc(-x * _SQRT1_2) - pl
    u = e * math.sqrt(2.0 * math.pi) * bnp.exp(0.5 * x * x)  # inf for subnormal p: no step
    x = bnp.where(bnp.isfinite(u), x - u / (1.0 + 0.5 * x * u), x)
    out = bnp.where(low, x, central)
    out = bnp.where(p == 0, -bnp.inf, bnp.where(p < 0, bnp.nan, out))
    return out.astype(p.dtype)


def log_ndtr(x: Any) -> Any:
    """``log(ndtr(x))``: ``log1p(-ndtr(-x))`` for ``x > 0`` (so the upper tail keeps its tiny
    negative values), finite far into the lower tail (asymptotic series below -10; below -20
    in float64, with three more terms, where ``erfc`` is still exact and the series' first
    omitted term is ~1e-16 relative, not ~1e-9 as at -10)."""
    x = _float(x)
    wide = x.dtype == np.float64
    lo = -20.0 if wide else -10.0
    # (where, not clip or maximum: a tie at a branch point would halve the gradient)
    mid = bnp.log(0.5 * lax.erfc(-bnp.where(x > 0.0, 0.0, bnp.where(x > lo, x, lo))
                                 * _SQRT1_2))  # fmt: skip
    upper = bnp.log1p(-0.5 * lax.erfc(bnp.where(x > 0.0, x, 0.0) * _SQRT1_2))
    t = bnp.where(x > lo, lo, x)
    inv2 = 1.0 / (t * t)
    series = 1.0 - inv2 + 3.0 * inv2**2 - 15.0 * inv2**3 + 105.0 * inv2**4
    if wide:  # (2k - 1)!! / t^2k, alternating
        series = series - 945.0 * inv2**5 + 10395.0 * inv2**6 - 135135.0 * inv2**7
    tail = -0.5 * t * t - bnp.log(-t) - 0.5 * math.log(2 * math.pi) + bnp.log(series)
    return bnp.where(x > 0.0, upper, bnp.where(x > lo, mid, tail))


def softmax(x: Any, axis: int | Sequence[int] | None = None, *, where: Any = None) -> Any:
    """``exp(x) / sum(exp(x))`` over ``axis``, as ``jax.scipy.special.softmax`` and SciPy's:
    by default over all the elements (``axis=None``; :func:`blu.nn.softmax` normalizes the last
    axis). ``where`` is :func:`blu.nn.softmax`'s mask, which JAX's and SciPy's lack.

    Raises:
        BluValueError: an axis out of range or repeated.
    """
    return _nn.softmax(x, axis, where=where)


def log_softmax(x: Any, axis: int | Sequence[int] | None = None, *, where: Any = None) -> Any:
    """``x - logsumexp(x)`` over ``axis``, as ``jax.scipy.special.log_softmax`` and SciPy's:
    by default over all the elements (``axis=None``; :func:`blu.nn.log_softmax` normalizes the
    last axis). ``where`` is :func:`blu.nn.log_softmax`'s mask, which JAX's and SciPy's lack.

    Raises:
        BluValueError: an axis out of range or repeated.
    """
    return _nn.log_softmax(x, axis, where=where)


def i0e(x: Any) -> Any:
    """The exponentially scaled modified Bessel function of order 0, ``exp(-|x|) I0(x)``."""
    return lax.bessel_i0e(_float(x))


def i1e(x: Any) -> Any:
    """The exponentially scaled modified Bessel function of order 1, ``exp(-|x|) I1(x)``."""
    return lax.bessel_i1e(_float(x))


def i0(x: Any) -> Any:
    """The modified Bessel function of order 0, ``i0e(x) * exp(|x|)`` (as JAX)."""
    x = _float(x)
    return lax.bessel_i0e(x) * bnp.exp(bnp.abs(x))


def i1(x: Any) -> Any:
    """The modified Bessel function of order 1, ``i1e(x) * exp(|x|)`` (as JAX)."""
    x = _float(x)
    return lax.bessel_i1e(x) * bnp.exp(bnp.abs(x))


def zeta(x: Any, q: Any = None) -> Any:
    """The Hurwitz zeta function ``sum_n (n + q)^-x`` (:func:`blu.lax.zeta`: NaN for ``x < 1``
    or ``q <= 0`` off the poles, as JAX's).

    Raises:
        BluValueError: ``q`` is None (the Riemann zeta function is not built, as in JAX:
            pass ``q=1`` for ``x > 1``).
    """
    if q is None:
        from blu.core.errors import BluValueError

        raise BluValueError(
            "zeta: the Riemann zeta function is not built; pass q (q=1 gives it for x > 1)"
        )
    x, q = _floats(x, q)
    return lax.zeta(x, q)


def beta(a: Any, b: Any) -> Any:
    """The beta function ``Gamma(a) Gamma(b) / Gamma(a + b)``: ``exp(betaln(a, b))`` with the
    signs of the three gammas (as JAX)."""
    a, b = _floats(a, b)
    sign = gammasgn(a) * gammasgn(b) * gammasgn(a + b)
    return sign * bnp.exp(betaln(a, b))


def comb(N: Any, k: Any, *, exact: bool = False, repetition: bool = False) -> Any:
    """The number of combinations of ``N`` things taken ``k`` at a time,
    ``exp(gammaln(N + 1) - gammaln(k + 1) - gammaln(N - k + 1))``; with ``repetition``,
    ``comb(N + k - 1, k)``. 0 where ``k < 0``, ``N < 0`` or ``k > N``, 1 where ``k == 0`` and
    ``inf`` for ``N = inf`` otherwise (scipy's values).

    Raises:
        BluValueError: ``exact=True`` (arbitrary-precision integers: use ``math.comb``).
    """
    if exact:
        from blu.core.errors import BluValueError

        raise BluValueError("comb(exact=True) is not available: use math.comb")
    N, k = _floats(N, k)
    if repetition:
        N = N + k - 1.0
    ok = (k >= 0) & (N >= 0) & (k <= N)
    n1 = bnp.where(ok, N + 1.0, 1.0)
    k1 = bnp.where(ok, k + 1.0, 1.0)
    out = bnp.exp(lax.lgamma(n1) - lax.lgamma(k1) - lax.lgamma(n1 - k1 + 1.0))
    out = bnp.where(bnp.isinf(N), bnp.inf, out)
    return bnp.where(ok, bnp.where(k == 0, 1.0, out), 0.0).astype(N.dtype)


def boxcox(x: Any, lmbda: Any) -> Any:
    """The Box-Cox transform ``(x^lmbda - 1) / lmbda`` (``expm1(lmbda log x) / lmbda``), and
    ``log(x)`` where ``lmbda == 0`` (NaN for ``x < 0``, as JAX's and scipy's)."""
    x, lmbda = _floats(x, lmbda)
    return _boxcox(bnp.log(x), lmbda)


def boxcox1p(x: Any, lmbda: Any) -> Any:
    """``boxcox(1 + x, lmbda)``, with ``log1p(x)`` so small ``x`` keep their digits."""
    x, lmbda = _floats(x, lmbda)
    return _boxcox(bnp.log1p(x), lmbda)


def _boxcox(logx: Any, lmbda: Any) -> Any:
    zero = lmbda == 0
    safe = bnp.where(zero, 1.0, lmbda)
    return bnp.where(zero, logx, bnp.expm1(safe * logx) / safe)
