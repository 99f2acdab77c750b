"""``cond`` and ``switch``: one primitive, ``cond_p``, that runs one of several branch jaxprs.

``cond_p`` takes an int32 scalar index and the operands; each branch is a jaxpr over the same
operands with the same outputs. Consts a branch closed over are joined into one operand list
(each branch ignores the others'). Under ``vmap`` with a batched index every branch runs and a
``select`` picks each lane's result (as in JAX).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from blu.core import dtypes, pytree
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer, get_aval, set_interpreter
from blu.core.jaxpr import eval_jaxpr
from blu.core.primitive import Primitive
from blu.core.staging import StagingInterpreter
from blu.lax.casts import convert_element_type
from blu.lax.collective_prims import pvary_p
from blu.lax.control_flow.divergent import check_branches, lockstep, talks
from blu.lax.elementwise import eq, gt, lt, ne, select
from blu.lax.shapes import broadcast_in_dim, full, full_like
from blu.transforms import vma
from blu.transforms.ad import backward_pass
from blu.transforms.ad_util import UndefinedPrimal, Zero, instantiate, is_undefined
from blu.transforms.jaxpr_util import (
    batch_jaxpr,
    check_same_types,
    flatten_avals,
    join_consts,
    jvp_jaxpr,
    mask,
    merge,
    nonzero,
    partial_eval_jaxpr,
    run_jaxpr,
    to_front,
    trace_jaxpr,
    unbatched,
)

__all__ = ["cond", "switch"]

cond_p = Primitive("cond", multiple_results=True)


@cond_p.def_abstract_eval
def _cond_abstract_eval(index: ShapedArray, *ops: ShapedArray, branches):
    if index.shape != () or not dtypes.is_int(index.dtype):
        raise BluTypeError(
            with_user_line(f"cond: the index must be an integer scalar, got {index.str_short()}")
        )
    for b, br in enumerate(branches):
        for i, (a, v) in enumerate(zip(ops, br.invars, strict=True)):
            if a.shape != v.aval.shape or a.dtype != v.aval.dtype:
                raise BluTypeError(
                    with_user_line(
                        f"cond: operand {i} is {a.str_short()} but branch {b} expects "
                        f"{v.aval.str_short()}"
                    )
                )
    outs = branches[0].out_avals
    weak = [all(br.out_avals[i].weak_type for br in branches) for i in range(len(outs))]
    return [a.update(weak_type=w) for a, w in zip(outs, weak)]


@cond_p.def_impl
def _cond_impl(index, *ops, branches):
    i = min(max(int(index), 0), len(branches) - 1)  # out-of-range indices clamp, as in XLA
    return run_jaxpr(branches[i], ops)


# ---- jvp ---------------------------------------------------------------------------------------


@cond_p.def_jvp
def _cond_jvp(primals, tangents, *, branches):
    index, ops = primals[0], primals[1:]
    nz = nonzero(tangents[1:])
    n_out = len(branches[0].outvars)
    out_nz = [False] * n_out
    for br in branches:
        _, _, o = jvp_jaxpr(br, nz, [False] * n_out)
        out_nz = [a or b for a, b in zip(out_nz, o)]
    parts = []
    for br in branches:
        j, consts, o = jvp_jaxpr(br, nz, out_nz)
        parts.append((j, consts))
        out_nz_final = o  # every branch instantiates the union, so all agree
    new_branches, consts = join_consts(parts)
    t_in = mask(tangents[1:], nz)
    outs = cond_p.bind(index, *consts, *ops, *t_in, branches=tuple(new_branches))
    primal_out, t_iter = outs[:n_out], iter(outs[n_out:])
    t_out = [
        next(t_iter) if z else Zero(a.strip_weak_type())
        for z, a in zip(out_nz_final, branches[0].out_avals)
    ]
    return primal_out, t_out


# ---- partial evaluation (for linearize / grad) -------------------------------------------------


@cond_p.def_partial_eval
def _cond_partial_eval(pe, args, params):
    branches = params["branches"]
    index, ops = args[0], args[1:]
    if pe.is_unknown(index):
        return StagingInterpreter.process(pe, cond_p, args, params)
    uk = [pe.is_unknown(a) for a in ops]
    n_out = len(branches[0].outvars)
    out_uk = [False] * n_out
    for br in branches:
        *_, o, _ = partial_eval_jaxpr(br, uk, [False] * n_out, pe.parent)
        out_uk = [a or b for a, b in zip(out_uk, o)]
    splits = [partial_eval_jaxpr(br, uk, out_uk, pe.parent) for br in branches]
    # residuals differ per branch: every known branch outputs all of them (zeros for others')
    res_avals = [k.out_avals[len(k.outvars) - nr :] for k, _, _, _, nr in splits]
    n_known_out = n_out - sum(out_uk)
    known_parts = []
    for b, (known, kconsts, *_) in enumerate(splits):
        known_parts.append(_pad_residuals(known, kconsts, n_known_out, res_avals, b))
    known_branches, kconsts = join_consts(known_parts)
    known_ops = [a for a, u in zip(ops, uk) if not u]
    with set_interpreter(pe.parent):
        k_outs = cond_p.bind(index, *kconsts, *known_ops, branches=tuple(known_branches))
    known_outs, residuals = k_outs[:n_known_out], k_outs[n_known_out:]
    res_groups, start = [], 0
    for avals in res_avals:
        res_groups.append(residuals[start : start + len(avals)])
        start += len(avals)
    unknown_branches, res_all = join_consts([(s[2], g) for s, g in zip(splits, res_groups)])
    unknown_args = [index, *res_all, *[a for a, u in zip(ops, uk) if u]]
    atoms = [pe.to_atom(a) for a in unknown_args]
    p = dict(branches=tuple(unknown_branches))
    out_avals = _cond_abstract_eval(*[a.aval for a in atoms], **p)
    u_outs = StagingInterpreter.stage(pe, cond_p, atoms, p, out_avals)
    return merge(out_uk, u_outs, known_outs)


def _pad_residuals(known, kconsts, n_known_out, res_avals, b):
    """Known branch ``b`` returning (known outs, residuals of every branch, zeros but its own)."""

    def fun(*args):
        outs = eval_jaxpr(known, [], *args)
        res = outs[n_known_out:]
        padded = []
        for j, avals in enumerate(res_avals):
            padded += res if j == b else [full(a.shape, 0, a.dtype) for a in avals]
        return outs[:n_known_out] + padded

    j, consts = trace_jaxpr(fun, [v.aval for v in known.invars])
    return j, consts + kconsts  # its invars: its own consts, known's consts, the known operands


# ---- transpose ---------------------------------------------------------------------------------


@cond_p.def_transpose
def _cond_transpose(cts, index, *ops, branches):
    if is_undefined(index):
        raise BluTypeError("cond: the branch index is not linear")
    lin = [is_undefined(o) for o in ops]
    ct_nz = [not isinstance(c, Zero) for c in cts]
    res = [o for o, l in zip(ops, lin) if not l]
    res_avals = [get_aval(r) for r in res]
    ct_avals = [a.strip_weak_type() for a, nz in zip(branches[0].out_avals, ct_nz) if nz]
    lin_avals = [o.aval for o in ops if is_undefined(o)]
    lin_vmas = [o.vma for o in ops if is_undefined(o)]
    outs_vma = _branch_out_vmas(index, branches, lin, lin_vmas, res)
    parts = []
    for b, br in enumerate(branches):

        def fun(*args, br=br, b=b):
            r, c = args[: len(res)], iter(args[len(res) :])
            bw_args = merge(lin, [UndefinedPrimal(a, m) for a, m in zip(lin_avals, lin_vmas)], r)
            bw_cts = [next(c) if nz else Zero(a) for nz, a in zip(ct_nz, br.out_avals)]
            if outs_vma is not None:  # the implicit pvary of a branch's less varying output
                mine, joined = outs_vma[b], outs_vma[-1]
                bw_cts = [
                    ct if isinstance(ct, Zero) else vma.fix_cotangent(ct, m, j)
                    for ct, m, j in zip(bw_cts, mine, joined)
                ]
            out = backward_pass(br, [], bw_args, bw_cts)
            return [instantiate(o) for o, l in zip(out, lin) if l]

        outer = res + [c for c in cts if not isinstance(c, Zero)]  # (vmas inside blu.shard)
        parts.append(trace_jaxpr(vma.seeded(fun, outer), res_avals + ct_avals))
    new_branches, consts = join_consts(parts)
    ct_in = [c for c in cts if not isinstance(c, Zero)]
    outs = cond_p.bind(index, *consts, *res, *ct_in, branches=tuple(new_branches))
    return [None] + merge(lin, outs, [None] * len(ops))


def _branch_out_vmas(index, branches, lin, lin_vmas, res) -> list | None:
    """Inside ``blu.shard``: each branch's outputs' varying manual axes, then the cond's (their
    union and the index's: each device takes its own branch); None elsewhere or if unknown.
    JAX's branches pvary an output to the cond's type; its transpose psums the cotangent."""
    if not vma.manual_axes():
        return None
    res_vmas = [vma.vma_of(r) for r in res]
    idx = vma.vma_of(index)
    if idx is None or any(v is None for v in [*lin_vmas, *res_vmas]):
        return None
    in_vmas = merge(lin, lin_vmas, res_vmas)
    outs = [vma.jaxpr_vmas(br, in_vmas) for br in branches]
    return outs + [[idx.union(*col) for col in zip(*outs)]]


# ---- batching ----------------------------------------------------------------------------------


@cond_p.def_batch_named  # named: collectives in the branches see the vmap/shard axis name
def _cond_batch(axis_size, axis_name, args, dims, *, branches):
    if unbatched(axis_name, dims, branches):
        outs = cond_p.bind(*args, branches=branches)
        return outs, [None] * len(outs)
    index, ops = args[0], args[1:]
    idx_dim, op_dims = dims[0], dims[1:]
    n_out = len(branches[0].outvars)
    if idx_dim is None:
        out_b = [False] * n_out
        for br in branches:
            _, _, o = batch_jaxpr(br, axis_size, op_dims, False, axis_name)
            out_b = [a or (d is not None) for a, d in zip(out_b, o)]
        parts = []
        for br in branches:
            j, consts, _ = batch_jaxpr(br, axis_size, op_dims, out_b, axis_name)
            parts.append((j, consts))
        new_branches, consts = join_consts(parts)
        outs = cond_p.bind(index, *consts, *ops, branches=tuple(new_branches))
        return outs, [0 if b else None for b in out_b]
    # a batched index: run every branch on the whole batch and select per lane
    index = to_front(index, idx_dim)
    n = len(branches)
    index = select(lt(index, 0), full_like(index, 0), index)
    results = []
    for br in branches:
        j, consts, _ = batch_jaxpr(br, axis_size, op_dims, True, axis_name)
        results.append(eval_jaxpr(j, [], *consts, *ops))
    outs = results[n - 1]
    for b in range(n - 2, -1, -1):
        pick = eq(index, full_like(index, b))
        outs = [_select_lanes(pick, x, y) for x, y in zip(results[b], outs)]
    return outs, [0] * n_out


def _select_lanes(pick: Any, on_true: Any, on_false: Any) -> Any:
    shape = get_aval(on_true).shape
    return select(broadcast_in_dim(pick, shape, (0,)), on_true, on_false)


# ---- the user-facing functions -----------------------------------------------------------------


def _trace_branches(what: str, funs: Sequence[Callable], operands: tuple, extra=frozenset()):
    leaves, in_tree = pytree.tree_flatten(operands)
    leaves = [_pvary(x, extra) for x in leaves]
    in_avals = [get_aval(x) for x in leaves]
    parts, out_trees, out_paths = [], [], []
    for f in funs:
        if not callable(f):
            raise BluTypeError(with_user_line(f"{what}: branches must be callables, got {f!r:.60}"))
        box = []

        def flat(*args, f=f, box=box):
            out = f(*pytree.tree_unflatten(in_tree, list(args)))
            box.append(flatten_avals(out))
            return pytree.tree_leaves(out)

        # inside blu.shard: traced keeping the operands' varying manual axes, so a psum of an
        # invariant value is a product (as outside cond) and transposes with the factor
        parts.append(trace_jaxpr(vma.seeded(flat, leaves, extra), in_avals))
        (pairs, tree) = box[0]
        out_paths.append(pairs)
        out_trees.append(tree)
    for b in range(1, len(funs)):
        check_same_types(
            what, "branch 0's output", f"branch {b}'s output",
            out_trees[0], out_paths[0], out_trees[b], [a for _, a in out_paths[b]],
            root="output",
        )  # fmt: skip
        for b_prev in range(b):  # the same dtypes, weak or not (JAX's typematch: no promotion)
            for (p, a), (_, c) in zip(out_paths[b_prev], out_paths[b]):
                if a.dtype != c.dtype:
                    raise BluTypeError(
                        with_user_line(
                            f"{what}: leaf output{pytree.keystr(p)} is {a.str_short()} in "
                            f"branch {b_prev} but {c.str_short()} in branch {b}; branches must "
                            "return the same shapes and dtypes"
                        )
                    )
    branches, consts = join_consts(parts)
    consts = [_pvary(c, extra) if isinstance(c, Tracer) else c for c in consts]
    return branches, consts, leaves, out_trees[0]


def _pvary(x: Any, axes: frozenset) -> Any:
    """``x`` pvary-ed over those of ``axes`` it does not vary over (inside ``blu.shard``)."""
    got = vma.vma_of(x) if axes else None
    rest = () if got is None else tuple(n for n in vma.manual_axes() if n in axes - got)
    return pvary_p.bind(x, axis_name=rest) if rest else x


def switch(index: Any, branches: Sequence[Callable], *operands: Any) -> Any:
    """Apply ``branches[index](*operands)``; out-of-range indices are clamped.

    Every branch is traced; all must return the same pytree structure, shapes and dtypes.

    Args:
        index: an integer scalar (Python int or traced int array).
        branches: a non-empty sequence of callables.
        operands: pytrees of arrays passed to the chosen branch.

    Raises:
        BluTypeError: a non-integer or non-scalar index, or branches whose outputs differ (the
            message names the leaf, its shapes and dtypes).
    """
    branches = tuple(branches)
    if not branches:
        raise BluValueError(with_user_line("switch: needs at least one branch"))
    aval = get_aval(index)
    if aval.shape != () or not dtypes.is_int(aval.dtype):
        raise BluTypeError(
            with_user_line(f"switch: index must be an integer scalar, got {aval.str_short()}")
        )
    n = len(branches)
    if dtypes.iinfo(aval.dtype).max > dtypes.iinfo(dtypes.int32).max:
        # clamp before the cast, which would wrap (uint32 2**32 - 1 to -1, int64 2**32 + 1 to 1)
        index = select(lt(index, 0), full_like(index, 0), index)
        index = select(gt(index, n - 1), full_like(index, n - 1), index)
    index = convert_element_type(index, dtypes.int32)
    index = select(lt(index, 0), full_like(index, 0), index)
    index = select(gt(index, n - 1), full_like(index, n - 1), index)
    return _bind_cond("switch", index, branches, operands)


_NO_OPERAND = object()


def cond(
    pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any, operand: Any = _NO_OPERAND
) -> Any:
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``, as one traced op.

    Both branches are traced (so they must agree in output structure, shapes and dtypes); only
    one runs. Under ``vmap`` with a batched ``pred`` both run and a select picks per lane.

    Args:
        pred: a scalar bool (or number: nonzero means true), Python or traced.
        true_fun, false_fun: callables of ``operands``.
        operands: pytrees of arrays.
        operand: JAX's older form of one operand, by keyword (``cond(p, f, g, operand=x)``).

    Raises:
        BluShapeError: ``pred`` is not a scalar.
        BluTypeError: the branches' outputs differ (naming the leaf, shapes and dtypes), or
            ``operand=`` is given with positional operands.
    """
    if operand is not _NO_OPERAND:
        if operands:
            raise BluTypeError(
                with_user_line(
                    "cond: pass the operands positionally or one as operand=, not both "
                    f"(got {len(operands)} positional)"
                )
            )
        operands = (operand,)
    aval = get_aval(pred)
    if aval.shape != ():
        raise BluShapeError(
            with_user_line(
                f"cond: pred must be a scalar, got {aval.str_short()} (use blu.numpy.where for "
                "elementwise selection, or vmap over cond)"
            )
        )
    if aval.dtype != dtypes.bool_:
        pred = ne(pred, full_like(pred, 0))
    index = convert_element_type(pred, dtypes.int32)
    return _bind_cond("cond", index, (false_fun, true_fun), operands)


def _bind_cond(what: str, index: Any, funs: tuple, operands: tuple) -> Any:
    # inside blu.shard, an index varying over mesh axes makes the operands and the values the
    # branches close over vary over them too (JAX's implicit pvary at cond): a branch's
    # transpose then leaves the psum of an invariant value's cotangent to that pvary, outside
    # the branch (in a branch it summed the cotangent once per device taking the branch)
    manual = vma.manual_axes()
    got = vma.vma_of(index) if manual else None
    extra = got or frozenset()
    branches, consts, leaves, out_tree = _trace_branches(what, funs, operands, extra)
    if manual and got is None and any(talks(e, set(manual)) for b in branches for e in b.eqns):
        vma.note_unknown()  # a custom rule's plain trace: redone knowing the index's variance
    if extra and any(talks(e, extra) for br in branches for e in br.eqns):
        # devices may take different branches, and the branches talk over those axes: their
        # collectives must pair up, and run as the devices would (blu.lax.control_flow.divergent)
        check_branches(what, branches, extra)
        return pytree.tree_unflatten(out_tree, lockstep(index, branches, extra, [*consts, *leaves]))
    outs = cond_p.bind(index, *consts, *leaves, branches=tuple(branches))
    return pytree.tree_unflatten(out_tree, outs)
