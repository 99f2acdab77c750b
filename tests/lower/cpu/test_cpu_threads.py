"""CPU work split across blu's threads (``blu/lower/cpu/threads.py``): the cuts of a range, the
parts run and their errors, and the attention kernels split by batch entries against float64
references (the size threshold lowered so small problems split)."""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu.lax import attention as att
from blu.lower.cpu import attention as lower_att
from blu.lower.cpu import blas
from blu.lower.cpu import flash as mlir_att
from blu.lower.cpu import threads as cpu_threads


@given(st.integers(0, 200), st.integers(1, 9), st.integers(1, 40))
def test_split_covers_the_range_in_near_equal_parts(n, threads, min_rows):
    cuts = cpu_threads.split(n, threads, min_rows)
    covered = [i for lo, hi in cuts for i in range(lo, hi)]
    assert covered == list(range(n))  # every row once, in order, contiguous parts
    assert len(cuts) <= threads and all(hi > lo for lo, hi in cuts)
    sizes = [hi - lo for lo, hi in cuts]
    if sizes:
        assert max(sizes) - min(sizes) <= 1
    if n >= min_rows and len(cuts) > 1:
        assert min(sizes) >= min_rows
    if n and threads == 1:
        assert cuts == [(0, n)]


@given(st.integers(0, 23), st.integers(1, 5))
def test_run_parts_runs_every_part_once(n, threads):
    seen, lock, names = [], threading.Lock(), set()

    def fn(lo, hi):
        with lock:
            seen.extend(range(lo, hi))
            names.add(threading.current_thread().name)

    cpu_threads.run_parts(fn, cpu_threads.split(n, threads))
    assert sorted(seen) == list(range(n))


def test_run_parts_raises_the_first_error_after_all_finished():
    done = []

    def fn(lo, hi):
        if lo == 0:
            raise ValueError("part 0")
        done.append(lo)

    with pytest.raises(ValueError, match="part 0"):
        cpu_threads.run_parts(fn, [(0, 1), (1, 2), (2, 3)])
    assert sorted(done) == [1, 2]


def _params(**kw):
    p = dict(scale=0.3, is_causal=True, has_bias=False, has_mask=False, implementation=None)
    p.update(kw)
    return p


def _problem(rng, b, dt, bias_lead, mask_lead):
    t, n, h = 7, 2, 8
    q, k, v = (rng.normal(size=(b, t, n, h)).astype(dt) for _ in range(3))
    extra = []
    if bias_lead is not None:
        lead = (b if bias_lead[0] else 1, n if bias_lead[1] else 1)
        extra.append((rng.normal(size=lead + (t, t)) * 0.5).astype(dt))
    if mask_lead is not None:
        lead = (b if mask_lead[0] else 1, n if mask_lead[1] else 1)
        m = rng.random(lead + (t, t)) < 0.8
        m[..., 0] = True  # every query sees a key
        extra.append(m)
    return [q, k, v], extra


def _f64(xs):
    return [x if x.dtype == bool else x.astype(np.float64) for x in xs]


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("b", [1, 2, 3, 5])
@pytest.mark.parametrize(
    "dt,bias_lead,mask_lead,need_dbias",
    [
        (np.float32, None, None, False),
        (np.float32, (1, 1), None, True),  # a bias per batch entry: its gradient split too
        (np.float32, (0, 1), None, True),  # dbias summed over the batch: the backward not split
        (np.float32, (1, 0), (1, 0), True),
        (np.float32, (0, 1), (0, 0), False),
        (ml_dtypes.bfloat16, None, None, False),
        (ml_dtypes.bfloat16, (1, 1), None, True),
        (ml_dtypes.bfloat16, (0, 0), None, True),
    ],
)
def test_attention_split_by_batch_matches_float64(
    monkeypatch, set_flag, threads, b, dt, bias_lead, mask_lead, need_dbias
):
    monkeypatch.setattr(blas, "MIN_THREADED_FLOPS", 0)
    set_flag("cpu_threads", threads)
    parts = []
    run = cpu_threads.run_parts
    # (the parts go to spinning workers where they are at hand: ``native``)
    monkeypatch.setattr(cpu_threads, "run_parts", lambda fn, cuts, native=False: (
        parts.append(len(cuts) if native else None), run(fn, cuts, native=native)))  # fmt: skip
    rng = np.random.default_rng(b * 10 + threads)
    (q, k, v), extra = _problem(rng, b, dt, bias_lead, mask_lead)
    params = _params(has_bias=bias_lead is not None, has_mask=mask_lead is not None)
    ins = [q, k, v, *extra]
    out64, lse64 = att.fwd_p.impl(*_f64(ins), **params)  # the numpy kernel in float64
    low = dt != np.float32
    tol = dict(rtol=2e-2, atol=2e-2) if low else dict(rtol=2e-5, atol=2e-5)
    fwd = lower_att.LOWERINGS[att.fwd_p]
    want = att.fwd_p.impl(*ins, **params)
    outs = [np.empty_like(w) for w in want]
    ws = np.empty(fwd.workspace([x for x in ins], params, "cpu"), np.uint8)
    fwd.cpu(ins, outs, ws, **params)
    np.testing.assert_allclose(outs[0].astype(np.float64), out64, **tol)
    np.testing.assert_allclose(outs[1].astype(np.float64), lse64, **tol)

    dout = rng.normal(size=out64.shape).astype(dt)
    bp = dict(params, has_dlse=False, need_dbias=need_dbias and bias_lead is not None)
    bins = [*ins, outs[0], outs[1], dout]
    want64 = att.bwd_p.impl(*_f64(ins), out64, lse64, dout.astype(np.float64), **bp)
    bwd = lower_att.LOWERINGS[att.bwd_p]
    got = [np.empty(w.shape, dt) for w in want64]
    ws = np.empty(bwd.workspace(bins, bp, "cpu"), np.uint8)
    bwd.cpu(bins, got, ws, **bp)
    for g, w in zip(got, want64):
        np.testing.assert_allclose(g.astype(np.float64), w, **tol)
    one_bias = bias_lead is not None and not bias_lead[0] and bp["need_dbias"]
    split = min(b, threads)
    assert parts == ([split] if one_bias else [split, split]) if b > 1 else parts == []


def test_attention_split_without_a_planned_workspace(monkeypatch, set_flag):
    monkeypatch.setattr(blas, "MIN_THREADED_FLOPS", 0)
    set_flag("cpu_threads", 2)
    rng = np.random.default_rng(7)
    (q, k, v), _ = _problem(rng, 4, np.float32, None, None)
    params = _params()
    out64, lse64 = att.fwd_p.impl(*_f64([q, k, v]), **params)
    outs = [np.empty(out64.shape, np.float32), np.empty(lse64.shape, np.float32)]
    lower_att.LOWERINGS[att.fwd_p].cpu([q, k, v], outs, None, **params)
    np.testing.assert_allclose(outs[0], out64, rtol=2e-5, atol=2e-5)
    sp = lower_att.cpu_spec([q, k, v], params)
    assert mlir_att.workspace_bytes(sp, "fwd") > 0


@given(st.integers(0, 300), st.integers(1, 5), st.floats(0.05, 0.95), st.sampled_from([1, 16]))
def test_split_with_a_share_covers_the_range(n, threads, share, align):
    cuts = cpu_threads.split(n, threads, share=share, align=align)
    covered = [i for lo, hi in cuts for i in range(lo, hi)]
    assert covered == list(range(n))
    assert len(cuts) <= threads and all(hi > lo for lo, hi in cuts)
    if len(cuts) > 1:
        first = cuts[0][1]
        # about ``share`` of the range (a multiple of ``align`` where that fits), the others even
        assert abs(first - n * share) <= max(align, 1) / 2 + 1 or first in (1, n - len(cuts) + 1)
        rest = [hi - lo for lo, hi in cuts[1:]]
        assert max(rest) - min(rest) <= 1


def test_balance_moves_the_callers_share_toward_equal_finish_times():
    b = cpu_threads.Balance()
    assert b.share is None and not b.solo()
    b.update(0.5, 1e-3, 1.0)  # the first call: not learned from (a pool thread being made)
    assert b.share is None and not b.solo()
    # the caller did half in 1 ms, the pool thread its half in 2 ms: the caller should do more
    b.update(0.5, 1e-3, 2e-3)
    assert 0.5 < b.share < 2 / 3
    for _ in range(30):
        b.update(b.share, b.share * 1e-3, (1 - b.share) * 2e-3)
    assert abs(b.share - 2 / 3) < 0.01  # rates 1 and 1/2 per ms: 2/3 of the range here
    assert not b.solo()
    # a pool thread that hardly runs: the whole range here for a few calls, then a split again
    b.update(b.share, 1e-3, 50e-3)
    assert b.share <= cpu_threads.MAX_SHARE
    assert [b.solo() for _ in range(cpu_threads.PROBE_EVERY + 1)] == [True] * (
        cpu_threads.PROBE_EVERY
    ) + [False]
    b.update(0.5, 0.0, 1e-3)  # no time measured: nothing learned
    assert b.share <= cpu_threads.MAX_SHARE


def test_run_parts_runs_the_whole_range_here_when_solo():
    b = cpu_threads.Balance()
    b.solo_left = 1
    calls = []

    def fn(lo, hi):
        calls.append((lo, hi, threading.current_thread().name))

    cpu_threads.run_parts(fn, cpu_threads.split(10, 3), b)
    assert [c[:2] for c in calls] == [(0, 10)] and calls[0][2] == threading.current_thread().name
    calls.clear()
    cpu_threads.run_parts(fn, cpu_threads.split(10, 3), b)  # split again, and timed (the first)
    assert sorted(c[:2] for c in calls) == [(0, 3), (3, 6), (6, 10)] and b.warm


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 60), st.integers(2, 3))
def test_unbalanced_split_kernels_match_float64(r, threads):
    """Kernels split by rows at a learned share (the first part larger or smaller) and run
    whole (``Balance.solo``) give the same rows as numpy float64."""
    from blu.lower.cpu import rows

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rows, "MIN_SPLIT_WORK", 0)
        mp.setattr(rows, "_MIN_ROWS_ELEMENTS", 1)
        blu.config.update("cpu_threads", threads)
        try:
            rng = np.random.default_rng(r)
            x = rng.standard_normal((r, 7)).astype(np.float32)
            f = blu.jit(lambda x: blu.nn.softmax(x * 2, -1))
            exe = f.lower(x, target="cpu").compile().executable
            (kernel,) = [run for _, run, n in exe.runners if isinstance(run, rows.RowKernel)]
            e = np.exp(2 * x.astype(np.float64) - 2 * x.max(1, keepdims=True))
            want = e / e.sum(1, keepdims=True)
            for share, solo in ((0.2, 0), (0.85, 0), (None, 2)):
                kernel.balance.share, kernel.balance.solo_left = share, solo
                got = exe(x)[0]
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        finally:
            blu.config.update("cpu_threads", None)
