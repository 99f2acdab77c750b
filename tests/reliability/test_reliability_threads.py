"""Tracing is per thread (issue #19): jit, grad, vmap, control flow and eager operations from
eight threads at once give each thread its own answer.

The current interpreter used to be a module global, so a thread tracing while another traced saw
the other's tracers (``EscapedTracerError`` in 48 of 48 calls). Every result here is checked
against numpy in float64, per thread, with a float32 tolerance.
"""

import threading

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu import lax
from blu.core.interpreter import EvalInterpreter, current_interpreter
from tests.helpers import env_flag

THREADS = 8
ROUNDS = 3
RTOL, ATOL = 1e-4, 1e-5  # float32 arithmetic against a float64 reference


@pytest.fixture(autouse=True)
def _kernel_cache(tmp_path_factory, monkeypatch, set_flag):
    d = str(tmp_path_factory.mktemp("blu-thread-cache"))
    env_flag("BLU_CACHE_DIR", d)  # the lowering reads it until it reads config
    set_flag("cache_dir", d)


def loss(w, x):
    return bnp.sum(bnp.tanh(x @ w))


def loss_ref(w, x):
    return np.tanh(x @ w).sum()


def grad_ref(w, x):
    return x.T @ (1.0 - np.tanh(x @ w) ** 2)


def cumulative(x):
    # a loop: its jvp/batching go through the shared jaxpr-transform caches
    return lax.fori_loop(0, 3, lambda i, c: c * 0.5 + bnp.sin(c), x)


def cumulative_ref(x):
    c = x.astype(np.float64)
    for _ in range(3):
        c = c * 0.5 + np.sin(c)
    return c


jit_loss = blu.jit(loss)
jit_grad = blu.jit(blu.grad(loss))
vmapped = blu.jit(blu.vmap(lambda v: bnp.sin(v) * v))
jit_loop_grad = blu.jit(blu.grad(lambda x: bnp.sum(cumulative(x))))


def work(tid: int, rnd: int) -> None:
    rng = np.random.default_rng(1000 * rnd + tid)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    x = rng.standard_normal((5 + tid % 3, 4)).astype(np.float32)  # several signatures at once
    w64, x64 = w.astype(np.float64), x.astype(np.float64)
    assert isinstance(current_interpreter(), EvalInterpreter)

    np.testing.assert_allclose(float(jit_loss(w, x)), loss_ref(w64, x64), RTOL, ATOL)
    np.testing.assert_allclose(np.asarray(jit_grad(w, x)), grad_ref(w64, x64), RTOL, ATOL)
    np.testing.assert_allclose(np.asarray(blu.grad(loss)(w, x)), grad_ref(w64, x64), RTOL, ATOL)
    np.testing.assert_allclose(np.asarray(vmapped(x)), np.sin(x64) * x64, RTOL, ATOL)
    # a fresh closure each call: traced (and staged) in this thread only
    scale = float(tid + 1)
    np.testing.assert_allclose(
        np.asarray(blu.jit(lambda a: bnp.exp(a) * scale)(x)), np.exp(x64) * scale, RTOL, ATOL
    )
    # eager operations
    np.testing.assert_allclose(np.asarray(bnp.cos(x) + x), np.cos(x64) + x64, RTOL, ATOL)
    # forward loop and its gradient (finite differences of the float64 reference)
    v = x[0]
    np.testing.assert_allclose(np.asarray(blu.jit(cumulative)(v)), cumulative_ref(v), RTOL, ATOL)
    eps = 1e-6
    v64 = v.astype(np.float64)
    fd = [
        (cumulative_ref(v64 + eps * e).sum() - cumulative_ref(v64 - eps * e).sum()) / (2 * eps)
        for e in np.eye(v.size)
    ]
    np.testing.assert_allclose(np.asarray(jit_loop_grad(v)), fd, 1e-3, 1e-4)
    assert isinstance(current_interpreter(), EvalInterpreter)


def test_jit_grad_vmap_from_eight_threads():
    errors: list[BaseException] = []
    lock = threading.Lock()
    for rnd in range(ROUNDS):
        start = threading.Barrier(THREADS)

        def run(tid: int, rnd: int = rnd, start: threading.Barrier = start) -> None:
            try:
                start.wait(timeout=60)
                work(tid, rnd)
            except BaseException as e:  # reported below with the thread's id
                with lock:
                    errors.append(AssertionError(f"thread {tid}, round {rnd}: {e!r}"))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        assert not any(t.is_alive() for t in threads), "a thread did not finish"
        assert not errors, "\n".join(str(e) for e in errors[:8])


def test_new_thread_starts_at_the_root_interpreter():
    """A thread started while another traces does not inherit the tracing interpreter."""
    seen = []

    def inner(x):
        t = threading.Thread(target=lambda: seen.append(current_interpreter()))
        t.start()
        t.join()
        return x * 2.0

    blu.jit(inner)(np.ones(3, np.float32))
    assert len(seen) == 1 and isinstance(seen[0], EvalInterpreter)
    assert isinstance(current_interpreter(), EvalInterpreter)  # this thread is back at the root
