"""Per-element rules for complex values (complex64, complex128), shared by the CPU and CUDA
code generators, registered when this module is imported (after ``rules.py``).

Inside a kernel a complex value is one SSA value of MLIR's ``complex<f32>`` / ``complex<f64>``
(stored as ``memref<N x complex<f32>>``: the layout of numpy's complex64, real part first). The
pass pipelines (``llvm.py``, ``cuda/compiler.py``) run ``convert-complex-to-standard`` and
``convert-complex-to-llvm``. The arithmetic is written here on the real and imaginary parts
(``complex.re`` / ``complex.im`` / ``complex.create``) wherever the complex dialect's own
expansion would differ from numpy's impl (the oracle):

- ``mul``: the schoolbook product with the fused multiply-adds of numpy's SIMD loop (no C99
  Annex G inf recovery; on a CPU without FMA numpy's own result differs where it overflows);
- ``integer_pow``: the impl's square-and-multiply (from 1) with this product, ``1 / x**-y``
  for negative ``y``; ``sign``: ``x / (|x| + 0j)``, 0 at 0, as the impl;
- ``div``: Smith's algorithm exactly as numpy's loop writes it (``loops.c.src``, ``divide``),
  including its division by a complex zero (``x / |0|``, giving inf/NaN parts);
- ``abs``: ``hypot(re, im)`` from libm / libdevice (numpy's ``npy_hypot``): no overflow for
  large parts, ``abs(inf + NaN j) = inf``;
- ``exp``: ``exp(re) * cis(im)`` with C99's special values (glibc's ``cexp``, which numpy
  uses): ``exp(x + 0j) = exp(x) + 0j`` for any x (``exp(inf + 0j) = inf + 0j``,
  ``exp(NaN + 0j) = NaN + 0j``), ``exp(-inf + i y) = 0`` for non-finite y,
  ``exp(inf + i y) = inf + NaN j`` for non-finite y. Deviation: glibc scales ``exp(re)`` when it
  overflows but ``exp(re) * cos(im)`` does not (``re`` in ~(709, 1454) for float64, ~(88, 192)
  for float32); here such parts are inf;
- ``log``: ``log(hypot(re, im)) + i atan2(im, re)``; for ``max(|re|, |im|)`` in (1/2, 2),
  ``log1p((a - 1)(a + 1) + c^2) / 2`` (relative accuracy near ``|z| = 1``, as glibc's ``clog``).
  Deviation: on the unit circle away from the axes, where ``(a - 1)(a + 1)`` and ``c^2``
  cancel, glibc's extra-precise sum keeps more digits of the (tiny) real part;
- ``sqrt``: the C99 / FreeBSD ``csqrt`` algorithm (special values first; ``(|re| + hypot) / 2``
  scaled by 1/4 near overflow). Deviation: no scaling for subnormal inputs;
- ``exp2``: numpy's ``nc_exp2``, ``exp`` of the parts times ``log 2``; ``log1p``: numpy's
  ``nc_log1p``, ``log(hypot(re + 1, im)) + i atan2(im, re + 1)``; ``rsqrt``: ``1 / sqrt``;
- ``sin``, ``cos``, ``sinh``, ``cosh``: glibc's ``csinh`` / ``ccosh`` formulas with C99's special
  values (``_cosh_sinh``), ``sin z = -i sinh(iz)``, ``cos z = cosh(iz)``;
- ``eq`` / ``ne``: both parts equal (ordered) / either part unequal (NaN != NaN);
- ``convert_element_type``: complex -> complex per part, real -> complex with a zero imaginary
  part, complex -> bool as ``x != 0``, complex -> other real dtypes keeps the real part (the
  impl's rule, as JAX's);
- ``reduce_sum`` / ``reduce_prod``: ``complex.add`` / the schoolbook product (the sum's order
  differs from numpy's pairwise summation: within the dtype's tolerance; the sum reassociates,
  as the real sums do, so LLVM keeps partial sums per vector lane).

Primitives without a complex rule here keep refusing complex operands in
``fusion.can_fuse`` (the ``"complex"`` slot says which do) and run as fallback nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.primitive import Primitive
from blu.lax import elementwise as ew
from blu.lax import reductions, shapes, slicing, special
from blu.lax.casts import convert_element_type_p
from blu.lax.complex import complex_p, conj_p, imag_p, real_p
from blu.lax.gather_scatter import gather_p
from blu.lax.sorting import take_along_axis_p
from blu.lower.mlir import mathlib, rules
from blu.lower.mlir.emit import Builder, compute_type, is_complex
from blu.transforms import ad_ops


def _has_complex(eqn: Any) -> bool:
    return any(is_complex(v.aval.dtype) for v in (*eqn.invars, *eqn.outvars))


def _ok(eqn: Any) -> bool:
    return True


def allow(*prims: Primitive) -> None:
    """Mark ``prims`` as fusible with complex operands (``fusion.can_fuse`` reads the slot)."""
    for p in prims:
        p.lowerings["complex"] = _ok


def _complex_rule(*prims: Primitive) -> Callable:
    """Register ``crule`` for the complex equations of ``prims``; real ones keep their rule."""

    def register(crule: Callable) -> Callable:
        for p in prims:
            real_rule = p.lowerings.get("elementwise")

            def rule(b, eqn, *xs, _c=crule, _r=real_rule):
                return _c(b, eqn, *xs) if (_r is None or _has_complex(eqn)) else _r(b, eqn, *xs)

            p.lowerings["elementwise"] = rule
            allow(p)
        return crule

    return register


# ---- helpers on parts --------------------------------------------------------------------------


def _part(ty: str) -> str:
    return ty[len("complex<") : -1]


def parts(b: Builder, z: str, ty: str) -> tuple[str, str]:
    return b.op(f"complex.re {z} : {ty}"), b.op(f"complex.im {z} : {ty}")


def make(b: Builder, re: str, im: str, ty: str) -> str:
    return b.op(f"complex.create {re}, {im} : {ty}")


def _f(b: Builder, op: str, x: str, y: str, t: str) -> str:
    return b.op(f"arith.{op} {x}, {y} : {t}")


def _cmp(b: Builder, pred: str, x: str, y: str, t: str) -> str:
    return b.op(f"arith.cmpf {pred}, {x}, {y} : {t}")


def _sel(b: Builder, c: str, x: str, y: str, t: str) -> str:
    return b.op(f"arith.select {c}, {x}, {y} : {t}")


def _fn(b: Builder, name: str, x: str, t: str) -> str:
    """A real function of one part: mathlib's f32 polynomial where the real rule uses one."""
    if t == "f32" and name in mathlib.FUNCTIONS:
        return mathlib.FUNCTIONS[name](b, x)
    return b.op(f"math.{name} {x} : {t}")


def _ty(eqn: Any, i: int = 0) -> str:
    return compute_type(eqn.invars[i].aval.dtype)


def cmul(b: Builder, x: str, y: str, ty: str) -> str:
    """The schoolbook product as numpy's SIMD loop computes it on an FMA machine:
    ``fma(a, c, -(b d)) + i fma(a, d, b c)`` (the fused rounding decides overflow: numpy's
    ``(M + M j)**2`` is ``-inf + inf j`` for a huge M, where the unfused product gives NaN)."""
    t = _part(ty)
    (xr, xi), (yr, yi) = parts(b, x, ty), parts(b, y, ty)
    nbd = b.op(f"arith.negf {_f(b, 'mulf', xi, yi, t)} : {t}")
    re = b.op(f"math.fma {xr}, {yr}, {nbd} : {t}")
    im = b.op(f"math.fma {xr}, {yi}, {_f(b, 'mulf', xi, yr, t)} : {t}")
    return make(b, re, im, ty)


def cdiv(b: Builder, x: str, y: str, ty: str) -> str:
    """Smith's algorithm as numpy's ``divide`` loop writes it (both branches, then a select)."""
    t = _part(ty)
    (ar, ai), (br, bi) = parts(b, x, ty), parts(b, y, ty)
    abr, abi = b.op(f"math.absf {br} : {t}"), b.op(f"math.absf {bi} : {t}")
    one = b.const(1.0, t)
    # |br| >= |bi| (false when either is NaN: numpy takes the second branch then too)
    rat = _f(b, "divf", bi, br, t)
    scl = _f(b, "divf", one, _f(b, "addf", br, _f(b, "mulf", bi, rat, t), t), t)
    r1 = _f(b, "mulf", _f(b, "addf", ar, _f(b, "mulf", ai, rat, t), t), scl, t)
    i1 = _f(b, "mulf", _f(b, "subf", ai, _f(b, "mulf", ar, rat, t), t), scl, t)
    # a complex zero divisor: x / |br| per part (inf or NaN, as numpy)
    zero = b.op(f"arith.andi {_cmp(b, 'oeq', abr, b.const(0.0, t), t)}, "
                f"{_cmp(b, 'oeq', abi, b.const(0.0, t), t)} : i1")  # fmt: skip
    r1 = _sel(b, zero, _f(b, "divf", ar, abr, t), r1, t)
    i1 = _sel(b, zero, _f(b, "divf", ai, abr, t), i1, t)
    rat2 = _f(b, "divf", br, bi, t)
    scl2 = _f(b, "divf", one, _f(b, "addf", bi, _f(b, "mulf", br, rat2, t), t), t)
    r2 = _f(b, "mulf", _f(b, "addf", _f(b, "mulf", ar, rat2, t), ai, t), scl2, t)
    i2 = _f(b, "mulf", _f(b, "subf", _f(b, "mulf", ai, rat2, t), ar, t), scl2, t)
    first = _cmp(b, "oge", abr, abi, t)
    return make(b, _sel(b, first, r1, r2, t), _sel(b, first, i1, i2, t), ty)


def cabs(b: Builder, x: str, ty: str) -> str:
    t = _part(ty)
    re, im = parts(b, x, ty)
    return b.libm("hypotf" if t == "f32" else "hypot", [re, im], t)


# ---- arithmetic --------------------------------------------------------------------------------


@_complex_rule(ew.add_p)
def _add(b, eqn, x, y):
    return b.op(f"complex.add {x}, {y} : {_ty(eqn)}")


@_complex_rule(ew.sub_p)
def _sub(b, eqn, x, y):
    return b.op(f"complex.sub {x}, {y} : {_ty(eqn)}")


@_complex_rule(ew.mul_p)
def _mul(b, eqn, x, y):
    return cmul(b, x, y, _ty(eqn))


@_complex_rule(special.square_p)
def _square(b, eqn, x):
    return cmul(b, x, x, _ty(eqn))


@_complex_rule(special.integer_pow_p)
def _integer_pow(b, eqn, x):
    """The impl's square-and-multiply from ``acc = 1`` (its products, so its NaNs), and
    ``1 / x**-y`` for negative ``y``."""
    ty, y = _ty(eqn), eqn.params["y"]
    one = b.const(1.0, ty)
    acc, base, n = one, x, abs(y)
    while n:
        if n & 1:
            acc = cmul(b, acc, base, ty)
        n >>= 1
        if n:
            base = cmul(b, base, base, ty)
    return cdiv(b, one, acc, ty) if y < 0 else acc


@_complex_rule(ew.sign_p)
def _sign(b, eqn, x):
    """``x / |x|`` (numpy 2's complex sign; the impl divides by ``|x| + 0j``), 0 at 0."""
    ty = _ty(eqn)
    t = _part(ty)
    mag = cabs(b, x, ty)
    q = cdiv(b, x, make(b, mag, b.const(0.0, t), ty), ty)
    return _sel(b, _cmp(b, "oeq", mag, b.const(0.0, t), t), b.const(0.0, ty), q, ty)


@_complex_rule(ew.div_p)
def _div(b, eqn, x, y):
    return cdiv(b, x, y, _ty(eqn))


@_complex_rule(ew.neg_p)
def _neg(b, eqn, x):
    return b.op(f"complex.neg {x} : {_ty(eqn)}")


@_complex_rule(conj_p)
def _conj(b, eqn, x):
    return b.op(f"complex.conj {x} : {_ty(eqn)}")


@_complex_rule(real_p)
def _real(b, eqn, x):
    return b.op(f"complex.re {x} : {_ty(eqn)}")


@_complex_rule(imag_p)
def _imag(b, eqn, x):
    return b.op(f"complex.im {x} : {_ty(eqn)}")


@_complex_rule(complex_p)
def _complex(b, eqn, x, y):
    return make(b, x, y, compute_type(eqn.outvars[0].aval.dtype))


@_complex_rule(ew.abs_p)
def _abs(b, eqn, x):
    return cabs(b, x, _ty(eqn))


@_complex_rule(ew.exp_p)
def _exp(b, eqn, x):
    ty = _ty(eqn)
    return cexp(b, *parts(b, x, ty), ty)


@_complex_rule(special.exp2_p)
def _exp2(b, eqn, x):
    """numpy's ``nc_exp2``: ``exp`` of both parts times ``log 2`` (a real product: no NaN from
    ``0 * inf`` between parts)."""
    ty = _ty(eqn)
    t = _part(ty)
    ln2 = b.const(float(np.log(2.0)), t)
    re, im = parts(b, x, ty)
    return cexp(b, _f(b, "mulf", re, ln2, t), _f(b, "mulf", im, ln2, t), ty)


def cexp(b: Builder, re: str, im: str, ty: str) -> str:
    """``exp(re + i im)`` as glibc's ``cexp`` (special values in the module's docstring)."""
    t = _part(ty)
    e = _fn(b, "exp", re, t)
    zr = _f(b, "mulf", e, _fn(b, "cos", im, t), t)
    zi = _f(b, "mulf", e, _fn(b, "sin", im, t), t)
    # C99 special values (glibc's cexp): a zero imaginary part stays exact
    im0 = _cmp(b, "oeq", im, b.const(0.0, t), t)
    zr, zi = _sel(b, im0, e, zr, t), _sel(b, im0, im, zi, t)
    inf = b.const(np.inf, t)
    im_bad = _cmp(b, "uge", b.op(f"math.absf {im} : {t}"), inf, t)  # inf or NaN
    ninf = b.op(f"arith.andi {_cmp(b, 'oeq', re, b.const(-np.inf, t), t)}, {im_bad} : i1")
    zero = b.const(0.0, t)
    zr, zi = _sel(b, ninf, zero, zr, t), _sel(b, ninf, zero, zi, t)
    pinf = b.op(f"arith.andi {_cmp(b, 'oeq', re, inf, t)}, {im_bad} : i1")
    zr, zi = _sel(b, pinf, inf, zr, t), _sel(b, pinf, b.const(np.nan, t), zi, t)
    return make(b, zr, zi, ty)


@_complex_rule(ew.log_p)
def _log(b, eqn, x):
    ty = _ty(eqn)
    t = _part(ty)
    re, im = parts(b, x, ty)
    mag = _fn(b, "log", cabs(b, x, ty), t)
    # near |z| = 1 the real part is small: log|z| = log1p((a - 1)(a + 1) + c^2) / 2 with
    # a = max(|re|, |im|) in (1/2, 2) (a - 1 exact), c the other part, as glibc's clog does
    ar, ai = b.op(f"math.absf {re} : {t}"), b.op(f"math.absf {im} : {t}")
    a, c = _f(b, "maximumf", ar, ai, t), _f(b, "minimumf", ar, ai, t)
    one = b.const(1.0, t)
    d = _f(b, "mulf", _f(b, "subf", a, one, t), _f(b, "addf", a, one, t), t)
    d = _f(b, "addf", d, _f(b, "mulf", c, c, t), t)
    near = b.op(f"arith.andi {_cmp(b, 'ogt', a, b.const(0.5, t), t)}, "
                f"{_cmp(b, 'olt', a, b.const(2.0, t), t)} : i1")  # fmt: skip
    l1p = b.libm("log1pf" if t == "f32" else "log1p", [d], t)
    mag = _sel(b, near, _f(b, "mulf", l1p, b.const(0.5, t), t), mag, t)
    return make(b, mag, b.op(f"math.atan2 {im}, {re} : {t}"), ty)


@_complex_rule(special.sqrt_p)
def _sqrt(b, eqn, x):
    return csqrt(b, x, _ty(eqn))


@_complex_rule(special.rsqrt_p)
def _rsqrt(b, eqn, x):
    """``1 / sqrt(x)``, as the impl (Smith's division of 1 by the square root)."""
    ty = _ty(eqn)
    return cdiv(b, b.const(1.0, ty), csqrt(b, x, ty), ty)


@_complex_rule(special.log1p_p)
def _log1p(b, eqn, x):
    """numpy's ``nc_log1p``: ``log(hypot(re + 1, im)) + i atan2(im, re + 1)`` (no extra
    accuracy near 0: numpy's own formula)."""
    ty = _ty(eqn)
    t = _part(ty)
    re, im = parts(b, x, ty)
    re1 = _f(b, "addf", re, b.const(1.0, t), t)
    mag = _fn(b, "log", b.libm("hypotf" if t == "f32" else "hypot", [re1, im], t), t)
    return make(b, mag, b.op(f"math.atan2 {im}, {re1} : {t}"), ty)


def csqrt(b: Builder, x: str, ty: str) -> str:
    """The C99 / FreeBSD ``csqrt`` (the module's docstring)."""
    t = _part(ty)
    a, y = parts(b, x, ty)
    zero, half, inf = b.const(0.0, t), b.const(0.5, t), b.const(np.inf, t)
    big_at = float(np.finfo(np.float32 if t == "f32" else np.float64).max) / 4
    aa, ay = b.op(f"math.absf {a} : {t}"), b.op(f"math.absf {y} : {t}")
    big = b.op(f"arith.ori {_cmp(b, 'oge', aa, b.const(big_at, t), t)}, "
               f"{_cmp(b, 'oge', ay, b.const(big_at, t), t)} : i1")  # fmt: skip
    s = _sel(b, big, b.const(0.25, t), b.const(1.0, t), t)  # sqrt(z / 4) = sqrt(z) / 2
    sa, sy = _f(b, "mulf", a, s, t), _f(b, "mulf", y, s, t)
    h = b.libm("hypotf" if t == "f32" else "hypot", [sa, sy], t)
    mid = _f(b, "mulf", _f(b, "addf", b.op(f"math.absf {sa} : {t}"), h, t), half, t)
    r = b.op(f"math.sqrt {mid} : {t}")
    r = _f(b, "mulf", r, _sel(b, big, b.const(2.0, t), b.const(1.0, t), t), t)
    q = _f(b, "divf", ay, _f(b, "mulf", r, b.const(2.0, t), t), t)  # |y| / (2 r), unscaled
    pos = _cmp(b, "oge", a, zero, t)
    zr = _sel(b, pos, r, q, t)
    zi = _sel(
        b, pos, b.op(f"math.copysign {q}, {y} : {t}"), b.op(f"math.copysign {r}, {y} : {t}"), t
    )
    # special values, last to first in C99's order of precedence
    nan_y = _f(b, "subf", y, y, t)  # NaN for infinite or NaN y, else 0
    a_inf = _cmp(b, "oeq", aa, inf, t)
    a_neg = _cmp(b, "olt", a, zero, t)
    zr = _sel(b, a_inf, _sel(b, a_neg, b.op(f"math.absf {nan_y} : {t}"), a, t), zr, t)
    zi = _sel(b, a_inf, _sel(b, a_neg, b.op(f"math.copysign {a}, {y} : {t}"),
                             b.op(f"math.copysign {nan_y}, {y} : {t}"), t), zi, t)  # fmt: skip
    a_nan = _cmp(b, "uno", a, a, t)
    nan = b.const(np.nan, t)
    zr, zi = _sel(b, a_nan, a, zr, t), _sel(b, a_nan, nan, zi, t)
    y_inf = _cmp(b, "oeq", ay, inf, t)
    zr, zi = _sel(b, y_inf, inf, zr, t), _sel(b, y_inf, y, zi, t)
    both0 = b.op(f"arith.andi {_cmp(b, 'oeq', a, zero, t)}, {_cmp(b, 'oeq', y, zero, t)} : i1")
    zr, zi = _sel(b, both0, zero, zr, t), _sel(b, both0, y, zi, t)
    return make(b, zr, zi, ty)


def _cosh_sinh(b: Builder, x: str, y: str, t: str, sinh: bool) -> tuple[str, str]:
    """``cosh(x + iy)`` (or ``sinh``) as glibc's ``ccosh`` / ``csinh`` (which numpy calls):
    ``cosh x cos y + i sinh x sin y`` (``sinh x cos y + i cosh x sin y``) with C99's special
    values (Annex G.6.2.4-5): a zero ``y`` gives an exact zero imaginary part, an infinite ``x``
    gives ``inf cis(y)``, a non-finite ``y`` NaN parts (exact zeros where ``x`` is 0), a NaN
    ``x`` NaN (``NaN + 0j`` for ``y = 0``). Deviation: glibc scales where ``cosh x`` overflows
    but the product would not (``|x|`` within ~0.7 above ``log(max)``); here such parts are inf."""
    ch, sh = _fn(b, "cosh", x, t), _fn(b, "sinh", x, t)
    c, s = _fn(b, "cos", y, t), _fn(b, "sin", y, t)
    re = _f(b, "mulf", sh if sinh else ch, c, t)
    im = _f(b, "mulf", ch if sinh else sh, s, t)
    zero, inf, nan = b.const(0.0, t), b.const(np.inf, t), b.const(np.nan, t)

    def both(p: str, q: str) -> str:
        return b.op(f"arith.andi {p}, {q} : i1")

    ax, ay = b.op(f"math.absf {x} : {t}"), b.op(f"math.absf {y} : {t}")
    xf, yf = _cmp(b, "olt", ax, inf, t), _cmp(b, "olt", ay, inf, t)
    y_bad = _cmp(b, "uge", ay, inf, t)  # inf or NaN
    xinf = _cmp(b, "oeq", ax, inf, t)
    y0, x0 = _cmp(b, "oeq", y, zero, t), _cmp(b, "oeq", x, zero, t)
    m = both(y0, xf)  # y = 0, x finite: the imaginary part is an exact (signed) zero
    im = _sel(b, m, y if sinh else _f(b, "mulf", x, y, t), im, t)
    nan_y = _f(b, "subf", y, y, t)
    m = both(xf, y_bad)  # y not finite, x finite
    if sinh:
        re = _sel(b, m, _sel(b, x0, x, nan, t), re, t)
        im = _sel(b, m, nan_y, im, t)
    else:
        re = _sel(b, m, nan_y, re, t)
        im = _sel(b, m, _sel(b, x0, _f(b, "mulf", zero, x, t), nan, t), im, t)
    one_x = b.op(f"math.copysign {b.const(1.0, t)}, {x} : {t}")
    inf_c = b.op(f"math.copysign {inf}, {c} : {t}")
    inf_s = b.op(f"math.copysign {inf}, {s} : {t}")
    m1 = both(xinf, both(yf, _cmp(b, "one", y, zero, t)))  # x infinite, y finite nonzero
    m2, m3 = both(xinf, y0), both(xinf, y_bad)
    if sinh:
        re = _sel(b, m1, _f(b, "mulf", inf_c, one_x, t), re, t)
        im = _sel(b, m1, inf_s, im, t)
        re, im = _sel(b, m2, x, re, t), _sel(b, m2, y, im, t)
        re, im = _sel(b, m3, inf, re, t), _sel(b, m3, nan_y, im, t)  # +inf whatever x's sign
    else:
        re = _sel(b, m1, inf_c, re, t)
        im = _sel(b, m1, _f(b, "mulf", inf_s, one_x, t), im, t)
        re, im = _sel(b, m2, inf, re, t), _sel(b, m2, _f(b, "mulf", y, one_x, t), im, t)
        re = _sel(b, m3, inf, re, t)
        im = _sel(b, m3, _f(b, "mulf", x, nan_y, t), im, t)
    xn = _cmp(b, "uno", x, x, t)
    return _sel(b, xn, nan, re, t), _sel(b, xn, _sel(b, y0, y, nan, t), im, t)


@_complex_rule(special.cosh_p)
def _cosh(b, eqn, z):
    ty = _ty(eqn)
    return make(b, *_cosh_sinh(b, *parts(b, z, ty), _part(ty), sinh=False), ty)


@_complex_rule(special.sinh_p)
def _sinh(b, eqn, z):
    ty = _ty(eqn)
    return make(b, *_cosh_sinh(b, *parts(b, z, ty), _part(ty), sinh=True), ty)


@_complex_rule(ew.cos_p)
def _cos(b, eqn, z):
    """``cos z = cosh(iz)``, ``iz = -y + ix`` (C99's definition; glibc's ``ccos``)."""
    ty = _ty(eqn)
    t = _part(ty)
    x, y = parts(b, z, ty)
    return make(b, *_cosh_sinh(b, b.op(f"arith.negf {y} : {t}"), x, t, sinh=False), ty)


@_complex_rule(ew.sin_p)
def _sin(b, eqn, z):
    """``sin z = -i sinh(iz)``, ``iz = -y + ix`` (C99's definition; glibc's ``csin``)."""
    ty = _ty(eqn)
    t = _part(ty)
    x, y = parts(b, z, ty)
    re, im = _cosh_sinh(b, b.op(f"arith.negf {y} : {t}"), x, t, sinh=True)
    inf = b.const(np.inf, t)
    # glibc's csin: +inf imaginary part for an infinite y and a non-finite x (whatever signs)
    odd = b.op(f"arith.andi {_cmp(b, 'oeq', b.op(f'math.absf {y} : {t}'), inf, t)}, "
               f"{_cmp(b, 'uge', b.op(f'math.absf {x} : {t}'), inf, t)} : i1")  # fmt: skip
    return make(b, im, _sel(b, odd, inf, b.op(f"arith.negf {re} : {t}"), t), ty)


# ---- comparisons -------------------------------------------------------------------------------


@_complex_rule(ew.eq_p)
def _eq(b, eqn, x, y):
    ty = _ty(eqn)
    t = _part(ty)
    (xr, xi), (yr, yi) = parts(b, x, ty), parts(b, y, ty)
    return b.op(f"arith.andi {_cmp(b, 'oeq', xr, yr, t)}, {_cmp(b, 'oeq', xi, yi, t)} : i1")


@_complex_rule(ew.ne_p)
def _ne(b, eqn, x, y):
    ty = _ty(eqn)
    t = _part(ty)
    (xr, xi), (yr, yi) = parts(b, x, ty), parts(b, y, ty)
    return b.op(f"arith.ori {_cmp(b, 'une', xr, yr, t)}, {_cmp(b, 'une', xi, yi, t)} : i1")


# ---- casts -------------------------------------------------------------------------------------


@_complex_rule(convert_element_type_p)
def _convert(b, eqn, x):
    return convert(b, x, eqn.invars[0].aval.dtype, eqn.params["new_dtype"])


def convert(b: Builder, x: str, src: np.dtype, dst: np.dtype) -> str:
    """``rules.convert`` extended to complex ``src`` or ``dst`` (the impl's rules)."""
    src, dst = np.dtype(src), np.dtype(dst)
    if not is_complex(src) and not is_complex(dst):
        return rules.convert(b, x, src, dst)
    if not is_complex(src):  # real -> complex: the value, and a zero imaginary part
        part = dtypes.real_dtype(dst)
        re = rules.convert(b, x, src, part)
        return make(b, re, b.const(0.0, compute_type(part)), compute_type(dst))
    sty, spart = compute_type(src), dtypes.real_dtype(src)
    re, im = parts(b, x, sty)
    if is_complex(dst):
        part = dtypes.real_dtype(dst)
        return make(b, rules.convert(b, re, spart, part), rules.convert(b, im, spart, part),
                    compute_type(dst))  # fmt: skip
    if dst == dtypes.bool_:  # x != 0: either part nonzero (NaN counts)
        t = compute_type(spart)
        z = b.const(0.0, t)
        return b.op(f"arith.ori {_cmp(b, 'une', re, z, t)}, {_cmp(b, 'une', im, z, t)} : i1")
    return rules.convert(b, re, spart, dst)  # the real part (the impl's rule, as JAX's)


# ---- generic rules that already hold for complex values ----------------------------------------

# select and the identities pass the value through (arith.select takes any type); data movement
# only maps indices (gather, dynamic_slice, ... compute them from integer operands); the index
# rules of pad / concatenate / gather's fill build their constants with Builder.const
allow(ew.select_p, ad_ops.stop_gradient_p, ad_ops.optimization_barrier_p,
      shapes.broadcast_in_dim_p, shapes.reshape_p, shapes.squeeze_p, shapes.transpose_p,
      slicing.slice_p, shapes.rev_p, shapes.pad_p, shapes.concatenate_p, gather_p,
      slicing.dynamic_slice_p, slicing.dynamic_update_slice_p, take_along_axis_p)  # fmt: skip


# ---- reductions --------------------------------------------------------------------------------


def _complex_reducer(p: Primitive, ccombine: Callable) -> None:
    identity, combine = p.lowerings["reduce"]

    def either(b: Builder, dt: np.dtype, acc: str, x: str) -> str:
        return ccombine(b, acc, x, compute_type(dt)) if is_complex(dt) else combine(b, dt, acc, x)

    p.lowerings["reduce"] = (identity, either)
    allow(p)


# reassociation lets LLVM vectorize the sum (as the real reductions; partial sums per lane)
_complex_reducer(
    reductions.reduce_sum_p,
    lambda b, a, x, ty: b.op(f"complex.add {a}, {x} fastmath<reassoc> : {ty}"),
)
_complex_reducer(reductions.reduce_prod_p, cmul)
