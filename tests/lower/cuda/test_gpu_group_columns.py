"""Row groups with column partials (``codegen_rows``, ``$BLU_GPU_GROUP_COLUMNS``): a layer norm's
backward reduces its gain and bias gradients over the rows its row group already reads.

Without a GPU: the launch plan (the split joins the group, ``S`` = the group's blocks in every
generation, one launch fewer, the partial buffers sized ``S * K``; off, the old plan), the
kernels through ``ptxas`` (no spills), the pipelined row loop's text (``BLU_GPU_ROW_PREFETCH``).
On a GPU (marked ``gpu``): the gradients against float64 and bit-equal to generation 1's (the
same partials, the same order) and to the pipelined loop's, with a row count the blocks do not
divide and a bfloat16 cotangent.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from gpu_helpers import assert_no_spills, make_device, on_gpu
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.cuda as bc
import blu.lax as lax
import blu.nn as nn
import blu.numpy as bnp
from blu.lower.cuda import codegen, codegen_rows
from blu.lower.cuda import compiler as mlir_gpu
from blu.lower.plan.nodes import NodeKind

f32, f64 = np.float32, np.float64
needs_mlir = pytest.mark.skipif(importlib.util.find_spec("mlir") is None, reason="needs MLIR")
needs_ptxas = pytest.mark.skipif(mlir_gpu.find_ptxas() is None, reason="needs ptxas")


def _bf16():
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def ln_grads(x, g, b, dy):
    """A layer norm's input, gain and bias gradients (a GPT-2 block's pre-norm; a bfloat16
    cotangent cast up, as from a bf16 product)."""
    return blu.vjp(nn.layer_norm, x, g, b)[1](dy.astype(f32))


def rms_grads(x, g, b, dy):
    """An RMSNorm's input and gain gradients (LLaMA's; ``b`` unused): the fusion puts the gain
    gradient's column reduction before the row group, which moves it after itself."""

    def rms(x, g):
        return x * lax.rsqrt(bnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g

    return blu.vjp(rms, x, g)[1](dy.astype(f32))


def _specs(rows: int, cols: int, dy_dtype=f32):
    s = blu.ShapeDtypeStruct
    return [s((rows, cols), np.dtype(f32)), s((cols,), np.dtype(f32)), s((cols,), np.dtype(f32)),
            s((rows, cols), np.dtype(dy_dtype))]  # fmt: skip


def _column_groups(rows: int, cols: int, fn=ln_grads, **flags):
    """``(head, split)`` plans of every group with column partials in the lowered program, and
    every split of ``cols`` kept columns over ``rows`` rows."""
    with blu.config.override(**flags):
        prog = blu.jit(fn).lower(*_specs(rows, cols), target="cuda:sm_90")._program
        grouped, splits = [], []
        for node in prog.plan.nodes:
            if node.kind != NodeKind.KERNEL:
                continue
            lay = node.layout
            plans = codegen.plan_nests(lay)
            names = [la.func for la in codegen.launches(lay, "k")]
            for j, p in enumerate(plans):
                if p.strategy == "split" and p.K == cols and p.R == rows:
                    splits.append((p, lay, names, j))
                    if p.group >= 0:
                        grouped.append((plans[p.group], p))
        return grouped, splits


@settings(max_examples=16, deadline=None)
@given(rows=st.sampled_from([1, 15, 16, 100, 1000, 16384]),
       cols=st.sampled_from([64, 768, 1024, 1600]),
       fn=st.sampled_from([ln_grads, rms_grads]))  # fmt: skip
def test_the_plan(rows, cols, fn):
    grouped, splits = _column_groups(rows, cols, fn)
    if rows >= 512:  # (fewer: no row groups, codegen.plan_nests)
        assert splits and grouped, "the gain and bias gradients: a split the group takes in"
    for p, lay, names, j in splits:
        head_block = codegen_rows.group_block(cols)
        G = max(1, min(codegen_rows.pow2_at_least(codegen_rows.COLUMN_THREADS // head_block),
                       rows // 16, codegen_rows.SPLIT_PARTIALS // cols))  # fmt: skip
        if p.group < 0:
            continue
        assert p.S == G  # the partials: one per block and column
        for pos in p.partials:
            assert lay.scratch[pos].shape == (G * cols,)
        assert f"k_{j}a" not in names and f"k_{j}b" in names  # stage 1 is the group's
    for head, p in grouped:
        assert head.grid == p.S and codegen_rows.group_launch(head)[0] == p.S


def test_off_and_generation_1():
    on, _ = _column_groups(16384, 768)
    assert on and all(p.S == 512 for _, p in on)  # 2**16 threads of 128: 512 blocks
    grouped, splits = _column_groups(16384, 768, gpu_group_columns=False)
    assert not grouped and splits
    assert all(s[0].S == 256 for s in splits)  # the split's own S
    grouped, splits = _column_groups(16384, 768, gpu_kernels=1)
    assert not grouped  # generation 1: a separate split, but with the group's S (same bits)
    assert 512 in {s[0].S for s in splits}
    capped, _ = _column_groups(16384, 768, gpu_column_blocks=128)  # $BLU_GPU_COLUMN_BLOCKS
    assert capped and all(p.S == 128 == head.grid for head, p in capped)


@needs_mlir
@pytest.mark.parametrize("fn", [lambda x: nn.softmax(x - x.sum(0)),
                                lambda x: (x - x.sum(0)).max(1)])  # fmt: skip
def test_a_column_reduction_the_group_reads_stays_before_it(tmp_path, fn):
    """The group reads the column sums (a broadcast of them in every row): they cannot move
    after it (this had raised "reduce_sum read before its nest ran")."""
    spec = blu.ShapeDtypeStruct((1024, 768), np.dtype(f32))
    for flags in ({}, {"gpu_kernels": 1}):
        with blu.config.override(cache_dir=str(tmp_path), **flags):
            low = blu.jit(fn).lower(spec, target="cuda:sm_90")
            low.compile()
            for node in low._program.plan.nodes:
                if node.kind == NodeKind.KERNEL:
                    assert not any(p.grid for p in codegen.plan_nests(node.layout))


@needs_mlir
@needs_ptxas
def test_the_kernels_compile_without_spills(tmp_path):

    bf16 = _bf16()
    with blu.config.override(cache_dir=str(tmp_path)):
        exe = blu.jit(ln_grads).lower(*_specs(1000, 768, bf16), target="cuda:sm_90").compile()
    assert_no_spills("\n".join(p.decode() for p in exe.executable.ptx().values()), tmp_path)


@needs_mlir
@needs_ptxas
def test_the_pipelined_row_loop(tmp_path):
    """``BLU_GPU_ROW_PREFETCH`` (``codegen_prefetch``, the default): the blocks' loop over rows
    carries the next row's loads (x and dy at each of a thread's 6 points: rows of 768, 128
    threads) after its column accumulators (the gain's and bias's gradients at its 6 columns),
    and issues them before the row's block reductions; no spills. Off, the plain loop has its
    own cache key."""
    bf16 = _bf16()
    specs = _specs(4096, 768, bf16)
    with blu.config.override(cache_dir=str(tmp_path), gpu_row_prefetch=True):
        assert "row-prefetch" not in codegen_rows.key_suffix()
        low = blu.jit(ln_grads).lower(*specs, target="cuda:sm_90")
        (node,) = [n for n in low._program.plan.nodes if n.kind == NodeKind.KERNEL
                   and any(p.grid for p in codegen.plan_nests(n.layout))]  # fmt: skip
        text = codegen.emit_gpu_kernel(node.layout, "k")
        exe = low.compile()
    loop = next(ln for ln in text.splitlines() if "scf.for" in ln and "iter_args" in ln)
    assert loop.count("%a") == 2 * 6 + 2 * 6, loop  # accumulators, then the loads
    body = text[text.index(loop) :]
    assert body.index("arith.minui") < body.index("gpu.all_reduce")  # next row first
    with blu.config.override(cache_dir=str(tmp_path), gpu_row_prefetch=False):
        assert "#no-row-prefetch" in codegen_rows.key_suffix()
        plain = codegen.emit_gpu_kernel(node.layout, "k")
    plain_loop = next(ln for ln in plain.splitlines() if "scf.for" in ln and "iter_args" in ln)
    assert plain_loop.count("%a") == 2 * 6 and "arith.minui" not in plain
    assert_no_spills("\n".join(p.decode() for p in exe.executable.ptx().values()), tmp_path)


@needs_mlir
@needs_ptxas
@pytest.mark.parametrize("fn", [ln_grads, rms_grads])
def test_wide_rows_keep_their_whole_block(tmp_path, fn):
    """Rows of 8192: 1024 threads of 8 elements, pipelined (72 registers a thread without a
    bound). The group's threads own fixed points of a row, so its kernel is compiled for its
    block (``nvvm.maxntid``) and ptxas keeps registers x threads within the SM's 65,536: a
    launch of fewer threads (``run.fit_block``) would leave part of every row unread."""
    import re
    import subprocess

    with blu.config.override(cache_dir=str(tmp_path)):
        low = blu.jit(fn).lower(*_specs(1024, 8192), target="cuda:sm_90")
        (node,) = [n for n in low._program.plan.nodes if n.kind == NodeKind.KERNEL
                   and any(p.grid for p in codegen.plan_nests(n.layout))]  # fmt: skip
        text = codegen.emit_gpu_kernel(node.layout, "k")
        modules = [p.decode() for p in low.compile().executable.ptx().values()]
    (head,) = [p for p in codegen.plan_nests(node.layout) if p.grid]
    block = codegen_rows.group_launch(head)[1]
    assert block == 1024 and f"nvvm.maxntid = array<i32: {block}, 1, 1>" in text
    (ptx,) = [m for m in modules if ".maxntid 1024" in m]  # (the group's module carries it)
    src = tmp_path / "k.ptx"
    src.write_text(ptx)
    out = subprocess.run([mlir_gpu.find_ptxas(), "-v", "-arch=sm_90", str(src), "-o",
                          str(tmp_path / "k.cubin")], capture_output=True, text=True,
                         check=True).stderr  # fmt: skip
    used = [int(r) for r in re.findall(r"Used (\d+) registers", out)]
    assert used and max(used) * block <= 65536, out


@pytest.fixture(scope="module")
def dev():
    return make_device()


def _reference(fn, x, g, dy) -> list[np.ndarray]:
    """float64 gradients of ``fn``'s norm: ``[dx, dg, db]`` (layer norm) or ``[dx, dg]``."""
    x64, d64 = x.astype(f64), dy.astype(f64)
    if fn is rms_grads:
        r = 1 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6)
        gd = d64 * g
        return [gd * r - x64 * r**3 * (gd * x64).mean(-1, keepdims=True), (d64 * x64 * r).sum(0)]
    rstd = 1 / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    xh = (x64 - x64.mean(-1, keepdims=True)) * rstd
    gw = d64 * g
    return [rstd * (gw - gw.mean(-1, keepdims=True) - xh * (gw * xh).mean(-1, keepdims=True)),
            (d64 * xh).sum(0), d64.sum(0)]  # fmt: skip


@on_gpu
@pytest.mark.parametrize("rows, dy_dtype, fn", [(1000, "f32", ln_grads), (4096, "bf16", ln_grads),
                                                (1000, "bf16", rms_grads)])  # fmt: skip
def test_gradients_on_the_gpu(dev, rows, dy_dtype, fn):
    rng = np.random.default_rng(rows)
    cols = 768
    x = rng.standard_normal((rows, cols)).astype(f32)
    g, b = rng.standard_normal(cols).astype(f32), rng.standard_normal(cols).astype(f32)
    dy = rng.standard_normal((rows, cols)).astype(_bf16() if dy_dtype == "bf16" else f32)
    args = [bc.device_put(a, dev) for a in (x, g, b, dy)]
    outs = {}
    for gen in (1, 2):
        with blu.config.override(gpu_kernels=gen, gpu_row_prefetch=False):
            outs[gen] = [np.asarray(o) for o in blu.jit(lambda *a: fn(*a))(*args)]
    with blu.config.override(gpu_row_prefetch=True):  # the pipelined loop: the same arithmetic
        outs["prefetch"] = [np.asarray(o) for o in blu.jit(lambda *a: fn(*a))(*args)]
    for a, c, p in zip(outs[1], outs[2], outs["prefetch"], strict=True):  # the same partials
        assert np.array_equal(a.view(np.uint8), c.view(np.uint8))  # in the same order
        assert np.array_equal(c.view(np.uint8), p.view(np.uint8))
    for got, ref in zip(outs[2], _reference(fn, x, g, dy), strict=True):
        err = np.linalg.norm(got.astype(f64) - ref) / np.linalg.norm(ref)
        assert err < 1e-5, err
