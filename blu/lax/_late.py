"""Operations of higher lax families that rules of lower ones apply, bound late.

The families of blu.lax import each other in one order, lower modules never importing higher
ones (the order is listed in ``blu/lax/__init__.py``). A few rules genuinely need an operation
of a family above their own: broadcast_in_dim's transpose sums with ``reduce_sum`` while the
reductions are built on ``broadcast_in_dim``; pad's transpose slices and subtracts, its
batching rule selects; concatenate's transpose slices; the JVP of ``abs`` of a complex number
takes ``real`` and ``conj``. They call them through this module, which ``blu.lax`` fills when
it is imported (``register``), as ``blu.transforms.ops`` does for the transforms. Rules only
run after ``blu.lax`` is imported, so the table is full by then.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from blu.core.errors import BluError

NAMES = ("reduce_sum", "slice", "slice_in_dim", "sub", "select", "real", "conj")

_fns: dict[str, Callable[..., Any]] = {}


def register(**fns: Callable[..., Any]) -> None:
    """Give the lower families the higher ones' functions (called once by ``blu.lax``).

    Raises:
        BluError: a name of ``NAMES`` is missing, or an unknown name is given.
    """
    if sorted(fns) != sorted(NAMES):
        raise BluError(f"blu.lax._late.register needs exactly {NAMES}, got {sorted(fns)}")
    _fns.update(fns)


def _fn(name: str) -> Callable[..., Any]:
    try:
        return _fns[name]
    except KeyError:
        raise BluError(f"lax rules need blu.lax's {name!r}: import blu.lax") from None


def reduce_sum(x: Any, axes: Sequence[int] | int | None = None) -> Any:
    """``lax.reduce_sum`` (``reductions.py``)."""
    return _fn("reduce_sum")(x, axes)


def slice(
    x: Any,
    start_indices: Sequence[int],
    limit_indices: Sequence[int],
    strides: Sequence[int] | None = None,
) -> Any:
    """``lax.slice`` (``slicing.py``)."""
    return _fn("slice")(x, start_indices, limit_indices, strides)


def slice_in_dim(x: Any, start_index: int, limit_index: int, stride: int = 1, axis: int = 0) -> Any:
    """``lax.slice_in_dim`` (``slicing.py``)."""
    return _fn("slice_in_dim")(x, start_index, limit_index, stride, axis)


def sub(x: Any, y: Any) -> Any:
    """``lax.sub`` (``elementwise.py``)."""
    return _fn("sub")(x, y)


def select(pred: Any, on_true: Any, on_false: Any) -> Any:
    """``lax.select`` (``elementwise.py``)."""
    return _fn("select")(pred, on_true, on_false)


def real(x: Any) -> Any:
    """``lax.real`` (``complex.py``)."""
    return _fn("real")(x)


def conj(x: Any) -> Any:
    """``lax.conj`` (``complex.py``)."""
    return _fn("conj")(x)
