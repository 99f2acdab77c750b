"""cuDNN's fused attention through ``blu.cuda.cudnn_attention`` (the runtime, no jaxpr, no MLIR)
against the numpy float64 references of ``test_attention.py``.

Marked ``gpu``; skipped unless a real GPU, cuda-python and ``nvidia-cudnn-frontend`` are present.
Buffers come from blu's allocator (``device_put`` / ``DeviceArray.empty``); the work is queued on
the device's stream with raw pointers and a planned-size workspace, then read back. bfloat16 and
float16, causal and not, T not a multiple of 64, heads of 64 and 128, grouped-query attention
and a broadcast bias; the backward from the forward's own ``lse``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import blu.cuda as bc
from tests.lax.test_attention import ref_attention, ref_probs, ref_vjp


def _ready() -> bool:
    if not (bc.is_available() and bc.devices() and bc.devices()[0].platform == "cuda"):
        return False
    from blu.cuda import cudnn_attention

    return cudnn_attention.available()


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _ready(), reason="needs an NVIDIA GPU, cuda-python and cudnn-frontend"),
]

bf16 = ml_dtypes.bfloat16
CASES = [  # (b, t, n, kh, h, causal, dtype, bias)
    (2, 100, 4, 4, 64, False, bf16, None),
    (2, 100, 4, 4, 64, True, bf16, None),
    (1, 130, 2, 2, 128, True, bf16, None),
    (1, 128, 2, 2, 128, False, bf16, None),
    (2, 77, 4, 2, 64, True, bf16, None),  # grouped-query attention
    (2, 96, 4, 4, 64, True, np.float16, None),
    (2, 64, 4, 4, 64, False, bf16, (1, 4)),  # a bias broadcast over the batch
]


def _close(got, want, tol):
    got = np.asarray(got).astype(np.float64)
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"b{c[0]}t{c[1]}n{c[2]}k{c[3]}h{c[4]}"
                                                       f"{'c' if c[5] else ''}{np.dtype(c[6])}"
                                                       f"{'bias' if c[7] else ''}")  # fmt: skip
def test_cudnn_forward_backward_against_float64(case):
    from blu.cuda import cudnn_attention as sdpa
    from blu.cuda.array import DeviceArray

    b, t, n, kh, h, causal, dt, bias_bn = case
    dev = bc.devices()[0]
    rng = np.random.default_rng(t + h)
    q = rng.normal(size=(b, t, n, h)).astype(dt)
    k = rng.normal(size=(b, t, kh, h)).astype(dt)
    v = rng.normal(size=(b, t, kh, h)).astype(dt)
    dout = rng.normal(size=(b, t, n, h)).astype(dt)
    bias = None if bias_bn is None else rng.normal(size=bias_bn + (t, t)).astype(dt)
    scale = 1.0 / np.sqrt(h)
    spec = sdpa.SdpaSpec(b, t, t, n, kh, h, h, np.dtype(dt).name, causal, scale, bias_bn)
    put = lambda x: bc.device_put(np.ascontiguousarray(x), dev)
    dq_, dk_, dv_, dO_ = put(q), put(k), put(v), put(dout)
    d_bias = put(bias) if bias is not None else None
    out = DeviceArray.empty((b, t, n, h), dt, dev)
    lse = DeviceArray.empty((b, n, t), np.float32, dev)
    ws_bytes = max(sdpa.workspace_size(spec, False), sdpa.workspace_size(spec, True), 1)
    ws = DeviceArray.empty((ws_bytes,), np.uint8, dev)
    bias_ptr = d_bias.ptr if d_bias is not None else 0
    sdpa.forward(spec, q=dq_.ptr, k=dk_.ptr, v=dv_.ptr, out=out.ptr, lse=lse.ptr, workspace=ws.ptr,
                 stream=dev.stream_id, bias=bias_ptr)  # fmt: skip
    tol = 2e-2 if dt == bf16 else 4e-3
    _close(np.asarray(out), ref_attention(q, k, v, bias, causal=causal), tol)
    _, want_lse, _ = ref_probs(q, k, bias, causal=causal)
    np.testing.assert_allclose(np.asarray(lse), want_lse, rtol=1e-2, atol=1e-2)

    grads = [DeviceArray.empty(a.shape, dt, dev) for a in (q, k, v)]
    sdpa.backward(spec, q=dq_.ptr, k=dk_.ptr, v=dv_.ptr, out=out.ptr, lse=lse.ptr, dout=dO_.ptr,
                  dq=grads[0].ptr, dk=grads[1].ptr, dv=grads[2].ptr, workspace=ws.ptr,
                  stream=dev.stream_id, bias=bias_ptr)  # fmt: skip
    want = ref_vjp(q, k, v, dout, bias, causal=causal)
    for g, w in zip(grads, want[:3]):
        _close(np.asarray(g), w, 3 * tol)


def test_graphs_are_cached_and_unsupported_cases_explained():
    from blu.cuda import cudnn_attention as sdpa

    spec = sdpa.SdpaSpec(1, 64, 64, 2, 2, 64, 64, "bfloat16", True, 0.125)
    assert sdpa.graph(spec, False) is sdpa.graph(spec, False)
    assert "bfloat16/float16" in sdpa.unsupported(
        sdpa.SdpaSpec(1, 64, 64, 2, 2, 64, 64, "float32", True, 0.125)
    )
    assert "multiples of 8" in sdpa.unsupported(
        sdpa.SdpaSpec(1, 64, 64, 2, 2, 60, 60, "bfloat16", True, 0.125)
    )
