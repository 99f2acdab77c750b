"""``random_gamma_grad`` compiled into the elementwise kernels (``blu/lower/mlir/mathlib_gamma.py``:
the series and continued fraction as ``scf.while`` loops, float64 inside) on the CPU and on CUDA
targets: no host fallback; against central differences of scipy's inverse CDF in float64 over
small and large ``a``, ``x`` near 0 and in both tails; against the numpy impl to float64
rounding (both forms, every float dtype, the special values); log space where ``x`` underflows;
``random.gamma``/``beta``/``dirichlet`` gradients through jit.

The ``gpu``-marked tests use fixed shapes, so ``scripts/fill_gpu_cache.py`` compiles their
kernels ahead for the GPU machine; they run there, or on the simulated GPU (``BLU_FAKE_GPU=1``).
"""

from __future__ import annotations

import shutil

import ml_dtypes
import numpy as np
import pytest
import scipy.special as sc
from gpu_helpers import GPU_MARKS, bf16, f16, f32, f64, make_device, plan_nodes, put
from hypothesis import given
from hypothesis import strategies as st

import blu
from blu import lax
from blu.lax.random_gamma import random_gamma_grad_log, random_gamma_grad_p
from blu.lower.backend import prepare
from blu.lower.mlir import _mlir_available

A_GRID = [1e-3, 0.01, 0.2, 0.5, 1.0, 2.5, 10.0, 100.0, 1e3, 3e4, 2e6]
U_GRID = [1e-6, 0.01, 0.3, 0.5, 0.8, 0.99, 1 - 1e-7]  # x near 0, the bulk, the upper tail


def fd_dx_da(a, u):
    """d gammaincinv(a, u) / da by central differences (relative step 1e-6), float64."""
    h = 1e-6 * a
    return (sc.gammaincinv(a + h, u) - sc.gammaincinv(a - h, u)) / (2 * h)


def grid():
    a, u = (v.ravel() for v in np.meshgrid(A_GRID, U_GRID))
    x = sc.gammaincinv(a, u)
    keep = x > 1e-250  # the differences need a representable sample
    return a[keep], u[keep], x[keep]


def no_host_node(f, *args):
    j = blu.make_jaxpr(f)(*args).jaxpr
    for target in ("cpu", "cuda:sm_90"):
        kinds = [n.kind for n in prepare(j, (False,) * len(j.invars), target)[1].nodes]
        assert kinds == ["kernel"], (target, kinds)


def test_compiled_against_differences_of_the_inverse_cdf():
    a, u, x = grid()
    no_host_node(lax.random_gamma_grad, a, x)
    got = np.asarray(blu.jit(lax.random_gamma_grad)(a, x))
    np.testing.assert_allclose(got, fd_dx_da(a, u), rtol=2e-6)


@given(st.floats(1e-3, 1e4), st.floats(1e-6, 1 - 1e-6))
def test_compiled_equals_the_impl_at_random_points(a, u):
    x = sc.gammaincinv(a, u)
    a_, x_ = np.array([a, a]), np.array([x, 0.5 * x])
    got = np.asarray(blu.jit(lax.random_gamma_grad)(a_, x_))
    want = random_gamma_grad_p.impl(a_, x_, log_space=False)
    np.testing.assert_allclose(got, want, rtol=1e-11)  # the same loops; digamma within ulps


@pytest.mark.parametrize("dtype", [f32, f64, bf16, f16])
def test_every_float_dtype_rounds_the_float64_result_once(dtype):
    a, _, x = grid()
    with np.errstate(over="ignore"):  # a = 2e6 is inf in float16
        a, x = a.astype(dtype), x.astype(dtype)
    got = np.asarray(blu.jit(lax.random_gamma_grad)(a, x))
    want = random_gamma_grad_p.impl(a, x, log_space=False)
    assert got.dtype == np.dtype(dtype)
    # float64: (log x - digamma a) T and dT/da cancel in part, so ulp differences of log and
    # digamma grow (measured 9e-13 at most over a in [3e-4, 3e6]); others: one rounding
    tol = 1e-11 if dtype == f64 else float(ml_dtypes.finfo(dtype).eps)
    w64 = want.astype(np.float64)
    fin = np.isfinite(w64)
    np.testing.assert_array_equal(np.isfinite(got.astype(np.float64)), fin)
    err = np.abs(got.astype(np.float64)[fin] - w64[fin])
    assert (err <= tol * np.abs(w64[fin]) + 1e-300).all(), err.max()


def test_special_values_as_the_impl():
    a = np.array([-1.0, 0.0, np.nan, 1.0, 1.0, 1.0, 2.0, 1e-3, 5e6, 5e6])
    x = np.array([1.0, 1.0, 1.0, np.nan, np.inf, 0.0, -1.0, 1e-300, 5e6, 4.99e6])
    got = np.asarray(blu.jit(lax.random_gamma_grad)(a, x))
    want = random_gamma_grad_p.impl(a, x, log_space=False)
    np.testing.assert_allclose(got, want, rtol=1e-12, equal_nan=True)
    log_x = np.array([-np.inf, -np.inf, np.inf, np.nan, 0.0, -800.0])
    a2 = np.array([1.0, -1.0, 1.0, 1.0, 0.5, 1e-3])
    got = np.asarray(blu.jit(random_gamma_grad_log)(a2, log_x))
    want = random_gamma_grad_p.impl(a2, log_x, log_space=True)
    np.testing.assert_allclose(got, want, rtol=1e-12, equal_nan=True)


def test_log_space_where_the_sample_underflows():
    # x -> 0: log x = (log u + lgamma(a + 1)) / a, d log x / da = -log x / a + digamma(a + 1) / a
    a = np.array([1e-3, 1e-3, 5e-3, 1e-2])
    u = np.array([1e-8, 0.3, 1e-3, 1e-6])
    log_x = (np.log(u) + sc.gammaln(a + 1)) / a
    got = np.asarray(blu.jit(random_gamma_grad_log)(a, log_x))
    np.testing.assert_allclose(got, -log_x / a + sc.psi(a + 1) / a, rtol=1e-10)


@pytest.mark.parametrize("sampler", ["gamma", "beta", "dirichlet"])
def test_sampler_gradients_compile(sampler):
    """The reparameterized gradients of the samplers run no primitive on the host."""
    key = blu.random.key(0)
    fs = {
        "gamma": lambda a: blu.random.gamma(key, a, (64,)).sum(),
        "beta": lambda a: blu.random.beta(key, a, a * 2.0, (64,)).sum(),
        "dirichlet": lambda a: (blu.random.dirichlet(key, a * np.ones(4), (16,))[:, 0]).sum(),
    }
    g = blu.jit(blu.grad(fs[sampler]))
    exe = g.lower(np.float32(1.5), target="cpu").compile().executable
    assert exe.fallbacks == [], exe.fallbacks
    got = float(g(np.float32(1.5)))
    want = float(blu.grad(fs[sampler])(np.float32(1.5)))
    np.testing.assert_allclose(got, want, rtol=1e-4)


# ---- on a GPU (fixed shapes: their kernels are compiled ahead) --------------------------------


def on_gpu(test):
    for mark in GPU_MARKS:
        test = mark(test)
    return test


@on_gpu
@pytest.mark.parametrize("dtype", [f32, f64, bf16])
def test_on_the_gpu(dtype):
    dev = make_device()
    a, u, x = grid()
    a, x = np.resize(a, 64).astype(dtype), np.resize(x, 64).astype(dtype)
    assert [n.kind for n in plan_nodes(lax.random_gamma_grad, a, x)] == ["kernel"]
    got = np.asarray(blu.jit(lax.random_gamma_grad)(*put(dev, a, x)))
    want = random_gamma_grad_p.impl(a, x, log_space=False).astype(np.float64)
    tol = 1e-11 if dtype == f64 else float(ml_dtypes.finfo(dtype).eps)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=1e-300)


@on_gpu
def test_gamma_sampler_gradient_on_the_gpu():
    dev = make_device()
    key = blu.random.key(0)

    def f(a):
        return blu.random.gamma(key, a, (256,)).sum()

    got = float(blu.jit(blu.grad(f))(put(dev, np.float32(2.5))))
    np.testing.assert_allclose(got, float(blu.grad(f)(np.float32(2.5))), rtol=1e-4)


@pytest.mark.skipif(not _mlir_available() or shutil.which("ptxas") is None,
                    reason="needs MLIR and ptxas")  # fmt: skip
@pytest.mark.parametrize("log_space", [False, True])
def test_gpu_text_passes_ptxas(log_space):
    from blu.lower.cuda.codegen import emit_gpu_kernel
    from blu.lower.cuda.compiler import compile_ptx, ptxas
    from blu.lower.plan.fusion import KernelLayout

    f = random_gamma_grad_log if log_space else lax.random_gamma_grad
    closed = blu.make_jaxpr(f)(np.ones(8, f32), np.ones(8, f32))
    ptx = compile_ptx(emit_gpu_kernel(KernelLayout(closed.jaxpr), "kg"), "sm_90")
    assert ptxas(ptx, "sm_90") is not None
