"""The CUDA kernels of ``sort`` and ``top_k`` (``blu.lax.sorting``): what a problem is
(``Spec``), the order-preserving key transform, and the MLIR of the kernels (``emit``; the launch
sequence and the library lowering are ``blu.lower.cuda.sorting``'s).

Every kernel sorts ``(key, index)`` pairs, compared lexicographically, with a bitonic network
(Batcher, "Sorting networks and their applications", AFIPS 1968; the in-place form with
per-position directions of Peters et al., "Fast in-place sorting with CUDA based on bitonic
sort", PPAM 2009): the index breaks ties, so the unstable network gives the stable order. Keys
are unsigned integers whose order is the operand's (Knuth TAOCP vol. 3, 5.2.5; the float bit
flip of Terdiman's radix sort): floats flip every bit when negative, else the sign bit, after
``-0.0`` becomes ``0.0`` and every NaN one largest NaN (numpy's order: NaN last, the two zeros
equal); signed integers flip the sign bit; half floats go through float32 (exact). ``top_k``
complements the key: ascending then means largest first, NaN first, ties by lower index.

Rows of one tile (``n <= tile``) and small ``top_k`` on long rows run the kernels here; longer
rows are radix sorted (``blu.lower.cuda.sort_radix``). A row of ``n`` is padded to ``P`` (the
next power of two) with the largest key; the index breaks ties with real elements, so the
padding sorts last. Kernels (one ``gpu.module``):

- ``tsort{q}``: a block per row (``P <= tile``): load the keys (through the permutation of the
  previous pass ``q - 1`` for several keys), sort them in shared memory with the bitonic stages
  ``k = 2 .. P``, finish the pass (``finish``);
- ``topk``: small ``k`` (``K = pow2(k) <= KMAX``) on long rows: a block per row keeps the best
  ``K`` pairs sorted in the first ``K`` shared slots and appends the row's pairs that beat the
  ``K``-th best behind them, sorting the tile only when it fills (no full sort of the row).

Several keys (``num_keys > 1``) sort like ``np.lexsort``: one stable pass per key, the last
first; pass ``q`` sorts the keys read through the permutation so far and composes it.
``finish`` of the last pass gathers every operand (and ``top_k``'s int32 indices) by the sorted
indices; of another pass writes the composed permutation.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.lower.cuda.flash_text import Text, module
from blu.lower.mlir.emit import storage_type

VERSION = "2"  # bump when the generated code changes meaning (only these kernels' keys)
TILE = {32: 4096, 64: 2048}  # shared-memory tile by key width: 32 KiB / 24 KiB of pairs
MAX_THREADS = 512
RADIX_THREADS = 256  # threads per block of the radix kernels (one per 8-bit digit)
RADIX_ITEMS = {32: 16, 64: 8}  # keys per thread of a radix block, by key width
RADIX = 256
KMAX = 256  # top_k's ``pow2(k)`` up to which the selection kernel runs
SMEM = "#gpu.address_space<workgroup>"
PAD_INDEX = 2**31 - 1


def pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclasses.dataclass(frozen=True)
class Spec:
    """One sorting problem: operands viewed as ``(outer, n, inner)``, sorted along ``n``.

    ``top_k``: one operand (``inner == 1``), descending, ``k`` leading results per row as
    values and int32 indices; else ``k == n``. ``tile``: the largest shared-memory tile."""

    dtypes: tuple[str, ...]
    num_keys: int
    outer: int
    n: int
    inner: int
    k: int
    top_k: bool
    tile: int

    @property
    def np_dtypes(self) -> list[np.dtype]:
        return [np.dtype(dtypes.bfloat16 if d == "bfloat16" else d) for d in self.dtypes]

    @property
    def rows(self) -> int:
        return self.outer * self.inner

    @property
    def size(self) -> int:
        return self.rows * self.n

    @property
    def P(self) -> int:  # noqa: N802  (the padded row)
        return pow2(self.n)

    @property
    def t(self) -> int:
        """Positions per tile of the sorting kernels."""
        return min(self.P, self.tile)

    @property
    def key_bits(self) -> int:
        return 64 if any(d.itemsize == 8 for d in self.np_dtypes[: self.num_keys]) else 32

    @property
    def key_ty(self) -> str:
        return f"i{self.key_bits}"

    @property
    def select(self) -> bool:
        """Whether ``topk`` (selection) runs rather than a full sort."""
        return self.top_k and self.P > self.tile and pow2(self.k) <= min(KMAX, self.tile // 2)

    @property
    def passes(self) -> int:
        return self.num_keys

    @property
    def radix(self) -> bool:
        """Whether the row is radix sorted (``sort_radix``): longer than a tile, no selection."""
        return self.P > self.t and not self.select

    @property
    def chunk(self) -> int:
        """Keys per block of the radix kernels."""
        return RADIX_THREADS * RADIX_ITEMS[self.key_bits]

    @property
    def blocks(self) -> int:
        """Radix blocks per row."""
        return _cdiv(self.n, self.chunk)

    @property
    def empty(self) -> bool:
        return self.size == 0 or self.k == 0

    def threads(self, t: int) -> int:
        return max(1, min(t // 2, MAX_THREADS))

    def regions(self) -> dict[str, tuple[int, int]]:
        """Workspace ``name -> (byte offset, bytes)``: the permutations of several keys of the
        tile kernels (``pa``, ``pb``); the radix sort's double-buffered pairs (``ka``/``ia``,
        ``kb``/``ib``), its per-block digit counts (``cnt``) and per-row digit starts (``db``)."""
        kb, m, rad = self.key_bits // 8, self.rows * self.n, self.radix
        need = {
            "pa": 4 * self.rows * self.P * (self.passes > 1 and not rad),
            "ka": kb * m * rad,
            "kb": kb * m * rad,
            "ia": 4 * m * rad,
            "ib": 4 * m * rad,
            "cnt": 4 * self.rows * self.blocks * RADIX * rad,
            "db": 4 * self.rows * RADIX * rad,
        }
        need["pb"] = need["pa"]
        out, at = {}, 0
        for name, nbytes in need.items():
            out[name] = (at, nbytes)
            at += _cdiv(nbytes, 256) * 256
        return out

    def workspace_bytes(self) -> int:
        return 0 if self.empty else sum(_cdiv(b, 256) * 256 for _, b in self.regions().values())

    def text(self) -> str:
        """Cache key material of this problem's kernels."""
        return f"blu-sort-cuda v{VERSION} {dataclasses.astuple(self)!r}"


def spec_of(name: str, avals: Any, params: dict, tile: int | None = None) -> Spec:
    """The ``Spec`` of a ``sort`` / ``top_k`` equation (``name``) on operands ``avals``."""
    shape = tuple(avals[0].shape)
    names = tuple(np.dtype(a.dtype).name for a in avals)
    if name == "top_k":
        n = shape[-1]
        sp = Spec(names, 1, math.prod(shape[:-1]), n, 1, params["k"], True, 0)
    else:
        d = params["dimension"]
        sp = Spec(names, params["num_keys"], math.prod(shape[:d]), shape[d],
                  math.prod(shape[d + 1 :]), shape[d], False, 0)  # fmt: skip
    return dataclasses.replace(sp, tile=tile or TILE[sp.key_bits])


def supported(dts: Any) -> bool:
    """Whether the kernels take these dtypes (real numbers and bools)."""
    try:
        return all(np.dtype(d).kind in "biuf" and storage_type(d) for d in dts)
    except KeyError:
        return False


# ---- the pieces ---------------------------------------------------------------------------------


class _Kernel:
    """One kernel's text: the parameters every kernel of a module shares, and its helpers."""

    def __init__(self, sp: Spec):
        self.sp, self.t = sp, Text()
        self.kt = sp.key_ty
        self.smem_bufs: dict[str, str] = {}

    # types and constants

    def mem(self, name: str) -> str:
        sp = self.sp
        if name.startswith("%op"):
            return f"memref<{sp.size}x{storage_type(sp.np_dtypes[int(name[3:])])}>"
        if name.startswith("%out"):
            j = int(name[4:])
            if sp.top_k:
                ety = "i32" if j == 1 else storage_type(sp.np_dtypes[0])
                return f"memref<{sp.rows * sp.k}x{ety}>"
            return f"memref<{sp.size}x{storage_type(sp.np_dtypes[j])}>"
        nbytes = sp.regions()[name[1:]][1]
        keys = name in ("%ka", "%kb")
        ety = self.kt if keys else "i32"
        return f"memref<{max(1, nbytes // (sp.key_bits // 8 if keys else 4))}x{ety}>"

    def params(self) -> list[str]:
        sp = self.sp
        names = [f"%op{j}" for j in range(len(sp.dtypes))]
        names += [f"%out{j}" for j in range(2 if sp.top_k else len(sp.dtypes))]
        names += [f"%{n}" for n in sp.regions()]
        return [f"{n}: {self.mem(n)}" for n in names] + ["%kk: i64", "%lj: i64"]

    def c(self, v: int, ty: str) -> str:
        return self.t._const(str(int(v)), ty)

    def op(self, expr: str) -> str:
        return self.t.v(expr)

    def load(self, buf: str, at: str) -> str:
        return self.op(f"memref.load {buf}[{at}] : {self._ty(buf)}")

    def store(self, v: str, buf: str, at: str) -> None:
        self.t.stmt(f"memref.store {v}, {buf}[{at}] : {self._ty(buf)}")

    def _ty(self, buf: str) -> str:
        return self.smem_bufs.get(buf) or self.mem(buf)

    def shared(self, name: str, n: int, ty: str) -> None:
        """A shared-memory buffer (a workgroup attribution of the kernel)."""
        self.smem_bufs[name] = f"memref<{n}x{ty}, {SMEM}>"

    def a32(self, op: str, a: str, b: str, ty: str = "i32") -> str:
        return self.op(f"arith.{op} {a}, {b} : {ty}")

    def ballot(self, pred: str) -> str:
        return self.op(f"nvvm.vote.sync ballot {self.c(-1, 'i32')}, {pred} -> i32")

    def shuffle(self, mode: str, x: str, lane: str) -> str:
        name = f"%v{self.t.n}"
        self.t.n += 1
        self.t.stmt(f"{name}, {name}_ok = gpu.shuffle {mode} {x}, {lane}, "
                    f"{self.c(32, 'i32')} : i32")  # fmt: skip
        return name

    def reserve(self, flag: str, counter: str, at: str) -> str:
        """Warp-aggregated ``atomicAdd(counter[at], 1)`` of the lanes with ``flag``: each such
        lane's old value (the first lane adds the warp's count; the others count from it)."""
        zero = self.c(0, "i32")
        bal = self.ballot(flag)
        below = self.op(f"math.ctpop {self.a32('andi', bal, self.lanes_below())} : i32")
        first = self.op(f"arith.cmpi eq, {below}, {zero} : i32")
        lead = self.op(f"arith.andi {flag}, {first} : i1")
        count = self.op(f"math.ctpop {bal} : i32")
        (old,) = self.t.if_(lead, lambda: [
            self.op(f"memref.atomic_rmw addi {count}, {counter}[{at}] : "
                    f"(i32, {self._ty(counter)}) -> i32")], lambda: [zero], ["i32"])  # fmt: skip
        lane = self.i32(self.op(f"arith.andi {self.tid}, {self.t.i(31)} : index"))
        src = self.op(f"arith.select {flag}, {self.op(f'math.cttz {bal} : i32')}, {lane} : i32")
        return self.a32("addi", self.shuffle("idx", old, src), below)

    def lanes_below(self) -> str:
        """The mask of the lanes before this thread's in its warp (i32)."""
        one = self.c(1, "i32")
        lane = self.i32(self.op(f"arith.andi {self.tid}, {self.t.i(31)} : index"))
        return self.a32("subi", self.a32("shli", one, lane), one)

    def idx(self, v: str) -> str:
        return self.op(f"arith.index_cast {v} : i32 to index")

    def i32(self, v: str) -> str:
        return self.op(f"arith.index_cast {v} : index to i32")

    def where(self, cond: str, body) -> None:
        self.t.if_(cond, lambda: (body(), [])[1], None, [])

    def addr(self, r: str, p: str) -> str:
        """The element offset of row ``r``, position ``p`` in an ``(outer, n, inner)`` operand."""
        sp, t = self.sp, self.t
        if sp.inner == 1:
            return t.add(t.mul(r, t.i(sp.n)), p)
        o, c = t.div(r, t.i(sp.inner)), t.rem(r, t.i(sp.inner))
        return t.lin((o, sp.n * sp.inner), (p, sp.inner), c)

    # the key

    def key(self, j: int, raw: str) -> str:
        """Operand ``j``'s stored value ``raw`` as its unsigned order key (``key_ty``)."""
        dt, c, op = self.sp.np_dtypes[j], self.c, self.op
        if dt.kind == "f":
            if dt == dtypes.bfloat16:  # the upper half of a float32
                wide = op(f"arith.extui {raw} : i16 to i32")
                high = op(f"arith.shli {wide}, {c(16, 'i32')} : i32")
                f, fty = op(f"arith.bitcast {high} : i32 to f32"), "f32"
            elif dt == dtypes.float16:
                f, fty = op(f"arith.extf {raw} : f16 to f32"), "f32"
            else:
                f, fty = raw, storage_type(dt)
            ity, bits = ("i32", 32) if fty == "f32" else ("i64", 64)
            zero = self.t._const("0.0", fty)
            is_zero = op(f"arith.cmpf oeq, {f}, {zero} : {fty}")
            f = op(f"arith.select {is_zero}, {zero}, {f} : {fty}")  # -0.0 -> 0.0
            b = op(f"arith.bitcast {f} : {fty} to {ity}")
            nan = op(f"arith.cmpf uno, {f}, {f} : {fty}")
            b = op(f"arith.select {nan}, {c(2 ** (bits - 1) - 1, ity)}, {b} : {ity}")
            neg = op(f"arith.cmpi slt, {b}, {c(0, ity)} : {ity}")
            mask = op(f"arith.select {neg}, {c(-1, ity)}, {c(-(2 ** (bits - 1)), ity)} : {ity}")
            key = op(f"arith.xori {b}, {mask} : {ity}")
        else:
            st = storage_type(dt)
            bits = int(st[1:])
            ity = "i64" if bits == 64 else "i32"
            key = raw
            if dt.kind == "i":  # the sign bit flipped in the stored width
                key = op(f"arith.xori {key}, {c(-(2 ** (bits - 1)), st)} : {st}")
            if bits not in (32, 64):  # then zero-extended: the key has the dtype's width
                key = op(f"arith.extui {key} : {st} to {ity}")
        if ity != self.kt:
            key = op(f"arith.extui {key} : {ity} to {self.kt}")
        if self.sp.top_k:  # largest first
            key = op(f"arith.xori {key}, {c(-1, self.kt)} : {self.kt}")
        return key

    # the network

    def cas(self, lo: str, hi: str, asc: str) -> None:
        """Compare-exchange shared slots ``lo < hi``: ascending ``(key, index)`` if ``asc``."""
        ka, kb = self.load("%sk", lo), self.load("%sk", hi)
        ia, ib = self.load("%si", lo), self.load("%si", hi)
        gt = self.op(f"arith.cmpi ugt, {ka}, {kb} : {self.kt}")
        eq = self.op(f"arith.cmpi eq, {ka}, {kb} : {self.kt}")
        igt = self.op(f"arith.cmpi ugt, {ia}, {ib} : i32")
        gt = self.op(f"arith.ori {gt}, {self.op(f'arith.andi {eq}, {igt} : i1')} : i1")
        swap = self.op(f"arith.cmpi eq, {gt}, {asc} : i1")
        for buf, a, b, ty in (("%sk", ka, kb, self.kt), ("%si", ia, ib, "i32")):
            self.store(self.op(f"arith.select {swap}, {b}, {a} : {ty}"), buf, lo)
            self.store(self.op(f"arith.select {swap}, {a}, {b} : {ty}"), buf, hi)

    def pair(self, q: str, j: str, lj: str) -> tuple[str, str]:
        """The lower and upper position of pair ``q`` of a stage of distance ``j = 2**lj``."""
        t = self.t
        hi_bits = self.op(f"arith.shli {self.op(f'arith.shrui {q}, {lj} : index')}, "
                          f"{t.add(lj, t.i(1))} : index")  # fmt: skip
        low = self.op(f"arith.andi {q}, {self.op(f'arith.subi {j}, {t.i(1)} : index')} : index")
        lo = t.add(hi_bits, low)
        return lo, t.add(lo, j)

    def asc(self, pos: str, kk: str) -> str:
        t = self.t
        return t.cmp("eq", self.op(f"arith.andi {pos}, {kk} : index"), t.i(0))

    def stages(self, size: int, top: int, kk: str, base: str, threads: int) -> None:
        """The stages ``j = top .. 1`` of merge size ``kk`` on the shared tile of ``size``
        slots (directions from ``base`` + slot); a barrier before each."""
        t = self.t
        steps = top.bit_length()  # log2(top) + 1

        def body(s: str, _args) -> list[str]:
            t.barrier()
            lj = self.op(f"arith.subi {t.i(steps - 1)}, {s} : index")
            j = self.op(f"arith.shli {t.i(1)}, {lj} : index")
            for u in range(max(size // 2 // threads, 1)):
                q = t.add(self.tid, t.i(u * threads)) if u else self.tid
                lo, hi = self.pair(q, j, lj)
                self.cas(lo, hi, self.asc(t.add(base, lo), kk))
            return []

        if steps:
            t.loop(t.i(0), t.i(steps), t.i(1), [], body)

    def sort_tile(self, size: int, base: str, threads: int) -> None:
        kk = 2
        while kk <= size:
            self.stages(size, kk // 2, self.t.i(kk), base, threads)
            kk *= 2
        self.t.barrier()

    # finishing a pass

    def finish(self, q: int, r: str, p: str, s32: str) -> None:
        """Row ``r``'s sorted position ``p`` holds the pass-``q`` index ``s32`` (i32)."""
        sp, t = self.sp, self.t

        def body() -> None:
            s = self.idx(s32)
            if q > 0:
                s = self.idx(self.load(f"%p{'ab'[(q - 1) % 2]}", t.add(t.mul(r, t.i(sp.P)), s)))
            if q < sp.passes - 1:
                self.store(self.i32(s), f"%p{'ab'[q % 2]}", t.add(t.mul(r, t.i(sp.P)), p))
            elif sp.top_k:
                at = t.add(t.mul(r, t.i(sp.k)), p)
                self.store(self.load("%op0", self.addr(r, s)), "%out0", at)
                self.store(self.i32(s), "%out1", at)
            else:
                src, dst = self.addr(r, s), self.addr(r, p)
                for j in range(len(sp.dtypes)):
                    self.store(self.load(f"%op{j}", src), f"%out{j}", dst)

        self.where(t.cmp("ult", p, t.i(sp.k)), body)

    def load_key(self, q: int, r: str, p: str) -> tuple[str, str]:
        """The pass-``q`` pair of row position ``p`` (padding past the row's end)."""
        sp, t = self.sp, self.t
        ok = t.cmp("ult", p, t.i(sp.n))
        safe = self.op(f"arith.select {ok}, {p}, {t.i(0)} : index")
        src = safe
        if q > 0:
            src = self.idx(self.load(f"%p{'ab'[(q - 1) % 2]}", t.add(t.mul(r, t.i(sp.P)), safe)))
        j = sp.num_keys - 1 - q
        key = self.key(j, self.load(f"%op{j}", self.addr(r, src)))
        key = self.op(f"arith.select {ok}, {key}, {self.c(-1, self.kt)} : {self.kt}")
        pad = self.i32(p) if not sp.top_k else self.c(PAD_INDEX, "i32")
        return key, self.op(f"arith.select {ok}, {self.i32(p)}, {pad} : i32")

    def func(self, name: str, threads: int, min_blocks: int = 0) -> str:
        """The ``gpu.func`` (``min_blocks``: NVVM's ``minctasm``, bounding the registers)."""
        wg = ", ".join(f"{n}: {ty}" for n, ty in self.smem_bufs.items())
        attrs = f"nvvm.maxntid = array<i32: {threads}, 1, 1>"
        attrs += f", nvvm.minctasm = {min_blocks} : i32" if min_blocks else ""
        head = (f"    gpu.func @{name}({', '.join(self.params())}) workgroup({wg}) kernel "
                f"attributes {{{attrs}}} {{")  # fmt: skip
        return "\n".join([head, *self.t.consts, *self.t.lines, "      gpu.return", "    }"])

    def start(self, smem: int = 0) -> None:
        """The block and thread ids; a tile of ``smem`` pairs in shared memory (``%sk``,
        ``%si``) if ``smem``."""
        if smem:
            self.shared("%sk", smem, self.kt)
            self.shared("%si", smem, "i32")
        self.bid = self.t.gpu("block_id")
        self.tid = self.t.gpu("thread_id")


# ---- the kernels --------------------------------------------------------------------------------


def _tile_kernel(sp: Spec, q: int, name: str) -> str:
    """``tsort{q}``: a block sorts a row of ``P <= tile`` positions and finishes pass ``q``."""
    K = _Kernel(sp)
    t, size = K.t, sp.P
    T = sp.threads(size)
    K.start(size)
    r = K.bid
    slots = [t.add(K.tid, t.i(u * T)) if u else K.tid for u in range(size // T)]
    for e in slots:
        key, ix = K.load_key(q, r, e)
        K.store(key, "%sk", e)
        K.store(ix, "%si", e)
    K.sort_tile(size, t.i(0), T)
    for e in slots:
        K.finish(q, r, e, K.load("%si", e))
    return K.func(name, T)


def _select_kernel(sp: Spec, name: str) -> str:
    """``topk``: a block per row keeps its best ``K`` pairs sorted in the first ``K`` slots and
    appends, a batch of the row at a time, the pairs that beat the ``K``-th best (a slot each
    from a warp-aggregated shared counter, ``%sc``); when the next batch might not fit, the
    tile is sorted (the candidates merged into the best ``K``) and emptied. Past the first
    rounds few pairs beat the ``K``-th best, so a row of 32000 takes two or three sorts."""
    K = _Kernel(sp)
    t, S = K.t, sp.tile
    T = sp.threads(S)
    K.start(S)
    K.shared("%sc", 1, "i32")
    kp, U = pow2(sp.k), max(1, S // 2 // T)
    batch = T * U  # at most S - kp
    r, zero = K.bid, t.i(0)
    slots = [t.add(K.tid, t.i(u * T)) if u else K.tid for u in range(S // T)]

    def pad(e: str) -> None:  # an empty slot: the largest key
        K.store(K.c(-1, K.kt), "%sk", e)
        K.store(K.c(PAD_INDEX, "i32"), "%si", e)

    for e in slots:
        K.where(t.cmp("ult", e, t.i(kp)), lambda e=e: pad(e))
    K.where(t.cmp("eq", K.tid, zero), lambda: K.store(K.c(0, "i32"), "%sc", zero))

    def flush(used: str) -> None:
        """Pad the free slots, sort the tile, empty the candidates (the whole block)."""
        end = t.add(t.i(kp), K.idx(used))
        for e in slots:
            K.where(t.cmp("uge", e, end), lambda e=e: pad(e))
        K.sort_tile(S, zero, T)  # barriers before and after
        K.where(t.cmp("eq", K.tid, zero), lambda: K.store(K.c(0, "i32"), "%sc", zero))
        t.barrier()

    def rnd(c: str, _args) -> list[str]:
        t.barrier()  # the previous batch's candidates are in
        used = K.load("%sc", zero)
        t.barrier()  # every thread has read the count
        full = K.op(f"arith.cmpi ugt, {used}, {K.c(S - kp - batch, 'i32')} : i32")
        K.where(full, lambda: flush(used))
        tk, ti = K.load("%sk", t.i(kp - 1)), K.load("%si", t.i(kp - 1))
        for u in range(U):
            p = t.add(t.mul(c, t.i(batch)), t.add(K.tid, t.i(u * T)) if u else K.tid)
            key, ix = K.load_key(0, r, p)  # past the row: the largest key, never better
            lt = K.op(f"arith.cmpi ult, {key}, {tk} : {K.kt}")
            eq = K.op(f"arith.cmpi eq, {key}, {tk} : {K.kt}")
            ilt = K.op(f"arith.cmpi ult, {ix}, {ti} : i32")
            better = K.op(f"arith.ori {lt}, {K.op(f'arith.andi {eq}, {ilt} : i1')} : i1")
            slot = K.reserve(better, "%sc", zero)

            def put(key=key, ix=ix, slot=slot) -> None:
                at = t.add(t.i(kp), K.idx(slot))
                K.store(key, "%sk", at)
                K.store(ix, "%si", at)

            K.where(better, put)
        return []

    t.loop(zero, t.i(_cdiv(sp.n, batch)), t.i(1), [], rnd)
    t.barrier()
    used = K.load("%sc", zero)
    t.barrier()
    K.where(K.op(f"arith.cmpi ugt, {used}, {K.c(0, 'i32')} : i32"), lambda: flush(used))
    for e in slots:
        K.finish(0, r, e, K.load("%si", e))
    return K.func(name, T, min_blocks=2)  # two blocks per SM: one's sort hides the other's loads


def emit(sp: Spec, sym: str) -> str:
    """The ``gpu.module @sym`` of ``sp``'s tile or selection kernels (``sorting.emit`` picks
    the radix sort's for longer rows; ``sorting.launches`` says how to run them)."""
    assert not sp.radix, "the radix sort's kernels are sort_radix.emit's"
    if sp.select:
        return module(sym, [_select_kernel(sp, "topk")])
    return module(sym, [_tile_kernel(sp, q, f"tsort{q}") for q in range(sp.passes)])
