"""A blu array never changes after it is made (issue #41): an input that some other code could
still write is copied where it enters, whatever its own flags say. A read-only view of a
writable numpy array used to be read in place (through ``jit``, ``lax.reshape``, constants),
so writing the base array afterwards changed a blu result."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu import lax
from blu.core.array import immutable

ENTRIES = {
    "jit identity": lambda v: blu.jit(lambda x: x)(v),
    "jit reshape": lambda v: blu.jit(lambda x: x.reshape(2, 3))(v),
    "jit arithmetic": lambda v: blu.jit(lambda x: x * 1.0)(v),
    "jit pytree": lambda v: blu.jit(lambda d: d["a"])({"a": v}),
    "lax.reshape": lambda v: lax.reshape(v, (2, 3)),
    "bnp.reshape": lambda v: bnp.reshape(v, (3, 2)),
    "bnp.asarray": lambda v: bnp.asarray(v),
    "bnp.array": lambda v: bnp.array(v),
    "eager add": lambda v: lax.add(v, np.zeros(6, np.float32)),
    "closure constant": lambda v: blu.jit(lambda x: x + v)(np.zeros(6, np.float32)),
    "numpy backend": lambda v: _numpy_backend(lambda: blu.jit(lambda x: x)(v)),
    "vmap identity": lambda v: blu.vmap(lambda x: x)(v),
    "jvp identity": lambda v: blu.jvp(lambda x: x, (v,), (v,))[0],
}


def _numpy_backend(fn):
    with blu.config.override(jit_backend="numpy"):
        return fn()


def _read_only_view() -> tuple[np.ndarray, np.ndarray]:
    base = np.arange(6, dtype=np.float32)
    v = base.view()
    v.flags.writeable = False
    return base, v


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_writing_the_base_of_a_read_only_view_changes_no_result(entry):
    base, v = _read_only_view()
    r = ENTRIES[entry](v)
    want = np.asarray(r).copy()
    np.testing.assert_array_equal(want.ravel(), np.arange(6, dtype=np.float32))
    base[:] = 100.0
    np.testing.assert_array_equal(np.asarray(r), want)


def test_jit_fast_path_copies_a_read_only_view_too():
    f = blu.jit(lambda x: x)
    _, v0 = _read_only_view()
    f(v0)  # the full path, then the fast path for calls like it
    rs = []
    for _ in range(3):
        base, v = _read_only_view()
        rs.append((base, f(v)))
    for base, r in rs:
        base[:] = -1.0
        np.testing.assert_array_equal(np.asarray(r), np.arange(6, dtype=np.float32))


def test_immutable_walks_to_the_base():
    a = np.arange(4.0)
    assert not immutable(a)
    v = a[::2]
    v.flags.writeable = False
    assert not immutable(v)  # its base is writable
    a.flags.writeable = False
    assert immutable(v) and immutable(a)  # read-only all the way, owned at the end
    buf = bytearray(32)
    assert not immutable(np.frombuffer(buf, np.float32))  # a bytearray can be written
    m = mmap.mmap(-1, 32)
    mv = np.frombuffer(m, np.float32)
    mv.flags.writeable = False
    assert not immutable(mv)
    out = np.asarray(blu.jit(lambda x: x + 1.0)(np.ones(3, np.float32)))
    assert immutable(out)  # blu's own results: no copy when passed back in


def test_immutable_input_is_not_copied():
    """What blu can prove immutable is still read in place (no copy per call)."""
    a = np.arange(6, dtype=np.float32)
    a.flags.writeable = False
    r = blu.jit(lambda x: x)(a)
    assert np.shares_memory(np.asarray(r), a)


def test_a_transform_never_hands_back_the_users_buffer():
    """``vmap``/``jvp`` of a function returning its input gave back the user's own numpy
    array (writable or not): now a blu Array of its own."""
    a = np.arange(4.0, dtype=np.float32)
    for r in (blu.vmap(lambda x: x)(a), blu.jvp(lambda x: x, (a,), (a,))[0]):
        assert isinstance(r, blu.Array) and not np.shares_memory(np.asarray(r), a)
    assert a.flags.writeable  # the user's array is left as it was
