"""The GPU runtime's CPU-testable parts: import without CUDA, driver error mapping, kernel
parameter packing, DeviceArray / device_put / DLPack on a simulated device (real host memory),
memory statistics, the out-of-memory report, and the BLU_PROFILE table."""

from __future__ import annotations

import ctypes
import gc
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from helpers import shapes
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.cuda as bc
from blu.core.errors import BluError, BluTypeError, BluValueError
from blu.cuda import dlpack, driver
from blu.cuda.allocator import round_size
from blu.cuda.errors import CudaError, CudaOutOfMemoryError
from blu.cuda.fake import FakeDevice
from blu.cuda.profile import Profiler

DTYPES = [
    np.float32,
    np.float64,
    ml_dtypes.bfloat16,
    np.float16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint32,
    np.bool_,
]


def values(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        return rng.integers(0, 100, shape).astype(dt)
    return rng.standard_normal(shape).astype(dt)


# ---- no CUDA here ------------------------------------------------------------------------------


def test_import_blu_loads_no_cuda_library():
    code = (
        "import sys, blu, blu.cuda; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('cuda', 'nvmath')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_is_available_false_without_gpu_or_package(monkeypatch):
    if bc.is_available():
        pytest.skip("a GPU is present")
    assert bc.devices() == [] and bc.device_count() == 0
    # without cuda-python at all
    monkeypatch.setattr(driver, "_drv", None)
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", None)
    assert bc.is_available.__wrapped__() is False
    with pytest.raises(bc.CudaUnavailableError, match="cuda-python"):
        driver.drv()
    with pytest.raises(bc.CudaUnavailableError):
        bc.device_put(np.ones(3))


# ---- driver helpers ----------------------------------------------------------------------------


def test_check_unpacks_and_names_the_failing_call():
    assert driver.check((0,), "cuCtxSynchronize") is None
    assert driver.check((0, 7), "cuDeviceGetCount") == 7
    assert driver.check((0, 1, 2), "cuMemGetInfo") == (1, 2)
    assert driver.check(0, "cuStreamSynchronize") is None
    with pytest.raises(CudaError) as info:
        driver.check((700, None), "cuLaunchKernel")
    assert info.value.call == "cuLaunchKernel" and info.value.code == 700
    assert "cuLaunchKernel failed" in str(info.value) and isinstance(info.value, BluError)
    with pytest.raises(CudaOutOfMemoryError, match="cuMemAlloc"):
        driver.check((2, None), "cuMemAlloc")


def test_pack_args_slots_and_pointers():
    slots, ptrs = driver.pack_args([0x7F0000001000, 5, 0])
    assert slots.tolist() == [0x7F0000001000, 5, 0]
    assert ptrs.tolist() == [slots.ctypes.data + 8 * i for i in range(3)]
    slots, ptrs = driver.pack_args([np.int32(-3), np.float32(1.5), -2, np.uint64(2**63), 9])
    raw = slots.view(np.uint8)
    assert np.frombuffer(raw[0:4].tobytes(), np.int32)[0] == -3
    assert np.frombuffer(raw[8:12].tobytes(), np.float32)[0] == 1.5
    assert np.frombuffer(raw[16:24].tobytes(), np.int64)[0] == -2
    assert slots[3] == 2**63 and slots[4] == 9
    # the driver reads each parameter through its pointer
    assert ctypes.c_float.from_address(int(ptrs[1])).value == 1.5
    with pytest.raises(BluTypeError, match="numpy scalar"):
        driver.pack_args([1.5])
    with pytest.raises(BluTypeError):
        driver.pack_args([np.complex128(1)])
    assert driver.pack_args([])[0].size == 1


def test_dim3():
    assert driver._dim3(5) == (5, 1, 1)
    assert driver._dim3((2, 3)) == (2, 3, 1)
    with pytest.raises(BluTypeError):
        driver._dim3((0, 1))
    with pytest.raises(BluTypeError):
        driver._dim3((1, 1, 1, 1))


# ---- DeviceArray on a simulated device ---------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@given(shape=shapes(0, 3, 0, 5))
def test_device_put_round_trip(dtype, shape):
    dev = FakeDevice()
    x = values(shape, dtype)
    y = bc.device_put(x, dev)
    assert isinstance(y, bc.DeviceArray) and y.shape == x.shape and y.dtype == x.dtype
    assert y.aval.shape == x.shape and y.nbytes == x.nbytes and y.device is dev
    back = np.asarray(y)
    assert back.dtype == x.dtype and np.array_equal(back, x)
    s = bc.memory_stats(dev)
    assert s["allocated_bytes"] == round_size(x.nbytes) and s["active_blocks"] == 1
    assert np.array_equal(np.asarray(y.copy()), x)
    del y, back
    gc.collect()
    assert bc.memory_stats(dev)["allocated_bytes"] == 0


def test_device_put_pytree_scalars_and_blu_arrays():
    dev = FakeDevice()
    tree = {"w": np.ones((2, 3), np.float32), "b": [blu.numpy.arange(4), 2.5]}
    out = bc.device_put(tree, dev)
    assert isinstance(out["w"], bc.DeviceArray) and out["w"].shape == (2, 3)
    assert np.array_equal(np.asarray(out["b"][0]), np.arange(4))
    assert float(out["b"][1]) == 2.5 and out["b"][1].shape == ()
    assert bc.device_put(out["w"], dev) is out["w"]  # already there
    other = bc.device_put(out["w"], FakeDevice(1))
    assert other.device is not dev and np.array_equal(np.asarray(other), np.ones((2, 3)))


def test_dispatch_is_asynchronous_until_read():
    dev = FakeDevice()
    x = bc.device_put(np.arange(6.0), dev)
    y = bc.device_put(np.arange(6.0), dev)
    assert dev.num_syncs == 0 and not dev.backing.idle(dev.stream_id)
    assert x.block_until_ready() is x and dev.num_syncs == 1
    assert dev.backing.idle(dev.stream_id)
    np.asarray(y)
    assert dev.num_syncs == 2


def test_delete_and_repr():
    dev = FakeDevice()
    x = bc.device_put(np.array([1.5, 2.0], np.float32), dev)
    assert "1.5" in repr(x) and "fake:0" in repr(x)
    assert np.asarray(x)[0] == 1.5 and len(x) == 2
    x.delete()
    assert x.is_deleted() and "deleted" in repr(x)
    assert bc.memory_stats(dev)["allocated_bytes"] == 0
    with pytest.raises(BluValueError, match="deleted"):
        np.asarray(x)
    x.delete()  # twice is harmless


def test_memory_stats_api_and_oom_report():
    dev = FakeDevice(capacity=8 * 2**20)
    a = bc.device_put(np.zeros((1024, 1024), np.float32), dev, tag="params")
    b = bc.device_put(np.zeros((512, 1024), np.float32), dev)
    assert bc.max_memory_allocated(dev) == 6 * 2**20
    del b
    gc.collect()
    bc.reset_peak_memory_stats(dev)
    assert bc.max_memory_allocated(dev) == 4 * 2**20
    with pytest.raises(CudaOutOfMemoryError) as info:
        bc.DeviceArray.empty((2048, 1024), np.float32, dev, tag="activations f32[2048,1024]")
    msg = str(info.value)
    assert "activations f32[2048,1024]" in msg and "params" in msg and "fake:0" in msg
    assert bc.memory_stats(dev)["num_ooms"] == 1
    assert "params" in bc.memory_summary(dev)
    del a
    gc.collect()
    bc.empty_cache(dev)
    assert bc.memory_stats(dev)["reserved_bytes"] == 0


# ---- DLPack ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d is not ml_dtypes.bfloat16], ids=str)
def test_dlpack_export_to_numpy_zero_copy(dtype):
    dev = FakeDevice()
    x = values((3, 4), dtype, seed=1)
    d = bc.device_put(x, dev)
    assert d.__dlpack_device__() == (dlpack.kDLCPU, 0)
    before = dlpack.live_exports()
    view = np.from_dlpack(d)
    assert np.array_equal(view, x) and view.ctypes.data == d.ptr
    assert dlpack.live_exports() == before + 1
    del d
    gc.collect()
    assert bc.memory_stats(dev)["allocated_bytes"] > 0  # numpy still holds it
    assert np.array_equal(view, x)
    del view
    gc.collect()
    assert dlpack.live_exports() == before
    assert bc.memory_stats(dev)["allocated_bytes"] == 0


def test_unconsumed_capsule_releases_its_array():
    dev = FakeDevice()
    d = bc.device_put(np.ones(5), dev)
    before = dlpack.live_exports()
    cap = d.__dlpack__()
    assert dlpack.live_exports() == before + 1
    del cap
    gc.collect()
    assert dlpack.live_exports() == before


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_dlpack_round_trip_between_device_arrays(dtype):
    dev = FakeDevice()
    x = values((2, 3, 2), dtype, seed=2)
    d = bc.device_put(x, dev)
    e = bc.from_dlpack(d, dev)
    assert e.ptr == d.ptr and e.dtype == d.dtype and e.shape == d.shape
    assert np.array_equal(np.asarray(e), x)


def test_dlpack_import_from_numpy_shares_memory_and_releases():
    dev = FakeDevice()
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    refs = sys.getrefcount(x)
    d = bc.from_dlpack(x, dev)
    assert d.ptr == x.ctypes.data and d.shape == (3, 4)
    x[1, 2] = -7.0
    assert np.asarray(d)[1, 2] == -7.0
    assert sys.getrefcount(x) > refs
    del d
    gc.collect()
    assert sys.getrefcount(x) == refs
    with pytest.raises(BluValueError, match="C-contiguous"):
        bc.from_dlpack(np.ones((3, 4)).T, dev)
    cap = np.ones(3).__dlpack__()
    dlpack.from_capsule(cap)
    with pytest.raises(BluValueError, match="consumed"):
        dlpack.from_capsule(cap)


def test_dlpack_export_orders_consumer_stream():
    class StreamedFake(FakeDevice):
        def export_stream(self, stream):
            return stream  # as a GPU: the consumer's stream waits for ours

    dev = StreamedFake()
    d = bc.device_put(np.ones(100), dev)
    ptr = d.ptr
    dev.backing.submit(5)  # the consumer queues work reading d on stream 5
    cap = d.__dlpack__(stream=5)
    del d
    np.from_dlpack(_Capsule(cap, dev))  # consume and drop
    gc.collect()
    assert bc.memory_stats(dev)["pending_blocks"] == 1
    assert bc.DeviceArray.empty((100,), np.float64, dev).ptr != ptr  # stream 5 may still read
    dev.backing.complete(5)
    assert bc.DeviceArray.empty((100,), np.float64, dev).ptr == ptr


class _Capsule:
    """Wraps a capsule so np.from_dlpack can consume it."""

    def __init__(self, cap, dev):
        self.cap, self.dev = cap, dev

    def __dlpack__(self, **kw):
        return self.cap

    def __dlpack_device__(self):
        return self.dev.dlpack_device


def test_dlpack_dtype_codes():
    for dt in DTYPES:
        assert dlpack.np_dtype(*dlpack.dl_dtype(dt)) == np.dtype(dt)
    assert dlpack.dl_dtype(ml_dtypes.bfloat16) == (4, 16)
    assert dlpack.dl_dtype(np.bool_) == (6, 8)
    with pytest.raises(BluTypeError):
        dlpack.dl_dtype(np.dtype("U3"))
    with pytest.raises(BluTypeError):
        dlpack.np_dtype(2, 32, lanes=4)


# ---- profiling ---------------------------------------------------------------------------------


class _FakeClockEvent:
    clock = [0.0]

    def record(self, stream):
        self.t = self.clock[0]
        return self

    def synchronize(self):
        pass

    def elapsed_ms(self, end):
        return end.t - self.t


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["fused_add", "cublasLt f32[4,4]", "softmax"]), st.floats(0.001, 5.0)
        ),
        max_size=20,
    )
)
def test_profiler_table(regions):
    prof = Profiler(enabled=True, event_factory=_FakeClockEvent)
    expect: dict[str, list[float]] = {}
    for name, ms in regions:
        with prof.region(name, stream=0):
            _FakeClockEvent.clock[0] += ms
        expect.setdefault(name, []).append(ms)
    rows = prof.summary()
    assert [r["name"] for r in rows] == sorted(expect, key=lambda n: -sum(expect[n]))
    for r in rows:
        t = expect[r["name"]]
        assert r["calls"] == len(t)
        assert r["total_ms"] == pytest.approx(sum(t))
        assert r["mean_us"] == pytest.approx(1000 * sum(t) / len(t))
        assert r["max_us"] == pytest.approx(1000 * max(t))
    if rows:
        assert sum(r["percent"] for r in rows) == pytest.approx(100)
        assert rows[0]["name"] in prof.table()
    else:
        assert "nothing" in prof.table()
    # pooled events are reused
    n_pool = len(prof._pool)
    with prof.region("x", 0):
        pass
    assert len(prof._pool) == max(n_pool - 2, 0)


def test_profiler_disabled_records_nothing():
    prof = Profiler(enabled=False, event_factory=lambda: pytest.fail("no events when disabled"))
    with prof.region("k", 0):
        pass
    assert prof.summary() == []


# ---- the driver wrappers against a recording stand-in of cuda.bindings.driver ------------------


class _Enum:
    def __getattr__(self, name):
        return 1


class _Handle(int):
    pass


class _FakeDriver:
    """Answers every ``cu*`` call with success (and plausible values), recording the calls; with
    cuda-python installed, each call's argument count is checked against the real signature."""

    RETURNS = {
        "cuDeviceGetCount": (1,),
        "cuDeviceGetName": (b"Fake GPU\0\0\0",),
        "cuDeviceGetAttribute": (9,),
        "cuDeviceTotalMem": (80 * 2**30,),
        "cuDriverGetVersion": (13000,),
        "cuMemAlloc": (_Handle(0x10000),),
        "cuMemGetInfo": (2**30, 2**31),
        "cuEventElapsedTime": (1.25,),
        "cuGraphGetNodes": ([], 4),
        "cuFuncGetAttribute": (32,),
    }

    def __init__(self):
        self.calls = []
        try:
            from cuda.bindings import driver as real
        except ImportError:
            real = None
        self.real = real
        for name in (
            "CUstream_flags",
            "CUevent_flags",
            "CUdevice_attribute",
            "CUstreamCaptureMode",
            "CUfunction_attribute",
        ):
            setattr(self, name, _Enum())

    CUstream = _Handle
    CUdeviceptr = _Handle

    def __getattr__(self, name):
        if not name.startswith("cu"):
            raise AttributeError(name)

        def fn(*args):
            self.calls.append((name, args))
            if self.real is not None:
                sig = getattr(self.real, name).__doc__.split("\n", 1)[0]
                params = sig[sig.index("(") + 1 : sig.rindex(")")]
                n = len([p for p in params.split(",") if p.strip()])
                assert len(args) == n, f"{name} takes {n} arguments ({sig}), got {len(args)}"
            return (0, *self.RETURNS.get(name, (_Handle(len(self.calls)),)))

        return fn


def test_driver_wrappers_call_the_driver_api(monkeypatch):
    fake = _FakeDriver()
    monkeypatch.setattr(driver, "_drv", fake)
    monkeypatch.setattr(driver, "_initialized", False)
    monkeypatch.setattr(driver.Context, "_by_ordinal", {})
    monkeypatch.setattr(driver.Context, "_current", __import__("threading").local())
    assert driver.device_count() == 1 and driver.driver_version() == 13000
    props = driver.device_properties(0)
    assert props.name == "Fake GPU" and props.compute_capability == (9, 9)
    assert props.arch == "sm_99" and props.total_memory == 80 * 2**30
    ctx = driver.Context.get(0)
    assert driver.Context.get(0) is ctx and ctx.mem_info() == (2**30, 2**31)
    s = driver.Stream.create()
    ev, ev2 = driver.Event.create(), driver.Event.create(timing=False)
    ev.record(s)
    ev2.record(None)
    assert ev.elapsed_ms(ev2) == 1.25 and ev.query() and s.query()
    s.wait_event(ev)
    s.wait_stream(driver.Stream.legacy_default())
    s.synchronize()
    m = driver.Module(".version 8.0\n", name="k")
    f = m.function("add")
    assert m.function("add") is f
    f.launch((4, 2), 128, [0x1000, np.uint32(7)], shared_mem=64, stream=s)
    f.set_max_dynamic_shared_memory(100_000)
    assert f.attribute("NUM_REGS") == 32
    host = np.arange(4, dtype=np.float32)
    driver.memcpy_htod_async(0x2000, host, s)
    driver.memcpy_dtoh_async(host, 0x2000, s)
    driver.memcpy_dtod_async(0x3000, 0x2000, 16, s)
    driver.memset_d8_async(0x3000, 0, 16, s)
    driver.memset_d32_async(0x3000, 0, 4, s)
    assert driver.mem_alloc(512) == 0x10000
    driver.mem_free(0x10000)
    from blu.cuda.graph import Graph

    g = Graph()
    with g.capture(s):
        f.launch(1, 1, [0x1000, np.uint32(1)], stream=s)
    assert g.num_nodes() == 4
    g.replay(s)
    g.destroy()
    m.unload()
    ev.destroy()
    s.destroy()
    names = [c[0] for c in fake.calls]
    for expected in (
        "cuInit",
        "cuDevicePrimaryCtxRetain",
        "cuCtxSetCurrent",
        "cuStreamCreateWithPriority",
        "cuModuleLoadData",
        "cuModuleGetFunction",
        "cuLaunchKernel",
        "cuStreamBeginCapture",
        "cuStreamEndCapture",
        "cuGraphInstantiate",
        "cuGraphLaunch",
        "cuMemcpyHtoDAsync",
    ):
        assert expected in names
    launch = next(args for n, args in fake.calls if n == "cuLaunchKernel")
    assert launch[1:8] == (4, 2, 1, 128, 1, 1, 64)
    assert isinstance(launch[9], int) and launch[10] == 0  # address of the parameter pointers
    data = next(args for n, args in fake.calls if n == "cuModuleLoadData")[0]
    assert data.endswith(b"\0")  # PTX text is NUL-terminated


def test_cuda_backing_maps_out_of_memory(monkeypatch):
    from blu.cuda.device import CudaBacking
    from blu.cuda.errors import BackingOutOfMemory

    fake = _FakeDriver()
    monkeypatch.setattr(driver, "_drv", fake)
    monkeypatch.setattr(driver, "_initialized", True)
    monkeypatch.setattr(driver.Context, "_current", __import__("threading").local())
    ctx = driver.Context.__new__(driver.Context)
    ctx.ordinal, ctx.handle = 0, _Handle(1)
    backing = CudaBacking(ctx, "cuda:0")
    assert backing.malloc(1 << 20) == 0x10000
    fake.RETURNS = {**fake.RETURNS}
    monkeypatch.setattr(fake, "cuMemAlloc", lambda n: (2, None), raising=False)
    with pytest.raises(BackingOutOfMemory, match="cuMemAlloc"):
        backing.malloc(1 << 40)
    ev = backing.record_event(5)
    assert backing.event_done(ev)
    backing.release_event(ev)
    assert backing.record_event(6) is ev  # pooled
    assert "GiB free" in backing.describe()
