"""lgamma, digamma, polygamma and erf_inv compiled into CPU kernels (``mlir/mathlib_special.py``),
against ``scipy.special`` evaluated in float64 on the same (rounded) inputs.

Tolerances come from the dtype's epsilon and the accuracy measured for the algorithms (their
docstring): relative, in ulp of the result, where the function is well conditioned (x > 0 for
the gamma family, where even the zeros of lgamma at 1 and 2 keep their relative accuracy); for
x < 0, where the reflection formulas cancel near the zeros between the poles, absolute, in
``eps * max(|f|, 1)``. scipy itself loses digits in float64 right next to the poles and the zeros
(its ``psi(-1 + 1e-9)`` is off by 1e-7 relative), so the float64 grids keep 1e-6 away from the
poles; those neighbourhoods are checked against mpmath where it is installed. Special values
(poles, +-0, +-inf, NaN, +-1 for erf_inv) must match scipy exactly.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import scipy.special as sp
from helpers import shapes
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.lax as lax
from blu.core.staging import hoist_consts
from blu.lower.cpu.executable import CpuExecutable
from blu.lower.lowering import host_fallbacks

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)

FUNCS = {
    "lgamma": (lax.lgamma, sp.gammaln),
    "digamma": (lax.digamma, sp.psi),
    "erf_inv": (lax.erf_inv, sp.erfinv),
}
POLYGAMMA = "polygamma" not in host_fallbacks()
if POLYGAMMA:
    FUNCS.update({
        "polygamma1": (lambda x: lax.polygamma(1, x), lambda x: sp.polygamma(1, x)),
        "polygamma2": (lambda x: lax.polygamma(2, x), lambda x: sp.polygamma(2, x)),
        "polygamma4": (lambda x: lax.polygamma(4, x), lambda x: sp.polygamma(4, x)),
    })  # fmt: skip
# float32: (ulp of the result for x > 0 and for erf_inv, eps * the scale of the reflection's terms
# for x < 0); measured maxima are about half of these (mathlib_special's docstring). float64 is
# checked against scipy to 1e-13 and against mpmath to a few ulp
TOL = {
    "lgamma": {F32: (4, 4)},
    "digamma": {F32: (8, 8)},
    "erf_inv": {F32: (6, 6)},
    "polygamma1": {F32: (16, 16)},
    "polygamma2": {F32: (16, 16)},
    "polygamma4": {F32: (32, 32)},
}


def compiled(f, x):
    """``f(x)`` run by the CPU executable; asserts that nothing ran on the host."""
    closed = blu.make_jaxpr(f)(x)
    exe = CpuExecutable(hoist_consts(closed.jaxpr))
    outs = exe(*[np.asarray(c) for c in closed.consts], np.asarray(x))
    kinds = [n.kind for n in exe.plan.nodes]
    assert "fallback" not in kinds, kinds
    return outs, kinds


def _grid(name: str) -> np.ndarray:
    if name == "erf_inv":
        tail = np.logspace(-16, 0, 3000)
        tiny = np.logspace(-300, 0, 1000)
        return np.concatenate([np.linspace(-1, 1, 40001), 1 - tail, tail - 1, tiny, -tiny])
    poles = np.arange(-40.0, 1.0)
    # scipy's polygamma takes time linear in -x for x < 0 (minutes at -1e8): stay above -1e4
    low = -4 if name.startswith("polygamma") else 15
    return np.concatenate([
        np.linspace(-40, 40, 80001), np.logspace(-300, 300, 4000), -np.logspace(-300, low, 3000),
        1 + np.linspace(-1e-3, 1e-3, 1001), 2 + np.linspace(-1e-3, 1e-3, 1001),  # lgamma's zeros
        1.4616321449683622 + np.linspace(-0.3, 0.3, 3001),  # digamma's zero
            (poles[:, None] + np.array([-1e-3, -1e-6, 1e-6, 1e-3])).ravel(),
    ])  # fmt: skip


def _check(name, dtype, x, got, want, ref):
    """``got`` within TOL of the float64 reference ``want`` (same non-finite values); for x < 0
    the scale of the reflection's terms, ``max(|f(x)|, 1) + |f(1 - x)|``."""
    eps = float(np.finfo(dtype).eps)
    with np.errstate(all="ignore"):
        wd = want.astype(dtype).astype(np.float64)
    got = got.astype(np.float64)
    finite = np.isfinite(wd)
    np.testing.assert_array_equal(got[~finite], wd[~finite], err_msg=f"{name} specials")
    assert np.isfinite(got[finite]).all(), x[finite][~np.isfinite(got[finite])][:5]
    ulps, absolute = TOL[name].get(dtype, (0, 0))
    # the scale of x < 0's reflection terms: max(|f(x)|, 1) + |f(1 - x)|
    refl = np.zeros_like(want)
    refl[x < 0] = np.abs(ref(1 - x[x < 0]))
    scale = np.maximum(np.abs(want), 1.0) + refl
    if dtype == F64:  # scipy's own float64 values are good to ~1e-13 of that scale, no better
        bound = 1e-13 * (np.abs(want) if name == "erf_inv" else scale)
    else:
        # below the normal range results keep fewer bits: count in the smallest normal's ulp
        ulp = np.spacing(np.maximum(np.abs(wd), np.finfo(dtype).tiny).astype(dtype)).astype(float)
        relative = (x > 0) | (name == "erf_inv")
        bound = np.where(relative, ulps * ulp, absolute * eps * scale)
    with np.errstate(all="ignore"):
        err = np.abs(got - want)
    bad = finite & (err > bound)
    assert not bad.any(), (
        f"{name} {dtype}: {bad.sum()} points, worst x={x[bad][np.argmax((err / bound)[bad])]!r}: "
        f"got {got[bad][np.argmax((err / bound)[bad])]!r}, "
        f"want {want[bad][np.argmax((err / bound)[bad])]!r}"
    )


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
@pytest.mark.parametrize("name", list(FUNCS))
def test_dense_grid_against_scipy(name, dtype):
    f, ref = FUNCS[name]
    with np.errstate(over="ignore"):
        x = np.unique(_grid(name).astype(dtype))
    if dtype == F64 and name == "lgamma":  # scipy answers inf for subnormals (log(1/x) is finite)
        x = x[~((np.abs(x) < np.finfo(F64).tiny) & (x != 0))]
    if dtype == F64 and name != "erf_inv":  # scipy's psi loses digits there: mpmath's test
        x = x[~((np.abs(x - np.round(x)) < 1e-3) & (x < 0.5) & (x > -1e15))]
    (got,), kinds = compiled(f, x)
    assert kinds == ["kernel"]
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64))
        _check(name, dtype, x.astype(np.float64), got, want, ref)


SPECIALS = [0.0, -0.0, 1.0, 2.0, -1.0, -2.0, -7.0, -1e6, -2.0**60, np.inf, -np.inf, np.nan, 0.5,
            -0.5, 1e-30, -1e-30, 3e8, 1e30]  # fmt: skip


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
@pytest.mark.parametrize("name", list(FUNCS))
def test_special_values_match_scipy(name, dtype):
    f, ref = FUNCS[name]
    x = np.asarray(SPECIALS + ([1.0 - 2.0**-24, -1.0, 1.5, -3.0] if name == "erf_inv" else []),
                   dtype)  # fmt: skip
    (got,), _ = compiled(f, x)
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64)).astype(dtype)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite], want[~finite], err_msg=f"{name}: {x[~finite]}")
    np.testing.assert_allclose(got[finite], want[finite], rtol=64 * np.finfo(dtype).eps)


@pytest.mark.parametrize("name", ["lgamma", "digamma", "erf_inv"]
                         + (["polygamma1", "polygamma2"] if POLYGAMMA else []))  # fmt: skip
def test_float64_against_mpmath(name):
    """float64 to a few ulp (of the scale of the reflection's terms for x < 0), right next to the
    poles and zeros too, where scipy's own values lose digits."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 40
    rng = np.random.default_rng(0)
    if name == "erf_inv":
        d = np.logspace(-16, -1, 40)
        x = np.concatenate([1 - d, d - 1, rng.uniform(-1, 1, 60), np.logspace(-300, -2, 20)])
    else:
        d = np.array([1e-12, 1e-9, 1e-6, 1e-3, 0.1])
        poles = (np.arange(-6.0, 1.0)[:, None] + np.concatenate([d, -d])).ravel()
        root = 1.4616321449683622
        x = np.concatenate([poles, 1 + d, 1 - d, 2 + d, 2 - d, root + d, root - d,
                            rng.uniform(-30, 30, 60), np.logspace(-300, 300, 20)])  # fmt: skip
        x = x[x != 0]
    fn = {
        "lgamma": lambda v: mp.log(abs(mp.gamma(v))),
        "digamma": mp.digamma,
        "polygamma1": lambda v: mp.polygamma(1, v),
        "polygamma2": lambda v: mp.polygamma(2, v),
        "erf_inv": mp.erfinv,
    }[name]
    f = FUNCS[name][0]
    (got,), _ = compiled(f, x)
    want = np.array([float(fn(mp.mpf(float(v)))) for v in x])
    with np.errstate(all="ignore"):
        refl = np.array([abs(float(fn(mp.mpf(1 - float(v))))) if v < 0 and name != "erf_inv"
                         else 0.0 for v in x])  # fmt: skip
    scale = np.abs(want) + refl if name == "erf_inv" else np.maximum(np.abs(want), 1e-300) + refl
    if name == "lgamma":  # its zeros 1 and 2: relative; others keep the reflection's scale
        scale = np.where(x > 0, np.abs(want), np.maximum(np.abs(want), 1.0) + refl)
    with np.errstate(invalid="ignore"):
        err = np.where(got == want, 0.0, np.abs(got - want))  # (inf == inf: an exact pole)
    worst = np.argmax(err / scale)
    assert (err <= 8 * np.finfo(F64).eps * scale).all(), (x[worst], got[worst], want[worst])


@pytest.mark.parametrize("dtype", [F32, F64, BF16, F16], ids=str)
@settings(deadline=None, max_examples=15)
@given(shape=shapes(max_dims=3, max_side=5), seed=st.integers(0, 2**31))
def test_fused_with_others_match_the_eager_impl(dtype, shape, seed):
    """All four in one kernel with other operations, on random shapes (size 0 and 1 included)
    with NaN, infinities, zeros and poles mixed in, against each primitive's eager impl."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 4
    flat = x.reshape(-1)
    if flat.size:
        k = rng.integers(0, flat.size, max(1, flat.size // 4))
        specials = [np.nan, np.inf, -np.inf, 0.0, -0.0, -3.0, 1.0, 2.0, 1e-30, 80.0]
        flat[k] = rng.choice(specials, k.size)
    x = x.astype(dtype)

    def f(x):
        t = lax.mul(x, 0.25)  # exact: an approximate producer (tanh) would be amplified
        out = [lax.lgamma(x), lax.digamma(x), lax.erf_inv(t), lax.add(lax.lgamma(t), x)]
        return out + ([lax.polygamma(1, x)] if POLYGAMMA else [])

    got, kinds = compiled(f, x)
    assert set(kinds) <= {"kernel"}, kinds  # (the partition may split the expensive ones)
    with np.errstate(all="ignore"):
        want = [np.asarray(w) for w in f(x)]
    # one rounding of a float32 result for the narrow types, else the float32/64 accuracy above
    rtol = {F32: 64 * 2.0**-23, F64: 1e-13, BF16: 2.0**-7, F16: 2.0**-10}[dtype]
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype == dtype
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        # near the zeros between negative poles the reflection is accurate only absolutely
        np.testing.assert_allclose(g64, w64, rtol=rtol, atol=rtol * 4, err_msg=f"output {i}")


def test_no_longer_host_fallbacks():
    fallbacks = host_fallbacks()
    for name in ("lgamma", "digamma", "erf_inv") + (("polygamma",) if POLYGAMMA else ()):
        assert name not in fallbacks


@pytest.mark.parametrize("sampler", ["normal", "gamma", "beta"])
def test_samplers_stay_compiled(sampler):
    """blu.random's normal (erf_inv of a uniform) and its gamma and beta samplers (normals in a
    rejection loop) run no primitive on the host."""
    fns = {"normal": lambda k: blu.random.normal(k, (64,)),
           "gamma": lambda k: blu.random.gamma(k, 2.5, (64,)),
           "beta": lambda k: blu.random.beta(k, 2.0, 3.0, (64,))}  # fmt: skip
    closed = blu.make_jaxpr(fns[sampler])(blu.random.key(0))
    exe = CpuExecutable(hoist_consts(closed.jaxpr))
    assert "fallback" not in [n.kind for n in exe.plan.nodes]
