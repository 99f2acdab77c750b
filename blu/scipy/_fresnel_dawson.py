"""``fresnel``, ``dawsn`` and ``sici`` of ``blu.scipy.special`` (``jax.scipy.special``'s),
composed of ``blu.numpy`` operations: Cephes' rational approximations (S. L. Moshier, Cephes
Math Library 2.8, ``fresnl.c``, ``dawsn.c``, ``sici.c``; their coefficients below), each
region evaluated at safe operands and selected by ``where``.

- ``fresnel(x) = (S(x), C(x))``, ``S = integral_0^x sin(pi t^2 / 2) dt``, ``C`` with ``cos``
  (DLMF 7.2.7-8): for ``x^2 < 2.5625`` ``x^3 P(x^4) / Q(x^4)`` and ``x P(x^4) / Q(x^4)``;
  above, the auxiliary functions ``f, g`` (DLMF 7.2.10) as rationals in ``1 / (pi x^2)^2``,
  ``C = 1/2 + (f sin - g cos) / (pi x)``, ``S = 1/2 - (f cos + g sin) / (pi x)``, the angle
  ``pi x^2 / 2`` reduced modulo ``2 pi`` without forming ``x^2`` (``x = 2k + s``:
  ``x^2 / 2 = s (x - s / 2) mod 2``); ``f = 1``, ``g = 0`` above ``x = 36974``.
- ``dawsn(x) = e^(-x^2) integral_0^x e^(t^2) dt`` (DLMF 7.2.5): ``x P(x^2) / Q(x^2)`` below
  ``|x| = 3.25``, ``(1 + P(1/x^2) / (x^2 Q(1/x^2))) / (2x)`` above (two fits, split at 6.25).
- ``sici(x) = (Si(x), Ci(x))`` (DLMF 6.2.9, 6.2.11): rationals in ``x^2`` up to 4
  (``Ci = euler_gamma + log x + x^2 P / Q``), ``Si = pi/2 - f cos x - g sin x``,
  ``Ci = f sin x - g cos x`` with ``f, g`` rationals in ``1/x^2`` (split at 8; ``~ 1/x``,
  ``1/x^2`` far out, where Cephes drops ``g`` above 1e9 and scipy keeps it). ``Si`` is odd;
  for ``x < 0``, ``Ci(|x|)`` (scipy's real branch).

Derivatives by ``custom_jvp`` (JAX's): ``(S', C') = (sin, cos)(pi x^2 / 2)``,
``dawsn' = 1 - 2 x dawsn(x)`` (0 at ``+-inf``), ``(Si', Ci') = (sin x / x, cos x / x)``.
Half-precision inputs are computed in float32 and rounded back; integers in float32.
"""

from __future__ import annotations

import math
from typing import Any

from blu import numpy as bnp
from blu.core.errors import BluTypeError, with_user_line
from blu.scipy._exp_integrals import _float, _half_to_f32
from blu.transforms.custom_jvp import custom_jvp

__all__ = ["dawsn", "fresnel", "sici"]

_EULER = 0.5772156649015329

# ---- Cephes fresnl.c (highest degree first) ----------------------------------------------------
_FR_SN = (-2.99181919401019853726e3, 7.08840045257738576863e5, -6.29741486205862506537e7,
          2.54890880573376359104e9, -4.42979518059697779103e10,
          3.18016297876567817986e11)  # fmt: skip
_FR_SD = (1.0, 2.81376268889994315696e2, 4.55847810806532581675e4, 5.17343888770096400730e6,
          4.19320245898111231129e8, 2.24411795645340920940e10,
          6.07366389490084639049e11)  # fmt: skip
_FR_CN = (-4.98843114573573548651e-8, 9.50428062829859605134e-6, -6.45191435683965050962e-4,
          1.88843319396703850064e-2, -2.05525900955013891793e-1,
          9.99999999999999998822e-1)  # fmt: skip
_FR_CD = (3.99982968972495980367e-12, 9.15439215774657478799e-10, 1.25001862479598821474e-7,
          1.22262789024179030997e-5, 8.68029542941784300606e-4, 4.12142090722199792936e-2,
          1.00000000000000000118e0)  # fmt: skip
_FR_FN = (4.21543555043677546506e-1, 1.43407919780758885261e-1, 1.15220955073585758835e-2,
          3.45017939782574027900e-4, 4.63613749287867322088e-6, 3.05568983790257605827e-8,
          1.02304514164907233465e-10, 1.72010743268161828879e-13, 1.34283276233062758925e-16,
          3.76329711269987889006e-20)  # fmt: skip
_FR_FD = (1.0, 7.51586398353378947175e-1, 1.16888925859191382142e-1, 6.44051526508858611005e-3,
          1.55934409164153020873e-4, 1.84627567348930545870e-6, 1.12699224763999035261e-8,
          3.60140029589371370404e-11, 5.88754533621578410010e-14, 4.52001434074129701496e-17,
          1.25443237090011264384e-20)  # fmt: skip
_FR_GN = (5.04442073643383265887e-1, 1.97102833525523411709e-1, 1.87648584092575249293e-2,
          6.84079380915393090172e-4, 1.15138826111884280931e-5, 9.82852443688422223854e-8,
          4.45344415861750144738e-10, 1.08268041139020870318e-12, 1.37555460633261799868e-15,
          8.36354435630677421531e-19, 1.86958710162783235106e-22)  # fmt: skip
_FR_GD = (1.0, 1.47495759925128324529e0, 3.37748989120019970451e-1, 2.53603741420338795122e-2,
          8.14679107184306179049e-4, 1.27545075667729118702e-5, 1.04314589657571990585e-7,
          4.60680728146520428211e-10, 1.10273215066240270757e-12, 1.38796531259578871258e-15,
          8.39158816283118707363e-19, 1.86958710162783236342e-22)  # fmt: skip

# ---- Cephes dawsn.c -----------------------------------------------------------------------------
_DA_AN = (1.13681498971755972054e-11, 8.49262267667473811108e-10, 1.94434204175553054283e-8,
          9.53151741254484363489e-7, 3.07828309874913200438e-6, 3.52513368520288738649e-4,
          -8.50149846724410912031e-4, 4.22618223005546594270e-2, -9.17480371773452345351e-2,
          9.99999999999999994612e-1)  # fmt: skip
_DA_AD = (2.40372073066762605484e-11, 1.48864681368493396752e-9, 5.21265281010541664570e-8,
          1.27258478273186970203e-6, 2.32490249820789513991e-5, 3.25524741826057911661e-4,
          3.48805814657162590916e-3, 2.79448531198828973716e-2, 1.58874241960120565368e-1,
          5.74918629489320327824e-1, 1.00000000000000000539e0)  # fmt: skip
_DA_BN = (5.08955156417900903354e-1, -2.44754418142697847934e-1, 9.41512335303534411857e-2,
          -2.18711255142039025206e-2, 3.66207612329569181322e-3, -4.23209114460388756528e-4,
          3.59641304793896631888e-5, -2.14640351719968974225e-6, 9.10010780076391431042e-8,
          -2.40274520828250956942e-9, 3.59233385440928410398e-11)  # fmt: skip
_DA_BD = (1.0, -6.31839869873368190192e-1, 2.36706788228248691528e-1, -5.31806367003223277662e-2,
          8.48041718586295374409e-3, -9.47996768486665330168e-4, 7.81025592944552338085e-5,
          -4.55875153252442634831e-6, 1.89100358111421846170e-7, -4.91324691331920606875e-9,
          7.18466403235734541950e-11)  # fmt: skip
_DA_CN = (-5.90592860534773254987e-1, 6.29235242724368800674e-1, -1.72858975380388136411e-1,
          1.64837047825189632310e-2, -4.86827613020462700845e-4)  # fmt: skip
_DA_CD = (1.0, -2.69820057197544900361e0, 1.73270799045947845857e0, -3.93708582281939493482e-1,
          3.44278924041233391079e-2, -9.73655226040941223894e-4)  # fmt: skip

# ---- Cephes sici.c ------------------------------------------------------------------------------
_SI_SN = (-8.39167827910303881427e-11, 4.62591714427012837309e-8, -9.75759303843632795789e-6,
          9.76945438170435310816e-4, -4.13470316229406538752e-2,
          1.00000000000000000302e0)  # fmt: skip
_SI_SD = (2.03269266195951942049e-12, 1.27997891179943299903e-9, 4.41827842801218905784e-7,
          9.96412122043875552487e-5, 1.42085239326149893930e-2,
          9.99999999999999996984e-1)  # fmt: skip
_SI_CN = (2.02524002389102268789e-11, -1.35249504915790756375e-8, 3.59325051419993077021e-6,
          -4.74007206873407909465e-4, 2.89159652607555242092e-2,
          -1.00000000000000000080e0)  # fmt: skip
_SI_CD = (4.07746040061880559506e-12, 3.06780997581887812692e-9, 1.23210355685883423679e-6,
          3.17442024775032769882e-4, 5.10028056236446052392e-2,
          4.00000000000000000080e0)  # fmt: skip
_SI_FN4 = (4.23612862892216586994e0, 5.45937717161812843388e0, 1.62083287701538329132e0,
           1.67006611831323023771e-1, 6.81020132472518137426e-3, 1.08936580650328664411e-4,
           5.48900223421373614008e-7)  # fmt: skip
_SI_FD4 = (1.0, 8.16496634205391016773e0, 7.30828822505564552187e0, 1.86792257950184183883e0,
           1.78792052963149907262e-1, 7.01710668322789753610e-3, 1.10034357153915731354e-4,
           5.48900252756255700982e-7)  # fmt: skip
_SI_GN4 = (8.71001698973114191777e-2, 6.11379109952219284151e-1, 3.97180296392337498885e-1,
           7.48527737628469092119e-2, 5.38868681462177273157e-3, 1.61999794598934024525e-4,
           1.97963874140963632189e-6, 7.82579040744090311069e-9)  # fmt: skip
_SI_GD4 = (1.0, 1.64402202413355338886e0, 6.66296701268987968381e-1, 9.88771761277688796203e-2,
           6.22396345441768420760e-3, 1.73221081474177119497e-4, 2.02659182086343991969e-6,
           7.82579218933534490868e-9)  # fmt: skip
_SI_FN8 = (4.55880873470465315206e-1, 7.13715274100146711374e-1, 1.60300158222319456320e-1,
           1.16064229408124407915e-2, 3.49556442447859055605e-4, 4.86215430826454749482e-6,
           3.20092790091004902806e-8, 9.41779576128512936592e-11,
           9.70507110881952024631e-14)  # fmt: skip
_SI_FD8 = (1.0, 9.17463611873684053703e-1, 1.78685545332074536321e-1, 1.22253594771971293032e-2,
           3.58696481881851580297e-4, 4.92435064317881464393e-6, 3.21956939101046018377e-8,
           9.43720590350276732376e-11, 9.70507110881952025725e-14)  # fmt: skip
_SI_GN8 = (6.97359953443276214934e-1, 3.30410979305632063225e-1, 3.84878767649974295920e-2,
           1.71718239052347903558e-3, 3.48941165502279436777e-5, 3.47131167084116673800e-7,
           1.70404452782044526189e-9, 3.85945925430276600453e-12,
           3.14040098946363334640e-15)  # fmt: skip
_SI_GD8 = (1.0, 1.68548898811011640017e0, 4.87852258695304967486e-1, 4.67913194259625806320e-2,
           1.90284426674399523638e-3, 3.68475504442561108162e-5, 3.57043223443740838771e-7,
           1.72693748966316146736e-9, 3.87830166023954706752e-12,
           3.14040098946363335242e-15)  # fmt: skip


def _poly(c: tuple, x: Any) -> Any:
    """``c[0] x^n + ... + c[n]`` by Horner's rule."""
    out = bnp.full_like(x, c[0])
    for a in c[1:]:
        out = out * x + a
    return out


def _real(name: str, x: Any) -> tuple[Any, Any]:
    """``x`` as a real float array (integers as float32), half precision widened to float32;
    with the dtype to round the results to."""
    x = _float(x)
    if bnp.issubdtype(x.dtype, bnp.complexfloating):
        raise BluTypeError(
            with_user_line(f"{name}: x must be real, got {x.dtype} (as JAX's, no complex branch)")
        )
    return _half_to_f32(x)


def _sincos_half_pi_sq(x: Any) -> tuple[Any, Any]:
    """``sin`` and ``cos`` of ``pi x^2 / 2`` for ``x >= 0``, the angle reduced modulo ``2 pi``
    exactly enough for large ``x``: with ``s = x mod 2``, ``x^2 / 2 = s (x - s/2) mod 2``."""
    s = bnp.fmod(x, 2.0)
    r = bnp.fmod(s * (x - 0.5 * s), 2.0)
    return bnp.sin(math.pi * r), bnp.cos(math.pi * r)


def _fresnel_value(xx: Any) -> tuple[Any, Any]:
    x = bnp.abs(xx)
    x2 = x * x
    small = x2 < 2.5625
    xs = bnp.where(small, x, 0.0)
    t = xs**4
    s_small = xs * xs * xs * _poly(_FR_SN, t) / _poly(_FR_SD, t)
    c_small = xs * _poly(_FR_CN, t) / _poly(_FR_CD, t)
    finite = x < bnp.inf
    mid = ~small & (x <= 36974.0)
    xm = bnp.where(mid, x, 2.0)
    pt = math.pi * xm * xm
    u = 1.0 / (pt * pt)
    f = bnp.where(mid, 1.0 - u * _poly(_FR_FN, u) / _poly(_FR_FD, u), 1.0)
    g = bnp.where(mid, _poly(_FR_GN, u) / (pt * _poly(_FR_GD, u)), 0.0)
    xl = bnp.where(small | ~finite, 2.0, x)
    sn, cs = _sincos_half_pi_sq(xl)
    pix = math.pi * xl
    c_big = 0.5 + (f * sn - g * cs) / pix
    s_big = 0.5 - (f * cs + g * sn) / pix
    s = bnp.where(small, s_small, bnp.where(finite, s_big, 0.5))
    c = bnp.where(small, c_small, bnp.where(finite, c_big, 0.5))
    s = bnp.where(bnp.isnan(xx), bnp.nan, s)  # (NaN is neither small, finite nor infinite)
    c = bnp.where(bnp.isnan(xx), bnp.nan, c)
    neg = xx < 0
    return bnp.where(neg, -s, s), bnp.where(neg, -c, c)


@custom_jvp
def _fresnel(x: Any) -> tuple[Any, Any]:
    return _fresnel_value(x)


@_fresnel.defjvp
def _fresnel_jvp(primals, tangents):
    (x,), (tx,) = primals, tangents
    sn, cs = _sincos_half_pi_sq(bnp.abs(x))
    return _fresnel(x), (sn * tx, cs * tx)


def fresnel(x: Any) -> tuple[Any, Any]:
    """The Fresnel integrals ``(S(x), C(x))``, ``S = integral_0^x sin(pi t^2 / 2) dt`` and
    ``C`` with ``cos``.

    ``x`` is a real array of any shape (integers computed in float32, float16 and bfloat16 in
    float32 and rounded back); ``S`` and ``C`` have its shape and floating dtype. Both are odd,
    ``+-1/2`` at ``+-inf``, NaN at NaN. Differentiable: ``(S', C') = (sin, cos)(pi x^2 / 2)``.
    Cephes' ``fresnl`` rational approximations (DLMF 7.2.7-10), as JAX's and scipy's.

    Raises:
        BluTypeError: ``x`` is complex (JAX's has no complex branch either).
    """
    x, dt = _real("fresnel", x)
    s, c = _fresnel(x)
    return s.astype(dt), c.astype(dt)


def _dawsn_value(x: Any) -> Any:
    ax = bnp.abs(x)
    near = ax < 3.25
    xa = bnp.where(near, ax, 1.0)
    x2 = xa * xa
    inner = xa * _poly(_DA_AN, x2) / _poly(_DA_AD, x2)
    mid = ax < 6.25
    xb = bnp.where(near, 4.0, ax)
    inv = bnp.where(xb < bnp.inf, 1.0 / (xb * xb), 0.0)
    tail = bnp.where(
        mid,
        inv * _poly(_DA_BN, inv) / _poly(_DA_BD, inv),
        inv * _poly(_DA_CN, inv) / _poly(_DA_CD, inv),
    )
    outer = 0.5 * (1.0 + tail) / xb
    out = bnp.where(near, inner, outer)
    return bnp.copysign(out, x)  # (NaN stays NaN: neither branch's test holds it back)


@custom_jvp
def _dawsn(x: Any) -> Any:
    return _dawsn_value(x)


@_dawsn.defjvp
def _dawsn_jvp(primals, tangents):
    (x,), (tx,) = primals, tangents
    d = _dawsn(x)
    xf = bnp.where(bnp.isinf(x), 0.0, x)
    slope = bnp.where(bnp.isinf(x), 0.0, 1.0 - 2.0 * xf * d)
    return d, slope * tx


def dawsn(x: Any) -> Any:
    """Dawson's integral ``exp(-x^2) integral_0^x exp(t^2) dt``.

    ``x`` is a real array of any shape (integers computed in float32, float16 and bfloat16 in
    float32 and rounded back); the result has its shape and floating dtype. Odd, ``~ 1 / (2x)``
    for large ``|x|``, ``+-0`` at ``+-inf``, NaN at NaN. Differentiable:
    ``dawsn' = 1 - 2 x dawsn(x)``. Cephes' ``dawsn`` rational approximations (Cody, Paciorek
    and Thacher 1970; DLMF 7.2.5), as JAX's.

    Raises:
        BluTypeError: ``x`` is complex.
    """
    x, dt = _real("dawsn", x)
    return _dawsn(x).astype(dt)


def _sici_value(xx: Any) -> tuple[Any, Any]:
    x = bnp.abs(xx)
    near = x <= 4.0
    xs = bnp.where(near & (x > 0), x, 1.0)
    z = xs * xs
    si_near = xs * _poly(_SI_SN, z) / _poly(_SI_SD, z)
    ci_near = _EULER + bnp.log(xs) + z * _poly(_SI_CN, z) / _poly(_SI_CD, z)
    asym = ~near & (x < bnp.inf)
    xa = bnp.where(asym, x, 5.0)
    z = 1.0 / (xa * xa)
    low = xa < 8.0
    f = bnp.where(low, _poly(_SI_FN4, z) / _poly(_SI_FD4, z), _poly(_SI_FN8, z) / _poly(_SI_FD8, z))
    g = bnp.where(low, _poly(_SI_GN4, z) / _poly(_SI_GD4, z), _poly(_SI_GN8, z) / _poly(_SI_GD8, z))
    f, g = f / xa, z * g  # (far out f -> 1/x, g -> 1/x^2: the rationals' ratios at z = 0 are 1)
    sn, cs = bnp.sin(xa), bnp.cos(xa)
    si = bnp.where(near, si_near, 0.5 * math.pi - f * cs - g * sn)
    ci = bnp.where(near, ci_near, f * sn - g * cs)
    si = bnp.where(x == 0, 0.0, bnp.where(x == bnp.inf, 0.5 * math.pi, si))
    ci = bnp.where(x == 0, -bnp.inf, bnp.where(x == bnp.inf, 0.0, ci))
    si = bnp.where(bnp.isnan(xx), bnp.nan, bnp.where(xx < 0, -si, si))
    ci = bnp.where(bnp.isnan(xx) | (xx == -bnp.inf), bnp.nan, ci)
    return si, ci


@custom_jvp
def _sici(x: Any) -> tuple[Any, Any]:
    return _sici_value(x)


@_sici.defjvp
def _sici_jvp(primals, tangents):
    (x,), (tx,) = primals, tangents
    safe = bnp.where(x == 0, 1.0, x)
    sinc = bnp.where(x == 0, 1.0, bnp.sin(safe) / safe)
    return _sici(x), (sinc * tx, bnp.cos(x) / x * tx)


def sici(x: Any) -> tuple[Any, Any]:
    """The sine and cosine integrals ``(Si(x), Ci(x))``, ``Si = integral_0^x sin t / t dt``,
    ``Ci = euler_gamma + log|x| + integral_0^|x| (cos t - 1) / t dt``.

    ``x`` is a real array of any shape (integers computed in float32, float16 and bfloat16 in
    float32 and rounded back); ``Si`` and ``Ci`` have its shape and floating dtype. ``Si`` is
    odd, ``+-pi/2`` at ``+-inf``; ``Ci`` is ``-inf`` at 0, 0 at ``inf``, NaN at ``-inf``, and
    ``Ci(|x|)`` for ``x < 0`` (scipy's and JAX's real values; the complex ``Ci`` adds ``i pi``).
    Differentiable: ``(Si', Ci') = (sin x / x, cos x / x)``. Cephes' ``sici`` rational
    approximations (DLMF 6.2.9, 6.2.11, 6.2.17-18), as JAX's and scipy's.

    Raises:
        BluTypeError: ``x`` is complex.
    """
    x, dt = _real("sici", x)
    si, ci = _sici(x)
    return si.astype(dt), ci.astype(dt)
