"""``nn.logsumexp``'s ``b=``, ``return_sign=`` and ``where=`` (JAX's): values against a float64
loop, signs, masks, gradients against finite differences, and its bfloat16 inputs."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import scipy.special
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
import blu.numpy
from blu import nn
from blu.core.errors import BluShapeError, BluTypeError
from tests.helpers import check_grads, shapes


def _reference(x, axis, b, where):
    """log|sum(b exp x)| and its sign over ``axis`` (a loop over the kept positions, float64)."""
    x = np.asarray(x, np.float64)
    b = np.broadcast_to(np.ones(()) if b is None else np.asarray(b, np.float64), x.shape)
    w = np.broadcast_to(np.ones((), bool) if where is None else where, x.shape)
    axes = tuple(range(x.ndim)) if axis is None else (axis % x.ndim,)
    keep = [i for i in range(x.ndim) if i not in axes]
    out_shape = tuple(x.shape[i] for i in keep)
    out, sign, cond = np.zeros(out_shape), np.zeros(out_shape), np.ones(out_shape)
    for pos in np.ndindex(*out_shape):
        sel = [slice(None)] * x.ndim
        for i, p in zip(keep, pos):
            sel[i] = p
        xs, bs, ws = x[tuple(sel)].ravel(), b[tuple(sel)].ravel(), w[tuple(sel)].ravel()
        terms = [float(bv) * np.exp(float(xv)) for xv, bv, wv in zip(xs, bs, ws) if wv]
        total = sum(terms)
        out[pos], sign[pos] = (np.log(abs(total)) if total else -np.inf), np.sign(total)
        # how much the sum cancels: its rounding error, relative to |total|, is eps * cond
        cond[pos] = sum(abs(t) for t in terms) / abs(total) if total else np.inf
    return out, sign, cond


@given(st.data())
def test_weighted_logsumexp_matches_a_loop(data):
    shape = data.draw(shapes(min_dims=1, max_dims=3, min_side=0, max_side=4))
    finite = st.floats(-20, 20, allow_nan=False)
    x = data.draw(hnp.arrays(np.float64, shape, elements=finite | st.just(-np.inf)))
    axis = data.draw(st.sampled_from([None, 0, -1]))
    b = data.draw(hnp.arrays(np.float64, shape, elements=st.floats(-3, 3) | st.just(0.0)))
    where = data.draw(hnp.arrays(np.bool_, shape))
    got, sign = nn.logsumexp(x, axis, b=b, where=where, return_sign=True)
    want, want_sign, cond = _reference(x, axis, b, where)
    sure = cond < 1e6  # where the sum cancels almost to zero its last bits decide the sign
    tol = 1e-9 + 64 * np.finfo(np.float64).eps * np.where(sure, cond, 0)
    got, sign = np.asarray(got), np.asarray(sign)
    np.testing.assert_array_equal(sign[sure], want_sign[sure])
    plain = np.asarray(nn.logsumexp(x, axis, b=b, where=where))
    np.testing.assert_array_equal(np.isnan(plain)[sure], (want_sign < 0)[sure])
    with np.errstate(invalid="ignore"):  # -inf - -inf: equal entries are checked by ==
        assert np.all(~sure | (got == want) | (np.abs(got - want) <= tol))
        ok = ~sure | (want_sign < 0) | (plain == want) | (np.abs(plain - want) <= tol)
    assert np.all(ok)


def test_weights_keepdims_and_gradient():
    rng = np.random.default_rng(0)
    x, b = rng.standard_normal((3, 5)), rng.uniform(0.5, 2.0, (1, 5))
    got = nn.logsumexp(x, 1, keepdims=True, b=b)
    assert got.shape == (3, 1)
    np.testing.assert_allclose(np.asarray(got)[:, 0], _reference(x, 1, b, None)[0], rtol=1e-12)
    check_grads(lambda x: nn.logsumexp(x, 1, b=b), [x], order=1)
    # the plain form is the weights' special case
    np.testing.assert_allclose(
        np.asarray(nn.logsumexp(x, 0, b=np.ones_like(x))), np.asarray(nn.logsumexp(x, 0)),
        rtol=1e-12,
    )  # fmt: skip


def test_low_precision_and_errors():
    x = np.linspace(-3, 3, 8).astype(ml_dtypes.bfloat16)
    got = nn.logsumexp(x, b=np.full(8, 0.5, np.float32))
    assert got.dtype == np.float32  # promoted with b's dtype, as in JAX
    want = _reference(x.astype(np.float64), None, np.full(8, 0.5), None)[0]
    np.testing.assert_allclose(float(got), want, rtol=1e-6)
    with pytest.raises(BluTypeError, match="complex"):
        nn.logsumexp(np.ones(3), b=np.ones(3, np.complex64))
    got = blu.jit(lambda x, b: nn.logsumexp(x, b=b, return_sign=True))(np.ones(3), -np.ones(3))
    assert float(got[1]) == -1.0 and np.isclose(float(got[0]), 1 + np.log(3))


def test_left_out_entries_add_nothing_and_empty_rows_have_zero_gradient():
    x = np.array([[1.0, 2.0, 3.0], [0.0, 4.0, 5.0]])
    w = np.array([[True, False, True], [False, True, True]])
    b = np.array([[1.0, np.inf, 1.0], [np.nan, 1.0, 1.0]])  # non-finite weights left out
    want = [np.log(np.exp(1.0) + np.exp(3.0)), np.log(np.exp(4.0) + np.exp(5.0))]
    np.testing.assert_allclose(np.asarray(nn.logsumexp(x, 1, b=b, where=w)), want, rtol=1e-12)
    xi = np.array([[-np.inf, -np.inf], [0.0, 1.0]])
    soft = np.exp([0.0, 1.0]) / np.exp([0.0, 1.0]).sum()
    for kw in ({"return_sign": True}, {"where": np.ones((2, 2), bool)}, {"b": np.ones(2)}):

        def f(v, kw=kw):  # the -inf row's value is in the sum: its gradient must be 0
            out = nn.logsumexp(v, 1, **kw)
            return blu.numpy.sum(out[0] if isinstance(out, tuple) else out)

        g = np.asarray(blu.grad(f)(xi))
        np.testing.assert_allclose(g, [[0.0, 0.0], soft], rtol=1e-12)
        out = nn.logsumexp(xi, 1, **kw)
        assert np.asarray(out[0] if isinstance(out, tuple) else out)[0] == -np.inf


@given(st.data())
def test_weights_broadcast_with_x_as_in_jax(data):
    """A ``b`` of more axes, or longer ones, than ``x`` broadcasts ``x`` (jax.nn.logsumexp's
    rule): the result has the broadcast shape less the reduced axes. SciPy's logsumexp, which
    broadcasts ``a`` and ``b`` the same way, in float64 is the reference."""
    bshape = data.draw(shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    lead = data.draw(st.integers(0, len(bshape)))  # x drops leading axes and keeps some as 1
    xshape = tuple(d if data.draw(st.booleans()) else 1 for d in bshape[lead:])
    x = data.draw(hnp.arrays(np.float64, xshape, elements=st.floats(-20, 20)))
    b = data.draw(hnp.arrays(np.float64, bshape, elements=st.floats(0.125, 4)))
    nd = len(bshape)
    axis = data.draw(st.sampled_from([None, 0, -1, (0, nd - 1)] if nd > 1 else [None, 0, -1]))
    keepdims = data.draw(st.booleans())
    want = scipy.special.logsumexp(x, axis, b=b, keepdims=keepdims)
    got = nn.logsumexp(x, axis, b=b, keepdims=keepdims)
    assert got.shape == np.shape(want) and got.dtype == np.float64
    # a positive sum of at most 64 terms: a few roundings each, relative to |log| >= 1 or abs
    tol = 64 * np.finfo(np.float64).eps
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol)
    got32 = nn.logsumexp(x.astype(np.float32), axis, b=b.astype(np.float32), keepdims=keepdims)
    assert got32.dtype == np.float32
    tol32 = 64 * np.finfo(np.float32).eps
    np.testing.assert_allclose(np.asarray(got32), want, rtol=tol32, atol=tol32 * 25)


def test_larger_weights_signs_masks_gradient_and_errors():
    x = np.array([0.5, -1.0, 2.0])
    b = np.array([[1.0, 2.0, 0.5], [-1.0, 0.25, -3.0]])  # row 1 sums negative
    got, sign = nn.logsumexp(x, -1, b=b, return_sign=True)
    want, want_sign = scipy.special.logsumexp(x, -1, b=b, return_sign=True)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-14)
    np.testing.assert_array_equal(np.asarray(sign), want_sign)
    w = np.array([True, False, True])  # a mask broadcast to the (2, 3) of x and b
    want = scipy.special.logsumexp(x[w], -1, b=np.abs(b)[:, w])
    np.testing.assert_allclose(np.asarray(nn.logsumexp(x, 1, b=np.abs(b), where=w)), want)
    # d/dx sums over the broadcast rows: sum_i b_ij exp(x_j) / sum_k b_ik exp(x_k)
    p = np.abs(b) * np.exp(x) / (np.abs(b) * np.exp(x)).sum(1, keepdims=True)
    g = blu.grad(lambda v: blu.numpy.sum(nn.logsumexp(v, 1, b=np.abs(b))))(x)
    np.testing.assert_allclose(np.asarray(g), p.sum(0), rtol=1e-14)
    check_grads(lambda v, c: nn.logsumexp(v, 1, b=c), [x, np.abs(b)], order=1)
    jitted = blu.jit(lambda v, c: nn.logsumexp(v, 0, b=c))(x, np.abs(b))
    np.testing.assert_allclose(np.asarray(jitted), scipy.special.logsumexp(x, 0, b=np.abs(b)))
    with pytest.raises(BluShapeError, match=r"b of shape \(2, 4\).*x of shape \(3,\)"):
        nn.logsumexp(x, b=np.ones((2, 4)))


def test_positional_order_is_jax_and_scipys():
    """``logsumexp(a, axis, b, keepdims)``: the third positional argument is the weights (it was
    ``keepdims``, so SciPy-style weights passed positionally were read as a truth value)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 5))
    w = rng.uniform(0.5, 2.0, size=(3, 5))
    want = scipy.special.logsumexp(x, 0, w, True)
    got = nn.logsumexp(x, 0, w, True)
    assert got.shape == (1, 5)
    tol = 16 * np.finfo(np.float64).eps
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol)


@given(st.data())
def test_a_larger_mask_broadcasts_x_as_in_jax(data):
    """A ``where`` of more axes, or longer ones, than ``x`` broadcasts ``x`` (as a larger ``b``
    does; jax.nn.logsumexp applies the mask before it reduces): the result has the broadcast
    shape less the reduced axes. SciPy's logsumexp with the mask as 0/1 weights, in float64,
    is the reference (a weight of 0 leaves the entry out)."""
    wshape = data.draw(shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    lead = data.draw(st.integers(0, len(wshape)))
    xshape = tuple(d if data.draw(st.booleans()) else 1 for d in wshape[lead:])
    x = data.draw(hnp.arrays(np.float64, xshape, elements=st.floats(-20, 20)))
    where = data.draw(hnp.arrays(np.bool_, wshape))
    nd = len(wshape)
    axis = data.draw(st.sampled_from([None, 0, -1, (0, nd - 1)] if nd > 1 else [None, 0, -1]))
    keepdims = data.draw(st.booleans())
    with np.errstate(divide="ignore"):  # (a group left empty: log 0 = -inf)
        want = scipy.special.logsumexp(x, axis, b=where.astype(np.float64), keepdims=keepdims)
    got = nn.logsumexp(x, axis, keepdims=keepdims, where=where)
    assert got.shape == np.shape(want) and got.dtype == np.float64
    got = np.asarray(got)
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    tol = 64 * np.finfo(np.float64).eps  # a positive sum of at most 64 terms
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=tol, atol=tol)
    b = np.full(wshape[-1:], 0.5)  # with weights too: all three broadcast together
    with np.errstate(divide="ignore"):
        want_b = scipy.special.logsumexp(x, axis, b=where * b, keepdims=keepdims)
    got_b = np.asarray(nn.logsumexp(x, axis, b=b, keepdims=keepdims, where=where))
    fin = np.isfinite(want_b)
    np.testing.assert_array_equal(np.isneginf(got_b), np.isneginf(want_b))
    np.testing.assert_allclose(got_b[fin], want_b[fin], rtol=tol, atol=tol)


def test_a_mask_that_does_not_broadcast_is_a_shape_error():
    with pytest.raises(BluShapeError, match=r"where of shape \(2, 2\).*x of shape \(3,\)"):
        nn.logsumexp(np.zeros(3), where=np.ones((2, 2), bool))
