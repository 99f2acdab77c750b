"""Operand checks shared by the ``blu.scipy.linalg`` modules: JAX's promotion (integers and
bools to the default float, ``promote_dtypes_inexact``) and its rules for the right-hand sides
of ``cho_solve``, ``lu_solve``, ``solve_triangular`` and ``solve(assume_a='pos')``."""

from __future__ import annotations

from typing import Any

from blu.core.errors import BluShapeError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import asarray_operand, broadcast_shapes, broadcast_to, to_inexact
from blu.numpy.linalg._util import promote_inexact, shape


def floats(x: Any) -> Any:
    """``x`` as an array, integers and bools promoted to the default float (as JAX)."""
    return to_inexact(asarray_operand(x))


def matrices(x: Any, name: str, square: bool = True) -> Any:
    """``x`` as float ``(..., m, n)`` matrices (``n == m`` if ``square``).

    Raises:
        BluShapeError: fewer than two dimensions, or not square.
    """
    x = floats(x)
    aval = get_aval(x)
    if aval.ndim < 2 or (square and aval.shape[-1] != aval.shape[-2]):
        kind = "square matrices (..., n, n)" if square else "matrices (..., m, n)"
        raise BluShapeError(
            with_user_line(f"scipy.linalg.{name}: expected {kind}, got {aval.str_short()}")
        )
    return x


def solve_operands(a: Any, b: Any, name: str) -> tuple[Any, Any, bool]:
    """Line up ``b`` with square ``a`` ``(..., m, m)`` by JAX's rule for these solvers: ``b``
    with one dimension fewer than ``a`` is a stack of vectors ``(..., m)``, with as many a stack
    of matrices ``(..., m, k)``; the batch dimensions broadcast. Both are promoted to one float
    dtype. Returns ``(a, b)`` as matrices of one batch shape and whether ``b`` was vectors.

    Raises:
        BluShapeError: ``a`` is not square matrices, ``b`` has another number of dimensions,
            its length (rows) differs from ``a``'s, or the batch shapes do not broadcast.
    """
    a = matrices(a, name)
    a, b = promote_inexact(a, asarray_operand(b))
    na, nb = len(shape(a)), len(shape(b))
    m = shape(a)[-1]
    if nb not in (na - 1, na) or shape(b)[na - 2] != m:
        raise BluShapeError(
            with_user_line(
                f"scipy.linalg.{name}: a {get_aval(a).str_short()} and b "
                f"{get_aval(b).str_short()} need shapes a (..., m, m) and b (..., m) or "
                "(..., m, k) (b with one dimension fewer than a is vectors)"
            )
        )
    vector = nb == na - 1
    if vector:
        b = b[..., None]
    try:
        batch = broadcast_shapes(shape(a)[:-2], shape(b)[:-2])
    except Exception:
        raise BluShapeError(
            with_user_line(
                f"scipy.linalg.{name}: the batch shapes of a {get_aval(a).str_short()} and b "
                f"{get_aval(b).str_short()} do not broadcast"
            )
        ) from None
    a = broadcast_to(a, batch + shape(a)[-2:])
    return a, broadcast_to(b, batch + shape(b)[-2:]), vector
