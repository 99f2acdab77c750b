"""Library lowerings of the fused attention primitives (``blu.lax.attention``).

- GPU, bfloat16/float16: cuDNN's fused SDPA forward and backward (``blu.cuda.cudnn_attention``),
  its workspace planned from ``workspace_size``, queued on the executable's stream. It applies
  without a boolean mask, without a gradient for the bias (``need_dbias``) or the log-sum-exp
  (``has_dlse``), with head sizes cuDNN takes, and unless ``implementation="blu"``; with
  ``implementation="cudnn"`` a case it cannot take is an error instead of a fallback.
- CPU: the blocked numpy kernels (``attention_numpy``, FlashAttention-2's online softmax over key
  blocks) on the planned buffers, for problems whose scores would exceed
  ``CPU_KERNEL_MIN_SCORES`` elements; smaller ones (the README's GPT-2 job: B=32, T=64, 4 heads
  of 32) inline the decomposition, which the CPU backend fuses and which measured as fast or
  faster there (``benchmarks/attention_cpu.py``), without the kernels' host round trip.
- Elsewhere (float32 on the GPU, the JVP primitive on the GPU) no lowering applies and
  ``prepare`` inlines the primitive's decomposition.

Imported by ``blu.lower`` once ``blu.lower.library`` exists (this module registers on import).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core.aval import ShapedArray
from blu.core.config import config
from blu.core.errors import BluValueError, with_user_line
from blu.cuda import cudnn_attention as cudnn_sdpa
from blu.lax import attention as att
from blu.lower.library import LibraryLowering, register_library

CPU_KERNEL_MIN_SCORES = 1 << 24  # B*N*T*S at which the CPU runs the blocked kernels


def _sizes(avals: Sequence[ShapedArray]) -> tuple[int, ...]:
    q, k, v = avals[:3]
    return att.check_avals(q, k, v)


def spec(avals: Sequence[ShapedArray], params: dict) -> cudnn_sdpa.SdpaSpec:
    """The cuDNN problem of a forward or backward equation."""
    b, t, s, n, kh, h, hv = _sizes(avals)
    bias = tuple(avals[3].shape[:2]) if params["has_bias"] else None
    return cudnn_sdpa.SdpaSpec(b, t, s, n, kh, h, hv, str(avals[0].dtype), params["is_causal"],
                               float(params["scale"]), bias)  # fmt: skip


def _why_not_cudnn(avals, params, backward: bool) -> str | None:
    if params["has_mask"]:
        return "cuDNN attention takes no boolean mask here"
    if backward and (params["need_dbias"] or params["has_dlse"]):
        return "cuDNN attention's backward here gives no bias or log-sum-exp gradient"
    reason = cudnn_sdpa.unsupported(spec(avals, params))
    if reason is None and not config.cudnn_attention:
        reason = "cuDNN attention is off (blu.config.cudnn_attention, BLU_CUDNN_ATTENTION=0)"
    return reason


def _gpu_applies(backward: bool):
    def applies(avals, params, target: str) -> bool:
        impl = params["implementation"]
        if not target.startswith("cuda") or impl == "blu":
            if impl == "cudnn" and not target.startswith("cuda"):
                raise BluValueError(with_user_line(
                    f"dot_product_attention: implementation='cudnn' needs a CUDA target, "
                    f"not {target}"))  # fmt: skip
            return _cpu_applies(avals, params, target)
        reason = _why_not_cudnn(avals, params, backward)
        if reason is not None and impl == "cudnn":
            raise BluValueError(with_user_line(f"dot_product_attention: {reason}"))
        return reason is None

    return applies


def _cpu_applies(avals, params, target: str) -> bool:
    if target.startswith("cuda"):
        return False
    b, t, s, n = _sizes(avals)[:4]
    return b * n * t * s >= CPU_KERNEL_MIN_SCORES


def _workspace(backward: bool):
    def workspace(avals, params, target: str) -> int:
        if not target.startswith("cuda") or _why_not_cudnn(avals, params, backward):
            return 0
        sp = spec(avals, params)
        if not cudnn_sdpa.available():
            # planning for a GPU on a machine without cuDNN (AOT): cuDNN's backward keeps dQ
            # accumulated in float32 (48.8 MiB measured at GPT-2's shape), its forward nothing.
            # Only the arena layout depends on it, never a kernel, so the cache still matches.
            return sp.b * sp.t * sp.n * sp.h * 4 + (1 << 20) if backward else 0
        return cudnn_sdpa.workspace_size(sp, backward)

    return workspace


def _write(outs: list[np.ndarray], results: Sequence[np.ndarray]) -> None:
    for o, r in zip(outs, results, strict=True):
        o[...] = r


def _cpu_fwd(ins, outs, workspace, **params) -> None:
    _write(outs, att.fwd_p.impl(*ins, **params))


def _cpu_jvp(ins, outs, workspace, **params) -> None:
    _write(outs, att.jvp_p.impl(*ins, **params))


def _cpu_bwd(ins, outs, workspace, **params) -> None:
    _write(outs, att.bwd_p.impl(*ins, **params))


def _gpu_fwd(dev, stream, ins, outs, workspace, in_avals, out_avals, **params) -> None:
    q, k, v, *rest = ins
    bias = rest[0] if params["has_bias"] else 0
    cudnn_sdpa.forward(spec(in_avals, params), q=q, k=k, v=v, out=outs[0], lse=outs[1],
                       workspace=workspace, stream=stream, bias=bias, device=dev.id)  # fmt: skip


def _gpu_bwd(dev, stream, ins, outs, workspace, in_avals, out_avals, **params) -> None:
    q, k, v, bias, _, rest = att.split_args(ins, params["has_bias"], params["has_mask"])
    out, lse, dout = rest[:3]
    cudnn_sdpa.backward(spec(in_avals, params), q=q, k=k, v=v, out=out, lse=lse, dout=dout,
                        dq=outs[0], dk=outs[1], dv=outs[2], workspace=workspace, stream=stream,
                        bias=bias or 0, device=dev.id)  # fmt: skip


def _jvp_applies(avals, params, target: str) -> bool:
    return _cpu_applies(avals, params, target)


LOWERINGS: dict[Any, LibraryLowering] = {
    att.fwd_p: LibraryLowering(workspace=_workspace(False), cpu=_cpu_fwd, gpu=_gpu_fwd,
                               applies=_gpu_applies(False)),
    att.bwd_p: LibraryLowering(workspace=_workspace(True), cpu=_cpu_bwd, gpu=_gpu_bwd,
                               applies=_gpu_applies(True)),
    att.jvp_p: LibraryLowering(workspace=lambda avals, params, target: 0, cpu=_cpu_jvp, gpu=None,
                               applies=_jvp_applies),
}  # fmt: skip

for _prim, _lowering in LOWERINGS.items():
    register_library(_prim, _lowering)
