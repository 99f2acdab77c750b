"""Timeline profiles: Chrome/Perfetto trace JSON of host and device activity.

    with blu.profiler.trace("step.trace.json"):
        for i in range(3):
            with blu.profiler.annotate("train step", step=i):
                params, loss = step(params, batch)

Open the file in https://ui.perfetto.dev (or ``chrome://tracing``). It holds host spans for each
``jit`` call, trace and compile and for your ``annotate`` blocks; one span per step of a CPU
executable (fused kernel, matrix product, view, host fallback) or per GPU kernel and library
call, labelled with its jaxpr equations and the source line they came from; and memory counters.
``python scripts/summarize_trace.py FILE`` prints the kernels with the most total time and the
host gaps between device work.

With ``BLU_PROFILE=1`` (the config flag ``profile``) a process traces everything it runs and
writes ``blu-profile-<pid>.trace.json`` in the working directory at exit, besides the per-kernel
table that ``blu.cuda.profile`` prints.

On the GPU, timing a kernel records two CUDA events around it, so GPU programs run step by step
(no CUDA graph replay) while a trace is active.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from blu.core import trace as _trace
from blu.core.config import config
from blu.core.trace import TraceWriter
from blu.cuda.profile import profiler as _cuda_profiler

__all__ = ["TraceWriter", "annotate", "trace"]


@contextlib.contextmanager
def trace(path: str | os.PathLike) -> Iterator[TraceWriter]:
    """Record a timeline of the block and write it to ``path`` as Chrome trace JSON.

    Args:
        path: the JSON file to write (its folder is made if missing).

    Yields:
        The ``TraceWriter`` collecting the events (``writer.events``).

    Traces nest: an inner ``trace`` gets the events of its block only. The file is written when
    the block exits, also when it raises.
    """
    writer = _trace.start(TraceWriter(path))
    was = _cuda_profiler.enabled
    _cuda_profiler.enabled = True  # time GPU kernels with CUDA events
    try:
        yield writer
    finally:
        _cuda_profiler.enabled = was
        _trace.stop(writer)
        writer.write()


def annotate(name: str, **args: Any) -> Any:
    """A context manager: a host span named ``name`` (with ``args`` shown in the viewer) around
    the block in the active trace; does nothing when no trace is active.

    Example: ``with blu.profiler.annotate("train step", step=i): ...``
    """
    return _trace.region(name, "user", {k: str(v) for k, v in args.items()} or None)


def _start_from_flag() -> None:
    """``BLU_PROFILE=1``: trace the whole process and write the file at exit."""
    try:
        on = bool(config.profile)
    except AttributeError:  # a config without the flag: read its environment variable
        on = os.environ.get("BLU_PROFILE", "").lower() in ("1", "true", "yes", "on")
    if not on:
        return
    writer = _trace.start(TraceWriter(Path.cwd() / f"blu-profile-{os.getpid()}.trace.json"))

    @atexit.register
    def _write() -> None:
        try:
            path = writer.write()
            print(f"blu profile: timeline written to {path} (open it in ui.perfetto.dev)",
                  file=sys.stderr)  # fmt: skip
        except Exception as e:  # noqa: BLE001 - the driver may be gone at exit
            print(f"blu profile: could not write the timeline: {e}", file=sys.stderr)


_start_from_flag()
