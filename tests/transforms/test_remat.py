"""checkpoint (remat): same values and gradients, fewer residuals kept for the backward pass,
with the policies saving nothing, matrix products only, or named values."""

import numpy as np
import pytest
from helpers import arrays, check_grads
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu import lax
from blu.lax.control_flow import scan
from blu.parallel import P, make_mesh, psum, shard
from blu.transforms.remat import checkpoint, checkpoint_name, checkpoint_policies

DN = (((1,), (0,)), ((), ()))  # (m, k) @ (k, n)

POLICIES = {
    "nothing": checkpoint_policies.nothing_saveable,
    "dots": checkpoint_policies.dots_saveable,
    "names": checkpoint_policies.save_only_these_names("pre"),
    "everything": checkpoint_policies.everything_saveable,
}


def mlp(x, ws):
    """A few tanh layers: x (m, k), ws a list of (k, k) matrices; returns a scalar."""
    for w in ws:
        pre = checkpoint_name(lax.dot_general(x, w, DN), "pre")
        x = lax.tanh(lax.mul(lax.sin(pre), pre))
    return lax.reduce_sum(lax.mul(x, x))


def residual_bytes(f, *args):
    _, f_jvp = blu.linearize(f, *args)
    return sum(np.asarray(r).nbytes for r in f_jvp.residuals)


@given(st.data())
def test_remat_gradient_equals_plain_gradient(data):
    m = data.draw(st.integers(0, 3))
    k = data.draw(st.integers(1, 3))
    n_layers = data.draw(st.integers(1, 3))
    policy = data.draw(st.sampled_from(sorted(POLICIES)))
    x = data.draw(arrays((m, k)))
    ws = [data.draw(arrays((k, k), lo=-1.0, hi=1.0)) for _ in range(n_layers)]
    plain = blu.grad(mlp, argnums=(0, 1))(x, ws)
    remat = checkpoint(mlp, policy=POLICIES[policy])
    np.testing.assert_allclose(float(remat(x, ws)), float(mlp(x, ws)), rtol=1e-14)
    for g in (
        blu.grad(remat, argnums=(0, 1)),
        blu.jit(blu.grad(remat, argnums=(0, 1))),
        blu.grad(blu.jit(remat), argnums=(0, 1)),
    ):
        got = g(x, ws)
        for a, b in zip(blu.core.pytree.tree_leaves(got), blu.core.pytree.tree_leaves(plain)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12)
    # per-example gradients under vmap
    xs = np.stack([x, -x])
    got = blu.vmap(blu.grad(remat), (0, None))(xs, ws)
    want = [np.asarray(blu.grad(mlp)(xi, ws)) for xi in xs]
    np.testing.assert_allclose(np.asarray(got), np.stack(want), rtol=1e-12, atol=1e-12)


@given(st.data())
def test_remat_derivatives_match_finite_differences(data):
    x = data.draw(arrays((2, 2)))
    w = data.draw(arrays((2, 2), lo=-1.0, hi=1.0))
    policy = data.draw(st.sampled_from(sorted(POLICIES)))
    check_grads(checkpoint(lambda x, w: mlp(x, [w, w]), policy=POLICIES[policy]), [x, w], order=2)


def test_remat_lowers_the_residuals_kept_for_the_backward_pass():
    rng = np.random.default_rng(0)
    m, k, n_layers = 8, 16, 4
    x = rng.standard_normal((m, k))
    ws = [rng.standard_normal((k, k)) / 4 for _ in range(n_layers)]
    plain = residual_bytes(mlp, x, ws)
    by_policy = {
        name: residual_bytes(checkpoint(mlp, policy=p), x, ws) for name, p in POLICIES.items()
    }
    inputs = x.nbytes + sum(w.nbytes for w in ws)
    act = m * k * 8  # one activation, float64
    # saving nothing keeps only the inputs; dots / names keep one (m, k) product per layer;
    # saving everything is what plain autodiff keeps
    assert by_policy["nothing"] == inputs
    assert by_policy["dots"] == inputs + n_layers * act
    assert by_policy["names"] == inputs + n_layers * act
    assert by_policy["everything"] == plain
    assert plain >= inputs + 3 * n_layers * act  # pre, sin/cos(pre), tanh' per layer
    assert by_policy["nothing"] < by_policy["dots"] < plain


def test_backward_pass_recomputes_what_was_not_saved():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 3)), rng.standard_normal((3, 3))

    def inner_prims(policy):
        _, f_jvp = blu.linearize(checkpoint(lambda x: mlp(x, [w]), policy=policy), x)
        (eqn,) = [e for e in f_jvp.jaxpr.eqns if e.primitive.name == "checkpoint"]
        return [e.primitive.name for e in eqn.params["jaxpr"].eqns]

    nothing = inner_prims(checkpoint_policies.nothing_saveable)
    assert "tanh" in nothing and "cos" in nothing and nothing.count("dot_general") >= 2
    dots = inner_prims(checkpoint_policies.dots_saveable)
    assert "cos" in dots and dots.count("dot_general") == nothing.count("dot_general") - 1
    assert "tanh" not in inner_prims(checkpoint_policies.everything_saveable)


def test_remat_scan_over_layers():
    """GPT-2 style: scan over stacked layer weights with a checkpointed body."""
    rng = np.random.default_rng(2)
    n_layers, m, k = 5, 4, 6
    ws = rng.standard_normal((n_layers, k, k)) / 3
    x = rng.standard_normal((m, k))

    def layer(h, w):
        return lax.tanh(lax.dot_general(h, w, DN)), None

    def loss(x, ws, body):
        h, _ = scan(body, x, ws)
        return lax.reduce_sum(lax.mul(h, h))

    plain = blu.grad(loss, argnums=(0, 1))(x, ws, layer)
    remat = blu.grad(loss, argnums=(0, 1))(x, ws, checkpoint(layer))
    for a, b in zip(remat, plain):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12)
    # with remat the forward loop keeps one carry per layer (plus the weights, which are not
    # copied, and the final h for h*h), not the activations' derivatives
    r_plain = residual_bytes(lambda x, ws: loss(x, ws, layer), x, ws)
    r_remat = residual_bytes(lambda x, ws: loss(x, ws, checkpoint(layer)), x, ws)
    assert r_remat == ws.nbytes + (n_layers + 1) * x.nbytes
    assert r_remat < r_plain


def test_checkpoint_static_argnums_kwargs_and_nesting():
    x = np.array([0.3, -1.2])

    def f(x, n, scale=1.0):
        for _ in range(n):
            x = lax.sin(lax.mul(x, lax.full_like(x, scale)))
        return lax.reduce_sum(x)

    g = checkpoint(f, static_argnums=1)
    nested = checkpoint(lambda x: g(checkpoint(lax.tanh)(x), 2, scale=2.0))
    want = blu.grad(lambda x: f(lax.tanh(x), 2, scale=2.0))(x)
    np.testing.assert_allclose(np.asarray(blu.grad(nested)(x)), np.asarray(want), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(blu.grad(lambda x: g(x, 3))(x)),
                               np.asarray(blu.grad(lambda x: f(x, 3))(x)), rtol=1e-12)  # fmt: skip
    with pytest.raises(Exception):  # noqa: B017 - a traced n cannot drive the Python loop
        checkpoint(f)(x, np.int32(2))


# ---- named axes: collectives inside a checkpointed block, under blu.shard ---------------------

MESHES = [((4,), ("x",)), ((2, 2), ("x", "y"))]


@pytest.fixture
def four_devices(set_flag):
    set_flag("num_cpu_devices", 4)


def centered_layer(names: tuple, total: int):
    """rows minus the mean over every device of ``names``, then a layer; ``names=()`` is the
    same on the whole array."""

    def block(y, w):
        mean = psum(bnp.sum(y), names) / total
        return lax.tanh(lax.dot_general(bnp.sin(y - mean), w, DN))

    return block


@pytest.mark.parametrize("policy", ["nothing", "dots", "everything"])
@pytest.mark.parametrize("mesh_shape,names", MESHES)
def test_checkpoint_with_collectives_under_shard(four_devices, policy, mesh_shape, names):
    mesh = make_mesh(mesh_shape, names)
    spec = P(names)  # rows split over every mesh axis
    rng = np.random.default_rng(len(names))
    x, c = rng.standard_normal((8, 3)), rng.standard_normal((8, 3))
    w = rng.standard_normal((3, 3))
    layer = checkpoint(centered_layer(names, x.size), policy=POLICIES[policy])
    plain = centered_layer((), x.size)  # unsharded, no checkpoint: ordinary autodiff

    def local(x, w, c):
        return bnp.sum(layer(x, w) * c)

    def global_loss(x, w, c):
        return bnp.sum(shard(lambda *a: local(*a)[None], mesh, (spec, P(), spec), spec)(x, w, c))

    want = np.sum(np.tanh(np.sin(x - x.mean()) @ w) * c)
    np.testing.assert_allclose(float(global_loss(x, w, c)), want, rtol=1e-12)
    np.testing.assert_allclose(float(blu.jit(global_loss)(x, w, c)), want, rtol=1e-12)
    want_g = blu.grad(lambda x, w: bnp.sum(plain(x, w) * c), (0, 1))(x, w)

    def inside(x, w, c):  # shard_map's rule: the gradient of the psum-ed loss is the global one
        return blu.grad(lambda x, w: psum(local(x, w, c), names), (0, 1))(x, w)

    for got in (
        blu.grad(global_loss, (0, 1))(x, w, c),
        blu.jit(blu.grad(global_loss, (0, 1)))(x, w, c),
        shard(inside, mesh, (spec, P(), spec), (spec, P()))(x, w, c),
        shard(blu.jit(inside), mesh, (spec, P(), spec), (spec, P()))(x, w, c),
    ):
        for g, wg in zip(got, want_g):
            np.testing.assert_allclose(np.asarray(g), np.asarray(wg), rtol=1e-10, atol=1e-12)
    # nothing batched (a replicated argument): the block still goes inside the named levels
    r = rng.standard_normal(3)
    sq = checkpoint(lambda r: psum(r * r, names), policy=POLICIES[policy])
    np.testing.assert_allclose(np.asarray(shard(sq, mesh, P(), P())(r)), 4 * r * r, rtol=1e-12)
    got = blu.grad(lambda r: bnp.sum(shard(sq, mesh, P(), P())(r)))(r)
    np.testing.assert_allclose(np.asarray(got), 8 * r, rtol=1e-12)


# ---- optimization_barrier: what makes a checkpoint's recomputation real in compiled code -------


def test_optimization_barrier_is_an_identity_under_transforms():
    x = np.linspace(-1.0, 2.0, 7)
    f = lambda x: blu.numpy.sin(blu.lax.optimization_barrier(x)) * 3.0  # noqa: E731
    np.testing.assert_allclose(np.asarray(blu.jit(f)(x)), np.sin(x) * 3.0, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(blu.grad(lambda x: f(x).sum())(x)), 3 * np.cos(x),
                               rtol=1e-12)  # fmt: skip
    np.testing.assert_allclose(np.asarray(blu.vmap(f)(x)), np.sin(x) * 3.0, rtol=1e-12)


def _masked_attention_grad_q(q: np.ndarray) -> np.ndarray:
    """d/dq of sum((softmax(causal(q q^T)) q)^2) in float64, q as the query only."""
    s = np.where(np.tril(np.ones((len(q), len(q)), bool)), q @ q.T, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = 2 * (p @ q) @ q.T
    return (p * (dp - (dp * p).sum(-1, keepdims=True))) @ q


def test_checkpointed_attention_keeps_no_float32_scores_between_passes():
    """The compiled gradient of a checkpointed masked softmax: the forward kernel writes only
    the bfloat16 probabilities; without the barrier, CSE merged the recomputation back into the
    forward pass, which then kept three float32 score-sized tensors for the backward pass."""
    from blu.lower.backend import prepare

    bf16 = blu.numpy.bfloat16

    def probs(s):
        x = blu.numpy.where(blu.nn.attention.causal_mask(64, 64), s.astype(np.float32), -1e30)
        return blu.nn.softmax(x, axis=-1).astype(bf16)

    def loss(q, k, v, ckpt):
        p = (blu.checkpoint(probs) if ckpt else probs)(q @ k.T)
        return ((p @ v).astype(np.float32) ** 2).sum()

    q = np.random.default_rng(0).standard_normal((64, 16)).astype(bf16)
    ref = _masked_attention_grad_q(np.asarray(q, np.float64))
    outs = {}
    for ckpt in (False, True):
        g = blu.grad(lambda q, k, v: loss(q, k, v, ckpt), argnums=(0, 1, 2))
        _, plan, _ = prepare(blu.make_jaxpr(g)(q, q, q).jaxpr, (False,) * 3, "cuda:sm_90")
        first = next(n for n in plan.nodes if n.kind == "kernel")
        outs[ckpt] = sorted(o.aval.str_short() for o in first.outputs)
        # both forms against float64 (bf16 scores and probabilities: a few bf16 ulps of the
        # gradient's scale; different fusions round differently, so no bit-equality)
        got = np.asarray(blu.jit(g)(q, q, q)[0], np.float64)
        np.testing.assert_allclose(got, ref, rtol=0, atol=2**-6 * np.abs(ref).max())
    assert outs[True] == ["bf16[64,64]"]
    assert "f32[64,64]" in outs[False]


@pytest.mark.parametrize("target", ["cpu", "cuda:sm_90"])
def test_recomputation_runs_in_the_backward_pass_not_fused_into_the_forward(target):
    """A remat block between library calls (convolutions on CUDA, products on both): its
    recomputation reads the saved values through a barrier, which starts a kernel group, so it
    is not fused into the forward kernel that made those values (which would keep the
    recomputed float32 values alive from the forward pass to the backward: the memory plan's
    peak grew 2.4x for ResNet-50 before). Checked on the plan: with the block rematerialized
    the peak is below the plain program's (before, the two were equal)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 256)).astype(np.float32)
    ws = [rng.standard_normal((256, 256)).astype(np.float32) / 16 for _ in range(4)]

    def norm(h):  # float32 intermediates of h's size; the statistics are (1, 256)
        mu = blu.checkpoint_name(bnp.mean(h, axis=0, keepdims=True), "mu")
        return bnp.tanh((h - mu) * 2.0) * (h - mu)

    def loss(ws, x, remat):
        f = blu.checkpoint(norm, policy=blu.checkpoint_policies.save_only_these_names("mu"))
        h = x.astype(np.float16)
        for w in ws:
            h = (f if remat else norm)(h.astype(np.float32)).astype(np.float16)
            h = lax.dot_general(h, w.astype(np.float16), DN)
        return bnp.sum(h.astype(np.float32) ** 2)

    peaks = {}
    for remat in (False, True):
        g = blu.jit(blu.grad(lambda ws, x: loss(ws, x, remat)))
        peaks[remat] = g.lower(ws, x, target=target).memory_analysis().peak_bytes
    assert peaks[True] < 0.8 * peaks[False], peaks


def test_jax_policy_names_save_what_they_say_with_the_plain_gradient():
    # JAX's other policy names: save_anything_except_these_names keeps every value but the
    # named ones (more than save_any_names_but_these, which keeps named values only); the
    # offloading policies save what they would move (one memory space); the gradient is the
    # unchanged one for each (checked against finite differences of float64 mlp)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 6))
    ws = [rng.standard_normal((6, 6)) * 0.3 for _ in range(2)]
    cp = checkpoint_policies
    pols = {
        "except": cp.save_anything_except_these_names("pre"),
        "but": cp.save_any_names_but_these("pre"),
        "offload": cp.save_and_offload_only_these_names(
            names_which_can_be_saved=[],
            names_which_can_be_offloaded=["pre"],
            offload_src="device",
            offload_dst="pinned_host",
        ),  # fmt: skip
        "offload_dots": cp.offload_dot_with_no_batch_dims("device", "pinned_host"),
        "alias": cp.checkpoint_dots_with_no_batch_dims,
    }
    r = {k: residual_bytes(checkpoint(lambda x: mlp(x, ws), policy=p), x) for k, p in pols.items()}
    assert r["except"] > r["but"]
    assert r["offload"] == residual_bytes(
        checkpoint(lambda x: mlp(x, ws), policy=cp.save_only_these_names("pre")), x
    )
    assert r["offload_dots"] == r["alias"] > 0
    eps, e = 1e-6, np.zeros_like(x)
    e[1, 2] = 1.0
    fd = (float(mlp(x + eps * e, ws)) - float(mlp(x - eps * e, ws))) / (2 * eps)
    for p in pols.values():
        g = blu.grad(checkpoint(lambda x: mlp(x, ws), policy=p))(x)
        np.testing.assert_allclose(float(np.asarray(g)[1, 2]), fd, rtol=1e-6, atol=1e-8)
