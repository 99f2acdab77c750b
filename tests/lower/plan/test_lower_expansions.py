"""Launch plans recompute cheap full-size values in the kernels that read them (``partition``'s
expansions): a broadcast, or an elementwise value made from broadcasts and constants, such as
the one-hot mask ``labels[:, None] == iota`` that the fused classifier reads on both sides of a
product; only the small operands (the labels) travel between kernels."""

from __future__ import annotations

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu import lax

N, V, C = 16, 40, 8


def _program(x, w, labels, acc, grad):
    # as the classifier's chunks: a kernel accumulates the weight gradient and gates the next
    # chunk's rows and labels on it (``_after``), the mask's equations join that kernel, the
    # product reads the gated rows, and the mask's reader comes after the product
    acc = acc + grad
    late = lax.slice(bnp.reshape(acc, (-1,)), (0,), (1,)) > np.inf
    xg = bnp.where(late, 0.0, x)
    hit = bnp.expand_dims(bnp.where(late, 0, labels), 1) == lax.iota(np.int32, (N, V), 1)
    target = hit.astype(np.float32) * 0.9  # (N, V) float32 from the mask and a constant
    z = xg @ w.T
    return acc, bnp.sum(bnp.where(hit, z, 0.0) - target)


def _specs():
    S = blu.ShapeDtypeStruct
    f32 = np.float32
    return S((N, C), f32), S((V, C), f32), S((N,), np.int32), S((V, C), f32), S((V, C), f32)


@pytest.mark.parametrize("target", [None, "cuda:sm_90"])
def test_mask_is_recomputed_not_materialized(target):
    low = blu.jit(_program).lower(*_specs(), target=target)
    nodes = low._program.plan.nodes
    kernels = [n for n in nodes if n.kind == "kernel"]
    first = next(n for n in kernels if any(e.primitive.name == "eq" for e in n.eqns))
    # the gating kernel hands over the gated labels, not the (N, V) mask and target
    assert [v.aval.size for v in first.outputs if v.aval.dtype == np.int32] == [N]
    assert all(v.aval.shape != (N, V) for v in first.outputs)
    # the product's result is the one (N, V) array in memory
    full = {v for n in nodes for v in [*n.inputs, *n.outputs] if v.aval.shape == (N, V)}
    assert len(full) == 1 and next(iter(full)).aval.dtype == np.float32


def test_values_match_numpy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, C)).astype(np.float32)
    w = rng.standard_normal((V, C)).astype(np.float32)
    acc, grad = (rng.standard_normal((V, C)).astype(np.float32) for _ in range(2))
    labels = rng.integers(0, V, N).astype(np.int32)
    new_acc, loss = blu.jit(_program)(x, w, labels, acc, grad)
    np.testing.assert_allclose(np.asarray(new_acc), acc + grad)
    hit = labels[:, None] == np.arange(V)[None, :]
    z = x.astype(np.float64) @ w.T
    np.testing.assert_allclose(float(loss), (np.where(hit, z, 0.0) - hit * 0.9).sum(), rtol=1e-4)


def _widened(x, y):
    # a bfloat16 value whose float32 cast and its ``== 0`` a later kernel reads (after the
    # product, which reads the value too): the reader recomputes the cast and the comparison
    h = x * 2.0
    w = h.astype(np.float32)
    d = (h @ y).astype(np.float32)
    return bnp.where(w == 0.0, 1.0, w * d)


@pytest.mark.parametrize("target", [None, "cuda:sm_90"])
def test_a_widened_value_travels_narrow(target):
    S, bf16 = blu.ShapeDtypeStruct, blu.numpy.bfloat16
    low = blu.jit(_widened).lower(S((C, C), bf16), S((C, C), bf16), target=target)
    nodes = low._program.plan.nodes
    crossing = {v for n in nodes for v in n.outputs if n.kind == "kernel"}
    crossing &= {v for n in nodes for v in n.inputs}
    # the first kernel hands over h alone (bfloat16): no float32 copy of it, no mask
    assert [v.aval.dtype for v in crossing] == [np.dtype(bf16)]
    # the kernel after the product recomputes the cast and the mask from h
    (last,) = [n for n in nodes if n.kind == "kernel" and any(v in crossing for v in n.inputs)]
    assert {"convert_element_type", "eq"} <= {e.primitive.name for e in last.eqns}


def test_widened_values_match_numpy():
    rng = np.random.default_rng(1)
    x, y = (rng.standard_normal((C, C)).astype(blu.numpy.bfloat16) for _ in range(2))
    x[0, :3] = 0  # some entries where the mask takes the other branch
    got = np.asarray(blu.jit(_widened)(x, y), np.float64)
    h = np.asarray(x, np.float64) * 2
    d = h @ np.asarray(y, np.float64)
    want = np.where(h == 0, 1.0, h * d)
    # d is rounded to bfloat16 by the product (8 bits): its relative error
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


def _scaled(x, y, m):
    # u = 0.1 g crosses to the kernel after the product, which reads g itself: it recomputes u
    # from g instead of reading both (an optimizer's scaled gradient)
    g = x * 2.0
    u = g * 0.1
    d = g @ y
    return m + u * d + g


@pytest.mark.parametrize("target", [None, "cuda:sm_90"])
def test_a_value_made_from_what_its_reader_reads_is_recomputed(target):
    S = blu.ShapeDtypeStruct
    low = blu.jit(_scaled).lower(*[S((C, C), np.float32)] * 3, target=target)
    nodes = low._program.plan.nodes
    first = next(n for n in nodes if n.kind == "kernel" and any(e.primitive.name == "mul"
                                                                for e in n.eqns))  # fmt: skip
    assert len(first.outputs) == 1  # g alone, not g and u
    rng = np.random.default_rng(2)
    x, y, m = (rng.standard_normal((C, C)).astype(np.float32) for _ in range(3))
    g = 2.0 * x.astype(np.float64)
    want = m + 0.1 * g * (g @ y) + g
    np.testing.assert_allclose(np.asarray(blu.jit(_scaled)(x, y, m)), want, rtol=1e-5, atol=1e-5)
