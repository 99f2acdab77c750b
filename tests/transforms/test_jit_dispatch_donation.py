"""jit's fast path (``blu/transforms/dispatch.py``) for donated calls and the CPU's lean call
(``blu/lower/cpu/lean.py``): a training step with ``donate_argnums`` repeats without the full
path, lends, copies and deletes exactly as the full path does, and every result equals a numpy
loop's."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu.core.errors import BluValueError
from blu.transforms import jit as jit_mod


@pytest.fixture
def lookups(monkeypatch):
    """How many calls took the full path (``Jitted._lookup``)."""
    n = [0]
    lookup = jit_mod.Jitted._lookup

    def counted(self, *a, **k):
        n[0] += 1
        return lookup(self, *a, **k)

    monkeypatch.setattr(jit_mod.Jitted, "_lookup", counted)
    return n


def _step(params, state, batch):
    new = {k: p - 0.5 * batch * state["m"] for k, p in params.items()}
    return new, {"m": state["m"] * 0.9 + 1.0}


def test_a_donating_training_step_takes_the_fast_path(lookups):
    step = blu.jit(_step, donate_argnums=(0, 1))
    rng = np.random.default_rng(0)
    p64 = {"w": rng.standard_normal(6), "b": rng.standard_normal(6)}
    m64 = np.ones(6)
    batch = rng.standard_normal(6).astype(np.float32)
    params = {k: bnp.asarray(v.astype(np.float32)) for k, v in p64.items()}
    state = {"m": bnp.asarray(m64.astype(np.float32))}
    olds = []
    for _ in range(5):
        olds.append((params, state))
        params, state = step(params, state, batch)
        p64 = {k: p - 0.5 * batch.astype(np.float64) * m64 for k, p in p64.items()}
        m64 = m64 * 0.9 + 1.0
    assert lookups[0] == 1  # the first call only
    for k in p64:
        np.testing.assert_allclose(np.asarray(params[k]), p64[k], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(state["m"]), m64, rtol=1e-5)
    for p, s in olds:  # every donated Array is deleted, the fast path's as the full path's
        assert p["w"].is_deleted() and p["b"].is_deleted() and s["m"].is_deleted()
        with pytest.raises(BluValueError, match="Array has been deleted.*donated to jit"):
            np.asarray(p["w"])
    assert not bnp.asarray(batch).is_deleted()


def test_a_deleted_donated_array_passed_again_raises(lookups):
    f = blu.jit(lambda x: x * 2.0, donate_argnums=0)
    a = bnp.asarray(np.ones(4, np.float32))
    b, full_line = f(a), sys._getframe().f_lineno
    c, fast_line = f(b), sys._getframe().f_lineno  # the fast path
    assert lookups[0] == 1 and np.asarray(c).tolist() == [4.0] * 4
    here = __file__.rstrip("c")
    for deleted, line in ((a, full_line), (b, fast_line)):  # each names its call's line
        with pytest.raises(BluValueError) as e:
            np.asarray(deleted)
        assert f"{here}:{line} (test_a_deleted_donated_array_passed_again_raises)" in str(e.value)
    with pytest.raises(BluValueError, match="Array has been deleted.*argument leaf 0"):
        f(b)  # deleted by the fast path's call: the full path names the donation


def test_donated_numpy_arguments_are_copied_on_the_fast_path(lookups):
    f = blu.jit(lambda x, y: x + y, donate_argnums=0)
    x = np.arange(5, dtype=np.float32)
    y = bnp.asarray(np.ones(5, np.float32))
    for _ in range(3):
        out = f(x, y)
        assert np.asarray(out).tolist() == [float(i + 1) for i in range(5)]
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]  # never written
    assert lookups[0] == 1 and not y.is_deleted()


def test_the_fast_path_lends_donated_buffers_as_the_full_path(lookups):
    """A donated Array nothing else refers to gives its buffer to the output, on the first
    (full) call and the later (fast) ones alike; one that is viewed elsewhere does not."""
    f = blu.jit(lambda x: x + 1.0, donate_argnums=0)
    x = bnp.asarray(np.zeros(1024, np.float32))
    for k in range(3):
        addr = x._buf.ctypes.data
        x = f(x)
        assert x._buf.ctypes.data == addr, k  # written in place
    assert lookups[0] == 1
    assert getattr(f._fast.run, "lent", None) is not None  # the lean call lends without flags
    assert not x._buf.flags.writeable  # (never made writable on the way)
    view = np.asarray(x)  # a view the caller keeps: its values must not change
    y = f(x)
    assert view.tolist() == [3.0] * 1024 and np.asarray(y).tolist() == [4.0] * 1024
    assert lookups[0] == 1


def test_a_buffer_lent_on_the_fast_path_is_read_only_in_every_array_that_sees_it(lookups):
    """The fast path lets go of a donated Array's buffer without marking it read-only again:
    the buffer lives on only as an output, whose Array (and its base) cannot be written."""
    f = blu.jit(lambda x: (x * 2.0, x + 1.0), donate_argnums=0)
    x = bnp.asarray(np.arange(8, dtype=np.float32))
    for _ in range(3):
        a, b = f(x)
        for out in (a, b):
            buf = np.asarray(out)
            assert not buf.flags.writeable and (buf.base is None or not buf.base.flags.writeable)
            with pytest.raises(ValueError):
                buf[0] = 1.0
        assert x.is_deleted()
        x = a
    np.testing.assert_array_equal(np.asarray(x), np.arange(8, dtype=np.float32) * 8.0)
    assert lookups[0] == 1


def test_a_one_kernel_program_takes_the_lean_call():
    f = blu.jit(lambda x, y: x * 2.0 + y)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = bnp.asarray(np.ones((2, 3), np.float32))
    f(x, y)
    assert f._fast is not None and f._fast.run.__module__ == "blu.lower.cpu.lean"
    for k in range(3):
        np.testing.assert_array_equal(np.asarray(f(x + k, y)), (x + k) * 2.0 + 1.0)
    # a non-contiguous argument of the same shape and dtype: the general call
    t = np.arange(6, dtype=np.float32).reshape(3, 2).T
    np.testing.assert_array_equal(np.asarray(f(t, y)), t * 2.0 + 1.0)
    out = f(x, y)
    assert not np.asarray(out).flags.writeable  # a blu Array's buffer is read-only


def test_a_program_of_several_kernels_takes_the_lean_call():
    f = blu.jit(lambda x: (bnp.sum(x, 0), bnp.max(x, 1)))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    f(x)
    assert f._fast is not None and f._fast.run.__module__ == "blu.lower.cpu.lean"
    for _ in range(2):
        x = rng.standard_normal((4, 6)).astype(np.float32)
        s, m = f(x)
        np.testing.assert_allclose(np.asarray(s), x.astype(np.float64).sum(0), rtol=1e-6)
        np.testing.assert_array_equal(np.asarray(m), x.max(1))


def test_threads_donating_through_one_function():
    """Threads carry their own state through one donating function: the lean call is taken by
    one thread at a time (the others run the general call); every result is its own thread's."""
    import threading

    f = blu.jit(lambda x: x * 0.5 + 1.0, donate_argnums=0)
    errors = []

    def run(start: float) -> None:
        x, want = bnp.asarray(np.full(16, start, np.float32)), np.full(16, start)
        for _ in range(100):
            x, want = f(x), want * 0.5 + 1.0
        if not np.allclose(np.asarray(x), want, rtol=1e-6):
            errors.append((start, np.asarray(x)))

    threads = [threading.Thread(target=run, args=(s,)) for s in (0.0, 10.0, -7.0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
