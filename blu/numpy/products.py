"""Products of arrays: matmul (``@``), dot, vdot, inner, outer, tensordot, kron, trace.

All lower to one ``lax.dot_general`` (plus reshapes/transposes), so the matrix products reach
BLAS/cuBLAS as one call each, with ``precision`` and ``preferred_element_type`` passed through.
"""

from __future__ import annotations

import operator
from typing import Any

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluShapeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import (
    asarray_operands,
    broadcast_shapes,
    canonicalize_axis,
    promote_dtypes,
)
from blu.numpy.complexes import conj
from blu.numpy.manipulation import ravel
from blu.numpy.reductions import sum as _sum
from blu.numpy.selection import diagonal
from blu.numpy.ufuncs import multiply

__all__ = ["matmul", "dot", "vdot", "vecdot", "inner", "outer", "tensordot", "kron", "trace"]


def _shape_error(name: str, a: Any, b: Any, why: str) -> BluShapeError:
    return BluShapeError(
        with_user_line(f"{name}: {why} for {get_aval(a).str_short()} and {get_aval(b).str_short()}")
    )


def matmul(a: Any, b: Any, *, precision: Any = None, preferred_element_type: Any = None) -> Any:
    """Matrix product with numpy's rules: 1-D operands are vectors (the added axis is removed
    from the result), leading (batch) axes broadcast.

    A batch axis present in only one operand (or of size 1 in one of them) becomes a free axis
    of that operand's side of the ``dot_general`` instead of being broadcast in memory, so
    ``(B, T, C) @ (C, D)`` is a single ``(B*T, C) x (C, D)`` product.

    Raises:
        BluShapeError: a 0-d operand, mismatched inner sizes, or batch shapes that do not
            broadcast.
    """
    a, b = promote_dtypes(a, b)
    sa, sb = get_aval(a).shape, get_aval(b).shape
    if not sa or not sb:
        raise _shape_error("matmul", a, b, "0-d operands are not allowed (use multiply)")
    a_vec, b_vec = len(sa) == 1, len(sb) == 1
    if a_vec:
        a, sa = lax.reshape(a, (1,) + sa), (1,) + sa
    if b_vec:
        b, sb = lax.reshape(b, sb + (1,)), sb + (1,)
    if sa[-1] != sb[-2]:
        raise _shape_error("matmul", a, b, f"inner sizes differ ({sa[-1]} vs {sb[-2]})")
    ba, bb = sa[:-2], sb[:-2]
    nb = max(len(ba), len(bb))
    # classify each broadcast batch position
    a_keep, b_keep = [], []  # axes of a / b kept (not squeezed)
    lb, rb = [], []  # batch axis pairs (after squeezing)
    a_free_pos, b_free_pos = [], []  # output batch positions served by a-only / b-only axes
    batch_pos = []
    a_axis_new = b_axis_new = 0
    for i in range(nb):
        ia, ib = i - (nb - len(ba)), i - (nb - len(bb))
        da = ba[ia] if ia >= 0 else None
        db = bb[ib] if ib >= 0 else None
        if da is not None and db is not None and da == db:
            a_keep.append(ia)
            b_keep.append(ib)
            lb.append(a_axis_new)
            rb.append(b_axis_new)
            batch_pos.append(i)
            a_axis_new += 1
            b_axis_new += 1
        elif db is None or db == 1:  # a alone supplies this axis (b broadcasts)
            if da is not None and db is not None and da != 1 and db != 1:
                raise _shape_error("matmul", a, b, "batch shapes do not broadcast")
            if da is not None:
                a_keep.append(ia)
                a_free_pos.append(i)
                a_axis_new += 1
        elif da is None or da == 1:
            b_keep.append(ib)
            b_free_pos.append(i)
            b_axis_new += 1
        else:
            raise _shape_error("matmul", a, b, "batch shapes do not broadcast")
    a2 = lax.reshape(a, tuple(ba[k] for k in a_keep) + sa[-2:])
    b2 = lax.reshape(b, tuple(bb[k] for k in b_keep) + sb[-2:])
    na, nb2 = len(a_keep) + 2, len(b_keep) + 2
    dn = (((na - 1,), (nb2 - 2,)), (tuple(lb), tuple(rb)))
    out = lax.dot_general(a2, b2, dn, precision, preferred_element_type)
    # out axes: batch..., a-free batch..., M, b-free batch..., N
    labels = [("p", i) for i in batch_pos] + [("p", i) for i in a_free_pos] + [("M",)]
    labels += [("p", i) for i in b_free_pos] + [("N",)]
    present = sorted(i for i in batch_pos + a_free_pos + b_free_pos)
    target = [("p", i) for i in present] + [("M",), ("N",)]
    out = lax.transpose(out, tuple(labels.index(t) for t in target))
    # size-1 batch axes that were squeezed away come back with the reshape
    batch_shape = broadcast_shapes(ba, bb)
    shape = batch_shape + ((sa[-2],) if not a_vec else ()) + ((sb[-1],) if not b_vec else ())
    return lax.reshape(out, shape)


def dot(a: Any, b: Any, *, precision: Any = None, preferred_element_type: Any = None) -> Any:
    """numpy's ``dot``: a product with a scalar, the inner product of vectors, or the
    contraction of ``a``'s last axis with ``b``'s second-to-last (its only axis if 1-D)."""
    a, b = promote_dtypes(a, b)
    sa, sb = get_aval(a).shape, get_aval(b).shape
    if not sa or not sb:
        return multiply(a, b)
    cb = 0 if len(sb) == 1 else len(sb) - 2
    if sa[-1] != sb[cb]:
        raise _shape_error("dot", a, b, f"contracted sizes differ ({sa[-1]} vs {sb[cb]})")
    dn = (((len(sa) - 1,), (cb,)), ((), ()))
    return lax.dot_general(a, b, dn, precision, preferred_element_type)


def vdot(a: Any, b: Any, *, precision: Any = None, preferred_element_type: Any = None) -> Any:
    """The inner product of the raveled arrays, conjugating ``a`` when it is complex."""
    a, b = asarray_operands(a, b)  # a Python float beside float64 is float64's value
    return dot(
        ravel(conj(a)), ravel(b), precision=precision, preferred_element_type=preferred_element_type
    )


def vecdot(x1: Any, x2: Any, axis: int = -1) -> Any:
    """Inner products ``sum(conj(x1) * x2)`` of vectors along ``axis`` (the other axes
    broadcast; the vectors' lengths must agree, they do not broadcast).

    Raises:
        BluShapeError: the sizes along ``axis`` differ, or ``axis`` is out of range.
        BluTypeError: ``axis`` is not an int.
    """
    axis = dtypes.index_int(axis, "vecdot: axis")
    x1, x2 = promote_dtypes(x1, x2)
    s1, s2 = get_aval(x1).shape, get_aval(x2).shape
    nd = max(len(s1), len(s2))
    if not -nd <= axis < nd:
        raise _shape_error("vecdot", x1, x2, f"axis {axis} is out of range")
    # the axis in the broadcast frame, read in each operand (missing dims are size 1)
    k = axis - nd if axis >= 0 else axis
    d1 = s1[k] if -len(s1) <= k else 1
    d2 = s2[k] if -len(s2) <= k else 1
    if d1 != d2:
        raise _shape_error("vecdot", x1, x2, f"the vectors along axis {axis} differ in length")
    # the operands' dtype (the standard's vecdot does not widen integers as sum does)
    return _sum(multiply(conj(x1), x2), axis=axis, dtype=get_aval(x1).dtype)


def inner(a: Any, b: Any, *, precision: Any = None, preferred_element_type: Any = None) -> Any:
    """Contraction of the last axes of ``a`` and ``b`` (a product with a scalar)."""
    a, b = promote_dtypes(a, b)
    sa, sb = get_aval(a).shape, get_aval(b).shape
    if not sa or not sb:
        return multiply(a, b)
    if sa[-1] != sb[-1]:
        raise _shape_error("inner", a, b, f"last axes differ ({sa[-1]} vs {sb[-1]})")
    dn = (((len(sa) - 1,), (len(sb) - 1,)), ((), ()))
    return lax.dot_general(a, b, dn, precision, preferred_element_type)


def outer(a: Any, b: Any) -> Any:
    """``ravel(a)[:, None] * ravel(b)[None, :]``."""
    a, b = (ravel(v) for v in asarray_operands(a, b))
    return multiply(
        lax.reshape(a, get_aval(a).shape + (1,)), lax.reshape(b, (1,) + get_aval(b).shape)
    )


def tensordot(
    a: Any, b: Any, axes: Any = 2, *, precision: Any = None, preferred_element_type: Any = None
) -> Any:
    """Contract ``axes`` of ``a`` with ``axes`` of ``b``: an int N (a's last N with b's first N)
    or a pair of axis sequences. The result has a's free axes, then b's."""
    a, b = promote_dtypes(a, b)
    na, nb = get_aval(a).ndim, get_aval(b).ndim
    if isinstance(axes, int) or hasattr(axes, "__index__"):
        n = operator.index(axes)
        if n < 0 or n > min(na, nb):
            raise _shape_error("tensordot", a, b, f"cannot contract {n} axes")
        ca, cb = tuple(range(na - n, na)), tuple(range(n))
    else:
        try:
            xa, xb = axes
        except (TypeError, ValueError) as e:
            raise BluValueError(with_user_line(f"tensordot: bad axes {axes!r}")) from e
        xa = (xa,) if isinstance(xa, int) else tuple(xa)
        xb = (xb,) if isinstance(xb, int) else tuple(xb)
        if len(xa) != len(xb):
            raise _shape_error("tensordot", a, b, f"axes {axes!r} differ in length")
        ca = tuple(canonicalize_axis(x, na, "tensordot") for x in xa)
        cb = tuple(canonicalize_axis(x, nb, "tensordot") for x in xb)
    sa, sb = get_aval(a).shape, get_aval(b).shape
    if any(sa[i] != sb[j] for i, j in zip(ca, cb)):
        raise _shape_error("tensordot", a, b, f"contracted sizes differ on axes {ca}, {cb}")
    return lax.dot_general(a, b, ((ca, cb), ((), ())), precision, preferred_element_type)


def kron(a: Any, b: Any) -> Any:
    """Kronecker product (ranks are padded to match, as numpy)."""
    a, b = promote_dtypes(a, b)
    sa, sb = get_aval(a).shape, get_aval(b).shape
    nd = max(len(sa), len(sb))
    sa, sb = (1,) * (nd - len(sa)) + sa, (1,) * (nd - len(sb)) + sb
    a = lax.reshape(a, tuple(v for d in sa for v in (d, 1)))
    b = lax.reshape(b, tuple(v for d in sb for v in (1, d)))
    return lax.reshape(multiply(a, b), tuple(x * y for x, y in zip(sa, sb)))


def trace(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None) -> Any:
    """Sum of the diagonal ``offset`` of the ``(axis1, axis2)`` planes."""
    return _sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)
