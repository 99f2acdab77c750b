"""jit over sharded arrays (the SPMD partitioner, ``blu.parallel.spmd``) on virtual CPU devices.

Each partitioned program is checked against the same function run unpartitioned (one device)
and against numpy in float64; the collectives the partitioner inserted are checked against
what data parallelism, FSDP and tensor parallelism need (one all-reduce per gradient for DP,
reduce-scatters and parameter all-gathers for FSDP). The GPT-2 steps run on the numpy
interpreter (the partitioning is the same; compiling them would take most of a minute).
"""

from __future__ import annotations

import dataclasses
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu import optim
from blu.core import pytree
from blu.core.config import config
from blu.core.errors import BluShapeError, BluValueError
from blu.parallel import NamedSharding, P, make_mesh, spmd, with_sharding_constraint
from examples.gpt2 import model as M


@pytest.fixture(autouse=True)
def _devices(set_flag):
    set_flag("num_cpu_devices", 4)


def _close(got, want, rtol=2e-5, atol=2e-6):
    np.testing.assert_allclose(
        np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol
    )


def test_batch_split_mlp_equals_numpy_and_keeps_the_split():
    mesh = make_mesh((4,), ("data",))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 6)).astype(np.float32)
    w = rng.standard_normal((6, 5)).astype(np.float32)

    def f(x, w):
        h = bnp.tanh(x @ w)
        return (h * h).sum(), h

    xs = blu.device_put(x, NamedSharding(mesh, P("data")))
    jf = blu.jit(f)
    total, h = jf(xs, w)
    h64 = np.tanh(x.astype(np.float64) @ w)
    _close(total, (h64 * h64).sum())
    _close(h, h64)
    assert h.sharding == NamedSharding(mesh, P("data"))  # the batch split propagated
    # the sum of squares is the only communication: one all-reduce of a scalar
    assert [c.split(" for ")[0] for c in spmd.collectives(jf)] == [
        "all-reduce f32[] over ('data',)"
    ]


def test_collectives_before_any_run_raise():
    with pytest.raises(BluValueError, match="has not run over a mesh"):
        spmd.collectives(blu.jit(lambda x: x))


_SPECS = [
    P(),
    P("a"),
    P(None, "a"),
    P("b"),
    P(None, "b"),
    P("a", "b"),
    P("b", "a"),
    P(("a", "b")),
    P(None, ("b", "a")),
]


@settings(max_examples=25, deadline=None)
@given(
    sx=st.sampled_from(_SPECS),
    sw=st.sampled_from(_SPECS),
    so=st.sampled_from(_SPECS + [None]),
    shape=st.sampled_from([(4, 8, 4), (8, 4, 8), (4, 4, 4)]),
    seed=st.integers(0, 2**16),
)
def test_random_layouts_equal_numpy(sx, sw, so, shape, seed):
    """A product, a broadcast bias, a nonlinearity and a reduction, over every combination of
    input and output layouts on a 2x2 mesh (splits of contracted, free and reduced dims)."""
    mesh = make_mesh((2, 2), ("a", "b"))
    m, k, n = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    b = rng.standard_normal((n,)).astype(np.float32)

    def f(x, w, b):
        y = bnp.maximum(x @ w + b, 0.0)
        return y, y.sum(axis=0), (y @ w.T).max()

    out_sh = None if so is None else (NamedSharding(mesh, so), None, None)
    with config.override(jit_backend="numpy"):  # (the partitioning is the same; compiled above)
        got = blu.jit(
            f,
            in_shardings=(NamedSharding(mesh, sx), NamedSharding(mesh, sw), None),
            out_shardings=out_sh,
        )(x, w, b)
    y = np.maximum(x.astype(np.float64) @ w + b, 0)
    for g, want in zip(got, (y, y.sum(0), (y @ w.T).max())):
        _close(g, want, rtol=1e-5, atol=1e-5)
    if so is not None:
        sh = got[0].sharding  # (a replicated result is a plain array)
        assert sh.spec == so if isinstance(sh, NamedSharding) else so == P()


def test_grad_outside_a_partitioned_jit_is_the_global_gradient():
    mesh = make_mesh((4,), ("data",))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 3)).astype(np.float32)
    w = rng.standard_normal((3,)).astype(np.float32)
    loss = blu.jit(
        lambda w, x: bnp.mean(bnp.sin(x @ w) ** 2),
        in_shardings=(None, NamedSharding(mesh, P("data"))),
    )
    g = blu.grad(loss)(w, x)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    z = x64 @ w64
    _close(g, (2 * np.sin(z) * np.cos(z)) @ x64 / len(x), rtol=1e-5, atol=1e-6)


def test_with_sharding_constraint_sets_the_layout_and_is_a_no_op_outside():
    mesh = make_mesh((4,), ("data",))
    x = np.arange(32, dtype=np.float32).reshape(8, 4)

    def f(x):
        return with_sharding_constraint(x * 2, NamedSharding(mesh, P(None, "data")))

    np.testing.assert_array_equal(np.asarray(f(x)), x * 2)  # not partitioned: unchanged
    out = blu.jit(f, in_shardings=NamedSharding(mesh, P("data")))(x)
    np.testing.assert_array_equal(np.asarray(out), x * 2)
    assert out.sharding.spec == P(None, "data")
    # a NamedSharding over the same axis names but other devices is not the jit's mesh (its
    # spec was laid out on the jit's devices silently)
    rev = blu.make_mesh((4,), ("data",), devices=blu.devices()[::-1])
    with pytest.raises(BluValueError, match=r"another mesh \(devices \[3, 2, 1, 0\]\)"):
        blu.jit(
            lambda v: with_sharding_constraint(v, NamedSharding(rev, P("data"))),
            in_shardings=NamedSharding(mesh, P()),
        )(x)


def test_with_sharding_constraint_outside_a_partitioned_jit_checks_its_spec():
    # a no-op there, but a spec longer than the rank is the error JAX raises (it was dropped
    # silently, to fail only once the inputs were sharded); an uneven split is allowed, as JAX's
    mesh = make_mesh((2, 2), ("a", "b"))
    x = np.arange(24, dtype=np.float32).reshape(8, 3)
    uneven = NamedSharding(mesh, P(None, "b"))
    for f in (lambda v: v, blu.jit):
        out = f(lambda v: with_sharding_constraint(v * 2, uneven))(x)
        np.testing.assert_array_equal(np.asarray(out), x * 2)
        with pytest.raises(BluValueError, match=r"P\('a', None, 'b'\) has 3 entries .* \(8, 3\)"):
            f(lambda v: with_sharding_constraint(v, NamedSharding(mesh, P("a", None, "b"))))(x)
        with pytest.raises(BluValueError, match=r"2 entries for an array of rank 1 \(shape \(3,"):
            both = NamedSharding(mesh, P("a", "b"))
            f(lambda v: with_sharding_constraint({"k": v[0]}, {"k": both}))(x)


def test_device_put_of_a_traced_value_is_the_value():
    # JAX's device_put under jit/grad/vmap (it raised "device_put of a traced value"): the value
    # itself, its gradient the identity's; a NamedSharding constrains the layout of a
    # partitioned jit as with_sharding_constraint does
    mesh = make_mesh((4,), ("data",))
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    cols = NamedSharding(mesh, P(None, "data"))
    out = blu.jit(lambda v: blu.device_put(v * 2, cols), in_shardings=NamedSharding(mesh, P()))(x)
    np.testing.assert_array_equal(np.asarray(out), x * 2)
    assert out.sharding == cols
    g = blu.grad(lambda v: (blu.device_put(v, blu.devices()[1]) ** 2).sum())(x)
    _close(g, 2 * x.astype(np.float64))
    per_row = blu.vmap(lambda r: blu.device_put(r, None).sum())(x)
    _close(per_row, x.astype(np.float64).sum(1))
    with pytest.raises(BluShapeError, match="device_put: spec P.*does not divide 6"):
        blu.jit(lambda v: blu.device_put(v[:6], NamedSharding(mesh, P("data"))))(x)


def test_errors_name_the_problem():
    m1, m2 = make_mesh((4,), ("data",)), make_mesh((2, 2), ("a", "b"))
    x = np.zeros((8, 4), np.float32)
    with pytest.raises(BluValueError, match="two meshes"):
        blu.jit(
            lambda a, b: a + b,
            in_shardings=(NamedSharding(m1, P("data")), NamedSharding(m2, P("a"))),
        )(x, x)
    with pytest.raises(BluValueError, match="expected a NamedSharding"):
        blu.jit(lambda a: a, in_shardings=("data",))(x)
    with pytest.raises(BluValueError, match="does not match the structure"):
        blu.jit(lambda a: a, in_shardings=(NamedSharding(m1, P()),) * 2)(x)
    with pytest.raises(BluShapeError, match="does not divide"):
        blu.jit(lambda a: a, in_shardings=NamedSharding(m1, P(None, "data")))(np.zeros((8, 6)))
    with pytest.raises(BluValueError, match="name the mesh"):
        blu.jit(lambda a: a, in_shardings=P("data"))(x)


@given(rows=st.integers(1, 12))
def test_out_shardings_are_checked_against_the_outputs(rows):
    # an out_shardings spec that does not divide an output, or has more entries than its rank,
    # is an error as in JAX (it returned 4 of the 6 rows, or the scalar unchanged, silently)
    mesh = make_mesh((4,), ("data",))
    x = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2)
    rep, rows_split = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    f = blu.jit(lambda a: a * 2, in_shardings=rep, out_shardings=rows_split)
    if rows % 4:
        with pytest.raises(BluShapeError, match=r"out_shardings of output leaf 0.*does not divide"):
            f(x)
    else:
        out = f(x)
        _close(out, x.astype(np.float64) * 2)
        assert out.sharding == rows_split
    with pytest.raises(BluValueError, match=r"out_shardings of output leaf 1.*rank 0"):
        blu.jit(lambda a: (a, a.sum()), in_shardings=rep, out_shardings=(rep, rows_split))(x)


def test_out_shardings_alone_name_the_mesh():
    # JAX's jit(f, out_shardings=NamedSharding(...)) with no in_shardings: the arguments enter
    # replicated and the outputs leave split (it raised "given as PartitionSpecs only")
    mesh = make_mesh((2, 2), ("a", "b"))
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    split = NamedSharding(mesh, P(("b", "a")))
    out, total = blu.jit(lambda a: (a + 1, a.sum()), out_shardings=(split, P()))(x)
    _close(out, x.astype(np.float64) + 1)
    _close(total, x.astype(np.float64).sum())
    assert out.sharding == split
    # the block of device (a, b) is row 2 * b + a (the tuple's first name major)
    blocks = [s.data for s in out.addressable_shards]
    for k, (a, b) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        _close(blocks[k], x[None, 2 * b + a].astype(np.float64) + 1)


# ---- the GPT-2 training step, partitioned by its input shardings only -------------------------


@pytest.fixture(scope="module")
def gpt2():
    cfg = dataclasses.replace(M.CONFIGS["tiny"], vocab_size=96)
    params = M.init_params(cfg, blu.random.key(0))
    opt = optim.adamw(1e-2, weight_decay=0.1)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 96, (8, cfg.n_ctx)).astype(np.int32)
    y = rng.integers(0, 96, (8, cfg.n_ctx)).astype(np.int32)

    def step(params, state, x, y):
        loss, g = blu.value_and_grad(lambda p: M.loss_fn(p, x, y, cfg))(params)
        params, state = opt.step(g, state, params)
        return params, state, loss

    return step, params, opt.init(params), x, y


@pytest.fixture(scope="module")
def reference(gpt2):
    step, params, state, x, y = gpt2
    with config.override(jit_backend="numpy"):
        return blu.jit(step)(params, state, x, y)


def _fsdp(mesh, tree):
    def spec(p):
        for d, n in enumerate(np.shape(p)):
            if n % mesh.size == 0:
                return NamedSharding(mesh, P(*([None] * d + ["data"])))
        return NamedSharding(mesh, P())

    return pytree.tree_map(spec, tree)


def _megatron(mesh, tree):
    def spec(path, p):
        keys = [str(getattr(k, "key", getattr(k, "idx", k))) for k in path]
        column, row = "c_attn" in keys or "c_fc" in keys, "c_proj" in keys
        if column:
            return NamedSharding(mesh, P(None, "model") if keys[-1] == "w" else P("model"))
        if row and keys[-1] == "w":
            return NamedSharding(mesh, P("model", None))
        return NamedSharding(mesh, P())

    return pytree.tree_map_with_path(spec, tree)


@pytest.mark.parametrize("mode", ["dp", "fsdp", "tp"])
def test_gpt2_step_partitioned_by_its_shardings_equals_one_device(gpt2, reference, mode, set_flag):
    set_flag("jit_backend", "numpy")
    step, params, state, x, y = gpt2
    if mode == "tp":
        mesh = make_mesh((2, 2), ("data", "model"))
        ps = _megatron(mesh, params)
        ss = type(state)(
            *[
                _megatron(mesh, f) if isinstance(f, dict) else NamedSharding(mesh, P())
                for f in state
            ]
        )
    else:
        mesh = make_mesh((4,), ("data",))
        rep = NamedSharding(mesh, P())
        ps, ss = (rep, rep) if mode == "dp" else (_fsdp(mesh, params), _fsdp(mesh, state))
    batch = NamedSharding(mesh, P("data"))
    out_sh = None if mode == "dp" else (ps, ss, NamedSharding(mesh, P()))
    f = blu.jit(step, in_shardings=(ps, ss, batch, batch), out_shardings=out_sh)
    out = f(params, state, x, y)
    for got, want in zip(pytree.tree_leaves(out), pytree.tree_leaves(reference)):
        _close(got, want, rtol=1e-4, atol=1e-5)
    log = spmd.collectives(f)
    kinds = [c.split()[0] for c in log]
    n_params = len(pytree.tree_leaves(params))
    if mode == "dp":  # each gradient all-reduced once, and the loss; nothing gathered
        assert kinds.count("all-reduce") == n_params + 1 and set(kinds) == {"all-reduce"}, log
    elif mode == "fsdp":  # gradients reduce-scattered; only the (scalar) loss all-reduced
        assert "reduce-scatter" in kinds and kinds.count("all-reduce") == 1, log
        assert kinds.count("reduce-scatter") >= n_params - 2, (
            log
        )  # (leaves no dim of which 4 divides stay whole)
    else:  # Megatron: an all-reduce over "model" after each row-parallel product
        assert any("over ('model',)" in c and c.startswith("all-reduce") for c in log), log
    if mode != "dp":
        got_leaf = pytree.tree_leaves(out[0])[0]
        assert got_leaf.sharding == pytree.tree_leaves(ps)[0]


def test_a_mesh_of_one_device_moves_nothing_and_donation_is_kept(set_flag):
    """Splits and sums over mesh axes of size 1 are no-ops: the program is the one-device
    program, without collectives (what the world-of-one GPU benchmark measures)."""
    set_flag("jit_backend", "numpy")
    mesh = make_mesh((1, 1), ("data", "model"), blu.devices()[:1])
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    w = blu.device_put(rng.standard_normal((6, 3)).astype(np.float32))
    w_np = np.asarray(w).copy()

    def step(w, x):
        g = blu.grad(lambda w: bnp.sum(bnp.tanh(x @ w)))(w)
        return w - 0.1 * g

    f = blu.jit(
        step,
        donate_argnums=0,
        in_shardings=(NamedSharding(mesh, P("model")), NamedSharding(mesh, P("data"))),
    )
    out = f(w, x)
    z = x.astype(np.float64) @ w_np
    _close(out, w_np - 0.1 * x.T.astype(np.float64) @ (1 - np.tanh(z) ** 2))
    assert spmd.collectives(f) == []
    assert w.is_deleted()  # donated


def test_a_donated_sharded_argument_names_the_users_jit_and_leaf():
    # the per-device program takes the consts the function closes over first, and is named
    # shard(...): the deleted array said "donated to jit(shard(step)) ... argument leaf 2"
    mesh = make_mesh((4,), ("data",))
    c = bnp.asarray(np.arange(8.0, dtype=np.float32).reshape(8, 1))
    rows = NamedSharding(mesh, P("data"))

    def step(a, b):
        return a + b * c

    f = blu.jit(step, donate_argnums=1)
    a = blu.device_put(np.ones((8, 3), np.float32), rows)
    for _ in range(2):  # (the second call: the cached program)
        b = blu.device_put(np.full((8, 3), 2.0, np.float32), rows)
        _close(f(a, b), 1 + 2 * np.arange(8.0)[:, None] * np.ones((1, 3)))
        assert b.is_deleted() and not a.is_deleted()
        with pytest.raises(BluValueError, match=r"donated to jit\(step\) .*argument leaf 1\)"):
            np.asarray(b)


def test_a_small_cnn_step_batch_split_equals_one_device(set_flag):
    """Convolution, max pooling and a dense head with the batch split: the gradients equal
    the unpartitioned ones, and the only communication is one all-reduce per gradient and the
    loss's (the convolutions and pooling are partitioned, not gathered)."""
    set_flag("jit_backend", "numpy")
    mesh = make_mesh((4,), ("data",))
    rng = np.random.default_rng(3)
    imgs = rng.standard_normal((8, 6, 6, 2)).astype(np.float32)
    labels = rng.integers(0, 3, 8)
    params = {
        "k": (rng.standard_normal((3, 3, 2, 4)) * 0.3).astype(np.float32),
        "w": (rng.standard_normal((4 * 9, 3)) * 0.3).astype(np.float32),
    }

    def loss(p, x, y):
        h = blu.lax.conv_general_dilated(
            x, p["k"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        h = blu.nn.max_pool(bnp.maximum(h, 0.0), (2, 2), strides=(2, 2))
        logits = h.reshape(h.shape[0], -1) @ p["w"]
        # (one-hot: logp[arange(B), y] would also gather the labels, see the gather test)
        return -bnp.mean(bnp.sum(blu.nn.one_hot(y, 3) * blu.nn.log_softmax(logits), axis=-1))

    grad = blu.value_and_grad(loss)
    want, gw = grad(params, imgs, labels)
    batch = NamedSharding(mesh, P("data"))
    f = blu.jit(grad, in_shardings=(NamedSharding(mesh, P()), batch, batch))
    got, gg = f(params, imgs, labels)
    _close(got, want, rtol=1e-5)
    for k in params:
        _close(gg[k], gw[k], rtol=1e-4, atol=1e-6)
    kinds = [c.split()[0] for c in spmd.collectives(f)]
    assert set(kinds) == {"all-reduce"} and len(kinds) == 3, "\n".join(spmd.collectives(f))


def test_loops_keep_their_carries_split(set_flag):
    """A while_loop, a scan and a cond over a batch-split value run split (no gather): their
    bodies and branches are partitioned, and the stacked partial sums of the scan are
    all-reduced (the cond's predicate reads the first one whole)."""
    set_flag("jit_backend", "numpy")
    mesh = make_mesh((4,), ("data",))
    rng = np.random.default_rng(4)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    w = (rng.standard_normal((4, 4)) * 0.3).astype(np.float32)

    def f(w, x):
        _, h = blu.lax.while_loop(
            lambda c: c[0] < 5, lambda c: (c[0] + 1, bnp.tanh(c[1] @ w)), (0, x)
        )
        h2, ys = blu.lax.scan(lambda c, _: (c @ w, c.sum()), h, None, length=3)
        h2 = blu.lax.cond(ys[0] > -1e9, lambda h: h * 2.0, lambda h: h - w.sum(), h2)
        return h2, ys

    jf = blu.jit(f, in_shardings=(None, NamedSharding(mesh, P("data"))))
    h2, ys = jf(w, x)
    h = x.astype(np.float64)
    for _ in range(5):
        h = np.tanh(h @ w)
    want_ys = []
    for _ in range(3):
        want_ys.append(h.sum())
        h = h @ w
    _close(h2, 2 * h, rtol=1e-5, atol=1e-6)
    _close(ys, want_ys, rtol=1e-5, atol=1e-5)
    assert h2.sharding == NamedSharding(mesh, P("data"))
    assert [c.split(" for ")[0] for c in spmd.collectives(jf)] == [
        "all-reduce f32[] over ('data',)",  # (the predicate's first sum)
        "all-reduce f32[3] over ('data',)",  # (the sums returned)
    ]


def test_gpt2_scanned_over_its_blocks_partitions_as_unrolled(gpt2, set_flag):
    """GPT-2 written with lax.scan over its blocks (scan_layers), data-parallel: the same
    gradients' all-reduces as the unrolled model (none inside the loop), the same result."""
    set_flag("jit_backend", "numpy")
    _, params, state, x, y = gpt2
    cfg = dataclasses.replace(M.CONFIGS["tiny"], vocab_size=96, scan_layers=True)
    opt = optim.adamw(1e-2, weight_decay=0.1)

    def step(params, state, x, y):
        loss, g = blu.value_and_grad(lambda p: M.loss_fn(p, x, y, cfg))(params)
        params, state = opt.step(g, state, params)
        return params, state, loss

    want = blu.jit(step)(params, state, x, y)
    mesh = make_mesh((4,), ("data",))
    rep, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    f = blu.jit(step, in_shardings=(rep, rep, batch, batch))
    for got, w in zip(pytree.tree_leaves(f(params, state, x, y)), pytree.tree_leaves(want)):
        _close(got, w, rtol=1e-4, atol=1e-5)
    log = spmd.collectives(f)
    assert all(c.startswith("all-reduce") and "scan body" not in c for c in log), log
    assert len(log) == len(pytree.tree_leaves(params)) + 1


def test_gathers_from_a_split_operand(set_flag):
    """``logp[arange(B), labels]`` and ``take_along_axis`` on batch-split log-probabilities
    look up each device's block and sum (the indices gathered, not the operand); a lookup in
    a small row-split table gathers the table. Values and gradients equal one device's."""
    set_flag("jit_backend", "numpy")
    mesh = make_mesh((4,), ("data",))
    rng = np.random.default_rng(5)
    lp = rng.standard_normal((8, 50)).astype(np.float32)
    y = rng.integers(-50, 50, 8).astype(np.int32)  # (negative labels index from the end)
    emb = rng.standard_normal((12, 3)).astype(np.float32)
    ids = rng.integers(0, 12, (8, 2)).astype(np.int32)

    def f(lp, y, emb, ids):
        picked = bnp.take_along_axis(lp, bnp.abs(y)[:, None] % 50, axis=1)
        return lp[bnp.arange(8), y], picked, emb[ids]

    rows = NamedSharding(mesh, P("data"))
    jf = blu.jit(f, in_shardings=(rows, rows, rows, None))
    got = jf(lp, y, emb, ids)
    ar = np.arange(8)
    want = (lp[ar, y], lp[ar, np.abs(y) % 50][:, None], emb[ids])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)  # (a lookup: no arithmetic)
    log = [c.split(" for ")[0] for c in spmd.collectives(jf)]
    assert not any(c.startswith("all-gather f32[2,50]") for c in log), log  # lp stays split
    assert "all-gather f32[3,3] over ('data',)" in log  # the small table is gathered
    g = blu.grad(lambda lp: jf(lp, y, emb, ids)[0].sum())(lp)
    g_want = np.zeros_like(lp)
    g_want[ar, y % 50] = 1.0
    np.testing.assert_array_equal(np.asarray(g), g_want)


def test_on_one_device_the_partitioned_step_is_the_one_device_step(tmp_path):
    """A world of one process (as on one GPU): DP, FSDP and TP shardings of the GPT-2 step give
    the one-device step's jaxpr, equation for equation (what makes the H200's partitioned
    steps run at the one-device step's speed and memory)."""
    import subprocess
    import sys

    script = tmp_path / "one.py"
    script.write_text(
        "import sys\n"
        "sys.path[:0] = ['benchmarks', 'benchmarks/peers']\n"
        "from blu import parallel as bp\n"
        "bp.initialize(backend='cpu')\n"
        "import blu_gpt2 as bg, parallel_step as ps\n"
        "from blu.core.jaxpr import pp_jaxpr\n"
        "cfg = bg.model_config('tiny', 96)\n"
        "base = bg.train_step(cfg, 'fp32')\n"
        "specs = bg.step_specs(cfg, 2, 16)\n"
        "want = pp_jaxpr(base.lower(*specs).entry.jaxpr)\n"
        "for layout in ('dp', 'fsdp', 'tp'):\n"
        "    step = ps.step_for(layout, base, specs[0], specs[1])\n"
        "    got = pp_jaxpr(step.lower(*specs).entry.jaxpr)\n"
        "    print(layout, 'same' if got == want else 'differs')\n"
    )
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE"))}
    env.pop("BLU_NUM_CPU_DEVICES", None)
    root = pathlib.Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = str(root)
    res = subprocess.run([sys.executable, str(script)], cwd=root, env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.split() == ["dp", "same", "fsdp", "same", "tp", "same"], res.stdout
