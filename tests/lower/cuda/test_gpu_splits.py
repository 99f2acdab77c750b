"""Split reductions on the GPU (marked ``gpu``; ``blu.lower.cuda.codegen``'s ``split``
strategy): the plan of a large reduction whose stage-1 blocks combine their threads first
(``NestPlan.per_block``), and a global norm over many arrays (one stage-1 loop per reduction,
contiguous runs) against numpy float64. The reductions of every strategy, dtype and shape:
``test_gpu_kernels.py``. Shapes are fixed (``BLU_FAKE_GPU=1`` fills the kernel cache).
"""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import GPU_MARKS, bf16, check, f32, f64, gen, make_device, plan_nodes, put

import blu
import blu.lax as lax
import blu.numpy as bnp
from blu.lower.cuda import codegen as codegen_gpu

pytestmark = GPU_MARKS


@pytest.fixture(scope="module")
def dev():
    return make_device()


def test_large_splits_combine_each_block_first():
    """A split reduction whose reduced index is innermost and whose stage-1 threads per kept
    index fill whole blocks writes one partial a block (``NestPlan.per_block``): stage 2
    combines ``S / BLOCK`` of them, and the scratch holds no more; a column sum keeps one
    partial a thread."""
    for shape, axes, want in [((3000001,), (0,), True), ((2, 2097155), (1,), True),
                              ((100000,), (0,), False), ((4096, 768), (0,), False)]:  # fmt: skip
        x = np.zeros(shape, f32)
        (node,) = [n for n in plan_nodes(lambda a: lax.reduce_sum(a, axes), x)
                   if n.kind == "kernel"]  # fmt: skip
        (p,) = [q for q in codegen_gpu.plan_nests(node.layout) if q.strategy == "split"]
        assert p.per_block == want, shape
        assert p.parts == (p.S // codegen_gpu.BLOCK if want else p.S)
        assert node.layout.scratch[p.partials[0]].shape == (p.parts * p.K,)
        stage1 = [la for la in codegen_gpu.launches(node.layout, "k") if la.func.endswith("a")]
        assert stage1[0].grid * stage1[0].block >= p.K // p.lanes * p.S


@pytest.mark.parametrize("dt", [f32, bf16], ids=lambda d: np.dtype(d).name)
def test_a_norm_over_many_arrays(dev, dt):
    """A global norm's sums of squares over more same-shape arrays than
    ``codegen.MEMBER_LOOPS``: one split nest whose reductions read disjoint inputs, so stage 1
    runs one loop per reduction over contiguous runs (1025 x 2049 elements: the chunks and a
    remainder), each block's threads combined first."""
    rng = np.random.default_rng(12)
    n = codegen_gpu.MEMBER_LOOPS + 3
    # small integers: every partial sum of squares is an integer below 2**24, exact in float32
    # whatever the order, so a lost chunk or remainder row shows and no machine's order
    # matters (random floats summed by the simulated device's CPU build drifted 1e-4 on one)
    xs = [rng.integers(-2, 3, (1025, 2049)).astype(dt) for _ in range(n)]

    def f(*xs):
        sq = [bnp.sum(x.astype(f32) ** 2) for x in xs]
        return sq, bnp.sqrt(sum(sq))

    plans = [p for nd in plan_nodes(f, *xs) if nd.kind == "kernel"
             for p in codegen_gpu.plan_nests(nd.layout)]  # fmt: skip
    assert [p.per_block for p in plans if p.strategy == "split"] == [True]
    sq, norm = blu.jit(f)(*put(dev, *xs))
    want = [np.sum(x.astype(f64) ** 2) for x in xs]
    assert max(want) < 2**24
    for got, w in zip(sq, want):
        np.testing.assert_array_equal(np.asarray(got, f64), w)
    # the total passes 2**24: float32 rounding of a sum of n exact terms
    check(norm, np.sqrt(sum(want)), dtype=f32, rtol=1e-6)


@pytest.mark.parametrize(
    "shape,dt,block_first",
    [((16, 56, 56, 64), bf16, True), ((8, 28, 28, 256), f32, True),
     ((4, 7, 7, 2048), bf16, False), ((6, 14, 14, 1000), f32, False)],
    ids=["bf16-64", "f32-256", "bf16-2048", "f32-1000"],
)  # fmt: skip
def test_column_lanes_combine_each_block_first(dev, shape, dt, block_first):
    """Batch norm's per-channel statistics over NHWC (a column split in lanes of channels):
    where a lane's threads per row divide the block, each block sums its tile of partials in
    shared memory and writes one a block (``codegen_splits``); 2048 channels (one row a block)
    and 1000 (threads per row not a divisor) keep one a thread. The per-channel shift and
    scale are loaded once before the stage-1 loop (``codegen_splits.hoist_loads``). Sums of
    shifted and scaled values, of their squares and maxima against numpy float64."""
    rng = np.random.default_rng(5)
    n, h, w, c = shape
    x = gen("any", dt, (n, h + 1, w + 1, c), rng)
    shift, scale = rng.standard_normal(c).astype(f32), rng.uniform(0.5, 2, c).astype(f32)
    axes = (0, 1, 2)

    def f(x, shift, scale):  # a window of a padded image: its index divides by H, W (lanes)
        x = (x[:, 1:, 1:, :].astype(f32) - shift) * scale
        return bnp.sum(x, axis=axes), bnp.sum(x * x, axis=axes), bnp.max(x, axis=axes)

    plans = [p for nd in plan_nodes(f, x, shift, scale) if nd.kind == "kernel"
             for p in codegen_gpu.plan_nests(nd.layout) if p.strategy == "split"]  # fmt: skip
    assert plans and all(p.lanes > 1 for p in plans)
    assert [p.per_block for p in plans] == [block_first] * len(plans)
    for p in plans:
        per = codegen_gpu.BLOCK // (p.K // p.lanes) if block_first else 1
        assert p.parts == p.S // per
    s, sq, mx = blu.jit(f)(*put(dev, x, shift, scale))
    x64 = (np.asarray(x, f64)[:, 1:, 1:, :] - shift.astype(f64)) * scale.astype(f64)
    tol = 4e-6 * np.sqrt(n * h * w)  # float32 sums of n terms in blocks and partials
    check(s, x64.sum(axis=axes), dtype=f32, rtol=tol, atol=tol * np.abs(x64).sum(axis=axes).max())
    check(sq, (x64 * x64).sum(axis=axes), dtype=f32, rtol=tol)
    y32 = (np.asarray(x, f32)[:, 1:, 1:, :] - shift) * scale  # the same float32 roundings
    check(mx, y32.max(axis=axes), dtype=f32, rtol=0)


def test_maps_after_a_split_run_in_its_second_stage(dev):
    """Batch norm's per-channel maps after its statistics (``rsqrt(var + eps)``, the running
    statistics' update) run in the split's stage 2 (``codegen_splits.combine_epilogues``: no
    launch of their own); a map that reads another channel's total (a reversal) keeps its
    launch. Against numpy float64."""
    rng = np.random.default_rng(8)
    x = gen("any", f32, (8, 9, 9, 64), rng)
    run_mean, run_var = rng.standard_normal(64).astype(f32), rng.uniform(1, 2, 64).astype(f32)

    def stats(x, run_mean, run_var):
        mean = bnp.mean(x, axis=(0, 1, 2))
        var = bnp.mean(x * x, axis=(0, 1, 2)) - mean * mean
        return lax.rsqrt(var + 1e-5), 0.9 * run_mean + 0.1 * mean, 0.9 * run_var + 0.1 * var

    def reversed_(x):
        return bnp.mean(x, axis=(0, 1, 2))[::-1] * 2.0

    for f, args, hosted in [(stats, (x, run_mean, run_var), True), (reversed_, (x,), False)]:
        (node,) = [n for n in plan_nodes(f, *args) if n.kind == "kernel"]
        plans = codegen_gpu.plan_nests(node.layout)
        assert [p.host >= 0 for p in plans if p.strategy == "map"] == [hosted]
        names = [la.func for la in codegen_gpu.launches(node.layout, "k")]
        assert len(names) == sum(1 if p.strategy == "map" else 2 for p in plans if p.host < 0)
    inv, rm, rv = blu.jit(stats)(*put(dev, x, run_mean, run_var))
    (rev,) = [blu.jit(reversed_)(put(dev, x))]
    x64 = x.astype(f64)
    mean = x64.mean(axis=(0, 1, 2))
    var = (x64 * x64).mean(axis=(0, 1, 2)) - mean * mean
    tol = 1e-4  # float32 sums of 648 terms, then a difference of two means
    check(inv, 1 / np.sqrt(var + 1e-5), dtype=f32, rtol=tol)
    check(rm, 0.9 * run_mean + 0.1 * mean, dtype=f32, rtol=tol, atol=1e-5)
    check(rv, 0.9 * run_var + 0.1 * var, dtype=f32, rtol=tol)
    check(rev, mean[::-1] * 2.0, dtype=f32, rtol=tol, atol=1e-5)


@pytest.mark.parametrize("shape,dt", [((8, 100, 512), f32), ((4, 250, 1024), bf16)],
                         ids=["f32", "bf16"])  # fmt: skip
def test_a_row_groups_column_split_combines_every_partial(dev, shape, dt):
    """A column sum over a row group's rows (a layer norm's gain gradient) that would be a lanes
    split with a block combine on its own: taken into the group, its stage 2 combines all ``G``
    partials the group's blocks write (it had read ``G / BLOCK`` of them, none below 256).
    Against numpy float64."""
    rng = np.random.default_rng(9)
    x, g = gen("any", dt, shape, rng), gen("any", dt, shape, rng)

    def f(x, g):
        x, g = x.astype(f32), g.astype(f32)
        m = bnp.mean(x, axis=2, keepdims=True)
        return m, bnp.sum((x - m) * g, axis=(0, 1))

    (node,) = [n for n in plan_nodes(f, x, g) if n.kind == "kernel"]
    plans = codegen_gpu.plan_nests(node.layout)
    (col,) = [p for p in plans if p.strategy == "split" and p.group >= 0]
    assert not col.per_block and col.parts == col.S
    assert node.layout.scratch[col.partials[0]].shape == (col.S * col.K,)
    m, dg = blu.jit(f)(*put(dev, x, g))
    x64, g64 = x.astype(f64), g.astype(f64)
    m64 = x64.mean(axis=2, keepdims=True)
    want = ((x64 - m64) * g64).sum(axis=(0, 1))
    n = shape[0] * shape[1]
    check(m, m64, dtype=f32, rtol=1e-5, atol=1e-6)
    check(dg, want, dtype=f32, rtol=1e-4, atol=1e-5 * np.sqrt(n) * 3)
