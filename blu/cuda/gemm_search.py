"""A timed choice among cuBLASLt's candidate algorithms for one product (autotuning).

cuBLASLt's heuristic ranks the algorithms it offers for a problem by a model of the GPU, not
by running them; its first choice is often, not always, the fastest. On the first call of a
product ``CublasLt`` asks for up to ``CANDIDATES`` algorithms and, where a search is allowed,
runs each on the call's own operands (one untimed run, then ``REPS`` timed back to back between
two events) and keeps the fastest for every later call. XLA's GPU autotuner does the same for
its GEMMs (``xla_gpu_autotune_level``); PyTorch leaves the choice to cuBLAS's heuristic.

No search is made where it cannot run or would change results:

- while the stream is being captured into a CUDA graph (events cannot be waited for there; a
  program's graph is captured from its second call, after its products were planned);
- for an accumulating product (``D += A @ B``: each timed run would add to ``D`` again).

The timings vary by a few percent from run to run, so two processes may keep different
algorithms for the same product; results then differ in rounding (as XLA's autotuned GEMMs
do), never in more. ``config.gemm_search`` (``BLU_GEMM_SEARCH=0``) turns the search off.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["CANDIDATES", "REPS", "event_timer", "fastest", "is_capturing"]

CANDIDATES = 16  # algorithms asked of the heuristic when searching
REPS = 3  # timed runs per candidate (after one untimed run)


def fastest(
    n: int, run: Callable[[int], None], timer: Callable[[Callable[[], None]], float]
) -> int:
    """The index among ``n`` candidates whose runs take the least time.

    Args:
        n: candidates (``run(i)`` queues candidate ``i`` once).
        run: queues one product with candidate ``i``; may raise for a candidate the library
            refuses at run time (that candidate is skipped).
        timer: ``timer(work) -> milliseconds``: queues ``work`` between two timing points and
            returns the time between them once it has run.

    Returns:
        The fastest candidate's index; 0 (the heuristic's first choice) when every other
        candidate failed or ``n <= 1``.
    """
    if n <= 1:
        return 0
    best, best_ms = 0, float("inf")
    for i in range(n):
        try:
            run(i)  # untimed: the first run of an algorithm may load its kernel

            def reps(i: int = i) -> None:
                for _ in range(REPS):
                    run(i)

            ms = timer(reps)
        except Exception:  # noqa: BLE001 - a candidate cuBLASLt refuses is not a choice
            continue
        if ms < best_ms:
            best, best_ms = i, ms
    return best


def event_timer(stream: int) -> Callable[[Callable[[], None]], float]:
    """A ``timer`` for :func:`fastest` that brackets the work with two CUDA events on
    ``stream`` and waits for the second."""
    from blu.cuda.driver import Event

    def timer(work: Callable[[], None]) -> float:
        start, end = Event.create(), Event.create()
        try:
            start.record(stream)
            work()
            end.record(stream)
            end.synchronize()
            return start.elapsed_ms(end)
        finally:
            start.destroy()
            end.destroy()

    return timer


def is_capturing(stream: int) -> bool:
    """Whether ``stream`` is being captured into a CUDA graph (then no search is made)."""
    from blu.cuda.driver import _stream_handle, call, drv

    status = call("cuStreamIsCapturing", _stream_handle(stream))
    return status != drv().CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE
