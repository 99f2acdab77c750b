"""GPU tests of the FFT on cuFFT (``blu.cuda.fft``, the ``fft`` primitive's CUDA library node).

Marked ``gpu``; skipped unless ``blu.cuda.is_available()`` finds a real GPU. Run on the GPU
machine by ``scripts/gpu_check.sh`` (nvmath-python from ``.whl/``). Every transform type in
single and double precision, 1 to 3 transformed axes, batches (including none and size 1),
odd and non-power-of-two lengths; jitted programs whose argument is on the device (the whole
plan runs there: the transform is one library node, no host fallback), replayed as a CUDA graph
from the second call; references are numpy float64/complex128."""

from __future__ import annotations

import math

import numpy as np
import pytest

import blu
import blu.cuda as bc
import blu.numpy as bnp
from blu import lax


def _real_gpu() -> bool:
    return bc.is_available() and bc.devices()[0].platform == "cuda"


# the jitted programs also run on the simulated GPU (BLU_FAKE_GPU=1: the fft node's host form),
# so scripts/fill_gpu_cache.py compiles their other kernels for the GPU machine
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not bc.is_available(), reason="needs a GPU (or BLU_FAKE_GPU=1)"),
]

CASES = [  # (batch shape, fft lengths)
    ((), (16,)),
    ((3,), (10,)),
    ((1, 2), (7,)),
    ((4,), (6, 5)),
    ((2,), (4, 3, 8)),
    ((), (12, 9)),
]


def _input(fft_type, batch, lengths, single, seed=0):
    rng = np.random.default_rng(seed)
    trailing = list(lengths)
    if fft_type == "IRFFT":
        trailing[-1] = lengths[-1] // 2 + 1
    shape = tuple(batch) + tuple(trailing)
    if fft_type == "RFFT":
        return rng.standard_normal(shape).astype(np.float32 if single else np.float64)
    z = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return z.astype(np.complex64 if single else np.complex128)


def _reference(x, fft_type, lengths):
    x = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
    axes = tuple(range(x.ndim - len(lengths), x.ndim))
    fn = {"FFT": np.fft.fftn, "IFFT": np.fft.ifftn, "RFFT": np.fft.rfftn, "IRFFT": np.fft.irfftn}
    return fn[fft_type](x, s=lengths, axes=axes)


@pytest.mark.parametrize("single", [True, False], ids=["single", "double"])
@pytest.mark.parametrize("fft_type", ["FFT", "IFFT", "RFFT", "IRFFT"])
@pytest.mark.parametrize("batch,lengths", CASES)
def test_jitted_fft_on_the_device_against_numpy(fft_type, batch, lengths, single):
    x = _input(fft_type, batch, lengths, single)
    f = blu.jit(lambda v: lax.fft(v, fft_type, lengths))
    xd = bc.device_put(x)
    want = _reference(x, fft_type, lengths)
    tol = (2e-5 if single else 1e-12) * max(1.0, math.log2(math.prod(lengths)))
    for _ in range(3):  # eager first call, then CUDA-graph replays
        got = f(xd)
        assert isinstance(got, bc.DeviceArray) or not _real_gpu()
        np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol * np.abs(want).max())
    np.testing.assert_array_equal(np.asarray(xd), x)  # IRFFT transforms a copy


def test_numpy_fft_chain_and_its_gradient_on_the_device():
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)

    def loss(v):
        spec = bnp.fft.rfft(v)
        return bnp.sum(bnp.fft.irfft(spec * 0.5, n=64) ** 2)

    got = blu.jit(blu.value_and_grad(loss))(bc.device_put(x))
    want = np.sum((0.5 * x.astype(np.float64)) ** 2)
    np.testing.assert_allclose(float(got[0]), want, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(got[1]), 0.5 * x, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not _real_gpu(), reason="cuFFT plans: needs an NVIDIA GPU")
def test_plans_are_reused():
    from blu.cuda import fft

    f = blu.jit(lambda v: bnp.fft.fft(v))
    x = bc.device_put(_input("FFT", (2,), (32,), True))
    f(x)
    n = len(fft.plans(bc.devices()[0])._plans)
    for _ in range(3):
        f(x)
    assert len(fft.plans(bc.devices()[0])._plans) == n
