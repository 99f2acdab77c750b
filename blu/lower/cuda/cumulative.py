"""The cumulative primitives (``blu.lax.cumulative``) on CUDA targets: library nodes launching
blu's own scan kernels (``kernels=``: compiled or loaded when the executable is built, so the
kernel cache holds them ahead of time), no host round trip. What they compute is
``blu.lower.mlir.cumulative``'s (the operand as ``(outer, n, inner)``, scanned along ``n``).

Two kernels, by where the scanned axis lies:

- the last, contiguous axis with rows of at least ``ROW_MIN`` elements: a block of
  ``ROW_THREADS`` threads per row. The row goes by in chunks of ``ROW_THREADS * PER_THREAD``
  elements: each thread scans its ``PER_THREAD`` consecutive elements sequentially, the block
  scans the threads' totals in shared memory (Hillis & Steele's doubling scan, double-buffered
  so each step takes one barrier; Harris, Sengupta & Owens, "Parallel Prefix Sum (Scan) with
  CUDA", GPU Gems 3 ch. 39, algorithm 1 applied to per-thread totals as in section 39.2.4),
  and each element gets ``carry . exclusive(thread) . local``; the chunk's total joins the
  carry of the next chunk.
- otherwise (a leading axis; short rows, a thread each): a thread per column, ``COL_LANES``
  adjacent columns per warp (coalesced for a leading axis), and the warps of a block split the
  axis into segments: each folds its segment (pass 1), the segment totals meet in shared
  memory (each thread combines those before its own), then each rescans its segment from that
  prefix and writes it (pass 2): a reduce-then-scan over segments (Merrill & Garland,
  "Single-pass Parallel Prefix Scan with Decoupled Look-back", NVIDIA tech report
  NVR-2016-002, section 2, within one block).

The combination is associative (sums reassociated like every GPU reduction; max/min with NaN
propagating; the argument forms combine ``(value, position)`` pairs, the earlier one kept on
ties and an empty pair marked by position -1), so the order of the parallel scan gives the
numpy impl's results up to the rounding of sums and products. The simulated GPU
(``BLU_FAKE_GPU=1``) compiles these kernels and runs the primitive's numpy impl.

Left for later: one block per row (or per 32 columns) caps a problem with few long rows (or
few columns) at one SM's bandwidth; a decoupled look-back scan across blocks would not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core.aval import ShapedArray
from blu.lower.library import LibraryLowering, register_library
from blu.lower.mlir import cumulative as mc
from blu.lower.mlir.cache import kernel_key
from blu.lower.mlir.emit import Builder, compute_type, is_float, memref_type
from blu.lower.mlir.llvm import symbol
from blu.lower.slots import slot

ROW_THREADS = 256
PER_THREAD = 4
ROW_MIN = 256  # row length below which a block per row would leave most threads idle
COL_LANES = 32
MAX_SEGMENTS = 32  # warps of a column block (1024 threads)
MIN_SEGMENT = 64  # positions per segment below which fewer warps split the axis
SMEM = "#gpu.address_space<workgroup>"


@dataclasses.dataclass(frozen=True)
class Launch:
    func: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def row_kernel(sp: mc.Spec) -> bool:
    """Whether a block scans each row (long contiguous rows; short ones get a thread each)."""
    return sp.inner == 1 and sp.n >= ROW_MIN


def segments(sp: mc.Spec) -> int:
    """Warps splitting the axis in the column kernel (a power of two)."""
    s = 1
    while s < MAX_SEGMENTS and sp.n >= 2 * s * MIN_SEGMENT:
        s *= 2
    return s


def launches(sp: mc.Spec, sym: str) -> list[Launch]:
    if row_kernel(sp):
        return [Launch(f"{sym}_rows", (sp.outer, 1, 1), (ROW_THREADS, 1, 1))]
    cols = sp.outer * sp.inner
    return [Launch(f"{sym}_cols", (_cdiv(cols, COL_LANES), 1, 1), (COL_LANES * segments(sp), 1, 1))]


# ---- the pieces both kernels use ---------------------------------------------------------------


class _Scan:
    """The running value of ``sp`` as SSA values: ``(v,)`` or ``(v, idx)`` for the argument
    forms (``idx`` -1: nothing seen yet)."""

    def __init__(self, b: Builder, sp: mc.Spec):
        self.b, self.sp = b, sp
        self.ty = compute_type(sp.np_dtype)
        self.ity = "i32" if sp.out_dtype == np.int32 else "i64"
        self.types = [self.ty, self.ity] if sp.arg else [self.ty]

    def identity(self) -> list[str]:
        b, sp = self.b, self.sp
        if sp.arg:
            return [b.const(0, self.ty) if self.ty != "i1" else b.const(False, "i1"),
                    b.const(-1, self.ity)]  # fmt: skip
        if sp.op == "sum" and is_float(sp.np_dtype):
            return [b.const(-0.0, self.ty)]  # -0.0 + x == x, also for x = -0.0
        ident, _ = slot(mc._REDUCTION[sp.op], "reduce")
        v = ident(sp.np_dtype)
        return [b.const(bool(v) if self.ty == "i1" else v, self.ty)]

    def element(self, x: str, k: str) -> list[str]:
        """The running value of one element ``x`` at axis index ``k``."""
        return [x, mc.index_value(self.b, self.sp, k)] if self.sp.arg else [x]

    def combine(self, a: Sequence[str], c: Sequence[str]) -> list[str]:
        """``a`` (earlier in scan order) followed by ``c``."""
        b, sp = self.b, self.sp
        if not sp.arg:
            return [mc.combine(b, sp, a[0], c[0])]
        neg = b.const(0, self.ity)
        a_empty = b.op(f"arith.cmpi slt, {a[1]}, {neg} : {self.ity}")
        c_full = b.op(f"arith.cmpi sge, {c[1]}, {neg} : {self.ity}")
        wins = b.op(f"arith.andi {c_full}, {mc.better(b, sp, c[0], a[0])} : i1")
        take = b.op(f"arith.ori {a_empty}, {wins} : i1")
        return [b.op(f"arith.select {take}, {c[j]}, {a[j]} : {t}")
                for j, t in enumerate(self.types)]  # fmt: skip

    def select(self, cond: str, a: Sequence[str], c: Sequence[str]) -> list[str]:
        return [self.b.op(f"arith.select {cond}, {x}, {y} : {t}")
                for x, y, t in zip(a, c, self.types)]  # fmt: skip

    # shared memory: one buffer per component (bool as a byte)

    def smem_types(self, n: int) -> list[str]:
        tys = ["i8" if t == "i1" else t for t in self.types]
        return [f"memref<{n}x{t}, {SMEM}>" for t in tys]

    def sm_store(self, bufs: Sequence[str], n: int, vals: Sequence[str], at: str) -> None:
        for buf, mt, v, t in zip(bufs, self.smem_types(n), vals, self.types):
            if t == "i1":
                v = self.b.op(f"arith.extui {v} : i1 to i8")
            self.b.stmt(f"memref.store {v}, {buf}[{at}] : {mt}")

    def sm_load(self, bufs: Sequence[str], n: int, at: str) -> list[str]:
        out = []
        for buf, mt, t in zip(bufs, self.smem_types(n), self.types):
            v = self.b.op(f"memref.load {buf}[{at}] : {mt}")
            out.append(self.b.op(f"arith.cmpi ne, {v}, {self.b.const(0, 'i8')} : i8")
                       if t == "i1" else v)  # fmt: skip
        return out


def _if(b: Builder, cond: str, then, other, types: Sequence[str]) -> list[str]:
    """``scf.if`` yielding ``types`` (``then()``/``other()`` return the values)."""
    res = b.fresh("f")
    head = f"{res}:{len(types)} = " if types else ""
    b.stmt(f"{head}scf.if {cond}{' -> (' + ', '.join(types) + ')' if types else ''} {{")
    b.depth += 1
    vals = then()
    if types:
        b.stmt(f"scf.yield {', '.join(vals)} : {', '.join(types)}")
    b.depth -= 1
    if types:
        b.stmt("} else {")
        b.depth += 1
        vals = other()
        b.stmt(f"scf.yield {', '.join(vals)} : {', '.join(types)}")
        b.depth -= 1
    b.stmt("}")
    return [f"{res}#{j}" for j in range(len(types))]


def _func(name: str, b: Builder, sp: mc.Spec, smem: Sequence[str], threads: int) -> str:
    x_av = ShapedArray((sp.size,), sp.np_dtype)
    o_av = ShapedArray((sp.size,), sp.out_dtype)
    params = f"%x: {memref_type(x_av)}, %out: {memref_type(o_av)}"
    wg = ", ".join(smem)
    head = (f"    gpu.func @{name}({params}) workgroup({wg}) kernel attributes "
            f"{{nvvm.maxntid = array<i32: {threads}, 1, 1>}} {{")  # fmt: skip
    return "\n".join([head, *b.const_lines, *b.lines, "      gpu.return", "    }"])


def _avals(sp: mc.Spec) -> tuple[ShapedArray, ShapedArray]:
    return ShapedArray((sp.size,), sp.np_dtype), ShapedArray((sp.size,), sp.out_dtype)


# ---- the row kernel ----------------------------------------------------------------------------


def _emit_rows(sp: mc.Spec, name: str) -> str:
    b = Builder()
    b.depth = 3
    s = _Scan(b, sp)
    x_av, o_av = _avals(sp)
    T, V = ROW_THREADS, PER_THREAD
    bufs = [[f"%sa{j}" for j in range(len(s.types))], [f"%sb{j}" for j in range(len(s.types))]]
    smem = [f"{n}: {t}" for buf in bufs for n, t in zip(buf, s.smem_types(T))]
    row, tid = b.op("gpu.block_id x"), b.op("gpu.thread_id x")
    base = b.imul(row, sp.n)
    chunk = T * V
    c0, carry, res = b.begin_range(b.index(0), b.index(sp.n), b.index(chunk), [
        (v, t) for v, t in zip(s.identity(), s.types)])  # fmt: skip
    b.stmt("gpu.barrier")  # the previous chunk's reads of shared memory are done
    first = b.iadd(c0, b.imul(tid, V))
    local, ks, oks = [], [], []
    run = s.identity()
    for j in range(V):  # this thread's consecutive elements, scanned in registers
        p = b.iaddc(first, j)
        ok = b.op(f"arith.cmpi ult, {p}, {b.index(sp.n)} : index")
        k = mc.position(b, sp, b.op(f"arith.select {ok}, {p}, {b.index(0)} : index"))
        x = b.load("%x", x_av, b.iadd(base, k))  # an in-bounds read; ignored past the end
        run = s.select(ok, s.combine(run, s.element(x, k)), run)
        local.append(run)
        ks.append(k)
        oks.append(ok)
    s.sm_store(bufs[0], T, run, tid)
    b.stmt("gpu.barrier")
    cur = 0
    d = 1
    while d < T:  # Hillis-Steele: incl[t] = incl[t - d] . incl[t], ping-ponging the buffers
        mine = s.sm_load(bufs[cur], T, tid)
        has = b.op(f"arith.cmpi uge, {tid}, {b.index(d)} : index")
        src = b.op(f"arith.select {has}, {b.op(f'arith.subi {tid}, {b.index(d)} : index', 'i')}"
                   f", {tid} : index")  # fmt: skip
        other = s.sm_load(bufs[cur], T, src)
        new = s.select(has, s.combine(other, mine), mine)
        s.sm_store(bufs[1 - cur], T, new, tid)
        b.stmt("gpu.barrier")
        cur, d = 1 - cur, d * 2
    has = b.op(f"arith.cmpi ugt, {tid}, {b.index(0)} : index")
    prev = b.op(f"arith.select {has}, {b.op(f'arith.subi {tid}, {b.index(1)} : index', 'i')}"
                f", {tid} : index")  # fmt: skip
    before = s.select(has, s.sm_load(bufs[cur], T, prev), s.identity())
    offset = s.combine(carry, before)
    for j in range(V):
        v = s.combine(offset, local[j])
        at = b.iadd(base, ks[j])
        _if(b, oks[j], lambda v=v, at=at: _store(b, s, o_av, v, at), None, [])
    total = s.combine(carry, s.sm_load(bufs[cur], T, b.index(T - 1)))
    b.end_for(res, list(zip(total, s.types)))
    return _func(name + "_rows", b, sp, smem, T)


def _store(b: Builder, s: _Scan, o_av, v: Sequence[str], at: str) -> list[str]:
    b.store(v[1] if s.sp.arg else v[0], "%out", o_av, at)
    return []


# ---- the column kernel -------------------------------------------------------------------------


def _emit_cols(sp: mc.Spec, name: str) -> str:
    b = Builder()
    b.depth = 3
    s = _Scan(b, sp)
    x_av, o_av = _avals(sp)
    S = segments(sp)
    threads = COL_LANES * S
    seg = _cdiv(sp.n, S)
    bufs = [f"%st{j}" for j in range(len(s.types))]
    smem = [f"{n}: {t}" for n, t in zip(bufs, s.smem_types(threads))]
    blk, tid = b.op("gpu.block_id x"), b.op("gpu.thread_id x")
    lane = b.op(f"arith.remui {tid}, {b.index(COL_LANES)} : index", "i")
    warp = b.op(f"arith.divui {tid}, {b.index(COL_LANES)} : index", "i")
    col = b.iadd(b.imul(blk, COL_LANES), lane)
    cols = sp.outer * sp.inner
    live = b.op(f"arith.cmpi ult, {col}, {b.index(cols)} : index")
    safe = b.op(f"arith.select {live}, {col}, {b.index(0)} : index")
    o = b.op(f"arith.divui {safe}, {b.index(sp.inner)} : index", "i")
    i = b.op(f"arith.remui {safe}, {b.index(sp.inner)} : index", "i")
    base = b.iadd(b.imul(o, sp.n * sp.inner), i)
    lo = b.imul(warp, seg)
    hi = b.op(f"arith.minui {b.iaddc(lo, seg)}, {b.index(sp.n)} : index", "i")

    def at(p: str) -> tuple[str, str]:
        k = mc.position(b, sp, p)
        return k, b.iadd(base, b.imul(k, sp.inner))

    # pass 1: this segment's total (a dead column folds column 0: it writes nothing)
    p, args, res = b.begin_range(lo, hi, b.index(1), list(zip(s.identity(), s.types)))
    k, a = at(p)
    tot = s.combine(args, s.element(b.load("%x", x_av, a), k))
    tot = b.end_for(res, list(zip(tot, s.types)))
    s.sm_store(bufs, threads, tot, tid)
    b.stmt("gpu.barrier")
    # the totals of the earlier segments of this column, in order
    w, args, res = b.begin_range(b.index(0), warp, b.index(1), list(zip(s.identity(), s.types)))
    other = s.sm_load(bufs, threads, b.iadd(b.imul(w, COL_LANES), lane))
    pre = b.end_for(res, list(zip(s.combine(args, other), s.types)))

    def scan() -> list[str]:  # pass 2: rescan from the prefix, writing
        p, args, res = b.begin_range(lo, hi, b.index(1), list(zip(pre, s.types)))
        k, a = at(p)
        run = s.combine(args, s.element(b.load("%x", x_av, a), k))
        _store(b, s, o_av, run, a)
        b.end_for(res, list(zip(run, s.types)))
        return []

    _if(b, live, scan, None, [])
    return _func(name + "_cols", b, sp, smem, threads)


def emit(sp: mc.Spec, sym: str) -> str:
    """The ``gpu.module @sym`` of ``sp``'s kernel (``launches`` says how to run it)."""
    fn = _emit_rows(sp, sym) if row_kernel(sp) else _emit_cols(sp, sym)
    return ("module attributes {gpu.container_module} {\n"
            f"  gpu.module @{sym} {{\n{fn}\n  }}\n}}\n")  # fmt: skip


# ---- the library lowerings ---------------------------------------------------------------------

_built: dict[str, mc.Spec] = {}  # module symbol -> the spec it was emitted for


def _kernels(prim: Any):
    def kernels(avals, params, target: str) -> list[tuple]:
        sp = mc.spec_of(prim, avals[0], params)
        if sp.size == 0:
            return []
        canonical = sp.text("cuda")
        _built[symbol(kernel_key(canonical, target))] = sp
        return [(canonical, lambda sym: emit(sp, sym), f"cumulative {sp}")]

    return kernels


def _gpu(prim: Any):
    def call(dev, stream, ins, outs, workspace, in_avals, out_avals, _modules=(), **params):
        if not _modules:  # an empty operand: nothing to write
            return
        mod = _modules[0]
        sp = _built.get(mod.name) or mc.spec_of(prim, in_avals[0], params)
        for la in launches(sp, mod.name):
            mod.function(la.func).launch(la.grid, la.block, [ins[0], outs[0]], stream=stream)

    return call


def _host(prim: Any):
    """The simulated device's form (``BLU_FAKE_GPU=1``): the numpy impl into the planned
    buffers (the kernels were compiled when the executable was built)."""

    def call(ins, outs, workspace, **params) -> None:
        outs[0][...] = prim.impl(ins[0], **params)

    return call


for _p in mc.PRIMS:
    register_library(_p, LibraryLowering(workspace=lambda avals, params, target: 0,
                                         cpu=_host(_p), gpu=_gpu(_p), kernels=_kernels(_p),
                                         applies=mc.supported),
                     platform="cuda")  # fmt: skip
