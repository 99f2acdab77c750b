"""``scan``: a loop over the leading axis of its inputs, carrying state (``scan_p``).

``scan_p``'s operands are ``consts`` (loop-invariant; the values the body closed over),
``carry`` (the state threaded through iterations) and ``xs`` (sliced along axis 0, one slice per
iteration); the body jaxpr maps ``consts, carry, x`` to ``carry, y`` and the ``y`` are stacked.

Reverse mode (as in JAX): the JVP of a scan is a scan of the JVP of its body; partial evaluation
splits it into a *known* scan (the primal loop, which also stacks the residuals the tangent part
needs as extra ``ys``) and an *unknown*, linear scan that takes those residuals as ``xs``;
transposing the linear scan gives a scan running in the other direction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from blu.core import dtypes, pytree
from blu.core.aval import ShapedArray
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer, get_aval, set_interpreter
from blu.core.jaxpr import Literal
from blu.core.primitive import Primitive
from blu.core.staging import StagingInterpreter
from blu.lax.casts import convert_element_type
from blu.lax.shapes import concatenate, reshape
from blu.lax.slicing import slice_in_dim
from blu.transforms import vma
from blu.transforms.ad import backward_pass
from blu.transforms.ad_util import UndefinedPrimal, Zero, add_tangents, instantiate, is_undefined
from blu.transforms.batching import bdim_to_front, moveaxis, vmap
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

__all__ = ["scan", "map"]

scan_p = Primitive("scan", multiple_results=True)


def _bind(consts, carry, xs, *, jaxpr, length, reverse, unroll=1):
    return scan_p.bind(
        *consts, *carry, *xs,
        jaxpr=jaxpr, num_consts=len(consts), num_carry=len(carry),
        length=length, reverse=reverse, unroll=unroll,
    )  # fmt: skip


@scan_p.def_abstract_eval
def _scan_abstract_eval(*avals, jaxpr, num_consts, num_carry, length, reverse, unroll):
    if len(avals) != len(jaxpr.invars):
        raise BluTypeError(f"scan: {len(avals)} operands for a body of {len(jaxpr.invars)} inputs")
    for i, (a, v) in enumerate(zip(avals, jaxpr.invars)):
        want = v.aval
        if i >= num_consts + num_carry:
            want = want.update(shape=(length,) + want.shape)
        if a.shape != want.shape or a.dtype != want.dtype:
            raise BluTypeError(
                with_user_line(
                    f"scan: operand {i} is {a.str_short()} but the body expects "
                    f"{want.str_short()} (length {length})"
                )
            )
    # weak only if the body keeps it weak (JAX's carry out is the body's: 0.0 + f32 is f32)
    carry = [
        v.aval.update(weak_type=a.weak_type and v.aval.weak_type and o.weak_type)
        for a, v, o in zip(
            avals[num_consts:],
            jaxpr.invars[num_consts : num_consts + num_carry],
            jaxpr.out_avals[:num_carry],
        )
    ]
    ys = [a.update(shape=(length,) + a.shape) for a in jaxpr.out_avals[num_carry:]]
    return carry + ys


@scan_p.def_impl
def _scan_impl(*args, jaxpr, num_consts, num_carry, length, reverse, unroll):
    consts, carry, xs = groups(args, num_consts, num_carry)
    ys = [np.empty((length,) + a.shape, a.dtype) for a in jaxpr.out_avals[num_carry:]]
    for i in range(length - 1, -1, -1) if reverse else range(length):
        outs = run_jaxpr(jaxpr, [*consts, *carry, *[x[i] for x in xs]])
        carry = outs[:num_carry]
        for y, o in zip(ys, outs[num_carry:]):
            y[i] = o
    return list(carry) + ys


# ---- jvp ---------------------------------------------------------------------------------------


@scan_p.def_jvp
def _scan_jvp(primals, tangents, *, jaxpr, num_consts, num_carry, length, reverse, unroll):
    nc, ncar = num_consts, num_carry
    n_ys = len(jaxpr.outvars) - ncar
    nz = nonzero(tangents)
    const_nz, init_nz, xs_nz = groups(nz, nc, ncar)
    carry_nz = init_nz
    while True:  # a carry has a tangent if its init has one or the body gives it one
        _, _, out_nz = jvp_jaxpr(jaxpr, const_nz + carry_nz + xs_nz, carry_nz + [False] * n_ys)
        new = [a or b for a, b in zip(carry_nz, out_nz[:ncar])]
        if new == carry_nz:
            break
        carry_nz = new
    body, jconsts, out_nz = jvp_jaxpr(jaxpr, const_nz + carry_nz + xs_nz, carry_nz + [False] * n_ys)
    # body invars: jconsts, consts, carry, xs, then the nonzero tangents of each group;
    # regroup them as scan wants: consts+their tangents, carry+..., xs+...
    k, nx = len(jconsts), len(xs_nz)
    n_ct, n_cart, n_xt = sum(const_nz), sum(carry_nz), sum(xs_nz)
    base = k + nc + ncar + nx
    order = (
        list(range(k + nc))
        + list(range(base, base + n_ct))
        + list(range(k + nc, k + nc + ncar))
        + list(range(base + n_ct, base + n_ct + n_cart))
        + list(range(k + nc + ncar, base))
        + list(range(base + n_ct + n_cart, base + n_ct + n_cart + n_xt))
    )
    n_yt = sum(out_nz[ncar:])
    out_order = (
        list(range(ncar))
        + list(range(ncar + n_ys, ncar + n_ys + n_cart))
        + list(range(ncar, ncar + n_ys))
        + list(range(ncar + n_ys + n_cart, ncar + n_ys + n_cart + n_yt))
    )
    body = reorder(body, order, out_order)
    consts, init, xs = groups(primals, nc, ncar)
    t_consts, t_init, t_xs = groups(tangents, nc, ncar)
    outs = _bind(
        [*jconsts, *consts, *mask(t_consts, const_nz)],
        [*init, *[instantiate(t) for t, z in zip(t_init, carry_nz) if z]],
        [*xs, *mask(t_xs, xs_nz)],
        jaxpr=body, length=length, reverse=reverse, unroll=unroll,
    )  # fmt: skip
    carry_out, carry_t, ys, ys_t = groups(outs, ncar, n_cart, n_ys)
    out_avals = _scan_abstract_eval(
        *[get_aval(p) for p in primals],
        jaxpr=jaxpr, num_consts=nc, num_carry=ncar, length=length, reverse=reverse, unroll=unroll,
    )  # fmt: skip
    zeros = [Zero(a.strip_weak_type()) for a in out_avals]
    t_out = merge(carry_nz, carry_t, zeros[:ncar]) + merge(out_nz[ncar:], ys_t, zeros[ncar:])
    return carry_out + ys, t_out


# ---- partial evaluation ------------------------------------------------------------------------


@scan_p.def_partial_eval
def _scan_partial_eval(pe, args, params):
    jaxpr, nc, ncar = params["jaxpr"], params["num_consts"], params["num_carry"]
    length, reverse, unroll = params["length"], params["reverse"], params["unroll"]
    n_ys = len(jaxpr.outvars) - ncar
    uk = [pe.is_unknown(a) for a in args]
    const_uk, init_uk, xs_uk = groups(uk, nc, ncar)
    carry_uk = init_uk
    while True:  # a carry is unknown if its init is, or the body makes it so
        split = partial_eval_jaxpr(
            jaxpr, const_uk + carry_uk + xs_uk, carry_uk + [False] * n_ys, pe.parent
        )
        out_uk = split[3]
        new = [a or b for a, b in zip(carry_uk, out_uk[:ncar])]
        if new == carry_uk:
            break
        carry_uk = new
    known, kconsts, unknown, out_uk, n_res = split
    consts, init, xs = groups(args, nc, ncar)
    known_consts = kconsts + mask(consts, [not u for u in const_uk])
    known_init = mask(init, [not u for u in carry_uk])
    known_xs = mask(xs, [not u for u in xs_uk])
    n_known_out = len(known.outvars) - n_res
    # residuals that are consts of the known body are loop-invariant: passed as consts; those
    # that are its xs are passed as the same xs; only the rest are stacked by the known scan
    n_kc = len(known_consts)
    const_pos = {v: i for i, v in enumerate(known.invars[:n_kc])}
    xs_pos = {v: i for i, v in enumerate(known.invars[n_kc + len(known_init) :])}
    res_vars = known.outvars[n_known_out:]
    kind = [
        "const" if isinstance(v, Literal) or v in const_pos else "xs" if v in xs_pos else "stack"
        for v in res_vars
    ]
    known_body = reorder(
        known,
        out_order=list(range(n_known_out))
        + [n_known_out + r for r, k in enumerate(kind) if k == "stack"],
    )
    with set_interpreter(pe.parent):
        k_outs = _bind(
            known_consts, known_init, known_xs,
            jaxpr=known_body, length=length, reverse=reverse, unroll=unroll,
        )  # fmt: skip
    k_carry, k_ys, stacked = groups(k_outs, len(known_init), n_ys - sum(out_uk[ncar:]))
    stacked_iter = iter(stacked)
    res_values = []
    for v, k in zip(res_vars, kind):
        if k == "const":
            res_values.append(v.val if isinstance(v, Literal) else known_consts[const_pos[v]])
        elif k == "xs":
            res_values.append(known_xs[xs_pos[v]])
        else:
            res_values.append(next(stacked_iter))
    # unknown body invars: residuals, unknown consts, unknown carry, unknown xs; regroup into
    # [const residuals, unknown consts] [unknown carry] [other residuals, unknown xs]
    n_uc, n_ucar = sum(const_uk), sum(carry_uk)
    inv_idx = [r for r, k in enumerate(kind) if k == "const"]
    ext_idx = [r for r, k in enumerate(kind) if k != "const"]
    order = (
        inv_idx
        + list(range(n_res, n_res + n_uc + n_ucar))
        + ext_idx
        + list(range(n_res + n_uc + n_ucar, len(unknown.invars)))
    )
    unknown_body = reorder(unknown, order)
    u_consts = [res_values[r] for r in inv_idx] + mask(consts, const_uk)
    u_carry = mask(init, carry_uk)
    u_xs = [res_values[r] for r in ext_idx] + mask(xs, xs_uk)
    atoms = [pe.to_atom(a) for a in (*u_consts, *u_carry, *u_xs)]
    p = dict(
        jaxpr=unknown_body, num_consts=len(u_consts), num_carry=len(u_carry),
        length=length, reverse=reverse, unroll=unroll,
    )  # fmt: skip
    out_avals = _scan_abstract_eval(*[a.aval for a in atoms], **p)
    u_outs = StagingInterpreter.stage(pe, scan_p, atoms, p, out_avals)
    u_carry_out, u_ys = u_outs[:n_ucar], u_outs[n_ucar:]
    return merge(carry_uk, u_carry_out, k_carry) + merge(out_uk[ncar:], u_ys, k_ys)


# ---- transpose ---------------------------------------------------------------------------------


@scan_p.def_transpose
def _scan_transpose(cts, *args, jaxpr, num_consts, num_carry, length, reverse, unroll):
    """Transpose a scan linear in its carries and in the undefined consts / xs.

    The transposed scan runs the other way; its carry holds the cotangents of the carry and the
    running sums of the cotangents of the linear consts.
    """
    nc, ncar = num_consts, num_carry
    consts, init, xs = groups(args, nc, ncar)
    c_lin = [is_undefined(c) for c in consts]
    x_lin = [is_undefined(x) for x in xs]
    body_c, body_car, body_x = groups(jaxpr.invars, nc, ncar)
    res_c = [c for c, l in zip(consts, c_lin) if not l]
    res_x = [x for x, l in zip(xs, x_lin) if not l]
    lin_c_avals = [v.aval.strip_weak_type() for v, l in zip(body_c, c_lin) if l]
    lin_x_avals = [v.aval.strip_weak_type() for v, l in zip(body_x, x_lin) if l]
    carry_avals = [v.aval.strip_weak_type() for v in body_car]
    ct_carry = [
        instantiate(Zero(a)) if isinstance(c, Zero) else c for c, a in zip(cts[:ncar], carry_avals)
    ]
    ct_ys = cts[ncar:]
    ys_nz = [not isinstance(c, Zero) for c in ct_ys]
    y_avals = [a.strip_weak_type() for a in jaxpr.out_avals[ncar:]]
    n_rc, n_lc, n_rx = len(res_c), len(lin_c_avals), len(res_x)

    # inside blu.shard: the linear inputs' varying mesh axes (the carries' at a fixed point)
    lin_vmas = vma.loop_carry_vmas(jaxpr, list(consts), list(init), list(xs))
    v_c, v_car, v_x = groups(lin_vmas or [None] * len(args), nc, ncar)
    v_c = [m for m, l in zip(v_c, c_lin) if l]
    v_x = [m for m, l in zip(v_x, x_lin) if l]
    # a carry the body returns varying over fewer axes than the carry (at the fixed point): JAX
    # pvaries it to the carry's type, whose transpose psums its cotangent over the others
    out_car = None if lin_vmas is None else vma.jaxpr_vmas(jaxpr, lin_vmas)[:ncar]

    def body(*a):
        r_c, acc, ct_car, r_x, ct_y = groups(a, n_rc, n_lc, ncar, n_rx)
        bw_args = (
            merge(c_lin, [UndefinedPrimal(av, m) for av, m in zip(lin_c_avals, v_c)], r_c)
            + [UndefinedPrimal(av, m) for av, m in zip(carry_avals, v_car)]
            + merge(x_lin, [UndefinedPrimal(av, m) for av, m in zip(lin_x_avals, v_x)], r_x)
        )
        if out_car is not None:
            ct_car = [vma.fix_cotangent(c, o, t) for c, o, t in zip(ct_car, out_car, v_car)]
        bw_cts = list(ct_car) + merge(ys_nz, ct_y, [Zero(av) for av in y_avals])
        out = backward_pass(jaxpr, [], bw_args, bw_cts)
        ct_c, ct_in, ct_x = groups(out, nc, ncar)
        ct_c = [c for c in ct_c if c is not None]  # the linear consts' (None: residuals)
        ct_x = [instantiate(c) for c in ct_x if c is not None]
        acc = [instantiate(add_tangents(s, c)) for s, c in zip(acc, ct_c)]
        return acc + [instantiate(c) for c in ct_in] + ct_x

    in_avals = (
        [get_aval(r) for r in res_c]
        + lin_c_avals
        + carry_avals
        + [ShapedArray(get_aval(r).shape[1:], get_aval(r).dtype) for r in res_x]
        + mask(y_avals, ys_nz)
    )
    # inside blu.shard: the body keeps its values' varying manual axes; the carries (the
    # consts' running cotangents, the carry's cotangent) start from their initial values'
    seeds = (
        [vma.vma_of(r) for r in res_c]
        + [frozenset()] * n_lc
        + [vma.vma_of(c) for c in ct_carry]
        + [vma.vma_of(r) for r in res_x]
        + [vma.vma_of(c) for c in ct_ys if not isinstance(c, Zero)]
    )
    carries = [(n_rc + k, k) for k in range(n_lc + ncar)]
    t_body, t_consts = vma.trace_loop_body(lambda f: trace_jaxpr(f, in_avals), body, seeds, carries)
    zeros = [instantiate(Zero(a)) for a in lin_c_avals]
    outs = _bind(
        [*t_consts, *res_c],
        [*zeros, *ct_carry],
        [*res_x, *[c for c in ct_ys if not isinstance(c, Zero)]],
        jaxpr=t_body, length=length, reverse=not reverse, unroll=unroll,
    )  # fmt: skip
    ct_consts, ct_init, ct_xs = groups(outs, n_lc, ncar)
    return (
        merge(c_lin, ct_consts, [None] * nc)
        + [c if is_undefined(x) else None for c, x in zip(ct_init, init)]
        + merge(x_lin, ct_xs, [None] * len(xs))
    )


# ---- batching ----------------------------------------------------------------------------------


@scan_p.def_batch_named  # named: collectives in the body see the vmap/shard axis name
def _scan_batch(
    axis_size, axis_name, args, dims, *, jaxpr, num_consts, num_carry, length, reverse, unroll
):
    if unbatched(axis_name, dims, [jaxpr]):
        outs = scan_p.bind(*args, jaxpr=jaxpr, num_consts=num_consts, num_carry=num_carry,
                           length=length, reverse=reverse, unroll=unroll)  # fmt: skip
        return outs, [None] * len(outs)

    nc, ncar = num_consts, num_carry
    n_ys = len(jaxpr.outvars) - ncar
    args = [x if d is None else moveaxis(x, d, 0) for x, d in zip(args, dims)]
    consts, init, xs = groups(args, nc, ncar)
    c_dims, i_dims, x_dims = groups([None if d is None else 0 for d in dims], nc, ncar)
    # each x's batch axis goes to 1, so that one slice has it at 0
    xs = [x if d is None else moveaxis(x, 0, 1) for x, d in zip(xs, x_dims)]
    carry_b = [d is not None for d in i_dims]
    while True:
        c_in = [0 if b else None for b in carry_b]
        _, _, out_dims = batch_jaxpr(
            jaxpr, axis_size, c_dims + c_in + x_dims, carry_b + [False] * n_ys, axis_name
        )
        new = [a or d is not None for a, d in zip(carry_b, out_dims[:ncar])]
        if new == carry_b:
            break
        carry_b = new
    body, bconsts, out_dims = batch_jaxpr(
        jaxpr, axis_size, c_dims + c_in + x_dims, carry_b + [False] * n_ys, axis_name
    )
    init = [
        bdim_to_front(x, None, axis_size) if b and d is None else x
        for x, b, d in zip(init, carry_b, i_dims)
    ]
    outs = _bind(
        [*bconsts, *consts], init, xs, jaxpr=body, length=length, reverse=reverse, unroll=unroll
    )
    return outs, [0 if b else None for b in carry_b] + [
        None if d is None else 1 for d in out_dims[ncar:]
    ]


# ---- the user-facing function ------------------------------------------------------------------


def scan(
    f: Callable,
    init: Any,
    xs: Any = None,
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
) -> tuple[Any, Any]:
    """Loop ``f`` over the leading axis of ``xs``, threading a carry (``jax.lax.scan``).

    Semantics (``ys`` stacked along a new leading axis)::

        def scan(f, init, xs, length=None):
            carry, ys = init, []
            for x in xs:
                carry, y = f(carry, x)
                ys.append(y)
            return carry, stack(ys)

    Args:
        f: ``(carry, x) -> (carry, y)``; carry a pytree whose structure, shapes and dtypes stay
            the same every iteration, ``x`` a slice of ``xs``, ``y`` any pytree of arrays.
        init: the initial carry.
        xs: a pytree of arrays with a common leading axis (or None, with ``length``).
        length: the number of iterations (required when ``xs`` is None).
        reverse: iterate from the last slice to the first (``ys`` keep their positions).
        unroll: how many iterations one step of the compiled loop does (a non-negative int;
            ``0`` or ``True`` unrolls fully, ``False`` is 1, as JAX). A performance hint: the
            result is the same for every value.

    Returns:
        ``(final carry, ys)``.

    Raises:
        BluTypeError: the carry returned by ``f`` differs from the one passed in (the message
            names the leaf path, its shapes and dtypes), ``f`` does not return a pair, or
            ``unroll`` is not a bool or an int.
        BluValueError: ``unroll`` is an int < 0, or ``length`` < 0.
        BluShapeError: the leaves of ``xs`` have different leading sizes, or ``length``
            disagrees.
    """
    return _scan(f, init, xs, length, reverse, unroll)


def _scan(f, init, xs, length, reverse, unroll, what="scan", root="carry", strip=0):
    """``scan``; ``what``/``root``/``strip`` name the carry in errors (``fori_loop`` hides its
    counter: its carry is ``(i, val)``, reported as ``val``)."""
    x_leaves, x_tree = pytree.tree_flatten(xs)
    x_avals = [get_aval(x) for x in x_leaves]
    sizes = {a.shape[0] for a in x_avals if a.ndim}
    if any(a.ndim == 0 for a in x_avals):
        raise BluShapeError(with_user_line("scan: every leaf of xs needs a leading axis to scan"))
    if length is not None:
        length = dtypes.static_int(length, f"{what}: length")
        if length < 0:
            raise BluValueError(with_user_line(f"scan: length={length} must be >= 0"))
        sizes.add(length)
    if len(sizes) > 1:
        detail = ", ".join(a.str_short() for a in x_avals)
        raise BluShapeError(
            with_user_line(
                f"scan: xs leaves must share their leading size"
                f"{'' if length is None else f' (length={length})'}; got {detail}"
            )
        )
    if not sizes:
        raise BluValueError(with_user_line("scan: pass xs or length (there is nothing to scan)"))
    length = sizes.pop()
    unroll = _check_unroll(unroll, length, what)
    slice_avals = [ShapedArray(a.shape[1:], a.dtype, a.weak_type) for a in x_avals]

    init_leaves, init_tree = pytree.tree_flatten(init)
    init_paths = [p[strip:] for p, _ in pytree.tree_flatten_with_path(init)[0]]
    for attempt in range(2):  # a second pass if a weakly typed carry leaf must be promoted
        carry_avals = [get_aval(x) for x in init_leaves]
        box = []

        def flat(*args):
            carry = pytree.tree_unflatten(init_tree, list(args[: len(carry_avals)]))
            x = pytree.tree_unflatten(x_tree, list(args[len(carry_avals) :]))
            out = f(carry, x)
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                raise BluTypeError(
                    with_user_line(
                        f"scan: the body must return a pair (carry, y), got {type(out).__name__}"
                    )
                )
            c_pairs, c_tree = flatten_avals(out[0])
            y_leaves, y_tree = pytree.tree_flatten(out[1])
            box.append((c_tree, [a for _, a in c_pairs], y_tree))
            return pytree.tree_leaves(out[0]) + y_leaves

        # inside blu.shard: the body keeps its values' varying manual axes (the carries' grown
        # to a fixed point), so a psum of an invariant value is a product, as outside scan
        seeds = [vma.vma_of(x) for x in (*init_leaves, *x_leaves)]
        carries = [(k, k) for k in range(len(carry_avals))]
        jaxpr, consts = vma.trace_loop_body(
            lambda fun: trace_jaxpr(fun, carry_avals + slice_avals), flat, seeds, carries
        )
        c_tree, c_avals, y_tree = box[-1]
        promote = check_same_types(
            what, f"the {root} passed in", f"the {root} the body returns",
            init_tree, list(zip(init_paths, carry_avals)), c_tree, c_avals, root=root,
            allow_promote=attempt == 0,
        )  # fmt: skip
        if not promote:
            break
        init_leaves = [
            _promote(x, c_avals[i]) if i in promote else x for i, x in enumerate(init_leaves)
        ]
    outs = _bind(consts, init_leaves, x_leaves, jaxpr=jaxpr, length=length, reverse=reverse,
                 unroll=unroll)  # fmt: skip
    n = len(init_leaves)
    return pytree.tree_unflatten(init_tree, outs[:n]), pytree.tree_unflatten(y_tree, outs[n:])


def _check_unroll(unroll: Any, length: int, what: str) -> int:
    """JAX's rule: a bool means all (``True``) or 1; otherwise a non-negative int, 0 meaning
    all (as ``True``)."""
    if isinstance(unroll, (bool, np.bool_)):
        return max(length, 1) if unroll else 1
    if not isinstance(unroll, (int, np.integer)):
        raise BluTypeError(
            with_user_line(f"{what}: unroll must be a bool or a non-negative int, got {unroll!r}")
        )
    if unroll < 0:
        raise BluValueError(
            with_user_line(f"{what}: unroll must be a bool or a non-negative int, got {unroll}")
        )
    return max(length, 1) if unroll == 0 else int(unroll)


def _promote(x: Any, aval: ShapedArray) -> Any:
    return convert_element_type(x, aval.dtype)


def map(f: Callable, xs: Any, *, batch_size: int | None = None) -> Any:  # noqa: A001 - jax.lax.map
    """``stack([f(x) for x in xs])`` over the leading axis of the pytree ``xs``, as a scan.

    With ``batch_size`` (``jax.lax.map``'s): a scan over chunks of ``batch_size`` slices, each
    chunk mapped with ``vmap``; a last, shorter chunk (``n % batch_size`` slices) gets its own
    ``vmap`` and is appended. ``0`` is one ``vmap`` over everything. The values are the same
    for every ``batch_size``.

    Raises:
        BluValueError: ``batch_size`` is not a non-negative int.
        BluShapeError: the leaves of ``xs`` differ in their leading size.
    """
    if batch_size is None:
        _, ys = scan(lambda c, x: (c, f(x)), (), xs)
        return ys
    return _batched_map(f, xs, batch_size)


def _batched_map(f: Callable, xs: Any, batch_size: Any) -> Any:
    if not dtypes.is_int_scalar(batch_size):
        raise BluValueError(with_user_line(f"map: batch_size must be an int, got {batch_size!r}"))
    if batch_size < 0:
        raise BluValueError(with_user_line(f"map: batch_size must be >= 0, got {batch_size}"))
    leaves, tree = pytree.tree_flatten(xs)
    avals = [get_aval(x) for x in leaves]
    sizes = {a.shape[0] if a.ndim else None for a in avals}
    if len(sizes) != 1 or None in sizes:
        detail = ", ".join(a.str_short() for a in avals)
        raise BluShapeError(with_user_line(f"map: xs leaves need one leading size; got {detail}"))
    n = sizes.pop()
    fv = vmap(f)
    if batch_size == 0 or batch_size >= n:
        return fv(xs)
    chunks, rest = divmod(n, batch_size)
    whole = chunks * batch_size
    scan_xs = [reshape(slice_in_dim(x, 0, whole), (chunks, batch_size) + a.shape[1:])
               for x, a in zip(leaves, avals)]  # fmt: skip
    _, ys = scan(lambda c, x: (c, fv(x)), (), pytree.tree_unflatten(tree, scan_xs))
    ys = pytree.tree_map(lambda y: reshape(y, (whole,) + get_aval(y).shape[2:]), ys)
    if not rest:
        return ys
    tail = fv(pytree.tree_unflatten(tree, [slice_in_dim(x, whole, n) for x in leaves]))
    return pytree.tree_map(lambda y, t: concatenate([y, t], 0), ys, tail)


def is_static_int(x: Any) -> bool:
    """True when ``x`` is a concrete integer (usable as a static trip count)."""
    if isinstance(x, Tracer):
        return False
    try:
        a = get_aval(x)
    except BluTypeError:
        return False
    return a.shape == () and (dtypes.is_int(a.dtype) or isinstance(x, int))
