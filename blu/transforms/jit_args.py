"""jit's argument options: ``static_argnums`` / ``static_argnames`` and ``donate_argnums`` /
``donate_argnames`` checked against the function's signature and normalized to positions and
names."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

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
    """``value`` (one ``kind`` or any iterable of them: a range, a set, a 1-d integer array, as
    JAX's ``_ensure_index_tuple`` / ``_ensure_str_tuple``) as a tuple, checked.

    Raises:
        BluTypeError: an entry of another type (``bool`` is not an int here).
    """

    def is_one(v: Any) -> bool:
        return dtypes.is_int_scalar(v) if kind is int else isinstance(v, kind)

    if is_one(value):
        vals = (value,)
    elif isinstance(value, np.ndarray) and value.ndim == 0:
        vals = (value[()],)  # a 0-d integer array is one position (JAX's operator.index)
    elif hasattr(value, "__iter__") and not isinstance(value, (str, bytes)):
        vals = tuple(value)
    else:
        vals = None
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


def _normalize_donate(fun: Callable, donate_argnums: Any, donate_argnames: Any,
                      static_nums: frozenset, static_names: frozenset) -> tuple:  # fmt: skip
    """Donated positions and names, checked against the signature and the static ones at
    ``jit`` time. As JAX's: given one of ``donate_argnums`` / ``donate_argnames``, the other is
    inferred from the signature (a donated parameter is donated whether passed by position or
    by keyword); given both, each applies only to the way it names the argument.

    Raises:
        BluValueError: a position that is not an int, out of range, or also static; a name that
            is not a parameter (of a function without ``**kwargs``), positional-only, or also
            static; ``donate_argnames`` for a function whose signature Python cannot tell.
        BluTypeError: ``donate_argnames`` not a str or a sequence of them.
    """
    given_nums, given_names = donate_argnums is not None, donate_argnames is not None
    if dtypes.is_int_scalar(donate_argnums):
        nums = (int(donate_argnums),)
    elif donate_argnums is None:
        nums = ()
    elif isinstance(donate_argnums, np.ndarray) and donate_argnums.ndim == 0:
        nums = (donate_argnums[()],)  # a numpy scalar: an integer one is a position
    elif hasattr(donate_argnums, "__iter__") and not isinstance(donate_argnums, str):
        nums = tuple(donate_argnums)  # any sequence of positions (a range, an array), as JAX
    else:  # a float, a str...: not a position nor a sequence of them
        nums = (donate_argnums,)
    bad_type = [i for i in nums if not dtypes.is_int_scalar(i)]
    if bad_type:
        raise BluValueError(
            with_user_line(f"jit: donate_argnums must be ints (positions), got {bad_type}")
        )
    nums = tuple(int(i) for i in nums)
    names = _as_tuple(donate_argnames, str, "donate_argnames") if given_names else ()
    params, positional = _signature(fun)
    known_signature = bool(params) or not _no_signature(fun)
    if given_names and not known_signature:
        raise BluValueError(
            with_user_line(
                f"jit: the signature of {fun!r} is unknown, so donate_argnames {list(names)} "
                "cannot be matched to its parameters; pass donate_argnums instead"
            )
        )
    if params and not any(p.kind == p.VAR_POSITIONAL for p in params):
        nums = _in_range(nums, positional, "donate_argnums")
    elif any(i < 0 for i in nums):
        raise BluValueError(
            with_user_line(
                f"jit: negative donate_argnums {list(nums)} for a function of *args: the "
                "number of arguments is not known until the call"
            )
        )
    if known_signature:
        _check_argnames(params, names, "donate_argnames")
    by_either = [p.name for p in params if p.kind == p.POSITIONAL_OR_KEYWORD]
    if given_names and not given_nums:
        nums = tuple(positional.index(n) for n in by_either if n in names)
    elif given_nums and not given_names:
        names = tuple(n for n in by_either if positional.index(n) in nums)
    both = sorted(set(nums) & set(static_nums))
    both_names = sorted(set(names) & set(static_names))
    if both or both_names:
        raise BluValueError(
            with_user_line(
                f"jit: argument(s) {both or both_names} are both static and donated: a static "
                "argument is a Python value (part of the cache key), not a buffer that can be "
                "donated"
            )
        )
    return frozenset(nums), frozenset(names)


def _no_signature(fun: Callable) -> bool:
    try:
        inspect.signature(fun)
    except (TypeError, ValueError):
        return True
    return False


def _check_argnames(params: list, names: tuple, what: str) -> None:
    """JAX's check of argument names: none positional-only; each a parameter, unless the
    function takes ``**kwargs``."""
    positional_only = [n for n in names if any(p.name == n and p.kind == p.POSITIONAL_ONLY
                                               for p in params)]  # fmt: skip
    if positional_only:
        raise BluValueError(
            with_user_line(
                f"jit: {what} {positional_only} are positional-only parameters: they cannot "
                "be passed by keyword"
            )
        )
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return
    known = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    bad = [n for n in names if n not in known]
    if bad:
        raise BluValueError(
            with_user_line(
                f"jit: {what} {bad} are not parameters of the function (its parameters: "
                f"{sorted(p.name for p in params)})"
            )
        )


def donated_leaf_flags(in_tree: Any, donated: list) -> list:
    """Per leaf of ``(dyn_args, dyn_kwargs)`` (``in_tree``), whether it is donated, from
    ``donated``: one flag per dynamic positional argument, then per keyword one (sorted)."""
    args_tree, kwargs_tree = in_tree.children()
    subtrees = [*args_tree.children(), *kwargs_tree.children()]
    return [d for d, t in zip(donated, subtrees) for _ in range(t.num_leaves)]
