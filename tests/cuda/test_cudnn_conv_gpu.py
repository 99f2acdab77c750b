"""cuDNN's convolutions through ``blu.cuda.cudnn_conv`` (the runtime, no jaxpr) against the
independent float64 reference of ``tests/lower/cuda/test_cudnn_conv_plan.py``.

Marked ``gpu``; skipped unless a real GPU, cuda-python and ``nvidia-cudnn-frontend`` are present.
Buffers come from blu's allocator; the work is queued on the device's stream with raw pointers
and a planned-size workspace, then read back. NCHW/OIHW and NHWC/OHWI memory, float32 (strict,
and TF32) and bfloat16, strides, dilation, asymmetric padding, groups, a 3-D convolution and the
flipped window of ``CONVOLUTION`` mode.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import blu.cuda as bc
from tests.lower.cuda.test_cudnn_conv_plan import ref


def _ready() -> bool:
    if not (bc.is_available() and bc.devices() and bc.devices()[0].platform == "cuda"):
        return False
    from blu.cuda import cudnn_conv

    return cudnn_conv.available()


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _ready(), reason="needs an NVIDIA GPU, cuda-python and cudnn-frontend"),
]

bf16 = ml_dtypes.bfloat16


def _layout(dims, channels_last: bool) -> tuple[tuple, tuple[int, ...]]:
    """(memory shape, element strides in cuDNN's (N, C, spatial...) order)."""
    if not channels_last:
        shape = tuple(dims)
    else:
        shape = (dims[0], *dims[2:], dims[1])
    st = np.cumprod((1, *shape[::-1][:-1]))[::-1]
    order = list(range(len(dims))) if not channels_last else [0, len(dims) - 1,
                                                              *range(1, len(dims) - 1)]  # fmt: skip
    return shape, tuple(int(st[a]) for a in order)


CASES = [  # (x dims, w dims, pre, post, stride, dilation)
    ((2, 8, 10, 9), (16, 8, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    ((2, 8, 11, 9), (16, 8, 3, 2), (1, 0), (0, 2), (2, 3), (1, 2)),
    ((2, 12, 9, 9), (12, 3, 3, 3), (1, 1), (1, 1), (2, 2), (1, 1)),  # 4 groups
    ((1, 8, 6, 7, 5), (8, 8, 3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 2, 1), (1, 1, 1)),  # 3-D
]


def _spec(kind, case, channels_last, dtype, flip=False, tf32=False):
    from blu.cuda.cudnn_conv import ConvSpec

    xd, wd, pre, post, stride, dil = case
    out = tuple((n + lo + hi - (k - 1) * d - 1) // s + 1
                for n, k, lo, hi, s, d in zip(xd[2:], wd[2:], pre, post, stride, dil))  # fmt: skip
    yd = (xd[0], wd[0], *out)
    (xs, xst), (ws, wst), (ys, yst) = (_layout(d, channels_last) for d in (xd, wd, yd))
    spec = ConvSpec(kind, xd, xst, wd, wst, yd, yst, pre, post, stride, dil,
                    np.dtype(dtype).name, np.dtype(dtype).name, flip, tf32)  # fmt: skip
    return spec, (xs, ws, ys)


def _view(a: np.ndarray, dims, strides) -> np.ndarray:
    a = np.ascontiguousarray(a).reshape(-1)
    return np.lib.stride_tricks.as_strided(a, dims, [s * a.itemsize for s in strides])


@pytest.mark.parametrize("tf32", [False, True], ids=["fp32", "tf32"])
@pytest.mark.parametrize("dt", [np.float32, bf16], ids=["f32", "bf16"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("kind", ["fprop", "dgrad", "wgrad"])
def test_against_float64(kind, case, channels_last, dt, tf32):
    from blu.cuda import cudnn_conv
    from blu.cuda.array import DeviceArray

    if tf32 and dt != np.float32:
        pytest.skip("TF32 is a float32 setting")
    dev = bc.devices()[0]
    spec, shapes = _spec(kind, CASES[case], channels_last, dt, flip=kind == "dgrad", tf32=tf32)
    assert cudnn_conv.unsupported(spec) is None
    rng = np.random.default_rng(case)
    bufs = {r: rng.normal(size=s).astype(dt) for r, s in zip("xwy", shapes)}
    written = {"fprop": "y", "dgrad": "x", "wgrad": "w"}[kind]
    dims = {r: (getattr(spec, r), getattr(spec, r + "_strides")) for r in "xwy"}
    views = {
        r: None if r == written else _view(bufs[r].astype(np.float64), *dims[r]) for r in "xwy"
    }
    want = ref(spec, views["x"], views["w"], views["y"])
    d = {r: bc.device_put(np.ascontiguousarray(bufs[r]), dev) for r in "xwy"}
    ws = DeviceArray.empty((max(cudnn_conv.workspace_size(spec), 1),), np.uint8, dev)
    kw = dict(workspace=ws.ptr, stream=dev.stream_id)
    if kind == "fprop":
        cudnn_conv.fprop(spec, x=d["x"].ptr, w=d["w"].ptr, y=d["y"].ptr, **kw)
    elif kind == "dgrad":
        cudnn_conv.dgrad(spec, dy=d["y"].ptr, w=d["w"].ptr, dx=d["x"].ptr, **kw)
    else:
        cudnn_conv.wgrad(spec, x=d["x"].ptr, dy=d["y"].ptr, dw=d["w"].ptr, **kw)
    got = _view(np.asarray(d[written]).astype(np.float64), *dims[written])
    tol = {np.dtype(bf16): 2e-2, np.dtype(np.float32): 1e-2 if tf32 else 1e-5}[np.dtype(dt)]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


def test_graphs_are_cached_and_unsupported_cases_explained():
    from blu.cuda import cudnn_conv

    spec, _ = _spec("fprop", CASES[0], True, bf16)
    assert cudnn_conv.graph(spec) is cudnn_conv.graph(spec)
    f64, _ = _spec("fprop", CASES[0], True, np.float64)
    assert "float64" in cudnn_conv.unsupported(f64)
