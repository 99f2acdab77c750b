"""The generations of the GPU kernel emitter (``BLU_GPU_KERNELS``, marked ``gpu``;
``blu.lower.cuda.codegen_strided``) compute the same bits.

Generation 2 only reorders work (every load of a chunk of points before its combines and stores,
row totals read from registers as a load would read them back), so each program's outputs must
be bit-identical under generations 1 and 2, and both close to numpy float64. One exception: a
split reduction whose reduced index is innermost (few long rows, or a whole array) gives each
stage-1 thread contiguous runs of elements in generation 2 (vector loads), so its partial sums
group the elements differently; such outputs are compared with generation 1's within rounding.
The programs cover each rewritten loop at GPT-2's row lengths: the unrolled row group (layer
norm, rows of 768), cross-entropy over 64 rows of 50,304 logits (split reductions over the
rows: the exception, whose ``n // step`` is not a multiple of the chunk), split reductions over
leading axes (bias gradients over 4096 rows) and elementwise grid-stride loops (GELU over
1024 x 3072, whose element count leaves a remainder).
Generation 3 (the online softmax normalizer in looped row groups, ``codegen_online``) sums in
another order, so it is checked against float64 and generation 2 with tolerances, special values
included. Shapes are fixed: ``BLU_FAKE_GPU=1`` runs this file to fill the kernel cache for the
GPU machine (on the simulated GPU every generation runs the same host build).
"""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import GPU_MARKS, bf16, f32, f64, make_device

import blu
import blu.cuda as bc
import blu.nn as nn
import blu.numpy as bnp

pytestmark = GPU_MARKS


@pytest.fixture(scope="module")
def dev():
    return make_device()


def both_generations(dev, f, *args, exact: bool = True) -> list[np.ndarray]:
    """``jit(f)`` under generations 1 and 2: asserts bit-equal outputs (``exact``; else equal
    within a few roundings of their dtype: the module docstring's exception), returns
    generation 2's."""
    put = [bc.device_put(np.asarray(a), dev) for a in args]
    outs = {}
    for gen in (1, 2):
        with blu.config.override(gpu_kernels=gen):
            out = blu.jit(lambda *a: f(*a))(*put)  # a new function: its own executable
            outs[gen] = [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]
    for a, b in zip(outs[1], outs[2], strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        if not exact:
            close(b, a, 1e-2 if a.dtype == bf16 else 1e-6)
            continue
        same = np.array_equal(np.atleast_1d(a).view(np.uint8), np.atleast_1d(b).view(np.uint8))
        assert same, f"generations differ at {np.argwhere(a != b)[:5].tolist()}"
    return outs[2]


def close(got, ref, tol):
    got, ref = np.asarray(got, f64), np.asarray(ref, f64)
    err = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)
    assert err <= tol, err


def test_layer_norm_forward_and_gradient(dev):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1024, 768)).astype(f32)
    w, b = rng.standard_normal(768).astype(f32), rng.standard_normal(768).astype(f32)
    dy = rng.standard_normal((1024, 768)).astype(f32)

    def f(x, w, b, dy):
        y, vjp = blu.vjp(nn.layer_norm, x, w, b)
        return (y.astype(bf16), *vjp(dy))

    y, dx, dw, db = both_generations(dev, f, x, w, b, dy)
    x64, d64 = x.astype(f64), dy.astype(f64)
    rstd = 1 / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    xh = (x64 - x64.mean(-1, keepdims=True)) * rstd
    gw = d64 * w
    close(y, xh * w + b, 1e-2)
    close(dx, rstd * (gw - gw.mean(-1, keepdims=True) - xh * (gw * xh).mean(-1, keepdims=True)),
          1e-5)  # fmt: skip
    close(dw, (d64 * xh).sum(0), 1e-5)
    close(db, d64.sum(0), 1e-5)


def test_cross_entropy_rows_of_the_vocabulary(dev):
    rng = np.random.default_rng(1)
    V = 50304
    z = (rng.standard_normal((64, V)) * 2).astype(f32)
    y = rng.integers(0, V, 64).astype(np.int32)

    def f(z, y):
        m = bnp.max(z, axis=1, keepdims=True)
        e = bnp.exp(z - m)
        s = bnp.sum(e, axis=1, keepdims=True)
        hit = bnp.expand_dims(y, 1) == blu.lax.iota(np.int32, z.shape, 1)
        picked = bnp.sum(bnp.where(hit, z - m, bnp.zeros_like(z)), axis=1)
        return bnp.log(s[:, 0]) - picked, (e / s - hit.astype(f32)).astype(bf16)

    loss, dz = both_generations(dev, f, z, y, exact=False)
    z64 = z.astype(f64)
    p = np.exp(z64 - z64.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    lse = np.log(np.exp(z64 - z64.max(1, keepdims=True)).sum(1)) + z64.max(1)
    close(loss, lse - z64[np.arange(64), y], 1e-5)
    onehot = np.zeros_like(p)
    onehot[np.arange(64), y] = 1
    close(dz, p - onehot, 1e-2)


def test_gelu_and_bias_gradient(dev):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1024, 3072)).astype(bf16)
    bias = rng.standard_normal(3072).astype(f32)
    dy = rng.standard_normal((1024, 3072)).astype(bf16)

    def f(x, bias, dy):
        h = x.astype(f32) + bias
        y, vjp = blu.vjp(nn.gelu, h)
        dh = vjp(dy.astype(f32))[0]
        return y.astype(bf16), dh.astype(bf16), dh.sum(0)

    y, dh, dbias = both_generations(dev, f, x, bias, dy)
    h = x.astype(f64) + bias
    t = np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3))
    gelu = 0.5 * h * (1 + t)
    dgelu = 0.5 * (1 + t) + 0.5 * h * (1 - t**2) * np.sqrt(2 / np.pi) * (1 + 3 * 0.044715 * h**2)
    close(y, gelu, 1e-2)
    close(dh, dy.astype(f64) * dgelu, 1e-2)
    close(dbias, (dy.astype(f64) * dgelu).sum(0), 1e-4)


@pytest.mark.parametrize("dt, shape", [(bf16, (16, 28, 28, 64)), (bf16, (8, 14, 14, 12)),
                                       (f32, (8, 9, 9, 6)), (f32, (4, 5, 5, 7)),
                                       (bf16, (3, 1, 1, 8))])  # fmt: skip
def test_column_reductions_in_lanes(dev, dt, shape):
    """Batch norm's statistics and gradient sums over (N, H, W) of an NHWC image: a split
    reduction whose generation-2 threads each read ``codegen.column_lanes`` consecutive channels
    (8, 4, 2 and 1 here; shapes whose row count leaves a remainder, and one too short to chunk).
    The partial results are the same in both generations, so the bits are; both close to
    float64."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape).astype(dt)
    dy = rng.standard_normal(shape).astype(dt)
    C = shape[-1]
    mean = rng.standard_normal(C).astype(f32)

    def f(x, dy, mean):
        xc = x.astype(f32) - mean  # a broadcast: per-dimension indices
        g = dy.astype(f32)
        axes = (0, 1, 2)
        return xc.sum(axes), (xc * xc).sum(axes), g.sum(axes), (g * xc).sum(axes)

    outs = both_generations(dev, f, x, dy, mean)
    xc, g = x.astype(f64) - mean, dy.astype(f64)
    R = x.size // C
    for got, terms in zip(outs, (xc, xc * xc, g, g * xc), strict=True):
        # float32 summation in any order: |error| <= (R + 1) eps sum |terms| (the centring and
        # the product round once more each)
        bound = (R + 3) * np.finfo(f32).eps * np.abs(terms).sum((0, 1, 2))
        assert np.all(np.abs(got - terms.sum((0, 1, 2))) <= bound)


def test_misaligned_argument_is_copied_before_vector_loads(dev):
    """Generation-2 kernels move contiguous elements in 128-bit accesses and declare their
    buffers 16-byte aligned; an argument 4 bytes into a block (as a DLPack view at an offset
    can be) is copied to an aligned block first, so the kernel reads the right values instead
    of faulting on a misaligned address."""
    from blu.cuda.array import DeviceArray

    x = np.arange(1 + 64 * 768, dtype=f32) / 7
    base = bc.device_put(x, dev)
    view = DeviceArray(dev, base.ptr + 4, (64, 768), np.dtype(f32), owner=base)
    with blu.config.override(gpu_kernels=2):
        y = blu.jit(lambda v: v * 2 + 1)(view)
    np.testing.assert_array_equal(np.asarray(y), x[1:].reshape(64, 768) * 2 + 1)


# ---- generation 3: the online softmax normalizer (codegen_online) --------------------------------


def generations_2_and_3(dev, f, *args) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``jit(f)`` under generations 2 and 3 (not bit-equal: the online sums round differently)."""
    put = [bc.device_put(np.asarray(a), dev) for a in args]
    outs = []
    for gen in (2, 3):
        with blu.config.override(gpu_kernels=gen):
            out = blu.jit(lambda *a: f(*a))(*put)
            outs.append([np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))])
    return outs[0], outs[1]


def online_groups(f, *args) -> int:
    """How many row groups of ``jit(f)``'s GPU plan take the online pass under generation 3."""
    from gpu_helpers import plan_nodes

    from blu.lower.cuda.codegen import online_groups as starts

    with blu.config.override(gpu_kernels=3):
        nodes = [n for n in plan_nodes(f, *args) if n.kind == "kernel"]
        return sum(len(starts(n.layout)) for n in nodes)


def ce_rows(z, y):
    """The classifier's chunk: loss rows and ``softmax - onehot`` in bfloat16."""
    m = bnp.max(z, axis=1, keepdims=True)
    e = bnp.exp(z - m)
    s = bnp.sum(e, axis=1, keepdims=True)
    hit = bnp.expand_dims(y, 1) == blu.lax.iota(np.int32, z.shape, 1)
    picked = bnp.sum(bnp.where(hit, z, bnp.zeros_like(z)), axis=1) - m[:, 0]
    return bnp.log(s[:, 0]) - picked, (e / s - hit.astype(f32)).astype(bf16)


def ce_reference(z, y):
    """float64: the loss rows (NaN where the two-pass form makes NaN) and ``softmax - onehot``."""
    z64 = z.astype(f64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m = z64.max(1, keepdims=True)
        e = np.exp(z64 - m)
        s = e.sum(1, keepdims=True)
        rows = np.arange(len(y))
        loss = np.log(s[:, 0]) - (z64[rows, y] - m[:, 0])
        onehot = np.zeros_like(z64)
        onehot[rows, y] = 1
        return loss, e / s - onehot


@pytest.mark.parametrize("V", [50257, 1000])  # 6 chunks of 8 per thread and a remainder; none
def test_online_normalizer_cross_entropy_rows(dev, V):
    """Rows of logits as the fused classifier's chunk makes them (512 rows: the ``row``
    strategy), some logits masked to -inf, one row all -inf (NaN, as the two-pass form), one row
    with a +inf logit (NaN), against float64; generation 3 reads each row once for the max and
    the sum of exponentials."""
    rng = np.random.default_rng(3)
    z = (rng.standard_normal((512, V)) * 3).astype(f32)
    z[5, ::7] = -np.inf
    z[6, :] = -np.inf
    z[7, 3] = np.inf
    z[8, :] += 80.0  # large logits: exp(z) alone would overflow
    y = rng.integers(0, V, 512).astype(np.int32)
    y[5] = 1  # a finite logit of the masked row
    assert online_groups(ce_rows, z, y) == 1
    (loss2, dz2), (loss3, dz3) = generations_2_and_3(dev, ce_rows, z, y)
    ref_loss, ref_dz = ce_reference(z, y)
    for got in (loss2, loss3):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref_loss))
    ok = ~np.isnan(ref_loss)
    close(loss3[ok], ref_loss[ok], 1e-5)
    close(loss3[ok], loss2[ok], 1e-5)
    dz3 = dz3.astype(f64)
    np.testing.assert_array_equal(np.isnan(dz3), np.isnan(ref_dz))
    close(dz3[ok], ref_dz[ok], 1e-2)


def test_online_normalizer_softmax_of_long_rows(dev):
    """A plain softmax over rows of 8193 (looped: no block divides them), generation 3."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((600, 8193)) * 4).astype(f32)

    def softmax(x):
        e = bnp.exp(x - bnp.max(x, axis=1, keepdims=True))
        return e / bnp.sum(e, axis=1, keepdims=True)

    assert online_groups(softmax, x) == 1
    _, (p,) = generations_2_and_3(dev, softmax, x)
    x64 = x.astype(f64)
    ref = np.exp(x64 - x64.max(1, keepdims=True))
    close(p, ref / ref.sum(1, keepdims=True), 1e-5)


def test_online_normalizer_fused_classifier(dev):
    """``nn.linear_cross_entropy``'s value and gradients (bf16, 2 chunks of 512 rows over a
    vocabulary of 50,257) under generation 3 against float64."""
    rng = np.random.default_rng(5)
    N, C, V = 1024, 64, 50257
    x = (rng.standard_normal((N, C)) * 0.5).astype(bf16)
    w = (rng.standard_normal((V, C)) * 0.5).astype(bf16)
    y = rng.integers(0, V, N).astype(np.int32)

    def f(x, w, y):
        loss, (dx, dw) = blu.value_and_grad(
            lambda x, w: nn.linear_cross_entropy(x, w, y, chunk_size=512), argnums=(0, 1)
        )(x, w)
        return loss, dx, dw

    assert online_groups(f, x, w, y) == 2
    _, (loss, dx, dw) = generations_2_and_3(dev, f, x, w, y)
    x64, w64 = x.astype(f64), w.astype(f64)
    z = (x64 @ w64.T).astype(bf16).astype(f64)  # the logits rounded to bf16 (torch.autocast's)
    m = z.max(1, keepdims=True)
    p = np.exp(z - m)
    s = p.sum(1, keepdims=True)
    close(loss, np.mean(np.log(s[:, 0]) + m[:, 0] - z[np.arange(N), y]), 1e-5)
    p /= s
    p[np.arange(N), y] -= 1
    p /= N
    close(dx, p @ w64, 2e-2)
    close(dw, p.T @ x64, 2e-2)


def test_generation_3_layer_norm_rows_of_contiguous_runs(dev):
    """Generation 3's unrolled row groups (64 threads x 12 elements of a row of 768, in runs of
    4 contiguous elements): the layer norm's forward, with the residual add before it, and its
    gradients against float64, and close to generation 2."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1024, 768)).astype(f32)
    r = rng.standard_normal((1024, 768)).astype(f32)
    w, b = rng.standard_normal(768).astype(f32), rng.standard_normal(768).astype(f32)
    dy = rng.standard_normal((1024, 768)).astype(f32)

    def f(x, r, w, b, dy):
        y, vjp = blu.vjp(lambda x, r, w, b: nn.layer_norm(x + r, w, b), x, r, w, b)
        return (y.astype(bf16), *vjp(dy))

    two, three = generations_2_and_3(dev, f, x, r, w, b, dy)
    h = x.astype(f64) + r
    d64 = dy.astype(f64)
    rstd = 1 / np.sqrt(h.var(-1, keepdims=True) + 1e-5)
    xh = (h - h.mean(-1, keepdims=True)) * rstd
    gw = d64 * w
    dh = rstd * (gw - gw.mean(-1, keepdims=True) - xh * (gw * xh).mean(-1, keepdims=True))
    refs = [xh * w + b, dh, dh, (d64 * xh).sum(0), d64.sum(0)]
    for got, old, ref, tol in zip(three, two, refs, [1e-2, 1e-5, 1e-5, 1e-5, 1e-5], strict=True):
        close(got, ref, tol)
        close(got, old, tol)
