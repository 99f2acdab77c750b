"""``$BENCH_TORCH_PROFILE=n`` for the PyTorch peers: ``n`` more steps under ``torch.profiler``
after the timed ones, the kernels' table (device time, calls) to stderr, to set beside blu's
``BLU_PROFILE`` table of the same program (``torch_gpt2.py``, ``torch_llama.py`` through it, and
``torch_vision.py``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import torch


def requested() -> int:
    """The steps ``$BENCH_TORCH_PROFILE`` asks for (0: none, or no GPU)."""
    n = os.environ.get("BENCH_TORCH_PROFILE", "")
    return int(n) if n.strip() and torch.cuda.is_available() else 0


def profile_steps(step: Callable[[], object], n: int) -> None:
    """Run ``step()`` ``n`` times under the profiler and print the kernel table to stderr."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    events = prof.key_averages()
    n_events = sum(e.count for e in events if getattr(e, "device_type", None) is not None)
    table = ""
    for key in ("self_device_time_total", "self_cuda_time_total"):
        try:
            table = events.table(sort_by=key, row_limit=60, max_name_column_width=90)
            break
        except (AttributeError, KeyError, ValueError):
            continue
    print(f"torch profile: {n} steps, {n_events} events\n{table}", file=sys.stderr, flush=True)
