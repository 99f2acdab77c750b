"""CPU products through Intel MKL where the ``mkl`` wheel is installed (``blu/lower/cpu/blas.py``,
``config.cpu_mkl``): ``gemm``/``mm`` on every operand layout against numpy float64, the flag
switching back to numpy's OpenBLAS, and jitted programs (a training step, a scan) with MKL on
and off against float64 references."""

from __future__ import annotations

import os
import weakref

import numpy as np
import pytest
from helpers import mlp_step, mlp_step_float64
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu.lower.cpu import blas

mkl = pytest.mark.skipif(
    blas.mkl_gemm_for(np.float32) is None, reason="the mkl wheel is not installed"
)


def test_ci_finds_mkl_where_it_installs_it():
    """CI runs the CPU tests a second time with ``requirements/mkl.lock`` installed and
    ``BLU_CI_MKL=1`` (``.ci/run``): there the MKL path must be found, not skipped."""
    if os.environ.get("BLU_CI_MKL") != "1":
        pytest.skip("CI's MKL run only")
    assert blas.mkl_gemm_for(np.float32) is not None and blas.mkl_gemm_for(np.float64) is not None
    assert blu.config.cpu_mkl and blas.gemm_for(np.float32) is blas.mkl_gemm_for(np.float32)


def _tol(dtype, k):
    eps = np.finfo(dtype).eps
    return dict(rtol=8 * eps * np.sqrt(max(k, 1)), atol=8 * eps * np.sqrt(max(k, 1)))


@mkl
@settings(max_examples=25, deadline=None)
@given(st.integers(0, 40), st.integers(0, 40), st.integers(0, 40),
       st.sampled_from([np.float32, np.float64]), st.booleans(), st.booleans(),
       st.sampled_from([0.0, 1.0, -0.5]))  # fmt: skip
def test_mkl_gemm_matches_float64(m, k, n, dtype, ta, tb, beta):
    rng = np.random.default_rng(m * 10000 + k * 100 + n)
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    a, b = (a.T if ta else a), (b.T if tb else b)  # column-major views: BLAS reads them so
    c0 = rng.standard_normal((m, n + 3)).astype(dtype)[:, :n]  # rows padded: ldc > n
    c = c0.copy() if beta else np.full_like(c0, np.nan)  # beta = 0 never reads c
    with _flag(True):
        assert blas.gemm_for(dtype) is blas.mkl_gemm_for(dtype)
        assert blas.gemm(a, b, c, 2.0, beta)
    want = 2.0 * a.astype(np.float64) @ b.astype(np.float64) + (beta * c0 if beta else 0)
    np.testing.assert_allclose(c, want, **_tol(dtype, k))


class _flag:
    def __init__(self, value):
        self.value = value

    def __enter__(self):
        self.old = blu.config.cpu_mkl
        blu.config.update("cpu_mkl", self.value)

    def __exit__(self, *exc):
        blu.config.update("cpu_mkl", self.old)


def test_flag_off_is_numpys_openblas(set_flag):
    set_flag("cpu_mkl", False)
    assert blas.gemm_for(np.float32) is blas.openblas_gemm_for(np.float32)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 7)), rng.standard_normal((7, 3))
    out = np.empty((5, 3))
    blas.mm(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-12)
    ints = np.arange(6).reshape(2, 3)
    got = np.empty((2, 2), ints.dtype)
    set_flag("cpu_mkl", True)
    blas.mm(ints, ints.T, got)  # no BLAS for integers: numpy's matmul
    np.testing.assert_array_equal(got, ints @ ints.T)


def _rnn(w, u, h0, xs):
    def step(h, x):
        h = blu.numpy.tanh(x @ w + h @ u)
        return h, h.sum()

    h, ys = blu.lax.scan(step, h0, xs)
    return h, ys


def _rnn_ref(w, u, h0, xs):
    h, ys = h0.astype(np.float64), []
    for x in xs.astype(np.float64):
        h = np.tanh(x @ w + h @ u)
        ys.append(h.sum())
    return h, np.array(ys)


@pytest.mark.parametrize("on", [True, False])
def test_jitted_programs_with_and_without_mkl(on, set_flag):
    set_flag("cpu_mkl", on)
    set_flag("cpu_threads", 2)
    rng = np.random.default_rng(1)
    p = {"w1": (rng.standard_normal((48, 64)) / 7).astype(np.float32),
         "b1": rng.standard_normal(64).astype(np.float32),
         "w2": (rng.standard_normal((64, 8)) / 8).astype(np.float32)}  # fmt: skip
    x, y = rng.standard_normal((40, 48)).astype(np.float32), rng.standard_normal((40, 8))
    y = y.astype(np.float32)
    got, want = blu.jit(mlp_step)(p, x, y), mlp_step_float64(p, x, y)
    for k in p:
        np.testing.assert_allclose(np.asarray(got[k]), want[k], rtol=1e-4, atol=1e-5)
    w, u = (
        (rng.standard_normal((32, 32)) / 6).astype(np.float32),
        (rng.standard_normal((32, 32)) / 6).astype(np.float32),
    )
    h0, xs = np.zeros((4, 32), np.float32), rng.standard_normal((12, 4, 32)).astype(np.float32)
    (h, ys), (hr, ysr) = blu.jit(_rnn)(w, u, h0, xs), _rnn_ref(w, u, h0, xs)
    np.testing.assert_allclose(np.asarray(h), hr, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ys), ysr, rtol=1e-4, atol=1e-4)


@mkl
def test_small_gemm_remembers_arrays_not_values(set_flag):
    set_flag("cpu_mkl", True)
    rng = np.random.default_rng(2)
    g = blas.small_gemm(6, 5, 4, np.float32)
    assert g is not None and blas.small_gemm(0, 5, 4, np.float32) is None
    a, b = rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((5, 4))
    b = b.astype(np.float32)
    out = np.empty((6, 4), np.float32)
    for _ in range(3):  # the same arrays, new values each time (a loop's carry)
        a[...] = rng.standard_normal(a.shape)
        g(a, b, out)
        np.testing.assert_allclose(out, a.astype(np.float64) @ b, **_tol(np.float32, 5))
    for _ in range(10):  # more arrays than it remembers
        a2 = rng.standard_normal((6, 5)).astype(np.float32)
        g(a2, b, out)
        np.testing.assert_allclose(out, a2.astype(np.float64) @ b, **_tol(np.float32, 5))
    wide = rng.standard_normal((6, 10)).astype(np.float32)[:, ::2]  # not contiguous: numpy's
    g(wide, b, out)
    np.testing.assert_allclose(out, wide.astype(np.float64) @ b, **_tol(np.float32, 5))
    gone = rng.standard_normal((6, 5)).astype(np.float32)
    alive = weakref.ref(gone)
    g(gone, b, out)
    del gone
    assert alive() is None  # it remembers addresses, never keeps a caller's array alive
    half = a.astype(blu.numpy.bfloat16)  # another dtype: numpy's matmul, which casts
    g(half, b, out)
    np.testing.assert_allclose(out, half.astype(np.float64) @ b, **_tol(np.float32, 5))
    set_flag("cpu_mkl", False)
    assert blas.small_gemm(6, 5, 4, np.float32) is None


def test_mixed_precision_small_product(set_flag):
    # bfloat16 operands, a float32 result (preferred_element_type): BLAS must not read them
    set_flag("cpu_mkl", True)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((8, 16)).astype(blu.numpy.bfloat16)
    b = rng.standard_normal((16, 32)).astype(blu.numpy.bfloat16)

    def f(a, b):
        return blu.lax.dot_general(
            a, b, (((1,), (0,)), ((), ())), preferred_element_type=np.float32
        )

    got = np.asarray(blu.jit(f)(a, b))
    assert got.dtype == np.float32
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
