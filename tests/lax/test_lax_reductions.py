"""Reductions (sum, max, min, prod, and, or), arg-extrema and cumulative reductions in blu.lax:
eager against numpy float64 references, derivatives against finite differences, vmap against a
loop over slices, jit against eager."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
from blu import lax
from blu.core.errors import BluTypeError, BluValueError
from tests.helpers import check_grads, check_jit, check_vmap, shapes

F64, F32, F16, BF16 = np.float64, np.float32, np.float16, ml_dtypes.bfloat16
ALL_DTYPES = [F32, F64, BF16, F16, np.int32, np.int64, np.uint8, np.uint32, np.bool_]
TOL = {F64: 1e-12, F32: 1e-5, F16: 2e-3, BF16: 2e-2}

REDUCERS = {
    "sum": lax.reduce_sum,
    "max": lax.reduce_max,
    "min": lax.reduce_min,
    "prod": lax.reduce_prod,
}
CUMULATIVE = {
    "cumsum": (lax.cumsum, np.cumsum),
    "cumprod": (lax.cumprod, np.cumprod),
    "cummax": (lax.cummax, np.maximum.accumulate),
    "cummin": (lax.cummin, np.minimum.accumulate),
}


def _identity(op: str, dtype) -> object:
    dtype = np.dtype(dtype)
    if op == "max":
        return (
            False
            if dtype == np.bool_
            else (-np.inf if dtype.kind == "f" or dtype == BF16 else np.iinfo(dtype).min)
        )
    if op == "min":
        return (
            True
            if dtype == np.bool_
            else (np.inf if dtype.kind == "f" or dtype == BF16 else np.iinfo(dtype).max)
        )
    return None


def np_reduce(op: str, x: np.ndarray, axes) -> np.ndarray:
    """The float64 (or int64, wrapping) reference of a reduction."""
    dtype = x.dtype
    is_int = dtype.kind in "iu"
    wide = x.astype(np.int64) if is_int else (x if dtype == np.bool_ else x.astype(np.float64))
    if op == "sum":
        out = np.sum(wide, axis=axes)
    elif op == "prod":
        out = np.prod(wide, axis=axes)
    else:
        fn = np.max if op == "max" else np.min
        init = _identity(op, dtype)
        out = fn(wide, axis=axes, initial=init)
    return np.asarray(out).astype(dtype) if is_int or dtype == np.bool_ else np.asarray(out)


def _random_values(rng, shape, dtype, distinct=False):
    dtype = np.dtype(dtype)
    size = int(np.prod(shape))
    if distinct:  # spaced well beyond finite-difference steps, so max/sort are differentiable
        return ((rng.permutation(size) - size / 2) * 0.37 + 0.1).reshape(shape).astype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        lo = 0 if dtype.kind == "u" else -3
        return rng.integers(lo, 4, shape).astype(dtype)
    return rng.uniform(-2, 2, shape).astype(dtype)


@st.composite
def array_axes(draw, dtype=F64, min_dims=0, distinct=False, allow_none=True):
    """(x, axes): axes a random subset of x's axes, some negative, or None."""
    shape = draw(shapes(min_dims=min_dims))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = _random_values(rng, shape, dtype, distinct)
    nd = len(shape)
    if allow_none and draw(st.booleans()) and draw(st.booleans()):
        return x, None
    chosen = draw(st.lists(st.sampled_from(range(nd)), unique=True)) if nd else []
    axes = tuple(a - nd if draw(st.booleans()) else a for a in chosen)
    return x, axes


def _norm_axes(axes, nd):
    return tuple(range(nd)) if axes is None else tuple(sorted(a % nd for a in axes))


def _assert_close(got, want, dtype):
    got = np.asarray(got)
    assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    if np.dtype(dtype).kind in "iub":
        np.testing.assert_array_equal(got, want)
    else:
        tol = TOL[dtype]
        np.testing.assert_allclose(got.astype(F64), np.asarray(want, F64), rtol=tol, atol=tol * 8)


# ---- values ------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", list(REDUCERS))
@given(data=array_axes())
def test_reduce_float64_matches_numpy(op, data):
    x, axes = data
    got = REDUCERS[op](x, axes)
    want = np_reduce(op, x, _norm_axes(axes, x.ndim))
    assert np.shape(got) == want.shape
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", list(REDUCERS))
@given(seed=st.integers(0, 2**32 - 1), shape=shapes(max_side=3))
def test_reduce_dtypes(op, dtype, seed, shape):
    if op in ("sum", "prod") and dtype == np.bool_:
        if op == "prod":
            with pytest.raises(BluTypeError, match="reduce_prod"):
                lax.reduce_prod(np.zeros(shape, bool))
        return
    rng = np.random.default_rng(seed)
    x = _random_values(rng, shape, dtype)
    axes = tuple(a for a in range(x.ndim) if rng.random() < 0.6)
    got = REDUCERS[op](x, axes)
    want = np_reduce(op, x, axes)
    if np.dtype(dtype).kind == "f" or dtype == BF16:
        # inputs are exact in every float dtype; only the result is rounded once
        want = np.asarray(want, F64)
        scale = np.max(np.abs(want)) if want.size else 1.0
        np.testing.assert_allclose(
            np.asarray(got, F64), want, rtol=TOL[dtype], atol=TOL[dtype] * max(scale, 1.0)
        )
        assert np.asarray(got).dtype == np.dtype(dtype)
    else:
        _assert_close(got, want, dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: np.dtype(d).name)
def test_reductions_over_size_0_axis_give_identities(dtype):
    x = np.zeros((3, 0), dtype)
    is_float = np.dtype(dtype).kind == "f" or dtype == BF16
    if dtype != np.bool_:
        _assert_close(lax.reduce_sum(x, 1), np.zeros(3, dtype), dtype)
        _assert_close(lax.reduce_prod(x, 1), np.ones(3, dtype), dtype)
    lo = -np.inf if is_float else (False if dtype == np.bool_ else np.iinfo(dtype).min)
    hi = np.inf if is_float else (True if dtype == np.bool_ else np.iinfo(dtype).max)
    np.testing.assert_array_equal(np.asarray(lax.reduce_max(x, 1)), np.full(3, lo, dtype))
    np.testing.assert_array_equal(np.asarray(lax.reduce_min(x, 1)), np.full(3, hi, dtype))
    assert np.asarray(lax.reduce_max(x, 1)).dtype == np.dtype(dtype)


def test_reduce_max_min_propagate_nan():
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]], F32)
    np.testing.assert_array_equal(np.asarray(lax.reduce_max(x, 1)), [np.nan, 6.0])
    np.testing.assert_array_equal(np.asarray(lax.reduce_min(x, 1)), [np.nan, 4.0])
    xb = x.astype(BF16)
    assert np.isnan(np.asarray(lax.reduce_max(xb, 1), F32)[0])


@pytest.mark.parametrize("op", ["and", "or"])
@given(data=array_axes(dtype=np.bool_))
def test_reduce_and_or_match_numpy(op, data):
    x, axes = data
    fn, ref = (lax.reduce_and, np.all) if op == "and" else (lax.reduce_or, np.any)
    got = fn(x, axes)
    want = ref(x, axis=_norm_axes(axes, x.ndim))
    assert np.asarray(got).dtype == np.bool_
    np.testing.assert_array_equal(np.asarray(got), want)


# ---- derivatives -------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["sum", "prod"])
@given(data=array_axes())
def test_reduce_sum_prod_grads(op, data):
    x, axes = data
    check_grads(lambda x: REDUCERS[op](x, axes), [x], order=2)


@pytest.mark.parametrize("op", ["max", "min"])
@given(data=array_axes(distinct=True))
def test_reduce_max_min_grads(op, data):
    x, axes = data
    if any(x.shape[a] == 0 for a in _norm_axes(axes, x.ndim)):
        return  # -inf: finite differences are NaN (the tangent 0 is tested below)
    check_grads(lambda x: REDUCERS[op](x, axes), [x], order=2)


def test_reduce_max_min_ties_split_the_derivative_evenly():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    g = blu.grad(lambda x: lax.reduce_sum(lax.reduce_max(x, 1)))(x)
    np.testing.assert_allclose(np.asarray(g), [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    g = blu.grad(lambda x: lax.reduce_min(x))(x)
    np.testing.assert_allclose(np.asarray(g), [[1, 0, 0], [0, 0, 0]])
    g = blu.grad(lambda x: lax.reduce_min(x))(np.array([[1.0, 3.0], [2.0, 1.0]]))
    np.testing.assert_allclose(np.asarray(g), [[0.5, 0], [0, 0.5]])
    # the tangent of a max over an empty axis is 0, not 0/0
    _, t = blu.jvp(lambda x: lax.reduce_max(x, 1), (np.zeros((2, 0)),), (np.zeros((2, 0)),))
    np.testing.assert_array_equal(np.asarray(t), [0.0, 0.0])


def _prod_of_others_loop(x: np.ndarray) -> np.ndarray:
    flat = x.ravel()
    return np.array([np.prod(np.delete(flat, i)) for i in range(flat.size)]).reshape(x.shape)


@given(
    shape=shapes(min_dims=1, min_side=1),
    seed=st.integers(0, 2**32 - 1),
    n_zeros=st.integers(1, 3),
)
def test_reduce_prod_grad_with_zeros_is_product_of_the_others(shape, seed, n_zeros):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.5, 1.5, shape) * rng.choice([-1, 1], shape)
    zeros = rng.choice(x.size, min(n_zeros, x.size), replace=False)
    x.ravel()[zeros] = 0.0
    g = blu.grad(lambda x: lax.reduce_prod(x))(x)
    np.testing.assert_allclose(np.asarray(g), _prod_of_others_loop(x), rtol=1e-12, atol=1e-14)
    # the product is a polynomial, so finite differences are exact enough at zeros too;
    # higher derivatives are exact with one zero per reduced group
    check_grads(lambda x: lax.reduce_prod(x, x.ndim - 1), [x], order=1)
    if n_zeros == 1:
        check_grads(lambda x: lax.reduce_prod(x), [x], order=2)


def test_reduce_prod_grad_examples():
    g = blu.grad(lambda x: lax.reduce_prod(x))
    np.testing.assert_allclose(np.asarray(g(np.array([2.0, 0.0, 3.0]))), [0.0, 6.0, 0.0])
    np.testing.assert_allclose(np.asarray(g(np.array([0.0, 0.0, 3.0]))), [0.0, 0.0, 0.0])
    np.testing.assert_allclose(np.asarray(g(np.array([2.0, 4.0, 3.0]))), [12.0, 6.0, 8.0])
    # second derivative with one zero: d2/dx0 dx1 of x0*x1*x2 at (2, 0, 3) is x2 = 3
    h = blu.grad(
        lambda x: lax.reduce_sum(
            lax.mul(blu.grad(lambda y: lax.reduce_prod(y))(x), np.array([0.0, 1.0, 0.0]))
        )
    )
    np.testing.assert_allclose(np.asarray(h(np.array([2.0, 0.0, 3.0]))), [3.0, 0.0, 2.0])


# ---- vmap and jit ------------------------------------------------------------------------------


@st.composite
def batched_pair(draw, dtype=F64, distinct=False):
    """(x, w, axes, in_axes): per-example arrays of one shape, each batched at a random axis
    (or not batched, but never both unbatched)."""
    shape = draw(shapes(max_dims=2))
    size = draw(st.integers(1, 3))
    nd = len(shape)
    in_axes = [draw(st.sampled_from([None] + list(range(-nd - 1, nd + 1)))) for _ in range(2)]
    if in_axes == [None, None]:
        in_axes[0] = 0
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    args = []
    for ax in in_axes:
        full = shape if ax is None else _insert(shape, ax, size)
        args.append(_random_values(rng, full, dtype, distinct))
    axes = tuple(a for a in range(nd) if draw(st.booleans()))
    return args[0], args[1], axes, in_axes


def _insert(shape, axis, size):
    axis = axis % (len(shape) + 1)
    return shape[:axis] + (size,) + shape[axis:]


@pytest.mark.parametrize("op", list(REDUCERS))
@given(data=batched_pair(distinct=True))
def test_reductions_vmap(op, data):
    x, w, axes, in_axes = data
    check_vmap(lambda x, w: REDUCERS[op](lax.add(x, w), axes), [x, w], in_axes)
    check_vmap(lambda x, w: REDUCERS[op](x, axes), [x, w], in_axes)


@pytest.mark.parametrize("op", ["and", "or"])
@given(data=batched_pair(dtype=np.bool_))
def test_reduce_and_or_vmap(op, data):
    x, w, axes, in_axes = data
    fn = lax.reduce_and if op == "and" else lax.reduce_or
    check_vmap(lambda x, w: fn(lax.eq(x, w), axes), [x, w], in_axes)


@pytest.mark.parametrize("op", list(REDUCERS))
@given(data=array_axes(distinct=True))
def test_reductions_jit_and_grad_of_vmap(op, data):
    x, axes = data
    check_jit(lambda x: REDUCERS[op](x, axes), [x])
    if x.ndim and x.size:  # (max/min of an empty row is -inf: finite differences are NaN)
        # reverse mode through vmap: the batching rules' outputs are differentiable
        f = blu.vmap(lambda r: REDUCERS[op](r, None))
        check_grads(f, [x], order=1)


# ---- argmax / argmin ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", ["argmax", "argmin"])
@given(seed=st.integers(0, 2**32 - 1), shape=shapes(min_dims=1, min_side=1))
def test_argmax_argmin_match_numpy_with_ties(op, dtype, seed, shape):
    rng = np.random.default_rng(seed)
    x = _random_values(rng, shape, dtype)
    if np.dtype(dtype).kind in "f" or dtype == BF16:
        x = np.round(x.astype(F64)).astype(dtype)  # few distinct values: many ties
        if rng.random() < 0.5:
            x.ravel()[rng.integers(x.size)] = np.nan
    axis = int(rng.integers(-x.ndim, x.ndim))
    fn, ref = (lax.argmax, np.argmax) if op == "argmax" else (lax.argmin, np.argmin)
    got = fn(x, axis, np.int32)
    want = ref(x.astype(F64) if dtype in (BF16, F16) else x, axis=axis)  # first occurrence
    assert np.asarray(got).dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), want)


def test_argmax_examples_and_index_dtype():
    x = np.array([[1.0, 5.0, 5.0, np.nan, np.nan], [2.0, 1.0, 1.0, 0.0, 2.0]])
    np.testing.assert_array_equal(np.asarray(lax.argmax(x, 1)), [3, 0])
    np.testing.assert_array_equal(np.asarray(lax.argmin(x, 1)), [3, 3])
    out = lax.argmax(x, 0, index_dtype=np.int64)
    assert np.asarray(out).dtype == np.int64
    np.testing.assert_array_equal(np.asarray(out), [1, 0, 0, 0, 0])
    assert np.asarray(lax.argmax(np.zeros((0, 3)), 1)).shape == (0,)


def test_argmax_errors():
    with pytest.raises(BluValueError, match=r"argmax: axis 1 of f64\[3,0\] is empty"):
        lax.argmax(np.zeros((3, 0)), 1)
    with pytest.raises(BluValueError, match="argmin: axis 2 out of range"):
        lax.argmin(np.zeros((3, 2)), 2)
    with pytest.raises(BluValueError, match="index_dtype"):
        lax.argmax(np.zeros(3), 0, index_dtype=np.float32)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@given(data=batched_pair(distinct=False))
def test_argmax_vmap_jit_and_no_tangent(op, data):
    x, w, _, in_axes = data
    fn = lax.argmax if op == "argmax" else lax.argmin
    if x.ndim == 0 or x.size == 0 or w.size == 0 or np.ndim(w) == 0:
        return
    # the per-example rank is x.ndim - 1 when x is batched
    nd = x.ndim - (in_axes[0] is not None)
    if nd == 0:
        return
    axis = -1
    check_vmap(lambda x, w: fn(lax.sub(x, w), axis), [x, w], in_axes)
    check_jit(lambda x: fn(x, axis), [x])
    p, t = blu.jvp(lambda x: fn(x, axis), (x,), (np.ones_like(x),))
    np.testing.assert_array_equal(np.asarray(t), np.zeros(np.shape(p)))


# ---- cumulative reductions ---------------------------------------------------------------------


@st.composite
def array_axis(draw, dtype=F64, distinct=False, zeros=0):
    shape = draw(shapes(min_dims=1))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = _random_values(rng, shape, dtype, distinct)
    if zeros and x.size:
        x.ravel()[rng.choice(x.size, min(zeros, x.size), replace=False)] = 0
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    return x, axis, draw(st.booleans())


def _np_scan(ref, x, axis, reverse):
    if reverse:
        return np.flip(ref(np.flip(x, axis), axis=axis), axis)
    return ref(x, axis=axis)


@pytest.mark.parametrize("op", list(CUMULATIVE))
@given(data=array_axis())
def test_cumulative_matches_numpy(op, data):
    x, axis, reverse = data
    fn, ref = CUMULATIVE[op]
    got = fn(x, axis, reverse)
    np.testing.assert_allclose(
        np.asarray(got), _np_scan(ref, x, axis, reverse), rtol=1e-12, atol=1e-12
    )


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", list(CUMULATIVE))
@given(seed=st.integers(0, 2**32 - 1), shape=shapes(min_dims=1, max_side=3))
def test_cumulative_dtypes(op, dtype, seed, shape):
    fn, ref = CUMULATIVE[op]
    rng = np.random.default_rng(seed)
    x = _random_values(rng, shape, dtype)
    if dtype == np.bool_ and op in ("cumsum", "cumprod"):
        with pytest.raises(BluTypeError, match=op):
            fn(x, 0)
        return
    reverse = bool(rng.random() < 0.5)
    got = fn(x, 0, reverse)
    wide = (
        x.astype(np.int64)
        if np.dtype(dtype).kind in "iu"
        else (x if dtype == np.bool_ else x.astype(F64))
    )
    want = _np_scan(ref, wide, 0, reverse)
    if np.dtype(dtype).kind in "iub":
        want = want.astype(dtype)
    else:
        want = np.asarray(want, F64)
        want = np.where(np.abs(want) < 1e30, want, 0)  # cumprod of 3 values can't overflow here
    if np.dtype(dtype).kind == "f" or dtype == BF16:
        scale = max(np.max(np.abs(want)) if want.size else 1.0, 1.0)
        np.testing.assert_allclose(
            np.asarray(got, F64), want, rtol=TOL[dtype], atol=TOL[dtype] * scale
        )
        assert np.asarray(got).dtype == np.dtype(dtype)
    else:
        _assert_close(got, want, dtype)


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@given(data=array_axis())
def test_cumsum_cumprod_grads(op, data):
    x, axis, reverse = data
    check_grads(lambda x: CUMULATIVE[op][0](x, axis, reverse), [x], order=2)


@given(data=array_axis(zeros=1), more=st.booleans())
def test_cumprod_grads_with_zeros(data, more):
    x, axis, reverse = data
    if more and x.size >= 2:  # two zeros: first derivatives still exact
        x.ravel()[[0, -1]] = 0.0
        check_grads(lambda x: lax.cumprod(x, axis, reverse), [x], order=1)
    else:
        check_grads(lambda x: lax.cumprod(x, axis, reverse), [x], order=2)


def test_cumprod_jvp_example_with_zero():
    # d/dt cumprod([2, 0, 2, 3] + t) at t = 0: [1, 2, 4, 12]
    _, t = blu.jvp(lax.cumprod, (np.array([2.0, 0.0, 2.0, 3.0]),), (np.ones(4),))
    np.testing.assert_allclose(np.asarray(t), [1.0, 2.0, 4.0, 12.0])


@pytest.mark.parametrize("op", ["cummax", "cummin"])
@given(data=array_axis(distinct=True))
def test_cummax_cummin_grads(op, data):
    x, axis, reverse = data
    check_grads(lambda x: CUMULATIVE[op][0](x, axis, reverse), [x], order=2)


def test_cummax_derivative_goes_to_first_occurrence_and_nan():
    x = np.array([1.0, 3.0, 2.0, 3.0, 4.0])
    g = blu.grad(lambda x: lax.reduce_sum(lax.cummax(x)))(x)
    np.testing.assert_allclose(np.asarray(g), [1.0, 3.0, 0.0, 0.0, 1.0])
    g = blu.grad(lambda x: lax.reduce_sum(lax.cummax(x, reverse=True)))(x)
    np.testing.assert_allclose(np.asarray(g), [0.0, 0.0, 0.0, 0.0, 5.0])
    xn = np.array([1.0, np.nan, 5.0])
    np.testing.assert_array_equal(np.asarray(lax.cummax(xn)), [1.0, np.nan, np.nan])
    g = blu.grad(lambda x: lax.reduce_sum(lax.mul(lax.cummin(x), np.array([1.0, 1.0, 0.0]))))(xn)
    np.testing.assert_allclose(np.asarray(g), [1.0, 1.0, 0.0])


@pytest.mark.parametrize("op", list(CUMULATIVE))
@given(data=batched_pair(distinct=True), reverse=st.booleans())
def test_cumulative_vmap_and_jit(op, data, reverse):
    x, w, _, in_axes = data
    fn = CUMULATIVE[op][0]
    nd = x.ndim - (in_axes[0] is not None)
    if nd == 0:
        return
    check_vmap(lambda x, w: fn(lax.add(x, w), -1, reverse), [x, w], in_axes)
    check_jit(lambda x: fn(x, 0, reverse), [x])
    if in_axes[0] is not None:  # reverse mode through the batching rule
        check_grads(blu.vmap(lambda r: fn(r, -1, reverse), in_axes=in_axes[0]), [x])


# ---- errors ------------------------------------------------------------------------------------


def test_reduction_errors_name_the_operation_and_shapes():
    x = np.zeros((2, 3), F32)
    with pytest.raises(BluValueError, match=r"axis 2 out of range for f32\[2,3\]"):
        lax.reduce_max(x, 2)
    with pytest.raises(BluValueError, match=r"reduce_min: axes \(1, 1\) are not distinct"):
        lax.reduce_min(x, (1, -1))
    with pytest.raises(BluTypeError, match=r"reduce_prod requires numeric operands, got bool\[2\]"):
        lax.reduce_prod(np.zeros(2, bool), 0)
    with pytest.raises(BluTypeError, match=r"reduce_and requires bool operands, got f32\[2,3\]"):
        lax.reduce_and(x)
    with pytest.raises(BluTypeError, match="reduce_or"):
        lax.reduce_or(np.zeros(3, np.int32), ())
    with pytest.raises(BluValueError, match=r"cumsum: axis -3 out of range for f32\[2,3\]"):
        lax.cumsum(x, -3)
    with pytest.raises(BluValueError, match="cummax"):
        lax.cummax(np.float32(1.0), 0)
    with pytest.raises(BluValueError, match="at .*test_lax_reductions.py"):
        lax.reduce_sum(x, 5)
