"""GPU tests of ``jit``'s fast path on device arrays (``dispatch.DeviceFastCall``, marked
``gpu``): a call with the previous call's signature runs the executable bound to the arguments'
device without the full path's per-leaf work. Each test checks the values against float64
numpy and that the calls which must take the full path (another signature, new flags, a trace,
a donated host array, a deleted array) do, with the full path's results and errors. Runs on a
GPU or, with ``BLU_FAKE_GPU=1``, on a ``FakeDevice``; graphs on and off."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import GPU_MARKS, check, f32, f64, make_device, put

import blu
import blu.cuda as bc
import blu.lax as lax
import blu.numpy as bnp
from blu.core.errors import BluValueError
from blu.transforms import dispatch
from tests.helpers import env_flag

pytestmark = GPU_MARKS


@pytest.fixture(scope="module")
def dev():
    return make_device()


@pytest.fixture(params=["1", "0"], ids=["graphs", "launches"])
def graphs(request):
    env_flag("BLU_CUDA_GRAPHS", request.param)
    return request.param


def _state(rng, n_layers: int) -> dict:
    return {
        "layers": [
            {"w": rng.standard_normal((16, 16)).astype(f32) * 0.3,
             "b": rng.standard_normal(16).astype(f32) * 0.1}
            for _ in range(n_layers)
        ],
        "scale": np.full(16, 0.05, f32),
    }  # fmt: skip


def _ref_step(state: dict, x: np.ndarray, lr: float) -> tuple[dict, float]:
    """One SGD step of ``sum(tanh(..tanh(x @ w + b)..) * scale)**2`` in float64 by hand (the
    forward pass kept, then the chain rule layer by layer)."""
    hs, h = [x], x
    for p in state["layers"]:
        h = np.tanh(h @ p["w"] + p["b"])
        hs.append(h)
    y = (h * state["scale"]).sum()
    g_out = 2 * y * state["scale"] * np.ones_like(h)
    new_scale = state["scale"] - lr * 2 * y * h.sum(0)
    g, new_layers = g_out, []
    for p, h_in, h_out in zip(state["layers"][::-1], hs[-2::-1], hs[:0:-1]):
        gz = g * (1 - h_out**2)
        new_layers.append({"w": p["w"] - lr * h_in.T @ gz, "b": p["b"] - lr * gz.sum(0)})
        g = gz @ p["w"].T
    return {"layers": new_layers[::-1], "scale": new_scale}, y**2


def _step(lr: float):
    def loss(state, x):
        h = x
        for p in state["layers"]:
            h = lax.tanh(h @ p["w"] + p["b"])
        return (h * state["scale"]).sum() ** 2

    def step(state, x):
        value, g = blu.value_and_grad(loss)(state, x)
        return blu.tree_util.tree_map(lambda p, d: p - lr * d, state, g), value

    return blu.jit(step, donate_argnums=0)


def _to64(tree):
    return blu.tree_util.tree_map(lambda a: np.asarray(a).astype(f64), tree)


def _no_full_path(monkeypatch) -> None:
    from blu.transforms.jit import Jitted

    def full_path(*args, **kwargs):
        raise AssertionError("the call took the full path")

    monkeypatch.setattr(Jitted, "_lookup", full_path)


def test_a_training_step_takes_the_fast_path_and_donates(dev, graphs, monkeypatch):
    rng = np.random.default_rng(21)
    host = _state(rng, 3)
    f = _step(0.01)
    ref = _to64(host)
    with blu.config.override(default_matmul_precision="fp32"):
        state = blu.tree_util.tree_map(lambda a: put(dev, a), host)
        for i in range(5):
            x = rng.standard_normal((8, 16)).astype(f32)
            prev = state
            state, loss = f(state, put(dev, x))
            ref, want = _ref_step(ref, x.astype(f64), 0.01)
            if i == 0:  # the first call took the full path; each later one the fast path
                assert isinstance(f._fast, dispatch.DeviceFastCall)
                _no_full_path(monkeypatch)
            assert all(a.is_deleted() for a in blu.tree_util.tree_leaves(prev))  # donated
            assert all(isinstance(a, bc.DeviceArray) for a in blu.tree_util.tree_leaves(state))
            check(loss, np.asarray(want), rtol=1e-4)
            for got, w in zip(blu.tree_util.tree_leaves(state), blu.tree_util.tree_leaves(ref)):
                check(got, w, rtol=1e-4, atol=1e-5)
        monkeypatch.undo()
        with pytest.raises(BluValueError, match="deleted"):  # a donated state used again
            f(prev, put(dev, x))


def test_another_signature_or_flags_take_the_full_path(dev, graphs):
    rng = np.random.default_rng(22)
    f = blu.jit(lambda x, y: bnp.tanh(x) * y + 1.0)

    def want(x, y):
        return np.tanh(x.astype(f64)) * y.astype(f64) + 1.0

    x, y = (rng.standard_normal((5, 7)).astype(f32) for _ in range(2))
    for _ in range(3):
        check(f(*put(dev, x, y)), want(x, y))
    assert isinstance(f._fast, dispatch.DeviceFastCall)
    x2, y2 = (rng.standard_normal((3, 7)).astype(f32) for _ in range(2))  # another shape
    check(f(*put(dev, x2, y2)), want(x2, y2))
    check(f(*put(dev, x2, y2.astype(np.float16))), want(x2, y2.astype(np.float16)), rtol=2e-3)
    check(f(put(dev, x), y), want(x, y))  # a host operand: copied to the device
    y[0, 0] = 5.0  # the same numpy array written: read again, never a stale copy
    check(f(put(dev, x), y), want(x, y))
    check(f(put(dev, x), y), want(x, y))
    with blu.config.override(cuda_graphs=graphs != "1"):  # new flags: the full path
        check(f(*put(dev, x, y)), want(x, y))
    # under a transformation the jitted function is traced, not run
    g = blu.grad(lambda a: f(a, put(dev, y)).sum())(put(dev, x))
    check(g, (1 - np.tanh(x.astype(f64)) ** 2) * y.astype(f64))


def test_deleted_and_donated_host_arrays_keep_the_full_paths_errors(dev, graphs):
    rng = np.random.default_rng(23)
    x = rng.standard_normal((6, 4)).astype(f32)
    f = blu.jit(lambda a, b: (a * 2.0 + b, b.sum()), donate_argnums=1)
    for _ in range(3):  # a donated host Array beside device arrays: deleted by every call
        b = bnp.asarray(np.full((6, 4), 3.0, f32))
        out, s = f(put(dev, x), b)
        check(out, x.astype(f64) * 2 + 3)
        check(s, np.asarray(72.0))
        assert b.is_deleted()
    g = blu.jit(lambda a: a + 1.0)
    for _ in range(2):
        check(g(put(dev, x)), x.astype(f64) + 1)
    d = put(dev, x)
    d.delete()
    with pytest.raises(BluValueError, match="deleted"):
        g(d)


def test_device_leaves_are_checked_by_their_avals(dev, graphs, monkeypatch):
    # each device leaf's aval (the full path's key) is compared with the executable's: by
    # identity where the array has it (a step's outputs), made as the full path makes it where
    # not yet (arrays just put on the device: the fast path still); another's misses
    rng = np.random.default_rng(24)
    f = blu.jit(lambda t: t["a"] * 2.0 + t["b"])
    x, y = (rng.standard_normal((4, 3)).astype(f32) for _ in range(2))
    check(f({"a": put(dev, x), "b": put(dev, y)}), x.astype(f64) * 2 + y)
    fast = f._fast
    assert isinstance(fast, dispatch.DeviceFastCall)
    lookups = [0]
    lookup = type(f)._lookup

    def counted(self, *a, **k):
        lookups[0] += 1
        return lookup(self, *a, **k)

    monkeypatch.setattr(type(f), "_lookup", counted)
    a, b = put(dev, x, y)
    assert a._aval is None  # (none made yet)
    check(f({"a": a, "b": b}), x.astype(f64) * 2 + y)
    assert lookups[0] == 0 and a._aval is fast.avals[0]
    check(f({"a": a, "b": b}), x.astype(f64) * 2 + y)  # (now by identity)
    assert lookups[0] == 0
    x2 = x[:, :2].copy()
    c = put(dev, x2)
    c.aval  # noqa: B018 - made: another aval than the executable's
    check(f({"a": c, "b": put(dev, y[:, :2].copy())}), x2.astype(f64) * 2 + y[:, :2])
    assert lookups[0] == 1
    check(f({"a": a, "b": put(dev, y.astype(np.float16))}), x.astype(f64) * 2 + y.astype(
        np.float16), rtol=2e-3)  # (another dtype, no aval made yet)  # fmt: skip
    assert lookups[0] == 2


def test_an_array_passed_twice_is_not_taken_over(dev, graphs, monkeypatch):
    # the same array as a donated leaf and another argument: its buffer is not taken over (the
    # other argument reads it), on the full path and the fast path alike; the others are
    rng = np.random.default_rng(25)
    f = blu.jit(lambda s, x: ({k: v * 2.0 + x for k, v in s.items()}, x.sum()), donate_argnums=0)
    host = {k: rng.standard_normal(8).astype(f32) for k in "abc"}
    for i in range(3):
        s = {k: put(dev, v) for k, v in host.items()}
        out, total = f(s, s["b"])
        if i == 0:
            assert isinstance(f._fast, dispatch.DeviceFastCall)
            _no_full_path(monkeypatch)
        for k in "abc":
            check(out[k], host[k].astype(f64) * 2 + host["b"])
        check(total, np.asarray(host["b"].astype(f64).sum()))
        assert s["a"].is_deleted() and s["c"].is_deleted() and not s["b"].is_deleted()
        check(s["b"], host["b"])
