"""Small defects of issue #41: ``nn.relu`` propagates NaN as ``maximum``, ``relu6`` and
``leaky_relu`` do (it gave 0), with JAX's derivative (0 at 0 and at NaN); eager shapes past
2**63 give the same ``BluOutOfMemoryError`` naming the shape as jit (numpy's "Maximum allowed
dimension exceeded" or an ``OverflowError`` before)."""

from __future__ import annotations

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu import nn
from blu.core.errors import BluOutOfMemoryError

X = np.array([np.nan, -2.0, -0.0, 0.0, 0.5, 3.0, -np.inf, np.inf], np.float32)


@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jit"])
def test_relu_propagates_nan_like_its_siblings(jitted):
    f = blu.jit(nn.relu) if jitted else nn.relu
    got = np.asarray(f(X))
    want = np.maximum(X.astype(np.float64), 0.0)
    np.testing.assert_array_equal(got, want.astype(np.float32))
    for sibling in (bnp.maximum(X, 0.0), nn.relu6(X), nn.leaky_relu(X)):
        assert np.isnan(np.asarray(sibling)[0])
    assert np.isnan(got[0])


@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jit"])
def test_relu_derivative_at_nan_zero_and_elsewhere(jitted):
    g = blu.vmap(blu.grad(nn.relu))
    g = blu.jit(g) if jitted else g
    np.testing.assert_array_equal(np.asarray(g(X)), [0, 0, 0, 0, 1, 1, 0, 1])
    _, t = blu.jvp(nn.relu, (X,), (np.full_like(X, 2.0),))
    np.testing.assert_array_equal(np.asarray(t), [0, 0, 0, 0, 2, 2, 0, 2])


def test_relu_keeps_integer_and_half_dtypes():
    assert np.asarray(nn.relu(np.array([-3, 4], np.int32))).tolist() == [0, 4]
    assert nn.relu(np.array([-1.0, 2.0], np.float16)).dtype == np.float16


HUGE = {
    "zeros": (lambda: bnp.zeros((2**63,)), "float32[9223372036854775808]"),
    "zeros 2**64": (lambda: bnp.zeros((2**64,)), "float32[18446744073709551616]"),
    "ones 2-d": (lambda: bnp.ones((2**62, 2)), "float32[4611686018427387904, 2]"),
    "full int8": (lambda: bnp.full((2**63,), 1, bnp.int8), "int8[9223372036854775808]"),
    "empty zero-size": (lambda: bnp.empty((0, 2**63)), "float32[0, 9223372036854775808]"),
    "broadcast_to": (lambda: bnp.broadcast_to(1.0, (2**63,)), "[9223372036854775808]"),
    "arange int": (lambda: bnp.arange(2**63), "int32[9223372036854775808]"),
    "arange float": (lambda: bnp.arange(0.0, 2.0**63), "float32[9223372036854775808]"),
}


@pytest.mark.parametrize("name", sorted(HUGE))
def test_eager_shape_past_2_63_is_a_blu_error_naming_it(name):
    make, shape = HUGE[name]
    with pytest.raises(BluOutOfMemoryError) as e:
        make()
    msg = str(e.value)
    assert shape in msg and "64-bit" in msg and isinstance(e.value, MemoryError), msg
    assert "test_reliability_small_defects.py" in msg  # the user's line


@pytest.mark.parametrize("shape", [(2**63,), (0, 2**63)])
def test_jit_gives_the_same_error_as_eager(shape):
    with pytest.raises(BluOutOfMemoryError) as eager:
        bnp.zeros(shape)
    with pytest.raises(BluOutOfMemoryError) as jitted:
        blu.jit(lambda: bnp.zeros(shape))()
    want = f"float32{list(shape)}"
    assert want in str(eager.value) and want in str(jitted.value)


def test_arange_lengths_unchanged():
    for args in [(5,), (5, 0, -2), (3, 3), (1, 10, 3), (-4, 4, 3), (10, -10, -7)]:
        np.testing.assert_array_equal(np.asarray(bnp.arange(*args)), np.arange(*args))
    np.testing.assert_allclose(np.asarray(bnp.arange(0, 1, 0.25)), np.arange(0, 1, 0.25))
