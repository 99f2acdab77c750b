"""cuDNN's convolutions (forward, data gradient, filter gradient) on raw device pointers.

The runtime half of ``conv_general_dilated``'s CUDA library node (``blu.lower.cuda.convolution``
classifies the equations): it knows sizes, strides, dtypes and pointers, never a jaxpr. Through
NVIDIA's ``nvidia-cudnn-frontend`` Python package (``import cudnn``) over cuDNN 9; no torch.

- ``ConvSpec``: one problem in cuDNN's terms: the image ``x (N, C, spatial...)``, the filter
  ``w (K, C/G, window...)`` and the response ``y (N, K, out...)``, each as ``(dims, strides)``
  in elements (so any memory layout, NCHW or NHWC, OIHW or HWIO, is read in place), with the
  forward geometry (pre/post padding, stride, dilation; ``G = C / w.C``) and which of ``x``,
  ``w``, ``y`` the call writes (``kind``: ``"fprop"`` writes ``y``, ``"dgrad"`` ``x``,
  ``"wgrad"`` ``w``).
- ``unsupported(spec)``: why cuDNN cannot run it (or None); ``available()``: the package and a
  cuDNN backend load.
- ``workspace_size(spec)``: bytes of scratch the call needs.
- ``fprop``, ``dgrad``, ``wgrad``: queue the work on a stream; every tensor argument is a
  device pointer (int).
- ``reference(spec, x, w, y)``: the same computation in numpy float64 on strided views of host
  buffers (the simulated GPU's form, ``BLU_FAKE_GPU=1``).

Graphs are built once per ``(spec, device)`` and cached; a cuDNN handle per device (shared with
``blu.cuda.cudnn_attention``) is bound to the caller's stream before each execution.

Data types: bfloat16/float16 operands (the result in the same dtype or float32) and float32,
all accumulated in float32 (``compute_data_type`` FLOAT). Float32 is strict unless
``spec.tf32``: then engines with the numerical note ``TENSOR_CORE`` (TF32) may run it; without
it they are deselected (``deselect_numeric_notes``). ``spec.flip`` is cuDNN's ``CONVOLUTION``
mode (the window flipped): the input gradient that ``conv_general_dilated``'s transpose writes
with an already flipped kernel.

API followed: cudnn-frontend's Python bindings (``python/pygraph``: ``pygraph.conv_fprop(image,
weight, pre_padding, post_padding, stride, dilation, convolution_mode, compute_data_type,
name)`` returning ``Y``; ``conv_dgrad(loss, filter, ...)`` returning ``DX`` and
``conv_wgrad(image, loss, ...)`` returning ``DW``, whose dims are set on the output;
``tensor(name, dim, stride, data_type, uid)``) and its samples
(``samples/python/00_introduction.ipynb``, ``test/python/test_conv_*.py``), checked against the
1.32.0 wheel (``cudnn/_pygraph.py``'s structured-op table: the same ports and attributes,
``convolution_mode`` as ``cudnn._pybind_module.convolution_mode``, ``numerical_note.TENSOR_CORE``
and ``deselect_numeric_notes``); build and execution as in ``blu.cuda.cudnn_attention``.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from typing import Any

import numpy as np

from blu.cuda import cudnn_attention as _sdpa
from blu.cuda.errors import CudaError

X, W, Y = 1, 2, 3  # tensor uids: image (or its gradient), filter (or its gradient), response
KINDS = ("fprop", "dgrad", "wgrad")
DTYPES = ("bfloat16", "float16", "float32")
MIN_BACKEND = 90000  # the graph API's convolutions as this module builds them (cuDNN 9)


@dataclasses.dataclass(frozen=True)
class ConvSpec:
    """One convolution in cuDNN's terms (see the module docstring); sizes and strides in
    elements, 2 or 3 spatial axes (a 1-D convolution has a unit axis added).

    Attributes:
        kind: ``"fprop"`` (``y = conv(x, w)``), ``"dgrad"`` (``x = dgrad(y, w)``) or
            ``"wgrad"`` (``w = wgrad(x, y)``).
        x, x_strides: the image's ``(N, C, spatial...)`` sizes and strides.
        w, w_strides: the filter's ``(K, C/G, window...)``.
        y, y_strides: the response's ``(N, K, out...)``.
        pre, post, stride, dilation: the forward geometry per spatial axis (padding >= 0).
        dtype: the operands' dtype; out_dtype: the written tensor's.
        flip: cuDNN's ``CONVOLUTION`` mode (the window read flipped).
        tf32: float32 may run on TF32 tensor cores.
    """

    kind: str
    x: tuple[int, ...]
    x_strides: tuple[int, ...]
    w: tuple[int, ...]
    w_strides: tuple[int, ...]
    y: tuple[int, ...]
    y_strides: tuple[int, ...]
    pre: tuple[int, ...]
    post: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    dtype: str
    out_dtype: str
    flip: bool = False
    tf32: bool = False

    @property
    def groups(self) -> int:
        return self.x[1] // self.w[1] if self.w[1] else 0

    def out_sizes(self) -> tuple[int, ...]:
        """The forward's spatial output sizes from the image, window and geometry."""
        return tuple(
            (n + lo + hi - (k - 1) * d - 1) // s + 1
            for n, k, lo, hi, s, d in zip(self.x[2:], self.w[2:], self.pre, self.post,
                                          self.stride, self.dilation)
        )  # fmt: skip


def unsupported(spec: ConvSpec) -> str | None:
    """Why cuDNN cannot run ``spec`` (a sentence), or None when it can (as far as is known
    before building its graph)."""
    if spec.kind not in KINDS:
        return f"unknown convolution kind {spec.kind!r}"
    if spec.dtype not in DTYPES:
        return f"cuDNN convolutions take bfloat16, float16 or float32, not {spec.dtype}"
    if spec.out_dtype not in (spec.dtype, "float32"):
        return f"cuDNN convolutions of {spec.dtype} write {spec.dtype} or float32, not " \
               f"{spec.out_dtype}"  # fmt: skip
    nd = len(spec.x)
    if nd not in (4, 5) or not len(spec.w) == len(spec.y) == nd:
        return f"cuDNN convolutions take 2 or 3 spatial axes, got {nd - 2}"
    if min(spec.x + spec.w + spec.y) <= 0:
        return "cuDNN convolutions need non-empty operands"
    if min(spec.pre + spec.post) < 0 or min(spec.stride + spec.dilation) < 1:
        return "cuDNN convolutions need padding >= 0 and strides, dilations >= 1"
    g = spec.groups
    if g < 1 or spec.x[1] % spec.w[1] or spec.w[0] % g:
        return f"the filter {spec.w} does not split the image {spec.x} into groups"
    if spec.x[0] != spec.y[0] or spec.w[0] != spec.y[1] or spec.out_sizes() != spec.y[2:]:
        return f"the response {spec.y} is not the forward's of {spec.x} and {spec.w}"
    return None


_lock = threading.Lock()
_graphs: dict[tuple, Any] = {}


def load() -> Any:
    """The ``cudnn`` module, loaded once (``blu.cuda.cudnn_attention.load``).

    Raises:
        CudaUnavailableError: the package is missing or its cuDNN backend too old.
    """
    return _sdpa.load()


def available() -> bool:
    """True when ``import cudnn`` works and its cuDNN backend is 9 or newer (never raises)."""
    try:
        return load().backend_version() >= MIN_BACKEND
    except Exception:  # noqa: BLE001
        return False


def _dt(cudnn: Any, name: str) -> Any:
    t = cudnn.data_type
    return {"bfloat16": t.BFLOAT16, "float16": t.HALF, "float32": t.FLOAT}[name]


def _build(spec: ConvSpec, device: int) -> Any:
    cudnn = load()
    io, out_t, f32 = _dt(cudnn, spec.dtype), _dt(cudnn, spec.out_dtype), cudnn.data_type.FLOAT
    g = cudnn.pygraph(handle=_sdpa._handle(device), io_data_type=io,
                      intermediate_data_type=f32, compute_data_type=f32)  # fmt: skip
    t = lambda name, uid, dims, strides: g.tensor(name=name, dim=list(dims), stride=list(strides),
                                                  data_type=io, uid=uid)  # fmt: skip
    geo = dict(pre_padding=list(spec.pre), post_padding=list(spec.post), stride=list(spec.stride),
               dilation=list(spec.dilation), compute_data_type=f32)  # fmt: skip
    if spec.flip:
        geo["convolution_mode"] = cudnn._pybind_module.convolution_mode.CONVOLUTION
    if spec.kind == "fprop":
        x, w = t("x", X, spec.x, spec.x_strides), t("w", W, spec.w, spec.w_strides)
        out, uid, dims, strides = g.conv_fprop(image=x, weight=w, name="fprop", **geo), Y, \
            spec.y, spec.y_strides  # fmt: skip
    elif spec.kind == "dgrad":
        dy, w = t("dy", Y, spec.y, spec.y_strides), t("w", W, spec.w, spec.w_strides)
        out, uid, dims, strides = g.conv_dgrad(loss=dy, filter=w, name="dgrad", **geo), X, \
            spec.x, spec.x_strides  # fmt: skip
    else:
        x, dy = t("x", X, spec.x, spec.x_strides), t("dy", Y, spec.y, spec.y_strides)
        out, uid, dims, strides = g.conv_wgrad(image=x, loss=dy, name="wgrad", **geo), W, \
            spec.w, spec.w_strides  # fmt: skip
    out.set_output(True).set_dim(list(dims)).set_stride(list(strides)).set_uid(uid)
    out.set_data_type(out_t)
    try:
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        if spec.dtype == "float32" and not spec.tf32:  # strict float32: no TF32 engine
            notes = cudnn.numerical_note
            g.deselect_numeric_notes([notes.TENSOR_CORE, notes.DOWN_CONVERT_INPUTS])
        g.check_support()
        g.build_plans()
    except Exception as e:  # noqa: BLE001 - cudnnGraphNotSupportedError, RuntimeError
        raise CudaError(f"cuDNN cannot build the convolution graph for {spec}: {e}",
                        call="cudnn.build") from e  # fmt: skip
    return g


def graph(spec: ConvSpec, device: int = 0) -> Any:
    """The built cuDNN graph for ``spec`` (cached per device).

    Raises:
        CudaUnavailableError: no cudnn-frontend / cuDNN. CudaError: cuDNN cannot build it, or
        ``unsupported(spec)`` says why not.
    """
    key = (spec, device)
    g = _graphs.get(key)
    if g is None:
        reason = unsupported(spec)
        if reason is not None:
            raise CudaError(reason, call="cudnn.build")
        g = _build(spec, device)
        with _lock:
            g = _graphs.setdefault(key, g)
    return g


def workspace_size(spec: ConvSpec, device: int = 0) -> int:
    """Bytes of device scratch the call needs."""
    return int(graph(spec, device).get_workspace_size())


def _execute(spec: ConvSpec, pack: dict[int, int], workspace: int, stream: int,
             device: int) -> None:  # fmt: skip
    g = graph(spec, device)
    cudnn = load()
    h = _sdpa._handle(device)
    cudnn.set_stream(handle=h, stream=int(stream))
    try:
        g.execute({u: int(p) for u, p in pack.items()}, int(workspace), handle=h)
    except Exception as e:  # noqa: BLE001
        raise CudaError(f"cuDNN convolution failed for {spec}: {e}", call="cudnn.execute") from e


def fprop(spec: ConvSpec, *, x: int, w: int, y: int, workspace: int, stream: int,
          device: int = 0) -> None:  # fmt: skip
    """Queue ``y = conv(x, w)`` on ``stream`` (pointers laid out as ``spec`` says; a
    ``workspace`` of ``workspace_size(spec)`` bytes)."""
    _execute(spec, {X: x, W: w, Y: y}, workspace, stream, device)


def dgrad(spec: ConvSpec, *, dy: int, w: int, dx: int, workspace: int, stream: int,
          device: int = 0) -> None:  # fmt: skip
    """Queue the image gradient ``dx`` (``spec.x``) of the cotangent ``dy`` (``spec.y``)."""
    _execute(spec, {Y: dy, W: w, X: dx}, workspace, stream, device)


def wgrad(spec: ConvSpec, *, x: int, dy: int, dw: int, workspace: int, stream: int,
          device: int = 0) -> None:  # fmt: skip
    """Queue the filter gradient ``dw`` (``spec.w``) of the cotangent ``dy``."""
    _execute(spec, {X: x, Y: dy, W: dw}, workspace, stream, device)


def clear_cache() -> None:
    """Forget the built graphs (handles stay)."""
    with _lock:
        _graphs.clear()


# ---- the numpy form (the simulated GPU) --------------------------------------------------------


def view(buf: np.ndarray, dims: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """The ``(dims, strides)`` tensor (strides in elements) over a contiguous buffer."""
    flat = np.ascontiguousarray(buf).reshape(-1) if not buf.flags.c_contiguous else buf.reshape(-1)
    item = flat.dtype.itemsize
    return np.lib.stride_tricks.as_strided(flat, dims, [s * item for s in strides],
                                           writeable=False)  # fmt: skip


def _windows(spec: ConvSpec):
    """For each window offset: its index and the padded image's slices it meets."""
    out = spec.y[2:]
    for ks in itertools.product(*(range(k) for k in spec.w[2:])):
        sl = tuple(slice(k * d, k * d + (m - 1) * s + 1, s)
                   for k, d, m, s in zip(ks, spec.dilation, out, spec.stride))  # fmt: skip
        yield ks, sl


def reference(spec: ConvSpec, x: np.ndarray | None, w: np.ndarray | None,
              y: np.ndarray | None) -> np.ndarray:  # fmt: skip
    """The tensor ``spec.kind`` writes (``y``, ``x`` or ``w``, float64, in cuDNN's dims) from
    the two it reads (``(dims, strides)`` views as ``view`` gives; the written one None)."""
    g, (n, c), k = spec.groups, spec.x[:2], spec.w[0]
    sp = len(spec.x) - 2
    if w is not None:
        w = np.asarray(w, np.float64).reshape(g, k // g, c // g, *spec.w[2:])
        if spec.flip:
            w = w[(Ellipsis, *[slice(None, None, -1)] * sp)]
    if y is not None:
        y = np.asarray(y, np.float64).reshape(n, g, k // g, *spec.y[2:])
    pad = [(0, 0), (0, 0)] + list(zip(spec.pre, spec.post))
    padded = tuple(a + lo + hi for a, lo, hi in zip(spec.x[2:], spec.pre, spec.post))
    if x is not None:
        xp = np.pad(np.asarray(x, np.float64), pad).reshape(n, g, c // g, *padded)
    if spec.kind == "fprop":
        acc = np.zeros((n, g, k // g, *spec.y[2:]))
        for ks, sl in _windows(spec):
            acc += np.einsum("ngc...,gkc->ngk...", xp[(Ellipsis, *sl)], w[(Ellipsis, *ks)])
        return acc.reshape(spec.y)
    if spec.kind == "dgrad":
        dxp = np.zeros((n, g, c // g, *padded))
        for ks, sl in _windows(spec):
            dxp[(Ellipsis, *sl)] += np.einsum("ngk...,gkc->ngc...", y, w[(Ellipsis, *ks)])
        inner = tuple(slice(lo, lo + a) for lo, a in zip(spec.pre, spec.x[2:]))
        return dxp.reshape(n, c, *padded)[(Ellipsis, *inner)]
    dw = np.zeros((g, k // g, c // g, *spec.w[2:]))
    ys = y.reshape(n, g, k // g, -1)
    for ks, sl in _windows(spec):
        xs = xp[(Ellipsis, *sl)].reshape(n, g, c // g, -1)
        dw[(Ellipsis, *ks)] = np.einsum("ngcs,ngks->gkc", xs, ys)
    if spec.flip:
        dw = dw[(Ellipsis, *[slice(None, None, -1)] * sp)]
    return dw.reshape(spec.w)
