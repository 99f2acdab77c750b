"""``random_gamma_grad`` inside the elementwise kernels (CPU and CUDA alike): the derivative of a
Gamma(a, 1) sample by ``a`` at a fixed CDF value, ``d log x / da = -(dP/da) / (x dP/dx)``
(implicit reparameterization, Figurnov, Mohamed & Mnih 2018, eq. (5)).

The same algorithm as the numpy impl (``blu/lax/random_gamma_numpy.py``, whose docstring has
the derivation): forward-mode derivatives in ``a`` of Numerical Recipes' series (``x < a + 1``)
and modified-Lentz continued fraction (``x >= a + 1``), each an ``scf.while`` loop run to the
impl's convergence test (relative 1e-16 on the term and on its derivative, at most 20,000
steps: the loop of the branch a lane does not take exits at once), and the differentiated
Wilson-Hilferty approximation for ``a > 1e6``. Always in float64 (as the impl: float32 and half
float results are rounded once at the end), with ``mathlib_special.digamma``; so the compiled
kernel agrees with the impl to a few float64 ulp of the terms, and with scipy/mpmath references
as the impl does (tests/lower/test_random_gamma_grad_kernel.py).

Special values as the impl: NaN for ``a <= 0``, NaN operands or ``x = +inf``; in log space,
``+inf`` at ``log x = -inf``; otherwise 0 where ``x == 0`` (a sample at 0 does not move).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from blu.lower.mlir import mathlib_special
from blu.lower.mlir.emit import Builder
from blu.lower.mlir.mathlib_special import _Ops

__all__ = ["random_gamma_grad"]

_EPS = 1e-16
_TINY = 1e-300
_MAX_ITER = 20_000.0
_LARGE_A = 1e6
F64 = "f64"


def _while(b: Builder, state: Sequence[tuple[str, str]], cond: Callable[[list[str]], str],
           body: Callable[[list[str]], list[str]]) -> list[str]:  # fmt: skip
    """``scf.while`` over ``state`` (``(value, type)`` pairs): runs ``body(values) -> values``
    while ``cond(values)`` (an ``i1``) holds; returns the final values."""
    tys = ", ".join(t for _, t in state)
    res = b.fresh("w")
    before = [b.fresh("a") for _ in state]
    inits = ", ".join(f"{a} = {v}" for a, (v, _) in zip(before, state))
    b.stmt(f"{res}:{len(state)} = scf.while ({inits}) : ({tys}) -> ({tys}) {{")
    b.depth += 1
    go = cond(before)
    b.stmt(f"scf.condition({go}) {', '.join(before)} : {tys}")
    b.depth -= 1
    after = [b.fresh("a") for _ in state]
    b.stmt("} do {")
    b.stmt(f"^bb0({', '.join(f'{a}: {t}' for a, (_, t) in zip(after, state))}):")
    b.depth += 1
    new = body(after)
    b.stmt(f"scf.yield {', '.join(new)} : {tys}")
    b.depth -= 1
    b.stmt("}")
    return [f"{res}#{k}" for k in range(len(state))]


def _not(o: _Ops, p: str) -> str:
    return o.b.op(f"arith.xori {p}, {o.b.const(1, 'i1')} : i1")


def _close(o: _Ops, small: str, big: str, slack: float = 0.0) -> str:
    """``|small| <= eps |big| + slack``."""
    rhs = o.mul(o.c(_EPS), o.un("absf", big))
    if slack:
        rhs = o.add(rhs, o.c(slack))
    return o.cmp("ole", o.un("absf", small), rhs)


def _series(o: _Ops, a: str, x: str, run: str) -> tuple[str, str]:
    """``(T, dT/da)``, ``T = sum_n x^n / (a (a+1) ... (a+n))``, on lanes where ``run``."""
    c = o.div(o.c(1.0), a)
    dc = o.neg(o.div(o.c(1.0), o.mul(a, a)))
    i1 = "i1"
    state = [(o.c(1.0), F64), (c, F64), (dc, F64), (c, F64), (dc, F64), (run, i1)]

    def cond(s: list[str]) -> str:
        return o.and_(s[5], o.cmp("olt", s[0], o.c(_MAX_ITER)))

    def body(s: list[str]) -> list[str]:
        n, c, dc, t, dt, _ = s
        an = o.add(a, n)
        r = o.div(x, an)
        c_new = o.mul(c, r)
        dc_new = o.sub(o.mul(dc, r), o.div(c_new, an))
        t_new, dt_new = o.add(t, c_new), o.add(dt, dc_new)
        done = o.and_(_close(o, c_new, t_new), _close(o, dc_new, dt_new))
        return [o.add(n, o.c(1.0)), c_new, dc_new, t_new, dt_new, _not(o, done)]

    out = _while(o.b, state, cond, body)
    return out[3], out[4]


def _continued_fraction(o: _Ops, a: str, x: str, run: str) -> tuple[str, str]:
    """``(h, dh/da)`` of the continued fraction of ``Q`` (modified Lentz), where ``run``."""
    bb = o.sub(o.add(x, o.c(1.0)), a)  # d(bb)/da = -1 throughout
    d = o.div(o.c(1.0), bb)
    dd = o.mul(d, d)
    state = [(o.c(1.0), F64), (bb, F64), (o.c(1.0 / _TINY), F64), (o.c(0.0), F64), (d, F64),
             (dd, F64), (d, F64), (dd, F64), (run, "i1")]  # fmt: skip

    def cond(s: list[str]) -> str:
        return o.and_(s[8], o.cmp("olt", s[0], o.c(_MAX_ITER)))

    def tiny_guard(v: str, dv: str) -> tuple[str, str]:
        small = o.cmp("olt", o.un("absf", v), o.c(_TINY))
        return o.sel(small, o.c(_TINY), v), o.sel(small, o.c(0.0), dv)

    def body(s: list[str]) -> list[str]:
        i, bb, c, dc, d, dd, h, dh, _ = s
        an = o.neg(o.mul(i, o.sub(i, a)))  # -i (i - a); d(an)/da = i
        bb = o.add(bb, o.c(2.0))
        den = o.add(o.mul(an, d), bb)
        dden = o.sub(o.add(o.mul(i, d), o.mul(an, dd)), o.c(1.0))
        den, dden = tiny_guard(den, dden)
        cn = o.add(bb, o.div(an, c))
        dcn = o.sub(o.div(o.sub(o.mul(i, c), o.mul(an, dc)), o.mul(c, c)), o.c(1.0))
        cn, dcn = tiny_guard(cn, dcn)
        di = o.div(o.c(1.0), den)
        ddi = o.neg(o.div(dden, o.mul(den, den)))
        delta = o.mul(di, cn)
        ddelta = o.add(o.mul(ddi, cn), o.mul(di, dcn))
        dh_new = o.add(o.mul(dh, delta), o.mul(h, ddelta))
        h_new = o.mul(h, delta)
        done = o.and_(_close(o, o.sub(delta, o.c(1.0)), o.c(1.0)),
                      _close(o, o.sub(dh_new, dh), dh_new, _TINY))  # fmt: skip
        return [o.add(i, o.c(1.0)), bb, cn, dcn, di, ddi, h_new, dh_new, _not(o, done)]

    out = _while(o.b, state, cond, body)
    return out[6], out[7]


def _wilson_hilferty(o: _Ops, a: str, log_x: str) -> str:
    """``d log x / da`` of ``x = a (1 - 1/(9a) + z / (3 sqrt a))^3`` at fixed ``z``."""
    s = o.exp(o.div(o.sub(log_x, o.log(a)), o.c(3.0)))  # (x / a)^(1/3)
    sa = o.un("sqrt", a)
    z = o.mul(o.mul(o.add(o.sub(s, o.c(1.0)), o.div(o.c(1.0), o.mul(o.c(9.0), a))), o.c(3.0)), sa)
    ds = o.sub(o.div(o.c(1.0), o.mul(o.c(9.0), o.mul(a, a))),
               o.div(z, o.mul(o.mul(o.c(6.0), a), sa)))  # fmt: skip
    return o.add(o.div(o.c(1.0), a), o.div(o.mul(o.c(3.0), ds), s))


def random_gamma_grad(b: Builder, a: str, v: str, ty: str, log_space: bool) -> str:
    """``random_gamma_grad(a, v)`` of values in ``ty`` (f32 or f64): ``d log x / da`` with
    ``v = log x`` when ``log_space``, else ``dx/da`` with ``v = x``; computed in float64."""
    o = _Ops(b, F64)
    if ty != F64:
        a, v = (b.op(f"arith.extf {t} : {ty} to f64") for t in (a, v))
    x = o.exp(v) if log_space else v
    log_x = v if log_space else o.log(v)
    pos = o.cmp("ogt", a, o.c(0.0))
    finite = o.cmp("olt", o.un("absf", log_x), o.c(math.inf))  # false for NaN too
    ok = o.and_(pos, finite)
    large = o.cmp("ogt", a, o.c(_LARGE_A))
    cf = o.and_(_not(o, large), o.cmp("oge", x, o.add(a, o.c(1.0))))
    small = _not(o, o.or_(large, cf))
    t, dt = _series(o, a, x, o.and_(ok, small))
    h, dh = _continued_fraction(o, a, x, o.and_(ok, cf))
    lead = o.sub(log_x, mathlib_special.digamma(b, a, F64))  # log x - psi(a)
    ser = o.neg(o.add(o.mul(lead, t), dt))
    frac = o.add(o.mul(lead, h), dh)
    out = o.sel(large, _wilson_hilferty(o, a, log_x), o.sel(cf, frac, ser))
    out = o.sel(ok, out, o.c(math.nan))
    at_zero = o.and_(pos, o.cmp("oeq", log_x, o.c(-math.inf)))
    out = o.sel(at_zero, o.c(math.inf), out)  # log x -> -inf: d log x / da -> +inf
    if not log_space:  # dx/da = x d log x / da; a sample at 0 does not move
        out = o.sel(o.cmp("oeq", x, o.c(0.0)), o.c(0.0), o.mul(x, out))
    return out if ty == F64 else b.op(f"arith.truncf {out} : f64 to {ty}")
