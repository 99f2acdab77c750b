"""``.real`` / ``.imag`` / ``.conj()`` on arrays and tracers (numpy's attributes), against numpy."""

from __future__ import annotations

import numpy as np

import blu
import blu.numpy as bnp

Z = np.array([1 + 2j, 3 - 4j, -0.5 + 0.25j], np.complex64)


def test_complex_parts_on_arrays():
    z = bnp.asarray(Z)
    np.testing.assert_array_equal(np.asarray(z.real), Z.real)
    np.testing.assert_array_equal(np.asarray(z.imag), Z.imag)
    np.testing.assert_array_equal(np.asarray(z.conj()), np.conj(Z))
    np.testing.assert_array_equal(np.asarray(z.conjugate()), np.conj(Z))
    assert z.real.dtype == np.float32


def test_real_array_parts():
    x = bnp.asarray(np.array([1.5, -2.0], np.float32))
    np.testing.assert_array_equal(np.asarray(x.real), [1.5, -2.0])
    np.testing.assert_array_equal(np.asarray(x.imag), [0.0, 0.0])
    np.testing.assert_array_equal(np.asarray(x.conj()), [1.5, -2.0])


def test_complex_parts_on_tracers():
    got = blu.jit(lambda z: z.conj().imag + z.real)(Z)
    np.testing.assert_allclose(np.asarray(got), -Z.imag + Z.real)
    got = blu.vmap(lambda z: z.imag)(Z)
    np.testing.assert_array_equal(np.asarray(got), Z.imag)
    g = blu.grad(lambda x: (x.real * x.real).sum())(np.array([1.0, -3.0], np.float32))
    np.testing.assert_allclose(np.asarray(g), [2.0, -6.0])
