"""Tensor parallelism (Megatron, ``blu.parallel.tensor``), pipeline parallelism (1F1B,
``blu.parallel.pipeline``) and 2-D meshes on virtual CPU devices: GPT-2's loss and every
parameter's gradient equal the single-device ones; the 1F1B schedule keeps its dependencies,
its in-flight bound and the bubble fraction (S - 1) / (M + S - 1).

The sharded programs run through jit's reference (numpy) executor: what is checked is the
sharded program's semantics; compiling the unrolled pipeline through MLIR takes a minute, which
``benchmarks/parallel_cpu.py`` pays instead.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.random as random
from blu import nn
from blu import parallel as bp
from blu.core import pytree
from blu.parallel import P, tensor
from blu.parallel.pipeline import BWD, FWD, IDLE, schedule_1f1b
from examples.gpt2.model import GPTConfig, init_params, loss_fn
from examples.parallel import gpt2
from examples.parallel import megatron as mg
from examples.parallel import pipeline as pl


@pytest.fixture
def virtual(set_flag):
    set_flag("jit_backend", "numpy")

    def devices(n):
        set_flag("num_cpu_devices", n)

    return devices


def _batch(cfg, b, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, cfg.vocab_size, (b, cfg.n_ctx)).astype(np.int32)
    y = rng.integers(0, cfg.vocab_size, (b, cfg.n_ctx)).astype(np.int32)
    return x, y


def _assert_grads_equal(got, want, what):
    gl, wl = pytree.tree_leaves(got), pytree.tree_leaves(want)
    assert pytree.tree_structure(got) == pytree.tree_structure(want), what
    for i, (g, w) in enumerate(zip(gl, wl)):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        assert g.shape == w.shape, (what, i, g.shape, w.shape)
        scale = max(np.abs(w).max(), 1e-3)  # float32 sums in another order: relative to the leaf
        np.testing.assert_allclose(g, w, atol=2e-5 * scale, rtol=1e-4, err_msg=f"{what} {i}")


# ---- the schedule -------------------------------------------------------------------------------


@given(st.integers(1, 5), st.integers(1, 9))
def test_1f1b_schedule_order_bound_and_bubble(S, M):
    sc = schedule_1f1b(S, M)
    tick = {}
    for t in range(sc.ticks):
        for s in range(S):
            k, m = int(sc.kind[t, s]), int(sc.micro[t, s])
            if k != IDLE:
                assert (k, s, m) not in tick  # each op once
                tick[(k, s, m)] = t
    assert len(tick) == 2 * S * M
    for s in range(S):
        for m in range(M):
            if s > 0:  # a stage's forward after the previous stage's, a tick later
                assert tick[(FWD, s, m)] > tick[(FWD, s - 1, m)]
            if s < S - 1:
                assert tick[(BWD, s, m)] > tick[(BWD, s + 1, m)]
            assert tick[(BWD, s, m)] > tick[(FWD, s, m)]
    assert sc.in_flight() <= S  # 1F1B: at most S micro-batches' inputs kept (GPipe: M)
    assert sc.ticks == 2 * (M + S - 1)
    assert sc.bubble_fraction == pytest.approx((S - 1) / (M + S - 1))


# ---- tensor parallelism -------------------------------------------------------------------------


def test_column_and_row_parallel_mlp_equal_numpy(virtual):
    virtual(4)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    w1, b1 = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal(16)
    w2, b2 = rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal(8)
    b1, b2 = b1.astype(np.float32), b2.astype(np.float32)
    h = x.astype(np.float64) @ w1 + b1
    want = np.maximum(h, 0) @ w2 + b2
    mesh = bp.make_mesh((4,), ("model",))

    def f(x, w1, b1, w2, b2):
        return tensor.row_linear(nn.relu(tensor.column_linear(x, w1, b1)), w2, b2, "model")

    specs = (P(), P(None, "model"), P("model"), P("model", None), P())
    got = blu.jit(bp.shard(f, mesh, specs, P()))(x, w1, b1, w2, b2)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "shape,names,sp",
    [((2,), ("model",), False), ((4,), ("model",), True), ((2, 2), ("data", "model"), False)],
)
def test_tensor_parallel_gpt2_loss_and_gradients(virtual, shape, names, sp):
    virtual(int(np.prod(shape)))
    cfg = GPTConfig(2, 4, 32, 8, vocab_size=24)
    params = init_params(cfg, random.key(0))
    x, y = _batch(cfg, 4)
    loss, grads = blu.value_and_grad(lambda p: loss_fn(p, x, y, cfg))(params)
    mesh = bp.make_mesh(shape, names)
    lp = mg.to_layout(params)
    ps = mg.specs(lp)
    l_tp, g_tp = mg.grads_fn(cfg, mesh, ps, sp)(lp, x, y)
    assert np.shape(l_tp) == ()
    np.testing.assert_allclose(float(l_tp), float(loss), rtol=1e-6)
    # each device holds 1/M of the split weights
    w = mg.specs(lp)["h"][0]["mlp"]["c_fc"]["w"]
    assert w == P(None, "model")
    _assert_grads_equal(mg.from_layout(pytree.tree_map(np.asarray, g_tp)), grads, names)


def test_layout_round_trip_keeps_values():
    cfg = GPTConfig(1, 2, 8, 4, vocab_size=5)
    p = init_params(cfg, random.key(1))
    back = mg.from_layout(mg.to_layout(p))
    for a, b in zip(pytree.tree_leaves(back), pytree.tree_leaves(p)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    lay = pl.from_layout(pl.to_layout(p, 1))
    for a, b in zip(pytree.tree_leaves(lay), pytree.tree_leaves(p)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ---- pipeline parallelism -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,names,micro", [((2,), ("pipe",), 2), ((4,), ("pipe",), 2), ((2, 2), ("data", "pipe"), 2)]
)
def test_pipeline_gpt2_loss_and_gradients(virtual, shape, names, micro):
    virtual(int(np.prod(shape)))
    cfg = GPTConfig(4, 2, 16, 8, vocab_size=24)
    params = init_params(cfg, random.key(0))
    x, y = _batch(cfg, 8)
    loss, grads = blu.value_and_grad(lambda p: loss_fn(p, x, y, cfg))(params)
    mesh = bp.make_mesh(shape, names)
    layout = pl.to_layout(params, mesh.shape["pipe"])
    l_pp, g_pp = pl.grads_fn(cfg, mesh, micro)(layout, x, y)
    assert np.shape(l_pp) == ()
    np.testing.assert_allclose(float(l_pp), float(loss), rtol=1e-6)
    _assert_grads_equal(pl.from_layout(pytree.tree_map(np.asarray, g_pp)), grads, names)


# ---- the example's modes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags,n", [("model=2|1|sp", 2), ("data=2|2|", 4), ("data=2,model=2|1|", 4)]
)
def test_training_in_each_mode_equals_one_device(virtual, flags, n):
    virtual(n)
    from examples.gpt2.data import CharTokenizer
    from examples.parallel import data_parallel as dp

    mesh_text, stages, sp = flags.split("|")
    tok = CharTokenizer.from_text(dp.TEXT)
    cfg = dp.GPTConfig(2, 2, 32, 16, vocab_size=tok.vocab_size)
    ref = dp.train(cfg, tok.encode(dp.TEXT), steps=3, batch=8, mesh=None)
    sizes = gpt2.parse_mesh(mesh_text, int(stages), n)
    losses = gpt2.train(cfg, tok.encode(dp.TEXT), 3, 8, gpt2.mode_of(sizes), sizes,
                        sequence_parallel=bool(sp))  # fmt: skip
    assert ref[-1] < ref[0]
    np.testing.assert_allclose(losses, ref, rtol=1e-5)


def test_mesh_flags():
    assert gpt2.parse_mesh(None, 1, 4) == {"data": 4}
    assert gpt2.parse_mesh("data=2,model=2", 1, 4) == {"data": 2, "model": 2}
    assert gpt2.parse_mesh("data=2", 2, 4) == {"data": 2, "pipe": 2}
    assert gpt2.mode_of({"data": 4}, fsdp=True) == "fsdp"
    assert gpt2.mode_of({"data": 2, "model": 2}) == "tp"
    with pytest.raises(ValueError, match="holds 2 devices"):
        gpt2.parse_mesh("model=2", 1, 4)
    with pytest.raises(ValueError, match="unknown axis"):
        gpt2.parse_mesh("tensor=4", 1, 4)


@pytest.mark.parametrize(
    "flags",
    [
        ["--pipeline", "2", "--mesh", "data=2"],
        ["--mesh", "data=2,model=2", "--sequence-parallel"],
        ["--fsdp"],
    ],
)
def test_command_line(virtual, capsys, flags):
    virtual(4)
    small = ["--steps", "2", "--batch", "8", "--ctx", "8", "--width", "16", "--heads", "2",
             "--layers", "2"]  # fmt: skip
    losses = gpt2.main(small + flags)
    assert len(losses) == 2 and all(np.isfinite(losses))
    out = capsys.readouterr().out
    assert "step    2" in out
    if "--pipeline" in flags:  # 2 stages, 2 micro-batches: (S - 1) / (M + S - 1)
        assert "bubble fraction 0.333" in out
