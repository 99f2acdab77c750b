"""Regression tests: the minimal failing examples the random-program fuzzer
(``test_fuzz_programs.py``) and the OpInfo sweeps (``test_opinfo_sweeps.py``) found, kept as
explicit tests. Each compares against an independently computed value (numpy, or a formula)."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import COMPILING_GPU_MARKS, make_device, put

import blu
import blu.numpy as bnp
from blu import lax

C = np.array([1 + 2j, 3 - 1j, 0.5j])


def _cplx(rng, shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


# ---- found by the OpInfo sweeps ------------------------------------------------------------------


@pytest.mark.parametrize("m, n", [(3, 4), (4, 2), (3, 3)])
def test_complex_pinv_is_the_moore_penrose_inverse(m, n):
    """pinv used V S^+ U^T (transposes) where V S^+ U^H is right: wrong for complex input."""
    a = _cplx(np.random.default_rng(0), (m, n))
    p = np.asarray(bnp.linalg.pinv(a))
    np.testing.assert_allclose(p, np.linalg.pinv(a), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(a @ p @ a, a, atol=1e-12)  # a Moore-Penrose condition
    np.testing.assert_allclose((p @ a).conj().T, p @ a, atol=1e-12)  # p a is Hermitian


def test_complex_lstsq_solution_and_real_residuals():
    """lstsq's solution (through pinv) was wrong for complex systems and its residuals were
    sum(r * r) (complex) instead of sum(|r|^2)."""
    rng = np.random.default_rng(1)
    a, b = _cplx(rng, (4, 2)), _cplx(rng, 4)
    x, resid, rank, _ = bnp.linalg.lstsq(a, b)
    want_x, want_resid, _, _ = np.linalg.lstsq(a, b)
    np.testing.assert_allclose(np.asarray(x), want_x, rtol=1e-12, atol=1e-12)
    assert np.asarray(resid).dtype == np.float64
    np.testing.assert_allclose(np.asarray(resid), want_resid, rtol=1e-12)
    assert int(rank) == 2


@pytest.mark.parametrize("mode", ["valid", "same", "full"])
def test_correlate_conjugates_v(mode):
    """correlate(a, v) is sum_n a[n + k] conj(v[n]) (numpy, JAX); blu did not conjugate."""
    v = np.array([2 - 1j, 1 + 1j])
    # valid mode by hand: k = 0, 1
    by_hand = [C[k] * np.conj(v[0]) + C[k + 1] * np.conj(v[1]) for k in range(2)]
    if mode == "valid":
        np.testing.assert_allclose(np.asarray(bnp.correlate(C, v, mode)), by_hand)
    np.testing.assert_allclose(np.asarray(bnp.correlate(C, v, mode)), np.correlate(C, v, mode))
    np.testing.assert_allclose(np.asarray(bnp.correlate(v, C, mode)), np.correlate(v, C, mode))


def test_float_power_keeps_the_imaginary_part():
    """float_power converted complex operands to float64, dropping their imaginary parts."""
    got = bnp.float_power(C, 2.0)
    assert np.asarray(got).dtype == np.complex128
    np.testing.assert_allclose(np.asarray(got), C * C, rtol=1e-15)


def test_pmean_of_complex_values():
    """pmean refused complex operands (psum takes them; the mean is psum / n)."""
    z = C.astype(np.complex64)
    got = blu.vmap(lambda v: lax.pmean(v, "i"), axis_name="i")(z)
    np.testing.assert_allclose(np.asarray(got), np.full(3, C.mean()), rtol=1e-6)


@pytest.mark.parametrize(
    "fn, ref",
    [
        (lambda a: bnp.linalg.svd(a, compute_uv=False), lambda a: np.linalg.svd(a)[1]),
        (lambda a: lax.linalg.triangular_solve(a, a, left_side=True, lower=True),
         lambda a: np.linalg.solve(np.tril(a), a)),
        (lambda a: bnp.linalg.cholesky(a @ a.T + 3 * bnp.eye(3)),
         lambda a: np.linalg.cholesky(a @ a.T + 3 * np.eye(3))),
    ],
    ids=["svd", "triangular_solve", "cholesky"],
)  # fmt: skip
@COMPILING_GPU_MARKS[0]
@COMPILING_GPU_MARKS[1]
@COMPILING_GPU_MARKS[2]
def test_linalg_on_the_simulated_gpu(fn, ref):
    """The cuSOLVER library lowerings had no simulated-device form: every linalg primitive in a
    jitted program on the fake GPU (``BLU_FAKE_GPU=1``) crashed ('NoneType' is not callable)."""
    a = np.random.default_rng(2).standard_normal((3, 3)).astype(np.float32) + 2 * np.eye(
        3, dtype=np.float32
    )
    got = blu.jit(fn)(put(make_device(), a))
    np.testing.assert_allclose(np.asarray(got), ref(a.astype(np.float64)), rtol=1e-4, atol=1e-4)


# ---- found by the random-program fuzzer ----------------------------------------------------------


@pytest.mark.parametrize("dt", [np.float32, np.int32, np.bool_])
def test_jit_concatenate_of_empty_operands(dt):
    """``jit(concatenate([x, x]))`` with ``x`` empty along the axis emitted a kernel storing
    ``None`` (MLIR could not parse it): the fuzzer's
    ``Program([((0,), 'float32')], 'flat', [Step('concatenate', (0, 0), {'axis': 0})], (1,))``."""
    x = np.zeros((2, 0), dt)
    got = blu.jit(lambda x: bnp.concatenate([x, x], axis=1))(x)
    assert np.asarray(got).shape == (2, 0) and np.asarray(got).dtype == np.dtype(dt)
    y = np.zeros(0, np.float32)
    got = blu.jit(lambda y: bnp.concatenate([bnp.sin(y), y]) + 1.0)(y)
    assert np.asarray(got).shape == (0,)


# ---- issue #39's custom_jvp in reverse mode (fixed by the custom_jvp change, kept here) ---------


@blu.custom_jvp
def _triple(x):
    return 3.0 * x


@_triple.defjvp
def _triple_jvp(primals, tangents):
    return _triple(primals[0]), _triple(tangents[0])  # the rule applies the function to tangents


def test_custom_jvp_applying_f_to_tangents_in_reverse_mode():
    """A JVP rule that applies the function to its tangents left custom_jvp_call without a
    transpose rule (a known bug of issue #39, fixed on seam by the custom_jvp change)."""
    x = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(np.asarray(blu.jvp(_triple, (x,), (np.ones(3),))[1]), 3.0)
    g = blu.grad(lambda v: bnp.sum(_triple(v) * v))(x)  # d/dv sum(3 v^2) = 6 v
    np.testing.assert_allclose(np.asarray(g), 6 * x, rtol=1e-12)
