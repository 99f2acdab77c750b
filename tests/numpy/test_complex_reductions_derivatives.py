"""Derivatives of prod / cumprod on complex inputs and the norm of complex arrays (issue #39):
the product rules were zero for complex dtypes, and ``norm`` of a complex array was complex.
References: central differences of the real and imaginary parts, closed forms, and numpy's
``linalg.norm`` in complex128."""

from __future__ import annotations

import numpy as np
import pytest

import blu
import blu.numpy as bnp

EPS = 1e-6


def cplx(shape, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    return scale * (rng.standard_normal(shape) + 1j * rng.standard_normal(shape))


def fd_grad(f, z):
    """``df/dx - i df/dy`` per element (JAX's gradient of a real function of complex z)."""
    g = np.zeros(z.shape, np.complex128)
    for idx in np.ndindex(z.shape):
        for unit, sign in ((1.0, 1.0), (1j, -1j)):
            zp, zm = z.copy(), z.copy()
            zp[idx] += EPS * unit
            zm[idx] -= EPS * unit
            g[idx] += sign * (float(f(zp)) - float(f(zm))) / (2 * EPS)
    return g


def fd_jvp(f, z, t):
    return (np.asarray(f(z + EPS * t)) - np.asarray(f(z - EPS * t))) / (2 * EPS)


C = cplx((2, 4), 1)


@pytest.mark.parametrize(
    "name, fn",
    [
        ("prod", lambda z: bnp.prod(z)),
        ("prod_axis", lambda z: bnp.prod(z, axis=1)),
        ("cumprod", lambda z: bnp.cumprod(z, axis=1)),
        ("cumprod_flat", lambda z: bnp.cumprod(z)),
    ],
)
@pytest.mark.parametrize("zeros", [0, 1, 2])
def test_prod_and_cumprod_of_complex(name, fn, zeros):
    z = cplx((2, 3), 2, scale=0.8)
    z.flat[:zeros] = 0  # exact at zeros too (the dual-number products never divide)
    t = cplx((2, 3), 3)
    _, got = blu.jvp(fn, (z,), (t,))
    np.testing.assert_allclose(np.asarray(got), fd_jvp(fn, z, t), rtol=1e-7, atol=1e-9)

    def loss(z):
        out = fn(z)
        return bnp.sum(bnp.real(out * C.ravel()[: out.size].reshape(out.shape)) + bnp.abs(out))

    g = np.asarray(blu.grad(loss)(z))
    if zeros < 2:  # two zeros in one product: every partial derivative is 0
        assert np.any(g != 0)
    np.testing.assert_allclose(g, fd_grad(loss, z), rtol=1e-6, atol=1e-8)


def test_holomorphic_grad_of_prod_is_the_product_of_the_others():
    z = cplx((4,), 4)
    got = np.asarray(blu.grad(bnp.prod, holomorphic=True)(z))
    want = np.array([np.prod(np.delete(z, i)) for i in range(4)])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    got_last = np.asarray(blu.grad(lambda z: bnp.cumprod(z)[-1], holomorphic=True)(z))
    np.testing.assert_allclose(got_last, want, rtol=1e-12)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"ord": 2}, {"ord": 1}, {"ord": np.inf}, {"ord": 3}, {"axis": 1}, {"ord": "fro"}],
    ids=str,
)
def test_norm_of_complex_is_real(kwargs):
    z = cplx((3, 4), 5)
    if kwargs.get("ord") in (1, np.inf, 3, 2) and "axis" not in kwargs:
        z = z[0]  # vector norms
    got = bnp.linalg.norm(z, **kwargs)
    assert not np.iscomplexobj(np.asarray(got))
    assert np.asarray(got).dtype == np.float64
    np.testing.assert_allclose(np.asarray(got), np.linalg.norm(z, **kwargs), rtol=1e-12)


def test_norm_of_complex_gradient_and_vector_norm():
    z = cplx((5,), 6)
    g = np.asarray(blu.grad(bnp.linalg.norm)(z))
    # d|z|/dx - i d|z|/dy = conj(z) / |z| in JAX's convention
    np.testing.assert_allclose(g, np.conj(z) / np.linalg.norm(z), rtol=1e-12)
    np.testing.assert_allclose(g, fd_grad(lambda z: bnp.linalg.norm(z), z), rtol=1e-6)
    w = cplx((2, 3), 7)
    np.testing.assert_allclose(
        np.asarray(bnp.linalg.norm(w)), np.linalg.norm(w), rtol=1e-12
    )  # a 2-D array with ord and axis None: the Frobenius norm
    np.testing.assert_allclose(
        np.asarray(bnp.linalg.vector_norm(w)), np.linalg.norm(w.ravel()), rtol=1e-12
    )
    assert np.asarray(blu.grad(bnp.linalg.norm)(np.zeros(3, np.complex128))).tolist() == [0, 0, 0]
