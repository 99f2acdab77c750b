"""The row stash of looped GPU row groups (``blu.lower.cuda.codegen_stash``, marked ``gpu``):
the classifier's rows of 50,304 logits kept in shared memory compute the same bits as the
kernels reading each row from global memory in every pass, and match numpy float64. Shapes
are fixed: ``BLU_FAKE_GPU=1`` runs this file to fill the kernel cache for the GPU machine."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import GPU_MARKS, bf16, f32, f64, make_device

import blu
import blu.cuda as bc
import blu.numpy as bnp

pytestmark = GPU_MARKS
V = 50304  # GPT-2's padded vocabulary


@pytest.fixture(scope="module")
def dev():
    return make_device()


def classifier(z, y):
    """A cross-entropy chunk and its gradient (the fused classifier's row group)."""

    def loss(z):
        m = bnp.max(z, axis=1, keepdims=True)
        lse = bnp.log(bnp.sum(bnp.exp(z - m), axis=1)) + m[:, 0]
        hit = bnp.expand_dims(y, 1) == blu.lax.iota(np.int32, z.shape, 1)
        return bnp.sum(lse - bnp.sum(bnp.where(hit, z, bnp.zeros_like(z)), axis=1))

    value, grad = blu.value_and_grad(loss)(z.astype(f32))
    return value, grad.astype(z.dtype)


def _run(dev, z, y, stash):
    put = [bc.device_put(np.asarray(a), dev) for a in (z, y)]
    with blu.config.override(gpu_row_stash=stash):
        out = blu.jit(lambda *a: classifier(*a))(*put)  # a new function: its own executable
    return [np.asarray(o) for o in out]


@pytest.mark.parametrize("dt, stash", [(bf16, None), (f32, None), (bf16, 64 << 10)])
def test_stashed_rows_compute_the_same_bits(dev, dt, stash):
    """bfloat16 logits (100 KB a row: two blocks an SM), float32 (201 KB: one block) and a
    budget the row does not fit (no stash: the same kernels)."""
    rng = np.random.default_rng(7)
    z = (rng.standard_normal((512, V)) * 3).astype(dt)
    y = rng.integers(0, V, 512).astype(np.int32)
    plain = _run(dev, z, y, 0)
    stashed = _run(dev, z, y, stash)
    for a, b in zip(plain, stashed, strict=True):
        assert np.array_equal(np.atleast_1d(a).view(np.uint8), np.atleast_1d(b).view(np.uint8))
    z64 = z.astype(f64)
    m = z64.max(1, keepdims=True)
    p = np.exp(z64 - m)
    s = p.sum(1, keepdims=True)
    want = (np.log(s[:, 0]) + m[:, 0] - z64[np.arange(512), y]).sum()
    assert abs(float(stashed[0]) - want) <= 1e-5 * abs(want)
    p /= s
    p[np.arange(512), y] -= 1
    got = stashed[1].astype(f64)
    tol = 1e-2 if dt == bf16 else 1e-5
    assert np.linalg.norm(got - p) <= tol * np.linalg.norm(p)
