"""A CUDA executable's outputs after a call (``run.Bound``): per output of the jaxpr, the buffer
it is — a donated argument's, taken over (the argument is deleted), an argument returned as it
is, a literal, or a planned buffer (copied out of a replayed graph's kept buffers) — and the
``DeviceArray`` made for it. A training step returns hundreds of state leaves at every call, each
the whole buffer of its own donated argument; those take the tight loop (``takeovers_of``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from blu.core.aval import shaped
from blu.core.jaxpr import Literal
from blu.cuda.array import DeviceArray
from blu.lower.plan.steps import literal_value

__all__ = ["make_outputs", "out_recipes", "takeovers_of"]


def out_recipes(bound: Any) -> list[tuple]:
    """Per output of the jaxpr, how a call makes it (the plan's placement, made once):
    ``(kind, argument index, root slot, slot, aval, root aval, is_root)`` with ``kind`` one
    of "lit" (the argument index holds the value), "donated", "arg" or "own" (a planned
    buffer)."""
    mem, out = bound.exe.memory, []
    for v in bound.exe.jaxpr.outvars:
        if isinstance(v, Literal):
            out.append(("lit", literal_value(v), 0, 0, None, None, True))
            continue
        r = mem.root[v]
        place = mem.place[r]
        sl = bound.slot[v]
        kind = place[0] if place[0] in ("donated", "arg") else "own"
        where = place[1] if kind != "own" else None
        ra = r.aval if r.aval.weak_type else shaped(tuple(r.aval.shape), np.dtype(r.aval.dtype))
        out.append((kind, where, bound.slot.get(r, sl), sl, v.aval, ra, v is r))
    return out


def make_outputs(bound: Any, ptr: list[int], keep: list | None, arrays: list,
                 donatable: list[bool], copy_out: bool) -> list[Any]:  # fmt: skip
    """The outputs of ``bound``'s call: ``ptr``/``keep`` the slots' addresses and arrays
    (``keep`` unused with ``copy_out``: a graph's replay, whose planned outputs are copied out
    of its kept buffers into fresh ones), ``arrays`` the arguments, ``donatable`` per argument
    whether its buffer may be taken over."""
    dev = bound.dev
    if bound.recipes is None:
        bound.recipes = out_recipes(bound)
    if bound.takeovers is None:
        bound.takeovers, bound.others = takeovers_of(bound.recipes)
    recipes = bound.recipes
    outs: list[Any] = [None] * len(recipes)
    # a training step's state: each output the whole buffer of its own donated argument,
    # which it takes over (the argument is deleted), in one tight loop
    adopt = DeviceArray._adopt
    rest = bound.others
    for j, i, aval in bound.takeovers:
        if donatable[i]:
            a = arrays[i]
            outs[j] = adopt(dev, a._ptr, aval, a._block)
            a._block, a._ptr = None, None
        else:
            rest = rest + [j]
    taken: dict[int, DeviceArray] = {}  # argument index -> the output that took it over
    for j in rest:
        kind, i, root, sl, aval, root_aval, is_root = recipes[j]
        if kind == "donated" and donatable[i]:
            owner = taken.get(i)
            if owner is None:
                a = arrays[i]
                if root_aval.weak_type:
                    owner = DeviceArray(dev, a._ptr, root_aval.shape, root_aval.dtype,
                                        block=a._block)  # fmt: skip
                else:  # its aval is the next call's signature
                    owner = adopt(dev, a._ptr, root_aval, a._block)
                taken[i] = owner
                a._block, a._ptr = None, None  # donated: the argument is now deleted
            outs[j] = owner if is_root else _view(dev, ptr[sl], owner, aval)
        elif kind == "lit":
            outs[j] = _put(i, dev)
        elif kind == "arg":  # (a view at its offset in the argument itself: a replay's
            # addresses are of the kept buffer a small argument was staged into)
            a = arrays[i]
            outs[j] = a if is_root else _view(dev, a._ptr + ptr[sl] - ptr[root], a, aval)
        elif copy_out:
            fresh = DeviceArray.empty(aval.shape, aval.dtype, dev)
            if fresh.nbytes:
                dev.copy_d2d(fresh.ptr, ptr[sl], fresh.nbytes)
            outs[j] = fresh
        else:
            owner = keep[root]
            outs[j] = owner if is_root else _view(dev, ptr[sl], owner, aval)
    return outs


def takeovers_of(recipes: list[tuple]) -> tuple[list[tuple], list[int]]:
    """Split ``out_recipes`` into the outputs that are the whole buffer of a donated
    argument no other output uses, with a plain aval (``(output, argument, aval)``), and the
    indices of the others."""
    uses = Counter(r[1] for r in recipes if r[0] == "donated")
    takeovers, others = [], []
    for j, (kind, i, _, _, _, root_aval, is_root) in enumerate(recipes):
        if kind == "donated" and is_root and uses[i] == 1 and not root_aval.weak_type:
            takeovers.append((j, i, root_aval))
        else:
            others.append(j)
    return takeovers, others


def _view(dev: Any, ptr: int, owner: Any, aval: Any) -> DeviceArray:
    return DeviceArray(dev, ptr, aval.shape, aval.dtype, owner=owner)


def _put(x: Any, dev: Any) -> DeviceArray:
    from blu.cuda.array import _put_one

    return _put_one(np.asarray(x), dev, None)
