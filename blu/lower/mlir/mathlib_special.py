"""lgamma, digamma, polygamma and erf_inv as plain ``arith``/``math`` operations, in float32 and
float64 (the math dialect has none of them), so they fuse into the elementwise kernels on the CPU
and on CUDA alike. Every branch of a piecewise algorithm is computed and the lanes pick theirs
with ``select`` (no control flow in an elementwise kernel).

Accuracy, measured against mpmath on dense grids (inf, NaN, near the poles, the zeros, 1, 2 and
+-1 included; tests/lower/cpu/test_special_math.py): for x > 0 relative, in ulp of the result;
for x < 0, where the reflection's terms cancel near the zeros between the poles, absolute, in
eps * max(|f|, 1).

- lgamma: the piecewise rational approximations of Sun's fdlibm ``e_lgamma_r.c`` (K. C. Ng,
  after W. Cody): three expansions on (0, 2) centred on the zeros 1 and 2 and on the minimum
  1.4616..., a rational function on [2, 8) after the recurrence, Stirling's series beyond, and
  the reflection ``log(pi / |x sin(pi x)|) - lgamma(|x|)`` for x < 0. x > 0: float32 1.9 ulp,
  float64 2 ulp (the zeros 1 and 2 included); x < 0: 2.3 (float32), 8.8 (float64) eps.
- digamma: the recurrence ``psi(x) = psi(x + 10) - sum 1/(x + j)`` up to x >= 10, then the
  asymptotic series (Abramowitz & Stegun 6.3.18) through the x**-16 term; below 3, where that
  sum cancels, a Taylor polynomial about the zero 1.4616... on [1, 2] (its coefficients are
  polygamma values there, computed with mpmath) and one step of the recurrence;
  ``psi(1 - x) - pi cot(pi x)`` for x < 0. x > 0: float32 5.4 ulp, float64 5 ulp; x < 0: 6.4
  (float32), 6 (float64) eps.
- polygamma(m, x), m >= 1: the same recurrence and the asymptotic series of the Hurwitz zeta
  function (A&S 6.4.11), and for x < 0 the reflection with the m-th derivative of
  ``pi cot(pi x)`` (a polynomial in ``cot``, built here). x > 0: float32 3.7 ulp, float64 3.9
  ulp; x < 0: 7.9 (float32), 6.9 (float64) eps, for m <= 7.
- erf_inv: M. Giles, "Approximating the erfinv function" (GPU Computing Gems Jade, 2011), the
  single-precision polynomials in ``w = -log(1 - x**2)``: float32 3.1 ulp. float64 refines them
  with Halley steps: two on ``erf(y) - |x|``, or near +-1, where 1 - |x| is exact, three on
  ``log erfc(y) - log(1 - |x|)`` (nearly quadratic in y, so they converge from the float32
  start even where 1 - |x| is below float32's reach): 1 ulp.

Special values follow scipy: lgamma is +inf at the poles (0, negative integers) and +-inf at
+-inf; digamma is NaN at negative integers and -inf, -1/x at +-0; polygamma (m >= 1) is
(-1)**(m+1) inf at the poles and at -inf; erf_inv is +-inf at +-1 and NaN beyond. One deliberate
difference: float64 lgamma of a subnormal x is log(1/x) (about 710), where scipy answers inf.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from blu.lower.mlir import mathlib
from blu.lower.mlir.emit import Builder


class _Ops:
    """Typed arith/math emission in ``ty`` (f32 or f64): float32 exp/log are mathlib's
    vectorizable polynomials, float64's the math dialect (libm / libdevice)."""

    def __init__(self, b: Builder, ty: str) -> None:
        self.b, self.ty = b, ty

    def c(self, v: float) -> str:
        return self.b.const(v, self.ty)

    def bin(self, op: str, x: str, y: str) -> str:
        return self.b.op(f"arith.{op} {x}, {y} : {self.ty}")

    def add(self, x: str, y: str) -> str:
        return self.bin("addf", x, y)

    def sub(self, x: str, y: str) -> str:
        return self.bin("subf", x, y)

    def mul(self, x: str, y: str) -> str:
        return self.bin("mulf", x, y)

    def div(self, x: str, y: str) -> str:
        return self.bin("divf", x, y)

    def fma(self, x: str, y: str, z: str) -> str:
        return self.b.op(f"math.fma {x}, {y}, {z} : {self.ty}")

    def un(self, op: str, x: str) -> str:
        return self.b.op(f"math.{op} {x} : {self.ty}")

    def neg(self, x: str) -> str:
        return self.b.op(f"arith.negf {x} : {self.ty}")

    def cmp(self, pred: str, x: str, y: str) -> str:
        return self.b.op(f"arith.cmpf {pred}, {x}, {y} : {self.ty}")

    def sel(self, c: str, x: str, y: str, ty: str | None = None) -> str:
        return self.b.op(f"arith.select {c}, {x}, {y} : {ty or self.ty}")

    def or_(self, p: str, q: str) -> str:
        return self.b.op(f"arith.ori {p}, {q} : i1")

    def and_(self, p: str, q: str) -> str:
        return self.b.op(f"arith.andi {p}, {q} : i1")

    def log(self, x: str) -> str:
        return mathlib.log(self.b, x) if self.ty == "f32" else self.un("log", x)

    def exp(self, x: str) -> str:
        return mathlib.exp(self.b, x) if self.ty == "f32" else self.un("exp", x)

    def horner(self, x: str, coeffs: Sequence[float]) -> str:
        """coeffs[0] x**n + ... + coeffs[n]."""
        acc = self.c(coeffs[0])
        for k in coeffs[1:]:
            acc = self.fma(acc, x, self.c(k))
        return acc

    def is_nan(self, x: str) -> str:
        return self.cmp("uno", x, x)

    def cot_pi(self, x: str) -> str:
        """cot(pi x), to a few ulp of the result: tan of pi times |frac(x)| <= 1/4, or of
        1/2 - |frac(x)| (exact) as cot's complement, so cot(pi/2) is 0, not 6e-17."""
        r = self.frac(x)
        a = self.un("absf", r)
        big = self.cmp("ogt", a, self.c(0.25))
        t = self.un("tan", self.mul(self.c(math.pi), self.sel(big, self.sub(self.c(0.5), a), a)))
        c = self.sel(big, t, self.div(self.c(1.0), t))
        return self.b.op(f"math.copysign {c}, {r} : {self.ty}")

    def frac(self, x: str) -> str:
        """x - round(x), in [-1/2, 1/2]: exact, so sin(pi x) and tan(pi x) lose nothing to the
        size of x."""
        return self.sub(x, self.un("round", x))


# ---- lgamma (fdlibm e_lgamma_r.c) --------------------------------------------------------------

_TC, _TF, _TT = 1.46163214496836224576, -1.21486290535849611461e-01, -3.63867699703950536541e-18
# fmt: off
_A = [7.72156649015328655494e-02, 3.22467033424113591611e-01, 6.73523010531292681824e-02,
      2.05808084325167332806e-02, 7.38555086081402883957e-03, 2.89051383673415629091e-03,
      1.19270763183362067845e-03, 5.10069792153511336608e-04, 2.20862790713908385557e-04,
      1.08011567247583939954e-04, 2.52144565451257326939e-05, 4.48640949618915160150e-05]
_T = [4.83836122723810047042e-01, -1.47587722994593911752e-01, 6.46249402391333854778e-02,
      -3.27885410759859649565e-02, 1.79706750811820387126e-02, -1.03142241298341437450e-02,
      6.10053870246291332635e-03, -3.68452016781138256760e-03, 2.25964780900612472250e-03,
      -1.40346469989232843813e-03, 8.81081882437654011382e-04, -5.38595305356740546715e-04,
      3.15632070903625950361e-04, -3.12754168375120860518e-04, 3.35529192635519073543e-04]
_U = [-7.72156649015328655494e-02, 6.32827064025093366517e-01, 1.45492250137234768737e+00,
      9.77717527963372745603e-01, 2.28963728064692451092e-01, 1.33810918536787660377e-02]
_V = [1.0, 2.45597793713041134822e+00, 2.12848976379893395361e+00, 7.69285150456672783825e-01,
      1.04222645593369134254e-01, 3.21709242282423911810e-03]
_S = [-7.72156649015328655494e-02, 2.14982415960608852501e-01, 3.25778796408930981787e-01,
      1.46350472652464452805e-01, 2.66422703033638609560e-02, 1.84028451407337715652e-03,
      3.19475326584100867617e-05]
_R = [1.0, 1.39200533467621045958e+00, 7.21935547567138069525e-01, 1.71933865632803078993e-01,
      1.86459191715652901344e-02, 7.77942496381893596434e-04, 7.32668430744625636189e-06]
_W = [4.18938533204672725052e-01, 8.33333333333329678849e-02, -2.77777777728775536470e-03,
      7.93650558643019558500e-04, -5.95187557450339963135e-04, 8.36339918996282139126e-04,
      -1.63092934096575273989e-03]
# fmt: on


def _lgamma_pos(o: _Ops, z: str) -> str:
    """lgamma(z) for z > 0 (z = 0 gives +inf), every interval computed, one selected."""
    lt2 = o.cmp("olt", z, o.c(2.0))
    lt8 = o.cmp("olt", z, o.c(8.0))
    le09 = o.cmp("ole", z, o.c(0.9))
    # (0, 2): y and the expansion (0: about the zeros 1, 2; 1: about the minimum tc; 2: rational)
    lo_y0, hi_y0 = o.sub(o.c(1.0), z), o.sub(o.c(2.0), z)
    lo_y1, hi_y1 = o.sub(z, o.c(_TC - 1.0)), o.sub(z, o.c(_TC))
    lo_y2, hi_y2 = z, o.sub(z, o.c(1.0))
    case0 = o.sel(le09, o.cmp("oge", z, o.c(0.7316)), o.cmp("oge", z, o.c(1.7316)), "i1")
    case1 = o.sel(le09, o.cmp("oge", z, o.c(0.23164)), o.cmp("oge", z, o.c(1.23164)), "i1")
    y0, y1, y2 = o.sel(le09, lo_y0, hi_y0), o.sel(le09, lo_y1, hi_y1), o.sel(le09, lo_y2, hi_y2)
    y = o.sel(case0, y0, o.sel(case1, y1, y2))
    yy = o.mul(y, y)
    p1 = o.horner(yy, _A[10::-2])
    p2 = o.mul(yy, o.horner(yy, _A[11::-2]))
    r0 = o.sub(o.fma(y, p1, p2), o.mul(o.c(0.5), y))
    w = o.mul(yy, y)
    q1, q2, q3 = (o.horner(w, _T[k::3][::-1]) for k in range(3))
    r1 = o.add(o.c(_TF), o.sub(o.mul(yy, q1), o.sub(o.c(_TT), o.mul(w, o.fma(y, q3, q2)))))
    r2 = o.add(o.mul(o.c(-0.5), y), o.div(o.mul(y, o.horner(y, _U[::-1])), o.horner(y, _V[::-1])))
    small = o.sel(case0, r0, o.sel(case1, r1, r2))
    # [2, 8): the rational function of the fraction, plus log of the recurrence's product
    n = o.un("floor", z)
    f = o.sub(z, n)
    mid = o.add(o.mul(o.c(0.5), f),
                o.div(o.mul(f, o.horner(f, _S[::-1])), o.horner(f, _R[::-1])))  # fmt: skip
    prod = o.c(1.0)
    for k in range(2, 7):  # (f + 2) ... (f + n - 1)
        prod = o.sel(o.cmp("oge", n, o.c(k + 1.0)), o.mul(prod, o.add(f, o.c(float(k)))), prod)
    # one log serves every interval: of z below 2 and from 8, of the product between
    lg = o.log(o.sel(lt2, z, o.sel(lt8, prod, z)))
    # [8, inf): Stirling's series; z (log z - 1) from 2**58, where 1/z no longer counts
    rz = o.div(o.c(1.0), z)
    big = o.fma(o.sub(z, o.c(0.5)), o.sub(lg, o.c(1.0)),
                o.fma(rz, o.horner(o.mul(rz, rz), _W[:0:-1]), o.c(_W[0])))  # fmt: skip
    huge = o.mul(z, o.sub(lg, o.c(1.0)))
    big = o.sel(o.cmp("oge", z, o.c(2.0**58)), huge, big)
    below = o.add(o.sel(le09, o.neg(lg), o.c(0.0)), small)
    out = o.sel(lt2, below, o.sel(lt8, o.add(mid, lg), big))
    one_or_two = o.or_(o.cmp("oeq", z, o.c(1.0)), o.cmp("oeq", z, o.c(2.0)))
    return o.sel(one_or_two, o.c(0.0), out)


def lgamma(b: Builder, x: str, ty: str) -> str:
    """log|Gamma(x)| (scipy.special.gammaln); see the module docstring."""
    o = _Ops(b, ty)
    z = o.un("absf", x)
    pos = _lgamma_pos(o, z)
    # x < 0: log(pi / |x sin(pi x)|) - lgamma(|x|); |sin(pi x)| = |sin(pi frac(x))|
    s = o.un("absf", o.un("sin", o.mul(o.c(math.pi), o.frac(z))))
    refl = o.sub(o.log(o.div(o.c(math.pi), o.mul(s, z))), pos)
    refl = o.sel(o.cmp("oeq", s, o.c(0.0)), o.c(math.inf), refl)  # the poles
    tiny = o.cmp("olt", z, o.c(2.0**-70 if ty == "f64" else 2.0**-30))
    refl = o.sel(tiny, o.neg(o.log(z)), refl)
    out = o.sel(o.cmp("olt", x, o.c(0.0)), refl, pos)
    return o.sel(o.cmp("oeq", z, o.c(math.inf)), x, out)  # +-inf -> +-inf as scipy's


# ---- digamma and polygamma --------------------------------------------------------------------

_SHIFT = 10  # psi(x) = psi(x + 10) - sum_{j<10} 1/(x + j) below x = 10
_ROOT = 1.4616321449683622  # digamma's positive zero
_ROOT_LO = 9.549995429965697e-17  # the root's next double digits
# psi(_ROOT + d) = sum_k ROOT_TAYLOR[k - 1] d**k, k = 1..40 (polygamma(k, root) / k!, mpmath):
# on [1, 2] (|d| < 0.54, the series' ratio |d| / root < 0.37) the terms fall below 2**-56
_ROOT_TAYLOR = [
    0.9676722454476212, -0.4427631689835921, 0.258499760955651, -0.16394270544240652,
    0.10782405069126237, -0.07219956125645471, 0.04880428816414311, -0.03316112647484736,
    0.022597648232218104, -0.01542476590494896, 0.010538791616612175, -0.007204534386356869,
    0.004926781395729853, -0.003369801655439328, 0.002305126326734928, -0.0015769367714301972,
    0.0010788252019162967, -0.0007380709389960052, 0.000504953265834602, -0.0003454680251063077,
    0.00023635601564027053, -0.00016170622091974803, 0.0001106337276874741, -7.569179582195066e-05,
    5.178575795222081e-05, -3.5430070947659604e-05, 2.424006611860132e-05, -1.6584242271854135e-05,
    1.134638458466385e-05, -7.762817668462094e-06, 5.3110609208898636e-06, -3.6336507898010456e-06,
    2.486022733129538e-06, -1.7008538854332607e-06, 1.1636675363548843e-06, -7.96142543124197e-07,
    5.446941930669446e-07, -3.7266161283438227e-07, 2.549626552021554e-07, -1.7443695117727745e-07,
]  # fmt: skip


def _bernoulli(n: int) -> list[Fraction]:
    """B_0 .. B_n (Akiyama-Tanigawa)."""
    out, a = [], [Fraction(0)] * (n + 1)
    for m in range(n + 1):
        a[m] = Fraction(1, m + 1)
        for j in range(m, 0, -1):
            a[j - 1] = j * (a[j - 1] - a[j])
        out.append(a[0])
    out[1] = Fraction(-1, 2)
    return out


_B = _bernoulli(40)


def _shifted(o: _Ops, w: str, m: int, shift: int) -> tuple[str, str]:
    """``(v, s)``: v = w + shift where w < shift (else w), s = sum_{j<shift} (w + j)**-(m + 1)
    over the same lanes (else 0)."""
    low = o.cmp("olt", w, o.c(float(shift)))
    s = o.c(0.0)
    for j in reversed(range(shift)):  # the smallest terms first
        t = o.div(o.c(1.0), o.add(w, o.c(float(j))) if j else w)  # (w = -0 stays -0)
        tp = t
        for _ in range(m):
            tp = o.mul(tp, t)
        s = o.add(s, tp)
    return o.sel(low, o.add(w, o.c(float(shift))), w), o.sel(low, s, o.c(0.0))


def _digamma_pos(o: _Ops, w: str) -> str:
    """psi(w) for w >= 0 (and -0): the recurrence to w >= 10 and the asymptotic series."""
    v, s = _shifted(o, w, 0, _SHIFT)
    rv = o.div(o.c(1.0), v)
    r2 = o.mul(rv, rv)
    terms = 8 if o.ty == "f64" else 4
    series = o.mul(r2, o.horner(r2, [float(_B[2 * k] / (2 * k)) for k in range(terms, 0, -1)]))
    psi = o.sub(o.sub(o.log(v), o.mul(o.c(0.5), rv)), o.add(series, s))
    # below 3 that sum cancels against psi(w + 10) (psi is 0 at 1.4616...): the Taylor
    # polynomial about the zero on [1, 2], and one step of the recurrence from (0, 1), [2, 3)
    lt1, ge2 = o.cmp("olt", w, o.c(1.0)), o.cmp("oge", w, o.c(2.0))
    wm1 = o.sub(w, o.c(1.0))
    u = o.sel(lt1, o.add(w, o.c(1.0)), o.sel(ge2, wm1, w))
    corr = o.sel(lt1, o.neg(o.div(o.c(1.0), w)), o.sel(ge2, o.div(o.c(1.0), wm1), o.c(0.0)))
    hi = _ROOT if o.ty == "f64" else float(np.float32(_ROOT))
    d = o.sub(o.sub(u, o.c(hi)), o.c(_ROOT - hi + _ROOT_LO))
    taylor = _ROOT_TAYLOR if o.ty == "f64" else _ROOT_TAYLOR[:18]
    near = o.add(o.mul(d, o.horner(d, taylor[::-1])), corr)
    return o.sel(o.cmp("olt", w, o.c(3.0)), near, psi)


def digamma(b: Builder, x: str, ty: str) -> str:
    """psi(x) = d/dx log Gamma(x) (scipy.special.psi); see the module docstring."""
    o = _Ops(b, ty)
    neg = o.cmp("olt", x, o.c(0.0))
    w = o.sel(neg, o.sub(o.c(1.0), x), x)
    pos = _digamma_pos(o, w)
    r = o.frac(x)
    refl = o.sub(pos, o.mul(o.c(math.pi), o.cot_pi(x)))
    refl = o.sel(o.cmp("oeq", r, o.c(0.0)), o.c(math.nan), refl)  # negative integers
    out = o.sel(neg, refl, pos)
    out = o.sel(o.cmp("oeq", x, o.c(-math.inf)), o.c(math.nan), out)
    # +-0: -1/x, -inf at +0 and +inf at -0 (by the sign bit: the compiler may not keep -0's)
    zero = o.neg(b.op(f"math.copysign {o.c(math.inf)}, {x} : {ty}"))
    return o.sel(o.cmp("oeq", x, o.c(0.0)), zero, out)


def _cot_derivative(m: int) -> list[int]:
    """Coefficients (constant first) of P with d^m/du^m cot(u) = P(cot u):
    P' = -(1 + c**2) dP/dc."""
    p = [0, 1]
    for _ in range(m):
        dp = [k * p[k] for k in range(1, len(p))] or [0]
        q = [0] * (len(dp) + 2)
        for k, a in enumerate(dp):
            q[k] -= a
            q[k + 2] -= a
        p = q
    return p


def polygamma(b: Builder, x: str, ty: str, m: int) -> str:
    """The m-th derivative of digamma (scipy.special.polygamma(m, x)) for a static m >= 0."""
    if m == 0:
        return digamma(b, x, ty)
    o = _Ops(b, ty)
    sign = -1.0 if m % 2 == 0 else 1.0  # (-1)**(m + 1)
    shift = _SHIFT + m  # the series' terms grow with m: start it further out
    neg = o.cmp("olt", x, o.c(0.0))
    w = o.sel(neg, o.sub(o.c(1.0), x), x)
    v, s = _shifted(o, w, m, shift)
    rv = o.div(o.c(1.0), v)
    r2 = o.mul(rv, rv)
    # (m-1)!/v**m + m!/(2 v**(m+1)) + sum_k B_2k (2k+m-1)!/(2k)! / v**(2k+m)
    terms = 10 if ty == "f64" else 5
    coeffs = [float(_B[2 * k] * math.factorial(2 * k + m - 1) / math.factorial(2 * k))
              for k in range(terms, 0, -1)]  # fmt: skip
    series = o.fma(r2, o.horner(r2, coeffs), o.fma(o.c(math.factorial(m) / 2), rv,
                                                   o.c(float(math.factorial(m - 1)))))  # fmt: skip
    vm = o.c(1.0)
    for _ in range(m):
        vm = o.mul(vm, rv)
    pos = o.mul(o.c(sign), o.fma(series, vm, o.mul(o.c(float(math.factorial(m))), s)))
    # x < 0: psi_m(x) = (-1)**m psi_m(1 - x) - pi d^m/dx^m cot(pi x)
    c = o.cot_pi(x)
    dcot = o.mul(o.c(math.pi ** (m + 1)), o.horner(c, [float(k) for k in _cot_derivative(m)][::-1]))
    refl = o.sub(o.mul(o.c(-sign), pos), dcot)
    pole = o.or_(o.cmp("oeq", o.frac(x), o.c(0.0)), o.cmp("oeq", x, o.c(-math.inf)))
    refl = o.sel(pole, o.c(sign * math.inf), refl)
    out = o.sel(neg, refl, pos)
    return o.sel(o.cmp("oeq", x, o.c(0.0)), o.c(sign * math.inf), out)  # +-0: a pole too


# ---- erf_inv (Giles) ---------------------------------------------------------------------------

_GILES_CENTRAL = [2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                  0.00021858087, -0.00125372503, -0.00417768164, 0.246640727,
                  1.50140941]  # fmt: skip
_GILES_TAIL = [-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
               -0.0076224613, 0.00943887047, 1.00167406, 2.83297682]  # fmt: skip
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _halley_erf(o: _Ops, y: str, a: str) -> str:
    """Two Halley steps on f = erf(y) - a (f'' = -2 y f'): y -= f / (f' + y f)."""
    for _ in range(2):
        fp = o.mul(o.c(_TWO_OVER_SQRT_PI), o.exp(o.neg(o.mul(y, y))))
        f = o.sub(o.un("erf", y), a)
        y = o.sub(y, o.div(f, o.fma(y, f, fp)))
    return y


def _halley_erfc(o: _Ops, y: str, c: str) -> str:
    """Three Halley steps on g = log erfc(y) - log c, nearly quadratic in y, so they converge
    from the float32 polynomial's start even where 1 - |x| is far below float32's reach:
    g'' = g' (-2 y - g'), y -= g / (g' + g (2 y + g') / 2)."""
    log_c = o.log(c)
    for _ in range(3):
        h = o.un("erfc", y)
        g = o.sub(o.log(h), log_c)
        gp = o.div(o.mul(o.c(-_TWO_OVER_SQRT_PI), o.exp(o.neg(o.mul(y, y)))), h)
        half = o.mul(o.c(0.5), o.mul(g, o.fma(o.c(2.0), y, gp)))
        y = o.sub(y, o.div(g, o.add(gp, half)))
    return y


def erf_inv(b: Builder, x: str, ty: str) -> str:
    """The inverse of erf on (-1, 1) (scipy.special.erfinv); see the module docstring."""
    o = _Ops(b, ty)
    a = o.un("absf", x)
    one_minus = o.sub(o.c(1.0), a)  # exact for a >= 1/2, where it matters
    w = o.neg(o.log(o.mul(one_minus, o.add(o.c(1.0), a))))
    central = o.horner(o.sub(w, o.c(2.5)), _GILES_CENTRAL)
    tail = o.horner(o.sub(o.un("sqrt", w), o.c(3.0)), _GILES_TAIL)
    y = o.mul(o.sel(o.cmp("olt", w, o.c(5.0)), central, tail), a)
    if ty == "f64":
        y = o.sel(o.cmp("ogt", a, o.c(0.5)), _halley_erfc(o, y, one_minus), _halley_erf(o, y, a))
    y = o.sel(o.cmp("oeq", a, o.c(1.0)), o.c(math.inf), y)
    y = o.sel(o.cmp("ogt", a, o.c(1.0)), o.c(math.nan), y)  # (NaN stays NaN: w is NaN)
    return o.b.op(f"math.copysign {y}, {x} : {ty}")
