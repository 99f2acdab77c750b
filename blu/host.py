"""Host-side helpers under JAX's names: ``block_until_ready``, ``device_get``, ``disable_jit``.

- ``block_until_ready(tree)`` waits for every array leaf's producing work (a GPU
  ``DeviceArray`` synchronises its device; CPU arrays are already computed) and returns ``tree``.
- ``device_get(tree)`` copies every array leaf to a ``numpy.ndarray`` (GPU and sharded arrays
  are copied to the host); other leaves (Python scalars, strings) are returned unchanged.
- ``with disable_jit(): ...`` makes ``blu.jit`` functions call their Python function directly,
  op by op, so ``print`` and Python control flow on values work inside them (for debugging).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from blu.core import pytree
from blu.core.config import config
from blu.core.errors import BluTypeError, with_user_line
from blu.core.interpreter import Tracer

__all__ = ["block_until_ready", "device_get", "disable_jit"]


def block_until_ready(x: Any) -> Any:
    """Wait until every array in the pytree ``x`` has been computed; return ``x``.

    Args:
        x: a pytree; leaves with a ``block_until_ready`` method (``blu.Array``, GPU
            ``DeviceArray``, sharded arrays) are waited on, other leaves (numpy arrays, Python
            scalars, tracers) are left alone.

    Returns:
        ``x`` itself (the same object).
    """
    for leaf in pytree.tree_leaves(x):
        if isinstance(leaf, Tracer):
            continue  # nothing to wait for while tracing (as JAX)
        wait = getattr(leaf, "block_until_ready", None)
        if callable(wait):
            wait()
    return x


def _to_host(leaf: Any) -> Any:
    if isinstance(leaf, Tracer):
        raise BluTypeError(
            with_user_line(
                f"device_get: cannot copy a traced value ({leaf.aval.str_short()}) to the host "
                "inside jit/grad/vmap; call it on concrete results"
            )
        )
    if isinstance(leaf, np.ndarray) or not hasattr(leaf, "__array__"):
        return leaf  # numpy arrays and Python scalars/strings are already host values
    return np.asarray(leaf)


def device_get(x: Any) -> Any:
    """Copy the arrays of the pytree ``x`` to the host as numpy arrays (``numpy.ndarray``).

    Args:
        x: a pytree of ``blu.Array``, GPU ``DeviceArray``, sharded arrays, numpy arrays or
            Python values.

    Returns:
        The same structure with every array leaf a ``numpy.ndarray`` of its shape and dtype
        (a sharded array gives its global value); other leaves unchanged.

    Raises:
        BluTypeError: a leaf is a tracer (called inside a transformed function).
    """
    return pytree.tree_map(_to_host, x)


@contextlib.contextmanager
def disable_jit(disable: bool = True) -> Iterator[None]:
    """Context manager: inside it ``blu.jit`` functions run their Python function eagerly.

    Nothing is traced or compiled, so values are concrete in the function body (``print``,
    ``if x > 0``) and the results are those of eager execution. Static arguments are passed
    through as given. The previous setting is restored on exit (the flag is
    ``blu.config.disable_jit``, also set by ``BLU_DISABLE_JIT=1``).

    Args:
        disable: ``False`` re-enables jit inside an enclosing ``disable_jit()`` block.
    """
    with config.override(disable_jit=bool(disable)):
        yield
