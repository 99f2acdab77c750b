"""Timeline traces (blu.profiler.trace, Chrome trace JSON), the summarizer script, and
blu.print_environment_info, on the CPU."""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu.core import trace as tracing

ROOT = Path(__file__).resolve().parents[2]


def _summarizer():
    spec = importlib.util.spec_from_file_location("summarize_trace", ROOT / "scripts" /
                                                  "summarize_trace.py")  # fmt: skip
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _program():
    def f(x, w):
        h = bnp.tanh(x @ w)  # the user line each kernel's span names
        return bnp.sum(h * h)

    return blu.jit(f)


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "sub" / "t.trace.json"
    f = _program()
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)
    w = np.linspace(0, 1, 12, dtype=np.float32).reshape(4, 3)
    with blu.profiler.trace(path) as writer:
        outs = []
        for i in range(3):
            with blu.profiler.annotate("train step", step=i):
                outs.append(float(f(x, w)))
    assert tracing.current() is None and writer.events
    want = float(np.sum(np.tanh(x.astype(np.float64) @ w) ** 2))
    assert np.allclose(outs, want, rtol=1e-5)
    return path, json.loads(path.read_text())


def test_trace_is_chrome_trace_json_with_host_and_device_spans(traced):
    _, data = traced
    ev = data["traceEvents"]
    assert data["displayTimeUnit"] == "ms"
    for e in ev:  # the fields every event of the trace event format needs
        assert {"name", "ph", "pid"} <= set(e)
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["ts"] >= 0 and "tid" in e
    spans = [e for e in ev if e["ph"] == "X"]
    names = [e["name"] for e in spans]
    assert names.count("train step") == 3
    assert names.count("jit(f)") == 3  # one host span per jit call
    assert names.count("trace jit(f)") == 1  # traced once, then cached
    assert names.count("compile jit(f)") <= 1  # compiled once (or already by the process)
    steps = sorted((e for e in spans if e["name"] == "train step"), key=lambda e: e["ts"])
    assert [e["args"]["step"] for e in steps] == ["0", "1", "2"]
    device = [e for e in spans if e["cat"] == "device"]
    assert device and len(device) % 3 == 0  # the same steps each call
    for e in device:
        assert e["pid"] == tracing.EXECUTABLE
        assert e["args"]["kind"] in ("kernel", "dot", "view", "fallback", "scatter", "library",
                                     "pair", "chain", "streamed")  # fmt: skip
        assert "=" in e["args"]["eqns"]  # "f32[8,3] = tanh f32[8,3]"
    kinds = {e["args"]["kind"] for e in device}
    assert "dot" in kinds
    assert any("tanh" in e["args"]["eqns"] for e in device)
    assert all("test_profiler_trace.py" in e["args"]["source"] for e in device)
    # each call's device work lies inside its jit span and its step's span
    calls = sorted((e for e in spans if e["name"] == "jit(f)"), key=lambda e: e["ts"])
    for e in device:
        assert any(c["ts"] <= e["ts"] and e["ts"] + e["dur"] <= c["ts"] + c["dur"] + 1
                   for c in calls)  # fmt: skip
    counters = [e for e in ev if e["ph"] == "C"]
    assert len(counters) == 6 and all(e["name"] == "memory jit(f)" for e in counters)
    assert {tuple(sorted(e["args"])) for e in counters} == {("arrays", "temporaries")}
    meta = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert {"blu host", "blu CPU executable"} <= meta


def test_nothing_is_recorded_outside_a_trace(tmp_path):
    f = _program()
    x, w = np.ones((2, 4), np.float32), np.ones((4, 3), np.float32)
    with blu.profiler.trace(tmp_path / "a.json") as outer:
        f(x, w)
    n = len(outer.events)
    f(x, w)
    with blu.profiler.annotate("ignored"):
        f(x, w)
    assert len(outer.events) == n


def test_summarizer_on_a_trace_of_a_jitted_program(traced):
    path, data = traced
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "summarize_trace.py"), str(path)],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("top kernels by total time")
    assert "dot[dot_general]" in r.stdout and "host gaps between device work" in r.stdout
    rows = _summarizer().top_kernels(data["traceEvents"])
    device = [e for e in data["traceEvents"] if e.get("cat") == "device"]
    assert sum(r["calls"] for r in rows) == len(device)
    assert np.isclose(sum(r["total_us"] for r in rows), sum(e["dur"] for e in device))


def test_summarizer_numbers_on_a_known_trace(tmp_path):
    def span(name, ts, dur, cat="device", pid=3, tid=1):
        return {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": pid, "tid": tid}

    events = [
        span("step", 0, 100, cat="user", pid=1),
        span("compile jit(g)", 35, 10, cat="compile", pid=1),
        span("a", 0, 10), span("b", 12, 20), span("a", 40, 10),  # gaps 2 and 8
        span("a", 45, 10),  # overlaps the previous one: merged, no gap
        span("c", 5, 5, tid=2),  # another lane, no gap
    ]  # fmt: skip
    s = _summarizer()
    rows = s.top_kernels(events)
    assert [(r["name"], r["calls"], r["total_us"]) for r in rows] == [
        ("a", 3, 30.0), ("b", 1, 20.0), ("c", 1, 5.0)
    ]  # fmt: skip
    g = s.host_gaps(events)
    assert np.isclose(g["gap_us"], 2 + 8) and np.isclose(g["busy_us"], 10 + 20 + 15 + 5)
    assert g["span_us"] == 55
    assert [(round(x[1], 6), x[3]) for x in g["gaps"]] == [(8.0, "compile jit(g)"), (2.0, "step")]
    p = tmp_path / "k.json"
    p.write_text(json.dumps(events))  # the bare-list form
    assert s.main([str(p)]) == 0
    assert s.main([str(tmp_path / "missing.json")]) == 2


def test_gpt2_example_profile_flag_writes_a_trace(tmp_path, capsys):
    sys.path.insert(0, str(ROOT))
    from examples.gpt2 import train

    corpus = tmp_path / "c.txt"
    corpus.write_text("to be or not to be, that is the question.\n" * 200, encoding="utf-8")
    trace = tmp_path / "prof" / "gpt2.trace.json"
    argv = ["--config", "tiny", "--data", str(corpus), "--out", str(tmp_path / "run"),
            "--steps", "4", "--batch-size", "2", "--block-size", "8", "--eval-every", "4",
            "--eval-iters", "1", "--no-progress", "--no-plot", "--sample-tokens", "0",
            "--profile", str(trace), "--profile-steps", "2"]  # fmt: skip
    r = train.main(argv)
    assert r["profile"] == str(trace)
    ev = json.loads(trace.read_text())["traceEvents"]
    steps = [e["args"]["step"] for e in ev if e.get("name") == "train step"]
    assert sorted(steps) == ["2", "3"]  # the steps after the first (which compiles)
    assert any(e.get("cat") == "device" for e in ev)
    assert f"steps 2-3 to {trace}" in capsys.readouterr().out


def test_print_environment_info_on_the_cpu(capsys):
    buf = io.StringIO()
    blu.print_environment_info(file=buf)
    text = buf.getvalue()
    import ml_dtypes

    from blu.environment import NOT_INSTALLED, environment_info

    info = environment_info()
    assert info["numpy"] == np.__version__ and info["ml_dtypes"] == ml_dtypes.__version__
    assert info["blu"].startswith(blu.__version__)
    assert info["python"].startswith(".".join(map(str, sys.version_info[:3])))
    for label in ("MLIR bindings", "CUDA driver", "CUDA runtime", "cuDNN", "NCCL", "nvmath"):
        assert label + ":" in text and info[label]
    if importlib.util.find_spec("cuda") is None:
        assert info["CUDA driver"].startswith(NOT_INSTALLED)
    assert str(blu.config.cache_dir) in info["cache"]
    for flag in ("cache_dir", "log_compiles", "default_matmul_precision"):
        assert f"  {flag} = " in text
    assert "devices:" in text and capsys.readouterr().out == ""


class _FakeClockEvent:
    """A CUDA timing event on a fake device clock (milliseconds)."""

    clock = [0.0]

    def record(self, stream):
        self.t = self.clock[0]

    def synchronize(self):
        pass

    def elapsed_ms(self, end):
        return end.t - self.t


def test_cuda_event_profiler_feeds_the_trace_writer(tmp_path):
    """The GPU path: blu.cuda.profile regions become device spans placed from the epoch event,
    with the labels blu.lower passes in."""
    from blu.cuda.profile import Profiler

    prof = Profiler(enabled=True, event_factory=_FakeClockEvent)
    writer = tracing.start(tracing.TraceWriter(tmp_path / "gpu.json"))
    try:
        _FakeClockEvent.clock[0] = 100.0
        labels = {"kind": "kernel", "eqns": "f32[4] = exp f32[4]", "source": "m.py:3 (f)"}
        with prof.region("kernel[exp]", 7, args=labels):
            _FakeClockEvent.clock[0] += 2.0  # the kernel takes 2 ms
        _FakeClockEvent.clock[0] += 0.5
        with prof.region("cublasLt f32[4,4]", 7):
            _FakeClockEvent.clock[0] += 1.0
    finally:
        tracing.stop(writer)
    ev = json.loads(writer.write().read_text())["traceEvents"]
    dev = sorted((e for e in ev if e.get("cat") == "device"), key=lambda e: e["ts"])
    assert [e["name"] for e in dev] == ["kernel[exp]", "cublasLt f32[4,4]"]
    assert [e["dur"] for e in dev] == pytest.approx([2000.0, 1000.0])
    assert dev[1]["ts"] - dev[0]["ts"] == pytest.approx(2500.0)  # 2 ms kernel + 0.5 ms gap
    assert dev[0]["args"] == labels and "args" not in dev[1]
    assert dev[0]["pid"] >= tracing.DEVICE and dev[0]["tid"] == dev[1]["tid"]
    names = {e["args"]["name"] for e in ev if e["ph"] == "M"}
    assert "GPU" in names and "stream 7" in names
    assert [r["calls"] for r in prof.summary()] == [1, 1]  # the table still counts them


def test_trace_of_a_program_on_the_simulated_gpu(tmp_path, set_flag):
    """The GPU executable's traced path (labels from blu.lower, allocator counters) on
    blu.cuda.fake's device, which times kernels on the host clock."""
    set_flag("fake_gpu", True)
    import blu.cuda as bc

    f = blu.jit(lambda x: bnp.sum(bnp.exp(x)))
    x = np.linspace(-1, 1, 16, dtype=np.float32)
    dx = bc.device_put(x)
    f(dx)  # compiled outside the trace
    with blu.profiler.trace(tmp_path / "g.json") as w:
        y = float(f(dx))
    assert np.isclose(y, np.exp(x.astype(np.float64)).sum(), rtol=1e-5)
    dev = [e for e in w.events if e.get("cat") == "device"]
    assert dev and all(e["pid"] >= tracing.DEVICE for e in dev)
    assert any("exp" in e["args"]["eqns"] for e in dev)
    assert any(e["ph"] == "C" and "allocated" in e["args"] for e in w.events)


def test_cpu_spans_carry_their_work_and_the_machines_peak(traced):
    """A product's span carries 2 m k n FLOPs, a kernel's its minimal bytes (inputs read once,
    outputs written once), each with the measured peak it is compared with; the summarizer turns
    them into a rate and a fraction of that peak."""
    _, data = traced
    device = [e for e in data["traceEvents"] if e.get("cat") == "device"]
    dots = [e for e in device if e["args"]["kind"] == "dot"]
    assert dots and all(int(e["args"]["flops"]) == 2 * 8 * 4 * 3 for e in dots)
    assert all(e["name"].endswith("-> f32[8,3]") for e in dots)
    for e in device:
        value, unit = e["args"]["peak"].split()
        assert float(value) > 0 and unit == ("TFLOP/s" if "flops" in e["args"] else "GB/s")
    tanh = [e for e in device if e["args"]["kind"] == "kernel" and "tanh" in e["args"]["eqns"]]
    # the kernel reads the product f32[8,3] and writes at most f32[8,3] and a scalar
    assert tanh and all(4 * 24 <= int(e["args"]["bytes"]) <= 4 * (24 + 24 + 1) for e in tanh)
    rows = _summarizer().top_kernels(data["traceEvents"])
    for r in rows:
        span_s = r["total_us"] * 1e-6
        rate = (r["flops"] or r["bytes"]) / span_s
        peak = float(r["peak"].split()[0]) * (1e12 if r["flops"] else 1e9)
        assert r["fraction"] == pytest.approx(rate / peak, rel=1e-9)
