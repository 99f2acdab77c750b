"""More of jax.numpy (resize, vander, tril/triu_indices_from, diag_indices(_from),
trim_zeros, apply_over_axes) against numpy in float64
over random shapes (size 0 and 1 included), under jit, and their derivatives."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import arrays, assert_matches, check_grads, shapes
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
import blu.numpy as bnp
from blu.core.errors import (
    BluAxisError,
    BluShapeError,
    BluTypeError,
    BluValueError,
    ConcretizationError,
)

# ---- resize ------------------------------------------------------------------------------------


@given(st.data())
def test_resize_matches_numpy(data):
    a = data.draw(arrays(data.draw(shapes())))
    new = data.draw(st.one_of(shapes(), st.integers(0, 7)))
    want = np.resize(a, new)
    assert_matches(bnp.resize(a, new), want, np.float64)
    assert_matches(blu.jit(bnp.resize, static_argnums=1)(a, new), want)
    ai = np.asarray(np.round(a * 4)).astype(np.uint8)
    assert_matches(bnp.resize(ai, new), np.resize(ai, new), np.uint8)


def test_resize_gradient_and_errors():
    x = np.random.default_rng(10).standard_normal(3)
    w = np.arange(1.0, 9.0).reshape(2, 4)
    g = blu.grad(lambda x: bnp.sum(bnp.resize(x, (2, 4)) * w))(x)
    assert_matches(g, [1 + 4 + 7, 2 + 5 + 8, 3 + 6])  # closed form: each entry's repeats
    check_grads(lambda x: bnp.resize(x, (5,)), [x])
    with pytest.raises(BluValueError, match=r"new_shape must be >= 0, got \(2, -1\)"):
        bnp.resize(x, (2, -1))
    with pytest.raises(BluTypeError, match="new_shape must be ints"):
        bnp.resize(x, (2.5,))
    with pytest.raises(ConcretizationError, match="new_shape"):
        blu.jit(bnp.resize)(x, np.array([2, 2]))


# ---- vander ------------------------------------------------------------------------------------


@given(st.data())
def test_vander_matches_numpy(data):
    x = data.draw(arrays(data.draw(shapes(min_dims=1, max_dims=1, max_side=5)), -1.5, 1.5))
    n = data.draw(st.one_of(st.none(), st.integers(0, 6)))
    inc = data.draw(st.booleans())
    want = np.vander(x, n, inc)
    assert_matches(bnp.vander(x, n, inc), want, np.float64)
    assert_matches(blu.jit(bnp.vander, static_argnums=(1, 2))(x, n, inc), want)
    xi = np.round(x * 2).astype(np.int32)  # x's dtype, as JAX (numpy widens to int64)
    assert_matches(bnp.vander(xi, n, inc), np.vander(xi, n, inc), np.int32)
    got32 = np.asarray(bnp.vander(x.astype(np.float32), n, inc))
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, want, rtol=1e-6, atol=1e-30)  # (float32 underflow)


def test_vander_gradient_and_errors():
    x = np.array([0.5, -1.25, 2.0])
    w = np.random.default_rng(11).standard_normal((3, 4))
    g = blu.grad(lambda x: bnp.sum(bnp.vander(x, 4) * w))(x)
    # closed form: d/dx x**k = k x**(k-1), columns k = 3, 2, 1, 0
    assert_matches(g, (w * np.array([3 * x**2, 2 * x, np.ones(3), np.zeros(3)]).T).sum(1))
    check_grads(lambda x: bnp.vander(x, 3, increasing=True), [x])
    with pytest.raises(BluShapeError, match=r"x must be 1-d, got shape \(3, 1\)"):
        bnp.vander(x[:, None])
    with pytest.raises(BluValueError, match="N must be >= 0, got -1"):
        bnp.vander(x, -1)
    with pytest.raises(BluTypeError, match="N must be an int"):
        bnp.vander(x, 2.0)
    with pytest.raises(ConcretizationError, match="vander"):
        blu.jit(bnp.vander)(x, 3)


# ---- tril_indices_from -------------------------------------------------------------------------


@given(shapes(min_dims=2, max_dims=2, max_side=5), st.integers(-6, 6))
def test_tril_indices_from_matches_numpy(shape, k):
    a = np.arange(float(np.prod(shape))).reshape(shape)
    got = bnp.tril_indices_from(a, k)
    want = np.tril_indices_from(a, k)
    for g, w in zip(got, want):
        assert_matches(g, w, np.int32)
    assert_matches(
        blu.jit(lambda a: a[bnp.tril_indices_from(a, k)])(a), a[want]
    )  # only the shape is read
    g = blu.grad(lambda a: bnp.sum(a[bnp.tril_indices_from(a, k)]))(a)
    assert_matches(g, np.tril(np.ones(shape), k))  # closed form


def test_tril_indices_from_rejects_non_2d():
    with pytest.raises(BluShapeError, match=r"arr must be 2-d, got shape \(2, 2, 2\)"):
        bnp.tril_indices_from(np.zeros((2, 2, 2)))


@given(shapes(min_dims=2, max_dims=2, max_side=5), st.integers(-6, 6))
def test_triu_indices_from_matches_numpy(shape, k):
    a = np.arange(float(np.prod(shape))).reshape(shape)
    want = np.triu_indices_from(a, k)
    for g, w in zip(bnp.triu_indices_from(a, k), want):
        assert_matches(g, w, np.int32)
    g = blu.grad(lambda a: bnp.sum(a[bnp.triu_indices_from(a, k)]))(a)
    assert_matches(g, np.triu(np.ones(shape), k))  # closed form
    with pytest.raises(BluShapeError, match=r"arr must be 2-d, got shape \(3,\)"):
        bnp.triu_indices_from(np.zeros(3))


@given(st.integers(0, 4), st.integers(2, 4))
def test_diag_indices_and_from_match_numpy(n, ndim):
    a = np.arange(float(n**ndim)).reshape((n,) * ndim)
    want = np.diag_indices(n, ndim)
    for got in (bnp.diag_indices(n, ndim), bnp.diag_indices_from(a)):
        assert len(got) == ndim
        for g, w in zip(got, want):
            assert_matches(g, w, np.int32)
    assert_matches(
        blu.jit(lambda a: a[bnp.diag_indices_from(a)])(a), a[want]
    )  # only the shape is read
    g = blu.grad(lambda a: bnp.sum(a[bnp.diag_indices_from(a)]))(a)
    want_g = np.zeros(a.shape)
    want_g[want] = 1.0
    assert_matches(g, want_g)


def test_diag_indices_from_rejects_bad_shapes():
    for shape in [(3,), (2, 3), (2, 2, 3)]:
        with pytest.raises(ValueError):
            np.diag_indices_from(np.zeros(shape))
        with pytest.raises(BluShapeError, match="equal dimensions, got shape"):
            bnp.diag_indices_from(np.zeros(shape))
    with pytest.raises(BluValueError, match="n=-1"):
        bnp.diag_indices(-1)


# ---- trim_zeros --------------------------------------------------------------------------------


@given(
    st.lists(st.sampled_from([0.0, 0.0, 1.5, -2.0]), max_size=8),
    st.sampled_from(["f", "b", "fb", "bf", "FB"]),
)
def test_trim_zeros_matches_numpy(vals, trim):
    x = np.array(vals, np.float64)
    want = np.trim_zeros(x, trim)
    assert_matches(bnp.trim_zeros(x, trim), want, np.float64)
    xi = x.astype(np.int16)  # a blu array, its dtype kept
    assert_matches(bnp.trim_zeros(bnp.asarray(xi), trim), np.trim_zeros(xi, trim), np.int16)


@given(st.data())
def test_trim_zeros_of_nd_arrays_matches_numpy(data):
    # numpy 2.2's and JAX's axis: each axis trimmed where every slice across the others is
    # zero (an n-d filt was a BluShapeError)
    shape = data.draw(shapes(max_dims=3))
    x = data.draw(hnp.arrays(np.int32, shape, elements=st.sampled_from([0, 0, 0, 3, -1])))
    trim = data.draw(st.sampled_from(["f", "b", "fb"]))
    nd = len(shape)
    choices = [None] + list(range(-nd, nd)) + ([tuple(range(nd))] if nd else [])
    axis = data.draw(st.sampled_from(choices))
    assert_matches(bnp.trim_zeros(x, trim, axis), np.trim_zeros(x, trim, axis=axis), np.int32)


def test_trim_zeros_rejects_bad_input():
    x = np.array([0.0, 1.0, 0.0])
    with pytest.raises(ConcretizationError, match="trim_zeros"):
        blu.jit(bnp.trim_zeros)(x)
    with pytest.raises(BluAxisError, match="trim_zeros"):
        bnp.trim_zeros(x[None], axis=2)
    with pytest.raises(BluValueError, match="trim must be"):
        bnp.trim_zeros(x, "x")


# ---- apply_over_axes ---------------------------------------------------------------------------


@given(st.data())
def test_apply_over_axes_matches_numpy(data):
    a = data.draw(arrays(data.draw(shapes(min_dims=1))))
    axes = data.draw(st.lists(st.integers(-a.ndim, a.ndim - 1), max_size=3, unique=True))
    axes = data.draw(st.sampled_from([axes, axes[0]])) if axes else axes
    for bf, nf in [(bnp.sum, np.sum), (bnp.cumsum, np.cumsum)]:  # rank - 1 and the same rank
        want = np.apply_over_axes(nf, a, axes)
        assert_matches(bnp.apply_over_axes(bf, a, axes), want, np.float64)
        assert_matches(blu.jit(lambda a: bnp.apply_over_axes(bf, a, axes))(a), want)


def test_apply_over_axes_gradient_and_errors():
    x = np.random.default_rng(12).standard_normal((2, 3, 4))
    w = np.random.default_rng(13).standard_normal((1, 3, 1))
    g = blu.grad(lambda x: bnp.sum(bnp.apply_over_axes(bnp.sum, x, [0, 2]) * w))(x)
    assert_matches(g, np.broadcast_to(w, x.shape))  # closed form
    check_grads(lambda x: bnp.apply_over_axes(bnp.cumsum, x, 1), [x])
    with pytest.raises(BluAxisError, match="axis 3 is out of bounds for rank 3"):
        bnp.apply_over_axes(bnp.sum, x, [0, 3])
    with pytest.raises(BluShapeError, match=r"rank 3 or 2 .*got shape \(\)"):
        bnp.apply_over_axes(lambda a, ax: bnp.sum(a), x, 0)


# ---- packbits ----------------------------------------------------------------------------------


@given(st.data())
def test_packbits_matches_numpy(data):
    shape = data.draw(shapes(max_side=11))
    dtype = data.draw(st.sampled_from([np.bool_, np.int8, np.int32, np.uint16]))
    lo = -2 if np.issubdtype(dtype, np.signedinteger) else 0
    x = np.asarray(data.draw(st.lists(st.integers(lo, 2), min_size=int(np.prod(shape)),
                                      max_size=int(np.prod(shape))))).astype(dtype)  # fmt: skip
    x = x.reshape(shape)
    axis = data.draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1))) if x.ndim else None
    order = data.draw(st.sampled_from(["big", "little"]))
    want = np.packbits(x, axis, bitorder=order)  # nonzero, negative too, is a 1 bit
    assert_matches(bnp.packbits(x, axis, order), want, np.uint8)
    assert_matches(blu.jit(lambda x: bnp.packbits(x, axis, order))(x), want)


def test_packbits_rejects_bad_input():
    with pytest.raises(BluTypeError, match=r"integer or bool, got f32\[3\]"):
        bnp.packbits(np.ones(3, np.float32))
    with pytest.raises(BluValueError, match="bitorder must be 'big' or 'little'"):
        bnp.packbits(np.ones(3, bool), bitorder="middle")
    with pytest.raises(BluAxisError, match="axis 1 is out of bounds for rank 1"):
        bnp.packbits(np.ones(3, bool), axis=1)


# ---- unpackbits --------------------------------------------------------------------------------


@given(st.data())
def test_unpackbits_matches_numpy(data):
    shape = data.draw(shapes())
    x = np.asarray(data.draw(st.lists(st.integers(0, 255), min_size=int(np.prod(shape)),
                                      max_size=int(np.prod(shape)))), np.uint8)  # fmt: skip
    x = x.reshape(shape)
    axis = data.draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1))) if x.ndim else None
    m = 8 * (x.size if axis is None else x.shape[axis])
    count = data.draw(st.one_of(st.none(), st.integers(-m, m + 5)))
    order = data.draw(st.sampled_from(["big", "little"]))
    want = np.unpackbits(x, axis, count, bitorder=order)
    if x.size == 0:  # numpy leaves the count= padding of an empty input uninitialized
        want = np.zeros_like(want)
    assert_matches(bnp.unpackbits(x, axis, count, order), want, np.uint8)
    assert_matches(blu.jit(lambda x: bnp.unpackbits(x, axis, count, order))(x), want)
    packed = bnp.packbits(bnp.unpackbits(x, axis, None, order), axis, order)  # round trip
    assert_matches(packed, x.reshape(-1) if axis is None else x)


def test_unpackbits_rejects_bad_input():
    x = np.array([1, 2], np.uint8)
    with pytest.raises(BluTypeError, match=r"a must be uint8, got i32\[2\]"):
        bnp.unpackbits(x.astype(np.int32))
    with pytest.raises(BluValueError, match=r"-count \(17\) is more than the 16 bits"):
        bnp.unpackbits(x, count=-17)
    with pytest.raises(BluValueError, match="bitorder"):
        bnp.unpackbits(x, bitorder="BIG")
    with pytest.raises(BluTypeError, match="count must be an int"):
        bnp.unpackbits(x, count=2.0)
    with pytest.raises(ConcretizationError, match="count"):
        blu.jit(lambda x, c: bnp.unpackbits(x, 0, c))(x, 3)


# ---- gcd, lcm, frexp, spacing ------------------------------------------------------------------


@given(
    st.data(),
    shapes(max_dims=2),
    st.sampled_from([np.int8, np.int32, np.int64, np.uint16]),
)
def test_gcd_lcm_match_numpy(data, shape, dtype):
    lo = 0 if np.dtype(dtype).kind == "u" else -40
    ints = hnp.arrays(dtype, shape, elements=st.integers(lo, 40))
    a, b = data.draw(ints), data.draw(ints)
    for f, ref in ((bnp.gcd, np.gcd), (bnp.lcm, np.lcm)):
        want = ref(a, b)
        for got in (f(a, b), blu.jit(f)(a, b)):
            assert_matches(got, want, want.dtype)
    assert_matches(bnp.gcd(a, 6), np.gcd(a, dtype(6)))  # a Python int takes a's dtype


def test_gcd_lcm_reject_non_integers():
    for f in (bnp.gcd, bnp.lcm):
        with pytest.raises(BluTypeError, match="must be integers, got float"):
            f(np.ones(2), np.ones(2, np.int32))
        with pytest.raises(BluTypeError, match="must be integers, got bool"):
            f(np.ones(2, bool), True)


_SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -1e-310, 1e-300, 1.5, -3.0]


@given(
    st.data(),
    shapes(max_dims=2),
    st.sampled_from([np.float64, np.float32, np.float16]),
)
def test_frexp_spacing_match_numpy(data, shape, dtype):
    elements = st.one_of(st.floats(width=16 if dtype == np.float16 else 32 if dtype == np.float32
                                   else 64), st.sampled_from(_SPECIAL))  # fmt: skip
    with np.errstate(over="ignore"):
        x = data.draw(hnp.arrays(np.float64, shape, elements=elements)).astype(dtype)
    m, e = np.frexp(x)
    for got_m, got_e in (bnp.frexp(x), blu.jit(bnp.frexp)(x)):
        assert got_m.dtype == dtype and got_e.dtype == np.int32
        np.testing.assert_array_equal(np.asarray(got_m), m)  # exact: bit manipulation
        np.testing.assert_array_equal(np.asarray(got_e), e)
    if dtype == np.float16:  # numpy's float16 spacing of a negative power of 2 is the smaller
        return  # gap (toward zero): np.spacing(np.float16(-1)) is 2**-11, float32's is -2**-23
    with np.errstate(over="ignore"):
        want = np.spacing(x)
    for got in (bnp.spacing(x), blu.jit(bnp.spacing)(x)):
        assert got.dtype == dtype
        np.testing.assert_array_equal(np.asarray(got), want)


def test_frexp_spacing_ints_and_derivative():
    m, e = bnp.frexp(np.array([0, 1, -6, 1000], np.int32))  # ints become float32
    wm, we = np.frexp(np.array([0, 1, -6, 1000], np.float32))
    np.testing.assert_array_equal(np.asarray(m), wm)
    np.testing.assert_array_equal(np.asarray(e), we)
    x = np.array([0.3, -2.0, 7.5])
    # spacing is piecewise constant: its derivative is 0 (finite differences of a step)
    assert_matches(blu.grad(lambda x: bnp.sum(bnp.spacing(x)))(x), np.zeros(3))
    with pytest.raises(BluTypeError, match="frexp: x must be real"):
        bnp.frexp(np.ones(2, np.complex64))


# ---- put_along_axis ----------------------------------------------------------------------------


def _unique_along(idx, axis, n):
    norm = np.moveaxis(np.where(idx < 0, idx + n, idx), axis, -1)
    return idx.size == 0 or all(len(set(r)) == len(r) for r in norm.reshape(-1, norm.shape[-1]))


@given(st.data(), shapes(min_dims=1, max_dims=3))
def test_put_along_axis_matches_numpy(data, shape):
    a = data.draw(arrays(shape))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[axis]
    ishape = [d if i == axis % len(shape) else data.draw(st.sampled_from([1, d]))
              for i, d in enumerate(shape)]  # fmt: skip
    ishape[axis] = data.draw(st.integers(0, 3)) if n else 0
    idx = data.draw(hnp.arrays(np.int64, ishape, elements=st.integers(-max(n, 1), max(n, 1) - 1)))
    # with repeated indices set keeps one of the values: then put one value everywhere
    unique = _unique_along(idx, axis, n)
    v = np.arange(1.0, idx.size + 1).reshape(ishape) if unique else np.full(ishape, 2.5)
    want = a.copy()
    np.put_along_axis(want, idx, v, axis)
    f = lambda a, v: bnp.put_along_axis(a, idx, v, axis, inplace=False)  # noqa: E731
    assert_matches(f(a, v), want)
    assert_matches(blu.jit(f)(a, v), want)
    if unique:
        check_grads(f, [a, v])


def test_put_along_axis_none_and_errors():
    a = np.arange(12.0).reshape(3, 4)
    want = a.copy()
    np.put_along_axis(want, np.array([0, -1, 5]), -1.0, None)
    assert_matches(bnp.put_along_axis(a, np.array([0, -1, 5]), -1.0, None, inplace=False), want)
    with pytest.raises(BluValueError, match="inplace=False"):
        bnp.put_along_axis(a, np.zeros((1, 1), int), 0.0, 0)
    with pytest.raises(BluShapeError, match=r"indices of shape \(2,\) for an array of rank 2"):
        bnp.put_along_axis(a, np.zeros(2, int), 0.0, 0, inplace=False)
    with pytest.raises(BluAxisError, match="put_along_axis: axis 2"):
        bnp.put_along_axis(a, np.zeros((1, 1), int), 0.0, 2, inplace=False)


# ---- nanquantile, nanpercentile, nanmedian -----------------------------------------------------


def _nanquantile_loop(x, q, axis):
    """An independent reference: each row's sorted non-NaN values read at q * (count - 1)."""
    axes = tuple(range(x.ndim)) if axis is None else (axis,) if np.ndim(axis) == 0 else axis
    axes = tuple(a % x.ndim for a in axes)
    kept = [i for i in range(x.ndim) if i not in axes]
    rows = np.transpose(x, kept + list(axes)).reshape(tuple(x.shape[i] for i in kept) + (-1,))
    out = np.empty(np.shape(q) + rows.shape[:-1])
    for k in np.ndindex(rows.shape[:-1]):
        v = np.sort(rows[k][~np.isnan(rows[k])])
        for j in np.ndindex(np.shape(q)):
            if v.size == 0:
                out[j + k] = np.nan
                continue
            pos = np.asarray(q)[j] * (v.size - 1)
            lo = int(np.floor(pos))
            hi = min(lo + 1, v.size - 1)
            with np.errstate(invalid="ignore"):
                out[j + k] = v[lo] + (v[hi] - v[lo]) * (pos - lo)
    return out


@given(
    st.data(),
    shapes(min_dims=1, max_dims=3),
    st.sampled_from([0.5, 0.0, 1.0, 0.25, [0.1, 0.9], [[0.3], [0.7]]]),
    st.booleans(),
)
def test_nanquantile_matches_numpy(data, shape, q, keepdims):
    elements = st.one_of(st.floats(-5, 5), st.just(np.nan))
    x = data.draw(hnp.arrays(np.float64, shape, elements=elements))
    nd = len(shape)
    tuples = st.lists(st.integers(0, nd - 1), min_size=1, unique=True).map(tuple)
    axis = data.draw(st.one_of(st.none(), st.integers(-nd, nd - 1), tuples))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices, empty reductions
        want = np.nanquantile(x, q, axis=axis, keepdims=keepdims)
        want_pct = np.nanpercentile(x, np.multiply(q, 100), axis=axis, keepdims=keepdims)
        want_med = np.nanmedian(x, axis=axis, keepdims=keepdims)
    if x.size == 0:  # numpy returns nanmean's shape here, ignoring q's: JAX's is q.shape + ...
        reduced = np.sum(x, axis=axis, keepdims=keepdims).shape
        want = want_pct = np.full(np.shape(q) + reduced, np.nan)
        want_med = np.full(reduced, np.nan)
    elif not keepdims:
        assert_matches(want, _nanquantile_loop(x, q, axis))
    close = lambda g, w: np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12, atol=1e-12)  # noqa: E731
    close(bnp.nanquantile(x, q, axis, keepdims=keepdims), want)
    close(blu.jit(lambda x: bnp.nanquantile(x, q, axis, keepdims=keepdims))(x), want)
    close(bnp.nanpercentile(x, np.multiply(q, 100), axis, keepdims=keepdims), want_pct)
    close(bnp.nanmedian(x, axis, keepdims=keepdims), want_med)


def test_nanquantile_infs_and_derivative():
    x = np.array([[1.0, np.nan, np.inf, 2.0], [-np.inf, np.nan, np.nan, 4.0], [np.nan] * 4])
    q = [0.0, 0.4, 1.0]
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(np.asarray(bnp.nanquantile(x, q, 1)),
                                      _nanquantile_loop(x, q, 1))  # fmt: skip
    y = np.array([[0.3, np.nan, -1.2, 2.0, 0.7], [np.nan, 1.5, -0.4, np.nan, 0.1]])
    f = lambda v: bnp.nanquantile(bnp.where(np.isnan(y), np.nan, v), [0.3, 0.5], 1)  # noqa: E731
    check_grads(f, [np.nan_to_num(y)])
    with pytest.raises(BluValueError, match="only method='linear'"):
        bnp.nanquantile(y, 0.5, method="nearest")
    with pytest.raises(BluValueError, match="q must be in"):
        bnp.nanpercentile(y, 150)
    with pytest.raises(BluValueError, match="overwrite_input"):
        bnp.nanmedian(y, overwrite_input=True)
