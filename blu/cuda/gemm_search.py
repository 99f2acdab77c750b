"""A timed choice among cuBLASLt's candidate algorithms for one product (autotuning).

cuBLASLt's heuristic ranks the algorithms it offers for a problem by a model of the GPU, not
by running them; its first choice is often, not always, the fastest. On the first call of a
product ``CublasLt`` asks for up to ``CANDIDATES`` algorithms and, where a search is allowed,
runs each on the call's own operands (one untimed run, then ``REPS`` timed back to back between
two events), times the ``FINALISTS`` fastest again ``ROUNDS`` more times (in turns), and keeps
the one with the least time of all its timings for every later call. (One round alone let a
single slow timing decide: on the H200 the same bf16 product with its bias epilogue kept a far
slower algorithm in one process than in another, docs/benchmarks/gpt2_gpu.md session 8;
a timing is only ever slowed by the GPU's state, never sped up, hence the least.) XLA's GPU
autotuner does the same for its GEMMs (``xla_gpu_autotune_level``); PyTorch leaves the choice to
cuBLAS's heuristic.

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

__all__ = ["CANDIDATES", "FINALISTS", "REPS", "ROUNDS", "event_timer", "fastest", "is_capturing"]

CANDIDATES = 16  # algorithms asked of the heuristic when searching
REPS = 3  # timed runs per candidate and timing (after one untimed run)
FINALISTS = 4  # the fastest of the first round, timed again
ROUNDS = 2  # further timings of each finalist


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

    def timed(i: int) -> float:
        def reps() -> None:
            for _ in range(REPS):
                run(i)

        return timer(reps)

    least: dict[int, float] = {}  # candidate -> its least timing
    for i in range(n):
        try:
            run(i)  # untimed: the first run of an algorithm may load its kernel
            least[i] = timed(i)
        except Exception:  # noqa: BLE001 - a candidate cuBLASLt refuses is not a choice
            continue
    if not least:
        return 0
    finalists = sorted(least, key=lambda i: (least[i], i))[:FINALISTS]
    if len(finalists) > 1:
        for _ in range(ROUNDS):
            for i in finalists:
                least[i] = min(least[i], timed(i))
    return min(finalists, key=lambda i: (least[i], i))


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
