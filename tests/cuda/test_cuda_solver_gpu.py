"""GPU tests of the linear-algebra kernels on cuSOLVER/cuBLAS (``blu.cuda.solver``).

Marked ``gpu``; skipped unless ``blu.cuda.is_available()`` finds a real GPU (not the simulated
one of ``BLU_FAKE_GPU``). Run on the GPU machine by ``scripts/gpu_check.sh`` (nvmath-python from
``.whl/``). Fixed small shapes, float32 and float64, batches including size 1; references are
numpy float64: reconstructions (``L L^T = A``, ``Q R = A``, ``U S V^T = A``, ``A V = V W``,
``P A = L U``), solve residuals, orthonormality, and the CPU kernels' values where they are
unique (Cholesky factors, eigenvalues, singular values). The layout logic itself is tested on the
CPU against documented-behaviour stand-ins in test_cuda_solver_cpu.py.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import blu
import blu.cuda as bc
from blu.core import lapack as cpu
from blu.lax.linalg import LinAlgError


def _real_gpu() -> bool:
    return bc.is_available() and bc.devices()[0].platform == "cuda"


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _real_gpu(), reason="needs an NVIDIA GPU and cuda-python"),
]

if _real_gpu():
    from blu.cuda import solver

SQUARE = [(5, 5), (3, 4, 4), (1, 3, 3), (2, 2, 6, 6)]
RECT = [(6, 4), (4, 6), (5, 5), (3, 6, 4), (2, 4, 6), (1, 5, 3)]
DTYPES = [np.float32, np.float64]


def rand(shape, seed, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def spd(shape, seed, dtype=np.float64):
    x = rand(shape, seed)
    return (x @ np.swapaxes(x, -1, -2) + shape[-1] * np.eye(shape[-1])).astype(dtype)


def put(x):
    return bc.device_put(np.ascontiguousarray(x))


def close(x, ref, dtype, scale=1.0):
    """Max abs error within ``tol * scale``: float32 2e-5, float64 1e-12 (n <= 6, O(1) data)."""
    err = np.max(np.abs(np.asarray(x, np.float64) - ref), initial=0.0)
    assert err <= {np.float32: 2e-5, np.float64: 1e-12}[dtype] * max(1.0, scale), err


def mT(x):
    return np.swapaxes(x, -1, -2)


def test_libraries_are_found_and_handles_bound_to_the_stream():
    found = solver.preload_libraries()
    assert "cusolver" in found and "cublas" in found
    dev = bc.devices()[0]
    h = solver.handles(dev)
    assert h.dn.get_stream(h.dn_handle) == dev.stream_id
    assert h.blas.get_stream(h.blas_handle) == dev.stream_id
    assert solver.handles(dev) is h


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SQUARE)
def test_cholesky(shape, dtype):
    a = spd(shape, 1, dtype)
    junk = np.triu(rand(shape, 2), 1).astype(dtype)  # never read
    out = np.asarray(solver.cholesky(put(a + junk)))
    assert out.dtype == dtype and np.all(np.triu(out, 1) == 0)
    scale = np.abs(a).max()
    close(out @ mT(out), a.astype(np.float64), dtype, scale)
    close(out, cpu.cholesky(a.astype(np.float64)), dtype, scale)


@pytest.mark.parametrize("dtype", DTYPES)
def test_batched_cholesky_matches_one_matrix_at_a_time(dtype):
    """potrfBatched (+ the copy out of its triangle) against potrf on each matrix: the other
    triangle, which potrfBatched uses as a workspace, must come back as exact zeros."""
    a = spd((3, 5, 5), 21, dtype) + np.triu(rand((3, 5, 5), 22), 1).astype(dtype)
    batched = np.asarray(solver.cholesky(put(a)))
    one_by_one = np.stack([np.asarray(solver.cholesky(put(m))) for m in a])
    assert np.all(np.triu(batched, 1) == 0)
    close(batched, one_by_one, dtype, np.abs(a).max())


@pytest.mark.parametrize("dtype", DTYPES)
def test_cholesky_not_positive_definite_gives_nan(dtype):
    a = spd((3, 4, 4), 3, dtype)
    a[1] = -a[1]
    out = np.asarray(solver.cholesky(put(a)))
    assert np.isnan(out[1]).all() and np.isfinite(out[[0, 2]]).all()
    one = np.asarray(solver.cholesky(put(a[1])))  # the unbatched call (potrf, not Batched)
    assert np.isnan(one).all()
    with blu.config.override(debug_nans=True), pytest.raises(LinAlgError, match="positive"):
        solver.cholesky(put(a))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("left_side", [True, False])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("transpose_a", [True, False])
@pytest.mark.parametrize("unit_diagonal", [True, False])
@pytest.mark.parametrize("batch,m,k", [((), 5, 3), ((3,), 4, 6), ((1,), 3, 1)])
def test_triangular_solve(batch, m, k, dtype, left_side, lower, transpose_a, unit_diagonal):
    a = rand(batch + (m, m), 4) + 3 * np.eye(m)  # the other triangle is junk, never read
    b = rand(batch + ((m, k) if left_side else (k, m)), 5)
    params = dict(left_side=left_side, lower=lower, transpose_a=transpose_a,
                  unit_diagonal=unit_diagonal)  # fmt: skip
    x = np.asarray(solver.triangular_solve(put(a.astype(dtype)), put(b.astype(dtype)), **params))
    t = np.tril(a, -int(unit_diagonal)) if lower else np.triu(a, int(unit_diagonal))
    t = t + np.eye(m) * unit_diagonal
    op = mT(t) if transpose_a else t
    close(op @ x if left_side else x @ op, b, dtype, 10)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SQUARE)
def test_lu(shape, dtype):
    a = rand(shape, 6, dtype)
    lu_, piv, perm = map(np.asarray, solver.lu(put(a)))
    assert piv.dtype == perm.dtype == np.int32 and piv.shape == perm.shape == shape[:-1]
    assert np.all(piv >= np.arange(shape[-1]))  # LAPACK: row j swapped with a row at or below
    low = np.tril(lu_, -1) + np.eye(shape[-1])
    close(np.take_along_axis(a, perm[..., None], -2), low @ np.triu(lu_), dtype, 10)
    np.testing.assert_array_equal(perm, solver.permutation_from_pivots(piv))
    if dtype == np.float64:  # both pick the largest |pivot|: the same rows on random data
        np.testing.assert_array_equal(piv, cpu.lu(a)[1])


def test_lu_singular_gives_a_zero_pivot():
    lu_ = np.asarray(solver.lu(put(np.ones((2, 3, 3))))[0])
    assert (np.diagonal(lu_, 0, -2, -1) == 0).any(axis=-1).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("full_matrices", [True, False])
@pytest.mark.parametrize("shape", RECT)
def test_qr(shape, dtype, full_matrices):
    a = rand(shape, 7, dtype)
    q, r = map(np.asarray, solver.qr(put(a), full_matrices=full_matrices))
    rq, rr = cpu.qr(a, full_matrices=full_matrices)
    assert (q.shape, r.shape, q.dtype) == (rq.shape, rr.shape, dtype)
    assert np.all(np.tril(r, -1) == 0)
    close(q @ r, a.astype(np.float64), dtype, 10)
    close(mT(q) @ q, np.eye(q.shape[-1]), dtype, 10)
    k = min(shape[-2:])
    diag = lambda x: np.abs(np.diagonal(x, 0, -2, -1)[..., :k])  # noqa: E731
    close(diag(r), diag(rr.astype(np.float64)), dtype, 10)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", RECT)
def test_geqrf_and_householder_product(shape, dtype):
    """geqrf rebuilds ``a`` (``Q R``, ``Q`` by householder_product from its reflectors);
    householder_product of fixed reflectors (the CPU's) is unique: equal to the CPU kernel's."""
    a = rand(shape, 17, dtype)
    k = min(shape[-2:])
    out, taus = map(np.asarray, solver.geqrf(put(a)))
    assert out.shape == a.shape and taus.shape == shape[:-2] + (k,) and out.dtype == dtype
    refl = np.ascontiguousarray(out[..., :, :k])
    q = np.asarray(solver.householder_product(put(refl), put(taus)))
    close(q @ np.triu(out[..., :k, :]), a.astype(np.float64), dtype, 10)
    close(mT(q) @ q, np.eye(k), dtype, 10)
    ref_out, ref_taus = cpu.geqrf(a)
    diag = lambda x: np.abs(np.diagonal(x, 0, -2, -1))  # noqa: E731
    close(diag(out), diag(ref_out.astype(np.float64)), dtype, 10)
    ref_refl = np.ascontiguousarray(ref_out[..., :, :k])
    got = np.asarray(solver.householder_product(put(ref_refl), put(ref_taus)))
    close(got, cpu.householder_product(ref_refl, ref_taus).astype(np.float64), dtype, 10)
    if k > 1:  # fewer reflectors than columns
        few = np.ascontiguousarray(ref_taus[..., : k - 1])
        got = np.asarray(solver.householder_product(put(ref_refl), put(few)))
        close(got, cpu.householder_product(ref_refl, few).astype(np.float64), dtype, 10)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("shape", SQUARE)
def test_eigh(shape, dtype, lower):
    sym = rand(shape, 8)
    sym = sym + mT(sym)
    junk = rand(shape, 9)  # the other triangle is never read
    tri = np.tril(sym) + np.triu(junk, 1) if lower else np.triu(sym) + np.tril(junk, -1)
    v, w = map(np.asarray, solver.eigh(put(tri.astype(dtype)), lower=lower))
    assert np.all(np.diff(w, axis=-1) >= 0)
    close(sym @ v, v * w[..., None, :], dtype, 10)
    close(w, np.linalg.eigvalsh(sym), dtype, 10)
    close(mT(v) @ v, np.eye(shape[-1]), dtype, 10)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("full_matrices", [True, False])
@pytest.mark.parametrize("shape", RECT)
def test_svd(shape, dtype, full_matrices):
    a = rand(shape, 10, dtype)
    s, u, vt = map(np.asarray, solver.svd(put(a), full_matrices=full_matrices, compute_uv=True))
    rs, ru, rvt = cpu.svd(a, full_matrices=full_matrices, compute_uv=True)
    assert (s.shape, u.shape, vt.shape) == (rs.shape, ru.shape, rvt.shape)
    k = s.shape[-1]
    close(u[..., :k] * s[..., None, :] @ vt[..., :k, :], a.astype(np.float64), dtype, 10)
    close(mT(u) @ u, np.eye(u.shape[-1]), dtype, 10)
    close(vt @ mT(vt), np.eye(vt.shape[-2]), dtype, 10)
    close(s, np.linalg.svd(a.astype(np.float64), compute_uv=False), dtype, 10)
    (s_only,) = solver.svd(put(a), full_matrices=full_matrices, compute_uv=False)
    close(np.asarray(s_only), rs.astype(np.float64), dtype, 10)


@pytest.mark.parametrize("name", ["cholesky", "lu", "qr", "eigh", "svd"])
def test_bfloat16_is_computed_in_float32(name):
    a = spd((2, 4, 4), 12).astype(ml_dtypes.bfloat16)
    params = {"qr": {"full_matrices": True}, "eigh": {"lower": True},
              "svd": {"full_matrices": True, "compute_uv": True}}.get(name, {})  # fmt: skip
    outs = solver.GPU_KERNELS[name](put(a), **params)
    refs = getattr(cpu, name)(a, **params)
    if name == "cholesky":
        outs, refs = [outs], [refs]
    for o, r in zip(map(np.asarray, outs), refs):
        assert o.dtype == r.dtype and o.shape == r.shape
        if name in ("cholesky", "lu") or o.ndim == a.ndim - 1:  # (vectors: signs may differ)
            np.testing.assert_allclose(o.astype(np.float64), r.astype(np.float64), atol=0.1)


@pytest.mark.parametrize("name,shape", [("qr", (3, 0)), ("svd", (0, 3)), ("cholesky", (2, 0, 0))])
def test_empty_inputs(name, shape):
    params = {"qr": {"full_matrices": True},
              "svd": {"full_matrices": True, "compute_uv": True}}.get(name, {})  # fmt: skip
    outs = solver.GPU_KERNELS[name](put(np.zeros(shape)), **params)
    refs = getattr(cpu, name)(np.zeros(shape), **params)
    if name == "cholesky":
        outs, refs = [outs], [refs]
    for o, r in zip(map(np.asarray, outs), refs):
        np.testing.assert_array_equal(o, r)
