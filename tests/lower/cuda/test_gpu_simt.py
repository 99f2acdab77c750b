"""GPU kernels' values without a GPU: the emitted ``gpu.func`` text run by a lockstep SIMT
interpreter (``simt.py``). Kernels are checked against their own jaxpr evaluated by numpy (a row
group with a column split, batch norm's channel statistics in lanes, a full reduction's
per-block partials, a softmax, a layer-norm backward); then the pipelined row loop
(``BLU_GPU_ROW_PREFETCH``, ``codegen_prefetch``) is checked to compute every buffer bit for bit
as the plain loop does (it moves loads, not arithmetic), for layer-norm and RMSNorm backward
passes, a residual sum, bfloat16 cotangents, rows of 768 and 1600, generations 2 and 3."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import blu
import blu.lax as lax
import blu.nn as nn
import blu.numpy as bnp
from blu.core.jaxpr import eval_jaxpr
from blu.lower.cuda import codegen
from blu.lower.plan.nodes import NodeKind
from tests.lower.cuda import simt

f32, f64, bf16 = np.dtype(np.float32), np.float64, np.dtype(ml_dtypes.bfloat16)


def ln_grads(x, g, b, dy):
    return blu.vjp(nn.layer_norm, x, g, b)[1](dy.astype(np.float32))


def ln_res_grads(x, g, b, dy, r):
    dx, dg, db = blu.vjp(nn.layer_norm, x, g, b)[1](dy.astype(np.float32))
    return dx + r, dg, db


def rms_grads(x, g, b, dy):
    def rms(x, g):
        return x * lax.rsqrt(bnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g

    return blu.vjp(rms, x, g)[1](dy.astype(np.float32))


def _specs(fn, rows: int, cols: int, dy=bf16) -> list:
    s = blu.ShapeDtypeStruct
    out = [s((rows, cols), f32), s((cols,), f32), s((cols,), f32), s((rows, cols), dy)]
    return out + [s((rows, cols), f32)] if fn is ln_res_grads else out


def _looping_group(fn, specs, **flags):
    """The program's kernel node with a row group whose blocks loop over rows."""
    with blu.config.override(**flags):
        low = blu.jit(fn).lower(*specs, target="cuda:sm_90")
        (node,) = [n for n in low._program.plan.nodes if n.kind == NodeKind.KERNEL
                   and any(p.grid for p in codegen.plan_nests(n.layout))]  # fmt: skip
        return node


def _emit(node, **flags) -> tuple[str, list]:
    with blu.config.override(**flags):
        return codegen.emit_gpu_kernel(node.layout, "k"), codegen.launches(node.layout, "k")


def _random_buffers(text: str, name: str, rng) -> dict:
    mem = {}
    for p, n, ty in simt.buffer_params(text, name):
        if ty == "i16":  # bfloat16 bits
            mem[p] = rng.standard_normal(n).astype(bf16).view(np.int16)
        elif ty in ("f32", "f64"):
            mem[p] = rng.standard_normal(n).astype(simt.NP[ty])
        else:
            mem[p] = rng.integers(0, 2, n).astype(simt.NP[ty])
    return mem


def _check_against_jaxpr(node, seed: int = 1) -> None:
    """Every launch of the kernel node run in order on random inputs (the other buffers random
    too: nothing may read what it did not write): each output against numpy's evaluation of
    the kernel's jaxpr, to float32 accumulation's rounding."""
    text, launches = _emit(node)
    rng = np.random.default_rng(seed)
    jaxpr = node.layout.jaxpr
    args = [rng.standard_normal(v.aval.shape).astype(np.dtype(v.aval.dtype))
            for v in jaxpr.invars]  # fmt: skip
    mem = _random_buffers(text, launches[0].func, rng)
    for i, a in enumerate(args):
        mem[f"%in{i}"] = (a.view(np.int16) if a.dtype == bf16 else a).reshape(-1).copy()
    for la in launches:
        simt.run_func(text, la.func, mem, la.grid, la.block)
    for i, want in enumerate(eval_jaxpr(jaxpr, [], *args)):
        want = np.asarray(want).astype(f64)
        got = mem[f"%out{i}"]
        got = got.view(bf16) if node.layout.jaxpr.outvars[i].aval.dtype == bf16 else got
        got = got.astype(f64).reshape(want.shape)
        err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
        assert err < 1e-5, (i, want.shape, err)


def test_the_interpreter_against_the_kernels_jaxpr():
    """A layer-norm backward kernel (generation 2, the pipelined loop: the default) against its
    jaxpr."""
    _check_against_jaxpr(_looping_group(ln_grads, _specs(ln_grads, 512, 768)))


def _mean_and_column_sum(x, g):  # a row group with a column split (session 24's bug: zeros)
    x, g = x.astype(np.float32), g.astype(np.float32)
    m = bnp.mean(x, axis=2, keepdims=True)
    return m, bnp.sum((x - m) * g, axis=(0, 1))


def _channel_statistics(x, g):  # batch norm's: splits over N, H, W in lanes of channels
    x = x.astype(np.float32)
    m = bnp.mean(x, axis=(0, 1, 2))
    return m, bnp.sum((x - m) * g.astype(np.float32), axis=(0, 1, 2))


def _sum_of_squares(x):  # a full reduction: per-block partials, then one block combines them
    return bnp.sum(x.astype(np.float32) ** 2)


def _small_sums(x):  # few elements in all: rows of one block each (``codegen.SMALL_ROWS``)
    x = x.astype(np.float32)
    return bnp.sum(x * x), bnp.max(x, axis=-1), bnp.sum(x, axis=-1, keepdims=True)


def _softmax(x):
    x = x.astype(np.float32)
    e = bnp.exp(x - bnp.max(x, axis=-1, keepdims=True))
    return e / bnp.sum(e, axis=-1, keepdims=True)


@pytest.mark.parametrize("fn, shapes, dt", [
    (_mean_and_column_sum, [(8, 100, 512)] * 2, f32),
    (_channel_statistics, [(16, 28, 28, 64)] * 2, bf16),
    (_sum_of_squares, [(3000, 1001)], f32),
    (_softmax, [(64, 5000)], bf16),
    (_small_sums, [(768,)], f32),
    (_small_sums, [(37, 129)], bf16),
])  # fmt: skip
def test_split_and_row_kernels_against_their_jaxpr(fn, shapes, dt):
    specs = [blu.ShapeDtypeStruct(s, dt) for s in shapes]
    low = blu.jit(fn).lower(*specs, target="cuda:sm_90")
    nodes = [n for n in low._program.plan.nodes if n.kind == NodeKind.KERNEL]
    assert nodes
    for node in nodes:
        _check_against_jaxpr(node)
    if fn is _small_sums:  # rows (one launch each), no split's two
        assert all(p.strategy != "split" for n in nodes for p in codegen.plan_nests(n.layout))


@pytest.mark.parametrize("fn, cols, gen", [(ln_res_grads, 768, 2), (rms_grads, 768, 2),
                                            (ln_grads, 768, 3), (ln_grads, 1600, 2)])  # fmt: skip
def test_the_pipelined_row_loop_computes_the_same_bits(fn, cols, gen):
    node = _looping_group(fn, _specs(fn, 512, cols), gpu_kernels=gen)
    plain, launches = _emit(node, gpu_kernels=gen, gpu_row_prefetch=False)
    piped, _ = _emit(node, gpu_kernels=gen, gpu_row_prefetch=True)
    ran = 0
    for la in launches:
        a, b = simt.functions(plain)[la.func], simt.functions(piped)[la.func]
        if a == b:
            continue  # (the other launches: the same text)
        assert "arith.minui" in "\n".join(b) and "arith.minui" not in "\n".join(a)
        mem = _random_buffers(plain, la.func, np.random.default_rng(gen + cols))
        m1 = {k: v.copy() for k, v in mem.items()}
        m2 = {k: v.copy() for k, v in mem.items()}
        simt.run_func(plain, la.func, m1, la.grid, la.block)
        simt.run_func(piped, la.func, m2, la.grid, la.block)
        written = [k for k in m1 if not np.array_equal(m1[k].view(np.uint8), mem[k].view(np.uint8))]
        assert written  # (the launch did run)
        for k in m1:
            assert np.array_equal(m1[k].view(np.uint8), m2[k].view(np.uint8)), (la.func, k)
        ran += 1
    assert ran == 1  # the group's launch, and only it, is pipelined


def _cross_entropy(x, labels):  # the fused classifier's row group: max, label, sum, gradient
    def loss(z):
        m = bnp.max(z, axis=-1, keepdims=True)
        lse = bnp.log(bnp.sum(bnp.exp(z - m), axis=-1)) + m[:, 0]
        hit = bnp.arange(z.shape[-1])[None, :] == labels[:, None]
        return bnp.mean(lse - bnp.sum(bnp.where(hit, z, 0.0), axis=-1))

    value, grad = blu.value_and_grad(loss)(x.astype(np.float32))
    return value, grad.astype(x.dtype)


def _stashed_group(fn, shapes, dt, **flags):
    """The kernel node of ``fn`` with a looped row group, its launches with the stash."""
    specs = [blu.ShapeDtypeStruct(s, d) for s, d in zip(shapes, dt)]
    with blu.config.override(**flags):
        low = blu.jit(fn).lower(*specs, target="cuda:sm_90")
        for n in low._program.plan.nodes:
            if n.kind == NodeKind.KERNEL and any(
                la.shared for la in codegen.launches(n.layout, "k")
            ):
                return n
    raise AssertionError("no looped row group with a stash")


@pytest.mark.parametrize("fn, shapes, dt, gen", [
    (_cross_entropy, [(3, 5001), (3,)], [bf16, np.int32], 2),
    (_cross_entropy, [(2, 4099), (2,)], [bf16, np.int32], 3),
    (_softmax, [(3, 5003)], [f32], 2),
])  # fmt: skip
def test_the_row_stash_reads_each_row_once_and_computes_the_same_bits(fn, shapes, dt, gen):
    """Rows the unrolled form does not take (looped groups; few rows of a length no block
    divides stand in for the classifier's 4,096 rows of 50,304 logits): with the stash
    (``codegen_stash``) each input row is loaded from global memory by one pass and from
    shared memory by the others (the interpreter raises on a shared load of an element nobody
    stored), the outputs against the jaxpr and bit for bit those of the kernel without it."""
    node = _stashed_group(fn, shapes, dt, gpu_kernels=gen)
    with blu.config.override(gpu_kernels=gen):
        _check_against_jaxpr(node)
    on, launches = _emit(node, gpu_kernels=gen)
    off, plain = _emit(node, gpu_kernels=gen, gpu_row_stash=0)
    stashed = [la for la in launches if la.shared]
    assert stashed and not any(la.shared for la in plain)
    for la in stashed:
        assert la.shared == shapes[0][-1] * np.dtype(dt[0]).itemsize
        a, b = ("\n".join(simt.functions(t)[la.func]) for t in (off, on))
        # the row's logits: fewer global loads (the later passes' are shared ones)
        assert b.count("memref.load %in0[") < a.count("memref.load %in0[")
        assert "gpu.barrier" in b and "memref.view" in b
        mem = _random_buffers(off, la.func, np.random.default_rng(la.grid))
        m1 = {k: v.copy() for k, v in mem.items()}
        m2 = {k: v.copy() for k, v in mem.items()}
        simt.run_func(off, la.func, m1, la.grid, la.block)
        simt.run_func(on, la.func, m2, la.grid, la.block)
        for k in m1:
            assert np.array_equal(m1[k].view(np.uint8), m2[k].view(np.uint8)), (la.func, k)


def _first_column_then_rows(w, x):  # a value a row reads x[:, :1] before the passes over x
    c = bnp.max(w, axis=1, keepdims=True) + x[:, :1]
    e = bnp.exp(x - c)
    return e / bnp.sum(e, axis=1, keepdims=True), c


def _rows_times_rolled(x, y):  # x read at another row too (a roll, a reversal); y only at its
    m = bnp.max(x, axis=1, keepdims=True)  # points, by two passes
    e = bnp.exp(x - m)
    p = e / bnp.sum(e, axis=1, keepdims=True) * bnp.roll(x, 1, axis=0) * bnp.flip(x, 0)
    return p + y * bnp.max(y, axis=1, keepdims=True)


def _rows_and_reversed(x, y):  # x reversed too, by another kernel: stashed in the softmax
    m = bnp.max(x, axis=1, keepdims=True)
    e = bnp.exp(x - m)
    return e / bnp.sum(e, axis=1, keepdims=True), bnp.flip(x, 1) + y


@pytest.mark.parametrize("fn, stashed", [(_first_column_then_rows, 0), (_rows_times_rolled, 1),
                                         (_rows_and_reversed, 1)])  # fmt: skip
def test_inputs_read_elsewhere_are_not_stashed(fn, stashed):
    """An input the group also reads at another element (a slice of its first column, a roll
    or reversal across rows: from a reviewing helper's cases, which read shared elements no
    thread stored, or out of the stash's bounds) stays in global memory; the others are
    stashed; the kernel against its jaxpr."""
    specs = [blu.ShapeDtypeStruct((3, 5001), f32)] * 2
    low = blu.jit(fn).lower(*specs, target="cuda:sm_90")
    shared, views = [], 0
    for node in [n for n in low._program.plan.nodes if n.kind == NodeKind.KERNEL]:
        _check_against_jaxpr(node)
        text, launches = _emit(node)
        shared += [la.shared for la in launches if la.shared]
        views += text.count("memref.view")
    assert shared == [5001 * 4] * stashed and views == stashed
