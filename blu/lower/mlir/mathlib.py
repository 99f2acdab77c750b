"""float32 transcendental functions as plain ``arith``/``math`` operations, so LLVM vectorizes the
loops that use them (a ``math.exp`` would become a scalar ``expf`` call per element, which is
far slower than numpy's SIMD kernels).

Algorithms and coefficients: Cephes (S. L. Moshier, ``expf.c``, ``logf.c``), the rational
``tanh`` and ``erf`` of Eigen (``generic_fast_tanh_float``, ``generic_fast_erf_float``; XLA uses
them too), and W. Kahan's tricks for ``log1p`` and ``expm1``. Each is within a few ulp (tanh 5,
erf 7, the others 1-3) of the correctly rounded result over the whole float32 range (tested
against numpy/scipy in ``tests/lower/cpu/test_lower_rules.py``), including inf, NaN, zeros and
subnormals. float64 uses the ``math`` dialect (libm), like numpy's accuracy.
"""

from __future__ import annotations

from collections.abc import Sequence

from blu.lower.mlir.emit import Builder

F = "f32"


def _c(b: Builder, v: float) -> str:
    return b.const(v, F)


def _bin(b: Builder, op: str, x: str, y: str) -> str:
    return b.op(f"arith.{op} {x}, {y} : f32")


def _fma(b: Builder, x: str, y: str, z: str) -> str:
    return b.op(f"math.fma {x}, {y}, {z} : f32")


def _cmp(b: Builder, pred: str, x: str, y: str) -> str:
    return b.op(f"arith.cmpf {pred}, {x}, {y} : f32")


def _sel(b: Builder, c: str, x: str, y: str, ty: str = F) -> str:
    return b.op(f"arith.select {c}, {x}, {y} : {ty}")


def _horner(b: Builder, x: str, coeffs: Sequence[float]) -> str:
    acc = _c(b, coeffs[0])
    for c in coeffs[1:]:
        acc = _fma(b, acc, x, _c(b, c))
    return acc


def _is_nan(b: Builder, x: str) -> str:
    return _cmp(b, "uno", x, x)


def _pow2(b: Builder, n: str) -> str:
    """2**n as float32 for an i32 ``n`` in [-126, 127]."""
    biased = b.op(f"arith.addi {n}, {b.const(127, 'i32')} : i32")
    bits = b.op(f"arith.shli {biased}, {b.const(23, 'i32')} : i32")
    return b.op(f"arith.bitcast {bits} : i32 to f32")


# public: blu.lower.cpu.flash repeats these steps over vectors
EXP_HI, EXP_LO = 88.72283935546875, -103.972084045410
LOG2E, C1, C2 = 1.44269504088896341, 0.693359375, -2.12194440e-4
EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
            5.0000001201e-1)  # fmt: skip
_EXP_HI, _EXP_LO, _LOG2E, _C1, _C2 = EXP_HI, EXP_LO, LOG2E, C1, C2


def exp(b: Builder, x: str) -> str:
    """e**x (Cephes expf): x = n ln2 + r, e**r by a degree-7 polynomial, times 2**n. A builder
    whose ``exp2_unit`` is true (GPU kernels, ``$BLU_GPU_EXP=ex2``) gets ``exp_ex2``."""
    if getattr(b, "exp2_unit", False):
        return exp_ex2(b, x)
    xc = b.op(f"arith.minnumf {b.op(f'arith.maxnumf {x}, {_c(b, _EXP_LO)} : f32')}, "
              f"{_c(b, _EXP_HI)} : f32")  # fmt: skip
    # below _EXP_LO (and at NaN) the result is known: compute with x = 0 there, so no lane
    # does slow subnormal arithmetic it does not need
    xc = _sel(b, _cmp(b, "ult", x, _c(b, _EXP_LO)), _c(b, 0.0), xc)
    z = b.op(f"math.floor {_fma(b, xc, _c(b, _LOG2E), _c(b, 0.5))} : f32")
    r = _fma(b, z, _c(b, -_C1), xc)
    r = _fma(b, z, _c(b, -_C2), r)
    p = _horner(b, r, EXP_POLY)
    y = _bin(b, "addf", _fma(b, p, _bin(b, "mulf", r, r), r), _c(b, 1.0))
    n = b.op(f"arith.fptosi {z} : f32 to i32")
    n1 = b.op(f"arith.shrsi {n}, {b.const(1, 'i32')} : i32")
    n2 = b.op(f"arith.subi {n}, {n1} : i32")
    y = _bin(b, "mulf", _bin(b, "mulf", y, _pow2(b, n1)), _pow2(b, n2))
    y = _sel(b, _cmp(b, "ogt", x, _c(b, _EXP_HI)), _c(b, float("inf")), y)
    y = _sel(b, _cmp(b, "olt", x, _c(b, _EXP_LO)), _c(b, 0.0), y)
    return _sel(b, _is_nan(b, x), x, y)


# log2(e) split in two float32s: LOG2E_HI (its float32 rounding) + LOG2E_LO to ~2**-48
LOG2E_HI, LOG2E_LO = 1.4426950216293335, 1.92596298909109e-08
# 1.5 * 2**23: fma(x, LOG2E_HI, ROUNDER) is ROUNDER + the integer nearest x log2(e) (float32's
# spacing is 1 there), its low mantissa bits that integer; J_LO, J_HI bound the scale 2**j
ROUNDER, J_LO, J_HI = 12582912.0, -126, 127


def exp_ex2(b: Builder, x: str) -> str:
    """e**x through a GPU's special-function unit, within 3.2 ulp of the correctly rounded
    result (1.1 of them the reduction's, 2 the hardware's) over the whole float32 range (inf,
    NaN, zeros and subnormal results included), in 9 instructions on sm_90 (the polynomial of
    ``exp``: about 35). ``t = x log2(e)`` is split as ``j + f``: ``s = fma(x, LOG2E_HI,
    ROUNDER)`` rounds ``t`` to the integer ``j`` (its low mantissa bits), clamped to [``J_LO``,
    ``J_HI``] on ``s`` (``maxnumf``: a NaN ``x`` takes a bound here and stays NaN through
    ``f``); ``f = fma(x, LOG2E_HI, -j) + x LOG2E_LO`` (|f| <= 1/2 with an error ~2**-25 where
    ``j`` was not clamped; beyond the bounds ``f`` carries the rest: down to -24 for subnormal
    results, where its rounding costs under 0.2 ulp, and to inf or -inf where the result is);
    ``2**f`` from ``ex2.approx.ftz.f32`` (2 ulp, the CUDA guide's bound for ``exp2f``; a
    ``2**f`` below 2**-126 flushed to 0 is a result that rounds to 0 anyway); times ``2**j``,
    whose bits are ``s``'s shifted into the exponent field (one multiply: a subnormal result
    is rounded once). CUDA's own ``expf`` takes the same approach (reduction by ln 2, the
    rounding constant, the hardware's 2**f)."""
    hi = _c(b, LOG2E_HI)
    s = _fma(b, x, hi, _c(b, ROUNDER))
    s = b.op(f"arith.minnumf {b.op(f'arith.maxnumf {s}, {_c(b, ROUNDER + J_LO)} : f32')}, "
             f"{_c(b, ROUNDER + J_HI)} : f32")  # fmt: skip
    j = _bin(b, "subf", s, _c(b, ROUNDER))
    f = _fma(b, x, hi, b.op(f"arith.negf {j} : f32"))
    f = _fma(b, x, _c(b, LOG2E_LO), f)
    y = b.op(f'llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"({f}) : (f32) -> f32')
    bits = b.op(f"arith.shli {b.op(f'arith.bitcast {s} : f32 to i32')}, "
                f"{b.const(23, 'i32')} : i32")  # fmt: skip
    bits = b.op(f"arith.addi {bits}, {b.const(127 << 23, 'i32')} : i32")  # (j + 127) << 23
    return _bin(b, "mulf", y, b.op(f"arith.bitcast {bits} : i32 to f32"))


def exp_nonpositive(b: Builder, x: str) -> str:
    """e**x for an ``x`` known to be ``<= 0`` or NaN (``blu.lower.plan.signs``: a softmax's
    ``x - max(x)``), in 2 instructions on a GPU: ``ex2.approx.ftz.f32(x * log2(e))``, as
    Triton's ``exp`` and CUDA's ``__expf``. Without ``exp_ex2``'s reduction, the product's
    rounding and log2(e)'s (``1.5 |t| 2**-24`` in ``t = x log2(e)``) move the result by up to
    ``0.75 |x|`` ulp (2**-23 of it), the hardware's ``2**t`` by 2 more and the rounding by a
    half: within ``0.75 |x| + 2.5`` ulp, an absolute error below ``2.5 * 2**-23`` (largest at
    ``x = 0``), 2.5 ulp of the row's largest term, 1. Results below 2**-126 (``x < -87.3``)
    are flushed to 0; ``-inf`` gives 0 and NaN stays NaN (``tests/lower/cuda/test_gpu_exp.py``
    models it over every 1009th non-positive float32)."""
    t = _bin(b, "mulf", x, _c(b, LOG2E))
    return b.op(f'llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"({t}) : (f32) -> f32')


def log(b: Builder, x: str) -> str:
    """Natural log (Cephes logf): x = m 2**e with m in [sqrt(1/2), sqrt(2)), log(m) by a
    polynomial in m - 1; subnormals are scaled by 2**23 first."""
    i32 = "i32"
    small = _cmp(b, "olt", x, _c(b, 1.1754943508222875e-38))
    xs = _sel(b, small, _bin(b, "mulf", x, _c(b, 8388608.0)), x)
    eadj = _sel(b, small, _c(b, -23.0), _c(b, 0.0))
    bits = b.op(f"arith.bitcast {xs} : f32 to i32")
    ebits = b.op(f"arith.andi {b.op(f'arith.shrui {bits}, {b.const(23, i32)} : i32')}, "
                 f"{b.const(255, i32)} : i32")  # fmt: skip
    e = b.op(f"arith.sitofp {b.op(f'arith.subi {ebits}, {b.const(126, i32)} : i32')} : i32 to f32")
    e = _bin(b, "addf", e, eadj)
    mbits = b.op(f"arith.ori {b.op(f'arith.andi {bits}, {b.const(0x807FFFFF, i32)} : i32')}, "
                 f"{b.const(0x3F000000, i32)} : i32")  # fmt: skip
    m = b.op(f"arith.bitcast {mbits} : i32 to f32")
    lt = _cmp(b, "olt", m, _c(b, 0.707106781186547524))
    e = _bin(b, "subf", e, _sel(b, lt, _c(b, 1.0), _c(b, 0.0)))
    xm = _bin(b, "subf", _sel(b, lt, _bin(b, "addf", m, m), m), _c(b, 1.0))
    z = _bin(b, "mulf", xm, xm)
    p = _horner(b, xm, [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
                        1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
                        3.3333331174e-1])  # fmt: skip
    y = _bin(b, "mulf", _bin(b, "mulf", p, xm), z)
    y = _fma(b, e, _c(b, _C2), y)
    y = _fma(b, z, _c(b, -0.5), y)
    r = _fma(b, e, _c(b, _C1), _bin(b, "addf", xm, y))
    r = _sel(b, _cmp(b, "oeq", x, _c(b, float("inf"))), x, r)
    r = _sel(b, _cmp(b, "oeq", x, _c(b, 0.0)), _c(b, float("-inf")), r)
    return _sel(b, _cmp(b, "ult", x, _c(b, 0.0)), _c(b, float("nan")), r)  # NaN and x < 0


def tanh(b: Builder, x: str) -> str:
    """A rational approximation on [-7.9, 7.9] (odd degree-13 over even degree-6; Eigen's
    ``generic_fast_tanh_float``, also XLA's), +-1 beyond, x itself below 4e-4: within 5 ulp,
    and no exp or branch, so it is cheaper than the Cephes formula. Beyond the clamp the result
    is exactly +-1 (the approximation there is 1 - 3e-7): ``x * (1 + tanh(x))`` (GELU) then
    vanishes for large negative x instead of growing with it."""
    lim = 7.90531110763549805
    xc = b.op(f"arith.minnumf {b.op(f'arith.maxnumf {x}, {_c(b, -lim)} : f32')}, "
              f"{_c(b, lim)} : f32")  # fmt: skip
    x2 = _bin(b, "mulf", xc, xc)
    p = _horner(b, x2, [-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                        5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                        4.89352455891786e-03])  # fmt: skip
    q = _horner(b, x2, [1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                        4.89352518554385e-03])  # fmt: skip
    r = _bin(b, "mulf", xc, _bin(b, "divf", p, q))
    ax = b.op(f"math.absf {x} : f32")
    one = _sel(b, _cmp(b, "olt", x, _c(b, 0.0)), _c(b, -1.0), _c(b, 1.0))
    r = _sel(b, _cmp(b, "ogt", ax, _c(b, lim)), one, r)
    tiny = _cmp(b, "olt", ax, _c(b, 0.0004))
    return _sel(b, _is_nan(b, x), x, _sel(b, tiny, x, r))


def logistic(b: Builder, x: str) -> str:
    """1 / (1 + e**-x), computed from e**-|x| so that neither side overflows: ``n / d`` with
    ``d = 1 + e**-|x|`` in [1, 2] and ``n`` 1 for x >= 0, else ``e**-|x|``. A builder with
    ``exp2_unit`` (GPU kernels, ``$BLU_GPU_EXP=ex2``) divides by ``div.approx.f32`` (``n`` times
    the special-function unit's reciprocal: within 2 ulp for divisors in [2**-126, 2**126], as
    the PTX ISA states) instead of the correctly rounded ``div.rn.f32`` (a reciprocal and a Newton
    step with a slow path: about 8 instructions)."""
    e = exp(b, b.op(f"arith.negf {b.op(f'math.absf {x} : f32')} : f32"))
    d = _bin(b, "addf", e, _c(b, 1.0))
    n = _sel(b, _cmp(b, "oge", x, _c(b, 0.0)), _c(b, 1.0), e)
    fast = " fastmath<afn>" if getattr(b, "exp2_unit", False) else ""
    return b.op(f"arith.divf {n}, {d}{fast} : f32")


def log1p(b: Builder, x: str) -> str:
    """log(1 + x) by Kahan's trick: log(u) * x / (u - 1) with u = 1 + x rounded."""
    u = _bin(b, "addf", x, _c(b, 1.0))
    d = _bin(b, "subf", u, _c(b, 1.0))
    r = _bin(b, "mulf", log(b, u), _bin(b, "divf", x, d))
    r = _sel(b, _cmp(b, "oeq", d, _c(b, 0.0)), x, r)
    return _sel(b, _cmp(b, "oeq", x, _c(b, float("inf"))), x, r)


def expm1(b: Builder, x: str) -> str:
    """e**x - 1 by Kahan's trick: (u - 1) * x / log(u) with u = e**x rounded."""
    u = exp(b, x)
    um1 = _bin(b, "subf", u, _c(b, 1.0))
    r = _bin(b, "mulf", um1, _bin(b, "divf", x, log(b, u)))
    r = _sel(b, _cmp(b, "oeq", um1, _c(b, -1.0)), um1, r)
    r = _sel(b, _cmp(b, "oeq", um1, _c(b, 0.0)), x, r)
    return _sel(b, _cmp(b, "oeq", u, _c(b, float("inf"))), u, r)


def erf(b: Builder, x: str) -> str:
    """Rational approximation on [-4, 4] (odd degree-13 over even degree-8; Eigen's
    ``generic_fast_erf_float``); +-1 beyond."""
    xc = b.op(f"arith.minnumf {b.op(f'arith.maxnumf {x}, {_c(b, -4.0)} : f32')}, "
              f"{_c(b, 4.0)} : f32")  # fmt: skip
    x2 = _bin(b, "mulf", xc, xc)
    p = _horner(b, x2, [-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
                        -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
                        -1.60960333262415e-02])  # fmt: skip
    q = _horner(b, x2, [-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                        -7.37332916720468e-03, -1.42647390514189e-02])  # fmt: skip
    r = _bin(b, "mulf", xc, _bin(b, "divf", p, q))  # x * (p/q): no underflow for tiny x
    return _sel(b, _is_nan(b, x), x, r)


FUNCTIONS = {"exp": exp, "log": log, "tanh": tanh, "logistic": logistic, "log1p": log1p,
             "expm1": expm1, "erf": erf}  # fmt: skip
