"""The MLIR CPU kernel of the fused attention's forward (``blu.lax.attention``): FlashAttention-2's
Algorithm 1 in blocks of queries and keys, the scores as vectors of keys (the algorithm, the
layouts and the problem ``Spec`` are in ``blu.lower.cpu.flash``'s doc, the vector helpers in its
``Emitter``)."""

from __future__ import annotations

import math

from blu.core.aval import ShapedArray
from blu.lower.cpu.flash import Emitter, Spec, acc_dtype, inputs
from blu.lower.mlir.emit import memref_type


def emit_forward(sp: Spec, name: str) -> str:
    """The forward kernel ``name(q, k, v, [bias], [mask], out, lse, kt)`` (``kt``: workspace
    for the transposed keys; see the module doc)."""
    e = Emitter(sp)
    q, k, v, bias, mask = inputs(e, sp)
    out = e.param("out", sp.b * sp.t * sp.n * sp.hv, e.dt)
    lse = e.param("lse", sp.b * sp.n * sp.t, acc_dtype(sp))
    kt = e.param("kt", sp.b * sp.kh * sp.h * sp.s_pad, acc_dtype(sp))
    rows = sp.row_block
    e.avals["%sc"] = ShapedArray((rows * sp.key_block,), acc_dtype(sp))
    prologue = [f"%sc = memref.alloca() : {memref_type(e.avals['%sc'])}"]
    g, zero = sp.n // sp.kh, e.c(0.0)

    # keys transposed to (B, K, H, S_pad), zero-padded: a block's scores are then vectors of
    # keys, sum_h q[h] * kt[h, j0:j0+lanes], with no horizontal sums
    bi, _, _ = e.for_(e.i(0), e.i(sp.b))
    khi, _, _ = e.for_(e.i(0), e.i(sp.kh))
    dbase = e.lin((bi, sp.b), (khi, sp.kh), (e.i(0), sp.h), (e.i(0), sp.s_pad))
    sbase = e.lin((bi, sp.b), (e.i(0), sp.s), (khi, sp.kh), (e.i(0), sp.h))
    e.transpose(k, sbase, sp.kh * sp.h, kt, dbase, sp.s_pad, sp.s, sp.h)
    if sp.s_pad > sp.s:
        hi, _, _ = e.for_(e.i(0), e.i(sp.h))
        ji, _, _ = e.for_(e.i(sp.s), e.i(sp.s_pad))
        e.store(zero, kt, e.lin((bi, sp.b), (khi, sp.kh), (hi, sp.h), (ji, sp.s_pad)))
        e.end("")
        e.end("")
    for _ in range(2):
        e.end("")

    bi, _, _ = e.for_(e.i(0), e.i(sp.b))
    ni, _, _ = e.for_(e.i(0), e.i(sp.n))
    khi = e.b.op(f"arith.divui {ni}, {e.i(g)} : index") if g > 1 else ni
    io = (bi, ni, khi, q, v, bias, mask, out, lse, kt)
    main = sp.t - sp.t % rows
    if main:  # blocks of `rows` queries share each key vector
        ib, _, _ = e.for_(e.i(0), e.i(main), step=e.i(rows))
        _forward_rows(e, rows, ib, io)
        e.end("")
    if main < sp.t:
        ib, _, _ = e.for_(e.i(main), e.i(sp.t))
        _forward_rows(e, 1, ib, io)
        e.end("")
    for _ in range(2):
        e.end("")
    return e.function(name, prologue)


def _forward_rows(e: Emitter, rows: int, i0: str, io) -> None:
    """The forward of queries ``i0 .. i0 + rows``: per key block, their scores (``rows`` x the
    block's key vectors, causal blocks cut after the last row's limit) stored in ``%sc``, the
    running maxima, ``p = exp(s - m)`` in place over vectors, then ``acc = alpha acc +
    sum_j p_j v_j`` with each ``v`` row shared by the rows."""
    sp, a, lanes, bk = e.sp, e.a, e.sp.lanes, e.sp.key_block
    bi, ni, khi, q, v, bias, mask, out, lse, kt = io
    R = range(rows)
    ninf, zero = e.c(-math.inf), e.c(0.0)
    vch = e.chunks(sp.hv)
    vzeros = [e.vconst(0.0, n, a) for _, n in vch]
    vtys = [e.vt(n) for _, n in vch]
    lt, sct = e.vt(lanes), memref_type(e.avals["%sc"])
    ii = [e.b.iaddc(i0, r) for r in R]
    qbase = [e.lin((bi, sp.b), (x, sp.t), (ni, sp.n), (e.i(0), sp.h)) for x in ii]
    jends = [e.i(sp.s)] * rows
    if sp.is_causal:
        jends = [e.op(f"arith.minui {e.b.iaddc(x, 1)}, {e.i(sp.s)} : index") for x in ii]
    jend32 = [e.op(f"arith.index_cast {x} : index to i32") for x in jends]
    jlast = jends[-1]
    inits = [(ninf, a)] * rows + [(zero, a)] * rows + list(zip(vzeros, vtys)) * rows
    j0, st, res = e.for_(e.i(0), jlast, inits, step=e.i(bk))
    ms, ls, accs = st[:rows], st[rows : 2 * rows], st[2 * rows :]
    jn = e.op(f"arith.minui {e.op(f'arith.subi {jlast}, {j0} : index')}, {e.i(bk)} : index")
    nv = e.op(f"arith.divui {e.b.iaddc(jn, lanes - 1)}, {e.i(lanes)} : index")
    # pass 1: the scores, one key vector at a time for all the rows, and their maxima
    c, mxs, r1 = e.for_(e.i(0), nv, [(e.vconst(-math.inf, lanes, a), lt)] * rows)
    cj = e.b.imul(c, lanes)
    start = e.b.iadd(j0, cj)
    kb = e.lin((bi, sp.b), (khi, sp.kh), (e.i(0), sp.h), (start, sp.s_pad))
    hi, ss, rh = e.for_(e.i(0), e.i(sp.h), [(e.vconst(0.0, lanes, a), lt)] * rows)
    kv = e.vload(kt, e.b.iadd(kb, e.b.imul(hi, sp.s_pad)), lanes)
    ss = [e.fma(e.splat(e.load(q, e.b.iadd(qbase[r], hi)), lanes), kv, ss[r], lanes) for r in R]
    ss = e.end(rh, [(x, lt) for x in ss])
    new_mx = []
    for r in R:
        x = e.f("mulf", ss[r], e.vconst(sp.scale, lanes, a), lt)
        ok = e.lanes_below(start, jend32[r], lanes)
        if bias is not None:
            boff = e.bs_offset(sp.bias, bi, ni, ii[r], start)
            x = e.f("addf", x, e.vload(bias, boff, lanes, ok), lt)
        if mask is not None:
            mk = e.vload(mask, e.bs_offset(sp.mask, bi, ni, ii[r], start), lanes, ok)
            ok = e.op(f"arith.andi {ok}, {mk} : vector<{lanes}xi1>")
        x = e.sel(ok, x, e.vconst(-math.inf, lanes, a), f"vector<{lanes}xi1>, {lt}")
        e.b.stmt(f"vector.store {x}, %sc[{e.b.iaddc(cj, r * bk)}] : {sct}, {lt}")
        new_mx.append(e.f("maxnumf", mxs[r], x, lt))
    mxs = e.end(r1, [(x, lt) for x in new_mx])
    m_new, m_safe, alpha = [], [], []
    for r in R:
        mb = e.max_lanes(mxs[r], lanes)
        m_new.append(e.f("maxnumf", ms[r], mb))
        m_safe.append(e.sel(e.is_neg_inf(m_new[r]), zero, m_new[r]))
        alpha.append(e.exp(e.f("subf", ms[r], m_safe[r])))
    # pass 2: p = exp(s - m) in place, vectors of keys, and its sums
    msv = [e.splat(x, lanes) for x in m_safe]
    c, sums, r2 = e.for_(e.i(0), nv, [(e.vconst(0.0, lanes, a), lt)] * rows)
    cj = e.b.imul(c, lanes)
    new_sums = []
    for r in R:
        off = e.b.iaddc(cj, r * bk)
        x = e.op(f"vector.load %sc[{off}] : {sct}, {lt}")
        p = e.vexp(e.f("subf", x, msv[r], lt), lanes)
        e.b.stmt(f"vector.store {p}, %sc[{off}] : {sct}, {lt}")
        new_sums.append(e.f("addf", sums[r], p, lt))
    sums = e.end(r2, [(x, lt) for x in new_sums])
    # pass 3: acc = alpha acc + sum_j p_j v_j (p is 0 past a row's last key)
    nc = len(vch)
    scaled = [e.f("mulf", accs[r * nc + t], e.splat(alpha[r], n), e.vt(n))
              for r in R for t, (_, n) in enumerate(vch)]  # fmt: skip
    jj, st3, r3 = e.for_(e.i(0), jn, list(zip(scaled, vtys * rows)))
    vs = e.row(v, e.lin((bi, sp.b), (e.b.iadd(j0, jj), sp.s), (khi, sp.kh), (e.i(0), sp.hv)),
               sp.hv)  # fmt: skip
    new = []
    for r in R:
        p = e.op(f"memref.load %sc[{e.b.iaddc(jj, r * bk)}] : {sct}")
        ps = {n: e.splat(p, n) for _, n in vch}
        new += [e.fma(ps[n], y, st3[r * nc + t], n) for t, (y, (_, n)) in enumerate(zip(vs, vch))]
    accs2 = e.end(r3, list(zip(new, vtys * rows)))
    l2 = [e.f("addf", e.f("mulf", alpha[r], ls[r]), e.reduce(sums[r], lanes)) for r in R]
    fin = e.end(res, [(x, a) for x in m_new + l2] + list(zip(accs2, vtys * rows)))
    ms, ls, accs = fin[:rows], fin[rows : 2 * rows], fin[2 * rows :]
    for r in R:
        has = e.op(f"arith.cmpf ogt, {ls[r]}, {zero} : {a}")
        l1 = e.sel(has, ls[r], e.c(1.0))
        inv = e.f("divf", e.c(1.0), l1)
        outs = [e.sel(has, e.f("mulf", x, e.splat(inv, n), e.vt(n)), z, e.vt(n))
                for x, z, (_, n) in zip(accs[r * nc : (r + 1) * nc], vzeros, vch)]  # fmt: skip
        obase = e.lin((bi, sp.b), (ii[r], sp.t), (ni, sp.n), (e.i(0), sp.hv))
        e.store_row(outs, out, obase, sp.hv)
        lg = e.op(f"math.log {l1} : {a}")
        e.store(e.sel(has, e.f("addf", ms[r], lg), ninf), lse,
                e.lin((bi, sp.b), (ni, sp.n), (ii[r], sp.t)))  # fmt: skip
