"""Tensor-core forms of blu's flash-attention kernels (``flash_gpu``): the forward pass with its
two products (``S = Q K^T``, ``O += P V``) on warp-level ``mma.sync.m16n8k8`` with TF32
operands and float32 accumulators, float32 inputs and outputs only.

Two modes (``FlashSpec.mma``):

- ``"tf32"``: one TF32 product per multiply (operands rounded to TF32, ``cvt.rna.tf32.f32``:
  10 mantissa bits, round to nearest, ties away from zero), as cuBLAS's ``32F_FAST_TF32``;
  chosen when ``blu.config.default_matmul_precision == "tf32"``.
- ``"3xtf32"``: float32 accuracy from three TF32 products: ``x = big + small`` with
  ``big = tf32(x)``, ``small = tf32(x - big)``, and ``a b ~ a_small b_big + a_big b_small +
  a_big b_big`` (the ``small * small`` term, ~2^-22 relative, dropped); the products of
  ``small`` parts are accumulated first so they are not lost against the large one. This is
  CUTLASS's ``OpMultiplyAddFastF32`` (``cutlass/gemm/warp/mma_tensor_op_fast_f32.h``), which its
  float32 GEMMs on Sm80+ use for ``arch::OpMultiplyAddFastF32``; PyTorch's memory-efficient
  attention (xformers' CUTLASS kernels, ``kernel_forward.h`` / ``gemm_kernel_utils.h``:
  ``DefaultGemmType<Sm80, float>`` has ``Operator = arch::OpMultiplyAddFastF32`` and an
  ``InstructionShape`` of 16x8x8) computes its float32 attention the same way.

Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k8", ``.tf32``): with
``g = lane >> 2`` and ``c = lane % 4``, A (16x8, row) holds ``a0 (g, c)``, ``a1 (g + 8, c)``,
``a2 (g, c + 4)``, ``a3 (g + 8, c + 4)``; B (8x8, col) ``b0 (k = c, n = g)``, ``b1 (k = c + 4,
n = g)``; C/D (16x8) ``c0 (g, 2c)``, ``c1 (g, 2c + 1)``, ``c2 (g + 8, 2c)``, ``c3 (g + 8,
2c + 1)``.

How the forward maps onto a block of 256 threads (8 warps): one block per 128 queries of one
(batch, head), each warp owning 16 query rows, looping over blocks of ``BN`` keys (causal: only
blocks at or before the diagonal). ``Q`` (scaled by ``scale * log2(e)``), ``K`` and ``V`` are
staged in shared memory in their natural (row, head) layout, padded so that every fragment load
hits 32 distinct banks (rows 4 floats apart for ``Q``, ``K`` and ``P``, 8 for ``V``); ``K`` and
``V`` are rounded (or split into big and small parts) once when staged, ``Q`` and ``P`` when
their fragments are read (each A fragment serves a whole row of products). The scores' row
statistics live with the C fragments (two rows per thread), combined across the four lanes of
a group with shuffles; ``P`` goes from the C layout to the A layout through shared memory.

The backward keeps the CUDA-core kernels (``flash_gpu._backward``) for now: the spec of a
backward equation always has ``mma == ""`` (``choose``).
"""

from __future__ import annotations

from blu.lower.mlir.flash_text import Text

BM = 128  # queries per block: 8 warps of 16 rows
MODES = ("tf32", "3xtf32")
# precision (blu.config.default_matmul_precision) -> tensor-core mode of the forward and the
# backward ("" keeps the CUDA-core kernels); the benchmark's variants override these
FORWARD = {"tf32": "tf32", "fp32": "3xtf32", "highest": "3xtf32"}
BACKWARD: dict[str, str] = {}
_STRUCT = "!llvm.struct<(f32, f32, f32, f32)>"


def bn(h: int, mode: str) -> int:
    """Keys per step: 64, or 32 for heads of 128 in 3xTF32 (split tiles fill shared memory)."""
    return 32 if h == 128 and mode == "3xtf32" else 64


def tiles(h: int, mode: str) -> list[tuple[str, int, int]]:
    """The forward's shared tiles (name, rows, columns), float32."""
    n = bn(h, mode)
    out = [("Qs", BM, h + 4), ("Ps", BM, n + 4), ("Kb", n, h + 4), ("Vb", n, h + 8)]
    if mode == "3xtf32":
        out += [("Ksm", n, h + 4), ("Vsm", n, h + 8)]
    return out


def choose(dtype: str, h: int, precision: str, backward: bool, enabled: bool = True) -> str:
    """The tensor-core mode for a problem ("" : the CUDA-core kernels): float32 operands,
    heads of 32, 64 or 128, the mode ``FORWARD``/``BACKWARD`` give ``precision``."""
    if not enabled or dtype != "float32" or h not in (32, 64, 128):
        return ""
    return (BACKWARD if backward else FORWARD).get(precision, "")


class Mma:
    """TF32 ``mma.sync`` pieces over a ``Text``: rounding, splitting, fragment products."""

    def __init__(self, t: Text, mode: str):
        self.t, self.mode = t, mode

    def tf32(self, x: str) -> str:
        """``x`` rounded to TF32 (as the i32 bit pattern ``mma`` takes)."""
        return self.t.v(f'llvm.inline_asm "cvt.rna.tf32.f32 $0, $1;", "=r,f" {x} : (f32) -> i32')

    def as_f32(self, x: str) -> str:
        return self.t.v(f"arith.bitcast {x} : i32 to f32")

    def as_i32(self, x: str) -> str:
        return self.t.v(f"arith.bitcast {x} : f32 to i32")

    def parts(self, x: str, rounded: bool) -> list[str]:
        """The operand parts of an f32 value: ``[tf32(x)]``, or ``[big, small]`` in 3xTF32
        (``rounded``: ``x`` already holds TF32 bits, tf32 mode only)."""
        if self.mode == "tf32":
            return [self.as_i32(x) if rounded else self.tf32(x)]
        big = self.tf32(x)
        small = self.tf32(self.t.fop("subf", x, self.as_f32(big)))
        return [big, small]

    def staged(self, x: str) -> list[str]:
        """The f32 values to stage in shared memory for ``x``: its TF32 rounding, or big and
        small parts."""
        return [self.as_f32(p) for p in self.parts(x, False)]

    def _one(self, a: list[str], b: list[str], c: list[str]) -> list[str]:
        t = self.t
        r = t.v(f"nvvm.mma.sync A[{', '.join(a)}] B[{', '.join(b)}] C[{', '.join(c)}] "
                "{layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, "
                "multiplicandAPtxType = #nvvm.mma_type<tf32>, "
                "multiplicandBPtxType = #nvvm.mma_type<tf32>, "
                "shape = #nvvm.shape<m = 16, n = 8, k = 8>} "
                f": (i32, i32, f32) -> {_STRUCT}")  # fmt: skip
        return [t.v(f"llvm.extractvalue {r}[{i}] : {_STRUCT}") for i in range(4)]

    def mma(self, a: list[list[str]], b: list[list[str]], c: list[str]) -> list[str]:
        """``c += A B`` for fragments given as parts (``a[part]``: 4 registers, ``b[part]``:
        2): one product, or the three of 3xTF32 (small terms first)."""
        if self.mode == "tf32":
            return self._one(a[0], b[0], c)
        c = self._one(a[1], b[0], c)
        c = self._one(a[0], b[1], c)
        return self._one(a[0], b[0], c)


def smem_bytes(h: int, mode: str) -> int:
    return sum(4 * r * c for _, r, c in tiles(h, mode))


def forward(sp, name: str) -> str:
    """The tensor-core forward kernel ``<name>_fwd`` of ``sp`` (``sp.mma`` a mode): the same
    parameters, launch grid and results as ``flash_gpu._forward``."""
    from blu.lower.mlir import flash_gpu as fg

    mode, h = sp.mma, sp.h
    BN = bn(h, mode)
    tl, _ = fg._layout(tiles(h, mode))
    K = fg._Kernel(sp, tl, 16, 1)
    t = K.t
    M = Mma(t, mode)
    split = mode == "3xtf32"
    lane, warp = t.rem(K.tid, t.i(32)), t.div(K.tid, t.i(32))
    g, c = t.div(lane, t.i(4)), t.rem(lane, t.i(4))
    wrow = t.mul(warp, t.i(16))
    nqb = fg._cdiv(sp.t, BM)
    qb = t.v(f"arith.subi {t.i(nqb - 1)}, {K.bx} : index")  # the longest causal blocks first
    b, n = t.div(K.by, t.i(sp.n)), t.rem(K.by, t.i(sp.n))
    kh = t.div(n, t.i(sp.g))
    row0 = t.mul(qb, t.i(BM))
    qstride, kstride = sp.n * h, sp.kh * h
    qbase = t.lin((b, sp.t * qstride), (n, h))
    kbase = t.lin((b, sp.s * kstride), (kh, h))
    qsize, ksize = sp.b * sp.t * qstride, sp.b * sp.s * kstride
    gty = fg._gty

    def stage(pieces: list[str], rows: int, names: list[str], scale: float = 1.0,
              raw: bool = False) -> None:  # fmt: skip
        """Fetched (row, 4 heads) pieces into natural-layout tiles: rounded or split (``raw``:
        as float32, their parts taken when read)."""
        for it, x in enumerate(pieces):
            idx = t.add(K.tid, t.i(fg.THREADS * it))
            r, dc = t.rem(idx, t.i(rows)), t.div(idx, t.i(rows))
            vals = [t.v(f"vector.extract {x}[{j}] : f32 from vector<4xf32>") for j in range(4)]
            if scale != 1.0:
                vals = [t.fop("mulf", v, t.f(scale)) for v in vals]
            per = [vals] if raw else list(zip(*[M.staged(v) for v in vals]))
            for nm, vv in zip(names, per):
                t.store(list(vv), K.view[nm], tl[nm].ty, [r, t.mul(dc, t.i(4))])

    def a_frag(nm: str, r0: str, k0: str) -> list[list[str]]:
        """A fragment rows ``r0 + g (+8)``, columns ``k0 + c (+4)`` of a raw-f32 tile."""
        vals = []
        for dr, dk in ((0, 0), (8, 0), (0, 4), (8, 4)):
            at = [t.add(r0, t.add(g, t.i(dr))), t.add(k0, t.add(c, t.i(dk)))]
            vals.append(t.load(K.view[nm], tl[nm].ty, at, 1)[0])
        return [list(p) for p in zip(*[M.parts(v, not split) for v in vals])]

    def b_frag(names: list[str], n0: str, k0: str, kmajor: bool) -> list[list[str]]:
        """B fragment ``k = k0 + c (+4)``, ``n = n0 + g`` of staged tiles (one per part);
        ``kmajor``: the tile is indexed [k][n] (V), else [n][k] (K)."""
        out = []
        for nm in names:
            regs = []
            for dk in (0, 4):
                kk, nn = t.add(k0, t.add(c, t.i(dk))), t.add(n0, g)
                at = [kk, nn] if kmajor else [nn, kk]
                regs.append(M.as_i32(t.load(K.view[nm], tl[nm].ty, at, 1)[0]))
            out.append(regs)
        return out

    kparts = ["Kb", "Ksm"] if split else ["Kb"]
    vparts = ["Vb", "Vsm"] if split else ["Vb"]
    stage(K.fetch("%q", qsize, BM, row0, sp.t, qbase, qstride), BM, ["Qs"], sp.scale * fg.LOG2E,
          raw=split)  # fmt: skip
    if sp.causal:
        kend = t.v(f"arith.minui {t.add(row0, t.i(BM))}, {t.i(sp.s)} : index")
        nkb = t.div(t.add(kend, t.i(BN - 1)), t.i(BN))
    else:
        nkb = t.i(fg._cdiv(sp.s, BN))
    NO, NS = h // 8, BN // 8  # n-tiles of the output (heads) and of the scores (keys)
    pre0 = K.fetch("%k", ksize, BN, t.i(0), sp.s, kbase, kstride)
    pre0 += K.fetch("%v", ksize, BN, t.i(0), sp.s, kbase, kstride)
    npre = len(pre0) // 2
    rows = [t.add(row0, t.add(wrow, t.add(g, t.i(8 * r)))) for r in range(2)]

    def body(kb: str, args: list[str]) -> list[str]:
        o, m, l_ = args[: 4 * NO], args[4 * NO : 4 * NO + 2], args[4 * NO + 2 : 4 * NO + 4]
        pre = args[4 * NO + 4 :]
        t.barrier()
        key0 = t.mul(kb, t.i(BN))
        stage(pre[:npre], BN, kparts)
        stage(pre[npre:], BN, vparts)
        t.barrier()
        # the next key block's loads are in flight while this one is computed
        nxt = t.add(kb, t.i(1))
        more = t.cmp("ult", nxt, nkb)
        key1 = t.mul(nxt, t.i(BN))
        pre = K.fetch("%k", ksize, BN, key1, sp.s, kbase, kstride, more)
        pre += K.fetch("%v", ksize, BN, key1, sp.s, kbase, kstride, more)

        def qk(kk: str, s: list[str]) -> list[str]:
            k0 = t.mul(kk, t.i(8))
            a = a_frag("Qs", wrow, k0)
            out = []
            for j in range(NS):
                out += M.mma(a, b_frag(kparts, t.i(8 * j), k0, False), s[4 * j : 4 * j + 4])
            return out

        s = t.loop(t.i(0), t.i(h // 8), t.i(1), K.zeros(4 * NS), qk)
        m_new, l_new, alpha, p = [], [], [], []
        for r in range(2):
            row = []
            for j in range(NS):
                for e in range(2):
                    key = t.add(key0, t.add(t.mul(c, t.i(2)), t.i(8 * j + e)))
                    bad = t.cmp("uge", key, t.i(sp.s))
                    if sp.causal:
                        bad = t.v(f"arith.ori {bad}, {t.cmp('ugt', key, rows[r])} : i1")
                    row.append(t.select(bad, t.f(float("-inf")), s[4 * j + 2 * r + e]))
            mx = row[0]
            for x in row[1:]:
                mx = t.fop("maximumf", mx, x)
            mx = t.lane_reduce(mx, "maximumf", 4)
            mn = t.fop("maximumf", m[r], mx)
            use = t.select(t.fcmp("oeq", mn, t.f(float("-inf"))), t.f(0.0), mn)
            alpha.append(t.exp2(t.fop("subf", m[r], use)))
            pr = [t.exp2(t.fop("subf", x, use)) for x in row]
            tot = pr[0]
            for x in pr[1:]:
                tot = t.fop("addf", tot, x)
            l_new.append(t.fop("addf", t.fop("mulf", l_[r], alpha[r]), tot))
            m_new.append(mn)
            p.append(pr)
        o = [t.fop("mulf", o[4 * j + i], alpha[i // 2]) for j in range(NO) for i in range(4)]
        ps = tl["Ps"]
        for r in range(2):
            for j in range(NS):
                vals = p[r][2 * j : 2 * j + 2]
                if not split:  # tf32: rounded once here, read as bits
                    vals = [M.as_f32(M.tf32(x)) for x in vals]
                at = [t.add(wrow, t.add(g, t.i(8 * r))), t.add(t.mul(c, t.i(2)), t.i(8 * j))]
                t.store(vals, K.view["Ps"], ps.ty, at)
        t.barrier()

        def pv(kk: str, acc: list[str]) -> list[str]:
            k0 = t.mul(kk, t.i(8))
            a = a_frag("Ps", wrow, k0)
            out = []
            for j in range(NO):
                out += M.mma(a, b_frag(vparts, t.i(8 * j), k0, True), acc[4 * j : 4 * j + 4])
            return out

        o = t.loop(t.i(0), t.i(NS), t.i(1), o, pv)
        return o + m_new + l_new + pre

    inits = K.zeros(4 * NO) + [t.f(float("-inf"))] * 2 + K.zeros(2) + pre0
    types = ["f32"] * (4 * NO + 4) + [K.piece] * len(pre0)
    res = t.loop(t.i(0), nkb, t.i(1), inits, body, types)
    o, m, l_ = res[: 4 * NO], res[4 * NO : 4 * NO + 2], res[4 * NO + 2 : 4 * NO + 4]
    osize, lsize = sp.b * sp.t * qstride, sp.b * sp.n * sp.t
    lbase = t.lin((b, sp.n * sp.t), (n, sp.t))
    first = t.cmp("eq", c, t.i(0))
    for r in range(2):
        tot = t.lane_reduce(l_[r], "addf", 4)
        pos = t.fcmp("ogt", tot, t.f(0.0))
        inv = t.select(pos, t.fop("divf", t.f(1.0), tot), t.f(0.0))
        lg = t.v(f"math.log2 {tot} : f32")
        lse = t.select(pos, t.fop("mulf", t.fop("addf", m[r], lg), t.f(fg.LN2)),
                       t.f(float("-inf")))  # fmt: skip
        row = rows[r]
        vals = [t.fop("mulf", o[4 * j + 2 * r + e], inv) for j in range(NO) for e in range(2)]

        def store(row=row, vals=vals, lse=lse) -> list[str]:
            for j in range(NO):
                at = [t.lin(qbase, (row, qstride), (c, 2), t.i(8 * j))]
                t.store(vals[2 * j : 2 * j + 2], "%out", gty(osize), at)
            t.if_(first, lambda: t.store([lse], "%lse", gty(lsize), [t.add(lbase, row)]) or [],
                  lambda: [], [])  # fmt: skip
            return []

        t.if_(t.cmp("ult", row, t.i(sp.t)), store, lambda: [], [])
    params = [f"%q: {gty(qsize)}", f"%k: {gty(ksize)}", f"%v: {gty(ksize)}",
              f"%out: {gty(osize)}", f"%lse: {gty(lsize)}"]  # fmt: skip
    return t.func(f"{name}_fwd", params, fg.THREADS)
