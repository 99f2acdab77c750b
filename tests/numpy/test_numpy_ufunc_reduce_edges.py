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
from blu.core.errors import BluShapeError, BluTypeError, BluValueError


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
    with pytest.raises(
        BluTypeError,
        match=r"logaddexp.reduce: dtype=int32 cannot carry the fold: it needs a real floating",
    ):
        bnp.logaddexp.reduce(x, dtype=np.int32)


def test_logaddexp_reduce_of_many_float32_keeps_float32_accuracy():
    # the sequential fold rounded once per element: 2e-5 relative error (168 epsilons) here
    x = np.random.default_rng(0).normal(0.0, 3.0, 20000).astype(np.float32)
    for name in ["logaddexp", "logaddexp2"]:
        want = getattr(np, name).reduce(x.astype(np.float64))
        got = getattr(bnp, name).reduce(x)
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=64 * 2**-23)


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


# ---- comparisons fold bool values only; a dtype must carry the fold ------------------------------

COMPARISONS = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]


@given(st.data(), shapes(min_dims=1, max_dims=2, min_side=1), st.sampled_from(COMPARISONS))
def test_comparison_methods_fold_bools_as_numpy(data, shape, name):
    b = data.draw(arrays(shape, 0, 1)) > 0.5
    u, ref = getattr(bnp, name), getattr(np, name)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    np.testing.assert_array_equal(u.reduce(b, axis=axis), ref.reduce(b, axis=axis))
    np.testing.assert_array_equal(u.accumulate(b, axis=axis), ref.accumulate(b, axis=axis))
    idx = np.array([0, shape[axis] - 1, 0])
    np.testing.assert_array_equal(u.reduceat(b, idx, axis=axis), ref.reduceat(b, idx, axis=axis))
    # dtype=bool folds the truth values of numbers, as numpy's
    x = (data.draw(arrays(shape, -1, 1)) * 2).round()
    got = u.reduce(x, axis=axis, dtype=bool)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, ref.reduce(x, axis=axis, dtype=bool))
    np.testing.assert_array_equal(
        u.accumulate(x, axis=axis, dtype=bool), ref.accumulate(x, axis=axis, dtype=bool)
    )


@pytest.mark.parametrize("name", COMPARISONS)
def test_comparison_methods_of_numbers_are_blu_type_errors(name):
    # numpy: "No loop matching the specified signature" (JAX's comparisons have no methods)
    u = getattr(bnp, name)
    for x in [np.arange(6, dtype=np.int32).reshape(2, 3), np.ones((2, 3), np.float32)]:
        with pytest.raises(BluTypeError, match=rf"{name}.reduce: .* needs bool values, got"):
            u.reduce(x, axis=1)
        with pytest.raises(BluTypeError, match=rf"{name}.accumulate: .* needs bool values"):
            u.accumulate(x, axis=0)
        with pytest.raises(BluTypeError, match=rf"{name}.reduceat: .* needs bool values"):
            u.reduceat(x, np.array([0, 1]), axis=1)
    with pytest.raises(BluTypeError, match=rf"{name}.reduce: dtype=int32 cannot carry the fold"):
        u.reduce(np.ones(3, bool), dtype=np.int32)
    # the comparison itself and outer take any numbers
    np.testing.assert_array_equal(
        u.outer(np.arange(3), np.arange(2)), getattr(np, name).outer(np.arange(3), np.arange(2))
    )


def test_logical_methods_fold_the_truth_of_numbers_as_numpy():
    # numpy's logical ufuncs take any numbers (unlike the comparisons)
    x = np.array([[0.5, 0.0, 2.0, 1.0], [0.0, 0.0, 3.0, -1.0]])
    for name in ["logical_and", "logical_or", "logical_xor"]:
        u, ref = getattr(bnp, name), getattr(np, name)
        for v in [x, x.astype(np.int32)]:
            np.testing.assert_array_equal(u.accumulate(v, axis=1), ref.accumulate(v, axis=1))
            got = u.reduceat(v, np.array([0, 2, 1]), axis=1)
            assert got.dtype == np.bool_
            np.testing.assert_array_equal(got, ref.reduceat(v, np.array([0, 2, 1]), axis=1))


def test_a_dtype_that_cannot_carry_the_fold_is_a_blu_type_error():
    x = np.arange(1, 7, dtype=np.int32).reshape(2, 3)
    for name in ["arctan2", "divide", "hypot", "copysign", "logaddexp", "nextafter"]:
        u = getattr(bnp, name)
        with pytest.raises(BluTypeError, match=rf"{name}.reduce: dtype=int32 cannot carry"):
            u.reduce(x, axis=1, dtype=np.int32)
        with pytest.raises(BluTypeError, match=rf"{name}.accumulate: dtype=int32 cannot"):
            u.accumulate(x, axis=1, dtype=np.int32)
        with pytest.raises(BluTypeError, match=rf"{name}.reduceat: dtype=int32 cannot"):
            u.reduceat(x, np.array([0, 2]), axis=1, dtype=np.int32)


def _fold(f, v):
    acc = v[0]
    for e in v[1:]:
        acc = f(acc, e)
    return acc


@pytest.mark.parametrize("name", ["divide", "arctan2", "hypot", "logaddexp", "copysign"])
def test_reduceat_of_ints_folds_in_the_ufuncs_float_dtype(name):
    # numpy's reduceat folds in reduce's loop (divide.reduceat of ints in floats); blu folded in
    # the ints' dtype, truncating each step (divide.reduceat([1, 2, 3], [0]) gave 0)
    x = np.array([[3, 2, 5, 4, 1], [6, 1, 2, 7, 3]], np.int32)
    idx = np.array([0, 3, 1, 4])
    ref = getattr(np, name)
    want = np.array(
        [[_fold(ref, r[i:j].astype(np.float64)) if i < j else r[i] for i, j in
          zip(idx, [*idx[1:], 5])] for r in x]
    )  # fmt: skip
    got = getattr(bnp, name).reduceat(x, idx, axis=1)
    assert got.dtype == np.float32
    assert_close(got, want, n_ops=4, dtype=np.float32)


# ---- logical reductions honor dtype (JAX's: the truth values in it) ------------------------------

LOGICAL = ["logical_and", "logical_or", "logical_xor"]


@given(st.data(), shapes(min_dims=1, max_dims=3), st.sampled_from(LOGICAL))
def test_logical_reduce_dtype_holds_the_truth_values(data, shape, name):
    x = (data.draw(arrays(shape, -1, 1)) * 2).round() / 2  # zeros among the halves
    axis = _axes(data.draw, len(shape))
    kd = data.draw(st.booleans())
    ref = getattr(np, name)
    want = ref.reduce(x != 0, axis=axis, keepdims=kd)  # numpy's bool result
    for dt in [np.int32, np.uint8, np.int8, bool]:
        got = getattr(bnp, name).reduce(x, axis=axis, dtype=dt, keepdims=kd)
        assert got.dtype == np.dtype(dt)
        np.testing.assert_array_equal(got, want.astype(dt))
    mask = data.draw(arrays(shape, 0, 1)) > 0.5
    got = getattr(bnp, name).reduce(x, axis=axis, dtype=np.int32, where=mask, initial=True)
    want = ref.reduce(x != 0, axis=axis, where=mask, initial=True)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want.astype(np.int32))


@pytest.mark.parametrize("name", LOGICAL)
def test_logical_reduce_float_dtype_is_a_blu_type_error(name):
    # numpy: no loop; JAX: "and does not accept dtype float32"
    with pytest.raises(BluTypeError, match=rf"{name}.reduce: dtype must be bool or an integer"):
        getattr(bnp, name).reduce(np.ones((2, 3)), axis=1, dtype=np.float32)


# ---- reduceat with no indices ------------------------------------------------------------------


@given(st.data(), shapes(min_dims=1, max_dims=3))
def test_reduceat_with_empty_indices_gives_a_zero_length_axis(data, shape):
    x = data.draw(arrays(shape, 0.5, 2.0))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    empty = np.zeros(0, np.int32)
    for name in ["add", "maximum", "subtract", "logaddexp", "divide", "hypot"]:
        want = getattr(np, name).reduceat(x, empty, axis=axis)
        got = getattr(bnp, name).reduceat(x, empty, axis=axis)
        assert got.shape == want.shape and got.dtype == np.float64
    got = bnp.divide.reduceat(x.astype(np.int32), empty, axis=axis)
    assert got.shape == want.shape and got.dtype == np.float32  # reduce's dtype
    got = blu.jit(lambda v, i: bnp.add.reduceat(v, i, axis=axis))(x, empty)
    assert got.shape == want.shape


# ---- accumulate's axis=None ---------------------------------------------------------------------


def test_accumulate_axis_none_is_axis_0_of_a_1d_array_as_numpy():
    x = np.array([3.0, 0.5, 2.0, 4.0])
    for name in ["add", "multiply", "subtract", "maximum", "logaddexp", "divide"]:
        got = getattr(bnp, name).accumulate(x, axis=None)
        assert_close(got, getattr(np, name).accumulate(x, axis=None))
    with pytest.raises(BluValueError, match=r"axis must be one int \(None only for a 1-d"):
        bnp.subtract.accumulate(np.ones((2, 3)), axis=None)  # numpy: "multiple axes"


# ---- where= broadcasts to the array; initial= is a scalar ---------------------------------------

REDUCERS = ["add", "multiply", "maximum", "subtract", "logaddexp", "bitwise_or", "logical_or"]


@pytest.mark.parametrize("name", REDUCERS)
def test_reduce_where_broadcasts_to_the_array_only(name):
    x = np.arange(1, 7, dtype=np.int32).reshape(2, 3)
    u, ref = getattr(bnp, name), getattr(np, name)
    init = {"initial": 1} if ref.identity is None else {}
    for w in [np.array([True, False, True]), np.array([[True], [False]])]:  # smaller: numpy's
        got = u.reduce(x, axis=0, where=w, **init)
        want = ref.reduce(
            x if name.startswith("bit") else x.astype(np.float64), axis=0, where=w, **init
        )
        assert_close(got, want.astype(np.asarray(got).dtype), dtype=np.float32)
    # a mask larger than the array: numpy's "more dimensions than allowed" (sum broadcast the
    # array up to (2, 3); subtract and logaddexp raised other errors)
    with pytest.raises(BluShapeError, match=rf"{name}.reduce: where bool\[2,3\] does not broadc"):
        u.reduce(x[0], where=np.ones((2, 3), bool), **init)


@pytest.mark.parametrize("name", REDUCERS)
def test_reduce_initial_must_be_a_scalar(name):
    # numpy: "setting an array element with a sequence"; JAX: "initial value must be a scalar"
    # (add and maximum broadcast [1, 2, 3] against the result)
    x = np.ones((2, 3), np.int32)
    with pytest.raises(BluValueError, match=rf"{name}.reduce: initial must be a scalar"):
        getattr(bnp, name).reduce(x, axis=0, initial=np.array([1, 2, 3]))
    got = getattr(bnp, name).reduce(x, axis=0, initial=np.array(1))  # a 0-d array is a scalar
    assert got.shape == (3,)


# ---- every float ufunc's methods against a loop of numpy's calls -------------------------------

FLOAT_BINARY = [
    "add", "arctan2", "copysign", "float_power", "floor_divide", "fmax", "fmin", "fmod",
    "heaviside", "hypot", "logaddexp", "logaddexp2", "maximum", "minimum", "mod", "multiply",
    "nextafter", "power", "subtract", "true_divide",
]  # fmt: skip


@given(st.data(), shapes(min_dims=1, max_dims=3, min_side=1), st.sampled_from(FLOAT_BINARY))
def test_float_ufunc_methods_match_a_loop_of_numpys_calls(data, shape, name):
    # the loop, not numpy's reduce: numpy 2.4's arctan2.reduce and power.reduce regroup the
    # terms (arctan2.reduce([1., 2., 3.]) gives arctan2(1, 3))
    x = data.draw(arrays(shape, 0.5, 2.0))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    u, f = getattr(bnp, name), getattr(np, name)
    rows = np.moveaxis(x, axis, 0)
    want = np.moveaxis(np.stack(list(_accumulate_loop(f, rows))), 0, axis)
    assert_close(u.accumulate(x, axis=axis), want, n_ops=len(rows))
    keepdims = data.draw(st.booleans())
    got = u.reduce(x, axis=axis, keepdims=keepdims)
    assert_close(got, np.take(want, [-1] if keepdims else -1, axis=axis), n_ops=len(rows))
    n = shape[axis]
    idx = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=4)))
    ends = [*idx[1:], n]
    want = [_fold(f, rows[i:j]) if i < j else rows[i] for i, j in zip(idx, ends)]
    got = u.reduceat(x, idx, axis=axis)
    assert_close(got, np.moveaxis(np.stack(want), 0, axis), n_ops=len(rows))


def _accumulate_loop(f, rows):
    acc = rows[0]
    yield acc
    for r in rows[1:]:
        acc = f(acc, r)
        yield acc
