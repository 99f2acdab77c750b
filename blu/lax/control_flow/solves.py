"""``custom_root`` and ``custom_linear_solve`` (``jax.lax``'s): solvers differentiated
implicitly, never through their iterations.

``custom_root`` is a ``custom_jvp`` function (``blu.transforms.custom_jvp``) of the values that
``f``, ``solve`` and the tangent solve closed over, made explicit arguments, and of the initial
guess. Its rule is the implicit function theorem: at the root ``x*`` of ``f_p(x) = 0``,
``dx* = -(∂f/∂x)^{-1} (∂f/∂p)[dp]``, the inverse applied by ``tangent_solve`` on ``f``'s
linearization at ``x*``; the guess has no tangent (as JAX's ``_root_jvp``).

``custom_linear_solve`` binds ``linear_solve_p`` (JAX's, printed ``custom_linear_solve``): operands
``matvec consts, vecmat consts, solve consts, transpose_solve consts, b``; params ``jaxprs``
(those four, ``vecmat`` and ``transpose_solve`` None when not given) and ``const_lengths``. It
evaluates like ``solve(matvec, b)``. Its JVP is ``dx = solve(matvec, db - dmatvec[x])`` (the
primitive again, now on the tangent); it is linear in ``b``, and its transpose is the primitive
with the roles swapped: ``transpose_solve(vecmat, ct)``. So reverse mode never transposes the
solver itself. A custom_jvp/custom_vjp pair cannot give that: the linear tangent call must have
its own transpose rule. It batches by batching all four jaxprs (``b`` and ``x`` batched
together); compiled programs inline ``solve`` (its decomposition).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blu.core import dtypes, pytree
from blu.core.errors import BluTypeError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.jaxpr import eval_jaxpr
from blu.core.primitive import Primitive
from blu.lax.casts import convert_element_type
from blu.lax.elementwise import neg
from blu.transforms import ops
from blu.transforms.ad import backward_pass, jvp_flat
from blu.transforms.ad_api import linearize
from blu.transforms.ad_util import (
    UndefinedPrimal,
    Zero,
    add_tangents,
    instantiate,
    is_undefined,
    tangent_aval,
)
from blu.transforms.batching import bdim_to_front
from blu.transforms.custom_jvp import custom_jvp
from blu.transforms.jaxpr_util import (
    batch_jaxpr,
    check_same_types,
    flatten_avals,
    groups,
    run_jaxpr,
    trace_jaxpr,
    unbatched,
)

__all__ = ["custom_root", "custom_linear_solve"]


def _aux_split(where: str, name: str, out: Any, has_aux: bool) -> tuple[Any, Any]:
    if not has_aux:
        return out, None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise BluTypeError(
            with_user_line(f"{where}: with has_aux=True, {name} must return a pair (x, aux)")
        )
    return out[0], out[1]


def _like(where: str, name: str, what: str, out: Any, tree: Any, pairs: list) -> list[Any]:
    """``out``'s leaves, checked to have ``what``'s structure, shapes and dtypes (a weakly typed
    leaf of another dtype is cast)."""
    got_pairs, got_tree = flatten_avals(out)
    leaves = pytree.tree_leaves(out)
    avals = [a for _, a in pairs]
    cast = check_same_types(where, f"{name}'s output", what, got_tree, got_pairs, tree, avals)
    return [convert_element_type(x, avals[i].dtype) if i in cast else x
            for i, x in enumerate(leaves)]  # fmt: skip


# ---- custom_root -------------------------------------------------------------------------------


def custom_root(
    f: Callable, initial_guess: Any, solve: Callable, tangent_solve: Callable, has_aux: bool = False
) -> Any:
    """The root of ``f`` found by ``solve``, differentiated implicitly (``jax.lax.custom_root``).

    Args:
        f: ``x -> y``, ``y`` with ``initial_guess``'s structure, shapes and dtypes; the root is
            where it is zero. Arrays it closes over are the parameters the root is
            differentiated by.
        initial_guess: a pytree of arrays, where ``solve`` starts.
        solve: ``solve(f, initial_guess) -> x`` (``(x, aux)`` with ``has_aux``), ``x`` like the
            guess. It is run, never differentiated.
        tangent_solve: ``tangent_solve(g, y) -> t`` solving the linear system ``g(t) = y``,
            ``g`` being ``f``'s linearization at the root (for a scalar ``f``,
            ``lambda g, y: y / g(1.0)``). It must be linear in ``y`` for reverse mode.
        has_aux: ``solve`` also returns auxiliary data, returned undifferentiated.

    Returns:
        ``solve(f, initial_guess)``. Its derivatives follow the implicit function theorem:
        ``dx = -tangent_solve(∂f/∂x, (∂f/∂p)[dp])`` at the root; none by ``initial_guess``.

    Raises:
        BluTypeError: ``f``, ``solve`` or ``tangent_solve`` gives a result whose structure,
            shapes or dtypes are not the guess's, or with ``has_aux`` ``solve`` gives no pair.
    """
    where = "custom_root"
    pairs, tree = flatten_avals(initial_guess)
    pairs = [(k, a.strip_weak_type()) for k, a in pairs]
    guess = pytree.tree_leaves(initial_guess)
    avals = [a for _, a in pairs]
    guess = [convert_element_type(x, a.dtype) for x, a in zip(guess, avals)]
    n = len(guess)
    aux_box: list = []

    def f_flat(*xs):
        out = f(pytree.tree_unflatten(tree, list(xs)))
        return _like(where, "f", "initial_guess", out, tree, pairs)

    def solve_flat(*xs):
        out = solve(f, pytree.tree_unflatten(tree, list(xs)))
        x, aux = _aux_split(where, "solve", out, has_aux)
        aux_leaves, aux_tree = pytree.tree_flatten(aux)
        aux_box.append(aux_tree)
        return _like(where, "solve", "initial_guess", x, tree, pairs) + aux_leaves

    def lin_solve_flat(*a):
        x = pytree.tree_unflatten(tree, list(a[:n]))
        _, f_jvp = linearize(f, x)

        def g(t):  # a Python scalar tangent (``g(1.0)``) takes its primal's dtype
            leaves = pytree.tree_leaves(t)
            if len(leaves) != n:
                raise BluTypeError(
                    with_user_line(f"{where}: tangent_solve's linear map takes a tangent like "
                                   f"initial_guess ({n} leaves), got {len(leaves)}")
                )  # fmt: skip
            cast = [convert_element_type(v, av.dtype) for v, av in zip(leaves, avals)]
            return f_jvp(pytree.tree_unflatten(tree, cast))

        t = tangent_solve(g, pytree.tree_unflatten(tree, list(a[n:])))
        return _like(where, "tangent_solve", "initial_guess", t, tree, pairs)

    f_jaxpr, f_consts = trace_jaxpr(f_flat, avals)
    solve_jaxpr, solve_consts = trace_jaxpr(solve_flat, avals)
    ls_jaxpr, ls_consts = trace_jaxpr(lin_solve_flat, avals * 2)
    sizes = (len(f_consts), len(solve_consts), len(ls_consts))

    def root(*args):
        _, sc, _, g = groups(args, *sizes)
        return eval_jaxpr(solve_jaxpr, [], *sc, *g)

    root = custom_jvp(root)

    @root.defjvp
    def _root_jvp(primals, tangents):
        fc, _, lc, _ = groups(primals, *sizes)
        t_fc = [t if dtypes.is_inexact(get_aval(p).dtype) else Zero(tangent_aval(get_aval(p)))
                for p, t in zip(fc, tangents[: sizes[0]])]  # fmt: skip
        sol = root(*primals)
        x, aux = list(sol[:n]), list(sol[n:])
        # f(p, x*(p)) = 0  =>  ∂f/∂x dx* = -∂f/∂p dp
        _, rhs = jvp_flat(lambda *c: eval_jaxpr(f_jaxpr, [], *c, *x), fc, t_fc)
        rhs = [instantiate(r) for r in rhs]
        x_dot = [neg(d) for d in eval_jaxpr(ls_jaxpr, [], *lc, *x, *rhs)]
        aux_dot = [ops.zeros(tangent_aval(get_aval(a))) for a in aux]
        return sol, x_dot + aux_dot

    out = root(*f_consts, *solve_consts, *ls_consts, *guess)
    x = pytree.tree_unflatten(tree, list(out[:n]))
    if has_aux:
        return x, pytree.tree_unflatten(aux_box[0], list(out[n:]))
    return x


# ---- custom_linear_solve -----------------------------------------------------------------------

linear_solve_p = Primitive("custom_linear_solve", multiple_results=True)


@linear_solve_p.def_abstract_eval
def _ls_abstract_eval(*avals, const_lengths, jaxprs):
    nb = len(avals) - sum(const_lengths)
    b = avals[sum(const_lengths) :]
    return [a.strip_weak_type() for a in b] + list(jaxprs[2].out_avals[nb:])


@linear_solve_p.def_impl
def _ls_impl(*args, const_lengths, jaxprs):
    _, _, sc, _, b = groups(args, *const_lengths)
    return run_jaxpr(jaxprs[2], [*sc, *b])


def _ls_decomposition(*args, const_lengths, jaxprs):
    _, _, sc, _, b = groups(args, *const_lengths)
    return eval_jaxpr(jaxprs[2], [], *sc, *b)


linear_solve_p.decomposition = _ls_decomposition


@linear_solve_p.def_jvp
def _ls_jvp(primals, tangents, *, const_lengths, jaxprs):
    # A x = b  =>  dA x + A dx = db  =>  dx = A^{-1} (db - dA x)
    params = dict(const_lengths=const_lengths, jaxprs=jaxprs)
    x = linear_solve_p.bind(*primals, **params)
    mc, _, _, _, b = groups(primals, *const_lengths)
    t_mc = groups(tangents, const_lengths[0])[0]
    t_b = list(tangents[sum(const_lengths) :])
    nb = len(b)
    rhs = [t if dtypes.is_inexact(get_aval(p).dtype) else Zero(tangent_aval(get_aval(p)))
           for p, t in zip(b, t_b)]  # fmt: skip
    t_mc = [t if dtypes.is_inexact(get_aval(p).dtype) else Zero(tangent_aval(get_aval(p)))
            for p, t in zip(mc, t_mc)]  # fmt: skip
    if any(not isinstance(t, Zero) for t in t_mc):
        _, mt = jvp_flat(lambda *c: eval_jaxpr(jaxprs[0], [], *c, *x[:nb]), mc, t_mc)
        rhs = [r if isinstance(m, Zero) else add_tangents(r, neg(m)) for r, m in zip(rhs, mt)]
    out_avals = _ls_abstract_eval(*[get_aval(p) for p in primals], **params)
    zeros = [Zero(tangent_aval(a)) for a in out_avals]
    if all(isinstance(r, Zero) for r in rhs):
        return x, zeros
    consts = primals[: sum(const_lengths)]
    x_dot = linear_solve_p.bind(*consts, *[instantiate(r) for r in rhs], **params)
    return x, list(x_dot[:nb]) + zeros[nb:]  # no tangent for the aux outputs


@linear_solve_p.def_transpose
def _ls_transpose(cts, *args, const_lengths, jaxprs):
    matvec, vecmat, solve, tr_solve = jaxprs
    if tr_solve is None:
        raise BluTypeError(
            with_user_line(
                "custom_linear_solve: reverse-mode differentiation (grad, vjp, transpose) needs "
                "transpose_solve, or symmetric=True for a symmetric linear map; got neither"
            )
        )
    nc = sum(const_lengths)
    if any(is_undefined(c) for c in args[:nc]):
        raise BluTypeError(
            with_user_line("custom_linear_solve: not linear in the values its functions close over")
        )
    mc, vc, sc, tc, b = groups(args, *const_lengths)
    nb = len(b)
    b_avals = [x.aval if is_undefined(x) else get_aval(x) for x in b]
    ct_x = [instantiate(c) if not isinstance(c, Zero) else ops.zeros(tangent_aval(a))
            for c, a in zip(cts[:nb], b_avals)]  # fmt: skip
    m, v, s, t = const_lengths
    ct_b = linear_solve_p.bind(
        *vc, *mc, *tc, *sc, *ct_x,
        const_lengths=(v, m, t, s), jaxprs=(vecmat, matvec, tr_solve, solve),
    )  # fmt: skip
    return [None] * nc + [c if is_undefined(x) else None for c, x in zip(ct_b[:nb], b)]


@linear_solve_p.def_batch_named  # named: collectives inside see the axis name
def _ls_batch(axis_size, axis_name, args, dims, *, const_lengths, jaxprs):
    present = [j for j in jaxprs if j is not None]
    if unbatched(axis_name, dims, present):
        outs = linear_solve_p.bind(*args, const_lengths=const_lengths, jaxprs=jaxprs)
        return outs, [None] * len(outs)
    *cs, b = groups(args, *const_lengths)
    *cds, bd = groups(dims, *const_lengths)
    # x and b batched together (the solve's output is the matvec's input and output)
    b = [bdim_to_front(x, d, axis_size) for x, d in zip(b, bd)]
    new_jaxprs, new_consts, lengths = [], [], []
    for j, c, cd in zip(jaxprs, cs, cds):
        if j is None:
            new_jaxprs.append(None)
            lengths.append(0)
            continue
        nj, extra, _ = batch_jaxpr(j, axis_size, list(cd) + [0] * len(b), True, axis_name)
        new_jaxprs.append(nj)
        new_consts += [*extra, *c]
        lengths.append(len(extra) + len(c))
    outs = linear_solve_p.bind(
        *new_consts, *b, const_lengths=tuple(lengths), jaxprs=tuple(new_jaxprs)
    )
    return outs, [0] * len(outs)


def _vecmat_flat(matvec_jaxpr: Any, n_consts: int, b_avals: list) -> Callable:
    """The transpose of the linear ``matvec`` (JAX's ``linear_transpose``), flat."""

    def vecmat(*a):
        consts, cts = a[:n_consts], a[n_consts:]
        args = [*consts, *[UndefinedPrimal(av) for av in b_avals]]
        out = backward_pass(matvec_jaxpr, [], args, list(cts))[n_consts:]
        return [instantiate(o) if not isinstance(o, Zero) else ops.zeros(av)
                for o, av in zip(out, b_avals)]  # fmt: skip

    return vecmat


def custom_linear_solve(
    matvec: Callable,
    b: Any,
    solve: Callable,
    transpose_solve: Callable | None = None,
    symmetric: bool = False,
    has_aux: bool = False,
) -> Any:
    """``x`` with ``matvec(x) == b``, by ``solve``, differentiated implicitly
    (``jax.lax.custom_linear_solve``).

    Args:
        matvec: the linear map ``x -> A x``, ``x`` and ``A x`` pytrees like ``b``. Arrays it
            closes over (``A``) are differentiated through it.
        b: the right-hand side, a pytree of arrays.
        solve: ``solve(matvec, b) -> x`` (``(x, aux)`` with ``has_aux``), ``x`` like ``b``.
            Run, never differentiated.
        transpose_solve: ``transpose_solve(vecmat, b) -> x`` solving with the transposed map
            ``vecmat``, for reverse mode. Not needed with ``symmetric=True``.
        symmetric: the map is symmetric: ``solve`` serves as ``transpose_solve``.
        has_aux: ``solve`` (and ``transpose_solve``) also return auxiliary data.

    Returns:
        ``solve(matvec, b)`` (with its aux as ``(x, aux)``). Its JVP solves
        ``A dx = db - dA x`` with ``solve``; its transpose (grad, vjp) solves with
        ``transpose_solve``. The aux outputs have no derivative.

    Raises:
        BluTypeError: ``matvec``, ``solve`` or ``transpose_solve`` gives a result whose
            structure, shapes or dtypes are not ``b``'s; reverse mode with neither
            ``transpose_solve`` nor ``symmetric=True``.
    """
    where = "custom_linear_solve"
    if transpose_solve is None and symmetric:
        transpose_solve = solve
    pairs, tree = flatten_avals(b)
    pairs = [(k, a.strip_weak_type()) for k, a in pairs]
    avals = [a for _, a in pairs]
    b_leaves = [convert_element_type(x, a.dtype) for x, a in zip(pytree.tree_leaves(b), avals)]
    aux_box: list = []

    def matvec_flat(*xs):
        return _like(where, "matvec", "b", matvec(pytree.tree_unflatten(tree, list(xs))), tree,
                     pairs)  # fmt: skip

    def solver_flat(name: str, fun: Callable, lin: Callable) -> Callable:
        def flat(*xs):
            out = fun(lin, pytree.tree_unflatten(tree, list(xs)))
            x, aux = _aux_split(where, name, out, has_aux)
            aux_leaves, aux_tree = pytree.tree_flatten(aux)
            aux_box.append(aux_tree)
            return _like(where, name, "b", x, tree, pairs) + aux_leaves

        return flat

    matvec_jaxpr, matvec_consts = trace_jaxpr(matvec_flat, avals)
    solve_jaxpr, solve_consts = trace_jaxpr(solver_flat("solve", solve, matvec), avals)
    aux_tree = aux_box[0]
    vecmat_jaxpr = tr_jaxpr = None
    vecmat_consts: list[Any] = []
    tr_consts: list[Any] = []
    if transpose_solve is not None:
        if symmetric:
            vecmat_jaxpr, vecmat_consts = matvec_jaxpr, matvec_consts
            vecmat = matvec
        else:
            n_mc = len(matvec_consts)
            flat = _vecmat_flat(matvec_jaxpr, n_mc, [tangent_aval(a) for a in avals])
            vecmat_jaxpr, vecmat_consts = trace_jaxpr(lambda *ct: flat(*matvec_consts, *ct), avals)

            def vecmat(ct):
                out = flat(*matvec_consts, *pytree.tree_leaves(ct))
                return pytree.tree_unflatten(tree, out)

        tr_jaxpr, tr_consts = trace_jaxpr(
            solver_flat("transpose_solve", transpose_solve, vecmat), avals
        )
    lengths = (len(matvec_consts), len(vecmat_consts), len(solve_consts), len(tr_consts))
    outs = linear_solve_p.bind(
        *matvec_consts, *vecmat_consts, *solve_consts, *tr_consts, *b_leaves,
        const_lengths=lengths, jaxprs=(matvec_jaxpr, vecmat_jaxpr, solve_jaxpr, tr_jaxpr),
    )  # fmt: skip
    x = pytree.tree_unflatten(tree, list(outs[: len(b_leaves)]))
    if has_aux:
        return x, pytree.tree_unflatten(aux_tree, list(outs[len(b_leaves) :]))
    return x
