"""bnp ufunc methods at their edges, against numpy's ufunc methods in float64 (and JAX's
semantics where numpy and JAX differ): logaddexp.reduce as a tree reduction, the dtypes the
comparison and logical reductions accept, empty reduceat indices, and the sweep's findings."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import arrays, assert_close, check_grads, shapes
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core.errors import BluTypeError


def _axes(draw, ndim):
    single = st.integers(-ndim, ndim - 1) if ndim else st.nothing()
    subsets = st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim).map(tuple)
    return draw(st.one_of(st.none(), single, subsets) if ndim else st.sampled_from([None, ()]))


# ---- logaddexp.reduce: a max-shifted logsumexp ---------------------------------------------------


@given(st.data(), shapes(min_dims=1), st.sampled_from(["logaddexp", "logaddexp2"]), st.booleans())
def test_logaddexp_reduce_matches_numpy_over_any_axes(data, shape, name, keepdims):
    x = data.draw(arrays(shape, -30.0, 30.0))
    axis = _axes(data.draw, len(shape))
    want = getattr(np, name).reduce(x, axis=axis, keepdims=keepdims)
    got = getattr(bnp, name).reduce(x, axis=axis, keepdims=keepdims)
    assert np.asarray(got).dtype == np.float64
    assert_close(got, want, n_ops=4)
    # float32: a tree of n terms, not n sequential roundings
    got32 = getattr(bnp, name).reduce(x.astype(np.float32), axis=axis, keepdims=keepdims)
    assert np.asarray(got32).dtype == np.float32
    assert_close(got32, want, n_ops=4, dtype=np.float32)


@given(st.data(), shapes(min_dims=1), st.sampled_from(["logaddexp", "logaddexp2"]))
def test_logaddexp_reduce_initial_and_where_match_numpy(data, shape, name):
    x = data.draw(arrays(shape, -5.0, 5.0))
    mask = data.draw(arrays(shape, 0, 1)) > 0.5
    axis = _axes(data.draw, len(shape))
    u, ref = getattr(bnp, name), getattr(np, name)
    for kw in [dict(initial=1.5), dict(where=mask), dict(initial=-2.0, where=mask)]:
        assert_close(u.reduce(x, axis=axis, **kw), ref.reduce(x, axis=axis, **kw), n_ops=4)


@pytest.mark.parametrize("name", ["logaddexp", "logaddexp2"])
def test_logaddexp_reduce_special_values_match_numpy(name):
    inf, nan = np.inf, np.nan
    rows = [
        [-inf, -inf, -inf],
        [inf, inf, 1.0],
        [inf, -inf, 0.0],
        [nan, 1.0, 2.0],
        [nan, inf, -inf],
        [-inf, 3.0, -inf],
        [800.0, 800.0, -800.0],  # exp overflows without the shift
        [-800.0, -800.0, -inf],
    ]
    x = np.array(rows)
    with np.errstate(invalid="ignore"):
        want = getattr(np, name).reduce(x, axis=1)
    assert_close(getattr(bnp, name).reduce(x, axis=1), want, n_ops=4)
    assert_close(getattr(bnp, name).reduce(x.astype(np.float32), axis=1), want, n_ops=4)
    e = np.zeros((0, 3))
    assert_close(getattr(bnp, name).reduce(e), np.full(3, -inf))
    assert_close(getattr(bnp, name).reduce(e, initial=2.0), np.full(3, 2.0))


def test_logaddexp_reduce_of_ints_and_float16_and_bad_dtypes():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    got = bnp.logaddexp.reduce(x, axis=1)
    assert got.dtype == np.float32  # numpy's float64, JAX's float32 default
    assert_close(got, np.logaddexp.reduce(x.astype(np.float64), axis=1), dtype=np.float32)
    h = (np.arange(12, dtype=np.float16) * 3).reshape(3, 4)  # 2**33 overflows float16 sums
    got = bnp.logaddexp2.reduce(h, axis=1)
    assert got.dtype == np.float16
    assert_close(got, np.logaddexp2.reduce(h.astype(np.float64), axis=1), dtype=np.float16)
    got = bnp.logaddexp.reduce(x, axis=0, dtype=np.float64)
    assert got.dtype == np.float64
    assert_close(got, np.logaddexp.reduce(x, axis=0, dtype=np.float64))
    with pytest.raises(BluTypeError, match=r"logaddexp.reduce: needs a real floating dtype"):
        bnp.logaddexp.reduce(x, dtype=np.int32)


def test_logaddexp_reduce_is_a_tree_not_a_scan():
    for name in ["logaddexp", "logaddexp2"]:
        text = str(
            blu.make_jaxpr(lambda v: getattr(bnp, name).reduce(v, axis=(0, 1)))(np.ones((4, 5, 2)))
        )
        assert "reduce_sum" in text and "reduce_max" in text
        assert "scan" not in text and "while" not in text


def test_logaddexp_reduce_gradient_is_the_softmax():
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, (3, 4))
    check_grads(lambda a: bnp.logaddexp.reduce(a, axis=1), [x], order=2)
    check_grads(lambda a: bnp.logaddexp2.reduce(a, axis=(0, 1), initial=0.5), [x], order=1)
    mask = x > 0
    check_grads(lambda a: bnp.logaddexp.reduce(a, axis=0, where=mask), [x], order=1)
    g = blu.grad(lambda a: bnp.logaddexp.reduce(a, axis=None))(x)
    np.testing.assert_allclose(np.asarray(g), np.exp(x) / np.exp(x).sum(), rtol=1e-12)
    # only -inf: value -inf, gradient 0 (logaddexp's convention), not 0/0
    g = blu.grad(lambda a: bnp.logaddexp.reduce(a, axis=0).sum())(np.full((2, 3), -np.inf))
    np.testing.assert_array_equal(np.asarray(g), np.zeros((2, 3)))
