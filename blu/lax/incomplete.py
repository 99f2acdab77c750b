"""The regularized incomplete gamma functions (``jax.lax.igamma``, ``igammac``,
``igamma_grad_a``), composed of elementwise operations and ``while_loop``, and the loop helpers
that :mod:`blu.lax.incomplete_beta` (``betainc``) shares.

- ``igamma(a, x) = P(a, x)``, the lower one, by the power series
  ``P = x^a e^-x / Gamma(a) * sum_n x^n / (a (a+1) ... (a+n))`` for ``x < a + 1`` and
  ``igammac(a, x) = Q = 1 - P`` by the continued fraction (modified Lentz) otherwise: Numerical
  Recipes (Press et al., 3rd ed., sec. 6.2, ``gser``/``gcf``), Cephes ``igam.c``; the split
  JAX's and XLA's ``igamma`` make too.

The loops are ``while_loop``s that stop when every element has converged (to the dtype's
epsilon, at most ``_MAX_ITER`` steps, as JAX's), each element keeping its value once done, so
they trace to a small jaxpr, batch under ``vmap`` and run under ``jit``. A continued fraction
whose coefficient is 0 for a whole parameter (``-i (i - a)`` at ``i = a``) ends there: its value
has converged, its derivative in that parameter not, so the loop also waits for a shadow
fraction with that gap kept from 0 (``_shadow_gap``). The common factor
``x^a e^-x / Gamma(a)`` is formed in logs, with Stirling's series for ``lgamma`` from ``a = 10``
on, so the cancellation of ``a log x`` against ``x`` and ``lgamma(a)`` keeps the digits near
``x = a`` for large ``a``.

Derivatives (``custom_jvp``): in ``x`` the closed form (the density
``x^(a-1) e^-x / Gamma(a)``); in ``a`` the forward-mode derivative of the loops
(``igamma_grad_a``; as JAX's and Eigen's, which differentiate the series and the fraction).
Those are ``custom_jvp`` functions again (``while_loop`` itself has no reverse mode):
``_igamma_dak``, one per order, so every order in ``a`` and ``x`` is built, in both modes.
"""

from __future__ import annotations

__all__ = ["igamma", "igamma_grad_a", "igammac"]

import math
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.errors import BluTypeError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax.bits import and_, not_, or_
from blu.lax.casts import convert_element_type
from blu.lax.control_flow.loops import while_loop
from blu.lax.elementwise import (
    abs,
    add,
    div,
    eq,
    exp,
    gt,
    le,
    log,
    lt,
    mul,
    ne,
    neg,
    operands,
    select,
    sub,
)
from blu.lax.reductions import reduce_or
from blu.lax.shapes import full, full_like
from blu.lax.special import digamma, lgamma, log1p
from blu.transforms.ad import jvp_flat
from blu.transforms.ad_ops import stop_gradient
from blu.transforms.ad_util import Zero, instantiate, tangent_aval
from blu.transforms.custom_jvp import custom_jvp

_MAX_ITER = 2000  # JAX's bound on the series and continued-fraction steps
_STIRLING_FROM = 10.0
# lgamma(a) - ((a - 1/2) log a - a + log(2 pi) / 2) = sum_k B_2k / (2k (2k - 1) a^(2k - 1)):
# below 1e-16 relative from a = 10 with these seven terms
_STIRLING = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _float_operands(name: str, *xs: Any) -> tuple[list, Any]:
    """Operands of one shape and float dtype; half floats computed in float32 (returned: the
    operands' dtype, to cast the results back)."""
    xs = operands(*xs)
    dts = {get_aval(x).dtype for x in xs}
    dt = get_aval(xs[0]).dtype
    if len(dts) > 1 or not dtypes.is_float(dt):
        shown = ", ".join(get_aval(x).str_short() for x in xs)
        raise BluTypeError(
            with_user_line(f"{name}: needs real float operands of one dtype, got {shown}")
        )
    if dt in (dtypes.float16, dtypes.bfloat16):
        xs = [convert_element_type(x, np.float32) for x in xs]
    return list(xs), dt


def _c(like: Any, v: float) -> Any:
    return full_like(like, v)


def _tiny(like: Any) -> float:
    fi = np.finfo(get_aval(like).dtype)
    return float(fi.tiny) / float(fi.eps)  # NR's FPMIN: 1e-30 in float32, ~1e-292 in float64


def _eps(like: Any) -> float:
    return float(np.finfo(get_aval(like).dtype).eps)


def _where(pred: Any, x: Any, safe: float) -> Any:
    """``x`` where ``pred``, else ``safe`` (the loops' operands off their branch)."""
    return select(pred, x, _c(x, safe))


def _stirling_rest(a: Any) -> Any:
    """``lgamma(a) - ((a - 1/2) log a - a + log(2 pi) / 2)`` for ``a >= 10``."""
    inv = div(_c(a, 1.0), a)
    inv2 = mul(inv, inv)
    s = _c(a, _STIRLING[-1])
    for k in _STIRLING[-2::-1]:
        s = add(mul(s, inv2), _c(a, k))
    return mul(s, inv)


def _log_gamma_factor(a: Any, x: Any) -> Any:
    """``a log x - x - lgamma(a)``; for ``a >= 10`` with Stirling's series and
    ``a (log1p(t) - t)``, ``t = x/a - 1``, so ``x`` near ``a`` keeps its digits."""
    plain = sub(sub(mul(a, log(x)), x), lgamma(a))
    big = le(_c(a, _STIRLING_FROM), a)
    ab = _where(big, a, _STIRLING_FROM)
    t = div(sub(x, ab), ab)
    near = lt(abs(t), _c(t, 0.5))
    tn = _where(near, t, 0.0)
    around = select(near, mul(ab, sub(log1p(tn), tn)), add(mul(ab, log(div(x, ab))), sub(ab, x)))
    big_val = sub(add(around, sub(mul(_c(a, 0.5), log(ab)), _c(a, _HALF_LOG_2PI))),
                  _stirling_rest(ab))  # fmt: skip
    return select(big, big_val, plain)


def _any(pred: Any) -> Any:
    nd = len(get_aval(pred).shape)
    return reduce_or(pred, tuple(range(nd))) if nd else pred


def _loop(state: tuple, active: Any, step: Any) -> tuple:
    """Run ``step(n, state) -> (state, converged)`` on the active elements until every one has
    converged or ``_MAX_ITER`` steps; done elements keep their state."""

    def cond(carry):
        n, done = carry[0], carry[1]
        return and_(lt(n, full((), _MAX_ITER, np.int32)), _any(not_(done)))

    def body(carry):
        n, done, st = carry
        new, conv = step(n, st)
        st = tuple(select(done, o, v) for o, v in zip(st, new))
        return add(n, full((), 1, np.int32)), or_(done, conv), st

    _, _, out = while_loop(cond, body, (full((), 1, np.int32), not_(active), state))
    return out


def _series(a: Any, x: Any, active: Any) -> Any:
    """``sum_n x^n / (a (a+1) ... (a+n))`` (times ``x^a e^-x / Gamma(a)`` it is ``P``)."""
    eps = _eps(a)

    def step(n, st):
        ap, term, total = st
        ap = add(ap, _c(ap, 1.0))
        term = mul(term, div(x, ap))
        total = add(total, term)
        return (ap, term, total), le(abs(term), mul(abs(total), _c(total, eps)))

    first = div(_c(a, 1.0), a)
    return _loop((a, first, first), active, step)[2]


def _shadow_gap(v: Any) -> Any:
    """``v`` kept at least 1/2 from 0: the gap ``i - a`` (``q - m``) of a continued fraction's
    coefficient in the shadow fraction that decides when the loop stops."""
    return select(lt(abs(v), _c(v, 0.5)), _c(v, 0.5), v)


def _advance(h: Any, h_new: Any, done: Any) -> Any:
    """``h_new``; where the value is ``done`` (converged, the loop running on for the shadow
    fraction), ``h``'s value with ``h_new``'s derivative: the steps after an exact end multiply
    by ``1 +- ulp`` and would drift (``Q(2, 5)`` by 3 ulps). ``h - h_new`` is exact (they are
    within a factor of 2), so the sum is ``h`` exactly."""
    return select(done, add(h_new, stop_gradient(sub(h, h_new))), h_new)


def _converged(delta: Any, eps: float) -> Any:
    return le(abs(sub(delta, _c(delta, 1.0))), _c(delta, eps))


def _clamp(v: Any, tiny: float) -> Any:
    """``v``, or ``tiny`` where it is smaller in magnitude (Lentz's guard against 0)."""
    return select(lt(abs(v), _c(v, tiny)), _c(v, tiny), v)


def _lentz(an: Any, bn: Any, c: Any, d: Any, tiny: float) -> tuple[Any, Any, Any]:
    """One modified-Lentz step for the partial numerator ``an`` and denominator ``bn``:
    ``(c, d, delta)``, the convergent multiplied by ``delta``."""

    d = div(_c(d, 1.0), _clamp(add(mul(an, d), bn), tiny))
    c = _clamp(add(bn, div(an, c)), tiny)
    return c, d, mul(d, c)


def _gamma_fraction(a: Any, x: Any, active: Any) -> Any:
    """NR's ``gcf`` by modified Lentz (times ``x^a e^-x / Gamma(a)`` it is ``Q``).

    The coefficient ``-i (i - a)`` is 0 at ``i = a`` for a whole ``a``: the fraction ends there
    and its value converges, but not its derivative in ``a`` (the forward-mode tangents of the
    loop), which takes the rest of the fraction. So the loop stops when a shadow fraction, its
    gaps ``i - a`` kept 1/2 from 0 (outside the derivatives), has converged too (the first
    derivative in ``a`` at ``(2, 5)`` was 5e-5 off). The first step is taken outside the loop:
    NR's ``c = 1 / FPMIN`` start overflowed in third derivatives (NaN)."""
    eps, tiny = _eps(a), _tiny(a)
    one = _c(a, 1.0)
    sa = stop_gradient(a)

    def step(n, st):
        i, b, c, d, h, cs, ds, done = st
        i = add(i, one)
        b = add(b, _c(b, 2.0))
        c, d, delta = _lentz(mul(neg(i), sub(i, a)), b, c, d, tiny)
        an_s = mul(neg(i), _shadow_gap(sub(i, sa)))
        cs, ds, delta_s = _lentz(an_s, stop_gradient(b), cs, ds, tiny)
        h = _advance(h, mul(h, delta), done)
        done = or_(done, _converged(delta, eps))
        return (i, b, c, d, h, cs, ds, done), and_(done, _converged(delta_s, eps))

    b0 = sub(add(x, one), a)
    d0 = div(one, b0)
    # the first step, c_0 = inf: c_1 = b_1
    b1 = add(b0, _c(b0, 2.0))
    c1, d1, delta = _lentz(neg(sub(one, a)), b1, _c(a, np.inf), d0, tiny)
    cs1, ds1, _ = _lentz(neg(_shadow_gap(sub(one, sa))), stop_gradient(b1), _c(a, np.inf),
                         stop_gradient(d0), tiny)  # fmt: skip
    state = (one, b1, c1, d1, mul(d0, delta), cs1, ds1, not_(active))
    return _loop(state, active, step)[4]


def _igamma_pair(a: Any, x: Any) -> tuple[Any, Any]:
    """``(P, Q)`` with JAX's and scipy's special values: NaN for ``a < 0``, ``x < 0``,
    ``a = x = 0`` or NaN operands; ``(0, 1)`` at ``x = 0``, ``(1, 0)`` at ``x = inf`` and at
    ``a = 0`` (the limit from ``a > 0`` for ``x > 0``)."""
    zero, inf = eq(x, _c(x, 0.0)), eq(x, _c(x, np.inf))
    a0 = eq(a, _c(a, 0.0))
    bad = or_(or_(lt(a, _c(a, 0.0)), lt(x, _c(x, 0.0))), or_(ne(a, a), ne(x, x)))
    bad = or_(bad, and_(a0, zero))
    ok = not_(or_(or_(or_(bad, zero), a0), or_(inf, eq(a, _c(a, np.inf)))))
    frac = and_(ok, gt(x, add(a, _c(a, 1.0))))
    ser = and_(ok, not_(frac))
    a_s, x_s = _where(ok, a, 1.0), _where(ok, x, 1.0)
    factor = exp(_log_gamma_factor(a_s, x_s))
    p_ser = mul(factor, _series(_where(ser, a_s, 1.0), _where(ser, x_s, 0.5), ser))
    q_frac = mul(factor, _gamma_fraction(_where(frac, a_s, 1.0), _where(frac, x_s, 3.0), frac))
    one = _c(a, 1.0)
    p = select(frac, sub(one, q_frac), p_ser)
    q = select(frac, q_frac, sub(one, p_ser))
    for pred, pv, qv in ((zero, 0.0, 1.0), (inf, 1.0, 0.0), (a0, 1.0, 0.0), (bad, np.nan, np.nan)):
        p, q = select(pred, _c(p, pv), p), select(pred, _c(q, qv), q)
    # a = inf with a finite x: P = 0 (scipy's); NaN stays NaN
    a_inf = and_(eq(a, _c(a, np.inf)), not_(or_(bad, inf)))
    p, q = select(a_inf, _c(p, 0.0), p), select(a_inf, _c(q, 1.0), q)
    return p, q


def _jvp_in(fn: Any, k: int, *args: Any) -> Any:
    """The derivative of the elementwise ``fn`` in its ``k``-th operand, forward mode through
    the loops."""
    tangents = [full_like(v, 1.0) if i == k else Zero(tangent_aval(get_aval(v)))
                for i, v in enumerate(args)]  # fmt: skip
    _, out = jvp_flat(lambda *v: [fn(*v)], list(args), tangents)
    return instantiate(out[0])


def _gamma_density(a: Any, x: Any) -> Any:
    """``dP/dx = x^(a-1) e^-x / Gamma(a)`` (its limit at ``x = 0``: inf, 1 or 0)."""
    pos = gt(x, _c(x, 0.0))
    xs = _where(pos, x, 1.0)
    val = exp(sub(_log_gamma_factor(a, xs), log(xs)))
    at0 = select(lt(a, _c(a, 1.0)), _c(a, np.inf), select(eq(a, _c(a, 1.0)), _c(a, 1.0),
                                                          _c(a, 0.0)))  # fmt: skip
    return select(pos, val, select(eq(x, _c(x, 0.0)), at0, _c(x, 0.0)))


def _times_log(density: Any, logs: Any) -> Any:
    """``density * logs``, 0 where the density is (``log x = -inf`` at ``x = 0``)."""
    zero = eq(density, _c(density, 0.0))
    return select(zero, density, mul(density, select(zero, _c(logs, 0.0), logs)))


def _p(a: Any, x: Any) -> Any:
    return _igamma_pair(a, x)[0]


def _p_da(a: Any, x: Any) -> Any:
    # at a = 0 P is the constant 1 of _igamma_pair's special values, whose derivative (0) is not
    # the one-sided limit (-E1(x)): NaN there, as JAX's
    da = _jvp_in(_p, 0, a, x)
    return select(eq(a, _c(a, 0.0)), _c(da, np.nan), da)


@custom_jvp
def _igamma_da(a: Any, x: Any) -> Any:
    return _p_da(a, x)


def _gamma_density_da(a: Any, x: Any) -> Any:
    """``d/da`` of the density, ``density (log x - digamma(a))`` (0 where the density is)."""
    return _times_log(_gamma_density(a, x), sub(log(x), digamma(a)))


def _p_dak(k: int, a: Any, x: Any) -> Any:
    """``d^k P / da^k``: the loops differentiated ``k`` times in forward mode."""
    return _p_da(a, x) if k == 1 else _jvp_in(lambda a, x: _p_dak(k - 1, a, x), 0, a, x)


def _gamma_density_dak(k: int, a: Any, x: Any) -> Any:
    """``d^k/da^k`` of the density (forward mode through the closed form)."""
    if k == 1:
        return _gamma_density_da(a, x)
    return _jvp_in(lambda a, x: _gamma_density_dak(k - 1, a, x), 0, a, x)


def _igamma_dak_rule(k, primals, tangents):
    # in a the next order (a call from its own rule: applied only when differentiated), in x
    # d^k/da^k of the density
    (a, x), (ta, tx) = primals, tangents
    da, dx = _igamma_dak(k + 1, a, x), _gamma_density_dak(k, a, x)
    return _p_dak(k, a, x), add(mul(ta, da), mul(tx, dx))


# d^k P / da^k for k >= 2, so every order of derivative in a and x works in both modes
_igamma_dak = custom_jvp(_p_dak, nondiff_argnums=(0,))
_igamma_dak.defjvp(_igamma_dak_rule)


@_igamma_da.defjvp
def _igamma_da_jvp(primals, tangents):
    # in x the closed form d/da of the density; in a the loops differentiated twice (itself
    # differentiable again: _igamma_dak)
    (a, x), (ta, tx) = primals, tangents
    daa = _igamma_dak(2, a, x)
    return _p_da(a, x), add(mul(ta, daa), mul(tx, _gamma_density_da(a, x)))


@custom_jvp
def _igamma(a: Any, x: Any) -> Any:
    return _p(a, x)


@_igamma.defjvp
def _igamma_jvp(primals, tangents):
    (a, x), (ta, tx) = primals, tangents
    return _p(a, x), add(mul(ta, _igamma_da(a, x)), mul(tx, _gamma_density(a, x)))


@custom_jvp
def _igammac(a: Any, x: Any) -> Any:
    return _igamma_pair(a, x)[1]


@_igammac.defjvp
def _igammac_jvp(primals, tangents):
    (a, x), (ta, tx) = primals, tangents
    q = _igamma_pair(a, x)[1]
    return q, neg(add(mul(ta, _igamma_da(a, x)), mul(tx, _gamma_density(a, x))))


def _finish(out: Any, dt: Any) -> Any:
    return out if get_aval(out).dtype == dt else convert_element_type(out, dt)


def igamma(a: Any, x: Any) -> Any:
    """The regularized lower incomplete gamma function
    ``P(a, x) = integral_0^x t^(a-1) e^-t dt / Gamma(a)`` (``jax.lax.igamma``;
    ``scipy.special.gammainc``).

    Series below ``x = a + 1``, continued fraction above (module docstring). NaN where
    ``a < 0``, ``x < 0``, ``a = x = 0`` or either is NaN; 0 at ``x = 0``, 1 at ``x = inf``
    and at ``a = 0`` (JAX's and scipy's ``gammainc(0, x)``). Derivatives:
    ``x^(a-1) e^-x / Gamma(a)`` in ``x``, :func:`igamma_grad_a` in ``a`` (NaN at ``a = 0``).

    Args:
        a, x: float arrays of one shape and dtype (a Python scalar takes the other's);
            float16/bfloat16 computed in float32.

    Returns:
        An array of their shape and dtype.

    Raises:
        BluTypeError: operands that are not real floats, or of different dtypes.
        BluShapeError: operands of different shapes.
    """
    (a, x), dt = _float_operands("igamma", a, x)
    return _finish(_igamma(a, x), dt)


def igammac(a: Any, x: Any) -> Any:
    """The regularized upper incomplete gamma function ``Q(a, x) = 1 - P(a, x)``
    (``jax.lax.igammac``; ``scipy.special.gammaincc``), by the continued fraction above
    ``x = a + 1`` (so its small values keep their digits), ``1 -`` the series below. NaN where
    ``a < 0``, ``x < 0``, ``a = x = 0`` or either is NaN; 1 at ``x = 0``, 0 at ``x = inf`` and
    at ``a = 0``.

    Args:
        a, x: float arrays of one shape and dtype (as :func:`igamma`'s).

    Returns:
        An array of their shape and dtype.

    Raises:
        BluTypeError: operands that are not real floats, or of different dtypes.
        BluShapeError: operands of different shapes.
    """
    (a, x), dt = _float_operands("igammac", a, x)
    return _finish(_igammac(a, x), dt)


def igamma_grad_a(a: Any, x: Any) -> Any:
    """``dP(a, x) / da`` (``jax.lax.igamma_grad_a``), the forward-mode derivative of
    :func:`igamma`'s series and continued fraction. It has no derivative itself in reverse mode
    (a ``while_loop``; JAX's has none).

    Args:
        a, x: float arrays of one shape and dtype (as :func:`igamma`'s).

    Returns:
        An array of their shape and dtype; NaN where :func:`igamma` is.

    Raises:
        BluTypeError: operands that are not real floats, or of different dtypes.
        BluShapeError: operands of different shapes.
    """
    (a, x), dt = _float_operands("igamma_grad_a", a, x)
    return _finish(_igamma_da(a, x), dt)
