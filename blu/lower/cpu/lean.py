"""A lean call of a CPU executable made only of compiled kernels, for jit's fast path
(``blu/transforms/dispatch.py``): a one-kernel program on small arrays spent most of its call
in ``CpuExecutable.__call__``'s general machinery (the arena, the step loop's lookups, the
output checks), none of which such a program uses.

``runner(exe, kernel_type)`` gives ``run(*arrays) -> outputs`` where the program qualifies:
every step a plain compiled kernel (no row split, pair, chain, loop, product, library call or
fallback), every allocation a fresh output (no arena temporaries, no pooled buffer) or, in a
one-kernel program, a donated argument's buffer of the output's shape and dtype; every output
one of those buffers; NaNs not checked. The caller (the fast path) guarantees each argument is
a numpy array of the program's shape and dtype (checked per call), and that the flags have not
changed since (``config.generation``). A non-contiguous argument, a donated one the general
call would not write (read-only, or passed twice), or a call while another thread runs the
executable takes ``exe(*arrays)``.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from blu.core.config import config
from blu.lower.cpu import address

__all__ = ["runner"]


def runner(exe: Any, kernel_type: type) -> Any:
    """``run(*arrays)`` for ``exe`` (a ``CpuExecutable``) if it qualifies (module docstring),
    else None."""
    if config.debug_nans or exe._pair_at or exe._chain_at or exe._numpy_math or exe._may_split:
        return None
    steps, made = [], set()
    in_avals = [v.aval for v in exe.jaxpr.invars]
    for allocs, run, _ in exe.runners:
        if type(run) is not kernel_type or run.scratch or run.last is not None:
            return None
        fresh = []
        for slot, place, aval in allocs:
            if slot in exe._poolable:
                return None
            if place[0] == "donated" and len(exe.runners) == 1:
                a = in_avals[place[1]]
                if (a.shape, a.dtype) != (aval.shape, aval.dtype):
                    return None  # (a reinterpreted buffer: the general call)
                fresh.append((slot, place[1], aval.shape, np.dtype(aval.dtype)))
            elif place[0] == "out":
                fresh.append((slot, None, aval.shape, np.dtype(aval.dtype)))
            else:
                return None
            made.add(slot)
        # (the pointer array's address: a plain int converts faster than the array at each call)
        steps.append((run.fn, ctypes.addressof(run.packed), run.ptrs, run.args, tuple(fresh)))
    outs = []
    for (kind, slot), arg in zip(exe.out_spec, exe._out_arg):
        if kind != "var" or slot not in made or arg is not None:
            return None
        outs.append(slot)
    in_slots, lock = list(exe.in_slots), exe._arena_lock._lock
    if len(steps) == 1:
        return _one_kernel(exe, steps[0], in_slots, outs, lock)
    return _kernels(exe, steps, in_slots, outs, lock)


def _kernels(exe: Any, steps: list, in_slots: list, outs: list, lock: Any) -> Any:
    """``run`` of a program of several kernels (fresh outputs only): a slot table."""
    n_slots, data, empty = exe.n_slots, address.data, np.empty
    owned = lock._is_owned  # the pointer arrays are the executable's: one call at a time

    def run(*args: np.ndarray) -> list[np.ndarray]:
        for x in args:
            if not x.flags.c_contiguous:
                return exe(*args)
        if owned():  # (a call cannot nest in a kernel; kept as the general call's rule)
            return exe(*args)
        try:  # (the acquire inside: released whatever interrupts the call)
            if lock.acquire(False):
                env: list[Any] = [None] * n_slots
                for s, x in zip(in_slots, args):
                    env[s] = x
                for fn, packed, ptrs, slots, fresh in steps:
                    for slot, _, shape, dtype in fresh:
                        env[slot] = empty(shape, dtype)
                    k = 0
                    for s in slots:
                        ptrs[k] = data(env[s])
                        k += 1
                    fn(packed)
                return [env[s] for s in outs]
        finally:
            if owned():
                lock.release()
        return exe(*args)  # another thread runs the executable: its general call

    return run


def _one_kernel(exe: Any, step: tuple, in_slots: list, outs: list, lock: Any) -> Any:
    """``run`` of a one-kernel program: each pointer straight from an argument, a new output
    or a donated argument's buffer (no slot table)."""
    fn, packed, ptrs, slots, fresh = step
    new = {slot: (arg, shape, dtype) for slot, arg, shape, dtype in fresh}
    from_args = [(k, in_slots.index(s)) for k, s in enumerate(slots) if s in in_slots]
    made = [(k, *new[s]) for k, s in enumerate(slots) if s not in in_slots]
    made_slots = [s for s in slots if s not in in_slots]
    if sorted(made_slots) != sorted(new) or len(set(made_slots)) != len(made_slots):
        return None  # (an output that is no pointer of the kernel: the general call)
    out_at = [made_slots.index(s) for s in outs]
    donated = [arg for _, arg, _, _ in made if arg is not None]
    owned, empty, data = lock._is_owned, np.empty, address.data

    lends = [i in donated for i in range(len(exe.in_slots))]

    def make(writable_checked: bool) -> Any:
        def run(*args: np.ndarray) -> list[np.ndarray]:
            for x, lent in zip(args, lends):
                f = x.flags  # (made once per argument: each ``x.flags`` read makes one)
                if not f.c_contiguous:
                    return exe(*args)
                # the general call writes a donated buffer only if writable (``run.lent``: the
                # caller lends it, whatever its flag) and no other argument is it
                if lent and ((writable_checked and not f.writeable)
                             or (len(args) > 1 and sum(y is x for y in args) > 1)):  # fmt: skip
                    return exe(*args)
            if owned():  # (a call cannot nest in a kernel; kept as the general call's rule)
                return exe(*args)
            try:  # (the acquire inside: released whatever interrupts the call)
                if lock.acquire(False):
                    for k, i in from_args:
                        ptrs[k] = data(args[i])
                    bufs = []
                    for k, arg, shape, dtype in made:
                        b = empty(shape, dtype) if arg is None else args[arg]
                        ptrs[k] = data(b)
                        bufs.append(b)
                    fn(packed)
                    return [bufs[j] for j in out_at]
            finally:
                if owned():
                    lock.release()
            return exe(*args)  # another thread runs the executable: its general call

        return run

    run = make(True)
    if donated:  # for jit's fast path, which knows the donated buffers nothing else sees: it
        # lends them without making them writable (the kernel writes through their address;
        # the output's Array is read-only anyway)
        run.lent = make(False)
    return run
