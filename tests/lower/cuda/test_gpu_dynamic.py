"""GPU tests of ``dynamic_slice``, ``dynamic_update_slice`` and ``take_along_axis`` compiled as
index rules (``blu/lower/mlir/rules_dynamic.py``): no host fallback node in the GPU plan (a
traced offset no longer syncs the device), results against loop references with XLA's clamping
(the programs pass ``allow_negative_indices=False``: the primitives' clamping, without the
public functions' count from the end).

The ``gpu``-marked tests run on a GPU, or with ``BLU_FAKE_GPU=1`` on a ``FakeDevice`` (each
kernel's CPU build runs while its GPU build is compiled into the cache). Shapes, dtypes and
programs are FIXED, so ``scripts/fill_gpu_cache.py`` compiles every kernel ahead for the GPU
machine (no MLIR there): offsets are run-time values read by the kernels, so the many offsets
tested share one kernel per program. The PTX of each rule is also checked with ``ptxas`` where
MLIR and ptxas exist.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from gpu_helpers import bf16, f32, make_device, on_gpu, plan_nodes, put

import blu
import blu.lax as lax
from blu.lax.sorting import take_along_axis
from blu.lower.mlir import _mlir_available


def clamp(s, lo: int, hi: int) -> int:
    return min(max(int(s), lo), hi)


def same(got, want):
    """Bit for bit (data movement is exact), NaN included."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, want.dtype)
    if want.dtype.kind == "f" or want.dtype == np.dtype(bf16):
        bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[want.dtype.itemsize]
        got, want = got.view(bits), want.view(bits)
    np.testing.assert_array_equal(got, want)


def no_fallback(f, *args):
    kinds = [n.kind for n in plan_nodes(f, *args)]
    assert "fallback" not in kinds and "kernel" in kinds, kinds


def data(shape, dtype, seed):
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    x.reshape(-1)[::17] = np.nan
    return x


# ---- the GPU text passes ptxas ------------------------------------------------------------------

PROGRAMS = {
    "dynamic_slice": (
        lambda x, i, j: lax.dynamic_slice(x, [i, j], [3, 5], allow_negative_indices=False) * 2.0,
        lambda: (np.zeros((8, 9), f32), np.int64(0), np.uint8(0)),
    ),
    "dynamic_update_slice": (
        lambda x, u, t: lax.dynamic_update_slice(
            x, u + 1.0, [np.int32(0), t, np.int32(0)], allow_negative_indices=False
        ),
        lambda: (np.zeros((2, 16, 8), bf16), np.zeros((2, 1, 8), bf16), np.int32(0)),
    ),
    "take_along_axis": (
        lambda x, i: take_along_axis(x, i, 1) - 1.0,
        lambda: (np.zeros((4, 7), f32), np.zeros((4, 5), np.int16)),
    ),
}


@pytest.mark.skipif(not _mlir_available() or shutil.which("ptxas") is None,
                    reason="needs MLIR and ptxas")  # fmt: skip
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_gpu_text_passes_ptxas(name):
    from blu.lower.cuda.codegen import emit_gpu_kernel
    from blu.lower.cuda.compiler import compile_ptx, ptxas
    from blu.lower.plan.fusion import KernelLayout

    f, args = PROGRAMS[name]
    closed = blu.make_jaxpr(f)(*args())
    assert name in [e.primitive.name for e in closed.jaxpr.eqns]
    ptx = compile_ptx(emit_gpu_kernel(KernelLayout(closed.jaxpr), "kd"), "sm_90")
    assert ptxas(ptx, "sm_90") is not None
    assert "ld.global" in ptx.decode()


# ---- on a GPU -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dev():
    return make_device()


@on_gpu
@pytest.mark.parametrize("idt", [np.int32, np.int64, np.uint32, np.int8])
def test_traced_row_index_fuses(dev, idt):
    """``x[i]`` with a traced ``i`` inside arithmetic: one kernel; ``i`` clamped."""
    x, y = data((64, 96), f32, 1), data((96,), f32, 2)

    def f(x, y, i):
        return (
            lax.dynamic_index_in_dim(x * 2.0, i, keepdims=False, allow_negative_indices=False) + y
        )

    no_fallback(f, x, y, idt(0))
    g = blu.jit(f)
    dx, dy = put(dev, x, y)
    for i in [0, 5, 63, 64, 100, np.iinfo(idt).max] + ([-1, -100] if np.iinfo(idt).min < 0 else []):
        # values, NaN matching NaN: arithmetic does not keep a NaN's payload bits (a GPU gives
        # its canonical NaN), so not bit for bit as the data movement tests
        np.testing.assert_array_equal(
            np.asarray(g(dx, dy, np.asarray(i).astype(idt)[()])),
            x[clamp(i, 0, 63)] * np.float32(2) + y,
        )


@on_gpu
@pytest.mark.parametrize("dtype", [f32, bf16])
def test_kv_cache_update_in_place(dev, dtype):
    """One decode step per call: the new key written at a traced position of a donated cache,
    in place (the output is the cache's own buffer on a GPU); 5 steps against a loop."""
    cache = np.zeros((4, 64, 32), dtype)
    new = data((6, 4, 1, 32), dtype, 3)

    def step(cache, k, t):
        return lax.dynamic_update_slice(
            cache, k, [np.int32(0), t, np.int32(0)], allow_negative_indices=False
        )

    no_fallback(step, cache, new[0], np.int32(0))
    f = blu.jit(step, donate_argnums=0)
    c, want = put(dev, cache), cache.copy()
    for n, t in enumerate([0, 1, 63, 200, -5, 7]):
        ptr = c.ptr
        c = f(c, put(dev, new[n]), np.int32(t))
        assert c.ptr == ptr
        want[:, clamp(t, 0, 63) : clamp(t, 0, 63) + 1] = new[n]
        same(c, want)


@on_gpu
def test_dynamic_slice_window(dev):
    """A (3, 5, 7) window of a (9, 16, 7) array at starts of three dtypes, in and out of range."""
    x = data((9, 16, 7), f32, 4)

    def f(x, a, b, c):
        return lax.dynamic_slice(x, [a, b, c], [3, 5, 7], allow_negative_indices=False)

    no_fallback(f, x, np.int32(0), np.int64(0), np.uint16(0))
    g, dx = blu.jit(f), put(dev, x)
    for a, b, c in [(0, 0, 0), (2, 7, 3), (-4, 100, 65535), (6, 11, 0)]:
        s0, s1 = clamp(a, 0, 6), clamp(b, 0, 11)
        got = g(dx, np.int32(a), np.int64(b), np.uint16(c))
        same(got, x[s0 : s0 + 3, s1 : s1 + 5, :])


@on_gpu
def test_take_along_axis(dev):
    """Indices in ``[-n, n)`` (negative ones count from the end) and out of range (clamped)."""
    x = data((8, 33), f32, 5)
    idx = np.random.default_rng(6).integers(-33, 40, (8, 12)).astype(np.int32)
    f = blu.jit(lambda x, i: take_along_axis(x, i, 1))
    no_fallback(lambda x, i: take_along_axis(x, i, 1), x, idx)
    wrapped = np.clip(np.where(idx < 0, idx + 33, idx), 0, 32)
    same(f(*put(dev, x, idx)), np.take_along_axis(x, wrapped, 1))


@on_gpu
def test_grad_of_dynamic_slice(dev):
    """The transpose of ``dynamic_slice`` is a ``dynamic_update_slice`` of zeros: compiled too."""
    x, w = data((16, 8), f32, 7), np.random.default_rng(8).standard_normal((4, 8)).astype(f32)

    def loss(x, w, t):  # (w an argument: ``plan_nodes`` plans jaxprs without constants)
        return (
            lax.dynamic_slice(x, [t, np.int32(0)], [4, 8], allow_negative_indices=False) * w
        ).sum()

    no_fallback(blu.grad(loss), x, w, np.int32(0))
    g = blu.jit(blu.grad(loss))
    for t in [3, 14]:
        want = np.zeros_like(x)
        want[clamp(t, 0, 12) : clamp(t, 0, 12) + 4] = w
        same(g(*put(dev, x, w), np.int32(t)), want)
