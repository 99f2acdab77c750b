"""A reduction nest that nothing reads before a later nest of the same shape and reduced axes
joins that nest (``fusion.KernelLayout._defer_reductions``): a layer norm's backward computed
``dgamma`` and ``dbeta`` (column sums read only by the optimizer) in a pass of their own, then
the row sums, then the input gradient with the bias gradient of the layer before (column sums
again): three passes over ``dy`` and ``x`` where two do (GPT-2 124M's plan: 48 launches and
1.8 GB a step). Checked on the kernel's layout (and that the rule can fail), on a chain where a
read in between must keep the nests apart, and the values against numpy float64 on the CPU
and on the simulated GPU."""

from __future__ import annotations

import numpy as np
from gpu_helpers import GPU_MARKS, make_device, put
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.lower.plan import fusion
from blu.lower.plan.fusion import KernelLayout

f32, f64 = np.float32, np.float64


def ln_backward(x, dy, dres, g):
    """A layer norm's backward as the transpose writes it: the column sums, the row sums, then
    ``dx`` added to the residual's gradient and that sum's column sum (a bias's gradient)."""
    mu = x.mean(-1, keepdims=True)
    xc = x - mu
    rstd = 1.0 / bnp.sqrt((xc * xc).mean(-1, keepdims=True) + 1e-5)
    xhat = xc * rstd
    dgamma, dbeta = (dy * xhat).sum((0, 1)), dy.sum((0, 1))
    dxhat = dy * g
    dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(-1, keepdims=True))  # fmt: skip
    total = dres + dx
    return dgamma, dbeta, total, total.sum((0, 1))


def reference(x, dy, dres, g):
    x, dy, dres, g = (np.asarray(a, f64) for a in (x, dy, dres, g))
    mu = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    xhat = (x - mu) * rstd
    dxhat = dy * g
    dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(-1, keepdims=True))  # fmt: skip
    total = dres + dx
    return (dy * xhat).sum((0, 1)), dy.sum((0, 1)), total, total.sum((0, 1))


def _layout(fn, *args) -> KernelLayout:
    return KernelLayout(blu.make_jaxpr(fn)(*args).jaxpr)


def _column_nests(lay: KernelLayout, shape) -> list:
    return [n for n in lay.nests if n.shape == shape and n.axes == (0, 1)]


def _args(rng, B=2, T=5, C=8):
    x = rng.standard_normal((B, T, C)).astype(f32)
    dy, dres = (rng.standard_normal((B, T, C)).astype(f32) for _ in range(2))
    return x, dy, dres, (1 + 0.1 * rng.standard_normal(C)).astype(f32)


def test_the_column_sums_join_the_input_gradients_pass():
    args = _args(np.random.default_rng(0))
    lay = _layout(ln_backward, *args)
    cols = _column_nests(lay, args[0].shape)
    assert len(cols) == 1 and len(cols[0].members) >= 4, [
        (n.shape, n.axes, len(n.members)) for n in lay.nests
    ]
    orig = fusion.KernelLayout._defer_reductions
    try:  # without the rule the column sums are a pass of their own (the check can fail)
        fusion.KernelLayout._defer_reductions = lambda self: None
        assert len(_column_nests(_layout(ln_backward, *args), args[0].shape)) == 2
    finally:
        fusion.KernelLayout._defer_reductions = orig


def test_a_read_in_between_keeps_the_nests_apart():
    def f(x, y):
        s = x.sum(0)  # a column sum ...
        r = (x * s).sum(1, keepdims=True)  # ... read by the row sums after it
        return (y * r).sum(0), s

    x = np.ones((4, 3), f32)
    lay = _layout(f, x, x)
    cols = [n for n in lay.nests if n.shape == (4, 3) and n.axes == (0,)]
    assert len(cols) == 2, [(n.shape, n.axes, n.members) for n in lay.nests]
    got = blu.jit(f)(x, 2 * x)
    np.testing.assert_allclose(np.asarray(got[0]), np.full(3, 2.0 * 12 * 4))  # s 4, r 12


@settings(max_examples=15, deadline=None)
@given(B=st.integers(1, 3), T=st.integers(1, 7), C=st.sampled_from([1, 2, 8, 13]),
       seed=st.integers(0, 2**16))  # fmt: skip
def test_values_against_float64(B, T, C, seed):
    args = _args(np.random.default_rng(seed), B, T, C)
    got = blu.jit(ln_backward)(*args)
    want = reference(*args)
    eps = np.finfo(f32).eps
    for g, w in zip(got, want, strict=True):
        scale = 1 + np.abs(w).max()
        np.testing.assert_allclose(np.asarray(g, f64), w, rtol=0, atol=256 * eps * scale * B * T)


@GPU_MARKS[0]
@GPU_MARKS[1]
def test_values_on_the_gpu_against_float64():
    dev = make_device()
    args = _args(np.random.default_rng(3), 4, 64, 96)
    got = blu.jit(ln_backward)(*put(dev, *args))
    want = reference(*args)
    eps = np.finfo(f32).eps
    for g, w in zip(got, want, strict=True):
        scale = 1 + np.abs(w).max()
        np.testing.assert_allclose(np.asarray(g, f64), w, rtol=0, atol=256 * eps * scale * 256)
