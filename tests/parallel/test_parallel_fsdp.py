"""FSDP (ZeRO-3, ``blu.parallel.fsdp``): GPT-2 trained with parameters, gradients and AdamW
state sharded over ``data`` gives the losses of one device on the same global batch, and the
per-device program's planned memory for the sharded state falls as 1/N."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from blu import parallel as bp
from blu.parallel import P, fsdp
from examples.gpt2.data import CharTokenizer
from examples.parallel import data_parallel as dp
from examples.parallel import fsdp as fs

_is_spec = lambda s: isinstance(s, P)  # noqa: E731


@given(st.lists(st.integers(0, 12), min_size=0, max_size=3), st.sampled_from([1, 2, 3, 4]))
def test_specs_split_the_largest_divisible_dimension(shape, n):
    spec = fsdp.specs({"w": np.zeros(shape, np.float32)}, n)["w"]
    dims = [i for i in range(len(spec)) if spec.names_of(i)]
    fits = [s for s in shape if s % n == 0 and s >= n]
    if n == 1 or not fits:
        assert dims == []
    else:
        (d,) = dims
        assert spec.names_of(d) == ("data",) and shape[d] == max(fits)
        assert shape[d] % n == 0


def test_optimizer_specs_follow_the_parameters():
    params = {"a": np.zeros((4, 2), np.float32), "b": np.zeros((3,), np.float32)}
    specs = fsdp.specs(params, 2)
    state = dp.make_optimizer(params).init(params)
    ss = fsdp.optimizer_specs(state, params, specs)
    assert ss.mu == specs and ss.nu == specs and ss.step == P()
    assert specs == {"a": P("data"), "b": P()}


@pytest.fixture(scope="module")
def tiny():
    tok = CharTokenizer.from_text(dp.TEXT)
    return dp.GPTConfig(2, 2, 32, 16, vocab_size=tok.vocab_size), tok.encode(dp.TEXT)


def test_fsdp_training_equals_one_device(tiny, set_flag):
    set_flag("num_cpu_devices", 4)
    cfg, tokens = tiny
    ref = dp.train(cfg, tokens, steps=3, batch=8, mesh=None)
    mesh = bp.make_mesh((4,), ("data",))
    params, _, specs, _, _ = fs.setup(cfg, mesh)
    # every matrix is split 4 ways: each device holds a quarter
    w = params["h"][0]["mlp"]["c_fc"]["w"]
    assert specs["h"][0]["mlp"]["c_fc"]["w"] == P(None, "data")
    assert {np.shape(s.data) for s in w.addressable_shards} == {(32, 32)}
    losses = fs.train(cfg, tokens, steps=3, batch=8, mesh=mesh)
    assert ref[-1] < ref[0]
    np.testing.assert_allclose(losses, ref, rtol=1e-5)


def test_fsdp_state_memory_falls_as_one_over_n():
    cfg = dp.GPTConfig(2, 2, 64, 16, vocab_size=64)
    m = {n: fs.per_device_memory(cfg, n, local_batch=2) for n in (1, 2, 4)}
    state = m[1].argument_bytes  # parameters + AdamW moments (+ the small batch)
    batch = 2 * 2 * 16 * 4  # x and y, int32
    for n in (2, 4):
        # the sharded state (every leaf here divides by 4) is 1/N of the whole
        np.testing.assert_allclose(m[n].argument_bytes - batch, (state - batch) / n, rtol=0.01)
        assert m[n].peak_bytes < m[1].peak_bytes
    # the same local batch: what the peak saves is the state's (N-1)/N, at least half of it
    saved = m[1].peak_bytes - m[4].peak_bytes
    assert saved >= 0.5 * (state - batch) * 3 / 4, (m[1], m[4])
    dp4 = fs.per_device_memory(cfg, 4, 2, mode="dp")
    assert dp4.argument_bytes == m[1].argument_bytes  # data parallelism replicates it all
    z4 = fs.per_device_memory(cfg, 4, 2, mode="zero1")  # ZeRO-1: the moments (2/3) sharded
    assert m[4].argument_bytes < z4.argument_bytes < dp4.argument_bytes
