"""The CUDA target's library lowerings of the fused attention primitives (``blu.lax.attention``).

- bfloat16/float16: cuDNN's fused SDPA forward and backward (``blu.cuda.cudnn_attention``),
  its workspace planned from ``workspace_size``, queued on the executable's stream. It applies
  without a boolean mask, without a gradient for the bias (``need_dbias``) or the log-sum-exp
  (``has_dlse``), with head sizes cuDNN takes, and unless ``implementation="blu"``; with
  ``implementation="cudnn"`` a case it cannot take is an error instead of a fallback.
- float32 (and bf16/fp16 where cuDNN does not apply, is off, or with
  ``implementation="blu"``): blu's own flash kernels (``blu.lower.cuda.flash``: MLIR,
  compiled like every fused kernel and cached), without a mask, a bias or their gradients,
  heads of 32, 64 or 128; for float32 on tensor cores (``blu.lower.cuda.flash_tc``: TF32 under
  ``default_matmul_precision="tf32"``, 3xTF32 under "fp32"; ``blu.config.flash_tensor_cores``
  off: CUDA cores). ``gpu_choice`` says which runs; ``blu.config.flash_attention`` turns the
  kernels off.
- Elsewhere (the JVP primitive, masks and biases in float32) no lowering applies and
  ``prepare`` inlines the primitive's decomposition.

On the simulated device (``BLU_FAKE_GPU=1``) each call runs the primitive's numpy impl on the
planned host buffers. The CPU's lowerings are ``blu.lower.cpu.attention``'s.
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
from blu.lower.cuda import flash as flash_gpu
from blu.lower.cuda import flash_tc
from blu.lower.library import LibraryLowering, register_library
from blu.lower.mlir import cache as kernel_cache
from blu.lower.mlir.llvm import symbol


def _sizes(avals: Sequence[ShapedArray]) -> tuple[int, ...]:
    q, k, v = avals[:3]
    return att.check_avals(q, k, v)


def spec(avals: Sequence[ShapedArray], params: dict, packed: int = 0) -> cudnn_sdpa.SdpaSpec:
    """The cuDNN problem of a forward or backward equation (``packed``: q, k, v slices of one
    array, tokens that many elements apart; ``blu.lower.cuda.packed_attention``)."""
    b, t, s, n, kh, h, hv = _sizes(avals)
    bias = tuple(avals[3].shape[:2]) if params["has_bias"] else None
    return cudnn_sdpa.SdpaSpec(b, t, s, n, kh, h, hv, str(avals[0].dtype), params["is_causal"],
                               float(params["scale"]), bias, packed)  # fmt: skip


def _why_not_cudnn(avals, params, backward: bool, packed: int = 0) -> str | None:
    if params["has_mask"]:
        return "cuDNN attention takes no boolean mask here"
    if backward and (params["need_dbias"] or params["has_dlse"]):
        return "cuDNN attention's backward here gives no bias or log-sum-exp gradient"
    reason = cudnn_sdpa.unsupported(spec(avals, params, packed))
    if reason is None and not config.cudnn_attention:
        reason = "cuDNN attention is off (blu.config.cudnn_attention, BLU_CUDNN_ATTENTION=0)"
    return reason


def flash_spec(avals: Sequence[ShapedArray], params: dict, backward: bool = False,
               packed: int = 0) -> flash_gpu.FlashSpec:  # fmt: skip
    """blu's flash-kernel problem of a forward or backward equation: its tensor-core mode
    (``flash_tc.choose``) from ``blu.config.default_matmul_precision`` and
    ``blu.config.flash_tensor_cores`` now."""
    b, t, s, n, kh, h, hv = _sizes(avals)
    dtype = str(avals[0].dtype)
    mma = flash_tc.choose(dtype, h, config.default_matmul_precision, backward,
                          config.flash_tensor_cores)  # fmt: skip
    return flash_gpu.FlashSpec(b, t, s, n, kh, h, params["is_causal"], float(params["scale"]),
                               dtype, mma, packed)  # fmt: skip


def _why_not_flash(avals, params, backward: bool, packed: int = 0) -> str | None:
    if not config.flash_attention:
        return "blu's flash kernels are off (blu.config.flash_attention, BLU_FLASH_ATTENTION=0)"
    if params["has_mask"] or params["has_bias"]:
        return "blu's flash kernels take no boolean mask or bias yet"
    if backward and (params["need_dbias"] or params["has_dlse"]):
        return "blu's flash backward gives no bias or log-sum-exp gradient"
    q, v = avals[0], avals[2]
    if v.shape[3] != q.shape[3]:
        return "blu's flash kernels need value heads as wide as query heads"
    return flash_gpu.unsupported(flash_spec(avals, params, packed=packed))


def gpu_choice(avals: Sequence[ShapedArray], params: dict, backward: bool,
               packed: int = 0) -> str | None:  # fmt: skip
    """Which GPU implementation runs an attention equation: "cudnn", "blu" (blu's flash
    kernels) or None (the decomposition is inlined); ``packed`` as in ``spec``.

    Raises:
        BluValueError: ``implementation="cudnn"`` for a problem cuDNN cannot take here.
    """
    impl = params["implementation"]
    if impl == "cudnn":
        reason = _why_not_cudnn(avals, params, backward, packed)
        if reason is not None:
            raise BluValueError(with_user_line(f"dot_product_attention: {reason}"))
        return "cudnn"
    if impl != "blu" and _why_not_cudnn(avals, params, backward, packed) is None:
        return "cudnn"
    return "blu" if _why_not_flash(avals, params, backward, packed) is None else None


def _gpu_applies(backward: bool):
    def applies(avals, params, target: str) -> bool:
        return gpu_choice(avals, params, backward) is not None

    return applies


def _plain(avals, params) -> tuple[Sequence[ShapedArray], int]:
    """An equation's ``(q, k, v, ...)`` avals and its packing (0: q, k, v are arrays)."""
    return avals, 0


def workspace_rule(backward: bool, unpack=_plain):
    """The library lowering's ``workspace`` rule (``unpack``: the equation's avals as the
    plain primitive's and the packing, for ``blu.lower.cuda.packed_attention``)."""

    def workspace(avals, params, target: str) -> int:
        avals, packed = unpack(avals, params)
        choice = gpu_choice(avals, params, backward, packed)
        if choice == "blu":
            return _flash_workspace(avals, backward)[-1]
        if choice is None:
            return 0
        sp = spec(avals, params, packed)
        if not cudnn_sdpa.available():
            # planning for a GPU on a machine without cuDNN (AOT): cuDNN's backward keeps dQ
            # accumulated in float32 (about dQ's size, as measured), its forward nothing.
            # Only the arena layout depends on it, never a kernel, so the cache still matches.
            return sp.b * sp.t * sp.n * sp.h * 4 + (1 << 20) if backward else 0
        return cudnn_sdpa.workspace_size(sp, backward)

    return workspace


def kernels_rule(backward: bool, unpack=_plain):
    """The library lowering's ``kernels`` rule (blu's flash kernels when they run it)."""

    def kernels(avals, params, target: str) -> list[tuple]:
        avals, packed = unpack(avals, params)
        if gpu_choice(avals, params, backward, packed) != "blu":
            return []
        sp = flash_spec(avals, params, backward, packed)
        emit = lambda sym: flash_gpu.emit(sp, sym, backward)  # noqa: E731
        label = f"flash attention {'backward' if backward else 'forward'} {sp}"
        canonical = flash_gpu.canonical(sp, backward)
        # the launches follow the spec the kernel was built for, even if the precision
        # setting changes before the executable runs
        _built[symbol(kernel_cache.kernel_key(canonical, target))] = sp
        return [(canonical, emit, label)]

    return kernels


# the kernel module's symbol (``mlir_cpu.symbol`` of its cache key; a loaded
# ``driver.Module`` and a ``GpuModule`` both carry it as ``name``) -> the spec it was emitted for
_built: dict[str, flash_gpu.FlashSpec] = {}


def _built_spec(module: Any, avals, params: dict, backward: bool,
                packed: int = 0) -> flash_gpu.FlashSpec:  # fmt: skip
    sp = _built.get(module.name)
    return sp if sp is not None else flash_spec(avals, params, backward, packed)


def _flash_workspace(avals, backward: bool) -> tuple[int, int]:
    """(offset of the float32 dQ accumulator or -1, total bytes) of the flash backward's
    workspace: D = rowsum(dO * O), float32 per query row, then for half-precision inputs the
    float32 dQ that the atomic adds accumulate into."""
    if not backward:
        return -1, 0
    b, t, _, n, _, h, _ = _sizes(avals)
    rows = (4 * b * n * t + 255) // 256 * 256
    if avals[0].dtype == np.float32:
        return -1, rows
    return rows, rows + 4 * b * t * n * h


_raised_smem: set[int] = set()  # kernels allowed more than 48 KiB of dynamic shared memory


def _launch(module: Any, sym: str, sp: flash_gpu.FlashSpec, backward: bool, stream: Any,
            args: list[list[int]]) -> None:  # fmt: skip
    for la, a in zip(flash_gpu.launches(sp, sym, backward), args, strict=True):
        fn = module.function(la.func)
        if la.shared > 48 * 1024 and id(fn) not in _raised_smem:
            fn.set_max_dynamic_shared_memory(la.shared)
            _raised_smem.add(id(fn))
        fn.launch(la.grid, la.block, a, shared_mem=la.shared, stream=stream)


def _gpu_fwd(dev, stream, ins, outs, workspace, in_avals, out_avals, _modules=(), **params):
    forward_gpu(dev, stream, ins, outs, workspace, in_avals, _modules, params)


def forward_gpu(dev, stream, ins, outs, workspace, avals, modules, params, packed: int = 0):
    """Queue the forward: ``ins`` the pointers of ``q, k, v, [bias]``, ``outs`` of ``out,
    lse``, ``avals`` the plain primitive's, ``modules`` blu's kernels when the executable chose
    them (``kernels_rule``), else cuDNN."""
    q, k, v, *rest = ins
    if modules:  # the executable chose blu's kernels when it was built (``kernels_rule``)
        sp = _built_spec(modules[0], avals, params, False, packed)
        _launch(modules[0], modules[0].name, sp, False, stream, [[q, k, v, outs[0], outs[1]]])
        return
    bias = rest[0] if params["has_bias"] else 0
    cudnn_sdpa.forward(spec(avals, params, packed), q=q, k=k, v=v, out=outs[0], lse=outs[1],
                       workspace=workspace, stream=stream, bias=bias, device=dev.id)  # fmt: skip


def _gpu_bwd(dev, stream, ins, outs, workspace, in_avals, out_avals, _modules=(), **params):
    backward_gpu(dev, stream, ins, outs, workspace, in_avals, _modules, params)


def backward_gpu(dev, stream, ins, outs, workspace, avals, modules, params, packed: int = 0):
    """Queue the backward: ``ins`` the pointers of ``q, k, v, [bias], out, lse, dout``,
    ``outs`` of ``dq, dk, dv, ...``; the rest as in ``forward_gpu``."""
    q, k, v, bias, _, rest = att.split_args(ins, params["has_bias"], params["has_mask"])
    out, lse, dout = rest[:3]
    if modules:
        sp = _built_spec(modules[0], avals, params, True, packed)
        dq, dk, dv = outs[:3]
        at, _ = _flash_workspace(avals, True)
        dq32 = dq if at < 0 else workspace + at
        args = [[out, dout, dq32, workspace], [q, k, v, lse, dout, workspace, dq32, dk, dv]]
        if at >= 0:
            args.append([dq32, dq])
        _launch(modules[0], modules[0].name, sp, True, stream, args)
        return
    cudnn_sdpa.backward(spec(avals, params, packed), q=q, k=k, v=v, out=out, lse=lse, dout=dout,
                        dq=outs[0], dk=outs[1], dv=outs[2], workspace=workspace, stream=stream,
                        bias=bias or 0, device=dev.id)  # fmt: skip


def host_call(prim: Any):
    """The simulated device's form of a lowering (``BLU_FAKE_GPU=1``): the primitive's numpy
    impl written into the planned host buffers."""

    def call(ins, outs, workspace, **params) -> None:
        res = prim.impl(*ins, **params)
        for dst, r in zip(outs, res if prim.multiple_results else [res], strict=True):
            dst[...] = r

    return call


LOWERINGS: dict[Any, LibraryLowering] = {
    att.fwd_p: LibraryLowering(workspace=workspace_rule(False), cpu=host_call(att.fwd_p),
                               gpu=_gpu_fwd, applies=_gpu_applies(False),
                               kernels=kernels_rule(False)),
    att.bwd_p: LibraryLowering(workspace=workspace_rule(True), cpu=host_call(att.bwd_p),
                               gpu=_gpu_bwd, applies=_gpu_applies(True),
                               kernels=kernels_rule(True)),
}  # fmt: skip

for _prim, _lowering in LOWERINGS.items():
    register_library(_prim, _lowering, platform="cuda")
