"""Donation holds (as in JAX): a donated blu.Array is deleted by the call and any later use of it
raises a BluError naming the donation; results are never changed behind the caller's back;
donated numpy arrays are never written; bad donate_argnums are refused at jit time."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import GPU_MARKS, make_device, put

import blu
import blu.numpy as bnp


def double(a):
    return a * 2.0


def test_donated_array_is_deleted_and_result_kept():
    f = blu.jit(double, donate_argnums=0)
    a = bnp.arange(6.0)
    r = f(a)
    expect = np.arange(6.0) * 2.0
    np.testing.assert_array_equal(np.asarray(r), expect)
    assert a.is_deleted() and not r.is_deleted()
    with pytest.raises(blu.BluError, match=r"Array has been deleted.*donated to jit\(double\)"):
        f(a)  # was: silently overwrote r's buffer
    with pytest.raises(blu.BluError, match="Array has been deleted"):
        np.asarray(a)
    with pytest.raises(blu.BluError, match="Array has been deleted"):
        a + 1.0
    assert a.shape == (6,) and "deleted" in repr(a)
    np.testing.assert_array_equal(np.asarray(r), expect)  # r unchanged by the failed call
    r2 = f(r)  # chaining donations is the intended use
    np.testing.assert_array_equal(np.asarray(r2), expect * 2.0)
    assert r.is_deleted()


def test_donated_numpy_input_is_not_written():
    f = blu.jit(double, donate_argnums=0)
    n = np.arange(5.0, dtype=np.float32)
    r = f(n)
    np.testing.assert_array_equal(n, np.arange(5.0))
    np.testing.assert_array_equal(np.asarray(r), np.arange(5.0) * 2.0)
    np.testing.assert_array_equal(np.asarray(f(n)), np.arange(5.0) * 2.0)


def test_views_of_a_donated_array_are_not_changed():
    f = blu.jit(double, donate_argnums=0)
    a = bnp.arange(6.0)
    held = np.asarray(a)  # the caller still sees the buffer: it must not be written
    view = a.reshape(2, 3)
    f(a)
    np.testing.assert_array_equal(held, np.arange(6.0))
    np.testing.assert_array_equal(np.asarray(view), np.arange(6.0).reshape(2, 3))


def test_failed_call_keeps_the_donated_array():
    f = blu.jit(lambda a, b: a + b, donate_argnums=0)
    a = bnp.ones(3)
    with pytest.raises(blu.BluError):
        f(a, bnp.ones(4))  # shapes do not broadcast: nothing ran
    assert not a.is_deleted()
    np.testing.assert_array_equal(np.asarray(a), np.ones(3))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(donate_argnums=2), r"donate_argnums \[2\] out of range"),
        (dict(donate_argnums=-3), r"donate_argnums \[-3\] out of range"),
        (dict(donate_argnums=(0,), static_argnums=(0,)), "both static and donated"),
        (dict(donate_argnums=1, static_argnames="b"), "both static and donated"),
        (dict(donate_argnums="a"), "must be ints"),
        (dict(donate_argnums=1.5), "must be ints"),  # was Python's "not iterable"
        (dict(donate_argnums=(0, 0.0)), "must be ints"),
    ],
)
def test_bad_donate_argnums_are_refused_at_jit_time(kwargs, match):
    with pytest.raises(blu.BluError, match=match):
        blu.jit(lambda a, b: a + b, **kwargs)


def test_negative_donate_argnums_count_from_the_end():
    f = blu.jit(lambda a, b: a + b, donate_argnums=-1)
    a, b = bnp.ones(3), bnp.ones(3)
    f(a, b)
    assert b.is_deleted() and not a.is_deleted()


@pytest.mark.parametrize(
    "make_copy",
    [
        lambda a: bnp.array(a, copy=True),
        lambda a: bnp.array(a),  # copy=True is the default, as in JAX
        lambda a: bnp.asarray(a, copy=True),
        lambda a: bnp.array(a, dtype=a.dtype, copy=True),
        lambda a: bnp.copy(a),
    ],
)
def test_copy_is_independent_of_a_later_donation(make_copy):
    """A copy is a new buffer: donating (or deleting) the original leaves it alive, as in JAX
    (was: ``array(x, copy=True)`` returned ``x`` itself, deleted with it)."""
    a = bnp.arange(4.0)
    c = make_copy(a)
    assert c is not a
    blu.jit(double, donate_argnums=0)(a)
    assert a.is_deleted() and not c.is_deleted()
    np.testing.assert_array_equal(np.asarray(c), [0.0, 1.0, 2.0, 3.0])
    b = bnp.arange(3, dtype=bnp.int32)
    d = make_copy(b)
    b.delete()
    np.testing.assert_array_equal(np.asarray(d), [0, 1, 2])
    assert np.asarray(d).dtype == np.int32


def test_no_copy_shares_the_donated_buffer():
    """``asarray`` (copy None) and ``array(copy=False)`` return the array itself, as JAX does
    without a needed copy: donating it deletes both names."""
    a = bnp.arange(4.0)
    assert bnp.asarray(a) is a and bnp.array(a, copy=False) is a
    w = bnp.array(5.0)  # weakly typed: the copy keeps the weak type
    assert bnp.array(w, copy=True).weak_type == w.weak_type


def _on_gpu(test):
    for mark in GPU_MARKS:
        test = mark(test)
    return test


@_on_gpu
def test_copy_of_a_device_array_is_a_new_device_buffer():
    """On a GPU (or the simulated one) too: ``array(x, copy=True)`` is a device-to-device copy
    that outlives ``x``; ``asarray`` (copy None) is ``x`` itself."""
    x = put(make_device(), np.arange(4.0, dtype=np.float32))
    c = bnp.array(x, copy=True)
    assert c is not x and bnp.asarray(x) is x
    x.delete()
    assert x.is_deleted() and not c.is_deleted()
    np.testing.assert_array_equal(np.asarray(c), np.arange(4.0, dtype=np.float32))
