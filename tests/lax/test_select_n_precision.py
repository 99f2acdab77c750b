"""``lax.select_n`` against numpy's ``choose`` and ``where``; ``lax.Precision`` accepted by the
products."""

from __future__ import annotations

import numpy as np
import pytest

import blu
from blu import lax


def test_select_n_integer_against_choose():
    rng = np.random.default_rng(0)
    cases = [rng.standard_normal((4, 5)).astype(np.float32) for _ in range(3)]
    which = rng.integers(0, 3, (4, 5)).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(lax.select_n(which, *cases)), np.choose(which, cases))
    got = blu.jit(lax.select_n)(which, *cases)
    np.testing.assert_array_equal(np.asarray(got), np.choose(which, cases))
    # a scalar selector picks a whole case
    np.testing.assert_array_equal(np.asarray(lax.select_n(np.int32(2), *cases)), cases[2])


def test_select_n_bool_and_gradient():
    a, b = np.arange(4.0, dtype=np.float32), -np.arange(4.0, dtype=np.float32)
    p = np.array([True, False, True, False])
    np.testing.assert_array_equal(np.asarray(lax.select_n(p, a, b)), np.where(p, b, a))
    g = blu.grad(lambda x: lax.select_n(p, x, 2 * x).sum())(a)
    np.testing.assert_array_equal(np.asarray(g), np.where(p, 2.0, 1.0))
    v = blu.vmap(lambda w, x, y: lax.select_n(w, x, y))(p, a, b)
    np.testing.assert_array_equal(np.asarray(v), np.where(p, b, a))


def test_select_n_errors():
    x = np.zeros(3, np.float32)
    with pytest.raises(blu.errors.BluValueError, match="2 cases"):
        lax.select_n(np.array([True, False, True]), x, x, x)
    with pytest.raises(blu.errors.BluTypeError, match="bool or integer"):
        lax.select_n(np.zeros(3, np.float32), x, x)
    with pytest.raises(blu.errors.BluShapeError, match="shape"):
        lax.select_n(np.zeros(2, np.int32), x, x)
    with pytest.raises(blu.errors.BluValueError, match="at least one"):
        lax.select_n(np.int32(0))


def test_precision_enum_in_products():
    a = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    for p in (lax.Precision.DEFAULT, lax.Precision.HIGH, lax.Precision.HIGHEST, None):
        np.testing.assert_allclose(np.asarray(lax.dot(a, a.T, precision=p)), a @ a.T)
    got = blu.jit(lambda x: lax.dot(x, x.T, precision=(lax.Precision.HIGHEST,) * 2))(a)
    np.testing.assert_allclose(np.asarray(got), a @ a.T)
    assert str(lax.Precision.HIGHEST) == "HIGHEST"


def test_small_lax_helpers_against_numpy():
    x = np.array([-3.0, -0.5, 0.25, 1.5, 7.0], np.float32)
    np.testing.assert_array_equal(np.asarray(lax.clamp(np.float32(-1.0), x, np.float32(2.0))),
                                  np.clip(x, -1.0, 2.0))  # fmt: skip
    lo, hi = np.full(5, -2.0, np.float32), np.full(5, 0.5, np.float32)
    np.testing.assert_array_equal(np.asarray(lax.clamp(lo, x, hi)), np.clip(x, lo, hi))
    np.testing.assert_allclose(np.asarray(lax.reciprocal(x)), 1.0 / x, rtol=1e-7)
    i = np.asarray(lax.broadcasted_iota(np.int32, (2, 3), 1))
    np.testing.assert_array_equal(i, np.broadcast_to(np.arange(3), (2, 3)))
    y = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)
    assert lax.collapse(y, 1).shape == (2, 12)
    assert lax.collapse(y, 0, 2).shape == (6, 4)
    a, b = np.array([12, 10], np.int32), np.array([10, 6], np.int32)
    np.testing.assert_array_equal(np.asarray(lax.bitwise_and(a, b)), a & b)
    np.testing.assert_array_equal(np.asarray(lax.bitwise_or(a, b)), a | b)
    np.testing.assert_array_equal(np.asarray(lax.bitwise_xor(a, b)), a ^ b)
    np.testing.assert_array_equal(np.asarray(lax.bitwise_not(a)), ~a)
    g = blu.grad(lambda v: lax.clamp(np.float32(-1.0), v, np.float32(2.0)).sum())(x)
    np.testing.assert_array_equal(np.asarray(g), [0.0, 1.0, 1.0, 1.0, 0.0])
