"""GPU tests of the runtime (marked ``gpu``; skipped unless ``blu.cuda.is_available()``).

Run on the GPU machine by ``scripts/gpu_check.sh``. Shapes are fixed; the only kernels are the
hand-written PTX below (no MLIR or kernel cache needed). References are float64 numpy, compared by
``|out - ref| / |ref|`` (METHOD.md: fp32 far under 1e-3, tf32 near 3e-4, bf16 1e-3 to 1e-2).
"""

from __future__ import annotations

import gc
import shutil
import subprocess
import time

import ml_dtypes
import numpy as np
import pytest

import blu
import blu.cuda as bc
from blu.cuda import cublaslt as lt
from blu.cuda import driver
from blu.cuda.graph import Graph

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not bc.is_available(), reason="needs an NVIDIA GPU and cuda-python"),
]

PTX = r"""
.version 8.0
.target sm_90
.address_size 64

.visible .entry add_f32(.param .u64 a, .param .u64 b, .param .u64 out, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<11>;
    ld.param.u64 %rd1, [a];
    ld.param.u64 %rd2, [b];
    ld.param.u64 %rd3, [out];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd4, %rd1;
    cvta.to.global.u64 %rd5, %rd2;
    cvta.to.global.u64 %rd6, %rd3;
    mul.wide.u32 %rd7, %r5, 4;
    add.s64 %rd8, %rd4, %rd7;
    add.s64 %rd9, %rd5, %rd7;
    add.s64 %rd10, %rd6, %rd7;
    ld.global.f32 %f1, [%rd8];
    ld.global.f32 %f2, [%rd9];
    add.f32 %f3, %f1, %f2;
    st.global.f32 [%rd10], %f3;
DONE:
    ret;
}

.visible .entry axpy_f32(.param .u64 x, .param .u64 y, .param .f32 alpha, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<5>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [y];
    ld.param.f32 %f1, [alpha];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd6, %rd3, %rd5;
    add.s64 %rd7, %rd4, %rd5;
    ld.global.f32 %f2, [%rd6];
    ld.global.f32 %f3, [%rd7];
    fma.rn.f32 %f4, %f1, %f2, %f3;
    st.global.f32 [%rd7], %f4;
DONE:
    ret;
}
"""

DN = (((1,), (0,)), ((), ()))


@pytest.fixture(scope="module")
def dev():
    return bc.devices()[0]


@pytest.fixture(scope="module")
def module(dev):
    dev.activate()
    return driver.Module(PTX, name="test kernels")


def rel_err(out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    assert np.isfinite(out).all()
    return np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30)


def fresh(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ---- driver ------------------------------------------------------------------------------------


def test_device_properties(dev):
    p = dev.properties
    assert p.total_memory > 2**30 and p.multiprocessor_count > 0 and p.warp_size == 32
    assert p.compute_capability >= (7, 0) and p.name
    print(
        f"\n{dev}: {p.name}, {p.arch}, {p.multiprocessor_count} SMs, "
        f"{p.total_memory / 2**30:.1f} GiB, driver {driver.driver_version()}"
    )


@pytest.mark.parametrize(
    "dtype",
    [
        np.float32,
        np.float64,
        ml_dtypes.bfloat16,
        np.float16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint32,
        np.bool_,
    ],
    ids=str,
)
def test_round_trip(dev, dtype):
    for shape in [(), (0,), (1,), (3, 5), (1000, 37)]:
        x = (np.random.default_rng(1).standard_normal(shape) * 50).astype(dtype)
        y = bc.device_put(x, dev)
        assert y.device is dev and y.shape == x.shape
        assert np.array_equal(np.asarray(y), x)
        assert np.array_equal(np.asarray(y.copy()), x)


def test_driver_errors_name_the_call(dev):
    dev.activate()
    with pytest.raises(bc.CudaError, match="cuModuleLoadData"):
        driver.Module(".version 8.0\n.target sm_90\nthis is not ptx", name="bad")
    m = driver.Module(PTX)
    with pytest.raises(bc.CudaError, match="cuModuleGetFunction.*no_such_kernel"):
        m.function("no_such_kernel")
    with pytest.raises(bc.CudaError, match="cuLaunchKernel.*add_f32"):
        m.function("add_f32").launch(1, 4096, [0, 0, 0, np.uint32(0)], stream=dev.stream)


def test_memset_and_async_copies(dev):
    a = bc.DeviceArray.empty((1000,), np.uint8, dev)
    dev.memset(a.ptr, 7, a.nbytes)
    assert (np.asarray(a) == 7).all()


# ---- kernels -----------------------------------------------------------------------------------


def test_ptx_kernel_launch(dev, module):
    n = 1_000_003
    a, b = fresh(n, 1), fresh(n, 2)
    da, db = bc.device_put(a, dev), bc.device_put(b, dev)
    out = bc.DeviceArray.empty((n,), np.float32, dev)
    add = module.function("add_f32")
    add.launch((n + 255) // 256, 256, [da.ptr, db.ptr, out.ptr, np.uint32(n)], stream=dev.stream)
    assert np.array_equal(np.asarray(out), a + b)
    axpy = module.function("axpy_f32")
    axpy.launch(
        (n + 255) // 256, 256, [da.ptr, db.ptr, np.float32(0.5), np.uint32(n)], stream=dev.stream
    )
    np.testing.assert_array_equal(np.asarray(db), np.float32(0.5) * a + b)
    assert add.attribute("NUM_REGS") > 0


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas to build a cubin")
def test_cubin_module(dev, tmp_path):
    (tmp_path / "k.ptx").write_text(PTX)
    arch = dev.properties.arch
    subprocess.run(
        ["ptxas", f"-arch={arch}", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")],
        check=True,
    )
    dev.activate()
    m = driver.Module.from_file(str(tmp_path / "k.cubin"))
    a = bc.device_put(np.arange(64, dtype=np.float32), dev)
    out = bc.DeviceArray.empty((64,), np.float32, dev)
    m.function("add_f32").launch(1, 64, [a.ptr, a.ptr, out.ptr, np.uint32(64)], stream=dev.stream)
    assert np.array_equal(np.asarray(out), 2 * np.arange(64, dtype=np.float32))


def test_many_launches_queue_in_order(dev, module):
    # Queued launches on one stream all run: a = a + a doubles every element each time, so 100
    # launches on ones give exactly 2**100 (float32 is exact up to 2**127) and 1,000 overflow to
    # inf. The host time per launch is printed for reading, not asserted: it depends on the load.
    n = 1 << 20
    a = bc.device_put(np.ones(n, np.float32), dev)
    add = module.function("add_f32")
    args = [a.ptr, a.ptr, a.ptr, np.uint32(n)]
    t = time.perf_counter()
    for _ in range(1000):
        add.launch(n // 256, 256, args, stream=dev.stream)
    host_us = (time.perf_counter() - t) * 1000
    dev.synchronize()
    print(f"\nFunction.launch host time: {host_us:.1f} us per launch")
    out = np.asarray(a)
    assert np.isinf(out).all()  # 2**1000 overflows float32: every launch ran on every element
    b = bc.device_put(np.ones(n, np.float32), dev)
    args_b = [b.ptr, b.ptr, b.ptr, np.uint32(n)]
    for _ in range(100):
        add.launch(n // 256, 256, args_b, stream=dev.stream)
    dev.synchronize()
    assert np.array_equal(np.asarray(b), np.full(n, 2.0**100, np.float32))


# ---- CUDA graphs -------------------------------------------------------------------------------


def test_graph_capture_and_replay(dev, module):
    n = 1 << 16
    x0, w0 = fresh((64, 128), 3), fresh((128, 96), 4)
    x, w = bc.device_put(x0, dev), bc.device_put(w0, dev)
    y = bc.DeviceArray.empty((64, 96), np.float32, dev)
    acc = bc.device_put(np.zeros(n, np.float32), dev)
    inc = bc.device_put(np.ones(n, np.float32), dev)
    add = module.function("add_f32")
    from blu.cuda.products import dot_general

    def step():
        for _ in range(3):
            add.launch(n // 256, 256, [acc.ptr, inc.ptr, acc.ptr, np.uint32(n)], stream=dev.stream)
        dot_general(x, w, DN, out=y, precision="fp32")

    step()  # warm up: the cuBLASLt plan and workspace exist before capture
    dev.synchronize()
    g = Graph()
    with g.capture(dev.stream):
        step()
    assert np.array_equal(np.asarray(acc), np.full(n, 3, np.float32))  # capture ran nothing
    assert g.num_nodes() >= 4
    for _ in range(5):
        g.replay(dev.stream)
    assert np.array_equal(np.asarray(acc), np.full(n, 18, np.float32))
    plain = np.asarray(y)
    assert rel_err(plain, x0.astype(np.float64) @ w0) < 1e-5
    g.destroy()


# ---- allocator on device memory ----------------------------------------------------------------


def test_allocator_blocks_do_not_overlap_on_device(dev):
    rng = np.random.default_rng(5)
    live = {}
    for i in range(300):
        if live and rng.random() < 0.4:
            k = rng.choice(list(live))
            arr, val = live.pop(k)
            assert (np.asarray(arr) == val).all(), "a live buffer was overwritten"
            del arr
        else:
            size = int(rng.choice([100, 4000, 300_000, 2_500_000, 12_000_000]))
            arr = bc.DeviceArray.empty((size,), np.uint8, dev, tag=f"t{i}")
            val = i % 251
            dev.memset(arr.ptr, val, size)
            live[i] = (arr, val)
    for arr, val in live.values():
        assert (np.asarray(arr) == val).all()
    s = bc.memory_stats(dev)
    assert s["active_blocks"] >= len(live) and s["reserved_bytes"] >= s["allocated_bytes"]
    live.clear()
    gc.collect()
    before = bc.memory_stats(dev)["reserved_bytes"]
    bc.empty_cache(dev)
    after = bc.memory_stats(dev)
    assert after["reserved_bytes"] < before and after["num_backing_frees"] > 0


def test_out_of_memory_lists_largest_buffers(dev):
    keep = bc.DeviceArray.empty((256, 2**20), np.uint8, dev, tag="kept 256 MiB")
    total = dev.properties.total_memory
    with pytest.raises(bc.CudaOutOfMemoryError) as info:
        bc.DeviceArray.empty((2 * total,), np.uint8, dev, tag="far too big")
    assert "far too big" in str(info.value) and "kept 256 MiB" in str(info.value)
    assert bc.memory_stats(dev)["num_ooms"] >= 1
    del keep


def test_peak_memory_matches_torch_counting(dev):
    bc.empty_cache(dev)
    bc.reset_peak_memory_stats(dev)
    base = bc.memory_stats(dev)["allocated_bytes"]
    a = bc.DeviceArray.empty((1000, 1000), np.float32, dev)
    b = bc.DeviceArray.empty((10,), np.float32, dev)
    peak = bc.max_memory_allocated(dev) - base
    assert peak == 4_000_256 + 512  # rounded to 512 bytes, as PyTorch's allocator does
    del a, b


# ---- cuBLASLt ----------------------------------------------------------------------------------


def test_nvmath_enums_match_blu_constants():
    from nvmath.bindings import cublasLt as L

    for name, (code, dt) in lt.DESC.items():
        attr = getattr(L.MatmulDescAttribute, name)
        assert int(attr) == code and np.dtype(L.get_matmul_desc_attribute_dtype(attr)) == dt
    for name, (code, dt) in lt.LAYOUT.items():
        attr = getattr(L.MatrixLayoutAttribute, name)
        assert int(attr) == code and np.dtype(L.get_matrix_layout_attribute_dtype(attr)) == dt
    for name, (code, dt) in lt.PREF.items():
        attr = getattr(L.MatmulPreferenceAttribute, name)
        assert int(attr) == code and np.dtype(L.get_matmul_preference_attribute_dtype(attr)) == dt
    names = {"none": "DEFAULT", "bgrad_rhs": "BGRADA", "bgrad_lhs": "BGRADB"}
    for ours, value in lt.EPILOGUES.items():
        assert int(getattr(L.Epilogue, names.get(ours, ours.upper()))) == value
    import nvmath
    from nvmath.bindings import cublas

    for name, value in lt.COMPUTE.items():
        assert int(getattr(cublas.ComputeType, f"COMPUTE_{name}")) == value
    for name, value in lt.CUDA_R.items():
        code = {"float32": "32F", "float64": "64F", "float16": "16F", "bfloat16": "16BF"}[name]
        assert int(getattr(nvmath.CudaDataType, f"CUDA_R_{code}")) == value


CASES = [
    # (lhs shape, rhs shape, dimension numbers)
    ((128, 256), (256, 192), DN),  # x @ w
    ((128, 256), (192, 256), (((1,), (1,)), ((), ()))),  # x @ w.T (TRANSA)
    ((256, 128), (256, 192), (((0,), (0,)), ((), ()))),  # x.T @ y (TRANSB)
    ((4, 64, 96), (4, 96, 80), (((2,), (1,)), ((0,), (0,)))),  # batched
    ((4, 96, 64), (4, 80, 96), (((1,), (2,)), ((0,), (0,)))),  # batched, both transposed
    ((2, 3, 32, 48), (2, 3, 48, 40), (((3,), (2,)), ((0, 1), (0, 1)))),  # two batch dims
]
TOL = {"fp32": 1e-5, "tf32": 3e-3, "bf16": 2e-2}


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_cublaslt_products(dev, case, precision):
    from blu.cuda.products import dot_general

    ls, rs, dn = CASES[case]
    lhs, rhs = fresh(ls, 10 + case), fresh(rs, 20 + case)
    ref = _ref(lhs, rhs, dn)
    if precision == "bf16":  # bf16 operands, fp32 accumulation and output
        l16, r16 = lhs.astype(ml_dtypes.bfloat16), rhs.astype(ml_dtypes.bfloat16)
        out = dot_general(
            bc.device_put(l16, dev), bc.device_put(r16, dev), dn, preferred_element_type=np.float32
        )
        out16 = dot_general(bc.device_put(l16, dev), bc.device_put(r16, dev), dn)
        assert out16.dtype == ml_dtypes.bfloat16 and rel_err(out16, ref) < TOL["bf16"]
    else:
        out = dot_general(bc.device_put(lhs, dev), bc.device_put(rhs, dev), dn, precision=precision)
    assert out.dtype == np.float32
    err = rel_err(out, ref)
    assert err < TOL[precision], err


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_cublaslt_adds_another_c(dev, dtype):
    # D = A B + C, C apart from D (the plan's dot_acc): C stays, D has the sum; with its search
    lhs, rhs, c = fresh((256, 512), 32, dtype), fresh((512, 192), 33, dtype), fresh((256, 192), 34)
    dl, dr = bc.device_put(lhs, dev), bc.device_put(rhs, dev)
    dc = bc.device_put(c.astype(np.float32), dev)
    out = bc.DeviceArray.empty((256, 192), np.float32, dev)
    dev.matmul_handle().matmul(lt.gemm_spec(lhs.shape, rhs.shape, DN), dr.ptr, dl.ptr, out.ptr,
                               in_dtype=dtype, out_dtype=np.float32, precision="fp32",
                               accumulate=True, c_ptr=dc.ptr)  # fmt: skip
    want = lhs.astype(np.float64) @ rhs.astype(np.float64) + c
    assert rel_err(out, want) < 1e-5
    np.testing.assert_array_equal(np.asarray(dc), c.astype(np.float32))


def test_strict_fp32_is_not_tf32(dev):
    from blu.cuda.products import dot_general

    lhs, rhs = fresh((256, 512), 30), fresh((512, 256), 31)
    ref = lhs.astype(np.float64) @ rhs
    e32 = rel_err(
        dot_general(bc.device_put(lhs, dev), bc.device_put(rhs, dev), DN, precision="fp32"), ref
    )
    etf = rel_err(
        dot_general(bc.device_put(lhs, dev), bc.device_put(rhs, dev), DN, precision="tf32"), ref
    )
    assert e32 < 1e-6 < etf, (e32, etf)
    with blu.config.override(default_matmul_precision="tf32"):
        ed = rel_err(dot_general(bc.device_put(lhs, dev), bc.device_put(rhs, dev), DN), ref)
    assert ed > 1e-6


@pytest.mark.parametrize("N", [192, 70])  # 70: the GELU aux matrix has padded rows (ld 72)
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_cublaslt_epilogues(dev, N, dtype):
    from blu.cuda.products import dot_general

    M, K = 96, 128
    tol = 1e-5 if dtype == np.float32 else 2e-2
    x, w, b = fresh((M, K), 40, dtype), fresh((K, N), 41, dtype), fresh(N, 42, dtype)
    x64, w64, b64 = (a.astype(np.float64) for a in (x, w, b))
    put = lambda a: bc.device_put(a, dev)  # noqa: E731
    pre = x64 @ w64 + b64
    out = dot_general(put(x), put(w), DN, epilogue="bias", bias=put(b), precision="fp32")
    assert rel_err(out, pre) < tol
    out = dot_general(put(x), put(w), DN, epilogue="gelu", precision="fp32")
    assert rel_err(out, lt.gelu_tanh(x64 @ w64)) < tol
    out, aux = dot_general(
        put(x), put(w), DN, epilogue="gelu_aux_bias", bias=put(b), precision="fp32"
    )
    assert aux.shape == (M, -(-N // 8) * 8)
    assert rel_err(out, lt.gelu_tanh(pre)) < tol
    assert rel_err(np.asarray(aux)[:, :N], pre) < tol
    # backward through the GELU: dpre = (dy @ w2.T) * gelu'(pre), db = dpre.sum(0)
    C = 64
    w2, dy = fresh((N, C), 43, dtype), fresh((M, C), 44, dtype)
    want = (dy.astype(np.float64) @ w2.astype(np.float64).T) * lt.gelu_tanh_grad(
        np.asarray(aux)[:, :N].astype(np.float64)
    )
    dpre, db = dot_general(
        put(dy),
        put(w2),
        (((1,), (1,)), ((), ())),
        epilogue="dgelu_bgrad",
        aux=aux,
        precision="fp32",
    )
    assert rel_err(dpre, want) < tol * 5
    assert rel_err(db, want.sum(0)) < tol * 5
    # weight and bias gradients: dw = x.T @ dpre with db from the rhs
    dp = want.astype(dtype)
    dw, db2 = dot_general(
        put(x), put(dp), (((0,), (0,)), ((), ())), epilogue="bgrad_rhs", precision="fp32"
    )
    assert rel_err(dw, x64.T @ dp.astype(np.float64)) < tol
    assert rel_err(db2, dp.astype(np.float64).sum(0)) < tol


def test_cublaslt_plan_cache_and_host_overhead(dev):
    from blu.cuda.products import dot_general

    x = bc.device_put(fresh((1024, 768), 50, ml_dtypes.bfloat16), dev)
    w = bc.device_put(fresh((768, 3072), 51, ml_dtypes.bfloat16), dev)
    out = bc.DeviceArray.empty((1024, 3072), ml_dtypes.bfloat16, dev)
    h = dev.matmul_handle()
    for _ in range(5):
        dot_general(x, w, DN, out=out)
    q = h.num_heuristic_queries
    dev.synchronize()
    t = time.perf_counter()
    for _ in range(200):
        dot_general(x, w, DN, out=out)
    host_us = (time.perf_counter() - t) / 200 * 1e6
    dev.synchronize()
    gpu = driver.Event.create(), driver.Event.create()
    gpu[0].record(dev.stream)
    for _ in range(200):
        h.matmul(
            lt.gemm_spec(x.shape, w.shape, DN),
            w.ptr,
            x.ptr,
            out.ptr,
            in_dtype=x.dtype,
            out_dtype=out.dtype,
            stream=dev.stream_id,
        )
    gpu[1].record(dev.stream)
    gpu[1].synchronize()
    print(
        f"\nbf16 1024x768x3072: dot_general {host_us:.1f} us host per call; "
        f"{gpu[0].elapsed_ms(gpu[1]) / 200 * 1000:.1f} us per product on the GPU"
    )
    assert h.num_heuristic_queries == q  # no re-planning
    assert host_us < 150  # nvmath's high-level API: ~400 us


# ---- DLPack interop ----------------------------------------------------------------------------


def test_dlpack_with_torch(dev):
    torch = pytest.importorskip("torch")
    x = bc.device_put(np.arange(12, dtype=np.float32).reshape(3, 4), dev)
    t = torch.from_dlpack(x)
    assert t.is_cuda and t.data_ptr() == x.ptr and t.shape == (3, 4)
    assert torch.equal(t.cpu(), torch.arange(12, dtype=torch.float32).reshape(3, 4))
    tt = torch.arange(6, dtype=torch.bfloat16, device="cuda").reshape(2, 3) * 2
    y = bc.from_dlpack(tt)
    assert y.ptr == tt.data_ptr() and y.dtype == ml_dtypes.bfloat16
    assert np.array_equal(np.asarray(y).astype(np.float32), np.arange(6).reshape(2, 3) * 2)
    with pytest.raises(blu.core.errors.BluValueError, match="contiguous"):
        bc.from_dlpack(torch.ones(3, 4, device="cuda").T)


def test_dlpack_with_cupy(dev):
    cp = pytest.importorskip("cupy")
    x = bc.device_put(np.arange(10, dtype=np.int32), dev)
    c = cp.from_dlpack(x)
    assert int(c.data.ptr) == x.ptr and cp.asnumpy(c).tolist() == list(range(10))
    y = bc.from_dlpack(cp.arange(5, dtype=cp.float64))
    assert np.array_equal(np.asarray(y), np.arange(5.0))


# ---- profiling ---------------------------------------------------------------------------------


def test_profiler_times_kernels(dev, module):
    from blu.cuda.profile import Profiler

    prof = Profiler(enabled=True)
    n = 1 << 22
    a = bc.DeviceArray.empty((n,), np.float32, dev)
    add = module.function("add_f32")
    for _ in range(20):
        with prof.region("add_f32 f32[4194304]", dev.stream):
            add.launch(n // 256, 256, [a.ptr, a.ptr, a.ptr, np.uint32(n)], stream=dev.stream)
    rows = prof.summary()
    assert rows[0]["calls"] == 20 and 0.5 < rows[0]["mean_us"] < 10_000
    print("\n" + prof.table())


def _ref(lhs, rhs, dn):
    (lc, rc), (lb, rb) = dn
    lf = [d for d in range(lhs.ndim) if d not in lc and d not in lb]
    rf = [d for d in range(rhs.ndim) if d not in rc and d not in rb]
    sz = lambda x, ax: int(np.prod([x.shape[a] for a in ax]))  # noqa: E731
    B, M, N, K = sz(lhs, lb), sz(lhs, lf), sz(rhs, rf), sz(lhs, lc)
    l3 = np.transpose(lhs, lb + tuple(lf) + lc).astype(np.float64).reshape(B, M, K)
    r3 = np.transpose(rhs, rb + tuple(rc) + tuple(rf)).astype(np.float64).reshape(B, K, N)
    shape = [lhs.shape[d] for d in lb] + [lhs.shape[d] for d in lf] + [rhs.shape[d] for d in rf]
    return (l3 @ r3).reshape(shape)
