"""Concurrent calls never share per-call state (issue #41): the donation of one array passed
twice is decided per call, whatever another thread's call decided meanwhile.

Each test forces the interleaving that broke (a hook parks one thread at a known point while
another runs a whole call), then repeats the race freely for a bounded number of rounds; every
result is checked against numpy.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu.lower.cpu import blas
from tests.helpers import env_flag

N = 4096
BASE = np.arange(N, dtype=np.float32)
EXPECTED = BASE * 2.0 + BASE[::-1]
WAIT = 30.0  # seconds: a bound on every wait (a hang fails, never blocks the suite)


@pytest.fixture(autouse=True)
def _kernel_cache(tmp_path_factory, set_flag):
    d = str(tmp_path_factory.mktemp("blu-races-cache"))
    env_flag("BLU_CACHE_DIR", d)
    set_flag("cache_dir", d)


def _donating():
    return blu.jit(lambda x, y: x * 2.0 + y[::-1], donate_argnums=(0,))


def test_donation_overlap_is_decided_per_call(monkeypatch):
    """Thread A passes one array twice (position 0 donated); thread B, with two distinct arrays,
    runs a whole call after A's call started and before A chose its buffers. A's answer must
    not take B's overlap analysis (it used to: A then wrote its result over its own input)."""
    f = _donating()
    np.asarray(f(bnp.asarray(BASE), bnp.asarray(BASE)))  # compiled and cached
    a_started, b_done = threading.Event(), threading.Event()
    holder: dict = {}
    real = blas.use_threads

    def hook(n: int) -> None:  # called by every CPU call before it places its buffers
        if threading.get_ident() == holder.get("a"):
            a_started.set()
            assert b_done.wait(WAIT)
        real(n)

    monkeypatch.setattr(blas, "use_threads", hook)
    out: dict = {}

    def call_a() -> None:
        holder["a"] = threading.get_ident()
        x = bnp.asarray(BASE)
        out["a"] = np.asarray(f(x, x))

    t = threading.Thread(target=call_a)
    t.start()
    assert a_started.wait(WAIT)
    out["b"] = np.asarray(f(bnp.asarray(BASE), bnp.asarray(BASE)))
    b_done.set()
    t.join(WAIT)
    assert not t.is_alive()
    np.testing.assert_array_equal(out["b"], EXPECTED)
    np.testing.assert_array_equal(out["a"], EXPECTED)


def test_donation_under_threads_many_rounds():
    """Four threads, half passing one array twice, half two arrays, started together each round
    (a barrier): every answer right."""
    f = _donating()
    np.asarray(f(bnp.asarray(BASE), bnp.asarray(BASE)))
    rounds, threads = 60, 4
    barrier = threading.Barrier(threads, timeout=WAIT)
    wrong: list = []

    def work(same: bool) -> None:
        for _ in range(rounds):
            x = bnp.asarray(BASE)
            y = x if same else bnp.asarray(BASE)
            barrier.wait()
            r = np.asarray(f(x, y))
            if not np.array_equal(r, EXPECTED):
                wrong.append(same)

    ts = [threading.Thread(target=work, args=(i % 2 == 0,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(4 * WAIT)
    assert not any(t.is_alive() for t in ts)
    assert wrong == []


# ---- flags per thread ------------------------------------------------------------------------


def _in_thread(fn) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_overlapping_overrides_in_two_threads_each_restore_their_own():
    """A enters, B enters, A leaves, B leaves (forced by events): each thread sees its own value
    inside its block, the other's never, and the flag is as before afterwards (it used to stay
    at A's value for good: B restored what it saw on entry)."""
    from blu.core.config import config

    before = config.debug
    a_in, b_in, a_out, b_out = (threading.Event() for _ in range(4))
    seen: dict = {}

    def a() -> None:
        with config.override(debug=3):
            a_in.set()
            assert b_in.wait(WAIT)
            seen["a"] = config.debug
        a_out.set()

    def b() -> None:
        assert a_in.wait(WAIT)
        seen["b_before"] = config.debug
        with config.override(debug=4):
            b_in.set()
            assert a_out.wait(WAIT)
            seen["b"] = config.debug
        b_out.set()

    ts = [_in_thread(a), _in_thread(b)]
    for t in ts:
        t.join(WAIT)
    assert b_out.is_set() and not any(t.is_alive() for t in ts)
    assert seen == {"a": 3, "b_before": before, "b": 4}
    assert config.debug == before


def test_update_is_process_wide_and_an_override_shadows_it_in_its_thread(set_flag):
    from blu.core.config import config

    set_flag("debug", 0)
    with config.override(debug=2):
        t = _in_thread(lambda: config.update("debug", 1))
        t.join(WAIT)
        assert config.debug == 2  # this thread's block
        seen: list = []
        _in_thread(lambda: seen.append(config.debug)).join(WAIT)
        assert seen == [1]  # another thread: the process-wide value
    assert config.debug == 1


def test_disable_jit_in_one_thread_leaves_another_threads_jit_alone():
    """Thread A sits inside ``blu.disable_jit()`` while thread B calls a jitted function: B's
    call is traced (its argument a tracer), also through jit's fast path; A's calls of the same
    function run eagerly though B made the fast path."""
    from blu.core.interpreter import Tracer

    kinds: list = []

    def fn(x):
        kinds.append((threading.get_ident(), isinstance(x, Tracer)))
        return x * 2.0

    f = blu.jit(fn)
    x = np.ones(3, np.float32)
    f(x)
    f(x)  # B's fast path (main thread = B)
    a_in, b_done = threading.Event(), threading.Event()
    a_out: list = []

    def a() -> None:
        with blu.disable_jit():
            a_in.set()
            assert b_done.wait(WAIT)
            a_out.append(np.asarray(f(x)))
            a_out.append(np.asarray(f(x)))

    t = _in_thread(a)
    assert a_in.wait(WAIT)
    kinds.clear()
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(f(x)), 2.0 * x)
    assert kinds == []  # cached trace, fast path: B never ran ``fn`` eagerly
    b_done.set()
    t.join(WAIT)
    assert not t.is_alive()
    assert [k for _, k in kinds] == [False, False]  # A: eager both times (no tracer)
    assert all(ident == t.ident for ident, _ in kinds)
    for r in a_out:
        np.testing.assert_array_equal(r, 2.0 * x)
    kinds.clear()
    f(x)  # back in B, after A's block: still jitted
    assert kinds == []


def test_override_reaches_blus_worker_threads_of_this_call(set_flag):
    """A split product's parts on blu's pool threads see the calling thread's override (the
    caller's context is copied to each part)."""
    from blu.core.config import config
    from blu.lower.cpu import threads as cpu_threads

    seen: list = []
    with config.override(debug=4):
        cpu_threads.run_parts(lambda lo, hi: seen.append(config.debug), [(0, 1), (1, 2), (2, 3)])
    assert seen == [4, 4, 4]
