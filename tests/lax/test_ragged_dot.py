"""ragged_dot and ragged_dot_general against numpy float64 loops over the groups (empty groups,
rows past the groups' sum); derivatives in lhs and rhs against finite differences; jit and vmap
against the same loops; the three modes of ragged_dot_general; error messages."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
from blu import lax
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from tests.helpers import assert_close, check_grads


def ragged_ref(lhs, rhs, gs):
    """Rows of group i times rhs[i] in float64, zeros past sum(gs)."""
    out = np.zeros((lhs.shape[0], rhs.shape[2]))
    start = 0
    for i, size in enumerate(gs):
        out[start : start + size] = lhs[start : start + size].astype(np.float64) @ rhs[i]
        start += size
    return out


@st.composite
def problems(draw):
    """m, k, n, g and group sizes (some zero) whose sum is m or less."""
    g = draw(st.integers(0, 4))
    sizes = [draw(st.integers(0, 3)) for _ in range(g)]
    m = sum(sizes) + draw(st.integers(0, 2))
    k, n = draw(st.integers(0, 3)), draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**16))
    return m, k, n, np.array(sizes, np.int32), np.random.default_rng(seed)


@given(problems(), st.sampled_from([np.float64, np.float32]))
def test_ragged_dot_matches_a_loop_over_groups(problem, dtype):
    m, k, n, gs, rng = problem
    lhs = rng.standard_normal((m, k)).astype(dtype)
    rhs = rng.standard_normal((len(gs), k, n)).astype(dtype)
    got = lax.ragged_dot(lhs, rhs, gs)
    assert np.asarray(got).dtype == dtype
    assert_close(got, ragged_ref(lhs, rhs, gs).astype(dtype), n_ops=k + 1)
    assert_close(
        blu.jit(lax.ragged_dot)(lhs, rhs, gs), ragged_ref(lhs, rhs, gs).astype(dtype), n_ops=k + 1
    )


def test_rows_past_the_sum_are_zero_and_group_sizes_may_be_int64():
    lhs, rhs = np.ones((5, 2)), np.ones((2, 2, 3))
    got = np.asarray(lax.ragged_dot(lhs, rhs, np.array([1, 2], np.int64)))
    np.testing.assert_array_equal(got, [[2.0] * 3] * 3 + [[0.0] * 3] * 2)


def test_preferred_element_type():
    lhs = np.arange(6, dtype=np.float32).reshape(3, 2)
    rhs = np.ones((2, 2, 2), np.float32)
    got = lax.ragged_dot(lhs, rhs, np.array([2, 1], np.int32), preferred_element_type=np.float64)
    assert np.asarray(got).dtype == np.float64
    assert_close(got, ragged_ref(lhs, rhs, [2, 1]))


@given(problems())
def test_ragged_dot_gradients_match_finite_differences(problem):
    m, k, n, gs, rng = problem
    lhs, rhs = rng.standard_normal((m, k)), rng.standard_normal((len(gs), k, n))
    check_grads(lambda a, b: lax.ragged_dot(a, b, gs), [lhs, rhs], order=2, rng=rng)


def test_ragged_dot_grad_of_a_group_is_its_rows():
    rng = np.random.default_rng(0)
    lhs, rhs, gs = rng.standard_normal((6, 3)), rng.standard_normal((3, 3, 2)), np.array([2, 0, 3])
    d_lhs, d_rhs = blu.grad(lambda a, b: lax.ragged_dot(a, b, gs).sum(), argnums=(0, 1))(lhs, rhs)
    want_lhs = np.concatenate(
        [np.tile(rhs[0].sum(1), (2, 1)), np.tile(rhs[2].sum(1), (3, 1)), np.zeros((1, 3))]
    )
    want_rhs = np.stack(
        [
            np.tile(lhs[:2].sum(0)[:, None], (1, 2)),
            np.zeros((3, 2)),
            np.tile(lhs[2:5].sum(0)[:, None], (1, 2)),
        ]
    )
    assert_close(d_lhs, want_lhs)
    assert_close(d_rhs, want_rhs)


def test_ragged_dot_vmaps_over_each_operand():
    rng = np.random.default_rng(1)
    lhs, rhs = rng.standard_normal((3, 5, 2)), rng.standard_normal((3, 2, 2, 4))
    gs = np.array([[1, 3], [0, 5], [2, 1]], np.int32)
    got = blu.vmap(lax.ragged_dot)(lhs, rhs, gs)
    assert_close(got, np.stack([ragged_ref(lhs[b], rhs[b], gs[b]) for b in range(3)]), n_ops=3)
    got = blu.vmap(lax.ragged_dot, in_axes=(None, None, 0))(lhs[0], rhs[0], gs)
    assert_close(got, np.stack([ragged_ref(lhs[0], rhs[0], gs[b]) for b in range(3)]), n_ops=3)
    got = blu.jit(blu.vmap(lax.ragged_dot, in_axes=(1, None, None)))(lhs, rhs[0], gs[0])
    assert_close(got, np.stack([ragged_ref(lhs[:, j], rhs[0], gs[0]) for j in range(5)]), n_ops=3)


def test_ragged_dot_is_a_composition_of_existing_primitives():
    jaxpr = blu.make_jaxpr(lax.ragged_dot)(np.ones((4, 2)), np.ones((2, 2, 3)), np.array([1, 2]))
    names = {e.primitive.name for e in jaxpr.jaxpr.eqns}
    assert {"dot_general", "cumsum", "select"} <= names
    assert not any("ragged" in name for name in names)


def _dn(contract, batch, ragged, group):
    return lax.RaggedDotDimensionNumbers((contract, batch), ragged, group)


def test_ragged_dot_general_ragged_contracting_dimension():
    # [b, m, k] x [b, k, n] with k ragged -> [g, b, m, n]; group_sizes per batch row [b, g]
    rng = np.random.default_rng(2)
    lhs, rhs = rng.standard_normal((2, 3, 5)), rng.standard_normal((2, 5, 4))
    gs = np.array([[2, 0, 3], [1, 1, 1]], np.int32)
    dn = _dn(((2,), (1,)), ((0,), (0,)), (2,), ())
    got = lax.ragged_dot_general(lhs, rhs, gs, dn)
    want = np.zeros((3, 2, 3, 4))
    for b in range(2):
        start = 0
        for i, size in enumerate(gs[b]):
            want[i, b] = lhs[b, :, start : start + size] @ rhs[b, start : start + size]
            start += size
    assert_close(got, want, n_ops=5)
    check_grads(lambda a, c: lax.ragged_dot_general(a, c, gs, dn), [lhs, rhs], rng=rng)
    # one group_sizes for every batch row
    got = lax.ragged_dot_general(lhs, rhs, gs[0], dn)
    want1 = np.stack(
        [
            np.stack([lhs[b, :, s:e] @ rhs[b, s:e] for b in range(2)])
            for s, e in ((0, 2), (2, 2), (2, 5))
        ]
    )
    assert_close(got, want1, n_ops=5)


def test_ragged_dot_general_free_dimension_with_batch_and_group_sizes_per_batch():
    # lhs [k, b, m] (m ragged), rhs [b, n, g, k] -> [b, m, n]
    rng = np.random.default_rng(3)
    lhs, rhs = rng.standard_normal((2, 3, 4)), rng.standard_normal((3, 5, 2, 2))
    gs = np.array([[1, 2], [4, 0], [0, 3]], np.int32)
    dn = _dn(((0,), (3,)), ((1,), (0,)), (2,), (2,))
    got = lax.ragged_dot_general(lhs, rhs, gs, dn)
    want = np.stack(
        [ragged_ref(lhs[:, b, :].T, rhs[b].transpose(1, 2, 0), gs[b]) for b in range(3)]
    )
    assert_close(got, want, n_ops=3)


def test_ragged_dot_general_ragged_batch_dimension_is_the_dot_general():
    rng = np.random.default_rng(4)
    lhs, rhs = rng.standard_normal((3, 2, 4)), rng.standard_normal((3, 4, 5))
    dn = _dn(((2,), (1,)), ((0,), (0,)), (0,), ())
    got = lax.ragged_dot_general(lhs, rhs, np.array([1, 2], np.int32), dn)
    assert_close(got, np.einsum("bmk,bkn->bmn", lhs, rhs), n_ops=4)


def test_errors_name_the_shapes():
    lhs, rhs, gs = np.ones((4, 2)), np.ones((2, 2, 3)), np.array([1, 2], np.int32)
    with pytest.raises(BluShapeError, match=r"rhs \[g, k, n\]"):
        lax.ragged_dot(lhs, np.ones((2, 3, 3)), gs)
    with pytest.raises(BluShapeError, match="disagree"):
        lax.ragged_dot(lhs, rhs, np.array([1, 2, 1], np.int32))
    with pytest.raises(BluShapeError, match="group_sizes"):
        lax.ragged_dot(lhs, rhs[0], gs)
    with pytest.raises(BluTypeError, match="integer"):
        lax.ragged_dot(lhs, rhs, np.array([1.0, 2.0]))
    with pytest.raises(BluTypeError, match="one dtype"):
        lax.ragged_dot(lhs, rhs.astype(np.float32), gs)
    with pytest.raises(BluValueError, match="group_offset"):
        lax.ragged_dot(lhs, rhs, gs, group_offset=np.array([0], np.int32))
    with pytest.raises(BluShapeError, match="rhs_group_dimensions"):
        lax.ragged_dot_general(lhs, rhs, gs, _dn(((1,), (1,)), ((), ()), (0,), ()))
    with pytest.raises(BluShapeError, match="must be empty"):
        lax.ragged_dot_general(lhs, rhs[0], gs, _dn(((1,), (0,)), ((), ()), (1,), (0,)))
    with pytest.raises(BluShapeError, match=r"shape \(g,\) or \(4, 2\)"):
        lax.ragged_dot_general(
            np.ones((4, 2, 3)),
            np.ones((2, 3, 5)),
            np.ones((3, 2), np.int32),
            _dn(((2,), (1,)), ((), ()), (1,), (0,)),
        )
    with pytest.raises(BluValueError, match="RaggedDotDimensionNumbers"):
        lax.ragged_dot_general(lhs, rhs, gs, (((1,), (1,)), ((), ())))
