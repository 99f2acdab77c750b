"""Spinning CPU workers (``blu/lower/cpu/spin.py``): recorded calls run natively by another
thread or, when it has not started them, by the caller; results against numpy float64, the
fallbacks (a part that cannot be recorded, a busy worker, the flag off) and the parking of the
workers once no executable runs."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from helpers import mlp_params, mlp_step, mlp_step_float64
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu.lower.cpu import address, blas, rows, spin
from blu.lower.cpu import threads as cpu_threads

pytestmark = pytest.mark.skipif(spin._code() is None, reason="MLIR cannot compile the loop here")


def _worker() -> spin.Worker:
    ws = spin.workers(1)
    assert ws is not None
    return ws[0]


class _Asleep(spin.Worker):
    def _loop(self) -> None:  # never runs the native loop
        return


def _gemm_ops(fn, a, b, c, alpha=1.0, beta=0.0) -> spin.Ops:
    ops = spin.Ops()
    m, k = a.shape
    args = (101, 111, 111, m, b.shape[1], k, alpha, address.data(a), k, address.data(b),
            b.shape[1], beta, address.data(c), c.shape[1])  # fmt: skip
    spin.gemm_op(ops, fn, c.dtype == np.float64, args, (a, b, c))
    return ops


def _blas_functions():
    out = []
    for dtype in (np.float32, np.float64):
        for name, get in (("mkl", blas.mkl_gemm_for), ("openblas", blas.openblas_gemm_for)):
            fn = get(np.dtype(dtype))
            if fn is not None:
                out.append(pytest.param(fn, dtype, id=f"{name}-{np.dtype(dtype).name}"))
    return out


@pytest.mark.parametrize("fn,dtype", _blas_functions())
@pytest.mark.parametrize("awake", [True, False])
def test_posted_product_matches_float64(fn, dtype, awake):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((37, 19)).astype(dtype), rng.standard_normal((19, 23)).astype(dtype)
    c = rng.standard_normal((37, 23)).astype(dtype)
    want = 0.5 * a.astype(np.float64) @ b.astype(np.float64) + 2.0 * c.astype(np.float64)
    # awake: the worker runs it (or the caller, should it not have started yet); else a
    # worker whose thread never runs the loop: the caller must run the part itself
    w = _worker() if awake else _Asleep(spin._code())
    spin.enter()
    try:
        with w.lock:
            w.post(_gemm_ops(fn, a, b, c, 0.5, 2.0))
            t0 = time.perf_counter()
            end, stolen = w.finish()
    finally:
        spin.leave()
    if not awake:
        assert stolen
    assert t0 - 5.0 < end <= time.perf_counter()  # the same clock as perf_counter
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(c, want, rtol=tol, atol=tol * np.abs(want).max())


@given(rows=st.integers(0, 9), cols=st.integers(1, 11), lo=st.integers(0, 5))
@settings(max_examples=25, deadline=None)
def test_recorded_row_copy(rows, cols, lo):
    rng = np.random.default_rng(rows * 100 + cols)
    src = rng.standard_normal((rows, cols + lo)).astype(np.float32)[:, lo:]
    dst = np.full((rows, cols + 3), np.nan, np.float32)
    ops = spin.record(lambda a, b: spin.copy_rows(dst[:, 1 : 1 + cols], src), 0, 1)
    assert ops is not None
    w = _worker()
    with w.lock:
        w.post(ops)
        w.finish()
    np.testing.assert_array_equal(dst[:, 1 : 1 + cols], src)
    assert np.isnan(dst[:, 0]).all() and np.isnan(dst[:, 1 + cols :]).all()


def test_numpy_math_is_not_recorded():
    a = np.ones((4, 4), np.float32)
    b = np.ones((4, 4), np.int64)  # numpy casts: BLAS cannot take it in place
    out = np.zeros((4, 4), np.float32)
    assert spin.record(lambda lo, hi: blas.mm(a, b, out), 0, 1) is None
    assert (out == 0).all()  # nothing ran


@pytest.mark.parametrize("m,k,n", [(64, 48, 80), (80, 64, 8), (16, 512, 24), (33, 17, 129)])
def test_split_products_on_spinning_workers(m, k, n, monkeypatch, set_flag):
    """``blas.matmul`` split by rows, columns or along k, its parts posted to the workers."""
    set_flag("cpu_threads", 2)
    rng = np.random.default_rng(m + k + n)
    a, b = rng.standard_normal((1, m, k)), rng.standard_normal((1, k, n))
    a, b = a.astype(np.float32), b.astype(np.float32)
    posted = []
    post = spin.Worker.post
    monkeypatch.setattr(spin.Worker, "post", lambda self, ops: (posted.append(1), post(self, ops)))
    bal = cpu_threads.Balance()
    want = a[0].astype(np.float64) @ b[0].astype(np.float64)
    for _ in range(4):  # the share moves from call to call
        out = np.full((1, m, n), np.nan, np.float32)
        spin.enter()
        try:
            blas.matmul(a, b, out, 2, bal)
        finally:
            spin.leave()
        np.testing.assert_allclose(out[0], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert posted


def test_mlp_step_with_and_without_spinning(set_flag):
    set_flag("cpu_threads", 2)
    rng = np.random.default_rng(3)
    p = mlp_params(rng, 256, 512, 128)
    p = {k: v * 0.05 for k, v in p.items()}
    x = rng.standard_normal((256, 256)).astype(np.float32)
    y = rng.standard_normal((256, 128)).astype(np.float32)
    want = mlp_step_float64(p, x, y)
    for on in (True, False):
        set_flag("cpu_spin", on)
        got = blu.jit(mlp_step)(p, x, y)
        for key in p:
            w = want[key]
            np.testing.assert_allclose(np.asarray(got[key]), w, rtol=1e-4,
                                       atol=1e-4 * np.abs(w).max())  # fmt: skip


def test_workers_park_when_no_executable_runs(set_flag):
    set_flag("cpu_threads", 2)
    rng = np.random.default_rng(4)
    a, b = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
    f = blu.jit(lambda a, b: (a @ b) @ b)
    f(a, b)
    ws = spin.workers(1)
    deadline = time.monotonic() + 5.0
    while any(w.ctl[spin._S.ACTIVE] for w in ws) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert not any(w.ctl[spin._S.ACTIVE] for w in ws)
    assert all(w.ctl[spin._S.PARK] for w in ws)


def test_threads_share_the_workers(set_flag):
    """Concurrent calls: one posts to the worker, the others use the blocking pool."""
    set_flag("cpu_threads", 2)
    rng = np.random.default_rng(5)
    p = mlp_params(rng, 128, 256, 64)
    p = {k: v * 0.05 for k, v in p.items()}
    xs = [rng.standard_normal((256, 128)).astype(np.float32) for _ in range(4)]
    y = rng.standard_normal((256, 64)).astype(np.float32)
    step = blu.jit(mlp_step)
    step(p, xs[0], y)
    got: dict[int, dict] = {}

    def run(i: int) -> None:
        for _ in range(3):
            got[i] = {k: np.asarray(v) for k, v in step(p, xs[i], y).items()}

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, x in enumerate(xs):
        want = mlp_step_float64(p, x, y)
        for key in p:
            w = want[key]
            np.testing.assert_allclose(got[i][key], w, rtol=1e-4, atol=1e-4 * np.abs(w).max())


@given(shape=st.lists(st.integers(0, 6), min_size=0, max_size=3),
       dtype=st.sampled_from([np.float32, np.float64, np.int8, np.complex64, np.bool_]),
       step=st.integers(1, 2), transpose=st.booleans())  # fmt: skip
@settings(max_examples=40, deadline=None)
def test_data_address_matches_ctypes(shape, dtype, step, transpose):
    x = np.zeros(shape, dtype)
    if x.ndim:
        x = x[::step]
    if transpose:
        x = x.T
    assert address.data(x) == x.ctypes.data


def test_a_batched_product_is_recorded_matrix_by_matrix():
    """A product on one thread (a pair's part) of a batch: one call per matrix, none run while
    recording."""
    rng = np.random.default_rng(6)
    a = rng.standard_normal((3, 5, 4)).astype(np.float32)
    b = rng.standard_normal((3, 4, 6)).astype(np.float32)
    out = np.zeros((3, 5, 6), np.float32)
    ops = spin.record(lambda lo, hi: blas.matmul(a, b, out, 1), 0, 1)
    assert ops is not None and len(ops.slots) == 3 * spin._S.OP_SLOTS
    assert (out == 0).all()
    w = _worker()
    with w.lock:
        w.post(ops)
        w.finish()
    want = np.einsum("bmk,bkn->bmn", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_two_workers_match_float64(set_flag, monkeypatch):
    """Three threads (two spinning workers): products with a row kernel between them, a product
    split along k, a fused update and a pair of products, against numpy float64."""
    set_flag("cpu_threads", 3)
    monkeypatch.setattr(rows, "MIN_SPLIT_WORK", 0)  # (row kernels split at these sizes)
    posted = []
    post = spin.Worker.post
    monkeypatch.setattr(
        spin.Worker, "post", lambda self, ops: (posted.append(self), post(self, ops))
    )
    rng = np.random.default_rng(6)
    a = rng.standard_normal((384, 256)).astype(np.float32)
    b = rng.standard_normal((256, 320)).astype(np.float32) * 0.1
    c = rng.standard_normal((320, 256)).astype(np.float32)
    k = rng.standard_normal((64, 2048)).astype(np.float32)
    kt = np.ascontiguousarray(k.T)
    w = rng.standard_normal((384, 320)).astype(np.float32)
    args = (a, b, c, k, kt, w)
    a64, b64, c64, k64, kt64, w64 = (v.astype(np.float64) for v in args)
    cases = [
        (lambda a, b, c, k, kt, w: blu.numpy.tanh(a @ b) @ c, np.tanh(a64 @ b64) @ c64, None),
        (lambda a, b, c, k, kt, w: k @ kt, k64 @ kt64, None),
        (lambda a, b, c, k, kt, w: w - 0.1 * (a @ b), w64 - 0.1 * (a64 @ b64), "fused"),
        (lambda a, b, c, k, kt, w: (a @ b, w @ c), (a64 @ b64, w64 @ c64), "pair"),
    ]
    for fn, want, kind in cases:
        exe = blu.jit(fn).lower(*args, target="cpu").compile().executable
        made = {"fused": bool(exe.fused_products), "pair": bool(exe._pair_at), None: True}
        assert made[kind]
        jf = blu.jit(fn)
        for _ in range(3):
            got = jf(*args)
            for g, v in zip(got if isinstance(got, tuple) else (got,),
                            want if isinstance(want, tuple) else (want,)):  # fmt: skip
                np.testing.assert_allclose(np.asarray(g), v, rtol=1e-4,
                                           atol=1e-4 * np.abs(v).max())  # fmt: skip
    assert len(set(posted)) >= 2  # both workers were handed parts
