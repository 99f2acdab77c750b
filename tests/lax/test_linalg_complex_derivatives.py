"""Complex derivatives of the linear-algebra primitives (issue #39): cholesky, triangular_solve,
lu, qr and eigh on complex128 matrices. Forward mode against central differences in complex
directions; reverse mode through the pairing of JAX's convention, ``Re sum(ct * J t)`` (the
gradient of a real function is ``df/dx - i df/dy``), with ``J t`` by central differences; and
``grad`` of real losses against differences of the real and imaginary parts separately."""

from __future__ import annotations

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu.lax import linalg

EPS = 1e-6


def cplx(shape, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    return scale * (rng.standard_normal(shape) + 1j * rng.standard_normal(shape))


def hpd(n, seed, batch=()):
    """A well-conditioned Hermitian positive-definite matrix."""
    b = cplx(batch + (n, n), seed)
    return b @ np.conj(np.swapaxes(b, -1, -2)) + n * np.eye(n)


def fd_jvp(f, args, tangents):
    """Central difference of ``f`` (numpy complex in and out; a tuple of outputs allowed)."""
    plus = f(*[a + EPS * t for a, t in zip(args, tangents)])
    minus = f(*[a - EPS * t for a, t in zip(args, tangents)])
    plus, minus = (plus, minus) if isinstance(plus, tuple) else ((plus,), (minus,))
    return tuple((np.asarray(p) - np.asarray(m)) / (2 * EPS) for p, m in zip(plus, minus))


def as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def check_complex_derivatives(f, args, seed=0, rtol=1e-6, atol=1e-7):
    """jvp against differences, and vjp against the jvp by JAX's pairing ``Re sum(u * v)``."""
    rng = np.random.default_rng(seed)
    tangents = [
        rng.standard_normal(np.shape(a)) + (1j * rng.standard_normal(np.shape(a))
                                            if np.iscomplexobj(a) else 0)
        for a in args
    ]  # fmt: skip
    want = fd_jvp(f, args, tangents)
    _, got = blu.jvp(f, tuple(args), tuple(tangents))
    for g, w in zip(as_tuple(got), want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=rtol, atol=atol)
    out, f_vjp = blu.vjp(f, *args)
    cts = [
        rng.standard_normal(np.shape(o)) + (1j * rng.standard_normal(np.shape(o))
                                            if np.iscomplexobj(np.asarray(o)) else 0)
        for o in as_tuple(out)
    ]  # fmt: skip
    ct_in = f_vjp(tuple(cts) if isinstance(out, (tuple, list)) else cts[0])
    lhs = sum(np.real(np.sum(c * w)) for c, w in zip(cts, want))
    rhs = sum(np.real(np.sum(np.asarray(c) * t)) for c, t in zip(ct_in, tangents))
    np.testing.assert_allclose(rhs, lhs, rtol=rtol, atol=atol)


def fd_grad(f, z):
    """``df/dx - i df/dy`` per element of complex ``z`` for a real ``f``."""
    g = np.zeros(z.shape, np.complex128)
    for idx in np.ndindex(z.shape):
        for unit, sign in ((1.0, 1.0), (1j, -1j)):
            zp, zm = z.copy(), z.copy()
            zp[idx] += EPS * unit
            zm[idx] -= EPS * unit
            g[idx] += sign * (float(f(zp)) - float(f(zm))) / (2 * EPS)
    return g


@pytest.mark.parametrize("batch", [(), (2,)])
def test_cholesky(batch):
    a = hpd(3, 1, batch)
    # the wrapper symmetrizes, so any complex direction is a Hermitian one for the primitive
    check_complex_derivatives(lambda a: linalg.cholesky(a), [a])
    np.testing.assert_allclose(
        np.asarray(linalg.cholesky(a)), np.linalg.cholesky(a), rtol=1e-12, atol=1e-12
    )


def test_cholesky_grad_of_logdet_is_the_inverse():
    # log det A = 2 sum log L_ii; its gradient (JAX's convention) is A^-T for Hermitian A
    a = hpd(4, 2)

    def logdet(a):
        return 2 * bnp.sum(bnp.log(bnp.real(bnp.diagonal(linalg.cholesky(a)))))

    g = np.asarray(blu.grad(logdet)(a))
    np.testing.assert_allclose(g, np.linalg.inv(a).T, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g, fd_grad(logdet, a), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("left_side", [True, False])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("transpose_a", [True, False])
@pytest.mark.parametrize("conjugate_a", [True, False])
def test_triangular_solve(left_side, lower, transpose_a, conjugate_a):
    a = cplx((3, 3), 3) + 4 * np.eye(3)
    b = cplx((3, 2) if left_side else (2, 3), 4)
    kw = dict(left_side=left_side, lower=lower, transpose_a=transpose_a, conjugate_a=conjugate_a)

    def f(a, b):
        return linalg.triangular_solve(a, b, **kw)

    tri = np.tril(a) if lower else np.triu(a)
    op = tri.T if transpose_a else tri
    op = np.conj(op) if conjugate_a else op
    want = np.linalg.solve(op, b) if left_side else np.linalg.solve(op.T, b.T).T
    np.testing.assert_allclose(np.asarray(f(a, b)), want, rtol=1e-12, atol=1e-12)
    check_complex_derivatives(f, [a, b])


def test_lu():
    a = cplx((4, 4), 5)
    check_complex_derivatives(lambda a: linalg.lu(a)[0], [a])
    lu, _, perm = (np.asarray(o) for o in linalg.lu(a))
    lo, up = np.tril(lu, -1) + np.eye(4), np.triu(lu)
    np.testing.assert_allclose(lo @ up, a[perm], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(3, 3), (4, 3), (3, 5), (2, 3, 3)])
def test_qr(shape):
    a = cplx(shape, 6)
    check_complex_derivatives(lambda a: tuple(linalg.qr(a, full_matrices=False)), [a])


def test_qr_keeps_the_real_diagonal_of_r():
    # LAPACK's R has a real diagonal: so has its tangent
    a, t = cplx((3, 3), 7), cplx((3, 3), 8)
    _, (_, dr) = blu.jvp(lambda a: tuple(linalg.qr(a)), (a,), (t,))
    np.testing.assert_allclose(np.imag(np.diagonal(np.asarray(dr))), 0, atol=1e-12)


def test_eigh_eigenvalues_and_phase_invariant_functions_of_the_vectors():
    a = hpd(4, 9) + np.diag([0.0, 1.0, 3.0, 7.0])  # distinct eigenvalues

    def w(a):
        return linalg.eigh(a)[1]

    def spectral_fn(a):  # V diag(sin w) V^H: the same whatever phase each eigenvector has
        v, w = linalg.eigh(a)
        return (v * bnp.sin(w).astype(v.dtype)) @ bnp.conj(v.T)

    def abs_v(a):  # |V|^2: phase-invariant too
        v = linalg.eigh(a)[0]
        return bnp.real(v * bnp.conj(v))

    check_complex_derivatives(w, [a])
    check_complex_derivatives(spectral_fn, [a], rtol=1e-5, atol=1e-6)
    check_complex_derivatives(abs_v, [a], rtol=1e-5, atol=1e-6)
    assert np.asarray(w(a)).dtype == np.float64


def test_grads_of_real_losses_against_differences_of_both_parts():
    a, h = cplx((3, 3), 10), hpd(3, 11)
    c = cplx((3, 3), 12)
    losses = {
        "cholesky": (lambda z: bnp.sum(bnp.real(linalg.cholesky(z) * c)), h),
        "lu": (lambda z: bnp.sum(bnp.imag(linalg.lu(z)[0] * c)), a),
        "qr": (lambda z: bnp.sum(bnp.real(linalg.qr(z)[0] * c) + bnp.abs(linalg.qr(z)[1])), a),
        "eigh": (lambda z: bnp.sum(linalg.eigh(z)[1] ** 3), h),
        "tsolve": (
            lambda z: bnp.sum(bnp.abs(linalg.triangular_solve(z + 3 * np.eye(3), c, lower=True))),
            a,
        ),
    }
    for name, (f, z) in losses.items():
        np.testing.assert_allclose(
            np.asarray(blu.grad(f)(z)), fd_grad(f, z), rtol=1e-6, atol=1e-8, err_msg=name
        )


def test_real_matrices_unchanged():
    # the conjugations are skipped for reals: the same jaxpr as before, real tangents
    a = np.random.default_rng(13).standard_normal((3, 3))
    h = a @ a.T + 3 * np.eye(3)
    for f, x in ((linalg.cholesky, h), (lambda a: linalg.qr(a)[1], a)):
        jaxpr = str(blu.make_jaxpr(lambda x, t: blu.jvp(f, (x,), (t,)))(x, x))
        assert "conj" not in jaxpr and "c128" not in jaxpr


def test_jit_and_vmap_of_complex_linalg_gradients():
    hs = np.stack([hpd(3, 14), hpd(3, 15)])

    def f(a):
        return (
            bnp.sum(bnp.abs(linalg.cholesky(a)) ** 3)
            + bnp.sum(linalg.eigh(a)[1] ** 2)
            + bnp.sum(bnp.abs(linalg.qr(a)[1]))
        )

    want = np.stack([fd_grad(f, h) for h in hs])
    np.testing.assert_allclose(np.asarray(blu.jit(blu.grad(f))(hs[0])), want[0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(blu.vmap(blu.grad(f))(hs)), want, rtol=1e-6)
