"""Shared pieces of the linear-algebra primitives: the error type, operand checks, the
batching rule, and small lax operations on the last two axes used by the JVP rules (written
with lax so the rules themselves differentiate, batch and stage)."""

from __future__ import annotations

from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, LinAlgError, with_user_line  # noqa: F401
from blu.core.interpreter import get_aval
from blu.core.primitive import Primitive
from blu.lax.complex import conj
from blu.lax.dot import dot_general
from blu.lax.elementwise import add, div, mul, select
from blu.lax.reductions import reduce_sum
from blu.lax.shapes import broadcast_in_dim, full_like, transpose
from blu.transforms.ad_util import Zero, tangent_aval
from blu.transforms.batching import bdim_to_front

# ---- checks and batching -----------------------------------------------------------------------


def check_matrix(
    name: str, a: ShapedArray, square: bool = False, allow_complex: bool = False
) -> None:
    """``a`` must be float ``(..., m, n)`` (square if asked; complex too if allowed).

    Raises:
        BluTypeError: not floating point. BluShapeError: rank < 2 or not square.
    """
    if not (dtypes.is_float(a.dtype) or (allow_complex and dtypes.is_complex(a.dtype))):
        raise BluTypeError(
            with_user_line(f"{name} requires floating-point operands, got {a.str_short()}")
        )
    if a.ndim < 2 or (square and a.shape[-1] != a.shape[-2]):
        kind = "square matrices" if square else "matrices"
        raise BluShapeError(
            with_user_line(f"{name}: operand must be (..., m, n) {kind}, got {a.str_short()}")
        )


def batch_to_front(prim: Primitive) -> None:
    """Batching rule of a primitive whose leading axes are batch axes: move the mapped axis
    (of every operand, broadcasting unmapped ones) to the front."""

    def rule(axis_size, args, dims, **params):
        args = [bdim_to_front(a, d, axis_size) for a, d in zip(args, dims)]
        out = prim.bind(*args, **params)
        return out, ([0] * len(out) if prim.multiple_results else 0)

    prim.def_batch(rule)


def zero_of(x: Any) -> Zero:
    """The symbolic zero tangent of ``x``."""
    return Zero(tangent_aval(get_aval(x)))


# ---- lax helpers on the last two axes ----------------------------------------------------------


def mT(x: Any) -> Any:
    nd = get_aval(x).ndim
    return transpose(x, tuple(range(nd - 2)) + (nd - 1, nd - 2))


def is_complex(x: Any) -> bool:
    return dtypes.is_complex(get_aval(x).dtype)


def conj_if_complex(x: Any) -> Any:
    """``conj(x)`` for complex ``x``; ``x`` itself for reals (the rules stay the real ones)."""
    return conj(x) if is_complex(x) else x


def mH(x: Any) -> Any:
    """The conjugate transpose of the last two axes (``mT`` for reals)."""
    return conj_if_complex(mT(x))


def matmul(x: Any, y: Any) -> Any:
    """Batched ``x @ y`` for operands of equal rank and batch shape."""
    nd = get_aval(x).ndim
    batch = tuple(range(nd - 2))
    return dot_general(x, y, (((nd - 1,), (nd - 2,)), (batch, batch)))


def const_like(c: np.ndarray, like: Any) -> Any:
    """A constant ``(m, n)`` matrix broadcast to ``like``'s shape ``(..., m, n)``."""
    aval = get_aval(like)
    return broadcast_in_dim(np.asarray(c), aval.shape, (aval.ndim - 2, aval.ndim - 1))


def _mask(x: Any, mask: np.ndarray) -> Any:
    """``x`` where the (rows, cols) boolean ``mask`` is set, else 0."""
    return select(const_like(mask, x), x, full_like(x, 0))


def tril(x: Any, k: int = 0) -> Any:
    r, c = get_aval(x).shape[-2:]
    return _mask(x, np.tri(r, c, k, dtype=bool))


def triu(x: Any, k: int = 0) -> Any:
    r, c = get_aval(x).shape[-2:]
    return _mask(x, ~np.tri(r, c, k - 1, dtype=bool))


def eye_like(x: Any) -> Any:
    """Identity matrices with the shape (square) and dtype of ``x``."""
    return const_like(np.eye(get_aval(x).shape[-1], dtype=get_aval(x).dtype), x)


def diag(x: Any) -> Any:
    """The main diagonals of square matrices, shape ``(..., n)``."""
    n = get_aval(x).shape[-1]
    return reduce_sum(_mask(x, np.eye(n, dtype=bool)), get_aval(x).ndim - 1)


def row(v: Any, like: Any) -> Any:
    """``v[..., None, :]`` broadcast to ``like``'s shape ``(..., m, n)``."""
    aval, nd = get_aval(like), get_aval(v).ndim
    return broadcast_in_dim(v, aval.shape, tuple(range(nd - 1)) + (nd,))


def col(v: Any, like: Any) -> Any:
    """``v[..., :, None]`` broadcast to ``like``'s shape ``(..., m, n)``."""
    aval, nd = get_aval(like), get_aval(v).ndim
    return broadcast_in_dim(v, aval.shape, tuple(range(nd)))


def recip(x: Any) -> Any:
    return div(full_like(x, 1), x)


def symmetrize(x: Any, name: str) -> Any:
    """``(x + x^H) / 2`` of square matrices (the Hermitian part; symmetric for reals)."""
    check_matrix(name, get_aval(x), square=True, allow_complex=True)
    return mul(add(x, mH(x)), 0.5)
