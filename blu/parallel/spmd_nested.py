"""Partitioning rules that run a jaxpr inside: calls (inlined, or a custom_jvp kept as one call
staged per device), attention (batch and heads split) and loops (``scan``: its body staged per
device, the carries' layouts found by iterating to a fixed point).
"""

from __future__ import annotations

from blu.core.interpreter import get_aval
from blu.core.jaxpr import Jaxpr, Var
from blu.lax import attention as att
from blu.parallel.spmd_interp import PartitionContext, run_partitioned, stage
from blu.parallel.spmd_layout import Layout, divides, drop_trivial, local_shape
from blu.parallel.spmd_rules import replicate_all, rule
from blu.transforms.jaxpr_util import groups

# ---- calls are inlined -------------------------------------------------------------------------


@rule("jit")
def _inline_jit(ctx, eqn, vals, lays):
    return run_partitioned(ctx, eqn.params["jaxpr"], vals, lays)


def _localize(ctx: PartitionContext, jaxpr: Jaxpr, vals: list, lays: list) -> tuple | None:
    """``jaxpr`` staged per device at these blocks' shapes, or None if it needs communication
    (``stage``'s first three results)."""
    local, consts, out_lays, log = stage(ctx, jaxpr, [get_aval(v) for v in vals], lays)
    if log or any(lay.partial for lay in out_lays):
        return None
    return local, consts, out_lays


@rule("custom_jvp_call")
def _custom_jvp(ctx, eqn, vals, lays):
    """Kept a custom_jvp call (its rule, and a ``lowering_name`` the GPU plan fuses, e.g. GELU
    into a product's epilogue) with its function staged per device, when that needs no
    communication; otherwise inlined."""
    p = eqn.params
    nf, nj = p["num_fconsts"], p["num_jconsts"]
    vals = [ctx.reshard(v, lay, Layout(lay.dims)) for v, lay in zip(vals, lays)]  # sums resolved
    lays = [Layout(lay.dims) for lay in lays]
    (fv, jv, xv), (fl, jl, xl) = groups(vals, nf, nj), groups(lays, nf, nj)
    call = _localize(ctx, p["call_jaxpr"], fv + xv, fl + xl)
    jvp, rule_ok = p["jvp"], call is not None
    if rule_ok and isinstance(jvp, Jaxpr):  # a traced rule: staged per device as well
        lj = _localize(ctx, jvp, jv + xv + xv, jl + xl + xl)
        rule_ok = lj is not None and lj[2] == call[2] * 2
    if not rule_ok:
        return run_partitioned(ctx, p["call_jaxpr"], fv + xv, fl + xl)
    call_j, c_consts, out_lays = call
    j_consts: list = []
    if isinstance(jvp, Jaxpr):
        jvp, j_consts, _ = lj
    named = {k: p[k] for k in ("lowering_name",) if k in p}
    outs = eqn.primitive.bind(
        *c_consts, *fv, *j_consts, *jv, *xv, call_jaxpr=call_j, jvp=jvp,
        num_fconsts=len(c_consts) + nf, num_jconsts=len(j_consts) + nj, **named,
    )  # fmt: skip
    return list(zip(outs, out_lays))


@rule("custom_vjp_call")
def _inline_custom_vjp(ctx, eqn, vals, lays):
    p = eqn.params
    fc, _, _, xs = groups(list(zip(vals, lays)), *p["num_consts"])
    args = fc + xs
    return run_partitioned(ctx, p["call_jaxpr"], [a for a, _ in args], [b for _, b in args])


# ---- attention: batch and heads split ----------------------------------------------------------


@rule("dot_product_attention_fwd", "dot_product_attention_jvp", "dot_product_attention_bwd")
def _attention(ctx, eqn, vals, lays):
    """Every (B, ...) operand split alike on B; heads (queries' N and keys' KH, both divisible)
    split alike when there is no bias or mask."""
    roles = att._roles(eqn.primitive, eqn.params)
    shapes = [v.aval.shape for v in eqn.invars]
    b, n, kh = shapes[0][0], shapes[0][2], shapes[1][2]
    if any(len(o.aval.shape) not in (3, 4) or o.aval.shape[0] != b for o in eqn.outvars):
        return replicate_all(ctx, eqn, vals, lays)  # (a bias gradient summed over B)
    mesh = ctx.mesh
    bax = next(
        (
            lay.dims[0]
            for lay, r in zip(lays, roles)
            if r == "x" and lay.dims[0] and divides(mesh, b, lay.dims[0])
        ),
        (),
    )
    hax: tuple = ()
    if "b" not in roles:
        for lay, s in zip(lays, shapes):
            h = lay.dims[2] if len(s) == 4 else lay.dims[1]
            if h and not set(h) & set(bax) and divides(mesh, n, h) and divides(mesh, kh, h):
                hax = h
                break

    def layout(shape):
        if len(shape) == 4 and shape[0] == b:
            return Layout((bax, (), hax, ()))
        if len(shape) == 3:
            return Layout((bax, hax, ()))
        return Layout(((),) * len(shape))  # a (1, ...) bias or mask

    new = [ctx.reshard(x, lay, layout(s)) for x, lay, s in zip(vals, lays, shapes)]
    out = eqn.primitive.bind(*new, **eqn.params)
    return [(o, layout(v.aval.shape)) for o, v in zip(out, eqn.outvars)]


# ---- loops: the body staged per device ----------------------------------------------------------


@rule("scan")
def _scan(ctx, eqn, vals, lays):
    """The scanned axis (0) of each ``xs`` whole, its other dimensions as split as they come;
    consts as they come; the carries' layouts found by staging the body until the layouts it
    returns are the ones it was given (a gradient carried over the iterations becomes a partial
    sum on the first pass, and stays one). Collectives the body needs run in every iteration."""
    p = eqn.params
    nc, ncar = p["num_consts"], p["num_carry"]
    mesh = ctx.mesh
    (cv, carv, xv), (cl, carl, xl) = groups(vals, nc, ncar), groups(lays, nc, ncar)
    xl_whole = [Layout(((),) + lay.dims[1:], lay.partial) for lay in xl]
    xv = [ctx.reshard(v, a, b) for v, a, b in zip(xv, xl, xl_whole)]
    x_lays = [Layout(lay.dims[1:], lay.partial) for lay in xl_whole]
    x_avals = [get_aval(v).update(shape=get_aval(v).shape[1:]) for v in xv]
    c_avals = [get_aval(v) for v in cv]
    glob = [v.aval for v in eqn.invars[nc : nc + ncar]]
    carry_lays = list(carl)
    for _ in range(4):  # (two passes in practice: as given, then as the body returns them)
        avals = [
            a.update(shape=local_shape(mesh, a.shape, lay)) for a, lay in zip(glob, carry_lays)
        ]
        body, consts, out_lays, log = stage(ctx, p["jaxpr"], c_avals + avals + x_avals,
                                            cl + carry_lays + x_lays)  # fmt: skip
        if [drop_trivial(a, mesh) for a in out_lays[:ncar]] == [
            drop_trivial(a, mesh) for a in carry_lays
        ]:
            break
        carry_lays = out_lays[:ncar]
    else:
        return replicate_all(ctx, eqn, vals, lays)
    carv = [ctx.reshard(v, a, b) for v, a, b in zip(carv, carl, carry_lays)]
    ctx.log.extend(f"{line} (in a scan body: every iteration)" for line in log)
    outs = eqn.primitive.bind(
        *consts, *cv, *carv, *xv, jaxpr=body, num_consts=len(consts) + nc, num_carry=ncar,
        length=p["length"], reverse=p["reverse"], unroll=p["unroll"],
    )  # fmt: skip
    ys = [Layout(((),) + lay.dims, lay.partial) for lay in out_lays[ncar:]]
    return list(zip(outs, carry_lays + ys))


@rule("while")
def _while(ctx, eqn, vals, lays):
    """As ``scan``: the carries' layouts found by staging the body to a fixed point; the
    predicate made whole (every device decides alike)."""
    p = eqn.params
    ncc, nbc = p["cond_nconsts"], p["body_nconsts"]
    mesh = ctx.mesh
    (ccv, bcv, carv), (ccl, bcl, carl) = groups(vals, ncc, nbc), groups(lays, ncc, nbc)
    glob = [v.aval for v in eqn.invars[ncc + nbc :]]
    cc_avals, bc_avals = [get_aval(v) for v in ccv], [get_aval(v) for v in bcv]
    carry_lays = list(carl)
    for _ in range(4):
        avals = [
            a.update(shape=local_shape(mesh, a.shape, lay)) for a, lay in zip(glob, carry_lays)
        ]
        body, b_consts, out_lays, b_log = stage(ctx, p["body_jaxpr"], bc_avals + avals,
                                                bcl + carry_lays)  # fmt: skip
        if [drop_trivial(a, mesh) for a in out_lays] == [drop_trivial(a, mesh) for a in carry_lays]:
            break
        carry_lays = out_lays
    else:
        return replicate_all(ctx, eqn, vals, lays)
    cond, c_consts, c_lays, c_log = stage(ctx, p["cond_jaxpr"], cc_avals + avals, ccl + carry_lays,
                                          whole_outputs=True)  # fmt: skip
    carv = [ctx.reshard(v, a, b) for v, a, b in zip(carv, carl, carry_lays)]
    ctx.log.extend(f"{line} (in a while loop: every iteration)" for line in c_log + b_log)
    outs = eqn.primitive.bind(
        *c_consts, *ccv, *b_consts, *bcv, *carv, cond_jaxpr=cond, body_jaxpr=body,
        cond_nconsts=len(c_consts) + ncc, body_nconsts=len(b_consts) + nbc,
    )  # fmt: skip
    return list(zip(outs, carry_lays))


@rule("cond")
def _cond(ctx, eqn, vals, lays):
    """The index whole; the operands as they come (sums resolved); every branch staged per
    device and its outputs moved to the first branch's layouts, so the branches agree. Each
    branch's captured values become operands of all of them (unused by the others)."""
    index, ops = vals[0], vals[1:]
    index = ctx.reshard(index, lays[0], Layout(()))
    ops = [ctx.reshard(v, lay, Layout(lay.dims)) for v, lay in zip(ops, lays[1:])]
    op_lays = [Layout(lay.dims) for lay in lays[1:]]
    avals = [get_aval(v) for v in ops]
    branches = eqn.params["branches"]
    first = stage(ctx, branches[0], avals, op_lays)
    want = [Layout(lay.dims) for lay in first[2]]
    staged = [stage(ctx, br, avals, op_lays, out_lays_wanted=want) for br in branches]
    consts = [c for _, cs, _, _ in staged for c in cs]
    new_branches = []
    for k, (body, cs, _, log) in enumerate(staged):
        before = sum(len(s[1]) for s in staged[:k])
        after = sum(len(s[1]) for s in staged[k + 1 :])
        unused_before = [Var(get_aval(c)) for c in consts[:before]]
        unused_after = [Var(get_aval(c)) for c in consts[len(consts) - after :]]
        nb = len(cs)
        invars = unused_before + body.invars[:nb] + unused_after + body.invars[nb:]
        new_branches.append(Jaxpr([], invars, body.eqns, body.outvars))
        ctx.log.extend(f"{line} (in branch {k} of a cond)" for line in log)
    outs = eqn.primitive.bind(index, *consts, *ops, branches=tuple(new_branches))
    return list(zip(outs, want))
