"""The attention primitives' library lowerings (``blu/lower/cuda/attention.py``,
``blu/lower/cpu/attention.py``): when each applies, their workspace, and that the CPU functions
write the primitives' results into given buffers."""

from __future__ import annotations

import importlib

import ml_dtypes
import numpy as np
import pytest

from blu.core.aval import ShapedArray
from blu.core.errors import BluValueError
from blu.lax import attention as att

bf16 = ml_dtypes.bfloat16


@pytest.fixture
def lowering(monkeypatch):
    mod = importlib.import_module("blu.lower.cuda.attention")
    monkeypatch.setattr(mod.cudnn_sdpa, "available", lambda: True)
    return mod


@pytest.fixture
def cpu_lowering():
    return importlib.import_module("blu.lower.cpu.attention")


def _params(**kw):
    p = dict(scale=0.125, is_causal=True, has_bias=False, has_mask=False, implementation=None)
    p.update(kw)
    return p


def _avals(b=2, t=64, n=4, h=64, dt=bf16):
    a = ShapedArray((b, t, n, h), np.dtype(dt))
    return [a, a, a]


def test_gpu_choice_cudnn_for_bf16_blu_flash_for_fp32(lowering, set_flag):
    fwd = lowering.LOWERINGS[att.fwd_p]
    choice = lowering.gpu_choice
    assert fwd.applies(_avals(), _params(), "cuda:sm_90")
    assert choice(_avals(), _params(), False) == "cudnn"
    assert choice(_avals(dt=np.float32), _params(), False) == "blu"  # blu's flash kernels
    assert choice(_avals(h=60), _params(), False) is None  # neither takes heads of 60
    assert choice(_avals(dt=np.float32, h=60), _params(), False) is None
    assert not fwd.applies(_avals(h=60), _params(), "cuda:sm_90")
    # implementation="blu" on bf16: blu's flash kernels instead of cuDNN
    assert choice(_avals(), _params(implementation="blu"), False) == "blu"
    assert fwd.applies(_avals(dt=np.float32), _params(implementation="blu"), "cuda:sm_90")
    mask = ShapedArray((1, 1, 64, 64), np.dtype(bool))
    assert not fwd.applies(_avals() + [mask], _params(has_mask=True), "cuda:sm_90")
    assert not fwd.applies(_avals(dt=np.float32) + [mask], _params(has_mask=True), "cuda:sm_90")
    with pytest.raises(BluValueError, match="mask"):
        fwd.applies(_avals() + [mask], _params(has_mask=True, implementation="cudnn"), "cuda:sm_90")
    with pytest.raises(BluValueError, match="CUDA"):  # the CPU's lowering refuses it
        cpu_fwd = importlib.import_module("blu.lower.cpu.attention").LOWERINGS[att.fwd_p]
        cpu_fwd.applies(_avals(), _params(implementation="cudnn"), "cpu")
    bwd = lowering.LOWERINGS[att.bwd_p]
    bp = _params(has_dlse=False, need_dbias=False)
    assert bwd.applies(_avals(), bp, "cuda:sm_90")
    assert not bwd.applies(_avals(), {**bp, "has_dlse": True}, "cuda:sm_90")
    assert not bwd.applies(_avals(dt=np.float32), {**bp, "has_dlse": True}, "cuda:sm_90")
    # the flash backward's workspace: D = rowsum(dO * O), float32 per (batch, head, query)
    f32 = _avals(dt=np.float32)
    assert bwd.workspace(f32 + f32[:1] * 3, bp, "cuda:sm_90") == 4 * 2 * 4 * 64
    # bf16 through blu's kernels: D, then dQ accumulated in float32 (B T N H floats)
    b16 = _avals()
    ws = bwd.workspace(b16 + b16[:1] * 3, {**bp, "implementation": "blu"}, "cuda:sm_90")
    assert ws == 4 * 2 * 4 * 64 + 4 * 2 * 64 * 4 * 64
    set_flag("flash_attention", False)
    assert choice(_avals(dt=np.float32), _params(), False) is None
    assert att.jvp_p not in lowering.LOWERINGS  # the JVP inlines its decomposition on CUDA


def test_cpu_uses_the_mlir_kernels_at_every_size_and_the_numpy_jvp_for_large_problems(
    cpu_lowering,
):
    fwd, bwd, jvp = (cpu_lowering.LOWERINGS[p] for p in (att.fwd_p, att.bwd_p, att.jvp_p))
    bp = _params(has_dlse=False, need_dbias=False)
    for avals in (_avals(b=1, t=1, n=1, h=1), _avals(b=32, t=64, n=4, h=32, dt=np.float32)):
        assert fwd.applies(avals, _params(), "cpu") and bwd.applies(avals, bp, "cpu")
    jp = _params(has_tangent=(True, False, False, False))
    assert not jvp.applies(_avals(b=32, t=64, n=4, h=32, dt=np.float32), jp, "cpu")
    assert jvp.applies(_avals(b=4, t=2048, n=4, h=32, dt=np.float32), jp, "cpu")
    # workspace: the forward's transposed keys (B, K, H, S rounded up to 64) in float32; the
    # backward's D (B, N, T), for half floats a float32 dq accumulator (B, T, N, H), then the
    # transposed q and dO (B, N, H, T_pad): T + 15 rounded up to 16 lanes
    assert fwd.workspace(_avals(b=2, t=70, n=4, h=8), _params(), "cpu") == 2 * 4 * 8 * 128 * 4
    qt = 2 * 4 * 8 * 80 * 4
    assert bwd.workspace(_avals(b=2, t=64, n=4, h=8, dt=np.float32), bp, "cpu") == (
        2 * 4 * 64 * 4 + 2 * qt
    )
    assert (
        bwd.workspace(_avals(b=2, t=64, n=4, h=8), bp, "cpu") == 2 * 4 * 64 * 4 * (1 + 8) + 2 * qt
    )


@pytest.mark.parametrize("prim", ["fwd", "bwd", "jvp"])
def test_cpu_functions_write_the_primitive_results(cpu_lowering, prim):
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(2, 5, 2, 4)).astype(np.float32) for _ in range(3))
    params = _params(scale=0.5)
    out, lse = att.fwd_p.impl(q, k, v, **params)
    if prim == "fwd":
        p, ins, extra = att.fwd_p, [q, k, v], {}
    elif prim == "bwd":
        extra = dict(has_dlse=False, need_dbias=False)
        p, ins = att.bwd_p, [q, k, v, out, lse, out * 0.5]
    else:
        extra = dict(has_tangent=(True, False, False, False))
        p, ins = att.jvp_p, [q, k, v, out, lse, q * 0.1]
    want = p.impl(*ins, **params, **extra)
    outs = [np.empty_like(w) for w in want]
    cpu_lowering.LOWERINGS[p].cpu(ins, outs, None, **params, **extra)
    for o, w in zip(outs, want):  # fwd, bwd: the MLIR kernels against the numpy ones
        np.testing.assert_allclose(o, w, rtol=2e-5, atol=2e-6)
