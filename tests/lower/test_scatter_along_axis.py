"""``scatter_add_along_axis`` (the transpose of ``take_along_axis``: sort, top_k and cummax
gradients) compiled as the scatter kernel (its decomposition into one ``scatter_add``,
``blu/lax/sorting.py``) on the CPU and on CUDA targets: no host fallback; against a float64
``np.add.at`` reference over hypothesis shapes (size-0 and size-1 axes, every axis, duplicate
and negative indices, NaN), float16/bfloat16 accumulated in float32 and rounded once; the
gradient of ``take_along_axis`` through jit.

The ``gpu``-marked tests use fixed shapes, so ``scripts/fill_gpu_cache.py`` compiles their
kernels ahead for the GPU machine; they run there, or on the simulated GPU (``BLU_FAKE_GPU=1``).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from gpu_helpers import bf16, f16, f32, make_device, on_gpu, plan_nodes, put
from hypothesis import example, given
from hypothesis import strategies as st

import blu
from blu.lax.sorting import scatter_add_along_axis_p, take_along_axis
from blu.lower.backend import prepare
from blu.lower.plan.nodes import NodeKind


def scatter_along(u, idx, axis, size):
    return scatter_add_along_axis_p.bind(u, idx, axis=axis, size=size)


def reference(u: np.ndarray, idx: np.ndarray, axis: int, size: int) -> np.ndarray:
    """``np.add.at`` along ``axis`` in float64 (integers in int64), negative indices wrapped."""
    acc = np.float64 if u.dtype.kind == "f" or u.dtype == np.dtype(bf16) else np.int64
    v, k = np.moveaxis(u.astype(acc), axis, -1), np.moveaxis(idx.astype(np.int64), axis, -1)
    out = np.zeros(v.shape[:-1] + (size,), acc)
    k = np.where(k < 0, k + size, k)
    for pos in np.ndindex(*v.shape[:-1]):
        np.add.at(out[pos], k[pos], v[pos])
    return np.moveaxis(out, -1, axis)


def kinds(f, *args, target="cpu"):
    j = blu.make_jaxpr(f)(*args).jaxpr
    return [n.kind for n in prepare(j, (False,) * len(j.invars), target)[1].nodes]


@st.composite
def cases(draw):
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=1, max_size=3)))
    axis = draw(st.integers(0, len(shape) - 1))
    size = draw(st.integers(1, 7))
    dtype = draw(st.sampled_from([np.float32, np.float64, np.float16, bf16, np.int32]))
    seed = draw(st.integers(0, 2**16))
    return shape, axis, size, np.dtype(dtype), seed


@given(cases())
@example(((1, 1, 0), 1, 3, np.dtype(np.float32), 0))  # an empty inner axis
def test_compiled_on_the_cpu_matches_add_at(case):
    shape, axis, size, dtype, seed = case
    rng = np.random.default_rng(seed)
    u = (rng.standard_normal(shape) * 4).astype(dtype)
    if dtype.kind == "f" and u.size > 2:
        u.reshape(-1)[1] = np.nan  # spreads to its one output element only
    idx = rng.integers(-size, size, shape).astype(np.int32)  # duplicates and negatives
    f = lambda u, i: scatter_along(u, i, axis, size)  # noqa: E731
    for target in ("cpu", "cuda:sm_90"):
        ks = kinds(f, u, idx, target=target)
        assert NodeKind.FALLBACK not in ks and NodeKind.SCATTER in ks, (target, ks)
    got = np.asarray(blu.jit(f)(u, idx))
    want = reference(u, idx, axis, size)
    assert got.dtype == dtype and got.shape == want.shape
    if dtype.kind == "i":
        np.testing.assert_array_equal(got, want)
    else:  # float32 accumulation rounded once for half floats: within one rounding of the sum
        eps = float(ml_dtypes.finfo(dtype).eps)
        n = max(1, shape[axis])
        tol = eps * (1 if dtype.itemsize == 2 else n)
        mag = reference(np.abs(u.astype(np.float64)), idx, axis, size)
        np.testing.assert_array_less(np.abs(got.astype(np.float64) - want)[np.isfinite(want)],
                                     (tol * mag + 1e-30)[np.isfinite(want)] * 1.01)  # fmt: skip
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_half_floats_accumulate_in_float32():
    """4096 ones into one bfloat16 bin: summed in bfloat16, the sum would stop at 256."""
    u = np.ones((1, 4096), bf16)
    got = np.asarray(
        blu.jit(lambda u, i: scatter_along(u, i, 1, 3))(u, np.zeros((1, 4096), np.int32))
    )
    assert got[0, 0] == 4096 and got.dtype == np.dtype(bf16)


def test_grad_of_take_along_axis_through_jit():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 6))
    idx = rng.integers(0, 6, (3, 9)).astype(np.int32)  # duplicates: gradients accumulate
    w = rng.standard_normal((3, 9))
    g = blu.jit(blu.grad(lambda x: (take_along_axis(x, idx, 1) * w).sum()))(x)
    want = np.zeros_like(x)
    for r in range(3):
        np.add.at(want[r], idx[r], w[r])
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-12, atol=1e-12)


# ---- on a GPU (fixed shapes: their kernels are compiled ahead) --------------------------------


@pytest.fixture(scope="module")
def dev():
    return make_device()


@on_gpu
@pytest.mark.parametrize("dtype", [f32, bf16, f16])
@pytest.mark.parametrize("axis", [1, 2])
def test_on_the_gpu(dev, dtype, axis):
    rng = np.random.default_rng(axis)
    shape = (3, 37, 5)
    size = (0, 11, 7)[axis]
    u = rng.standard_normal(shape).astype(dtype)
    idx = rng.integers(-size, size, shape).astype(np.int32)
    f = lambda u, i: scatter_along(u, i, axis, size)  # noqa: E731
    assert "fallback" not in [n.kind for n in plan_nodes(f, u, idx)]
    got = np.asarray(blu.jit(f)(*put(dev, u, idx)))
    want = reference(u, idx, axis, size)
    eps = float(ml_dtypes.finfo(dtype).eps)
    mag = reference(np.abs(u.astype(np.float64)), idx, axis, size)
    assert got.dtype == np.dtype(dtype)
    assert (np.abs(got.astype(np.float64) - want) <= eps * mag * (1 if eps > 1e-4 else 40)).all()


@on_gpu
def test_sort_gradient_on_the_gpu(dev):
    """The gradient of take_along_axis (as sort's and top_k's are made) runs no host node."""
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((4, 50)).astype(f32), rng.standard_normal((4, 20)).astype(f32)
    idx = rng.integers(0, 50, (4, 20)).astype(np.int32)

    def loss(x, w, idx):
        return (take_along_axis(x, idx, 1) * w).sum()

    assert "fallback" not in [n.kind for n in plan_nodes(blu.grad(loss), x, w, idx)]
    got = np.asarray(blu.jit(blu.grad(loss))(*put(dev, x, w, idx)))
    want = np.zeros((4, 50))
    for r in range(4):
        np.add.at(want[r], idx[r], w[r].astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
