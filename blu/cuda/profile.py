"""``BLU_PROFILE=1``: time each kernel and library call with CUDA events and print a table.

The executable wraps each launch-plan step in ``profiler.region(name, stream)`` when
``profiler.enabled``; the events are read (and the table built) only when a report is asked
for, so profiling adds two event records per step and no synchronization. With profiling on,
executables run their plans step by step instead of replaying a CUDA graph (events recorded
during a capture would time nothing). At exit, a process with ``BLU_PROFILE=1`` prints the
table to stderr.

Rows group regions by name: calls, total and mean time, share of the total, min and max, and
where the caller gave the work of one call, the achieved rate of the median call and its
fraction of the device's peak (``PEAKS``): a kernel's *minimal* bytes (its inputs read once, its
outputs written once) per second against the measured copy bandwidth, a product's floating-point
operations per second against the tensor-core (or FP32/FP64) peak of its compute precision. A
fraction well under 1 means the kernel moves more than it must (re-reads) or has too little in
flight.

Host time per call (``call``): the wall time of the Python loop that queues a program's launches
beside the GPU time from its first launch to its last one's end, per executable; when the host
loop takes as long as the GPU, the program is launch-bound (CUDA graphs would help).

Timeline traces: while a ``blu.core.trace`` writer is active (``blu.profiler.trace(path)``, or
``BLU_PROFILE=1``, which writes one at exit), each region also becomes a device span on the
writer's clock, with the labels the caller passes (``args``: the jaxpr equations and user line,
from ``blu.lower``; this runtime imports no jaxpr module). A region's device time is placed by
the elapsed time from an epoch event recorded on the stream when it was idle.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from blu.core import trace as _trace
from blu.core.config import config


@dataclasses.dataclass(frozen=True)
class Peaks:
    """A device's rates the profile compares against.

    Attributes:
        device: the name it applies to (matched as a substring of the device's name).
        copy_gb_per_s: device-to-device copy bandwidth, bytes read plus bytes written per
            second / 1e9 (what a kernel that reads its inputs once and writes its outputs once
            can reach at best).
        tflops: dense peak TFLOP/s by compute precision: "bf16" (also fp16), "tf32", "fp32",
            "fp64".
        source: where the numbers come from.
    """

    device: str
    copy_gb_per_s: float
    tflops: dict[str, float]
    source: str


H200 = Peaks(
    "H200",
    copy_gb_per_s=4000.0,
    tflops={"bf16": 989.0, "tf32": 494.0, "fp32": 67.0, "fp64": 67.0},
    source="copy: ~4.0 TB/s device-to-device measured on the H200 (BENCHMARKS.md, issue #18; "
    "HBM3e spec 4.8 TB/s); TFLOP/s: NVIDIA H200 datasheet, dense (bf16 989, tf32 494, fp32 67, "
    "fp64 tensor 67)",
)
H100 = Peaks(
    "H100",
    copy_gb_per_s=3000.0,
    tflops={"bf16": 989.0, "tf32": 494.0, "fp32": 67.0, "fp64": 67.0},
    source="copy: ~3.0 TB/s (~90% of the H100 SXM's 3.35 TB/s HBM3 spec); TFLOP/s: NVIDIA H100 "
    "SXM datasheet, dense",
)
PEAKS = [H200, H100]  # the first whose name is in the device's name; H200 otherwise


def peaks_for(device_name: str = "") -> Peaks:
    """The ``Peaks`` of a device by its name (``"NVIDIA H200"``); the H200's for any other (the
    fake GPU, unknown devices: the fractions are then against the H200)."""
    return next((p for p in PEAKS if p.device in device_name), H200)


def compute_class(dtype_name: str, precision: str) -> str:
    """The ``Peaks.tflops`` key of a product: ``"bf16"`` for bfloat16/float16 operands or the
    bf16 precision, ``"tf32"`` for float32 under "tf32"/"high", ``"fp64"`` for float64, else
    ``"fp32"``."""
    if dtype_name in ("bfloat16", "float16") or precision == "bf16":
        return "bf16"
    if dtype_name == "float64":
        return "fp64"
    return "tf32" if precision in ("tf32", "high") else "fp32"


def _cuda_event() -> Any:
    from blu.cuda.device import fake_gpu

    if fake_gpu():  # BLU_FAKE_GPU: kernels run on the host as they are queued
        return _HostEvent()
    from blu.cuda.driver import Event

    return Event.create(timing=True)


class _HostEvent:
    """A timing event on the host clock, for the simulated GPU (``blu.cuda.fake``)."""

    t = 0.0

    def record(self, stream: Any) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_ms(self, end: _HostEvent) -> float:
        return 1000 * (end.t - self.t)


class Profiler:
    """Collects ``(name, start event, end event)`` per timed region.

    Args:
        enabled: whether ``region`` records anything (default: ``BLU_PROFILE`` is set).
        event_factory: makes a timing event with ``record(stream)``, ``synchronize()`` and
            ``elapsed_ms(end)`` (default: ``blu.cuda.driver.Event``; tests pass fakes).
    """

    def __init__(self, enabled: bool | None = None, event_factory: Callable[[], Any] | None = None):
        if enabled is None:
            enabled = bool(config.profile)
        self.enabled = enabled
        self._new_event = event_factory or _cuda_event
        self._pool: list[Any] = []
        self._open: list[tuple] = []  # (name, start, end, writer, args, epoch, stream): unread
        self._epochs: dict[tuple[int, Any], tuple[Any, float]] = {}  # (writer, stream) -> epoch
        _profilers.add(self)  # a trace writer reads their pending events before it writes
        self._times: dict[str, list[float]] = {}
        self._work: dict[str, list[int]] = {}  # name -> [bytes, flops] of all its calls
        self._peak: dict[str, str] = {}  # name -> "copy" or a compute class ("bf16", ...)
        self._calls: dict[str, list[tuple[float, Any, Any]]] = {}  # host s, GPU start, end
        self._call_times: dict[str, list[tuple[float, float]]] = {}  # name -> (host, GPU) ms
        self.peaks = peaks_for()

    def _event(self) -> Any:
        return self._pool.pop() if self._pool else self._new_event()

    @contextlib.contextmanager
    def region(self, name: str, stream: Any, nbytes: int = 0, flops: int = 0,
               args: dict | None = None, peak: str = "") -> Iterator[None]:  # fmt: skip
        """Time the work queued on ``stream`` inside the block (no-op when disabled).

        ``nbytes`` (minimal bytes: inputs read once plus outputs written once) and ``flops``
        (floating-point operations) of one call, when known, give the table's achieved GB/s or
        TFLOP/s; ``peak`` what to compare the rate with: a ``Peaks.tflops`` key for products
        (``compute_class``), else the copy bandwidth. ``args`` (strings) label the region's
        span in a timeline trace (with the bytes, FLOPs and peak rate added when known)."""
        if not self.enabled:
            yield
            return
        if nbytes or flops:
            w = self._work.setdefault(name, [0, 0])
            w[0] += nbytes
            w[1] += flops
            self._peak[name] = peak if flops else "copy"
            rate, unit = self._peak_rate(name)
            args = dict(args or {}, bytes=str(nbytes), flops=str(flops), peak=f"{rate:g} {unit}")
        tw = _trace.current()
        epoch = self._epoch(tw, stream) if tw is not None else None
        start = self._event()
        start.record(stream)
        try:
            yield
        finally:
            end = self._event()
            end.record(stream)
            self._open.append((name, start, end, tw, args, epoch, stream))
            if len(self._open) > 4096:  # bound the events in flight
                self._collect()

    @contextlib.contextmanager
    def call(self, name: str, stream: Any) -> Iterator[None]:
        """Time one call of a program: the host wall time of the block (the loop that queues
        its launches) and the GPU time from an event recorded before it to one after it (no-op
        when disabled). Read by ``calls_summary``; a trace gets a host span ``launch <name>``."""
        if not self.enabled:
            yield
            return
        start = self._event()
        start.record(stream)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            host = time.perf_counter() - t0
            end = self._event()
            end.record(stream)
            self._calls.setdefault(name, []).append((host, start, end))
            _trace.span_since(f"launch {name}", "launch", t0)

    def calls_summary(self) -> list[dict[str, Any]]:
        """One row per program: ``name, calls, host_ms`` (mean wall time of the launch loop),
        ``gpu_ms`` (mean time from the first launch's start to the last one's end), ``host_share``
        (host / GPU: near or above 1 means launch-bound)."""
        self._collect()
        rows = []
        for name, t in self._call_times.items():
            host = sum(h for h, _ in t) / len(t)
            gpu = sum(g for _, g in t) / len(t)
            rows.append({"name": name, "calls": len(t), "host_ms": host, "gpu_ms": gpu,
                         "host_share": host / gpu if gpu else float("inf")})  # fmt: skip
        rows.sort(key=lambda r: -r["gpu_ms"] * r["calls"])
        return rows

    def _peak_rate(self, name: str) -> tuple[float, str]:
        """The peak a row's rate is compared with: (value, unit)."""
        kind = self._peak.get(name, "copy")
        if kind == "copy":
            return self.peaks.copy_gb_per_s, "GB/s"
        return self.peaks.tflops.get(kind, self.peaks.tflops["fp32"]), "TFLOP/s"

    def _epoch(self, tw: _trace.TraceWriter, stream: Any) -> tuple[Any, float]:
        """An event recorded on ``stream`` once it is idle, and the writer's time then."""
        key = (id(tw), stream)
        got = self._epochs.get(key)
        if got is None:
            drain = self._new_event()
            drain.record(stream)
            drain.synchronize()  # the stream is idle: the epoch event completes as recorded
            ev = self._new_event()
            t = time.perf_counter()
            ev.record(stream)
            got = self._epochs[key] = (ev, tw.us(t))
        return got

    def _collect(self) -> None:
        for name, start, end, tw, args, epoch, stream in self._open:
            end.synchronize()
            ms = start.elapsed_ms(end)
            self._times.setdefault(name, []).append(ms)
            if tw is not None:
                ev, t0 = epoch
                tw.device_span(name, t0 + 1000 * ev.elapsed_ms(start), 1000 * ms, "GPU",
                               f"stream {stream}", args)  # fmt: skip
            self._pool += (start, end)
        self._open = []
        for name, calls in self._calls.items():
            for host, start, end in calls:
                end.synchronize()
                self._call_times.setdefault(name, []).append((1000 * host,
                                                              start.elapsed_ms(end)))  # fmt: skip
                self._pool += (start, end)
        self._calls = {}

    def reset(self) -> None:
        self._collect()
        self._times = {}
        self._work = {}
        self._peak = {}
        self._call_times = {}

    def summary(self) -> list[dict[str, Any]]:
        """One row per region name, slowest total first: ``name, calls, total_ms, mean_us,
        min_us, max_us, percent``, ``mb`` (minimal bytes of one call / 1e6), ``gb_per_s``,
        ``tflop_per_s`` (0 where unknown) and ``fraction`` (of the peak rate, ``Peaks``; 0 where
        unknown)."""
        self._collect()
        grand = sum(sum(t) for t in self._times.values()) or 1.0
        rows = [
            {
                "name": name,
                "calls": len(t),
                "total_ms": sum(t),
                "mean_us": 1000 * sum(t) / len(t),
                "min_us": 1000 * min(t),
                "max_us": 1000 * max(t),
                "percent": 100 * sum(t) / grand,
                # rates of the median call: a program's first call (plans made, a product's
                # algorithms searched) must not stand for the steady state
                "gb_per_s": self._work.get(name, [0, 0])[0] / len(t) / max(_median(t), 1e-9) / 1e6,
                "tflop_per_s": self._work.get(name, [0, 0])[1]
                / len(t)
                / max(_median(t), 1e-9)
                / 1e9,
                "mb": self._work.get(name, [0, 0])[0] / len(t) / 1e6,
            }
            for name, t in self._times.items()
        ]
        for r in rows:
            peak, unit = self._peak_rate(r["name"])
            rate = r["tflop_per_s"] if unit == "TFLOP/s" else r["gb_per_s"]
            r["fraction"] = rate / peak if r["name"] in self._peak else 0.0
        rows.sort(key=lambda r: -r["total_ms"])
        return rows

    def table(self, limit: int = 40) -> str:
        rows = self.summary()
        if not rows:
            return "blu profile: nothing was timed"
        width = max(24, *(min(60, len(r["name"])) for r in rows[:limit]))
        head = (
            f"{'kernel / call':<{width}} {'calls':>7} {'total ms':>10} {'mean us':>9} "
            f"{'min us':>9} {'max us':>9} {'%':>6} {'min MB':>9} {'achieved':>14} {'of peak':>7}"
        )
        lines = [head, "-" * len(head)]
        for r in rows[:limit]:
            frac = f"{100 * r['fraction']:.0f}%" if r["fraction"] else ""
            mb = f"{r['mb']:.1f}" if r["mb"] else ""
            lines.append(
                f"{r['name'][:width]:<{width}} {r['calls']:>7} {r['total_ms']:>10.3f} "
                f"{r['mean_us']:>9.1f} {r['min_us']:>9.1f} {r['max_us']:>9.1f} "
                f"{r['percent']:>6.1f} {mb:>9} {_rate(r):>14} {frac:>7}"
            )
        if len(rows) > limit:
            rest = sum(r["total_ms"] for r in rows[limit:])
            lines.append(f"... {len(rows) - limit} more regions, {rest:.3f} ms")
        total = sum(r["total_ms"] for r in rows)
        lines.append(f"{'total':<{width}} {sum(r['calls'] for r in rows):>7} {total:>10.3f}")
        p = self.peaks
        lines.append(f"of peak: minimal bytes (inputs read once, outputs written once) per second "
                     f"against {p.copy_gb_per_s:g} GB/s copy bandwidth; products against "
                     + ", ".join(f"{k} {v:g}" for k, v in p.tflops.items())
                     + f" TFLOP/s ({p.source})")  # fmt: skip
        for c in self.calls_summary():
            lines.append(
                f"host time per call of {c['name']}: {c['host_ms']:.3f} ms launch loop, "
                f"{c['gpu_ms']:.3f} ms on the GPU ({c['calls']} calls; host/GPU "
                f"{c['host_share']:.2f})"
            )
        return "\n".join(lines)


def _rate(row: dict[str, Any]) -> str:
    if row["tflop_per_s"]:
        return f"{row['tflop_per_s']:.1f} TFLOP/s"
    if row["gb_per_s"]:
        return f"{row['gb_per_s']:.0f} GB/s"
    return ""


def _profile_flag() -> bool:
    return bool(config.profile)


def _flush(writer: _trace.TraceWriter) -> None:
    for p in list(_profilers):
        if p._open:
            p._collect()


_profilers: weakref.WeakSet = weakref.WeakSet()
_trace.add_flush_hook(_flush)
profiler = Profiler()


@atexit.register
def _report_at_exit() -> None:
    if profiler.enabled and (profiler._open or profiler._times):
        try:
            print(profiler.table(), file=sys.stderr)
        except Exception as e:  # noqa: BLE001 - the driver may be gone at exit
            print(f"blu profile: could not read the events at exit: {e}", file=sys.stderr)


def _median(t: list[float]) -> float:
    s = sorted(t)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
