"""Complex matrix products on CUDA targets as real cuBLASLt products
(``blu/lower/cuda/complex_dots.py``): no host fallback in the plan, values against numpy's
complex128 products; a complex times a real operand; batched; the gradient through one.
FIXED shapes (``scripts/fill_gpu_cache.py`` compiles every kernel ahead for the GPU machine)."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import make_device, on_gpu, plan_nodes, put

import blu
import blu.lax as lax


@pytest.fixture(scope="module")
def dev():
    return make_device()


def cdata(shape, seed, dtype=np.complex64):
    r = np.random.default_rng(seed)
    return (r.standard_normal(shape) + 1j * r.standard_normal(shape)).astype(dtype)


def no_fallback(f, *args):
    kinds = [n.kind for n in plan_nodes(f, *args)]
    assert "fallback" not in kinds and "dot" in kinds, kinds


TOL = {np.dtype(np.complex64): 2e-5, np.dtype(np.complex128): 1e-12}


@on_gpu
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_matmul(dev, dtype):
    a, b = cdata((37, 19), 1, dtype), cdata((19, 8), 2, dtype)
    f = lambda a, b: a @ b  # noqa: E731
    no_fallback(f, a, b)
    got = np.asarray(blu.jit(f)(*put(dev, a, b)))
    want = a.astype(np.complex128) @ b.astype(np.complex128)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, want, rtol=TOL[np.dtype(dtype)], atol=TOL[np.dtype(dtype)])


@on_gpu
def test_batched_and_mixed_real(dev):
    """A batched complex product, and a complex operand times a real one (two real products)."""
    a, b = cdata((3, 5, 7), 3), cdata((3, 7, 4), 4)
    w = np.random.default_rng(5).standard_normal((7, 6)).astype(np.float32)
    f = lambda a, b, w: (lax.batch_matmul(a, b), a @ w)  # noqa: E731
    no_fallback(f, a, b, w)
    got_ab, got_aw = blu.jit(f)(*put(dev, a, b, w))
    np.testing.assert_allclose(np.asarray(got_ab), a.astype(np.complex128) @ b, rtol=2e-5,
                               atol=2e-5)  # fmt: skip
    np.testing.assert_allclose(np.asarray(got_aw), a.astype(np.complex128) @ w, rtol=2e-5,
                               atol=2e-5)  # fmt: skip


@on_gpu
def test_gradient_through_a_complex_product(dev):
    """d/dw of sum |x @ w|^2 (a real loss of complex values): 2 x^H (x w), against numpy."""
    x, w = cdata((6, 5), 6), cdata((5, 3), 7)

    def loss(w, x):
        y = x @ w
        return (lax.real(y) ** 2 + lax.imag(y) ** 2).sum()

    g = blu.jit(blu.grad(loss))
    got = np.asarray(g(*put(dev, w, x)))
    x64, w64 = x.astype(np.complex128), w.astype(np.complex128)
    want = 2 * x64.conj().T @ (x64 @ w64)
    # blu's gradient of a real loss in a complex input is the conjugate of d/dw* (JAX's)
    np.testing.assert_allclose(got, np.conj(want), rtol=1e-4, atol=1e-4)
