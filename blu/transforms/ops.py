"""The few array operations the transforms' own helpers apply: tangent sums, zeros, moving and
broadcasting batch axes, casts and sums.

Their primitives (``add``, ``broadcast_in_dim``, ``transpose``, ``convert_element_type``,
``reduce_sum``) are defined in ``blu.lax`` with all their rules, which are written with lax's
shape and dtype helpers. The transforms sit below lax and never import it: lax registers the
functions here when it is imported (``register``), as JAX's ``ad_util`` reaches zeros through
the ``aval_zeros_likers`` table that lax fills.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from blu.core.array import Array
from blu.core.aval import ShapedArray
from blu.core.errors import BluError

NAMES = ("add", "broadcast_in_dim", "transpose", "convert_element_type", "reduce_sum")

_fns: dict[str, Callable[..., Any]] = {}


def register(**fns: Callable[..., Any]) -> None:
    """Give the transforms lax's functions (called once by ``blu.lax`` at import).

    Raises:
        BluError: a name of ``NAMES`` is missing, or an unknown name is given.
    """
    if sorted(fns) != sorted(NAMES):
        raise BluError(f"blu.transforms.ops.register needs exactly {NAMES}, got {sorted(fns)}")
    _fns.update(fns)


def _fn(name: str) -> Callable[..., Any]:
    try:
        return _fns[name]
    except KeyError:
        raise BluError(f"transforms need blu.lax's {name!r}: import blu (or blu.lax)") from None


def add(x: Any, y: Any) -> Any:
    """``x + y`` of equal shapes and dtypes (``lax.add``)."""
    return _fn("add")(x, y)


def broadcast_in_dim(x: Any, shape: Sequence[int], broadcast_dimensions: Sequence[int]) -> Any:
    """``lax.broadcast_in_dim``."""
    return _fn("broadcast_in_dim")(x, shape, broadcast_dimensions)


def transpose(x: Any, permutation: Sequence[int]) -> Any:
    """``lax.transpose``."""
    return _fn("transpose")(x, permutation)


def convert_element_type(x: Any, new_dtype: Any) -> Any:
    """``lax.convert_element_type`` (strongly typed result)."""
    return _fn("convert_element_type")(x, new_dtype)


def reduce_sum(x: Any, axes: Sequence[int]) -> Any:
    """``lax.reduce_sum`` over ``axes``."""
    return _fn("reduce_sum")(x, axes)


def zeros(aval: ShapedArray) -> Any:
    """Zeros of ``aval``'s shape and dtype (strongly typed): a broadcast scalar, as
    ``lax.full(shape, 0, dtype)``."""
    return broadcast_in_dim(Array(np.zeros((), aval.dtype)), aval.shape, ())
