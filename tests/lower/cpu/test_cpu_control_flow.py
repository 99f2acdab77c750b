"""Control flow compiled on the CPU (``loop`` nodes, blu/lower/cpu/control_flow.py): scan,
while_loop / fori_loop and cond / switch run their bodies as compiled executables, with no host
fallback node, and compute what a Python loop in float64 computes."""

from __future__ import annotations

import numpy as np
import pytest

import blu
import blu.lax as lax
from blu.lax.control_flow import cond, fori_loop, scan, switch, while_loop
from blu.lower.plan.nodes import NodeKind


def executable(f, *args):
    return blu.jit(f).lower(*args, target="cpu").compile().executable


def assert_compiled(exe, loops: int = 1):
    kinds = [n.kind for n in exe.plan.nodes]
    assert NodeKind.FALLBACK not in kinds, exe.plan
    assert kinds.count(NodeKind.LOOP) == loops, exe.plan
    assert exe.fallbacks == []


def tol(dtype=np.float32):
    return 50 * np.finfo(dtype).eps


def rnn(w, u, h0, xs):
    """The scan row of benchmarks/cpu_jit.py: h <- tanh(x W + h U), summed."""

    def step(h, x):
        h = lax.tanh(x @ w + h @ u)
        return h, lax.reduce_sum(h, (0, 1))

    h, ys = scan(step, h0, xs)
    return lax.reduce_sum(h, (0, 1)) + lax.reduce_sum(ys, (0,))


def rnn_ref(w, u, h0, xs):
    w, u, h = (np.asarray(a, np.float64) for a in (w, u, h0))
    total = 0.0
    for x in np.asarray(xs, np.float64):
        h = np.tanh(x @ w + h @ u)
        total += h.sum()
    return h.sum() + total


def rnn_data(rng, t=7, b=3, h=5):
    w = (rng.standard_normal((h, h)) / 2).astype(np.float32)
    u = (rng.standard_normal((h, h)) / 2).astype(np.float32)
    h0 = rng.standard_normal((b, h)).astype(np.float32)
    xs = rng.standard_normal((t, b, h)).astype(np.float32)
    return w, u, h0, xs


def test_scan_rnn_compiles_without_fallback_and_matches_a_python_loop():
    args = rnn_data(np.random.default_rng(0))
    exe = executable(rnn, *args)
    assert_compiled(exe)
    # x_t @ W does not depend on the carry: one product over all rows before the loop
    assert exe.plan.nodes[0].kind == NodeKind.DOT
    (body,) = next(run for _, run, node in exe.runners if node.kind == NodeKind.LOOP).bodies
    assert [n.kind for n in body.exe.plan.nodes].count(NodeKind.DOT) == 1
    np.testing.assert_allclose(float(blu.jit(rnn)(*args)), rnn_ref(*args), rtol=tol(), atol=tol())


def test_scan_rnn_gradient_compiles_and_matches_finite_differences():
    rng = np.random.default_rng(1)
    w, u, h0, xs = rnn_data(rng, t=4, b=2, h=3)
    g = blu.jit(blu.grad(rnn, argnums=(0, 1)))
    exe = executable(blu.grad(rnn, argnums=(0, 1)), w, u, h0, xs)
    assert_compiled(exe, loops=2)  # the forward scan and the transposed (reverse) one
    gw, gu = g(w, u, h0, xs)
    eps = 1e-6
    for got, k in ((gw, 0), (gu, 1)):
        want = np.zeros(got.shape)
        args = [np.asarray(a, np.float64) for a in (w, u, h0, xs)]
        for idx in np.ndindex(got.shape):
            hi, lo = [a.copy() for a in args], [a.copy() for a in args]
            hi[k][idx] += eps
            lo[k][idx] -= eps
            want[idx] = (rnn_ref(*hi) - rnn_ref(*lo)) / (2 * eps)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("length", [0, 1, 5])
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_of_scalars_any_length_and_direction(length, reverse):
    xs = np.arange(length, dtype=np.float32) + 1.5

    def f(c0, xs):
        return scan(lambda c, x: (c * 0.5 + x, c - x), c0, xs, reverse=reverse)

    c0 = np.float32(2.0)
    exe = executable(f, c0, xs)
    assert_compiled(exe)
    c, ys = blu.jit(f)(c0, xs)
    want_c, want_ys = 2.0, np.zeros(length)
    for i in reversed(range(length)) if reverse else range(length):
        want_c, want_ys[i] = want_c * 0.5 + xs[i], want_c - xs[i]
    np.testing.assert_allclose(float(c), want_c, rtol=tol())
    np.testing.assert_allclose(np.asarray(ys), want_ys, rtol=tol())


def test_scan_carry_swapped_and_passed_through():
    """A body that returns its inputs as they are (swapping two carries, an x as a y): the
    carry's two buffers must not alias."""

    def f(a, b, xs):
        return scan(lambda c, x: ((c[1], c[0] + x), x), (a, b), xs)

    a, b = np.float32(1.0), np.float32(10.0)
    xs = np.array([1.0, 2.0, 3.0], np.float32)
    assert_compiled(executable(f, a, b, xs))
    (ga, gb), ys = blu.jit(f)(a, b, xs)
    wa, wb = 1.0, 10.0
    for x in xs:
        wa, wb = wb, wa + x
    assert (float(ga), float(gb)) == (wa, wb)
    np.testing.assert_array_equal(np.asarray(ys), xs)


def test_while_and_fori_loop_compile():
    def collatz_steps(n):
        def body(c):
            n, k = c
            return lax.select(n % 2 == 0, n // 2, 3 * n + 1), k + 1

        return while_loop(lambda c: c[0] != 1, body, (n, np.int32(0)))[1]

    n = np.int32(27)
    assert_compiled(executable(collatz_steps, n))
    want, m = 0, 27
    while m != 1:
        m, want = (m // 2 if m % 2 == 0 else 3 * m + 1), want + 1
    assert int(blu.jit(collatz_steps)(n)) == want

    def power_iter(a, v):
        return fori_loop(
            0, 20, lambda i, v: (a @ v) / lax.sqrt(lax.reduce_sum((a @ v) ** 2, (0,))), v
        )

    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 4)).astype(np.float32)
    a = a @ a.T
    v = np.ones(4, np.float32)
    assert_compiled(executable(power_iter, a, v))
    want = v.astype(np.float64)
    for _ in range(20):
        want = a.astype(np.float64) @ want
        want /= np.linalg.norm(want)
    np.testing.assert_allclose(np.asarray(blu.jit(power_iter)(a, v)), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("index", [-3, 0, 1, 2, 7])
def test_switch_and_cond_compile_and_clamp(index):
    fns = [lambda x: x + 1.0, lambda x: x * x, lambda x: lax.exp(x)]

    def f(i, x):
        return switch(i, fns, x)

    x = np.array([0.5, -1.0, 2.0], np.float32)
    i = np.int32(index)
    assert_compiled(executable(f, i, x))
    want = [x + 1.0, x * x, np.exp(x)][min(max(index, 0), 2)]
    np.testing.assert_allclose(np.asarray(blu.jit(f)(i, x)), want, rtol=tol())

    def g(p, x):
        return cond(p, lambda x: x - 1.0, lambda x: x * 3.0, x)

    for p in (True, False):
        got = np.asarray(blu.jit(g)(np.bool_(p), x))
        np.testing.assert_allclose(got, x - 1.0 if p else x * 3.0, rtol=tol())


def test_nested_scan_with_cond_inside():
    def f(xs):
        def outer(c, row):
            def inner(d, x):
                d = cond(x > 0, lambda d: d + x, lambda d: d * 0.5, d)
                return d, d

            d, ds = scan(inner, c, row)
            return d, ds

        return scan(outer, np.float32(0.0), xs)

    xs = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    exe = executable(f, xs)
    assert_compiled(exe)
    c, ds = blu.jit(f)(xs)
    want_c, want = 0.0, np.zeros(xs.shape)
    for i, row in enumerate(xs.astype(np.float64)):
        for j, x in enumerate(row):
            want_c = want_c + x if x > 0 else want_c * 0.5
            want[i, j] = want_c
    np.testing.assert_allclose(float(c), want_c, rtol=tol(), atol=tol())
    np.testing.assert_allclose(np.asarray(ds), want, rtol=tol(), atol=tol())
