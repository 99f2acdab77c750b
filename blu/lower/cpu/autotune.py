"""The fastest of a few equivalent ways to run a step, chosen once by timing them on this machine.

Which way of calling the BLAS is fastest for a small matrix product depends on the library and
the core it runs on, not on anything blu can read: OpenBLAS, for one, runs products under a size
it was built with through kernels that pack nothing (``sgemm_small_kernel``), and on some cores a
product a little larger runs faster as a few column blocks that each fit that size than whole
(on a Zen 4 EPYC, a 32x256 @ 256x256 float32 product: 44 us in four blocks, 51 us whole;
docs/benchmarks/cpu_backend.md). So the choice is measured, as FFTW plans a transform: each
candidate is called on scratch operands in interleaved rounds (a load that comes and goes on a
shared machine touches all of them alike) and the one with the least median time wins; the
first candidate (today's way) keeps its place unless another is faster by ``MARGIN``.

The choice changes only the speed: every candidate computes the same product (up to the order
of its float additions), and it is made once per shape per process (the caller caches it), so a
program gives the same results call after call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

__all__ = ["fastest"]

ROUNDS = 5  # interleaved rounds of timing
ROUND_S = 2e-4  # each candidate's calls in one round last about this long (seconds)
MARGIN = 0.04  # another candidate replaces the first only if this much faster (a fraction)


def fastest(candidates: Sequence[Callable[[], object]], rounds: int = ROUNDS) -> int:
    """The index of the fastest of ``candidates`` (calls of no arguments that do the same work),
    by the median over ``rounds`` interleaved rounds of each one's time per call; 0 unless
    another is faster than the first by ``MARGIN``. One candidate or fewer: 0, nothing timed."""
    if len(candidates) <= 1:
        return 0
    for c in candidates:  # warm: first calls pay for page faults and lazy setup
        c()
    t = time.perf_counter()
    candidates[0]()
    one = max(time.perf_counter() - t, 1e-7)
    calls = max(1, min(64, int(ROUND_S / one)))
    times: list[list[float]] = [[] for _ in candidates]
    for _ in range(rounds):
        for c, ts in zip(candidates, times):
            t = time.perf_counter()
            for _ in range(calls):
                c()
            ts.append((time.perf_counter() - t) / calls)
    medians = [sorted(ts)[len(ts) // 2] for ts in times]
    best = min(range(len(medians)), key=medians.__getitem__)
    return best if medians[best] < (1 - MARGIN) * medians[0] else 0
