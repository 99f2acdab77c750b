"""``benchmarks/gpu_kernels.py`` on the CPU: every case's program runs at small shapes against
numpy float64, and the report compares each generation with the first."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import blu

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import gpu_kernels as gk  # noqa: E402


def test_every_case_runs_small_on_the_cpu():
    progs = gk.programs(rows=16, chunk=8, vocab=40)
    assert set(progs) == set(gk.CASES)
    rng = np.random.default_rng(0)
    for name, (fn, specs) in progs.items():
        args = gk._inputs(specs, 40, rng)
        leaves = blu.tree_util.tree_leaves(blu.jit(fn)(*args))
        assert leaves and all(np.all(np.isfinite(np.asarray(v, np.float64))) for v in leaves), name
    x, r, g, b = gk._inputs(progs["ln_res_fwd"][1], 40, rng)
    h, y = blu.jit(progs["ln_res_fwd"][0])(x, r, g, b)
    h64 = x.astype(np.float64) + r
    ref = (h64 - h64.mean(-1, keepdims=True)) / np.sqrt(h64.var(-1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(np.asarray(h), h64, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(y, np.float64), ref, rtol=2e-2, atol=2e-2)
    g, u, dh = (a.astype(np.float64) for a in gk._inputs(progs["swiglu_bwd"][1], 40, rng))
    got = blu.jit(progs["swiglu_bwd"][0])(*(a.astype(gk._bf16()) for a in (g, u, dh)))
    s = 1 / (1 + np.exp(-g))
    want = [g * s * u, dh * u * s * (1 + g * (1 - s)), dh * g * s]  # h, dg, du
    for o, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(o, np.float64), w, rtol=2e-2, atol=2e-2)
    x, gain, dy = gk._inputs(progs["rms_bwd"][1], 40, rng)
    dx, dgain = blu.jit(progs["rms_bwd"][0])(x, gain, dy)
    x64, d64 = x.astype(np.float64), dy.astype(np.float64)
    r = 1 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6)
    gd = d64 * gain
    want_dx = gd * r - x64 * r**3 * (gd * x64).mean(-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(dx), want_dx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(dgain), (d64 * x64 * r).sum(0), rtol=1e-4, atol=1e-5)
    gs = gk._inputs(progs["global_norm"][1], 40, rng)
    want = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in gs))
    np.testing.assert_allclose(float(blu.jit(progs["global_norm"][0])(*gs)), want, rtol=1e-5)


def test_report_compares_each_generation_with_the_first():
    def res(case, gen, us):
        k = {"name": "k", "calls": 1, "mean_us": us, "mb": 100.0, "gb_per_s": 100.0 / us * 1e3}
        return {"case": case, "gen": gen, "call_us": us, "kernels": [k]}

    text = gk.report([res("ce_rows", 1, 40.0), res("ce_rows", 2, 20.0), res("ce_rows", 3, 10.0)],
                     4000.0)  # fmt: skip
    assert "ce_rows: kernels gen 1 -> 2: 40.0 -> 20.0 us (2.00x)" in text
    assert "ce_rows: kernels gen 1 -> 3: 40.0 -> 10.0 us (4.00x)" in text
