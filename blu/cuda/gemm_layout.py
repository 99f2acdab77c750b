"""A ``dot_general`` on row-major operands as one strided-batched cuBLAS(Lt) GEMM, without copies.

**Row-major by swapping operands.** blu arrays are row-major; cuBLAS is column-major. A row-major
``(M, N)`` matrix has the same bytes as a column-major ``(N, M)`` one, its transpose, so
``C = lhs @ rhs`` (row-major) is computed as ``C^T = rhs^T @ lhs^T`` in column-major terms:
cuBLAS's ``A`` is blu's *rhs*, cuBLAS's ``B`` is blu's *lhs*, ``m = N``, ``n = M``, ``k = K``,
and ``D`` is ``N x M`` column-major with ``ld = N``, i.e. exactly the row-major ``(M, N)`` output.
An operand stored with its contracting dimension first (``x.T @ y`` patterns: ``lhs (K, M)`` or
``rhs (N, K)``) is read through ``TRANSA``/``TRANSB`` instead of being copied. Batch dimensions
must lead both operands (strided batch: one stride per operand).

``gemm_spec`` finds that call (or says none exists); ``blu.cuda.cublaslt`` runs it and
re-exports both names. Pure arithmetic on shapes: no CUDA library is loaded here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from blu.core.errors import BluShapeError


@dataclasses.dataclass(frozen=True)
class GemmSpec:
    """One strided-batched cuBLASLt product, in cuBLAS's column-major terms (see the module doc).

    ``a`` is blu's rhs, ``b`` blu's lhs; ``D = op(a) @ op(b)`` is ``m x n`` column-major with
    ``ldd = m`` — the row-major ``(batch, M, N)`` output of the dot_general, ``m = N``, ``n = M``.
    Layout fields describe each operand as stored (before ``op``); strides are in elements.
    """

    batch: int
    m: int
    n: int
    k: int
    trans_a: bool
    trans_b: bool
    a_rows: int
    a_cols: int
    lda: int
    b_rows: int
    b_cols: int
    ldb: int
    ldd: int
    stride_a: int
    stride_b: int
    stride_d: int

    @property
    def out_shape(self) -> tuple[int, int, int]:
        """Row-major ``(batch, M, N)`` of the output."""
        return (self.batch, self.n, self.m)

    @property
    def aux_ld(self) -> int:
        """Leading dimension (elements) of the GELU aux matrix: ``m`` rounded up to 8."""
        return -(-self.m // 8) * 8


def gemm_spec(
    lhs_shape: Sequence[int], rhs_shape: Sequence[int], dimension_numbers: Any
) -> GemmSpec | None:
    """The cuBLASLt call computing ``dot_general(lhs, rhs, dimension_numbers)`` on row-major
    operands without copying them, or ``None`` if none exists (then transpose an operand first).

    Args:
        lhs_shape, rhs_shape: operand shapes (row-major, contiguous).
        dimension_numbers: ``((lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch))``.

    Possible when the batch dimensions lead both operands in order, and each operand's other
    dimensions are ``free + contracting`` or ``contracting + free`` in memory order, with the
    contracting dimensions listed in memory order (so the two operands' flattened ``K`` agree).
    The output ``(batch..., lhs free..., rhs free...)`` is then row-major ``(B, M, N)``.

    Raises:
        BluShapeError: batch or contracting sizes disagree.
    """
    (lc, rc), (lb, rb) = dimension_numbers
    lc, rc, lb, rb = tuple(lc), tuple(rc), tuple(lb), tuple(rb)
    nb = len(lb)
    if len(rb) != nb or len(lc) != len(rc):
        raise BluShapeError(f"gemm_spec: bad dimension_numbers {dimension_numbers}")
    if lb != tuple(range(nb)) or rb != tuple(range(nb)):
        return None
    lhs_shape, rhs_shape = tuple(lhs_shape), tuple(rhs_shape)
    if lhs_shape[:nb] != rhs_shape[:nb]:
        raise BluShapeError(f"gemm_spec: batch sizes differ: {lhs_shape} vs {rhs_shape}")
    if any(lhs_shape[i] != rhs_shape[j] for i, j in zip(lc, rc)):
        raise BluShapeError(f"gemm_spec: contracting sizes differ: {lhs_shape} vs {rhs_shape}")
    lf = [d for d in range(nb, len(lhs_shape)) if d not in lc]
    rf = [d for d in range(nb, len(rhs_shape)) if d not in rc]
    lrest, rrest = list(range(nb, len(lhs_shape))), list(range(nb, len(rhs_shape)))
    # lhs as stored: (M, K) -> no transpose; (K, M) -> TRANSB
    if lrest == lf + list(lc):
        trans_b = False
    elif lrest == list(lc) + lf:
        trans_b = True
    else:
        return None
    # rhs as stored: (K, N) -> no transpose; (N, K) -> TRANSA
    if rrest == list(rc) + rf:
        trans_a = False
    elif rrest == rf + list(rc):
        trans_a = True
    else:
        return None
    batch = math.prod(lhs_shape[:nb])
    M = math.prod(lhs_shape[d] for d in lf)
    N = math.prod(rhs_shape[d] for d in rf)
    K = math.prod(lhs_shape[d] for d in lc)
    one = lambda x: max(1, x)  # noqa: E731 - cuBLAS wants ld >= 1 even for empty matrices
    if trans_a:  # rhs stored (N, K): column-major K x N, op T gives N x K
        a_rows, a_cols = K, N
    else:  # rhs stored (K, N): column-major N x K
        a_rows, a_cols = N, K
    if trans_b:  # lhs stored (K, M): column-major M x K, op T gives K x M
        b_rows, b_cols = M, K
    else:  # lhs stored (M, K): column-major K x M
        b_rows, b_cols = K, M
    return GemmSpec(
        batch=batch,
        m=N,
        n=M,
        k=K,
        trans_a=trans_a,
        trans_b=trans_b,
        a_rows=a_rows,
        a_cols=a_cols,
        lda=one(a_rows),
        b_rows=b_rows,
        b_cols=b_cols,
        ldb=one(b_rows),
        ldd=one(N),
        stride_a=N * K if batch > 1 else 0,
        stride_b=M * K if batch > 1 else 0,
        stride_d=M * N if batch > 1 else 0,
    )
