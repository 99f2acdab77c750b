"""Which fused CPU kernels can run split by rows across threads, and the step that runs them.

A kernel is split by the rows of its outputs' leading dimension (``R`` rows): its code takes a
row range ``[lo, hi)`` (``codegen.KernelEmitter(rows=R)``: the outermost loop of every nest runs
over those rows only, with the same global indices as the whole kernel), and each thread of
blu's pool runs one range. That is correct when no row of one part depends on a row another
part computes: every output and every loop nest is indexed by the rows first, no nest reduces
over them, and each equation reads a row-indexed operand (an input, or a value the kernel
computes row by row) only at the row it writes (``row_count``). Values that do not have the rows
(a bias, a scalar) may be read whole: inputs are never written, except an input an output is
written over in place, which is read row by row like any row-indexed value.
"""

from __future__ import annotations

import ctypes
from typing import Any

from blu.core.config import config
from blu.core.jaxpr import Var
from blu.lower.cpu import address, blas, spin
from blu.lower.cpu import threads as cpu_threads
from blu.lower.plan.fusion import is_arg_reduce, is_elementwise, is_reduction, reduce_axes
from blu.lower.plan.nodes import NodeKind

__all__ = ["MIN_SPLIT_WORK", "RowKernel", "row_block", "row_count", "work"]

# below this work (``work``: ~ operations) a kernel runs whole: a part handed to another thread
# costs its wake-up (tens of microseconds on an idle core, more when the cores are shared)
MIN_SPLIT_WORK = 1 << 20

_MIN_ROWS_ELEMENTS = 1 << 14  # each part gets at least this many elements (worth a hand-over)

# a kernel of several nests runs them block by block of rows (``row_block``), a block about this
# many elements of its widest nest: 16 KiB of float32 per buffer, which stay in the L1/L2 cache
# from one nest to the next
BLOCK_ELEMENTS = 1 << 12


def row_count(node: Any, rowed_inputs: frozenset[int] = frozenset()) -> int:
    """``R`` when the kernel node can be split by the ``R`` rows of its outputs' leading
    dimension (see the module docstring), else 0. ``rowed_inputs``: positions of inputs that
    are themselves made row by row at the same time (``cpu/chains.py``): read, like a value
    the kernel computes, only at the row written."""
    if node.kind != NodeKind.KERNEL or node.layout is None:
        return 0
    j, layout = node.jaxpr, node.layout
    shapes = [v.aval.shape for v in j.outvars if isinstance(v, Var)]
    if not shapes or len(shapes) != len(j.outvars) or any(not s for s in shapes):
        return 0
    r = shapes[0][0]
    if r < 2 or any(s[0] != r for s in shapes):
        return 0
    for nest in layout.nests:
        if not nest.shape or nest.shape[0] != r or (nest.axes is not None and 0 in nest.axes):
            return 0
    written = {j.invars[i] for _, i in node.inplace}
    for a in written:  # an input written over is read like a row-indexed value
        if not a.aval.shape or a.aval.shape[0] != r:
            return 0
    rowed_in = {j.invars[i] for i in rowed_inputs}
    if any(not a.aval.shape or a.aval.shape[0] != r for a in rowed_in):
        return 0
    # inputs never written (nor made by rows beside the kernel): read anywhere
    read_only = set(j.invars) - written - rowed_in
    for e in j.eqns:
        if not _row_local(e, r, read_only):
            return 0
    return r


def _rowed(v: Any, r: int, read_only: set) -> bool:
    return (isinstance(v, Var) and bool(v.aval.shape) and v.aval.shape[0] == r
            and v not in read_only)  # fmt: skip


def _row_local(e: Any, r: int, read_only: set) -> bool:
    """Whether equation ``e`` reads every row-indexed operand (a value the kernel computes by
    rows, an input written over) only at the row it writes."""
    rowed = [a for a in e.invars if _rowed(a, r, read_only)]
    if not rowed:  # made from values without the rows: read whole, written by row
        return True
    out = e.outvars[0]
    if not _rowed(out, r, read_only):
        return False  # a value without the rows made from rows (a sum over them, a transpose)
    name, p = e.primitive.name, e.params
    if is_elementwise(e):
        return all(a.aval.shape == out.aval.shape for a in rowed)
    if is_reduction(e):
        return 0 not in ((p["axis"],) if is_arg_reduce(e) else reduce_axes(e))
    if name == "broadcast_in_dim":
        return tuple(p["broadcast_dimensions"])[:1] == (0,)
    if name in ("reshape", "concatenate"):
        return name == "reshape" or p["dimension"] != 0
    if name == "transpose":
        return tuple(p["permutation"])[:1] == (0,)
    if name == "pad":
        return tuple(p["padding_config"][0]) == (0, 0, 0) and e.invars[1] not in rowed
    if name == "slice":
        strides = p.get("strides") or (1,)
        return (p["start_indices"][0], p["limit_indices"][0], strides[0]) == (0, r, 1)
    if name in ("squeeze", "rev"):
        return 0 not in tuple(p["dimensions"])
    return False  # gather, iota with operands, anything new: run whole


def row_block(node: Any, r: int) -> int:
    """Rows per block when the nests of a kernel split by its ``r`` rows run block by block
    (``codegen.KernelEmitter``'s ``block``): about ``BLOCK_ELEMENTS`` elements of its widest
    nest, at least one row; 0 (nest after nest over the part's rows) for one nest, or when one
    block would hold every row."""
    nests = node.layout.nests
    if len(nests) < 2 or r < 2:
        return 0
    widest = max(max(1, _prod(nest.shape[1:])) for nest in nests)
    blk = max(1, BLOCK_ELEMENTS // widest)
    return blk if blk < r else 0


def _prod(shape: Any) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def elements(node: Any) -> int:
    """The iterations of a kernel's nests."""
    total = 0
    for nest in node.layout.nests:
        n = 1
        for d in nest.shape:
            n *= d
        total += n
    return total


def work(node: Any) -> int:
    """A kernel's work, roughly: its iterations times its arithmetic equations (data movement
    such as a reshape or a broadcast costs only memory traffic, which one core mostly keeps up
    with)."""
    ops = sum(1 for e in node.jaxpr.eqns if is_elementwise(e) or is_reduction(e))
    return elements(node) * max(ops, 1)


class RowKernel:
    """The step runner of a kernel compiled with a row range (``KernelEmitter(rows=R)``):
    ``run(env, arena, owned)`` fills the buffer addresses, then runs the rows in parts on blu's
    threads (``config.cpu_threads``; one part, the whole range, on one thread)."""

    __slots__ = ("fn", "ins", "outs", "scratch", "node", "rows", "min_rows", "n", "_slots",
                 "balance")  # fmt: skip

    def __init__(self, fn, ins, outs, scratch, node, rows: int):
        self.fn, self.ins, self.outs, self.scratch, self.node = fn, ins, outs, scratch, node
        self.rows = rows
        self.min_rows = max(1, -(-_MIN_ROWS_ELEMENTS * rows // max(elements(node), 1)))
        self.n = len(ins) + len(outs) + len(scratch)
        self._slots: list[tuple] = []  # per part: its argument array and packed array
        self.balance = cpu_threads.Balance()  # the caller's share of the rows

    def _part(self, k: int) -> tuple:
        # the packed calling convention passes each argument by address: a buffer's address
        # sits in ``ptrs``; the row bounds (index arguments) sit there as values
        while len(self._slots) <= k:
            ptrs = (ctypes.c_void_p * (self.n + 2))()
            base = ctypes.addressof(ptrs)
            packed = (ctypes.c_void_p * (self.n + 2))(*[base + 8 * i for i in range(self.n + 2)])
            self._slots.append((ptrs, packed))
        return self._slots[k]

    def __call__(self, env: list, arena: Any, owned: bool = True) -> None:
        addrs = [address.data(env[s]) for s in self.ins] + [address.data(env[s]) for s in self.outs]
        if self.scratch:
            base = address.data(arena)
            addrs += [base + off for off in self.scratch]
        if not owned:  # a concurrent call of the executable: pointer arrays of its own
            return _run_fresh(self.fn, addrs, cpu_threads.split(self.rows, _threads(),
                                                                self.min_rows))  # fmt: skip
        cuts = (
            [(0, self.rows)]
            if self.balance.solo()
            else cpu_threads.split(self.rows, _threads(), self.min_rows, self.balance.share)
        )
        parts = []
        for k, (lo, hi) in enumerate(cuts):
            ptrs, packed = self._part(k)
            ptrs[:] = [*addrs, lo, hi]
            parts.append(packed)
        if len(parts) == 1:
            self.fn(parts[0])
            return
        index = {c: k for k, c in enumerate(cuts)}
        fn = self.fn
        cpu_threads.run_parts(lambda lo, hi: spin.call(fn, parts[index[(lo, hi)]]), cuts,
                              self.balance, native=True)  # fmt: skip


def _threads() -> int:
    fixed = config.cpu_threads
    return fixed if isinstance(fixed, int) and fixed >= 1 else blas._cores()


def _run_fresh(fn: Any, addrs: list[int], cuts: list[tuple[int, int]]) -> None:
    packs, keep = {}, []
    for lo, hi in cuts:
        ptrs = (ctypes.c_void_p * (len(addrs) + 2))(*addrs, lo, hi)
        base = ctypes.addressof(ptrs)
        packs[(lo, hi)] = (ctypes.c_void_p * len(ptrs))(*[base + 8 * i for i in range(len(ptrs))])
        keep.append(ptrs)
    cpu_threads.run_parts(lambda lo, hi: fn(packs[(lo, hi)]), cuts)
