"""GPT-2 decoding with a KV cache (``examples/gpt2/decode.py``) on the tiny config: each cached
step's logits equal the full forward's at that position; greedy generation equals a loop of
full forwards; the while and fori loops draw the same tokens; the program traces once; bad
settings are refused. The ``gpu``-marked test runs the generation program on the GPU (or with
``BLU_FAKE_GPU=1`` a simulated one): a loop node, no host fallback, the CPU's tokens. Its shapes
are FIXED, so ``scripts/fill_gpu_cache.py`` compiles its kernels ahead for the GPU machine."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from gpu_helpers import GPU_MARKS, make_device, plan_nodes

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repo root holds examples/

import blu  # noqa: E402
import blu.cuda as bc  # noqa: E402
import blu.random as random  # noqa: E402
from blu.core import pytree  # noqa: E402
from examples.gpt2 import ExampleError  # noqa: E402
from examples.gpt2.decode import Generator, decode_step, generate, prefill  # noqa: E402
from examples.gpt2.model import CONFIGS, forward, init_params  # noqa: E402

VOCAB, B, P, N_NEW = 40, 2, 5, 7
CFG = CONFIGS["tiny"].with_vocab(VOCAB)
F32_TOL = dict(rtol=2e-5, atol=2e-6)  # float32 logits of order 1, a few dozen roundings apart


@pytest.fixture(scope="module")
def params():
    return pytree.tree_map(np.asarray, init_params(CFG, random.key(0)))


def prompt(seed=0, batch=B, length=P):
    return np.random.default_rng(seed).integers(0, VOCAB, (batch, length)).astype(np.int32)


def test_cached_logits_equal_full_forward(params):
    """Prefill then one decode step per position: the logits at every position are the full
    forward's (float32), the step compiled once for all positions."""
    ids = prompt(1, length=CFG.n_ctx)
    full = np.asarray(forward(params, ids, CFG))
    logits, cache = prefill(params, ids[:, :P], CFG)
    np.testing.assert_allclose(np.asarray(logits), full[:, P - 1], **F32_TOL)
    traces = []

    def step(p, c, t, pos):
        traces.append(1)
        return decode_step(p, c, t, pos, CFG)

    jstep = blu.jit(step)
    for pos in range(P, CFG.n_ctx):
        logits, cache = jstep(params, cache, ids[:, pos], np.int32(pos))
        np.testing.assert_allclose(np.asarray(logits), full[:, pos], **F32_TOL)
    assert len(traces) == 1


def greedy_reference(params, ids, n_new):
    """A Python loop over the full forward's argmax."""
    ids = ids.copy()
    for _ in range(n_new):
        nxt = np.asarray(forward(params, ids, CFG))[:, -1].argmax(-1).astype(np.int32)
        ids = np.concatenate([ids, nxt[:, None]], axis=1)
    return ids[:, -n_new:]


@pytest.mark.parametrize("loop", ["while", "fori"])
def test_greedy_equals_full_forward_loop(params, loop):
    """Temperature 0 and top-k 1 both pick the full forward's most likely token each step."""
    ids = prompt(2)
    want = greedy_reference(params, ids, N_NEW)
    got = generate(params, ids, N_NEW, random.key(0), CFG, temperature=0.0, loop=loop)
    np.testing.assert_array_equal(np.asarray(got), want)
    top1 = generate(params, ids, N_NEW, random.key(5), CFG, temperature=1.0, top_k=1, loop=loop)
    np.testing.assert_array_equal(np.asarray(top1), want)


def test_while_and_fori_draw_the_same_tokens(params):
    """The same key gives the same top-k samples whichever loop runs them; another key other
    tokens; the tokens are valid ids."""
    ids = prompt(3)
    key = random.key(7)
    w = np.asarray(generate(params, ids, N_NEW, key, CFG, temperature=1.0, top_k=5, loop="while"))
    f = np.asarray(generate(params, ids, N_NEW, key, CFG, temperature=1.0, top_k=5, loop="fori"))
    np.testing.assert_array_equal(w, f)
    assert w.shape == (B, N_NEW) and w.dtype == np.int32
    assert ((0 <= w) & (w < VOCAB)).all()
    other = generate(params, ids, N_NEW, random.key(8), CFG, temperature=1.0, top_k=5, loop="fori")
    assert not np.array_equal(np.asarray(other), f)


def test_end_token_stops_the_while_loop(params):
    """With an end token, a sequence repeats it once drawn; the while loop stops once every
    sequence has drawn it and returns what the fori loop (all steps) returns."""
    ids = prompt(4, batch=1)
    greedy = greedy_reference(params, ids, N_NEW)[0]
    eos = int(greedy[2])
    first = int(np.argmax(greedy == eos))
    outs = {}
    for loop in ("while", "fori"):
        g = Generator(CFG, N_NEW, temperature=0.0, loop=loop, eos_id=eos)
        outs[loop] = np.asarray(g(params, ids, random.key(0)))[0]
    np.testing.assert_array_equal(outs["while"], outs["fori"])
    np.testing.assert_array_equal(outs["while"][: first + 1], greedy[: first + 1])
    assert (outs["while"][first:] == eos).all()


def test_generate_traces_once(params):
    """Other prompts (same shape) and other keys reuse the one compiled program."""
    g = Generator(CFG, N_NEW, temperature=0.8, top_k=10, loop="while")
    a = np.asarray(g(params, prompt(5), random.key(0)))
    b = np.asarray(g(params, prompt(6), random.key(1)))
    assert g.trace_count == 1
    assert a.shape == b.shape == (B, N_NEW)


def test_bad_settings_are_refused(params):
    with pytest.raises(ExampleError, match="prompt"):
        Generator(CFG, N_NEW)(params, prompt(length=CFG.n_ctx - N_NEW + 1), random.key(0))
    with pytest.raises(ExampleError, match="prompt"):
        Generator(CFG, N_NEW)(params, prompt()[0], random.key(0))
    with pytest.raises(ExampleError, match="top-k"):
        Generator(CFG, N_NEW, top_k=VOCAB + 1)
    with pytest.raises(ExampleError, match="temperature"):
        Generator(CFG, N_NEW, temperature=-1.0)
    with pytest.raises(ExampleError, match="loop"):
        Generator(CFG, N_NEW, loop="scan")
    with pytest.raises(ExampleError, match="new tokens"):
        Generator(CFG, CFG.n_ctx)
    with pytest.raises(ExampleError, match="eos_id"):
        Generator(CFG, N_NEW, eos_id=VOCAB)
    with pytest.raises(ExampleError, match="cache"):
        prefill(params, prompt(length=P), CFG, length=P - 1)


# ---- on the GPU ---------------------------------------------------------------------------------


def on_gpu(test):
    for mark in GPU_MARKS:
        test = mark(test)
    return test


@on_gpu
@pytest.mark.parametrize("loop", ["while", "fori"])
def test_generation_runs_on_the_gpu(params, loop):
    """The whole generation (prefill, decode steps, top-k sampling) is one program whose loop
    is a loop node with no host fallback, in it or around it; its tokens are those of the same
    program run eagerly on the host. (Short scans are not unrolled here: ``BLU_UNROLL_SCANS``
    would inline this test's few steps.)"""
    with blu.config.override(unroll_scans=0):
        _generation_on_the_gpu(params, loop)


def _generation_on_the_gpu(params, loop):
    dev = make_device()
    ids, key = prompt(9), random.key(3)
    g = Generator(CFG, N_NEW, temperature=1.0, top_k=5, loop=loop)
    nodes = plan_nodes(Generator(CFG, N_NEW, 1.0, 5, loop)._generate, params, ids, key)
    kinds = [n.kind for n in nodes]
    assert "loop" in kinds and "fallback" not in kinds, kinds
    for n in nodes:
        for _, _, prepared, _, _ in n.bodies or ():
            assert all(b.kind != "fallback" for b in prepared.plan.nodes), prepared.plan
    # the reference: the same program run eagerly (numpy impls: nothing compiled for the CPU,
    # which the GPU machine could not do)
    want = np.asarray(Generator(CFG, N_NEW, 1.0, 5, loop)._generate(params, ids, key))
    on_dev = pytree.tree_map(lambda x: bc.device_put(np.asarray(x), dev), params)
    got = g(on_dev, bc.device_put(ids, dev), bc.device_put(np.asarray(key), dev))
    assert isinstance(got, bc.DeviceArray)
    np.testing.assert_array_equal(np.asarray(got), want)
    assert g.trace_count == 1


def test_generation_benchmark_runs_on_the_cpu(capsys):
    """``benchmarks/generate.py`` end to end on the tiny config (no GPU: the CPU program; PyTorch
    where installed): a table row per system, the fidelity line agreeing token for token."""
    from benchmarks import generate as bench

    systems = "blu-fori,blu-while"
    try:
        import torch  # noqa: F401

        systems += ",torch"
    except ImportError:
        pass
    argv = ["--config", "tiny", "--batches", "1", "--prompt", "3", "--new", "4", "--modes",
            "fp32", "--systems", systems, "--reps", "1", "--warmup", "0"]  # fmt: skip
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert "4/4 tokens agree" in out or "torch" not in systems
    for s in systems.split(","):
        assert f"| {s} | fp32 | 1 |" in out
    assert "failed" not in out
