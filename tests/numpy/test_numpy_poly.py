"""jax.numpy's polynomial helpers (polyval, polyadd, polysub, polymul, polyder, polyint, polydiv,
polyfit, poly, roots) against numpy in float64 over random lengths (0 and 1 included, leading
zeros), JAX's dtypes and static lengths, and the derivatives of polyval and polyfit against
finite differences."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import arrays, check_grads, shapes
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluValueError, ConcretizationError


def _close(got, want, rtol=1e-10, atol=1e-10):
    g = np.asarray(got)
    assert g.shape == np.shape(want), (g.shape, np.shape(want))
    np.testing.assert_allclose(g, want, rtol=rtol, atol=atol)


@st.composite
def coefs(draw, min_size=0, max_size=6, zeros=True):
    """1-d float64 coefficients, some with leading zeros."""
    c = draw(arrays((draw(st.integers(min_size, max_size)),)))
    if zeros and c.size and draw(st.booleans()):
        c[: draw(st.integers(1, c.size))] = 0.0
    return c


@given(st.data())
def test_polyval_matches_numpy(data):
    p = data.draw(coefs())
    x = data.draw(arrays(data.draw(shapes())))
    want = np.polyval(p, x) if p.size else np.zeros_like(x)
    _close(bnp.polyval(p, x), want)
    _close(bnp.polyval(p, x, unroll=1), want)
    _close(blu.jit(bnp.polyval)(p, x), want)


def test_polyval_dtypes_and_derivatives():
    # integers stay integers, as numpy's and JAX's (blu gave the default float)
    got = bnp.polyval(np.array([1, 2], np.int32), np.int32(3))
    assert got.dtype == np.int32 and int(got) == 5
    p8, x8 = np.array([1, 2, 3], np.uint8), np.array([200, 7], np.uint8)
    got = bnp.polyval(p8, x8)  # wraps modulo 256 as numpy's
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(np.asarray(got), np.polyval(p8, x8))
    pb, xb = np.array([True, False, True]), np.array([True, False])
    np.testing.assert_array_equal(np.asarray(bnp.polyval(pb, xb)), np.polyval(pb, xb))
    assert bnp.polyval(np.array([1, 2], np.int32), 0.5).dtype == np.float32
    assert bnp.polyval(np.array([1.0], np.float32), np.float32(3)).dtype == np.float32
    p, x = np.array([0.5, -1.0, 2.0, 0.3]), np.array([-1.2, 0.4, 1.7])
    check_grads(bnp.polyval, (p, x), order=2)
    # trailing axes of p broadcast with x (JAX's scan over p's leading axis)
    p2 = np.array([[1.0, 2.0], [3.0, -1.0]])
    _close(bnp.polyval(p2, np.array([2.0, 0.5])), [1.0 * 2 + 3, 2.0 * 0.5 - 1])


@given(a=coefs(), b=coefs())
def test_polyadd_polysub_match_numpy(a, b):
    _close(bnp.polyadd(a, b), np.polyadd(a, b))
    _close(bnp.polysub(a, b), np.polysub(a, b))


def test_polyadd_keeps_integers():
    got = bnp.polyadd(np.array([1, 2], np.int32), np.array([0, 3, 4], np.int32))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), [0, 4, 6])  # [0, 1, 2] + [0, 3, 4]


@given(a=coefs(), b=coefs())
def test_polymul_matches_numpy(a, b):
    # JAX keeps the leading zeros (the full convolution; an empty input is [0]) ...
    want = np.convolve(a if a.size else [0.0], b if b.size else [0.0])
    _close(bnp.polymul(a, b), want)
    # ... and trim_leading_zeros trims them first, as numpy's polymul (through poly1d)
    if np.any(a) and np.any(b):
        _close(bnp.polymul(a, b, trim_leading_zeros=True), np.polymul(a, b))


@given(p=coefs(min_size=1), m=st.integers(0, 7))
def test_polyder_matches_numpy(p, m):
    want = np.polyder(p, m) if m < p.size else p[:0]  # JAX: no coefficients left
    _close(bnp.polyder(p, m), want)


@given(p=coefs(min_size=1), m=st.integers(0, 3), k=st.floats(-2, 2))
def test_polyint_matches_numpy(p, m, k):
    _close(bnp.polyint(p, m, k), np.polyint(p, m, k))
    if m:
        ks = np.arange(1.0, m + 1)
        _close(bnp.polyint(p, m, ks), np.polyint(p, m, ks))


@given(u=coefs(min_size=1, zeros=False), v=coefs(min_size=1, max_size=3, zeros=False))
def test_polydiv_matches_numpy(u, v):
    v = np.where(np.abs(v) < 0.3, 0.3, v)
    q, r = bnp.polydiv(u, v)
    wq, wr = np.polydiv(u, v)
    _close(q, wq)
    got_r = np.asarray(r)
    assert got_r.shape == u.shape  # JAX keeps len(u)
    _close(got_r[u.size - wr.size :], wr)  # numpy drops the leading (zero) ones
    _close(got_r[: u.size - wr.size], np.zeros(u.size - wr.size))
    if u.size >= v.size:  # u = q v + r
        np.testing.assert_allclose(np.convolve(np.asarray(q), v) + got_r, u, atol=1e-9)


def test_polydiv_trim_leading_zeros():
    u, v = np.array([1.0, -6.0, 11.0, -5.0]), np.array([1.0, -1.0])
    q, r = bnp.polydiv(u, v, trim_leading_zeros=True)
    wq, wr = np.polydiv(u, v)
    _close(q, wq)
    _close(r, wr)  # [1.]
    # an exact division: JAX trims every zero (numpy keeps one)
    q, r = bnp.polydiv(np.array([1.0, -6.0, 11.0, -6.0]), v, trim_leading_zeros=True)
    _close(q, [1.0, -5.0, 6.0])
    assert r.shape == (0,)


@given(st.data())
def test_polyfit_matches_numpy(data):
    n = data.draw(st.integers(1, 9))
    deg = data.draw(st.integers(0, min(n - 1, 3)))
    x = np.linspace(-1, 1, n) + data.draw(arrays((n,), -0.02, 0.02))
    y = data.draw(arrays((n,) + data.draw(st.sampled_from([(), (2,)]))))
    _close(bnp.polyfit(x, y, deg), np.polyfit(x, y, deg), rtol=1e-7, atol=1e-7)
    w = data.draw(arrays((n,), 0.5, 2.0))
    _close(bnp.polyfit(x, y, deg, w=w), np.polyfit(x, y, deg, w=w), rtol=1e-7, atol=1e-7)
    if n > deg + 1:
        for cov in (True, "unscaled"):
            c, v = bnp.polyfit(x, y, deg, cov=cov)
            wc, wv = np.polyfit(x, y, deg, cov=cov)
            _close(c, wc, rtol=1e-7, atol=1e-7)
            _close(v, wv, rtol=1e-6, atol=1e-9)


def test_polyfit_full_and_derivatives():
    x, y = np.linspace(0.0, 2.0, 7), np.cos(np.linspace(0.0, 2.0, 7))
    c, res, rank, s, rcond = bnp.polyfit(x, y, 2, full=True)
    wc, wres, wrank, ws, wrcond = np.polyfit(x, y, 2, full=True)
    _close(c, wc)
    _close(res, wres)
    assert int(rank) == wrank
    _close(s, ws)
    _close(rcond, wrcond)
    check_grads(lambda x, y: bnp.polyfit(x, y, 2), (x, y), order=1)


@given(z=coefs(zeros=False))
def test_poly_matches_numpy(z):
    _close(bnp.poly(z), np.poly(z) if z.size else np.array(1.0))


def test_poly_of_a_matrix_and_roots():
    a = np.array([[2.0, 1.0, 0.0], [0.5, -1.0, 0.3], [0.0, 0.2, 0.7]])
    got = bnp.poly(a)
    assert dtypes.is_complex(got.dtype)  # from eigenvalues, as JAX
    _close(got, np.poly(a).astype(complex))
    p = np.array([1.0, -3.0, 2.0, 5.0])
    _close(np.sort_complex(np.asarray(bnp.roots(p))), np.sort_complex(np.roots(p)))
    _close(np.sort_complex(np.asarray(bnp.roots(np.r_[0.0, 0.0, p]))), np.sort_complex(np.roots(p)))
    # without strip_zeros the length is static: the leading zero's root is NaN, last
    r = np.asarray(blu.jit(lambda p: bnp.roots(p, strip_zeros=False))(np.r_[0.0, 1.0, -3.0, 2.0]))
    _close(np.sort_complex(r[:2]), [1.0, 2.0])
    assert np.isnan(r[2])
    assert bnp.roots(np.array([3.0])).shape == (0,)
    _close(np.sort_complex(np.asarray(bnp.roots(np.array([1.0, -1.0, 0.0])))), [0.0, 1.0])


def test_polynomial_errors():
    with pytest.raises(BluValueError, match="polyder: the order m must be >= 0"):
        bnp.polyder(np.ones(3), -1)
    with pytest.raises(BluValueError, match="polyint: k must be a scalar or 2 values"):
        bnp.polyint(np.ones(3), 2, np.ones(3))
    with pytest.raises(BluShapeError, match="polyadd: a1 must be 1-d"):
        bnp.polyadd(np.ones((2, 2)), np.ones(2))
    with pytest.raises(BluShapeError, match="polyfit: y must be 1-d or 2-d"):
        bnp.polyfit(np.ones(3), np.ones(4), 1)
    with pytest.raises(BluValueError, match="polydiv: the divisor v must not be empty"):
        bnp.polydiv(np.ones(3), np.ones(0))
    with pytest.raises(ConcretizationError):
        blu.jit(bnp.roots)(np.ones(3))
