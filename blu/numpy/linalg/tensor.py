"""Chained and tensor products' inverses: ``multi_dot``, ``tensorinv`` and ``tensorsolve``
(``numpy.linalg``'s and ``jax.numpy.linalg``'s), composed from ``einsum``, ``inv`` and ``solve``,
so they differentiate, batch and compile through them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from blu.core import dtypes
from blu.core.errors import BluShapeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import asarray_operand, canonicalize_axes
from blu.numpy.einsum import einsum
from blu.numpy.linalg.solvers import inv, solve
from blu.numpy.manipulation import ravel, reshape, transpose

__all__ = ["multi_dot", "tensorinv", "tensorsolve"]


def multi_dot(arrays: Sequence[Any], *, precision: Any = None) -> Any:
    """The product of ``arrays`` in turn, ``arrays[0] @ arrays[1]`` onwards, in the cheapest
    order (``opt_einsum``'s, as JAX's), as ``numpy.linalg.multi_dot``.

    Args:
        arrays: two or more arrays, all 2-D except the first and the last, which may be 1-D (a
            row and a column vector: that axis is not in the result).
        precision: passed to each product.

    Raises:
        BluValueError: fewer than two arrays.
        BluShapeError: an array of the wrong rank, or neighbours whose sizes do not chain.
    """
    ops = [asarray_operand(a) for a in arrays]
    if len(ops) < 2:
        raise BluValueError(
            with_user_line(f"linalg.multi_dot: needs 2 or more arrays, got {len(ops)}")
        )
    shapes = [get_aval(o).shape for o in ops]
    for i, s in enumerate(shapes):
        ok = len(s) == 2 or (len(s) == 1 and i in (0, len(ops) - 1))
        if not ok:
            raise BluShapeError(
                with_user_line(
                    f"linalg.multi_dot: array {i} has shape {s}; all must be 2-D except the "
                    "first and the last, which may be 1-D"
                )
            )
    for i in range(1, len(shapes)):
        if shapes[i - 1][-1] != shapes[i][0]:
            raise BluShapeError(
                with_user_line(
                    f"linalg.multi_dot: array {i - 1} {shapes[i - 1]} and array {i} {shapes[i]} "
                    "do not chain: their inner sizes differ"
                )
            )
    # operand i (2-D) contracts label i with label i + 1; a 1-D end keeps its one label
    args: list[Any] = []
    for i, (op, s) in enumerate(zip(ops, shapes)):
        args += [op, [i, i + 1] if len(s) == 2 else [1 if i == 0 else i]]
    out = ([] if len(shapes[0]) == 1 else [0]) + ([] if len(shapes[-1]) == 1 else [len(ops)])
    return einsum(*args, out, optimize="auto", precision=precision)


def tensorinv(a: Any, ind: int = 2) -> Any:
    """The inverse of ``a`` as an operator over ``tensordot(a, x, ind)``, as
    ``numpy.linalg.tensorinv``: ``inv(a.reshape(p, p))`` reshaped to
    ``a.shape[ind:] + a.shape[:ind]``.

    Raises:
        BluValueError: ``ind`` is not a positive int, or the first ``ind`` axes' product
            differs from the others'.
    """
    a = asarray_operand(a)
    ind = dtypes.index_int(ind, "linalg.tensorinv: ind")
    if ind <= 0:
        raise BluValueError(with_user_line(f"linalg.tensorinv: ind must be positive, got {ind}"))
    shape = get_aval(a).shape
    head, tail = shape[:ind], shape[ind:]
    if math.prod(head) != math.prod(tail):
        raise BluValueError(
            with_user_line(
                f"linalg.tensorinv: the first {ind} axes of {shape} hold {math.prod(head)} "
                f"elements and the others {math.prod(tail)}; they must be equal"
            )
        )
    return reshape(inv(reshape(a, (math.prod(head), math.prod(tail)))), tail + head)


def tensorsolve(a: Any, b: Any, axes: Any = None) -> Any:
    """``x`` with ``tensordot(a, x, x.ndim) == b``, as ``numpy.linalg.tensorsolve``: ``x`` has
    shape ``a.shape[b.ndim:]`` (after ``axes``, if given, are moved to the end of ``a``).

    Raises:
        BluShapeError: ``a``'s leading axes are not ``b``'s shape (JAX's check; numpy only
            compares sizes), or ``x`` would not have as many elements as ``b``.
    """
    a, b = asarray_operand(a), asarray_operand(b)
    nd = get_aval(a).ndim
    if axes is not None:
        moved = canonicalize_axes(axes, nd, "linalg.tensorsolve")
        a = transpose(a, [k for k in range(nd) if k not in moved] + list(moved))
    sa, sb = get_aval(a).shape, get_aval(b).shape
    x_shape = sa[len(sb) :]
    if sa[: len(sb)] != sb or math.prod(x_shape) != math.prod(sb):
        raise BluShapeError(
            with_user_line(
                f"linalg.tensorsolve: a {sa} (axes moved) and b {sb} need a's leading axes equal "
                f"to b's shape and the rest ({x_shape}) as many elements as b"
            )
        )
    n = math.prod(sb)
    return reshape(solve(reshape(a, (n, n)), ravel(b)), x_shape)
