"""Fused attention on slices of the QKV array (``blu.lower.cuda.packed_attention``): which CUDA
programs the plan rewrites, the packed primitives' arithmetic against a float64 reference, and a
jitted attention block's value and gradients on the device (a GPU, or ``BLU_FAKE_GPU=1``)
against float64 and against the unpacked program."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import GPU_MARKS, bf16, f32, f64, make_device, put
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu import nn
from blu.core import pytree
from blu.lax import attention as att
from blu.lower.cuda.packed_attention import bwd_packed_p, fwd_packed_p

FWD, BWD = "library[dot_product_attention_fwd_packed]", "library[dot_product_attention_bwd_packed]"


def _labels(f, *args, target="cuda:sm_90") -> list[str]:
    text = blu.jit(f).lower(*args, target=target).as_text()
    return [ln.split(": ", 1)[1] for ln in text.splitlines() if ln.startswith("//   ")]


def _block(b, t, n, h, dt, layout="b t 3 n h", order=(0, 1, 2), **kw):
    """``x (b, t, c) -> sum(attention(q, k, v) ** 2)`` with ``q, k, v`` parts of ``x @ w``."""
    c = n * h

    def parts(qkv):
        if layout == "b t 3 n h":  # GPT-2's qkv.reshape(B, T, 3, N, H)[:, :, i]
            r = qkv.reshape(b, t, 3, n, h)
            return [r[:, :, i] for i in order]
        # nanoGPT's qkv.split(C, axis=2), each reshaped to heads
        return [qkv[:, :, i * c : (i + 1) * c].reshape(b, t, n, h) for i in order]

    def f(x, w):
        q, k, v = parts(x.astype(dt) @ w.astype(dt))
        y = nn.dot_product_attention(q, k, v, is_causal=True, **kw)
        return (y.astype(f32) ** 2).sum()

    return f


def _args(rng, b=2, t=16, n=2, h=32):
    x = rng.standard_normal((b, t, n * h)).astype(f32)
    return x, (rng.standard_normal((n * h, 3 * n * h)) * 0.15).astype(f32)


# ---- which programs are rewritten ---------------------------------------------------------------


@pytest.mark.parametrize("layout", ["b t 3 n h", "b t c"])
@pytest.mark.parametrize("dt", [f32, bf16])
def test_attention_and_its_gradient_read_the_qkv_array(layout, dt):
    x, w = _args(np.random.default_rng(0))
    f = _block(2, 16, 2, 32, dt, layout, order=(1, 0, 2))
    assert FWD in _labels(f, x, w)
    labels = _labels(blu.value_and_grad(f, (0, 1)), x, w)
    assert FWD in labels and BWD in labels, labels
    # no copies left: the slices and the pads' sum are gone (the reshapes are views)
    assert not any(lb.startswith("kernel[") and ("slice" in lb or "pad" in lb) for lb in labels)


def test_what_is_not_rewritten():
    rng = np.random.default_rng(1)
    x, w = _args(rng)
    g = lambda f: blu.value_and_grad(f, (0, 1))  # noqa: E731
    mask = np.tril(np.ones((16, 16), bool))[None, None]
    bias = rng.standard_normal((1, 2, 16, 16)).astype(bf16)
    cases = {
        "a mask": (_block(2, 16, 2, 32, bf16, mask=mask), (x, w)),
        "a bias": (_block(2, 16, 2, 32, bf16, bias=bias), (x, w)),
        "head of 16 (no float32 flash kernel)": (_block(2, 16, 4, 16, f32), _args(rng, n=4, h=16)),
    }
    for what, (f, a) in cases.items():
        labels = _labels(g(f), *a)
        assert FWD not in labels and BWD not in labels, (what, labels)
    with blu.config.override(packed_attention=False):
        assert FWD not in _labels(g(_block(2, 16, 2, 32, bf16)), x, w)
    labels = _labels(g(_block(2, 16, 2, 32, bf16)), x, w, target="cpu")
    assert FWD not in labels and BWD not in labels


def test_gradient_read_elsewhere_keeps_the_backward_plain():
    x, w = _args(np.random.default_rng(2))

    def f(x, w):
        r = (x @ w).reshape(2, 16, 3, 2, 32)
        q, k, v = r[:, :, 0], r[:, :, 1], r[:, :, 2]
        return (nn.dot_product_attention(q, k, v, is_causal=True) ** 2).sum() + (q**3).sum()

    labels = _labels(blu.value_and_grad(f, (0, 1)), x, w)
    assert FWD in labels and BWD not in labels, labels


# ---- the primitives' arithmetic -----------------------------------------------------------------


def _attention64(q, k, v, scale):
    """Causal softmax attention in float64: ``q, k, v (B, T, N, H)``."""
    s = np.einsum("btnh,bsnh->bnts", q, k) * scale
    t = q.shape[1]
    s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bnts,bsnh->btnh", p, v)


@settings(max_examples=15, deadline=None)
@given(b=st.integers(1, 2), t=st.integers(1, 9), n=st.integers(1, 3), h=st.sampled_from([1, 4, 8]),
       order=st.permutations([0, 1, 2]), seed=st.integers(0, 2**16))  # fmt: skip
def test_packed_primitives_against_float64(b, t, n, h, order, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, t, 3, n, h))
    offsets = tuple(i * n * h for i in order)
    parts = [x[:, :, i] for i in order]
    scale = 1 / np.sqrt(h)
    params = dict(scale=scale, is_causal=True, has_bias=False, has_mask=False,
                  implementation=None, offsets=offsets, heads=(n, h))  # fmt: skip
    out, lse = fwd_packed_p.impl(x.astype(f32), **params)
    want = _attention64(*parts, scale)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    # the backward by central differences of <dout, attention(x)> along a random direction
    dout = rng.standard_normal(out.shape)
    (dx,) = bwd_packed_p.impl(x.astype(f32), out, lse, dout.astype(f32), has_dlse=False,
                              need_dbias=False, **params)  # fmt: skip
    assert dx.shape == x.shape
    u, eps = rng.standard_normal(x.shape), 1e-6
    f = lambda y: np.sum(dout * _attention64(*[y[:, :, i] for i in order], scale))  # noqa: E731
    fd = (f(x + eps * u) - f(x - eps * u)) / (2 * eps)
    np.testing.assert_allclose(np.sum(dx * u), fd, rtol=1e-4, atol=1e-4)
    # and the plain primitive's gradients put in their places
    grads = att.bwd_p.impl(*[p.astype(f32) for p in parts], out, lse, dout.astype(f32),
                           **{k: v for k, v in params.items() if k not in ("offsets", "heads")},
                           has_dlse=False, need_dbias=False)  # fmt: skip
    for i, g in zip(order, grads):
        np.testing.assert_allclose(dx[:, :, i], g, rtol=1e-6, atol=1e-6)


# ---- a jitted block on the device ---------------------------------------------------------------


@GPU_MARKS[0]
@GPU_MARKS[1]
@pytest.mark.parametrize("layout", ["b t 3 n h", "b t c"])
@pytest.mark.parametrize("dt", [f32, bf16])
def test_jitted_block_matches_float64_and_the_unpacked_program(dt, layout):
    dev = make_device()
    b, t, n, h = 2, 80, 2, 64
    rng = np.random.default_rng(3)
    x, w = _args(rng, b, t, n, h)
    f = _block(b, t, n, h, dt, layout, order=(2, 0, 1))
    step = blu.value_and_grad(f, (0, 1))
    got = pytree.tree_leaves(blu.jit(step)(*put(dev, x, w)))
    with blu.config.override(packed_attention=False):
        plain = pytree.tree_leaves(blu.jit(step)(*put(dev, x, w)))
    want = pytree.tree_leaves(blu.value_and_grad(_block(b, t, n, h, f64, layout, (2, 0, 1)),
                                                 (0, 1))(x.astype(f64), w.astype(f64)))  # fmt: skip
    tol = 3e-2 if dt == bf16 else 1e-4
    for g, p, r in zip(got, plain, want):
        g, p, r = (np.asarray(a, f64) for a in (g, p, r))
        scale = np.max(np.abs(r))
        np.testing.assert_allclose(g, r, rtol=tol, atol=tol * scale)
        np.testing.assert_allclose(g, p, rtol=tol, atol=tol * scale)
