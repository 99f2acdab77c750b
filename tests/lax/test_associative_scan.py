"""lax.associative_scan against Python loops (commutative and not, pytrees, reverse, axis),
finite-difference gradients, vmap vs a loop and jit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu import lax
from blu.core.errors import BluError, BluShapeError, BluTypeError
from tests.helpers import check_grads


def loop_scan(fn, xs, reverse=False):
    """The definition: a left fold, keeping every prefix (reverse: over reversed elements)."""
    order = list(range(len(xs)))[::-1] if reverse else list(range(len(xs)))
    out = [None] * len(xs)
    acc = None
    for i in order:
        acc = xs[i] if acc is None else fn(acc, xs[i])
        out[i] = acc
    return out


def matmul(a, b):  # batched 2x2 products: associative, not commutative
    return bnp.einsum("...ij,...jk->...ik", a, b)


@given(st.integers(0, 17), st.booleans())
def test_noncommutative_against_loop(n, reverse):
    rng = np.random.default_rng(n)
    m = rng.standard_normal((n, 2, 2))
    got = np.asarray(lax.associative_scan(matmul, m, reverse=reverse))
    want = loop_scan(lambda a, b: a @ b, list(m), reverse)
    np.testing.assert_allclose(got, np.array(want).reshape(m.shape), rtol=1e-10, atol=1e-12)


@given(st.integers(1, 9), st.integers(0, 2), st.booleans())
def test_cumulative_ops_along_any_axis(n, axis, reverse):
    rng = np.random.default_rng(n)
    shape = [3, 2, 2]
    shape[axis] = n
    x = rng.standard_normal(shape)
    for fn, ref in ((lax.add, np.cumsum), (lax.max, np.maximum.accumulate)):
        got = np.asarray(lax.associative_scan(fn, x, reverse=reverse, axis=axis - 3))
        xr = np.flip(x, axis) if reverse else x
        want = ref(xr, axis=axis)
        want = np.flip(want, axis) if reverse else want
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_pytree_linear_recurrence():
    # h[t] = a[t] h[t-1] + b[t] as composition of affine maps (a, b): the classic use
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0.5, 1.0, 11), rng.standard_normal(11)

    def compose(p, q):
        (a1, b1), (a2, b2) = p, q
        return a1 * a2, a2 * b1 + b2

    _, h = lax.associative_scan(compose, (a, b))
    want, acc = [], 0.0
    for t in range(11):
        acc = a[t] * acc + b[t]
        want.append(acc)
    np.testing.assert_allclose(np.asarray(h), want, rtol=1e-12)

    def loss(a, b):
        return bnp.sum(lax.associative_scan(compose, (a, b))[1] ** 2)

    check_grads(loss, [a, b], order=2)


def test_bool_or_int_and_jit_vmap():
    x = np.array([False, False, True, False, True])
    got = lax.associative_scan(lax.or_, x)
    np.testing.assert_array_equal(np.asarray(got), np.logical_or.accumulate(x))
    k = np.arange(1, 8, dtype=np.int32)
    np.testing.assert_array_equal(np.asarray(lax.associative_scan(lax.mul, k)), np.cumprod(k))
    xs = np.random.default_rng(1).standard_normal((4, 6))
    f = lambda v: lax.associative_scan(lax.add, v)  # noqa: E731
    np.testing.assert_allclose(np.asarray(blu.vmap(f)(xs)), np.cumsum(xs, 1), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(blu.jit(f)(xs[0])), np.cumsum(xs[0]), rtol=1e-12)


def test_errors():
    with pytest.raises(BluError, match="differ"):
        lax.associative_scan(lambda a, b: a, (np.ones(3), np.ones(4)))
    with pytest.raises(BluError, match="axis"):
        lax.associative_scan(lax.add, np.ones(3), axis=1)


@pytest.mark.parametrize("n", [4, 5, 8])
def test_fn_changing_a_leaf_is_an_error(n):
    # a fn returning another shape gave a silently wrong scan (a[:1] + b[:1]: [0 1] for n=4) or
    # a raw IndexError (a scalar); another dtype failed inside concatenate
    x = np.arange(n, dtype=np.int32)
    for fn in (lambda a, b: a[:1] + b[:1], lambda a, b: (a + b).sum()):
        with pytest.raises(BluShapeError, match="fn must return"):
            lax.associative_scan(fn, x)
        with pytest.raises(BluShapeError, match="fn must return"):
            blu.jit(lambda v, fn=fn: lax.associative_scan(fn, v))(x)
    with pytest.raises(BluTypeError, match=r"leaf 1 of fn\(a, b\) is f32"):
        lax.associative_scan(lambda a, b: (a[0] + b[0], (a[1] + b[1]) * 0.5), (x, x))
