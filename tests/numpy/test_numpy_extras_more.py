"""More of jax.numpy (resize, vander, tril_indices_from, trim_zeros, apply_over_axes) against
numpy in float64 over random shapes (size 0 and 1 included), under jit, and their
derivatives."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import arrays, check_grads, shapes
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core.errors import BluTypeError, BluValueError, ConcretizationError


def _eq(got, want, dtype=None):
    g = np.asarray(got)
    assert g.shape == np.shape(want), (g.shape, np.shape(want))
    if dtype is not None:
        assert g.dtype == dtype, (g.dtype, dtype)
    np.testing.assert_allclose(g.astype(np.float64), np.asarray(want, np.float64), rtol=1e-12)


# ---- resize ------------------------------------------------------------------------------------


@given(st.data())
def test_resize_matches_numpy(data):
    a = data.draw(arrays(data.draw(shapes())))
    new = data.draw(st.one_of(shapes(), st.integers(0, 7)))
    want = np.resize(a, new)
    _eq(bnp.resize(a, new), want, np.float64)
    _eq(blu.jit(bnp.resize, static_argnums=1)(a, new), want)
    ai = np.asarray(np.round(a * 4)).astype(np.uint8)
    _eq(bnp.resize(ai, new), np.resize(ai, new), np.uint8)


def test_resize_gradient_and_errors():
    x = np.random.default_rng(10).standard_normal(3)
    w = np.arange(1.0, 9.0).reshape(2, 4)
    g = blu.grad(lambda x: bnp.sum(bnp.resize(x, (2, 4)) * w))(x)
    _eq(g, [1 + 4 + 7, 2 + 5 + 8, 3 + 6])  # closed form: each entry's repeats
    check_grads(lambda x: bnp.resize(x, (5,)), [x])
    with pytest.raises(BluValueError, match=r"new_shape must be >= 0, got \(2, -1\)"):
        bnp.resize(x, (2, -1))
    with pytest.raises(BluTypeError, match="new_shape must be ints"):
        bnp.resize(x, (2.5,))
    with pytest.raises(ConcretizationError, match="new_shape"):
        blu.jit(bnp.resize)(x, np.array([2, 2]))
