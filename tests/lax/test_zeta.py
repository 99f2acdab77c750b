"""lax.zeta (JAX's Hurwitz zeta; blu had none) against scipy.special.zeta (Cephes) in float64,
closed forms (pi**2 / 6, pi**4 / 90) and the recurrence zeta(x, q) = q**-x + zeta(x, q + 1);
XLA's special values (poles, domain); float32; derivatives (in q: -x zeta(x + 1, q), JAX's;
finite differences); vmap and jit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
from blu import lax
from blu.core.errors import BluTypeError
from tests.helpers import check_grads, check_jit, check_vmap, shapes, tolerance


@st.composite
def x_q(draw, lo_q=1e-3):
    shape = draw(shapes(max_side=4))
    x = draw(hnp.arrays(np.float64, shape, elements=st.floats(1.01, 60)))
    q = draw(hnp.arrays(np.float64, shape, elements=st.floats(lo_q, 1e6)))
    return x, q


@given(data=x_q())
def test_matches_scipy_in_its_domain(data):
    x, q = data
    got = np.asarray(lax.zeta(x, q))
    assert got.shape == x.shape and got.dtype == np.float64
    with np.errstate(over="ignore"):
        want = scipy.special.zeta(x, q)
    # (results below float64's normal range keep fewer digits: compared to its smallest normal)
    tiny = np.finfo(np.float64).tiny
    np.testing.assert_allclose(got, want, rtol=tolerance(np.float64, 4), atol=tiny)


@given(data=x_q(lo_q=0.5))
def test_recurrence_in_q(data):
    x, q = data  # (q >= 0.5: q**-x stays finite for x <= 60)
    lhs = np.asarray(lax.zeta(x, q))
    rhs = q**-x + np.asarray(lax.zeta(x, q + 1))
    np.testing.assert_allclose(lhs, rhs, rtol=tolerance(np.float64, 8), atol=0)


def test_riemann_closed_forms():
    got = np.asarray(lax.zeta(np.array([2.0, 4.0, 6.0]), np.ones(3)))
    want = [math.pi**2 / 6, math.pi**4 / 90, math.pi**6 / 945]
    np.testing.assert_allclose(got, want, rtol=1e-15)
    # zeta(2, 1/2) = (2**2 - 1) zeta(2)
    half = float(lax.zeta(np.float64(2.0), np.float64(0.5)))
    np.testing.assert_allclose(half, 3 * math.pi**2 / 6, rtol=1e-15)


def test_special_values_as_xla():
    x = np.array([1.0, 0.5, -2.0, 2.0, 3.0, 2.5, 2.0, np.nan, 2.0])
    q = np.array([1.0, 1.0, 1.0, 0.0, -2.0, -1.5, -1.5, 1.0, np.nan])
    got = np.asarray(lax.zeta(x, q))
    # pole at x = 1; NaN for x < 1; poles at q = 0, -1, ...; NaN for q <= 0 and x not an
    # integer; for q <= 0 and an integer x, the series (scipy's too); NaN propagates
    want = [np.inf, np.nan, np.nan, np.inf, np.inf, np.nan, scipy.special.zeta(2.0, -1.5)]
    np.testing.assert_array_equal(got[:6], want[:6])
    np.testing.assert_allclose(got[6], want[6], rtol=1e-14)
    assert np.isnan(got[7]) and np.isnan(got[8])


@given(data=x_q(lo_q=0.1))
def test_float32(data):
    x, q = (a.astype(np.float32) for a in data)
    got = np.asarray(lax.zeta(x, q))
    assert got.dtype == np.float32
    with np.errstate(over="ignore"):
        want = scipy.special.zeta(x.astype(np.float64), q.astype(np.float64))
    # float32's normal range (a subnormal result has fewer significant bits)
    f32 = np.finfo(np.float32)
    normal = (np.abs(want) < f32.max / 2) & (np.abs(want) > 4 * float(f32.tiny))
    np.testing.assert_allclose(got[normal], want[normal], rtol=tolerance(np.float32, 4), atol=0)


@given(x=st.floats(1.1, 20), q=st.floats(0.2, 100))
def test_derivative_in_q_is_minus_x_zeta_x_plus_1(x, q):
    got = float(blu.grad(lax.zeta, argnums=1)(np.float64(x), np.float64(q)))
    np.testing.assert_allclose(got, -x * scipy.special.zeta(x + 1, q), rtol=1e-12)


@given(x=hnp.arrays(np.float64, 3, elements=st.floats(1.2, 10)),
       q=hnp.arrays(np.float64, 3, elements=st.floats(0.3, 20)))  # fmt: skip
def test_derivatives_match_finite_differences(x, q):
    check_grads(lax.zeta, [x, q], order=1, atol=1e-6, rtol=1e-6)


def test_vmap_jit_and_errors():
    x = np.array([[2.0, 3.5], [1.5, 10.0]], np.float32)
    q = np.array([[1.0, 0.5], [7.0, 2.0]], np.float32)
    check_vmap(lax.zeta, [x, q], in_axes=[0, 1])
    check_jit(lax.zeta, [x, q])
    with pytest.raises(BluTypeError, match=r"zeta: needs real float operands, got i32\[2\]"):
        lax.zeta(np.ones(2, np.int32), np.ones(2, np.int32))
