"""GPU tests of the cumulative primitives' CUDA kernels (``blu.lower.cuda.cumulative``: the row
kernel for the last axis, the segmented column kernel for a leading one), marked ``gpu``.

Runs on a GPU or, with ``BLU_FAKE_GPU=1``, on the simulated device (which compiles the kernels
into the cache and runs the primitive's numpy impl), so every shape is FIXED: the GPU machine
has no MLIR and ``scripts/fill_gpu_cache.py`` fills the cache by running this file. References:
numpy float64 (``np.cumsum`` & co. on the widened input; tolerance ``n eps`` relative to the
running sum of magnitudes, as the parallel scan adds in another order), exact for max/min, the
integers and the argument forms (``cumulative_argextremum``'s numpy impl). Includes cumsum
over 4096x4096 float32 along each axis (timed by ``benchmarks/cumulative.py``)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from gpu_helpers import GPU_MARKS, bf16, bool_, f16, f32, f64, i32, make_device, plan_nodes, put, u8

import blu
import blu.lax as lax
from blu.lax import cumulative as cum
from blu.lower.plan.nodes import NodeKind

pytestmark = GPU_MARKS

OPS = {
    "sum": (lax.cumsum, np.cumsum),
    "prod": (lax.cumprod, np.cumprod),
    "max": (lax.cummax, np.maximum.accumulate),
    "min": (lax.cummin, np.minimum.accumulate),
}
# (shape, axis): rows of one and several chunks, segmented columns, size-0 and size-1 axes
CASES = [((3, 2500), 1), ((5, 17), 1), ((2, 700, 33), 1), ((700, 40), 0), ((4, 3, 5), 2),
         ((0, 5), 1), ((5, 0), 0), ((6, 1), 1), ((1, 7), 0), ((9,), 0)]  # fmt: skip


@pytest.fixture(scope="module")
def dev():
    return make_device()


def reference(op: str, x: np.ndarray, axis: int, reverse: bool) -> np.ndarray:
    wide = x.astype(f64) if np.dtype(x.dtype).kind == "f" or x.dtype in (bf16, f16) else x
    fn = OPS[op][1]
    with np.errstate(all="ignore"):
        if reverse:
            return np.flip(fn(np.flip(wide, axis), axis=axis), axis)
        return fn(wide, axis=axis)


def _inputs(dt, shape, seed, special=False):
    rng = np.random.default_rng(seed)
    if dt == bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dt in (i32, u8):
        return rng.integers(0, 50, shape).astype(dt)
    x = rng.standard_normal(shape)
    if special and x.size:
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size, max(1, flat.size // 10))] = np.nan
        flat[rng.integers(0, flat.size, max(1, flat.size // 10))] = np.inf
        flat[::7] = flat[0]  # ties for the argument forms
    return x.astype(dt)


def _check(op, x, axis, reverse, got):
    got = np.asarray(got)
    assert got.dtype == x.dtype and got.shape == x.shape
    want = reference(op, x, axis, reverse)
    floaty = x.dtype in (f32, f64, bf16, f16)
    if floaty and op in ("sum", "prod"):
        n = max(x.shape[axis], 1)
        eps = float(ml_dtypes.finfo(f32 if x.dtype in (bf16, f16) else x.dtype).eps)
        ulp = float(ml_dtypes.finfo(x.dtype).eps) if x.dtype in (bf16, f16) else 0.0
        scale = np.abs(reference(op, np.abs(x), axis, reverse))
        tol = 4 * n * eps * scale + ulp * np.abs(want)
        np.testing.assert_array_less(np.abs(got.astype(f64) - want), tol + 1e-300)
    elif floaty:
        np.testing.assert_array_equal(got.astype(f64), want)
    else:
        np.testing.assert_array_equal(got, want.astype(x.dtype))


def _scan(dev, op, x, axis, reverse):
    return blu.jit(lambda a: OPS[op][0](a, axis, reverse))(put(dev, x))


def _assert_compiled(f, x):
    kinds = [n.kind for n in plan_nodes(f, x)]
    assert NodeKind.FALLBACK not in kinds and NodeKind.LIBRARY in kinds, kinds


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("shape,axis", CASES, ids=[f"{s}-{a}" for s, a in CASES])
def test_float32(dev, shape, axis, op, reverse):
    x = _inputs(f32, shape, 0)
    if op == "prod":
        x = (1 + x / 64).astype(f32)  # products of many values stay finite
    f = blu.jit(lambda a: OPS[op][0](a, axis, reverse))
    _check(op, x, axis, reverse, f(put(dev, x)))
    if x.size:
        _assert_compiled(f, x)


@pytest.mark.parametrize("dt", [f64, bf16, f16, i32, u8, bool_],
                         ids=["f64", "bf16", "f16", "i32", "u8", "bool"])  # fmt: skip
@pytest.mark.parametrize("shape,axis", [((3, 2500), 1), ((2, 700, 33), 1)], ids=["rows", "cols"])
def test_dtypes(dev, dt, shape, axis):
    x = _inputs(dt, shape, 1)
    for op in ("max", "min") if dt == bool_ else ("sum", "max", "min"):
        for reverse in (False, True):
            _check(
                op, x, axis, reverse, blu.jit(lambda a: OPS[op][0](a, axis, reverse))(put(dev, x))
            )


@pytest.mark.parametrize("dt", [f32, bf16, i32, bool_], ids=["f32", "bf16", "i32", "bool"])
@pytest.mark.parametrize("shape,axis", [((3, 2500), 1), ((2, 700, 33), 1), ((6, 1), 1)],
                         ids=["rows", "cols", "unit"])  # fmt: skip
def test_nan_inf_and_argument_forms(dev, dt, shape, axis):
    x = _inputs(dt, shape, 2, special=True)
    for reverse in (False, True):
        for op in ("max", "min"):
            _check(
                op, x, axis, reverse, blu.jit(lambda a: OPS[op][0](a, axis, reverse))(put(dev, x))
            )
            f = blu.jit(lambda a: cum.cumarg_p.bind(a, axis=axis, reverse=reverse, kind=op))
            np.testing.assert_array_equal(
                np.asarray(f(put(dev, x))),
                cum.cumarg_p.impl(x, axis=axis, reverse=reverse, kind=op),
            )


def test_grad_of_cummax_and_cumsum(dev):
    x = _inputs(f32, (4, 300), 3)
    w = _inputs(f32, (4, 300), 4)
    loss = lambda a: (lax.cumsum(a, 1) * w).sum() + lax.cummax(a, 1, reverse=True).sum()  # noqa: E731
    g = np.asarray(blu.jit(blu.grad(loss))(put(dev, x)))
    gs = np.flip(np.cumsum(np.flip(w.astype(f64), 1), 1), 1)
    idx = cum.cumarg_p.impl(x, axis=1, reverse=True, kind="max")
    gm = np.zeros_like(gs)
    for r in range(4):
        np.add.at(gm[r], idx[r], 1.0)
    np.testing.assert_allclose(g, gs + gm, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("axis", [1, 0])
def test_cumsum_4096_square(dev, axis):
    x = _inputs(f32, (4096, 4096), 5)
    f = blu.jit(lambda a: lax.cumsum(a, axis))
    _check("sum", x, axis, False, f(put(dev, x)))
    _assert_compiled(f, x)
