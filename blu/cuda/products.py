"""``dot_general`` on DeviceArrays through the device's cuBLASLt handle (one library call, no
copies: see ``blu.cuda.cublaslt`` for the operand mapping, precisions and epilogues)."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from blu.cuda.array import DeviceArray
from blu.cuda.cublaslt import _NEEDS_AUX, _NEEDS_BIAS, _WRITES_BIAS, GemmSpec, gemm_spec
from blu.cuda.profile import profiler


def output_shape(lhs_shape: tuple, rhs_shape: tuple, dimension_numbers: Any) -> tuple:
    """``(batch..., lhs free..., rhs free...)``, as dot_general's."""
    (lc, rc), (lb, rb) = dimension_numbers
    lf = [d for d in range(len(lhs_shape)) if d not in lc and d not in lb]
    rf = [d for d in range(len(rhs_shape)) if d not in rc and d not in rb]
    return (
        tuple(lhs_shape[d] for d in lb)
        + tuple(lhs_shape[d] for d in lf)
        + tuple(rhs_shape[d] for d in rf)
    )


def aux_shape(spec: GemmSpec, batch_shape: tuple) -> tuple:
    """Row-major shape of the GELU aux matrix: ``(batch..., M, round_up(N, 8))``."""
    return tuple(batch_shape) + (spec.n, spec.aux_ld)


def dot_general(
    lhs: DeviceArray,
    rhs: DeviceArray,
    dimension_numbers: Any,
    *,
    precision: str = "default",
    preferred_element_type: Any = None,
    epilogue: str = "none",
    bias: DeviceArray | None = None,
    aux: DeviceArray | None = None,
    out: DeviceArray | None = None,
    accumulate: bool = False,
) -> Any:
    """``lax.dot_general`` on the GPU, with an optional cuBLASLt epilogue.

    Args:
        lhs, rhs: operands on the same device; float32, float64, bfloat16 or float16.
        dimension_numbers: ``((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))``;
            batch dimensions must lead both operands (see ``cublaslt.gemm_spec``).
        precision: ``"default"``, ``"fp32"``/``"highest"``, ``"tf32"``/``"high"``, ``"bf16"``.
        preferred_element_type: output dtype (default: the operands'; float32 for bf16/f16
            operands gives fp32 outputs).
        epilogue: ``"none"``, ``"bias"``, ``"relu"``, ``"relu_bias"``, ``"gelu"``,
            ``"gelu_bias"``, ``"gelu_aux"``, ``"gelu_aux_bias"``, ``"dgelu"``, ``"dgelu_bgrad"``,
            ``"bgrad_rhs"``, ``"bgrad_lhs"``.
        bias: ``(N,)`` bias in the output dtype, for ``*bias`` epilogues.
        aux: GELU aux input ``(batch..., M, round_up(N, 8))`` for ``dgelu*``.
        out: write into this array (shape and dtype of the result) instead of a new one.
        accumulate: add the product into ``out``.

    Returns:
        The ``(batch..., M..., N...)`` result; with ``gelu_aux*`` also the aux matrix; with
        ``*bgrad*`` also the bias gradient (``(batch..., N)`` for ``dgelu_bgrad``/``bgrad_rhs``,
        ``(batch..., M)`` for ``bgrad_lhs``).

    Raises:
        BluValueError: operands on different devices, a layout cuBLASLt cannot read without a
            copy, missing/ill-shaped epilogue inputs.
        BluTypeError: unsupported dtypes.
    """
    dev = lhs.device
    if rhs.device is not dev:
        raise BluValueError(f"dot_general: operands on {lhs.device} and {rhs.device}")
    if lhs.dtype != rhs.dtype:
        raise BluTypeError(
            f"dot_general on the GPU: operand dtypes differ ({lhs.dtype}, {rhs.dtype})"
        )
    spec = gemm_spec(lhs.shape, rhs.shape, dimension_numbers)
    if spec is None:
        raise BluValueError(
            f"dot_general {lhs.shape} x {rhs.shape} with {dimension_numbers}: cuBLASLt cannot "
            "read these layouts without a copy (transpose an operand first)"
        )
    out_dtype = np.dtype(preferred_element_type or lhs.dtype)
    shape = output_shape(lhs.shape, rhs.shape, dimension_numbers)
    nb = len(dimension_numbers[1][0])
    batch_shape = shape[:nb]
    if out is None:
        if accumulate:
            raise BluValueError("dot_general: accumulate=True needs an out array")
        out = DeviceArray.empty(
            shape, out_dtype, dev, tag=f"dot_general {_short(shape, out_dtype)}"
        )
    elif out.shape != shape or out.dtype != out_dtype or out.device is not dev:
        raise BluShapeError(
            f"dot_general: out is {_short(out.shape, out.dtype)} on {out.device}, "
            f"expected {_short(shape, out_dtype)} on {dev}"
        )
    extra: list[DeviceArray] = []
    bias_ptr = aux_ptr = 0
    if epilogue in _NEEDS_BIAS:
        _expect("bias", bias, (spec.m,), out_dtype, dev)
        bias_ptr = bias.ptr  # type: ignore[union-attr]
    if epilogue in _WRITES_BIAS:
        n_bias = spec.n if epilogue == "bgrad_lhs" else spec.m
        grad = DeviceArray.empty(batch_shape + (n_bias,), out_dtype, dev, tag="bias gradient")
        bias_ptr = grad.ptr
    if epilogue in ("gelu_aux", "gelu_aux_bias"):
        aux_out = DeviceArray.empty(aux_shape(spec, batch_shape), out_dtype, dev, tag="GELU aux")
        aux_ptr = aux_out.ptr
        extra.append(aux_out)
    elif epilogue in _NEEDS_AUX:
        _expect("aux", aux, aux_shape(spec, batch_shape), out_dtype, dev)
        aux_ptr = aux.ptr  # type: ignore[union-attr]
    if epilogue in _WRITES_BIAS:
        extra.append(grad)
    if math.prod(shape) and spec.k == 0:
        if epilogue != "none":
            raise BluValueError(f"dot_general: epilogue {epilogue!r} with an empty contraction")
        if not accumulate:
            dev.memset(out.ptr, 0, out.nbytes)
    elif math.prod(shape):
        call = functools.partial(
            dev.matmul_handle().matmul,
            spec,
            rhs.ptr,
            lhs.ptr,
            out.ptr,
            in_dtype=lhs.dtype,
            out_dtype=out_dtype,
            precision=precision,
            epilogue=epilogue,
            bias_ptr=bias_ptr,
            aux_ptr=aux_ptr,
            accumulate=accumulate,
            stream=dev.stream_id,
        )
        if profiler.enabled:
            name = f"cublasLt {_short(lhs.shape, lhs.dtype)} x {_short(rhs.shape, rhs.dtype)}"
            with profiler.region(f"{name} {epilogue}", dev.stream_id):
                call()
        else:
            call()
    return (out, *extra) if extra else out


def _short(shape: tuple, dtype: Any) -> str:
    from blu.core import dtypes

    return f"{dtypes.short_name(np.dtype(dtype))}[{','.join(map(str, shape))}]"


def _expect(name: str, x: DeviceArray | None, shape: tuple, dtype: np.dtype, dev: Any) -> None:
    if x is None:
        raise BluValueError(f"dot_general: this epilogue needs `{name}` {_short(shape, dtype)}")
    if x.shape != tuple(shape) or x.dtype != dtype or x.device is not dev:
        raise BluShapeError(
            f"dot_general: `{name}` is {_short(x.shape, x.dtype)} on {x.device}, "
            f"expected {_short(shape, dtype)} on {dev}"
        )
