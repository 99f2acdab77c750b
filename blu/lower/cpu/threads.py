"""Work of one CPU step split across blu's threads: a range of rows (or batch entries, or
columns) cut into parts, each run by a compiled kernel or a BLAS product called through ctypes
or numpy (which release the GIL for the call), the caller's thread running the first part. The
other parts go to spinning workers where the call site allows it (``native=True``: the part is
recorded as native calls, ``spin.py``), else to the blocking pool below, whose threads wait.

    cuts = split(n, threads)          # [(0, n1), (n1, n2), ...]: at most ``threads`` parts
    run_parts(lambda lo, hi: ..., cuts)

    bal = Balance()                   # one per call site (a product, a kernel)
    cuts = split(n, threads, share=bal.share)
    run_parts(fn, cuts, bal)          # times the parts, moves ``bal.share``

``Balance``: a pool thread starts its part tens of microseconds after the caller hands it over
(on the 2-core machine; a spinning worker after the first part of a call: a few microseconds;
docs/benchmarks/cpu_backend.md, session 9), and a part may run
slower on one core than on the other (a busy sibling, a colder cache), so equal parts leave the
caller waiting at the end of every split step (7 split steps per MLP training step). Each call
site learns the caller's share of the range from the times of its previous calls: the
caller's rate (its share over its time) against the others' (their share over the time from
the hand-over to the last one's end), the share moved part of the way to where the two
would finish together. A pool thread that does not run at all for a while (the machine busy)
drives the caller's share up to ``MAX_SHARE``, and it comes back once the thread keeps up.
Where the others would do less than ``1 - SOLO_SHARE`` of the range (the second core busy with
another process: there the MLP training step ran faster on one thread than split across two,
docs/benchmarks/cpu_backend.md, session 7), the caller runs the whole range for
``PROBE_EVERY`` calls (``Balance.solo``), then splits once more to measure again.

``config.cpu_threads`` (``BLU_CPU_THREADS``) sets how many threads; by default the cores the
process may use (``blas.threads_for``).
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
from collections.abc import Callable

from blu.lower.cpu import spin
from blu.lower.cpu.pool import Pool, Task

__all__ = ["Balance", "run_parts", "split"]

# the blocking pool: parts that cannot be posted to a spinning worker run on its threads
_pool: Pool | None = None
_pool_lock = threading.Lock()


def _workers(n: int) -> Pool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = Pool("blu-blas")
        _pool.grow(n)
        return _pool


def _after_fork() -> None:
    """A forked child has none of the parent's pool threads: a pool it inherited would take
    parts and never run them (the child waited forever), so it makes its own on first use."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)

MIN_SHARE, MAX_SHARE = 0.2, 0.85  # the caller's share of a split range stays within these
SOLO_SHARE = 0.8  # a balanced share above this: the caller runs it all (``Balance.solo``)
PROBE_EVERY = 8  # calls run whole before splitting again to measure
_STEP = 0.3  # how far one call moves the share toward the balanced one (smooths noise)


class Balance:
    """The caller's share of a split step's range at one call site (see the module docstring):
    None until the first split call (then equal parts); ``solo_left``: calls to run whole."""

    __slots__ = ("share", "solo_left", "warm")

    def __init__(self) -> None:
        self.share: float | None = None
        self.solo_left = 0
        self.warm = False  # the first split call is not learned from (the pool thread may be
        # created then, the caches are cold)

    def solo(self) -> bool:
        """Whether this call runs the whole range on the caller's thread (counts it)."""
        if self.solo_left > 0:
            self.solo_left -= 1
            return True
        return False

    def update(self, mine: float, t_mine: float, t_others: float) -> None:
        """After a split call in which the caller ran the fraction ``mine`` of the range in
        ``t_mine`` seconds and the other parts ended ``t_others`` seconds after the hand-over."""
        if t_mine <= 0 or t_others <= 0 or not 0 < mine < 1:
            return
        if not self.warm:
            self.warm = True
            return
        rate_me, rate_others = mine / t_mine, (1 - mine) / t_others
        balanced = rate_me / (rate_me + rate_others)
        if balanced > SOLO_SHARE:
            self.solo_left = PROBE_EVERY
        share = mine + _STEP * (balanced - mine)
        self.share = min(MAX_SHARE, max(MIN_SHARE, share))


def split(
    n: int, threads: int, min_rows: int = 1, share: float | None = None, align: int = 1
) -> list[tuple[int, int]]:
    """``[(lo, hi), ...]``: ``range(n)`` cut into at most ``threads`` contiguous, nonempty parts,
    each at least ``min_rows`` long where ``n`` allows; ``[(0, n)]`` for one thread, and ``[]``
    for ``n == 0``. Without ``share`` the parts are nearly equal (sizes differ by at most one);
    with it, the first part (the caller's) is about ``share`` of ``n`` (a multiple of ``align``
    where that leaves every part nonempty) and the others split the rest nearly equally."""
    if n <= 0:
        return []
    parts = max(1, min(threads, n // max(min_rows, 1), n))
    if share is None or parts == 1:
        return [(n * i // parts, n * (i + 1) // parts) for i in range(parts)]
    first = int(round(n * share / align)) * align
    if not parts - 1 <= n - first or first < 1:
        first = int(round(n * share))
    first = min(max(first, 1), n - (parts - 1))
    rest = n - first
    k = parts - 1
    return [(0, first)] + [(first + rest * i // k, first + rest * (i + 1) // k) for i in range(k)]


def run_parts(
    fn: Callable[[int, int], None],
    cuts: list[tuple[int, int]],
    balance: Balance | None = None,
    native: bool = False,
) -> None:
    """Run ``fn(lo, hi)`` for every part of ``cuts``: the first on the caller's thread, the others
    on the pool, all finished (and the first error raised) before returning; ``balance``: timed,
    the call site's share moved (``Balance.update``), or the whole range run as one part on the
    caller's thread (``Balance.solo``: ``fn`` must then take any range, not only the cuts).

    ``native``: ``fn`` only calls BLAS products through ``blas`` and kernels through
    ``spin.call`` (and numpy ops that ``spin.recording`` stops), and running it twice for a
    part does no harm: the other parts are then recorded and run by spinning workers
    (``spin.py``) where they are at hand."""
    if len(cuts) > 1 and balance is not None and balance.solo():
        fn(cuts[0][0], cuts[-1][1])  # ``fn`` takes any range
        return
    if len(cuts) <= 1:
        for lo, hi in cuts:
            fn(lo, hi)
        return
    if native and _run_native(fn, cuts, balance):
        return
    pool = _workers(len(cuts) - 1)
    # every part a Task made before it is submitted: each is run once, by a pool thread or taken
    # back by the caller, and none is left running when this returns (an interrupt anywhere,
    # inside ``submit`` too, included: a part still running writes into the next call's buffers)
    tasks = [Task(fn, lo, hi) for lo, hi in cuts[1:]]
    t0 = time.perf_counter()
    err = None
    try:
        for task in tasks:  # (each in a copy of the caller's context: ``config.override``)
            pool.submit(task, contextvars.copy_context())
        fn(*cuts[0])
    except BaseException as e:  # still finish the others: they write the same buffers
        err = e
    t1 = time.perf_counter()
    i = 0
    while i < len(tasks):  # (an interrupt anywhere in here: on with the same task)
        try:
            ran, e = tasks[i].finish()  # (at once for a task finished already)
            if not ran and (err is None or isinstance(err, Exception)):
                ran, e = tasks[i].run_here()  # never started (the pool busy or slow to wake):
                # run here (not after an interrupt: the caller wants out)
            err = err or e
            i += 1
        except BaseException as e:
            err = err or e
    if err is not None:
        raise err
    if balance is not None:  # (a part run here counts as the others' time: its share shrinks)
        n = cuts[-1][1] - cuts[0][0]
        balance.update((cuts[0][1] - cuts[0][0]) / n, t1 - t0,
                       max(task.end for task in tasks) - t0)  # fmt: skip


def _run_native(
    fn: Callable[[int, int], None], cuts: list[tuple[int, int]], balance: Balance | None
) -> bool:
    """``run_parts`` with the other parts on spinning workers; False (nothing run) where there
    are none free or a part cannot be recorded."""
    ws = spin.workers(len(cuts) - 1)
    if ws is None:
        return False
    free = [w.lock.free_here() for w in ws]  # not held by an enclosing call (``locks.py``)
    posted: list[spin.Worker] = []
    ends: list[float] = []
    try:
        for w, f in zip(ws, free):
            if not (f and w.lock.try_acquire()):  # another thread's call (or this one's) has it
                return False
        recorded = []
        for lo, hi in cuts[1:]:
            ops = spin.record(fn, lo, hi)
            if ops is None:
                return False
            recorded.append(ops)
        t0 = time.perf_counter()
        err = None
        try:
            for w, ops in zip(ws, recorded):
                posted.append(w)  # (before: ``finish`` of a part not posted returns at once)
                w.post(ops)
            fn(*cuts[0])
        except BaseException as e:  # still wait for the others: they write the same buffers
            err = e  # (an interrupt between two posts too: a part left posted would run
            # later, into buffers the next call uses, and its op list be overwritten under it)
        t1 = time.perf_counter()
        while len(ends) < len(posted):
            ends.append(posted[len(ends)].finish()[0])
        if err is not None:
            raise err
        if balance is not None:
            n = cuts[-1][1] - cuts[0][0]
            balance.update((cuts[0][1] - cuts[0][0]) / n, t1 - t0, max(ends) - t0)
        return True
    finally:
        # every posted part done before its worker is free again (an interrupt while finishing
        # too: ``finish`` of a finished part returns at once), then every lock taken here given
        # back (an interrupt right after an acquire too)
        for w in posted[len(ends) :]:
            w.finish()
        for w, f in zip(ws, free):
            w.lock.release_if_held(f)
