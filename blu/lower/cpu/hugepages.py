"""The CPU executable's arena on transparent huge pages where the system offers them.

A training step's temporaries live in one arena (``MemoryPlan``), tens of megabytes that every
kernel of the step walks through. On 4 KiB pages that is thousands of pages, more than the
core's second-level TLB covers (3072 entries on Zen 4: 12 MiB), and memory-bound kernels then
wait on page walks: on the 2-core development VM the README main job's step took 74-77 ms with
numpy's huge-page advice off against 55-57 ms where its arena sat on 2 MiB pages
(docs/benchmarks/cpu_backend.md, session 14). numpy advises huge pages for allocations of 4 MiB
and more (``madvise(MADV_HUGEPAGE)``) but its blocks start wherever ``malloc`` put them: only
the 2 MiB-aligned chunks inside a block can be huge pages, so which of the arena's buffers sit
on small pages changed from process to process with the block's address, and the step's speed
with it (the two states above, process by process).

``arena(nbytes)`` starts the arena at a 2 MiB boundary of a slightly larger block and advises
huge pages for all of it (Linux; where transparent huge pages are off the advice does nothing,
and elsewhere the arena is a plain array).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

import numpy as np

from blu.lower.cpu import address

__all__ = ["HUGE_PAGE", "arena"]

HUGE_PAGE = 2 << 20  # x86-64's transparent huge page
_MADV_HUGEPAGE = 14


@functools.cache
def _madvise():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    return fn


def arena(nbytes: int) -> np.ndarray:
    """A uint8 array of ``nbytes`` (at least 64) for an executable's arena: from a 2 MiB boundary
    with huge pages advised where it is at least one huge page long, else a plain array."""
    nbytes = max(int(nbytes), 64)
    advise = _madvise()
    if nbytes < HUGE_PAGE or advise is None:
        return np.empty(nbytes, np.uint8)
    raw = np.empty(nbytes + HUGE_PAGE, np.uint8)
    start = -address.data(raw) % HUGE_PAGE
    out = raw[start : start + nbytes]
    advise(address.data(out), nbytes, _MADV_HUGEPAGE)  # (a failure leaves the pages small)
    return out
