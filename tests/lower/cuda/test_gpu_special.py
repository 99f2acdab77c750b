"""lgamma, digamma, polygamma and erf_inv jitted on CUDA (``mlir/mathlib_special.py``, marked
``gpu``) against ``scipy.special`` in float64, and fused: no host fallback in the GPU plan.

Runs on a GPU or, with ``BLU_FAKE_GPU=1``, on the simulated GPU, which runs each kernel's CPU build
and compiles its GPU build into the kernel cache (``scripts/fill_gpu_cache.py`` lists this file):
the shapes and inputs are FIXED so the GPU machine finds every kernel compiled ahead.

Tolerances (the accuracy measured on the CPU, where the same algorithms run, with room for
libdevice's sin/tan/erf/erfc in place of libm's): float32 16 ulp of the result where x > 0 (and
for erf_inv), float64 1e-13 (absolute near lgamma's zeros, as scipy is); for x < 0, where the
reflection's terms cancel near the zeros between the poles, absolute in
``eps * (max(|f(x)|, 1) + |f(1 - x)|)``.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sp
from gpu_helpers import GPU_MARKS, f32, f64, make_device, plan_nodes, put

import blu
import blu.lax as lax

pytestmark = GPU_MARKS

FUNCS = {
    "lgamma": (lax.lgamma, sp.gammaln),
    "digamma": (lax.digamma, sp.psi),
    "erf_inv": (lax.erf_inv, sp.erfinv),
    "polygamma2": (lambda x: lax.polygamma(2, x), lambda x: sp.polygamma(2, x)),
}
SPECIALS = [0.0, -0.0, 1.0, 2.0, -1.0, -3.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 1e30, -0.5]


@pytest.fixture(scope="module")
def dev():
    return make_device()


def _inputs(name: str, dt) -> np.ndarray:
    rng = np.random.default_rng(7)
    if name == "erf_inv":
        x = np.concatenate([rng.uniform(-1, 1, 4000), 1 - np.logspace(-7, 0, 60),
                            np.logspace(-7, 0, 60) - 1, [1.0, -1.0, 1.5, -2.0]])  # fmt: skip
    else:
        near = np.linspace(-0.01, 0.01, 33)
        x = np.concatenate(
            [rng.uniform(-12, 12, 4000), np.logspace(-30, 30, 60), 1 + near, 2 + near]
        )
    x = np.concatenate([x, SPECIALS])
    return x.astype(dt)


@pytest.mark.parametrize("dt", [f32, f64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", list(FUNCS))
def test_special_function_on_gpu(dev, name, dt):
    f, ref = FUNCS[name]
    x = _inputs(name, dt)
    assert all(n.kind != "fallback" for n in plan_nodes(f, x))
    got = np.asarray(blu.jit(f)(put(dev, x))).astype(f64).ravel()
    xs = x.astype(f64).ravel()
    with np.errstate(all="ignore"):
        want = ref(xs)
        wd = want.astype(dt).astype(f64)
        refl = np.zeros_like(want)
        refl[xs < 0] = np.abs(ref(1 - xs[xs < 0]))  # (scipy's polygamma is slow for x << 0)
        scale = np.maximum(np.abs(want), 1.0) + refl
    finite = np.isfinite(wd)
    np.testing.assert_array_equal(got[~finite], wd[~finite], err_msg=f"{xs[~finite]}")
    eps = float(np.finfo(dt).eps)
    ulp = np.spacing(np.maximum(np.abs(wd), np.finfo(dt).tiny).astype(dt)).astype(f64)
    rel = (xs > 0) | (name == "erf_inv")
    if dt == f32:
        bound = np.where(rel, 16 * ulp, 16 * eps * scale)
    else:  # scipy's own float64 values: absolute near lgamma's zeros 1 and 2, and they lose
        # digits next to the poles (tests/lower/cpu/test_special_math.py checks those on mpmath)
        bound = 1e-13 * np.where(rel & (name != "lgamma"), np.abs(want), scale)
        bound = np.where(got == want, np.inf, bound)  # (exact infinities)
        finite &= ~((xs < 0) & (np.abs(xs - np.round(xs)) < 1e-3))
    err = np.abs(got - want)
    bad = finite & ~(err <= bound)
    assert not bad.any(), (xs[bad][:5], got[bad][:5], want[bad][:5])


def test_fused_special_functions_on_gpu(dev):
    """The three in one program with other elementwise operations: kernels only."""
    x = _inputs("lgamma", f32)

    def f(x):
        t = x * 0.0625
        return lax.lgamma(x) + lax.digamma(x * x + 1.0), lax.erf_inv(t) * 2.0

    assert {n.kind for n in plan_nodes(f, x)} == {"kernel"}
    a, b = blu.jit(f)(put(dev, x))
    xs = x.astype(f64)
    with np.errstate(all="ignore"):
        want_a = sp.gammaln(xs) + sp.psi((x * x + np.float32(1.0)).astype(f64))
        want_b = sp.erfinv(xs * 0.0625) * 2.0
    np.testing.assert_allclose(np.asarray(a), want_a, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(np.asarray(b), want_b, rtol=1e-5, atol=1e-6)


def test_tanh_saturates_on_gpu(dev):
    """float32 tanh is exactly +-1 beyond the approximation's clamp (GELU then vanishes for
    large negative x), as on the CPU."""
    x = np.array([9.0, 20.0, 1e4, 3e38, np.inf, -9.0, -20.0, -1e4, -3e38, -np.inf], f32)
    got = np.asarray(blu.jit(lax.tanh)(put(dev, x)))
    np.testing.assert_array_equal(got, np.sign(x))
    g = np.array([-1e30, -1e6, -1e4, -100.0, -20.0, 0.0, 0.0, 0.0, 0.0, 0.0], f32)
    got = np.asarray(blu.jit(lambda v: blu.nn.gelu(v, approximate=True))(put(dev, g)))
    np.testing.assert_array_equal(got, np.zeros(10, f32))
