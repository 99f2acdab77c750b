"""Fused CPU kernels split by rows across threads (``blu/lower/cpu/rows.py``): which kernels
qualify (every row computed from the same row of its operands), and the split kernels' results
against numpy float64 for odd row counts, several threads, in-place updates and row reductions
(the size threshold lowered so small problems split)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.lower.cpu import rows
from blu.lower.cpu import threads as cpu_threads


def _kernel_nodes(f, *args):
    low = blu.jit(f).lower(*args, target="cpu")
    return [n for n in low._program.plan.nodes if n.kind == "kernel"]


def _rows_of(f, *args):
    return [rows.row_count(n) for n in _kernel_nodes(f, *args)]


X = np.ones((6, 5), np.float32)
B = np.ones(5, np.float32)


@pytest.mark.parametrize(
    "f,expect",
    [
        (lambda x, b: bnp.tanh(x + b) * x, [6]),  # elementwise, a bias read whole
        (lambda x, b: x - x.mean(axis=1, keepdims=True), [6]),  # a reduction within rows
        (lambda x, b: bnp.concatenate([x, x * 2], axis=1), [6]),
        (lambda x, b: (x * 2).reshape(6, 5, 1), [6]),
        (lambda x, b: x.sum(axis=0) + b, [0]),  # a sum over the rows
        (lambda x, b: bnp.pad(x * 2, ((1, 0), (0, 0))), [7]),  # rows made from input rows
        # rows the kernel computes, then shifted (the means' nest is not by the result's rows)
        (lambda x, b: bnp.pad(x - x.mean(axis=1, keepdims=True), ((1, 0), (0, 0))), [0]),
    ],
)
def test_which_kernels_split_by_rows(f, expect):
    assert _rows_of(f, X, B) == expect


def _gelu_ref(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _layer(x, b, g):
    h = blu.nn.gelu(x + b, approximate=True)
    m = h.mean(axis=-1, keepdims=True)
    v = ((h - m) ** 2).mean(axis=-1, keepdims=True)
    return (h - m) / bnp.sqrt(v + 1e-5) * g


def _layer_ref(x, b, g):
    h = _gelu_ref(x.astype(np.float64) + b)
    m = h.mean(-1, keepdims=True)
    v = ((h - m) ** 2).mean(-1, keepdims=True)
    return (h - m) / np.sqrt(v + 1e-5) * g


@pytest.fixture
def split_everything(monkeypatch):
    monkeypatch.setattr(rows, "MIN_SPLIT_WORK", 0)
    monkeypatch.setattr(rows, "_MIN_ROWS_ELEMENTS", 1)
    parts = []
    run = cpu_threads.run_parts

    def counted(fn, cuts, *a, **k):
        parts.append(len(cuts))
        run(fn, cuts, *a, **k)

    monkeypatch.setattr(cpu_threads, "run_parts", counted)
    return parts


@settings(max_examples=20, deadline=None)
@given(st.sampled_from([2, 3, 5, 7, 16]), st.sampled_from([1, 3, 8, 33]), st.sampled_from([2, 3]))
def test_split_kernels_match_float64(r, c, threads):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rows, "MIN_SPLIT_WORK", 0)
        mp.setattr(rows, "_MIN_ROWS_ELEMENTS", 1)
        parts = []
        run = cpu_threads.run_parts
        mp.setattr(cpu_threads, "run_parts", lambda fn, cuts, *a, **k: (parts.append(len(cuts)),
                                                               run(fn, cuts, *a, **k)))  # fmt: skip
        blu.config.update("cpu_threads", threads)
        try:
            rng = np.random.default_rng(r * 100 + c)
            x = rng.standard_normal((r, 4, c)).astype(np.float32)
            b = rng.standard_normal(c).astype(np.float32)
            g = rng.standard_normal(c).astype(np.float32)
            got = np.asarray(blu.jit(_layer)(x, b, g))
            tol = 1e-4 if c > 1 else 1e-2  # one column: h - m is rounding, v ~ 0
            np.testing.assert_allclose(got, _layer_ref(x, b, g), rtol=tol, atol=tol)
            assert parts and max(parts) == min(threads, r)
            dx = np.asarray(blu.jit(blu.grad(lambda x: (blu.nn.gelu(x + b, approximate=True)
                                                        * g).sum()))(x))  # fmt: skip
            eps = 1e-6
            x64 = x.astype(np.float64) + b
            fd = (_gelu_ref(x64 + eps) - _gelu_ref(x64 - eps)) / (2 * eps) * g
            np.testing.assert_allclose(dx, fd, rtol=1e-4, atol=1e-4)
        finally:
            blu.config.update("cpu_threads", None)


def test_split_kernel_written_in_place(split_everything, set_flag):
    set_flag("cpu_threads", 2)
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((9, 6), np.float32), rng.standard_normal((6, 6), np.float32)

    def f(x, w):
        h = x @ w
        return (bnp.tanh(h) * h) @ w  # the kernel writes over h (its last reader)

    low = blu.jit(f).lower(x, w, target="cpu")
    assert any(n.inplace and rows.row_count(n) for n in low._program.plan.nodes
               if n.kind == "kernel")  # fmt: skip
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    h = x64 @ w64
    np.testing.assert_allclose(np.asarray(blu.jit(f)(x, w)), (np.tanh(h) * h) @ w64,
                               rtol=1e-4, atol=1e-4)  # fmt: skip
    assert 2 in split_everything


def test_concatenated_rows_and_bias_sum(split_everything, set_flag):
    set_flag("cpu_threads", 3)
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((7, 2, 3), np.float32), rng.standard_normal((7, 2, 3), np.float32)

    def f(a, b):
        cat = bnp.concatenate([a * 2, b], axis=1)
        return cat, cat.sum(axis=(0, 1))  # the sum over rows keeps this kernel whole

    def g(a, b):
        return bnp.concatenate([a * 2, b], axis=1) + 1.0

    cat, s = blu.jit(f)(a, b)
    want = np.concatenate([a.astype(np.float64) * 2, b], axis=1)
    np.testing.assert_allclose(np.asarray(cat), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(s), want.sum(axis=(0, 1)), rtol=1e-5)
    assert split_everything == []
    np.testing.assert_allclose(np.asarray(blu.jit(g)(a, b)), want + 1.0, rtol=1e-6)
    assert split_everything == [3]


def test_one_thread_runs_the_whole_range(split_everything, set_flag):
    set_flag("cpu_threads", 1)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_allclose(np.asarray(blu.jit(lambda x: bnp.exp(x / 10))(x)),
                               np.exp(x.astype(np.float64) / 10), rtol=1e-6)  # fmt: skip
    assert split_everything == [] or split_everything == [1]


def test_row_locality_of_equations():
    sq = np.ones((4, 4), np.float32)
    j = blu.make_jaxpr(lambda x: [(x * 2).T, bnp.pad(x * 2, ((0, 0), (1, 0))), (x * 2)[:, 1:]])(sq)
    j = getattr(j, "jaxpr", j)
    by = {e.primitive.name: e for e in j.eqns}
    computed, inputs = set(), set(j.invars)
    assert not rows._row_local(by["transpose"], 4, computed)  # computed rows moved
    read_only = inputs | {by["transpose"].invars[0]}
    assert rows._row_local(by["transpose"], 4, read_only)  # rows of a value not written
    assert rows._row_local(by["pad"], 4, computed)  # padded within rows
    assert rows._row_local(by["slice"], 4, computed)  # sliced within rows


def test_concurrent_calls_of_a_split_kernel(split_everything, set_flag):
    # a call that finds the executable's arena taken runs with pointer arrays of its own
    import threading

    set_flag("cpu_threads", 2)
    f = blu.jit(lambda x, b: bnp.tanh(x * 0.5 + b) - x)
    rng = np.random.default_rng(8)
    xs = [rng.standard_normal((33, 17)).astype(np.float32) for _ in range(6)]
    b = rng.standard_normal(17).astype(np.float32)
    f(xs[0], b)
    got = [None] * len(xs)

    def run(i):
        for _ in range(20):
            got[i] = np.asarray(f(xs[i], b))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, g in zip(xs, got):
        x64 = x.astype(np.float64)
        np.testing.assert_allclose(g, np.tanh(x64 * 0.5 + b) - x64, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, "bfloat16"])
@pytest.mark.parametrize("threads", [2, 3])
def test_split_sum_over_a_middle_axis(split_everything, set_flag, dtype, threads):
    # the reduced axis is not innermost: the sums accumulate in memory (half floats in a
    # float32 scratch buffer), initialized and copied out row range by row range
    import ml_dtypes

    set_flag("cpu_threads", threads)
    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    rng = np.random.default_rng(9)
    x = rng.standard_normal((7, 6, 5)).astype(dt)
    f = blu.jit(lambda x: (x * 2).sum(axis=1) + 1)
    low = f.lower(x, target="cpu")
    assert [rows.row_count(n) for n in low._program.plan.nodes if n.kind == "kernel"] == [7]
    got = np.asarray(f(x)).astype(np.float64)
    want = (x.astype(np.float64) * 2).sum(axis=1) + 1
    tol = 3e-2 if dtype == "bfloat16" else 1e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    assert min(threads, 7) in split_everything


def _softmax_ref(x):
    m = x.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    return e / e.sum(axis=-1, keepdims=True)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(0, 13),
    st.sampled_from([1, 2, 5, 17]),
    st.integers(1, 5),
    st.integers(1, 3),
    st.booleans(),
)
def test_blocked_nests_match_float64(r, c, block, threads, special):
    """Kernels of several nests split by rows run block by block of rows (``rows.row_block``):
    a softmax (max, sum, quotient), a layer norm and its gradient, for blocks that do not divide
    the rows nor each thread's part, one-row blocks, and rows with infinities."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rows, "MIN_SPLIT_WORK", 0)
        mp.setattr(rows, "_MIN_ROWS_ELEMENTS", 1)
        mp.setattr(rows, "BLOCK_ELEMENTS", block * 3 * c)  # the widest nest: 3 * c per row
        blu.config.update("cpu_threads", threads)
        try:
            rng = np.random.default_rng(r * 1000 + c * 10 + block)
            x = rng.standard_normal((r, 3, c)).astype(np.float32)
            if special and x.size:
                x[0, 0, 0] = np.inf if c > 1 else 1.0
                x[-1, -1, :] = -np.inf  # a row whose every logit is -inf: 0/0
            sm = blu.jit(lambda x: blu.nn.softmax(x * 2, -1))
            if r >= 2:
                (node,) = [n for n in sm.lower(x, target="cpu")._program.plan.nodes
                           if n.kind == "kernel"]  # fmt: skip
                assert rows.row_count(node) == r
                assert rows.row_block(node, r) == (block if block < r else 0)
            with np.errstate(invalid="ignore"):
                want = _softmax_ref(x.astype(np.float64) * 2)
            np.testing.assert_allclose(np.asarray(sm(x)), want, rtol=1e-5, atol=1e-6)
            if special:
                return
            b = rng.standard_normal(c).astype(np.float32)
            g = rng.standard_normal(c).astype(np.float32)
            tol = 1e-4 if c > 1 else 1e-2  # one column: h - m is rounding, v ~ 0
            np.testing.assert_allclose(np.asarray(blu.jit(_layer)(x, b, g)), _layer_ref(x, b, g),
                                       rtol=tol, atol=tol)  # fmt: skip
            if c > 1:
                gw = rng.standard_normal(x.shape)
                dx = np.asarray(blu.jit(blu.grad(lambda x: (_layer(x, b, g) * gw).sum()))(x))
                eps, x64 = 1e-6, x.astype(np.float64)
                fd = np.zeros_like(x64)
                for i in np.ndindex(*x.shape[:1]):  # central differences, one row at a time
                    for j in np.ndindex(*x.shape[1:]):
                        d = np.zeros_like(x64)
                        d[i + j] = eps
                        hi = (_layer_ref(x64 + d, b, g) * gw).sum()
                        lo = (_layer_ref(x64 - d, b, g) * gw).sum()
                        fd[i + j] = (hi - lo) / (2 * eps)
                np.testing.assert_allclose(dx, fd, rtol=2e-3, atol=2e-3)
        finally:
            blu.config.update("cpu_threads", None)


def test_row_block_sizes():
    x = np.ones((64, 8, 32), np.float32)
    sm = blu.jit(lambda x: blu.nn.softmax(x, -1))
    (node,) = [n for n in sm.lower(x, target="cpu")._program.plan.nodes if n.kind == "kernel"]
    assert rows.row_block(node, 64) == rows.BLOCK_ELEMENTS // (8 * 32)  # widest nest: 8 x 32
    one = blu.jit(lambda x: bnp.tanh(x) * 2)  # one nest: nothing to keep in the cache
    (node,) = [n for n in one.lower(x, target="cpu")._program.plan.nodes if n.kind == "kernel"]
    assert rows.row_block(node, 64) == 0
