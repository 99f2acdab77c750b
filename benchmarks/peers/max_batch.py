"""The largest batch that trains: doubling, then bisection, each try in its own process.

``benchmarks/gpt2_124m.py --find-max-batch`` asks, per system and mode, for the largest batch
(sequences of ``--block`` tokens) whose training step runs on one GPU: it tries a batch by
running the system's throughput worker (``--warmup 1 --steps 1``) in a fresh process, so an
out-of-memory failure cannot leave the next try a fragmented or poisoned allocator. The search
(:func:`search`) doubles the batch until a try fails, then bisects between the last success and
the first failure. With a ``grid`` it only tries the grid's sizes (blu's GPU kernels come from
the kernel cache, compiled ahead of time per batch size: fill it for the grid).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence


def search(
    fits: Callable[[int], bool],
    *,
    start: int = 1,
    limit: int = 1024,
    grid: Sequence[int] | None = None,
) -> dict:
    """The largest batch ``b`` with ``fits(b)``, assuming fitting is monotone in ``b``.

    Args:
        fits: runs one try (True: the step trained).
        start: the first batch tried.
        limit: no batch above this is tried (the answer is at most ``limit``).
        grid: the only batch sizes to try (sorted, deduplicated here); None: every integer.

    Returns:
        ``{"max_batch": b or 0 (nothing fits), "tries": [[batch, fitted], ...] in order,
        "at_limit": whether the largest candidate fitted (the true maximum may be larger)}``.

    Raises:
        ValueError: ``start`` or ``limit`` below 1, or no candidate in ``[start, limit]``.
    """
    if start < 1 or limit < 1:
        raise ValueError(f"start and limit must be >= 1, got {start} and {limit}")
    cands = sorted({int(b) for b in grid} if grid is not None else range(start, limit + 1))
    cands = [b for b in cands if start <= b <= limit]
    if not cands:
        raise ValueError(f"no batch size to try in [{start}, {limit}] (grid {grid})")
    tries: list[list] = []

    def attempt(i: int) -> bool:
        ok = bool(fits(cands[i]))
        tries.append([cands[i], ok])
        return ok

    lo, hi = -1, len(cands)  # cands[lo] fitted (-1: none yet), cands[hi] failed (len: none)
    i = 0
    while True:  # doubling: the next candidate at least twice the last that fitted
        if not attempt(i):
            hi = i
            break
        lo = i
        if i == len(cands) - 1:
            break
        i = max(i + 1, min(bisect.bisect_left(cands, 2 * cands[i]), len(cands) - 1))
    while hi - lo > 1:  # bisection between the last success and the first failure
        mid = (lo + hi) // 2
        if attempt(mid):
            lo = mid
        else:
            hi = mid
    return {
        "max_batch": cands[lo] if lo >= 0 else 0,
        "tries": tries,
        "at_limit": lo == len(cands) - 1,
    }
