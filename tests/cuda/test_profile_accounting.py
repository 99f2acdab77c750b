"""The profile's accounting (issue #18): each kernel's minimal bytes and its fraction of the copy
bandwidth, each product's fraction of the tensor-core peak of its precision, and the host time
per call of a GPU program; on stand-in events and on the simulated GPU (``BLU_FAKE_GPU``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu.cuda import profile as cuda_profile
from blu.cuda.profile import H200, Profiler, compute_class, peaks_for

ROOT = Path(__file__).resolve().parents[2]


class _Clock:
    """A stand-in CUDA event on a clock the test advances (milliseconds)."""

    now = [0.0]

    def record(self, stream):
        self.t = self.now[0]

    def synchronize(self):
        pass

    def elapsed_ms(self, end):
        return end.t - self.t


def _summarizer():
    spec = importlib.util.spec_from_file_location("summarize_trace", ROOT / "scripts" /
                                                  "summarize_trace.py")  # fmt: skip
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_peaks_by_device_name_and_compute_class():
    assert peaks_for("NVIDIA H200").copy_gb_per_s == 4000.0
    assert peaks_for("NVIDIA H100 80GB HBM3").device == "H100"
    assert peaks_for("fake") is H200  # unknown devices are compared with the H200
    assert compute_class("bfloat16", "fp32") == "bf16"
    assert compute_class("float16", "default") == "bf16"
    assert compute_class("float32", "tf32") == "tf32" and compute_class("float32", "high") == "tf32"
    assert compute_class("float32", "fp32") == "fp32" and compute_class("float32", "bf16") == "bf16"
    assert compute_class("float64", "highest") == "fp64"
    assert H200.tflops["bf16"] == 989.0 and H200.tflops["tf32"] == 494.0


def test_rates_are_the_median_calls_not_a_slow_first_call():
    # a program's first call plans its products (and times their algorithms): 100x slower
    prof = Profiler(enabled=True, event_factory=_Clock)
    nbytes = 400_000_000
    for ms in (100.0, 1.0, 1.0, 1.2, 0.9):
        with prof.region("kernel", 0, nbytes=nbytes):
            _Clock.now[0] += ms
    (row,) = prof.summary()
    assert row["gb_per_s"] == pytest.approx(nbytes / 1e-3 / 1e9)  # the median call: 1.0 ms
    assert row["total_ms"] == pytest.approx(104.1) and row["min_us"] == pytest.approx(900.0)


@pytest.mark.parametrize("ms", [0.25, 2.0])
def test_fractions_of_copy_bandwidth_and_tensor_core_peak(ms):
    prof = Profiler(enabled=True, event_factory=_Clock)
    nbytes, flops = 300_000_000, 4 * 10**12
    for _ in range(3):
        with prof.region("kernel", 0, nbytes=nbytes):
            _Clock.now[0] += ms
        with prof.region("gemm", 0, flops=flops, peak="bf16"):
            _Clock.now[0] += 2 * ms
        with prof.region("unknown", 0):
            _Clock.now[0] += ms
    rows = {r["name"]: r for r in prof.summary()}
    gbps = nbytes / (ms * 1e-3) / 1e9  # per call: bytes / seconds
    assert rows["kernel"]["gb_per_s"] == pytest.approx(gbps)
    assert rows["kernel"]["mb"] == pytest.approx(nbytes / 1e6)
    assert rows["kernel"]["fraction"] == pytest.approx(gbps / 4000.0)
    tflops = flops / (2 * ms * 1e-3) / 1e12
    assert rows["gemm"]["tflop_per_s"] == pytest.approx(tflops)
    assert rows["gemm"]["fraction"] == pytest.approx(tflops / 989.0)
    assert rows["unknown"]["fraction"] == 0.0 and rows["unknown"]["mb"] == 0.0
    table = prof.table()
    assert f"{100 * gbps / 4000:.0f}%" in table and "copy bandwidth" in table


def test_host_time_per_call():
    prof = Profiler(enabled=True, event_factory=_Clock)
    for gpu_ms in (3.0, 5.0):
        with prof.call("jit(step)", 0):
            with prof.region("k", 0, nbytes=10):
                _Clock.now[0] += gpu_ms
    (row,) = prof.calls_summary()
    assert row["name"] == "jit(step)" and row["calls"] == 2
    assert row["gpu_ms"] == pytest.approx(4.0)
    assert 0 <= row["host_ms"] < 1000
    assert row["host_share"] == pytest.approx(row["host_ms"] / 4.0)
    assert "host time per call of jit(step)" in prof.table()
    prof.reset()
    assert prof.calls_summary() == []


def test_disabled_call_records_nothing():
    prof = Profiler(enabled=False, event_factory=lambda: pytest.fail("no events when disabled"))
    with prof.call("jit(f)", 0):
        pass
    assert prof.calls_summary() == []


def test_simulated_gpu_program_reports_minimal_bytes_flops_and_host_time(tmp_path, set_flag):
    """On blu.cuda.fake's device: a kernel's minimal bytes are its inputs and outputs once
    (computed here from the shapes), a product's FLOPs 2 m n k, one host-time row per call."""
    set_flag("fake_gpu", True)
    import blu.cuda as bc

    m, k, n = 16, 32, 8

    def f(x, w):
        return bnp.sum(bnp.tanh(x @ w) * 2.0, axis=1)

    g = blu.jit(f)
    x = np.linspace(-1, 1, m * k, dtype=np.float32).reshape(m, k)
    w = np.linspace(0, 1, k * n, dtype=np.float32).reshape(k, n)
    dx, dw = bc.device_put(x), bc.device_put(w)
    g(dx, dw)  # compiled outside the profile
    prof = cuda_profile.profiler
    was = prof.enabled
    prof.reset()
    try:
        with blu.profiler.trace(tmp_path / "t.json") as writer:
            out = g(dx, dw)
        want = np.sum(np.tanh(x.astype(np.float64) @ w) * 2.0, axis=1)
        np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5)
        prof.enabled = True
        rows = prof.summary()
        calls = prof.calls_summary()
    finally:
        prof.enabled = was
        prof.reset()
    dot = [r for r in rows if r["name"].startswith("cublasLt")]
    assert len(dot) == 1 and dot[0]["tflop_per_s"] > 0
    assert dot[0]["tflop_per_s"] * dot[0]["total_ms"] * 1e9 == pytest.approx(2 * m * k * n)
    kern = [r for r in rows if "tanh" in r["name"]]
    assert len(kern) == 1
    assert kern[0]["mb"] * 1e6 == pytest.approx(4 * (m * n + m))  # (m, n) in, (m,) out
    assert [c["calls"] for c in calls if c["name"].startswith("jit(")] == [1]
    ev = json.loads(writer.write().read_text())["traceEvents"]
    spans = [e for e in ev if e.get("cat") == "device"]
    assert all("bytes" in e["args"] and "peak" in e["args"] for e in spans)
    s = _summarizer()
    host = s.host_per_call(ev)
    assert len(host) == 1 and host[0]["calls"] == 1 and host[0]["name"].startswith("jit(")
    text = s.report(ev)
    assert "host time per call" in text and "of peak" in text


def test_summarizer_fractions_on_a_known_trace():
    def span(name, ts, dur, args=None, cat="device", pid=3):
        e = {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": pid, "tid": 1}
        if args:
            e["args"] = args
        return e

    kern = {"bytes": "2000000", "flops": "0", "peak": "4000 GB/s"}
    gemm = {"bytes": "10", "flops": "5000000000", "peak": "989 TFLOP/s"}
    events = [
        span("launch jit(step)", 0, 30, cat="launch", pid=1),
        span("k", 10, 1, kern), span("k", 20, 1, kern), span("mm", 22, 10, gemm),
        span("launch jit(step)", 100, 50, cat="launch", pid=1),
        span("k", 120, 1, kern), span("mm", 130, 10, gemm),
    ]  # fmt: skip
    s = _summarizer()
    rows = {r["name"]: r for r in s.top_kernels(events)}
    # 3 calls of 2 MB in 3 us: 2000 GB/s, half the 4000 GB/s peak
    assert rows["k"]["achieved"] == "2000 GB/s" and rows["k"]["fraction"] == pytest.approx(0.5)
    # 2 calls of 5 GFLOP in 20 us: 500 TFLOP/s
    assert rows["mm"]["fraction"] == pytest.approx(500 / 989)
    (c,) = s.host_per_call(events)
    assert c["calls"] == 2 and c["host_us"] == pytest.approx(40.0)
    assert c["gpu_us"] == pytest.approx(((32 - 10) + (140 - 120)) / 2)


def test_epilogue_products_are_rated_against_the_tensor_core_peak(set_flag):
    """A product with a cuBLASLt epilogue (a library call, ``dot_bias``) is a product in the
    profile: its FLOPs 2 m n k, compared with its precision's peak, not the copy bandwidth."""
    set_flag("fake_gpu", True)
    import blu.cuda as bc

    m, k, n = 16, 32, 8

    def f(x, w, b, w2):  # the sum only the next product reads: x @ w + b is one dot_bias
        return (x @ w + b) @ w2

    g = blu.jit(f)
    x, w, b, w2 = (np.linspace(-1, 1, np.prod(s), dtype=np.float32).reshape(s)
                   for s in ((m, k), (k, n), (n,), (n, 4)))  # fmt: skip
    args = [bc.device_put(a) for a in (x, w, b, w2)]
    g(*args)
    prof = cuda_profile.profiler
    was = prof.enabled
    prof.reset()
    prof.enabled = True
    try:
        g(*args)
        rows = prof.summary()
    finally:
        prof.enabled = was
        prof.reset()
    lib = [r for r in rows if r["name"].startswith("library[dot_bias]")]
    assert len(lib) == 1, [r["name"] for r in rows]
    assert lib[0]["tflop_per_s"] * lib[0]["total_ms"] * 1e9 == pytest.approx(2 * m * k * n)
    peak = H200.tflops[compute_class("float32", "fp32")]  # the product's rate over that peak
    assert lib[0]["fraction"] == pytest.approx(lib[0]["tflop_per_s"] / peak)
