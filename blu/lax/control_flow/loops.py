"""``while_loop`` (``while_p``) and ``fori_loop``.

``while_p``'s operands are the consts of the condition, the consts of the body, and the carry.
Forward mode works (the JVP is a while loop over primal and tangent carries). Reverse mode does
not: the trip count is unknown before running, so the residuals of each iteration cannot be
stored; ``grad`` raises and points at ``scan`` / ``fori_loop`` with static bounds, which is a
``scan`` and so supports reverse mode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from blu.core import dtypes, pytree
from blu.core.errors import BluError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval, set_interpreter
from blu.core.jaxpr import Jaxpr, Var, dce_jaxpr, eval_jaxpr
from blu.core.primitive import Primitive
from blu.core.staging import StagingInterpreter
from blu.lax.casts import convert_element_type
from blu.lax.control_flow.divergent import check_loop
from blu.lax.control_flow.scan import _scan, is_static_int
from blu.lax.elementwise import add, gt, lt, select
from blu.lax.reductions import reduce_sum
from blu.lax.shapes import broadcast_in_dim, full
from blu.transforms import vma
from blu.transforms.ad_util import Zero, instantiate
from blu.transforms.batching import bdim_to_front, moveaxis
from blu.transforms.jaxpr_util import (
    batch_jaxpr,
    check_same_types,
    flatten_avals,
    groups,
    jvp_jaxpr,
    mask,
    merge,
    nonzero,
    partial_eval_jaxpr,
    reorder,
    run_jaxpr,
    trace_jaxpr,
    unbatched,
)

__all__ = ["while_loop", "fori_loop"]

while_p = Primitive("while", multiple_results=True)


class WhileLoopReverseModeError(BluError, NotImplementedError):
    """Reverse-mode differentiation reached a while_loop."""


def _bind(cond_consts, body_consts, init, *, cond_jaxpr, body_jaxpr):
    return while_p.bind(
        *cond_consts, *body_consts, *init,
        cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr,
        cond_nconsts=len(cond_consts), body_nconsts=len(body_consts),
    )  # fmt: skip


@while_p.def_abstract_eval
def _while_abstract_eval(*avals, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    cc, bc, init = groups(avals, cond_nconsts, body_nconsts)
    for what, jaxpr, ins in (("cond", cond_jaxpr, cc + init), ("body", body_jaxpr, bc + init)):
        for i, (a, v) in enumerate(zip(ins, jaxpr.invars, strict=True)):
            if a.shape != v.aval.shape or a.dtype != v.aval.dtype:
                raise BluTypeError(
                    with_user_line(
                        f"while_loop: operand {i} of the {what} is {a.str_short()} but it "
                        f"expects {v.aval.str_short()}"
                    )
                )
    # weak only if the body keeps it weak (JAX's carry out is the body's: 0.0 + f32 is f32)
    return [
        v.aval.update(weak_type=a.weak_type and v.aval.weak_type and o.weak_type)
        for a, v, o in zip(init, body_jaxpr.invars[body_nconsts:], body_jaxpr.out_avals)
    ]


@while_p.def_impl
def _while_impl(*args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    cc, bc, carry = groups(args, cond_nconsts, body_nconsts)
    while bool(run_jaxpr(cond_jaxpr, [*cc, *carry])[0]):
        carry = run_jaxpr(body_jaxpr, [*bc, *carry])
    return list(carry)


# ---- jvp ---------------------------------------------------------------------------------------


@while_p.def_jvp
def _while_jvp(primals, tangents, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    ncc, nbc = cond_nconsts, body_nconsts
    ncar = len(primals) - ncc - nbc
    nz = nonzero(tangents)
    _, bc_nz, init_nz = groups(nz, ncc, nbc)
    carry_nz = init_nz
    while True:
        _, _, out_nz = jvp_jaxpr(body_jaxpr, bc_nz + carry_nz, carry_nz)
        new = [a or b for a, b in zip(carry_nz, out_nz)]
        if new == carry_nz:
            break
        carry_nz = new
    body, jconsts, _ = jvp_jaxpr(body_jaxpr, bc_nz + carry_nz, carry_nz)
    k, n_bt = len(jconsts), sum(bc_nz)
    base = k + nbc + ncar
    order = (
        list(range(k + nbc))
        + list(range(base, base + n_bt))
        + list(range(k + nbc, base))
        + list(range(base + n_bt, len(body.invars)))
    )
    body = reorder(body, order)
    n_ct = sum(carry_nz)
    carry_avals = [v.aval.strip_weak_type() for v in body_jaxpr.invars[nbc:]]
    carry_t_avals = mask(carry_avals, carry_nz)
    cond = Jaxpr([], cond_jaxpr.invars + [Var(a) for a in carry_t_avals], cond_jaxpr.eqns,
                 cond_jaxpr.outvars)  # fmt: skip
    cc, bc, init = groups(primals, ncc, nbc)
    _, t_bc, t_init = groups(tangents, ncc, nbc)
    outs = _bind(
        cc,
        [*jconsts, *bc, *mask(t_bc, bc_nz)],
        [*init, *[instantiate(t) for t, z in zip(t_init, carry_nz) if z]],
        cond_jaxpr=cond, body_jaxpr=body,
    )  # fmt: skip
    zeros = [Zero(v.aval.strip_weak_type()) for v in body_jaxpr.invars[nbc:]]
    return outs[:ncar], merge(carry_nz, outs[ncar : ncar + n_ct], zeros)


# ---- partial evaluation: forward mode yes, reverse mode no --------------------------------------


@while_p.def_partial_eval
def _while_partial_eval(pe, args, params):
    """The known carries come from a loop over the known part of the body; the unknown ones
    from the whole loop, staged (it recomputes the known part, as in JAX). ``linearize`` works;
    transposing the staged loop raises ``WhileLoopReverseModeError``."""
    cond_jaxpr, body_jaxpr = params["cond_jaxpr"], params["body_jaxpr"]
    ncc, nbc = params["cond_nconsts"], params["body_nconsts"]
    uk = [pe.is_unknown(a) for a in args]
    cc_uk, bc_uk, init_uk = groups(uk, ncc, nbc)
    carry_uk = init_uk
    while True:
        split = partial_eval_jaxpr(body_jaxpr, bc_uk + carry_uk, carry_uk, pe.parent)
        new = [a or b for a, b in zip(carry_uk, split[3])]
        if new == carry_uk:
            break
        carry_uk = new
    used = _used_invars(cond_jaxpr)
    cond_needs_unknown = any(u and used[i] for i, u in enumerate(cc_uk + carry_uk))
    everything = StagingInterpreter.process(pe, while_p, args, params)
    if cond_needs_unknown or all(carry_uk):
        return everything
    known, kconsts, _, _, n_res = split
    n_known = len(known.outvars) - n_res
    known_body = dce_jaxpr(Jaxpr([], known.invars, known.eqns, known.outvars[:n_known]))
    cc_vars, car_vars = groups(cond_jaxpr.invars, ncc)
    known_cond = Jaxpr([], cc_vars + mask(car_vars, [not u for u in carry_uk]),
                       cond_jaxpr.eqns, cond_jaxpr.outvars)  # fmt: skip
    cc, bc, init = groups(args, ncc, nbc)
    with set_interpreter(pe.parent):
        k_outs = _bind(
            cc,
            kconsts + mask(bc, [not u for u in bc_uk]),
            mask(init, [not u for u in carry_uk]),
            cond_jaxpr=known_cond, body_jaxpr=known_body,
        )  # fmt: skip
    return merge(carry_uk, mask(everything, carry_uk), k_outs)


def _used_invars(jaxpr: Jaxpr) -> list[bool]:
    live = dce_jaxpr(jaxpr)
    used = {a for e in live.eqns for a in e.invars if isinstance(a, Var)}
    used |= {a for a in live.outvars if isinstance(a, Var)}
    return [v in used for v in jaxpr.invars]


@while_p.def_transpose
def _while_transpose(cts, *args, **params):
    raise WhileLoopReverseModeError(
        with_user_line(
            "Reverse-mode differentiation (grad, vjp, jacrev) of blu.lax.while_loop is not "
            "supported: its trip count is only known at run time, so the values each iteration "
            "needs for the backward pass cannot be stored. Use blu.lax.fori_loop with static "
            "(Python int) bounds or blu.lax.scan with a static length, which support reverse "
            "mode; or use forward mode (jvp, jacfwd)."
        )
    )


# ---- batching ----------------------------------------------------------------------------------


@while_p.def_batch_named  # named: collectives in the loop see the vmap/shard axis name
def _while_batch(
    axis_size, axis_name, args, dims, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts
):
    if unbatched(axis_name, dims, [cond_jaxpr, body_jaxpr]):
        outs = while_p.bind(*args, cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr,
                            cond_nconsts=cond_nconsts, body_nconsts=body_nconsts)  # fmt: skip
        return outs, [None] * len(outs)

    ncc, nbc = cond_nconsts, body_nconsts
    args = [x if d is None else moveaxis(x, d, 0) for x, d in zip(args, dims)]
    dims = [None if d is None else 0 for d in dims]
    cc, bc, init = groups(args, ncc, nbc)
    cc_d, bc_d, init_d = groups(dims, ncc, nbc)
    carry_b = [d is not None for d in init_d]
    while True:
        c_dims = [0 if b else None for b in carry_b]
        _, _, out_d = batch_jaxpr(body_jaxpr, axis_size, bc_d + c_dims, carry_b, axis_name)
        _, _, (pred_d,) = batch_jaxpr(cond_jaxpr, axis_size, cc_d + c_dims, False, axis_name)
        new = [a or d is not None for a, d in zip(carry_b, out_d)]
        if pred_d is not None:  # lanes stop at different times: every carry is per lane
            new = [True] * len(carry_b)
        if new == carry_b:
            break
        carry_b = new
    c_dims = [0 if b else None for b in carry_b]
    init = [
        bdim_to_front(x, None, axis_size) if b and d is None else x
        for x, b, d in zip(init, carry_b, init_d)
    ]
    body, b_consts, _ = batch_jaxpr(body_jaxpr, axis_size, bc_d + c_dims, carry_b, axis_name)
    cond, c_consts, (pred_d,) = batch_jaxpr(cond_jaxpr, axis_size, cc_d + c_dims, False, axis_name)
    out_dims = [0 if b else None for b in carry_b]
    if pred_d is None:
        outs = _bind([*c_consts, *cc], [*b_consts, *bc], init, cond_jaxpr=cond, body_jaxpr=body)
        return outs, out_dims
    # a batched predicate: loop while any lane runs; finished lanes keep their carry
    n_cc = len(c_consts) + len(cc)
    carry_avals = [get_aval(x) for x in init]

    def any_cond(*a):
        pred = eval_jaxpr(cond, [], *a)[0]
        count = reduce_sum(convert_element_type(pred, dtypes.int32), (0,))
        return [gt(count, 0)]

    def masked_body(*a):
        cond_args, body_consts, carry = groups(a, n_cc, len(b_consts) + len(bc))
        pred = eval_jaxpr(cond, [], *cond_args, *carry)[0]
        new = eval_jaxpr(body, [], *body_consts, *carry)
        return [
            select(broadcast_in_dim(pred, get_aval(n).shape, (0,)), n, c)
            for n, c in zip(new, carry)
        ]

    cc_all = [*c_consts, *cc]
    bc_all = [*b_consts, *bc]
    any_j, any_consts = trace_jaxpr(any_cond, [get_aval(x) for x in cc_all] + carry_avals)
    mb_j, mb_consts = trace_jaxpr(masked_body, [get_aval(x) for x in cc_all + bc_all] + carry_avals)
    outs = _bind([*any_consts, *cc_all], [*mb_consts, *cc_all, *bc_all], init,
                 cond_jaxpr=any_j, body_jaxpr=mb_j)  # fmt: skip
    return outs, out_dims


# ---- the user-facing functions -----------------------------------------------------------------


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """``while cond_fun(val): val = body_fun(val)``, as one traced op (``jax.lax.while_loop``).

    Args:
        cond_fun: ``val -> bool scalar``.
        body_fun: ``val -> val`` with the same pytree structure, shapes and dtypes.
        init_val: the initial value (a pytree of arrays).

    Returns:
        the final value. Under ``vmap`` with a per-lane condition the loop runs until every
        lane's condition is false; lanes that finished keep their value.

    Raises:
        BluTypeError: ``body_fun`` changes the carry (naming the leaf, shapes and dtypes), or
            ``cond_fun`` does not return a bool scalar.
        BluValueError: inside ``blu.shard``, ``cond_fun``'s result varies over a mesh axis and
            ``cond_fun`` or ``body_fun`` runs a collective over it (devices would run different
            numbers of iterations: the collective would not pair up).
        WhileLoopReverseModeError: under ``grad``/``vjp`` (use ``fori_loop`` with static bounds
            or ``scan``).
    """
    leaves, tree = pytree.tree_flatten(init_val)
    paths = [p for p, _ in pytree.tree_flatten_with_path(init_val)[0]]
    for attempt in range(2):  # a second pass if a weakly typed leaf must be promoted
        avals = [get_aval(x) for x in leaves]
        box = []

        def body_flat(*args):
            out = body_fun(pytree.tree_unflatten(tree, list(args)))
            pairs, t = flatten_avals(out)
            box.append((t, [a for _, a in pairs]))
            return pytree.tree_leaves(out)

        # inside blu.shard: traced keeping the values' varying manual axes (the carries' grown
        # to a fixed point), so a psum of an invariant value is a product, as outside the loop
        seeds = [vma.vma_of(x) for x in leaves]
        carries = [(k, k) for k in range(len(leaves))]
        body, body_consts = vma.trace_loop_body(
            lambda fun: trace_jaxpr(fun, avals), body_flat, seeds, carries
        )
        out_tree, out_avals = box[-1]
        promote = check_same_types(
            "while_loop", "the value passed in (init_val)", "the value body_fun returns",
            tree, list(zip(paths, avals)), out_tree, out_avals, root="val",
            allow_promote=attempt == 0,
        )  # fmt: skip
        if not promote:
            break
        leaves = [
            convert_element_type(x, out_avals[i].dtype) if i in promote else x
            for i, x in enumerate(leaves)
        ]
    cond_flat = lambda *a: [cond_fun(pytree.tree_unflatten(tree, list(a)))]  # noqa: E731
    if vma.manual_axes() and all(v is not None for v in seeds):  # the carries' fixed point
        cond_flat = vma.trace_manual(cond_flat, seeds)
    cond, cond_consts = trace_jaxpr(cond_flat, avals)
    pred = cond.out_avals[0]
    if pred.shape != () or pred.dtype != dtypes.bool_:
        raise BluTypeError(
            with_user_line(
                f"while_loop: cond_fun must return a bool scalar, got {pred.str_short()}"
            )
        )
    if vma.manual_axes():  # a predicate varying over a mesh axis, collectives over it: an error
        pred_vma = getattr(cond_flat, "out_vmas", [None])[0]
        check_loop(pred_vma, cond, body, vma.manual_axes())
    outs = _bind(cond_consts, body_consts, leaves, cond_jaxpr=cond, body_jaxpr=body)
    return pytree.tree_unflatten(tree, outs)


def fori_loop(
    lower: Any, upper: Any, body_fun: Callable, init_val: Any, *, unroll: int | bool | None = None
) -> Any:
    """``for i in range(lower, upper): val = body_fun(i, val)`` as one traced op.

    With concrete bounds (Python ints or concrete arrays) this is a ``scan`` of
    ``upper - lower`` steps, so reverse-mode differentiation works; with traced bounds it is a
    ``while_loop`` (forward mode only).

    Args:
        lower, upper: integer scalars; ``i`` has their dtype (int32 for Python ints).
        body_fun: ``(i, val) -> val``, keeping structure, shapes and dtypes.
        init_val: the initial value (a pytree of arrays).
        unroll: as ``scan``'s (iterations per compiled loop step, ``True`` or 0 for all);
            only with concrete bounds. The result is the same for every value.

    Raises:
        BluTypeError: a bound is not an integer scalar, the bounds are arrays of two dtypes
            (JAX's rule), or ``body_fun`` changes the value's structure, shapes or dtypes.
        BluValueError: ``unroll`` is given with traced bounds, or is not a bool /
            non-negative int.
    """
    la, ua = get_aval(lower), get_aval(upper)
    for name, a in (("lower", la), ("upper", ua)):
        if a.shape != () or not dtypes.is_int(a.dtype):
            raise BluTypeError(
                with_user_line(f"fori_loop: {name} must be an integer scalar, got {a.str_short()}")
            )
    # JAX's rule is for two typed arrays; a numpy scalar bound (np.prod(shape) is int64) meets
    # any, as a Python int does (JAX without x64 makes it int32)
    typed = not isinstance(lower, (np.generic, np.ndarray)) and not isinstance(
        upper, (np.generic, np.ndarray)
    )
    if typed and la.dtype != ua.dtype and not la.weak_type and not ua.weak_type:
        raise BluTypeError(
            with_user_line(
                "fori_loop: lower and upper must have the same dtype (a Python int may meet "
                f"any), got lower {la.str_short()}, upper {ua.str_short()}"
            )
        )
    idx_dtype = dtypes.result_type(lower, upper)
    if is_static_int(lower) and is_static_int(upper):
        lo, hi = int(lower), int(upper)

        def step(carry, _):
            i, val = carry
            return (add(i, full((), 1, idx_dtype)), body_fun(i, val)), None

        i0 = full((), lo, idx_dtype)
        n = max(hi - lo, 0)
        (_, val), _ = _scan(step, (i0, init_val), None, n, False, 1 if unroll is None else unroll,
                            what="fori_loop", root="val", strip=1)  # fmt: skip
        return val
    if unroll is not None:
        raise BluValueError(
            with_user_line(
                "fori_loop: unroll needs concrete loop bounds (Python ints or concrete arrays); "
                f"got lower {la.str_short()}, upper {ua.str_short()} traced"
            )
        )
    lower = convert_element_type(lower, idx_dtype)
    upper = convert_element_type(upper, idx_dtype)

    def body(carry):
        i, val = carry
        return add(i, full((), 1, idx_dtype)), body_fun(i, val)

    _, val = while_loop(lambda c: lt(c[0], upper), body, (lower, init_val))
    return val
