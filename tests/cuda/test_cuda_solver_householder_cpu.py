"""The GPU kernels of ``geqrf`` and ``householder_product`` (``blu.cuda.solver``: geam, cuSOLVER's
geqrf and orgqr, geam) on the simulated device of ``test_cuda_solver_cpu.py`` (its cuSOLVER and
cuBLAS stand-ins read and write column-major matrices as the libraries do): against numpy's
``qr(mode='raw')`` and the CPU kernels, the factorization rebuilt (``Q R = A``), batches, tall,
wide, square and empty shapes, ``k < n`` reflectors, half precision through float32."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from blu.core import lapack as cpu
from blu.cuda import solver
from tests.cuda.test_cuda_solver_cpu import DTYPES, RECT, close, put, rand, simulated


@pytest.fixture
def dev():
    d = simulated()
    yield d
    solver._HANDLES.pop(d, None)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", RECT)
def test_geqrf_and_householder_product(dev, shape, dtype):
    a = rand(shape, 21, dtype)
    m, n = shape[-2:]
    k = min(m, n)
    out, taus = (np.asarray(o) for o in solver.geqrf(put(a, dev)))
    h, tau = np.linalg.qr(a.astype(np.float64), mode="raw")  # numpy's h: geqrf's transposed
    assert out.shape == a.shape and taus.shape == shape[:-2] + (k,)
    assert out.dtype == taus.dtype == a.dtype
    close(out, np.swapaxes(h, -1, -2), dtype, 10)
    close(taus, tau, dtype, 10)
    refl = np.ascontiguousarray(out[..., :, :k])
    q = np.asarray(solver.householder_product(put(refl, dev), put(taus, dev)))
    close(q, cpu.householder_product(refl, taus), dtype, 10)
    close(q @ np.triu(out[..., :k, :]), a.astype(np.float64), dtype, 10)
    assert {"sgeqrf", "dgeqrf"} & set(solver.handles(dev).dn.calls)
    assert {"sorgqr", "dorgqr"} & set(solver.handles(dev).dn.calls)


@given(
    st.lists(st.integers(0, 2), max_size=2),
    st.integers(0, 4),
    st.integers(0, 3),
    st.integers(0, 3),
)
def test_shapes_and_empty_inputs_match_the_cpu_kernels(batch, n, extra, k):
    d = simulated()
    try:
        m, k = n + extra, min(k, n)
        a = rand(tuple(batch) + (m, n), 22)
        taus = rand(tuple(batch) + (k,), 23)
        got = np.asarray(solver.householder_product(put(a, d), put(taus, d)))
        want = cpu.householder_product(a, taus)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, atol=1e-12)
        wide = rand(tuple(batch) + (n, m), 24)  # geqrf of wide (and tall) matrices
        for x in (a, wide):
            outs = [np.asarray(o) for o in solver.geqrf(put(x, d))]
            for o, r in zip(outs, cpu.geqrf(x)):
                assert o.shape == r.shape and o.dtype == r.dtype
                np.testing.assert_allclose(o, r, atol=1e-12)
    finally:
        solver._HANDLES.pop(d, None)


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
def test_half_precision_is_computed_in_float32(dev, dtype):
    a = rand((2, 4, 3), 25).astype(dtype)
    out, taus = solver.geqrf(put(a, dev))
    ref_out, ref_taus = cpu.geqrf(a)
    q = solver.householder_product(out, taus)
    ref_q = cpu.householder_product(ref_out, ref_taus)
    for o, r in zip((out, taus, q), (ref_out, ref_taus, ref_q)):
        o = np.asarray(o)
        assert o.dtype == r.dtype and o.shape == r.shape
        np.testing.assert_allclose(o.astype(np.float64), r.astype(np.float64), atol=0.05)
    assert all(c.startswith("s") for c in solver.handles(dev).dn.calls)
