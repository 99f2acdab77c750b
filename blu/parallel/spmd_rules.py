"""Partitioning rules: per primitive, the operands' layouts it wants and its outputs' layouts.

Each rule gets the equation (global avals), this device's operand blocks and their layouts; it
reshards the operands (``ctx.reshard``) to layouts it can compute from locally, binds the
primitive on the blocks (with shape parameters made local) and returns each output's block and
layout. A primitive without a rule runs on whole (gathered, summed) operands and gives
replicated outputs: always right, never faster than one device.

The choices follow GSPMD (Xu et al. 2021) and JAX's sharding propagation: an elementwise
operation takes the split of its first operand that splits each dimension; ``dot_general``
keeps its batch and free dimensions split and turns split contracting dimensions into a
partial sum; sums over split dimensions become partial sums, resolved (all-reduce or
reduce-scatter) only where a consumer needs whole values.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from blu import lax
from blu.core.interpreter import get_aval
from blu.core.jaxpr import Literal
from blu.lax import parallel as coll
from blu.parallel.spmd_layout import Layout, divides, drop_trivial, local_shape, split_size

Rule = Callable[..., list]
RULES: dict[str, Rule] = {}

# linear in their one operand: a partial sum goes through
_LINEAR_UNARY = {
    "neg",
    "convert_element_type",
    "copy",
    "stop_gradient",
    "reduce_precision",
    "real",
    "imag",
    "conj",
    "checkpoint_name",
    "optimization_barrier",
}
_ADDITIVE = {"add", "sub", "add_any"}


def rule(*names: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for n in names:
            RULES[n] = fn
        return fn

    return register


def _bind(eqn, vals: list, **params) -> list:
    out = eqn.primitive.bind(*vals, **{**eqn.params, **params})
    return list(out) if eqn.primitive.multiple_results else [out]


def replicate_all(ctx, eqn, vals: list, lays: list[Layout]) -> list:
    """The fallback: whole operands, the primitive as it is, replicated outputs."""
    vals = [ctx.reshard(v, lay, Layout.replicated(len(lay.dims))) for v, lay in zip(vals, lays)]
    return [
        (o, Layout.replicated(len(v.aval.shape))) for o, v in zip(_bind(eqn, vals), eqn.outvars)
    ]


def _unify(ctx, shapes: list, lays: list[Layout], ndim: int, taken: set | None = None) -> list:
    """Per dimension, the first operand's split of it whose axes are still free."""
    dims: list[tuple] = [()] * ndim
    used = set(taken or ())
    for shape, lay in zip(shapes, lays):
        if len(shape) != ndim:
            continue
        for d in range(ndim):
            axes = lay.dims[d]
            if not dims[d] and axes and not used & set(axes) and divides(ctx.mesh, shape[d], axes):
                dims[d] = axes
                used |= set(axes)
    return dims


def _is_literal(v: Any) -> bool:
    return isinstance(v, Literal)


@rule("__elementwise__")
def elementwise(ctx, eqn, vals, lays):
    shapes = [v.aval.shape for v in eqn.invars]
    out_shape = eqn.outvars[0].aval.shape
    ndim = len(out_shape)
    # operands that are broadcasts take any layout for free (``Ctx.reshard`` re-broadcasts):
    # the others' splits come first
    order = sorted(range(len(vals)), key=lambda i: ctx.is_broadcast(vals[i]))
    dims = _unify(ctx, [shapes[i] for i in order], [lays[i] for i in order], ndim)
    hint = ctx.hint(eqn.outvars[0])
    if hint is not None:  # a layout the program's outputs want (e.g. FSDP's sharded update)
        used = {a for d in dims for a in d}
        for d, axes in enumerate(hint):
            if (
                not dims[d]
                and axes
                and not used & set(axes)
                and divides(ctx.mesh, out_shape[d], axes)
            ):
                dims[d] = axes
                used |= set(axes)
    name = eqn.primitive.name
    partial_in = [set(lay.partial) for lay in lays]
    summed: set = set()  # which operands carry the (kept) partial sum
    keep: set = set().union(*partial_in) if partial_in else set()
    if not keep:
        pass
    elif name in _LINEAR_UNARY and len(vals) == 1:
        summed = {0}
    elif name in _ADDITIVE and all(partial_in):  # (e.g. gradients accumulated)
        summed = set(range(len(vals)))
    elif name in ("select", "select_n") and not partial_in[0] and all(partial_in[1:]):
        summed = set(range(1, len(vals)))
    elif name in ("mul", "div") and sum(map(bool, partial_in)) == 1:
        # a product of a sum by a replicated factor is the sum of the products; kept when
        # the sum has no other use (else each use would all-reduce its own product)
        i = next(i for i, p in enumerate(partial_in) if p)
        if ctx.uses.get(eqn.invars[i], 2) == 1 and (name == "mul" or i == 0):
            summed = {i}
    # otherwise the sum is resolved here, once per value (``ctx.reshard`` remembers): keeping
    # it through a product by a replicated value would make every consumer all-reduce its own
    # product (an optimizer's moments) instead of the gradient once
    if not summed:
        keep = set()
    used = {a for d in dims for a in d}
    keep -= used  # a split axis cannot also be summed over: reduce-scatter instead
    order = [a for a in ctx.mesh.axis_names if a in keep]
    new = []
    for i, (v, shape) in enumerate(zip(vals, shapes)):
        want = Layout(
            dims if len(shape) == ndim else ((),) * len(shape), order if i in summed else ()
        )
        new.append(ctx.reshard(v, lays[i], want))
    out = _bind(eqn, new)
    return [(o, Layout(dims, order)) for o in out]


@rule("broadcast_in_dim")
def broadcast_in_dim(ctx, eqn, vals, lays):
    (x,), (lay,) = vals, lays
    in_shape = eqn.invars[0].aval.shape
    shape, bd = eqn.params["shape"], eqn.params["broadcast_dimensions"]
    out = [()] * len(shape)
    want = list(lay.dims)
    for i, o in enumerate(bd):
        if in_shape[i] == shape[o]:
            out[o] = lay.dims[i]
        else:
            want[i] = ()
    x2 = ctx.reshard(x, lay, lay.with_dims(want))
    res = Layout(out, lay.partial)
    y = _bind(eqn, [x2], shape=local_shape(ctx.mesh, shape, res))[0]
    ctx.note_broadcast(y, x, lay, eqn)
    return [(y, res)]


def rebroadcast(ctx, eqn, x, lay: Layout, dst: Layout) -> Any:
    """The broadcast ``eqn`` of ``x`` (laid out as ``lay``) made directly in layout ``dst``."""
    in_shape = eqn.invars[0].aval.shape
    shape, bd = eqn.params["shape"], eqn.params["broadcast_dimensions"]
    want = [dst.dims[o] if in_shape[i] == shape[o] else () for i, o in enumerate(bd)]
    x = ctx.reshard(x, lay, Layout(want, dst.partial))
    return _bind(eqn, [x], shape=local_shape(ctx.mesh, shape, dst))[0]


@rule("reshape")
def reshape(ctx, eqn, vals, lays):
    (x,), (lay,) = vals, lays
    in_shape, new = eqn.invars[0].aval.shape, eqn.params["new_sizes"]
    out: list[tuple] = [()] * len(new)
    want = list(lay.dims)
    for i, axes in enumerate(lay.dims):
        if not axes:
            continue
        prefix, n = math.prod(in_shape[:i]), split_size(ctx.mesh, axes)
        for j in range(len(new)):  # the block stays contiguous: the same prefix, divisible
            if math.prod(new[:j]) == prefix and new[j] % n == 0 and not out[j]:
                out[j] = axes
                break
        else:
            want[i] = ()
    x = ctx.reshard(x, lay, lay.with_dims(want))
    res = Layout(out, lay.partial)
    return [(_bind(eqn, [x], new_sizes=local_shape(ctx.mesh, new, res))[0], res)]


@rule("transpose")
def transpose(ctx, eqn, vals, lays):
    (x,), (lay,) = vals, lays
    perm = eqn.params["permutation"]
    return [(_bind(eqn, [x])[0], Layout([lay.dims[p] for p in perm], lay.partial))]


@rule("squeeze")
def squeeze(ctx, eqn, vals, lays):
    (x,), (lay,) = vals, lays
    gone = set(eqn.params["dimensions"])
    x = ctx.reshard(x, lay, lay.with_dims([() if d in gone else a for d, a in enumerate(lay.dims)]))
    res = Layout([a for d, a in enumerate(lay.dims) if d not in gone], lay.partial)
    return [(_bind(eqn, [x])[0], res)]


def _reduced(lay: Layout, axes) -> tuple[list, list]:
    kept = [a for d, a in enumerate(lay.dims) if d not in axes]
    over = [a for d in axes for a in lay.dims[d]]
    return kept, over


@rule("reduce_sum")
def reduce_sum(ctx, eqn, vals, lays):
    (x,), (lay,) = vals, lays
    kept, over = _reduced(lay, eqn.params["axes"])
    partial = [a for a in ctx.mesh.axis_names if a in set(over) | set(lay.partial)]
    return [(_bind(eqn, [x])[0], Layout(kept, partial))]


@rule("reduce_max", "reduce_min")
def reduce_extremum(ctx, eqn, vals, lays):
    (x,), (lay,) = vals, lays
    x = ctx.reshard(x, lay, Layout(lay.dims))  # sums resolved
    kept, over = _reduced(lay, eqn.params["axes"])
    over = [a for a in over if ctx.mesh.shape[a] > 1]
    y = _bind(eqn, [x])[0]
    if over:
        ctx.log.append(f"all-reduce (max/min) {eqn.outvars[0].aval.str_short()} over {tuple(over)}")
        y = (coll.pmax if eqn.primitive.name == "reduce_max" else coll.pmin)(y, tuple(over))
    return [(y, Layout(kept))]


@rule(
    "argmax",
    "argmin",
    "reduce_prod",
    "reduce_and",
    "reduce_or",
    "cumsum",
    "cumprod",
    "cummax",
    "cummin",
    "cumlogsumexp",
    "cumulative_argextremum",
    "sort",
    "rev",
)
def along_axes(ctx, eqn, vals, lays):
    """Operations along some axes: those whole, the others stay split."""
    p = eqn.params
    axes = p.get("axes", p.get("dimensions", (p.get("axis", p.get("dimension")),)))
    axes = set(axes if isinstance(axes, tuple | list) else (axes,))
    ndim = len(eqn.invars[0].aval.shape)
    dims = _unify(ctx, [v.aval.shape for v in eqn.invars], lays, ndim)
    dims = [() if d in axes else a for d, a in enumerate(dims)]
    new = [ctx.reshard(v, lay, Layout(dims)) for v, lay in zip(vals, lays)]
    outs = []
    for o, ov in zip(_bind(eqn, new), eqn.outvars):
        if len(ov.aval.shape) == ndim:
            outs.append((o, Layout(dims)))
        else:  # the axes reduced away
            outs.append((o, Layout([a for d, a in enumerate(dims) if d not in axes])))
    return outs


@rule("slice")
def slice_(ctx, eqn, vals, lays):
    (x,), (lay,) = vals, lays
    shape = eqn.invars[0].aval.shape
    p = eqn.params
    full = [
        s == 0 and lim == n and st == 1
        for s, lim, st, n in zip(p["start_indices"], p["limit_indices"], p["strides"], shape)
    ]
    dims = [a if f else () for a, f in zip(lay.dims, full)]
    x = ctx.reshard(x, lay, lay.with_dims(dims))
    res = Layout(dims, lay.partial)
    limits = tuple(
        m if f else lim
        for m, f, lim in zip(local_shape(ctx.mesh, shape, res), full, p["limit_indices"])
    )
    return [(_bind(eqn, [x], limit_indices=limits)[0], res)]


@rule("pad")
def pad(ctx, eqn, vals, lays):
    (x, pv), (lay, play) = vals, lays
    cfg = eqn.params["padding_config"]
    dims = [a if c == (0, 0, 0) else () for a, c in zip(lay.dims, map(tuple, cfg))]
    zero = _is_literal(eqn.invars[1]) and eqn.invars[1].val == 0
    partial = lay.partial if zero else ()
    x = ctx.reshard(x, lay, Layout(dims, partial))
    pv = ctx.reshard(pv, play, Layout(()))
    return [(_bind(eqn, [x, pv])[0], Layout(dims, partial))]


@rule("concatenate")
def concatenate(ctx, eqn, vals, lays):
    d0 = eqn.params["dimension"]
    ndim = len(eqn.outvars[0].aval.shape)
    dims = _unify(ctx, [v.aval.shape for v in eqn.invars], lays, ndim)
    dims[d0] = ()
    partials = {tuple(lay.partial) for lay in lays}
    partial = partials.pop() if len(partials) == 1 else ()
    partial = tuple(a for a in partial if all(a not in d for d in dims))
    new = [ctx.reshard(v, lay, Layout(dims, partial)) for v, lay in zip(vals, lays)]
    return [(_bind(eqn, new)[0], Layout(dims, partial))]


@rule("dynamic_slice")
def dynamic_slice(ctx, eqn, vals, lays):
    x, *starts = vals
    shape, sizes = eqn.invars[0].aval.shape, eqn.params["slice_sizes"]
    dims = [a if m == n else () for a, m, n in zip(lays[0].dims, sizes, shape)]
    x = ctx.reshard(x, lays[0], lays[0].with_dims(dims))
    starts = [ctx.reshard(s, lay, Layout(())) for s, lay in zip(starts, lays[1:])]
    res = Layout(dims, lays[0].partial)
    return [(_bind(eqn, [x, *starts], slice_sizes=local_shape(ctx.mesh, sizes, res))[0], res)]


@rule("dynamic_update_slice")
def dynamic_update_slice(ctx, eqn, vals, lays):
    x, u, *starts = vals
    shape, ushape = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
    dims = _unify(ctx, [shape, ushape], lays[:2], len(shape))
    dims = [a if m == n else () for a, m, n in zip(dims, ushape, shape)]
    x = ctx.reshard(x, lays[0], Layout(dims))
    u = ctx.reshard(u, lays[1], Layout(dims))
    starts = [ctx.reshard(s, lay, Layout(())) for s, lay in zip(starts, lays[2:])]
    return [(_bind(eqn, [x, u, *starts])[0], Layout(dims))]


@rule("gather")
def gather(ctx, eqn, vals, lays):
    """``operand[indices]`` along ``axes``. The index batch dimensions and the operand's other
    dimensions keep their splits. An indexed axis that is split stays split when the whole
    operand is larger than the result (e.g. ``logp[arange(B), labels]`` on batch-split
    log-probabilities, or a vocabulary-split embedding): each device gathers the indices that
    fall in its block, zeros the rest, and the result is their sum (Megatron's vocabulary-
    parallel embedding); otherwise the indexed axes are gathered whole first."""
    (op, idx), (olay, ilay) = vals, lays
    axes = eqn.params["axes"]
    oshape, out_aval = eqn.invars[0].aval.shape, eqn.outvars[0].aval
    split = [k for k, d in enumerate(axes) if drop_trivial(olay, ctx.mesh).dims[d]]
    if split and math.prod(oshape) > 2 * out_aval.size:
        return _gather_in_blocks(ctx, eqn, op, idx, olay, ilay, split)
    idims = list(ilay.dims[:-1]) + [()]
    used = {a for d in idims for a in d}
    rest = [d for d in range(len(olay.dims)) if d not in axes]
    odims = [()] * len(olay.dims)
    for d in rest:
        if not used & set(olay.dims[d]):
            odims[d] = olay.dims[d]
            used |= set(olay.dims[d])
    op = ctx.reshard(op, olay, Layout(odims, olay.partial))
    idx = ctx.reshard(idx, ilay, Layout(idims))
    res = Layout(idims[:-1] + [odims[d] for d in rest], olay.partial)
    return [(_bind(eqn, [op, idx])[0], res)]


def _gather_in_blocks(ctx, eqn, op, idx, olay, ilay, split):
    axes, mode = eqn.params["axes"], eqn.params["mode"]
    oshape = eqn.invars[0].aval.shape
    mesh = ctx.mesh
    rest = [d for d in range(len(olay.dims)) if d not in axes]
    # the operand as it is, its sum resolved; the indices whole (every device looks up all)
    odims = [
        olay.dims[d] if (d in rest or axes.index(d) in split) else () for d in range(len(oshape))
    ]
    op = ctx.reshard(op, olay, Layout(odims))
    idx = ctx.reshard(idx, ilay, Layout.replicated(len(ilay.dims)))
    ia = get_aval(idx)
    cols, valid = [], None
    for k, d in enumerate(axes):
        col = lax.slice(idx, (0,) * (ia.ndim - 1) + (k,), ia.shape[:-1] + (k + 1,))
        if k in split:
            n, block = oshape[d], oshape[d] // split_size(mesh, odims[d])
            inside = lax.bitwise_and(lax.ge(col, _int(0, ia)), lax.lt(col, _int(n, ia)))
            if mode == "clip":  # (out-of-range coordinates are clamped first, as one device would)
                col = lax.clamp(_int(0, ia), col, _int(n - 1, ia))
                inside = lax.eq(col, col)
            start = lax.mul(coll.axis_index(odims[d]), lax.full((), block, ia.dtype))
            col = lax.sub(col, lax.broadcast_in_dim(start, get_aval(col).shape, ()))
            mine = lax.bitwise_and(lax.ge(col, _int(0, ia)), lax.lt(col, _int(block, ia)))
            mine = lax.bitwise_and(mine, inside)
            valid = mine if valid is None else lax.bitwise_and(valid, mine)
        cols.append(col)
    local_idx = lax.concatenate(cols, ia.ndim - 1)
    out = _bind(eqn, [op, local_idx], mode="clip" if mode == "clip" else mode)[0]
    oa = get_aval(out)
    nb = ia.ndim - 1
    valid = lax.reshape(valid, ia.shape[:-1])
    keep = lax.broadcast_in_dim(valid, oa.shape, tuple(range(nb)))
    out = lax.select(keep, out, lax.full(oa.shape, 0, oa.dtype))
    over = [a for k in split for a in odims[axes[k]]]
    partial = [a for a in mesh.axis_names if a in over]
    res = Layout([()] * nb + [odims[d] for d in rest], partial)
    return [(out, res)]


def _int(v: int, aval) -> Any:
    return lax.full(aval.shape[:-1] + (1,), v, aval.dtype)


@rule("scatter_add")
def scatter_add(ctx, eqn, vals, lays):
    """``operand.at[indices].add(updates)``: split index batch dimensions make each device's
    result one term of a sum (the operand counted once, on the first device)."""
    (op, idx, upd), (olay, ilay, ulay) = vals, lays
    axes = eqn.params["axes"]
    nb = len(eqn.invars[1].aval.shape) - 1
    rest = [d for d in range(len(olay.dims)) if d not in axes]
    bdims = [ilay.dims[d] or ulay.dims[d] for d in range(nb)]
    used: set = set()
    for i, a in enumerate(bdims):
        if used & set(a) or not divides(ctx.mesh, eqn.invars[1].aval.shape[i], a):
            bdims[i] = ()
        used |= set(bdims[i])
    odims = [()] * len(olay.dims)
    for k, d in enumerate(rest):
        a = olay.dims[d] or ulay.dims[nb + k]
        if a and not used & set(a):
            odims[d] = a
            used |= set(a)
    over = {a for b in bdims for a in b}
    partial = [a for a in ctx.mesh.axis_names if a in over | set(olay.partial) | set(ulay.partial)]
    op = ctx.reshard(op, olay, Layout(odims, partial))
    idx = ctx.reshard(idx, ilay, Layout(bdims + [()]))
    upd_partial = [a for a in partial if a not in over]
    upd = ctx.reshard(upd, ulay, Layout(bdims + [odims[d] for d in rest], upd_partial))
    return [(_bind(eqn, [op, idx, upd])[0], Layout(odims, partial))]


@rule("dot_general")
def dot_general(ctx, eqn, vals, lays):
    """Batch dimensions split alike; free dimensions keep their splits; contracting dimensions
    split alike (one side's split, the other side sliced to match) give a partial sum. Where
    two splits want one mesh axis, the first kept wins and the other operand is gathered (so
    a parameter split for FSDP is all-gathered against a batch-split activation)."""
    (lhs, rhs), (L, R) = vals, lays
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    ls, rs = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
    mesh = ctx.mesh
    keep_l = bool(L.partial)
    keep = list(L.partial if keep_l else R.partial)
    used = set(keep)

    def take(axes, size):
        if axes and not used & set(axes) and divides(mesh, size, axes):
            used.update(axes)
            return tuple(axes)
        return ()

    bd = [take(L.dims[i] or R.dims[j], ls[i]) for i, j in zip(lb, rb)]
    lfree = [d for d in range(len(ls)) if d not in lc and d not in lb]
    rfree = [d for d in range(len(rs)) if d not in rc and d not in rb]
    lf = [take(L.dims[d], ls[d]) for d in lfree]
    rf = [take(R.dims[d], rs[d]) for d in rfree]
    cd = []
    for i, j in zip(lc, rc):
        same = L.dims[i] if L.dims[i] == R.dims[j] else ()
        cd.append(take(same or L.dims[i] or R.dims[j], ls[i]))
    contract = [a for c in cd for a in c]
    ldims, rdims = [()] * len(ls), [()] * len(rs)
    for k, (i, j) in enumerate(zip(lb, rb)):
        ldims[i] = rdims[j] = bd[k]
    for k, (i, j) in enumerate(zip(lc, rc)):
        ldims[i] = rdims[j] = cd[k]
    for d, a in zip(lfree, lf):
        ldims[d] = a
    for d, a in zip(rfree, rf):
        rdims[d] = a
    lhs = ctx.reshard(lhs, L, Layout(ldims, keep if keep_l else ()))
    rhs = ctx.reshard(rhs, R, Layout(rdims, () if keep_l else keep))
    partial = [a for a in mesh.axis_names if a in set(keep) | set(contract)]
    return [(_bind(eqn, [lhs, rhs])[0], Layout(bd + lf + rf, partial))]


@rule("conv_general_dilated")
def conv_general_dilated(ctx, eqn, vals, lays):
    """The batch dimension split keeps the output's batch split; the kernel's output features
    split (without feature or batch groups) split the output's features; input features split
    on both operands give a partial sum. Spatial dimensions are whole."""
    (lhs, rhs), (L, R) = vals, lays
    p = eqn.params
    lspec, rspec, ospec = p["dimension_numbers"]
    ls, rs = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
    grouped = p["feature_group_count"] != 1 or p["batch_group_count"] != 1
    mesh, used = ctx.mesh, set()

    def take(axes, size):
        if axes and not used & set(axes) and divides(mesh, size, axes):
            used.update(axes)
            return tuple(axes)
        return ()

    batch = take(L.dims[lspec[0]], ls[lspec[0]]) if p["batch_group_count"] == 1 else ()
    out_f = () if grouped else take(R.dims[rspec[0]], rs[rspec[0]])
    same = L.dims[lspec[1]] if L.dims[lspec[1]] == R.dims[rspec[1]] else ()
    in_f = () if grouped else take(same, ls[lspec[1]])
    ldims, rdims = [()] * len(ls), [()] * len(rs)
    ldims[lspec[0]], ldims[lspec[1]] = batch, in_f
    rdims[rspec[0]], rdims[rspec[1]] = out_f, in_f
    lhs = ctx.reshard(lhs, L, Layout(ldims))
    rhs = ctx.reshard(rhs, R, Layout(rdims))
    odims = [()] * len(eqn.outvars[0].aval.shape)
    odims[ospec[0]], odims[ospec[1]] = batch, out_f
    return [(_bind(eqn, [lhs, rhs])[0], Layout(odims, in_f))]


@rule("reduce_window_sum", "reduce_window_max", "reduce_window_min", "window_gather",
      "window_scatter")  # fmt: skip
def reduce_window(ctx, eqn, vals, lays):
    """Dimensions the window does not span (size 1, stride 1, no padding or dilation) keep
    their splits; the others are whole. A sum's partial sum goes through (and the cotangent's,
    through the max's select-and-scatter, ``window_scatter``)."""
    p = eqn.params
    free = [
        w == 1 and s == 1 and tuple(pad) == (0, 0) and b == 1
        for w, s, pad, b in zip(
            p["window_dimensions"], p["window_strides"], p["padding"], p["base_dilation"]
        )
    ]
    dims = _unify(ctx, [v.aval.shape for v in eqn.invars], lays, len(free))
    dims = [a if f else () for a, f in zip(dims, free)]
    linear = eqn.primitive.name in ("reduce_window_sum", "window_scatter")
    partial = lays[0].partial if linear else ()
    new = [ctx.reshard(vals[0], lays[0], Layout(dims, partial))]
    new += [ctx.reshard(v, lay, Layout(dims)) for v, lay in zip(vals[1:], lays[1:])]
    res = Layout(dims, partial)
    extra = {}
    if "operand_shape" in p:
        extra["operand_shape"] = local_shape(ctx.mesh, p["operand_shape"], res)
    return [(_bind(eqn, new, **extra)[0], res)]
