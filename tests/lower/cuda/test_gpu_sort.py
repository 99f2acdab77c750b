"""GPU tests of ``sort`` and ``top_k``'s CUDA kernels (``blu.lower.cuda.sort_kernels``: the
shared-memory bitonic sort of a tile, the radix sort of long rows (``sort_radix``; its logic
is also modelled in numpy by ``test_sort_radix``), several keys, and ``top_k``'s selection
kernel), marked ``gpu``.

Runs on a GPU or, with ``BLU_FAKE_GPU=1``, on the simulated device (which compiles the kernels
into the cache and runs the primitive's numpy impl), so every shape is FIXED: the GPU machine has
no MLIR and ``scripts/fill_gpu_cache.py`` fills the cache by running this file. References:
``np.argsort(kind="stable")`` / ``np.lexsort`` on the keys (half floats widened to float32),
results compared bit for bit (NaN payloads and the sign of zero included, so stability shows)."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import (
    GPU_MARKS,
    bf16,
    bool_,
    f16,
    f32,
    f64,
    i32,
    i64,
    make_device,
    plan_nodes,
    put,
    u8,
)

import blu
import blu.lax as lax
from blu.lower.cuda import sort_kernels as sk
from blu.lower.plan.nodes import NodeKind

pytestmark = GPU_MARKS


@pytest.fixture(scope="module")
def dev():
    return make_device()


def _wide(x: np.ndarray) -> np.ndarray:
    return x.astype(f32) if x.dtype in (bf16, f16) else x


def _bits(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}") if x.dtype.kind == "f" or x.dtype in (bf16,) else x


def _same(got, want) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.shape)
    np.testing.assert_array_equal(_bits(got), _bits(want))


def _inputs(dt, shape, seed, special=True) -> np.ndarray:
    """Values with many duplicates (stability shows); floats also NaN, +-inf, -0.0 and 0.0."""
    rng = np.random.default_rng(seed)
    if dt == bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if np.dtype(dt).kind in "iu":
        info = np.iinfo(dt)
        x = rng.integers(max(info.min, -40), min(info.max, 40), shape, endpoint=True).astype(dt)
        if x.size > 4:
            x.flat[:2] = info.min, info.max
        return x
    x = np.round(rng.standard_normal(shape) * 4) / 2  # halves: duplicates
    if special and x.size:
        flat = x.reshape(-1)
        n = flat.size
        for v in (np.nan, np.inf, -np.inf, -0.0, 0.0, -np.nan):
            flat[rng.integers(0, n, max(1, n // 16))] = v
    return x.astype(dt)


def _ref_sort(ops, dimension, num_keys):
    keys = [_wide(k) for k in ops[:num_keys]]
    perm = (np.argsort(keys[0], axis=dimension, kind="stable") if num_keys == 1
            else np.lexsort(keys[::-1], axis=dimension))  # fmt: skip
    return [np.take_along_axis(x, perm, axis=dimension) for x in ops]


def _ref_top_k(x, k):
    n = x.shape[-1]
    order = np.argsort(_wide(x)[..., ::-1], axis=-1, kind="stable")
    idx = (n - 1 - order)[..., ::-1][..., :k]
    return np.take_along_axis(x, idx, axis=-1), idx.astype(np.int32)


def _assert_compiled(f, *xs):
    kinds = [n.kind for n in plan_nodes(f, *xs)]
    assert NodeKind.FALLBACK not in kinds and NodeKind.LIBRARY in kinds, kinds


# (shape, dimension): one tile (a power of two or not), rows of one element, the radix sort
# (rows past the 4096-position tile), leading axes (strided rows), empty arrays
CASES = [((1000,), 0), ((7, 33), 1), ((4096,), 0), ((3, 5000), 1), ((70000,), 0),
         ((300, 7), 0), ((2, 3000, 3), 1), ((6, 1), 1), ((0, 5), 1), ((5, 0), 1)]  # fmt: skip


@pytest.mark.parametrize("shape,dimension", CASES, ids=[f"{s}-{d}" for s, d in CASES])
def test_sort_float32(dev, shape, dimension):
    x = _inputs(f32, shape, 0)
    f = blu.jit(lambda a: lax.sort(a, dimension))
    (want,) = _ref_sort([x], dimension, 1)
    _same(f(put(dev, x)), want)
    if x.size:
        _assert_compiled(f, x)


@pytest.mark.parametrize("dt", [f64, bf16, f16, i32, i64, u8, np.int8, bool_],
                         ids=["f64", "bf16", "f16", "i32", "i64", "u8", "i8", "bool"])  # fmt: skip
@pytest.mark.parametrize("shape,dimension", [((5, 300), 1), ((2, 5000), 1), ((40, 3), 0)],
                         ids=["tile", "global", "axis0"])  # fmt: skip
def test_sort_dtypes(dev, dt, shape, dimension):
    x = _inputs(dt, shape, 1)
    (want,) = _ref_sort([x], dimension, 1)
    _same(blu.jit(lambda a: lax.sort(a, dimension))(put(dev, x)), want)


@pytest.mark.parametrize("shape,dimension", [((4, 200), 1), ((2, 5000), 1), ((90, 3), 0)],
                         ids=["tile", "global", "axis0"])  # fmt: skip
def test_sort_several_operands_and_keys(dev, shape, dimension):
    k0 = _inputs(f32, shape, 2)
    k1 = _inputs(i32, shape, 3)
    k2 = _inputs(f64, shape, 4)
    v = np.arange(k0.size, dtype=np.int64).reshape(shape)
    for num_keys in (1, 2, 3):
        ops = [k0, k1, k2, v]
        f = blu.jit(lambda *a: lax.sort(tuple(a), dimension, num_keys=num_keys))
        for got, want in zip(f(*put(dev, *ops)), _ref_sort(ops, dimension, num_keys)):
            _same(got, want)


def test_argsort_is_stable(dev):
    x = _inputs(bf16, (3, 6000), 5)
    iota = np.broadcast_to(np.arange(6000, dtype=i32), x.shape).copy()
    _, perm = blu.jit(lambda a, b: lax.sort((a, b), 1))(*put(dev, x, iota))
    _same(perm, np.argsort(_wide(x), axis=1, kind="stable").astype(i32))


# (shape, k): the selection kernel (long rows, small k), one tile, the full sort (k past KMAX)
TOPK = [((4, 5000), 5), ((3, 9000), 50), ((3, 100), 10), ((2, 9000), 300), ((5, 7), 7),
        ((4, 6), 0), ((2, 4097), 128)]  # fmt: skip


@pytest.mark.parametrize("shape,k", TOPK, ids=[f"{s}-{k}" for s, k in TOPK])
def test_top_k_float32(dev, shape, k):
    x = _inputs(f32, shape, 6)
    f = blu.jit(lambda a: lax.top_k(a, k))
    vals, idx = f(put(dev, x))
    want_v, want_i = _ref_top_k(x, k)
    _same(vals, want_v)
    _same(idx, want_i)
    if k:
        _assert_compiled(f, x)


@pytest.mark.parametrize("dt", [f64, bf16, i32, u8], ids=["f64", "bf16", "i32", "u8"])
@pytest.mark.parametrize("shape,k", [((3, 5000), 20), ((4, 300), 30)], ids=["select", "sort"])
def test_top_k_dtypes(dev, dt, shape, k):
    x = _inputs(dt, shape, 7)
    vals, idx = blu.jit(lambda a: lax.top_k(a, k))(put(dev, x))
    want_v, want_i = _ref_top_k(x, k)
    _same(vals, want_v)
    _same(idx, want_i)


def test_kernel_choice():
    sp = sk.spec_of("top_k", [np.zeros((4096, 32000), f32)], {"k": 50})
    assert sp.select and sp.workspace_bytes() == 0
    sp = sk.spec_of("sort", [np.zeros((1 << 20,), f32)], {"dimension": 0, "num_keys": 1})
    # radix: two buffers of (key, index) pairs, 256 blocks' digit counts, the digit starts
    assert not sp.select and sp.radix and sp.blocks == 256
    assert sp.workspace_bytes() == (16 << 20) + 4 * 256 * 256 + 4 * 256


def test_sort_2_20(dev):
    x = np.random.default_rng(8).standard_normal(1 << 20).astype(f32)
    got = blu.jit(lambda a: lax.sort(a, 0))(put(dev, x))
    _same(got, np.sort(x))


def test_top_k_rows_of_32000(dev):
    x = np.random.default_rng(9).standard_normal((256, 32000)).astype(f32)
    vals, idx = blu.jit(lambda a: lax.top_k(a, 50))(put(dev, x))
    want_v, want_i = _ref_top_k(x, 50)
    _same(vals, want_v)
    _same(idx, want_i)
