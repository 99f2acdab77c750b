"""Row groups in their three forms on the GPU (marked ``gpu``; ``blu.lower.cuda.codegen_rows``).

A row group (softmax, layer norm, log-sum-exp and their gradients) runs in the *unrolled* block
form (the default), the *looped* block form (``BLU_GPU_UNROLL=0``) or the *warp* form (one warp
per row, butterfly reductions: ``BLU_GPU_ROWS=warp``). The
unrolled and looped forms sum in the same order and reuse a stored value as stored (rounded to
bfloat16), so they must agree bit for bit; the warp form sums in another order. Every form is
checked against numpy float64. Shapes are fixed (the GPU machine has no MLIR:
``BLU_FAKE_GPU=1`` runs this file to fill the kernel cache, every form).
"""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import GPU_MARKS, bf16, f32, f64, make_device, plan_nodes

import blu
import blu.cuda as bc
import blu.nn as nn
import blu.numpy as bnp
from blu.lower.cuda import codegen as codegen_gpu
from blu.lower.cuda import codegen_rows
from tests.helpers import env_flag

pytestmark = GPU_MARKS


@pytest.fixture(scope="module")
def dev():
    return make_device()


FORMS = {
    "warp": {"BLU_GPU_ROWS": "warp"},
    "unrolled": {},
    "looped": {"BLU_GPU_UNROLL": "0"},
}


def group_forms(f, *args) -> list[str]:
    """The forms of the row groups of ``jit(f)(*args)`` under the current environment."""
    out = []
    for node in plan_nodes(f, *args):
        if node.kind == "kernel":
            plans = codegen_gpu.plan_nests(node.layout)
            out += [codegen_rows.group_form(p) for j, p in enumerate(plans) if p.group == j]
    return out


def all_forms(dev, monkeypatch, f, *args) -> dict[str, list[np.ndarray]]:
    """``jit(f)`` on device copies of ``args`` in each form: the outputs, as numpy."""
    put = [bc.device_put(np.asarray(a), dev) for a in args]
    outs = {}
    for form, env in FORMS.items():
        for var in ("BLU_GPU_ROWS", "BLU_GPU_UNROLL"):
            env_flag(var, "")
        for var, val in env.items():
            env_flag(var, val)
        assert form in group_forms(f, *args)
        out = blu.jit(lambda *a: f(*a))(*put)  # a new function: its own executable
        outs[form] = [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]
    for var in ("BLU_GPU_ROWS", "BLU_GPU_UNROLL"):
        env_flag(var, "")
    for u, lp in zip(outs["unrolled"], outs["looped"]):
        assert u.dtype == lp.dtype and u.shape == lp.shape
        same = np.array_equal(np.atleast_1d(u).view(np.uint8), np.atleast_1d(lp).view(np.uint8))
        assert same, f"unrolled and looped differ at {np.argwhere(u != lp)[:5].tolist()}"
    return outs


def close(got, ref, tol):
    got, ref = np.asarray(got, f64), np.asarray(ref, f64)
    err = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)
    assert err <= tol, err


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_softmax_bf16_forward_and_gradient(dev, monkeypatch):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((512, 1024)) * 3).astype(bf16)
    g = rng.standard_normal((512, 1024)).astype(bf16)

    def f(x, g):  # bf16 activations, float32 softmax, bf16 probabilities (the GPT-2 example's)
        p = nn.softmax(x.astype(f32)).astype(bf16)
        dx = blu.grad(lambda x: (nn.softmax(x.astype(f32)).astype(bf16) * g).astype(f32).sum())(x)
        return p, dx

    p64, g64 = _softmax(x.astype(f64)), g.astype(f64)
    for p, dx in all_forms(dev, monkeypatch, f, x, g).values():
        close(p, p64, 1e-2)
        close(dx, p64 * (g64 - (p64 * g64).sum(-1, keepdims=True)), 2e-2)


def test_causal_softmax_bf16(dev, monkeypatch):
    rng = np.random.default_rng(1)
    s = (rng.standard_normal((2, 4, 256, 256)) * 2).astype(bf16)
    mask = np.tril(np.ones((256, 256), bool))

    def f(s, mask):
        z = bnp.where(mask, s.astype(f32) * 0.125, -np.inf)
        return nn.softmax(z).astype(bf16)

    z = np.where(mask, s.astype(f64) * 0.125, -np.inf)
    for (p,) in all_forms(dev, monkeypatch, f, s, mask).values():
        close(p, _softmax(z), 1e-2)


def test_layer_norm_bf16_forward_and_gradient(dev, monkeypatch):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1024, 768)).astype(bf16)
    w, b = rng.standard_normal(768).astype(f32), rng.standard_normal(768).astype(f32)
    dy = rng.standard_normal((1024, 768)).astype(bf16)

    def ln(x, w, b):
        return nn.layer_norm(x.astype(f32), w, b).astype(bf16)

    def f(x, w, b, dy):
        loss = lambda x, w, b: (ln(x, w, b) * dy).astype(f32).sum()  # noqa: E731
        return (ln(x, w, b), *blu.grad(loss, argnums=(0, 1, 2))(x, w, b))

    x64, d64 = x.astype(f64), dy.astype(f64)
    mu, var = x64.mean(-1, keepdims=True), x64.var(-1, keepdims=True)
    rstd = 1 / np.sqrt(var + 1e-5)
    xh = (x64 - mu) * rstd
    gw = d64 * w
    ref_dx = rstd * (gw - gw.mean(-1, keepdims=True) - xh * (gw * xh).mean(-1, keepdims=True))
    for y, dx, dw, db in all_forms(dev, monkeypatch, f, x, w, b, dy).values():
        close(y, xh * w + b, 1e-2)
        close(dx, ref_dx, 2e-2)
        close(dw, (d64 * xh).sum(0), 1e-2)
        close(db, d64.sum(0), 1e-2)


def test_cross_entropy_bf16_logits_and_gradient(dev, monkeypatch):
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((512, 1024)) * 2).astype(bf16)
    labels = rng.integers(0, 1024, 512).astype(np.int32)

    def f(z, y):
        loss = lambda z: nn.cross_entropy(z.astype(f32), y)  # noqa: E731
        return loss(z), blu.grad(loss)(z)

    z = logits.astype(f64)
    p = _softmax(z)
    lse = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1)
    for loss, dz in all_forms(dev, monkeypatch, f, logits, labels).values():
        close(loss, (lse - z[np.arange(512), labels]).mean(), 1e-5)
        close(dz, (p - np.eye(1024)[labels]) / 512, 1e-2)


def test_warp_rows_with_a_partial_last_block(dev, monkeypatch):
    """1027 rows of 64: 4 rows per block, the last block holds 3; two elements per lane."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((1027, 64)) * 4).astype(f32)

    def f(x):
        return nn.softmax(x), nn.layer_norm(x)

    x64 = x.astype(f64)
    ln = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    for p, y in all_forms(dev, monkeypatch, f, x).values():
        np.testing.assert_allclose(p, _softmax(x64), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(y, ln, rtol=1e-4, atol=1e-5)
