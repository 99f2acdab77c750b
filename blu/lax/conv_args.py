"""The window arguments of the convolution and windowed reductions: padding strings as explicit
``(low, high)`` pads (``padtype_to_pads``) and the checks of stride/dilation tuples."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from blu.core.errors import BluTypeError, BluValueError, with_user_line


def padtype_to_pads(
    in_shape: Sequence[int],
    window_shape: Sequence[int],
    window_strides: Sequence[int],
    padding: str,
) -> list[tuple[int, int]]:
    """``"SAME"`` / ``"SAME_LOWER"`` / ``"VALID"`` as explicit ``(low, high)`` pads per axis.

    ``SAME`` pads so that ``out = ceil(in / stride)``, the odd element on the high side
    (``SAME_LOWER``: on the low side); ``VALID`` pads nothing.

    Raises:
        BluValueError: an unknown padding string.
    """
    p = padding.upper()
    if p == "VALID":
        return [(0, 0)] * len(in_shape)
    if p not in ("SAME", "SAME_LOWER"):
        raise BluValueError(
            with_user_line(
                f"conv: padding must be 'SAME', 'SAME_LOWER', 'VALID' or pairs, got {padding!r}"
            )
        )
    out = []
    for n, w, s in zip(in_shape, window_shape, window_strides):
        total = max((-(-n // s) - 1) * s + w - n, 0)
        lo, hi = total // 2, total - total // 2
        out.append((lo, hi) if p == "SAME" else (hi, lo))
    return out


def as_int(v: Any, name: str, what: str = "conv") -> int:
    """``v`` as an int: a Python or numpy integer (``operator.index``), as JAX takes; a float
    such as 1.5 or a string is refused (``int()`` truncated 1.5 to 1 and read ``"2"``).

    Raises:
        BluTypeError: naming ``name`` and the value.
    """
    try:
        return operator.index(v)
    except TypeError:
        raise BluTypeError(with_user_line(f"{what}: {name} must be an int, got {v!r}")) from None


def int_tuple(v: Any, n: int, name: str, minimum: int, what: str = "conv") -> tuple[int, ...]:
    """``v`` (None: all ones) as ``n`` ints >= ``minimum``.

    Raises:
        BluTypeError: ``v`` is not a sequence of ints; BluValueError: its length or values.
    """
    try:
        v = (1,) * n if v is None else tuple(operator.index(x) for x in v)
    except TypeError:
        raise BluTypeError(
            with_user_line(f"{what}: {name} must be a sequence of {n} ints, got {v!r}")
        ) from None
    if len(v) != n or any(x < minimum for x in v):
        raise BluValueError(
            with_user_line(f"{what}: {name} must be {n} ints >= {minimum}, got {v}")
        )
    return v


def pad_pairs(padding: Any, n: int, what: str) -> tuple[tuple[int, int], ...]:
    """Explicit padding as ``n`` ``(low, high)`` pairs of ints.

    Raises:
        BluTypeError: not a sequence of pairs of ints; BluValueError: not ``n`` pairs.
    """
    msg = f"{what}: padding must be a string or {n} (low, high) pairs, got {padding!r}"
    try:
        pads = tuple(tuple(operator.index(p) for p in pr) for pr in padding)
    except TypeError:
        raise BluTypeError(with_user_line(msg)) from None
    if len(pads) != n or any(len(pr) != 2 for pr in pads):
        raise BluValueError(with_user_line(msg))
    return pads
