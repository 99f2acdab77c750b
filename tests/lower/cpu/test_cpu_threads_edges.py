"""Edge cases of the CPU threads and jit's fast path, each found by probing them and each with
the case that showed it: a forked child waiting forever on the parent's blocking pool, a
batched product run by numpy while it was being recorded for a worker, a part left posted when
the caller was interrupted between two posts, and a donated constant the fast path still read."""

from __future__ import annotations

import multiprocessing
import os

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu.core.errors import BluValueError
from blu.lower.cpu import blas, spin
from blu.lower.cpu import threads as cpu_threads

needs_spin = pytest.mark.skipif(spin._code() is None, reason="MLIR cannot compile the loop here")


def _int_product_in_child(a: np.ndarray, queue) -> None:  # (module level: fork pickles nothing)
    f = blu.jit(lambda a: a @ a)
    queue.put(np.asarray(f(a)))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # (fork of a threaded process)
def test_a_forked_child_runs_split_steps_on_the_pool(set_flag):
    """An integer product is not recordable: it splits on the blocking pool of ``blas.py``. A
    child forked after the parent made that pool has none of its threads; it waited forever."""
    set_flag("cpu_threads", 2)
    rng = np.random.default_rng(0)
    a = rng.integers(-3, 4, (384, 384)).astype(np.int32)
    want = a.astype(np.int64) @ a.astype(np.int64)
    np.testing.assert_array_equal(np.asarray(blu.jit(lambda a: a @ a)(a)), want)  # pool made
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    p = ctx.Process(target=_int_product_in_child, args=(a, queue))
    p.start()
    try:
        got = queue.get(timeout=120)
    finally:
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join()
    assert p.exitcode == 0
    np.testing.assert_array_equal(got, want)


@needs_spin
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_recorded_batched_product_runs_nothing_now(dtype):
    """``blas.matmul`` on one thread (the second product of a pair, ``cpu/pairs.py``) recorded
    for a spinning worker: numpy's batched matmul computed it on the spot, before the part it
    belongs to ran. Recorded, ``out`` is untouched until the worker runs the ops."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((5, 24, 16)).astype(dtype)
    b = rng.standard_normal((5, 16, 8)).astype(dtype)
    out = np.full((5, 24, 8), np.nan, dtype)
    ops = spin.record(lambda lo, hi: blas.matmul(a, b, out, 1), 1, 2)
    assert ops is not None and len(ops.slots) == 5 * spin._S.OP_SLOTS  # one call per matrix
    assert np.isnan(out).all()  # nothing ran while recording
    w = spin.workers(1)[0]
    with w.lock:
        w.post(ops)
        w.finish()
    want = a.astype(np.float64) @ b.astype(np.float64)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol * np.abs(want).max())


@needs_spin
def test_paired_batched_products_match_float64(set_flag):
    set_flag("cpu_threads", 2)
    rng = np.random.default_rng(2)
    x, y = (rng.standard_normal((4, 256, 256)).astype(np.float32) for _ in range(2))
    f = blu.jit(lambda x, y: (x @ y.transpose(0, 2, 1), y @ x.transpose(0, 2, 1)))
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    wants = (xd @ yd.transpose(0, 2, 1), yd @ xd.transpose(0, 2, 1))
    for _ in range(3):
        for got, want in zip(f(x, y), wants):
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4,
                                       atol=1e-4 * np.abs(want).max())  # fmt: skip


class _Asleep(spin.Worker):
    def _loop(self) -> None:  # never runs the native loop: only the caller runs its parts
        return


class _Interrupt(BaseException):
    pass


@needs_spin
def test_an_interrupted_post_leaves_no_part_behind(monkeypatch):
    """An interrupt (KeyboardInterrupt) after the first of two posts: the posted part was left
    to run later, into buffers the next call uses. Every posted part is done on return."""
    code = spin._code()
    ws = [_Asleep(code), _Asleep(code)]
    monkeypatch.setattr(spin, "workers", lambda n: ws[:n])
    post = spin.Worker.post
    count = [0]

    def post_once(self, ops):
        count[0] += 1
        if count[0] == 2:
            raise _Interrupt
        post(self, ops)

    monkeypatch.setattr(spin.Worker, "post", post_once)
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((48, 48)).astype(np.float32) for _ in range(2))
    out = np.full((48, 48), np.nan, np.float32)

    def part(lo: int, hi: int) -> None:
        blas.gemm(a[lo:hi], b, out[lo:hi], 1.0, 0.0)

    with pytest.raises(_Interrupt):
        cpu_threads.run_parts(part, [(0, 16), (16, 32), (32, 48)], native=True)
    w = ws[0]
    assert w.ctl[spin._S.DONE] == w.ctl[spin._S.SEQ]  # its part ran before the return
    assert not w.keep
    want = a[16:32].astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out[16:32], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    assert not w.lock.locked() and not ws[1].lock.locked()


def test_the_fast_path_raises_for_a_donated_constant():
    """A jitted function closing over an Array donated since: the full path raises that it was
    deleted; the fast path ran on with the buffer it held (which also kept the donation from
    reusing it)."""
    w = blu.jit(lambda a: a * 1.0)(np.arange(4.0, dtype=np.float32))
    f = blu.jit(lambda x: x + w)
    x = np.ones(4, np.float32)
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(f(x)), np.arange(4.0) + 1)
    donate = blu.jit(lambda a: a * 100.0, donate_argnums=0)
    np.testing.assert_allclose(np.asarray(donate(w)), np.arange(4.0) * 100)
    assert w.is_deleted()
    for _ in range(2):
        with pytest.raises(BluValueError, match="deleted"):
            f(x)
    # a constant still alive: the fast path reads it at each call
    v = bnp.asarray(np.full(4, 2.0, np.float32))
    g = blu.jit(lambda x: x * v)
    for k in range(3):
        np.testing.assert_allclose(np.asarray(g(x + k)), (np.ones(4) + k) * 2.0)
