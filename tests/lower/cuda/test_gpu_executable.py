"""GPU tests of the executable around the kernels (marked ``gpu``): matrix products through
cuBLASLt in every precision, eager operations on ``DeviceArray``s, buffer donation, CUDA-graph
capture and replay, and the memory a call leaves behind. Runs on a GPU or, with
``BLU_FAKE_GPU=1``, on a ``FakeDevice`` (see ``test_gpu_kernels.py``); shapes are fixed."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from gpu_helpers import GPU_MARKS, SHAPE, bf16, check, f32, f64, gen, make_device, put, rel_err

import blu
import blu.cuda as bc
import blu.lax as lax
import blu.numpy as bnp
from tests.helpers import env_flag

pytestmark = GPU_MARKS


@pytest.fixture(scope="module")
def dev():
    return make_device()


# ---- products through cuBLASLt -------------------------------------------------------------

PRODUCTS = [
    ("x@w", lambda a, b: a @ b, [(128, 256), (256, 192)], lambda a, b: a @ b),
    ("x@w.T", lambda a, b: a @ b.T, [(128, 256), (192, 256)], lambda a, b: a @ b.T),
    (
        "bij,bjk",
        lambda a, b: bnp.einsum("bij,bjk->bik", a, b),
        [(4, 64, 96), (4, 96, 80)],
        lambda a, b: a @ b,
    ),
    (
        "bhqd,bhkd",
        lambda a, b: bnp.einsum("bhqd,bhkd->bhqk", a, b),
        [(2, 4, 64, 32), (2, 4, 48, 32)],
        lambda a, b: a @ np.swapaxes(b, -1, -2),
    ),
]


@pytest.mark.parametrize(
    "precision, dt, tol",
    [("fp32", f32, 1e-5), ("tf32", f32, 3e-3), ("fp32", bf16, 1e-2)],
    ids=["fp32", "tf32", "bf16"],
)
@pytest.mark.parametrize(
    "fn, shapes, ref", [pytest.param(f, s, r, id=n) for n, f, s, r in PRODUCTS]
)
def test_products(dev, fn, shapes, ref, precision, dt, tol):
    rng = np.random.default_rng(12)
    a, b = (rng.standard_normal(s).astype(dt) for s in shapes)
    with blu.config.override(default_matmul_precision=precision):
        out = blu.jit(fn)(*put(dev, a, b))
    assert isinstance(out, bc.DeviceArray) and np.asarray(out).dtype == np.dtype(dt)
    assert rel_err(out, ref(a.astype(f64), b.astype(f64))) < tol


# ---- eager operations, donation, graphs, memory --------------------------------------------


def test_eager_ops_on_device_arrays(dev):
    rng = np.random.default_rng(13)
    x, y = gen("any", f32, SHAPE, rng), gen("any", f32, SHAPE, rng)
    dx, dy = put(dev, x, y)
    x64, y64 = x.astype(f64), y.astype(f64)
    check(dx + dy, x64 + y64)
    check(dx * 2.0 - dy, x64 * 2 - y64)
    check(dx.sum(0), x64.sum(0))
    check(dx[::2], x[::2])
    check(bnp.exp(dx), np.exp(x64))
    check(dx + y, x64 + y64)  # a host operand is copied to the device


def test_donation_reuses_buffer(dev):
    x = gen("any", f32, SHAPE, np.random.default_rng(14))
    f = blu.jit(lambda x: x * 2.0 + 1.0, donate_argnums=0)
    dx = put(dev, x)
    ptr = dx.ptr
    out = f(dx)
    assert dx.is_deleted()
    assert out.ptr == ptr
    check(out, x.astype(f64) * 2 + 1)


@pytest.mark.parametrize("graphs", ["1", "0"])
def test_repeated_calls_graph_capture_and_replay(dev, monkeypatch, graphs):
    env_flag("BLU_CUDA_GRAPHS", graphs)
    rng = np.random.default_rng(15)
    w0 = rng.standard_normal((256, 64)).astype(f32)
    lr = 0.1 if graphs == "1" else 0.05  # distinct programs: the executables are cached per program

    def step(w, x):
        h = lax.tanh(x @ w)
        return w - lr * (x.T @ h) / x.shape[0], (h * h).sum()

    with blu.config.override(default_matmul_precision="fp32"):
        f = blu.jit(step, donate_argnums=0)
        w, w_ref = put(dev, w0), w0.astype(f64)
        for _ in range(3):  # 1st: runs; 2nd: captures a graph (GPU); 3rd: replays it
            x = rng.standard_normal((32, 256)).astype(f32)
            w, loss = f(w, put(dev, x))
            h = np.tanh(x.astype(f64) @ w_ref)
            w_ref = w_ref - lr * (x.T.astype(f64) @ h) / 32
            check(w, w_ref, rtol=1e-4)
            check(loss, np.asarray((h * h).sum()), rtol=1e-4)


def _count_puts(monkeypatch) -> list:
    """The shapes of the host arguments the GPU executables copy to the device, in order."""
    from blu.lower.cuda import run as gpu_run

    puts, real = [], gpu_run._put
    monkeypatch.setattr(gpu_run, "_put", lambda x, d: puts.append(np.shape(x)) or real(x, d))
    return puts


@pytest.mark.parametrize("graphs", ["1", "0"])
def test_a_host_constant_is_copied_to_the_device_once(dev, monkeypatch, graphs):
    # a trace's constants (a RoPE table computed on the host) come back as the same immutable
    # objects every call: their device copies are kept; with graphs, they key the graph
    env_flag("BLU_CUDA_GRAPHS", graphs)
    rng = np.random.default_rng(18)
    table = bnp.asarray(rng.standard_normal((24, 40)).astype(f32))
    scale = 3.0 if graphs == "1" else 5.0  # distinct programs: executables are cached

    def f(x):
        return x * scale + table

    g = blu.jit(f)
    puts = _count_puts(monkeypatch)
    for _ in range(4):
        x = rng.standard_normal((24, 40)).astype(f32)
        check(g(put(dev, x)), x.astype(f64) * scale + np.asarray(table, f64))
    assert puts == [(24, 40)], puts


def test_host_arguments_that_can_change_are_copied_each_call(dev, monkeypatch):
    # a writable numpy argument is copied at each call (the caller may write it between
    # calls); a constant the program returns as it is goes out in a fresh copy each call (the
    # caller owns the output: donating it must not free what the next call reads)
    rng = np.random.default_rng(19)
    table = bnp.asarray(rng.standard_normal((16, 8)).astype(f32))
    g = blu.jit(lambda x, w: (x + w, table))
    puts = _count_puts(monkeypatch)
    w, outs = np.zeros((16, 8), f32), []
    for k in range(3):
        w[:] = k  # the same writable array, written between calls
        x = rng.standard_normal((16, 8)).astype(f32)
        y, t = g(put(dev, x), w)
        check(y, x.astype(f64) + k)
        check(t, np.asarray(table))
        outs.append(t)
    assert len(puts) == 6 and len({id(t) for t in outs}) == 3, puts
    blu.jit(lambda a: a * 2.0, donate_argnums=0)(outs[-1])  # frees the last copy
    check(g(put(dev, np.zeros((16, 8), f32)), w)[1], np.asarray(table))


def test_only_host_arrays_that_cannot_change_are_kept(dev):
    # numpy lets the owner of a read-only array write it again: such an argument is copied
    # each call; a kept constant that is deleted since raises as the copy would
    rng = np.random.default_rng(20)
    x = rng.standard_normal(8).astype(f32)
    c = np.arange(8, dtype=f32)
    c.flags.writeable = False
    g = blu.jit(lambda x, c: x + c)
    check(g(put(dev, x), c), x + c)
    c.flags.writeable = True
    c[:] = 100.0
    c.flags.writeable = False
    check(g(put(dev, x), c), x + 100.0)
    w = bnp.asarray(rng.standard_normal(8).astype(f32))
    h = blu.jit(lambda x: x * 2.0 + w)
    check(h(put(dev, x)), x * 2.0 + np.asarray(w))
    w.delete()
    with pytest.raises(Exception, match="deleted"):
        h(put(dev, x))


def _simulated_graphs(dev, monkeypatch) -> None:
    """Graphs on the fake device (which cannot capture them): a capture runs the call's steps
    once, as a capture's Python does (a view step sets its addresses), and records their
    addresses; a replay runs the steps again on them. On a GPU: nothing (real graphs)."""
    import contextlib

    from blu.lower.cuda import run as gpu_run

    if getattr(dev, "platform", "") != "fake":
        return
    real = gpu_run.Bound._launch_all

    class Recorder:
        @contextlib.contextmanager
        def capture(self, stream):
            def rec(bound, ptr, keep, arena):
                real(bound, ptr, keep, arena)
                self.rec = (bound, list(ptr), len(keep), arena)

            monkeypatch.setattr(gpu_run.Bound, "_launch_all", rec)
            try:
                yield self
            finally:
                monkeypatch.setattr(gpu_run.Bound, "_launch_all", real)

        def replay(self, stream):
            bound, ptr, n, arena = self.rec
            real(bound, list(ptr), [None] * n, arena)

        def destroy(self):
            pass

    import blu.cuda.graph as graph_mod

    init = gpu_run.Bound.__init__

    def graphable_init(self, exe, d):
        init(self, exe, d)
        self.graphable = True

    monkeypatch.setattr(graph_mod, "Graph", Recorder)
    monkeypatch.setattr(gpu_run.Bound, "__init__", graphable_init)
    monkeypatch.setattr(type(dev), "stream", None, raising=False)


def test_graph_keys_name_positions(dev, monkeypatch):
    # which arguments are staged into kept buffers and which key the graph by address varies
    # with the kept host copies: a key of addresses alone matched a graph captured with another
    # argument at that address. Graphs simulated where the device cannot capture them.
    _simulated_graphs(dev, monkeypatch)
    env_flag("BLU_CUDA_GRAPHS", "1")
    g = blu.jit(lambda c0, c1, x: c0 + c1 * 10.0 + x * 100.0)
    dx = put(dev, np.ones(4, f32))
    m = np.full(4, 2.0, f32)  # writable: copied and staged each call
    a0, a0b, a1 = (bnp.asarray(np.full(4, v, f32)) for v in (3.0, 4.0, 5.0))
    for c0, c1, want in [(a0, m, 123.0), (a0, m, 123.0), (a0b, m, 124.0),
                         (put(dev, np.full(4, 6.0, f32)), a1, 156.0)]:  # fmt: skip
        check(g(c0, c1, dx), np.full(4, want))


def test_a_replays_view_of_an_argument_is_of_that_argument(dev, monkeypatch):
    # a small argument is staged into a buffer the graph keeps; an output that is a view of it
    # (a reshape) must view the argument itself, not that buffer (which the next call
    # overwrites, and which goes when the executable does)
    _simulated_graphs(dev, monkeypatch)
    env_flag("BLU_CUDA_GRAPHS", "1")
    f = blu.jit(lambda a: (a.reshape(3, 2), a * 2.0))
    outs = []
    for k in range(4):
        v, d = f(put(dev, np.full((2, 3), k, f32)))
        outs.append(v)
        check(d, np.full((2, 3), 2.0 * k))
    for k, v in enumerate(outs):  # each still its own call's argument
        check(v, np.full((3, 2), float(k)))
    g = blu.jit(lambda a, b: (a, a.reshape(6)[2:], b + 1.0), donate_argnums=0)
    for k in range(3):  # a donated argument returned as it is and through a view
        a, tail, b = g(
            put(dev, np.arange(6, dtype=f32).reshape(2, 3) + k), put(dev, np.ones(3, f32))
        )
        check(a, np.arange(6).reshape(2, 3) + k)
        check(tail, np.arange(2, 6) + k)
        check(b, np.full(3, 2.0))


def test_auto_graphs_replay_a_training_step_in_place(dev, monkeypatch):
    # "auto": a step whose state goes back into donated buffers is captured once and replayed;
    # each new value lands in its own argument's buffer (JAX's pairing), so the addresses the
    # graph baked in stay right from call to call
    from blu.lower.cuda import run as gpu_run

    env_flag("BLU_CUDA_GRAPHS", "auto")
    monkeypatch.setattr(gpu_run, "GRAPH_MIN_STEPS", 1)
    rng = np.random.default_rng(17)
    a0, b0 = (rng.standard_normal((64, 64)).astype(f32) for _ in range(2))

    def step(a, b, x):
        h = lax.tanh(x @ a)
        return a - 0.01 * x.T @ h, b * 0.5, (h * h).sum()

    with blu.config.override(default_matmul_precision="fp32"):
        f = blu.jit(step, donate_argnums=(0, 1))
        a, b = put(dev, a0), put(dev, b0)
        ra, rb = a0.astype(f64), b0.astype(f64)
        ptrs = (a.ptr, b.ptr)
        for _ in range(4):
            x = rng.standard_normal((16, 64)).astype(f32)
            a, b, loss = f(a, b, put(dev, x))
            h = np.tanh(x.astype(f64) @ ra)
            ra, rb = ra - 0.01 * x.T.astype(f64) @ h, rb * 0.5
            check(a, ra, rtol=1e-4)
            check(b, rb, rtol=1e-4)
            check(loss, np.asarray((h * h).sum()), rtol=1e-4)
            assert (a.ptr, b.ptr) == ptrs


def test_graph_replays_when_a_donated_argument_is_not_written_into(dev, monkeypatch):
    """``b``'s new value is made while ``b`` is still read, so the plan writes it into a fresh
    buffer, not ``b``'s: the next call's ``b`` has a new address each time. It is staged (copied
    into a kept buffer), so one graph is captured and replayed, not one per call (ResNet-50's
    step had ten such batch-norm parameters)."""
    from blu.cuda import graph as cuda_graph
    from blu.lower.cuda import run as gpu_run

    env_flag("BLU_CUDA_GRAPHS", "auto")
    monkeypatch.setattr(gpu_run, "GRAPH_MIN_STEPS", 1)
    captures = []

    class Counting(cuda_graph.Graph):
        def capture(self, stream):
            captures.append(1)
            return super().capture(stream)

    monkeypatch.setattr(cuda_graph, "Graph", Counting)
    rng = np.random.default_rng(18)
    w0, b0 = rng.standard_normal((256, 64)).astype(f32), rng.standard_normal(64).astype(f32)

    def step(w, b, x):
        h = lax.tanh(x @ w + b)
        return w - 0.01 * (x.T @ h), b * 0.9 + x[0, :64], (h * b).sum()

    with blu.config.override(default_matmul_precision="fp32"):
        f = blu.jit(step, donate_argnums=(0, 1))
        w, b = put(dev, w0, b0)
        rw, rb = w0.astype(f64), b0.astype(f64)
        for _ in range(5):
            x = rng.standard_normal((32, 256)).astype(f32)
            w, b, loss = f(w, b, put(dev, x))
            x64 = x.astype(f64)
            h = np.tanh(x64 @ rw + rb)
            rw, rb, rloss = rw - 0.01 * (x64.T @ h), rb * 0.9 + x64[0, :64], (h * rb).sum()
            check(w, rw, rtol=1e-4)
            check(b, rb, rtol=1e-4)
            check(loss, np.asarray(rloss), rtol=1e-4)
    # the 2nd call captures, the 3rd to 5th replay (a simulated GPU launches: no graph)
    assert len(captures) == (0 if dev.platform == "fake" else 1)


def test_memory_returns_to_start(dev, monkeypatch):
    env_flag("BLU_CUDA_GRAPHS", "0")  # a graph keeps its arena and outputs
    rng = np.random.default_rng(16)
    x = rng.standard_normal((512, 300)).astype(f32)
    f = blu.jit(lambda x: (bnp.exp(x - x.max(-1, keepdims=True)), (x * x).sum(0)))
    np.asarray(f(put(dev, x))[0])  # compile and warm up
    bc.synchronize(dev)
    gc.collect()
    start = bc.memory_stats(dev)["allocated_bytes"]
    dx = put(dev, x)
    a, b = f(dx)
    np.testing.assert_allclose(np.asarray(b), (x.astype(f64) ** 2).sum(0), rtol=1e-5)
    assert bc.memory_stats(dev)["allocated_bytes"] > start
    del a, b, dx
    gc.collect()
    bc.synchronize(dev)
    assert bc.memory_stats(dev)["allocated_bytes"] == start
