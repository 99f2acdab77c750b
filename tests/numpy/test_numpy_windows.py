"""jax.numpy's window functions (bartlett, blackman, hamming, hanning, kaiser) and i0 against
numpy in float64, under jit, with their dtypes and derivatives."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import arrays, assert_close, check_grads, shapes
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core import dtypes
from blu.core.errors import BluTypeError, ConcretizationError

WINDOWS = ("bartlett", "blackman", "hamming", "hanning")


@pytest.mark.parametrize("name", WINDOWS)
@given(m=st.integers(-2, 40))
def test_window_matches_numpy(name, m):
    got = getattr(bnp, name)(m)
    assert got.dtype == dtypes.default_float
    assert_close(got, getattr(np, name)(m), n_ops=4)
    assert_close(blu.jit(lambda: getattr(bnp, name)(m))(), getattr(np, name)(m), n_ops=4)


@given(m=st.integers(-2, 30), beta=st.floats(0.0, 12.0))
def test_kaiser_matches_numpy(m, beta):
    got = bnp.kaiser(m, beta)
    assert got.dtype == dtypes.default_float
    assert_close(got, np.kaiser(m, beta), n_ops=16)


def test_kaiser_derivative_in_beta():
    # kaiser computes in the default float (float32): against numpy's float64 central difference
    h = 1e-6
    want = (np.kaiser(9, 2.5 + h) - np.kaiser(9, 2.5 - h)) / (2 * h)
    got = blu.jacfwd(lambda b: bnp.kaiser(9, b))(2.5)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
    got = blu.jacrev(lambda b: bnp.kaiser(9, b))(2.5)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)


@given(st.data())
def test_i0_matches_numpy(data):
    x = data.draw(arrays(data.draw(shapes()), lo=-30.0, hi=30.0))
    got = bnp.i0(x)
    assert got.dtype == x.dtype
    np.testing.assert_allclose(np.asarray(got), np.i0(x), rtol=1e-12)


def test_i0_dtypes_and_derivative():
    assert bnp.i0(np.arange(3)).dtype == dtypes.default_float  # ints become the default float
    assert bnp.i0(np.float32(1.0)).dtype == np.float32
    x = np.array([-3.0, -0.5, 0.0, 0.7, 4.0])
    # i0' = i1 = exp(|x|) i1e(x); independently: the series sum (x/2)^(2k-1) / (k! (k-1)!)
    k = np.arange(1, 40)
    lg = np.array([np.sum(np.log(np.arange(1, j + 1))) for j in range(41)])
    logs = [(2 * k - 1) * np.log(abs(v) / 2 + 1e-300) - lg[k] - lg[k - 1] for v in x]
    i1 = [np.sign(v) * np.sum(np.exp(t)) for v, t in zip(x, logs)]
    got = blu.vmap(blu.grad(bnp.i0))(x)
    np.testing.assert_allclose(np.asarray(got), i1, rtol=1e-12, atol=1e-300)
    check_grads(bnp.i0, (np.array([-2.0, 0.3, 1.5]),), order=2)


def test_window_errors():
    with pytest.raises(BluTypeError, match="hamming: M must be an int"):
        bnp.hamming(3.5)
    with pytest.raises(ConcretizationError):
        blu.jit(bnp.bartlett)(4)
    with pytest.raises(BluTypeError, match="i0: x must be real"):
        bnp.i0(np.array([1j]))
