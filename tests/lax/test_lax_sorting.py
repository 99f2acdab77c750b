"""sort (single and lexicographic multi-operand), top_k and the take_along_axis gather used by
their derivatives: eager against numpy references, derivatives against finite differences
(inputs with distinct values), vmap against a loop over slices, jit against eager."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
from blu import lax
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from blu.lax.sorting import take_along_axis
from tests.helpers import check_grads, check_jit, check_vmap, shapes

F64, F32, F16, BF16 = np.float64, np.float32, np.float16, ml_dtypes.bfloat16
DTYPES = [F32, F64, BF16, F16, np.int32, np.int64, np.uint8, np.uint32, np.bool_]


def _values(rng, shape, dtype=F64, distinct=False, nan=False):
    dtype = np.dtype(dtype)
    size = int(np.prod(shape))
    if distinct:  # spaced far beyond finite-difference steps: the permutation is locally fixed
        return ((rng.permutation(size) - size / 2) * 0.37 + 0.1).reshape(shape).astype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0 if dtype.kind == "u" else -3, 4, shape).astype(dtype)
    x = (rng.integers(-4, 5, shape) / 2).astype(dtype)  # few values: many ties
    if nan and size:
        x.ravel()[rng.integers(0, size, max(1, size // 4))] = np.nan
    return x


@st.composite
def arrays_dim(draw, dtype=F64, distinct=False, nan=False, max_dims=3):
    shape = draw(shapes(min_dims=1, max_dims=max_dims))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    return _values(rng, shape, dtype, distinct, nan), dim


def _sorted_ref(x, dim):
    """numpy's sort (NaN last), computed in float64 for the narrow floats."""
    wide = x.astype(F64) if x.dtype in (np.dtype(BF16), np.dtype(F16)) else x
    return np.sort(wide, axis=dim, kind="stable").astype(x.dtype)


# ---- sort values -------------------------------------------------------------------------------


@given(data=arrays_dim(nan=True))
def test_sort_matches_numpy_nan_last(data):
    x, dim = data
    got = lax.sort(x, dimension=dim)
    np.testing.assert_array_equal(np.asarray(got), _sorted_ref(x, dim))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_sort_dtypes(dtype, data):
    x, dim = data.draw(arrays_dim(dtype=dtype, nan=True))
    got = lax.sort(x, dim)
    assert np.asarray(got).dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.asarray(got).astype(F64), _sorted_ref(x, dim).astype(F64))


@pytest.mark.parametrize("num_keys", [1, 2, 3])
@given(data=st.data())
def test_sort_multiple_operands_lexicographic_and_stable(num_keys, data):
    shape = data.draw(shapes(min_dims=1, max_dims=2, max_side=5))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    keys = [_values(rng, shape, np.int32), _values(rng, shape, F64, nan=True),
            _values(rng, shape, np.bool_)]  # fmt: skip
    iota = np.broadcast_to(
        np.arange(shape[dim]).reshape(
            [-1 if i == dim % len(shape) else 1 for i in range(len(shape))]
        ),
        shape,
    ).astype(np.int32)
    outs = lax.sort((*keys, iota), dimension=dim, num_keys=num_keys)
    assert isinstance(outs, tuple) and len(outs) == 4
    # reference: a stable lexicographic sort by the first num_keys operands (lexsort: last key
    # is primary); each slice is sorted independently with Python's stable sort
    rows = int(np.prod(shape)) // shape[dim] if shape[dim] else 0
    moved = [np.moveaxis(o, dim, -1).reshape(rows, shape[dim]) for o in (*keys, iota)]
    want = [np.empty_like(m) for m in moved]
    nan_last = lambda v: (1, 0.0) if isinstance(v, float) and np.isnan(v) else (0, v)  # noqa: E731
    for r in range(moved[0].shape[0]):
        order = sorted(
            range(shape[dim]),
            key=lambda j: tuple(nan_last(moved[q][r, j].item()) for q in range(num_keys)),
        )
        for w, m in zip(want, moved):
            w[r] = m[r, order]
    for got, w in zip(outs, want):
        w = np.moveaxis(w.reshape(np.moveaxis(iota, dim, -1).shape), -1, dim)
        np.testing.assert_array_equal(np.asarray(got), w)


def test_sort_key_val_and_examples():
    k, v = lax.sort_key_val(np.array([3.0, np.nan, 1.0, 3.0]), np.array([0, 1, 2, 3]))
    np.testing.assert_array_equal(np.asarray(k), [1.0, 3.0, 3.0, np.nan])
    np.testing.assert_array_equal(np.asarray(v), [2, 0, 3, 1])
    x = np.array([[2, 1], [0, 5]], np.uint8)
    np.testing.assert_array_equal(np.asarray(lax.sort(x, 0)), [[0, 1], [2, 5]])
    assert isinstance(lax.sort([x]), tuple)


# ---- sort derivatives, vmap, jit ---------------------------------------------------------------


@given(data=arrays_dim(distinct=True))
def test_sort_grads(data):
    x, dim = data
    check_grads(lambda x: lax.sort(x, dim), [x], order=2)


@given(data=arrays_dim(distinct=True), seed=st.integers(0, 99))
def test_sort_multi_operand_grads_flow_to_every_float_operand(data, seed):
    keys, dim = data
    vals = np.random.default_rng(seed).standard_normal(keys.shape)
    check_grads(lambda k, v: lax.sort((k, v), dim, num_keys=1), [keys, vals], order=2)
    # integer operands ride along with no tangent
    ints = np.arange(keys.size, dtype=np.int32).reshape(keys.shape)
    f = lambda k: lax.sort((k, ints), dim)[0]  # noqa: E731
    check_grads(f, [keys])
    _, (tk, ti) = blu.jvp(lambda k: lax.sort((k, ints), dim), (keys,), (np.ones_like(keys),))
    np.testing.assert_array_equal(np.asarray(tk), np.ones_like(keys))
    np.testing.assert_array_equal(np.asarray(ti), np.zeros_like(ints))


@st.composite
def batched_operands(draw, n, dtype=F64, distinct=False, min_dims=1):
    """n per-example arrays of one shape, each batched at a random axis or unbatched (never all
    unbatched)."""
    shape = draw(shapes(min_dims=min_dims, max_dims=2))
    size = draw(st.integers(1, 3))
    nd = len(shape)
    in_axes = [draw(st.sampled_from([None] + list(range(-nd - 1, nd + 1)))) for _ in range(n)]
    if all(a is None for a in in_axes):
        in_axes[0] = draw(st.integers(-nd - 1, nd))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    args = []
    for ax in in_axes:
        full = shape
        if ax is not None:
            a = ax % (nd + 1)
            full = shape[:a] + (size,) + shape[a:]
        args.append(_values(rng, full, dtype, distinct))
    dim = draw(st.integers(-nd, nd - 1))
    return args, in_axes, dim


@given(data=batched_operands(3))
def test_sort_vmap(data):
    args, in_axes, dim = data
    check_vmap(lambda a, b, c: lax.sort((a, b, c), dim, num_keys=2), args, in_axes)


@given(data=batched_operands(2, distinct=True))
def test_sort_vmap_of_grad(data):
    args, in_axes, dim = data
    g = blu.grad(lambda k, v: lax.reduce_sum(lax.mul(lax.sort((k, v), dim)[1], v)), argnums=(0, 1))
    check_vmap(g, args, in_axes, atol=1e-12, rtol=1e-12)


@given(data=arrays_dim(distinct=True))
def test_sort_jit(data):
    x, dim = data
    check_jit(lambda x: lax.sort(x, dim), [x])
    check_jit(blu.grad(lambda x: lax.reduce_sum(lax.mul(lax.sort(x, dim), x))), [x])


# ---- top_k -------------------------------------------------------------------------------------


def _top_k_ref(x, k):
    """Largest first, ties by lower index, NaN counted as the largest."""
    flat = x.reshape(int(np.prod(x.shape[:-1])), x.shape[-1]).astype(F64)
    idx = np.empty((flat.shape[0], k), np.int32)
    for r, row in enumerate(flat):
        key = lambda j: (0 if np.isnan(row[j]) else 1, -row[j] if not np.isnan(row[j]) else 0, j)  # noqa: E731
        idx[r] = sorted(range(row.size), key=key)[:k]
    idx = idx.reshape(x.shape[:-1] + (k,))
    return np.take_along_axis(x, idx, -1), idx


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_top_k_matches_reference_with_ties(dtype, data):
    x, _ = data.draw(arrays_dim(dtype=dtype, nan=True))
    k = data.draw(st.integers(0, x.shape[-1]))
    values, idx = lax.top_k(x, k)
    want_v, want_i = _top_k_ref(x, k)
    assert np.asarray(idx).dtype == np.int32 and np.asarray(values).dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.asarray(idx), want_i)
    np.testing.assert_array_equal(np.asarray(values).astype(F64), want_v.astype(F64))


def test_top_k_example():
    v, i = lax.top_k(np.array([1.0, 3.0, np.nan, 3.0, 2.0]), 4)
    np.testing.assert_array_equal(np.asarray(v), [np.nan, 3.0, 3.0, 2.0])
    np.testing.assert_array_equal(np.asarray(i), [2, 1, 3, 4])


@pytest.mark.parametrize("axis", [0, 1, -3, -2])
def test_top_k_axis(axis):
    # JAX's top_k(x, k, axis=...): the k largest along that axis, which keeps its place
    x = np.random.default_rng(1).integers(0, 4, size=(3, 5, 2)).astype(F64)
    x[1, 2, 0] = np.nan
    k = 2
    for fn in (lax.top_k, blu.jit(lax.top_k, static_argnames=("k", "axis"))):
        values, idx = fn(x, k=k, axis=axis)
        want_v, want_i = _top_k_ref(np.moveaxis(x, axis, -1), k)
        np.testing.assert_array_equal(np.asarray(idx), np.moveaxis(want_i, -1, axis))
        np.testing.assert_array_equal(np.asarray(values), np.moveaxis(want_v, -1, axis))
    with pytest.raises(BluValueError, match="axis 3 out of range"):
        lax.top_k(x, 1, axis=3)


@given(data=arrays_dim(distinct=True))
def test_top_k_grads(data):
    x, _ = data
    k = x.shape[-1] // 2 + (x.shape[-1] % 2)
    check_grads(lambda x: lax.top_k(x, k)[0], [x], order=2)


@given(data=batched_operands(1, distinct=True), k_frac=st.floats(0, 1))
def test_top_k_vmap_and_jit(data, k_frac):
    (x,), in_axes, _ = data
    n = x.shape[-1] if in_axes[0] is None or in_axes[0] % x.ndim != x.ndim - 1 else x.shape[-2]
    k = int(k_frac * n)
    check_vmap(lambda x: lax.top_k(x, k), [x], in_axes)
    check_jit(blu.vmap(lambda x: lax.top_k(x, k), in_axes=in_axes[0]), [x])
    if x.size:
        f = blu.vmap(lambda x: lax.top_k(x, k)[0], in_axes=in_axes[0])
        check_grads(f, [x])


# ---- approx_max_k / approx_min_k (JAX's; blu had none): exact, along any dimension ----------


def _approx_k_ref(x, k, dim, largest):
    """A loop over the slices along ``dim``: sorted by (NaN largest, value, index)."""
    moved = np.moveaxis(x, dim, -1)
    flat = moved.reshape(-1, moved.shape[-1]).astype(F64)
    idx = np.empty((flat.shape[0], k), np.int32)
    for r, row in enumerate(flat):

        def key(j, row=row):
            nan = bool(np.isnan(row[j]))
            v = 0.0 if nan else (-row[j] if largest else row[j])
            return (nan != largest, v, j)

        idx[r] = sorted(range(row.size), key=key)[:k]
    idx = np.moveaxis(idx.reshape(moved.shape[:-1] + (k,)), -1, dim)
    return np.take_along_axis(x, idx, dim), idx


@pytest.mark.parametrize("largest", [True, False], ids=["max", "min"])
@pytest.mark.parametrize("dtype", [F32, F64, BF16, F16], ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_approx_max_min_k_are_exact_top_k_along_any_dimension(largest, dtype, data):
    x, dim = data.draw(arrays_dim(dtype=dtype, nan=True).filter(lambda xd: xd[0].shape[xd[1]]))
    k = data.draw(st.integers(1, x.shape[dim]))
    fn = lax.approx_max_k if largest else lax.approx_min_k
    values, idx = fn(x, k, reduction_dimension=dim, recall_target=0.9)
    want_v, want_i = _approx_k_ref(x, k, dim, largest)
    assert np.asarray(idx).dtype == np.int32 and np.asarray(values).dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.asarray(idx), want_i)
    np.testing.assert_array_equal(np.asarray(values).astype(F64), want_v.astype(F64))


def test_approx_k_examples_and_hints():
    x = np.array([[3.0, 1.0, np.nan, 1.0, 5.0], [0.0, -1.0, 2.0, 2.0, -np.inf]])
    v, i = lax.approx_min_k(x, 3, aggregate_to_topk=False, reduction_input_size_override=5)
    np.testing.assert_array_equal(np.asarray(v), [[1.0, 1.0, 3.0], [-np.inf, -1.0, 0.0]])
    np.testing.assert_array_equal(np.asarray(i), [[1, 3, 0], [4, 1, 0]])
    v, i = lax.approx_max_k(x, 1, reduction_dimension=0)
    np.testing.assert_array_equal(np.asarray(v), [[3.0, 1.0, np.nan, 2.0, 5.0]])
    np.testing.assert_array_equal(np.asarray(i), [[0, 0, 0, 1, 0]])


@pytest.mark.parametrize("largest", [True, False], ids=["max", "min"])
@given(data=arrays_dim(distinct=True).filter(lambda xd: xd[0].shape[xd[1]]))
def test_approx_k_grads_vmap_and_jit(largest, data):
    x, dim = data
    k = (x.shape[dim] + 1) // 2
    fn = lax.approx_max_k if largest else lax.approx_min_k
    check_grads(lambda v: fn(v, k, reduction_dimension=dim)[0], [x])
    if x.ndim >= 2:
        batch = (dim + 1) % x.ndim  # not the searched axis
        inner_dim = dim % x.ndim - (dim % x.ndim > batch)
        check_vmap(lambda v: fn(v, k, reduction_dimension=inner_dim), [x], in_axes=[batch])
    check_jit(lambda v: fn(v, k, reduction_dimension=dim), [x])


@pytest.mark.parametrize("fn", [lax.approx_max_k, lax.approx_min_k])
@pytest.mark.parametrize(
    ("x", "k", "kw", "err", "match"),
    [
        (np.zeros(()), 1, {}, BluShapeError, r"rank >= 1, got f64\[\]"),
        (np.arange(3), 1, {}, BluTypeError, r"float array, got i64\[3\]"),
        (np.zeros((2, 3)), 0, {}, BluValueError, r"k=0 must be in \[1, 3\]"),
        (np.zeros((2, 3)), 3, {"reduction_dimension": 0}, BluValueError, r"k=3 must be in \[1, 2"),
        (np.zeros((2, 3)), 1, {"reduction_dimension": 2}, BluValueError, r"dimension 2 out of"),
        (np.zeros((2, 3)), 1.5, {}, BluTypeError, r"k must be an int"),
    ],
)  # fmt: skip
def test_approx_k_errors(fn, x, k, kw, err, match):
    with pytest.raises(err, match=match):
        fn(x, k, **kw)


# ---- take_along_axis (the gather behind the derivatives) ---------------------------------------


@st.composite
def gather_problem(draw):
    shape = draw(shapes(min_dims=1, max_dims=3, min_side=1))
    axis = draw(st.integers(0, len(shape) - 1))
    m = draw(st.integers(0, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal(shape)
    idx_shape = shape[:axis] + (m,) + shape[axis + 1 :]
    idx = rng.integers(0, shape[axis], idx_shape).astype(np.int32)  # repeats: scatter-add sums
    return x, idx, axis


@given(data=gather_problem())
def test_take_along_axis_values_grads_and_transpose(data):
    x, idx, axis = data
    np.testing.assert_array_equal(
        np.asarray(take_along_axis(x, idx, axis)), np.take_along_axis(x, idx, axis)
    )
    check_grads(lambda x: take_along_axis(x, idx, axis), [x], order=2)
    # the cotangent of x counts repeated indices: scatter-add
    ct = np.ones(idx.shape)
    _, f_vjp = blu.vjp(lambda x: take_along_axis(x, idx, axis), x)
    want = np.zeros_like(x)
    np.add.at(
        want,
        tuple(np.indices(idx.shape)[:axis]) + (idx,) + tuple(np.indices(idx.shape)[axis + 1 :]),
        ct,
    )
    np.testing.assert_allclose(np.asarray(f_vjp(ct)[0]), want)
    # the scatter-add itself transposes back to the gather
    _, g_vjp = blu.vjp(lambda c: f_vjp(c)[0], ct)
    check_grads(lambda c: f_vjp(c)[0], [ct], order=1)
    np.testing.assert_allclose(np.asarray(g_vjp(x)[0]), np.take_along_axis(x, idx, axis))


@given(
    data=gather_problem(),
    ax=st.tuples(st.sampled_from([None, 0, -1]), st.sampled_from([None, 0, 1])),
)
def test_take_along_axis_vmap(data, ax):
    x, idx, axis = data
    xa, ia = ax
    if xa is None and ia is None:
        xa = 0
    xb = x if xa is None else np.stack([x, -x], axis=xa)
    ib = idx if ia is None else np.stack([idx, idx[::-1] if idx.ndim else idx], axis=ia)
    check_vmap(lambda x, i: take_along_axis(x, i, axis), [xb, ib], [xa, ia])


# ---- errors ------------------------------------------------------------------------------------


def test_sorting_errors():
    a, b = np.zeros((2, 3), F32), np.zeros((3, 2), F32)
    with pytest.raises(
        BluShapeError, match=r"sort: operands must have equal shapes, got f32\[2,3\], f32\[3,2\]"
    ):
        lax.sort((a, b))
    with pytest.raises(BluValueError, match="num_keys=3 but there are 2 operands"):
        lax.sort((a, a), num_keys=3)
    with pytest.raises(BluValueError, match=r"sort: dimension 2 out of range for f32\[2,3\]"):
        lax.sort(a, 2)
    with pytest.raises(BluValueError, match="sort: dimension"):
        lax.sort(np.float32(1.0))
    with pytest.raises(BluValueError, match=r"top_k: k=4 must be in \[0, 3\] for f32\[2,3\]"):
        lax.top_k(a, 4)
    with pytest.raises(BluShapeError, match="top_k: operand must have rank >= 1"):
        lax.top_k(np.float32(1.0), 0)
    with pytest.raises(BluTypeError, match="indices must be integers"):
        take_along_axis(a, a, 0)
    with pytest.raises(
        BluShapeError, match=r"take_along_axis: operand f32\[2,3\] and indices i32\[2\]"
    ):
        take_along_axis(a, np.zeros(2, np.int32), 0)
    with pytest.raises(BluValueError, match="at .*test_lax_sorting.py"):
        lax.top_k(a, 4)
