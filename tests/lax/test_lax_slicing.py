"""blu.lax slicing, gather and scatter against numpy: slice, dynamic_slice, dynamic_update_slice
(and the in-dim helpers), gather, scatter_add, scatter.

Cases as in test_lax_shapes.py: eager against numpy references (advanced indexing loops,
``np.add.at``-style accumulation) in every dtype, finite differences in float64, vmap against a
per-slice loop with random in_axes (operand and/or indices batched), jit against eager. Indices
are drawn partly out of bounds, so clamping and dropping are exercised throughout.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check_grads, shapes
from hypothesis import assume, given
from hypothesis import strategies as st

import blu
from blu import lax
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from tests.lax.test_lax_shapes import (
    DTYPES,
    Case,
    check_error_names,
    draw_in_axes,
    gen,
    run_eager,
    run_grads,
    run_jit,
    run_vmap,
    seed,
    vmapped,
)

INDEX_DTYPES = [np.int8, np.int32, np.int64, np.uint8, np.uint32]


def index_gen(shape, lo, hi, dtype):
    """Random integers in [lo, hi] (lo raised to 0 for unsigned dtypes)."""
    lo = max(lo, 0) if np.dtype(dtype).kind == "u" else lo
    return lambda rng: np.asarray(rng.integers(lo, hi + 1, shape), dtype)


# ---- static slice ------------------------------------------------------------------------------


@st.composite
def slice_case(draw, dtype=np.float64):
    shape = draw(shapes(max_dims=3))
    start, limit, strides = [], [], []
    for n in shape:
        s = draw(st.integers(0, n))
        start.append(s)
        limit.append(draw(st.integers(s, n)))
        strides.append(draw(st.integers(1, 3)))
    use_strides = draw(st.booleans())
    st_arg = tuple(strides) if use_strides else None
    slices = tuple(slice(s, l, t if use_strides else 1) for s, l, t in zip(start, limit, strides))
    return Case(
        lambda x: lax.slice(x, start, limit, st_arg), [gen(shape, dtype)], lambda x: x[slices], (0,)
    )


# ---- dynamic_slice / dynamic_update_slice ------------------------------------------------------


def clamp_starts(starts, shape, sizes):
    return [min(max(int(s), 0), n - m) for s, n, m in zip(starts, shape, sizes)]


@st.composite
def dynamic_slice_case(draw, dtype=np.float64):
    shape = draw(shapes(max_dims=3))
    sizes = tuple(draw(st.integers(0, n)) for n in shape)
    idx_dtypes = [draw(st.sampled_from(INDEX_DTYPES)) for _ in shape]

    def ref(x, *starts):
        b = clamp_starts(starts, shape, sizes)
        return x[tuple(slice(s, s + m) for s, m in zip(b, sizes))]

    return Case(
        lambda x, *starts: lax.dynamic_slice(x, starts, sizes),
        [gen(shape, dtype)] + [index_gen((), -3, n + 3, d) for n, d in zip(shape, idx_dtypes)],
        ref,
        (0,),
        tuple(range(1, len(shape) + 1)),
    )


@st.composite
def dynamic_update_slice_case(draw, dtype=np.float64):
    shape = draw(shapes(max_dims=3))
    u_shape = tuple(draw(st.integers(0, n)) for n in shape)
    idx_dtypes = [draw(st.sampled_from(INDEX_DTYPES)) for _ in shape]

    def ref(x, u, *starts):
        b = clamp_starts(starts, shape, u_shape)
        out = x.copy()
        out[tuple(slice(s, s + m) for s, m in zip(b, u_shape))] = u
        return out

    return Case(
        lambda x, u, *starts: lax.dynamic_update_slice(x, u, starts),
        [gen(shape, dtype), gen(u_shape, dtype)]
        + [index_gen((), -3, n + 3, d) for n, d in zip(shape, idx_dtypes)],
        ref,
        (0, 1),
        tuple(range(2, len(shape) + 2)),
    )


# ---- gather / scatter --------------------------------------------------------------------------


def _rows(x_shape, idx, axes, mode):
    """For each batch position: the operand index tuple (ints on axes, slices elsewhere), or
    None where the row reads 0 / is dropped."""
    for b in np.ndindex(*idx.shape[:-1]):
        coords: list = [slice(None)] * len(x_shape)
        keep = True
        for k, a in enumerate(axes):
            c, n = int(idx[b + (k,)]), x_shape[a]
            if n == 0 or (mode != "clip" and not 0 <= c < n):
                keep = False
            coords[a] = min(max(c, 0), max(n - 1, 0))
        yield b, (tuple(coords) if keep else None)


def gather_ref(x, idx, axes, mode):
    rest = [i for i in range(x.ndim) if i not in axes]
    out = np.zeros(idx.shape[:-1] + tuple(x.shape[i] for i in rest), x.dtype)
    for b, coords in _rows(x.shape, idx, axes, mode):
        if coords is not None:
            out[b] = x[coords]
    return out


def scatter_ref(x, idx, u, axes, mode, accumulate):
    out = x.copy()
    for b, coords in _rows(x.shape, idx, axes, mode):
        if coords is not None:
            out[coords] = out[coords] + u[b] if accumulate else u[b]
    return out


def unique_index_gen(batch, dims, dtype):
    """In-bounds indices whose rows are all distinct (for scatter's transpose)."""

    def draw(rng):
        if not dims:  # every row addresses the whole operand; there is at most one row
            return np.zeros(batch + (0,), dtype)
        n = int(np.prod(batch, dtype=np.int64))
        flat = rng.permutation(int(np.prod(dims, dtype=np.int64)))[:n]
        rows = np.stack(np.unravel_index(flat, dims), -1)
        return rows.reshape(batch + (len(dims),)).astype(dtype)

    return draw


@st.composite
def gather_like(draw, kind, dtype=np.float64, unique=False):
    shape = draw(shapes(max_dims=3))
    k = draw(st.integers(0, len(shape)))
    axes = tuple(draw(st.permutations(range(len(shape))))[:k])
    batch = draw(shapes(max_dims=2, max_side=3))
    dims = [shape[a] for a in axes]
    idx_dtype = draw(st.sampled_from(INDEX_DTYPES))
    modes = ["clip", "fill"] if kind == "gather" else ["clip", "drop"]
    mode = "drop" if unique else draw(st.sampled_from(modes))
    neg_axes = tuple(a - len(shape) if draw(st.booleans()) else a for a in axes)
    if unique:
        assume(np.prod(batch, dtype=np.int64) <= np.prod(dims, dtype=np.int64))
        idx = unique_index_gen(batch, dims, idx_dtype)
    else:
        hi = max(dims, default=0) + 1
        idx = index_gen(batch + (k,), -2, hi, idx_dtype)
    if kind == "gather":
        return Case(
            lambda x, i: lax.gather(x, i, axes=neg_axes, mode=mode),
            [gen(shape, dtype), idx],
            lambda x, i: gather_ref(x, i, axes, mode),
            (0,),
            (1,),
        )
    rest = tuple(n for i, n in enumerate(shape) if i not in axes)
    op = lax.scatter_add if kind == "scatter_add" else lax.scatter
    return Case(
        lambda x, i, u: op(x, i, u, axes=neg_axes, mode=mode),
        [gen(shape, dtype), idx, gen(batch + rest, dtype)],
        lambda x, i, u: scatter_ref(x, i, u, axes, mode, kind == "scatter_add"),
        (0, 2),
        (1,),
    )


CASES = {
    "slice": slice_case,
    "dynamic_slice": dynamic_slice_case,
    "dynamic_update_slice": dynamic_update_slice_case,
    "gather": lambda dtype=np.float64: gather_like("gather", dtype),
    "scatter_add": lambda dtype=np.float64: gather_like("scatter_add", dtype),
    "scatter": lambda dtype=np.float64: gather_like("scatter", dtype),
}
# scatter's transpose is exact for unique indices only (documented), so its gradient is checked
# with unique in-bounds rows (plus dropped out-of-bounds ones in the example tests below)
GRAD_CASES = dict(CASES, scatter=lambda: gather_like("scatter", np.float64, unique=True))


@pytest.mark.parametrize("name", list(CASES))
@given(data=st.data())
def test_matches_numpy_in_every_dtype(name, data):
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    run_eager(data.draw(CASES[name](dtype)), seed(data))


@pytest.mark.parametrize("name", list(GRAD_CASES))
@given(data=st.data())
def test_grads_match_finite_differences(name, data):
    run_grads(data.draw(GRAD_CASES[name]()), seed(data))


BATCHED = ["operand", "indices", "both"]  # which arguments vmap maps


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("pattern", BATCHED)
@given(data=st.data())
def test_vmap_matches_loop(name, pattern, data):
    case = data.draw(CASES[name](data.draw(st.sampled_from([np.float32, np.int32, np.bool_]))))
    if name == "slice":
        pattern = "operand"
    in_axes = draw_in_axes(data, case, pattern)
    run_vmap(case, seed(data), in_axes, data.draw(st.integers(1, 3)))


@pytest.mark.parametrize("name", list(GRAD_CASES))
@pytest.mark.parametrize("pattern", BATCHED)
@given(data=st.data())
def test_grads_of_vmap(name, pattern, data):
    case = data.draw(GRAD_CASES[name]())
    if name == "slice":
        pattern = "operand"
    in_axes = draw_in_axes(data, case, pattern)  # scatter: rows stay unique within each member
    run_grads(vmapped(case, in_axes, data.draw(st.integers(1, 2))), seed(data), order=1)


@pytest.mark.parametrize("name", list(CASES))
@given(data=st.data())
def test_jit_matches_eager(name, data):
    run_jit(data.draw(CASES[name]()), seed(data))


@given(shape=shapes(min_dims=1, max_dims=3, min_side=1), data=st.data())
def test_gather_on_one_axis_matches_np_take(shape, data):
    axis = data.draw(st.integers(0, len(shape) - 1))
    rng = seed(data)
    x = rng.standard_normal(shape)
    i = rng.integers(-2, shape[axis] + 2, data.draw(shapes(max_dims=2)))
    want = np.take(x, i, axis=axis, mode="clip")  # x.shape[:axis] + i.shape + x.shape[axis+1:]
    want = np.moveaxis(want, list(range(axis, axis + i.ndim)), list(range(i.ndim)))
    got = lax.gather(x, i[..., None], axes=(axis,))
    np.testing.assert_array_equal(np.asarray(got), want)


@given(shape=shapes(min_dims=1, max_dims=3, min_side=1), data=st.data())
def test_scatter_add_on_axis_0_matches_np_add_at(shape, data):
    rng = seed(data)
    x = rng.standard_normal(shape)
    i = rng.integers(0, shape[0], data.draw(shapes(max_dims=2)))
    u = rng.standard_normal(i.shape + shape[1:])
    want = x.copy()
    np.add.at(want, i, u)
    got = lax.scatter_add(x, i[..., None], u, axes=(0,))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)


# ---- out-of-bounds semantics -------------------------------------------------------------------


def test_dynamic_slice_clamps_start_into_range():
    x = np.arange(10.0)
    np.testing.assert_array_equal(np.asarray(lax.dynamic_slice(x, [8], [4])), x[6:10])
    # a negative start counts from the end once (JAX), then clamps: -3 -> 7 -> 6; -30 -> 0
    np.testing.assert_array_equal(np.asarray(lax.dynamic_slice(x, [-3], [4])), x[6:10])
    np.testing.assert_array_equal(np.asarray(lax.dynamic_slice(x, [-30], [4])), x[0:4])
    got = lax.dynamic_slice(x, [-3], [4], allow_negative_indices=False)
    np.testing.assert_array_equal(np.asarray(got), x[0:4])
    np.testing.assert_array_equal(np.asarray(lax.dynamic_slice(x, [np.uint8(200)], [0])), x[:0])
    # the same under jit (traced starts) and vmap (per-member starts go through gather)
    ds = blu.jit(lambda x, i: lax.dynamic_slice(x, [i], [4]))
    np.testing.assert_array_equal(np.asarray(ds(x, np.int32(9))), x[6:10])
    np.testing.assert_array_equal(np.asarray(ds(x, np.int32(-2))), x[6:10])
    out = blu.vmap(lambda i: lax.dynamic_slice(x, [i], [4]))(np.array([-5, 3, 99, -99]))
    np.testing.assert_array_equal(np.asarray(out), np.stack([x[5:9], x[3:7], x[6:10], x[0:4]]))


def test_dynamic_update_slice_clamps_start_into_range():
    x = np.zeros((3, 4))
    got = lax.dynamic_update_slice(x, np.ones((2, 2)), [5, -1])  # 5 -> 1; -1 -> 3 -> 2
    want = x.copy()
    want[1:3, 2:4] = 1
    np.testing.assert_array_equal(np.asarray(got), want)
    got = lax.dynamic_update_slice(x, np.ones((2, 2)), [5, -1], allow_negative_indices=False)
    want = x.copy()
    want[1:3, 0:2] = 1
    np.testing.assert_array_equal(np.asarray(got), want)


def _jax_start(s: int, dim: int, size: int, wrap: bool = True) -> int:
    """JAX's start: a negative one plus the dimension (once), then clamped into range."""
    s = s + dim if wrap and s < 0 else s
    return min(max(s, 0), dim - size)


@given(st.data())
def test_dynamic_slices_with_any_start_against_a_loop(data):
    shape = data.draw(shapes(min_dims=1, max_dims=3, min_side=0, max_side=5))
    sizes = [data.draw(st.integers(0, n)) for n in shape]
    starts = [data.draw(st.integers(-2 * n - 2, 2 * n + 2)) for n in shape]
    wrap = data.draw(st.booleans())
    x = np.arange(float(np.prod(shape))).reshape(shape)
    begin = [_jax_start(s, n, m, wrap) for s, n, m in zip(starts, shape, sizes)]
    window = tuple(slice(b, b + m) for b, m in zip(begin, sizes))
    starts32 = [np.int32(s) for s in starts]
    ds = lambda x, *st_: lax.dynamic_slice(x, st_, sizes, allow_negative_indices=wrap)
    for f in (ds, blu.jit(ds)):
        np.testing.assert_array_equal(np.asarray(f(x, *starts32)), x[window])
    u = -1.0 - np.arange(float(np.prod(sizes))).reshape(sizes)
    want = x.copy()
    want[window] = u
    dus = lambda x, u, *st_: lax.dynamic_update_slice(x, u, st_, allow_negative_indices=wrap)
    for f in (dus, blu.jit(dus)):
        np.testing.assert_array_equal(np.asarray(f(x, u, *starts32)), want)
    # batched starts: each member its own window
    firsts = np.array([starts[0], -starts[0] - 1, 0], np.int32)
    got = blu.vmap(lambda s0: ds(x, s0, *starts32[1:]))(firsts)
    for k, s0 in enumerate(firsts):
        b0 = _jax_start(int(s0), shape[0], sizes[0], wrap)
        np.testing.assert_array_equal(
            np.asarray(got[k]), x[(slice(b0, b0 + sizes[0]),) + window[1:]]
        )


def test_gather_clips_or_fills_out_of_bounds():
    x = np.arange(1.0, 5.0)
    idx = np.array([[-1], [0], [3], [4], [100]])
    np.testing.assert_array_equal(np.asarray(lax.gather(x, idx, axes=(0,))), [1, 1, 4, 4, 4])
    got = lax.gather(x, idx, axes=(0,), mode="fill")
    np.testing.assert_array_equal(np.asarray(got), [0, 1, 4, 0, 0])


def test_scatter_add_drops_out_of_bounds_and_accumulates_duplicates():
    x = np.zeros(4)
    idx = np.array([[1], [1], [-1], [4], [3]])
    u = np.array([1.0, 2.0, 10.0, 20.0, 5.0])
    np.testing.assert_array_equal(np.asarray(lax.scatter_add(x, idx, u, axes=(0,))), [0, 3, 0, 5])
    got = lax.scatter_add(x, idx, u, axes=(0,), mode="clip")
    np.testing.assert_array_equal(np.asarray(got), [10, 3, 0, 25])
    want = x.copy()
    np.add.at(want, np.array([1, 1, 3]), np.array([1.0, 2.0, 5.0]))
    np.testing.assert_array_equal(np.asarray(lax.scatter_add(x, idx, u, axes=(0,))), want)


def test_scatter_last_write_wins_and_drops():
    x = np.zeros(3)
    idx = np.array([[0], [0], [7], [2]])
    got = lax.scatter(x, idx, np.array([1.0, 2.0, 3.0, 4.0]), axes=(0,))
    np.testing.assert_array_equal(np.asarray(got), [2, 0, 4])


def test_scatter_gradients_with_dropped_rows():
    x = np.arange(4.0)
    idx = np.array([[2], [9], [0]])
    u = np.array([10.0, 20.0, 30.0])
    gx, gu = blu.grad(
        lambda x, u: lax.reduce_sum(lax.mul(lax.scatter(x, idx, u, axes=(0,)), np.arange(4.0))),
        argnums=(0, 1),
    )(x, u)
    np.testing.assert_array_equal(np.asarray(gx), [0, 1, 0, 3])  # overwritten positions get 0
    np.testing.assert_array_equal(np.asarray(gu), [2, 0, 0])  # the dropped row gets 0


def test_gather_and_scatter_over_an_empty_axis():
    x = np.zeros((0, 3))
    idx = np.array([[0], [5]])
    np.testing.assert_array_equal(np.asarray(lax.gather(x, idx, axes=(0,))), np.zeros((2, 3)))
    out = lax.scatter_add(x, idx, np.ones((2, 3)), axes=(0,), mode="clip")
    assert out.shape == (0, 3)


# ---- the uses it serves ------------------------------------------------------------------------


def test_embedding_lookup_and_its_gradient():
    rng = np.random.default_rng(0)
    table = rng.standard_normal((5, 3))
    ids = np.array([[0, 4, 4], [2, 0, 1]])
    out = lax.gather(table, ids[..., None], axes=(0,))
    np.testing.assert_array_equal(np.asarray(out), table[ids])
    ct = rng.standard_normal((2, 3, 3))
    g = blu.grad(lambda t: lax.reduce_sum(lax.mul(lax.gather(t, ids[..., None], axes=(0,)), ct)))
    want = np.zeros_like(table)
    np.add.at(want, ids, ct)
    np.testing.assert_allclose(np.asarray(g(table)), want)


def test_numpy_advanced_indexing_pattern():
    x = np.arange(24.0).reshape(2, 3, 4)
    i, j = np.array([1, 0, 1]), np.array([3, 2, 0])
    out = lax.gather(x, np.stack([i, j], -1), axes=(0, 2))  # x[i, :, j]
    np.testing.assert_array_equal(np.asarray(out), x[i, :, j])
    out = lax.gather(x, np.stack([j, i], -1), axes=(2, 0))  # axes in any order
    np.testing.assert_array_equal(np.asarray(out), x[i, :, j])


def test_in_dim_helpers():
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(np.asarray(lax.slice_in_dim(x, 1, 4, 2, axis=1)), x[:, 1:4:2])
    np.testing.assert_array_equal(np.asarray(lax.index_in_dim(x, 2, 0, False)), x[2])
    np.testing.assert_array_equal(np.asarray(lax.dynamic_slice_in_dim(x, 1, 2, -1)), x[:, 1:3])
    np.testing.assert_array_equal(np.asarray(lax.dynamic_index_in_dim(x, 5, 0)), x[2:3])
    np.testing.assert_array_equal(
        np.asarray(lax.dynamic_index_in_dim(x, np.int64(1), 1, keepdims=False)), x[:, 1]
    )
    want = x.copy()
    want[:, 2] = [-1, -2, -3]
    got = lax.dynamic_update_slice_in_dim(x, np.array([[-1.0], [-2.0], [-3.0]]), 2, axis=1)
    np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_array_equal(np.asarray(lax.dynamic_update_slice_in_dim(x, x[:0], 1)), x)
    want = x.copy()
    want[:, 3] = [7, 8, 9]
    got = lax.dynamic_update_index_in_dim(x, np.array([7.0, 8.0, 9.0]), 3, axis=1)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_strided_slice_gradient():
    x = np.random.default_rng(0).standard_normal((5, 7))
    check_grads(lambda x: lax.slice(x, (1, 0), (5, 7), (2, 3)), [x], order=2)
    check_grads(lambda x: lax.slice(x, (4, 6), (5, 7), (3, 3)), [x], order=2)


def test_dynamic_slice_grad_under_jit_with_traced_start():
    x = np.arange(6.0)

    @blu.jit
    def g(x, i):
        return blu.grad(lambda x: lax.reduce_sum(lax.dynamic_slice(x, [i], [2])))(x)

    np.testing.assert_array_equal(np.asarray(g(x, np.int32(3))), [0, 0, 0, 1, 1, 0])
    np.testing.assert_array_equal(np.asarray(g(x, np.int32(7))), [0, 0, 0, 0, 1, 1])


# ---- errors name the shapes and the user's line ------------------------------------------------


def test_slice_out_of_bounds():
    with pytest.raises(BluShapeError) as e:
        lax.slice(np.zeros((2, 3), np.float32), (0, 0), (3, 3))
    check_error_names(e, "f32[2,3]", "(3, 3)")
    with pytest.raises(BluShapeError) as e:
        lax.slice(np.zeros((2, 3)), (0, 0), (2, 3), (1, 0))
    check_error_names(e, "f64[2,3]", "(1, 0)")


def test_gather_index_dtype_must_be_int():
    with pytest.raises(BluTypeError) as e:
        lax.gather(np.zeros((5, 2)), np.zeros((3, 1), np.float32), axes=(0,))
    check_error_names(e, "f64[5,2]", "f32[3,1]", "integer")
    with pytest.raises(BluTypeError) as e:
        blu.jit(lambda i: lax.gather(np.zeros((5, 2)), i, axes=(0,)))(np.zeros((3, 1), bool))
    check_error_names(e, "bool[3,1]")


def test_gather_scatter_shape_errors():
    with pytest.raises(BluShapeError) as e:
        lax.gather(np.zeros((5, 2)), np.zeros((3, 2), np.int32), axes=(0,))
    check_error_names(e, "f64[5,2]", "i32[3,2]")
    with pytest.raises(BluShapeError) as e:
        lax.scatter_add(np.zeros((5, 2)), np.zeros((3, 1), np.int32), np.zeros((3, 5)), axes=(0,))
    check_error_names(e, "f64[5,2]", "i32[3,1]", "f64[3,5]", "(3, 2)")
    with pytest.raises(BluTypeError) as e:
        lax.scatter(np.zeros(5), np.zeros((3, 1), np.int32), np.zeros(3, np.float32), axes=(0,))
    check_error_names(e, "f64[5]", "f32[3]")
    with pytest.raises(BluValueError) as e:
        lax.gather(np.zeros((5, 2)), np.zeros((3, 2), np.int32), axes=(0, 0))
    check_error_names(e, "f64[5,2]")
    with pytest.raises(BluValueError) as e:
        lax.gather(np.zeros(5), np.zeros((3, 1), np.int32), axes=(0,), mode="wrap")
    check_error_names(e, "'wrap'")


def test_dynamic_slice_errors():
    x = np.zeros((4, 5))
    with pytest.raises(BluShapeError) as e:
        lax.dynamic_slice(x, [0, 0], [2, 6])
    check_error_names(e, "f64[4,5]", "(2, 6)")
    with pytest.raises(BluTypeError) as e:
        lax.dynamic_slice(x, [0], [2, 2])
    check_error_names(e, "f64[4,5]")
    with pytest.raises(BluTypeError) as e:
        lax.dynamic_slice(x, [0, np.float32(1)], [2, 2])
    check_error_names(e, "f64[4,5]", "f32[]")
    with pytest.raises(BluShapeError) as e:
        lax.dynamic_update_slice(x, np.zeros((5, 1)), [0, 0])
    check_error_names(e, "f64[4,5]", "f64[5,1]")
    with pytest.raises(BluTypeError) as e:
        lax.dynamic_update_slice(x, np.zeros((1, 1), np.int32), [0, 0])
    check_error_names(e, "f64[4,5]", "i32[1,1]")


def test_a_narrow_negative_start_on_a_long_axis():
    # int8 cannot hold -1 + 300: the start is widened before it counts from the end
    x = np.arange(300.0)
    f = blu.jit(lambda i: lax.dynamic_slice(x, [i], [2]))
    np.testing.assert_array_equal(np.asarray(f(np.int8(-1))), x[298:300])
    np.testing.assert_array_equal(np.asarray(f(np.int8(-128))), x[172:174])
    np.testing.assert_array_equal(np.asarray(f(np.int8(5))), x[5:7])
