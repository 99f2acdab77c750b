"""shard_map's gradient rule (varying manual axes, ``blu.transforms.vma``) on virtual CPU devices.

The gradient taken *inside* ``blu.shard`` of a loss that is equal on every device (``psum`` /
``pmean``-reduced) is the gradient of the global function: it equals the gradient taken outside
``shard`` and numpy's float64 backward pass, for data parallelism (batch split, parameters
replicated) and a tensor-parallel layer (weights split over a model axis), on 1-D and 2-D meshes.
Also: ``psum`` of an invariant value, ``pvary``, and the transposes of ``all_gather`` and
``psum_scatter`` of invariant values.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu.parallel import (
    P,
    all_gather,
    pmax,
    pmean,
    psum,
    psum_scatter,
    pvary,
    shard,
)
from tests.helpers import check_grads
from tests.helpers import first_devices_mesh as _mesh


@pytest.fixture(autouse=True)
def _eight_devices(set_flag):
    set_flag("num_cpu_devices", 8)


def _close(got, want):
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-12)


# ---- data parallelism -----------------------------------------------------------------------


def _dp_numpy(w, b, x):
    """loss = mean(tanh(x @ w + b) ** 2) and its gradients, float64."""
    t = np.tanh(x @ w + b)
    d = 2 * t * (1 - t**2) / t.size
    return np.mean(t**2), {"w": x.T @ d, "b": d.sum(0)}


def _dp_loss(p, xb):
    return bnp.mean(bnp.tanh(xb @ p["w"] + p["b"]) ** 2)


@pytest.mark.parametrize(
    "shape,names,batch",
    [((8,), ("d",), ("d",)), ((2, 4), ("x", "y"), ("x", "y")), ((2, 4), ("x", "y"), ("y",))],
)
def test_data_parallel_gradient_inside_shard_is_the_global_gradient(shape, names, batch):
    mesh = _mesh(shape, names)
    rng = np.random.default_rng(len(batch))
    x = rng.standard_normal((16, 3))
    p = {"w": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}

    def step(p, xb):  # the loss is the mean over the devices holding batch blocks
        return blu.value_and_grad(lambda q: pmean(_dp_loss(q, xb), batch))(p)

    sharded = shard(step, mesh, (P(), P(batch)), P())
    rl, rg = _dp_numpy(p["w"], p["b"], x)
    outside = blu.grad(_dp_loss)(p, x)
    for fn in (sharded, blu.jit(sharded)):
        loss, g = fn(p, x)
        _close(loss, rl)
        for k in p:
            _close(g[k], rg[k])
            _close(g[k], np.asarray(outside[k]))


def test_gradient_of_the_local_loss_is_summed_and_pvary_keeps_it_per_device():
    mesh = _mesh((4,), ("d",))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 3))
    p = {"w": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}

    def step(p, xb):
        summed = blu.grad(_dp_loss)(p, xb)  # invariant: the sum of the devices' gradients
        own = blu.grad(_dp_loss)(pvary(p, "d"), xb)  # varying: this device's
        return summed, pytree_map(lambda v: v[None], own)

    summed, own = shard(step, mesh, (P(), P("d")), (P(), P("d")))(p, x)
    blocks = x.reshape(4, 2, 3)
    per_dev = [_dp_numpy(p["w"], p["b"], blocks[i])[1] for i in range(4)]
    for k in p:
        _close(own[k], np.stack([g[k] for g in per_dev]))
        _close(summed[k], sum(g[k] for g in per_dev))


def pytree_map(f, tree):
    return {k: f(v) for k, v in tree.items()}


# ---- a tensor-parallel layer (Megatron's MLP) ---------------------------------------------------


def _tp_numpy(p, x, y):
    """mean((tanh(x @ w1) @ w2 + b2 - y) ** 2) and its gradients, float64."""
    h = np.tanh(x @ p["w1"])
    d = 2 * (h @ p["w2"] + p["b2"] - y) / y.size
    dh = d @ p["w2"].T * (1 - h**2)
    return {"w1": x.T @ dh, "w2": h.T @ d, "b2": d.sum(0)}


@pytest.mark.parametrize("shape,names", [((4,), ("model",)), ((2, 4), ("data", "model"))])
def test_tensor_parallel_gradient_inside_shard_is_the_global_gradient(shape, names):
    mesh = _mesh(shape, names)
    has_data = "data" in names
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((8, 3)), rng.standard_normal((8, 2))
    p = {"w1": rng.standard_normal((3, 8)), "w2": rng.standard_normal((8, 2)),
         "b2": rng.standard_normal(2)}  # fmt: skip
    specs = {"w1": P(None, "model"), "w2": P("model", None), "b2": P()}
    batch = P("data") if has_data else P()

    def loss(q, xb, yb):
        out = psum(bnp.tanh(xb @ q["w1"]) @ q["w2"], "model") + q["b2"]
        local = bnp.mean((out - yb) ** 2)
        return pmean(local, "data") if has_data else local

    grads = shard(blu.grad(loss), mesh, (specs, batch, batch), specs)(p, x, y)
    want = _tp_numpy(p, x, y)
    outside = blu.grad(lambda q: shard(loss, mesh, (specs, batch, batch), P())(q, x, y))(p)
    for k in p:
        _close(grads[k], want[k])
        _close(grads[k], np.asarray(outside[k]))


# ---- collectives of invariant values ------------------------------------------------------------


def test_psum_pmax_of_an_invariant_value():
    mesh = _mesh((2, 4), ("x", "y"))
    w = np.array([0.5, -1.5, 2.0])

    def f(w):
        s = psum(w, ("x", "y"))  # psum(1, axis) is the axis size (JAX)
        g = blu.grad(lambda v: bnp.sum(psum(v, "y") ** 2))(w)  # d/dw ||4 w||^2 = 32 w
        return s, pmax(w, "x"), g

    s, m, g = shard(f, mesh, P(), P())(w)
    _close(s, 8 * w)
    _close(m, w)
    _close(g, 32 * w)


def test_all_gather_of_sliced_parameters_gives_the_global_gradient():
    # FSDP: parameters split over d, gathered before use; the gradient of the pmean-ed loss
    # w.r.t. each slice is that slice of the global gradient
    mesh = _mesh((4,), ("d",))
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 3))
    w, b = rng.standard_normal((3, 8)), rng.standard_normal(8)

    def step(ws, bs, xb):
        def loss(ws, bs):
            full_w = all_gather(ws, "d", axis=1, tiled=True)
            full_b = all_gather(bs, "d", tiled=True)
            return pmean(bnp.mean(bnp.tanh(xb @ full_w + full_b) ** 2), "d")

        return blu.grad(loss, argnums=(0, 1))(ws, bs)

    gw, gb = shard(step, mesh, (P(None, "d"), P("d"), P("d")), (P(None, "d"), P("d")))(w, b, x)
    _, want = _dp_numpy(w, b, x)
    _close(gw, want["w"])
    _close(gb, want["b"])


def test_psum_scatter_of_an_invariant_value_and_its_gradient():
    mesh = _mesh((4,), ("d",))
    w = np.linspace(-1.0, 1.0, 8)

    def f(w):
        # each device keeps 4 * its block of w; the loss is the sum of their squares
        loss = lambda v: psum(bnp.sum(psum_scatter(v, "d", tiled=True) ** 2), "d")  # noqa: E731
        return psum_scatter(w, "d", tiled=True), blu.grad(loss)(w)

    blocks, g = shard(f, mesh, P(), (P("d"), P()))(w)
    _close(blocks, 4 * w)
    _close(g, 2 * 16 * w)


def test_grad_inside_shard_against_finite_differences():
    # the gradient taken inside, as a function of the replicated w, checked numerically
    mesh = _mesh((2, 2), ("x", "y"))
    x = np.random.default_rng(4).standard_normal((4, 3))

    def inner(w, xb):
        return blu.grad(lambda v: psum(bnp.sum(bnp.sin(xb @ v)), ("x", "y")))(w)

    f = shard(inner, mesh, (P(), P(("x", "y"))), P())
    g = f(np.array([0.3, -0.2, 0.5]), x)
    _close(g, x.T @ np.cos(x @ np.array([0.3, -0.2, 0.5])))
    check_grads(lambda w: f(w, x), [np.array([0.3, -0.2, 0.5])])


def test_gradients_inside_a_jit_nested_in_the_shard_body():
    # the jit's trace keeps the variance of its arguments (blu.transforms.vma.trace_manual)
    mesh = _mesh((2, 4), ("x", "y"))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 3))
    p = {"w": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
    step = blu.jit(lambda p, xb: blu.grad(lambda q: pmean(_dp_loss(q, xb), ("x", "y")))(p))
    inv = blu.jit(lambda w: blu.grad(lambda v: bnp.sum(psum(v, "y") ** 2))(w))
    _, want = _dp_numpy(p["w"], p["b"], x)
    for outer in (lambda f: f, blu.jit):
        g = outer(shard(step, mesh, (P(), P(("x", "y"))), P()))(p, x)
        for k in p:
            _close(g[k], want[k])
        _close(outer(shard(inv, mesh, P(), P()))(p["b"]), 32 * p["b"])


def test_a_jit_nested_in_the_shard_body_closing_over_a_varying_value():
    # a value of the body closed over by a nested jit varies there as it does in the body (it
    # was taken as invariant: psum over an axis it varies over gave its axis-size multiple,
    # pmax the device's own value)
    mesh = _mesh((2, 4), ("x", "y"))
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((2, 12)), rng.standard_normal(3)
    blocks = x.reshape(2, 4, 3)  # device (i, j) holds x[i, 3j:3j+3]: varies over x and y

    def body(w, xb):
        s = blu.jit(lambda v: psum(bnp.sum(v * xb), ("x", "y")))(w)
        m = blu.jit(lambda v: pmax(v * xb, "y"))(w)
        g = blu.grad(lambda v: blu.jit(lambda u: psum(bnp.sum(bnp.sin(u * xb)), ("x", "y")))(v))
        return s, m, g(w)

    s, m, g = shard(body, mesh, (P(), P("x", "y")), (P(), P("x"), P()))(w, x)
    _close(s, np.sum(blocks * w))
    _close(np.asarray(m).reshape(2, 3), np.max(blocks * w, axis=1))
    _close(g, np.sum(np.cos(blocks * w) * blocks, axis=(0, 1)))


def test_an_invariant_term_added_to_a_varying_one_gets_the_sum_of_the_cotangents():
    # data parallelism with an L2 term in the local loss: the term's cotangent is the same on
    # every device (pmean's transpose) but varies as the sum it meets; the implicit pvary's
    # psum gives it N times over (it was missing: the regularizer's gradient came out 1/N)
    mesh = _mesh((2, 4), ("x", "y"))
    rng = np.random.default_rng(9)
    w, x = rng.standard_normal(3), rng.standard_normal((16, 3))

    def local(v, xb):
        return bnp.mean((xb @ v) ** 2) + 0.1 * bnp.sum(v**2) + bnp.sin(psum(v[0], ("x", "y")))

    def step(w, xb):
        return blu.grad(lambda v: pmean(local(v, xb), ("x", "y")))(w)

    f = shard(step, mesh, (P(), P(("x", "y"))), P())
    want = 2 * x.T @ (x @ w) / 16 + 0.2 * w + np.array([8 * np.cos(8 * w[0]), 0, 0])
    _close(f(w, x), want)

    # and where the sum varies over one axis only: the invariant term's cotangent is summed
    # over that axis alone
    def one_axis(w, xb):
        return blu.grad(lambda v: psum(bnp.sum(bnp.sin(v) + psum(v * xb[0], "y")), "x"))(w)

    g = shard(one_axis, mesh, (P(), P(("x", "y"))), P())
    _close(g(w, x[:8]), 2 * np.cos(w) + x[:8].sum(0))


@pytest.mark.parametrize("policy", [None, blu.checkpoint_policies.everything_saveable])
def test_psum_of_an_invariant_value_inside_checkpoint(policy):
    # checkpoint's body is traced keeping the values' variance, as a nested jit's: psum of the
    # replicated w there is 8 * w * w on a mesh of 8, and its gradient 16 * w (it was 2 * w)
    mesh = _mesh((2, 4), ("x", "y"))
    rng = np.random.default_rng(8)
    w, x = rng.standard_normal(3), rng.standard_normal((8, 3))
    ck = blu.checkpoint(lambda v, xb: bnp.sin(psum(v * v, ("x", "y"))) + psum(v * xb, "y"),
                        policy=policy)  # fmt: skip

    def body(w, xb):
        loss = lambda v: psum(bnp.sum(ck(v, xb[0])), "x")  # noqa: E731
        return loss(w), blu.grad(loss)(w)

    val, g = shard(body, mesh, (P(), P(("x", "y"))), P())(w, x)
    total = x.sum(0)
    _close(val, np.sum(2 * np.sin(8 * w * w) + w * total))
    _close(g, 2 * np.cos(8 * w * w) * 16 * w + total)


@pytest.mark.parametrize("how", ["scan", "jit", "cond"])
def test_tensor_parallel_layers_in_scan_jit_and_cond(how):
    # two Megatron layers (the residual stream invariant, w1/w2 split over m) run by a scan, a
    # nested jit or a cond: the transposed bodies keep the values' variance
    mesh = _mesh((4,), ("m",))
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    p = {"w1": rng.standard_normal((2, 3, 8)) * 0.5, "w2": rng.standard_normal((2, 8, 3)) * 0.5,
         "b": rng.standard_normal((2, 3))}  # fmt: skip
    specs = {"w1": P(None, None, "m"), "w2": P(None, "m", None), "b": P()}

    def layer(h, q):
        return h + psum(bnp.tanh(h @ q["w1"]) @ q["w2"], "m") + q["b"]

    def loss(q, xb, yb):
        if how == "scan":
            h, _ = blu.lax.scan(lambda h, ql: (layer(h, ql), None), xb, q)
        else:
            h, run = xb, blu.jit(layer)
            for i in range(2):
                ql = {k: v[i] for k, v in q.items()}
                if how == "jit":
                    h = run(h, ql)
                else:
                    h = blu.lax.cond(True, lambda h, ql=ql: layer(h, ql), lambda h: h, h)
        return bnp.mean((h - yb) ** 2)

    # numpy float64: forward through both layers, then backward
    hs, hid = [x], []
    for i in range(2):
        hid.append(np.tanh(hs[-1] @ p["w1"][i]))
        hs.append(hs[-1] + hid[-1] @ p["w2"][i] + p["b"][i])
    dh = 2 * (hs[-1] - y) / y.size
    want = {k: np.zeros_like(v) for k, v in p.items()}
    for i in (1, 0):
        want["b"][i], want["w2"][i] = dh.sum(0), hid[i].T @ dh
        da = dh @ p["w2"][i].T * (1 - hid[i] ** 2)
        want["w1"][i] = hs[i].T @ da
        dh = dh + da @ p["w1"][i].T
    for outer in (lambda f: f, blu.jit):
        g = outer(shard(blu.grad(loss), mesh, (specs, P(), P()), specs))(p, x, y)
        for k in p:
            _close(g[k], want[k])


@pytest.mark.parametrize("how", ["cond", "switch", "scan", "fori_loop", "while_loop"])
def test_psum_of_an_invariant_value_inside_control_flow(how):
    # a cond branch's or a loop body's forward trace keeps the values' variance (as a nested
    # jit's): psum of the replicated w there is 8 * w * w on a mesh of 8, and the gradient of
    # its sin is 16 w cos(8 w^2) (it came out 1/8 of that: the psum transposed as if w varied)
    mesh = _mesh((2, 4), ("x", "y"))
    w = np.array([0.3, -0.7, 1.1])

    def term(u):
        return bnp.sum(bnp.sin(psum(u * u, ("x", "y"))))

    def f(v):
        if how == "cond":
            return blu.lax.cond(True, term, lambda u: 0.0 * bnp.sum(u), v)
        if how == "switch":
            return blu.lax.switch(1, [lambda u: 0.0 * bnp.sum(u), term], v)
        if how == "scan":
            return blu.lax.scan(lambda c, _: (c + term(v), None), 0.0, None, length=2)[0] / 2
        if how == "fori_loop":
            return blu.lax.fori_loop(0, 2, lambda i, c: c + term(v), 0.0) / 2
        # no reverse mode through while_loop: its forward value only
        return blu.lax.while_loop(lambda c: c[1] < 2, lambda c: (c[0] + term(v), c[1] + 1),
                                  (0.0, 0))[0] / 2  # fmt: skip

    def body(w):
        return f(w), (blu.grad(f)(w) if how != "while_loop" else w)

    val, g = shard(body, mesh, P(), P())(w)
    _close(val, np.sum(np.sin(8 * w * w)))
    if how != "while_loop":
        _close(g, 16 * w * np.cos(8 * w * w))


def test_a_while_loop_carry_that_becomes_varying_is_summed_by_psum():
    # the carry starts replicated (0) and varies after one step: the condition's psum of it is
    # a sum over the devices, not 8 times this device's value
    mesh = _mesh((2, 4), ("x", "y"))
    x = np.arange(8.0)

    def body(xb):
        c = lambda s: psum(s[0], ("x", "y")) < 100.0  # noqa: E731
        return blu.lax.while_loop(c, lambda s: (s[0] + xb[0], s[1] + 1), (0.0, 0))[1]

    assert int(np.asarray(shard(body, mesh, P(("x", "y")), P())(x))) == 4  # 28 per step


@pytest.mark.parametrize("how", ["jit", "cond"])
def test_a_gradient_inside_a_staged_trace_wrt_a_varying_value_it_closes_over(how):
    # vjp inside a nested jit or a cond branch w.r.t. a value of the body that varies (pvary-ed
    # parameters, as the 1F1B pipeline's): each device's own gradient, not their sum (the
    # closed-over value was taken as invariant, and its cotangent psum-ed)
    mesh = _mesh((2, 4), ("x", "y"))
    rng = np.random.default_rng(10)
    w, x = rng.standard_normal(3), rng.standard_normal((8, 3))

    def body(w, xb):
        p = pvary(w, ("x", "y"))
        g = lambda: blu.grad(lambda q: bnp.sum(bnp.sin(q * xb[0])))(p)  # noqa: E731
        if how == "jit":
            return blu.jit(g)()[None]
        return blu.lax.cond(True, g, lambda: bnp.zeros_like(w))[None]

    g = shard(body, mesh, (P(), P(("x", "y"))), P(("x", "y")))(w, x)
    _close(g, np.cos(w * x) * x)


@pytest.mark.parametrize("how", ["operand", "closed over", "switch"])
@pytest.mark.parametrize(
    "shape,names,pred_axes", [((4,), ("d",), ("d",)), ((2, 4), ("x", "y"), ("x",))]
)
def test_a_cond_on_a_varying_predicate_pvaries_what_its_branches_take(how, shape, names, pred_axes):
    # each device takes the branch its own block picks; the gradient w.r.t. the replicated w
    # of the psum-ed loss is the sum of the devices' branch gradients (the branch's transpose
    # psum-ed w's cotangent and the select over the devices summed it again: twice the sum)
    mesh = _mesh(shape, names)
    rng = np.random.default_rng(11)
    w, x = rng.standard_normal(3), rng.standard_normal((16, 3))
    n_pred = math.prod(mesh.shape[a] for a in pred_axes)

    def local(v, xb):
        hot = lambda u: bnp.sum(bnp.sin(xb @ u))  # noqa: E731
        cold = lambda u: bnp.sum(bnp.cos(xb @ u)) * u[0]  # noqa: E731
        pred = bnp.sum(xb[0]) > 0  # varies over the axes that split the batch
        if how == "operand":
            return blu.lax.cond(pred, hot, cold, v)
        if how == "closed over":
            return blu.lax.cond(pred, lambda: hot(v), lambda: cold(v))
        return blu.lax.switch(pred.astype("int32"), [cold, hot], v)

    def step(w, xb):
        return blu.grad(lambda v: psum(local(v, xb), names))(w)

    # device blocks: the batch split over pred_axes only (replicated over the others)
    spec = P(pred_axes)
    blocks = x.reshape(n_pred, -1, 3)
    want = np.zeros(3)
    for b in blocks:
        if b[0].sum() > 0:
            want += b.T @ np.cos(b @ w)
        else:
            want += -(b.T @ np.sin(b @ w)) * w[0] + np.eye(3)[0] * np.cos(b @ w).sum()
    want *= math.prod(shape) // n_pred  # replicas of each block over the other axes
    for outer in (lambda f: f, blu.jit):
        _close(outer(shard(step, mesh, (P(), spec), P()))(w, x), want)


@pytest.mark.parametrize("how", ["cond", "switch"])
@pytest.mark.parametrize("axes", [("x", "y"), ("y",)])
def test_a_branch_output_less_varying_than_the_other_branchs(how, axes):
    # the taken branch returns a psum (invariant over axes), the other a varying value: the
    # cond's output varies, and the psum branch's transpose takes the psum of its cotangent
    # (JAX pvaries that branch's output; it was missing: the gradients came out 1/|group|)
    mesh = _mesh((2, 4), ("x", "y"))
    rng = np.random.default_rng(12)
    w, x = np.array(0.8), rng.standard_normal(16)

    def f(v, xb):
        hot, cold = lambda u: psum(u * v, axes), lambda u: bnp.sin(u * v)  # noqa: E731
        if how == "cond":
            return blu.lax.cond(True, hot, cold, xb)
        return blu.lax.switch(1, [cold, hot], xb)

    def body(w, xb):
        loss = lambda v, u: psum(bnp.sum(f(v, u)), ("x", "y"))  # noqa: E731
        return loss(w, xb), *blu.grad(loss, argnums=(0, 1))(w, xb)

    val, gw, gx = shard(body, mesh, (P(), P(("x", "y"))), (P(), P(), P(("x", "y"))))(w, x)
    # each device's output is the sum over its group (the devices one psum sums over) of
    # their blocks times w; the loss counts it once per device of the group
    group = 8 if axes == ("x", "y") else 4
    _close(val, group * np.sum(x) * w)
    _close(gw, group * np.sum(x))
    _close(gx, np.full(16, group * w))


@pytest.mark.parametrize("how", ["scan", "fori_loop"])
@pytest.mark.parametrize("axes", [("x", "y"), ("y",)])
def test_a_loop_body_returning_a_carry_less_varying_than_the_carry(how, axes):
    # the carry starts as this device's block (varying); the body returns its psum (invariant
    # over axes): the carry varies at the fixed point, and the body's transpose takes the psum
    # of the carry's cotangent (JAX pvaries the returned carry; it was missing)
    mesh = _mesh((2, 4), ("x", "y"))
    rng = np.random.default_rng(13)
    w, x = np.array(0.7), rng.standard_normal(16)
    step = lambda c, v: psum(c * v, axes)  # noqa: E731

    def f(v, xb):
        if how == "scan":
            return blu.lax.scan(lambda c, _: (step(c, v), None), xb, None, length=2)[0]
        return blu.lax.fori_loop(0, 2, lambda i, c: step(c, v), xb)

    def body(w, xb):
        loss = lambda v, u: psum(bnp.sum(f(v, u)), ("x", "y"))  # noqa: E731
        return loss(w, xb), *blu.grad(loss, argnums=(0, 1))(w, xb)

    val, gw, gx = shard(body, mesh, (P(), P(("x", "y"))), (P(), P(), P(("x", "y"))))(w, x)
    # step 1: each device holds its group's sum of blocks times w; step 2 multiplies that
    # (invariant over the group) by w and the group's size; the loss counts each device once
    group = 8 if axes == ("x", "y") else 4
    _close(val, group**2 * w**2 * np.sum(x))
    _close(gw, 2 * group**2 * w * np.sum(x))
    _close(gx, np.full(16, group**2 * w**2))
