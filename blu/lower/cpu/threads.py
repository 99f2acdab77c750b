"""Work of one CPU step split across blu's thread pool (the pool of ``blas.py``, whose threads
block instead of spinning): a range of rows (or batch entries) cut into nearly equal parts, each
run by a compiled kernel called through ctypes (which releases the GIL for the call), the
caller's thread running the first part.

    cuts = split(n, threads)          # [(0, n1), (n1, n2), ...]: at most ``threads`` parts
    run_parts(lambda lo, hi: ..., cuts)

``config.cpu_threads`` (``BLU_CPU_THREADS``) sets how many threads; by default the cores the
process may use (``blas.threads_for``).
"""

from __future__ import annotations

from collections.abc import Callable

from blu.lower.cpu import blas

__all__ = ["run_parts", "split"]


def split(n: int, threads: int, min_rows: int = 1) -> list[tuple[int, int]]:
    """``[(lo, hi), ...]``: ``range(n)`` cut into at most ``threads`` contiguous, nonempty parts
    of nearly equal size (sizes differ by at most one), each at least ``min_rows`` long where
    ``n`` allows; ``[(0, n)]`` for one thread, and ``[]`` for ``n == 0``."""
    if n <= 0:
        return []
    parts = max(1, min(threads, n // max(min_rows, 1), n))
    return [(n * i // parts, n * (i + 1) // parts) for i in range(parts)]


def run_parts(fn: Callable[[int, int], None], cuts: list[tuple[int, int]]) -> None:
    """Run ``fn(lo, hi)`` for every part of ``cuts``: the first on the caller's thread, the others
    on the pool, all finished (and the first error raised) before returning."""
    if len(cuts) <= 1:
        for lo, hi in cuts:
            fn(lo, hi)
        return
    pool = blas._workers(len(cuts) - 1)
    futures = [pool.submit(fn, lo, hi) for lo, hi in cuts[1:]]
    err = None
    try:
        fn(*cuts[0])
    except BaseException as e:  # still wait for the others: they write the same buffers
        err = e
    for f in futures:
        try:
            f.result()
        except BaseException as e:
            err = err or e
    if err is not None:
        raise err
