"""jax.numpy's gradient and unwrap against numpy in float64 over random shapes (size-1 axes
where allowed), their dtypes, errors and derivatives."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import arrays, check_grads, shapes
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
import blu.numpy as bnp
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluTypeError, BluValueError


def _close(got, want):
    for g, w in zip(
        got if isinstance(want, list) else [got],
        want if isinstance(want, list) else [want],
        strict=True,
    ):
        g = np.asarray(g)
        assert g.shape == np.shape(w), (g.shape, np.shape(w))
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


@given(st.data())
def test_gradient_matches_numpy(data):
    shape = data.draw(shapes(min_dims=1, min_side=2))
    f = data.draw(arrays(shape))
    h = data.draw(st.floats(0.25, 4.0))
    _close(bnp.gradient(f), np.gradient(f))
    _close(bnp.gradient(f, h), np.gradient(f, h))
    ax = data.draw(st.integers(-len(shape), len(shape) - 1))
    _close(bnp.gradient(f, h, axis=ax), np.gradient(f, h, axis=ax))
    _close(blu.jit(lambda f: bnp.gradient(f, axis=ax))(f), np.gradient(f, axis=ax))
    if len(shape) == 2:
        _close(bnp.gradient(f, 2.0, h), np.gradient(f, 2.0, h))


def test_gradient_dtypes_errors_and_derivative():
    assert bnp.gradient(np.arange(4, dtype=np.int32)).dtype == dtypes.default_float
    assert bnp.gradient(np.ones(3, np.float32)).dtype == np.float32
    assert bnp.gradient(np.ones((2, 3)), axis=()) == []
    with pytest.raises(BluShapeError, match="gradient: each axis needs at least 2 samples"):
        bnp.gradient(np.ones((3, 1)))
    with pytest.raises(BluTypeError, match="gradient: expected 0, 1 or 2 spacings, got 3"):
        bnp.gradient(np.ones((3, 3)), 1.0, 2.0, 3.0)
    with pytest.raises(BluValueError, match="spacings must be scalars"):
        bnp.gradient(np.ones(3), np.array([0.0, 1.0, 3.0]))
    with pytest.raises(BluValueError, match="edge_order"):
        bnp.gradient(np.ones(3), edge_order=2)
    check_grads(lambda f, h: bnp.gradient(f, h), (np.array([0.3, -1.0, 2.0, 0.5]), np.float64(0.7)))


@given(st.data())
def test_unwrap_matches_numpy(data):
    shape = data.draw(shapes(min_dims=1))
    p = data.draw(arrays(shape, -12.0, 12.0))
    ax = data.draw(st.integers(-len(shape), len(shape) - 1))
    _close(bnp.unwrap(p, axis=ax), np.unwrap(p, axis=ax))
    period = data.draw(st.floats(1.0, 8.0))
    discont = data.draw(st.floats(0.5, 6.0))
    _close(bnp.unwrap(p, discont, ax, period), np.unwrap(p, discont, ax, period=period))
    _close(blu.jit(lambda p: bnp.unwrap(p, axis=ax))(p), np.unwrap(p, axis=ax))


def test_unwrap_dtypes_errors_and_derivative():
    assert bnp.unwrap(np.arange(5, dtype=np.int32) * 4).dtype == dtypes.default_float


@given(st.data())
def test_unwrap_of_integers_with_an_integer_period_stays_integer(data):
    # numpy's and JAX's: half a period rounded down, the integer dtype kept (blu gave float32)
    dt = data.draw(st.sampled_from([np.int8, np.int32, np.int64]))
    shape = data.draw(shapes(min_dims=1, max_dims=2))
    p = data.draw(hnp.arrays(dt, shape, elements=st.integers(-20, 20)))
    period = data.draw(st.integers(2, 9))
    discont = data.draw(st.none() | st.integers(1, 6))
    want = np.unwrap(p, discont, -1, period=period)
    got = bnp.unwrap(p, discont, -1, period)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_array_equal(np.asarray(got), want)
    with pytest.raises(BluShapeError, match="unwrap: p must have at least one dimension"):
        bnp.unwrap(np.float64(1.0))
    # away from the jumps' thresholds unwrap is the identity plus constants: derivative 1s
    check_grads(bnp.unwrap, (np.array([0.0, 4.0, -3.0, 2.5, 0.1]),))
