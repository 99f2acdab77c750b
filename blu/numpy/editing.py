"""jax.numpy's functional editing and choosing: ``choose``.

Each returns a new array (blu arrays are immutable, as JAX's); indices that decide the result's
shape must be static, as in JAX.
"""

from __future__ import annotations

from typing import Any

from blu import lax
from blu.core import dtypes
from blu.core.errors import BluIndexError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.numpy._promote import (
    asarray_operand,
    broadcast_shapes,
    broadcast_to,
    concrete_value,
    promote_dtypes,
)
from blu.numpy.ufuncs import clip, mod

__all__ = ["choose"]


def _int_operand(x: Any, name: str, arg: str) -> Any:
    """``x`` as an array of integers.

    Raises:
        BluTypeError: ``x`` is not of an integer dtype.
    """
    x = asarray_operand(x)
    aval = get_aval(x)
    if not dtypes.is_int(aval.dtype):
        raise BluTypeError(
            with_user_line(f"{name}: {arg} must be integers, got {aval.str_short()}")
        )
    return x


def choose(a: Any, choices: Any, out: None = None, mode: str = "raise") -> Any:
    """``choices[a[i]][i]`` for every ``i`` of the broadcast shape of ``a`` and the choices
    (``jax.numpy.choose``), in the choices' promoted dtype.

    Args:
        a: integer indices into ``choices``.
        choices: a sequence of arrays (or an array, split along its first axis), broadcastable
            with ``a`` and each other.
        out: must be None (arrays are immutable).
        mode: 'raise' (indices outside ``[0, n)`` are an error; needs a concrete ``a``, so not
            under ``jit``, as JAX), 'wrap' (modulo ``n``) or 'clip'.

    Differentiable in ``choices``.

    Raises:
        BluTypeError: ``a`` is not integer. BluIndexError: an index out of range with 'raise'.
        BluValueError: no choices, an unknown ``mode``, or ``out``.
        ConcretizationError: a traced ``a`` with ``mode='raise'``.
        BluShapeError: shapes that do not broadcast.
    """
    if out is not None:
        raise BluValueError(with_user_line("choose: out= is not supported (arrays are immutable)"))
    if mode not in ("raise", "wrap", "clip"):
        raise BluValueError(
            with_user_line(f"choose: mode must be 'raise', 'wrap' or 'clip', got {mode!r}")
        )
    a = _int_operand(a, "choose", "a (the choice indices)")
    if isinstance(choices, (list, tuple)):
        cases = list(choices)
    else:
        arr = asarray_operand(choices)
        if get_aval(arr).ndim == 0:
            raise BluValueError(with_user_line("choose: choices must be a sequence of arrays"))
        cases = [lax.index_in_dim(arr, i, 0, keepdims=False) for i in range(get_aval(arr).shape[0])]
    n = len(cases)
    if n == 0:
        raise BluValueError(with_user_line("choose: choices is empty"))
    if mode == "raise":
        av = concrete_value(a, "choose with mode='raise' (use mode='wrap' or 'clip' under jit)")
        if av.size and (av.min() < 0 or av.max() >= n):
            raise BluIndexError(
                with_user_line(
                    f"choose: a (shape {av.shape}) has entries outside [0, {n}) for {n} "
                    f"choices (min {av.min()}, max {av.max()}); use mode='wrap' or 'clip'"
                )
            )
    elif mode == "wrap":
        a = mod(a, n)
    else:
        a = clip(a, 0, n - 1)
    cases = promote_dtypes(*cases)
    shape = broadcast_shapes(get_aval(a).shape, *(get_aval(c).shape for c in cases))
    which = broadcast_to(lax.convert_element_type(asarray_operand(a), dtypes.int32), shape)
    return lax.select_n(which, *(broadcast_to(c, shape) for c in cases))
