"""The CUDA target's library lowering of ``conv_general_dilated``: cuDNN's convolutions
(``blu.cuda.cudnn_conv``) in place of the im2col decomposition (``blu.lax.conv_decomp``).

``problem(avals, params)`` reads one equation as a cuDNN problem, every operand in place (its
``dimension_numbers`` become cuDNN's ``(dims, strides)``):

- forward (``lhs_dilation`` 1, ``batch_group_count`` 1): ``fprop``, or, when the equation looks
  like a kernel gradient (its rhs window larger than its output), ``wgrad`` below;
- input dilation with unit window strides, ``batch_group_count`` 1: ``dgrad``. This is what
  the transpose to the lhs writes (``blu.lax.convolution._transpose_lhs``: the cotangent
  dilated by the forward's strides, convolved with the flipped kernel, in and out features
  swapped) and what ``conv_transpose`` is. The forward it is the gradient of has stride
  ``lhs_dilation``, dilation ``rhs_dilation`` and, with ``keff`` the dilated window and
  ``(b, a)`` the equation's padding, pre padding ``keff - 1 - b`` and post padding ``keff - 1 -
  a`` (raised to 0 when the forward's floor division absorbs it); the flipped kernel is read in
  cuDNN's ``CONVOLUTION`` mode, its feature axes swapped (with groups: ``O = G * O/G`` must be
  one stride, as for ``O/G = 1``, depthwise);
- ``feature_group_count`` 1 with ``lhs_dilation`` 1: ``wgrad``, as the transpose to the rhs
  writes it (``_transpose_rhs``: the input and the cotangent with batch and features swapped,
  the window strides and rhs dilation swapped, feature groups as batch groups): the forward has
  stride ``rhs_dilation``, dilation ``window_strides``, ``G = batch_group_count``.

Padding below 0 on the low side is not taken; on the high side it crops the image (a smaller
``dims``, the same strides) where the image is read. Anything else, a dtype cuDNN does not take,
no ``cudnn`` (or a graph cuDNN will not build): ``applies`` is False and ``prepare`` inlines the
decomposition as before. On the simulated device (``BLU_FAKE_GPU=1``) the lowering applies
whenever ``problem`` reads the equation, and runs ``cudnn_conv.reference`` on strided views of
the planned host buffers (so the simulated GPU checks the reading). The CPU's lowering is
``blu.lower.cpu.libraries``'s.

Float32 runs on TF32 tensor cores only under a precision that allows it (the equation's, else
the executable's, ``blu.config.default_matmul_precision`` when it was made: ``"tf32"``/
``"high"``/``"bf16"``), as cuBLASLt's products (``blu.cuda.cublaslt.compute_type``); the plan's
workspace is that engine's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from blu.core.aval import ShapedArray
from blu.core.config import config
from blu.cuda import cudnn_conv
from blu.cuda.device import fake_gpu
from blu.lax.conv_numpy import dilate_dim
from blu.lax.convolution import conv_general_dilated_p
from blu.lower.library import LibraryLowering, register_library

TF32_PRECISIONS = ("tf32", "high", "bf16")


def _row_major(shape: Sequence[int]) -> list[int]:
    st, acc = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        st[i], acc = acc, acc * shape[i]
    return st


def _canon(aval: ShapedArray, spec: Sequence[int], swap: bool = False) -> tuple[list, list]:
    """``aval``'s ``(dims, strides)`` in the role order ``spec`` (row-major memory), the first
    two roles swapped when ``swap``."""
    st = _row_major(aval.shape)
    order = [spec[1], spec[0], *spec[2:]] if swap else list(spec)
    return [aval.shape[a] for a in order], [st[a] for a in order]


def _post(n: int, lo: int, keff: int, s: int, m: int, crop: bool) -> tuple[int, int] | None:
    """``(image size, post padding >= 0)`` of a forward with ``m`` outputs from ``n`` inputs:
    the least post padding whose floor division gives ``m``, cropping the image when even none
    gives too many (``crop``: the image is read, not written)."""
    h0 = (m - 1) * s + keff - n - lo
    if h0 > -s:
        return n, max(h0, 0)
    return (n + h0, 0) if crop and n + h0 > 0 else None


def _tf32(dtype: str, params: dict, default: str | None = None) -> bool:
    p = params.get("precision")
    if isinstance(p, (tuple, list)):
        p = p[0]
    p = str(getattr(p, "name", p) or "default").lower()
    if p in ("default", "none"):
        p = default or config.default_matmul_precision
    return dtype == "float32" and p in TF32_PRECISIONS


def _spec(kind: str, x, w, y, geometry: list, dtype: str, out_dtype: str, params: dict,
          flip: bool = False) -> cudnn_conv.ConvSpec | None:  # fmt: skip
    """A ``ConvSpec`` from per-axis ``(pre, post, stride, dilation)``, 1-D and 0-D problems
    given unit spatial axes up to 2-D."""
    geometry = list(geometry)
    while len(geometry) < 2:  # a unit axis before the others, strided as if packed outside them
        x, w, y = (([*d[:2], 1, *d[2:]], [*s[:2], (d[2] * s[2] if len(d) > 2 else 1), *s[2:]])
                   for d, s in (x, w, y))  # fmt: skip
        geometry.insert(0, (0, 0, 1, 1))
    (xd, xs), (wd, ws), (yd, ys) = x, w, y
    pre, post, stride, dil = (tuple(g[i] for g in geometry) for i in range(4))
    flip = flip and math.prod(wd[2:]) > 1
    return cudnn_conv.ConvSpec(kind, tuple(xd), tuple(xs), tuple(wd), tuple(ws), tuple(yd),
                               tuple(ys), pre, post, stride, dil, dtype, out_dtype, flip,
                               _tf32(dtype, params))  # fmt: skip


def _fprop(lhs, rhs, out, p: dict):
    lspec, rspec, ospec = p["dimension_numbers"]
    x, w, y = _canon(lhs, lspec), _canon(rhs, rspec), _canon(out, ospec)
    geo = []
    for i, (n, k, m) in enumerate(zip(x[0][2:], w[0][2:], y[0][2:])):
        (lo, _), s, d = p["padding"][i], p["window_strides"][i], p["rhs_dilation"][i]
        got = _post(n, lo, dilate_dim(k, d), s, m, crop=True) if lo >= 0 else None
        if got is None:
            return None
        x[0][2 + i] = got[0]
        geo.append((lo, got[1], s, d))
    return "fprop", x, w, y, geo, False


def _dgrad(lhs, rhs, out, p: dict):
    lspec, rspec, ospec = p["dimension_numbers"]
    dy, dx = _canon(lhs, lspec), _canon(out, ospec)
    (ro, ri, *win), (s_ro, s_ri, *s_win) = _canon(rhs, rspec)
    g = p["feature_group_count"]
    cg = ro // g  # the forward's in features per group
    if g == 1:
        o_stride = s_ri
    elif ri == 1:
        o_stride = cg * s_ro
    elif ri * s_ri == cg * s_ro:
        o_stride = s_ri
    else:
        return None
    w = ([ri * g, cg, *win], [o_stride, s_ro, *s_win])
    geo = []
    for i, (m, k, n) in enumerate(zip(dy[0][2:], win, dx[0][2:])):
        (b, _), s, d = p["padding"][i], p["lhs_dilation"][i], p["rhs_dilation"][i]
        keff = dilate_dim(k, d)
        lo = keff - 1 - b
        got = _post(n, lo, keff, s, m, crop=False) if lo >= 0 else None
        if got is None:
            return None
        geo.append((lo, got[1], s, d))
    return "dgrad", dx, w, dy, geo, True


def _wgrad(lhs, rhs, out, p: dict):
    lspec, rspec, ospec = p["dimension_numbers"]
    x, dy, dw = _canon(lhs, lspec, True), _canon(rhs, rspec, True), _canon(out, ospec, True)
    geo = []
    for i, (n, m, k) in enumerate(zip(x[0][2:], dy[0][2:], dw[0][2:])):
        (lo, _), s, d = p["padding"][i], p["rhs_dilation"][i], p["window_strides"][i]
        got = _post(n, lo, dilate_dim(k, d), s, m, crop=True) if lo >= 0 else None
        if got is None:
            return None
        x[0][2 + i] = got[0]
        geo.append((lo, got[1], s, d))
    return "wgrad", x, dw, dy, geo, False


def readings(avals: Sequence[ShapedArray], params: dict, out: ShapedArray) -> list:
    """Every ``(kind, x, w, y, geometry, flip)`` reading of an equation (see the module
    docstring), the preferred first: a kernel gradient whose window equals its output's reads
    as a ``wgrad`` and as an ``fprop`` with batch and features swapped."""
    lhs, rhs = avals
    ld, ws = params["lhs_dilation"], params["window_strides"]
    fg, bg = params["feature_group_count"], params["batch_group_count"]
    ospec = params["dimension_numbers"].out_spec
    unit_ld = all(v == 1 for v in ld)
    wgrad = fwd = None
    prefer_wgrad = False
    if unit_ld and fg == 1:
        rwin = math.prod(rhs.shape[a] for a in params["dimension_numbers"].rhs_spec[2:])
        owin = math.prod(out.shape[a] for a in ospec[2:])
        prefer_wgrad = bg > 1 or rwin > owin  # a kernel gradient: its "kernel" the cotangent
        if prefer_wgrad or rwin == owin:
            wgrad = _wgrad(lhs, rhs, out, params)
    if bg == 1:
        if unit_ld:
            fwd = _fprop(lhs, rhs, out, params)
        elif all(v == 1 for v in ws):
            fwd = _dgrad(lhs, rhs, out, params)
    return [f for f in ((wgrad, fwd) if prefer_wgrad else (fwd, wgrad)) if f is not None]


_problems: dict[tuple, cudnn_conv.ConvSpec | None] = {}


def problem(avals: Sequence[ShapedArray], params: dict,
            precision: str | None = None) -> cudnn_conv.ConvSpec | None:  # fmt: skip
    """The cuDNN problem of a ``conv_general_dilated`` equation, or None when cuDNN cannot take
    it (no reading of it (``readings``) is ``native`` and supported: ``cudnn_conv.unsupported``);
    remembered, since each execution of the node asks again. ``precision``: the products'
    default precision (the executable's; None: ``blu.config``'s now), which decides whether
    float32 may run on TF32 engines."""
    default = precision or config.default_matmul_precision
    key = (tuple(avals), tuple(sorted(params.items())), default)
    if key not in _problems:
        sp = _problem(avals, params)
        if sp is not None and sp.dtype == "float32":
            sp = dataclasses.replace(sp, tf32=_tf32(sp.dtype, params, default))
        _problems[key] = sp
    return _problems[key]


def _problem(avals: Sequence[ShapedArray], params: dict) -> cudnn_conv.ConvSpec | None:
    return next((sp for sp in specs(avals, params) if native(sp)), None)


def ordered(dims: Sequence[int], strides: Sequence[int], last: bool) -> bool:
    """Whether a tensor in cuDNN's role order (``N, C, spatial...``; a filter ``K, C, ...``)
    lies in memory channels-last (``NHWC``/``KRSC``) or, ``last`` False, channels-first: each
    axis's stride at least the extent of those inside it (a cropped view still counts)."""
    inner = [1, *range(len(dims) - 1, 1, -1), 0] if last else list(range(len(dims) - 1, -1, -1))
    extent = 1
    for a in inner:
        if dims[a] != 1 and strides[a] < extent:
            return False
        extent = max(extent, strides[a] * dims[a]) if dims[a] != 1 else extent
    return True


def native(spec: cudnn_conv.ConvSpec) -> bool:
    """Whether cuDNN's engines take ``spec``'s layouts: image, filter and output all
    channels-last, or all channels-first. (Measured on an H200: an ``HWIO`` filter, ``RSCK`` in
    cuDNN's terms, gave wrong values and no error; ``conv_layouts`` transposes such operands.)"""
    roles = ((spec.x, spec.x_strides), (spec.w, spec.w_strides), (spec.y, spec.y_strides))
    return any(all(ordered(d, s, last) for d, s in roles) for last in (True, False))


def specs(avals: Sequence[ShapedArray], params: dict) -> list[cudnn_conv.ConvSpec]:
    """The cuDNN problems an equation reads in place (``readings``), whatever its layouts
    (``problem`` takes the first of them that is ``native``)."""
    lhs, rhs = avals
    if lhs.ndim > 5 or lhs.size == 0 or rhs.size == 0:
        return []
    out = conv_general_dilated_p.abstract_eval(lhs, rhs, **params)
    if out.size == 0:
        return []
    found = []
    for kind, x, w, y, geo, flip in readings(avals, params, out):
        spec = _spec(kind, x, w, y, geo, str(lhs.dtype), str(out.dtype), params, flip)
        if spec is not None and cudnn_conv.unsupported(spec) is None:
            found.append(spec)
    return found


def read(avals: Sequence[ShapedArray], params: dict) -> cudnn_conv.ConvSpec | None:
    """The preferred cuDNN problem an equation reads in place, whatever its layouts."""
    found = specs(avals, params)
    return found[0] if found else None


def _applies(avals, params, target: str) -> bool:
    """A setting, not a probe (``config.cudnn_conv``, on by default): a plan must not depend on
    the machine that lowers it (a GPU machine runs kernels a CPU machine compiled for it, with
    no compiler to make the decomposition's if cuDNN were found to refuse a problem there)."""
    return config.cudnn_conv and problem(avals, params) is not None


def _workspace(avals, params, target: str) -> int:
    """The workspace of the engine the call runs: planned under the executable's precision
    (``CudaBackend.prepare``), which the call gets as ``_precision``. (Sizing it for both TF32
    settings had planned a strict-float32 engine's workspace into every TF32 step.)"""
    spec = problem(avals, params)
    if spec is None or fake_gpu() or not cudnn_conv.available():
        return 0
    try:
        return cudnn_conv.workspace_size(spec)
    except Exception:  # noqa: BLE001 - a graph cuDNN will not build: the call raises its error
        return 0


def _gpu(dev, stream, ins, outs, workspace, in_avals, out_avals, _precision=None,
         **params) -> None:  # fmt: skip
    spec = problem(in_avals, params, _precision)
    assert spec is not None, "the lowering applied to an equation it cannot read"
    lhs, rhs, out = ins[0], ins[1], outs[0]
    kw = dict(workspace=workspace, stream=stream, device=dev.id)
    if spec.kind == "fprop":
        cudnn_conv.fprop(spec, x=lhs, w=rhs, y=out, **kw)
    elif spec.kind == "dgrad":
        cudnn_conv.dgrad(spec, dy=lhs, w=rhs, dx=out, **kw)
    else:
        cudnn_conv.wgrad(spec, x=lhs, dy=rhs, dw=out, **kw)


def run_reference(spec: cudnn_conv.ConvSpec, lhs: np.ndarray, rhs: np.ndarray,
                  out: np.ndarray) -> None:  # fmt: skip
    """Write ``cudnn_conv.reference`` of ``spec`` on the equation's host buffers into ``out``
    (the simulated device's call; also what the tests check ``problem`` with)."""
    dims = {"x": (spec.x, spec.x_strides), "w": (spec.w, spec.w_strides),
            "y": (spec.y, spec.y_strides)}  # fmt: skip
    roles = {"fprop": ("x", "w", "y"), "dgrad": ("y", "w", "x"), "wgrad": ("x", "y", "w")}
    a, b, c = roles[spec.kind]
    views = {a: cudnn_conv.view(lhs, *dims[a]), b: cudnn_conv.view(rhs, *dims[b]), c: None}
    res = cudnn_conv.reference(spec, views["x"], views["w"], views["y"])
    target = np.lib.stride_tricks.as_strided(
        out.reshape(-1), dims[c][0], [s * out.dtype.itemsize for s in dims[c][1]]
    )
    if res.size != out.size:
        raise AssertionError(f"{spec} writes {res.size} elements of {out.size}")
    target[...] = res.astype(out.dtype)


def _fake(ins, outs, workspace, **params) -> None:
    lhs, rhs = ins
    avals = [ShapedArray(a.shape, a.dtype) for a in ins]
    run_reference(problem(avals, params), np.asarray(lhs), np.asarray(rhs), outs[0])


register_library(
    conv_general_dilated_p,
    LibraryLowering(workspace=_workspace, cpu=_fake, gpu=_gpu, applies=_applies, precision=True),
    platform="cuda",
)
