"""The linear-algebra primitives and the FFT compiled for the CPU run as library nodes
(``blu/lower/cpu/libraries.py``: LAPACK through numpy/scipy, pocketfft writing into the planned
output), never host fallbacks: checked against float64 numpy/scipy references over shapes with
size-0 and size-1 batch axes and non-power-of-two sizes, NaN where meaningful, and grads through
jit against finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from helpers import check_grads
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.lax as lax
import blu.lax.linalg as la
from blu.lower.plan.nodes import NodeKind


def assert_library(f, *args, n: int = 1):
    """``f`` compiles for the CPU with ``n`` library nodes and no host fallback."""
    exe = blu.jit(f).lower(*args, target="cpu").compile().executable
    kinds = [nd.kind for nd in exe.plan.nodes]
    assert NodeKind.FALLBACK not in kinds and exe.fallbacks == [], exe.plan
    assert kinds.count(NodeKind.LIBRARY) == n, exe.plan


def _rng(*shape_bits) -> np.random.Generator:
    return np.random.default_rng(abs(hash(shape_bits)) % 2**32)


# ---- fft -----------------------------------------------------------------------------------------

_REF = {"FFT": np.fft.fftn, "IFFT": np.fft.ifftn, "RFFT": np.fft.rfftn, "IRFFT": np.fft.irfftn}


@st.composite
def fft_cases(draw):
    fft_type = draw(st.sampled_from(sorted(_REF)))
    k = draw(st.integers(1, 3))
    lengths = tuple(draw(st.lists(st.integers(1, 7), min_size=k, max_size=k)))
    batch = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    single = draw(st.booleans())
    return fft_type, lengths, batch, single


@given(fft_cases())
def test_fft_is_a_library_node_matching_pocketfft_in_float64(case):
    fft_type, lengths, batch, single = case
    rng = _rng(*case)
    in_shape = batch + lengths
    if fft_type == "IRFFT":
        in_shape = batch + lengths[:-1] + (lengths[-1] // 2 + 1,)
    x = rng.standard_normal(in_shape)
    if fft_type != "RFFT":
        x = x + 1j * rng.standard_normal(in_shape)
    if single:
        x = x.astype(np.complex64 if np.iscomplexobj(x) else np.float32)
    f = lambda a: lax.fft(a * 2, fft_type, lengths)  # noqa: E731  (a kernel, then the library)
    assert_library(f, x)
    got = np.asarray(blu.jit(f)(x))
    axes = tuple(range(len(batch), len(in_shape)))
    want = _REF[fft_type](2 * x.astype(np.complex128 if np.iscomplexobj(x) else np.float64),
                          s=lengths, axes=axes) if x.size else np.zeros(got.shape)  # fmt: skip
    assert got.shape == want.shape
    tol = 2e-5 * max(1, np.prod(lengths)) if single else 1e-12 * max(1, np.prod(lengths))
    scale = max(1.0, float(np.abs(want).max(initial=0)))
    np.testing.assert_allclose(got, want, atol=tol * scale, rtol=tol)


def test_fft_of_a_nan_spreads_only_within_its_transform():
    x = np.arange(12, dtype=np.complex128).reshape(3, 4)
    x[1, 2] = np.nan
    got = np.asarray(blu.jit(lambda a: lax.fft(a, "FFT", (4,)))(x))
    assert np.isnan(got[1]).all() and np.isfinite(got[[0, 2]]).all()
    np.testing.assert_allclose(got[[0, 2]], np.fft.fft(x[[0, 2]]), atol=1e-12)


def test_fft_grad_through_jit():
    x = np.random.default_rng(1).standard_normal((2, 5))

    def f(a):  # a power spectrum, and a round trip: the RFFT, FFT and IRFFT transposes
        y = lax.fft(a, "RFFT", (5,))
        z = lax.fft(y * y, "FFT", (3,))
        return lax.real(z * lax.conj(z)) + lax.fft(y * 2, "IRFFT", (5,))[..., :3]

    check_grads(blu.jit(f), [x], rtol=1e-6, atol=1e-6)


# ---- LAPACK --------------------------------------------------------------------------------------

batches = st.lists(st.integers(0, 2), max_size=2).map(tuple)
sizes = st.integers(0, 5)


def _spd(rng, batch, n, dtype=np.float64):
    a = rng.standard_normal(batch + (n, n))
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(dtype)


@given(batches, sizes, st.booleans())
def test_cholesky_and_triangular_solve_match_scipy(batch, n, single):
    dt = np.float32 if single else np.float64
    rng = _rng(batch, n, single, "chol")
    a = _spd(rng, batch, n, dt)
    b = rng.standard_normal(batch + (n, 3)).astype(dt)

    def f(a, b):
        c = la.cholesky(a, symmetrize_input=False)
        return c, la.triangular_solve(c, b, left_side=True, lower=True)

    assert_library(f, a, b, n=2)
    c, x = (np.asarray(v) for v in blu.jit(f)(a, b))
    tol = 1e-4 if single else 1e-10
    for i in np.ndindex(batch):
        want = scipy.linalg.cholesky(a[i].astype(np.float64), lower=True)
        np.testing.assert_allclose(c[i], want, atol=tol, rtol=tol)
        np.testing.assert_allclose(
            x[i], scipy.linalg.solve_triangular(want, b[i].astype(np.float64), lower=True),
            atol=tol, rtol=tol)  # fmt: skip


def test_cholesky_of_an_indefinite_matrix_is_nan_in_a_compiled_program():
    a = np.stack([np.eye(3), -np.eye(3)])
    got = np.asarray(blu.jit(lambda a: la.cholesky(a))(a))
    np.testing.assert_array_equal(got[0], np.eye(3))
    assert np.isnan(got[1]).all()


@given(batches, sizes, sizes)
def test_lu_qr_svd_eigh_match_scipy(batch, m, n):
    rng = _rng(batch, m, n, "fact")
    a = rng.standard_normal(batch + (m, n))
    sq = rng.standard_normal(batch + (n, n))
    sym = sq + np.swapaxes(sq, -1, -2)

    def f(a, sq, sym):
        return (*la.lu(sq), *la.qr(a, full_matrices=False), *la.svd(a, full_matrices=False),
                *la.eigh(sym))  # fmt: skip

    assert_library(f, a, sq, sym, n=4)
    lu, piv, perm, q, r, u, s, vt, v, w = (np.asarray(o) for o in blu.jit(f)(a, sq, sym))
    for i in np.ndindex(batch):
        p_, l_, u_ = scipy.linalg.lu(sq[i]) if n else (None, None, None)
        if n:
            low = np.tril(lu[i], -1) + np.eye(n)
            np.testing.assert_allclose(low @ np.triu(lu[i]), sq[i][perm[i]], atol=1e-10)
            np.testing.assert_allclose(np.triu(lu[i]), u_, atol=1e-10)
        np.testing.assert_allclose(q[i] @ r[i], a[i], atol=1e-10)
        np.testing.assert_allclose(s[i], scipy.linalg.svdvals(a[i]) if a[i].size else s[i],
                                   atol=1e-10)  # fmt: skip
        np.testing.assert_allclose((u[i] * s[i]) @ vt[i], a[i], atol=1e-10)
        np.testing.assert_allclose(w[i], scipy.linalg.eigvalsh(sym[i]) if n else w[i], atol=1e-10)
        np.testing.assert_allclose((v[i] * w[i]) @ v[i].T, sym[i], atol=1e-10)


@pytest.mark.parametrize("name", ["cholesky", "qr", "eigh", "svd", "solve"])
def test_linalg_grads_through_jit(name):
    rng = np.random.default_rng(3)
    a = _spd(rng, (2,), 4) if name in ("cholesky", "solve") else rng.standard_normal((2, 4, 3))
    fs = {
        "cholesky": lambda a: la.cholesky(a),
        "qr": lambda a: la.qr(a, full_matrices=False)[1],
        "eigh": lambda a: la.eigh(a[..., :3, :] @ lax.transpose(a[..., :3, :], (0, 2, 1)))[1],
        "svd": lambda a: la.svd(a, full_matrices=False, compute_uv=False),
        "solve": lambda a: la.triangular_solve(a, a, left_side=False, lower=True),
    }
    check_grads(blu.jit(fs[name]), [a], rtol=1e-5, atol=1e-6)
