"""``blu.custom_batching`` (JAX's): ``custom_vmap`` functions batch by their rule (a rule whose
values differ from the function's makes that visible), unbatched they run as themselves; the
rule's ``in_batched`` flags; derivatives (forward mode under vmap batches by the JVP of the
rule; reverse mode through the body); jit; the rule's output checks; ``sequential_vmap``
against a numpy loop."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core.errors import BluShapeError, BluTypeError, BluValueError

TOL = dict(rtol=1e-12, atol=1e-12)
custom_vmap = blu.custom_batching.custom_vmap


def _make(log):
    """f(x, y) = sin(x) * y; its rule gives 3 sin(x) * y, so a batched result shows the rule."""

    @custom_vmap
    def f(x, y):
        return bnp.sin(x) * y

    @f.def_vmap
    def rule(axis_size, in_batched, xs, ys):
        log.append((axis_size, list(in_batched)))
        return 3.0 * bnp.sin(xs) * ys, in_batched[0] or in_batched[1]

    return f


@settings(deadline=None)
@given(n=st.integers(1, 5), seed=st.integers(0, 999))
def test_vmap_applies_the_rule_with_in_batched(n, seed):
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal(n), np.float64(rng.standard_normal())
    log: list = []
    f = _make(log)
    np.testing.assert_allclose(float(f(x[0], y)), np.sin(x[0]) * y, **TOL)  # unbatched: f
    np.testing.assert_allclose(float(blu.jit(f)(x[0], y)), np.sin(x[0]) * y, **TOL)  # inlined
    assert log == []
    got = blu.vmap(f, in_axes=(0, None))(x, y)
    np.testing.assert_allclose(np.asarray(got), 3.0 * np.sin(x) * y, **TOL)
    assert log == [(n, [True, False])]
    got = blu.jit(blu.vmap(f, in_axes=(None, 0)))(y, x)
    np.testing.assert_allclose(np.asarray(got), 3.0 * np.sin(y) * x, **TOL)
    assert log[-1] == (n, [False, True])


def test_batch_axis_moved_to_the_front_and_nested_vmap():
    log: list = []
    f = _make(log)
    x = np.arange(6.0).reshape(2, 3) / 5.0
    got = blu.vmap(f, in_axes=(1, None))(x, np.float64(2.0))  # batch axis 1 of x
    np.testing.assert_allclose(np.asarray(got), 3.0 * np.sin(x.T) * 2.0, **TOL)
    assert log[-1][0] == 3
    got = blu.vmap(blu.vmap(f, in_axes=(0, None)), in_axes=(0, None))(x, np.float64(2.0))
    np.testing.assert_allclose(np.asarray(got), 3.0 * np.sin(x) * 2.0, **TOL)  # rule of rule


def test_derivatives():
    log: list = []
    f = _make(log)
    x, y = np.array([0.1, 0.7, -1.2]), np.float64(1.5)
    # unbatched: the function's own derivative
    np.testing.assert_allclose(float(blu.grad(f)(x[1], y)), np.cos(0.7) * 1.5, **TOL)
    # forward mode under vmap: the JVP of the rule, 3 cos(x) y
    jac = blu.vmap(blu.jacfwd(f), in_axes=(0, None))(x, y)
    np.testing.assert_allclose(np.asarray(jac), 3.0 * np.cos(x) * y, **TOL)
    _, t = blu.vmap(lambda a: blu.jvp(lambda b: f(b, y), (a,), (2.0 * bnp.ones_like(a),)))(x)
    np.testing.assert_allclose(np.asarray(t), 3.0 * np.cos(x) * y * 2.0, **TOL)
    # reverse mode of a batched call differentiates the rule (it is the batched function)
    g = blu.grad(lambda a: bnp.sum(blu.vmap(f, in_axes=(0, None))(a, y)))(x)
    np.testing.assert_allclose(np.asarray(g), 3.0 * np.cos(x) * y, **TOL)
    # reverse mode under vmap transposes the body: the function's derivative
    gx, gy = blu.jit(blu.vmap(blu.grad(f, argnums=(0, 1)), in_axes=(0, None)))(x, y)
    np.testing.assert_allclose(np.asarray(gx), np.cos(x) * y, **TOL)
    np.testing.assert_allclose(np.asarray(gy), np.sin(x), **TOL)


def test_closed_over_values():
    def outer(w):
        @custom_vmap
        def f(x):
            return x * w

        @f.def_vmap
        def rule(axis_size, in_batched, xs):
            return xs * w, in_batched[0]

        return bnp.sum(blu.vmap(f)(np.array([1.0, 2.0, 3.0])))

    np.testing.assert_allclose(float(blu.grad(outer)(np.float64(0.5))), 6.0, **TOL)
    ws = np.array([1.0, 2.0])
    np.testing.assert_allclose(np.asarray(blu.vmap(outer)(ws)), 6.0 * ws, **TOL)  # another vmap

    def closes_over_the_batch(w):
        @custom_vmap
        def f(x):
            return x * w

        f.def_vmap(lambda n, b, xs: (xs * w, b[0]))
        return f(np.float64(2.0))

    with pytest.raises(BluValueError, match="closes over a value this vmap batches"):
        blu.vmap(closes_over_the_batch)(ws)


def test_rule_output_checks():
    @custom_vmap
    def f(x):
        return (x, 2.0 * x)

    x = np.ones(3)
    f.def_vmap(lambda n, b, xs: xs)
    with pytest.raises(BluTypeError, match="pair"):
        blu.vmap(f)(x)
    f.def_vmap(lambda n, b, xs: ([xs, xs], True))
    with pytest.raises(BluTypeError, match="structure"):
        blu.vmap(f)(x)
    f.def_vmap(lambda n, b, xs: ((xs, xs), True))
    with pytest.raises(BluTypeError, match="out_batched has structure"):
        blu.vmap(f)(x)
    f.def_vmap(lambda n, b, xs: ((xs, xs[0]), (True, True)))
    with pytest.raises(BluShapeError, match=r"shape \(\) but out_batched=True wants \(3,\)"):
        blu.vmap(f)(x)
    f.def_vmap(lambda n, b, xs: ((xs, xs.astype(np.float32)), (True, True)))
    with pytest.raises(BluTypeError, match="f32"):
        blu.vmap(f)(x)

    @custom_vmap
    def g(x):
        return x

    with pytest.raises(BluTypeError, match="def_vmap"):
        g(1.0)


def test_sequential_vmap_matches_a_loop():
    traced = []

    def solve(a, b):
        traced.append(1)
        return bnp.linalg.solve(a, b)

    seq = blu.custom_batching.sequential_vmap(solve)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 3, 3)) + 3 * np.eye(3)
    b = rng.standard_normal(3)
    got = blu.vmap(seq, in_axes=(0, None))(a, b)
    want = np.stack([np.linalg.solve(a[i], b) for i in range(4)])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10)
    n = len(traced)
    blu.vmap(seq, in_axes=(0, None))(a, b)
    assert len(traced) - n <= 2  # one trace of the body and one of the loop's step, not four
