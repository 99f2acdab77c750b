"""``associative_scan``: all prefix combinations of an associative operator in ``O(log n)``
sequential depth (``jax.lax.associative_scan``).

The recursive odd/even scheme JAX uses (G. E. Blelloch, "Prefix sums and their applications",
1990, section 1.4): combine neighbouring pairs, scan the half-length result recursively, then
fix up the remaining positions and interleave. ``fn`` is applied to whole strided slices, so it
must be vectorized over the scanned axis; everything is ``slice``/``pad``/``concatenate``, so
the scan differentiates, batches and jits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blu.core import dtypes, pytree
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax.bits import or_
from blu.lax.elementwise import add
from blu.lax.shapes import concatenate, full, pad, rev
from blu.lax.slicing import slice_in_dim

__all__ = ["associative_scan"]


def _interleave(a: Any, b: Any, axis: int) -> Any:
    """``a[0], b[0], a[1], b[1], ...`` along ``axis`` (``len(a)`` is ``len(b)`` or one more)."""
    aa, ba = get_aval(a), get_aval(b)
    same = aa.shape[axis] == ba.shape[axis]
    a_cfg = [(0, 0, 0)] * aa.ndim
    b_cfg = [(0, 0, 0)] * ba.ndim
    a_cfg[axis] = (0, 1 if same else 0, 1)
    b_cfg[axis] = (1, 0 if same else 1, 1)
    op = or_ if aa.dtype == dtypes.bool_ else add
    return op(pad(a, full((), 0, aa.dtype), a_cfg), pad(b, full((), 0, ba.dtype), b_cfg))


def associative_scan(fn: Callable, elems: Any, reverse: bool = False, axis: int = 0) -> Any:
    """Inclusive scan with an associative ``fn``: ``out[i] = fn(...fn(fn(e[0], e[1]), e[2])...,
    e[i])`` along ``axis``; with ``reverse``, ``out[i] = fn(...fn(e[n-1], e[n-2])..., e[i])``
    (JAX's: the scan of the reversed elements, reversed).

    Args:
        fn: ``(a, b) -> c``, associative, vectorized: ``a``, ``b`` are pytrees like ``elems``
            whose leaves are slices along ``axis`` of equal length; ``c`` has their structure,
            shapes and dtypes.
        elems: a pytree of arrays sharing the size ``n`` of ``axis``.
        reverse: scan from the end of ``axis``.
        axis: the scanned axis (negative counts from the end).

    Returns:
        A pytree like ``elems`` (same shapes and dtypes).

    Raises:
        BluShapeError: the leaves' ``axis`` sizes differ, or ``fn`` changed a leaf's shape.
        BluTypeError: ``fn`` changed a leaf's dtype.
        BluValueError: ``axis`` out of range, ``elems`` has no leaves, or ``fn`` changed the
            structure.

    Example: ``associative_scan(lax.add, x)`` is ``cumsum(x, 0)``.
    """
    flat, tree = pytree.tree_flatten(elems)
    if not flat:
        raise BluValueError(with_user_line("associative_scan: elems has no arrays"))
    avals = [get_aval(x) for x in flat]
    ndim = avals[0].ndim
    axis = dtypes.static_int(axis, "associative_scan: axis")
    if not -ndim <= axis < ndim:
        raise BluValueError(
            with_user_line(f"associative_scan: axis {axis} out of range for rank {ndim}")
        )
    axis = int(axis) % ndim
    sizes = {a.shape[axis] if a.ndim > axis else None for a in avals}
    if len(sizes) != 1:
        detail = ", ".join(a.str_short() for a in avals)
        raise BluShapeError(
            with_user_line(f"associative_scan: leaves differ in the size of axis {axis}: {detail}")
        )

    def combine(a_flat: list, b_flat: list) -> list:
        c = fn(pytree.tree_unflatten(tree, a_flat), pytree.tree_unflatten(tree, b_flat))
        c_flat, c_tree = pytree.tree_flatten(c)
        if c_tree != tree:
            raise BluValueError(
                with_user_line(f"associative_scan: fn returned structure {c_tree}, expected {tree}")
            )
        for i, (a, c) in enumerate(zip(a_flat, c_flat)):
            want, got = get_aval(a), get_aval(c)
            if want.shape != got.shape or want.dtype != got.dtype:
                err = BluShapeError if want.shape != got.shape else BluTypeError
                raise err(
                    with_user_line(
                        f"associative_scan: fn must return its arguments' shapes and dtypes; "
                        f"leaf {i} of fn(a, b) is {got.str_short()} for arguments "
                        f"{want.str_short()}"
                    )
                )
        return c_flat

    def sl(x: Any, start: int, stop: int, stride: int = 1) -> Any:
        return slice_in_dim(x, start, max(stop, start), stride, axis)

    def scan(xs: list) -> list:
        n = get_aval(xs[0]).shape[axis]
        if n < 2:
            return xs
        odd = scan(combine([sl(x, 0, n - 1, 2) for x in xs], [sl(x, 1, n, 2) for x in xs]))
        if n % 2 == 0:
            m = get_aval(odd[0]).shape[axis]
            even = combine([sl(o, 0, m - 1) for o in odd], [sl(x, 2, n, 2) for x in xs])
        else:
            even = combine(odd, [sl(x, 2, n, 2) for x in xs])
        even = [concatenate([sl(x, 0, 1), e], axis) for x, e in zip(xs, even)]
        return [_interleave(e, o, axis) for e, o in zip(even, odd)]

    if reverse:
        flat = [rev(x, (axis,)) for x in flat]
    out = scan(flat)
    if reverse:
        out = [rev(x, (axis,)) for x in out]
    return pytree.tree_unflatten(tree, out)
