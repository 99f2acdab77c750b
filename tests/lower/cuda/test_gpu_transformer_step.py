"""Two AdamW training steps of the decoder examples (GPT-2 and LLaMA, tiny configs, bf16
compute as the benchmark runs them) on the (simulated) GPU against the same steps on the CPU.
The GPU plan's rewrites run on whole models here: cuBLASLt epilogues (``dot_bias``, ``dot_acc``:
the chunked classifier's weight gradient, LLaMA's residual sums), packed attention, the values
recomputed in their readers instead of crossing kernels."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from gpu_helpers import make_device, on_gpu, put

import blu

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks" / "peers"))

from blu_gpt2 import ADAMW, make_optimizer, precision_scope, train_step  # noqa: E402
from blu_models import host_params, model_config  # noqa: E402

LR = ADAMW["learning_rate"]  # the benchmark AdamW's (constant) learning rate


@on_gpu
@pytest.mark.parametrize("name", ["tiny", "llama-tiny"])
def test_decoder_steps_match_the_cpu(name):
    cfg = model_config(name, vocab=96)
    params = host_params(cfg, seed=1)
    state = (params, blu.tree_util.tree_map(np.array, make_optimizer().init(params)))
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, 96, (2, 1, 4, 16)).astype(np.int32)  # two steps' (1, B, T)
    key = np.zeros(2, np.uint32)

    def two_steps(dev=None):
        step = train_step(cfg, "bf16")  # a fresh jit: its own executables
        to = (lambda a: put(dev, a)) if dev else blu.numpy.array  # noqa: E731
        p, o = blu.tree_util.tree_map(lambda a: to(np.array(a)), state)
        losses = []
        with precision_scope("bf16"):
            for xs in tokens:
                p, o, loss, _ = step(p, o, to(xs), to(np.roll(xs, -1, -1)), to(key))
                losses.append(float(loss))
        return losses, [np.asarray(a, np.float64) for a in blu.tree_util.tree_leaves(p)]

    want_loss, want = two_steps()
    got_loss, got = two_steps(make_device())
    np.testing.assert_allclose(got_loss, want_loss, rtol=2e-3)
    # AdamW moves each weight by about the learning rate, in its gradient's sign: the two
    # plans' updates agree but where a gradient is near 0 (bf16 products round apart there)
    init = [np.asarray(a, np.float64) for a in blu.tree_util.tree_leaves(params)]
    moved = [np.abs((g - i) - (w - i)).ravel() for g, w, i in zip(got, want, init, strict=True)]
    apart = np.concatenate(moved) > LR / 2
    assert apart.mean() < 0.02, apart.mean()
