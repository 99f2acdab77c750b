"""Independent matrix products run side by side on the CPU (``blu/lower/cpu/pairs.py``): which
adjacent products pair, that the memory plan keeps each one's buffers out of the other's way,
and results against numpy float64 (an MLP training step's gradients, odd shapes, one thread)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import mlp_params, mlp_step, mlp_step_float64
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu.lower.cpu import blas, pairs

_byte_bounds = getattr(np.lib, "array_utils", np).byte_bounds


def _two(a, b, c):
    # two products reading b, neither reading the other's result
    return a @ b, c @ b


def _lowered(f, *args):
    return blu.jit(f).lower(*args, target="cpu")._program


@pytest.fixture
def pair_everything(monkeypatch):
    monkeypatch.setattr(blas, "MIN_THREADED_FLOPS", 0)


def test_independent_products_pair(pair_everything, set_flag):
    set_flag("cpu_threads", 2)
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in [(8, 6), (6, 5), (7, 6)])
    prog = _lowered(_two, a, b, c)
    kinds = [n.kind for n in prog.plan.nodes]
    assert kinds == ["dot", "dot"] and prog.memory.concurrent == {0}
    # the second product reads the first one's result: no pair
    chain = _lowered(lambda a, b, c: (a @ b) @ b.T, a, b, c)
    assert chain.memory.concurrent == frozenset()
    set_flag("cpu_threads", 1)
    assert _lowered(_two, a, b, c).memory.concurrent == frozenset()


def test_unbalanced_or_small_products_do_not_pair(set_flag):
    set_flag("cpu_threads", 2)
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in [(8, 6), (6, 5), (7, 6)])
    assert _lowered(_two, a, b, c).memory.concurrent == frozenset()  # below the threshold
    big = [rng.standard_normal(s).astype(np.float32) for s in [(512, 256), (256, 256), (400, 256)]]
    assert _lowered(_two, *big).memory.concurrent == {0}
    a, b = (rng.standard_normal((512, 512)).astype(np.float32) for _ in range(2))
    c, d = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
    both = _lowered(lambda a, b, c, d: (a @ b, c @ d), a, b, c, d)  # 8x the flops: one waits
    assert [n.kind for n in both.plan.nodes] == ["dot", "dot"]
    assert both.memory.concurrent == frozenset()


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 9), st.sampled_from([1, 3, 16]), st.sampled_from([2, 7]), st.integers(1, 3))
def test_paired_training_step_matches_float64(n, d, hidden, threads):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(blas, "MIN_THREADED_FLOPS", 0)
        mp.setattr(pairs, "MAX_RATIO", 1e9)
        blu.config.update("cpu_threads", threads)
        try:
            rng = np.random.default_rng(n * 100 + d * 10 + hidden)
            p = mlp_params(rng, d, hidden, 3)
            x = rng.standard_normal((n, d)).astype(np.float32)
            y = rng.standard_normal((n, 3)).astype(np.float32)
            prog = _lowered(mlp_step, p, x, y)
            assert bool(prog.memory.concurrent) == (threads > 1)
            got = blu.jit(mlp_step)(p, x, y)
            want = mlp_step_float64(p, x, y)
            for k in p:
                np.testing.assert_allclose(np.asarray(got[k]), want[k], rtol=1e-4, atol=1e-5)
        finally:
            blu.config.update("cpu_threads", None)


def test_paired_buffers_do_not_overlap(pair_everything, set_flag):
    """Each product of a pair writes nowhere the other reads or writes (the memory plan keeps
    the first one's operands live through the second)."""
    set_flag("cpu_threads", 2)
    rng = np.random.default_rng(2)
    p = mlp_params(rng, 16, 32, 8)
    x, y = rng.standard_normal((4, 16)).astype(np.float32), np.zeros((4, 8), np.float32)
    exe = blu.jit(mlp_step).lower(p, x, y, target="cpu").compile().executable
    assert exe._pair_at
    seen = []
    for k in exe._pair_at:
        for a, b in ((k, k + 1), (k + 1, k)):
            allocs, run, _ = exe.runners[a]

            def spy(env, arena, owned, run=run, a=a, b=b):
                # what each writes: its runner's buffers (a fused product writes the update's)
                seen.append((a, b))
                mine = [env[s] for s, _, _ in exe.runners[a][0]]
                theirs = [env[s] for s in exe.steps.steps[b].ins if isinstance(s, int)]
                theirs += [env[s] for s, _, _ in exe.runners[b][0]]
                for m in mine:
                    for t in theirs:
                        lo, hi = _byte_bounds(m)
                        tlo, thi = _byte_bounds(t)
                        assert hi <= tlo or thi <= lo
                run(env, arena, owned)

            exe.runners[a] = (allocs, spy, _)
    flat = [np.asarray(v) for v in [p["b1"], p["b2"], p["w1"], p["w2"], x, y]]
    exe(*flat)
    assert len(seen) == 2 * len(exe._pair_at)


def test_pair_run_one_after_the_other(pair_everything, set_flag):
    """A pair whose pool thread fell behind runs serially on the caller's thread for a while
    (``threads.Balance.solo``): the same results."""
    set_flag("cpu_threads", 2)
    rng = np.random.default_rng(4)
    p = mlp_params(rng, 6, 9, 3)
    x, y = rng.standard_normal((5, 6)).astype(np.float32), rng.standard_normal((5, 3))
    y = y.astype(np.float32)
    f = blu.jit(mlp_step)
    exe = f.lower(p, x, y, target="cpu").compile().executable
    assert exe._pair_at
    for k in exe._pair_at:
        exe._pair_balance[k].solo_left = 2
    want = mlp_step_float64(p, x, y)
    for call in range(3):  # two serial calls, then paired again
        got = f(p, x, y)
        for k in p:
            np.testing.assert_allclose(np.asarray(got[k]), want[k], rtol=1e-4, atol=1e-5)
        if call == 0:
            assert all(exe._pair_balance[k].solo_left == 1 for k in exe._pair_at)


def test_a_product_handed_to_a_loop_leaves_its_pair(pair_everything, set_flag, monkeypatch):
    """When a loop takes over one product of a pair (``_stream_products`` replaces its step),
    the pair is dropped and the other product is built to split across the threads again."""
    from blu.lower.cpu import executable

    set_flag("cpu_threads", 2)
    rng = np.random.default_rng(5)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in [(8, 6), (6, 5), (7, 6)])
    solos = []
    dot = blas.dot_runner
    monkeypatch.setattr(blas, "dot_runner", lambda e, solo=False: (solos.append(solo),
                                                                   dot(e, solo))[1])  # fmt: skip

    def stream(self):  # as if a loop took the first product (here: the same work, wrapped)
        allocs, run, node = self.runners[0]
        self.runners[0] = (allocs, lambda env, arena, owned: run(env, arena, owned), node)

    monkeypatch.setattr(executable.CpuExecutable, "_stream_products", stream)
    exe = blu.jit(_two).lower(a, b, c, target="cpu").compile().executable
    assert exe.memory.concurrent == {0} and not exe._pair_at
    assert solos == [True, True, False]  # the partner rebuilt, no longer on one thread
    x, y = exe(a, b, c)
    np.testing.assert_allclose(x, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y, c.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
