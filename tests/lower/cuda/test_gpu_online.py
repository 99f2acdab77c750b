"""The online softmax normalizer of GPU emitter generation 3 (``codegen_online``), without a GPU:
which row groups take it, what the emitted kernel reads, that ptxas accepts it, and the
algorithm as emitted (per-thread chunks, rescaling, the combine across threads, special values)
modelled in numpy against the two-pass form in float64. The kernels themselves run in
``tests/lower/cuda/test_gpu_generations.py`` (marked ``gpu``)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from gpu_helpers import plan_nodes
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
import blu.numpy as bnp
from blu.lower.cuda import codegen as codegen_gpu
from blu.lower.cuda import codegen_rows
from blu.lower.cuda import compiler as mlir_gpu
from blu.lower.cuda.codegen import online_groups
from blu.lower.cuda.codegen_strided import ROW_UNROLL

needs_mlir = pytest.mark.skipif(importlib.util.find_spec("mlir") is None, reason="needs MLIR")
needs_ptxas = pytest.mark.skipif(mlir_gpu.find_ptxas() is None, reason="needs ptxas")
TARGET = "cuda:sm_90"
f32, f64 = np.float32, np.float64


def softmax(x):
    e = bnp.exp(x - bnp.max(x, axis=1, keepdims=True))
    return e / bnp.sum(e, axis=1, keepdims=True)


def logsumexp_and_picked(x, y):
    """The classifier's chunk: the picked logit from the raw row joins the max's nest."""
    m = bnp.max(x, axis=1, keepdims=True)
    s = bnp.sum(bnp.exp(x - m), axis=1)
    hit = bnp.expand_dims(y, 1) == blu.lax.iota(np.int32, x.shape, 1)
    picked = bnp.sum(bnp.where(hit, x, bnp.zeros_like(x)), axis=1) - m[:, 0]
    return bnp.log(s) - picked


def picked_shifted(x, y):
    """The picked logit summed from the shifted row: a sum that needs the final max."""
    m = bnp.max(x, axis=1, keepdims=True)
    s = bnp.sum(bnp.exp(x - m), axis=1)
    hit = bnp.expand_dims(y, 1) == blu.lax.iota(np.int32, x.shape, 1)
    return bnp.log(s) - bnp.sum(bnp.where(hit, x - m, bnp.zeros_like(x)), axis=1)


def max_of_another(x, y):
    """``sum(exp(x - max(w)))`` with ``w`` another array: not a normalizer of ``x``."""
    w = y.astype(np.float32)[:, None] + x * 2
    return bnp.sum(bnp.exp(x - bnp.max(w, axis=1, keepdims=True)), axis=1)


def _counts(f, *args) -> tuple[int, int]:
    """(online passes, looped row groups) of ``jit(f)``'s GPU plan under generation 3."""
    with blu.config.override(gpu_kernels=3):
        online = looped = 0
        for node in plan_nodes(f, *args):
            if node.kind == "kernel":
                online += len(online_groups(node.layout))
                plans = codegen_gpu.plan_nests(node.layout)
                looped += sum(p.group == j and codegen_rows.group_form(p) == "looped"
                              for j, p in enumerate(plans))  # fmt: skip
        return online, looped


@settings(max_examples=12, deadline=None)
@given(K=st.sampled_from([0, 1, 3, 512, 777]), R=st.sampled_from([1, 63, 64, 768, 1000, 8193]))
def test_online_pass_exactly_for_looped_normalizers(K, R):
    """A softmax and the classifier's chunk take the online pass exactly when their row group is
    looped (rows of ``R`` that no block of ``group_block(R)`` threads covers in at most 16
    elements each; 512+ rows); the picked logit of the shifted row or a max of another value
    keep two passes; generations 1 and 2 never take it; 0 or 1 rows, or rows of 1, plan
    without a group (rows of 0 have no max)."""
    x, y = np.zeros((K, R), f32), np.zeros((K,), np.int32)
    for f in (softmax, logsumexp_and_picked):
        online, looped = _counts(f, x) if f is softmax else _counts(f, x, y)
        assert online == looped
        if K >= 512 and R >= 64 and R % codegen_rows.group_block(R) != 0:
            assert online == 1
    for f in (picked_shifted, max_of_another):
        assert _counts(f, x, y)[0] == 0
    for gen in (1, 2):
        with blu.config.override(gpu_kernels=gen):
            for node in plan_nodes(softmax, x):
                assert node.kind != "kernel" or not online_groups(node.layout)


def test_generation_is_checked_and_keyed():
    from blu.core.errors import BluValueError

    with blu.config.override(gpu_kernels=4), pytest.raises(BluValueError, match="1, 2 or 3"):
        codegen_rows.key_suffix()
    keys = set()
    for gen in (1, 2, 3):
        with blu.config.override(gpu_kernels=gen):
            keys.add(codegen_rows.key_suffix())
    assert len(keys) == 3


@needs_mlir
@needs_ptxas
@pytest.mark.parametrize("R", [50257, 1000])
def test_online_kernel_reads_the_row_once_and_passes_ptxas(R):
    """The classifier chunk's row kernel: generation 2 loads the logits in two strided passes
    (a chunk of ``ROW_UNROLL`` and the remainder each), generation 3 in one; ptxas accepts the
    generation-3 module, without spills. (Without the row stash, which keeps a row the
    unrolled form does not take in shared memory after the first pass: ``codegen_stash``.)"""
    spec = [blu.ShapeDtypeStruct((512, R), np.dtype(f32)), blu.ShapeDtypeStruct((512,), np.int32)]
    loads = {}
    for gen in (2, 3):
        with blu.config.override(gpu_kernels=gen, gpu_row_stash=0):
            low = blu.jit(logsumexp_and_picked).lower(*spec, target=TARGET)
            text = low.as_text()
            first = text[text.index("gpu.func") :]
            first = first[: first.index("gpu.return")]
            loads[gen] = first.count("memref.load %in0")
            if gen == 3:
                exe = low.compile()
                ptx = exe.executable.ptx()
                assert ptx and all(b".target sm_90" in p for p in ptx.values())
                assert all(m.cubin for m in exe.executable.modules.values())
    chunked = (R // codegen_rows.group_block(R)) // ROW_UNROLL > 0
    per_pass = (ROW_UNROLL if chunked else 0) + 1
    assert loads == {2: 2 * per_pass, 3: per_pass}


# ---- the algorithm, modelled in numpy ------------------------------------------------------------


def online_model(x: np.ndarray, T: int, U: int = ROW_UNROLL) -> tuple[float, float]:
    """(max, sum of exp(x - max)) of one row as the generation-3 kernel computes them, in
    float32: ``T`` threads, thread ``t``'s chunk ``c`` the ``U`` contiguous elements from
    ``(c T + t) U`` (as many chunks as every thread has), then ``t + chunks U T, ... + T`` one at
    a time; per step ``m' = max(m, chunk)``,
    ``s' = s * (1 if m == m' else exp(m - m')) + sum exp(x_i - (0 if m' == -inf else m'))``;
    then the block's max, each thread's sum rescaled to it and summed; NaN if the max is -inf."""
    ninf = f32(-np.inf)
    R = len(x)
    chunks = (R // T) // U
    ms, ss = [], []
    with np.errstate(invalid="ignore", over="ignore"):
        for t in range(T):
            m, s = ninf, f32(0)
            steps = [[x[(c * T + t) * U + u] for u in range(U)] for c in range(chunks)]
            steps += [[x[r]] for r in range(t + chunks * U * T, R, T)]
            for vals in steps:
                new = m
                for v in vals:
                    new = np.maximum(new, v)  # NaN propagates, as arith.maximumf
                ref = f32(0) if new == ninf else new
                s = s * (f32(1) if m == new else np.exp(f32(m - new)))
                for v in vals:
                    s = f32(s + np.exp(f32(v - ref)))
                m = new
            ms.append(m)
            ss.append(s)
        M = ninf
        for m in ms:
            M = np.maximum(M, m)
        S = f32(0)
        for m, s in zip(ms, ss):
            S = f32(S + s * (f32(1) if m == M else np.exp(f32(m - M))))
    return float(M), float("nan") if M == ninf else float(S)


def two_pass(x: np.ndarray) -> tuple[float, float]:
    """The generation-2 form's definition in float64: ``max``, then ``sum(exp(x - max))``."""
    with np.errstate(invalid="ignore", over="ignore"):
        x = x.astype(f64)
        m = x.max()
        return float(m), float(np.exp(x - m).sum())


ELEMENTS = st.one_of(
    st.floats(-60, 60, width=32),
    st.sampled_from([-np.inf, np.inf, np.nan, -1e30, 1e30]),
)


@settings(max_examples=60, deadline=None)
@given(
    x=hnp.arrays(f32, st.integers(1, 700), elements=ELEMENTS),
    T=st.sampled_from([1, 2, 32, 64]),
    U=st.sampled_from([1, 3, 8]),
)
def test_online_model_matches_two_passes(x, T, U):
    """Random rows (size 1 and odd sizes, -inf, +inf, NaN, huge values): the online pass gives
    the two-pass max exactly and its sum within float32 rounding (a sum of ``len(x)`` terms),
    NaN exactly where it is NaN."""
    m, s = online_model(x, T, U)
    m_ref, s_ref = two_pass(x)
    assert m == m_ref or (np.isnan(m) and np.isnan(m_ref))
    assert np.isnan(s) == np.isnan(s_ref)
    if not np.isnan(s_ref):  # a float32 sum of len(x) positive terms, each rounded exp
        assert abs(s - s_ref) <= 2 * (len(x) + 4) * np.finfo(f32).eps * s_ref + 1e-30


def test_online_model_rows_that_start_at_minus_infinity():
    """A thread whose first elements are all -inf (its running max -inf) and a row that is -inf
    except one element: the sum is exp(0) = 1 plus the rest, no NaN."""
    x = np.full(300, -np.inf, f32)
    x[299] = 3.0
    assert online_model(x, 4) == (3.0, 1.0)
    x[:100] = np.linspace(-5, 2, 100, dtype=f32)
    m, s = online_model(x, 32)
    assert m == 3.0 and abs(s - two_pass(x)[1]) <= 1e-6 * s


# ---- generation 3's unrolled row layout (codegen_rows.vector_block) ------------------------------


@settings(max_examples=40, deadline=None)
@given(R=st.integers(1, 20000))
def test_vector_layout_covers_each_element_once(R):
    """Where ``vector_block`` gives a block, thread ``t``'s runs ``4 t + 4 j block + u`` cover
    the row exactly once, 8-16 elements per thread (fewer only for the smallest rows); before
    generation 3 there is none."""
    with blu.config.override(gpu_kernels=2):
        assert codegen_rows.vector_block(R) is None
    with blu.config.override(gpu_kernels=3):
        b = codegen_rows.vector_block(R)
    if b is None:
        return
    V = codegen_rows.VEC
    assert b >= 32 and b & (b - 1) == 0 and R % (V * b) == 0 and R // b <= codegen_rows.UNROLL
    assert R // b >= 8 or b == 32
    n = R // b
    got = sorted(V * t + (i // V) * V * b + i % V for t in range(b) for i in range(n))
    assert got == list(range(R))


@needs_mlir
@needs_ptxas
def test_layer_norm_rows_use_128_bit_accesses():
    """A layer norm's forward and backward over rows of 768 (float32): generation 3 launches
    blocks of 64 threads and its row kernel moves the rows in ``ld.global.v4`` /
    ``st.global.v4``; ptxas accepts it without spills."""
    import re

    import blu.nn as nn

    def f(x, g, b, dy):
        y, vjp = blu.vjp(nn.layer_norm, x, g, b)
        return (y, *vjp(dy))

    spec = [blu.ShapeDtypeStruct(s, np.dtype(f32)) for s in [(1024, 768), (768,), (768,),
                                                               (1024, 768)]]  # fmt: skip
    with blu.config.override(gpu_kernels=3):
        low = blu.jit(f).lower(*spec, target=TARGET)
        blocks = set()
        for node in low._program.plan.nodes:
            if node.kind == "kernel":
                plans = codegen_gpu.plan_nests(node.layout)
                blocks |= {codegen_rows.group_launch(p)[1] for j, p in enumerate(plans)
                           if p.group == j}  # fmt: skip
        assert blocks == {64}
        exe = low.compile()
    ptx = b"".join(exe.executable.ptx().values()).decode()
    assert re.search(r"ld\.global(\.nc)?\.v4\.(f32|b32|u32)", ptx)
    assert re.search(r"st\.global\.v4\.(f32|b32|u32)", ptx)
    assert all(m.cubin for m in exe.executable.modules.values())
