"""The MLIR CPU kernel of the fused attention's backward (``blu.lax.attention``): FlashAttention-2's
Algorithm 2 blocked over keys, with ``S`` and ``dP`` as vectors of queries (the algorithm, the
layouts and the problem ``Spec`` are in ``blu.lower.cpu.flash``'s doc, the vector helpers in its
``Emitter``)."""

from __future__ import annotations

import math

import numpy as np

from blu.core.aval import ShapedArray
from blu.lower.cpu.flash import Emitter, Spec, acc_dtype, inputs
from blu.lower.mlir.emit import memref_type


def emit_backward(sp: Spec, name: str) -> str:
    """The backward kernel ``name(q, k, v, [bias], [mask], out, lse, dout, [dlse], dq, dk, dv,
    [dbias], dd, [dq_acc], [dbias_acc], qt, dot)`` (the last are the workspace buffers)."""
    e = Emitter(sp)
    q, k, v, bias, mask = inputs(e, sp)
    acc_np = acc_dtype(sp)
    nq, nrow = sp.b * sp.t * sp.n, sp.b * sp.n * sp.t
    out = e.param("out", nq * sp.hv, e.dt)
    lse = e.param("lse", nrow, acc_np)
    dout = e.param("dout", nq * sp.hv, e.dt)
    dlse = e.param("dlse", nrow, acc_np) if sp.has_dlse else None
    dq = e.param("dq", nq * sp.h, e.dt)
    dk = e.param("dk", sp.b * sp.s * sp.kh * sp.h, e.dt)
    dv = e.param("dv", sp.b * sp.s * sp.kh * sp.hv, e.dt)
    nbias = math.prod(sp.bias) * sp.t * sp.s if sp.need_dbias else 0
    dbias = e.param("dbias", nbias, e.dt) if sp.need_dbias else None
    dd = e.param("dd", nrow, acc_np)
    dq_acc, db_acc = dq, dbias
    if sp.low:
        dq_acc = e.param("dqacc", nq * sp.h, np.float32)
        if sp.need_dbias:
            db_acc = e.param("dbacc", nbias, np.float32)
    qt = e.param("qt", sp.b * sp.n * sp.h * sp.t_pad, acc_np)
    dot = e.param("dot", sp.b * sp.n * sp.hv * sp.t_pad, acc_np)
    zero = e.c(0.0)
    tiles = ["%pt", "%dst"] + ["%bt"] * (bias is not None) + ["%mt"] * (mask is not None)
    tiles += ["%dbt"] * sp.need_dbias
    for t in tiles:
        e.avals[t] = ShapedArray((sp.backward_keys * sp.lanes,), acc_np)
    prologue = [f"{t} = memref.alloca() : {memref_type(e.avals[t])}" for t in tiles]

    def fill_zero(buf: str, size: int) -> None:
        x, _, _ = e.for_(e.i(0), e.i(size))
        e.store(zero, buf, x)
        e.end("")

    fill_zero(dq_acc, nq * sp.h)
    if db_acc is not None:
        fill_zero(db_acc, nbias)
    # D = rowsum(dO * O) - dL; q, dO transposed to (B, N, H, T_pad): a block's scores are then
    # vectors of queries, sum_h k[h] * qt[h, i0:i0+lanes], with no horizontal sums
    bi, _, _ = e.for_(e.i(0), e.i(sp.b))
    ii, _, _ = e.for_(e.i(0), e.i(sp.t))
    ni, _, _ = e.for_(e.i(0), e.i(sp.n))
    base = e.lin((bi, sp.b), (ii, sp.t), (ni, sp.n), (e.i(0), sp.hv))
    d = e.dot(e.row(dout, base, sp.hv), e.row(out, base, sp.hv), sp.hv)
    row = e.lin((bi, sp.b), (ni, sp.n), (ii, sp.t))
    if dlse is not None:
        d = e.f("subf", d, e.load(dlse, row))
    e.store(d, dd, row)
    e.end("")  # ni
    e.end("")  # ii
    ni, _, _ = e.for_(e.i(0), e.i(sp.n))
    for src, dst, hh in ((q, qt, sp.h), (dout, dot, sp.hv)):
        sbase = e.lin((bi, sp.b), (e.i(0), sp.t), (ni, sp.n), (e.i(0), hh))
        dbase = e.lin((bi, sp.b), (ni, sp.n), (e.i(0), hh), (e.i(0), sp.t_pad))
        e.transpose(src, sbase, sp.n * hh, dst, dbase, sp.t_pad, sp.t, hh)
        if sp.t_pad > sp.t:  # zeros after the queries: no NaN from stale workspace
            hi, _, _ = e.for_(e.i(0), e.i(hh))
            ii, _, _ = e.for_(e.i(sp.t), e.i(sp.t_pad))
            e.store(zero, dst, e.lin((bi, sp.b), (ni, sp.n), (hi, hh), (ii, sp.t_pad)))
            e.end("")
            e.end("")
    e.end("")  # ni
    e.end("")  # bi
    # per block of keys: their dk, dv in registers over the group's heads and the queries
    bi, _, _ = e.for_(e.i(0), e.i(sp.b))
    khi, _, _ = e.for_(e.i(0), e.i(sp.kh))
    io = (bi, khi, q, k, v, bias, mask, lse, dout, dk, dv, dq_acc, db_acc, dd, qt, dot)
    keys = sp.backward_keys
    main = sp.s - sp.s % keys
    if main:
        j0, _, _ = e.for_(e.i(0), e.i(main), step=e.i(keys))
        _backward_keys(e, keys, j0, io)
        e.end("")
    if main < sp.s:
        j0, _, _ = e.for_(e.i(main), e.i(sp.s))
        _backward_keys(e, 1, j0, io)
        e.end("")
    e.end("")
    e.end("")
    if sp.low:  # round the float32 accumulators once
        for src, dst, size in ((dq_acc, dq, nq * sp.h), (db_acc, dbias, nbias)):
            if src is None or src == dst:
                continue
            x, _, _ = e.for_(e.i(0), e.i(size))
            e.store(e.load(src, x), dst, x)
            e.end("")
    return e.function(name, prologue)


def _backward_keys(e: Emitter, nk: int, j0: str, io) -> None:
    """Keys ``j0 .. j0 + nk``: per head of the group and vector of queries (from ``j0`` when
    causal), ``S`` and ``dP = dO v`` as vectors over the queries, ``P = exp(S - L)``, ``dS = P
    (dP - D)`` into tiles; then per query ``dv += P dO``, ``dk += scale dS q``, ``dq += scale
    dS k`` with the keys' rows in registers."""
    sp, a, w = e.sp, e.a, e.sp.lanes
    bi, khi, q, k, v, bias, mask, lse, dout, dk, dv, dq_acc, db_acc, dd, qt, dot = io
    g, K = sp.n // sp.kh, range(nk)
    hch, vch = e.chunks(sp.h), e.chunks(sp.hv)
    nh, nvh = len(hch), len(vch)
    lt, mt = e.vt(w), f"vector<{w}xi1>"
    tt = memref_type(e.avals["%pt"])
    js = [e.b.iaddc(j0, r) for r in K]
    kbase = [e.lin((bi, sp.b), (j, sp.s), (khi, sp.kh), (e.i(0), sp.h)) for j in js]
    vbase = [e.lin((bi, sp.b), (j, sp.s), (khi, sp.kh), (e.i(0), sp.hv)) for j in js]
    krows = [e.row(k, x, sp.h) for x in kbase]
    zeros = [(e.vconst(0.0, n, a), e.vt(n)) for _, n in hch] * nk
    zeros += [(e.vconst(0.0, n, a), e.vt(n)) for _, n in vch] * nk
    gi, st_g, res_g = e.for_(e.i(0), e.i(g), zeros)
    ni = e.b.iadd(e.b.imul(khi, g), gi)
    lo = j0 if sp.is_causal else e.i(0)
    i0, st, res_i = e.for_(lo, e.i(sp.t), list(zip(st_g, [t for _, t in zeros])), step=e.i(w))
    # scores and dP, vectors over the queries i0 .. i0 + w
    qtb = e.lin((bi, sp.b), (ni, sp.n), (e.i(0), sp.h), (i0, sp.t_pad))
    hi, ss, rh = e.for_(e.i(0), e.i(sp.h), [(e.vconst(0.0, w, a), lt)] * nk)
    qv = e.vload(qt, e.b.iadd(qtb, e.b.imul(hi, sp.t_pad)), w)
    ss = [e.fma(e.splat(e.load(k, e.b.iadd(kbase[r], hi)), w), qv, ss[r], w) for r in K]
    ss = e.end(rh, [(x, lt) for x in ss])
    dtb = e.lin((bi, sp.b), (ni, sp.n), (e.i(0), sp.hv), (i0, sp.t_pad))
    hi, dps, rh = e.for_(e.i(0), e.i(sp.hv), [(e.vconst(0.0, w, a), lt)] * nk)
    dv_ = e.vload(dot, e.b.iadd(dtb, e.b.imul(hi, sp.t_pad)), w)
    dps = [e.fma(e.splat(e.load(v, e.b.iadd(vbase[r], hi)), w), dv_, dps[r], w) for r in K]
    dps = e.end(rh, [(x, lt) for x in dps])
    inside = e.lanes_below(i0, e.op(f"arith.index_cast {e.i(sp.t)} : index to i32"), w)
    rowb = e.lin((bi, sp.b), (ni, sp.n), (i0, sp.t))
    lv = e.vload(lse, rowb, w, inside)
    # a row with nothing to attend (L = -inf): P = 0, not NaN
    ninf_v, pinf_v = e.vconst(-math.inf, w, a), e.vconst(math.inf, w, a)
    lv = e.sel(e.op(f"arith.cmpf oeq, {lv}, {ninf_v} : {lt}"), pinf_v, lv, f"{mt}, {lt}")
    dvec = e.vload(dd, rowb, w, inside)
    left = e.op(f"arith.subi {e.i(sp.t)}, {i0} : index")
    nvalid = e.op(f"arith.minui {left}, {e.i(w)} : index")
    if bias is not None or mask is not None:  # their (T, S) entries of the tile, by rows
        rr, _, _ = e.for_(e.i(0), nvalid)
        ii = e.b.iadd(i0, rr)
        for r in K:
            at = e.b.iaddc(rr, r * w)
            if bias is not None:
                x = e.load(bias, e.bs_offset(sp.bias, bi, ni, ii, js[r]))
                e.b.stmt(f"memref.store {x}, %bt[{at}] : {tt}")
            if mask is not None:
                ok = e.load(mask, e.bs_offset(sp.mask, bi, ni, ii, js[r]))
                e.b.stmt(f"memref.store {e.sel(ok, e.c(1.0), e.c(0.0))}, %mt[{at}] : {tt}")
        e.end("")
    i32 = e.op(f"arith.index_cast {i0} : index to i32")
    qidx = e.op(f"arith.addi {e.op(f'vector.broadcast {i32} : i32 to vector<{w}xi32>')}, "
                f"{e.iota(w)} : vector<{w}xi32>")  # fmt: skip
    scale_v = e.vconst(sp.scale, w, a)
    for r in K:
        x = e.f("mulf", ss[r], scale_v, lt)
        ok = inside
        if sp.is_causal:
            j32 = e.op(f"arith.index_cast {js[r]} : index to i32")
            jv = e.op(f"vector.broadcast {j32} : i32 to vector<{w}xi32>")
            seen = e.op(f"arith.cmpi sge, {qidx}, {jv} : vector<{w}xi32>")
            ok = e.op(f"arith.andi {ok}, {seen} : {mt}")
        if bias is not None:
            x = e.f("addf", x, e.op(f"vector.load %bt[{e.i(r * w)}] : {tt}, {lt}"), lt)
        if mask is not None:
            mv = e.op(f"vector.load %mt[{e.i(r * w)}] : {tt}, {lt}")
            on = e.op(f"arith.cmpf one, {mv}, {e.vconst(0.0, w, a)} : {lt}")
            ok = e.op(f"arith.andi {ok}, {on} : {mt}")
        x = e.sel(ok, e.f("subf", x, lv, lt), ninf_v, f"{mt}, {lt}")
        p = e.vexp(x, w)
        ds = e.f("mulf", p, e.f("subf", dps[r], dvec, lt), lt)
        ds = e.sel(ok, ds, e.vconst(0.0, w, a), f"{mt}, {lt}")
        e.b.stmt(f"vector.store {p}, %pt[{e.i(r * w)}] : {tt}, {lt}")
        e.b.stmt(f"vector.store {e.f('mulf', ds, scale_v, lt)}, %dst[{e.i(r * w)}] : {tt}, {lt}")
        if db_acc is not None:  # the bias is added after the scale
            e.b.stmt(f"vector.store {ds}, %dbt[{e.i(r * w)}] : {tt}, {lt}")
    if db_acc is not None:
        rr, _, _ = e.for_(e.i(0), nvalid)
        ii = e.b.iadd(i0, rr)
        for r in K:
            off = e.bs_offset(sp.bias, bi, ni, ii, js[r])
            x = e.op(f"memref.load %dbt[{e.b.iaddc(rr, r * w)}] : {tt}")
            e.store(e.f("addf", e.load(db_acc, off), x), db_acc, off)
        e.end("")
    # per query: dv += P dO, dk += scale dS q, dq += scale dS k; for wide heads one loop per
    # group of columns, so that each loop's accumulators stay in registers
    tys = [t for _, t in zeros]
    per = max(1, 16 // nk)
    if nh + nvh <= per:
        groups = [(list(range(nh)), list(range(nvh)))]
    else:
        groups = [(list(range(nh))[c : c + per], []) for c in range(0, nh, per)]
        groups += [([], list(range(nvh))[c : c + per]) for c in range(0, nvh, per)]
    cur = list(st)
    for hcs, vcs in groups:
        idx = [r * nh + t for r in K for t in hcs] + [nk * nh + r * nvh + t for r in K for t in vcs]
        rr, st_q, res_q = e.for_(e.i(0), nvalid, [(cur[x], tys[x]) for x in idx])
        acc = dict(zip(idx, st_q))
        ii = e.b.iadd(i0, rr)
        qbase = e.lin((bi, sp.b), (ii, sp.t), (ni, sp.n), (e.i(0), sp.h))
        obase = e.lin((bi, sp.b), (ii, sp.t), (ni, sp.n), (e.i(0), sp.hv))
        qs = {t: e.vload(q, e.b.iaddc(qbase, hch[t][0]), hch[t][1]) for t in hcs}
        dqs = {t: e.vload(dq_acc, e.b.iaddc(qbase, hch[t][0]), hch[t][1]) for t in hcs}
        dos = {t: e.vload(dout, e.b.iaddc(obase, vch[t][0]), vch[t][1]) for t in vcs}
        for r in K:
            if vcs:
                p = e.op(f"memref.load %pt[{e.b.iaddc(rr, r * w)}] : {tt}")
                pv = {n: e.splat(p, n) for _, n in vch}
                for t in vcs:
                    x = nk * nh + r * nvh + t
                    acc[x] = e.fma(pv[vch[t][1]], dos[t], acc[x], vch[t][1])
            if hcs:
                ds = e.op(f"memref.load %dst[{e.b.iaddc(rr, r * w)}] : {tt}")
                dsv = {n: e.splat(ds, n) for _, n in hch}
                for t in hcs:
                    x, n = r * nh + t, hch[t][1]
                    acc[x] = e.fma(dsv[n], qs[t], acc[x], n)
                    dqs[t] = e.fma(dsv[n], krows[r][t], dqs[t], n)
        for t in hcs:
            e.vstore(dqs[t], dq_acc, e.b.iaddc(qbase, hch[t][0]), hch[t][1])
        out = e.end(res_q, [(acc[x], tys[x]) for x in idx])
        for x, y in zip(idx, out):
            cur[x] = y
    ys = cur
    ys = e.end(res_i, list(zip(ys, tys)))
    ys = e.end(res_g, list(zip(ys, tys)))
    for r in K:
        e.store_row(ys[r * nh : (r + 1) * nh], dk, kbase[r], sp.h)
        e.store_row(ys[nk * nh + r * nvh : nk * nh + (r + 1) * nvh], dv, vbase[r], sp.hv)
