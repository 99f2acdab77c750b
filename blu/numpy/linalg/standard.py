"""The Array API standard's ``linalg`` functions that act on the last axes (stacks of vectors
and matrices): ``cross``, ``diagonal``, ``matmul``, ``matrix_transpose``, ``outer``,
``tensordot``, ``trace``, ``vecdot``. Each is a composition of blu.numpy functions
(differentiable, batchable, jittable).
(https://data-apis.org/array-api/2024.12/extensions/linear_algebra_functions.html)
"""

from __future__ import annotations

from typing import Any

from blu import lax
from blu.core.errors import BluShapeError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import asarray_operand, broadcast_shapes, broadcast_to, promote_args
from blu.numpy.manipulation import matrix_transpose, stack
from blu.numpy.products import matmul, tensordot
from blu.numpy.products import outer as _outer
from blu.numpy.products import vecdot as _vecdot
from blu.numpy.reductions import sum as _sum
from blu.numpy.selection import diagonal as _diagonal
from blu.numpy.ufuncs import multiply as mul
from blu.numpy.ufuncs import subtract

__all__ = [
    "cross", "diagonal", "matmul", "matrix_transpose", "outer", "tensordot", "trace", "vecdot",
]  # fmt: skip


def _shape_error(name: str, msg: str, *xs: Any) -> BluShapeError:
    shapes = ", ".join(get_aval(x).str_short() for x in xs)
    return BluShapeError(with_user_line(f"linalg.{name}: {msg} (operands {shapes})"))


def cross(x1: Any, x2: Any, /, *, axis: int = -1) -> Any:
    """The cross product of 3-vectors along ``axis`` (other axes broadcast).

    Raises:
        BluShapeError: ``axis`` has size other than 3 in either operand, or is out of range.
    """
    x1, x2 = promote_args(x1, x2)
    s1, s2 = get_aval(x1).shape, get_aval(x2).shape
    if not -min(len(s1), len(s2)) <= axis < 0:
        # the standard counts the axis from the end (a non-negative one is ambiguous once the
        # operands broadcast to more dimensions)
        raise _shape_error("cross", f"axis {axis} must be negative and in range", x1, x2)
    if s1[axis] != 3 or s2[axis] != 3:
        raise _shape_error("cross", f"axis {axis} must have size 3", x1, x2)
    shape = broadcast_shapes(s1, s2)
    x1, x2 = broadcast_to(x1, shape), broadcast_to(x2, shape)
    a = [_take(x1, i, axis) for i in range(3)]
    b = [_take(x2, i, axis) for i in range(3)]
    c = [
        subtract(mul(a[1], b[2]), mul(a[2], b[1])),
        subtract(mul(a[2], b[0]), mul(a[0], b[2])),
        subtract(mul(a[0], b[1]), mul(a[1], b[0])),
    ]
    return stack(c, axis=axis)


def _take(x: Any, i: int, axis: int) -> Any:
    return lax.index_in_dim(x, i, axis % get_aval(x).ndim, keepdims=False)


def diagonal(x: Any, /, *, offset: int = 0) -> Any:
    """The diagonal ``offset`` of each matrix (the last two axes), as the last axis."""
    x = asarray_operand(x)
    if get_aval(x).ndim < 2:
        raise _shape_error("diagonal", "needs at least 2 dimensions", x)
    return _diagonal(x, offset, -2, -1)


def outer(x1: Any, x2: Any, /) -> Any:
    """``x1[:, None] * x2[None, :]`` of two vectors.

    Raises:
        BluShapeError: an operand is not 1-D.
    """
    x1, x2 = asarray_operand(x1), asarray_operand(x2)
    if get_aval(x1).ndim != 1 or get_aval(x2).ndim != 1:
        raise _shape_error("outer", "needs two 1-D arrays", x1, x2)
    return _outer(x1, x2)


def trace(x: Any, /, *, offset: int = 0, dtype: Any = None) -> Any:
    """The sum of the diagonal ``offset`` of each matrix (the last two axes)."""
    return _sum(diagonal(x, offset=offset), axis=-1, dtype=dtype)


def vecdot(x1: Any, x2: Any, /, *, axis: int = -1) -> Any:
    """Dot products of vectors along ``axis`` (counted from the end; the other axes broadcast).

    Raises:
        BluShapeError: the operands' sizes along ``axis`` differ, or ``axis`` is out of range.
        BluTypeError: ``axis`` is not an int.
    """
    return _vecdot(x1, x2, axis=axis)
