"""Products whose only reader adds them, scaled, to another array (``blu/lower/cpu/epilogue.py``):
which kernels are such an update (``affine_form``), which products fuse (``find``), BLAS's
``C = alpha A B + beta C`` (``blas.gemm``), and fused results against numpy float64: an SGD
step, transposed operands, float64, odd sizes, several threads, and without CBLAS."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.lower.cpu import blas, epilogue


def _kernels(f, *args):
    prog = blu.jit(f).lower(*args, target="cpu")._program
    return [n for n in prog.plan.nodes if n.kind == "kernel"]


W = np.ones((4, 3), np.float32)


@pytest.mark.parametrize(
    "f,want",
    [
        (lambda w, d: w - 0.25 * d, {0: 1.0, 1: -0.25}),
        (lambda w, d: d * 3.0 + w, {0: 1.0, 1: 3.0}),
        (lambda w, d: w + d, {0: 1.0, 1: 1.0}),
        (lambda w, d: -(d * 2.0) + w - d, {0: 1.0, 1: -3.0}),
        (lambda w, d: w * d, None),
        (lambda w, d: w - bnp.tanh(d), None),
        (lambda w, d: w - d.sum(axis=0), None),
    ],
)
def test_affine_form(f, want):
    d = np.full((4, 3), 2.0, np.float32)
    (node,) = _kernels(f, W, d)
    form = epilogue.affine_form(node.jaxpr)
    if want is None:
        assert form is None
    else:  # the kernel's inputs in plan order: compare the coefficients
        assert sorted(form.values()) == sorted(want.values())


def _sgd(w1, w2, x, g):
    # an update of each weight from its gradient (a product), as an optimizer writes it
    return w1 - 0.01 * (x.T @ g), w2 + (g.T @ x) * 0.5


def _sgd_ref(w1, w2, x, g):
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    return w1 - 0.01 * (x64.T @ g64), w2 + (g64.T @ x64) * 0.5


def _fusions(f, *args):
    return blu.jit(f).lower(*args, target="cpu").compile().executable.fused_products


def test_which_products_fuse():
    rng = np.random.default_rng(0)
    x, g = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((6, 5))
    g = g.astype(np.float32)
    w1, w2 = np.ones((4, 5), np.float32), np.ones((5, 4), np.float32)
    assert _fusions(_sgd, w1, w2, x, g) == 2
    # the product is also a result: it must be stored
    assert _fusions(lambda w, x, g: (w - x.T @ g, x.T @ g), w1, x, g) == 0
    # the product read twice
    assert _fusions(lambda w, x, g: (w - x.T @ g) * (x.T @ g).sum(), w1, x, g) == 0
    # not an update of another array by the product
    assert _fusions(lambda w, x, g: w * (x.T @ g), w1, x, g) == 0
    # integers: no BLAS
    xi, gi = x.astype(np.int32), g.astype(np.int32)
    assert _fusions(lambda w, x, g: w - x.T @ g, w1.astype(np.int32), xi, gi) == 0
    # donated: the update writes into the weight's own buffer (not fused)
    f = blu.jit(lambda w, x, g: w - 0.5 * (x.T @ g), donate_argnums=(0,))
    assert f.lower(w1, x, g, target="cpu").compile().executable.fused_products == 0


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 40),
    st.sampled_from([1, 3, 17]),
    st.sampled_from([1, 5, 33]),
    st.integers(1, 3),
    st.sampled_from([np.float32, np.float64]),
    st.booleans(),
)
def test_fused_updates_match_float64(n, d, h, threads, dtype, no_cblas):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(blas, "MIN_THREADED_FLOPS", 0)
        if no_cblas:
            mp.setattr(blas, "gemm", lambda *a: False)
        blu.config.update("cpu_threads", threads)
        try:
            rng = np.random.default_rng(n * 1000 + d * 10 + h)
            x = rng.standard_normal((n, d)).astype(dtype)
            g = rng.standard_normal((n, h)).astype(dtype)
            w1 = rng.standard_normal((d, h)).astype(dtype)
            w2 = rng.standard_normal((h, d)).astype(dtype)
            f = blu.jit(_sgd)
            assert f.lower(w1, w2, x, g, target="cpu").compile().executable.fused_products == 2
            for _ in range(2):  # the second call reuses the pooled outputs
                got = f(w1, w2, x, g)
                tol = 1e-5 if dtype == np.float32 else 1e-12
                for a, b in zip(got, _sgd_ref(w1, w2, x, g)):
                    assert np.asarray(a).dtype == dtype
                    np.testing.assert_allclose(np.asarray(a), b, rtol=tol, atol=tol)
        finally:
            blu.config.update("cpu_threads", None)


def test_fused_update_leaves_the_arguments_alone():
    rng = np.random.default_rng(3)
    x, g = rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal((8, 2))
    g = g.astype(np.float32)
    w1, w2 = rng.standard_normal((3, 2)).astype(np.float32), np.zeros((2, 3), np.float32)
    keep = [a.copy() for a in (w1, w2, x, g)]
    blu.jit(_sgd)(w1, w2, x, g)
    for a, k in zip((w1, w2, x, g), keep):
        np.testing.assert_array_equal(a, k)


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from([0, 1, 4, 9]),
    st.sampled_from([0, 1, 3]),
    st.sampled_from([0, 1, 6]),
    st.booleans(),
    st.booleans(),
    st.sampled_from([np.float32, np.float64]),
    st.sampled_from([(1.0, 0.0), (-0.5, 1.0), (2.0, 0.5)]),
)
def test_gemm_matches_float64(m, k, n, ta, tb, dtype, ab):
    alpha, beta = ab
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    a, b = (a.T if ta else a), (b.T if tb else b)
    c = rng.standard_normal((m, n + 2)).astype(dtype)[:, 1 : n + 1]  # rows strided
    want = alpha * (a.astype(np.float64) @ b) + beta * c.astype(np.float64)
    if not blas.gemm(a, b, c, alpha, beta):
        pytest.skip("no CBLAS in the BLAS numpy loaded")
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(c, want, rtol=tol, atol=tol)


def test_gemm_declines_what_blas_cannot_read():
    a = np.ones((4, 6), np.float32)
    c = np.zeros((4, 4), np.float32)
    if blas.gemm_for(np.float32) is None:
        pytest.skip("no CBLAS in the BLAS numpy loaded")
    assert not blas.gemm(a[:, ::2], np.ones((3, 4), np.float32), c, 1.0, 0.0)  # strided both ways
    assert not blas.gemm(a, np.ones((6, 4), np.float64), c, 1.0, 0.0)  # mixed dtypes
    assert not blas.gemm(a.astype(np.int32), np.ones((6, 4), np.int32), c.astype(np.int32), 1, 0)
    np.testing.assert_array_equal(c, 0.0)
