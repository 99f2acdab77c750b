"""lax.reduce: monoid combiners become the named reductions (checked in the jaxpr); other
combiners (logaddexp, a (value, index) argmax pair, a non-monoid init) against numpy loops over
random shapes and dimensions, size-0 and size-1 dimensions; derivatives against finite
differences; jit and vmap; error messages."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu import lax
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from tests.helpers import assert_close, check_grads


def _prims(f, *args):
    return [e.primitive.name for e in blu.make_jaxpr(f)(*args).jaxpr.eqns]


def _fold_ref(x, dims, init, combine):
    """numpy: fold ``combine`` over the elements of ``dims`` (row-major) from ``init``."""
    kept = [d for d in range(x.ndim) if d not in dims]
    moved = np.transpose(x, list(dims) + kept)
    n = int(np.prod([x.shape[d] for d in dims]))
    flat = moved.reshape((n,) + moved.shape[len(dims) :])
    out = np.full(flat.shape[1:], init, dtype=np.float64)
    for row in flat:
        out = combine(out, row)
    return out


@st.composite
def shapes_and_dims(draw):
    shape = tuple(draw(st.lists(st.integers(0, 3), min_size=0, max_size=3)))
    dims = draw(st.permutations(range(len(shape))))[: draw(st.integers(0, len(shape)))]
    return shape, tuple(dims), np.random.default_rng(draw(st.integers(0, 2**16)))


MONOIDS = [
    (lax.add, 0.0, "reduce_sum", np.sum),
    (bnp.add, 0.0, "reduce_sum", np.sum),
    (lax.mul, 1.0, "reduce_prod", np.prod),
    (bnp.multiply, 1.0, "reduce_prod", np.prod),
    (lax.max, -np.inf, "reduce_max", np.max),
    (bnp.maximum, -np.inf, "reduce_max", np.max),
    (lax.min, np.inf, "reduce_min", np.min),
    (lambda a, b: lax.min(b, a), np.inf, "reduce_min", np.min),
]


@pytest.mark.parametrize("comp, init, name, np_fn", MONOIDS)
def test_monoids_dispatch_to_the_named_reduction(comp, init, name, np_fn):
    x = np.random.default_rng(0).standard_normal((3, 4, 2))
    assert _prims(lambda x: lax.reduce(x, init, comp, (0, 2)), x) == [name]
    assert_close(lax.reduce(x, init, comp, (0, 2)), np_fn(x, axis=(0, 2)), n_ops=6)


def test_bitwise_and_integer_monoids():
    b = np.array([[True, False, True], [True, True, True]])
    assert _prims(lambda x: lax.reduce(x, True, lax.bitwise_and, (1,)), b) == ["reduce_and"]
    assert _prims(lambda x: lax.reduce(x, False, bnp.logical_or, (1,)), b) == ["reduce_or"]
    np.testing.assert_array_equal(lax.reduce(b, True, lax.bitwise_and, (1,)), [False, True])
    np.testing.assert_array_equal(lax.reduce(b, False, lax.bitwise_or, (0,)), [True] * 3)
    i = np.array([[5, 3, 6], [1, 7, 2]], np.int32)
    assert _prims(lambda x: lax.reduce(x, np.int32(0), lax.add, (1,)), i) == ["reduce_sum"]
    np.testing.assert_array_equal(lax.reduce(i, np.int32(0), lax.bitwise_xor, (1,)), [0, 4])
    # integer and/or have no named reduction (blu's reduce_and/or are bool): folded
    np.testing.assert_array_equal(lax.reduce(i, np.int32(-1), lax.bitwise_and, (1,)), [0, 0])
    np.testing.assert_array_equal(lax.reduce(i, np.int32(0), lax.bitwise_or, (1,)), [7, 7])
    np.testing.assert_array_equal(
        lax.reduce(i, np.iinfo(np.int32).min, lax.max, (0, 1)), np.int32(7)
    )


def test_a_monoid_with_another_init_is_folded_from_it():
    x = np.arange(6.0).reshape(2, 3)
    assert "reduce_sum" not in _prims(lambda x: lax.reduce(x, 1.0, lax.add, (1,)), x)
    assert_close(lax.reduce(x, 1.0, lax.add, (1,)), x.sum(1) + 1)
    assert_close(lax.reduce(x, 10.0, lax.max, (0,)), np.full(3, 10.0))


def _logaddexp(a, b):
    m = np.maximum(a, b)
    with np.errstate(invalid="ignore"):
        return np.where(np.isneginf(m), -np.inf, m + np.log(np.exp(a - m) + np.exp(b - m)))


@given(shapes_and_dims())
def test_logaddexp_fold_matches_numpy(case):
    shape, dims, rng = case
    x = rng.standard_normal(shape)
    got = lax.reduce(x, -np.inf, bnp.logaddexp, dims)
    want = _fold_ref(x, dims, -np.inf, _logaddexp)
    assert_close(got, want, n_ops=4 * max(1, x.size))
    assert_close(
        blu.jit(lambda x: lax.reduce(x, -np.inf, bnp.logaddexp, dims))(x),
        want,
        n_ops=4 * max(1, x.size),
    )


def _argmax_pair(a, b):
    (va, ia), (vb, ib) = a, b
    pick = lax.gt(va, vb) | (lax.eq(va, vb) & lax.lt(ia, ib))
    return lax.select(pick, va, vb), lax.select(pick, ia, ib)


@given(shapes_and_dims())
def test_value_index_pairs_give_argmax(case):
    shape, dims, rng = case
    x = rng.integers(-3, 3, shape).astype(np.float32)  # ties
    kept = [d for d in range(len(shape)) if d not in dims]
    # the flat (row-major) index of each element within the reduced dimensions
    sub = np.indices([shape[d] for d in dims], dtype=np.int32) if dims else np.zeros((0,))
    flat = np.zeros([shape[d] for d in dims], np.int32)
    for k, d in enumerate(dims):
        flat = flat * shape[d] + sub[k]
    idx = np.transpose(
        np.broadcast_to(
            flat.reshape(flat.shape + (1,) * len(kept)),
            [shape[d] for d in dims] + [shape[d] for d in kept],
        ),
        np.argsort(list(dims) + kept),
    ).astype(np.int32)
    vals, ids = lax.reduce((x, idx), (-np.inf, np.int32(0)), _argmax_pair, dims)
    n = int(np.prod([shape[d] for d in dims]))
    moved = np.transpose(x, list(dims) + kept).reshape((n,) + tuple(shape[d] for d in kept))
    want_ids = np.zeros(moved.shape[1:], np.int32)
    want_vals = np.full(moved.shape[1:], -np.inf, np.float32)
    for j in itertools.product(*[range(s) for s in moved.shape[1:]]):
        col = moved[(slice(None),) + j]
        if col.size:
            want_ids[j], want_vals[j] = int(np.argmax(col)), col.max()
    np.testing.assert_array_equal(np.asarray(vals), want_vals)
    np.testing.assert_array_equal(np.asarray(ids), want_ids)
    assert np.asarray(ids).dtype == np.int32 and np.asarray(vals).dtype == np.float32


def test_size_zero_and_one_dimensions():
    x = np.zeros((2, 0, 3))
    np.testing.assert_array_equal(
        lax.reduce(x, -np.inf, bnp.logaddexp, (1,)), np.full((2, 3), -np.inf)
    )
    assert np.shape(lax.reduce(x, -np.inf, bnp.logaddexp, (0,))) == (0, 3)
    y = np.array([[1.5], [2.5]])
    assert_close(lax.reduce(y, -np.inf, bnp.logaddexp, (1,)), np.array([1.5, 2.5]))
    assert_close(lax.reduce(y, 2.0, lax.mul, (1,)), np.array([3.0, 5.0]))
    assert_close(lax.reduce(y, 2.0, lax.mul, ()), 2 * y)
    assert_close(lax.reduce(np.float64(3.0), 1.0, lax.add, ()), 4.0)


@given(shapes_and_dims())
def test_fold_gradients_match_finite_differences(case):
    shape, dims, rng = case
    x = rng.standard_normal(shape)
    if all(shape[d] for d in dims):  # else the result is -inf (no finite differences)
        check_grads(lambda x: lax.reduce(x, -np.inf, bnp.logaddexp, dims), [x], rng=rng)
    # a non-monoid init: the derivative of (1 + ...)(1 + x0)...: through the fold's products
    check_grads(lambda x: lax.reduce(x, 1.5, lambda a, b: a * (1 + b), dims), [x], rng=rng)


def test_vmap_of_reduce_matches_a_loop():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 3, 2))
    f = lambda x: lax.reduce(x, -np.inf, bnp.logaddexp, (0,))  # noqa: E731
    got = blu.vmap(f, in_axes=1)(x)
    assert_close(
        got, np.stack([_fold_ref(x[:, j], (0,), -np.inf, _logaddexp) for j in range(3)]), n_ops=16
    )


def test_a_combiner_of_scalars_with_cond_is_vectorized():
    def clipped_add(a, b):  # cond needs a scalar predicate: the combiner sees scalars
        return lax.cond(a + b > 3.0, lambda: a + b - 3.0, lambda: a + b)

    x = np.array([[1.0, 2.0, 2.5], [0.5, 0.25, 0.125]])
    ref = _fold_ref(x, (1,), 0.5, lambda a, b: np.where(a + b > 3, a + b - 3, a + b))
    assert_close(lax.reduce(x, 0.5, clipped_add, (1,)), ref)


def test_errors():
    x = np.ones((2, 3))
    with pytest.raises(BluValueError, match="structure"):
        lax.reduce((x, x), (0.0,), lax.add, (0,))
    with pytest.raises(BluShapeError, match="one shape"):
        lax.reduce((x, np.ones(3)), (0.0, 0.0), lambda a, b: a, (0,))
    with pytest.raises(BluValueError, match=r"distinct axes in \[0, 2\)"):
        lax.reduce(x, 0.0, lax.add, (2,))
    with pytest.raises(BluValueError, match="distinct"):
        lax.reduce(x, 0.0, lax.add, (0, 0))
    with pytest.raises(BluShapeError, match="scalar"):
        lax.reduce(x, np.zeros(3), lax.add, (0,))
    with pytest.raises(BluTypeError, match="dtype"):
        lax.reduce(x, np.float32(2.0), lax.add, (0,))
    with pytest.raises(BluTypeError, match="computation must return scalars"):
        lax.reduce(x, 2.0, lambda a, b: lax.convert_element_type(a + b, np.float32), (0,))
    with pytest.raises(BluValueError, match="returned structure.* of 1 arrays, expected 2"):
        lax.reduce((x, x), (2.0, 2.0), lambda a, b: a[0] + b[0], (0,))


def test_the_result_has_the_computations_structure():
    # JAX's reduce pairs the computation's leaves with the operands in order and returns its
    # structure; a tuple from list operands (or a bare array from a 1-tuple) was refused
    x = np.arange(6.0).reshape(2, 3)
    got = lax.reduce((x,), (2.0,), lambda a, b: a[0] + b[0], (0,))
    assert_close(got, 2.0 + x.sum(0))
    n = np.array([[3, 1, 2], [0, 5, 4]])

    def pairs(a, b):
        return (a[0] + b[0] * b[0], lax.max(a[1], b[1]))

    got = lax.reduce([x, n], [0.0, -1], pairs, (1,))
    assert isinstance(got, tuple) and len(got) == 2
    assert_close(got[0], (x * x).sum(1))
    np.testing.assert_array_equal(np.asarray(got[1]), n.max(1))
    empty = lax.reduce([np.zeros((0, 2)), np.zeros((0, 2), np.int64)], [0.5, 7], pairs, (0,))
    assert isinstance(empty, tuple)
    assert_close(empty[0], np.full(2, 0.5))
    np.testing.assert_array_equal(np.asarray(empty[1]), [7, 7])


def test_a_python_init_value_its_operand_dtype_cannot_hold_is_refused():
    # 0.5 for an integer operand was cut to 0 (sum of squares 14, not 14.5); JAX refuses the
    # float init value for an int operand. Values the dtype holds exactly still convert.
    n = np.arange(4)
    with pytest.raises(BluTypeError, match=r"init_values\[0\] 0.5.*int64"):
        lax.reduce(n, 0.5, lambda a, b: a + b * b, (0,))
    with pytest.raises(BluTypeError, match=r"init_values\[0\] \(1\+2j\).*float64"):
        lax.reduce(np.ones(3), 1 + 2j, lambda a, b: a + b * b, (0,))
    got = lax.reduce(n, 2.0, lambda a, b: a + b * b, (0,))
    assert int(got) == 2 + sum(int(v) ** 2 for v in range(4))
