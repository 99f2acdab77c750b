"""Horizontal fusion (``partition._merge_small_maps``): small maps of one shape that read the
same node and whose results the same nodes read are one kernel; a map that would wait for
another node, a large map and maps of arguments alone stay apart; no plan's peak rises. Values
against numpy in float64, on the CPU and the simulated GPU."""

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


def _three_updates(x, w, p, q, r):
    """Three maps that read one product's result (as an optimizer's updates read the
    gradients' norm) and are the program's outputs."""
    t = x @ w
    return p + t * 2.0, lax.exp(q) - t, r * t


def _three_updates_f64(x, w, p, q, r):
    x, w, p, q, r = (a.astype(np.float64) for a in (x, w, p, q, r))
    t = x @ w
    return p + t * 2.0, np.exp(q) - t, r * t


def _specs(m, k, n):
    return [S((m, k), np.float32), S((k, n), np.float32)] + [S((m, n), np.float32)] * 3


def _run(fn, args, fake_gpu):
    with blu.config.override(fake_gpu=fake_gpu):
        put = blu.cuda.device_put if fake_gpu else (lambda t: t)
        return [np.asarray(o) for o in blu.jit(fn)(*(put(t) for t in args))]


@pytest.mark.parametrize("target", ["cpu", "cuda:sm_90"])
def test_small_maps_reading_the_same_node_are_one_kernel(target):
    kernels = _kernels(_three_updates, _specs(4, 8, 6), target)
    assert len(kernels) == 1 and len(kernels[0].outputs) == 3, [n.outputs for n in kernels]


@pytest.mark.parametrize("fake_gpu", [False, True])
@settings(max_examples=12, deadline=None)
@given(m=st.integers(0, 9), k=st.integers(0, 5), n=st.integers(0, 9), seed=st.integers(0, 2**16))
def test_merged_maps_compute_each_map(fake_gpu, m, k, n, seed):
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(sp.shape).astype(np.float32) for sp in _specs(m, k, n)]
    got = _run(_three_updates, args, fake_gpu)
    for g, w in zip(got, _three_updates_f64(*args), strict=True):
        assert g.shape == w.shape and g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_special_values_pass_through_merged_maps():
    a = np.array([[np.inf, -np.inf, np.nan, 0.0, -0.0, 1e38]], np.float32)
    x, w = np.ones((1, 1), np.float32), np.full((1, 6), 2.0, np.float32)
    got = _run(_three_updates, (x, w, a, a, a), False)
    with np.errstate(all="ignore"):
        want = [v.astype(np.float32) for v in _three_updates_f64(x, w, a, a, a)]
    for g, v in zip(got, want, strict=True):
        np.testing.assert_allclose(g, v, rtol=1e-6)


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


def test_large_maps_and_maps_reading_only_arguments_stay_apart():
    big = _specs(SMALL_MAP // 256 + 1, 3, 256)  # 65,792 elements
    assert len(_kernels(_three_updates, big, "cuda:sm_90")) == 3
    assert len(_kernels(_three_updates, _specs(SMALL_MAP // 256, 3, 256), "cuda:sm_90")) == 1
    # maps of arguments alone run where the program puts them: not joined
    specs = [S((8,), np.float32)] * 3
    assert len(_kernels(_unrelated_maps, specs, "cuda:sm_90")) == 3


def _early_and_late(x, w, *bs):
    """A reviewing helper's case: ``x * 2`` feeds a product; the ``b * 3`` are outputs. Joined,
    the outputs were made before the product and held across its 4 MB result."""
    y = lax.tanh((x * 2.0) @ w).sum(1)
    return (y, *[b * 3.0 for b in bs])


def _late_products(x, w, v, *bs):
    y = lax.tanh((x * 2.0) @ w).sum(1)
    for b in bs:
        y = y + ((b * 3.0) @ v)[:, 0]
    return y


def _sourced_early_and_late(x, t, *bs):
    """Maps that read one product's result: the first feeds another product, the rest are
    outputs (made before that product, joined: held across its result)."""
    s = x @ x
    y = lax.tanh((s * 2.0) @ t).sum(1)
    return (y, *[b * s for b in bs])


@pytest.mark.parametrize("fn", [_early_and_late, _late_products, _sourced_early_and_late,
                                _three_updates])  # fmt: skip
def test_the_peak_is_no_higher_than_without_horizontal_fusion(fn, monkeypatch):
    import blu.lower.plan.partition as partition

    if fn is _three_updates:
        specs = _specs(64, 8, 64)
    elif fn is _sourced_early_and_late:
        specs = [S((64, 64), np.float32), S((64, 16384), np.float32)]
        specs += [S((64, 64), np.float32)] * 16
    else:
        specs = [S((64, 64), np.float32), S((64, 16384), np.float32)]
        specs += [S((64, 8), np.float32)] * (fn is _late_products)
        specs += [S((64, 64), np.float32)] * 16

    def peak():
        return blu.jit(fn).lower(*specs, target="cuda:sm_90").memory_analysis().peak_bytes

    with_it = peak()
    monkeypatch.setattr(partition, "SMALL_MAP", -1)  # no map is small: the pass does nothing
    assert with_it <= peak()
