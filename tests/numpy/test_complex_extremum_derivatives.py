"""Derivatives of max/min-type operations and of slogdet's sign on complex inputs (issue #39):
the JVP rules of reduce_max/reduce_min and cummax/cummin returned a zero tangent for complex
dtypes (so did everything built on them: max, min, amax, nanmax, ptp, pmax under vmap, unique's
padding), and slogdet's complex sign went through ``sign``, whose derivative is zero.

Complex values are ordered lexicographically (real part, then imaginary part), as in numpy and
JAX; the tangent is that of the selected element (ties: the mean over the tied elements for the
reductions, the first in scan order for cummax/cummin, as for real inputs). References: central
differences in complex128 along complex directions and along the unit real and imaginary
directions, and closed forms computed with numpy."""

from __future__ import annotations

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu import lax
from blu import parallel as par

EPS = 1e-6


def cplx(shape, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    return scale * (rng.standard_normal(shape) + 1j * rng.standard_normal(shape))


def fd_jvp(f, z, t):
    plus, minus = np.asarray(f(z + EPS * t), np.complex128), np.asarray(f(z - EPS * t))
    return (plus - minus) / (2 * EPS)


FNS = {
    "max": lambda z: bnp.max(z, axis=1),
    "min": lambda z: bnp.min(z),
    "amax": lambda z: bnp.amax(z, axis=0),
    "amin": lambda z: bnp.amin(z, axis=1),
    "nanmax": lambda z: bnp.nanmax(z, axis=1),
    "nanmin": lambda z: bnp.nanmin(z, axis=0),
    "ptp": lambda z: bnp.ptp(z, axis=1),
    "reduce_max": lambda z: lax.reduce_max(z, (0, 1)),
    "reduce_min": lambda z: lax.reduce_min(z, (1,)),
    "cummax": lambda z: lax.cummax(z, axis=1),
    "cummin": lambda z: lax.cummin(z, axis=0, reverse=True),
    "pmax": lambda z: blu.vmap(lambda v: par.pmax(v, "i"), axis_name="i")(z),
    "pmin": lambda z: blu.vmap(lambda v: par.pmin(v, "i"), axis_name="i")(z),
}


@pytest.mark.parametrize("name", FNS)
def test_jvp_against_central_differences(name):
    """Random complex directions, and each element's unit real and imaginary directions."""
    f = FNS[name]
    z = cplx((3, 4), 0)
    directions = [cplx(z.shape, 1), cplx(z.shape, 2)]
    for unit in (1.0, 1j):
        for idx in ((0, 0), (1, 2), (2, 3)):
            d = np.zeros(z.shape, np.complex128)
            d[idx] = unit
            directions.append(d)
    for t in directions:
        _, got = blu.jvp(f, (z,), (t,))
        assert np.asarray(got).dtype == np.complex128
        np.testing.assert_allclose(np.asarray(got), fd_jvp(f, z, t), rtol=1e-7, atol=1e-8)


# equal real parts: the imaginary part decides (lexicographic order); the winner is known
Z = np.array([1.0 + 0.0j, 1.0 + 2.0j, -3.0 + 5.0j, 1.0 - 1.0j])
T = np.array([10.0 + 1.0j, 20.0 + 2.0j, 30.0 + 3.0j, 40.0 + 4.0j])


@pytest.mark.parametrize(
    "fn, want",
    [
        (bnp.max, T[1]),  # 1+2j beats 1+0j and 1-1j on the imaginary part
        (bnp.min, T[2]),  # -3+5j: the smallest real part
        (lambda z: bnp.max(z[np.array([0, 3])]), T[0]),
        (bnp.ptp, T[1] - T[2]),
        (lambda z: lax.cummax(z), T[np.array([0, 1, 1, 1])]),
        (lambda z: lax.cummin(z), T[np.array([0, 0, 2, 2])]),
    ],
)
def test_lexicographic_selection(fn, want):
    _, got = blu.jvp(fn, (Z,), (T,))
    np.testing.assert_array_equal(np.asarray(got), want)


def test_ties_follow_the_real_rules():
    """Exactly equal complex extrema: the reductions average the tied tangents, cummax takes
    the first in scan order, as for real inputs."""
    z = np.array([1 + 2j, 0.5 + 3j, 1 + 2j])
    t = np.array([1 + 1j, 5 + 0j, 3 - 1j])
    _, got = blu.jvp(bnp.max, (z,), (t,))
    np.testing.assert_allclose(np.asarray(got), (t[0] + t[2]) / 2)
    _, got = blu.jvp(lax.cummax, (z,), (t,))
    np.testing.assert_array_equal(np.asarray(got), t[np.array([0, 0, 0])])
    _, real = blu.jvp(bnp.max, (z.real,), (t.real,))
    np.testing.assert_allclose(np.asarray(real), (t[0].real + t[2].real) / 2)


def test_grad_of_complex_max_is_the_selected_elements():
    """Reverse mode: the gradient of Re(c * max(z)) is c at the arg-maximum (JAX's convention,
    ``df/dx - i df/dy`` with ``df/dx = Re c``, ``df/dy = -Im c``), zero elsewhere."""
    c = 0.3 - 0.7j
    g = blu.grad(lambda z: bnp.real(c * bnp.max(z)))(Z)
    want = np.zeros(4, np.complex128)
    want[1] = c
    np.testing.assert_allclose(np.asarray(g), want)


def test_unique_values_padding_takes_the_minimums_tangent():
    """``size`` larger than the number of distinct values pads with the minimum (the default
    fill value), whose tangent is that of the minimal element."""
    z = np.array([2 + 1j, -1 + 3j, 0.5 - 2j])
    t = np.array([1 + 2j, 3 - 1j, -2 + 4j])
    _, got = blu.jvp(lambda v: bnp.unique_all(v, size=5).values, (z,), (t,))
    order = np.argsort(z)  # numpy sorts complex lexicographically
    np.testing.assert_allclose(np.asarray(got), np.r_[t[order], t[1], t[1]])


# ---- slogdet -------------------------------------------------------------------------------------


def _sign(a):
    return bnp.linalg.slogdet(a).sign


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4)])
def test_slogdet_complex_sign_jvp(shape):
    a = cplx(shape, 5)
    for seed in (6, 7):
        da = cplx(shape, seed)
        (sign, logabs), (dsign, dlog) = blu.jvp(bnp.linalg.slogdet, (a,), (da,))
        # closed form: d sign = i Im(tr(a^-1 da)) sign, d logabsdet = Re(tr(a^-1 da))
        tr = np.trace(np.linalg.solve(a, da), axis1=-2, axis2=-1)
        want_sign, want_log = np.linalg.slogdet(a)
        np.testing.assert_allclose(np.asarray(sign), want_sign, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(logabs), want_log, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(dsign), 1j * tr.imag * want_sign, rtol=1e-10)
        np.testing.assert_allclose(np.asarray(dlog), tr.real, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(np.asarray(dsign), fd_jvp(_sign, a, da), rtol=1e-6, atol=1e-8)
    for unit in (1.0, 1j):  # each part of one entry
        da = np.zeros(shape, np.complex128)
        da[..., 1, 0] = unit
        _, dsign = blu.jvp(_sign, (a,), (da,))
        np.testing.assert_allclose(np.asarray(dsign), fd_jvp(_sign, a, da), rtol=1e-6, atol=1e-8)


def test_slogdet_complex_sign_grad():
    """Reverse mode through the sign's rule: ``df/dx - i df/dy`` by central differences."""
    a = cplx((3, 3), 8)
    c = 0.4 + 1.1j

    def f(m):
        return bnp.real(c * _sign(m))

    g = np.asarray(blu.grad(f)(a))
    want = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        for unit, w in ((1.0, 1.0), (1j, -1j)):
            ap, am = a.copy(), a.copy()
            ap[idx] += EPS * unit
            am[idx] -= EPS * unit
            want[idx] += w * (float(f(ap)) - float(f(am))) / (2 * EPS)
    np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-8)


def test_slogdet_real_and_singular_sign_tangents_are_zero():
    a = cplx((3, 3), 9).real
    _, dsign = blu.jvp(_sign, (a,), (cplx((3, 3), 10).real,))
    np.testing.assert_array_equal(np.asarray(dsign), 0.0)
    s = np.array([[1 + 1j, 2 + 2j], [2 + 2j, 4 + 4j]])  # rank 1: sign 0
    sign, dsign = blu.jvp(_sign, (s,), (cplx((2, 2), 11),))
    assert np.asarray(sign) == 0
    np.testing.assert_array_equal(np.asarray(dsign), 0.0)
