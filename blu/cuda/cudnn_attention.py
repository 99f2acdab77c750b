"""cuDNN's fused scaled dot-product attention (SDPA), forward and backward, on raw device pointers.

The runtime half of the fused attention primitives (``blu.lax.attention``) on the GPU, for
bfloat16/float16: it knows shapes, dtypes and pointers, never a jaxpr. Through NVIDIA's
``nvidia-cudnn-frontend`` Python package (``import cudnn``) over cuDNN 9; no torch.

- ``SdpaSpec``: one problem (sizes, dtype, causal, scale, the bias's broadcast shape).
- ``unsupported(spec)``: why cuDNN cannot run it (or None); ``available()``: the package and
  a cuDNN backend load.
- ``workspace_size(spec, backward)``: bytes of scratch the call needs (the lowering's
  ``workspace`` rule plans them).
- ``forward(spec, q, k, v, out, lse, workspace, stream, bias=0)`` and ``backward(spec, q, k, v,
  out, lse, dout, dq, dk, dv, workspace, stream, bias=0)``: queue the work on ``stream``; every
  tensor argument is a device pointer (int).

Graphs are built once per ``(spec, direction, device)`` and cached (building takes about a
second); a cuDNN handle per device is bound to the caller's stream before each execution.

Memory layout: blu's ``(B, T, N, H)`` row-major arrays are given to cuDNN as its logical
``(B, N, T, H)`` ("BHSD") with strides ``(T*N*H, H, N*H, 1)`` (BSHD memory), as in the
frontend's samples; ``k``/``v`` likewise with ``K`` heads (grouped-query attention when
``K < N``), or, packed (``SdpaSpec.packed``), the token stride of the array they are slices
of; ``lse`` ``(B, N, T)`` float32 is cuDNN's ``stats`` ``(B, N, T, 1)``: the natural
log-sum-exp of each query's scaled, biased scores, the same statistics as blu's kernels; the
bias ``(1|B, 1|N, T, S)`` row-major. ``is_causal`` is cuDNN's top-left causal mask (query ``i``
sees keys ``j <= i``), as in blu and JAX.

API followed: cudnn-frontend's Python bindings as of v1.23.0 (``python/pygraph/sdpa.cpp``:
``pygraph.sdpa(q, k, v, generate_stats | is_inference, attn_scale, bias, use_causal_mask, ...)``
returning ``(o, stats)``; ``sdpa_backward(q, k, v, o, dO, stats, attn_scale, bias,
use_causal_mask, ...)`` returning ``(dQ, dK, dV)``; ``pygraph.tensor(name, dim, stride,
data_type, uid)``; ``validate``, ``build_operation_graph``, ``create_execution_plans([heur_mode.A,
heur_mode.FALLBACK])``, ``check_support``, ``build_plans``, ``get_workspace_size``;
``execute({uid: pointer}, workspace_pointer, handle=)``; ``create_handle()``,
``set_stream(handle=, stream=)``) and its samples ``51_sdpa_backward.ipynb`` and
``cudnn/experimental/ops/sdpa.py``; checked against the 1.32.0 wheel (the version
``scripts/fetch_gpu_wheels.sh`` fetches; DESIGN.md records it working on an H200 with cuDNN
9.19): there ``pygraph`` is a Python layer that captures ``sdpa``'s keywords and forwards them
to the same C++ binding at build time, ``create_handle`` returns a ``cudnn.Handle`` (accepted
by ``set_stream``, ``pygraph(handle=)`` and ``execute(handle=)``), and ``generate_stats``,
``use_causal_mask``, ``tensor(..., uid=)``, ``set_uid`` and ``execute({uid: int}, int)`` are
unchanged. Where a release rejects a keyword at the call (``generate_stats`` before ~1.5,
``use_causal_mask`` if ever removed) the older/newer spelling is tried.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from blu.cuda.errors import CudaError, CudaUnavailableError

# tensor uids of the graphs (fixed, so a variant pack is a dict of ints)
Q, K, V, BIAS, O, STATS, DO, DQ, DK, DV = 1, 2, 3, 4, 100, 101, 200, 201, 202, 203
MAX_HEAD_DIM = 128  # cuDNN 9 supports d <= 128 on every SM80+ GPU for forward and backward
MIN_BACKEND = 8903  # SDPA forward/backward with bf16/fp16 (cuDNN 8.9.3)


@dataclasses.dataclass(frozen=True)
class SdpaSpec:
    """One attention problem: ``q (b, t, n, h)``, ``k (b, s, kh, h)``, ``v (b, s, kh, hv)``.

    Attributes:
        dtype: ``"bfloat16"`` or ``"float16"`` (inputs and outputs; ``lse`` is float32).
        causal: top-left causal mask. scale: multiplies ``q k^T``.
        bias: ``(bb, nb)``, the leading sizes of a ``(bb, nb, t, s)`` bias (each 1 or full),
            or None for no bias.
        packed: ``q``, ``k``, ``v`` and ``dq``, ``dk``, ``dv`` are slices of one array (a QKV
            product's ``(b, t, 3, n, h)``): the elements between consecutive tokens of each
            (their pointers are the slices' starts); 0: each is its own row-major array.
    """

    b: int
    t: int
    s: int
    n: int
    kh: int
    h: int
    hv: int
    dtype: str
    causal: bool
    scale: float
    bias: tuple[int, int] | None = None
    packed: int = 0


def unsupported(spec: SdpaSpec) -> str | None:
    """Why cuDNN's SDPA cannot run ``spec`` (a sentence), or None when it can."""
    if spec.dtype not in ("bfloat16", "float16"):
        return f"cuDNN attention takes bfloat16/float16, not {spec.dtype}"
    for name, d in (("head", spec.h), ("value head", spec.hv)):
        if d % 8 or not 0 < d <= MAX_HEAD_DIM:
            return f"cuDNN attention needs {name} sizes that are multiples of 8 up to " \
                   f"{MAX_HEAD_DIM}, got {d}"  # fmt: skip
    if min(spec.b, spec.t, spec.s, spec.n, spec.kh) <= 0:
        return "cuDNN attention needs non-empty operands"
    if spec.n % spec.kh:
        return f"the key/value heads ({spec.kh}) must divide the query heads ({spec.n})"
    if spec.packed and (spec.packed % 8 or spec.packed < spec.n * max(spec.h, spec.hv)):
        return f"packed q, k, v need tokens 16-byte aligned ({spec.packed} elements apart)"
    return None


_lock = threading.Lock()
_cudnn: Any = None
_handles: dict[int, Any] = {}  # device -> cudnn handle (an int, or a cudnn.Handle in 1.32)
_graphs: dict[tuple, Any] = {}


def load() -> Any:
    """The ``cudnn`` module, loaded once.

    Raises:
        CudaUnavailableError: the package is missing or its cuDNN backend too old.
    """
    global _cudnn
    if _cudnn is None:
        try:
            import cudnn  # nvidia-cudnn-frontend
        except Exception as e:  # noqa: BLE001 - ImportError, or a failing library load
            raise CudaUnavailableError(
                "cuDNN attention needs nvidia-cudnn-frontend (`import cudnn`) and cuDNN 9 "
                f"(nvidia-cudnn-cu12/-cu13): pip install 'blu[cuda12]' ({e})"
            ) from e
        version = cudnn.backend_version()
        if version < MIN_BACKEND:
            raise CudaUnavailableError(f"cuDNN {version} is too old for fused attention "
                                       f"(needs {MIN_BACKEND} or newer)")  # fmt: skip
        _cudnn = cudnn
    return _cudnn


def available() -> bool:
    """True when ``import cudnn`` works and its cuDNN backend is new enough (never raises)."""
    try:
        load()
        return True
    except Exception:  # noqa: BLE001
        return False


def _handle(device: int) -> Any:
    with _lock:
        if device not in _handles:
            _handles[device] = load().create_handle()
        return _handles[device]


def _bshd(b: int, heads: int, seq: int, d: int, row: int = 0) -> tuple[list[int], list[int]]:
    """cuDNN's (B, H, S, D) dims and the strides of row-major (B, S, H, D) memory (``row``:
    the elements between tokens, when not ``heads * d``)."""
    row = row or heads * d
    return [b, heads, seq, d], [seq * row, d, row, 1]


def _io_type(cudnn: Any, spec: SdpaSpec) -> Any:
    return cudnn.data_type.BFLOAT16 if spec.dtype == "bfloat16" else cudnn.data_type.HALF


def _call(fn: Any, options: list[dict], **kw: Any) -> Any:
    """``fn(**kw, **option)`` with the first option this frontend version accepts."""
    err: Exception | None = None
    for opt in options:
        try:
            return fn(**kw, **opt)
        except TypeError as e:  # a keyword this version does not know
            err = e
    raise CudaError(f"cudnn-frontend: {fn.__name__} rejected every known spelling: {err}")


def _causal_options(cudnn: Any, causal: bool) -> list[dict]:
    if not causal:
        return [{}]
    opts: list[dict] = [{"use_causal_mask": True}]
    if hasattr(cudnn, "diagonal_alignment"):
        top_left = cudnn.diagonal_alignment.TOP_LEFT
        opts.append({"diagonal_alignment": top_left, "diagonal_band_right_bound": 0})
    return opts


def _inputs(cudnn: Any, g: Any, spec: SdpaSpec) -> dict[str, Any]:
    io = _io_type(cudnn, spec)
    t = lambda name, uid, dims: g.tensor(name=name, dim=dims[0], stride=dims[1], data_type=io,
                                         uid=uid)  # fmt: skip
    ts = {
        "q": t("q", Q, _bshd(spec.b, spec.n, spec.t, spec.h, spec.packed)),
        "k": t("k", K, _bshd(spec.b, spec.kh, spec.s, spec.h, spec.packed)),
        "v": t("v", V, _bshd(spec.b, spec.kh, spec.s, spec.hv, spec.packed)),
    }
    if spec.bias is not None:
        bb, nb = spec.bias
        ts["bias"] = g.tensor(name="bias", dim=[bb, nb, spec.t, spec.s],
                              stride=[nb * spec.t * spec.s, spec.t * spec.s, spec.s, 1],
                              data_type=io, uid=BIAS)  # fmt: skip
    return ts


def _stats_dims(spec: SdpaSpec) -> tuple[list[int], list[int]]:
    return [spec.b, spec.n, spec.t, 1], [spec.n * spec.t, spec.t, 1, 1]


def _build(spec: SdpaSpec, backward: bool, device: int) -> Any:
    cudnn = load()
    io = _io_type(cudnn, spec)
    f32 = cudnn.data_type.FLOAT
    g = cudnn.pygraph(handle=_handle(device), io_data_type=io, intermediate_data_type=f32,
                      compute_data_type=f32)  # fmt: skip
    ts = _inputs(cudnn, g, spec)
    common = dict(q=ts["q"], k=ts["k"], v=ts["v"], attn_scale=float(spec.scale))
    if "bias" in ts:
        common["bias"] = ts["bias"]
    causal = _causal_options(cudnn, spec.causal)
    od, os_ = _bshd(spec.b, spec.n, spec.t, spec.hv)
    if not backward:
        opts = [{**m, **c} for m in ({"generate_stats": True}, {"is_inference": False})
                for c in causal]  # fmt: skip
        o, stats = _call(g.sdpa, opts, name="sdpa", **common)
        o.set_output(True).set_dim(od).set_stride(os_).set_uid(O).set_data_type(io)
        sd, ss = _stats_dims(spec)
        stats.set_output(True).set_dim(sd).set_stride(ss).set_uid(STATS).set_data_type(f32)
    else:
        o = g.tensor(name="o", dim=od, stride=os_, data_type=io, uid=O)
        do = g.tensor(name="dO", dim=od, stride=os_, data_type=io, uid=DO)
        sd, ss = _stats_dims(spec)
        stats = g.tensor(name="stats", dim=sd, stride=ss, data_type=f32, uid=STATS)
        dq, dk, dv = _call(g.sdpa_backward, causal, name="sdpa_backward", o=o, dO=do,
                           stats=stats, **common)  # fmt: skip
        for x, uid, (dims, strides) in (
            (dq, DQ, _bshd(spec.b, spec.n, spec.t, spec.h, spec.packed)),
            (dk, DK, _bshd(spec.b, spec.kh, spec.s, spec.h, spec.packed)),
            (dv, DV, _bshd(spec.b, spec.kh, spec.s, spec.hv, spec.packed)),
        ):
            x.set_output(True).set_dim(dims).set_stride(strides).set_uid(uid).set_data_type(io)
    try:
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
    except Exception as e:  # noqa: BLE001 - cudnnGraphNotSupportedError, RuntimeError
        what = "backward" if backward else "forward"
        msg = f"cuDNN cannot build the {what} attention graph for {spec}: {e}"
        raise CudaError(msg, call="cudnn.build") from e
    return g


def graph(spec: SdpaSpec, backward: bool, device: int = 0) -> Any:
    """The built cuDNN graph for ``spec`` (cached per direction and device).

    Raises:
        CudaUnavailableError: no cudnn-frontend / cuDNN. CudaError: cuDNN cannot build it, or
        ``unsupported(spec)`` says why not.
    """
    key = (spec, backward, device)
    g = _graphs.get(key)
    if g is None:
        reason = unsupported(spec)
        if reason is not None:
            raise CudaError(reason, call="cudnn.build")
        g = _build(spec, backward, device)
        with _lock:
            _graphs.setdefault(key, g)
            g = _graphs[key]
    return g


def workspace_size(spec: SdpaSpec, backward: bool, device: int = 0) -> int:
    """Bytes of device scratch the forward (or backward) call needs."""
    return int(graph(spec, backward, device).get_workspace_size())


def _execute(spec: SdpaSpec, backward: bool, pack: dict[int, int], workspace: int, stream: int,
             device: int) -> None:  # fmt: skip
    g = graph(spec, backward, device)
    cudnn = load()
    h = _handle(device)
    cudnn.set_stream(handle=h, stream=int(stream))
    try:
        g.execute({u: int(p) for u, p in pack.items()}, int(workspace), handle=h)
    except Exception as e:  # noqa: BLE001
        what = "backward" if backward else "forward"
        msg = f"cuDNN attention {what} failed for {spec}: {e}"
        raise CudaError(msg, call="cudnn.execute") from e


def forward(spec: SdpaSpec, *, q: int, k: int, v: int, out: int, lse: int, workspace: int,
            stream: int, bias: int = 0, device: int = 0) -> None:  # fmt: skip
    """Queue ``out = softmax(q k^T * scale + bias) v`` and ``lse`` on ``stream``.

    Pointers: ``q (b, t, n, h)``, ``k (b, s, kh, h)``, ``v (b, s, kh, hv)``, ``out (b, t, n,
    hv)`` row-major in ``spec.dtype``; ``lse (b, n, t)`` float32; ``bias`` (when
    ``spec.bias``); ``workspace`` of ``workspace_size(spec, False)`` bytes.
    """
    pack = {Q: q, K: k, V: v, O: out, STATS: lse}
    if spec.bias is not None:
        pack[BIAS] = bias
    _execute(spec, False, pack, workspace, stream, device)


def backward(spec: SdpaSpec, *, q: int, k: int, v: int, out: int, lse: int, dout: int, dq: int,
             dk: int, dv: int, workspace: int, stream: int, bias: int = 0,
             device: int = 0) -> None:  # fmt: skip
    """Queue the gradients ``dq, dk, dv`` (shapes of ``q, k, v``) for the cotangent ``dout``
    of ``out``, from the forward's ``out`` and ``lse``; ``workspace`` of
    ``workspace_size(spec, True)`` bytes."""
    pack = {Q: q, K: k, V: v, O: out, STATS: lse, DO: dout, DQ: dq, DK: dk, DV: dv}
    if spec.bias is not None:
        pack[BIAS] = bias
    _execute(spec, True, pack, workspace, stream, device)


def clear_cache() -> None:
    """Forget the built graphs (handles stay)."""
    with _lock:
        _graphs.clear()
