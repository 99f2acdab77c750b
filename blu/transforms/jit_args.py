"""jit's argument options: ``static_argnums`` / ``static_argnames`` and ``donate_argnums``
checked against the function's signature and normalized to positions and names."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from blu.core import dtypes
from blu.core.errors import BluTypeError, BluValueError, with_user_line


def _signature(fun: Callable) -> tuple[list, list[str]]:
    """``fun``'s parameters (none where Python cannot tell) and its positional parameter names."""
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return params, positional


def _in_range(nums: tuple, positional: list[str], what: str) -> tuple:
    """``nums`` as non-negative positions of ``positional``; out-of-range ones raise."""
    bad = [i for i in nums if not -len(positional) <= i < len(positional)]
    if bad:
        raise BluValueError(
            with_user_line(
                f"jit: {what} {bad} out of range for a function of {len(positional)} positional "
                f"parameters {positional}"
            )
        )
    return tuple(i % len(positional) for i in nums)


def _as_tuple(value: Any, kind: type, what: str) -> tuple:
    """``value`` (one ``kind`` or a sequence of them) as a tuple, checked.

    Raises:
        BluTypeError: an entry of another type (``bool`` is not an int here).
    """

    def is_one(v: Any) -> bool:
        return dtypes.is_int_scalar(v) if kind is int else isinstance(v, kind)

    vals = (value,) if is_one(value) else value if isinstance(value, (tuple, list)) else None
    ok = vals is not None and all(is_one(v) for v in vals)
    if not ok:
        raise BluTypeError(
            with_user_line(
                f"jit: {what} must be {'an int' if kind is int else 'a str'} or a sequence of "
                f"them, got {value!r}"
            )
        )
    return tuple(int(v) for v in vals) if kind is int else tuple(vals)


def _normalize_static(fun: Callable, static_argnums: Any, static_argnames: Any):
    nums = _as_tuple(() if static_argnums is None else static_argnums, int, "static_argnums")
    names = _as_tuple(() if static_argnames is None else static_argnames, str, "static_argnames")
    params, positional = _signature(fun)
    if params and not any(p.kind == p.VAR_POSITIONAL for p in params):
        nums = _in_range(nums, positional, "static_argnums")
    elif any(i < 0 for i in nums):
        raise BluValueError(
            with_user_line(
                f"jit: negative static_argnums {list(nums)} for a function of *args: the "
                "number of arguments is not known until the call; count from the front"
            )
        )
    if params and not any(p.kind == p.VAR_KEYWORD for p in params):
        known = {p.name for p in params}
        bad_names = [n for n in names if n not in known]
        if bad_names:
            raise BluValueError(
                with_user_line(
                    f"jit: static_argnames {bad_names} are not parameters of the function "
                    f"(its parameters: {sorted(known)})"
                )
            )
    names = set(names) | {positional[i] for i in nums if i < len(positional)}
    nums = set(nums) | {positional.index(n) for n in names if n in positional}
    return frozenset(nums), frozenset(names)


def _normalize_donate(fun: Callable, donate_argnums: Any, static_nums: frozenset) -> frozenset:
    """Donated positions, checked against the signature and the static ones at ``jit`` time.

    Raises:
        BluValueError: a position that is not an int, out of range, or also static.
    """
    nums = (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums or ())
    bad_type = [i for i in nums if not isinstance(i, int) or isinstance(i, bool)]
    if bad_type:
        raise BluValueError(
            with_user_line(f"jit: donate_argnums must be ints (positions), got {bad_type}")
        )
    params, positional = _signature(fun)
    if params and not any(p.kind == p.VAR_POSITIONAL for p in params):
        nums = _in_range(nums, positional, "donate_argnums")
    elif any(i < 0 for i in nums):
        raise BluValueError(
            with_user_line(
                f"jit: negative donate_argnums {list(nums)} for a function of *args: the "
                "number of arguments is not known until the call"
            )
        )
    both = sorted(set(nums) & set(static_nums))
    if both:
        raise BluValueError(
            with_user_line(
                f"jit: argument(s) {both} are both static and donated: a static argument is "
                "a Python value (part of the cache key), not a buffer that can be donated"
            )
        )
    return frozenset(nums)
