"""blu's own flash-attention kernels for CUDA GPUs, generated as MLIR text (``gpu``, ``scf``,
``vector``, ``memref``, ``math``) and compiled like every fused kernel (``mlir_gpu.get_module``:
the kernel cache, PTX, ``ptxas``).

Source: Dao 2023, "FlashAttention-2" (arXiv:2307.08691): Algorithm 1 (the forward pass, an
online softmax over key blocks that keeps the per-row log-sum-exp) and Algorithm 2 (the backward
pass, one block per key block, recomputing ``P = exp(S - L)``, with ``D = rowsum(dO * O)`` from
a small first launch and ``dQ`` accumulated with atomic adds).

Layouts are the attention primitives' (``blu.lax.attention``): ``q (B, T, N, H)``, ``k, v (B, S,
K, H)`` with ``K`` dividing ``N`` (query head ``n`` reads key/value head ``n // (N // K)``),
``out (B, T, N, H)``, ``lse (B, N, T)``. Causal masking is top-left aligned (query ``i`` sees
keys ``j <= i``). float32, bfloat16 or float16 in and out (``lse`` float32), float32
arithmetic on CUDA cores (float32 problems may run the tensor-core forms instead: ``flash_tc``,
``FlashSpec.mma``) (half-precision ``dQ`` accumulated in float32 and rounded by a last
launch; fused multiply-adds;
``exp2`` in the log2 domain, ``ex2.approx``).

How the work maps onto a block of 256 threads (a grid ``(ty, tx)`` of rows ``tx`` threads wide,
16 or 32: ``Tiling``): every product is a
sum over an index ``k`` of a shared-memory tile ``A[k][a]`` times a tile ``B[k][b]``, each thread
owning a small register tile of ``a`` x ``b`` results read with vector loads (``mm``). Tiles
read along rows are stored transposed (``XsT[h][row]``, four floats of padding per row so the
transposing stores hit distinct banks); the softmax's row statistics are combined across the
lanes that share a row with warp shuffles.

- forward: one block per ``fwd_bm`` queries of one (batch, head), looping over blocks of
  ``fwd_bn`` keys
  (causal: only blocks at or before the diagonal).
- backward: one block per ``bwd_bn`` keys of one (batch, key/value head), holding ``dK`` and
  ``dV`` in registers while it loops over the ``N // K`` query heads and their blocks of
  ``bwd_bm`` queries.

The launches and shared-memory sizes depend on the problem's shape alone (``FlashSpec``), so a
machine without MLIR knows them from the cache key's spec.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Sequence

from blu.lower.mlir import flash_tc
from blu.lower.mlir.flash_text import SMEM, Text, module, smem_type, vec

THREADS = 256
LOG2E = 1.0 / math.log(2.0)
LN2 = math.log(2.0)
HEAD_SIZES = (32, 64, 128)


@dataclasses.dataclass(frozen=True)
class FlashSpec:
    """One attention problem: sizes, causality, the softmax scale and the operands' dtype."""

    b: int
    t: int
    s: int
    n: int
    kh: int
    h: int
    causal: bool
    scale: float
    dtype: str = "float32"  # of q, k, v, out and the gradients: float32, bfloat16, float16
    mma: str = ""  # "": CUDA cores; "tf32" / "3xtf32": tensor cores (``flash_tc``)
    # q, k, v and dq, dk, dv are slices of one packed array (e.g. a QKV product's (B, T, 3C)):
    # the elements between consecutive tokens of each (0: each is its own (B, T, heads, H) array)
    packed: int = 0

    @property
    def g(self) -> int:
        return self.n // self.kh

    def strides(self) -> tuple[int, int, int]:
        """Elements between consecutive tokens of ``q``/``dq``, of ``k``, ``v``/``dk``, ``dv``
        and of ``out``/``dout`` (never packed)."""
        o = self.n * self.h
        return self.packed or o, self.packed or self.kh * self.h, o


ETYPES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}


def unsupported(sp: FlashSpec) -> str | None:
    """Why blu's flash kernels cannot take this problem (None: they can)."""
    if sp.dtype not in ETYPES:
        return f"blu's flash kernels take {', '.join(ETYPES)}, not {sp.dtype}"
    if sp.h not in HEAD_SIZES:
        return f"blu's flash kernels take head sizes {HEAD_SIZES}, not {sp.h}"
    if min(sp.b, sp.t, sp.s, sp.n) == 0:
        return "an empty problem"
    if sp.b * sp.n > 65535 or sp.b * sp.kh > 65535:
        return "more than 65535 (batch, head) pairs"
    if sp.packed and (sp.dtype != "float32" or sp.packed % 4 or sp.packed < sp.n * sp.h):
        return "blu's flash kernels take packed q, k, v in float32 only, tokens 16-byte aligned"
    if sp.mma and (sp.mma not in flash_tc.MODES or sp.dtype != "float32"):
        return f"blu's tensor-core flash kernels take float32 in {flash_tc.MODES}, not {sp.mma}"
    return None


@dataclasses.dataclass(frozen=True)
class Tile:
    """A float32 tile in dynamic shared memory: ``rows x cols``, at ``offset`` bytes."""

    name: str
    rows: int
    cols: int
    offset: int

    @property
    def ty(self) -> str:
        return smem_type(self.rows, self.cols)

    @property
    def nbytes(self) -> int:
        return 4 * self.rows * self.cols


def _layout(tiles: Sequence[tuple[str, int, int]]) -> tuple[dict[str, Tile], int]:
    out, off = {}, 0
    for name, r, c in tiles:
        out[name] = Tile(name, r, c, off)
        off += 4 * r * c
    return out, off


@dataclasses.dataclass(frozen=True)
class Tiling:
    """How the kernels tile a problem: queries per forward block and keys per step
    (``fwd_bm``/``fwd_bn``), keys per backward block and queries per step (``bwd_bn``/
    ``bwd_bm``), the thread grid's row width (``*_tx`` threads share a row of results; 16 or 32),
    the products' unroll, and blocks an SM should hold (NVVM ``minctasm``; 0: as registers
    allow)."""

    fwd_bm: int = 64
    fwd_bn: int = 64
    fwd_tx: int = 16
    bwd_bn: int = 64
    bwd_bm: int = 32
    bwd_tx: int = 16
    unroll: int = 4
    fwd_min_blocks: int = 0
    bwd_min_blocks: int = 0


# per head size, the fastest measured on the H200 at GPT-2's shape (benchmarks/flash_tiles.py;
# docs/benchmarks/kernels_and_attention.md); heads of 128 keep the defaults, whose shared memory
# fits an SM
_TUNED = Tiling(fwd_bm=128, bwd_bm=64, bwd_tx=32, unroll=8)
TILING = {32: _TUNED, 64: _TUNED, 128: Tiling()}
OVERRIDE: dict = {}  # fields the benchmark's variants set
PAD = 4  # floats of padding per shared-memory row (conflict-free transposing stores)


def tiling(h: int) -> Tiling:
    return dataclasses.replace(TILING[h], **OVERRIDE)


def fwd_tiles(h: int) -> tuple[dict[str, Tile], int]:
    c = tiling(h)
    bm, bn = c.fwd_bm, c.fwd_bn
    return _layout([("QsT", h, bm + PAD), ("KsT", h, bn + PAD), ("Vs", bn, h + PAD),
                    ("PsT", bn, bm + PAD)])  # fmt: skip


def bwd_tiles(h: int) -> tuple[dict[str, Tile], int]:
    c = tiling(h)
    bm, bn = c.bwd_bm, c.bwd_bn
    return _layout([("KsT", h, bn + PAD), ("Ks", bn, h + PAD), ("VsT", h, bn + PAD),
                    ("QsT", h, bm + PAD), ("Qs", bm, h + PAD), ("dOsT", h, bm + PAD),
                    ("dOs", bm, h + PAD), ("Ps", bm, bn + PAD), ("dSs", bm, bn + PAD),
                    ("dSsT", bn, bm + PAD)])  # fmt: skip


@dataclasses.dataclass(frozen=True)
class FlashLaunch:
    func: str
    grid: tuple[int, int]
    block: int
    shared: int


def launches(sp: FlashSpec, sym: str, backward: bool) -> list[FlashLaunch]:
    """The launches of the forward (one) or the backward (two: ``D`` and zeroed ``dQ``, then
    the main kernel) for ``sp``; ``sym`` is the module's symbol."""
    c = tiling(sp.h)
    if not backward and sp.mma:
        return [FlashLaunch(f"{sym}_fwd", (_cdiv(sp.t, flash_tc.BM), sp.b * sp.n), THREADS,
                            flash_tc.smem_bytes(sp.h, sp.mma))]  # fmt: skip
    if not backward:
        return [FlashLaunch(f"{sym}_fwd", (_cdiv(sp.t, c.fwd_bm), sp.b * sp.n), THREADS,
                            fwd_tiles(sp.h)[1])]  # fmt: skip
    rows = sp.b * sp.t * sp.n
    post = []
    if sp.dtype != "float32":  # dQ accumulated in float32, then rounded into the output
        post = [FlashLaunch(f"{sym}_post", (_cdiv(rows * sp.h // 4, THREADS), 1), THREADS, 0)]
    pre = FlashLaunch(f"{sym}_pre", (_cdiv(rows, THREADS // c.bwd_tx), 1), THREADS, 0)
    if sp.mma:
        return [pre, FlashLaunch(f"{sym}_bwd", (_cdiv(sp.s, flash_tc.BWD_BN), sp.b * sp.kh),
                                 THREADS, flash_tc.bwd_smem_bytes(sp.h, sp.mma))]  # fmt: skip
    return [pre, FlashLaunch(f"{sym}_bwd", (_cdiv(sp.s, c.bwd_bn), sp.b * sp.kh), THREADS,
                             bwd_tiles(sp.h)[1])] + post  # fmt: skip


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _gty(n: int, ety: str = "f32") -> str:
    return f"memref<{max(n, 1)}x{ety}>"


class _Kernel:
    """Shared pieces of the kernels: thread coordinates, tile views, tile loads, products."""

    def __init__(self, sp: FlashSpec, tiles: dict[str, Tile], tx: int, unroll: int):
        self.sp, self.t = sp, Text()
        self.TX, self.unroll = tx, unroll
        self.ety = ETYPES[sp.dtype]  # the global arrays' element type (lse, D: always f32)
        self.piece = vec(4, self.ety)
        TX = tx
        t = self.t
        self.tid = t.gpu("thread_id")
        self.bx, self.by = t.gpu("block_id"), t.v("gpu.block_id y")
        self.ty, self.tx = t.div(self.tid, t.i(TX)), t.rem(self.tid, t.i(TX))
        self.tiles = tiles
        if tiles:
            smem = t.v(f"gpu.dynamic_shared_memory : memref<?xi8, {SMEM}>")
            self.view = {
                name: t.v(
                    f"memref.view {smem}[{t.i(tile.offset)}][] : memref<?xi8, {SMEM}> to {tile.ty}"
                )  # fmt: skip
                for name, tile in tiles.items()
            }
        w = min(4, sp.h // TX)
        self.w = w
        # this thread's columns of an (rows x H) result: chunks of w, 16 * w apart
        self.chunks = [(t.lin((self.tx, w), t.i(TX * w * c)), w) for c in range(sp.h // (TX * w))]

    def zeros(self, n: int) -> list[str]:
        return [self.t.f(0.0)] * n

    def zero_vec(self, n: int) -> str:
        return self.t._const("dense<0.0>", vec(n))

    def fetch(self, gbuf: str, gsize: int, rows: int, row0: str, limit: int, base: str,
              stride: int, when: str | None = None) -> list[str]:  # fmt: skip
        """Start loading rows ``row0 .. row0 + rows`` of a ``(rows, H)`` slab of a global array
        (row ``r`` at ``base + r * stride``) into registers: this thread's ``vector<4xf32>``
        pieces (consecutive threads take consecutive rows). Rows at or past ``limit``, or all
        when ``when`` is false, read as zeros."""
        t, h = self.t, self.sp.h
        out = []
        for it in range(rows * (h // 4) // THREADS):
            idx = t.add(self.tid, t.i(THREADS * it))
            r, dc = t.rem(idx, t.i(rows)), t.div(idx, t.i(rows))
            grow = t.add(row0, r)
            ok = t.cmp("ult", grow, t.i(limit))
            if when is not None:
                ok = t.v(f"arith.andi {ok}, {when} : i1")
            addr = t.lin(base, (grow, stride), (dc, 4))

            ety, piece = self.ety, self.piece
            align = 16 if ety == "f32" else 8

            def inside(addr=addr):
                return [t.v(f"vector.load {gbuf}[{addr}] {{alignment = {align}}} : "
                            f"{_gty(gsize, ety)}, {piece}")]  # fmt: skip

            zero = t._const("dense<0.0>", piece)
            out += t.if_(ok, inside, lambda: [zero], [piece])
        return out

    def stash(self, pieces: list[str], rows: int, transposed: str | None, natural: str | None,
              scale: float | None = None) -> None:  # fmt: skip
        """Store fetched pieces into shared tiles: ``transposed[h][row]`` and/or
        ``natural[row][h]`` (both padded, so neither store pattern conflicts)."""
        t = self.t
        for it, x in enumerate(pieces):
            if self.ety != "f32":
                x = t.v(f"arith.extf {x} : {self.piece} to {vec(4)}")
            idx = t.add(self.tid, t.i(THREADS * it))
            r, dc = t.rem(idx, t.i(rows)), t.div(idx, t.i(rows))
            vals = [t.v(f"vector.extract {x}[{c}] : f32 from {vec(4)}") for c in range(4)]
            if scale is not None:
                vals = [t.fop("mulf", v, t.f(scale)) for v in vals]
            if transposed is not None:
                tl = self.tiles[transposed]
                for c, val in enumerate(vals):
                    t.store([val], self.view[transposed], tl.ty, [t.lin((dc, 4), t.i(c)), r])
            if natural is not None:
                tl = self.tiles[natural]
                t.store(vals, self.view[natural], tl.ty, [r, t.mul(dc, t.i(4))])

    def mm(self, acc: list[str], a_tile: str, a0: str, ra: int, b_tile: str,
           bchunks: Sequence[tuple[str, int]], k: int) -> list[str]:  # fmt: skip
        """``acc[a][b] += sum_k A[k][a0 + a] * B[k][b]`` for ``a < ra`` and ``b`` in the
        chunks (``(start, width)`` pairs); ``acc`` is flat, ``a``-major."""
        t = self.t
        A, B = self.tiles[a_tile], self.tiles[b_tile]
        av_, bv_ = self.view[a_tile], self.view[b_tile]

        unroll = min(self.unroll, k)

        def body(kk: str, args: list[str]) -> list[str]:
            cur = list(args)
            for u in range(unroll):
                ki = t.add(kk, t.i(u)) if u else kk
                avals = t.load(av_, A.ty, [ki, a0], ra)
                bvals = [x for b0, w in bchunks for x in t.load(bv_, B.ty, [ki, b0], w)]
                nb = len(bvals)
                cur = [t.v(f"math.fma {avals[j // nb]}, {bvals[j % nb]}, {cur[j]} : f32")
                       for j in range(len(cur))]  # fmt: skip
            return cur

        return t.loop(t.i(0), t.i(k), t.i(unroll), acc, body)


def _forward(sp: FlashSpec, name: str) -> str:
    tiles, _ = fwd_tiles(sp.h)
    c = tiling(sp.h)
    TX = c.fwd_tx
    K = _Kernel(sp, tiles, TX, c.unroll)
    t, h = K.t, sp.h
    BM, BN = c.fwd_bm, c.fwd_bn
    RM, CN = BM // (THREADS // TX), BN // TX
    nqb = _cdiv(sp.t, BM)
    qb = t.v(f"arith.subi {t.i(nqb - 1)}, {K.bx} : index")
    b, n = t.div(K.by, t.i(sp.n)), t.rem(K.by, t.i(sp.n))
    kh = t.div(n, t.i(sp.g))
    row0 = t.mul(qb, t.i(BM))
    qstride, kstride, ostride = sp.strides()
    qbase = t.lin((b, sp.t * qstride), (n, h))
    kbase = t.lin((b, sp.s * kstride), (kh, h))
    obase = t.lin((b, sp.t * ostride), (n, h)) if sp.packed else qbase
    qsize, ksize = sp.b * sp.t * qstride, sp.b * sp.s * kstride
    K.stash(K.fetch("%q", qsize, BM, row0, sp.t, qbase, qstride), BM, "QsT", None,
            sp.scale * LOG2E)  # fmt: skip
    if sp.causal:
        kend = t.v(f"arith.minui {t.add(row0, t.i(BM))}, {t.i(sp.s)} : index")
        nkb = t.div(t.add(kend, t.i(BN - 1)), t.i(BN))
    else:
        nkb = t.i(_cdiv(sp.s, BN))
    oc = sum(w for _, w in K.chunks)
    a_rows = t.mul(K.ty, t.i(RM))
    b_keys = t.mul(K.tx, t.i(CN))
    pre0 = K.fetch("%k", ksize, BN, t.i(0), sp.s, kbase, kstride)
    pre0 += K.fetch("%v", ksize, BN, t.i(0), sp.s, kbase, kstride)
    npre = len(pre0) // 2

    def body(kb: str, args: list[str]) -> list[str]:
        n_o = RM * oc
        o, m, l_ = args[:n_o], args[n_o : n_o + RM], args[n_o + RM : n_o + 2 * RM]
        pre = args[n_o + 2 * RM :]
        t.barrier()
        key0 = t.mul(kb, t.i(BN))
        K.stash(pre[:npre], BN, "KsT", None)
        K.stash(pre[npre:], BN, None, "Vs")
        t.barrier()
        # the next key block's loads are in flight while this one is computed
        nxt = t.add(kb, t.i(1))
        more = t.cmp("ult", nxt, nkb)
        key1 = t.mul(nxt, t.i(BN))
        pre = K.fetch("%k", ksize, BN, key1, sp.s, kbase, kstride, more)
        pre += K.fetch("%v", ksize, BN, key1, sp.s, kbase, kstride, more)
        s = K.mm(K.zeros(RM * CN), "QsT", a_rows, RM, "KsT", [(b_keys, CN)], h)
        rows = [t.add(row0, t.add(a_rows, t.i(i))) for i in range(RM)]
        keys = [t.add(key0, t.add(b_keys, t.i(j))) for j in range(CN)]
        out_keys = [t.cmp("uge", kk, t.i(sp.s)) for kk in keys]
        m_new, l_new, alpha, p = [], [], [], []
        for i in range(RM):
            row = []
            for j in range(CN):
                bad = out_keys[j]
                if sp.causal:
                    late = t.cmp("ugt", keys[j], rows[i])
                    bad = t.v(f"arith.ori {bad}, {late} : i1")
                row.append(t.select(bad, t.f(float("-inf")), s[i * CN + j]))
            mx = row[0]
            for x in row[1:]:
                mx = t.fop("maximumf", mx, x)
            mx = t.lane_reduce(mx, "maximumf", TX)
            mn = t.fop("maximumf", m[i], mx)
            use = t.select(t.fcmp("oeq", mn, t.f(float("-inf"))), t.f(0.0), mn)
            al = t.exp2(t.fop("subf", m[i], use))
            pr = [t.exp2(t.fop("subf", x, use)) for x in row]
            tot = pr[0]
            for x in pr[1:]:
                tot = t.fop("addf", tot, x)
            l_new.append(t.fop("addf", t.fop("mulf", l_[i], al), tot))
            m_new.append(mn)
            alpha.append(al)
            p.append(pr)
        o = [t.fop("mulf", o[i * oc + c], alpha[i]) for i in range(RM) for c in range(oc)]
        ps = tiles["PsT"]
        for j in range(CN):
            t.store([p[i][j] for i in range(RM)], K.view["PsT"], ps.ty,
                    [t.add(b_keys, t.i(j)), a_rows])  # fmt: skip
        t.barrier()
        o = K.mm(o, "PsT", a_rows, RM, "Vs", K.chunks, BN)
        return o + m_new + l_new + pre

    inits = K.zeros(RM * oc) + [t.f(float("-inf"))] * RM + K.zeros(RM) + pre0
    types = ["f32"] * (RM * oc + 2 * RM) + [K.piece] * len(pre0)
    res = t.loop(t.i(0), nkb, t.i(1), inits, body, types)
    o, m, l_ = res[: RM * oc], res[RM * oc : RM * oc + RM], res[RM * oc + RM :]
    osize, lsize = sp.b * sp.t * ostride, sp.b * sp.n * sp.t
    lbase = t.lin((b, sp.n * sp.t), (n, sp.t))
    first = t.cmp("eq", K.tx, t.i(0))
    for i in range(RM):
        tot = t.lane_reduce(l_[i], "addf", TX)
        pos = t.fcmp("ogt", tot, t.f(0.0))
        inv = t.select(pos, t.fop("divf", t.f(1.0), tot), t.f(0.0))
        lg = t.v(f"math.log2 {tot} : f32")
        lse = t.select(pos, t.fop("mulf", t.fop("addf", m[i], lg), t.f(LN2)), t.f(float("-inf")))
        row = t.add(row0, t.add(a_rows, t.i(i)))
        vals = [t.fop("mulf", o[i * oc + c], inv) for c in range(oc)]

        def store(row=row, vals=vals, lse=lse) -> list[str]:
            c = 0
            for b0, w in K.chunks:
                at = [t.lin(obase, (row, ostride), b0)]
                t.store(vals[c : c + w], "%out", _gty(osize, K.ety), at, K.ety)
                c += w
            t.if_(first, lambda: t.store([lse], "%lse", _gty(lsize), [t.add(lbase, row)]) or [],
                  lambda: [], [])  # fmt: skip
            return []

        t.if_(t.cmp("ult", row, t.i(sp.t)), store, lambda: [], [])
    e = K.ety
    params = [f"%q: {_gty(qsize, e)}", f"%k: {_gty(ksize, e)}", f"%v: {_gty(ksize, e)}",
              f"%out: {_gty(osize, e)}", f"%lse: {_gty(lsize)}"]  # fmt: skip
    return t.func(f"{name}_fwd", params, THREADS, c.fwd_min_blocks)


def _pre(sp: FlashSpec, name: str) -> str:
    """``D = rowsum(dO * O)`` per query row (``TX`` lanes a row), and ``dQ`` zeroed."""
    c = tiling(sp.h)
    TX = c.bwd_tx
    K = _Kernel(sp, {}, TX, c.unroll)
    t, h = K.t, sp.h
    rows = sp.b * sp.t * sp.n
    size, dsize = rows * h, sp.b * sp.n * sp.t
    qstride = sp.strides()[0]
    qsize = sp.b * sp.t * qstride
    r = t.lin((K.bx, THREADS // TX), K.ty)
    ok = t.cmp("ult", r, t.i(rows))
    lane = K.tx
    # row r of dQ (token r // N, head r % N) starts at (r // N) qstride + (r % N) H
    qrow = t.lin((t.div(r, t.i(sp.n)), qstride), (t.rem(r, t.i(sp.n)), h)) if sp.packed else None

    def inside() -> list[str]:
        acc = t.f(0.0)
        for b0, w in K.chunks:
            at = [t.lin((r, h), b0)]
            do = t.load("%dout", _gty(size, K.ety), at, w, K.ety)
            o = t.load("%o", _gty(size, K.ety), at, w, K.ety)
            for x, y in zip(do, o):
                acc = t.v(f"math.fma {x}, {y}, {acc} : f32")
            t.store(K.zeros(w), "%dq", _gty(qsize), [t.add(qrow, b0)] if sp.packed else at)
        return [acc]

    (part,) = t.if_(ok, inside, lambda: [t.f(0.0)], ["f32"])
    tot = t.lane_reduce(part, "addf", TX)
    del lane
    bb = t.div(r, t.i(sp.t * sp.n))
    tt = t.rem(t.div(r, t.i(sp.n)), t.i(sp.t))
    nn = t.rem(r, t.i(sp.n))
    at = t.lin((bb, sp.n * sp.t), (nn, sp.t), tt)
    cond = t.v(f"arith.andi {ok}, {t.cmp('eq', K.tx, t.i(0))} : i1")
    t.if_(cond, lambda: t.store([tot], "%dvec", _gty(dsize), [at]) or [], lambda: [], [])
    params = [f"%o: {_gty(size, K.ety)}", f"%dout: {_gty(size, K.ety)}", f"%dq: {_gty(qsize)}",
              f"%dvec: {_gty(dsize)}"]  # fmt: skip
    return t.func(f"{name}_pre", params)


def _backward(sp: FlashSpec, name: str) -> str:
    tiles, _ = bwd_tiles(sp.h)
    c = tiling(sp.h)
    TX = c.bwd_tx
    K = _Kernel(sp, tiles, TX, c.unroll)
    t, h = K.t, sp.h
    BN, BM = c.bwd_bn, c.bwd_bm
    RJ, CI = BN // (THREADS // TX), BM // TX  # keys per thread (ty), queries per thread (tx)
    nqb = _cdiv(sp.t, BM)
    b, kh = t.div(K.by, t.i(sp.kh)), t.rem(K.by, t.i(sp.kh))
    key0 = t.mul(K.bx, t.i(BN))
    qstride, kstride, ostride = sp.strides()
    qsize, ksize = sp.b * sp.t * qstride, sp.b * sp.s * kstride
    osize, lsize = sp.b * sp.t * ostride, sp.b * sp.n * sp.t
    kbase = t.lin((b, sp.s * kstride), (kh, h))
    K.stash(K.fetch("%k", ksize, BN, key0, sp.s, kbase, kstride), BN, "KsT", "Ks")
    K.stash(K.fetch("%v", ksize, BN, key0, sp.s, kbase, kstride), BN, "VsT", None)
    oc = sum(w for _, w in K.chunks)
    a_keys = t.mul(K.ty, t.i(RJ))
    b_rows = t.mul(K.tx, t.i(CI))
    keys = [t.add(key0, t.add(a_keys, t.i(j))) for j in range(RJ)]
    out_keys = [t.cmp("uge", kk, t.i(sp.s)) for kk in keys]
    c2 = sp.scale * LOG2E
    qb0 = t.div(key0, t.i(BM)) if sp.causal else t.i(0)

    def head(g: str, gargs: list[str]) -> list[str]:
        n = t.lin((kh, sp.g), g)
        qbase = t.lin((b, sp.t * qstride), (n, h))
        obase = t.lin((b, sp.t * ostride), (n, h)) if sp.packed else qbase
        rbase = t.lin((b, sp.n * sp.t), (n, sp.t))

        def fetch(row0: str, when: str | None = None) -> list[str]:
            pre = K.fetch("%q", qsize, BM, row0, sp.t, qbase, qstride, when)
            return pre + K.fetch("%dout", osize, BM, row0, sp.t, obase, ostride, when)

        def step(qb: str, args: list[str]) -> list[str]:
            dk, dv, pre = args[: RJ * oc], args[RJ * oc : 2 * RJ * oc], args[2 * RJ * oc :]
            row0 = t.mul(qb, t.i(BM))
            t.barrier()
            K.stash(pre[: len(pre) // 2], BM, "QsT", "Qs")
            K.stash(pre[len(pre) // 2 :], BM, "dOsT", "dOs")
            t.barrier()
            # the next query block's loads are in flight while this one is computed
            nxt = t.add(qb, t.i(1))
            pre = fetch(t.mul(nxt, t.i(BM)), t.cmp("ult", nxt, t.i(nqb)))
            s = K.mm(K.zeros(RJ * CI), "KsT", a_keys, RJ, "QsT", [(b_rows, CI)], h)
            dp = K.mm(K.zeros(RJ * CI), "VsT", a_keys, RJ, "dOsT", [(b_rows, CI)], h)
            rows, lse2, dd = [], [], []
            for i in range(CI):
                row = t.add(row0, t.add(b_rows, t.i(i)))
                ok = t.cmp("ult", row, t.i(sp.t))
                at = t.add(rbase, t.v(f"arith.minui {row}, {t.i(sp.t - 1)} : index"))
                lv = t.load("%lse", _gty(lsize), [at], 1)[0]
                dv_ = t.load("%dvec", _gty(lsize), [at], 1)[0]
                dead = t.fcmp("oeq", lv, t.f(float("-inf")))
                outside = t.v(f"arith.xori {ok}, {t._const('true', 'i1')} : i1")
                bad = t.v(f"arith.ori {dead}, {outside} : i1")
                lse2.append(t.select(bad, t.f(float("inf")), t.fop("mulf", lv, t.f(LOG2E))))
                dd.append(t.select(ok, dv_, t.f(0.0)))
                rows.append(row)
            p, ds = [], []
            for j in range(RJ):
                for i in range(CI):
                    x = t.fop("subf", t.fop("mulf", s[j * CI + i], t.f(c2)), lse2[i])
                    pr = t.exp2(x)
                    bad = out_keys[j]
                    if sp.causal:
                        late = t.cmp("ugt", keys[j], rows[i])
                        bad = t.v(f"arith.ori {bad}, {late} : i1")
                    pr = t.select(bad, t.f(0.0), pr)
                    p.append(pr)
                    d = t.fop("mulf", pr, t.fop("subf", dp[j * CI + i], dd[i]))
                    ds.append(t.fop("mulf", d, t.f(sp.scale)))
            for i in range(CI):
                at = [t.add(b_rows, t.i(i)), a_keys]
                t.store([p[j * CI + i] for j in range(RJ)], K.view["Ps"], tiles["Ps"].ty, at)
                t.store([ds[j * CI + i] for j in range(RJ)], K.view["dSs"], tiles["dSs"].ty, at)
            for j in range(RJ):
                t.store(ds[j * CI : (j + 1) * CI], K.view["dSsT"], tiles["dSsT"].ty,
                        [t.add(a_keys, t.i(j)), b_rows])  # fmt: skip
            t.barrier()
            dv = K.mm(dv, "Ps", a_keys, RJ, "dOs", K.chunks, BM)
            dk = K.mm(dk, "dSs", a_keys, RJ, "Qs", K.chunks, BM)
            rq = BM // (THREADS // TX)
            a_q = t.mul(K.ty, t.i(rq))
            dq = K.mm(K.zeros(rq * oc), "dSsT", a_q, rq, "Ks", K.chunks, BN)
            for r in range(rq):
                row = t.add(row0, t.add(a_q, t.i(r)))

                def add(row=row, r=r) -> list[str]:
                    c = 0
                    for b0, w in K.chunks:
                        for u in range(w):
                            at = t.lin(qbase, (row, qstride), b0, t.i(u))
                            t.atomic_add(dq[r * oc + c + u], "%dq", _gty(qsize), [at])
                        c += w
                    return []

                t.if_(t.cmp("ult", row, t.i(sp.t)), add, lambda: [], [])
            return dk + dv + pre

        pre0 = fetch(t.mul(qb0, t.i(BM)))
        types = ["f32"] * len(gargs) + [K.piece] * len(pre0)
        res = t.loop(qb0, t.i(nqb), t.i(1), list(gargs) + pre0, step, types)
        return res[: len(gargs)]

    res = t.loop(t.i(0), t.i(sp.g), t.i(1), K.zeros(2 * RJ * oc), head)
    dk, dv = res[: RJ * oc], res[RJ * oc :]
    for j in range(RJ):

        def store(j=j) -> list[str]:
            c = 0
            for b0, w in K.chunks:
                at = [t.lin(kbase, (keys[j], kstride), b0)]
                t.store(dk[j * oc + c : j * oc + c + w], "%dk", _gty(ksize, K.ety), at, K.ety)
                t.store(dv[j * oc + c : j * oc + c + w], "%dv", _gty(ksize, K.ety), at, K.ety)
                c += w
            return []

        t.if_(t.cmp("ult", keys[j], t.i(sp.s)), store, lambda: [], [])
    e = K.ety
    params = [f"%q: {_gty(qsize, e)}", f"%k: {_gty(ksize, e)}", f"%v: {_gty(ksize, e)}",
              f"%lse: {_gty(lsize)}", f"%dout: {_gty(osize, e)}", f"%dvec: {_gty(lsize)}",
              f"%dq: {_gty(qsize)}", f"%dk: {_gty(ksize, e)}",
              f"%dv: {_gty(ksize, e)}"]  # fmt: skip
    return t.func(f"{name}_bwd", params, THREADS, c.bwd_min_blocks)


def _post(sp: FlashSpec, name: str) -> str:
    """``dQ``, accumulated in float32, rounded into the half-precision output."""
    K = _Kernel(sp, {}, 16, 1)
    t = K.t
    n4 = sp.b * sp.t * sp.n * sp.h // 4
    i = t.lin((K.bx, THREADS), K.tid)

    def body() -> list[str]:
        at = [t.mul(i, t.i(4))]
        vals = t.load("%dq32", _gty(4 * n4), at, 4)
        t.store(vals, "%dq", _gty(4 * n4, K.ety), at, K.ety)
        return []

    t.if_(t.cmp("ult", i, t.i(n4)), body, lambda: [], [])
    params = [f"%dq32: {_gty(4 * n4)}", f"%dq: {_gty(4 * n4, K.ety)}"]
    return t.func(f"{name}_post", params, THREADS)


def canonical(sp: FlashSpec, backward: bool) -> str:
    """The kernel cache's text for a problem: the spec and a digest of the generated MLIR (the
    generator is plain Python, so any change to it, or to the settings, makes a new key)."""
    text = emit(sp, "flash", backward)
    digest = hashlib.sha256(text.encode()).hexdigest()
    fields = dataclasses.astuple(sp)
    fields = fields if sp.packed else fields[:-1]  # (the keys from before packing existed)
    return f"flash-attention {'bwd' if backward else 'fwd'} {fields} {digest}"


def emit(sp: FlashSpec, name: str, backward: bool) -> str:
    """The MLIR module of the forward or the backward kernels of ``sp``."""
    if sp.mma:
        tc = flash_tc.backward if backward else flash_tc.forward
        return module(name, ([_pre(sp, name)] if backward else []) + [tc(sp, name)])
    funcs = [_pre(sp, name), _backward(sp, name)] if backward else [_forward(sp, name)]
    if backward and sp.dtype != "float32":
        funcs.append(_post(sp, name))
    return module(name, funcs)
