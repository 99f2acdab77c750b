"""The largest batch that trains: doubling, then bisection, each try in its own process.

``benchmarks/gpt2_124m.py --find-max-batch`` asks, per system and mode, for the largest batch
(sequences of ``--block`` tokens) whose training step runs on one GPU: it tries a batch by
running the system's throughput worker (``--warmup 1 --steps 1``) in a fresh process, so an
out-of-memory failure cannot leave the next try a fragmented or poisoned allocator. The search
(:func:`search`) doubles the batch until a try fails, then bisects between the last success and
the first failure. With a ``grid`` it only tries the grid's sizes (blu's GPU kernels come from
the kernel cache, compiled ahead of time per batch size: fill it for the grid).

:func:`search_guided` (the peers' search on the GPU: each try of torch.compile costs its
compilation) also uses the peak memory each fitting try reports: after the first fitting try
it tries one an eighth larger, draws the line through the last two fitting tries' peaks and
tries where the line meets the memory budget, then the batch above; where the guess fails or is
off, it bisects (or gallops up). A start near the answer so costs about four tries. Each try
narrows the bracket (largest fit, smallest failure), so it ends with the same answer as
:func:`search`.

blu does not search on the GPU: its memory plan gives the footprint of any batch without a
kernel or a GPU (``blu_gpt2.py --predict-max-batch``), and only the predicted batch is run.
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


def search_guided(
    try_batch: Callable[[int], tuple[bool, float | None]],
    budget_bytes: float,
    *,
    start: int = 1,
    limit: int = 1024,
) -> dict:
    """The largest batch ``b`` in ``[1, limit]`` that fits (fitting monotone in ``b``), guided by
    the peak memory fitting tries report.

    Args:
        try_batch: runs one try: ``(fitted, peak_bytes or None)``.
        budget_bytes: the memory the peak may reach (the device's, less a margin): where the
            line through the last two fitting peaks meets it is the next guess.
        start: the first batch tried.
        limit: no batch above this is tried.

    Returns:
        as :func:`search`, plus ``"peaks": {batch: peak_bytes}`` of the fitting tries.

    Raises:
        ValueError: ``start`` outside ``[1, limit]``.
    """
    if not 1 <= start <= limit:
        raise ValueError(f"start must be in [1, limit={limit}], got {start}")
    lo, hi = 0, limit + 1  # the largest batch that fitted (0: none), the smallest that failed
    peaks: dict[int, float] = {}
    tries: list[list] = []
    step = 1  # galloping above the line's guess
    b = start
    while hi - lo > 1:
        b = min(max(b, lo + 1), hi - 1)
        ok, peak = try_batch(b)
        tries.append([b, bool(ok)])
        if ok:
            lo = b
            if peak:
                peaks[b] = float(peak)
        else:
            hi = b
        guess = _line_guess(peaks, budget_bytes)
        if guess is not None and lo < guess < hi:
            nxt, step = guess, 1
        elif ok and guess is None and len(peaks) == 1:
            nxt = lo + max(1, lo // 8)  # a second peak near the first draws the line
        elif ok:  # no line, or the line says no more fits while this did: go up
            nxt = 2 * lo if guess is None else lo + step
            step *= 2
        else:
            nxt = (lo + hi) // 2
        b = nxt if lo < nxt < hi else (lo + hi) // 2
    return {"max_batch": lo, "tries": tries, "at_limit": lo == limit, "peaks": peaks}


def _line_guess(peaks: dict[int, float], budget: float) -> int | None:
    """Where the line through the two largest fitting batches' peaks reaches ``budget``."""
    if len(peaks) < 2:
        return None
    (b0, p0), (b1, p1) = sorted(peaks.items())[-2:]
    per = (p1 - p0) / (b1 - b0)
    if per <= 0:
        return None
    return b1 + int((budget - p1) // per)
