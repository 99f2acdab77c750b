"""Host callbacks: ``pure_callback_p`` (a pure host function with declared result shapes) and
``debug_callback_p`` (an effect whose one int32 token result is unused, kept by DCE:
``blu.debug.print``).

Both run the Python function on the host with numpy arrays, eagerly, under ``jit`` (a primitive
without a kernel lowering runs its impl between the compiled kernels) and under ``vmap``.
``pure_callback`` has no derivative (as in JAX: wrap it in ``blu.custom_jvp``); a debug callback
sees the primal values under ``grad`` and adds nothing to the derivative.

The user-facing functions are ``blu.pure_callback`` and ``blu.debug.callback`` / ``print``
(``blu/debug.py``).
"""

from __future__ import annotations

__all__: list[str] = []  # the public functions live in blu.debug / blu.pure_callback

from collections.abc import Callable
from typing import Any

import numpy as np

from blu.core.aval import ShapedArray
from blu.core.errors import BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.jaxpr import _EFFECTFUL
from blu.core.primitive import Primitive
from blu.transforms.ad_util import Zero, tangent_aval
from blu.transforms.batching import bdim_to_front

pure_callback_p = Primitive("pure_callback", multiple_results=True)
debug_callback_p = Primitive("debug_callback", multiple_results=True)
_EFFECTFUL.add(debug_callback_p.name)  # its result is unused: DCE must keep it
# a debug callback returns one unused int32 scalar (a token), so the equation has an output
# like every other for the plan's passes
_TOKEN = ShapedArray((), np.dtype(np.int32))


def _host(x: Any) -> np.ndarray:
    return np.asarray(x)


# ---- pure_callback ---------------------------------------------------------------------------


@pure_callback_p.def_impl
def _pure_impl(*args: Any, callback: Callable, result_avals: tuple, vmap_method: str | None):
    outs = callback(*[_host(a) for a in args])
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    if len(outs) != len(result_avals):
        raise BluValueError(
            with_user_line(
                f"pure_callback: the callback returned {len(outs)} arrays, "
                f"result_shape_dtypes declares {len(result_avals)}"
            )
        )
    got = []
    for o, (shape, dtype) in zip(outs, result_avals):
        o = np.asarray(o)
        if o.shape != shape:
            raise BluValueError(
                with_user_line(
                    f"pure_callback: the callback returned shape {o.shape}, "
                    f"result_shape_dtypes declares {shape} ({np.dtype(dtype).name})"
                )
            )
        got.append(o.astype(dtype, copy=False))
    return got


@pure_callback_p.def_abstract_eval
def _pure_abstract(*avals: Any, callback: Callable, result_avals: tuple, vmap_method: str | None):
    return [ShapedArray(shape, np.dtype(dtype)) for shape, dtype in result_avals]


@pure_callback_p.def_jvp
def _pure_jvp(primals, tangents, **params):
    if all(isinstance(t, Zero) for t in tangents):
        outs = pure_callback_p.bind(*primals, **params)
        return outs, [Zero(tangent_aval(get_aval(o))) for o in outs]
    raise BluTypeError(
        with_user_line(
            "pure_callback has no derivative: the host function is opaque to blu "
            "(as in JAX); give it one with blu.custom_jvp or blu.custom_vjp"
        )
    )


@pure_callback_p.def_batch
def _pure_batch(axis_size, args, dims, *, callback, result_avals, vmap_method):
    front = [bdim_to_front(a, d, axis_size) for a, d in zip(args, dims)]
    batched = tuple(((axis_size,) + tuple(shape), dtype) for shape, dtype in result_avals)
    if vmap_method in ("expand_dims", "broadcast_all"):
        # the callback takes the whole batch in the leading axis (numpy-broadcasting functions)
        outs = pure_callback_p.bind(
            *front, callback=callback, result_avals=batched, vmap_method=vmap_method
        )
        return outs, [0] * len(outs)

    def sequential(*xs):
        rows = [callback(*[np.asarray(x[i]) for x in xs]) for i in range(axis_size)]
        rows = [list(r) if isinstance(r, (tuple, list)) else [r] for r in rows]
        return [
            np.stack([np.asarray(r[k]) for r in rows]).reshape((axis_size,) + tuple(shape))
            for k, (shape, _) in enumerate(result_avals)
        ]

    outs = pure_callback_p.bind(
        *front, callback=sequential, result_avals=batched, vmap_method="sequential_done"
    )
    return outs, [0] * len(outs)


# ---- debug_callback --------------------------------------------------------------------------


@debug_callback_p.def_impl
def _debug_impl(*args: Any, callback: Callable):
    callback(*[_host(a) for a in args])
    return [np.zeros((), np.int32)]


@debug_callback_p.def_abstract_eval
def _debug_abstract(*avals: Any, callback: Callable):
    return [_TOKEN]


@debug_callback_p.def_jvp
def _debug_jvp(primals, tangents, *, callback):
    outs = debug_callback_p.bind(*primals, callback=callback)
    return outs, [Zero(tangent_aval(_TOKEN))]


@debug_callback_p.def_batch
def _debug_batch(axis_size, args, dims, *, callback):
    # the callback sees the whole batch (leading axis), as JAX's debug.print under vmap
    front = [bdim_to_front(a, d, axis_size) if d is not None else a for a, d in zip(args, dims)]
    return debug_callback_p.bind(*front, callback=callback), [None]
