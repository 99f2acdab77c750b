"""Named axes: where a collective finds the size of ``'x'`` and, per process, its communicator.

A named axis is bound in one of two ways:

- by a batching level (``vmap(f, axis_name='x')``, and each mesh axis of ``blu.shard`` over
  virtual CPU devices): the collective's named batching rule turns it into ordinary array
  operations over the batch axis; its size is found by walking the interpreter chain;
- by a *process mesh* (``blu.shard`` with one process per device, after
  ``blu.parallel.initialize()``): the collective runs its ``impl``, which calls the
  communicator (NCCL on GPUs) of the process group along that axis.

Anything else is an unbound axis name, a clear error.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from blu.core.errors import BluValueError, with_user_line
from blu.core.interpreter import current_interpreter


def normalize_names(axis_name: Any, what: str) -> tuple[Any, ...]:
    """``'x'`` -> ``('x',)``; tuples are kept; duplicates are an error."""
    names = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
    if len(set(names)) != len(names):
        raise BluValueError(with_user_line(f"{what}: axis_name {axis_name!r} repeats a name"))
    for n in names:
        if n is None:
            raise BluValueError(with_user_line(f"{what}: axis_name must not be None"))
    return names


def _unbound(name: Any, what: str) -> BluValueError:
    return BluValueError(
        with_user_line(
            f"{what}: unbound axis name {name!r}: use it inside blu.shard or "
            "vmap(..., axis_name=...)" + _known_names_note()
        )
    )


def _known_names_note() -> str:
    names = [n for n, _ in _bound_levels()]
    return f" (axis names bound here: {names})" if names else " (no axis name is bound here)"


def _bound_levels() -> list[tuple[Any, int]]:
    """(name, size) of every named axis visible from the current interpreter, innermost first."""
    out = []
    interp = current_interpreter()
    while interp is not None:
        # a batching level that names its axis (BatchInterpreter; batching imports this module)
        if getattr(interp, "axis_name", None) is not None:
            out.append((interp.axis_name, interp.axis_size))
        interp = interp.parent
    for env in reversed(_process_envs()):
        out.extend(env.sizes.items())
    return out


def process_envs_of_thread() -> Any:
    """This thread's holder of the process meshes entered (``.envs``: a list, or absent before
    the first), for jit's fast path to read without a call per jitted call."""
    return _local


def any_process_axes() -> bool:
    """Whether this thread is inside a process-level named-axis scope (``blu.shard`` across
    processes): ``axis_env_key`` is then not empty even at the root interpreter."""
    return bool(_process_envs())


def axis_env_key() -> tuple:
    """The named axes visible here, as a hashable key: a function traced under one mesh must
    not be reused under another (its collectives' shapes and pmean's divisor depend on it)."""
    return tuple(_bound_levels())


def axis_size(name: Any, what: str = "axis_size") -> int:
    """The size of the named axis ``name`` where it is used; for a tuple (or list) of names,
    the product of their sizes (``jax.lax.axis_size``'s).

    Raises:
        BluValueError: no enclosing ``blu.shard`` / ``vmap(axis_name=...)`` binds ``name``.
    """
    if isinstance(name, (tuple, list)):
        return math.prod(axis_size(n, what) for n in normalize_names(name, what))
    for n, size in _bound_levels():
        if n == name:
            return size
    raise _unbound(name, what)


def axis_sizes(names: Sequence[Any], what: str) -> tuple[int, ...]:
    return tuple(axis_size(n, what) for n in names)


# ---- process meshes (one process per device) ----------------------------------------------------


class ProcessAxisEnv:
    """The mesh of a ``blu.shard`` running one process per device.

    Attributes:
        sizes: axis name -> size, in mesh order.
        coords: axis name -> this process's index along it.
        comms: callable ``names -> Communicator`` of the group of processes that differ only
            along ``names`` (ranks ordered by the index over ``names``, first name major).
    """

    def __init__(self, sizes: dict, coords: dict, comm_for: Any):
        self.sizes = dict(sizes)
        self.coords = dict(coords)
        self.comm_for = comm_for


_local = threading.local()  # the process meshes entered, per thread (as the trace context)


def _process_envs() -> list[ProcessAxisEnv]:
    envs = getattr(_local, "envs", None)
    if envs is None:
        envs = _local.envs = []
    return envs


# the last env of each set of axis names: a jitted program staged inside blu.shard runs its
# collectives after the shard call that traced it has returned
_remembered: dict[frozenset, ProcessAxisEnv] = {}


@contextlib.contextmanager
def process_axis_env(env: ProcessAxisEnv) -> Iterator[ProcessAxisEnv]:
    _process_envs().append(env)
    _remembered[frozenset(env.sizes)] = env
    try:
        yield env
    finally:
        _process_envs().pop()


def process_env_for(names: Sequence[Any], what: str) -> ProcessAxisEnv:
    """The process mesh binding all of ``names`` (for a collective's impl)."""
    for env in [*reversed(_process_envs()), *reversed(list(_remembered.values()))]:
        if all(n in env.sizes for n in names):
            return env
    missing = next((n for n in names if not any(n in e.sizes for e in _process_envs())), names[0])
    raise BluValueError(
        f"{what}: unbound axis name {missing!r}: use it inside blu.shard or "
        "vmap(..., axis_name=...)"
    )
