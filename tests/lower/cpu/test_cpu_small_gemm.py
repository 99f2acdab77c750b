"""Small CPU products through OpenBLAS's CBLAS in column blocks, the way chosen by timing
(``blu/lower/cpu/blas.py``: ``SmallGemm``, ``small_gemm``; ``blu/lower/cpu/autotune.py``): every
tiling against numpy float64, the column blocks, the choice's rule on a fake clock, and jitted
programs (a scan RNN, two products side by side) with each way forced."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu.lower.cpu import autotune, blas

openblas = pytest.mark.skipif(
    blas.openblas_gemm_for(np.float32) is None, reason="no OpenBLAS CBLAS loaded"
)


def _tol(dtype, k):
    eps = np.finfo(dtype).eps
    return dict(rtol=8 * eps * np.sqrt(max(k, 1)), atol=8 * eps * np.sqrt(max(k, 1)))


@openblas
@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.integers(1, 70), st.integers(1, 300),
       st.sampled_from(blas.TILINGS), st.sampled_from([np.float32, np.float64]))  # fmt: skip
def test_tiled_small_gemm_matches_float64(m, k, n, tiles, dtype):
    rng = np.random.default_rng(m * 100000 + k * 1000 + n)
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    out = np.full((m, n), np.nan, dtype)  # every column written (beta = 0 never reads it)
    g = blas.SmallGemm(blas.openblas_gemm_for(dtype), m, k, n, dtype, tiles)
    for _ in range(2):  # the same arrays again (their addresses remembered), new values
        g(a, b, out)
        np.testing.assert_allclose(out, a.astype(np.float64) @ b, **_tol(dtype, k))
        a[...] = rng.standard_normal(a.shape)
    other = np.full((m, n), np.nan, dtype)  # another output: its own calls, not the last ones
    g(a, b, other)
    np.testing.assert_allclose(other, a.astype(np.float64) @ b, **_tol(dtype, k))


@given(st.integers(1, 600), st.sampled_from([1, 2, 3, 4, 8, 16]))
def test_column_tiles_cover_the_columns(n, tiles):
    cuts = blas._column_tiles(n, tiles)
    assert cuts[0][0] == 0 and cuts[-1][1] == n
    assert all(lo < hi for lo, hi in cuts)
    assert all(a[1] == b[0] for a, b in zip(cuts, cuts[1:]))
    assert len(cuts) == min(tiles, n)
    if n >= 16 * tiles:  # block bounds on multiples of 16 (a vector's columns)
        assert all(lo % 16 == 0 for lo, _ in cuts)


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _costing(clock, seconds):
    def run():
        clock.t += seconds

    return run


def test_fastest_keeps_the_first_unless_clearly_faster(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(autotune.time, "perf_counter", clock)
    c = lambda s: _costing(clock, s)  # noqa: E731
    assert autotune.fastest([c(1.0), c(0.5), c(0.7)]) == 1
    # within the margin: the first (today's way) stays
    assert autotune.fastest([c(1.0), c(1.0 - autotune.MARGIN / 2)]) == 0
    assert autotune.fastest([c(1.0), c(2.0)]) == 0
    assert autotune.fastest([c(1.0)]) == 0 and autotune.fastest([]) == 0

    # a median: one slow round (a load spike) does not decide
    spikes = iter([0.0] * 3 + [5.0] + [0.0] * 1000)

    def spiky():
        clock.t += 0.5 + next(spikes)

    assert autotune.fastest([c(1.0), spiky]) == 1


@openblas
def test_small_gemm_openblas_choice(monkeypatch, set_flag):
    set_flag("cpu_mkl", False)
    assert blas.small_gemm(6, 5, 4, np.float32) is None  # too small to time: numpy's
    monkeypatch.setattr(blas, "_tuned_tiles", lambda m, k, n, dt: 0)
    assert blas.small_gemm(32, 128, 256, np.float32) is None
    monkeypatch.setattr(blas, "_tuned_tiles", lambda m, k, n, dt: 4)
    g = blas.small_gemm(32, 128, 256, np.float32)
    assert isinstance(g, blas.SmallGemm) and len(g.cols) == 4
    assert blas.small_gemm(32, 128, 256, np.int32) is None  # no BLAS for integers


@openblas
def test_tuned_choice_is_a_valid_way():
    t = blas._tuned_tiles(16, 64, 256, np.dtype(np.float32))
    assert t == 0 or t in blas.TILINGS
    assert blas._tuned_tiles(16, 64, 256, np.dtype(np.float32)) == t  # chosen once


def _rnn(w, u, h0, xs):
    def step(h, x):
        h = blu.numpy.tanh(x @ w + h @ u)
        return h, h.sum()

    return blu.lax.scan(step, h0, xs)


@openblas
@pytest.mark.parametrize("tiles", [0, 1, 4])
def test_jitted_programs_with_each_way(tiles, monkeypatch, set_flag):
    set_flag("cpu_mkl", False)
    set_flag("cpu_threads", 2)
    monkeypatch.setattr(blas, "_tuned_tiles", lambda m, k, n, dt: tiles)
    rng = np.random.default_rng(tiles)
    f32 = np.float32
    w, u = ((rng.standard_normal((128, 128)) / 12).astype(f32) for _ in range(2))
    h0, xs = np.zeros((32, 128), f32), rng.standard_normal((9, 32, 128)).astype(f32)
    h, ys = blu.jit(_rnn)(w, u, h0, xs)
    hr, ysr = h0.astype(np.float64), []
    for x in xs.astype(np.float64):
        hr = np.tanh(x @ w + hr @ u)
        ysr.append(hr.sum())
    np.testing.assert_allclose(np.asarray(h), hr, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ys), ysr, rtol=1e-4, atol=1e-3)

    a, b = rng.standard_normal((32, 128)).astype(f32), rng.standard_normal((32, 128)).astype(f32)
    got = blu.jit(lambda a, b, w, u: (a @ w, b @ u))(a, b, w, u)  # two products side by side
    for g, want in zip(got, (a.astype(np.float64) @ w, b.astype(np.float64) @ u)):
        np.testing.assert_allclose(np.asarray(g), want, **_tol(f32, 128))
