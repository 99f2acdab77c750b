"""The LSD radix sort of long rows (``n`` past a shared-memory tile) for ``sort`` / ``top_k``:
the MLIR of its kernels and its pass list (``blu.lower.cuda.sorting`` launches them).

The keys are ``sort_kernels``' order-preserving unsigned keys; a pass sorts ``(key, index)``
pairs stably by one 8-bit digit, from the least significant (Merrill & Grimshaw, "High
Performance and Scalable Radix Sorting", Parallel Processing Letters 2011): a row is cut into
blocks of ``chunk`` keys and each pass is three launches,

- ``rh*``: a block counts its chunk's digits (a shared histogram per warp, shared atomics) into
  ``cnt[row, block, digit]``;
- ``rscan``: a block per row turns the counts into each block's start within its digit
  (in place: a thread per digit walks the blocks) and ``db[row, digit]``, the digit's start in
  the row (a block-wide exclusive scan of the totals);
- ``rs*``: a block ranks its chunk stably by digit and scatters: warp ``w`` holds keys
  ``w*32*I + j*32 + lane`` (item ``j``, in the chunk's order); each item's lanes of one digit
  are found with eight ballots (the ``MatchAny`` of CUB's ranking, as in Adinets & Merrill,
  "Onesweep: A Faster Least Significant Digit Radix Sort for GPUs", 2022), the first lane adds
  their count to the warp's digit counter (a shared atomic) and the others take its old value
  plus the lanes before them; a scan over the warps and the digits turns the counters into
  places in the chunk sorted by digit, the pairs go there in shared memory, and are written out
  in that order (consecutive threads, consecutive places: coalesced runs per digit) at
  ``db[d] + cnt[b, d] + (place - the chunk's start of d)``.

Only the dtype's varying bytes are passes (``shifts``: one for 8-bit keys, two for bfloat16...).
Several keys sort like ``np.lexsort``: every pass of the last key first; the first pass of
another key reads its keys through the indices sorted so far. The first pass reads the
operand, the others the pairs of the previous one (``ka``/``ia`` or ``kb``/``ib``); the last
gathers every operand (``top_k``: the value and the int32 index of the first ``k``) by the
sorted indices straight into the outputs.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from blu.core import dtypes
from blu.lower.cuda import sort_kernels as sk
from blu.lower.cuda.flash_text import module

T = sk.RADIX_THREADS
W = T // 32  # warps per block
R = sk.RADIX
SCAN_GROUP = 16  # counts loaded at once by a thread of ``rscan``


def shifts(dt: np.dtype) -> list[int]:
    """The bit offsets of the key bytes of ``dt`` that can differ (the digits to sort by)."""
    if dt == dtypes.bfloat16:
        return [16, 24]  # the upper half of the float32 key (its lower half is zero, or NaN's)
    if dt == np.float16:
        return [8, 16, 24]  # float16 in float32: 13 low mantissa bits zero
    return list(range(0, 8 * max(dt.itemsize, 1), 8))


@dataclasses.dataclass(frozen=True)
class Pass:
    """One digit pass: key ``q`` (operand ``num_keys - 1 - q``) at bit ``shift``, read from the
    operand (``src == "op"``), through the sorted indices (``"gather"``) or from the pairs of
    buffer ``rd`` (0: ``ka``/``ia``, 1: ``kb``/``ib``); written to buffer ``wr`` or, -1, the
    outputs."""

    q: int
    shift: int
    src: str
    rd: int
    wr: int

    @property
    def hist(self) -> str:
        return f"rh_{self.src}{self.q}_{self.rd}"

    @property
    def scatter(self) -> str:
        return f"rs_{self.src}{self.q}_{self.rd}_{'o' if self.wr < 0 else self.wr}"


def passes(sp: sk.Spec) -> list[Pass]:
    out: list[Pass] = []
    for q in range(sp.num_keys):
        for i, sh in enumerate(shifts(sp.np_dtypes[sp.num_keys - 1 - q])):
            g = len(out)
            src = "buf" if i else ("gather" if q else "op")
            out.append(Pass(q, sh, src, (g - 1) % 2 if g else 0, g % 2))
    out[-1] = dataclasses.replace(out[-1], wr=-1)
    return out


class _Radix(sk._Kernel):
    """A radix kernel's text: the shared kernel helpers plus i32 and warp operations."""

    def start_radix(self) -> None:
        t = self.t
        self.start()
        self.lane = self.op(f"arith.andi {self.tid}, {t.i(31)} : index")
        self.warp = self.op(f"arith.shrui {self.tid}, {t.i(5)} : index")
        self.lane32 = self.i32(self.lane)
        shift = "%lj" if self.kt == "i64" else self.op("arith.trunci %lj : i64 to i32")
        self.shift = shift

    def digit(self, key: str) -> str:
        d = self.a32("shrui", key, self.shift, self.kt)
        d = self.a32("andi", d, self.c(R - 1, self.kt), self.kt)
        return d if self.kt == "i32" else self.op(f"arith.trunci {d} : i64 to i32")

    def row_block(self) -> tuple[str, str]:
        t = self.t
        B = self.sp.blocks
        return t.div(self.bid, t.i(B)), t.rem(self.bid, t.i(B))

    def load_pair(self, ps: Pass, r: str, p: str) -> tuple[str, str]:
        """The pair of row ``r``'s position ``p`` as pass ``ps`` reads it."""
        sp, t = self.sp, self.t
        j = sp.num_keys - 1 - ps.q
        at = t.add(t.mul(r, t.i(sp.n)), p)
        if ps.src == "op":
            return self.key(j, self.load(f"%op{j}", self.addr(r, p))), self.i32(p)
        ix = self.load("%ib" if ps.rd else "%ia", at)
        if ps.src == "gather":
            return self.key(j, self.load(f"%op{j}", self.addr(r, self.idx(ix)))), ix
        return self.load("%kb" if ps.rd else "%ka", at), ix

    def items(self, ps: Pass, r: str, b: str) -> list[tuple[str, str, str, str]]:
        """Each item's ``(key, index, digit, valid)``: warp-major, item, lane order."""
        sp, t = self.sp, self.t
        I_ = sk.RADIX_ITEMS[sp.key_bits]
        base = t.add(t.mul(b, t.i(sp.chunk)), t.mul(self.warp, t.i(32 * I_)))
        base = t.add(base, self.lane)
        out = []
        for j in range(I_):
            p = t.add(base, t.i(32 * j)) if j else base
            ok = t.cmp("ult", p, t.i(sp.n))
            p = self.op(f"arith.select {ok}, {p}, {t.i(sp.n - 1)} : index")
            key, ix = self.load_pair(ps, r, p)
            out.append((key, ix, self.digit(key), ok))
        return out

    def block_scan(self, v: str) -> str:
        """The exclusive sum of ``v`` (i32) over the block's threads, in thread order."""
        t = self.t
        x = v
        for o in (1, 2, 4, 8, 16):
            y = self.shuffle("up", x, self.c(o, "i32"))
            ok = t.cmp("uge", self.lane, t.i(o))
            x = self.op(f"arith.select {ok}, {self.a32('addi', x, y)}, {x} : i32")
        self.where(t.cmp("eq", self.lane, t.i(31)), lambda: self.store(x, "%sw", self.warp))
        t.barrier()
        off = self.c(0, "i32")
        for w in range(W - 1):
            s = self.load("%sw", t.i(w))
            before = t.cmp("ugt", self.warp, t.i(w))
            off = self.a32("addi", off, self.op(f"arith.select {before}, {s}, "
                                                f"{self.c(0, 'i32')} : i32"))  # fmt: skip
        t.barrier()
        return self.a32("addi", self.a32("subi", x, v), off)

    def zero_hist(self) -> None:
        for w in range(W):
            at = self.t.add(self.tid, self.t.i(w * R)) if w else self.tid
            self.store(self.c(0, "i32"), "%sh", at)
        self.t.barrier()

    def hist_at(self, d: str) -> str:
        t = self.t
        return t.add(t.mul(self.warp, t.i(R)), self.idx(d))


def _hist_kernel(sp: sk.Spec, ps: Pass) -> str:
    """``rh*``: the digit counts of each block's chunk into ``cnt[row, block, :]``."""
    K = _Radix(sp)
    t = K.t
    K.shared("%sh", W * R, "i32")
    K.start_radix()
    r, b = K.row_block()
    K.zero_hist()
    one = K.c(1, "i32")
    for _key, _ix, d, ok in K.items(ps, r, b):
        at = K.hist_at(d)
        K.where(ok, lambda at=at: K.op(f"memref.atomic_rmw addi {one}, %sh[{at}] : "
                                       f"(i32, {K._ty('%sh')}) -> i32"))  # fmt: skip
    t.barrier()
    total = K.c(0, "i32")
    for w in range(W):
        total = K.a32("addi", total, K.load("%sh", t.add(K.tid, t.i(w * R)) if w else K.tid))
    K.store(total, "%cnt", t.add(t.mul(K.bid, t.i(R)), K.tid))
    return K.func(ps.hist, T)


def _scan_kernel(sp: sk.Spec) -> str:
    """``rscan``: a block per row; thread ``d`` makes ``cnt[row, :, d]`` exclusive (each
    block's start within digit ``d``) and ``db[row, d]`` the digit's start in the row."""
    K = _Radix(sp)
    t, B = K.t, sp.blocks
    K.shared("%sw", W, "i32")
    K.start_radix()
    r = K.bid
    col = t.add(t.mul(t.mul(r, t.i(B)), t.i(R)), K.tid)
    groups = -(-B // SCAN_GROUP)

    def body(g: str, args: list[str]) -> list[str]:
        run = args[0]
        ats, oks, vals = [], [], []
        for u in range(SCAN_GROUP):
            blk = t.add(t.mul(g, t.i(SCAN_GROUP)), t.i(u))
            ok = t.cmp("ult", blk, t.i(B))
            blk = K.op(f"arith.select {ok}, {blk}, {t.i(0)} : index")
            at = t.add(col, t.mul(blk, t.i(R)))
            ats.append(at)
            oks.append(ok)
            vals.append(K.load("%cnt", at))
        for at, ok, v in zip(ats, oks, vals, strict=True):
            K.where(ok, lambda at=at, run=run: K.store(run, "%cnt", at))
            run = K.op(f"arith.select {ok}, {K.a32('addi', run, v)}, {run} : i32")
        return [run]

    (total,) = t.loop(t.i(0), t.i(groups), t.i(1), [K.c(0, "i32")], body, "i32")
    start = K.block_scan(total)
    K.store(start, "%db", t.add(t.mul(r, t.i(R)), K.tid))
    return K.func("rscan", T)


def _scatter_kernel(sp: sk.Spec, ps: Pass) -> str:
    """``rs*``: rank each block's chunk stably by digit and scatter it (see the module doc)."""
    K = _Radix(sp)
    t, C = K.t, sp.chunk
    K.shared("%sk", C, K.kt)
    K.shared("%si", C, "i32")
    K.shared("%sh", W * R, "i32")
    K.shared("%sg", R, "i32")
    K.shared("%sw", W, "i32")
    K.start_radix()
    r, b = K.row_block()
    K.zero_hist()
    one, zero = K.c(1, "i32"), K.c(0, "i32")
    lt = K.a32("subi", K.a32("shli", one, K.lane32), one)  # the lanes before this one
    ranked = []
    for key, ix, d, ok in K.items(ps, r, b):
        peers = K.ballot(ok)
        for bit in range(8):
            bit_set = K.op(f"arith.cmpi ne, {K.a32('andi', d, K.c(1 << bit, 'i32'))}, {zero} : i32")
            bal = K.ballot(bit_set)
            same = K.op(f"arith.select {bit_set}, {bal}, "
                        f"{K.a32('xori', bal, K.c(-1, 'i32'))} : i32")  # fmt: skip
            peers = K.a32("andi", peers, same)
        below = K.op(f"math.ctpop {K.a32('andi', peers, lt)} : i32")
        count = K.op(f"math.ctpop {peers} : i32")
        first = K.op(f"arith.cmpi eq, {below}, {zero} : i32")
        lead = K.op(f"arith.andi {ok}, {first} : i1")
        at = K.hist_at(d)
        (old,) = t.if_(lead, lambda at=at, count=count: [
            K.op(f"memref.atomic_rmw addi {count}, %sh[{at}] : (i32, {K._ty('%sh')}) -> i32")],
            lambda: [zero], ["i32"])  # fmt: skip
        src = K.op(f"arith.select {ok}, {K.op(f'math.cttz {peers} : i32')}, {K.lane32} : i32")
        rank = K.a32("addi", K.shuffle("idx", old, src), below)
        ranked.append((key, ix, d, ok, rank))
    t.barrier()
    counts = [K.load("%sh", t.add(K.tid, t.i(w * R)) if w else K.tid) for w in range(W)]
    total = zero
    for c in counts:
        total = K.a32("addi", total, c)
    start = K.block_scan(total)  # digit K.tid's start in the chunk sorted by digit
    run = start
    for w, c in enumerate(counts):
        K.store(run, "%sh", t.add(K.tid, t.i(w * R)) if w else K.tid)
        run = K.a32("addi", run, c)
    row_d = t.add(t.mul(r, t.i(R)), K.tid)
    glob = K.a32("addi", K.load("%db", row_d), K.load("%cnt", t.add(t.mul(K.bid, t.i(R)), K.tid)))
    K.store(K.a32("subi", glob, start), "%sg", K.tid)
    t.barrier()
    for key, ix, d, ok, rank in ranked:

        def place(key=key, ix=ix, d=d, rank=rank) -> None:
            at = K.idx(K.a32("addi", K.load("%sh", K.hist_at(d)), rank))
            K.store(key, "%sk", at)
            K.store(ix, "%si", at)

        K.where(ok, place)
    t.barrier()
    left = t.v(f"arith.subi {t.i(sp.n)}, {t.mul(b, t.i(C))} : index")  # keys of this chunk
    row0 = t.mul(r, t.i(sp.n))
    for i in range(C // T):
        s = t.add(K.tid, t.i(i * T)) if i else K.tid

        def out(s=s) -> None:
            key, ix = K.load("%sk", s), K.load("%si", s)
            pos = t.add(K.idx(K.load("%sg", K.idx(K.digit(key)))), s)
            if ps.wr >= 0:
                K.store(key, "%kb" if ps.wr else "%ka", t.add(row0, pos))
                K.store(ix, "%ib" if ps.wr else "%ia", t.add(row0, pos))
            else:
                _finish(K, r, pos, ix)

        K.where(t.cmp("ult", s, left), out)
    return K.func(ps.scatter, T)


def _finish(K: _Radix, r: str, p: str, ix: str) -> None:
    """Row ``r``'s sorted position ``p`` holds the element ``ix``: gather the operands."""
    sp, t = K.sp, K.t
    s = K.idx(ix)
    if sp.top_k:

        def first_k() -> None:
            at = t.add(t.mul(r, t.i(sp.k)), p)
            K.store(K.load("%op0", K.addr(r, s)), "%out0", at)
            K.store(ix, "%out1", at)

        K.where(t.cmp("ult", p, t.i(sp.k)), first_k)
        return
    src, dst = K.addr(r, s), K.addr(r, p)
    for j in range(len(sp.dtypes)):
        K.store(K.load(f"%op{j}", src), f"%out{j}", dst)


def emit(sp: sk.Spec, sym: str) -> str:
    funcs, seen = [_scan_kernel(sp)], set()
    for ps in passes(sp):
        for name, make in ((ps.hist, _hist_kernel), (ps.scatter, _scatter_kernel)):
            if name not in seen:
                seen.add(name)
                funcs.append(make(sp, ps))
    return module(sym, funcs)
