"""Row chains on the CPU (``blu/lower/cpu/chains.py``): a product, the row-split kernel after it
and the next product run row part by row part; which steps chain, and results against numpy
float64 (a layer's forward, an MLP training step, odd shapes, one thread, a concurrent call,
the caller running every row)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import mlp_params, mlp_step, mlp_step_float64
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu.lower.cpu import blas, rows
from blu.lower.cpu import threads as cpu_threads

F32_TOL = dict(rtol=2e-4, atol=2e-5)  # float32 sums of up to ~100 terms of unit size


@pytest.fixture
def chain_everything(monkeypatch, set_flag):
    """Chains and row splits for small arrays (the thresholds are for speed, not correctness);
    chains are made only without spinning workers (``CpuExecutable``)."""
    monkeypatch.setattr(blas, "MIN_THREADED_FLOPS", 0)
    monkeypatch.setattr(rows, "MIN_SPLIT_WORK", 0)
    set_flag("cpu_spin", False)


def test_no_chains_with_spinning_workers(chain_everything, set_flag):
    from blu.lower.cpu import spin

    set_flag("cpu_threads", 2)
    set_flag("cpu_spin", True)
    args = _args(np.random.default_rng(7), 64, 24, 40, 8)
    exe = _executable(_layer, *args)
    assert (exe._chain_at == {}) == spin.available()
    np.testing.assert_allclose(exe(*args)[0], _layer_ref(*args), **F32_TOL)


def _executable(f, *args):
    return blu.jit(f).lower(*args, target="cpu").compile().executable


def _gelu64(x):
    c = np.sqrt(2 / np.pi)
    return 0.5 * x * (1 + np.tanh(c * (x + 0.044715 * x**3)))


def _layer(x, w1, b1, w2):
    return blu.nn.gelu(x @ w1 + b1, approximate=True) @ w2


def _layer_ref(x, w1, b1, w2):
    f = [a.astype(np.float64) for a in (x, w1, b1, w2)]
    return _gelu64(f[0] @ f[1] + f[2]) @ f[3]


def _args(rng, n, d, hidden, out):
    return (rng.standard_normal((n, d)).astype(np.float32),
            (rng.standard_normal((d, hidden)) / np.sqrt(d)).astype(np.float32),
            rng.standard_normal(hidden).astype(np.float32),
            (rng.standard_normal((hidden, out)) / np.sqrt(hidden)).astype(np.float32))  # fmt: skip


def _chained_kinds(exe):
    ss = exe.steps.steps
    return [[ss[k].kind for k in range(i, end + 1)] for i, (_, _, end) in exe._chain_at.items()]


def test_layer_forward_is_one_chain(chain_everything, set_flag):
    set_flag("cpu_threads", 2)
    args = _args(np.random.default_rng(0), 64, 24, 40, 8)
    exe = _executable(_layer, *args)
    assert _chained_kinds(exe) == [["dot", "kernel", "dot"]]
    got = blu.jit(_layer)(*args)
    np.testing.assert_allclose(np.asarray(got), _layer_ref(*args), **F32_TOL)
    set_flag("cpu_threads", 1)
    assert _executable(_layer, *args)._chain_at == {}


def test_stacked_rows_chain(chain_everything, set_flag):
    # (B, T, d) @ (d, h): the chain goes by the B leading rows, each part's (b, T, d) block one
    # 2-D product
    set_flag("cpu_threads", 2)
    rng = np.random.default_rng(4)
    x, w1, b1, w2 = _args(rng, 20 * 5, 12, 24, 6)
    x = x.reshape(20, 5, 12)
    exe = _executable(_layer, x, w1, b1, w2)
    assert _chained_kinds(exe) == [["dot", "kernel", "dot"]]
    got = blu.jit(_layer)(x, w1, b1, w2)
    np.testing.assert_allclose(np.asarray(got), _layer_ref(x, w1, b1, w2), **F32_TOL)
    with exe._arena_lock:  # a concurrent call
        (got,) = exe(x, w1, b1, w2)
    np.testing.assert_allclose(got, _layer_ref(x, w1, b1, w2), **F32_TOL)


def test_too_few_rows_or_flops_do_not_chain(set_flag, monkeypatch):
    set_flag("cpu_threads", 2)
    rng = np.random.default_rng(1)
    monkeypatch.setattr(rows, "MIN_SPLIT_WORK", 0)
    assert _executable(_layer, *_args(rng, 64, 24, 40, 8))._chain_at == {}  # ~0.3 MFLOP
    monkeypatch.setattr(blas, "MIN_THREADED_FLOPS", 0)
    assert _executable(_layer, *_args(rng, 12, 24, 40, 8))._chain_at == {}  # 6 rows a part


def test_a_product_reading_a_chained_value_whole_ends_the_chain(chain_everything, set_flag):
    # ``g @ h.T`` reads every row of ``h``: it cannot run beside the rows that make ``h``
    set_flag("cpu_threads", 2)

    def f(x, w1, b1, w2):
        h = blu.nn.gelu(x @ w1 + b1, approximate=True)
        return h @ h.T, h @ w2

    args = _args(np.random.default_rng(2), 48, 16, 32, 8)
    exe = _executable(f, *args)
    ss = exe.steps.steps
    for i, (_, _, end) in exe._chain_at.items():
        for k in range(i, end + 1):
            if ss[k].kind == "dot":
                rhs = exe.memory.root[ss[k].node.inputs[1]]
                made = {exe.memory.root[v] for j in range(i, k) for v in ss[j].node.outputs}
                assert rhs not in made
    got = blu.jit(f)(*args)
    h = _gelu64(args[0].astype(np.float64) @ args[1] + args[2])
    np.testing.assert_allclose(np.asarray(got[0]), h @ h.T, **F32_TOL)
    np.testing.assert_allclose(np.asarray(got[1]), h @ args[3], **F32_TOL)


def test_caller_runs_every_row_and_concurrent_call(chain_everything, set_flag, monkeypatch):
    set_flag("cpu_threads", 2)
    args = _args(np.random.default_rng(3), 64, 24, 40, 8)
    exe = _executable(_layer, *args)
    assert exe._chain_at
    want = _layer_ref(*args)
    (got,) = exe(*args)
    np.testing.assert_allclose(got, want, **F32_TOL)
    with monkeypatch.context() as mp:  # a busy second core: the caller runs the whole range
        mp.setattr(cpu_threads.Balance, "solo", lambda self: True)
        (got,) = exe(*args)
        np.testing.assert_allclose(got, want, **F32_TOL)
    with exe._arena_lock:  # a concurrent call: an arena of its own, the steps one by one
        (got,) = exe(*args)
    np.testing.assert_allclose(got, want, **F32_TOL)


@settings(max_examples=12, deadline=None)
@given(st.sampled_from([1, 2, 16, 33, 64]), st.sampled_from([1, 3, 16]),
       st.sampled_from([1, 7, 32]), st.integers(1, 3))  # fmt: skip
def test_chained_training_step_matches_float64(n, d, hidden, threads):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(blas, "MIN_THREADED_FLOPS", 0)
        mp.setattr(rows, "MIN_SPLIT_WORK", 0)
        spin_was = blu.config.cpu_spin
        blu.config.update("cpu_threads", threads)
        blu.config.update("cpu_spin", False)  # (chains are made only without spinning workers)
        try:
            rng = np.random.default_rng(n * 1000 + d * 100 + hidden * 10 + threads)
            p = mlp_params(rng, d, hidden, 3)
            x = rng.standard_normal((n, d)).astype(np.float32)
            y = rng.standard_normal((n, 3)).astype(np.float32)
            exe = _executable(mlp_step, p, x, y)
            if threads == 1 or n < 8 * threads:
                assert exe._chain_at == {}
            got = blu.jit(mlp_step)(p, x, y)
            want = mlp_step_float64(p, x, y)
            for k in p:
                np.testing.assert_allclose(np.asarray(got[k]), want[k], rtol=1e-4, atol=1e-5)
        finally:
            blu.config.update("cpu_threads", None)
            blu.config.update("cpu_spin", spin_was)
