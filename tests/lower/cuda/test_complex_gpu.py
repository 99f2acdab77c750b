"""Complex values and the FFT on the CUDA target (marked ``gpu``): the kernel generators have
no complex arithmetic, so complex equations must run as host fallback nodes of the GPU plan
(never crash), next to real kernels. Runs on a GPU or, with ``BLU_FAKE_GPU=1``, on a
``FakeDevice``."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import GPU_MARKS, make_device, plan_nodes, put

import blu
import blu.numpy as bnp
from blu.lower.plan.nodes import NodeKind

pytestmark = GPU_MARKS


@pytest.fixture(scope="module")
def dev():
    return make_device()


def _cplx(shape, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def test_jit_complex_and_fft_on_device_arrays(dev):
    z = _cplx((8, 16), 0).astype(np.complex64)
    x = np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32)

    def f(z, x):
        spec = bnp.fft.fft(z * bnp.exp(1j * x))  # complex: fallback nodes
        power = bnp.abs(spec) ** 2  # real from here: kernels
        return bnp.tanh(power / 16.0).sum(axis=-1), bnp.fft.irfft(spec, n=16)

    dz, dx = put(dev, z, x)
    got = blu.jit(f)(dz, dx)
    want = f(z.astype(np.complex128), x.astype(np.float64))
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-4, atol=2e-4)
    kinds = {n.kind for n in plan_nodes(f, dz, dx)}
    assert NodeKind.FALLBACK in kinds


def test_grad_of_complex_under_jit_on_device(dev):
    z = _cplx((4, 8), 2).astype(np.complex64)

    def loss(v):
        return bnp.sum(bnp.abs(bnp.fft.fft(v)) ** 2)

    g = blu.jit(blu.grad(loss))(put(dev, z))
    # Parseval: sum |FFT v|^2 = n sum |v|^2, so the gradient (JAX's convention) is 2 n conj(v)
    np.testing.assert_allclose(np.asarray(g), 2 * 8 * np.conj(z), rtol=1e-4, atol=1e-4)
