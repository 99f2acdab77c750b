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

from blu.lower.cuda import flash_tc
from blu.lower.cuda.flash_kernel import (  # noqa: F401  (re-exported)
    ETYPES,
    HEAD_SIZES,
    LN2,
    LOG2E,
    OVERRIDE,
    PAD,
    THREADS,
    TILING,
    FlashSpec,
    Kernel,
    Tile,
    Tiling,
    bwd_tiles,
    cdiv,
    fwd_tiles,
    gty,
    layout,
    tiling,
)
from blu.lower.cuda.flash_text import module


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
        return [FlashLaunch(f"{sym}_fwd", (cdiv(sp.t, flash_tc.BM), sp.b * sp.n), THREADS,
                            flash_tc.smem_bytes(sp.h, sp.mma))]  # fmt: skip
    if not backward:
        return [FlashLaunch(f"{sym}_fwd", (cdiv(sp.t, c.fwd_bm), sp.b * sp.n), THREADS,
                            fwd_tiles(sp.h)[1])]  # fmt: skip
    rows = sp.b * sp.t * sp.n
    post = []
    if sp.dtype != "float32":  # dQ accumulated in float32, then rounded into the output
        post = [FlashLaunch(f"{sym}_post", (cdiv(rows * sp.h // 4, THREADS), 1), THREADS, 0)]
    pre = FlashLaunch(f"{sym}_pre", (cdiv(rows, THREADS // c.bwd_tx), 1), THREADS, 0)
    if sp.mma:
        return [pre, FlashLaunch(f"{sym}_bwd", (cdiv(sp.s, flash_tc.BWD_BN), sp.b * sp.kh),
                                 THREADS, flash_tc.bwd_smem_bytes(sp.h, sp.mma))]  # fmt: skip
    return [pre, FlashLaunch(f"{sym}_bwd", (cdiv(sp.s, c.bwd_bn), sp.b * sp.kh), THREADS,
                             bwd_tiles(sp.h)[1])] + post  # fmt: skip


def _forward(sp: FlashSpec, name: str) -> str:
    tiles, _ = fwd_tiles(sp.h)
    c = tiling(sp.h)
    TX = c.fwd_tx
    K = Kernel(sp, tiles, TX, c.unroll)
    t, h = K.t, sp.h
    BM, BN = c.fwd_bm, c.fwd_bn
    RM, CN = BM // (THREADS // TX), BN // TX
    nqb = cdiv(sp.t, BM)
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
        nkb = t.i(cdiv(sp.s, BN))
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
                t.store(vals[c : c + w], "%out", gty(osize, K.ety), at, K.ety)
                c += w
            t.if_(first, lambda: t.store([lse], "%lse", gty(lsize), [t.add(lbase, row)]) or [],
                  lambda: [], [])  # fmt: skip
            return []

        t.if_(t.cmp("ult", row, t.i(sp.t)), store, lambda: [], [])
    e = K.ety
    params = [f"%q: {gty(qsize, e)}", f"%k: {gty(ksize, e)}", f"%v: {gty(ksize, e)}",
              f"%out: {gty(osize, e)}", f"%lse: {gty(lsize)}"]  # fmt: skip
    return t.func(f"{name}_fwd", params, THREADS, c.fwd_min_blocks)


def _pre(sp: FlashSpec, name: str) -> str:
    """``D = rowsum(dO * O)`` per query row (``TX`` lanes a row), and ``dQ`` zeroed."""
    c = tiling(sp.h)
    TX = c.bwd_tx
    K = Kernel(sp, {}, TX, c.unroll)
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
            do = t.load("%dout", gty(size, K.ety), at, w, K.ety)
            o = t.load("%o", gty(size, K.ety), at, w, K.ety)
            for x, y in zip(do, o):
                acc = t.v(f"math.fma {x}, {y}, {acc} : f32")
            t.store(K.zeros(w), "%dq", gty(qsize), [t.add(qrow, b0)] if sp.packed else at)
        return [acc]

    (part,) = t.if_(ok, inside, lambda: [t.f(0.0)], ["f32"])
    tot = t.lane_reduce(part, "addf", TX)
    del lane
    bb = t.div(r, t.i(sp.t * sp.n))
    tt = t.rem(t.div(r, t.i(sp.n)), t.i(sp.t))
    nn = t.rem(r, t.i(sp.n))
    at = t.lin((bb, sp.n * sp.t), (nn, sp.t), tt)
    cond = t.v(f"arith.andi {ok}, {t.cmp('eq', K.tx, t.i(0))} : i1")
    t.if_(cond, lambda: t.store([tot], "%dvec", gty(dsize), [at]) or [], lambda: [], [])
    params = [f"%o: {gty(size, K.ety)}", f"%dout: {gty(size, K.ety)}", f"%dq: {gty(qsize)}",
              f"%dvec: {gty(dsize)}"]  # fmt: skip
    return t.func(f"{name}_pre", params)


def _backward(sp: FlashSpec, name: str) -> str:
    tiles, _ = bwd_tiles(sp.h)
    c = tiling(sp.h)
    TX = c.bwd_tx
    K = Kernel(sp, tiles, TX, c.unroll)
    t, h = K.t, sp.h
    BN, BM = c.bwd_bn, c.bwd_bm
    RJ, CI = BN // (THREADS // TX), BM // TX  # keys per thread (ty), queries per thread (tx)
    nqb = cdiv(sp.t, BM)
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
                lv = t.load("%lse", gty(lsize), [at], 1)[0]
                dv_ = t.load("%dvec", gty(lsize), [at], 1)[0]
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
                            t.atomic_add(dq[r * oc + c + u], "%dq", gty(qsize), [at])
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
                t.store(dk[j * oc + c : j * oc + c + w], "%dk", gty(ksize, K.ety), at, K.ety)
                t.store(dv[j * oc + c : j * oc + c + w], "%dv", gty(ksize, K.ety), at, K.ety)
                c += w
            return []

        t.if_(t.cmp("ult", keys[j], t.i(sp.s)), store, lambda: [], [])
    e = K.ety
    params = [f"%q: {gty(qsize, e)}", f"%k: {gty(ksize, e)}", f"%v: {gty(ksize, e)}",
              f"%lse: {gty(lsize)}", f"%dout: {gty(osize, e)}", f"%dvec: {gty(lsize)}",
              f"%dq: {gty(qsize)}", f"%dk: {gty(ksize, e)}",
              f"%dv: {gty(ksize, e)}"]  # fmt: skip
    return t.func(f"{name}_bwd", params, THREADS, c.bwd_min_blocks)


def _post(sp: FlashSpec, name: str) -> str:
    """``dQ``, accumulated in float32, rounded into the half-precision output."""
    K = Kernel(sp, {}, 16, 1)
    t = K.t
    n4 = sp.b * sp.t * sp.n * sp.h // 4
    i = t.lin((K.bx, THREADS), K.tid)

    def body() -> list[str]:
        at = [t.mul(i, t.i(4))]
        vals = t.load("%dq32", gty(4 * n4), at, 4)
        t.store(vals, "%dq", gty(4 * n4, K.ety), at, K.ety)
        return []

    t.if_(t.cmp("ult", i, t.i(n4)), body, lambda: [], [])
    params = [f"%dq32: {gty(4 * n4)}", f"%dq: {gty(4 * n4, K.ety)}"]
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
