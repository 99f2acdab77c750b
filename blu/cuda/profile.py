"""``BLU_PROFILE=1``: time each kernel and library call with CUDA events and print a table.

The executable wraps each launch-plan step in ``profiler.region(name, stream)`` when
``profiler.enabled``; the events are read (and the table built) only when a report is asked
for, so profiling adds two event records per step and no synchronization. With profiling on,
executables run their plans step by step instead of replaying a CUDA graph (events recorded
during a capture would time nothing). At exit, a process with ``BLU_PROFILE=1`` prints the
table to stderr.

Rows group regions by name: calls, total and mean time, share of the total, min and max.

Timeline traces: while a ``blu.core.trace`` writer is active (``blu.profiler.trace(path)``, or
``BLU_PROFILE=1``, which writes one at exit), each region also becomes a device span on the
writer's clock, with the labels the caller passes (``args``: the jaxpr equations and user line,
from ``blu.lower``; this runtime imports no jaxpr module). A region's device time is placed by
the elapsed time from an epoch event recorded on the stream when it was idle.
"""

from __future__ import annotations

import atexit
import contextlib
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from blu.core import trace as _trace
from blu.core.config import config


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

    def _event(self) -> Any:
        return self._pool.pop() if self._pool else self._new_event()

    @contextlib.contextmanager
    def region(self, name: str, stream: Any, nbytes: int = 0, flops: int = 0,
               args: dict | None = None) -> Iterator[None]:  # fmt: skip
        """Time the work queued on ``stream`` inside the block (no-op when disabled).

        ``nbytes`` (bytes read and written) and ``flops`` (floating-point operations) of one
        call, when known, give the table's achieved GB/s or TFLOP/s; ``args`` (strings) label
        the region's span in a timeline trace."""
        if not self.enabled:
            yield
            return
        if nbytes or flops:
            w = self._work.setdefault(name, [0, 0])
            w[0] += nbytes
            w[1] += flops
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

    def reset(self) -> None:
        self._collect()
        self._times = {}
        self._work = {}

    def summary(self) -> list[dict[str, Any]]:
        """One row per region name, slowest total first: ``name, calls, total_ms, mean_us,
        min_us, max_us, percent``."""
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
                "gb_per_s": self._work.get(name, [0, 0])[0] / max(sum(t), 1e-9) / 1e6,
                "tflop_per_s": self._work.get(name, [0, 0])[1] / max(sum(t), 1e-9) / 1e9,
            }
            for name, t in self._times.items()
        ]
        rows.sort(key=lambda r: -r["total_ms"])
        return rows

    def table(self, limit: int = 40) -> str:
        rows = self.summary()
        if not rows:
            return "blu profile: nothing was timed"
        width = max(24, *(min(60, len(r["name"])) for r in rows[:limit]))
        head = (
            f"{'kernel / call':<{width}} {'calls':>7} {'total ms':>10} {'mean us':>9} "
            f"{'min us':>9} {'max us':>9} {'%':>6} {'achieved':>12}"
        )
        lines = [head, "-" * len(head)]
        for r in rows[:limit]:
            lines.append(
                f"{r['name'][:width]:<{width}} {r['calls']:>7} {r['total_ms']:>10.3f} "
                f"{r['mean_us']:>9.1f} {r['min_us']:>9.1f} {r['max_us']:>9.1f} "
                f"{r['percent']:>6.1f} {_rate(r):>12}"
            )
        if len(rows) > limit:
            rest = sum(r["total_ms"] for r in rows[limit:])
            lines.append(f"... {len(rows) - limit} more regions, {rest:.3f} ms")
        total = sum(r["total_ms"] for r in rows)
        lines.append(f"{'total':<{width}} {sum(r['calls'] for r in rows):>7} {total:>10.3f}")
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
