"""The two generations of the GPU kernel emitter (``BLU_GPU_KERNELS``, marked ``gpu``;
``blu.lower.mlir.codegen_strided``) compute the same bits.

Generation 2 only reorders work (every load of a chunk of points before its combines and stores,
row totals read from registers as a load would read them back), so each program's outputs must
be bit-identical under generations 1 and 2, and both close to numpy float64. The programs
cover each rewritten loop at GPT-2's row lengths: the unrolled row group (layer norm, rows of
768), the looped row group (cross-entropy over rows of 50,304 logits, whose ``n // step`` is
not a multiple of the chunk), split reductions (bias gradients over 4096 rows) and
elementwise grid-stride loops (GELU over 1024 x 3072, whose element count leaves a remainder).
Shapes are fixed: ``BLU_FAKE_GPU=1`` runs this file to fill the kernel cache for the GPU machine
(on the simulated GPU both generations run the same host build).
"""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import GPU_MARKS, bf16, f32, f64, make_device

import blu
import blu.cuda as bc
import blu.nn as nn
import blu.numpy as bnp

pytestmark = GPU_MARKS


@pytest.fixture(scope="module")
def dev():
    return make_device()


def both_generations(dev, f, *args) -> list[np.ndarray]:
    """``jit(f)`` under generations 1 and 2: asserts bit-equal outputs, returns generation 2's."""
    put = [bc.device_put(np.asarray(a), dev) for a in args]
    outs = {}
    for gen in (1, 2):
        with blu.config.override(gpu_kernels=gen):
            out = blu.jit(lambda *a: f(*a))(*put)  # a new function: its own executable
            outs[gen] = [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]
    for a, b in zip(outs[1], outs[2], strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        same = np.array_equal(np.atleast_1d(a).view(np.uint8), np.atleast_1d(b).view(np.uint8))
        assert same, f"generations differ at {np.argwhere(a != b)[:5].tolist()}"
    return outs[2]


def close(got, ref, tol):
    got, ref = np.asarray(got, f64), np.asarray(ref, f64)
    err = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)
    assert err <= tol, err


def test_layer_norm_forward_and_gradient(dev):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1024, 768)).astype(f32)
    w, b = rng.standard_normal(768).astype(f32), rng.standard_normal(768).astype(f32)
    dy = rng.standard_normal((1024, 768)).astype(f32)

    def f(x, w, b, dy):
        y, vjp = blu.vjp(nn.layer_norm, x, w, b)
        return (y.astype(bf16), *vjp(dy))

    y, dx, dw, db = both_generations(dev, f, x, w, b, dy)
    x64, d64 = x.astype(f64), dy.astype(f64)
    rstd = 1 / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    xh = (x64 - x64.mean(-1, keepdims=True)) * rstd
    gw = d64 * w
    close(y, xh * w + b, 1e-2)
    close(dx, rstd * (gw - gw.mean(-1, keepdims=True) - xh * (gw * xh).mean(-1, keepdims=True)),
          1e-5)  # fmt: skip
    close(dw, (d64 * xh).sum(0), 1e-5)
    close(db, d64.sum(0), 1e-5)


def test_cross_entropy_rows_of_the_vocabulary(dev):
    rng = np.random.default_rng(1)
    V = 50304
    z = (rng.standard_normal((64, V)) * 2).astype(f32)
    y = rng.integers(0, V, 64).astype(np.int32)

    def f(z, y):
        m = bnp.max(z, axis=1, keepdims=True)
        e = bnp.exp(z - m)
        s = bnp.sum(e, axis=1, keepdims=True)
        hit = bnp.expand_dims(y, 1) == blu.lax.iota(np.int32, z.shape, 1)
        picked = bnp.sum(bnp.where(hit, z - m, bnp.zeros_like(z)), axis=1)
        return bnp.log(s[:, 0]) - picked, (e / s - hit.astype(f32)).astype(bf16)

    loss, dz = both_generations(dev, f, z, y)
    z64 = z.astype(f64)
    p = np.exp(z64 - z64.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    lse = np.log(np.exp(z64 - z64.max(1, keepdims=True)).sum(1)) + z64.max(1)
    close(loss, lse - z64[np.arange(64), y], 1e-5)
    onehot = np.zeros_like(p)
    onehot[np.arange(64), y] = 1
    close(dz, p - onehot, 1e-2)


def test_gelu_and_bias_gradient(dev):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1024, 3072)).astype(bf16)
    bias = rng.standard_normal(3072).astype(f32)
    dy = rng.standard_normal((1024, 3072)).astype(bf16)

    def f(x, bias, dy):
        h = x.astype(f32) + bias
        y, vjp = blu.vjp(nn.gelu, h)
        dh = vjp(dy.astype(f32))[0]
        return y.astype(bf16), dh.astype(bf16), dh.sum(0)

    y, dh, dbias = both_generations(dev, f, x, bias, dy)
    h = x.astype(f64) + bias
    t = np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3))
    gelu = 0.5 * h * (1 + t)
    dgelu = 0.5 * (1 + t) + 0.5 * h * (1 - t**2) * np.sqrt(2 / np.pi) * (1 + 3 * 0.044715 * h**2)
    close(y, gelu, 1e-2)
    close(dh, dy.astype(f64) * dgelu, 1e-2)
    close(dbias, (dy.astype(f64) * dgelu).sum(0), 1e-4)


def test_misaligned_argument_is_copied_before_vector_loads(dev):
    """Generation-2 kernels move contiguous elements in 128-bit accesses and declare their
    buffers 16-byte aligned; an argument 4 bytes into a block (as a DLPack view at an offset
    can be) is copied to an aligned block first, so the kernel reads the right values instead
    of faulting on a misaligned address."""
    from blu.cuda.array import DeviceArray

    x = np.arange(1 + 64 * 768, dtype=f32) / 7
    base = bc.device_put(x, dev)
    view = DeviceArray(dev, base.ptr + 4, (64, 768), np.dtype(f32), owner=base)
    with blu.config.override(gpu_kernels=2):
        y = blu.jit(lambda v: v * 2 + 1)(view)
    np.testing.assert_array_equal(np.asarray(y), x[1:].reshape(64, 768) * 2 + 1)
