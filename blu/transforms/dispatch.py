"""The fast path of a jitted call: the same signature as the previous call runs its executable
with no flatten of the signature key, no ``bind`` and no executable lookup.

``Jitted.__call__`` makes a ``FastCall`` after a call that took the full path (``make``), when
that call is one the fast path can repeat exactly: positional arguments only, none static, every
leaf a blu ``Array`` or a numpy array, no ``blu.shard`` in the trace, and an
executable that reads its operands in place (the backend's ``fast_callable``: the CPU's). The
next call then checks only what could differ (``FastCall.__call__``): the interpreter (the root:
no transform is tracing the call), the flags (``config.generation``: any ``blu.config.update``
since, or other ``override`` blocks in this thread: a call from a thread inside
``blu.disable_jit()`` misses though another thread made the fast path), the named axes in scope,
the arguments' structure and each leaf's type, shape, dtype and weak type; anything else, or an
error from the executable, goes the full way (which raises the proper error). Through the full
path a call of a one-kernel program on small arrays spent most of its time outside the
executable (``benchmarks/cpu_jit.py --dispatch``, BENCHMARKS.md). Donated leaves (a training
step's ``donate_argnums``) take it too: lent, copied and deleted as the full path does
(``donation.py``); a donated array used again is deleted, so its call misses and the full path
raises "Array has been deleted".

On a GPU (some leaf a ``DeviceArray``) the fast path is a ``DeviceFastCall``: the same checks,
each leaf's device too, then the executable bound to that device (``Bound.__call__``), which
does the device's donation itself. A training step's replayed CUDA graph waits behind the host
(the step waits for its loss): the full path's per-leaf work was most of its host time.
"""

from __future__ import annotations

import sys
from itertools import compress
from operator import attrgetter, is_not
from typing import Any

import numpy as np

from blu.core import pytree
from blu.core import trace as tracing
from blu.core.array import Array, _placeholder
from blu.core.config import config
from blu.core.errors import INTERNAL_FILES, user_site
from blu.core.interpreter import root_interpreter as _root
from blu.core.interpreter import thread_context as _context
from blu.transforms import donation
from blu.transforms.axes import axis_env_key, process_envs_of_thread

_process = process_envs_of_thread()  # (``any_process_axes()``: its ``envs`` read inline)

__all__ = ["MISS", "DeviceFastCall", "FastCall", "could_take", "eligible", "make"]

MISS = object()  # FastCall's answer when the call must take the full path


def _same_flags(fast: Any) -> bool:
    """Whether the call is at the root and under the flags ``fast`` was made for."""
    return (
        fast.generation == config.generation
        and _context.current is _root  # (``at_root()``, inline: at every call)
        and not tracing.active  # (``tracing.current() is None``)
    )


def _same_call(fast: Any, args: tuple) -> Any:
    """The leaves of ``args`` where the call is at the root, under the flags and with the
    argument structure ``fast`` was made for (a ``FastCall``), else None."""
    if not _same_flags(fast):
        return None
    if fast.tree is None:
        return args if len(args) == fast.n else None
    leaves, tree = pytree.tree_flatten_like(args, fast.tree)
    return leaves if tree is fast.tree else None


class FastCall:
    """A jitted function's last signature and its executable (see the module docstring)."""

    __slots__ = ("generation", "axes", "tree", "n", "specs", "run", "consts", "held",
                 "out_tree", "out_specs", "leaf_out", "donated", "donated_at", "name",
                 "placeholders", "lent_run")  # fmt: skip

    def __init__(self, args: tuple, leaves: list, jaxpr: Any, consts: list, out_tree: Any,
                 run: Any, donated: list | None = None, name: str = "") -> None:  # fmt: skip
        self.generation = config.generation
        self.axes = axis_env_key()
        flat = all(type(a) in (Array, np.ndarray) for a in args)
        self.tree = None if flat else pytree.tree_flatten(args)[1]
        self.n = len(leaves)
        self.specs = [(x.shape, x.dtype, type(x) is Array and x.weak_type) for x in leaves]
        self.run, self.consts, self.out_tree = run, list(consts), out_tree
        # the trace's constants that are blu Arrays: read at each call, for one may have been
        # donated since (deleted: the full path raises so); holding their buffers instead would
        # also keep a later donation from reusing them in place
        self.held = [c for c in self.consts if type(c) is Array]
        self.out_specs = [(a.dtype, a.weak_type) for a in jaxpr.out_avals]
        self.leaf_out = out_tree.node_data() is None  # one array returned, not a tree
        # per leaf, whether it is donated (None: none is)
        self.donated = list(donated) if donated is not None and any(donated) else None
        self.donated_at = [i for i, d in enumerate(self.donated or ()) if d]
        # a deleted Array's stand-in buffer per donated leaf (``Array.delete``'s), made once
        self.placeholders = {i: _placeholder(*self.specs[i][:2]) for i in self.donated_at}
        # a run that lends what it is given without the writable flag (``cpu/lean.py``): used
        # when every donated buffer may be lent, so none is made writable (a flag set and unset
        # per call)
        self.lent_run = getattr(run, "lent", None)
        self.name = name

    def __call__(self, args: tuple) -> Any:
        leaves = _same_call(self, args)
        if leaves is None:
            return MISS
        vals = []
        for x, (shape, dtype, weak) in zip(leaves, self.specs):
            t = type(x)
            if t is Array:
                if x._deleted is not None or x.weak_type != weak:
                    return MISS  # (a deleted one: the full path raises, naming the donation)
                b = x._buf
            elif t is np.ndarray and not weak:
                b = x
            else:
                return MISS
            if b.shape != shape or b.dtype != dtype:
                return MISS
            vals.append(b)
        if (self.axes or getattr(_process, "envs", None)) and axis_env_key() != self.axes:
            return MISS
        consts = self.consts
        if self.held:
            for c in self.held:
                if c._deleted is not None:
                    return MISS
            consts = [c._buf if type(c) is Array else c for c in consts]
        if self.donated is not None:
            b = None  # (else the last leaf's buffer has one more reference: never lent)
            return self._donating(leaves, vals, consts)
        try:
            outs = self.run(*consts, *vals)
        except (MemoryError, ValueError):  # the full path raises it as blu's error
            return MISS
        if self.leaf_out:  # (one array: the usual case, inline)
            o = outs[0]
            dtype, weak = self.out_specs[0]
            if type(o) is np.ndarray and o.dtype == dtype:
                return Array(o, weak)
        return self._wrap(outs)

    def _wrap(self, outs: list) -> Any:
        if self.leaf_out:
            o = outs[0]
            dtype, weak = self.out_specs[0]
            if type(o) is not np.ndarray:
                o = np.asarray(o)
            return Array(o if o.dtype == dtype else o.astype(dtype), weak)
        wrapped = []
        for o, (dtype, weak) in zip(outs, self.out_specs):
            if type(o) is not np.ndarray:
                o = np.asarray(o)
            wrapped.append(Array(o if o.dtype == dtype else o.astype(dtype), weak))
        return self.out_tree.unflatten(wrapped)

    def _donating(self, leaves: Any, vals: list, consts: list) -> Any:
        """A call with donated leaves, as the full path makes it (``donation.py``, whose rules
        this inlines: it runs at every training step): Arrays lend their buffers where nothing
        else sees them, numpy arrays are copied, and the donated Arrays are deleted after the
        call."""
        at, run, lent = self.donated_at, self.run, self.lent_run
        lendable = []
        for i in at:
            vals[i] = None  # (a reference here would keep the buffer from being lent; a
            # buffer passed twice keeps one in the other's place: never lent)
            x = leaves[i]
            if type(x) is Array:
                b = x._buf
                # lent only if nothing else sees it (``donation.release_for_donation``): the
                # references are the Array's slot, ``b`` and getrefcount's argument
                if b.base is None and sys.getrefcount(b) <= 3:
                    lendable.append(b)
                else:
                    lent = None
                vals[i] = b
                b = None
            else:
                vals[i] = np.array(x)
        if lent is not None:
            run = lent
        else:
            for b in lendable:
                try:
                    b.setflags(write=True)
                except ValueError:  # (a buffer numpy will not make writable: not lent)
                    pass
        del lendable
        try:
            outs = run(*consts, *vals)
        except (MemoryError, ValueError):  # the full path raises it as blu's error
            donation.restore(leaves, self.donated)
            return MISS
        except BaseException:
            donation.restore(leaves, self.donated)  # not run: the caller keeps them
            raise
        del vals
        # deleted as ``donation.delete_donated`` does, but for the read-only flag: the Array
        # lets go of its buffer, so a lent one is seen only as an output, which the output's
        # Array makes read-only. The caller's line three frames up (``jit.__call__``,
        # ``__call__``, here) where that is outside blu, for the message made only if the
        # deleted Array is used again
        frame = sys._getframe(3)  # (not ``user_site``'s walk: it makes every frame object)
        code = frame.f_code
        outside = INTERNAL_FILES.get(code.co_filename) is False
        site = (code, frame.f_lasti) if outside else user_site()
        name, stand_in = self.name, self.placeholders
        for i in at:
            x = leaves[i]
            if type(x) is Array:
                x._deleted = donation.Donated((name, i, site))
                x._buf = stand_in[i]
        if self.leaf_out:  # (one array: the usual case, inline)
            o = outs[0]
            if type(o) is np.ndarray and o.dtype == self.out_specs[0][0]:
                return Array(o, self.out_specs[0][1])
        return self._wrap(outs)


class DeviceFastCall:
    """The fast path of a call on device arrays (a GPU's ``DeviceArray``): the signature's
    checks as ``FastCall``'s, each leaf of the previous call's type, device and aval (a host
    leaf: its shape, dtype and weak type), then the backend's runner (``Bound.__call__`` of the
    executable bound to that device, which copies host arguments, takes donated buffers over
    and deletes the donated arrays, as on the full path). The full path's work per leaf (the
    signature key, ``bind``'s abstract evaluation, the executable's lookup) is skipped: a
    training step's state has hundreds of leaves, and the GPU waits behind the host in a step
    that waits for its loss.

    Where every leaf is a device array (a training step's), the leaves are checked list to list
    (their types, devices and avals, each gathered by ``map`` in C and compared by identity
    first): GPT-2's 448 leaves took 44 us one by one in Python, 29 us so. A device array's aval
    is what the full path keys the executable by (``get_aval``: ``DeviceArray.aval``, made from
    its shape and dtype once and kept in ``_aval``; the arrays a step returns have theirs set,
    ``DeviceArray._adopt``): a leaf whose aval is not the one the executable was made for, or
    not made yet, is compared by ``aval`` (made as the full path makes it)."""

    __slots__ = ("generation", "axes", "tree", "n", "specs", "types", "leaf_types",
                 "devices", "avals", "run", "consts", "out_tree")  # fmt: skip

    def __init__(self, args: tuple, leaves: list, consts: list, out_tree: Any,
                 run: Any) -> None:  # fmt: skip
        self.generation = config.generation
        self.axes = axis_env_key()
        flat = all(getattr(a, "_blu_device_array", False) for a in args)
        self.tree = None if flat else pytree.tree_flatten(args)[1]
        self.n = len(leaves)
        # per leaf: its type; its shape, dtype and device (None: a host array, read as the full
        # path reads it, by the runner); weak types are the host's only
        self.types = [type(x) for x in leaves]
        self.specs = [(x.shape, x.dtype, getattr(x, "device", None),
                       getattr(x, "weak_type", False)) for x in leaves]  # fmt: skip
        self.leaf_types = tuple(set(self.types))  # (still leaves at each call: no node there)
        on_device = all(getattr(x, "_blu_device_array", False) for x in leaves)
        self.devices = [x.device for x in leaves] if on_device else None
        self.avals = [x.aval for x in leaves] if on_device else None
        self.run, self.consts, self.out_tree = run, list(consts), out_tree

    def __call__(self, args: tuple) -> Any:
        if not _same_flags(self):
            return MISS
        if self.tree is None:
            if len(args) != self.n:
                return MISS
            leaves = args
        else:
            leaves = pytree.leaves_like(args, self.tree)
            if leaves is None:
                return MISS
        # the previous call's types, which are still leaf types: no pytree node where a leaf was
        if list(map(type, leaves)) != self.types or not pytree.all_leaf_types(self.leaf_types):
            return MISS
        if self.avals is not None:  # device arrays (a training step's): list to list
            if list(map(_device, leaves)) != self.devices:
                return MISS
            avals = list(map(_aval, leaves))
            if avals != self.avals and not self._same_avals(leaves, avals):
                return MISS
        elif not self._same_specs(leaves):
            return MISS
        if (self.axes or getattr(_process, "envs", None)) and axis_env_key() != self.axes:
            return MISS
        outs = self.run([*self.consts, *leaves])
        if outs is None:  # (the runner's own checks: the full path decides)
            return MISS
        return self.out_tree.unflatten(outs)

    def _same_avals(self, leaves: Any, avals: list) -> bool:
        """Whether each device array whose aval (``avals``) is not the one the executable was
        made for has an equal one, made as the full path makes it where the array has none yet
        (a batch put on the device: the others are not looked at again)."""
        differ = map(is_not, avals, self.avals)
        return all(x.aval == b for x, b in compress(zip(leaves, self.avals), differ))

    def _same_specs(self, leaves: Any) -> bool:
        """Whether each leaf (device arrays and host arrays) has its spec's shape, dtype, and
        device or weak type."""
        for x, (shape, dtype, dev, weak) in zip(leaves, self.specs):
            if x.shape != shape or x.dtype != dtype:
                return False
            if dev is not None:
                if x.device is not dev:
                    return False
            elif getattr(x, "weak_type", False) != weak:
                return False
        return True


_device, _aval = attrgetter("device"), attrgetter("_aval")


def could_take(leaves: list, consts: list) -> bool:
    """Whether a call with these leaves and trace constants might take a fast path: a
    ``FastCall`` (``eligible``) or a ``DeviceFastCall`` (some leaf a device array; ``make``
    decides)."""
    return eligible(leaves, consts) or any(getattr(x, "_blu_device_array", False)
                                           for x in leaves)  # fmt: skip


def eligible(leaves: list, consts: list) -> bool:
    """Whether a call with these argument leaves and trace constants could take the fast path
    (all blu Arrays or numpy arrays: device arrays, scalars and tracers never do)."""
    return all(type(x) in (Array, np.ndarray) for x in leaves) and all(
        type(c) in (Array, np.ndarray) for c in consts
    )


def make(args: tuple, leaves: list, jaxpr: Any, consts: list, out_tree: Any, run: Any,
         donated: list | None = None, name: str = "") -> Any:  # fmt: skip
    """A ``FastCall`` (a ``DeviceFastCall`` where a leaf is a device array) repeating a call
    that took the full path (``args``: its positional
    arguments, ``leaves`` their leaves, ``jaxpr``/``consts``/``out_tree`` its trace, ``run`` the
    executable it ran, or None where the backend has no fast callable; ``donated``: per leaf,
    whether it is donated; ``name``: the function's, for the deleted arrays' message), or None
    where the fast path could not repeat it exactly."""
    if run is None:
        return None
    if any(getattr(x, "_blu_device_array", False) for x in leaves):
        # host leaves are read as the full path reads them (copied to the device) unless
        # donated: the full path deletes a donated host Array
        ok = all(getattr(x, "_blu_device_array", False)
                 or (type(x) in (Array, np.ndarray) and not (donated and donated[i]))
                 for i, x in enumerate(leaves))  # fmt: skip
        return DeviceFastCall(args, leaves, consts, out_tree, run) if ok else None
    if not eligible(leaves, consts):
        return None
    return FastCall(args, leaves, jaxpr, consts, out_tree, run, donated, name)
