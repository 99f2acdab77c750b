"""Helpers shared by ``custom_jvp`` and ``custom_vjp`` (``custom_jvp.py``, ``custom_vjp.py``):
keyword arguments made positional, the split into ``nondiff_argnums`` and differentiable
arguments, the check of a rule's outputs against the function's, casts, batch axes to the
front.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from blu.core.errors import BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.transforms import ops
from blu.transforms.ad_util import tangent_aval
from blu.transforms.batching import moveaxis


def resolve_args(fun: Callable, args: tuple, kwargs: dict) -> tuple:
    """Keyword arguments become positional (the rules see one flat argument order)."""
    if not kwargs:
        return args
    try:
        bound = inspect.signature(fun).bind(*args, **kwargs)
    except TypeError as e:
        raise BluTypeError(with_user_line(f"{fun_name(fun)}: {e}")) from e
    bound.apply_defaults()
    if bound.kwargs:
        raise BluTypeError(
            with_user_line(f"{fun_name(fun)}: keyword-only arguments are not supported")
        )
    return tuple(bound.args)


def fun_name(fun: Callable) -> str:
    return getattr(fun, "__name__", "fun")


def positional_counts(fun: Callable) -> tuple[int, ...]:
    """The fewest and the most positional arguments ``fun`` takes; () where that is not known
    (no signature, or ``*args``)."""
    try:
        params = inspect.signature(fun).parameters.values()
    except (TypeError, ValueError):
        return ()
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return ()
    pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return tuple(sorted({sum(p.default is p.empty for p in pos), len(pos)}))


def check_rule(where: str, what: str, rule: Any, counts: Sequence[int], takes: str) -> None:
    """Raise unless ``rule`` is callable and, where its signature is known, takes a number of
    positional arguments from ``counts[0]`` to ``counts[-1]`` (() : any): checked when the rule
    is set (``defjvp``, ``defvjp``), so a bad rule leaves the function's previous rule in place.

    Raises:
        BluTypeError: naming ``where`` (``custom_jvp f.defjvp``), ``what`` (``the JVP rule``)
            and what it should take (``takes``).
    """
    if not callable(rule):
        raise BluTypeError(
            with_user_line(f"{where}: {what} must be callable, got {type(rule).__name__}")
        )
    try:
        sig = inspect.signature(rule)
    except (TypeError, ValueError):  # a builtin without a signature: checked when called
        return
    if not counts or any(_binds(sig, n) for n in range(counts[0], counts[-1] + 1)):
        return
    n = " to ".join(map(str, counts))
    raise BluTypeError(
        with_user_line(
            f"{where}: {what} {fun_name(rule)}{sig} cannot take {n} positional arguments; it "
            f"takes {takes}"
        )
    )


def refuse_symbolic_zeros(where: str, symbolic_zeros: Any, rules_get: str) -> None:
    """JAX's ``symbolic_zeros=True`` (rules that see which inputs are perturbed) is not in blu:
    the rules are traced when the function is called, before any transform says which inputs
    carry tangents.

    Raises:
        BluValueError: ``symbolic_zeros`` is true.
    """
    if symbolic_zeros:
        raise BluValueError(
            with_user_line(
                f"{where}: symbolic_zeros=True is not supported: blu traces the rules when the "
                f"function is called, before it knows which inputs are perturbed; {rules_get} "
                "(JAX's symbolic_zeros=False)"
            )
        )


def _binds(sig: inspect.Signature, n: int) -> bool:
    try:
        sig.bind(*range(n))
    except TypeError:
        return False
    return True


def split_nondiff(args: tuple, nondiff: tuple[int, ...]):
    # a negative index counts from the end, as Python's (JAX's rules get args[i] too); an
    # index out of range is JAX's ValueError; one named twice (1 and -1) is refused too
    n = len(args)
    bad = [i for i in nondiff if not -n <= i < n]
    if bad:
        raise BluValueError(
            with_user_line(
                f"nondiff_argnums {tuple(nondiff)}: index {bad[0]} is out of range for a call "
                f"with {n} positional argument(s)"
            )
        )
    idx = tuple(i % n for i in nondiff)
    if len(set(idx)) < len(idx):
        raise BluValueError(
            with_user_line(
                f"nondiff_argnums {tuple(nondiff)} name an argument twice (as {idx} of {n} "
                "positional arguments)"
            )
        )
    nondiff = idx
    static = [(i, args[i]) for i in nondiff]
    dyn = tuple(a for i, a in enumerate(args) if i not in nondiff)
    return static, dyn


def with_static(static: list, dyn: Sequence[Any]) -> list:
    it = iter(dyn)
    n = len(static) + len(dyn)
    pos = dict(static)
    return [pos[i] if i in pos else next(it) for i in range(n)]


def check_outputs(what: str, want_tree, want_avals, got_tree, got_avals, tangent: bool) -> None:
    if got_tree != want_tree:
        raise BluTypeError(
            with_user_line(
                f"{what} returned structure {got_tree}, but the function returns {want_tree}"
            )
        )
    for i, (w, g) in enumerate(zip(want_avals, got_avals)):
        w = tangent_aval(w) if tangent else w
        if w.shape != g.shape or (w.dtype != g.dtype and not g.weak_type):
            raise BluTypeError(
                with_user_line(
                    f"{what}: output leaf {i} is {g.str_short()} but the function's is "
                    f"{w.str_short()}; shapes and dtypes must match"
                )
            )


def cast_to(x: Any, aval) -> Any:
    return ops.convert_element_type(x, aval.dtype) if get_aval(x).dtype != aval.dtype else x


def front(xs: Sequence[Any], dims: Sequence[int | None]) -> tuple[list[Any], list[Any]]:
    """Batched operands with their batch axis moved to 0 (unbatched ones stay)."""
    xs = [x if d is None else moveaxis(x, d, 0) for x, d in zip(xs, dims)]
    return xs, [None if d is None else 0 for d in dims]
