"""numpy.linalg on complex matrices (issue #39): values against numpy in complex128 and
gradients of real losses (JAX's convention, ``df/dx - i df/dy``) against central differences of
the real and imaginary parts: ``pinv`` and ``lstsq`` (conjugate transposes in the SVD formula and
in Golub-Pereyra's derivative; real residuals), ``cholesky(upper=True)`` (``U = L^H``), and the
solvers and decompositions built on the complex lax.linalg rules."""

from __future__ import annotations

import numpy as np
import pytest

import blu
import blu.numpy as bnp

LA = bnp.linalg
EPS = 1e-6


def cplx(shape, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def fd_grad(f, z):
    g = np.zeros(z.shape, np.complex128)
    for idx in np.ndindex(z.shape):
        for unit, sign in ((1.0, 1.0), (1j, -1j)):
            zp, zm = z.copy(), z.copy()
            zp[idx] += EPS * unit
            zm[idx] -= EPS * unit
            g[idx] += sign * (float(f(zp)) - float(f(zm))) / (2 * EPS)
    return g


@pytest.mark.parametrize("shape", [(3, 2), (2, 3), (3, 3)])
def test_pinv_and_lstsq_values(shape):
    a, b = cplx(shape, 1), cplx(shape[:1], 2)
    np.testing.assert_allclose(np.asarray(LA.pinv(a)), np.linalg.pinv(a), rtol=1e-10, atol=1e-12)
    x, resid, rank, s = LA.lstsq(a, b)
    x_np, resid_np, rank_np, s_np = np.linalg.lstsq(a, b)
    np.testing.assert_allclose(np.asarray(x), x_np, rtol=1e-10, atol=1e-12)
    assert np.asarray(resid).dtype == np.float64
    if resid_np.size:
        np.testing.assert_allclose(np.asarray(resid), resid_np, rtol=1e-10)
    assert int(rank) == rank_np


def test_cholesky_upper_is_the_conjugate_transpose():
    b = cplx((3, 3), 3)
    h = b @ b.conj().T + 3 * np.eye(3)
    u = np.asarray(LA.cholesky(h, upper=True))
    np.testing.assert_allclose(u.conj().T @ u, h, rtol=1e-12)
    np.testing.assert_allclose(u, np.linalg.cholesky(h).conj().T, rtol=1e-12)


A = cplx((3, 3), 4)
B = cplx((3,), 5)
H = A @ A.conj().T + 3 * np.eye(3)
LOSSES = {
    "pinv": (lambda a: bnp.sum(bnp.abs(LA.pinv(a))), cplx((3, 2), 6)),
    "lstsq": (lambda a: bnp.sum(bnp.abs(LA.lstsq(a, B)[0])), A),
    "lstsq_resid": (lambda a: bnp.sum(LA.lstsq(a, B[:3])[1]), cplx((3, 2), 7)),
    "solve": (lambda a: bnp.sum(bnp.abs(LA.solve(a, B)) ** 2), A),
    "inv": (lambda a: bnp.sum(bnp.real(LA.inv(a) * (1 + 2j))), A),
    "slogdet": (lambda a: LA.slogdet(a)[1], A),
    "eigvalsh": (lambda a: bnp.sum(LA.eigvalsh(a) ** 2), H),
    "eigh": (lambda a: bnp.sum(bnp.abs(LA.eigh(a)[1]) ** 4), H),
    "cholesky_upper": (lambda a: bnp.sum(bnp.imag(LA.cholesky(a, upper=True))), H),
    "qr": (lambda a: bnp.sum(bnp.real(LA.qr(a)[0]) + bnp.abs(LA.qr(a)[1])), A),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_gradients_against_differences(name):
    f, z = LOSSES[name]
    np.testing.assert_allclose(np.asarray(blu.grad(f)(z)), fd_grad(f, z), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("trans", [0, 1, 2, "N", "T", "C"])
@pytest.mark.parametrize("lower", [True, False])
def test_solve_triangular_trans_conjugates_for_C(trans, lower):
    # trans 2/'C' solves a^H x = b (scipy's); it solved a^T x = b, dropping the conjugate
    a = cplx((3, 3), 8) + 3 * np.eye(3)
    b = cplx((3, 2), 9)
    t = np.tril(a) if lower else np.triu(a)
    op = {0: t, 1: t.T, 2: t.conj().T}[{"N": 0, "T": 1, "C": 2}.get(trans, trans)]
    got = np.asarray(LA.solve_triangular(a, b, trans=trans, lower=lower))
    np.testing.assert_allclose(got, np.linalg.solve(op, b), rtol=1e-10, atol=1e-12)
