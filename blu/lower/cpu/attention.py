"""The CPU's library lowerings of the fused attention primitives (``blu.lax.attention``): blu's
own MLIR kernels (``blu.lower.cpu.flash`` with ``flash_forward`` and ``flash_backward``:
FlashAttention-2 blocked over queries and keys, the scores as vectors) for the forward and the
backward, at every size (no ``(T, S)`` buffer exists; ``benchmarks/attention_cpu.py`` compares
them with the inlined decomposition). Compiled once per problem (sizes, dtype, options) through
the host compiler (``mlir/llvm.py``) and its disk cache when the executable first runs it
(library nodes are not in ``cache_keys()``), called on the planned buffers; their workspace (the
forward's transposed keys, the backward's ``D``, half-float accumulators and transposed queries
and output gradients) is planned scratch, and large problems are split by batch entries across
blu's threads. The JVP primitive (forward mode only) runs the blocked numpy kernels for problems
whose scores would exceed ``CPU_KERNEL_MIN_SCORES`` elements and inlines its decomposition below
that. ``implementation="cudnn"`` is an error here (it needs a CUDA target).
"""

from __future__ import annotations

import ctypes
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core.aval import ShapedArray
from blu.core.errors import BluValueError, with_user_line
from blu.lax import attention as att
from blu.lower.cpu import address, blas, flash_backward, flash_forward, spin
from blu.lower.cpu import flash as mlir_att
from blu.lower.cpu import threads as cpu_threads
from blu.lower.library import LibraryLowering, register_library
from blu.lower.mlir import llvm as mlir_cpu

CPU_KERNEL_MIN_SCORES = 1 << 24  # B*N*T*S at which the CPU runs the numpy JVP kernel


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
        emit = flash_forward.emit_forward if kind == "fwd" else flash_backward.emit_backward
        k = mlir_cpu.get_kernel(sp.text(kind), lambda sym: emit(sp, sym),
                                f"dot_product_attention_{kind} {sp}")  # fmt: skip
        _cpu_kernels[(kind, sp)] = k
    return k


def _call(kernel: mlir_cpu.Kernel, ins, outs, scratch: Sequence[int] = ()) -> None:
    """Call a compiled kernel on numpy arrays (inputs made dense, outputs written in place);
    recorded for a spinning worker (``spin.call``) when recording, where it needs no copy."""
    recording = spin.recording() is not None
    if recording and not all(x.flags.c_contiguous for x in (*ins, *outs)):
        raise spin.NotRecordable("attention operands that are not dense")
    ins = [np.ascontiguousarray(x) for x in ins]
    dense = [o if o.flags.c_contiguous else np.empty(o.shape, o.dtype) for o in outs]
    addrs = [address.data(x) for x in ins + dense] + list(scratch)
    ptrs = (ctypes.c_void_p * len(addrs))(*addrs)
    base = ctypes.addressof(ptrs)
    packed = (ctypes.c_void_p * len(addrs))(*[base + 8 * i for i in range(len(addrs))])
    spin.call(kernel.fn, packed, keep=(packed, ptrs, ins, dense))
    for o, d in zip(outs, dense):
        if o is not d:
            o[...] = d


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
    # (on spinning workers where they are at hand: a blocking pool thread waits for its core
    # while a spinning one holds it, which more than doubled the step's attention time)
    cpu_threads.run_parts(run, cuts, native=True)
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


def _sizes(avals: Sequence[ShapedArray]) -> tuple[int, ...]:
    q, k, v = avals[:3]
    return att.check_avals(q, k, v)


def _applies(avals, params, target: str) -> bool:
    if params["implementation"] == "cudnn":
        raise BluValueError(with_user_line(
            "dot_product_attention: implementation='cudnn' needs a CUDA target, "
            f"not {target}"))  # fmt: skip
    return True


def _jvp_applies(avals, params, target: str) -> bool:
    b, t, s, n = _sizes(avals)[:4]
    return b * n * t * s >= CPU_KERNEL_MIN_SCORES


def workspace_rule(backward: bool):
    """The planned scratch of the forward (``backward=False``) or backward kernel."""

    def workspace(avals, params, target: str) -> int:
        sp = cpu_spec(avals, params)
        return 0 if _empty(sp) else mlir_att.workspace_bytes(sp, "bwd" if backward else "fwd")

    return workspace


LOWERINGS: dict[Any, LibraryLowering] = {
    att.fwd_p: LibraryLowering(workspace=workspace_rule(False), cpu=_cpu_fwd, gpu=None,
                               applies=_applies),
    att.bwd_p: LibraryLowering(workspace=workspace_rule(True), cpu=_cpu_bwd, gpu=None,
                               applies=_applies),
    att.jvp_p: LibraryLowering(workspace=lambda avals, params, target: 0, cpu=_cpu_jvp, gpu=None,
                               applies=_jvp_applies),
}  # fmt: skip

for _prim, _lowering in LOWERINGS.items():
    register_library(_prim, _lowering, platform="cpu")
