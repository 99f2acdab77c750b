"""``$BENCH_REPLAY_TRACE=path``: the GPU kernels of blu's steps as they really run.

``BLU_PROFILE=1`` times each kernel and library call between two CUDA events, with the step run
launch by launch instead of replayed as a CUDA graph: a library call's row then also holds the
host's Python work before its launch whenever the GPU waits for it (on the H100, GPT-2 124M's
cuDNN attention forward showed 239 us there against 86 us alone). This records the replayed
steps instead: ``$BENCH_REPLAY_STEPS`` (default 3) more steps after the timed ones, under
``torch.profiler``'s CUDA activity (CUPTI, which reports every kernel of the process, blu's and
its libraries' too), written to ``path`` as Chrome trace JSON. ``benchmarks/replay_profile.py``
joins the trace with the step's launch plan (read on the CPU) into a table of each node's time
and fraction of its bound.

Needs PyTorch with CUDA in the process (the peers' environment); nothing here runs otherwise.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable


def requested() -> str:
    """The trace path ``$BENCH_REPLAY_TRACE`` asks for ("" for none)."""
    return os.environ.get("BENCH_REPLAY_TRACE", "").strip()


def steps() -> int:
    """How many steps to record (``$BENCH_REPLAY_STEPS``, default 3)."""
    return max(1, int(os.environ.get("BENCH_REPLAY_STEPS", "3") or 3))


def record(step: Callable[[], None], n: int, path: str) -> None:
    """Run ``step()`` (which must wait for its step's end) ``n`` times under the profiler and
    write the kernels' Chrome trace to ``path``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
    prof.export_chrome_trace(path)
    print(f"replay trace: {n} steps written to {path}", file=sys.stderr, flush=True)
