"""Donation (``jit(f, donate_argnums=...)``): the donated leaves' buffers lent to the executable,
and the caller's arrays deleted after the call; shared by jit's full path and its fast path
(``dispatch.py``), so both lend, copy and delete exactly alike."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core.array import Array
from blu.core.errors import format_site

__all__ = ["Donated", "delete_donated", "donate_inputs", "release_for_donation", "restore"]


def release_for_donation(x: Array) -> None:
    """Let the executable write a donated array's buffer in place (the caller gave it up).

    Only a buffer nothing else can see: one that owns its memory and that no view, no other
    Array and no ``np.asarray(x)`` result refers to (else those would change silently); the
    executable allocates for the others."""
    v = x._value  # raises if x was deleted (donated before)
    # references: x's slot, v, getrefcount's argument
    if v.base is None and sys.getrefcount(v) <= 3:
        try:  # (no ``contextlib.suppress``: this runs at every call of a training step)
            v.setflags(write=True)
        except ValueError:  # (a buffer numpy will not make writable: the executable allocates)
            pass


def donate_inputs(leaves: list, donated: Sequence[bool]) -> list:
    """Prepare donated leaves: blu Arrays lend their buffers; numpy arrays are copied (the
    caller's array is never written)."""
    out = list(leaves)
    for i, (leaf, d) in enumerate(zip(leaves, donated)):
        if not d:
            continue
        if isinstance(leaf, Array):
            release_for_donation(leaf)
        elif isinstance(leaf, np.ndarray):
            out[i] = np.array(leaf)
    return out


def restore(leaves: Sequence, donated: Sequence[bool]) -> None:
    """The call did not run: the donated Arrays the caller keeps are read-only again."""
    for leaf, d in zip(leaves, donated):
        if d and isinstance(leaf, Array) and not leaf.is_deleted():
            leaf._buf.flags.writeable = False


class Donated(tuple):
    """Why a donated Array was deleted, ``(name, leaf, where)``; its message is made only if
    the Array is used again (``Array._value`` raises), not at every call of a training step
    (a tuple: made without a Python ``__init__``)."""

    __slots__ = ()

    def __str__(self) -> str:
        name, leaf, where = self
        if not isinstance(where, str):  # (a ``user_site``: its text made now)
            where = format_site(where)
        return (
            f"it was donated to jit({name}) (donate_argnums/donate_argnames; argument leaf "
            f"{leaf}) at {where}, which may have reused its buffer for an output. Pass a copy "
            "(x.copy()) to keep it, or do not donate it"
        )


def delete_donated(name: str, leaves: Sequence, donated: Sequence[bool], where: Any,
                   at: Sequence[int] | None = None) -> None:  # fmt: skip
    """Delete the donated Arrays after the call (their buffers may now be outputs); ``where``:
    the caller's line (``user_frame``, or ``user_site``: its text made only if shown); ``at``:
    the donated leaves' positions, where the caller has them already."""
    for i in at if at is not None else [i for i, d in enumerate(donated) if d]:
        leaf = leaves[i]
        if type(leaf) is Array or isinstance(leaf, Array):
            leaf._buf.setflags(write=False)  # (lent: writable; never raises for False)
            leaf.delete(Donated((name, i, where)))
