"""The building blocks of blu's flash-attention kernels for CUDA GPUs, shared by the CUDA-core
forms (``flash.py``) and the tensor-core forms (``flash_tc.py``): the problem (``FlashSpec``),
the shared-memory tiles and their layout (``Tile``, ``Tiling``, ``layout``), and the kernel
text builder with the thread mapping every form uses (``Kernel``). See ``flash.py``'s docstring
for the algorithm (FlashAttention-2) and the mapping onto a block of threads."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from blu.lower.cuda.flash_text import SMEM, Text, smem_type, vec

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


def layout(tiles: Sequence[tuple[str, int, int]]) -> tuple[dict[str, Tile], int]:
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


PAD = 4  # floats of padding per shared-memory row (conflict-free transposing stores)


OVERRIDE: dict = {}  # fields the benchmark's variants set


def tiling(h: int) -> Tiling:
    return dataclasses.replace(TILING[h], **OVERRIDE)


def fwd_tiles(h: int) -> tuple[dict[str, Tile], int]:
    c = tiling(h)
    bm, bn = c.fwd_bm, c.fwd_bn
    return layout([("QsT", h, bm + PAD), ("KsT", h, bn + PAD), ("Vs", bn, h + PAD),
                    ("PsT", bn, bm + PAD)])  # fmt: skip


def bwd_tiles(h: int) -> tuple[dict[str, Tile], int]:
    c = tiling(h)
    bm, bn = c.bwd_bm, c.bwd_bn
    return layout([("KsT", h, bn + PAD), ("Ks", bn, h + PAD), ("VsT", h, bn + PAD),
                    ("QsT", h, bm + PAD), ("Qs", bm, h + PAD), ("dOsT", h, bm + PAD),
                    ("dOs", bm, h + PAD), ("Ps", bm, bn + PAD), ("dSs", bm, bn + PAD),
                    ("dSsT", bn, bm + PAD)])  # fmt: skip


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def gty(n: int, ety: str = "f32") -> str:
    return f"memref<{max(n, 1)}x{ety}>"


class Kernel:
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
                            f"{gty(gsize, ety)}, {piece}")]  # fmt: skip

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
