"""The GPU linear-algebra kernels (``blu.cuda.solver``) on the CPU.

The pure-Python parts are tested directly: C names of the bindings, pivots to permutations,
operand checks (finding and loading the libraries: ``test_cuda_solver_libraries.py``). The
kernels themselves run end to end on a simulated device (``FakeDevice``, real host memory)
whose cuSOLVER/cuBLAS stand-ins below read and write column-major matrices at the given
addresses and leading dimensions as the libraries' documentation says, computing with
LAPACK/BLAS (scipy) of the same precision: ``potrf`` touches only its triangle while
``potrfBatched`` destroys the other one (NaN here), ``getrf`` writes 1-based pivots, ``gesvd``
refuses ``m < n`` and destroys its input, ``trmm`` is out of place, ``geam`` checks its
in-place rules. Results are checked against numpy float64 by reconstruction (``L L^T = A``,
``Q R = A``, ``U S V^T = A``, ``A V = V W``, ``P A = L U``, residuals) and against the CPU
kernels. The same kernels on the real libraries are tested in test_cuda_solver_gpu.py.
"""

from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np
import pytest
import scipy.linalg
from hypothesis import given
from hypothesis import strategies as st
from scipy.linalg import blas, lapack

import blu
import blu.cuda as bc
from blu.core import lapack as cpu
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from blu.cuda import solver
from blu.cuda.errors import CudaError
from blu.cuda.fake import FakeDevice
from blu.lax.linalg import LinAlgError

# ---- stand-ins for nvmath.bindings.cusolverDn / cublas ----------------------------------------


class FakeStatus(RuntimeError):
    """What nvmath raises for a failing status (cuSOLVERError / cuBLASError)."""


def mat(ptr: int, rows: int, cols: int, ld: int, dtype) -> np.ndarray:
    """A writable view of the column-major ``rows x cols`` matrix at ``ptr``, leading dim ``ld``."""
    dtype = np.dtype(dtype)
    if ld < max(1, rows):
        raise FakeStatus(f"INVALID_VALUE: ld {ld} < rows {rows}")
    if rows == 0 or cols == 0:
        return np.empty((rows, cols), dtype)
    nbytes = ((cols - 1) * ld + rows) * dtype.itemsize
    buf = (ctypes.c_char * nbytes).from_address(ptr)
    return np.ndarray((rows, cols), dtype, buf, strides=(dtype.itemsize, ld * dtype.itemsize))


def vec(ptr: int, n: int, dtype, inc: int = 1) -> np.ndarray:
    return mat(ptr, 1, n, inc, dtype)[0]


def scalar(ptr: int, dtype) -> float:
    return float(vec(ptr, 1, dtype)[0])


def fortran(x: np.ndarray) -> np.ndarray:
    return np.array(x, order="F", copy=True)


class _Fake:
    """Common parts: handles bound to streams, typed names (``s``/``d`` + routine), a call log."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.streams: dict[int, int] = {}
        self.next_handle = 100

    def create(self) -> int:
        self.next_handle += 1
        return self.next_handle

    def destroy(self, h: int) -> None:
        self.streams.pop(h)

    def set_stream(self, h: int, stream: int) -> None:
        self.streams[h] = stream

    def get_stream(self, h: int) -> int:
        return self.streams[h]

    def __getattr__(self, name: str):
        impl = getattr(type(self), "_" + name[1:], None)
        if name[:1] not in ("s", "d") or impl is None:
            raise AttributeError(name)
        dt = np.float32 if name[0] == "s" else np.float64

        def call(h, *args):
            assert h in self.streams, "call on a handle without a stream"
            self.calls.append(name)
            return impl(self, dt, *args)

        return call


class FakeCublas(_Fake):
    """``cublas<t>geam``, ``trmm``, ``trsm``, ``trsmBatched``, ``copy`` (host pointer mode)."""

    def _geam(self, dt, ta, tb, m, n, alpha, a, lda, beta, b, ldb, c, ldc):
        if (c == a and (ta != 0 or lda != ldc)) or (c == b and (tb != 0 or ldb != ldc)):
            raise FakeStatus("INVALID_VALUE: geam in place needs op N and equal ld")
        opa = mat(a, *((m, n) if ta == 0 else (n, m)), lda, dt)
        opb = mat(b, *((m, n) if tb == 0 else (n, m)), ldb, dt)
        opa, opb = (opa if ta == 0 else opa.T), (opb if tb == 0 else opb.T)
        al, be = scalar(alpha, dt), scalar(beta, dt)
        assert be != 0 or not np.any(opb), "blu's contract: beta = 0 only over zeros"
        mat(c, m, n, ldc, dt)[...] = al * opa + be * opb

    def _trmm(self, dt, side, uplo, trans, diag, m, n, alpha, a, lda, b, ldb, c, ldc):
        k = m if side == 0 else n
        if c == a:
            raise FakeStatus("INVALID_VALUE: trmm output overlaps A")
        out = blas.get_blas_funcs("trmm", dtype=dt)(
            scalar(alpha, dt), fortran(mat(a, k, k, lda, dt)), fortran(mat(b, m, n, ldb, dt)),
            side=side, lower=int(uplo == 0), trans_a=trans, diag=diag,
        )  # fmt: skip
        mat(c, m, n, ldc, dt)[...] = out

    def _trsm(self, dt, side, uplo, trans, diag, m, n, alpha, a, lda, b, ldb):
        k = m if side == 0 else n
        bm = mat(b, m, n, ldb, dt)
        bm[...] = blas.get_blas_funcs("trsm", dtype=dt)(
            scalar(alpha, dt), fortran(mat(a, k, k, lda, dt)), fortran(bm),
            side=side, lower=int(uplo == 0), trans_a=trans, diag=diag,
        )  # fmt: skip

    def _trsm_batched(self, dt, side, uplo, trans, diag, m, n, alpha, pa, lda, pb, ldb, count):
        for ai, bi in zip(vec(pa, count, np.uint64), vec(pb, count, np.uint64)):
            self._trsm(dt, side, uplo, trans, diag, m, n, alpha, int(ai), lda, int(bi), ldb)

    def _copy(self, dt, n, x, incx, y, incy):
        vec(y, n, dt, incy)[...] = vec(x, n, dt, incx)


class FakeCusolverDn(_Fake):
    """``cusolverDn<t>`` potrf(Batched), getrf, geqrf, orgqr, syevd, gesvd and buffer sizes."""

    def _lwork(self, *dims) -> int:
        return 3 * int(np.prod([max(d, 1) for d in dims])) + 5

    def _check(self, lwork, need):
        if lwork < need:
            raise FakeStatus(f"INVALID_VALUE: lwork {lwork} < {need}")

    def _potrf_buffer_size(self, dt, uplo, n, a, lda):
        return self._lwork(n, n)

    def _potrf(self, dt, uplo, n, a, lda, ws, lwork, info):
        self._check(lwork, self._lwork(n, n))
        am = mat(a, n, n, lda, dt)
        c, inf = lapack.get_lapack_funcs("potrf", dtype=dt)(
            fortran(am), lower=int(uplo == 0), clean=0
        )
        am[...], vec(info, 1, np.int32)[0] = c, inf  # the other triangle stays as it was

    def _potrf_batched(self, dt, uplo, n, parray, lda, info, count):
        # cuSOLVER: "the other part of A is used as a workspace. For example, if uplo is
        # CUBLAS_FILL_MODE_UPPER, upper triangle of A contains Cholesky factor U and lower
        # triangle of A is destroyed after potrfBatched" (an H200 left the mirror of U there);
        # here it is NaN, so that reading it shows. Only the uplo triangle is read.
        for i, p in enumerate(vec(parray, count, np.uint64)):
            self._potrf(dt, uplo, n, int(p), lda, 0, 10**9, info + 4 * i)
            am = mat(int(p), n, n, lda, dt)
            am[np.tril_indices(n, -1) if uplo == 1 else np.triu_indices(n, 1)] = np.nan

    def _getrf_buffer_size(self, dt, m, n, a, lda):
        return self._lwork(m, n)

    def _getrf(self, dt, m, n, a, lda, ws, ipiv, info):
        am = mat(a, m, n, lda, dt)
        lu, piv, inf = lapack.get_lapack_funcs("getrf", dtype=dt)(fortran(am))
        am[...] = lu
        vec(ipiv, min(m, n), np.int32)[...] = piv + 1  # LAPACK's 1-based pivots
        vec(info, 1, np.int32)[0] = inf

    def _geqrf_buffer_size(self, dt, m, n, a, lda):
        return self._lwork(m, n)

    def _geqrf(self, dt, m, n, a, lda, tau, ws, lwork, info):
        self._check(lwork, self._lwork(m, n))
        am = mat(a, m, n, lda, dt)
        qr, t, _, inf = lapack.get_lapack_funcs("geqrf", dtype=dt)(fortran(am))
        am[...], vec(tau, min(m, n), dt)[...], vec(info, 1, np.int32)[0] = qr, t, inf

    def _orgqr_buffer_size(self, dt, m, n, k, a, lda, tau):
        return self._lwork(m, n)

    def _orgqr(self, dt, m, n, k, a, lda, tau, ws, lwork, info):
        self._check(lwork, self._lwork(m, n))
        if not m >= n >= k:
            raise FakeStatus("INVALID_VALUE: orgqr needs m >= n >= k")
        am = mat(a, m, n, lda, dt)
        q, _, inf = lapack.get_lapack_funcs("orgqr", dtype=dt)(fortran(am), vec(tau, k, dt))
        am[...], vec(info, 1, np.int32)[0] = q, inf

    def _syevd_buffer_size(self, dt, jobz, uplo, n, a, lda, w):
        return self._lwork(n, n)

    def _syevd(self, dt, jobz, uplo, n, a, lda, w, ws, lwork, info):
        self._check(lwork, self._lwork(n, n))
        am = mat(a, n, n, lda, dt)
        ev, v, inf = lapack.get_lapack_funcs("syevd", dtype=dt)(
            fortran(am), compute_v=jobz, lower=int(uplo == 0)
        )
        vec(w, n, dt)[...], vec(info, 1, np.int32)[0] = ev, inf
        if jobz:
            am[...] = v

    def _gesvd_buffer_size(self, dt, m, n):
        return self._lwork(m, n)

    def _gesvd(self, dt, jobu, jobvt, m, n, a, lda, s, u, ldu, vt, ldvt, ws, lwork, rw, info):
        self._check(lwork, self._lwork(m, n))
        jobs = (chr(jobu), chr(jobvt))
        if m < n or jobs not in (("N", "N"), ("A", "A"), ("S", "A")):
            raise FakeStatus(f"INVALID_VALUE: gesvd m={m} n={n} jobs={jobs}")
        am = mat(a, m, n, lda, dt)
        uu, ss, vvt, inf = lapack.get_lapack_funcs("gesvd", dtype=dt)(
            fortran(am), compute_uv=int(jobs[0] != "N"), full_matrices=int(jobs[0] == "A")
        )
        vec(s, n, dt)[...], vec(info, 1, np.int32)[0] = ss, inf
        if jobs[0] != "N":
            mat(u, m, uu.shape[1], ldu, dt)[...] = uu
            mat(vt, n, n, ldvt, dt)[...] = vvt
        am[...] = np.nan  # "the contents of A are destroyed"


def simulated(dn=None) -> FakeDevice:
    d = FakeDevice()
    solver.use_libraries(d, dn or FakeCusolverDn(), FakeCublas())
    return d


@pytest.fixture
def dev():
    d = simulated()
    yield d
    solver._HANDLES.pop(d, None)


def put(x, d):
    return bc.device_put(np.ascontiguousarray(x), d)


def close(x, ref, dtype, scale=1.0):
    """``|x - ref| <= 50 eps scale`` elementwise (float32 eps 1.2e-7, float64 2.2e-16)."""
    err = np.max(np.abs(np.asarray(x, np.float64) - ref), initial=0.0)
    assert err <= 50 * np.finfo(dtype).eps * max(1.0, scale), err


def rand(shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def spd(shape, seed=0, dtype=np.float64):
    x = rand(shape, seed)
    n = shape[-1]
    return (x @ np.swapaxes(x, -1, -2) + n * np.eye(n)).astype(dtype)


SQUARE = [(1, 1), (5, 5), (3, 4, 4), (1, 3, 3), (2, 2, 3, 3)]
RECT = [(6, 4), (4, 6), (5, 5), (1, 1), (1, 4), (4, 1), (2, 6, 3), (3, 2, 5), (1, 3, 3)]
DTYPES = [np.float32, np.float64]

# ---- pure-Python logic -------------------------------------------------------------------------


def test_c_names_of_the_bindings():
    assert solver.c_name("cusolverDn", "spotrf_buffer_size") == "cusolverDnSpotrf_bufferSize"
    assert solver.c_name("cusolverDn", "dpotrf_batched") == "cusolverDnDpotrfBatched"
    assert solver.c_name("cusolverDn", "set_stream") == "cusolverDnSetStream"
    assert solver.c_name("cublas", "strsm_batched") == "cublasStrsmBatched"
    assert solver.c_name("cublas", "dgeam") == "cublasDgeam"


@given(st.integers(1, 6), st.integers(0, 3), st.integers(0, 10**6))
def test_permutation_from_pivots_reorders_rows_as_getrf(n, batch, seed):
    a = rand((batch, n, n), seed)
    lus = [scipy.linalg.lu_factor(m) for m in a]
    piv = np.array([p for _, p in lus], np.int32).reshape(batch, n)
    perm = solver.permutation_from_pivots(piv)
    for m, (lu_, _), p in zip(a, lus, perm):
        low = np.tril(lu_, -1) + np.eye(n)
        np.testing.assert_allclose(m[p], low @ np.triu(lu_), atol=1e-10)
        assert sorted(p) == list(range(n))


def test_operand_checks(dev):
    x = put(np.eye(3, dtype=np.float32), dev)
    ts = dict(left_side=True, lower=True, transpose_a=False, unit_diagonal=False)
    with pytest.raises(BluTypeError, match="DeviceArrays"):
        solver.cholesky(np.eye(3))
    with pytest.raises(BluTypeError, match=r"i32\[3,3\]"):
        solver.cholesky(put(np.eye(3, dtype=np.int32), dev))
    with pytest.raises(BluTypeError, match="one dtype"):
        solver.triangular_solve(x, put(np.eye(3), dev), **ts)
    with pytest.raises(BluShapeError, match=r"\(\.\.\., m, n\)"):
        solver.cholesky(put(np.ones(3, np.float32), dev))
    with pytest.raises(BluValueError, match="are on"):
        solver.triangular_solve(x, put(np.eye(3, dtype=np.float32), FakeDevice()), **ts)
    with pytest.raises(BluShapeError, match="does not fit"):
        solver.triangular_solve(x, put(np.ones((2, 3), np.float32), dev), **ts)


def test_library_errors_name_the_call_and_shapes(dev):
    def broken(*args):
        raise FakeStatus("CUSOLVER_STATUS_INTERNAL_ERROR")

    solver.handles(dev).dn.spotrf_batched = broken
    with pytest.raises(CudaError, match=r"cusolverDnSpotrfBatched failed for cholesky of f32"):
        solver.cholesky(put(spd((2, 3, 3), dtype=np.float32), dev))


def test_handles_are_bound_to_the_device_stream(dev):
    h = solver.handles(dev)
    assert h.dn.get_stream(h.dn_handle) == dev.stream_id
    assert h.blas.get_stream(h.blas_handle) == dev.stream_id
    assert solver.handles(dev) is h


def test_a_simulated_device_without_libraries_runs_the_cpu_kernels():
    d = FakeDevice()  # (BLU_FAKE_GPU's device): no cuSOLVER, host memory
    a = spd((2, 3, 3))
    np.testing.assert_array_equal(np.asarray(solver.cholesky(put(a, d))), cpu.cholesky(a))
    assert d not in solver._HANDLES


def test_kernels_mirror_the_primitive_impls():
    from blu.lax.linalg import householder as h
    from blu.lax.linalg import primitives as p

    prims = [p.cholesky_p, p.triangular_solve_p, p.lu_p, p.qr_p, p.eigh_p, p.svd_p, h.geqrf_p,
             h.householder_product_p]  # fmt: skip
    assert sorted(solver.GPU_KERNELS) == sorted(q.name for q in prims)
    for q in prims:
        assert q.impl is getattr(cpu, q.name)  # the CPU kernel whose conventions are mirrored


# ---- kernels end to end on the simulated device ------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SQUARE)
def test_cholesky(dev, shape, dtype):
    a = spd(shape, 1, dtype)
    junk = np.triu(rand(shape, 2), 1).astype(dtype)  # the upper triangle is never read
    out = np.asarray(solver.cholesky(put(a + junk, dev)))
    assert out.dtype == dtype and np.all(np.triu(out, 1) == 0)
    scale = np.abs(a).max()
    close(out @ np.swapaxes(out, -1, -2), a.astype(np.float64), dtype, scale)
    close(out, cpu.cholesky(a), dtype, scale)
    calls = solver.handles(dev).dn.calls
    assert calls[-1].endswith("potrf_batched" if np.prod(shape[:-2]) > 1 else "potrf")


@pytest.mark.parametrize("uplo", [0, 1])
def test_stand_in_potrf_batched_destroys_the_other_triangle(uplo):
    """The stand-ins' contract, as cuSOLVER documents it: potrf leaves the other triangle
    as it was, potrfBatched uses it as a workspace (NaN here); both read only ``uplo``'s."""
    sym = spd((2, 4, 4), 20)
    other = np.tri(4, k=-1, dtype=bool) if uplo else np.tri(4, k=-1, dtype=bool).T
    mats = [fortran(np.where(other, 7.0, m)) for m in sym]  # the other triangle: junk
    dn, info = FakeCusolverDn(), np.zeros(2, np.int32)
    h = dn.create()
    dn.set_stream(h, 0)
    one = fortran(mats[0])
    dn.dpotrf(h, uplo, 4, one.ctypes.data, 4, 0, 10**9, info.ctypes.data)
    ptrs = np.array([m.ctypes.data for m in mats], np.uint64)
    dn.dpotrf_batched(h, uplo, 4, ptrs.ctypes.data, 4, info.ctypes.data, 2)
    for m, ref in zip([one] + mats, [sym[0], sym[0], sym[1]]):
        factor = scipy.linalg.cholesky(ref, lower=not uplo)
        np.testing.assert_allclose(np.where(other, 0, m), factor, atol=1e-12)
    assert (one[other] == 7.0).all()  # potrf: untouched
    assert all(np.isnan(m[other]).all() for m in mats)  # potrfBatched: destroyed
    assert (info == 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_cholesky_not_positive_definite_gives_nan(dev, dtype):
    a = spd((3, 4, 4), 3, dtype)
    a[1] = -a[1]
    out = np.asarray(solver.cholesky(put(a, dev)))
    assert np.isnan(out[1]).all() and np.isfinite(out[[0, 2]]).all()
    with blu.config.override(debug_nans=True), pytest.raises(LinAlgError, match="positive"):
        solver.cholesky(put(a, dev))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("left_side", [True, False])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("transpose_a", [True, False])
@pytest.mark.parametrize("unit_diagonal", [True, False])
@pytest.mark.parametrize("batch,m,k", [((), 4, 3), ((3,), 3, 5), ((1,), 1, 2), ((2, 2), 2, 1)])
def test_triangular_solve(dev, batch, m, k, dtype, left_side, lower, transpose_a, unit_diagonal):
    a = rand(batch + (m, m), 4) + 3 * np.eye(m)  # the other triangle is junk, never read
    b = rand(batch + ((m, k) if left_side else (k, m)), 5)
    params = dict(left_side=left_side, lower=lower, transpose_a=transpose_a,
                  unit_diagonal=unit_diagonal)  # fmt: skip
    args = [put(a.astype(dtype), dev), put(b.astype(dtype), dev)]
    x = np.asarray(solver.triangular_solve(*args, **params))
    t = np.tril(a, -int(unit_diagonal)) if lower else np.triu(a, int(unit_diagonal))
    t = t + np.eye(m) * unit_diagonal
    op = np.swapaxes(t, -1, -2) if transpose_a else t
    close(op @ x if left_side else x @ op, b, dtype, 10)
    close(x, cpu.triangular_solve(a.astype(dtype), b.astype(dtype), **params), dtype, 10)
    calls = solver.handles(dev).blas.calls
    assert calls[-1].endswith("trsm_batched" if np.prod(batch) > 1 else "trsm")


def test_triangular_solve_zero_diagonal(dev):
    a, b = np.eye(3), np.ones((3, 2))
    a[1, 1] = 0
    x = np.asarray(solver.triangular_solve(put(a, dev), put(b, dev), left_side=True, lower=True,
                                           transpose_a=False, unit_diagonal=False))  # fmt: skip
    assert not np.isfinite(x[1]).any()
    with blu.config.override(debug_nans=True), pytest.raises(LinAlgError, match="zero diagonal"):
        solver.triangular_solve(put(a, dev), put(b, dev), left_side=True, lower=True,
                                transpose_a=False, unit_diagonal=False)  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SQUARE)
def test_lu(dev, shape, dtype):
    a = rand(shape, 6, dtype)
    lu_, piv, perm = (np.asarray(o) for o in solver.lu(put(a, dev)))
    assert piv.dtype == perm.dtype == np.int32 and piv.shape == perm.shape == shape[:-1]
    low = np.tril(lu_, -1) + np.eye(shape[-1])
    close(np.take_along_axis(a, perm[..., None], -2), low @ np.triu(lu_), dtype, 10)
    ref = cpu.lu(a)
    np.testing.assert_array_equal(piv, ref[1])  # the same LAPACK pivoting
    np.testing.assert_array_equal(perm, ref[2])
    close(lu_, ref[0], dtype, 10)


def test_lu_singular(dev):
    a = np.ones((2, 3, 3))
    lu_ = np.asarray(solver.lu(put(a, dev))[0])
    assert (np.diagonal(lu_, 0, -2, -1) == 0).any(axis=-1).all()
    with blu.config.override(debug_nans=True), pytest.raises(LinAlgError, match="singular"):
        solver.lu(put(a, dev))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("full_matrices", [True, False])
@pytest.mark.parametrize("shape", RECT)
def test_qr(dev, shape, dtype, full_matrices):
    a = rand(shape, 7, dtype)
    q, r = (np.asarray(o) for o in solver.qr(put(a, dev), full_matrices=full_matrices))
    rq, rr = cpu.qr(a, full_matrices=full_matrices)
    assert q.shape == rq.shape and r.shape == rr.shape
    assert np.all(np.tril(r, -1) == 0)
    close(q @ r, a.astype(np.float64), dtype, 10)
    close(np.swapaxes(q, -1, -2) @ q, np.eye(q.shape[-1]), dtype, 10)
    close(q, rq, dtype, 10)  # LAPACK's Householder signs
    close(r, rr, dtype, 10)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("shape", SQUARE)
def test_eigh(dev, shape, dtype, lower):
    sym = rand(shape, 8)
    sym = sym + np.swapaxes(sym, -1, -2)
    junk = rand(shape, 9)  # the other triangle is never read
    tri = np.tril(sym) + np.triu(junk, 1) if lower else np.triu(sym) + np.tril(junk, -1)
    v, w = (np.asarray(o) for o in solver.eigh(put(tri.astype(dtype), dev), lower=lower))
    assert np.all(np.diff(w, axis=-1) >= 0)
    close(sym @ v, v * w[..., None, :], dtype, 10)
    close(w, np.linalg.eigvalsh(sym), dtype, 10)
    close(np.swapaxes(v, -1, -2) @ v, np.eye(shape[-1]), dtype, 10)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("full_matrices", [True, False])
@pytest.mark.parametrize("shape", RECT)
def test_svd(dev, shape, dtype, full_matrices):
    a = rand(shape, 10, dtype)
    outs = solver.svd(put(a, dev), full_matrices=full_matrices, compute_uv=True)
    s, u, vt = map(np.asarray, outs)
    rs, ru, rvt = cpu.svd(a, full_matrices=full_matrices, compute_uv=True)
    assert (s.shape, u.shape, vt.shape) == (rs.shape, ru.shape, rvt.shape)
    assert np.all(np.diff(s, axis=-1) <= 0)
    k = s.shape[-1]
    close(u[..., :k] * s[..., None, :] @ vt[..., :k, :], a.astype(np.float64), dtype, 10)
    close(np.swapaxes(u, -1, -2) @ u, np.eye(u.shape[-1]), dtype, 10)
    close(vt @ np.swapaxes(vt, -1, -2), np.eye(vt.shape[-2]), dtype, 10)
    close(s, rs, dtype, 10)
    (s_only,) = solver.svd(put(a, dev), full_matrices=full_matrices, compute_uv=False)
    close(np.asarray(s_only), rs, dtype, 10)


class GesvdFailsOnSecondMatrix(FakeCusolverDn):
    def _gesvd(self, dt, *args):
        super()._gesvd(dt, *args)
        if self.calls.count("dgesvd") % 3 == 2:  # the second matrix of each batch of 3
            vec(args[-1], 1, np.int32)[0] = 1  # info > 0: "did not converge"


def test_svd_failure_gives_nan_for_that_matrix():
    d = simulated(GesvdFailsOnSecondMatrix())
    try:
        outs = solver.svd(put(rand((3, 4, 3), 11), d), full_matrices=False, compute_uv=True)
        for o in map(np.asarray, outs):
            assert np.isnan(o[1]).all() and np.isfinite(o[[0, 2]]).all()
        with blu.config.override(debug_nans=True), pytest.raises(LinAlgError, match="converge"):
            solver.svd(put(rand((3, 4, 3), 11), d), full_matrices=False, compute_uv=False)
    finally:
        solver._HANDLES.pop(d, None)


@pytest.mark.parametrize("name", ["cholesky", "lu", "qr", "eigh", "svd"])
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
def test_half_precision_is_computed_in_float32(dev, name, dtype):
    a = spd((2, 3, 3), 12).astype(dtype)
    params = {"qr": {"full_matrices": True}, "eigh": {"lower": True},
              "svd": {"full_matrices": True, "compute_uv": True}}.get(name, {})  # fmt: skip
    outs = solver.GPU_KERNELS[name](put(a, dev), **params)
    refs = getattr(cpu, name)(a, **params)
    if name == "cholesky":
        outs, refs = [outs], [refs]
    for o, r in zip(map(np.asarray, outs), refs):
        assert o.dtype == r.dtype and o.shape == r.shape
        if name in ("cholesky", "lu") or o.ndim == a.ndim - 1:  # (vectors: signs may differ)
            np.testing.assert_allclose(o.astype(np.float64), r.astype(np.float64), atol=0.05)
    assert solver.handles(dev).dn.calls  # computed by the (stand-in) library, in float32
    assert all(c.startswith("s") for c in solver.handles(dev).dn.calls)


@given(
    st.lists(st.integers(0, 2), max_size=2),
    st.integers(0, 3),
    st.integers(0, 3),
    st.sampled_from(["cholesky", "lu", "qr", "eigh", "svd", "triangular_solve"]),
)
def test_shapes_and_empty_inputs_match_the_cpu_kernels(batch, m, n, name):
    d = simulated()
    try:
        square = name not in ("qr", "svd")
        shape = tuple(batch) + ((m, m) if square else (m, n))
        a = spd(shape, 13) if square else rand(shape, 13)
        params = {
            "qr": {"full_matrices": bool(n % 2)},
            "eigh": {"lower": True},
            "svd": {"full_matrices": bool(n % 2), "compute_uv": True},
            "triangular_solve": dict(left_side=True, lower=True, transpose_a=False,
                                     unit_diagonal=False),
        }.get(name, {})  # fmt: skip
        args = [a] + ([rand(tuple(batch) + (m, n), 14)] if name == "triangular_solve" else [])
        outs = solver.GPU_KERNELS[name](*[put(x, d) for x in args], **params)
        refs = getattr(cpu, name)(*args, **params)
        if not isinstance(refs, list):
            outs, refs = [outs], [refs]
        for o, r in zip(map(np.asarray, outs), refs):
            assert o.shape == r.shape and o.dtype == r.dtype
            if name in ("cholesky", "lu", "triangular_solve") or r.ndim == a.ndim - 1:
                np.testing.assert_allclose(o, r, atol=1e-8)
    finally:
        solver._HANDLES.pop(d, None)
