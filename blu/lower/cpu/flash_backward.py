"""The MLIR CPU kernel of the fused attention's backward (``blu.lax.attention``; the forward,
the problem ``Spec`` and the vector helpers are in ``blu.lower.cpu.flash``)."""

from __future__ import annotations

import math

import numpy as np

from blu.core.aval import ShapedArray
from blu.lower.cpu.flash import Spec, _acc_np, _Emitter, _inputs
from blu.lower.mlir.emit import memref_type


def emit_backward(sp: Spec, name: str) -> str:
    """The backward kernel ``name(q, k, v, [bias], [mask], out, lse, dout, [dlse], dq, dk, dv,
    [dbias], dd, [dq_acc], [dbias_acc])`` (the last are the workspace buffers)."""
    e = _Emitter(sp)
    q, k, v, bias, mask = _inputs(e, sp)
    acc_np, a, g = _acc_np(sp), e.a, sp.n // sp.kh
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
    zero, pinf = e.c(0.0), e.c(math.inf)
    qb, sc = sp.key_block, "%sc"
    sct = memref_type(ShapedArray((qb,), acc_np))

    def fill_zero(buf: str, size: int) -> None:
        x, _, _ = e.for_(e.i(0), e.i(size))
        e.store(zero, buf, x)
        e.end("")

    fill_zero(dq_acc, nq * sp.h)
    if db_acc is not None:
        fill_zero(db_acc, nbias)
    # D = rowsum(dO * O) - dL
    bi, _, _ = e.for_(e.i(0), e.i(sp.b))
    ii, _, _ = e.for_(e.i(0), e.i(sp.t))
    ni, _, _ = e.for_(e.i(0), e.i(sp.n))
    base = e.lin((bi, sp.b), (ii, sp.t), (ni, sp.n), (e.i(0), sp.hv))
    d = e.dot(e.row(dout, base, sp.hv), e.row(out, base, sp.hv), sp.hv)
    row = e.lin((bi, sp.b), (ni, sp.n), (ii, sp.t))
    if dlse is not None:
        d = e.f("subf", d, e.load(dlse, row))
    e.store(d, dd, row)
    for _ in range(3):
        e.end("")
    # per key row j: dk_j, dv_j in registers over the group's heads and the queries seeing j
    hch, vch = e.chunks(sp.h), e.chunks(sp.hv)
    hz = [(e.vconst(0.0, n, a), e.vt(n)) for _, n in hch]
    vz = [(e.vconst(0.0, n, a), e.vt(n)) for _, n in vch]
    bi, _, _ = e.for_(e.i(0), e.i(sp.b))
    khi, _, _ = e.for_(e.i(0), e.i(sp.kh))
    ji, _, _ = e.for_(e.i(0), e.i(sp.s))
    kbase = e.lin((bi, sp.b), (ji, sp.s), (khi, sp.kh), (e.i(0), sp.h))
    vbase = e.lin((bi, sp.b), (ji, sp.s), (khi, sp.kh), (e.i(0), sp.hv))
    ks, vs = e.row(k, kbase, sp.h), e.row(v, vbase, sp.hv)
    gi, st_g, res_g = e.for_(e.i(0), e.i(g), hz + vz)
    ni = e.b.iadd(e.b.imul(khi, g), gi)
    # the queries seeing key j in blocks: their P = exp(S - L) first (a loop LLVM
    # vectorizes), then each query's updates
    carried = [(x, t) for x, (_, t) in zip(st_g, hz + vz)]
    ib, st, res_i = e.for_(ji if sp.is_causal else e.i(0), e.i(sp.t), carried, step=e.i(qb))
    inn = e.op(f"arith.minui {e.op(f'arith.subi {e.i(sp.t)}, {ib} : index')}, {e.i(qb)} : index")
    jj, _, _ = e.for_(e.i(0), inn)
    ii = e.b.iadd(ib, jj)
    qbase = e.lin((bi, sp.b), (ii, sp.t), (ni, sp.n), (e.i(0), sp.h))
    s, ok = e.score(e.row(q, qbase, sp.h), ks, None, mask, bi, ni, ii, ji)
    s = e.f("mulf", s, e.c(sp.scale))
    if bias is not None:
        s = e.f("addf", s, e.load(bias, e.bs_offset(sp.bias, bi, ni, ii, ji)))
    lv = e.load(lse, e.lin((bi, sp.b), (ni, sp.n), (ii, sp.t)))
    lv = e.sel(e.is_neg_inf(lv), pinf, lv)  # a row with nothing to attend: P = 0, not NaN
    x = e.f("subf", s, lv)
    if ok is not None:
        x = e.sel(ok, x, e.c(-math.inf))
    e.b.stmt(f"memref.store {x}, {sc}[{jj}] : {sct}")
    e.end("")
    jj, _, _ = e.for_(e.i(0), inn)
    x = e.op(f"memref.load {sc}[{jj}] : {sct}")
    e.b.stmt(f"memref.store {e.exp(x)}, {sc}[{jj}] : {sct}")
    e.end("")
    jj, st, res_q = e.for_(e.i(0), inn, [(x, t) for x, (_, t) in zip(st, hz + vz)])
    dks, dvs = st[: len(hch)], st[len(hch) :]
    ii = e.b.iadd(ib, jj)
    p = e.op(f"memref.load {sc}[{jj}] : {sct}")
    qbase = e.lin((bi, sp.b), (ii, sp.t), (ni, sp.n), (e.i(0), sp.h))
    obase = e.lin((bi, sp.b), (ii, sp.t), (ni, sp.n), (e.i(0), sp.hv))
    qs, dos = e.row(q, qbase, sp.h), e.row(dout, obase, sp.hv)
    row = e.lin((bi, sp.b), (ni, sp.n), (ii, sp.t))
    dvs = [e.fma(e.splat(p, n), y, x, n) for y, x, (_, n) in zip(dos, dvs, vch)]
    dp = e.dot(dos, vs, sp.hv)
    ds = e.f("mulf", p, e.f("subf", dp, e.load(dd, row)))
    if db_acc is not None:  # the bias is added after the scale
        off = e.bs_offset(sp.bias, bi, ni, ii, ji)
        e.store(e.f("addf", e.load(db_acc, off), ds), db_acc, off)
    dss = e.f("mulf", ds, e.c(sp.scale))
    for x, (o, n) in zip(ks, hch):
        off = e.b.iaddc(qbase, o)
        e.vstore(e.fma(e.splat(dss, n), x, e.vload(dq_acc, off, n), n), dq_acc, off, n)
    dks = [e.fma(e.splat(dss, n), x, y, n) for x, y, (_, n) in zip(qs, dks, hch)]
    ys = e.end(res_q, [(x, e.vt(n)) for x, (_, n) in zip(dks + dvs, hch + vch)])
    ys = e.end(res_i, [(x, e.vt(n)) for x, (_, n) in zip(ys, hch + vch)])
    ys = e.end(res_g, [(x, e.vt(n)) for x, (_, n) in zip(ys, hch + vch)])
    e.store_row(ys[: len(hch)], dk, kbase, sp.h)
    e.store_row(ys[len(hch) :], dv, vbase, sp.hv)
    for _ in range(3):
        e.end("")
    if sp.low:  # round the float32 accumulators once
        for src, dst, size in ((dq_acc, dq, nq * sp.h), (db_acc, dbias, nbias)):
            if src is None or src == dst:
                continue
            x, _, _ = e.for_(e.i(0), e.i(size))
            e.store(e.load(src, x), dst, x)
            e.end("")
    return e.function(name, [f"{sc} = memref.alloca() : {sct}"])
