"""Products a ``scan`` carry only accumulates, summed after the loop as one product
(``blu/lower/plan/scan_accumulate.py``), and loop constants a body product reads transposed,
transposed once before the loop (``blu/lower/plan/scan_hoist.py``): the programs compute what a
Python loop in float64 computes, forward and backward, in either direction, at any length."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.lax as lax
from blu.core.staging import hoist_consts
from blu.lax.control_flow import scan
from blu.lower.backend import prepare
from blu.lower.plan.nodes import NodeKind

EPS = np.finfo(np.float32).eps


def prepared(f, *args):
    """The CPU's prepared jaxpr of ``f`` (after the scan rewrites)."""
    closed = blu.make_jaxpr(f)(*args)
    return prepare(hoist_consts(closed.jaxpr), (False,) * len(closed.jaxpr.invars)).jaxpr


def scans(jaxpr):
    return [e for e in jaxpr.eqns if e.primitive.name == "scan"]


def summed_products(jaxpr):
    """Products outside the loops that contract the iteration axis (axis 0 of both operands)."""
    return [e for e in jaxpr.eqns if e.primitive.name == "dot_general"
            and 0 in e.params["dimension_numbers"][0][0]
            and 0 in e.params["dimension_numbers"][0][1]]  # fmt: skip


def assert_close(got, want, terms=1):
    """float32 against float64: a few ulp per term summed, relative to the values' size."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = 1.0 + (np.abs(want).max() if want.size else 0.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=64 * EPS * max(terms, 1) * scale)


def assert_compiled(f, *args, loops):
    exe = blu.jit(f).lower(*args, target="cpu").compile().executable
    kinds = [n.kind for n in exe.plan.nodes]
    assert NodeKind.FALLBACK not in kinds and exe.fallbacks == []
    assert kinds.count(NodeKind.LOOP) == loops


# ---- the RNN of benchmarks/cpu_jit.py and its gradient ------------------------------------------


def rnn(reverse):
    def f(w, u, h0, xs):
        def step(h, x):
            h = lax.tanh(x @ w + h @ u)
            return h, lax.reduce_sum(h, (0, 1))

        h, ys = scan(step, h0, xs, reverse=reverse)
        return lax.reduce_sum(h, (0, 1)) + lax.reduce_sum(ys, (0,))

    return f


def rnn_grads_ref(w, u, h0, xs, reverse):
    """d loss / d (w, u) by backpropagation through time, a Python loop in float64."""
    w, u, h, xs = (np.asarray(a, np.float64) for a in (w, u, h0, xs))
    order = list(range(len(xs)))[::-1] if reverse else list(range(len(xs)))
    hs = {}
    prev = {}
    for t in order:
        prev[t] = h
        h = hs[t] = np.tanh(xs[t] @ w + h @ u)
    dw, du, dh = np.zeros_like(w), np.zeros_like(u), np.ones_like(h)  # sum(h_last)
    for t in reversed(order):
        g = (dh + 1.0) * (1.0 - hs[t] ** 2)  # + 1: sum(h_t) of ys
        dw += xs[t].T @ g
        du += prev[t].T @ g
        dh = g @ u.T
    return dw, du


def rnn_data(rng, t, b, n):
    w = (rng.standard_normal((n, n)) / 2).astype(np.float32)
    u = (rng.standard_normal((n, n)) / 2).astype(np.float32)
    h0 = rng.standard_normal((b, n)).astype(np.float32)
    xs = rng.standard_normal((t, b, n)).astype(np.float32)
    return w, u, h0, xs


@pytest.mark.parametrize("reverse", [False, True])
def test_rnn_weight_gradients_are_summed_after_the_loop(reverse):
    args = rnn_data(np.random.default_rng(0), t=6, b=3, n=5)
    g = blu.grad(rnn(reverse), argnums=(0, 1))
    j = prepared(g, *args)
    backward = scans(j)[1]
    # the transposed scan keeps only dh as its carry; dW and dU are two products after it
    assert backward.params["num_carry"] == 1
    assert len(summed_products(j)) == 2
    # g_t @ U^T reads U transposed: U is transposed once before the loop
    body = backward.params["jaxpr"]
    (dot,) = [e for e in body.eqns if e.primitive.name == "dot_general"]
    assert dot.params["dimension_numbers"][0] == ((1,), (0,))
    assert_compiled(g, *args, loops=2)
    gw, gu = blu.jit(g)(*args)
    ww, wu = rnn_grads_ref(*args, reverse)
    assert_close(gw, ww, terms=6 * 3)
    assert_close(gu, wu, terms=6 * 3)


def test_rnn_gradient_matches_finite_differences():
    args = rnn_data(np.random.default_rng(1), t=3, b=2, n=3)
    gw, gu = blu.jit(blu.grad(rnn(False), argnums=(0, 1)))(*args)

    def loss64(w, u):
        h = np.asarray(args[2], np.float64)
        total = 0.0
        for x in np.asarray(args[3], np.float64):
            h = np.tanh(x @ w + h @ u)
            total += h.sum()
        return h.sum() + total

    w, u = (np.asarray(a, np.float64) for a in args[:2])
    eps = 1e-6
    for got, k in ((gw, 0), (gu, 1)):
        want = np.zeros(got.shape)
        for idx in np.ndindex(got.shape):
            hi, lo = [w.copy(), u.copy()], [w.copy(), u.copy()]
            hi[k][idx] += eps
            lo[k][idx] -= eps
            want[idx] = (loss64(*hi) - loss64(*lo)) / (2 * eps)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-3, atol=1e-3)


def test_gradient_of_one_weight_only():
    """An unused weight gradient: its accumulation is dead, the other one still summed."""
    args = rnn_data(np.random.default_rng(2), t=4, b=2, n=3)
    gu = blu.jit(blu.grad(rnn(False), argnums=1))(*args)
    assert_close(gu, rnn_grads_ref(*args, False)[1], terms=8)


# ---- carries accumulating products, written directly --------------------------------------------


def accumulate(reverse):
    """Four carries: ``c`` and ``d`` only accumulate products (one transposed, one of an input
    with itself); ``e`` is a recurrence; ``f`` accumulates a product that reads ``e``."""

    def f(c0, d0, e0, f0, s, xs, ys):
        def step(carry, xy):
            c, d, e, f = carry
            x, y = xy
            t = lax.tanh(y * s)  # (b, n), computed in the body
            c = c + lax.transpose(x.T @ t, (1, 0))  # (n, m)
            d = d + x.T @ x  # (m, m)
            f = f + x.T @ e  # (m, n), e as it enters the step
            e = 0.5 * e + t
            return (c, d, e, f), lax.reduce_sum(t, (0, 1))

        return scan(step, (c0, d0, e0, f0), (xs, ys), reverse=reverse)

    return f


def accumulate_ref(c, d, e, f, s, xs, ys, reverse):
    c, d, e, f, s, xs, ys = (np.asarray(a, np.float64) for a in (c, d, e, f, s, xs, ys))
    out = np.zeros(len(xs))
    for i in reversed(range(len(xs))) if reverse else range(len(xs)):
        x, t = xs[i], np.tanh(ys[i] * s)
        c, d, f = c + (x.T @ t).T, d + x.T @ x, f + x.T @ e
        e = 0.5 * e + t
        out[i] = t.sum()
    return (c, d, e, f), out


def accumulate_data(rng, length, b, m, n):
    r = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    return r(n, m), r(m, m), r(b, n), r(m, n), np.float32(0.7), r(length, b, m), r(length, b, n)


@settings(max_examples=10, deadline=None)
@given(
    length=st.integers(0, 5),
    b=st.integers(0, 3),
    m=st.integers(1, 4),
    n=st.integers(1, 3),
    reverse=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_accumulating_carries_match_a_python_loop(length, b, m, n, reverse, seed):
    args = accumulate_data(np.random.default_rng(seed), length, b, m, n)
    f = accumulate(reverse)
    j = prepared(f, *args)
    (loop,) = scans(j)
    assert loop.params["num_carry"] == 1  # only e stays a carry
    assert len(summed_products(j)) == 3
    (c, d, e, f_), ys = blu.jit(f)(*args)
    (wc, wd, we, wf), wys = accumulate_ref(*args, reverse)
    terms = max(length * b, 1)
    for got, want in ((c, wc), (d, wd), (e, we), (f_, wf)):
        assert_close(got, want, terms=terms)
    assert_close(ys, wys, terms=b * n)


def test_carry_read_elsewhere_stays_in_the_loop():
    """A carry the body also reads (here its sum is a stacked output) is not rewritten."""

    def f(c0, xs):
        def step(c, x):
            return c + x.T @ x, lax.reduce_sum(c, (0, 1))

        return scan(step, c0, xs)

    rng = np.random.default_rng(3)
    c0, xs = rng.standard_normal((3, 3)).astype(np.float32), rng.standard_normal((4, 2, 3))
    xs = xs.astype(np.float32)
    assert scans(prepared(f, c0, xs))[0].params["num_carry"] == 1
    assert summed_products(prepared(f, c0, xs)) == []
    c, ys = blu.jit(f)(c0, xs)
    wc, wys = np.asarray(c0, np.float64), []
    for x in np.asarray(xs, np.float64):
        wys.append(wc.sum())
        wc = wc + x.T @ x
    assert_close(c, wc, terms=8)
    assert_close(ys, wys, terms=8)


def test_product_with_a_loop_constant_stays_in_the_loop():
    """``c + W @ x_t`` (a constant operand) is not rewritten, and still right."""

    def f(w, c0, xs):
        return scan(lambda c, x: (c + w @ x, None), c0, xs)[0]

    rng = np.random.default_rng(4)
    w, c0 = rng.standard_normal((3, 2)).astype(np.float32), np.zeros((3, 4), np.float32)
    xs = rng.standard_normal((5, 2, 4)).astype(np.float32)
    assert scans(prepared(f, w, c0, xs))[0].params["num_carry"] == 1
    want = sum(np.asarray(w, np.float64) @ x for x in np.asarray(xs, np.float64))
    assert_close(blu.jit(f)(w, c0, xs), want, terms=10)


def test_transposed_constant_also_read_as_it_is():
    """A constant read transposed by one product and as it is by another: both right."""

    def f(u, h0, xs):
        def step(h, x):
            h = lax.tanh(lax.dot_general(h, u, (((1,), (1,)), ((), ()))) + x @ u)  # h U^T
            return h, lax.reduce_sum(h * (h @ u), (0, 1))

        return scan(step, h0, xs)

    rng = np.random.default_rng(5)
    u = (rng.standard_normal((4, 4)) / 2).astype(np.float32)
    h0 = rng.standard_normal((2, 4)).astype(np.float32)
    xs = rng.standard_normal((3, 2, 4)).astype(np.float32)
    j = prepared(f, u, h0, xs)
    assert any(e.primitive.name == "transpose" for e in j.eqns)  # U^T made before the loop
    h, ys = blu.jit(f)(u, h0, xs)
    u64, wh, wys = np.asarray(u, np.float64), np.asarray(h0, np.float64), []
    for x in np.asarray(xs, np.float64):
        wh = np.tanh(wh @ u64.T + x @ u64)
        wys.append((wh * (wh @ u64)).sum())
    assert_close(h, wh, terms=8)
    assert_close(ys, wys, terms=8)


# ---- hoisted products streamed while the loop runs (blu/lower/cpu/control_flow.py) --------------


def two_projections(reverse):
    """An RNN with two input projections hoisted out of the loop (both streamed), one of a
    4-D input (two contracted axes), and a stacked output."""

    def f(w1, w2, u, h0, xs, zs):
        def step(h, xz):
            x, z = xz
            h = lax.tanh(x @ w1 + lax.dot_general(z, w2, (((1, 2), (0, 1)), ((), ()))) + h @ u)
            return h, h

        return scan(step, h0, (xs, zs), reverse=reverse)

    return f


def two_projections_ref(w1, w2, u, h0, xs, zs, reverse):
    w1, w2, u, h = (np.asarray(a, np.float64) for a in (w1, w2, u, h0))
    xs, zs = np.asarray(xs, np.float64), np.asarray(zs, np.float64)
    hs = np.zeros((len(xs),) + h.shape)
    for i in reversed(range(len(xs))) if reverse else range(len(xs)):
        h = hs[i] = np.tanh(xs[i] @ w1 + np.tensordot(zs[i], w2, 2) + h @ u)
    return h, hs


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("length", [8, 37])
@pytest.mark.parametrize("mode", ["streamed", "one thread", "nan checks"])
def test_streamed_input_projections_match_a_python_loop(set_flag, reverse, length, mode):
    set_flag("cpu_threads", 1 if mode == "one thread" else 2)
    set_flag("debug_nans", mode == "nan checks")
    rng = np.random.default_rng(length)
    r = lambda *shape, s=0.5: (rng.standard_normal(shape) * s).astype(np.float32)  # noqa: E731
    args = (r(6, 5), r(2, 3, 5, s=0.3), r(5, 5), r(4, 5), r(length, 4, 6), r(length, 4, 2, 3))
    f = two_projections(reverse)
    exe = blu.jit(f).lower(*args, target="cpu").compile().executable
    (loop,) = [run for _, run, node in exe.runners if node.kind == NodeKind.LOOP]
    assert len(loop.streams) == 2  # both projections are made by the loop, on another thread
    h, hs = blu.jit(f)(*args)
    wh, whs = two_projections_ref(*args, reverse)
    assert_close(h, wh, terms=16)
    assert_close(hs, whs, terms=16)


def test_product_read_before_the_loop_is_not_streamed():
    """A hoisted product another step reads before the loop runs is made by its own step."""

    def f(w, h0, xs):
        def step(h, x):
            return lax.tanh(x @ w + h), None

        p = lax.dot_general(xs, w, (((2,), (0,)), ((), ())))  # xs @ w, also hoisted's shape
        q = lax.dot_general(p, w, (((2,), (0,)), ((), ())))  # reads p before the loop
        return scan(step, h0, q)[0], p

    rng = np.random.default_rng(6)
    w = (rng.standard_normal((3, 3)) / 2).astype(np.float32)
    h0, xs = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((9, 2, 3))
    xs = xs.astype(np.float32)
    exe = blu.jit(f).lower(w, h0, xs, target="cpu").compile().executable
    (loop,) = [run for _, run, node in exe.runners if node.kind == NodeKind.LOOP]
    assert len(loop.streams) == 1  # q @ w, hoisted; q itself is read by it
    h, p = blu.jit(f)(w, h0, xs)
    w64, x64 = np.asarray(w, np.float64), np.asarray(xs, np.float64)
    wh = np.asarray(h0, np.float64)
    for q in x64 @ w64 @ w64:
        wh = np.tanh(q @ w64 + wh)
    assert_close(h, wh, terms=9)
    assert_close(p, x64 @ w64, terms=3)


def test_over_the_memory_caps_the_loops_stay_as_they_are(monkeypatch):
    """With no memory for stacked operands or transposed constants, nothing is rewritten, and
    the gradient is the same."""
    from blu.lower.plan import scan_accumulate, scan_hoist

    monkeypatch.setattr(scan_accumulate, "MAX_STACKED_BYTES", 0)
    monkeypatch.setattr(scan_hoist, "MAX_HOISTED_BYTES", 0)
    args = rnn_data(np.random.default_rng(7), t=5, b=2, n=4)
    g = blu.grad(rnn(False), argnums=(0, 1))
    j = prepared(g, *args)
    assert scans(j)[1].params["num_carry"] == 3  # dh, dU, dW: all accumulated in the loop
    assert summed_products(j) == []
    assert not any(e.primitive.name == "transpose" for e in j.eqns)
    gw, gu = blu.jit(g)(*args)
    ww, wu = rnn_grads_ref(*args, False)
    assert_close(gw, ww, terms=10)
    assert_close(gu, wu, terms=10)
