"""Timeline traces in the Chrome trace event format (viewable in ui.perfetto.dev).

A ``TraceWriter`` collects events while it is active (``blu.profiler.trace(path)`` or
``BLU_PROFILE=1``) and writes one JSON file::

    {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}

Tracks (``pid``): ``HOST`` holds host spans (jit calls, traces, compiles, the user's
annotations such as each training step); ``EXECUTABLE`` the steps of CPU executables (fused
kernels, products, views, host fallbacks), one ``tid`` per thread; ``DEVICE`` and up hold GPU
kernel spans, one ``tid`` per stream. Every span of executable or device work has
``cat="device"`` and ``args`` naming its kind, its jaxpr equations and the user's source line;
memory is drawn as counters (``ph="C"``). Times are microseconds since the writer started.

Event format: https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU.

This module imports nothing of blu, so the CUDA runtime (``blu.cuda.profile``) and the lowering
(``blu.lower``) both feed the same writer: callers pass names and labels in.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HOST, EXECUTABLE, DEVICE = 1, 2, 3
_NAMES = {HOST: "blu host", EXECUTABLE: "blu CPU executable"}

_active: list[TraceWriter] = []  # innermost last
active = _active  # (read by jit's fast path: empty when nothing is traced, without a call)
_flush_hooks: list[Callable[[TraceWriter], None]] = []
_null = contextlib.nullcontext()


class TraceWriter:
    """Collects trace events (thread-safe) and writes them as JSON.

    Args:
        path: where ``write`` puts the JSON by default (None: given to ``write``).
    """

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path is not None else None
        self.t0 = time.perf_counter()
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._tids: dict[tuple[int, Any], int] = {}
        self._pids: dict[int, str] = dict(_NAMES)

    # ---- time ---------------------------------------------------------------------------------

    def us(self, t: float) -> float:
        """A ``time.perf_counter()`` reading as microseconds since the writer started."""
        return (t - self.t0) * 1e6

    def _tid(self, pid: int, key: Any) -> int:
        tid = self._tids.get((pid, key))
        if tid is None:
            tid = self._tids[(pid, key)] = 1 + sum(p == pid for p, _ in self._tids)
        return tid

    # ---- events -------------------------------------------------------------------------------

    def span(self, name: str, cat: str, start: float, end: float | None = None,
             pid: int = HOST, track: Any = None, args: dict | None = None) -> None:  # fmt: skip
        """A complete span from ``start`` to ``end`` (``time.perf_counter()`` seconds; ``end``
        defaults to now) on track ``pid``, lane ``track`` (default: the calling thread)."""
        end = time.perf_counter() if end is None else end
        key = threading.get_ident() if track is None else track
        ev = {"name": name, "cat": cat, "ph": "X", "ts": self.us(start),
              "dur": max((end - start) * 1e6, 0.0), "pid": pid}  # fmt: skip
        if args:
            ev["args"] = args
        with self._lock:
            ev["tid"] = self._tid(pid, key)
            self.events.append(ev)

    def device_span(self, name: str, ts_us: float, dur_us: float, device: str, stream: Any,
                    args: dict | None = None) -> None:  # fmt: skip
        """A span of device work already in microseconds on this writer's clock."""
        with self._lock:
            pid = next((p for p, n in self._pids.items() if n == device), None)
            if pid is None:  # a new device: the next track
                pid = max(DEVICE, max(self._pids) + 1)
                self._pids[pid] = device
            ev = {"name": name, "cat": "device", "ph": "X", "ts": ts_us,
                  "dur": max(dur_us, 0.0), "pid": pid, "tid": self._tid(pid, stream)}  # fmt: skip
            if args:
                ev["args"] = args
            self.events.append(ev)

    def counter(self, name: str, values: dict[str, float], pid: int = HOST,
                t: float | None = None) -> None:  # fmt: skip
        """A counter sample (e.g. bytes of memory in use) at ``t`` (default now)."""
        t = time.perf_counter() if t is None else t
        ev = {"name": name, "ph": "C", "ts": self.us(t), "pid": pid, "args": dict(values)}
        with self._lock:
            self.events.append(ev)

    # ---- output -------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The trace as a JSON-ready dict (flushing device events first)."""
        for hook in _flush_hooks:
            hook(self)
        with self._lock:
            meta = [{"name": "process_name", "ph": "M", "pid": p, "args": {"name": n}}
                    for p, n in sorted(self._pids.items())]  # fmt: skip
            meta += [{"name": "thread_name", "ph": "M", "pid": p, "tid": t,
                      "args": {"name": str(k) if p >= DEVICE else f"thread {t}"}}
                     for (p, k), t in self._tids.items()]  # fmt: skip
            events = sorted(self.events, key=lambda e: e["ts"])
        return {
            "traceEvents": meta + events,
            "displayTimeUnit": "ms",
            "otherData": {"producer": "blu", "pid": os.getpid()},
        }

    def write(self, path: str | os.PathLike | None = None) -> Path:
        """Write the JSON to ``path`` (default: the writer's) and return the path."""
        path = Path(path) if path is not None else self.path
        if path is None:
            raise ValueError("TraceWriter.write: no path given")
        path.parent.mkdir(parents=True, exist_ok=True)
        data = self.to_json()
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
        os.replace(tmp, path)
        return path


# ---- the active writer ---------------------------------------------------------------------------


def current() -> TraceWriter | None:
    """The innermost active writer, or None when nothing is being traced (the fast path)."""
    return _active[-1] if _active else None


def start(writer: TraceWriter) -> TraceWriter:
    _active.append(writer)
    return writer


def stop(writer: TraceWriter) -> None:
    if writer in _active:
        _active.remove(writer)


def add_flush_hook(fn: Callable[[TraceWriter], None]) -> None:
    """``fn(writer)`` runs before a writer's events are written (e.g. to read pending GPU
    events into it)."""
    if fn not in _flush_hooks:
        _flush_hooks.append(fn)


def span_since(name: str, cat: str, start: float, args: dict | None = None) -> None:
    """A host span from ``start`` (``time.perf_counter()``) to now, if a writer is active."""
    w = current()
    if w is not None:
        w.span(name, cat, start, args=args)


@contextlib.contextmanager
def _region(w: TraceWriter, name: str, cat: str, args: dict | None) -> Iterator[None]:
    t = time.perf_counter()
    try:
        yield
    finally:
        w.span(name, cat, t, args=args)


def region(name: str, cat: str = "user", args: dict | None = None) -> Any:
    """A context manager: a host span around the block, if a writer is active."""
    w = current()
    return _null if w is None else _region(w, name, cat, args)
