"""The CUDA scan kernels of the cumulative primitives (``blu.lower.cuda.cumulative``) executed
without a GPU: their generated MLIR run by the lockstep SIMT interpreter (``simt_sim``: one
block's threads as numpy arrays, shared-memory races between barriers reported) on float32
operands, against the primitives' numpy impls (sums: ``n eps`` of the running magnitudes, as the
parallel scan adds in another order; max/min and the argument forms exactly). Covers the row
kernel over several chunks with a partial last one, the segmented column kernel with more
segments than positions, both directions, NaN, inf and ties."""

from __future__ import annotations

import numpy as np
import pytest
from simt_sim import launch

from blu.lax import cumulative as cum
from blu.lower.cuda import cumulative as cc
from blu.lower.mlir import cumulative as mc

PRIMS = {"sum": cum.cumsum_p, "max": cum.cummax_p, "min": cum.cummin_p, "prod": cum.cumprod_p,
         "argmax": cum.cumarg_p, "argmin": cum.cumarg_p}  # fmt: skip


def run_kernel(op: str, x: np.ndarray, axis: int, reverse: bool) -> np.ndarray:
    params = {"axis": axis, "reverse": reverse}
    if op.startswith("arg"):
        params["kind"] = op[3:]
    sp = mc.spec_of(PRIMS[op], x, params)
    text = cc.emit(sp, "k")
    out = np.zeros(x.size, sp.out_dtype)
    for la in cc.launches(sp, "k"):
        launch(text, la.func, la.grid[:2], la.block[0], 0, [x.reshape(-1).copy(), out])
    return out.reshape(x.shape)


def expected(op: str, x: np.ndarray, axis: int, reverse: bool) -> np.ndarray:
    if op.startswith("arg"):
        return cum.cumarg_p.impl(x, axis=axis, reverse=reverse, kind=op[3:])
    return PRIMS[op].impl(x, axis=axis, reverse=reverse)


def _input(shape, seed, special):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if special:
        flat = x.reshape(-1)
        flat[::5] = flat[0]  # ties
        flat[rng.integers(0, flat.size, 3)] = np.inf
        flat[rng.integers(0, flat.size, 2)] = np.nan
    return x.astype(np.float32)


# rows of several chunks (a partial last one), short rows (a thread each), columns with
# segments of unequal length, and size-1 axes
CASES = [((2, 2100), 1), ((40, 200), 1), ((3, 5), 1), ((1, 1), 1), ((2, 300, 40), 1),
         ((9, 33), 0), ((3, 2, 4), 0)]  # fmt: skip


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("shape,axis", CASES, ids=[f"{s}-{a}" for s, a in CASES])
def test_kernels_match_impl(shape, axis, reverse):
    clean, special = _input(shape, 0, False), _input(shape, 1, True)
    got = run_kernel("sum", clean, axis, reverse)
    want = np.flip(np.cumsum(np.flip(clean.astype(np.float64), axis), axis), axis) if reverse \
        else np.cumsum(clean.astype(np.float64), axis)  # fmt: skip
    scale = np.cumsum(np.abs(clean.astype(np.float64)), axis).max()
    tol = 4 * shape[axis] * float(np.finfo(np.float32).eps) * scale
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    for op in ("max", "min", "argmax", "argmin"):
        for x in (clean, special):
            np.testing.assert_array_equal(run_kernel(op, x, axis, reverse),
                                          expected(op, x, axis, reverse))  # fmt: skip


def test_kernel_choice():
    assert cc.row_kernel(mc.Spec("sum", "float32", 4, cc.ROW_MIN, 1, False))
    assert not cc.row_kernel(mc.Spec("sum", "float32", 4, cc.ROW_MIN - 1, 1, False))
    assert not cc.row_kernel(mc.Spec("sum", "float32", 1, 4096, 2, False))


def test_segments_of_the_column_kernel():
    assert cc.segments(mc.Spec("sum", "float32", 1, 4096, 4096, False)) == cc.MAX_SEGMENTS
    assert cc.segments(mc.Spec("sum", "float32", 1, 100, 4, False)) == 1
    (la,) = cc.launches(mc.Spec("sum", "float32", 1, 4096, 4096, False), "k")
    assert la.grid == (4096 // cc.COL_LANES, 1, 1) and la.block == (1024, 1, 1)
