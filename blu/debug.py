"""``blu.debug`` (JAX's ``jax.debug``): print and call back from inside ``jit`` / ``vmap`` /
``grad`` with the runtime values.

- ``blu.debug.print("x = {x}", x=x)`` formats with ``str.format`` on numpy arrays when the
  program runs (not when it is traced), every call, jitted or not.
- ``blu.debug.callback(fn, *args)`` calls ``fn`` on the host with numpy arrays; its return value
  is dropped. Both are effects: dead-code elimination keeps them although they have no results.

Under ``vmap`` the callback sees the whole batch (the mapped axis first); under ``grad`` it sees
the primal values.

- ``blu.debug.inspect_array_sharding(x, callback=f)`` calls ``f(sharding)`` with how ``x`` is
  laid out; ``visualize_array_sharding(x)`` / ``visualize_sharding(shape, sharding)`` print it
  as a grid of devices (plain text with box-drawing characters, no ``rich``; see
  ``blu/debug_sharding.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blu.core import pytree
from blu.core.errors import BluTypeError, with_user_line
from blu.debug_sharding import (
    inspect_array_sharding,
    visualize_array_sharding,
    visualize_sharding,
)
from blu.lax.callback import debug_callback_p

__all__ = [
    "breakpoint",
    "callback",
    "inspect_array_sharding",
    "print",
    "visualize_array_sharding",
    "visualize_sharding",
]


def callback(fn: Callable[..., Any], *args: Any, ordered: bool = False, **kwargs: Any) -> None:
    """Call ``fn(*args, **kwargs)`` on the host with the runtime values (numpy arrays).

    Args:
        fn: a Python function; its return value is ignored.
        args, kwargs: pytrees of arrays (any shapes and dtypes) and Python values.
        ordered: accepted for JAX's signature; calls already run in program order.

    Raises:
        BluTypeError: ``fn`` is not callable.
    """
    del ordered
    if not callable(fn):
        raise BluTypeError(with_user_line(f"debug.callback: {fn!r} is not callable"))
    leaves, treedef = pytree.tree_flatten((args, kwargs))

    def host(*vals: Any) -> None:
        a, kw = pytree.tree_unflatten(treedef, list(vals))
        fn(*a, **kw)

    debug_callback_p.bind(*leaves, callback=host)


def print(fmt: str, *args: Any, ordered: bool = False, **kwargs: Any) -> None:  # noqa: A001
    """Print ``fmt.format(*args, **kwargs)`` with the runtime values (numpy arrays).

    Example: ``blu.debug.print("loss {l:.3f} at step {}", step, l=loss)`` inside a jitted step.

    Args:
        fmt: a ``str.format`` template.
        args, kwargs: arrays, tracers or pytrees of them.
        ordered: accepted for JAX's signature.
    """
    import builtins

    callback(lambda *a, **kw: builtins.print(fmt.format(*a, **kw)), *args, **kwargs)


def breakpoint(*args: Any, **kwargs: Any) -> None:  # noqa: A001
    """Not available: raises ``BluTypeError`` (use ``blu.disable_jit()`` and Python's
    ``breakpoint()``, or ``blu.debug.callback(lambda *a: breakpoint(), x)``)."""
    raise BluTypeError(
        "blu.debug.breakpoint is not available: run the function under blu.disable_jit() and "
        "use Python's breakpoint(), or blu.debug.callback(lambda x: breakpoint(), x)"
    )
