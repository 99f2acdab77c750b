"""The parallel examples: data-parallel GPT-2 (plain and ZeRO-1) gives the losses of one device on
the same global batch; the tensor-parallel MLP equals the unsharded MLP, and so does its
training step."""

from __future__ import annotations

import numpy as np
import pytest

import blu
import blu.numpy as bnp
import blu.random as random
from blu import parallel as bp
from blu.core import pytree
from examples.gpt2.data import CharTokenizer
from examples.parallel import data_parallel as dp
from examples.parallel import tensor_parallel as tp


@pytest.fixture(autouse=True)
def _devices(set_flag):
    set_flag("num_cpu_devices", 4)


@pytest.fixture(scope="module")
def tiny():
    tok = CharTokenizer.from_text(dp.TEXT)
    cfg = dp.GPTConfig(2, 2, 32, 16, vocab_size=tok.vocab_size)
    return cfg, tok.encode(dp.TEXT)


@pytest.fixture(scope="module")
def single_device_losses(tiny):
    cfg, tokens = tiny
    return dp.train(cfg, tokens, steps=4, batch=8, mesh=None)


@pytest.mark.parametrize("zero1", [False, True])
def test_data_parallel_matches_one_device(tiny, single_device_losses, zero1, set_flag):
    set_flag("num_cpu_devices", 4)
    cfg, tokens = tiny
    mesh = bp.make_mesh((4,), ("data",))
    losses = dp.train(cfg, tokens, steps=4, batch=8, mesh=mesh, zero1=zero1)
    ref = single_device_losses
    assert ref[-1] < ref[0]  # it trains
    np.testing.assert_allclose(losses, ref, rtol=1e-5)


def test_zero1_shards_the_optimizer_state(tiny):
    cfg, _ = tiny
    params = dp.init_params(cfg, random.key(0))
    opt = dp.make_optimizer(params)
    state = dp.zero1_init(opt, params, 4)
    specs = dp.zero1_specs(state)
    moments = pytree.tree_leaves(state.mu)
    assert all(m.ndim == 1 and m.shape[0] % 4 == 0 for m in moments)
    assert specs.step == bp.P() and all(
        s == bp.P("data")
        for s in pytree.tree_leaves(specs.mu, is_leaf=lambda s: isinstance(s, bp.P))
    )
    # each device holds a quarter of every moment
    mesh = bp.make_mesh((4,), ("data",))
    placed = bp.device_put(state.mu["wte"], bp.NamedSharding(mesh, bp.P("data")))
    assert {np.shape(s.data) for s in placed.addressable_shards} == {(placed.shape[0] // 4,)}


@pytest.mark.parametrize("shape", [(1, 4), (2, 2), (4, 1)])
def test_tensor_parallel_mlp(shape):
    mesh = bp.make_mesh(shape, (tp.DATA, tp.MODEL))
    params = tp.init_mlp(random.key(1), 8, 32)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 8)).astype(np.float32)
    y = rng.standard_normal((8, 8)).astype(np.float32)
    np.testing.assert_allclose(
        np.asarray(tp.tp_mlp(mesh)(params, x)), np.asarray(tp.mlp(params, x)), rtol=1e-5, atol=1e-6
    )
    new, loss = tp.tp_train_step(mesh, lr=0.1)(params, x, y)

    def ref_loss(p):
        return bnp.mean((tp.mlp(p, x) - y) ** 2)

    rl, rg = blu.value_and_grad(ref_loss)(params)
    np.testing.assert_allclose(float(loss), float(rl), rtol=1e-5)
    for k in params:
        want = np.asarray(params[k]) - 0.1 * np.asarray(rg[k])
        np.testing.assert_allclose(np.asarray(new[k]), want, rtol=1e-5, atol=1e-6)


def test_command_lines_run(capsys):
    losses = dp.main(["--steps", "2", "--batch", "4", "--ctx", "8", "--width", "16", "--heads", "2",
                      "--layers", "1", "--zero1"])  # fmt: skip
    assert len(losses) == 2 and all(np.isfinite(losses))
    tl = tp.main(["--model", "2", "--data", "2", "--width", "8", "--batch", "4", "--steps", "3"])
    assert tl[-1] < tl[0]
    assert "step" in capsys.readouterr().out
