"""Tensor-core forms of blu's flash-attention kernels (``flash_gpu``): the forward pass (``S =
Q K^T``, ``O += P V``) and the backward pass (five products) on warp-level
``mma.sync.m16n8k8`` with TF32 operands and float32 accumulators, float32 inputs and outputs
only (same parameters, results and semantics as the CUDA-core kernels: causal top-left, GQA,
any T and S, heads of 32/64/128, the log-sum-exp, zeros for fully masked rows).

Two modes (``FlashSpec.mma``):

- ``"tf32"``: one TF32 product per multiply (operands rounded to TF32, ``cvt.rna.tf32.f32``:
  10 mantissa bits, round to nearest, ties away from zero), as cuBLAS's ``32F_FAST_TF32``;
  chosen when ``blu.config.default_matmul_precision == "tf32"``.
- ``"3xtf32"``: float32 accuracy from three TF32 products: ``x = big + small`` with
  ``big = tf32(x)``, ``small = tf32(x - big)``, and ``a b ~ a_small b_big + a_big b_small +
  a_big b_big`` (the ``small * small`` term, ~2^-22 relative, dropped), the small terms first
  so they are not lost against the large one; chosen under "fp32". This is CUTLASS's
  ``arch::OpMultiplyAddFastF32`` (``include/cutlass/gemm/warp/mma_tensor_op_fast_f32.h``,
  ``MmaTensorOpFastF32`` with ``TensorFloat32Op::k3xTF32``: the same three products in the same
  order; CUTLASS truncates ``big`` and rounds ``small`` half-ulp-truncate, blu rounds both to
  nearest). PyTorch's memory-efficient attention (xformers' CUTLASS kernels) computes float32
  this way: ``gemm_kernel_utils.h`` specializes ``DefaultGemmType`` for ``float`` on
  ``kMinComputeCapability >= 80`` (aligned operands) as ``OpClassTensorOp``,
  ``InstructionShape = GemmShape<16, 8, 8>``, ``Operator = arch::OpMultiplyAddFastF32``
  (unaligned ones fall back to SIMT ``OpMultiplyAdd``); read in the copy at
  ``PaddlePaddle/Paddle: paddle/phi/kernels/fusion/cutlass/fused_multi_head_attention/
  gemm_kernel_utils.h``, the same file as PyTorch's ``aten/src/ATen/native/transformers/cuda/
  mem_eff_attention/gemm_kernel_utils.h``.

Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k8", ``.tf32``): with
``g = lane >> 2`` and ``c = lane % 4``, A (16x8, row) holds ``a0 (g, c)``, ``a1 (g + 8, c)``,
``a2 (g, c + 4)``, ``a3 (g + 8, c + 4)``; B (8x8, col) ``b0 (k = c, n = g)``, ``b1 (k = c + 4,
n = g)``; C/D (16x8) ``c0 (g, 2c)``, ``c1 (g, 2c + 1)``, ``c2 (g + 8, 2c)``, ``c3 (g + 8,
2c + 1)``.

How the forward maps onto a block of 256 threads (8 warps): one block per 128 queries of one
(batch, head), each warp owning 16 query rows, looping over blocks of ``BN`` keys (causal: only
blocks at or before the diagonal). ``Q`` (scaled by ``scale * log2(e)``), ``K`` and ``V`` are
staged in shared memory in their natural (row, head) layout. Every product's reduction index is
permuted within each step of 8 (PAIRS: the fragments' ``k = c`` and ``k = c + 4`` read columns
``2c`` and ``2c + 1``; both operands alike, so the sum is unchanged), which makes a row's two
A values, and a [n][k] tile's two B values, one 8-byte load; rows are padded so that the loads
hit distinct banks (8 floats for tiles read along rows, 4 for ``V``, read down columns); ``K`` and
``V`` are rounded (or split into big and small parts) once when staged, ``Q`` and ``P`` when
their fragments are read (each A fragment serves a whole row of products). The scores' row
statistics live with the C fragments (two rows per thread), combined across the four lanes of
a group with shuffles; ``P`` never leaves the registers: with PAIRS, a thread's C fragment of
8 keys' scores is exactly its A fragment of those keys for ``P V``.

The backward (``backward``, after ``flash._pre``) runs its five products the same way;
``P^T`` and ``dS^T`` are staged in shared memory as the A operands of ``dV``, ``dK`` and (read
transposed) ``dQ`` (they cannot stay in registers: a warp's C fragments hold half the queries
that its ``dV``/``dK`` rows sum over, and ``dQ`` needs ``dS`` transposed). Its layout options
(``BWD_RAW``, ``BWD_PAIRS``, ``BWD_PREFETCH``) change where values are kept and how they are
loaded, never a sum or its order: in 3xTF32 the operands are staged as float32 and split when a
fragment is read (109.6 KB at heads of 64 rather than 219: two blocks an SM, 125 registers,
no spills), the B operands read down the columns of [k][n] tiles and ``dQ``'s transposed A
operand are 8-byte pairs (permuted head columns and ``dQ`` rows), and the next query block is
not prefetched into registers (the other block on the SM hides the loads). The forward's and
the backward's modes are chosen independently (``FORWARD``, ``BACKWARD``; a backward spec may
keep ``mma == ""``).
"""

from __future__ import annotations

from blu.lower.cuda import flash_kernel as fg
from blu.lower.cuda.flash_mma import Mma

BM = 128  # queries per block: 8 warps of 16 rows
MODES = ("tf32", "3xtf32")
# precision (blu.config.default_matmul_precision) -> tensor-core mode of the forward and the
# backward ("" keeps the CUDA-core kernels); the benchmark's variants override these
FORWARD = {"tf32": "tf32", "high": "tf32", "fp32": "3xtf32", "highest": "3xtf32"}
BACKWARD = dict(FORWARD)
# blocks an SM should hold (NVVM minctasm; 0: as registers allow), per kernel and mode; the
# benchmark's variants override these
MIN_BLOCKS: dict[tuple[str, str], int] = {}
MAX_SHARED = 227 * 1024  # bytes of shared memory a block may opt into on sm_80/sm_90


def bn(h: int, mode: str) -> int:
    """Keys per step: 64, or 32 for heads of 128 in 3xTF32 (split tiles fill shared memory)."""
    return 32 if h == 128 and mode == "3xtf32" else 64


def tiles(h: int, mode: str) -> list[tuple[str, int, int]]:
    """The forward's shared tiles (name, rows, columns), float32."""
    n = bn(h, mode)
    out = [("Qs", BM, h + 8), ("Kb", n, h + 8), ("Vb", n, h + 4)]
    if mode == "3xtf32":
        out += [("Ksm", n, h + 8), ("Vsm", n, h + 4)]
    return out


def choose(dtype: str, h: int, precision: str, backward: bool, enabled: bool = True) -> str:
    """The tensor-core mode for a problem ("" : the CUDA-core kernels): float32 operands,
    heads of 32, 64 or 128, the mode ``FORWARD``/``BACKWARD`` give ``precision`` (the backward
    of heads of 128 in 3xTF32 stays on CUDA cores: its split tiles exceed shared memory)."""
    if not enabled or dtype != "float32" or h not in (32, 64, 128):
        return ""
    mode = (BACKWARD if backward else FORWARD).get(precision, "")
    if backward and mode and bwd_smem_bytes(h, mode, raw=False) > MAX_SHARED:
        return ""  # heads of 128 in 3xTF32: the split tiles exceed shared memory (kept so
        # under BWD_RAW too: not measured)
    return mode


def smem_bytes(h: int, mode: str) -> int:
    return sum(4 * r * c for _, r, c in tiles(h, mode))


def forward(sp, name: str) -> str:
    """The tensor-core forward kernel ``<name>_fwd`` of ``sp`` (``sp.mma`` a mode): the same
    parameters, launch grid and results as ``flash._forward``."""
    mode, h = sp.mma, sp.h
    BN = bn(h, mode)
    tl, _ = fg.layout(tiles(h, mode))
    K = fg.Kernel(sp, tl, 16, 1)
    t = K.t
    M = Mma(t, mode)
    split = mode == "3xtf32"
    lane, warp = t.rem(K.tid, t.i(32)), t.div(K.tid, t.i(32))
    g, c = t.div(lane, t.i(4)), t.rem(lane, t.i(4))
    wrow = t.mul(warp, t.i(16))
    nqb = fg.cdiv(sp.t, BM)
    qb = t.v(f"arith.subi {t.i(nqb - 1)}, {K.bx} : index")  # the longest causal blocks first
    b, n = t.div(K.by, t.i(sp.n)), t.rem(K.by, t.i(sp.n))
    kh = t.div(n, t.i(sp.g))
    row0 = t.mul(qb, t.i(BM))
    qstride, kstride, ostride = sp.strides()
    qbase = t.lin((b, sp.t * qstride), (n, h))
    kbase = t.lin((b, sp.s * kstride), (kh, h))
    obase = t.lin((b, sp.t * ostride), (n, h)) if sp.packed else qbase
    qsize, ksize = sp.b * sp.t * qstride, sp.b * sp.s * kstride
    gty = fg.gty

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

    cp = t.mul(c, t.i(2))  # the fragments' k = c and c + 4 sit at columns 2c, 2c + 1 (PAIRS)

    def a_frag(nm: str, r0: str, k0: str) -> list[list[str]]:
        """A fragment rows ``r0 + g (+8)``, ``k = c (+4)`` at ``k0 + 2c (+1)`` of a raw-f32
        tile (one 8-byte load a row)."""
        lo, hi = (t.load(K.view[nm], tl[nm].ty, [t.add(r0, t.add(g, t.i(dr))), t.add(k0, cp)], 2)
                  for dr in (0, 8))  # fmt: skip
        vals = [lo[0], hi[0], lo[1], hi[1]]
        return [list(p) for p in zip(*[M.parts(v, not split) for v in vals])]

    def b_frag(names: list[str], n0: str, k0: str, kmajor: bool) -> list[list[str]]:
        """B fragment ``k = c (+4)`` at ``k0 + 2c (+1)``, ``n = n0 + g`` of staged tiles (one
        per part); ``kmajor``: the tile is indexed [k][n] (V), else [n][k] (K: one 8-byte
        load)."""
        out = []
        for nm in names:
            view, ty, nn = K.view[nm], tl[nm].ty, t.add(n0, g)
            if kmajor:
                vals = [t.load(view, ty, [t.add(k0, t.add(cp, t.i(e))), nn], 1)[0]
                        for e in (0, 1)]  # fmt: skip
            else:
                vals = t.load(view, ty, [nn, t.add(k0, cp)], 2)
            out.append([M.as_i32(v) for v in vals])
        return out

    kparts = ["Kb", "Ksm"] if split else ["Kb"]
    vparts = ["Vb", "Vsm"] if split else ["Vb"]
    stage(K.fetch("%q", qsize, BM, row0, sp.t, qbase, qstride), BM, ["Qs"], sp.scale * fg.LOG2E,
          raw=split)  # fmt: skip
    if sp.causal:
        kend = t.v(f"arith.minui {t.add(row0, t.i(BM))}, {t.i(sp.s)} : index")
        nkb = t.div(t.add(kend, t.i(BN - 1)), t.i(BN))
    else:
        nkb = t.i(fg.cdiv(sp.s, BN))
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
        # O += P V, key step kk: with PAIRS the A fragment (rows g, g + 8; keys 2c, 2c + 1 of
        # the step) is this thread's own C fragment of the scores' n-tile kk, so P stays in
        # registers
        for kk in range(NS):
            vals = [p[0][2 * kk], p[1][2 * kk], p[0][2 * kk + 1], p[1][2 * kk + 1]]
            a = [list(x) for x in zip(*[M.parts(v, False) for v in vals])]
            k0 = t.i(8 * kk)
            o = [x for j in range(NO)
                 for x in M.mma(a, b_frag(vparts, t.i(8 * j), k0, True), o[4 * j : 4 * j + 4])
                 ]  # fmt: skip
        return o + m_new + l_new + pre

    inits = K.zeros(4 * NO) + [t.f(float("-inf"))] * 2 + K.zeros(2) + pre0
    types = ["f32"] * (4 * NO + 4) + [K.piece] * len(pre0)
    res = t.loop(t.i(0), nkb, t.i(1), inits, body, types)
    o, m, l_ = res[: 4 * NO], res[4 * NO : 4 * NO + 2], res[4 * NO + 2 : 4 * NO + 4]
    osize, lsize = sp.b * sp.t * ostride, sp.b * sp.n * sp.t
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
                at = [t.lin(obase, (row, ostride), (c, 2), t.i(8 * j))]
                t.store(vals[2 * j : 2 * j + 2], "%out", gty(osize), at)
            t.if_(first, lambda: t.store([lse], "%lse", gty(lsize), [t.add(lbase, row)]) or [],
                  lambda: [], [])  # fmt: skip
            return []

        t.if_(t.cmp("ult", row, t.i(sp.t)), store, lambda: [], [])
    params = [f"%q: {gty(qsize)}", f"%k: {gty(ksize)}", f"%v: {gty(ksize)}",
              f"%out: {gty(osize)}", f"%lse: {gty(lsize)}"]  # fmt: skip
    # TF32 heads of up to 64 fit 128 registers without spilling: two blocks an SM
    blocks = MIN_BLOCKS.get(("fwd", mode), 2 if mode == "tf32" and h <= 64 else 0)
    return t.func(f"{name}_fwd", params, fg.THREADS, blocks)


# ---- the backward --------------------------------------------------------------------------

BWD_BN, BWD_BM = 64, 64  # keys per block, queries per step: 4 slabs of 16 rows x 2 halves
# the backward's layout options (the benchmark's variants override these; the kernel cache's key
# is the generated text, so each setting is its own kernel):
# BWD_RAW: 3xTF32 operands staged once as float32 and split into big and small parts when a
# fragment is read (one tile an operand, not two: half the shared memory, two blocks an SM at
# heads of 64); the parts are the same numbers, so the results are the same
BWD_RAW = True
# BWD_PAIRS: the products whose B operand is read down the columns of a [k][n] tile (dV, dK, dQ:
# n the heads) take head ``16 m + 2 g + u`` as column g of n-tile ``2 m + u``, and ``dQ``'s rows
# (queries) ``2 g`` and ``2 g + 1`` as rows g and g + 8, so that those B values and the A values
# of ``dQ`` read from ``dS^T`` are 8-byte pairs (half the loads); each output element is the same
# sum, only where it is kept changes (per mode: TF32's spills at two blocks an SM; 3xTF32's
# backward measured faster without them on the H200, docs/benchmarks/gpt2_gpu.md, session 7)
BWD_PAIRS = {"3xtf32": False, "tf32": False}
# BWD_PREFETCH: the next query block's Q and dO are loaded into registers (32 at heads of 64)
# while this one is computed; off: loaded at the top of each step (fewer registers: with two
# blocks an SM, the other block computes meanwhile; per mode)
BWD_PREFETCH = {"3xtf32": False, "tf32": True}
SM_SHARED = 228 * 1024  # bytes of shared memory an SM has (sm_90), 1 KiB of it reserved a block


def bwd_tiles(h: int, mode: str, raw: bool | None = None) -> list[tuple[str, int, int]]:
    """The backward's shared tiles, one per operand part (big, small; one, float32, under
    ``raw``, default ``BWD_RAW``): natural layouts, rows padded by 4 floats where the tile is
    read along rows most, 8 where along columns."""
    out = []
    for nm, r, cols in (("K", BWD_BN, h + 4), ("V", BWD_BN, h + 8), ("Q", BWD_BM, h + 8),
                        ("dO", BWD_BM, h + 8), ("PT", BWD_BN, BWD_BM + 8),
                        ("dST", BWD_BN, BWD_BM + 8)):  # fmt: skip
        out += [(nm + p, r, cols) for p in _parts(mode, BWD_RAW if raw is None else raw)]
    return out


def _parts(mode: str, raw: bool) -> tuple[str, ...]:
    return ("b", "s") if mode == "3xtf32" and not raw else ("b",)


def bwd_smem_bytes(h: int, mode: str, raw: bool | None = None) -> int:
    return sum(4 * r * c for _, r, c in bwd_tiles(h, mode, raw))


def backward(sp, name: str) -> str:
    """The tensor-core backward kernel ``<name>_bwd`` of ``sp``: the parameters and launch grid
    of ``flash._backward`` (after the same ``_pre`` launch), float32 only.

    One block per 64 keys of one (batch, key/value head); warp ``w`` owns key rows
    ``16 (w % 4)`` and the half ``w // 4`` of the other dimension. Per step of 64 queries:
    ``S^T = K Q^T`` and ``dP^T = V dO^T`` (keys x queries, C fragments), ``P^T`` and
    ``dS^T = P^T (dP^T - D) scale`` staged in shared memory (rounded, split, or float32 under
    ``BWD_RAW``), then ``dV += P^T dO``, ``dK += dS^T Q`` (kept in registers over the whole
    loop) and ``dQ = dS K`` (A fragments read transposed from ``dS^T``), added to the float32
    ``dQ`` with atomics. ``BWD_PAIRS`` (per mode) permutes the heads within each pair of head
    n-tiles and ``dQ``'s rows within its slab (the same sums, kept elsewhere), ``BWD_PREFETCH``
    (per mode) loads the next query block during this one; 3xTF32 under ``BWD_RAW`` asks for
    two blocks an SM where their shared memory fits (``MIN_BLOCKS`` overrides)."""
    mode, h = sp.mma, sp.h
    BN, BM = BWD_BN, BWD_BM
    tl, _ = fg.layout(bwd_tiles(h, mode))
    K = fg.Kernel(sp, tl, 16, 1)
    t = K.t
    M = Mma(t, mode)
    raw = BWD_RAW and mode == "3xtf32"  # float32 tiles, split when read
    pairs, prefetch = BWD_PAIRS.get(mode, False), BWD_PREFETCH.get(mode, True)
    P = _parts(mode, raw)
    lane, warp = t.rem(K.tid, t.i(32)), t.div(K.tid, t.i(32))
    g, c = t.div(lane, t.i(4)), t.rem(lane, t.i(4))
    w16 = t.mul(t.rem(warp, t.i(4)), t.i(16))  # this warp's 16 rows (keys; queries for dQ)
    half = t.div(warp, t.i(4))
    q32 = t.mul(half, t.i(BM // 2))  # its half of the queries (S^T, dP^T)
    h2 = t.mul(half, t.i(h // 2))  # its half of the heads (dV, dK, dQ)
    NQ, NH = BM // 16, h // 16  # n-tiles of a half: queries, heads
    nqb = fg.cdiv(sp.t, BM)
    b, kh = t.div(K.by, t.i(sp.kh)), t.rem(K.by, t.i(sp.kh))
    key0 = t.mul(K.bx, t.i(BN))
    qstride, kstride, ostride = sp.strides()
    qsize, ksize = sp.b * sp.t * qstride, sp.b * sp.s * kstride
    osize, lsize = sp.b * sp.t * ostride, sp.b * sp.n * sp.t
    kbase = t.lin((b, sp.s * kstride), (kh, h))
    gty = fg.gty

    def names(op: str) -> list[str]:
        return [op + p for p in P]

    def put(nm: str, vals: list[str], at: list[str]) -> None:
        """Store f32 values (consecutive) into the tiles of operand ``nm``: as they are under
        ``raw``, else as their parts."""
        per = [vals] if raw else list(zip(*[M.staged(v) for v in vals]))
        for tile, vv in zip(names(nm), per):
            t.store(list(vv), K.view[tile], tl[tile].ty, at)

    def stage(pieces: list[str], rows: int, nm: str) -> None:
        for it, x in enumerate(pieces):
            idx = t.add(K.tid, t.i(fg.THREADS * it))
            r, dc = t.rem(idx, t.i(rows)), t.div(idx, t.i(rows))
            vals = [t.v(f"vector.extract {x}[{j}] : f32 from vector<4xf32>") for j in range(4)]
            put(nm, vals, [r, t.mul(dc, t.i(4))])

    def read(nm: str, fetch) -> list[list[str]]:
        """A fragment's registers as parts (``[part][register]``) from ``fetch(tile)``, the
        f32 values one tile holds: split here under ``raw``, else one tile a part."""
        if raw:
            return [list(p) for p in zip(*[M.parts(v, False) for v in fetch(names(nm)[0])])]
        return [[M.as_i32(v) for v in fetch(tile)] for tile in names(nm)]

    def ld(tile: str, at: list[str], n: int) -> list[str]:
        return t.load(K.view[tile], tl[tile].ty, at, n)

    cp = t.mul(c, t.i(2))  # the fragments' k = c and c + 4 sit at columns 2c, 2c + 1 (PAIRS)
    cp8 = t.mul(g, t.i(2))  # BWD_PAIRS: column g of a head n-tile pair (row g of dQ) at 2g

    def a_frag(nm: str, r0: str, k0: str, transposed: bool = False) -> list[list[str]]:
        """A fragment rows ``r0 + g (+8)`` (``transposed``, pairs: ``r0 + 2g (+1)``), ``k = c
        (+4)`` at ``k0 + 2c (+1)``; ``transposed``: the tile is indexed [k][row]."""
        rows = [t.add(r0, t.add(g, t.i(dr))) for dr in (0, 8)]
        ks = [t.add(k0, t.add(cp, t.i(e))) for e in (0, 1)]

        def fetch(tile: str) -> list[str]:
            if transposed and pairs:  # rows 2g, 2g + 1: one pair a k
                lo, hi = (ld(tile, [k, t.add(r0, cp8)], 2) for k in ks)
                return [lo[0], lo[1], hi[0], hi[1]]
            if transposed:
                return [ld(tile, [ks[e], rows[r]], 1)[0] for e in (0, 1) for r in (0, 1)]
            lo, hi = (ld(tile, [r, t.add(k0, cp)], 2) for r in rows)
            return [lo[0], hi[0], lo[1], hi[1]]

        return read(nm, fetch)

    held_b: dict[tuple[str, str, int], list[list[str]]] = {}  # BWD_PAIRS: n-tile 2m + 1's

    def b_frag(nm: str, n0: str, j: int, k0: str, kmajor: bool) -> list[list[str]]:
        """The B fragment of n-tile ``j`` (n = ``n0 + 8 j + g``; ``kmajor`` and pairs: n-tile
        ``2 m + u`` column g at ``n0 + 16 m + 2 g + u``, loaded with n-tile 2m, to be asked
        for next), ``k = c (+4)`` at ``k0 + 2c (+1)``; ``kmajor``: the tile is indexed
        [k][n], else [n][k]."""
        ks = [t.add(k0, t.add(cp, t.i(e))) for e in (0, 1)]
        if kmajor and pairs:
            if j % 2:
                return held_b.pop((nm, k0, j))
            nn = t.add(n0, t.add(t.i(8 * j), cp8))

            def pair(tile: str) -> list[str]:  # [n-tile 2m: k, k'; 2m + 1: k, k']
                lo, hi = (ld(tile, [k, nn], 2) for k in ks)
                return [lo[0], hi[0], lo[1], hi[1]]

            both = read(nm, pair)
            held_b[(nm, k0, j + 1)] = [p[2:] for p in both]
            return [p[:2] for p in both]
        nn = t.add(n0, t.add(t.i(8 * j), g))

        def fetch(tile: str) -> list[str]:
            if kmajor:
                return [ld(tile, [k, nn], 1)[0] for k in ks]
            return ld(tile, [nn, t.add(k0, cp)], 2)

        return read(nm, fetch)

    def product(acc: list[str], ksteps: int, a, b, ntiles: int) -> list[str]:
        """``acc`` (``ntiles`` C fragments) += the sum over ``ksteps`` steps of 8 of
        ``a(k0)`` times ``b(j, k0)``."""

        def step(kk: str, cur: list[str]) -> list[str]:
            k0 = t.mul(kk, t.i(8))
            af = a(k0)
            out = []
            for j in range(ntiles):
                out += M.mma(af, b(j, k0), cur[4 * j : 4 * j + 4])
            return out

        return t.loop(t.i(0), t.i(ksteps), t.i(1), acc, step)

    stage(K.fetch("%k", ksize, BN, key0, sp.s, kbase, kstride), BN, "K")
    stage(K.fetch("%v", ksize, BN, key0, sp.s, kbase, kstride), BN, "V")
    keys = [t.add(key0, t.add(w16, t.add(g, t.i(8 * r)))) for r in range(2)]
    c2 = sp.scale * fg.LOG2E
    qb0 = t.div(key0, t.i(BM)) if sp.causal else t.i(0)
    nacc = 4 * NH

    def head_at(j: int, e: int) -> str:
        """The head (within the warp's half) of C column ``2c + e`` of head n-tile ``j``."""
        if pairs:  # n-tile 2m + u, column n: head 16m + 2n + u
            return t.lin((c, 4), t.i(16 * (j // 2) + 2 * e + j % 2))
        return t.lin((c, 2), t.i(8 * j + e))

    def head(gi: str, gargs: list[str]) -> list[str]:
        n = t.lin((kh, sp.g), gi)
        qbase = t.lin((b, sp.t * qstride), (n, h))
        obase = t.lin((b, sp.t * ostride), (n, h)) if sp.packed else qbase
        rbase = t.lin((b, sp.n * sp.t), (n, sp.t))

        def fetch(row0: str, when: str | None = None) -> list[str]:
            pre = K.fetch("%q", qsize, BM, row0, sp.t, qbase, qstride, when)
            return pre + K.fetch("%dout", osize, BM, row0, sp.t, obase, ostride, when)

        def step(qb: str, args: list[str]) -> list[str]:
            dk, dv, pre = args[:nacc], args[nacc : 2 * nacc], args[2 * nacc :]
            row0 = t.mul(qb, t.i(BM))
            if not prefetch:
                pre = fetch(row0)
            t.barrier()
            stage(pre[: len(pre) // 2], BM, "Q")
            stage(pre[len(pre) // 2 :], BM, "dO")
            t.barrier()
            # the next query block's loads are in flight while this one is computed
            nxt = t.add(qb, t.i(1))
            if prefetch:
                pre = fetch(t.mul(nxt, t.i(BM)), t.cmp("ult", nxt, t.i(nqb)))
            s = product(K.zeros(4 * NQ), h // 8, lambda k0: a_frag("K", w16, k0),
                        lambda j, k0: b_frag("Q", q32, j, k0, False), NQ)  # fmt: skip
            dp = product(K.zeros(4 * NQ), h // 8, lambda k0: a_frag("V", w16, k0),
                         lambda j, k0: b_frag("dO", q32, j, k0, False), NQ)  # fmt: skip
            held: dict[tuple[int, int], list[tuple[str, str]]] = {}  # (j, r) -> [(p, ds)] by e
            for j in range(NQ):
                for e in range(2):
                    col = t.add(t.mul(c, t.i(2)), t.add(q32, t.i(8 * j + e)))
                    row = t.add(row0, col)
                    ok = t.cmp("ult", row, t.i(sp.t))
                    at = t.add(rbase, t.v(f"arith.minui {row}, {t.i(sp.t - 1)} : index"))
                    lv = t.load("%lse", gty(lsize), [at], 1)[0]
                    dvv = t.load("%dvec", gty(lsize), [at], 1)[0]
                    dead = t.fcmp("oeq", lv, t.f(float("-inf")))
                    outside = t.v(f"arith.xori {ok}, {t._const('true', 'i1')} : i1")
                    bad_row = t.v(f"arith.ori {dead}, {outside} : i1")
                    lse2 = t.select(bad_row, t.f(float("inf")), t.fop("mulf", lv, t.f(fg.LOG2E)))
                    dd = t.select(ok, dvv, t.f(0.0))
                    for r in range(2):
                        i = 4 * j + 2 * r + e
                        x = t.fop("subf", t.fop("mulf", s[i], t.f(c2)), lse2)
                        bad = t.cmp("uge", keys[r], t.i(sp.s))
                        if sp.causal:
                            bad = t.v(f"arith.ori {bad}, {t.cmp('ugt', keys[r], row)} : i1")
                        pr = t.select(bad, t.f(0.0), t.exp2(x))
                        ds = t.fop("mulf", t.fop("mulf", pr, t.fop("subf", dp[i], dd)),
                                   t.f(sp.scale))  # fmt: skip
                        at2 = [t.add(w16, t.add(g, t.i(8 * r))), col]
                        if pairs:  # stored below, the two columns as one 8-byte pair
                            held.setdefault((j, r), []).append((pr, ds))
                        else:
                            put("PT", [pr], at2)
                            put("dST", [ds], at2)
            for (j, r), pd in held.items():
                at2 = [t.add(w16, t.add(g, t.i(8 * r))), t.add(cp, t.add(q32, t.i(8 * j)))]
                put("PT", [x for x, _ in pd], at2)
                put("dST", [x for _, x in pd], at2)
            t.barrier()
            dv = product(dv, BM // 8, lambda k0: a_frag("PT", w16, k0),
                         lambda j, k0: b_frag("dO", h2, j, k0, True), NH)  # fmt: skip
            dk = product(dk, BM // 8, lambda k0: a_frag("dST", w16, k0),
                         lambda j, k0: b_frag("Q", h2, j, k0, True), NH)  # fmt: skip
            dq = product(K.zeros(nacc), BN // 8, lambda k0: a_frag("dST", w16, k0, True),
                         lambda j, k0: b_frag("K", h2, j, k0, True), NH)  # fmt: skip
            for r in range(2):
                # this thread's dQ rows: w16 + g (+8), or under pairs w16 + 2g (+1)
                qrow = t.add(row0, t.add(w16, t.add(cp8, t.i(r)) if pairs else
                                         t.add(g, t.i(8 * r))))  # fmt: skip

                def add(qrow=qrow, r=r) -> list[str]:
                    for j in range(NH):
                        for e in range(2):
                            at = t.lin(qbase, (qrow, qstride), h2, head_at(j, e))
                            t.atomic_add(dq[4 * j + 2 * r + e], "%dq", gty(qsize), [at])
                    return []

                t.if_(t.cmp("ult", qrow, t.i(sp.t)), add, lambda: [], [])
            return dk + dv + (pre if prefetch else [])

        pre0 = fetch(t.mul(qb0, t.i(BM))) if prefetch else []
        types = ["f32"] * len(gargs) + [K.piece] * len(pre0)
        res = t.loop(qb0, t.i(nqb), t.i(1), list(gargs) + pre0, step, types)
        return res[: len(gargs)]

    res = t.loop(t.i(0), t.i(sp.g), t.i(1), K.zeros(2 * nacc), head)
    dk, dv = res[:nacc], res[nacc:]
    for r in range(2):

        def store(r=r) -> list[str]:
            if pairs:  # n-tiles 2m, 2m + 1: heads 16m + 4c + (0, 1, 2, 3), one 16-byte store
                for m in range(NH // 2):
                    at = [t.lin(kbase, (keys[r], kstride), h2, (c, 4), t.i(16 * m))]
                    for acc, buf in ((dk, "%dk"), (dv, "%dv")):
                        i0, i1 = 8 * m + 2 * r, 8 * m + 4 + 2 * r
                        vals = [acc[i0], acc[i1], acc[i0 + 1], acc[i1 + 1]]
                        t.store(vals, buf, gty(ksize), at)
                return []
            for j in range(NH):
                at = [t.lin(kbase, (keys[r], kstride), h2, (c, 2), t.i(8 * j))]
                t.store(dk[4 * j + 2 * r : 4 * j + 2 * r + 2], "%dk", gty(ksize), at)
                t.store(dv[4 * j + 2 * r : 4 * j + 2 * r + 2], "%dv", gty(ksize), at)
            return []

        t.if_(t.cmp("ult", keys[r], t.i(sp.s)), store, lambda: [], [])
    params = [f"%q: {gty(qsize)}", f"%k: {gty(ksize)}", f"%v: {gty(ksize)}",
              f"%lse: {gty(lsize)}", f"%dout: {gty(osize)}", f"%dvec: {gty(lsize)}",
              f"%dq: {gty(qsize)}", f"%dk: {gty(ksize)}", f"%dv: {gty(ksize)}"]  # fmt: skip
    # two blocks an SM where their shared memory fits (3xTF32 under BWD_RAW, heads up to 64:
    # 125 registers at heads of 64 without the prefetch, no spills)
    two = 2 * (bwd_smem_bytes(h, mode) + 1024) <= SM_SHARED and mode == "3xtf32" and raw
    return t.func(f"{name}_bwd", params, fg.THREADS, MIN_BLOCKS.get(("bwd", mode), 2 * two))
