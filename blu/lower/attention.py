"""Library lowerings of the fused attention primitives (``blu.lax.attention``).

- GPU, bfloat16/float16: cuDNN's fused SDPA forward and backward (``blu.cuda.cudnn_attention``),
  its workspace planned from ``workspace_size``, queued on the executable's stream. It applies
  without a boolean mask, without a gradient for the bias (``need_dbias``) or the log-sum-exp
  (``has_dlse``), with head sizes cuDNN takes, and unless ``implementation="blu"``; with
  ``implementation="cudnn"`` a case it cannot take is an error instead of a fallback.
- CPU: blu's own MLIR kernels (``blu.lower.mlir.attention``: FlashAttention-2's online softmax
  blocked over keys, vectorized over the head) for the forward and the backward, at every size:
  they measured faster than the inlined decomposition at the README's GPT-2 shape (B=32, T=64,
  4 heads of 32; ``benchmarks/attention_cpu.py``), and no ``(T, S)`` buffer exists. Compiled
  once per problem (sizes, dtype, options) through ``mlir_cpu.get_kernel`` and its disk cache
  when the executable first runs it (library nodes are not in ``cache_keys()``), called on the
  planned buffers; their workspace (the forward's transposed keys, the backward's ``D`` and
  half-float accumulators) is planned scratch. The JVP primitive (forward mode only) runs the
  blocked numpy kernels for problems whose scores would exceed ``CPU_KERNEL_MIN_SCORES``
  elements and inlines its decomposition below that.
- GPU, float32 (and bf16/fp16 where cuDNN does not apply, is off, or with
  ``implementation="blu"``): blu's own flash kernels (``blu.lower.mlir.flash_gpu``: MLIR,
  compiled like every fused kernel and cached), without a mask, a bias or their gradients,
  heads of 32, 64 or 128; for float32 on tensor cores (``blu.lower.mlir.flash_tc``: TF32 under
  ``default_matmul_precision="tf32"``, 3xTF32 under "fp32"; ``blu.config.flash_tensor_cores``
  off: CUDA cores). ``gpu_choice`` says which runs;
  ``blu.config.flash_attention`` turns the kernels off.
- Elsewhere (the JVP primitive on the GPU, masks and biases in float32) no lowering applies
  and ``prepare`` inlines the primitive's decomposition.

Imported by ``blu.lower`` once ``blu.lower.library`` exists (this module registers on import).
"""

from __future__ import annotations

import ctypes
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core.aval import ShapedArray
from blu.core.config import config
from blu.core.errors import BluValueError, with_user_line
from blu.cuda import cudnn_attention as cudnn_sdpa
from blu.lax import attention as att
from blu.lower.cpu import blas
from blu.lower.cpu import threads as cpu_threads
from blu.lower.library import LibraryLowering, register_library
from blu.lower.mlir import attention as mlir_att
from blu.lower.mlir import cache as kernel_cache
from blu.lower.mlir import flash_gpu, flash_tc, mlir_cpu

CPU_KERNEL_MIN_SCORES = 1 << 24  # B*N*T*S at which the CPU runs the numpy JVP kernel


def _sizes(avals: Sequence[ShapedArray]) -> tuple[int, ...]:
    q, k, v = avals[:3]
    return att.check_avals(q, k, v)


def spec(avals: Sequence[ShapedArray], params: dict, packed: int = 0) -> cudnn_sdpa.SdpaSpec:
    """The cuDNN problem of a forward or backward equation (``packed``: q, k, v slices of one
    array, tokens that many elements apart; ``blu.lower.gpu.packed_attention``)."""
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
        if not target.startswith("cuda"):
            if params["implementation"] == "cudnn":
                raise BluValueError(with_user_line(
                    f"dot_product_attention: implementation='cudnn' needs a CUDA target, "
                    f"not {target}"))  # fmt: skip
            return _cpu_applies(avals, params, target)
        return gpu_choice(avals, params, backward) is not None

    return applies


def _cpu_applies(avals, params, target: str) -> bool:
    return not target.startswith("cuda")


def cpu_spec(avals: Sequence[Any], params: dict) -> mlir_att.Spec:
    """The CPU kernels' problem of a forward or backward equation (avals or arrays)."""
    q, k, v, bias, mask, _ = att.split_args(avals, params["has_bias"], params["has_mask"])
    b, t, n, h = q.shape
    dt = np.dtype(q.dtype).name
    lead = lambda x: None if x is None else (int(x.shape[0]), int(x.shape[1]))  # noqa: E731
    return mlir_att.Spec(b, t, k.shape[1], n, k.shape[2], h, v.shape[3], dt, float(params["scale"]),
                         bool(params["is_causal"]), lead(bias), lead(mask),
                         bool(params.get("has_dlse", False)),
                         bool(params.get("need_dbias", False)))  # fmt: skip


_cpu_kernels: dict[tuple[str, mlir_att.Spec], mlir_cpu.Kernel] = {}


def _cpu_kernel(kind: str, sp: mlir_att.Spec) -> mlir_cpu.Kernel:
    k = _cpu_kernels.get((kind, sp))
    if k is None:
        emit = mlir_att.emit_forward if kind == "fwd" else mlir_att.emit_backward
        k = mlir_cpu.get_kernel(sp.text(kind), lambda sym: emit(sp, sym),
                                f"dot_product_attention_{kind} {sp}")  # fmt: skip
        _cpu_kernels[(kind, sp)] = k
    return k


def _call(kernel: mlir_cpu.Kernel, ins, outs, scratch: Sequence[int] = ()) -> None:
    """Call a compiled kernel on numpy arrays (inputs made dense, outputs written in place)."""
    ins = [np.ascontiguousarray(x) for x in ins]
    dense = [o if o.flags.c_contiguous else np.empty(o.shape, o.dtype) for o in outs]
    addrs = [x.ctypes.data for x in ins + dense] + list(scratch)
    ptrs = (ctypes.c_void_p * len(addrs))(*addrs)
    base = ctypes.addressof(ptrs)
    kernel.fn((ctypes.c_void_p * len(addrs))(*[base + 8 * i for i in range(len(addrs))]))
    for o, d in zip(outs, dense):
        if o is not d:
            o[...] = d


def _plain(avals, params) -> tuple[Sequence[ShapedArray], int]:
    """An equation's ``(q, k, v, ...)`` avals and its packing (0: q, k, v are arrays)."""
    return avals, 0


def workspace_rule(backward: bool, unpack=_plain):
    """The library lowering's ``workspace`` rule (``unpack``: the equation's avals as the
    plain primitive's and the packing, for ``blu.lower.gpu.packed_attention``)."""

    def workspace(avals, params, target: str) -> int:
        avals, packed = unpack(avals, params)
        if not target.startswith("cuda"):
            sp = cpu_spec(avals, params)
            return 0 if _empty(sp) else mlir_att.workspace_bytes(sp, "bwd" if backward else "fwd")
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
        if not target.startswith("cuda") or gpu_choice(avals, params, backward, packed) != "blu":
            return []
        sp = flash_spec(avals, params, backward, packed)
        emit = lambda sym: flash_gpu.emit(sp, sym, backward)  # noqa: E731
        label = f"flash attention {'backward' if backward else 'forward'} {sp}"
        canonical = flash_gpu.canonical(sp, backward)
        # the launches follow the spec the kernel was built for, even if the precision
        # setting changes before the executable runs
        _built[mlir_cpu.symbol(kernel_cache.kernel_key(canonical, target))] = sp
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


def _write(outs: list[np.ndarray], results: Sequence[np.ndarray]) -> None:
    for o, r in zip(outs, results, strict=True):
        o[...] = r


def _empty(sp: mlir_att.Spec) -> bool:
    return 0 in (sp.b, sp.t, sp.s, sp.n, sp.h, sp.hv)


def _cpu_fwd(ins, outs, workspace, **params) -> None:
    sp = cpu_spec(ins, params)
    if _empty(sp):  # nothing to compute: the numpy kernel fills the empty or zero results
        _write(outs, att.fwd_p.impl(*ins, **params))
        return
    _cpu_run("fwd", sp, ins, outs, workspace, params)


def _cpu_jvp(ins, outs, workspace, **params) -> None:
    _write(outs, att.jvp_p.impl(*ins, **params))


def _cpu_bwd(ins, outs, workspace, **params) -> None:
    sp = cpu_spec(ins, params)
    if _empty(sp):
        _write(outs, att.bwd_p.impl(*ins, **params))
        return
    _cpu_run("bwd", sp, ins, outs, workspace, params)


def _cpu_run(kind: str, sp: mlir_att.Spec, ins, outs, workspace, params: dict) -> None:
    """Run the ``kind`` kernel, split by batch entries across blu's threads when the problem is
    large enough (``blas.threads_for`` its flops) and the batch entries are independent (no
    bias gradient summed over a batch-broadcast bias)."""
    flops = 2.0 * sp.b * sp.n * sp.t * sp.s * (sp.h + sp.hv) * (0.5 if sp.is_causal else 1.0)
    cuts = cpu_threads.split(sp.b, blas.threads_for(flops * (2.5 if kind == "bwd" else 1.0)))
    one_bias = sp.bias is not None and sp.bias[0] == 1 and sp.b > 1
    if len(cuts) <= 1 or (kind == "bwd" and sp.need_dbias and one_bias):
        _call(_cpu_kernel(kind, sp), ins, outs, _scratch(sp, kind, workspace))
        return
    ins = [np.ascontiguousarray(x) for x in ins]
    dense = [o if o.flags.c_contiguous else np.empty(o.shape, o.dtype) for o in outs]
    # per operand, whether it has the batch as its leading dimension (a bias or mask may be
    # broadcast over it: leading size 1)
    lead = lambda ab: ab is not None and ab[0] == sp.b  # noqa: E731
    side = [lead(sp.bias)] * params["has_bias"] + [lead(sp.mask)] * params["has_mask"]
    in_batched = [True] * 3 + side + [True] * (len(ins) - 3 - len(side))
    out_batched = [True] * len(outs)
    if kind == "bwd" and sp.need_dbias:
        out_batched[-1] = lead(sp.bias)
    specs = {}
    for lo, hi in cuts:
        n = hi - lo
        if n not in specs:
            part = lambda ab: None if ab is None else ((n if ab[0] == sp.b else 1), ab[1])  # noqa: E731
            specs[n] = dataclasses.replace(sp, b=n, bias=part(sp.bias), mask=part(sp.mask))
    need = [mlir_att.workspace_bytes(specs[hi - lo], kind) for lo, hi in cuts]
    if workspace is None or workspace.nbytes < sum(need):
        workspace = _own_workspace[kind + "/split"] = np.empty(sum(need), np.uint8)
    at = [sum(need[:i]) for i in range(len(cuts))]
    scratch = {c: workspace[a : a + m] for c, a, m in zip(cuts, at, need)}

    def run(lo: int, hi: int) -> None:
        sp_p = specs[hi - lo]
        part_ins = [x[lo:hi] if b else x for x, b in zip(ins, in_batched)]
        part_outs = [o[lo:hi] if b else o for o, b in zip(dense, out_batched)]
        _call(_cpu_kernel(kind, sp_p), part_ins, part_outs,
              _scratch(sp_p, kind, scratch[(lo, hi)]))  # fmt: skip

    for sp_p in specs.values():  # compiled (or loaded) once, before the threads start
        _cpu_kernel(kind, sp_p)
    cpu_threads.run_parts(run, cuts)
    for o, d in zip(outs, dense):
        if o is not d:
            o[...] = d


def _scratch(sp: mlir_att.Spec, kind: str, workspace: np.ndarray | None) -> list[int]:
    """The addresses of a kernel's scratch buffers in its planned workspace (a fresh one when
    called without, e.g. from a benchmark)."""
    need = mlir_att.workspace_bytes(sp, kind)
    if workspace is None or workspace.nbytes < need:
        workspace = _own_workspace[kind] = np.empty(need, np.uint8)
    base = workspace.ctypes.data
    return [base + o for o in mlir_att.workspace_offsets(sp, kind)]


_own_workspace: dict[str, np.ndarray] = {}


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


def _jvp_applies(avals, params, target: str) -> bool:
    if target.startswith("cuda"):
        return False
    b, t, s, n = _sizes(avals)[:4]
    return b * n * t * s >= CPU_KERNEL_MIN_SCORES


LOWERINGS: dict[Any, LibraryLowering] = {
    att.fwd_p: LibraryLowering(workspace=workspace_rule(False), cpu=_cpu_fwd, gpu=_gpu_fwd,
                               applies=_gpu_applies(False), kernels=kernels_rule(False)),
    att.bwd_p: LibraryLowering(workspace=workspace_rule(True), cpu=_cpu_bwd, gpu=_gpu_bwd,
                               applies=_gpu_applies(True), kernels=kernels_rule(True)),
    att.jvp_p: LibraryLowering(workspace=lambda avals, params, target: 0, cpu=_cpu_jvp, gpu=None,
                               applies=_jvp_applies),
}  # fmt: skip

for _prim, _lowering in LOWERINGS.items():
    register_library(_prim, _lowering)
