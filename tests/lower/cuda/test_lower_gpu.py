"""The CUDA target on a machine without a GPU: PTX that ptxas accepts, AOT lowering, the
kernel-cache contract, and the GPU executable's logic on a simulated device (``FakeDevice``:
host memory, each kernel's CPU build) against numpy."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.cuda as bc
import blu.numpy as bnp
from blu.cuda.fake import FakeDevice
from blu.lower.backend import prepare
from blu.lower.cuda import codegen as codegen_gpu
from blu.lower.cuda import compiler as mlir_gpu
from tests.helpers import env_flag

needs_mlir = pytest.mark.skipif(importlib.util.find_spec("mlir") is None, reason="needs MLIR")
needs_ptxas = pytest.mark.skipif(mlir_gpu.find_ptxas() is None, reason="needs ptxas")
TARGET = "cuda:sm_90"


@pytest.fixture(scope="module")
def dev():
    return FakeDevice(capacity=1 << 30)


def _spec(shape, dt):
    return blu.ShapeDtypeStruct(shape, np.dtype(dt))


# ---- PTX through ptxas ---------------------------------------------------------------------------

UNARY = ["exp", "log", "tanh", "log1p", "expm1", "sin", "cos", "sqrt", "rsqrt", "erf", "abs",
         "floor", "round", "sign", "negative", "logistic"]  # fmt: skip


@needs_mlir
@needs_ptxas
@pytest.mark.parametrize("dt", ["float32", "float64", "bfloat16", "float16"])
def test_float_kernels_pass_ptxas(dt):
    fns = {
        "exp": bnp.exp, "log": bnp.log, "tanh": bnp.tanh, "log1p": bnp.log1p,
        "expm1": bnp.expm1, "sin": bnp.sin, "cos": bnp.cos, "sqrt": bnp.sqrt,
        "rsqrt": blu.lax.rsqrt, "erf": blu.lax.erf, "abs": bnp.abs, "floor": bnp.floor,
        "round": bnp.round, "sign": bnp.sign, "negative": bnp.negative,
        "logistic": blu.nn.sigmoid,
    }  # fmt: skip

    def f(x, y):
        outs = [fns[n](x) for n in UNARY]
        return outs + [x / y, x ** y, bnp.maximum(x, y), bnp.arctan2(x, y), x % y,
                       (x > y).astype(np.int32), x.astype(np.int32)]  # fmt: skip

    exe = blu.jit(f).lower(_spec((5, 7), dt), _spec((5, 7), dt), target=TARGET).compile()
    ptx = exe.executable.ptx()
    assert ptx and all(b".target sm_90" in p for p in ptx.values())


@needs_mlir
@needs_ptxas
@pytest.mark.parametrize("dt", ["int32", "int64", "uint8", "uint32", "bool"])
def test_integer_kernels_pass_ptxas(dt):
    def f(x, y):
        if np.dtype(dt) == np.bool_:
            return [x & y, x | y, ~x, x ^ y, bnp.any(x, axis=0), bnp.all(x, axis=1)]
        return [x + y, x * y, x // bnp.maximum(y, 1), x % bnp.maximum(y, 1), bnp.maximum(x, y),
                x >> 1, x << 2, x & y, x.sum(0), x.max(1), bnp.argmax(x, 1),
                x.astype(np.float32)]  # fmt: skip

    exe = blu.jit(f).lower(_spec((6, 9), dt), _spec((6, 9), dt), target=TARGET).compile()
    assert exe.executable.ptx()


@needs_mlir
@needs_ptxas
def test_every_reduction_strategy_passes_ptxas():
    """Shapes picking the row, split, thread and map strategies (codegen_gpu.plan_nests)."""

    def f(a, b, c):
        sm = bnp.exp(a - a.max(-1, keepdims=True))
        return [sm / sm.sum(-1, keepdims=True), (b * 2).sum(0), bnp.argmax(c, -1), c.sum()]

    low = blu.jit(f).lower(_spec((1024, 300), "float32"), _spec((2048, 96), "bfloat16"),
                           _spec((8, 40), "float64"), target=TARGET)  # fmt: skip
    strategies = {p.strategy for n in low._program.plan.nodes if n.kind == "kernel"
                  for p in codegen_gpu.plan_nests(n.layout)}  # fmt: skip
    assert strategies == {"row", "split", "thread", "map"}
    text = low.as_text()
    assert "gpu.all_reduce" in text and "gpu.module" in text
    low.compile()


# ---- lowering without a GPU, the cache contract -------------------------------------------------


def test_lower_as_text_needs_no_gpu_and_memory_plan_reuses():
    from examples.gpt2.model import CONFIGS, init_params, loss_fn

    cfg = CONFIGS["tiny"].with_vocab(65)
    params = init_params(cfg, blu.random.key(0))
    x = np.zeros((4, 32), np.int32)
    step = blu.jit(blu.grad(lambda p, x, y: loss_fn(p, x, y, cfg, None, None)))
    low = step.lower(params, x, x, target=TARGET)
    assert "gpu.func" in low.as_text()
    m = low.memory_analysis()
    assert 0 < m.peak_bytes < m.intermediate_bytes + m.argument_bytes
    keys = low._program.cache_keys()
    assert len(keys) == len(set(keys)) > 0


def test_bad_target_is_a_clear_error():
    with pytest.raises(blu.BluError, match="cuda:sm_XX"):
        blu.jit(lambda x: x + 1).lower(_spec((3,), "float32"), target="cuda:volta")


def test_cache_miss_without_mlir_names_the_fill_command(tmp_path, monkeypatch, dev):
    from blu.lower import mlir

    env_flag("BLU_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(mlir_gpu, "_loaded", {})
    mlir._mlir_available.cache_clear()
    monkeypatch.setattr(mlir, "_mlir_available", lambda: False)
    with pytest.raises(mlir_gpu.KernelCacheMiss, match="fill_gpu_cache"):
        low = blu.jit(lambda x: bnp.sin(x) * 3.25).lower(_spec((3, 3), "float32"), target=TARGET)
        low.compile()


@needs_mlir
def test_second_process_hits_the_gpu_cache(tmp_path):
    import subprocess
    import sys

    code = (
        "import numpy as np, blu, blu.numpy as bnp\n"
        "from blu.lower.cuda import compiler as mlir_gpu\n"
        "blu.jit(lambda x: bnp.cos(x) * 7.5).lower(blu.ShapeDtypeStruct((11,), np.float32),"
        " target='cuda:sm_90').compile()\n"
        "print(mlir_gpu.stats['compiled'], mlir_gpu.stats['cache'])\n"
    )
    env = {"BLU_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin:/usr/local/bin"}
    import os

    env = dict(os.environ, **env)
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert first.stdout.split() == ["1", "0"], first.stderr
    assert second.stdout.split() == ["0", "1"], second.stderr
    assert (tmp_path / "mlir-version").exists()  # so a machine without MLIR computes the same keys


# ---- the executable on a simulated device -------------------------------------------------------

dims = st.integers(0, 5) | st.sampled_from([1, 17, 64])


@given(st.tuples(dims, dims), st.sampled_from([0, 1, None]), st.integers(0, 2**31 - 1))
def test_fused_reductions_on_fake_device_match_numpy(dev, shape, axis, seed):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

    def f(x):
        e = bnp.exp(x - 1.0)
        return e.sum(axis=axis), bnp.max(e * 2, axis=axis, initial=-np.inf), e.T

    outs = blu.jit(f)(bc.device_put(x, dev))
    e = np.exp(x.astype(np.float64) - 1.0)
    refs = [e.sum(axis=axis), (e * 2).max(axis=axis, initial=-np.inf), e.T]
    for o, r in zip(outs, refs):
        assert isinstance(o, bc.DeviceArray)
        np.testing.assert_allclose(np.asarray(o), r, rtol=2e-5, atol=1e-5)


@given(st.sampled_from(["ij,jk->ik", "ij,kj->ik", "ji,jk->ik", "bij,bjk->bik", "bij,bkj->bik",
                        "ibj,bjk->bik", "bhqd,bhkd->bhqk", "bhqk,bhkd->bqhd"]),
       st.integers(0, 3), st.integers(1, 4))  # fmt: skip
def test_products_in_any_layout_on_fake_device(dev, spec, zero_dim, n):
    rng = np.random.default_rng(n)
    ins, _ = spec.split("->")
    sizes = {c: n + 1 + i for i, c in enumerate("bhijkqd")}
    sizes["ijkqd"[zero_dim]] = 0 if zero_dim == 3 else sizes["ijkqd"[zero_dim]]
    ops = [rng.standard_normal([sizes[c] for c in s]).astype(np.float32) for s in ins.split(",")]
    with blu.config.override(default_matmul_precision="fp32"):
        out = blu.jit(lambda a, b: bnp.einsum(spec, a, b))(*[bc.device_put(o, dev) for o in ops])
    ref = np.einsum(spec, *[o.astype(np.float64) for o in ops])
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-5, atol=1e-5)


def test_donation_and_eager_ops_on_fake_device(dev):
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    step = blu.jit(lambda p, g: (p - 0.5 * g, (g * g).sum()), donate_argnums=0)
    p = bc.device_put(w, dev)
    ptr = p.ptr
    q, s = step(p, bc.device_put(np.ones_like(w), dev))
    assert p.is_deleted() and q.ptr == ptr
    np.testing.assert_allclose(np.asarray(q), w - 0.5)
    assert float(s) == 12.0
    y = (q * 2)[1:, ::2].sum(0)
    assert isinstance(y, bc.DeviceArray)
    np.testing.assert_allclose(np.asarray(y), ((w - 0.5) * 2)[1:, ::2].sum(0))


def test_gpu_plan_has_no_copying_views_and_canonical_products():
    def f(x, w):
        return (x @ w.T).reshape(-1), bnp.einsum("ij,ik->jk", x, x)

    x, w = np.zeros((8, 5), np.float32), np.zeros((3, 5), np.float32)
    _, plan, _ = prepare(blu.make_jaxpr(f)(x, w).jaxpr, (False, False), TARGET)
    from blu.cuda.cublaslt import gemm_spec

    for n in plan.nodes:
        if n.kind == "view":
            assert n.eqns[0].primitive.name in ("reshape", "squeeze")
        if n.kind == "dot":
            e = n.eqns[0]
            shapes = [a.aval.shape for a in e.invars]
            assert gemm_spec(*shapes, e.params["dimension_numbers"]) is not None
    # x @ w.T reads w as stored (TRANSA), no transpose node
    assert not any(e.primitive.name == "transpose" for n in plan.nodes for e in n.eqns
                   if n.kind == "kernel" and len(n.eqns) == 1)  # fmt: skip


def test_row_groups_join_only_row_local_nests():
    """A softmax's max, sum and quotient run as one launch (one block per row); a nest that reads
    the group's per-row values across rows (here: transposed) stays a launch of its own."""

    def groups(f, *shapes):
        j = blu.make_jaxpr(f)(*[np.zeros(s, np.float32) for s in shapes]).jaxpr
        _, plan, _ = prepare(j, (False,) * len(shapes), TARGET)
        return [[(p.strategy, p.group) for p in codegen_gpu.plan_nests(n.layout)]
                for n in plan.nodes if n.kind == "kernel"]  # fmt: skip

    def softmax(x):
        e = bnp.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    assert groups(softmax, (1024, 300)) == [[("row", 0), ("row", 0), ("map", 0)]]

    def mixes_rows(x):  # x: (600, 600): row sums read back along the other axis
        s = x.sum(-1, keepdims=True)
        return x * s.T

    (plans,) = groups(mixes_rows, (600, 600))
    assert plans[0] == ("row", -1) and plans[1][1] == -1
    launches = codegen_gpu.launches(
        prepare(
            blu.make_jaxpr(softmax)(np.zeros((1024, 300), np.float32)).jaxpr, (False,), TARGET
        )[1]
        .nodes[0].layout, "k")  # fmt: skip
    assert [(la.grid, la.block) for la in launches] == [(1024, 64)]


@needs_mlir
@needs_ptxas
def test_row_group_forms_keep_values_in_registers(monkeypatch):
    """A layer norm over rows of 768 (block 128, 6 elements per thread) is emitted without loops:
    each input element is loaded once for the whole group, the bfloat16 output once stored: in
    the unrolled block form (the default), 6 elements per thread; in the warp form
    (``BLU_GPU_ROWS=warp``), 24 per lane and butterfly shuffles instead of ``gpu.all_reduce``. With
    ``BLU_GPU_UNROLL=0`` the block form loops (one pass per nest). Each form has its own key."""
    import ml_dtypes

    bf16 = np.dtype(ml_dtypes.bfloat16)

    def ln(x):
        x = x.astype(np.float32)
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return ((x - mu) / bnp.sqrt(var + 1e-5)).astype(bf16)

    def lowered():
        low = blu.jit(ln).lower(_spec((1024, 768), bf16), target=TARGET)
        return low.as_text(), low._program.cache_keys()

    env_flag("BLU_GPU_UNROLL", "")
    env_flag("BLU_GPU_ROWS", "warp")
    warp, warp_keys = lowered()
    body = warp[warp.index("gpu.func") :]
    assert "scf.for" not in body and body.count("memref.load %in0") == 768 // 32
    assert "gpu.all_reduce" not in body and "gpu.barrier" not in body
    assert body.count("gpu.shuffle xor") == 2 * 5  # two reductions, five butterfly steps
    exe = blu.jit(ln).lower(_spec((1024, 768), bf16), target=TARGET).compile()
    assert all(m.cubin for m in exe.executable.modules.values())  # ptxas accepted it
    env_flag("BLU_GPU_ROWS", "")
    text, keys = lowered()
    body = text[text.index("gpu.func") :]
    assert "scf.for" not in body and body.count("memref.load %in0") == 768 // 128
    assert body.count("gpu.all_reduce") == 2 and body.count("memref.store") >= 768 // 128
    env_flag("BLU_GPU_UNROLL", "0")
    looped, looped_keys = lowered()
    assert "scf.for" in looped[looped.index("gpu.func") :]
    assert len({*warp_keys, *keys, *looped_keys}) == 3 * len(keys)


def test_fit_block_caps_a_launch_at_what_the_function_can_run():
    """A fused kernel whose registers per thread times the block exceed the register file (a
    combine nest of many large operands at 1,024 threads) is launched with the largest power of
    two of threads it can run; others keep their block (blu/lower/cuda/run.py)."""
    from blu.lower.cuda.run import fit_block

    class Fn:
        def __init__(self, most):
            self.most = most

        def attribute(self, name):
            assert name == "MAX_THREADS_PER_BLOCK"
            return self.most

    assert fit_block(Fn(1024), 1024) == 1024
    assert fit_block(Fn(640), 1024) == 512
    assert fit_block(Fn(768), 256) == 256
    assert fit_block(Fn(40), 128) == 32
    assert fit_block(object(), 1024) == 1024  # a stand-in without attributes: unchanged
