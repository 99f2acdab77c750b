"""``scan(..., unroll=)`` and ``fori_loop(..., unroll=)``: JAX's argument rules, and the same
values and gradients for every unroll (against a Python loop and finite differences)."""

from __future__ import annotations

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu import lax
from blu.core.errors import BluTypeError, BluValueError
from tests.helpers import check_grads

UNROLLS = [0, 1, 2, 3, 7, 100, True, False]


def _body(c, x):
    c = bnp.sin(c) * x + c * 0.5
    return c, c * x


def _loop_ref(c, xs, reverse=False):
    ys = [None] * len(xs)
    order = range(len(xs) - 1, -1, -1) if reverse else range(len(xs))
    for i in order:
        c = np.sin(c) * xs[i] + c * 0.5
        ys[i] = c * xs[i]
    return c, np.stack(ys)


@pytest.mark.parametrize("unroll", UNROLLS)
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_unroll_values_and_grads(unroll, reverse):
    rng = np.random.default_rng(0)
    c0, xs = rng.standard_normal(3), rng.standard_normal((7, 3))
    jitted = blu.jit(lambda c, xs: lax.scan(_body, c, xs, unroll=unroll, reverse=reverse))
    eager = lambda c, xs: lax.scan(_body, c, xs, unroll=unroll, reverse=reverse)  # noqa: E731
    for run in (eager, jitted):
        c, ys = run(c0, xs)
        rc, rys = _loop_ref(c0, xs, reverse)
        np.testing.assert_allclose(np.asarray(c), rc, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(ys), rys, rtol=1e-12)

    def f(c, xs):
        c, ys = lax.scan(_body, c, xs, unroll=unroll, reverse=reverse)
        return bnp.sum(c) + bnp.sum(ys * ys)

    check_grads(f, [c0, xs], order=2)


@pytest.mark.parametrize("unroll", UNROLLS)
def test_fori_loop_unroll_values_and_grads(unroll):
    x0 = np.array([0.3, -1.2])

    def f(x):
        return lax.fori_loop(1, 6, lambda i, v: bnp.cos(v) * i + v, x, unroll=unroll)

    want = x0.copy()
    for i in range(1, 6):
        want = np.cos(want) * i + want
    np.testing.assert_allclose(np.asarray(f(x0)), want, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(blu.jit(f)(x0)), want, rtol=1e-12)
    check_grads(f, [x0], order=2)
    xs = np.stack([x0, x0 * 2, -x0])
    np.testing.assert_allclose(
        np.asarray(blu.vmap(f)(xs)), np.stack([np.asarray(f(r)) for r in xs]), rtol=1e-12
    )


def test_unroll_argument_errors():
    with pytest.raises(BluValueError, match="non-negative int, got -1"):
        lax.scan(_body, np.zeros(2), np.ones((3, 2)), unroll=-1)
    with pytest.raises(BluTypeError, match="unroll"):
        lax.scan(_body, np.zeros(2), np.ones((3, 2)), unroll=1.5)
    with pytest.raises(BluValueError, match="unroll"):
        lax.fori_loop(0, 3, lambda i, v: v, np.zeros(2), unroll=-1)

    @blu.jit
    def traced_bounds(n):
        return lax.fori_loop(0, n, lambda i, v: v + 1.0, np.zeros(2, np.float32), unroll=2)

    with pytest.raises(BluValueError, match="concrete loop bounds"):
        traced_bounds(3)


def test_unroll_of_empty_loop():
    c, ys = lax.scan(_body, np.ones(2), np.ones((0, 2)), unroll=True)
    np.testing.assert_array_equal(np.asarray(c), np.ones(2))
    assert np.asarray(ys).shape == (0, 2)
    assert float(lax.fori_loop(3, 3, lambda i, v: v + 1.0, 2.0, unroll=True)) == 2.0


def _scan_unroll_param(unroll, length):
    jaxpr = blu.make_jaxpr(lambda c, xs: lax.scan(_body, c, xs, unroll=unroll))(
        np.zeros(2), np.ones((length, 2))
    )
    (eqn,) = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "scan"]
    return eqn.params["unroll"]


@pytest.mark.parametrize("length", [0, 1, 5])
def test_unroll_zero_unrolls_fully_as_jax(length):
    """JAX: ``unroll=0`` unrolls the entire loop (as ``True``); ``False`` is 1."""
    assert _scan_unroll_param(0, length) == max(length, 1)
    assert _scan_unroll_param(True, length) == max(length, 1)
    assert _scan_unroll_param(False, length) == 1
    assert _scan_unroll_param(3, length) == 3
    f = lambda x: lax.fori_loop(0, 4, lambda i, v: v * 1.5 + i, x, unroll=0)  # noqa: E731
    want = 1.0
    for i in range(4):
        want = want * 1.5 + i
    np.testing.assert_allclose(np.asarray(f(1.0)), want)  # 13.3125
