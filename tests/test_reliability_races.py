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
