"""jit's fast path for a repeated signature (``blu/transforms/dispatch.py``): taken when the call
is like the previous one, left for the full path whenever anything differs (shapes, dtypes,
weak types, structure, flags, an enclosing transform, a deleted array), and always with the
values an independent computation gives."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_repeated_calls_take_the_fast_path(lookups):
    f = blu.jit(lambda x, y: x * 2.0 + y)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = bnp.asarray(np.ones(3, np.float32))
    for k in range(4):
        out = f(x + k, y)
        np.testing.assert_allclose(np.asarray(out), (x + k).astype(np.float64) * 2 + 1)
        assert isinstance(out, blu.Array) and out.dtype == np.float32
    assert lookups[0] == 1


def test_a_different_signature_takes_the_full_path(lookups):
    f = blu.jit(lambda x: bnp.sum(x * x))
    a = np.ones((2, 3), np.float32)
    assert float(f(a)) == 6.0
    assert float(f(np.ones((3, 3), np.float32))) == 9.0  # another shape
    assert float(f(np.ones((3, 3), np.float64))) == 9.0  # another dtype
    assert float(f(np.ones((3, 3), np.float64))) == 9.0  # (fast again)
    assert lookups[0] == 3
    assert float(f(2.0)) == 4.0  # a Python scalar: weakly typed, always the full path
    assert float(f(2.0)) == 4.0
    assert lookups[0] == 5


def test_weak_type_and_structure_changes():
    f = blu.jit(lambda t: t["a"] + t["b"])
    one = bnp.asarray(np.float32(1))
    weak = bnp.asarray(1.0) + 0  # weakly typed
    assert weak.weak_type
    out = f({"a": one, "b": one})
    assert not out.weak_type and float(out) == 2.0
    out = f({"a": weak, "b": weak})
    assert out.weak_type == (weak + weak).weak_type and float(out) == 2.0
    assert float(f({"a": one, "b": one, "c": one})) == 2.0  # another structure
    assert float(f({"a": one, "b": weak})) == 2.0


def test_flags_and_transforms_are_respected(set_flag, lookups):
    f = blu.jit(lambda x: bnp.sin(x) * x)
    x = np.linspace(-1, 1, 5).astype(np.float32)
    f(x)
    f(x)
    assert lookups[0] == 1
    set_flag("debug_nans", False)  # any flag set: the next call is checked in full
    f(x)
    assert lookups[0] == 2
    # under grad and vmap the call is traced (never the fast path's eager executable)
    g = blu.grad(lambda x: bnp.sum(f(x)))(x)
    np.testing.assert_allclose(np.asarray(g), np.cos(x) * x + np.sin(x), rtol=1e-6, atol=1e-6)
    v = blu.vmap(f)(np.stack([x, 2 * x]))
    np.testing.assert_allclose(np.asarray(v)[1], np.sin(2 * x) * 2 * x, rtol=1e-6, atol=1e-6)


def test_a_deleted_array_raises_through_the_full_path():
    f = blu.jit(lambda x: x + 1)
    donor = blu.jit(lambda x: x * 2, donate_argnums=0)
    a = bnp.asarray(np.ones(4, np.float32))
    f(a)
    f(a)
    donor(a)  # deletes a
    with pytest.raises(BluValueError, match="deleted"):
        f(a)


def test_a_users_numpy_array_is_read_at_each_call():
    f = blu.jit(lambda x: x * 3)
    x = np.ones(4, np.float32)
    first = f(x)
    x[:] = 2  # written between calls: the next call reads the new values
    second = f(x)
    assert np.asarray(first).tolist() == [3.0] * 4
    assert np.asarray(second).tolist() == [6.0] * 4


def test_clear_cache_drops_the_fast_path(lookups):
    f = blu.jit(lambda x: x - 1)
    x = np.zeros(3, np.float32)
    f(x)
    f(x)
    f.clear_cache()
    f(x)
    assert lookups[0] == 2


@given(shape=st.lists(st.integers(0, 4), min_size=0, max_size=3),
       dtype=st.sampled_from([np.float32, np.float64, np.int32]),
       tuple_out=st.booleans())  # fmt: skip
@settings(max_examples=30, deadline=None)
def test_fast_path_values(shape, dtype, tuple_out):
    rng = np.random.default_rng(len(shape))
    f = blu.jit(lambda a, b: (a * b, a - b) if tuple_out else a * b + a)
    for _ in range(3):
        a = (rng.standard_normal(shape) * 10).astype(dtype)
        b = (rng.standard_normal(shape) * 10).astype(dtype)
        out = f(a, bnp.asarray(b))
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        eps = np.finfo(dtype).eps if dtype != np.int32 else 0.0
        scale = 4 * eps * (1 + np.abs(a64 * b64).max(initial=0) + np.abs(a64).max(initial=0))

        def close(got, want):
            np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=0, atol=scale)

        if tuple_out:
            assert isinstance(out, tuple) and len(out) == 2
            close(out[0], a64 * b64)
            close(out[1], a64 - b64)
        else:
            close(out, a64 * b64 + a64)


def test_disable_jit_after_the_fast_path():
    calls = []

    def f(x):
        calls.append(1)  # runs when traced, or each call under disable_jit
        return x + 1

    g = blu.jit(f)
    x = np.zeros(2, np.float32)
    g(x)
    g(x)
    assert len(calls) == 1
    with blu.disable_jit():
        assert np.asarray(g(x)).tolist() == [1.0, 1.0]
    assert len(calls) == 2
    g(x)
    assert len(calls) == 2  # the trace is still cached


def test_nan_checks_raise_on_the_fast_path(set_flag, lookups):
    """The fast path made while NaNs are checked: the executable's error reaches the caller
    (it is no ``ValueError``, so the fast path does not hand it to the full path)."""
    from blu.lower.program import BluFloatingPointError

    set_flag("debug_nans", True)
    f = blu.jit(lambda x: bnp.log(x))
    ones = np.ones(3, np.float32)
    f(ones)
    np.testing.assert_allclose(np.asarray(f(ones)), np.zeros(3), atol=0)
    for _ in range(2):
        with pytest.raises(BluFloatingPointError, match="NaN"):
            f(-ones)
    assert lookups[0] == 1


def test_threads_alternating_signatures():
    """Two threads call one jitted function with different shapes: each call's fast path is
    the other's signature half of the time; every result is its own call's."""
    import threading

    f = blu.jit(lambda x: bnp.sum(x * x, axis=0))
    errors = []

    def run(n: int) -> None:
        a = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
        want = (a.astype(np.float64) ** 2).sum(0)
        for _ in range(200):
            got = np.asarray(f(a))
            if got.shape != want.shape or not np.allclose(got, want, rtol=1e-6):
                errors.append((n, got))
                return

    threads = [threading.Thread(target=run, args=(n,)) for n in (2, 5, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
