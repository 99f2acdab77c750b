"""The confluent and Gauss hypergeometric functions ``hyp1f1`` and ``hyp2f1`` of
``blu.scipy.special`` (``jax.scipy.special``'s) for real arguments, composed of ``blu.numpy``
operations and ``while_loop``s.

- The power series ``sum_k prod (n_i)_k / prod (d_j)_k x^k / k!`` (DLMF 16.2.1) is summed in a
  ``while_loop`` until each element's term falls below ``eps`` of its sum, past the negative
  denominators; with it, for the derivatives in the parameters, ``sum_k t_k (psi(p + k) -
  psi(p))``, the digamma differences accumulated as ``sum_j 1 / (p + j)``.
- ``hyp1f1(a, b, x)``: for ``x < 0`` Kummer's transformation ``e^x 1F1(b - a; b; -x)``
  (DLMF 13.2.39), so the series has no cancellation for ``b > a``; for large ``|x|`` the
  asymptotic series ``Gamma(b) / Gamma(a) e^x x^(a - b) sum_k (b - a)_k (1 - a)_k / k! x^-k``
  (DLMF 13.7.2) with its subdominant part ``cos(pi a) Gamma(b) / Gamma(b - a) x^-a sum_k
  (a)_k (a - b + 1)_k / k! (-x)^-k`` (its Stokes line: real ``x``), each truncated at its
  smallest term. A non-positive integer ``a`` is a polynomial (no transformation).
- ``hyp2f1(a, b, c, x)``: for ``x < 0`` Pfaff's transformation ``(1 - x)^-a 2F1(a, c - b; c;
  x / (x - 1))`` (DLMF 15.8.1) into ``[0, 1)``; there the series up to 0.75, above the
  connection formula in ``1 - x`` (DLMF 15.8.4, A&S 15.3.6), or where ``c - a - b`` is an
  integer its logarithmic limit (A&S 15.3.10-11, after Euler's ``(1 - x)^(c - a - b)``
  transformation, DLMF 15.8.1, if it is negative); at ``x = 1`` Gauss's sum (DLMF 15.4.20).

Derivatives by ``custom_jvp`` (JAX's): in ``x`` the contiguous function (DLMF 13.3.15, 15.5.1:
``a / b 1F1(a + 1; b + 1; x)``, ``a b / c 2F1(a + 1, b + 1; c + 1; x)``); in the parameters the
differentiated power series, in the transformed variable.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blu import lax
from blu import numpy as bnp
from blu.core.errors import BluTypeError, with_user_line
from blu.lax.control_flow.loops import while_loop
from blu.numpy._promote import asarray_operand_in, is_python_scalar
from blu.transforms.custom_jvp import custom_jvp

__all__ = ["hyp1f1", "hyp2f1"]

_MAX_TERMS = 5000
_DIRECT_UP_TO = 0.75


def _promote(name: str, *xs: Any) -> tuple[list, Any]:
    """``xs`` broadcast to their promoted inexact dtype (integers to float32; float16 and
    bfloat16 computed in float32), as ``blu.scipy.special``'s, and that dtype; complex refused."""
    arrs = [bnp.asarray(x) for x in xs]
    for x in arrs:
        if bnp.issubdtype(x.dtype, bnp.complexfloating):
            raise BluTypeError(
                with_user_line(f"{name}: complex arguments ({x.dtype}) are not supported")
            )
    dt = bnp.result_type(*arrs)
    if not bnp.issubdtype(dt, bnp.inexact):
        dt = bnp.result_type(dt, np.dtype(np.float32))
    arrs = [asarray_operand_in(x, dt) if is_python_scalar(x) else a for x, a in zip(xs, arrs)]
    out = [x.astype(dt) for x in bnp.broadcast_arrays(*arrs)]
    if dt in (bnp.float16, bnp.bfloat16):
        out = [x.astype(np.float32) for x in out]
    return out, dt


def _nonpos_int(v: Any) -> Any:
    return (v <= 0) & (bnp.floor(v) == v)


def _gammasgn(v: Any) -> Any:
    return bnp.where((v > 0) | (bnp.remainder(bnp.floor(v), 2) == 0), 1.0, -1.0).astype(v.dtype)


def _safe_recip(v: Any) -> Any:
    return bnp.where(v == 0, 0.0, 1.0 / bnp.where(v == 0, 1.0, v))


def _gamma_ratio(nums: list, dens: list, log_extra: Any = 0.0) -> Any:
    """``prod Gamma(n) / prod Gamma(d) * exp(log_extra)``, 0 where a ``d`` is a pole."""
    log, sign, pole = log_extra, 1.0, False
    for n in nums:
        log, sign = log + lax.lgamma(n), sign * _gammasgn(n)
    for d in dens:
        pole = pole | _nonpos_int(d)
        ds = bnp.where(_nonpos_int(d), 0.5, d)
        log, sign = log - lax.lgamma(ds), sign * _gammasgn(ds)
    return bnp.where(pole, 0.0, sign * bnp.exp(log))


def _series(nums, dens, x, active, *, derivs=False, divergent=False):
    """``sum_k prod (n)_k / prod (d)_k x^k / k!`` where ``active`` (1 elsewhere); with
    ``derivs`` also its derivatives in each parameter (numerators, then denominators).
    ``divergent``: an asymptotic series, stopped before its terms grow."""
    dt = x.dtype
    eps = float(np.finfo(dt).eps)
    params = [*nums, *dens]
    signs = [1.0] * len(nums) + [-1.0] * len(dens)
    past = bnp.zeros_like(x)  # the series must run past -d for a negative denominator d
    for d in dens:
        past = bnp.maximum(past, -d)
    np_ = len(params) if derivs else 0
    zeros = bnp.zeros_like(x)

    def cond(s):
        return (s[0] < _MAX_TERMS) & bnp.any(~s[1])

    def body(s):
        k, done, term, total = s[:4]
        accs, dsums = list(s[4 : 4 + np_]), list(s[4 + np_ :])
        kf = k.astype(dt)
        ratio = x / (kf + 1.0)
        for n in nums:
            ratio = ratio * (n + kf)
        for d in dens:
            ratio = ratio / (d + kf)
        new = term * ratio
        total_new = total + new
        small = bnp.abs(new) <= eps * bnp.abs(total_new)
        conv = small & ((kf + 1.0 >= past) | (new == 0))  # a polynomial ends at a 0 term
        accs_new, dsums_new = [], []
        for p, sg, acc, ds in zip(params[:np_], signs, accs, dsums, strict=False):
            acc = acc + _safe_recip(p + kf)
            contrib = sg * new * acc
            dsums_new.append(ds + contrib)
            accs_new.append(acc)
            conv = conv & (bnp.abs(contrib) <= eps * bnp.abs(ds + contrib))
        stop = conv | ~bnp.isfinite(total_new)
        keep = done
        if divergent:
            grows = bnp.abs(new) > bnp.abs(term)
            keep = keep | grows
            stop = stop | grows
        upd = [bnp.where(keep, old, nw) for old, nw in zip(
            [term, total, *accs, *dsums], [new, total_new, *accs_new, *dsums_new], strict=True
        )]  # fmt: skip
        return (k + 1, done | stop, *upd)

    init = (bnp.asarray(0, np.int32), ~active, bnp.ones_like(x), bnp.ones_like(x))
    init = init + (zeros,) * (2 * np_)
    out = while_loop(cond, body, init)
    return out[3], list(out[4 + np_ :])


# ---- 1F1 -----------------------------------------------------------------------------------


def _hyp1f1_frame(a, b, x):
    """Kummer's transformation for ``x < 0`` (not for a polynomial): ``(a1, y, kummer)``."""
    kummer = (x < 0) & ~_nonpos_int(a)
    return bnp.where(kummer, b - a, a), bnp.where(kummer, -x, x), kummer


def _hyp1f1_value(a, b, x):
    a1, y, kummer = _hyp1f1_frame(a, b, x)
    pole = _nonpos_int(b) & ~(_nonpos_int(a) & (a > b))
    special = (a == 0) | (a == b) | pole | (x == bnp.inf)
    big = bnp.abs(b - a1) + bnp.abs(1.0 - a1)
    asym = (y > 60.0 + 0.5 * big * big) & ~_nonpos_int(a1) & ~special
    ser = ~asym & ~special
    a1s, bs, ys = bnp.where(ser, a1, 1.0), bnp.where(ser, b, 1.0), bnp.where(ser, y, 0.0)
    s, _ = _series([a1s], [bs], ys, ser)
    series = s * bnp.exp(bnp.where(kummer & ser, x, 0.0))
    a1a, ba = bnp.where(asym, a1, 1.0), bnp.where(asym, b, 1.0)
    ya = bnp.where(asym, y, 1.0)
    s1, _ = _series([ba - a1a, 1.0 - a1a], [], 1.0 / ya, asym, divergent=True)
    s2, _ = _series([a1a, a1a - ba + 1.0], [], -1.0 / ya, asym, divergent=True)
    lx, ly = bnp.where(kummer, x, 0.0), bnp.log(ya)
    first = _gamma_ratio([ba], [a1a], bnp.where(kummer, 0.0, ya) + (a1a - ba) * ly) * s1
    # the subdominant term, on its Stokes line for real y: half of each side's, cos(pi a1)
    second = bnp.cos(np.pi * a1a) * _gamma_ratio([ba], [ba - a1a], lx - a1a * ly) * s2
    asymptotic = first + second
    out = bnp.where(asym, asymptotic, series)
    # JAX's special values; b a pole of the series (unless a polynomial of lower degree): inf
    at_inf = _gammasgn(b) * _gammasgn(a) * bnp.inf
    out = bnp.where(x == bnp.inf, bnp.where(_nonpos_int(a), bnp.nan, at_inf), out)  # scipy's
    out = bnp.where(pole, bnp.inf, out)
    out = bnp.where(a == b, bnp.exp(x), out)
    return bnp.where(a == 0, 1.0, out).astype(x.dtype)


def _hyp1f1_param_derivs(a, b, x):
    a1, y, kummer = _hyp1f1_frame(a, b, x)
    ok = bnp.isfinite(a1) & bnp.isfinite(b) & bnp.isfinite(y) & ~_nonpos_int(b)
    _, (ga1, gb) = _series(
        [bnp.where(ok, a1, 1.0)], [bnp.where(ok, b, 1.0)], bnp.where(ok, y, 0.0), ok, derivs=True
    )
    ex = bnp.exp(bnp.where(kummer, x, 0.0))
    da = bnp.where(kummer, -ex * ga1, ga1)
    db = bnp.where(kummer, ex * (ga1 + gb), gb)
    return da, db


@custom_jvp
def _hyp1f1(a, b, x):
    return _hyp1f1_value(a, b, x)


@_hyp1f1.defjvp
def _hyp1f1_jvp(primals, tangents):
    (a, b, x), (ta, tb, tx) = primals, tangents
    da, db = _hyp1f1_param_derivs(a, b, x)
    dx = a / b * _hyp1f1(a + 1.0, b + 1.0, x)
    return _hyp1f1(a, b, x), da * ta + db * tb + dx * tx


def hyp1f1(a: Any, b: Any, x: Any) -> Any:
    """Kummer's confluent hypergeometric function ``1F1(a; b; x) = sum_k (a)_k / (b)_k x^k / k!``
    (DLMF 13.2.2) of real ``a``, ``b``, ``x``.

    The arguments broadcast together; the result has their promoted inexact dtype (integers in
    float32, float16 and bfloat16 computed in float32). JAX's values at ``a = 0`` (1, also at
    ``b = 0``), ``a = b`` (``exp(x)``) and ``b = 0`` (``inf``); ``inf`` where ``b`` is another
    non-positive integer (unless ``a`` is a non-positive integer above it, a polynomial).
    Summed as the power series (DLMF 13.2.2), after Kummer's transformation for ``x < 0``
    (DLMF 13.2.39), and as the asymptotic series (DLMF 13.7.2) for large ``|x|``.
    Differentiable in ``x`` (``a / b hyp1f1(a + 1, b + 1, x)``, DLMF 13.3.15) and in ``a``
    and ``b`` (the differentiated power series, as JAX's: it overflows where ``exp(|x|)``
    does).
    """
    args, dt = _promote("hyp1f1", a, b, x)
    return _hyp1f1(*args).astype(dt)


# ---- 2F1 -----------------------------------------------------------------------------------


def _hyp2f1_pfaff(a, b, c, x):
    """``(A, B, z, log_pref)``: for ``x < 0`` Pfaff's ``(1 - x)^-A 2F1(A, c - b'; c; z)`` with
    a non-positive integer parameter kept as ``A`` (a polynomial stays one; of two, the one of
    lower degree, which ends the series before a pole of ``c`` between them)."""
    swap = _nonpos_int(b) & (~_nonpos_int(a) | (b > a))
    a_, b_ = bnp.where(swap, b, a), bnp.where(swap, a, b)
    neg = x < 0
    xn = bnp.where(neg, x, -1.0)
    z = bnp.where(neg, xn / (xn - 1.0), x)
    log1mx = bnp.where(neg, bnp.log1p(-xn), 0.0)
    return a_, bnp.where(neg, c - b_, b_), z, log1mx, swap, neg


def _hyp2f1_log_limit(a, b, c, w, m, active):
    """A&S 15.3.10-11: ``2F1(a, b; a + b + m; 1 - w)`` for an integer ``m >= 0``."""
    dt = w.dtype
    eps = float(np.finfo(dt).eps)
    lw = bnp.log(w)
    p0 = (lax.digamma(bnp.ones_like(w)), lax.digamma(m + 1.0), lax.digamma(a + m),
          lax.digamma(b + m))  # fmt: skip

    def cond(s):
        return (s[0] < _MAX_TERMS) & bnp.any(~s[1])

    def body(s):
        n, done, t1, s1, u, s2, p1, p2, p3, p4 = s
        nf = n.astype(dt)
        term2 = u * (lw - p1 - p2 + p3 + p4)
        s2n = s2 + term2
        t1n = t1 * (a + nf) * (b + nf) / ((nf + 1.0) * (1.0 - m + nf)) * w
        finite = nf + 1.0 < m
        s1n = s1 + bnp.where(finite, t1n, 0.0)
        un = u * (a + m + nf) * (b + m + nf) / ((nf + 1.0) * (nf + m + 1.0)) * w
        conv = ~finite & (bnp.abs(term2) <= eps * bnp.abs(s2n))
        psis = (p1 + 1.0 / (nf + 1.0), p2 + 1.0 / (nf + m + 1.0), p3 + 1.0 / (a + m + nf),
                p4 + 1.0 / (b + m + nf))  # fmt: skip
        new = (bnp.where(finite, t1n, 0.0), s1n, un, s2n, *psis)
        upd = [bnp.where(done, o, v) for o, v in zip(s[2:], new, strict=True)]
        return (n + 1, done | conv | ~bnp.isfinite(s2n), *upd)

    one, zero = bnp.ones_like(w), bnp.zeros_like(w)
    init = (bnp.asarray(0, np.int32), ~active, one, bnp.where(m >= 1, one, zero), one, zero, *p0)
    out = while_loop(cond, body, init)
    s1, s2 = out[3], out[5]
    m1 = bnp.where(m >= 1, m, 1.0)
    first = _gamma_ratio([m1, c], [b + m, a + m]) * s1
    sign = bnp.where(bnp.remainder(m, 2) == 0, 1.0, -1.0)
    second = sign * _gamma_ratio([c], [a, b, m + 1.0], m * lw) * s2
    return bnp.where(m >= 1, first, 0.0) - second


def _hyp2f1_unit(a, b, c, z, active):
    """``2F1(a, b; c; z)`` for ``0 <= z < 1``."""
    swap = _nonpos_int(b) & (~_nonpos_int(a) | (b > a))
    # a polynomial's degree is -a (the lower of two: a pole of c may lie between them)
    a, b = bnp.where(swap, b, a), bnp.where(swap, a, b)
    poly = _nonpos_int(a)
    d = c - a - b
    m = bnp.round(d)
    eps = float(np.finfo(z.dtype).eps)
    is_int = bnp.abs(d - m) <= 50 * eps * bnp.maximum(1.0, bnp.abs(m))
    near = active & (z > _DIRECT_UP_TO) & ~poly
    w = bnp.where(near, 1.0 - z, 0.5)
    # Euler's transformation where c - a - b is a negative integer: then m >= 0
    flip = near & is_int & (m < 0)
    a2, b2 = bnp.where(flip, c - a, a), bnp.where(flip, c - b, b)
    m2 = bnp.abs(m)
    lim = near & is_int & ~(_nonpos_int(a2) | _nonpos_int(b2))
    direct = active & ~near | (near & is_int & ~lim)  # (Euler's of a polynomial: its series)
    # a polynomial near z = 1 in 1 - z (DLMF 15.8.7): (c - b)_n / (c)_n F(a, b; b - c - n + 1)
    c_rev = b - c + a + 1.0
    rev = active & poly & (z > _DIRECT_UP_TO)
    for v in (c_rev, c, c - b, c - b - a):
        rev = rev & ~_nonpos_int(v)
    # else Euler's transformation where it is a polynomial of lower degree
    euler = active & poly & (z > _DIRECT_UP_TO) & ~rev & _nonpos_int(c - b) & (c - b > a)
    flip = flip | euler
    a2, b2 = bnp.where(flip, c - a, a), bnp.where(flip, c - b, b)
    direct = direct | rev | euler
    da, db = bnp.where(direct & flip, a2, a), bnp.where(direct & flip, b2, b)
    dc, dz = bnp.where(rev, c_rev, c), bnp.where(rev, 1.0 - z, z)
    pick = lambda v, mask, safe: bnp.where(mask, v, safe)  # noqa: E731
    s, _ = _series([pick(da, direct, 1.0), pick(db, direct, 1.0)], [pick(dc, direct, 1.0)],
                   pick(dz, direct, 0.0), direct)  # fmt: skip
    wf = bnp.where(flip, 1.0 - z, 1.0)
    s = s * bnp.where(direct & flip, bnp.exp(bnp.where(flip, d, 0.0) * bnp.log(wf)), 1.0)
    rc, rb, ra = pick(c, rev, 1.0), pick(b, rev, 1.0), pick(a, rev, 0.0)
    s = s * bnp.where(rev, _gamma_ratio([rc - rb - ra, rc], [rc - rb, rc - ra]), 1.0)
    la, lb, lc = pick(a2, lim, 0.5), pick(b2, lim, 0.5), pick(c, lim, 1.0)
    limit = _hyp2f1_log_limit(la, lb, lc, w, pick(m2, lim, 0.0), lim)
    limit = limit * bnp.where(flip, bnp.exp(m * bnp.log(w)), 1.0)
    conn = near & ~is_int
    ca, cb, cc = pick(a, conn, 0.5), pick(b, conn, 0.5), pick(c, conn, 2.0)
    cd = cc - ca - cb
    f1, _ = _series([ca, cb], [1.0 - cd], w, conn)
    f2, _ = _series([cc - ca, cc - cb], [cd + 1.0], w, conn)
    connection = (
        _gamma_ratio([cc, cd], [cc - ca, cc - cb]) * f1
        + _gamma_ratio([cc, -cd], [ca, cb], cd * bnp.log(w)) * f2
    )
    return bnp.where(conn, connection, bnp.where(lim, limit, s))


def _chu_vandermonde(a, b, c, active):
    """``2F1(a, b; c; 1)`` for a polynomial (``a`` or ``b`` a non-positive integer, the one
    nearer 0 taken as its degree ``n``; the other ``q``): ``(c - q)_n / (c)_n`` (DLMF 15.4.24)
    as a product of ``n`` ratios where ``active`` (the gamma functions' ratio cancels badly)."""
    pa = _nonpos_int(a) & (~_nonpos_int(b) | (a >= b))
    n = bnp.where(active, -bnp.where(pa, a, b), 0.0)
    q = bnp.where(pa, b, a)

    def cond(state):
        k, _ = state
        return bnp.any(k < n)

    def body(state):
        k, acc = state
        step = bnp.where(k < n, (c - q + k) / bnp.where(k < n, c + k, 1.0), 1.0)
        return k + 1.0, acc * step

    _, out = while_loop(cond, body, (bnp.zeros_like(n), bnp.ones_like(n)))
    return out


def _hyp2f1_value(a, b, c, x):
    d = c - a - b
    # c a pole of the series, unless a or b is a non-positive integer above it (a polynomial)
    pole = _nonpos_int(c) & ~(_nonpos_int(a) & (a > c)) & ~(_nonpos_int(b) & (b > c))
    # a polynomial at x = 1 is its finite sum (Chu-Vandermonde's (c - b)_n / (c)_n), scipy's;
    # _chu_vandermonde's product, as the series cancels
    poly1 = (x == 1) & (_nonpos_int(a) | _nonpos_int(b))
    ok = ((x < 1) | poly1) & ~pole & (b != c) & (a != c)
    A, B, z, log1mx, _, _ = _hyp2f1_pfaff(a, b, c, bnp.where(ok, x, 0.0))
    inner = _hyp2f1_unit(A, B, c, z, ok & bnp.isfinite(z))
    out = bnp.exp(-A * log1mx) * inner
    # JAX's special values, in its order of precedence
    gauss = _gamma_ratio([c, bnp.where(d > 0, d, 1.0)], [c - a, c - b])
    at1 = bnp.where(d > 0, gauss, bnp.inf)
    s = bnp.where(x < 1, 1.0 - x, 1.0)
    out = bnp.where(poly1 & ok, _chu_vandermonde(a, b, c, poly1 & ok), out)
    out = bnp.where((x == 1) & ~(poly1 & ok), at1, bnp.where(x > 1, bnp.inf, out))
    out = bnp.where((x < 1) & (a == c), s ** (-b), out)
    out = bnp.where((x < 1) & (b == c), s ** (-a), out)
    out = bnp.where(pole, bnp.inf, out)
    one = (x == 0) | (((a == 0) | (b == 0)) & (c != 0))
    out = bnp.where(one, 1.0, out)
    nan = bnp.isnan(a) | bnp.isnan(b) | bnp.isnan(c) | bnp.isnan(x)
    return bnp.where(nan, bnp.nan, out).astype(x.dtype)


def _hyp2f1_param_derivs(a, b, c, x):
    ok = (x < 1) & bnp.isfinite(x) & ~_nonpos_int(c)
    A, B, z, log1mx, swap, neg = _hyp2f1_pfaff(a, b, c, bnp.where(ok, x, 0.0))
    pick = lambda v, safe: bnp.where(ok, v, safe)  # noqa: E731
    g, (gA, gB, gc) = _series([pick(A, 1.0), pick(B, 1.0)], [pick(c, 1.0)], pick(z, 0.0), ok,
                              derivs=True)  # fmt: skip
    pref = bnp.exp(-A * log1mx)
    dA = pref * (gA - log1mx * g)  # d/dA of (1 - x)^-A G(A, B; c; z)
    dB = bnp.where(neg, -pref * gB, gB)  # B = c - b' under Pfaff
    dc = pref * (gc + bnp.where(neg, gB, 0.0))
    return bnp.where(swap, dB, dA), bnp.where(swap, dA, dB), dc


@custom_jvp
def _hyp2f1(a, b, c, x):
    return _hyp2f1_value(a, b, c, x)


@_hyp2f1.defjvp
def _hyp2f1_jvp(primals, tangents):
    (a, b, c, x), (ta, tb, tc, tx) = primals, tangents
    da, db, dc = _hyp2f1_param_derivs(a, b, c, x)
    dx = a * b / c * _hyp2f1(a + 1.0, b + 1.0, c + 1.0, x)
    return _hyp2f1(a, b, c, x), da * ta + db * tb + dc * tc + dx * tx


def hyp2f1(a: Any, b: Any, c: Any, x: Any) -> Any:
    """Gauss's hypergeometric function ``2F1(a, b; c; x) = sum_k (a)_k (b)_k / (c)_k x^k / k!``
    (DLMF 15.2.1) of real ``a``, ``b``, ``c`` and ``x <= 1``.

    The arguments broadcast together; the result has their promoted inexact dtype (integers in
    float32, float16 and bfloat16 computed in float32). JAX's values: 1 at ``x = 0`` or where
    ``a`` or ``b`` is 0 (``c != 0``); ``inf`` where ``c`` is a non-positive integer (unless
    ``a`` or ``b`` is a non-positive integer above it: scipy's polynomial; JAX's is ``inf``), for
    ``x > 1`` (off the real branch), and at ``x = 1`` for ``c - a - b <= 0``; Gauss's sum
    (DLMF 15.4.20) at ``x = 1`` otherwise; ``(1 - x)^-a`` for ``b = c``. A polynomial (``a`` or
    ``b`` a non-positive integer) at ``x = 1`` is its value, Chu-Vandermonde's
    ``(c - b)_n / (c)_n`` as a product of ``n`` ratios (scipy's; JAX's is ``inf`` for
    ``c - a - b <= 0``).
    Computed by the power series up to ``x = 0.75``, Pfaff's transformation below 0
    (DLMF 15.8.1), the connection formula in ``1 - x`` above 0.75 (DLMF 15.8.4) or, for an
    integer ``c - a - b``, its logarithmic limit (Abramowitz & Stegun 15.3.10-11). Where
    ``c - a - b`` is a distance ``d`` from an integer without being one (beyond ``50 eps``),
    the connection formula's two terms cancel: measured in float64 for ``0.75 < x < 1``, a
    relative error of about ``2e-13 / d`` (``d = 1e-5``: ~1e-8; ``1e-9``: ~2e-4; ``1e-13``:
    no digits left). Below ``x = 0.75`` (the power series) it keeps ~1e-14 relative to the
    sum of its terms' moduli, which a polynomial of high degree can exceed its value by far
    (``hyp2f1(-30, 40, 2, 0.5)``: terms of 5e15, a value of -0.03).
    Differentiable in ``x`` (``a b / c hyp2f1(a + 1, b + 1, c + 1, x)``, DLMF 15.5.1) and in
    ``a``, ``b``, ``c`` (the differentiated power series, as JAX's, after Pfaff's
    transformation for ``x < 0``: it converges slowly as ``x`` nears 1 or ``-inf``).
    """
    args, dt = _promote("hyp2f1", a, b, c, x)
    return _hyp2f1(*args).astype(dt)
