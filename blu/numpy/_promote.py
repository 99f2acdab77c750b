"""NumPy-style argument handling: dtype promotion (JAX lattice) and shape broadcasting."""

from __future__ import annotations

from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.array import Array
from blu.core.errors import BluShapeError, with_user_line
from blu.core.interpreter import Tracer, get_aval
from blu.lax.elementwise import convert_element_type
from blu.lax.shapes import broadcast_in_dim


def asarray_operand(x: Any) -> Any:
    """Arrays and tracers pass through; numpy arrays/scalars and Python scalars (and nested
    lists of them) become blu Arrays. Python scalars stay weakly typed."""
    if isinstance(x, (Array, Tracer)):
        return x
    if isinstance(x, (bool, int, float)):
        d, weak = dtypes.dtype_and_weak(x)
        return Array(np.asarray(x, d), weak)
    if isinstance(x, np.ndarray) or isinstance(x, np.generic):
        return Array(np.asarray(x, dtypes.canonicalize(x.dtype)))
    from blu.numpy.creation import array

    return array(x)


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy broadcasting of shapes.

    Raises:
        BluShapeError: the shapes do not broadcast (names all of them).
    """
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(nd):
        dims = {s[i - nd + len(s)] for s in shapes if i - nd + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise BluShapeError(
                with_user_line(
                    "shapes " + ", ".join(str(tuple(s)) for s in shapes) + " do not broadcast"
                )
            )
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def broadcast_to(x: Any, shape: tuple[int, ...]) -> Any:
    aval = get_aval(x)
    if aval.shape == tuple(shape):
        return x
    nd = len(shape)
    if aval.ndim > nd:
        raise BluShapeError(with_user_line(f"cannot broadcast {aval.str_short()} to {shape}"))
    broadcast_shapes(aval.shape, tuple(shape))
    # drop size-1 axes that broadcast, so broadcast_in_dim maps each remaining axis
    return broadcast_in_dim(x, tuple(shape), tuple(range(nd - aval.ndim, nd)))


def promote_dtypes(*args: Any) -> list[Any]:
    """Cast operands to their common dtype (JAX promotion lattice, weak scalars defer)."""
    args = [asarray_operand(a) for a in args]
    dtype, weak = dtypes.result_type(*args, return_weak_type=True)
    return [convert_element_type(a, dtype, weak_type=weak) for a in args]


def promote_args(*args: Any) -> list[Any]:
    """Promote dtypes, then broadcast shapes: what every NumPy binary function does first."""
    args = promote_dtypes(*args)
    shape = broadcast_shapes(*[get_aval(a).shape for a in args])
    return [broadcast_to(a, shape) for a in args]


def promote_args_inexact(*args: Any) -> list[Any]:
    """Like ``promote_args`` but integer/bool inputs become the default float (e.g. for sin)."""
    args = promote_args(*args)
    aval = get_aval(args[0]) if args else None
    if aval is not None and not dtypes.is_float(aval.dtype):
        args = [convert_element_type(a, dtypes.default_float, weak_type=aval.weak_type) for a in args]
    return args
