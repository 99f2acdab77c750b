"""blu's flash-attention kernel generator (``blu.lower.cuda.flash``) without a GPU: every
tiling's launches fit an H100/H200 SM (threads, shared memory), the cache key follows the
generated text, unsupported problems are named, and (where MLIR is installed) the MLIR of every
head size compiles to PTX whose kernels carry the launch's names. The values are checked on a GPU
(``test_flash_attention_gpu.py``)."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

from blu.lower.cuda import flash as fg
from blu.lower.cuda import flash_tc

MAX_SHARED = 227 * 1024  # bytes of shared memory a block may opt into on sm_90


def _spec(h=64, t=100, s=100, n=4, kh=2, causal=True):
    return fg.FlashSpec(2, t, s, n, kh, h, causal, h**-0.5)


@pytest.mark.parametrize("h", fg.HEAD_SIZES)
def test_launches_fit_an_sm(h):
    sp = _spec(h)
    fwd = fg.launches(sp, "k", False)
    bwd = fg.launches(sp, "k", True)
    assert [la.func for la in fwd] == ["k_fwd"]
    assert [la.func for la in bwd] == ["k_pre", "k_bwd"]
    for la in fwd + bwd:
        assert la.block == fg.THREADS and la.shared <= MAX_SHARED
    c = fg.tiling(h)
    assert fwd[0].grid == (-(-sp.t // c.fwd_bm), sp.b * sp.n)
    assert bwd[1].grid == (-(-sp.s // c.bwd_bn), sp.b * sp.kh)
    # the pre-pass covers every (batch, query, head) row, tx lanes a row
    rows_per_block = fg.THREADS // c.bwd_tx
    assert bwd[0].grid[0] * rows_per_block >= sp.b * sp.t * sp.n


def test_cache_key_follows_the_generated_text():
    sp = _spec()
    key = fg.canonical(sp, False)
    assert key == fg.canonical(sp, False)
    assert key != fg.canonical(sp, True)
    assert key != fg.canonical(_spec(causal=False), False)
    fg.OVERRIDE["unroll"] = 2
    try:
        assert fg.canonical(sp, False) != key  # another tiling: another kernel
    finally:
        fg.OVERRIDE.clear()
    assert fg.canonical(sp, False) == key


def test_unsupported_problems_are_named():
    assert fg.unsupported(_spec()) is None
    assert "head sizes" in fg.unsupported(_spec(h=80))
    assert "empty" in fg.unsupported(fg.FlashSpec(0, 4, 4, 2, 2, 64, False, 1.0))


@pytest.mark.skipif(importlib.util.find_spec("mlir") is None, reason="needs MLIR")
@pytest.mark.parametrize("h", fg.HEAD_SIZES)
def test_kernels_compile_to_ptx(h):
    from blu.lower.cuda.compiler import compile_ptx

    sp = _spec(h)
    for backward in (False, True):
        ptx = compile_ptx(fg.emit(sp, "k", backward)).decode()
        for la in fg.launches(sp, "k", backward):
            assert f".entry {la.func}(" in ptx
        assert "ex2.approx" in ptx  # both recompute exp2 of the scores


@pytest.mark.parametrize("mode", flash_tc.MODES)
@pytest.mark.parametrize("h", fg.HEAD_SIZES)
def test_tensor_core_launches_fit_and_keys_differ(h, mode):
    sp = dataclasses.replace(_spec(h), mma=mode)
    (la,) = fg.launches(sp, "k", False)
    assert la.func == "k_fwd" and la.block == fg.THREADS and la.shared <= MAX_SHARED
    assert la.grid == (-(-sp.t // flash_tc.BM), sp.b * sp.n)
    assert fg.canonical(sp, False) != fg.canonical(_spec(h), False)
    if flash_tc.bwd_smem_bytes(h, mode) <= MAX_SHARED:
        pre, bwd = fg.launches(sp, "k", True)
        assert (pre.func, bwd.func) == ("k_pre", "k_bwd") and bwd.shared <= MAX_SHARED
        assert bwd.grid == (-(-sp.s // flash_tc.BWD_BN), sp.b * sp.kh)
    else:  # the backward keeps the CUDA-core kernels
        assert flash_tc.choose("float32", h, "fp32", True) == ""


def test_tensor_core_mode_choice():
    assert flash_tc.choose("float32", 64, "tf32", False) == "tf32"
    assert flash_tc.choose("float32", 64, "fp32", False) == "3xtf32"
    assert flash_tc.choose("float32", 64, "tf32", False, enabled=False) == ""
    assert flash_tc.choose("bfloat16", 64, "tf32", False) == ""  # cuDNN / CUDA cores
    assert flash_tc.choose("float32", 80, "tf32", False) == ""
    assert flash_tc.choose("float32", 64, "tf32", True) == "tf32"
    assert flash_tc.choose("float32", 128, "fp32", True) == ""  # split tiles: no room
    bad = dataclasses.replace(_spec(), dtype="bfloat16", mma="tf32")
    assert "tensor-core" in fg.unsupported(bad)


@pytest.mark.skipif(importlib.util.find_spec("mlir") is None, reason="needs MLIR")
@pytest.mark.parametrize("mode", flash_tc.MODES)
@pytest.mark.parametrize("h", fg.HEAD_SIZES)
def test_tensor_core_kernels_compile_to_mma(h, mode):
    from blu.lower.cuda.compiler import compile_ptx

    sp = dataclasses.replace(_spec(h, t=70, s=130, causal=False), mma=mode)
    for backward in (False, True):
        if backward and flash_tc.choose("float32", h, "fp32", True) == "" and mode == "3xtf32":
            continue
        ptx = compile_ptx(fg.emit(sp, "k", backward)).decode()
        for la in fg.launches(sp, "k", backward):
            assert f".entry {la.func}(" in ptx
        assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx
        assert "cvt.rna.tf32.f32" in ptx
        # 3xTF32: three products per fragment pair (LLVM may unroll the k loops)
        per = 3 if mode == "3xtf32" else 1
        assert ptx.count("mma.sync") % per == 0 and ptx.count("mma.sync") > 0
