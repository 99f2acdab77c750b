"""In-place updates on the CPU: a kernel output the memory plan writes over an input (an arena
buffer reused, a donated argument) is stored through the input's pointer (``Node.inplace``), and
a donated argument's buffer is handed back as the result itself (so the next call can donate it
again). Every value is checked against numpy float64."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.lower.cpu.kernels import emit_node


def _inplace_kernels(low) -> list:
    return [n for n in low._program.plan.nodes if n.kind == "kernel" and n.inplace]


def _mlp(x, w1, b, w2):
    h = x @ w1  # a product into the arena
    g = bnp.tanh(h + b) * h  # elementwise over h, whose last reader it is: written over h
    return g @ w2


def _mlp_ref(x, w1, b, w2):
    x, w1, b, w2 = (np.asarray(a, np.float64) for a in (x, w1, b, w2))
    h = x @ w1
    return (np.tanh(h + b) * h) @ w2


def test_arena_kernel_written_over_its_input():
    rng = np.random.default_rng(0)
    x, w1 = rng.standard_normal((33, 16), np.float32), rng.standard_normal((16, 24), np.float32)
    b, w2 = rng.standard_normal(24, np.float32), rng.standard_normal((24, 5), np.float32)
    f = blu.jit(_mlp)
    low = f.lower(x, w1, b, w2, target="cpu")
    nodes = _inplace_kernels(low)
    assert nodes, str(low._program.plan)
    for n in nodes:  # the aliased output is stored through the input's memref, never its own
        text = emit_node(n, "k")
        for o, i in n.inplace:
            assert f"%out{o}[" not in text and f"%in{i}[" in text.split("memref.store", 1)[1]
    for _ in range(2):  # the second call reuses the arena and its arrays
        np.testing.assert_allclose(np.asarray(f(x, w1, b, w2)), _mlp_ref(x, w1, b, w2),
                                   rtol=2e-5, atol=2e-4)  # fmt: skip


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([0, 1, 2, 3, 7, 17, 64]), st.sampled_from([1, 2, 5, 8, 9, 33]),
       st.sampled_from([1, 3, 16]))  # fmt: skip
def test_inplace_kernels_any_size(m, n, k):
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    x, w1 = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    b, w2 = rng.standard_normal(n, np.float32), rng.standard_normal((n, 3), np.float32)
    got = np.asarray(blu.jit(_mlp)(x, w1, b, w2))
    assert got.shape == (m, 3)
    np.testing.assert_allclose(got, _mlp_ref(x, w1, b, w2), rtol=2e-5, atol=2e-4)


def _sgd(p, g):
    return p - 0.5 * g * g + bnp.sin(p)


def _sgd_ref(p, g):
    p, g = np.asarray(p, np.float64), np.asarray(g, np.float64)
    return p - 0.5 * g * g + np.sin(p)


def test_donated_kernel_in_place_and_chained():
    rng = np.random.default_rng(1)
    p0, g = rng.standard_normal((37, 11), np.float32), rng.standard_normal((37, 11), np.float32)
    f = blu.jit(_sgd, donate_argnums=0)
    assert _inplace_kernels(f.lower(p0, g, target="cpu"))
    expect = np.asarray(p0, np.float64)
    p = bnp.asarray(p0)
    addrs = set()
    for _ in range(4):
        addr = np.asarray(p).ctypes.data
        p = f(p, g)
        expect = _sgd_ref(expect, g)
        np.testing.assert_allclose(np.asarray(p), expect, rtol=1e-5, atol=1e-5)
        addrs.add(addr)
    # after the first call (its argument a copy of the caller's array) every call wrote the
    # same buffer: the result is the donated array itself, donated again
    assert len(addrs) <= 2


def test_donated_array_still_seen_by_the_caller_is_copied_not_written():
    rng = np.random.default_rng(2)
    p0, g = rng.standard_normal(1000, np.float32), rng.standard_normal(1000, np.float32)
    f = blu.jit(_sgd, donate_argnums=0)
    p = bnp.asarray(p0)
    held = np.asarray(p)  # the caller keeps the buffer: the kernel must not write it
    before = held.copy()
    out = f(p, g)
    np.testing.assert_array_equal(held, before)
    np.testing.assert_allclose(np.asarray(out), _sgd_ref(p0, g), rtol=1e-5, atol=1e-5)


def test_same_array_passed_twice_is_not_donated():
    rng = np.random.default_rng(3)
    p0 = rng.standard_normal((4, 9), np.float32)
    f = blu.jit(_sgd, donate_argnums=0)
    p = bnp.asarray(p0)
    np.testing.assert_allclose(np.asarray(f(p, p)), _sgd_ref(p0, p0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(0, 4), (1,), (3, 1, 5)])
def test_donated_reshaped_output(shape):
    p0 = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) / 7.0
    f = blu.jit(lambda p: (p * 3.0 + 1.0).reshape(-1), donate_argnums=0)
    for _ in range(2):
        got = f(bnp.asarray(p0))
        np.testing.assert_allclose(np.asarray(got), (p0.astype(np.float64) * 3 + 1).reshape(-1),
                                   rtol=1e-6)  # fmt: skip
