"""Operand conversion of the n-ary lax functions (``add(x, 2.0)``): Python scalars take the dtype
and shape of the first array operand; lax never promotes arrays.

Above ``shapes`` (a scalar is broadcast with ``broadcast_in_dim``) and below ``elementwise``,
which re-exports ``as_operands`` as ``operands``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.array import Array
from blu.core.errors import BluTypeError, with_user_line
from blu.core.interpreter import get_aval
from blu.lax.shapes import broadcast_in_dim

__all__: list[str] = []  # helpers for lax's own functions; nothing public


def as_operands(*args: Any, broadcast: bool = False) -> list[Any]:
    """Make the operands of an n-ary lax function agree: Python scalars are weakly typed and
    take the dtype and shape of the first array operand (so ``add(x, 2.0)`` works for any float
    ``x`` and stays weak iff ``x`` is). Arrays are left as they are; abstract eval then checks
    that shapes and dtypes match (lax does not promote).

    ``np.float64`` (which subclasses ``float``) is not taken for a Python scalar, so
    ``eq(np.float64(x), 0)`` (numpy scalars reach rules from jaxpr literals) compares in float64;
    operands that are all Python scalars are promoted together; a float scalar next to an integer
    or bool array, or an int out of the array's range, is an error rather than a silent
    conversion.

    ``broadcast`` (the elementwise functions'): then a 0-d operand takes the others' shape and
    operands of one rank broadcast their size-1 dimensions, as JAX's lax does (never ranks).

    Raises:
        BluTypeError: a float scalar with an integer/bool array, or an int that does not fit.
    """

    def is_scalar(a: Any) -> bool:
        return isinstance(a, (bool, int, float, complex))  # np.float64 included

    ref = next((a for a in args if not is_scalar(a)), None)
    if ref is None:
        ref = next((a for a in args if isinstance(a, np.generic)), None)
    if ref is None:
        dt, shape = dtypes.result_type(*args), ()
    else:
        aval = get_aval(ref)
        dt, shape = aval.dtype, aval.shape
    out = []
    for a in args:
        if a is ref or not is_scalar(a):
            out.append(a)
            continue
        if isinstance(a, complex) and not dtypes.is_complex(dt):
            raise BluTypeError(
                with_user_line(
                    f"the complex scalar {a!r} cannot take the dtype {dtypes.short_name(dt)} of "
                    "the other operand (lax does not promote): convert it explicitly"
                )
            )
        if isinstance(a, float) and not dtypes.is_inexact(dt):
            raise BluTypeError(
                with_user_line(
                    f"the float scalar {a!r} cannot take the dtype {dtypes.short_name(dt)} of "
                    "the other operand (lax does not promote): convert it explicitly"
                )
            )
        try:
            val = np.asarray(a, dt)
        except OverflowError as e:
            raise BluTypeError(with_user_line(f"{a!r} does not fit in {dt}")) from e
        x = Array(val, not isinstance(a, np.generic))  # numpy scalars are strongly typed
        out.append(broadcast_in_dim(x, shape, ()) if shape else x)
    return _broadcast(out) if broadcast else out


def _broadcast(args: list[Any]) -> list[Any]:
    """JAX's broadcasting of lax's n-ary elementwise functions: a 0-d operand takes the others'
    shape, and operands of one rank broadcast their size-1 dimensions; ranks are never added.
    Shapes that do not broadcast are left for the primitive's check to name."""
    shapes = [get_aval(a).shape for a in args]
    ranked = [s for s in shapes if s]
    if len(set(shapes)) < 2 or not ranked or len({len(s) for s in ranked}) != 1:
        return args
    target = []
    for sizes in zip(*ranked):
        big = {d for d in sizes if d != 1}
        if len(big) > 1:
            return args
        target.append(big.pop() if big else 1)
    target_shape = tuple(target)
    return [
        a if s == target_shape else broadcast_in_dim(a, target_shape, tuple(range(len(s))))
        for a, s in zip(args, shapes)
    ]
