"""Threads of the BLAS behind the CPU executable's matrix products (numpy's OpenBLAS).

OpenBLAS's worker threads spin while they wait for each other: when the machine has more
runnable threads than cores, a product split across threads waits for a descheduled worker and
can take a thousand times longer than on one thread (measured: a 32x256x256 product, 58 µs on
one thread, 54 ms on two at a load average of 12 on 2 cores). So a product runs on more than one
thread only when it is large enough to pay for the split (``MIN_THREADED_FLOPS``) and, unless
``config.cpu_threads`` fixes the count, while the load average leaves a core per thread.
The thread count is set through OpenBLAS's own ``set_num_threads`` (found in the loaded
library), only when it changes; with another BLAS (none found) nothing is set.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time

from blu.core.config import config

__all__ = ["threads_for", "use_threads"]

MIN_THREADED_FLOPS = 1 << 26  # ~67 MFLOP: below this a product runs on one thread
_LOAD_EVERY_S = 1.0  # how often the load average is read

_SYMBOLS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads")  # fmt: skip
_setter: object = None  # unresolved
_current = -1
_load = (0.0, 0.0)  # (time read, load average)


def _find_setter():
    """OpenBLAS's ``set_num_threads`` from the library numpy loaded, or None."""
    with contextlib.suppress(OSError):
        with open("/proc/self/maps") as f:
            libs = sorted({ln.split()[-1] for ln in f if "openblas" in ln.lower() and "/" in ln})
        for path in libs:
            with contextlib.suppress(OSError):
                lib = ctypes.CDLL(path)
                for sym in _SYMBOLS:
                    fn = getattr(lib, sym, None)
                    if fn is not None:
                        fn.argtypes, fn.restype = [ctypes.c_int], None
                        return fn
    return None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads_for(flops: float) -> int:
    """The threads a product of ``flops`` floating-point operations should use."""
    fixed = config.cpu_threads
    if isinstance(fixed, int) and fixed >= 1:
        return 1 if flops < MIN_THREADED_FLOPS else fixed
    if flops < MIN_THREADED_FLOPS:
        return 1
    global _load
    n = _cores()
    now = time.monotonic()
    if now - _load[0] > _LOAD_EVERY_S:
        with contextlib.suppress(OSError, AttributeError):
            _load = (now, os.getloadavg()[0])
    return 1 if _load[1] > n else n


def use_threads(n: int) -> None:
    """Set the BLAS's thread count to ``n`` (a no-op when it already is, or with no OpenBLAS)."""
    global _setter, _current
    if n == _current:
        return
    if _setter is None:
        _setter = _find_setter() or False
    if _setter:
        _setter(n)
    _current = n
