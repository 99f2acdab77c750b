"""``nn.softmax`` and ``nn.log_softmax`` with JAX's ``where=``: values against a float64 loop
over the groups, masked entries (0 and ``-inf``), empty groups, gradients against their
closed form and finite differences (all finite), jit, bfloat16, and the shape error."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
import blu.numpy as bnp
from blu import nn
from blu.core.errors import BluShapeError
from tests.helpers import check_grads, shapes


def _reference(x, axis, where, log):
    """Each group's kept entries, in float64: ``exp(x - max) / sum`` or ``x - max - log sum``;
    left-out entries 0 or -inf, and a group with no mass all 0 or all -inf."""
    x = np.asarray(x, np.float64)
    w = np.broadcast_to(where, x.shape)
    axes = tuple(range(x.ndim)) if axis is None else tuple(a % x.ndim for a in np.atleast_1d(axis))
    keep = [i for i in range(x.ndim) if i not in axes]
    out = np.full(x.shape, -np.inf if log else 0.0)
    for pos in np.ndindex(*(x.shape[i] for i in keep)):
        sel = [slice(None)] * x.ndim
        for i, p in zip(keep, pos):
            sel[i] = p
        xs, ws = x[tuple(sel)], w[tuple(sel)]
        if not ws.any() or np.all(xs[ws] == -np.inf):
            continue
        m = xs[ws].max()
        e = np.where(ws, np.exp(np.where(ws, xs, -np.inf) - m), 0.0)
        s = e.sum()
        group = np.where(ws, xs - m - np.log(s), -np.inf) if log else e / s
        out[tuple(sel)] = group
    return out


@given(st.data())
def test_masked_softmax_matches_a_loop(data):
    shape = data.draw(shapes(min_dims=1, max_dims=3, min_side=0, max_side=4))
    finite = st.floats(-20, 20, allow_nan=False)
    x = data.draw(hnp.arrays(np.float64, shape, elements=finite | st.just(-np.inf)))
    lead = data.draw(st.integers(0, len(shape)))  # the mask may broadcast (fewer, size-1 axes)
    mshape = tuple(d if data.draw(st.booleans()) else 1 for d in shape[lead:])
    where = data.draw(hnp.arrays(np.bool_, mshape))
    nd = len(shape)
    axis = data.draw(st.sampled_from([-1, 0, None, (0, nd - 1)] if nd > 1 else [-1, 0, None]))
    for fn, log in ((nn.softmax, False), (nn.log_softmax, True)):
        want = _reference(x, axis, where, log)
        for dt in (np.float64, np.float32):
            got = fn(x.astype(dt), axis, where=where)
            assert got.shape == x.shape and got.dtype == dt
            got = np.asarray(got, np.float64)
            np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
            # a group's sum of at most 64 terms (a few roundings each); x rounded to dt and
            # the shift x - max err by eps times |x| + |max|, which |want| + 2 max|x| bounds
            fin = np.isfinite(want)
            xmax = np.abs(x[np.isfinite(x)]).max(initial=0.0)
            tol = 64 * np.finfo(dt).eps * (1 + np.abs(want[fin]) + 2 * xmax)
            assert np.all(np.abs(got[fin] - want[fin]) <= tol)
            assert not np.isnan(got).any()


def test_masked_gradients_are_finite_and_match_the_closed_form():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5))
    where = np.array(
        [[True, False, True, True, False], [False] * 5, [True, True, False, True, True]]
    )  # the middle row is left empty
    w = rng.standard_normal((3, 5))

    def soft(v):
        return bnp.sum(nn.softmax(v, -1, where=where) * w)

    g = np.asarray(blu.grad(soft)(x))
    # d/dx_j sum_k w_k p_k = p_j (w_j - sum_k p_k w_k) over the kept entries, 0 elsewhere
    p = _reference(x, -1, where, log=False)
    want = p * (w - (p * w).sum(-1, keepdims=True))
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-15)
    assert np.all(g[~where] == 0)

    def logsoft(v):  # the left-out entries are -inf: their cotangent is 0
        return bnp.sum(bnp.where(where, nn.log_softmax(v, -1, where=where), 0.0) * w)

    g = np.asarray(blu.grad(logsoft)(x))
    # d/dx_j sum_k w_k (x_k - lse) = w_j - p_j sum_k w_k over the kept entries
    kw = np.where(where, w, 0.0).sum(-1, keepdims=True)
    np.testing.assert_allclose(g, np.where(where, w - p * kw, 0.0), rtol=1e-12, atol=1e-15)
    assert np.isfinite(g).all() and np.all(g[~where] == 0)
    check_grads(lambda v: nn.softmax(v, -1, where=where), [x], order=2)
    check_grads(lambda v: bnp.where(where, nn.log_softmax(v, -1, where=where), 0.0), [x])
    # a kept -inf entry and a masked NaN: gradients stay finite
    xi = x.copy()
    xi[0, 0], xi[0, 1] = -np.inf, np.nan
    assert np.isfinite(np.asarray(blu.grad(soft)(xi))).all()
    assert np.isfinite(np.asarray(blu.grad(logsoft)(xi))).all()


def test_masked_forms_under_jit_low_precision_and_errors():
    x = np.linspace(-3, 3, 12).reshape(3, 4)
    where = np.array([True, False, True, True])
    for fn, log in ((nn.softmax, False), (nn.log_softmax, True)):
        want = _reference(x, 1, where, log)
        got = blu.jit(lambda v, fn=fn: fn(v, axis=1, where=where))(x)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-14, atol=1e-15)
        # all True is the plain form
        np.testing.assert_allclose(
            np.asarray(fn(x, 0, where=np.ones(4, bool))), np.asarray(fn(x, 0)), rtol=1e-14
        )
        got = fn(x.astype(ml_dtypes.bfloat16), 1, where=where)
        assert got.dtype == ml_dtypes.bfloat16
        eps = float(np.finfo(ml_dtypes.bfloat16).eps)
        fin = np.isfinite(want)
        np.testing.assert_allclose(
            np.asarray(got, np.float64)[fin], want[fin], rtol=4 * eps, atol=4 * eps
        )
        with pytest.raises(BluShapeError, match=r"where of shape \(3,\).*shape \(3, 4\)"):
            fn(x, where=np.ones(3, bool))


@given(st.data())
def test_a_larger_mask_gives_the_result_its_shape(data):
    """A ``where`` of more axes, or longer ones, than ``x`` broadcasts ``x`` (as in JAX): the
    result has the broadcast shape and ``axis`` counts in it. The float64 loop over the
    broadcast arrays is the reference."""
    wshape = data.draw(shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    lead = data.draw(st.integers(0, len(wshape)))
    xshape = tuple(d if data.draw(st.booleans()) else 1 for d in wshape[lead:])
    x = data.draw(hnp.arrays(np.float64, xshape, elements=st.floats(-20, 20)))
    where = data.draw(hnp.arrays(np.bool_, wshape))
    nd = len(wshape)
    axis = data.draw(st.sampled_from([-1, 0, None, (0, nd - 1)] if nd > 1 else [-1, 0, None]))
    for fn, log in ((nn.softmax, False), (nn.log_softmax, True)):
        want = _reference(np.broadcast_to(x, wshape), axis, where, log)
        got = fn(x, axis, where=where)
        assert got.shape == wshape and got.dtype == np.float64
        got = np.asarray(got)
        np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
        fin = np.isfinite(want)  # a group's sum of at most 64 terms, |x| <= 20
        tol = 64 * np.finfo(np.float64).eps * (1 + np.abs(want[fin]) + 40)
        assert np.all(np.abs(got[fin] - want[fin]) <= tol)


@pytest.mark.parametrize("fn", [nn.softmax, nn.log_softmax])
@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 2)])
def test_empty_input_still_checks_the_axis(fn, shape):
    # JAX's (and numpy's) error for an axis the array lacks, empty or not; blu returned
    # the empty array unchecked
    x = np.zeros(shape, np.float32)
    bad = len(shape)
    for kw in ({}, {"where": np.ones(shape, bool)}):
        with pytest.raises(blu.errors.BluValueError, match=f"axis {bad}"):
            fn(x, axis=bad, **kw)
        with pytest.raises(blu.errors.BluValueError):
            fn(x, axis=(0, 0), **kw)
        got = np.asarray(fn(x, axis=-1, **kw))
        assert got.shape == shape and got.dtype == np.float32
