"""jacfwd / jacrev / hessian on complex numbers with JAX's semantics (issue #39): without
``holomorphic`` jacfwd takes real inputs only and jacrev real outputs only (else BluTypeError,
where JAX raises TypeError); a real output of complex inputs gives, under jacrev, each element's
gradient ``df/dx - i df/dy``; with ``holomorphic=True`` the result is ``f'(z)``. References:
closed forms and central differences of the real and imaginary parts."""

from __future__ import annotations

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu.core.errors import BluTypeError

Z = np.array([0.3 + 0.7j, -1.1 + 0.2j, 0.5 - 0.4j])
M = np.array([[1.0 + 2j, 0.5, -1j], [0.0, 2.0 - 1j, 0.3], [1.5j, -0.7, 1.0]])


@pytest.mark.parametrize("jac", [blu.jacfwd, blu.jacrev])
@pytest.mark.parametrize("fn", [bnp.conj, bnp.abs, bnp.real, lambda z: z * z])
def test_complex_input_without_holomorphic_raises_where_jax_does(jac, fn):
    out_complex = np.iscomplexobj(np.asarray(fn(Z)))
    if jac is blu.jacfwd or out_complex:  # jacfwd: complex input; jacrev: complex output
        with pytest.raises(BluTypeError, match="holomorphic=True"):
            jac(fn)(Z)
    else:  # jacrev of a real output: the gradient of each element
        jac(fn)(Z)


def test_jacrev_of_real_outputs_is_the_gradient_per_element():
    eps = 1e-6
    for fn, closed in (
        (bnp.abs, np.diag(np.conj(Z) / np.abs(Z))),  # d|z|/dx - i d|z|/dy = conj(z) / |z|
        (bnp.real, np.eye(3)),
        (bnp.imag, -1j * np.eye(3)),
    ):
        got = np.asarray(blu.jacrev(fn)(Z))
        assert got.dtype == np.complex128
        np.testing.assert_allclose(got, closed, rtol=1e-12, atol=1e-15)
        # rows by central differences of the real and imaginary parts
        fd = np.zeros((3, 3), np.complex128)
        for j in range(3):
            for unit, sign in ((1.0, 1.0), (1j, -1j)):
                e = np.zeros(3, np.complex128)
                e[j] = eps * unit
                fd[:, j] += sign * (np.asarray(fn(Z + e)) - np.asarray(fn(Z - e))) / (2 * eps)
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-9)
        # the same as grad of each element
        row = np.asarray(blu.grad(lambda z: fn(z)[1])(Z))
        np.testing.assert_allclose(got[1], row, rtol=1e-12)


@pytest.mark.parametrize("jac", [blu.jacfwd, blu.jacrev])
def test_holomorphic_jacobians_are_the_complex_derivative(jac):
    def f(z):  # holomorphic, not elementwise: M z^2 + sin(z)
        return M @ (z * z) + bnp.sin(z)

    want = M * (2 * Z)[None, :] + np.diag(np.cos(Z))
    got = np.asarray(jac(f, holomorphic=True)(Z))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # the complex derivative by a difference along the real axis (any direction, holomorphic)
    eps = 1e-6
    fd = np.stack(
        [(np.asarray(f(Z + eps * e)) - np.asarray(f(Z - eps * e))) / (2 * eps) for e in np.eye(3)],
        axis=1,
    )
    np.testing.assert_allclose(got, fd, rtol=1e-6)


def test_holomorphic_hessian():
    got = np.asarray(blu.hessian(lambda z: bnp.sum(z**3) + z[0] * z[1], holomorphic=True)(Z))
    want = np.diag(6 * Z) + np.array([[0, 1, 0], [1, 0, 0], [0, 0, 0]])
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("jac", [blu.jacfwd, blu.jacrev, blu.hessian])
def test_holomorphic_requires_complex_inputs_and_outputs(jac):
    with pytest.raises(BluTypeError, match="complex inputs"):
        jac(bnp.sin, holomorphic=True)(np.array([0.1, 0.2]))
    with pytest.raises(BluTypeError, match="complex outputs"):
        jac(lambda z: bnp.sum(bnp.abs(z) ** 2) * bnp.abs(z), holomorphic=True)(Z)


def test_real_input_complex_output_jacfwd_is_allowed():
    x = np.array([0.2, -0.4])
    got = np.asarray(blu.jacfwd(lambda x: bnp.exp(1j * x))(x))
    np.testing.assert_allclose(got, np.diag(1j * np.exp(1j * x)), rtol=1e-12)
    with pytest.raises(BluTypeError, match="real outputs"):
        blu.jacrev(lambda x: bnp.exp(1j * x))(x)


def test_grad_holomorphic_requires_a_complex_output():
    with pytest.raises(BluTypeError, match="complex scalar"):
        blu.grad(lambda z: bnp.abs(z), holomorphic=True)(np.complex128(1 + 1j))


def test_real_jacobians_unchanged():
    x = np.array([0.3, -0.8, 1.4])

    def f(x):
        return bnp.stack([bnp.sin(x[0]) * x[1], x[2] ** 2])

    want = np.array([[np.cos(0.3) * -0.8, np.sin(0.3), 0], [0, 0, 2 * 1.4]])
    for jac in (blu.jacfwd, blu.jacrev):
        got = np.asarray(jac(f)(x))
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-12)
    with pytest.raises(BluTypeError, match="real float inputs"):
        blu.jacfwd(lambda i: i * 2)(np.arange(3))


def test_jacrev_keeps_integer_outputs_with_zero_rows():
    # blu keeps integer outputs (JAX raises): only complex ones are refused
    x = np.array([0.3, -0.8, 1.4])
    jy, ji = blu.jacrev(lambda x: (x * 2, bnp.argmax(x)))(x)
    np.testing.assert_allclose(np.asarray(jy), 2 * np.eye(3))
    np.testing.assert_array_equal(np.asarray(ji), np.zeros(3))
