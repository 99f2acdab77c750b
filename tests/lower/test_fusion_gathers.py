"""A value gathered from many offsets and read by several equations gets a buffer in its kernel
(``fusion.KernelLayout._shared_gather``): a max pool's backward (each input element reads the
cotangent at every offset of its window) feeding a batch norm's sums and its input gradient
was recomputed, gathers and index arithmetic included, in each of the three nests that read
it (ResNet-50's stem on the H200: 9.4 ms a step at 3% of the copy bandwidth). Checked on the
kernel's layout, and the values against numpy float64 on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

import blu
import blu.nn as nn
from blu.lower.plan import fusion
from blu.lower.plan.fusion import KernelLayout

f32, f64 = np.float32, np.float64


def pool_then_sums(x, dy):
    """A 3x3 / 2 max pool's input gradient ``dz`` (ReLU-masked), then what a batch norm's
    backward reads of it: two per-channel sums and an elementwise gradient."""
    _, vjp = blu.vjp(lambda a: nn.max_pool(a, (3, 3), (2, 2), ((1, 1), (1, 1))), x)
    dz = vjp(dy)[0] * (x > 0).astype(f32)
    return dz.sum((0, 1, 2)), (dz * x).sum((0, 1, 2)), dz * 2.0 - x


def reference(x, dy):
    """The same in float64 with loops: each window's first maximum takes its cotangent."""
    N, H, W, C = x.shape
    pad = np.full((N, H + 2, W + 2, C), -np.inf)
    pad[:, 1:-1, 1:-1] = x
    dz = np.zeros((N, H + 2, W + 2, C))
    for n in range(N):
        for i in range(dy.shape[1]):
            for j in range(dy.shape[2]):
                for c in range(C):
                    win = pad[n, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3, c]
                    a, b = np.unravel_index(np.argmax(win), win.shape)
                    dz[n, 2 * i + a, 2 * j + b, c] += dy[n, i, j, c]
    dz = dz[:, 1:-1, 1:-1] * (x > 0)
    return dz.sum((0, 1, 2)), (dz * x).sum((0, 1, 2)), dz * 2.0 - x


def layouts(fn, *args):
    j = blu.make_jaxpr(fn)(*args).jaxpr
    return KernelLayout(j)


def test_the_pooled_gradient_is_gathered_once():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 9, 9, 8)).astype(f32)
    dy = rng.standard_normal((2, 5, 5, 8)).astype(f32)
    lay = layouts(pool_then_sums, x, dy)
    full = [a for a in lay.scratch if tuple(a.shape) == x.shape]
    assert full, f"no buffer of the gradient's shape: {[a.shape for a in lay.scratch]}"
    # without the rule every reading nest recomputes it (the check can fail)
    orig = fusion.KernelLayout._shared_gather
    try:
        fusion.KernelLayout._shared_gather = lambda self, v, users: False
        assert not [a for a in layouts(pool_then_sums, x, dy).scratch
                    if tuple(a.shape) == x.shape]  # fmt: skip
    finally:
        fusion.KernelLayout._shared_gather = orig


@pytest.mark.parametrize("shape", [(2, 9, 9, 8), (1, 4, 6, 3), (3, 1, 1, 2)])
def test_values_against_float64(shape):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(f32)
    pooled = [(s + 2 - 3) // 2 + 1 for s in shape[1:3]]
    dy = rng.standard_normal((shape[0], *pooled, shape[3])).astype(f32)
    got = blu.jit(pool_then_sums)(x, dy)
    want = reference(x.astype(f64), dy.astype(f64))
    eps = np.finfo(f32).eps
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g, f64), w, rtol=64 * eps, atol=64 * eps * 9 * x.size)
