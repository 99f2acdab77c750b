"""Horizontal fusion (``partition._merge_small_maps``): independent small maps of one shape are
one kernel; a map that would have to wait for another node, a large map and a map of another
shape stay apart. Values against numpy in float64, on the CPU and the simulated GPU."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.lax as lax
from blu.lower.plan.partition import SMALL_MAP

S = blu.ShapeDtypeStruct


def _kernels(fn, specs, target):
    prog = blu.jit(fn).lower(*specs, target=target)._program
    return [n for n in prog.plan.nodes if n.kind == "kernel"]


def _three_maps(a, b, c, s):
    """Three updates that read nothing in common but a scalar argument."""
    return a * s + 1.0, lax.exp(b) - s, c * c


def _three_maps_f64(a, b, c, s):
    a, b, c = (t.astype(np.float64) for t in (a, b, c))
    return a * s + 1.0, np.exp(b) - s, c * c


def _run(fn, args, fake_gpu):
    with blu.config.override(fake_gpu=fake_gpu):
        put = blu.cuda.device_put if fake_gpu else (lambda t: t)
        return [np.asarray(o) for o in blu.jit(fn)(*(put(t) for t in args))]


@pytest.mark.parametrize("target", ["cpu", "cuda:sm_90"])
def test_independent_small_maps_are_one_kernel(target):
    specs = [S((768,), np.float32)] * 3 + [S((), np.float32)]
    kernels = _kernels(_three_maps, specs, target)
    assert len(kernels) == 1 and len(kernels[0].outputs) == 3, [n.outputs for n in kernels]


@pytest.mark.parametrize("fake_gpu", [False, True])
@settings(max_examples=12, deadline=None)
@given(shape=st.lists(st.integers(0, 9), min_size=0, max_size=3), seed=st.integers(0, 2**16))
def test_merged_maps_compute_each_map(fake_gpu, shape, seed):
    rng = np.random.default_rng(seed)
    a, b, c = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    s = np.float32(rng.standard_normal())
    got = _run(_three_maps, (a, b, c, s), fake_gpu)
    for g, w in zip(got, _three_maps_f64(a, b, c, s), strict=True):
        assert g.shape == w.shape and g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_special_values_pass_through_merged_maps():
    a = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e38], np.float32)
    got = _run(_three_maps, (a, a, a, np.float32(2.0)), False)
    with np.errstate(all="ignore"):
        want = [w.astype(np.float32) for w in _three_maps_f64(a, a, a, 2.0)]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def _map_after_a_product(x, w, p, q):
    """``a`` reads a product's result, ``b`` only arguments: merged, ``b`` would wait for the
    product."""
    a = p + lax.tanh(x @ w)
    b = q * 3.0
    return a, b


def _map_before_a_product(x, w, p, q):
    b = q * 3.0  # (first in program order)
    return p + lax.tanh(x @ w), b


@pytest.mark.parametrize("target", ["cpu", "cuda:sm_90"])
@pytest.mark.parametrize("fn", [_map_after_a_product, _map_before_a_product])
def test_a_map_that_would_wait_for_a_product_stays_apart(target, fn):
    specs = [S((4, 16), np.float32), S((16, 4), np.float32), S((4, 4), np.float32),
             S((4, 4), np.float32)]  # fmt: skip
    kernels = _kernels(fn, specs, target)
    assert len(kernels) == 2, [n.outputs for n in kernels]
    if target == "cpu":
        rng = np.random.default_rng(3)
        x, w, p, q = (rng.standard_normal(sp.shape).astype(np.float32) for sp in specs)
        a, b = _run(fn, (x, w, p, q), False)
        X, W, P, Q = (t.astype(np.float64) for t in (x, w, p, q))
        np.testing.assert_allclose(a, P + np.tanh(X @ W), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(b, Q * 3.0, rtol=1e-6)


def _unrelated_maps(a, b, c):
    return a * 2.0, lax.exp(b), c * c


def test_large_maps_and_maps_of_other_shapes_stay_apart():
    specs = [S((SMALL_MAP + 1,), np.float32)] * 2 + [S((7,), np.float32)]
    kernels = _kernels(_unrelated_maps, specs, "cuda:sm_90")
    assert len(kernels) == 3, [n.outputs for n in kernels]
    specs = [S((8,), np.float32), S((9,), np.float32), S((8, 1), np.float32)]
    assert len(_kernels(_unrelated_maps, specs, "cuda:sm_90")) == 3
    specs = [S((SMALL_MAP,), np.float32)] * 3
    assert len(_kernels(_unrelated_maps, specs, "cuda:sm_90")) == 1
