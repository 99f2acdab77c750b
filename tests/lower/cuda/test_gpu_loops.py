"""GPU tests of control flow as loop nodes (``blu/lower/cuda/loops.py``): ``scan``, ``while``
and ``cond`` with their bodies compiled, no host fallback node in the plan; results against
numpy float64 loops.

The ``gpu``-marked tests run on a GPU, or with ``BLU_FAKE_GPU=1`` on a ``FakeDevice``. Shapes
and bodies are FIXED (a scan's length, a while's trip count and a cond's index are run-time or
loop-level values: they change no kernel), so ``scripts/fill_gpu_cache.py`` compiles every
kernel ahead for the GPU machine; hypothesis draws lengths, directions, counts and data.
"""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import FAKE, f32, f64, make_device, on_gpu, plan_nodes, put
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blu
import blu.lax as lax
import blu.numpy as jnp


@pytest.fixture(scope="module")
def dev():
    return make_device()


@pytest.fixture(autouse=True)
def loops_not_unrolled():
    """These tests are of loop nodes: no scan is unrolled (``BLU_UNROLL_SCANS``), except in
    the tests of unrolling, which set it back."""
    with blu.config.override(unroll_scans=0):
        yield


def loop_plan(f, *args) -> list:
    """The GPU plan's node kinds: a loop node, no host fallback (in the bodies neither)."""
    nodes = plan_nodes(f, *args)
    kinds = [n.kind for n in nodes]
    assert "loop" in kinds and "fallback" not in kinds, kinds
    for n in nodes:
        for _, _, prepared, _, _ in n.bodies or ():
            assert all(b.kind != "fallback" for b in prepared.plan.nodes), prepared.plan
    return kinds


def close(got, want, rtol=2e-5, atol=1e-5):
    np.testing.assert_allclose(np.asarray(got).astype(f64), want, rtol=rtol, atol=atol)


def rng_data(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(f32)


# ---- scan ---------------------------------------------------------------------------------------

H, B = 16, 4  # an RNN's state (B, H): rows of 256 bytes, aligned


def rnn(h, xs, w):
    def body(h, x):
        h2 = jnp.tanh(h @ w + x)
        return h2, (h2 * h2).sum(axis=1)

    return lax.scan(body, h, xs)


def rnn_ref(h, xs, w, reverse=False):
    h, ys = h.astype(f64), []
    order = range(len(xs) - 1, -1, -1) if reverse else range(len(xs))
    for t in order:
        h = np.tanh(h @ w + xs[t])
        ys.append((h * h).sum(axis=1))
    ys = ys[::-1] if reverse else ys
    return h, np.array(ys).reshape(len(xs), B)


W = rng_data((H, H), 1, 0.3)


@on_gpu
@pytest.mark.parametrize("length", [0, 1, 2, 7, 33])
@pytest.mark.parametrize("reverse", [False, True])
@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 99))
def test_rnn_scan(dev, length, reverse, seed):
    """A scan over time with a product in its body, stacked outputs, either direction; lengths
    0 and 1 included."""
    h, xs = rng_data((B, H), seed), rng_data((length, B, H), seed + 1)
    f = blu.jit(lambda h, xs, w: lax.scan(
        lambda h, x: (jnp.tanh(h @ w + x), (jnp.tanh(h @ w + x) ** 2).sum(axis=1)),
        h, xs, reverse=reverse))  # fmt: skip
    loop_plan(lambda h, xs, w: rnn(h, xs, w), h, xs, W)
    c, ys = f(*put(dev, h, xs, W))
    want_c, want_ys = rnn_ref(h, xs, W, reverse)
    close(c, want_c)
    assert np.asarray(ys).shape == (length, B)
    close(ys, want_ys)


@on_gpu
def test_scan_rows_not_aligned(dev):
    """Rows of 3 floats (12 bytes: not 16-byte aligned) read and written through row buffers;
    a carry of two values swapped each step; a literal in the stacked outputs."""
    xs = rng_data((9, 3), 2)

    def f(a, b, xs):
        def body(c, x):
            a, b = c
            return (b, a + x), (a * 2.0, 1.0)

        return lax.scan(body, (a, b), xs)

    a, b = rng_data((3,), 3), rng_data((3,), 4)
    loop_plan(f, a, b, xs)
    (ga, gb), (y0, y1) = blu.jit(f)(*put(dev, a, b, xs))
    ra, rb, ys = a.astype(f64), b.astype(f64), []
    for x in xs:
        ys.append(2 * ra)
        ra, rb = rb, ra + x
    close(ga, ra)
    close(gb, rb)
    close(y0, np.array(ys))
    close(y1, np.ones(9))


@on_gpu
@pytest.mark.parametrize("n", [0, 1, 2, 1000])
def test_fori_loop(dev, n):
    """``fori_loop`` with static bounds (a scan): the carry written back and forth between the
    output and the spare buffer, ending in the output for odd and even counts."""
    x = rng_data((1024,), 5)

    def f(x):
        return lax.fori_loop(0, n, lambda i, c: c * 0.999 + 0.001 * i, x)

    loop_plan(f, x)
    g, dx = blu.jit(f), put(dev, x)
    want = x.astype(f64)
    for i in range(n):
        want = want * 0.999 + 0.001 * i
    close(g(dx), want, rtol=1e-4, atol=1e-4)
    close(g(dx), want, rtol=1e-4, atol=1e-4)  # again (a CUDA graph replays it on a GPU)


@on_gpu
def test_nested_scan_and_while_in_scan(dev):
    """A scan whose body holds a scan and a while loop (loop nodes inside a body)."""
    xs = rng_data((5, 8), 6)

    def f(c, xs):
        def body(c, x):
            inner, _ = lax.scan(lambda s, r: (s + r, None), c, jnp.stack([x, 2.0 * x]))
            k, v = lax.while_loop(lambda kv: kv[0] < 3, lambda kv: (kv[0] + 1, kv[1] * 0.5),
                                  (0, inner))  # fmt: skip
            return v, v.sum()

        return lax.scan(body, c, xs)

    c = rng_data((8,), 7)
    loop_plan(f, c, xs)
    got_c, got_y = blu.jit(f)(*put(dev, c, xs))
    rc, ys = c.astype(f64), []
    for x in xs:
        rc = (rc + 3 * x) * 0.125
        ys.append(rc.sum())
    close(got_c, rc)
    close(got_y, np.array(ys), rtol=1e-4)


@on_gpu
def test_grad_through_scan(dev):
    """The gradient of an RNN's loss: the transposed scan runs as a loop node too; against
    central differences in float64."""
    h, xs = rng_data((B, H), 8), rng_data((6, B, H), 9)

    def loss(w, h, xs):
        c, ys = rnn(h, xs, w)
        return ys.sum() + (c * c).sum()

    loop_plan(blu.grad(loss), W, h, xs)
    g = np.asarray(blu.jit(blu.grad(loss))(*put(dev, W, h, xs))).astype(f64)

    def ref(w):
        c, ys = rnn_ref(h, xs, w)
        return ys.sum() + (c * c).sum()

    rng = np.random.default_rng(10)
    for _ in range(4):
        d = rng.standard_normal(W.shape)
        eps = 1e-6
        fd = (ref(W.astype(f64) + eps * d) - ref(W.astype(f64) - eps * d)) / (2 * eps)
        np.testing.assert_allclose((g * d).sum(), fd, rtol=1e-3, atol=1e-3)


# ---- while and cond -----------------------------------------------------------------------------


@on_gpu
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(limit=st.sampled_from([1, 5, 40, 1e9]), seed=st.integers(0, 99))
def test_while_loop_data_dependent(dev, limit, seed):
    """A while loop whose trip count is data: halve until the norm is below a traced limit
    (1e9: no iteration)."""
    x = rng_data((64,), seed, 10.0)

    def f(x, lim):
        def cond(c):
            return (c[1] * c[1]).sum() > lim

        return lax.while_loop(cond, lambda c: (c[0] + 1, c[1] * 0.5), (np.int32(0), x))

    lim = np.float32(limit)
    loop_plan(f, x, lim)
    n, y = blu.jit(f)(*put(dev, x, lim))
    rn, ry = 0, x.astype(f64)
    while (ry * ry).sum() > limit:
        rn, ry = rn + 1, ry * 0.5
    assert int(np.asarray(n)) == rn
    close(y, ry)


@on_gpu
@pytest.mark.parametrize("index", [-3, 0, 1, 2, 7])
def test_switch_clamps(dev, index):
    """``switch`` over three branches on a traced index, out-of-range indices clamped (XLA);
    one branch returns its operand unchanged."""
    x = rng_data((37, 5), 11)
    branches = [lambda x: x + 1.0, lambda x: x, lambda x: jnp.sin(x) * 2.0]

    def f(i, x):
        return lax.switch(i, branches, x)

    loop_plan(f, np.int32(0), x)
    got = blu.jit(f)(*put(dev, np.int32(index), x))
    k = min(max(index, 0), 2)
    want = [x + 1.0, x, np.sin(x.astype(f64)) * 2.0][k]
    close(got, want)


@on_gpu
def test_cond_in_scan_and_donated_carry(dev):
    """A cond inside a scan body, the scan's carry a donated argument."""
    xs = rng_data((7, 16), 12)

    def f(c, xs):
        def body(c, x):
            c2 = lax.cond(x.sum() > 0, lambda c: c + x, lambda c: c - x, c)
            return c2, c2.max()

        return lax.scan(body, c, xs)

    c = rng_data((16,), 13)
    loop_plan(f, c, xs)
    got_c, got_m = blu.jit(f, donate_argnums=0)(*put(dev, c, xs))
    rc, ms = c.astype(f64), []
    for x in xs:
        rc = rc + x if x.sum() > 0 else rc - x
        ms.append(rc.max())
    close(got_c, rc)
    close(got_m, np.array(ms))


# ---- GPT-2 with its blocks scanned --------------------------------------------------------------


@on_gpu
@pytest.mark.parametrize("unroll", [0, 16])
def test_gpt2_scan_layers_matches_unrolled(dev, unroll):
    """The tiny GPT-2's loss and gradient with ``scan_layers`` (one block body in a loop node,
    its backward a reversed scan; or, ``BLU_UNROLL_SCANS=16``, both scans unrolled by the
    plan) against the unrolled model on the CPU (float32)."""
    import dataclasses

    import blu.random as random
    from blu.core import pytree
    from examples.gpt2.model import CONFIGS, init_params, loss_fn

    cfg = CONFIGS["tiny"].with_vocab(65)
    scanned = dataclasses.replace(cfg, scan_layers=True)
    params = pytree.tree_map(np.asarray, init_params(cfg, random.key(0)))
    x = np.random.default_rng(14).integers(0, 65, (2, 32)).astype(np.int32)
    y = np.roll(x, -1, 1)

    def vg(c):
        return blu.value_and_grad(lambda p, x, y: loss_fn(p, x, y, c))

    want_l, want_g = blu.jit(vg(cfg))(params, x, y)
    on_dev = pytree.tree_map(lambda a: put(dev, a), params)
    with blu.config.override(unroll_scans=unroll):
        if not unroll:
            loop_plan(vg(scanned), params, x, y)
        got_l, got_g = blu.jit(vg(scanned))(on_dev, *put(dev, x, y))
    close(got_l, float(want_l), rtol=1e-5)
    for g, w in zip(pytree.tree_leaves(got_g), pytree.tree_leaves(want_g), strict=True):
        close(g, np.asarray(w).astype(f64), rtol=1e-4, atol=1e-5)


@on_gpu
@pytest.mark.parametrize("steps", [0, 1, 5, 12])
def test_kv_cache_loop_in_place(dev, steps):
    """A decode-style loop writing one row per step into a cache (``dynamic_update_slice`` at
    the loop index): the body's plan updates the carry in place (no copy of the cache per
    step); the cache passed in is left as it was."""
    cache = rng_data((3, 16, 8), 15)
    rows = rng_data((3, 12, 8), 16)

    def f(cache, rows):
        def body(i, c):
            row = lax.dynamic_slice_in_dim(rows, i, 1, 1) * 2.0
            return lax.dynamic_update_slice(c, row, (0, i + 2, 0))

        return lax.fori_loop(0, steps, body, cache)

    loop_plan(f, cache, rows)
    (node,) = [n for n in plan_nodes(f, cache, rows) if n.kind == "loop"]
    assert node.bodies[0][4][1], "the cache carry is not updated in place"
    dc = put(dev, cache)
    got = blu.jit(f)(dc, put(dev, rows))
    want = cache.copy()
    for i in range(steps):
        want[:, min(i + 2, 15)] = rows[:, i] * 2.0
    np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_array_equal(np.asarray(dc), cache)


@on_gpu
@pytest.mark.skipif(FAKE, reason="conditional graph nodes need a real GPU (the fake device "
                    "runs while loops on the host)")  # fmt: skip
@pytest.mark.parametrize("limit", [1e9, 5.0, 0.5])
def test_while_loop_decided_on_the_device(dev, limit, monkeypatch):
    """On a GPU whose driver has conditional WHILE nodes, a data-dependent while loop runs as
    one graph launch: no copy to the host during the call (the result read after is the only
    one), and the same values as the host-decided loop."""
    from blu.cuda.conditional import supported

    if not supported():
        pytest.skip("the driver has no conditional WHILE nodes")
    x = rng_data((64,), 17, 10.0)

    def f(x, lim):
        def cond(c):
            return (c[1] * c[1]).sum() > lim

        return lax.while_loop(cond, lambda c: (c[0] + 1, c[1] * 0.5), (np.int32(0), x))

    g = blu.jit(f)
    dx, dl = put(dev, x, np.float32(limit))
    reads = []
    real = dev.copy_d2h
    monkeypatch.setattr(dev, "copy_d2h", lambda dst, src: (reads.append(1), real(dst, src)))
    n, y = g(dx, dl)
    assert reads == [], "the host read a predicate"
    monkeypatch.undo()
    rn, ry = 0, x.astype(f64)
    while (ry * ry).sum() > limit:
        rn, ry = rn + 1, ry * 0.5
    assert int(np.asarray(n)) == rn
    close(y, ry)
    with blu.config.override(cuda_conditional_nodes=False):
        n2, y2 = blu.jit(f)(dx, dl)
    assert int(np.asarray(n2)) == rn
    close(y2, ry)


@on_gpu
@pytest.mark.skipif(FAKE, reason="conditional graph nodes need a real GPU")
@pytest.mark.parametrize("index", [-3, 0, 1, 2, 7])
def test_switch_decided_on_the_device(dev, index, monkeypatch):
    """On a driver with SWITCH nodes, ``switch`` on a traced index reads it on the device (no
    copy to the host during the call), clamped as XLA clamps."""
    from blu.cuda.conditional import supported_switch

    if not supported_switch():
        pytest.skip("the driver has no conditional SWITCH nodes")
    x = rng_data((37, 5), 11)
    branches = [lambda x: x + 1.0, lambda x: x, lambda x: jnp.sin(x) * 2.0]
    f = blu.jit(lambda i, x: lax.switch(i, branches, x))
    di, dx = put(dev, np.int32(index), x)
    reads = []
    real = dev.copy_d2h
    monkeypatch.setattr(dev, "copy_d2h", lambda dst, src: (reads.append(1), real(dst, src)))
    got = f(di, dx)
    assert reads == [], "the host read the index"
    monkeypatch.undo()
    k = min(max(index, 0), 2)
    close(got, [x + 1.0, x, np.sin(x.astype(f64)) * 2.0][k])
