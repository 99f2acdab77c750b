"""Operand checks and small matrix helpers shared by the blu.numpy.linalg modules."""

from __future__ import annotations

from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.errors import BluShapeError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import (
    asarray_operand,
    broadcast_shapes,
    broadcast_to,
    promote_dtypes,
    to_inexact,
)
from blu.numpy.complexes import conj, imag, iscomplexobj, real
from blu.numpy.creation import eye
from blu.numpy.manipulation import expand_dims, swapaxes
from blu.numpy.selection import diagonal


def matrices(x: Any, name: str, square: bool = False, inexact: bool = True) -> Any:
    """``x`` as a float array of ``(..., m, n)`` (square if asked) matrices; with ``inexact``
    False integers keep their dtype.

    Raises:
        BluShapeError: fewer than two dimensions, or not square.
    """
    x = asarray_operand(x)
    x = to_inexact(x) if inexact else x
    aval = get_aval(x)
    if aval.ndim < 2 or (square and aval.shape[-1] != aval.shape[-2]):
        kind = "square matrices (..., n, n)" if square else "matrices (..., m, n)"
        raise BluShapeError(
            with_user_line(f"linalg.{name}: expected {kind}, got {aval.str_short()}")
        )
    return x


def promote_inexact(*xs: Any) -> list[Any]:
    """Promote to one dtype, integers/bools to the default float."""
    return [to_inexact(x) for x in promote_dtypes(*xs)]


def shape(x: Any) -> tuple[int, ...]:
    return get_aval(x).shape


def dtype(x: Any) -> np.dtype:
    return get_aval(x).dtype


def eps(x: Any) -> float:
    return float(dtypes.finfo(dtype(x)).eps)


def mT(x: Any) -> Any:
    return swapaxes(x, -1, -2)


def mH(x: Any) -> Any:
    """The conjugate transpose of the last two axes (``mT`` for real dtypes)."""
    t = mT(x)
    return conj(t) if dtypes.is_complex(get_aval(t).dtype) else t


def abs2(x: Any) -> Any:
    """``|x|^2`` elementwise: ``x * x`` for reals, ``re^2 + im^2`` for complex (real dtype)."""
    if iscomplexobj(x):
        re, im = real(x), imag(x)
        return re * re + im * im
    return x * x


def diag_part(x: Any) -> Any:
    """The main diagonals of ``(..., n, n)`` matrices, as ``(..., n)``."""
    return diagonal(x, 0, -2, -1)


def eye_like(x: Any, n: int | None = None) -> Any:
    """Identity matrices ``(..., n, n)`` with ``x``'s batch shape and dtype."""
    n = shape(x)[-1] if n is None else n
    return broadcast_to(eye(n, dtype=dtype(x)), shape(x)[:-2] + (n, n))


def rhs(a: Any, b: Any, name: str) -> tuple[Any, Any, bool]:
    """Line up a right-hand side with ``a`` ``(..., m, n)`` (numpy 2's rule for ``solve``):
    ``b`` is one vector ``(m,)`` (for every matrix of ``a``) or matrices ``(..., m, k)`` whose
    batch dimensions broadcast with ``a``'s. Returns ``(a, b)`` as matrices of one batch shape
    and whether ``b`` was a vector.

    Raises:
        BluShapeError: ``b``'s rows differ from ``a``'s, or the batch shapes do not broadcast.
    """
    a, b = promote_inexact(a, b)
    vector = len(shape(b)) == 1
    if vector:
        b = expand_dims(b, -1)
    if len(shape(b)) < 2 or shape(b)[-2] != shape(a)[-2]:
        raise BluShapeError(
            with_user_line(
                f"linalg.{name}: a {get_aval(a).str_short()} and b {get_aval(b).str_short()} "
                "need b's rows (or length, for a vector) equal to a's rows"
            )
        )
    batch = broadcast_shapes(shape(a)[:-2], shape(b)[:-2])
    return broadcast_to(a, batch + shape(a)[-2:]), broadcast_to(b, batch + shape(b)[-2:]), vector
