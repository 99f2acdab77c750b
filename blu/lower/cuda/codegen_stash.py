"""The row stash: a looped GPU row group reads its row from global memory once.

A row group too long for registers (the looped form of ``codegen_rows``: the fused
classifier's rows of 50,304 logits) makes one strided pass over its row per nest: a
cross-entropy's maximum (with the label's logit), its sum of exponentials, then the gradient,
each loading the row's logits again: three reads and a write of each logit (a row of
bfloat16 logits is 100 KB, two rows in flight an SM), where one read and a write would do.

Here each input that two or more of the group's passes read at the point they visit (through
elementwise operations only), and that the group reads nowhere else (no broadcast, slice,
reversal or gather of it: another element, maybe of another row), is kept as loaded, in its
storage type, in the block's dynamic shared memory: the first pass that loads an element also
stores it there, the later passes load it from there. A barrier after that first pass makes
the whole row visible to every thread (a later pass may visit the row's elements by another
thread than the first did). Rows ``R``, elements at their row offset (``lin - k R``: the
group's reduced dimensions are its innermost).

The stash's bytes are the group's launch's dynamic shared memory (``Launch.shared``; the
runtime raises the function's limit above 48 KiB; the PTX declares it after the static
variables: ``compiler.dynamic_shared``), at most ``stash_bytes(chip)``: what the chip gives a
block, less ``STATIC`` for the kernel's own (225 KiB on sm_90), or ``$BLU_GPU_ROW_STASH``
bytes (0 turns the stash off). Where two blocks' stashes fit one SM (bfloat16 rows of GPT-2's
vocabulary: 100,608 bytes), the kernel is compiled for two blocks an SM (``minctasm``), so one
block loads its row while the other computes; float32 rows (201 KB) run one block an SM. Inputs
that do not fit all together are stashed in order until the budget is spent; the rest are read
from global memory as before. Values are the same bits as without the stash (the same loads,
from another place).

Measured (H100, GPT-2 124M, 16 x 1024, alternating processes of ``benchmarks/peers/blu_gpt2.py``
with ``BLU_GPU_ROW_STASH=0`` or not; BENCHMARKS.md, session 27): bf16 492-495K -> 495K tokens/s
(+0.4%), tf32 +1.6%, fp32 +0.5%. The replayed classifier kernel stayed at ~559 us (49% of copy
bandwidth): with its row read once it is bound by its ~40 instructions an element (scalar
16-bit loads and stores, the exponentials computed twice, the label's compare), not by DRAM.
With the softmax's exp unreduced and bfloat16 rounded once (session 28: ~34 instructions an
element): 435 us, 63%.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from blu.core.config import config
from blu.core.jaxpr import Var
from blu.lower.cuda.codegen_rows import group_form, online_at
from blu.lower.mlir.emit import Idx, memref_type, storage_type
from blu.lower.plan.fusion import KernelLayout, is_reduction

# shared memory (bytes) of a block (with the driver's opt-in) and of an SM, by chip (CUDA C++
# Programming Guide, "Technical Specifications per Compute Capability"); others: 48 KiB
SHARED = {
    "sm_70": (96 << 10, 96 << 10), "sm_75": (64 << 10, 64 << 10),
    "sm_80": (163 << 10, 164 << 10), "sm_86": (99 << 10, 100 << 10),
    "sm_87": (163 << 10, 164 << 10), "sm_89": (99 << 10, 100 << 10),
    "sm_90": (227 << 10, 228 << 10), "sm_100": (227 << 10, 228 << 10),
    "sm_120": (99 << 10, 100 << 10),
}  # fmt: skip
STATIC = 2 << 10  # the kernel's static shared memory (``gpu.all_reduce``'s: 128 B a float sum)
RESERVED = 1 << 10  # the driver's shared memory of each resident block
STASH_BLOCKS = 2  # blocks an SM holds where two fit (``minctasm``: at 1,024 threads, 32 registers)
SMEM = "#gpu.address_space<workgroup>"
_ALIGN = 16


def stash_bytes(chip: str = "sm_90") -> int:
    """The most bytes of a row group's stash on ``chip``: its block's shared memory less
    ``STATIC``, at most ``$BLU_GPU_ROW_STASH`` (0: no stash)."""
    most = SHARED.get(chip, (48 << 10, 48 << 10))[0] - STATIC
    v = config.gpu_row_stash
    return most if v is None else min(most, int(v))


def two_blocks(nbytes: int, chip: str = "sm_90") -> bool:
    """Whether two blocks with a stash of ``nbytes`` fit one SM of ``chip`` at once."""
    sm = SHARED.get(chip, (48 << 10, 48 << 10))[1]
    return 2 * (nbytes + STATIC + RESERVED) <= sm


def _reads(layout: KernelLayout, m: Var, at_row: bool, ins: set) -> tuple[set, set]:
    """The kernel inputs computing member ``m`` reads: those at the point the pass visits
    (``at_row``: ``m``'s nest is over the group's rows; through elementwise operations and, for
    a reduction, its operand), and those read anywhere else (through a broadcast, a slice, a
    reversal, a gather: another element, maybe of another row; or from a nest of one value a
    row)."""
    at_point: set[Var] = set()
    elsewhere: set[Var] = set()
    e = layout.producer[m]  # (a member made by a reversal or a gather reads other elements)
    here = at_row and ("elementwise" in e.primitive.lowerings or is_reduction(e))
    stack, seen = [(u, here) for u in e.invars], set()
    while stack:
        u, here = stack.pop()
        if not isinstance(u, Var) or (u, here) in seen:
            continue
        seen.add((u, here))
        if u in ins:
            (at_point if here else elsewhere).add(u)
            continue
        if u in layout.buffer or u not in layout.producer:  # read from its buffer
            continue
        e = layout.producer[u]
        same = "elementwise" in e.primitive.lowerings and not is_reduction(e)
        stack.extend((w, here and same) for w in e.invars)
    return at_point, elsewhere


def row_stash(layout: KernelLayout, plans: list[Any], j: int,
              chip: str = "sm_90") -> list[tuple[Var, int]]:  # fmt: skip
    """The inputs the row group led by nest ``j`` keeps in shared memory on ``chip``, each
    with its byte offset there (empty: none, or the group is not looped, or it loops over
    rows)."""
    head, budget = plans[j], stash_bytes(chip)
    if budget <= 0 or head.grid or group_form(head) != "looped":
        return []
    shape = tuple(layout.nests[j].shape)
    ins = {v for v in layout.jaxpr.invars if tuple(v.aval.shape) == shape}
    passes: Counter = Counter()
    other: set[Var] = set()  # read somewhere other than the passes' points: never stashed
    t = j
    while t < len(plans) and plans[t].group == j:  # one pass a nest (an online pair: one)
        width = 2 if online_at(layout, plans, t) else 1
        reads: set[Var] = set()
        for nest in layout.nests[t : t + width]:
            for m in nest.members:
                here, elsewhere = _reads(layout, m, tuple(nest.shape) == shape, ins)
                reads |= here
                other |= elsewhere
        passes.update(reads)
        t += width
    out, off = [], 0
    for v in layout.jaxpr.invars:  # (in the kernel's order: the same plan on every machine)
        nbytes = head.R * v.aval.dtype.itemsize
        if passes[v] >= 2 and v not in other and off + nbytes <= budget:
            out.append((v, off))
            off += -(-nbytes // _ALIGN) * _ALIGN
    return out


def stash_shared(layout: KernelLayout, plans: list[Any], j: int, chip: str = "sm_90") -> int:
    """The dynamic shared memory (bytes) of the launch of the row group led by nest ``j``."""
    return _size(row_stash(layout, plans, j, chip), plans[j].R)


def _size(plan: list[tuple[Var, int]], R: int) -> int:
    """The bytes of a stash ``plan`` (``row_stash``'s) over rows of ``R`` elements."""
    if not plan:
        return 0
    v, off = plan[-1]
    return off + R * v.aval.dtype.itemsize


class RowStashEmitter:
    """The stash's part of ``codegen_gpu.GpuKernelEmitter`` (a mixin: it uses the emitter's
    builder ``b``, ``layout``, ``plans``, ``arg``, ``cache``; ``codegen_rows`` opens the
    stash at a looped group's start and calls ``_stash_pass`` before each pass)."""

    stash: dict[Var, tuple[str, str]] = {}  # input -> (its shared view, the view's type)
    chip = "sm_90"  # the target's (``codegen.emit_gpu_kernel``)

    def _stash_open(self, j: int, head: Any, k: str) -> None:
        """Views of the stash of the group led by nest ``j`` (over row ``k``), if it has one."""
        plan = row_stash(self.layout, self.plans, j, self.chip)
        self.stash, self.stashed, self.stash_new = {}, set(), set()
        if not plan:
            return
        b = self.b
        base = b.op(f"gpu.dynamic_shared_memory : memref<?xi8, {SMEM}>")
        for v, off in plan:
            ty = f"memref<{head.R}x{storage_type(v.aval.dtype)}, {SMEM}>"
            view = b.op(f"memref.view {base}[{b.index(off)}][] : memref<?xi8, {SMEM}> to {ty}")
            self.stash[v] = (view, ty)
        self.stash_row0 = b.imul(k, head.R)
        self.stash_size = _size(plan, head.R)

    def _stash_pass(self) -> None:
        """Before a pass: the elements the passes so far stashed are visible to the block."""
        if self.stash and self.stash_new:
            self.b.stmt("gpu.barrier")
            self.stashed |= self.stash_new
            self.stash_new = set()

    def _stash_close(self) -> int:
        """End the group's stash; the blocks an SM should hold at once (0: no stash, or one
        larger than two blocks' share of the SM)."""
        had, self.stash = bool(self.stash), {}
        return STASH_BLOCKS if had and two_blocks(self.stash_size, self.chip) else 0

    def value(self, v: Any, idx: Idx) -> str:
        got = self.stash.get(v) if self.stash else None
        if got is None or tuple(idx.shape) != tuple(v.aval.shape):
            return super().value(v, idx)  # type: ignore[misc]
        key = (v, idx.key())
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        b, (view, ty) = self.b, got
        lin = b.lin(idx)
        at = b.op(f"arith.subi {lin}, {self.stash_row0} : index", "i")
        if v in self.stashed:
            raw = b.op(f"memref.load {view}[{at}] : {ty}")
        else:  # the first pass to read it: from global memory, kept for the later ones
            raw = b.op(f"memref.load {self.arg[v]}[{lin}] : {memref_type(v.aval)}")
            b.stmt(f"memref.store {raw}, {view}[{at}] : {ty}")
            self.stash_new.add(v)
        out = self.cache[key] = b.widen(raw, v.aval)
        return out
