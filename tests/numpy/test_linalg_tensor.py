"""blu.numpy.linalg.multi_dot, tensorinv and tensorsolve (numpy's and JAX's; blu lacked them:
an AttributeError) against numpy float64: the left-to-right product for multi_dot, numpy's
tensorinv/tensorsolve, their defining identities (``tensordot(a, x, x.ndim) == b``), gradients
against central differences, and the shape errors."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core.errors import BluShapeError, BluTypeError, BluValueError

LA = bnp.linalg


@settings(deadline=None, max_examples=30)
@given(
    st.lists(st.integers(1, 5), min_size=3, max_size=7),
    st.booleans(),
    st.booleans(),
    st.integers(0, 2**31),
)
def test_multi_dot_is_the_chained_product(sizes, row, col, seed):
    """Any chain, a 1-D first (row vector) and/or last (column vector) array included: the
    value of ``functools.reduce(np.dot, arrays)`` in float64, whatever order is used."""
    rng = np.random.default_rng(seed)
    mats = [rng.standard_normal((sizes[i], sizes[i + 1])) for i in range(len(sizes) - 1)]
    if row:
        mats[0] = mats[0][0]
    if col:
        mats[-1] = mats[-1][:, 0]
    want = functools.reduce(np.dot, mats)
    got = np.asarray(LA.multi_dot(mats))
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        np.asarray(blu.jit(LA.multi_dot)(mats)), want, rtol=1e-12, atol=1e-12
    )


def test_multi_dot_gradient_and_errors():
    rng = np.random.default_rng(0)
    a, b, c = rng.standard_normal((3, 4)), rng.standard_normal((4, 2)), rng.standard_normal(2)
    w = rng.standard_normal(3)

    def f(b):
        return bnp.sum(LA.multi_dot([a, b, c]) * w)

    # d/db of w^T a b c is the outer product (a^T w) c^T
    np.testing.assert_allclose(np.asarray(blu.grad(f)(b)), np.outer(a.T @ w, c), rtol=1e-12)
    with pytest.raises(BluValueError, match="2 or more"):
        LA.multi_dot([a])
    with pytest.raises(BluShapeError, match="do not chain"):
        LA.multi_dot([a, a])
    with pytest.raises(BluShapeError, match="2-D except"):
        LA.multi_dot([a, c, b])


@settings(deadline=None, max_examples=30)
@given(st.integers(1, 3), st.integers(0, 2**31), st.data())
def test_tensorinv_inverts_the_operator(ind, seed, data):
    """numpy's tensorinv; and ``tensordot(tensorinv(a), a, ind)`` is the identity operator."""
    dims = data.draw(st.lists(st.integers(1, 3), min_size=ind, max_size=ind))
    n = math.prod(dims)
    rng = np.random.default_rng(seed)
    q = np.linalg.qr(rng.standard_normal((n, n)))[0] * rng.uniform(0.5, 2.0, n)
    rest = data.draw(st.sampled_from([d for d in ([n], [1, n], [n, 1]) if math.prod(d) == n]))
    a = q.reshape(tuple(dims) + tuple(rest))
    got = np.asarray(LA.tensorinv(a, ind))
    np.testing.assert_allclose(got, np.linalg.tensorinv(a, ind), rtol=1e-9, atol=1e-10)
    ident = np.tensordot(got, a, ind).reshape(n, n)
    np.testing.assert_allclose(ident, np.eye(n), atol=1e-10)
    with pytest.raises(BluValueError, match="positive"):
        LA.tensorinv(a, 0)
    with pytest.raises(BluTypeError, match="ind must be an int"):
        LA.tensorinv(a, 1.5)


@settings(deadline=None, max_examples=30)
@given(st.integers(0, 2**31), st.sampled_from([(2, 3), (6,), (3, 2)]), st.data())
def test_tensorsolve_solves_the_tensor_equation(seed, b_shape, data):
    rng = np.random.default_rng(seed)
    x_shape = data.draw(st.sampled_from([(6,), (2, 3), (3, 1, 2)]))
    a = rng.standard_normal(b_shape + x_shape) + 4 * np.eye(6).reshape(b_shape + x_shape)
    b = rng.standard_normal(b_shape)
    x = np.asarray(LA.tensorsolve(a, b))
    np.testing.assert_allclose(x, np.linalg.tensorsolve(a, b), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(np.tensordot(a, x, len(x_shape)), b, atol=1e-10)
    # axes: those axes of a move to the end (numpy's rule)
    perm = data.draw(st.permutations(range(a.ndim)))
    at = np.transpose(a, perm)
    axes = tuple(perm.index(k) for k in range(len(b_shape), a.ndim))
    lead = tuple(at.shape[j] for j in range(at.ndim) if j not in axes)
    if lead != b_shape:  # b's axes came out in another order: JAX's error (numpy reshapes)
        with pytest.raises(BluShapeError, match="tensorsolve"):
            LA.tensorsolve(at, b, axes=axes)
    else:
        got = np.asarray(LA.tensorsolve(at, b, axes=axes))
        want = np.linalg.tensorsolve(at, b, axes=axes)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-10)
    with pytest.raises(BluShapeError, match="tensorsolve"):
        LA.tensorsolve(a, b.ravel()[:-1])


def test_tensorsolve_gradient_against_differences():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 3, 6)) + 4 * np.eye(6).reshape(2, 3, 6)
    b, w = rng.standard_normal((2, 3)), rng.standard_normal(6)

    def f(b):
        return bnp.sum(LA.tensorsolve(a, b) * w)

    eps, fd = 1e-6, np.zeros_like(b)
    for i in np.ndindex(b.shape):
        e = np.zeros_like(b)
        e[i] = eps
        fd[i] = (float(f(b + e)) - float(f(b - e))) / (2 * eps)
    np.testing.assert_allclose(np.asarray(blu.grad(f)(b)), fd, rtol=1e-7, atol=1e-9)
