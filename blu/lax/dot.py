"""Matrix products: dot_general (XLA's DotGeneral) and the wrappers dot and batch_matmul.

``dimension_numbers = ((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))``; the output
has the batch dimensions first (in the order given), then lhs's free dimensions, then rhs's free
dimensions, each in their operand's order (JAX's convention).
"""

from __future__ import annotations

__all__ = ["dot_general", "dot", "batch_matmul", "Precision"]

import enum
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax.elementwise import convert_element_type
from blu.lax.shapes import transpose
from blu.transforms.ad_util import Zero, add_tangents, is_undefined, tangent_aval

DimensionNumbers = tuple[
    tuple[tuple[int, ...], tuple[int, ...]], tuple[tuple[int, ...], tuple[int, ...]]
]

# Accepted precision names (the numpy impl always computes in full precision of the compute
# dtype; lowerings map these to cuBLAS compute types, as blu.default_matmul_precision does).
_PRECISIONS = ("default", "high", "highest", "fp32", "tf32", "bf16")


def _free_dims(ndim: int, contracting: Sequence[int], batch: Sequence[int]) -> list[int]:
    return [i for i in range(ndim) if i not in contracting and i not in batch]


def _compute_dtype(in_dtype: np.dtype, out_dtype: np.dtype) -> np.dtype:
    """The dtype numpy multiplies in: bf16/f16 in float32 (numpy lacks fast kernels for them)."""
    if dtypes.is_complex(in_dtype) or dtypes.is_complex(out_dtype):
        wide = dtypes.complex128 in (in_dtype, out_dtype) or dtypes.float64 in (in_dtype, out_dtype)
        return dtypes.complex128 if wide else dtypes.complex64
    if dtypes.is_float(in_dtype) or dtypes.is_float(out_dtype):
        return dtypes.float64 if dtypes.float64 in (in_dtype, out_dtype) else dtypes.float32
    if in_dtype == dtypes.bool_ and out_dtype == dtypes.bool_:
        return dtypes.bool_
    return np.promote_types(in_dtype, out_dtype)


# ---- the primitive -----------------------------------------------------------------------------

dot_general_p = Primitive("dot_general")


@dot_general_p.def_impl
def _dot_general_impl(lhs, rhs, *, dimension_numbers, precision, preferred_element_type):
    (lc, rc), (lb, rb) = dimension_numbers
    lf, rf = _free_dims(lhs.ndim, lc, lb), _free_dims(rhs.ndim, rc, rb)
    out_dtype = preferred_element_type or lhs.dtype
    comp = _compute_dtype(lhs.dtype, out_dtype)
    size = lambda x, axes: math.prod(x.shape[a] for a in axes)  # noqa: E731
    # as (batch, free, contracting) @ (batch, contracting, free): one np.matmul (BLAS for floats)
    l3 = np.transpose(lhs, lb + tuple(lf) + lc).astype(comp, copy=False)
    r3 = np.transpose(rhs, rb + rc + tuple(rf)).astype(comp, copy=False)
    l3 = l3.reshape(size(lhs, lb), size(lhs, lf), size(lhs, lc))
    r3 = r3.reshape(size(rhs, rb), size(rhs, rc), size(rhs, rf))
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.matmul(l3, r3)
    shape = tuple(lhs.shape[a] for a in lb + tuple(lf)) + tuple(rhs.shape[a] for a in rf)
    return out.reshape(shape).astype(out_dtype, copy=False)


def _dn_error(msg: str, lhs: ShapedArray, rhs: ShapedArray, dn: Any) -> BluShapeError:
    return BluShapeError(
        with_user_line(
            f"dot_general: {msg} for lhs {lhs.str_short()} and rhs {rhs.str_short()} "
            f"with dimension_numbers {dn}"
        )
    )


@dot_general_p.def_abstract_eval
def _dot_general_abstract_eval(
    lhs: ShapedArray, rhs: ShapedArray, *, dimension_numbers, precision, preferred_element_type
) -> ShapedArray:
    (lc, rc), (lb, rb) = dn = dimension_numbers
    if len(lc) != len(rc) or len(lb) != len(rb):
        raise _dn_error("lhs and rhs need as many contracting and batch dimensions", lhs, rhs, dn)
    for name, x, axes in (("lhs", lhs, lc + lb), ("rhs", rhs, rc + rb)):
        if len(set(axes)) != len(axes) or any(not 0 <= a < x.ndim for a in axes):
            raise _dn_error(
                f"{name} contracting/batch dimensions are not distinct axes", lhs, rhs, dn
            )
    for kind, la, ra in (("contracting", lc, rc), ("batch", lb, rb)):
        if any(lhs.shape[i] != rhs.shape[j] for i, j in zip(la, ra)):
            raise _dn_error(f"{kind} dimensions differ in size", lhs, rhs, dn)
    if lhs.dtype != rhs.dtype:
        raise BluTypeError(
            with_user_line(
                f"dot_general: operands must have equal dtypes, got lhs {lhs.str_short()} and "
                f"rhs {rhs.str_short()}"
            )
        )
    out_dtype = preferred_element_type or lhs.dtype
    if (dtypes.is_float(lhs.dtype) and not dtypes.is_float(out_dtype)) or (
        out_dtype == dtypes.bool_ and lhs.dtype != dtypes.bool_
    ):
        raise BluTypeError(
            with_user_line(
                f"dot_general: preferred_element_type {out_dtype} cannot hold the product of "
                f"{lhs.str_short()} and {rhs.str_short()}"
            )
        )
    lf, rf = _free_dims(lhs.ndim, lc, lb), _free_dims(rhs.ndim, rc, rb)
    shape = tuple(lhs.shape[a] for a in lb + tuple(lf)) + tuple(rhs.shape[a] for a in rf)
    weak = lhs.weak_type and rhs.weak_type and preferred_element_type is None
    return ShapedArray(shape, out_dtype, weak)


@dot_general_p.def_jvp
def _dot_general_jvp(primals, tangents, **params):
    (lhs, rhs), (t_lhs, t_rhs) = primals, tangents
    out = dot_general_p.bind(lhs, rhs, **params)
    t_out: Any = Zero(tangent_aval(get_aval(out)))
    if not dtypes.is_inexact(get_aval(out).dtype):
        return out, t_out
    if not isinstance(t_lhs, Zero):
        t_out = add_tangents(t_out, dot_general_p.bind(t_lhs, rhs, **params))
    if not isinstance(t_rhs, Zero):
        t_out = add_tangents(t_out, dot_general_p.bind(lhs, t_rhs, **params))
    return out, t_out


def _ranges_like(*xs: Sequence[Any]) -> list[tuple[int, ...]]:
    """Consecutive index ranges with the lengths of ``xs``."""
    out, start = [], 0
    for x in xs:
        out.append(tuple(range(start, start + len(x))))
        start += len(x)
    return out


def _transpose_lhs(ct, x_aval, y, dimension_numbers, precision, preferred_element_type,
                   swap_ans=False):  # fmt: skip
    """The cotangent of lhs (after jax/_src/lax/lax.py ``_dot_general_transpose_lhs``): contract
    ``ct`` with ``y`` over y's free dims, then permute the result into lhs's axis order."""
    (x_contract, y_contract), (x_batch, y_batch) = dimension_numbers
    y_aval = get_aval(y)
    x_kept = _free_dims(x_aval.ndim, x_contract, x_batch)
    y_kept = _free_dims(y_aval.ndim, y_contract, y_batch)
    if swap_ans:
        ans_batch, ans_y, _ = _ranges_like(x_batch, y_kept, x_kept)
    else:
        ans_batch, _, ans_y = _ranges_like(x_batch, x_kept, y_kept)
    dims = ((ans_y, tuple(y_kept)), (ans_batch, tuple(y_batch)))
    x_contract_sorted_by_y = [x_contract[i] for i in np.argsort(y_contract)]
    out_axes = tuple(int(i) for i in np.argsort(list(x_batch) + x_kept + x_contract_sorted_by_y))
    # the cotangent takes the operands' dtype (e.g. bf16 with f32 accumulation), as autocast does
    ct = convert_element_type(ct, y_aval.dtype)
    x_bar = dot_general_p.bind(
        ct, y, dimension_numbers=dims, precision=precision,
        preferred_element_type=preferred_element_type,
    )  # fmt: skip
    return convert_element_type(transpose(x_bar, out_axes), x_aval.dtype)


@dot_general_p.def_transpose
def _dot_general_transpose(ct, lhs, rhs, *, dimension_numbers, precision, preferred_element_type):
    if isinstance(ct, Zero):
        return [None, None]
    if is_undefined(lhs) and is_undefined(rhs):
        raise NotImplementedError("dot_general is bilinear, not linear in both operands at once")
    if is_undefined(lhs):
        x_bar = _transpose_lhs(
            ct, lhs.aval, rhs, dimension_numbers, precision, preferred_element_type
        )
        return [x_bar, None]
    (lc, rc), (lb, rb) = dimension_numbers
    swapped = ((rc, lc), (rb, lb))
    y_bar = _transpose_lhs(
        ct, rhs.aval, lhs, swapped, precision, preferred_element_type, swap_ans=True
    )
    return [None, y_bar]


@dot_general_p.def_batch
def _dot_general_batch(axis_size, args, dims, *, dimension_numbers, **params):
    """A batched operand's batch axis becomes a batch dimension of the product (both batched)
    or one of its free dimensions (one batched); report where it lands in the output."""
    (lhs, rhs), (ld, rd) = args, dims
    (lc, rc), (lb, rb) = dimension_numbers

    def shift(axes, d):
        return tuple(a + (a >= d) for a in axes)

    if ld is not None and rd is not None:
        dn = ((shift(lc, ld), shift(rc, rd)), ((ld,) + shift(lb, ld), (rd,) + shift(rb, rd)))
        return dot_general_p.bind(lhs, rhs, dimension_numbers=dn, **params), 0
    if ld is not None:
        lc, lb = shift(lc, ld), shift(lb, ld)
        out_d = len(lb) + _free_dims(get_aval(lhs).ndim, lc, lb).index(ld)
    else:
        rc, rb = shift(rc, rd), shift(rb, rd)
        n_lhs_free = get_aval(lhs).ndim - len(lc) - len(lb)
        out_d = len(lb) + n_lhs_free + _free_dims(get_aval(rhs).ndim, rc, rb).index(rd)
    dn = ((lc, rc), (lb, rb))
    return dot_general_p.bind(lhs, rhs, dimension_numbers=dn, **params), out_d


# ---- the lax functions users call --------------------------------------------------------------


class Precision(enum.Enum):
    """``jax.lax.Precision``: the ``precision=`` of ``dot_general`` / ``dot`` / ``conv``.

    ``DEFAULT`` follows ``blu.default_matmul_precision``; ``HIGH`` allows 3xTF32/bf16x3 where
    a backend has it (TF32 on GPUs otherwise); ``HIGHEST`` is full float32. The eager numpy
    implementation always computes at full precision.
    """

    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2

    def __str__(self) -> str:
        return self.name


def _canonical_precision(precision: Any) -> Any:
    if precision is None:
        return None
    if isinstance(precision, (tuple, list)) and len(precision) == 2:
        return tuple(_canonical_precision(p) for p in precision)
    name = str(getattr(precision, "name", precision)).lower()
    if name not in _PRECISIONS:
        raise BluValueError(
            with_user_line(f"dot_general: precision {precision!r} is not one of {_PRECISIONS}")
        )
    return name


def dot_general(
    lhs: Any,
    rhs: Any,
    dimension_numbers: Any,
    precision: Any = None,
    preferred_element_type: Any = None,
) -> Any:
    """General tensor contraction (XLA DotGeneral), as ``jax.lax.dot_general``.

    Args:
        lhs: array of shape ``L``.
        rhs: array of shape ``R``, same dtype as ``lhs``.
        dimension_numbers: ``((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))``,
            sequences of axes (negative ones count from the end); paired axes must match in size.
        precision: None or one of ``"default", "high", "highest", "fp32", "tf32", "bf16"`` (or a
            pair); the eager numpy implementation always computes at full precision.
        preferred_element_type: output dtype (e.g. float32 for bfloat16 inputs: accumulate and
            return in float32). Default: the inputs' dtype. bf16/f16 products are computed in
            float32 and rounded once.

    Returns:
        Array of shape ``batch + lhs free + rhs free`` (free dims in their operand's order).

    Raises:
        BluShapeError: bad dimension numbers or mismatched sizes (names both shapes).
        BluTypeError: different dtypes, or a ``preferred_element_type`` that cannot hold the
            result (float inputs need a float output).
    """
    la, ra = get_aval(lhs), get_aval(rhs)
    try:
        (lc, rc), (lb, rb) = dimension_numbers
    except (TypeError, ValueError) as e:
        raise BluValueError(
            with_user_line(
                "dot_general: dimension_numbers must be ((lhs_contracting, rhs_contracting), "
                f"(lhs_batch, rhs_batch)), got {dimension_numbers!r}"
            )
        ) from e

    def norm(axes: Any, aval: ShapedArray) -> tuple[int, ...]:
        axes = tuple(int(a) for a in axes)
        if any(not -aval.ndim <= a < aval.ndim for a in axes):
            raise _dn_error("an axis is out of range", la, ra, dimension_numbers)
        return tuple(a % aval.ndim for a in axes)

    dn = ((norm(lc, la), norm(rc, ra)), (norm(lb, la), norm(rb, ra)))
    pet = None if preferred_element_type is None else dtypes.canonicalize(preferred_element_type)
    return dot_general_p.bind(
        lhs, rhs, dimension_numbers=dn, precision=_canonical_precision(precision),
        preferred_element_type=pet,
    )  # fmt: skip


def dot(lhs: Any, rhs: Any, precision: Any = None, preferred_element_type: Any = None) -> Any:
    """Vector/matrix products: contracts the last axis of ``lhs`` with the first of ``rhs``.

    Args:
        lhs: shape ``(n,)`` or ``(m, n)``.
        rhs: shape ``(n,)`` or ``(n, k)``, same dtype.

    Returns:
        ``()``, ``(k,)``, ``(m,)`` or ``(m, k)``.

    Raises:
        BluShapeError: an operand is not 1-d or 2-d, or the contracted sizes differ.
    """
    la, ra = get_aval(lhs), get_aval(rhs)
    if not (1 <= la.ndim <= 2 and 1 <= ra.ndim <= 2):
        raise BluShapeError(
            with_user_line(
                f"dot: operands must be vectors or matrices, got {la.str_short()} and "
                f"{ra.str_short()} (use dot_general or batch_matmul)"
            )
        )
    dn = (((la.ndim - 1,), (0,)), ((), ()))
    return dot_general(lhs, rhs, dn, precision, preferred_element_type)


def batch_matmul(
    lhs: Any, rhs: Any, precision: Any = None, preferred_element_type: Any = None
) -> Any:
    """Batched matrix product: ``(..., m, k) @ (..., k, n) -> (..., m, n)`` with equal leading
    (batch) dimensions.

    Raises:
        BluShapeError: ranks differ or are below 2, or batch/contracted sizes differ.
    """
    la, ra = get_aval(lhs), get_aval(rhs)
    if la.ndim != ra.ndim or la.ndim < 2:
        raise BluShapeError(
            with_user_line(
                f"batch_matmul: operands must have equal rank >= 2, got {la.str_short()} and "
                f"{ra.str_short()}"
            )
        )
    nd = la.ndim
    batch = tuple(range(nd - 2))
    dn = (((nd - 1,), (nd - 2,)), (batch, batch))
    return dot_general(lhs, rhs, dn, precision, preferred_element_type)
