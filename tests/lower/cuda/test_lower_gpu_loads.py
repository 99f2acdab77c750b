"""GPU kernels with several loads in flight (``BLU_GPU_KERNELS=2``, ``codegen_strided``), read
from the emitted MLIR and PTX on a machine without a GPU: a strided loop's chunk issues all its
loads before the first store or combine, a row group reads its totals from registers (no
barrier round trips through memory), each generation has its own cache keys. Their numerics
on the GPU: ``tests/lower/cuda/test_gpu_generations.py``."""

from __future__ import annotations

import importlib.util
import re

import numpy as np
import pytest

import blu
import blu.nn as nn
import blu.numpy as bnp
from blu.core.errors import BluValueError
from blu.lower.cuda import codegen, codegen_rows, codegen_strided
from blu.lower.cuda import compiler as mlir_gpu
from blu.lower.cuda.codegen_splits import hoist_loads

needs_mlir = pytest.mark.skipif(importlib.util.find_spec("mlir") is None, reason="needs MLIR")
needs_ptxas = pytest.mark.skipif(mlir_gpu.find_ptxas() is None, reason="needs ptxas")
TARGET = "cuda:sm_90"


def _spec(shape, dt):
    return blu.ShapeDtypeStruct(shape, np.dtype(dt))


def _bf16():
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def loads_in_flight(ptx: str) -> int:
    """The most bytes loaded by ``ld.global`` in one basic block of ``ptx`` before a store or a
    branch ends the run: how much one thread can have in flight at once."""
    best = run = 0
    for line in ptx.splitlines():
        s = line.strip()
        m = re.match(r"ld\.global(?:\.nc)?(?:\.v(\d))?\.[bfsu](\d+)", s)
        if m:
            run += int(m.group(1) or 1) * int(m.group(2)) // 8
            best = max(best, run)
        elif s.startswith(("st.global", "$L", "bra", "@")) or "bar.sync" in s:
            run = 0
    return best


def _ptx(fn, *specs) -> str:
    exe = blu.jit(fn).lower(*specs, target=TARGET).compile()
    return "\n".join(p.decode() for p in exe.executable.ptx().values())


def test_generation_flag_and_cache_keys():
    with blu.config.override(gpu_kernels=1):
        assert codegen_strided.generation() == 1 and "#gpu-kernels" not in codegen_rows.key_suffix()
        # every generation's keys name the emitter's version (a key holds no emitted code)
        assert f"#gpu-emitter {codegen_rows.EMITTER_VERSION}" in codegen_rows.key_suffix()
    with blu.config.override(gpu_kernels=2):
        assert codegen_strided.loads_first() and "#gpu-kernels 2" in codegen_rows.key_suffix()
    with blu.config.override(gpu_kernels=3):
        assert codegen_strided.generation() == 3 and "#gpu-kernels 3" in codegen_rows.key_suffix()
    with blu.config.override(gpu_kernels=4), pytest.raises(BluValueError, match="expected 1"):
        codegen_strided.generation()


def test_generations_lower_to_different_keys():
    def f(x):
        return bnp.exp(x) * 2

    keys = []
    for gen in (1, 2, 3):
        with blu.config.override(gpu_kernels=gen):
            low = blu.jit(f).lower(_spec((64, 64), np.float32), target=TARGET)
            keys.append(low._program.cache_keys())
    assert keys[0] and set(keys[0]).isdisjoint(keys[1])
    assert set(keys[2]).isdisjoint(keys[0] + keys[1])


def test_row_group_totals_stay_in_registers():
    """A layer norm over rows of 768 (unrolled group): generation 1 stores each row's mean and
    variance and loads them back after a barrier; generation 2 reads them from registers, so the
    group's kernel has no ``gpu.barrier`` and loads only the inputs."""

    def ln(x, w, b):
        return nn.layer_norm(x, w, b).astype(_bf16())

    specs = (_spec((1024, 768), np.float32), _spec((768,), np.float32), _spec((768,), np.float32))
    texts = {}
    for gen in (1, 2):
        with blu.config.override(gpu_kernels=gen):
            text = blu.jit(ln).lower(*specs, target=TARGET).as_text()
            texts[gen] = text[text.index("gpu.func") :]
    assert "gpu.barrier" in texts[1] and "gpu.barrier" not in texts[2]
    loads = re.findall(r"memref\.load (%\w+)\[", texts[2])
    assert loads and all(b.startswith("%in") for b in loads)
    assert any(not b.startswith("%in") for b in re.findall(r"memref\.load (%\w+)\[", texts[1]))


@needs_mlir
@needs_ptxas
def test_vocabulary_rows_issue_a_chunk_of_loads():
    """64 rows of 50,304 logits (split reductions over each row): generation 2 issues a chunk
    of loads per thread before it combines them; generation 1 fewer (one per loop iteration,
    as many as LLVM unrolls)."""

    def f(z):
        m = bnp.max(z, axis=1, keepdims=True)
        e = bnp.exp(z - m)
        return (e / bnp.sum(e, axis=1, keepdims=True)).astype(_bf16())

    spec = _spec((64, 50304), np.float32)
    got = {}
    for gen in (1, 2):
        with blu.config.override(gpu_kernels=gen):
            got[gen] = loads_in_flight(_ptx(f, spec))
    assert got[1] < got[2] and 4 * codegen_strided.ROW_UNROLL <= got[2], got


@needs_mlir
@needs_ptxas
def test_elementwise_and_split_loops_issue_a_chunk_of_loads():
    """GELU of bf16 (1024, 3072) (a map: 8 contiguous elements per thread, one 128-bit load
    and store) and a bias gradient over 4096 rows (a split reduction: ``ROW_UNROLL`` loads)."""
    bf16 = _bf16()
    gelu = _spec((1024, 3072), bf16)
    bias = _spec((4096, 768), np.float32)
    with blu.config.override(gpu_kernels=1):
        ptx = _ptx(nn.gelu, gelu)
        assert loads_in_flight(ptx) == 2 and "ld.global.v" not in ptx
    with blu.config.override(gpu_kernels=2):
        ptx = _ptx(nn.gelu, gelu)
        assert loads_in_flight(ptx) == 16
        assert "ld.global.v4.b32" in ptx and "st.global.v4.b32" in ptx
        assert loads_in_flight(_ptx(lambda d: d.sum(0), bias)) >= 4 * codegen_strided.ROW_UNROLL


def test_column_lanes_only_along_a_kept_innermost_dimension():
    """Lanes are consecutive kept indices along the innermost dimension: a reduction over
    dimensions 1 and 3 of (A, B, C, D) (kept, reduced, kept, reduced: not a suffix, yet its
    innermost dimension is reduced) keeps one lane a thread; over (0, 1, 2) it takes lanes."""

    def plans(axes):
        low = blu.jit(lambda x: bnp.sum(x * 2.0, axis=axes)).lower(
            _spec((6, 10, 7, 24), np.float32), target=TARGET)  # fmt: skip
        return [p for n in low._program.plan.nodes if n.layout is not None
                for p in codegen.plan_nests(n.layout) if p.strategy == "split"]  # fmt: skip

    with blu.config.override(gpu_kernels=2):
        assert [p.lanes for p in plans((1, 3))] in ([], [1])
        assert [p.lanes for p in plans((0, 1, 2))] == [4]


@needs_mlir
@needs_ptxas
def test_vector_accesses_along_the_innermost_dimension():
    """A float32 add of a broadcast bias: the (N, 768) operand, the result and the bias (read at
    ``i % 768``: a chunk of 4 lies in one row, so its bias elements are consecutive too) move in
    128-bit accesses; a transposed operand's stay scalar; every parameter is declared 16-byte
    aligned."""
    specs = (_spec((4096, 768), np.float32), _spec((768,), np.float32))
    with blu.config.override(gpu_kernels=2):
        low = blu.jit(lambda x, b: x + b).lower(*specs, target=TARGET)
        assert "llvm.align = 16" in low.as_text()
        ptx = "\n".join(p.decode() for p in low.compile().executable.ptx().values())
        assert ptx.count("ld.global.v4.b32") == 2 and ptx.count("st.global.v4.b32") == 1
        assert "ld.global.b32" not in ptx  # 4096 * 768 is whole chunks: no remainder loop
        sq = _spec((512, 512), np.float32)
        ptx = _ptx(lambda x, y: x + y.T, sq, sq)
    assert ptx.count("ld.global.v4.b32") == 1 and ptx.count("ld.global.b32") >= 4


@needs_mlir
@needs_ptxas
@pytest.mark.parametrize("dtype, inner, lanes", [("bf16", 64, 8), ("bf16", 12, 4), ("f32", 6, 2),
                                                 ("f32", 7, 1)])  # fmt: skip
def test_column_reductions_read_lanes_of_channels_without_64_bit_divisions(dtype, inner, lanes):
    """Batch norm's statistics over (N, H, W) of an NHWC image, H = W = 28 (kept innermost: split
    reductions). The centred sum reads the mean through a broadcast (per-dimension indices, so
    each point's index divides by 28): each of its stage-1 threads reads ``lanes`` consecutive
    channels in one vector access and divides once for all of them. The plain sum's offset is
    ``r * C + c`` (no division): it keeps one lane a thread. No stage 1 divides 64-bit
    integers."""
    dt = _bf16() if dtype == "bf16" else np.dtype(np.float32)

    def stats(x, m):
        x = x.astype(np.float32)
        return bnp.sum(x, axis=(0, 1, 2)), bnp.sum((x - m) ** 2, axis=(0, 1, 2))

    specs = (_spec((8, 28, 28, inner), dt), _spec((inner,), np.float32))
    with blu.config.override(gpu_kernels=2):
        low = blu.jit(stats).lower(*specs, target=TARGET)
        nests = [(nest.needs_multi, p) for n in low._program.plan.nodes if n.layout is not None
                 for nest, p in zip(n.layout.nests, codegen.plan_nests(n.layout))]  # fmt: skip
        assert {p.strategy for _, p in nests} == {"split"}
        assert {p.lanes for multi, p in nests if multi} == {lanes}
        assert {p.lanes for multi, p in nests if not multi} <= {1}
        ptx = "\n".join(p.decode() for p in low.compile().executable.ptx().values())
    stage1 = [b for b in ptx.split(".entry ")[1:] if re.match(r"\w+a\(", b)]
    assert stage1
    for body in stage1:
        assert "mul.hi.u64" not in body and "div.u64" not in body and "rem.u64" not in body
    width = lanes * dt.itemsize * 8  # bits of one vector access of the image
    loads = re.findall(r"ld\.global(?:\.nc)?(?:\.v(\d))?\.[bfsu](\d+)", "".join(stage1))
    assert max(int(n or 1) * int(bits) for n, bits in loads) >= width


@needs_mlir
@needs_ptxas
@pytest.mark.parametrize("R", [50304, 50257])
def test_generation_3_vocabulary_rows_in_vector_accesses(R):
    """A cross-entropy chunk's kernel over bfloat16 rows of ``R`` logits (a looped row group:
    the online max and sum, then ``softmax - onehot`` written back): generation 3's threads
    visit contiguous runs of 8, so where a row is 16-byte aligned (50,304 = 8 x 6,288) the
    passes read and write it in 128-bit accesses; generation 2's stride by the block (2-byte
    accesses). Rows of 50,257 stay scalar (no alignment to prove) and the same elements."""
    bf16 = _bf16()

    def f(z, y):
        z = z.astype(np.float32)
        m = bnp.max(z, axis=1, keepdims=True)
        e = bnp.exp(z - m)
        hit = y[:, None] == blu.lax.iota(np.int32, z.shape, 1)
        return (e / bnp.sum(e, axis=1, keepdims=True) - hit).astype(bf16)

    specs = (_spec((4096, R), bf16), _spec((4096,), np.int32))
    v4 = {}
    for gen in (2, 3):
        with blu.config.override(gpu_kernels=gen):
            v4[gen] = len(re.findall(r"(?:ld|st)\.global(?:\.nc)?\.v4", _ptx(f, *specs)))
    if R % 8 == 0:
        assert v4[2] == 0 and v4[3] >= 2, v4
    else:
        assert v4[3] == 0, v4


def test_hoisted_loads_leave_the_loop_only_when_loop_invariant():
    """``hoist_loads`` moves a loop's top-level load of a small input indexed by a name made
    before the loop, and keeps the loads indexed inside it, of large inputs, or nested."""
    lines = [
        "      %k = arith.addi %a, %b : index",
        "      %r:1 = scf.for %i = %c0 to %c9 step %c1 iter_args(%acc = %z) -> (f32) {",
        "        %j = arith.addi %i, %k : index",
        "        %v1 = memref.load %in1[%k] : memref<64xf32>",
        "        %v2 = memref.load %in2[%j] : memref<64xf32>",
        "        %v3 = memref.load %in3[%k] : memref<4096xf32>",
        "        scf.if %p {",
        "          %v4 = memref.load %in4[%k] : memref<64xf32>",
        "        }",
        "        scf.yield %v1 : f32",
        "      }",
    ]
    out = list(lines)
    hoist_loads(out, 1, 64)
    assert out[1] == "      %v1 = memref.load %in1[%k] : memref<64xf32>"
    assert out[2] == lines[1] and out[3:] == [ln for ln in lines[2:] if "%in1" not in ln]
