"""Complex values and the FFT on the CUDA target (marked ``gpu``): complex elementwise
arithmetic, data movement and sum/prod reductions are fused into kernels
(``blu/lower/mlir/rules_complex.py``); the FFT is a cuFFT library node; complex primitives
without a rule run as host fallback nodes of the GPU plan (never crash), next to the kernels.
Runs on a GPU or, with ``BLU_FAKE_GPU=1``, on a ``FakeDevice``. Shapes are FIXED: the GPU
machine has no MLIR and runs the kernels ``scripts/fill_gpu_cache.py`` compiled from this file
ahead of time.

References: numpy in complex128 / float64 on the (already rounded) inputs; tolerances relative to
the complex magnitude of the result (one part may cancel): complex64 a few float32 roundings,
complex128 a few float64 roundings; special values (inf, NaN in either part) against numpy in the
same dtype, NaN where numpy has NaN."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import GPU_MARKS, make_device, plan_nodes, put

import blu
import blu.lax as lax
import blu.numpy as bnp
from blu.lower.cuda import codegen as codegen_gpu
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
        spec = bnp.fft.fft(z * bnp.exp(1j * x))  # complex kernels, then cuFFT
        power = bnp.abs(spec) ** 2  # a complex kernel (abs) and real ones
        return bnp.tanh(power / 16.0).sum(axis=-1), bnp.fft.irfft(spec, n=16)

    dz, dx = put(dev, z, x)
    got = blu.jit(f)(dz, dx)
    want = f(z.astype(np.complex128), x.astype(np.float64))
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-4, atol=2e-4)
    kinds = {n.kind for n in plan_nodes(f, dz, dx)}
    assert NodeKind.FALLBACK not in kinds and NodeKind.LIBRARY in kinds, kinds


def test_grad_of_complex_under_jit_on_device(dev):
    z = _cplx((4, 8), 2).astype(np.complex64)

    def loss(v):
        return bnp.sum(bnp.abs(bnp.fft.fft(v)) ** 2)

    g = blu.jit(blu.grad(loss))(put(dev, z))
    # Parseval: sum |FFT v|^2 = n sum |v|^2, so the gradient (JAX's convention) is 2 n conj(v)
    np.testing.assert_allclose(np.asarray(g), 2 * 8 * np.conj(z), rtol=1e-4, atol=1e-4)


# ---- fused complex kernels ---------------------------------------------------------------------

C64, C128 = np.complex64, np.complex128
CTOL = {np.dtype(C64): 1e-5, np.dtype(C128): 1e-13}
SHAPE = (37, 129)


def _fused(f, *args) -> list[str]:
    """The strategies of the kernels of the GPU plan; fails on a fallback node."""
    out = []
    for n in plan_nodes(f, *args):
        assert n.kind != NodeKind.FALLBACK, n
        if n.kind == NodeKind.KERNEL:
            out += [p.strategy for p in codegen_gpu.plan_nests(n.layout)]
    return out


def _close(got, want, dt, factor=1.0, floor=1e-300):
    """Per part: NaN and infinities where ``want`` has them, else within ``factor`` tolerances
    of the dtype relative to ``max(|want|, floor)`` (``floor``: the operands' scale, for results
    that cancel)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    if want.dtype == np.bool_:
        np.testing.assert_array_equal(got, want)
        return
    tol = CTOL[np.dtype(dt)] * factor
    mag = np.abs(np.nan_to_num(want.astype(C128)))
    pairs = [(got.real, want.real), (got.imag, want.imag)] if want.dtype.kind == "c" else [
        (got, want)]  # fmt: skip
    for g, w in pairs:
        g, w = g.astype(np.float64), w.astype(np.float64)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg="NaN positions")
        inf = np.isinf(w)
        np.testing.assert_array_equal(g[inf], w[inf], err_msg="infinities")
        ok = np.isfinite(w)
        assert (np.abs(g[ok] - w[ok]) <= tol * np.maximum(mag[ok], floor)).all()


def _specials(z: np.ndarray) -> np.ndarray:
    """``z`` with inf / NaN / zero parts written into its first row."""
    z = z.copy()
    vals = [np.inf, -np.inf, np.nan, 0.0, -0.0]
    for k, (a, b) in enumerate((a, b) for a in vals for b in vals):
        z.real[0, k], z.imag[0, k] = a, b
    return z


def _chain(z, w):
    p = z * w / (w + 1)
    return (
        lax.real(p) - lax.imag(lax.conj(z)),
        bnp.abs(p),
        bnp.exp(z / 4),
        bnp.sqrt(bnp.log(-p)),
        (z == w) | (p != p),
        bnp.where(lax.real(z) > 0, lax.complex(lax.imag(w), lax.real(z)), -z),
    )


@pytest.mark.parametrize("dt", (C64, C128), ids=["c64", "c128"])
def test_complex_elementwise_kernels(dev, dt):
    z, w = _cplx(SHAPE, 3).astype(dt), _cplx(SHAPE, 4).astype(dt)
    assert set(_fused(_chain, z, w)) == {"map"}
    got = blu.jit(_chain)(*put(dev, z, w))
    want = _chain(z.astype(C128), w.astype(C128))
    for g, ww, factor in zip(got, want, (1, 1, 4, 8, 1, 1)):
        _close(g, ww, dt, factor, floor=1.0)  # operands of unit scale


@pytest.mark.parametrize("dt", (C64, C128), ids=["c64", "c128"])
def test_complex_special_values_on_device(dev, dt):
    z, w = _specials(_cplx(SHAPE, 5).astype(dt)), _specials(_cplx(SHAPE, 6).astype(dt)[::-1])
    got = blu.jit(_chain)(*put(dev, z, w))
    with np.errstate(all="ignore"):
        want = _chain(z, w)  # the impls: numpy in the dtype
        for g, ww, factor in zip(got, want, (1, 1, 4, 8, 1, 1)):
            _close(g[:1], np.asarray(ww)[:1], dt, factor)


@pytest.mark.parametrize(
    "shape, axis, strategy",
    [
        ((8, 4096), 1, "split"),
        ((129, 37), 0, "split"),
        (SHAPE, 1, "split"),
        ((300, 40), 1, "thread"),
    ],  # fmt: skip
)
def test_complex_sum_and_prod_on_device(dev, shape, axis, strategy):
    z = _cplx(shape, 7).astype(C64)

    def f(z):
        return bnp.sum(z * (1 + 0.5j), axis=axis), bnp.prod(z[:, :4] / 2 + 1, axis=1)

    assert strategy in _fused(f, z)
    got = blu.jit(f)(put(dev, z))
    Z = z.astype(C128)
    _close(got[0], np.sum(Z * (1 + 0.5j), axis=axis), C64, 4 * np.sqrt(shape[axis]))
    _close(got[1], np.prod(Z[:, :4] / 2 + 1, axis=1), C64, 8)


def test_grad_of_a_fused_complex_chain_on_device(dev):
    rng = np.random.default_rng(8)
    xr, xi, wr, wi = (rng.standard_normal((16, 64)).astype(np.float32) for _ in range(4))

    def loss(xr, xi, wr, wi):
        p = lax.complex(xr, xi) * lax.complex(wr, wi)
        return bnp.sum(lax.real(p) + lax.imag(p) ** 2 + bnp.abs(p))

    g = blu.grad(loss, argnums=(0, 1))
    _fused(g, xr, xi, wr, wi)
    got = blu.jit(g)(*put(dev, xr, xi, wr, wi))
    xr, xi, wr, wi = (a.astype(np.float64) for a in (xr, xi, wr, wi))
    pr, pi = xr * wr - xi * wi, xr * wi + xi * wr
    a = np.hypot(pr, pi)
    want = (wr + 2 * pi * wi + (pr * wr + pi * wi) / a, -wi + 2 * pi * wr + (pi * wr - pr * wi) / a)
    for gg, ww in zip(got, want):
        np.testing.assert_allclose(np.asarray(gg), ww, rtol=1e-4, atol=1e-4)


def test_complex_casts_on_device(dev):
    x = np.random.default_rng(9).standard_normal(SHAPE).astype(np.float32)
    z = _cplx(SHAPE, 10).astype(C128)

    def f(x, z):
        c = lax.convert_element_type(x, C64) + lax.convert_element_type(z, C64)
        return c, lax.convert_element_type(c, C128), lax.convert_element_type(z, np.float32)

    _fused(f, x, z)
    got = blu.jit(f)(*put(dev, x, z))
    c = x.astype(C128) + z.astype(C64).astype(C128)
    _close(got[0], c, C64)
    _close(got[1], c.astype(C64), C128)
    _close(got[2], z.real.astype(np.float32), C64)


@pytest.mark.parametrize("dt", (C64, C128), ids=["c64", "c128"])
def test_complex_trig_and_more_on_device(dev, dt):
    z = _specials(_cplx(SHAPE, 11).astype(dt))

    def f(z):
        return (bnp.sin(z), bnp.cos(z), bnp.sinh(z / 8), bnp.cosh(z / 8), lax.rsqrt(z),
                bnp.log1p(z), bnp.exp2(z / 8))  # fmt: skip

    assert set(_fused(f, z)) == {"map"}
    got = blu.jit(f)(put(dev, z))
    with np.errstate(all="ignore"):
        special = f(z)  # the impls: numpy in the dtype
        want = f(z.astype(C128))
    for g, s, w in zip(got, special, want):
        _close(np.asarray(g)[:1], np.asarray(s)[:1], dt, 8)
        _close(np.asarray(g)[1:], w[1:], dt, 8, floor=1.0)
