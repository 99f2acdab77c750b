"""What a jitted CPU call does with its arrays: a user's numpy arguments are read in place
but never handed back or written; large outputs are recycled only once the caller dropped them;
products pick their BLAS threads (blu/lower/cpu/executable.py, blu/lower/cpu/blas.py)."""

from __future__ import annotations

import gc

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu.core.config import config
from blu.lower.cpu import blas


def test_outputs_never_alias_a_users_argument():
    y = np.arange(6, dtype=np.float32)
    same = blu.jit(lambda x: x)(y)
    view = blu.jit(lambda x: x.reshape(2, 3))(y)
    y[:] = -1.0
    np.testing.assert_array_equal(np.asarray(same), np.arange(6, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(view).ravel(), np.arange(6, dtype=np.float32))
    assert y.flags.writeable  # the user's array is left as it was


def test_donated_user_array_is_not_written():
    x = np.ones(1 << 18, np.float32)
    out = blu.jit(lambda a: a * 3.0, donate_argnums=0)(x)
    np.testing.assert_array_equal(x, 1.0)
    np.testing.assert_array_equal(np.asarray(out), 3.0)


def test_large_outputs_held_by_the_caller_are_not_reused():
    n = 1 << 19  # 2 MiB of float32: pooled
    f = blu.jit(lambda a, s: a * s)
    x = np.arange(n, dtype=np.float32)
    held = [f(x, np.float32(k)) for k in range(3)]
    view = np.asarray(f(x, np.float32(7.0)))[::2]  # only a view of this result is kept
    for k, h in enumerate(held):
        np.testing.assert_array_equal(np.asarray(h), x * k)
    f(x, np.float32(9.0))
    np.testing.assert_array_equal(view, (x * 7.0)[::2])
    del held
    gc.collect()
    for k in range(3):  # dropped results' buffers come back, with the new values
        np.testing.assert_array_equal(np.asarray(f(x, np.float32(k + 10))), x * (k + 10))


def test_product_threads():
    assert blas.threads_for(1e3) == 1
    with config.override(cpu_threads=3):
        assert blas.threads_for(1e12) == 3
        assert blas.threads_for(1e3) == 1
    assert 1 <= blas.threads_for(1e12)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((301, 400)).astype(np.float32)
    with config.override(cpu_threads=3):  # split by rows (301 is not a multiple of 3)
        got = np.asarray(blu.jit(lambda a: a @ a.T)(a))
    want = a.astype(np.float64) @ a.T.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_split_products_by_rows_and_by_batch():
    rng = np.random.default_rng(1)
    shapes = [(1, 37, 5, 3, 2), (5, 4, 6, 7, 2), (2, 33, 8, 9, 3), (1, 3, 4, 5, 4)]
    for b, m, k, n, threads in shapes:
        x = rng.standard_normal((b, m, k)).astype(np.float32)
        y = rng.standard_normal((b, k, n)).astype(np.float32)
        out = np.full((b, m, n), np.nan, np.float32)
        blas.matmul(x, y, out, threads)
        want = np.einsum("bmk,bkn->bmn", x.astype(np.float64), y.astype(np.float64))
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 3),
    st.sampled_from([0, 1, 7, 16, 33]),
    st.sampled_from([0, 1, 5, 300]),
    st.sampled_from([0, 1, 9, 17, 40]),
    st.integers(1, 4),
    st.booleans(),
)
def test_split_products_match_float64(b, m, k, n, threads, transposed):
    """Cut by batch, rows, columns or the contracted dimension (``blas.split_axis``), a
    transposed left operand included, sizes that do not divide by the threads and size-0
    dimensions."""
    rng = np.random.default_rng(b * 1000 + m * 100 + k * 10 + n)
    x = rng.standard_normal((b, k, m) if transposed else (b, m, k)).astype(np.float32)
    x = x.transpose(0, 2, 1) if transposed else x
    y = rng.standard_normal((b, k, n)).astype(np.float32)
    out = np.full((b, m, n), np.nan, np.float32)
    blas.matmul(x, y, out, threads)
    want = np.einsum("bmk,bkn->bmn", x.astype(np.float64), y.astype(np.float64))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_split_axis():
    assert blas.split_axis(256, 1024, 2) == 2  # more columns: each part packs the (m, k) side
    assert blas.split_axis(1024, 256, 2) == 1
    assert blas.split_axis(256, 256, 2) == 1
    assert blas.split_axis(4, 1024, 2) == 2
    assert blas.split_axis(15, 15, 2) is None  # too small to cut
    assert blas.split_axis(1000, 1000, 1) is None
    assert blas.split_axis(256, 256, 2, k=1024) == 3  # a long k: partial sums, nothing packed twice
    assert blas.split_axis(256, 256, 2, k=256) == 1
    assert blas.split_axis(8, 8, 4, k=200) is None  # too short to give each thread 64


def test_products_split_along_k_at_a_learned_share_or_whole():
    from blu.lower.cpu import threads as cpu_threads

    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 20, 700)).astype(np.float32)
    y = rng.standard_normal((1, 700, 30)).astype(np.float32)
    want = x[0].astype(np.float64) @ y[0].astype(np.float64)
    bal = cpu_threads.Balance()
    for share, solo in ((None, 0), (0.3, 0), (0.8, 0), (None, 1)):
        bal.share, bal.solo_left = share, solo
        out = np.full((1, 20, 30), np.nan, np.float32)
        blas.matmul(x, y, out, 2, bal)
        np.testing.assert_allclose(out[0], want, rtol=1e-4, atol=1e-4)
