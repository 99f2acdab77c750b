"""``custom_vjp``: a function with a user-defined VJP (``fwd``/``bwd``, as ``jax.custom_vjp``).

A call traces the function and its rules to jaxprs right away and binds ``custom_vjp_call``:
operands ``f consts, fwd consts, bwd consts, args``; its JVP runs ``fwd`` and emits
``custom_lin``, a linear primitive of the tangents holding ``bwd`` and the residuals, whose
transpose runs ``bwd``; forward mode cannot evaluate it and says so
(``CustomVJPForwardModeError``). A call of the function from its own ``fwd``/``bwd`` runs the
function's body directly. Both primitives batch by the named rule. The common design is in
``custom_derivatives.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from blu.core import dtypes, pytree
from blu.core.errors import BluError, BluTypeError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.jaxpr import Jaxpr, eval_jaxpr
from blu.core.primitive import Primitive
from blu.transforms import ops, vma
from blu.transforms.ad import jvp_flat
from blu.transforms.ad_util import Zero, add_tangents, instantiate, is_undefined, tangent_aval
from blu.transforms.batching import bdim_to_front
from blu.transforms.custom_common import (
    cast_to,
    check_outputs,
    check_rule,
    front,
    fun_name,
    positional_counts,
    refuse_symbolic_zeros,
    resolve_args,
    split_nondiff,
    with_static,
)
from blu.transforms.jaxpr_util import (
    batch_jaxpr,
    groups,
    run_jaxpr,
    trace_jaxpr,
    unbatched,
)

__all__ = ["custom_vjp", "CustomVJPForwardModeError"]


class CustomVJPForwardModeError(BluError, NotImplementedError):
    """Forward-mode differentiation reached a custom_vjp function."""


# ---- custom_vjp --------------------------------------------------------------------------------

custom_vjp_call_p = Primitive("custom_vjp_call", multiple_results=True)
custom_lin_p = Primitive("custom_lin", multiple_results=True)


@custom_vjp_call_p.def_abstract_eval
def _cv_abstract_eval(*avals, call_jaxpr, fwd_jaxpr, bwd_jaxpr, num_consts, num_res):
    return call_jaxpr.out_avals


@custom_vjp_call_p.def_impl
def _cv_impl(*args, call_jaxpr, fwd_jaxpr, bwd_jaxpr, num_consts, num_res):
    fc, _, _, xs = groups(args, *num_consts)
    return run_jaxpr(call_jaxpr, [*fc, *xs])


@custom_vjp_call_p.def_jvp
def _cv_jvp(primals, tangents, *, call_jaxpr, fwd_jaxpr, bwd_jaxpr, num_consts, num_res):
    fc, wc, bc, xs = groups(primals, *num_consts)
    t_fc, _, _, t_xs = groups(tangents, *num_consts)
    outs = eval_jaxpr(fwd_jaxpr, [], *wc, *xs)
    n = len(call_jaxpr.outvars)
    p_out, res = outs[:n], outs[n:]
    float_out = [dtypes.is_inexact(a.dtype) for a in call_jaxpr.out_avals]
    t_out: list[Any] = [Zero(tangent_aval(a)) for a in call_jaxpr.out_avals]
    if any(not isinstance(t, Zero) for t in t_xs):
        lin = custom_lin_p.bind(
            *res, *bc, *[instantiate(t) for t in t_xs],
            bwd_jaxpr=bwd_jaxpr, num_res=len(res), num_bconsts=len(bc),
            out_avals=tuple(tangent_aval(a) for a in call_jaxpr.out_avals),
        )  # fmt: skip
        t_out = [t if f else z for t, f, z in zip(lin, float_out, t_out)]
    if any(not isinstance(t, Zero) for t in t_fc):  # closed-over values: ordinary autodiff
        _, t_extra = jvp_flat(lambda *c: eval_jaxpr(call_jaxpr, [], *c, *xs), fc, list(t_fc))
        t_out = [add_tangents(a, b) for a, b in zip(t_out, t_extra)]
    return p_out, t_out


@custom_vjp_call_p.def_batch_named  # named: collectives in f, fwd or bwd see the axis name
def _cv_batch(
    axis_size, axis_name, args, dims, *, call_jaxpr, fwd_jaxpr, bwd_jaxpr, num_consts, num_res
):
    if unbatched(axis_name, dims, [call_jaxpr, fwd_jaxpr, bwd_jaxpr]):
        outs = custom_vjp_call_p.bind(
            *args, call_jaxpr=call_jaxpr, fwd_jaxpr=fwd_jaxpr, bwd_jaxpr=bwd_jaxpr,
            num_consts=num_consts, num_res=num_res,
        )  # fmt: skip
        return outs, [None] * len(outs)
    fc, wc, bc, xs = groups(args, *num_consts)
    fd, wd, bd, xd = groups(dims, *num_consts)
    xs, xd = front(xs, xd)
    n_out = len(call_jaxpr.outvars)
    # batch only what depends on the batch: outputs batched in f or in fwd
    _, _, oc = batch_jaxpr(call_jaxpr, axis_size, fd + xd, False, axis_name)
    _, _, ow = batch_jaxpr(fwd_jaxpr, axis_size, wd + xd, False, axis_name)
    out_b = [a is not None or b is not None for a, b in zip(oc, ow[:n_out])]
    call, c_consts, _ = batch_jaxpr(call_jaxpr, axis_size, fd + xd, out_b, axis_name)
    fwd, w_consts, rd = batch_jaxpr(
        fwd_jaxpr, axis_size, wd + xd, out_b + [False] * num_res, axis_name
    )
    ct_d = [0 if b else None for b in out_b]
    bwd, b_consts = _batch_bwd(bwd_jaxpr, axis_size, bd + rd[n_out:] + ct_d, xd, axis_name)
    fc, wc, bc = c_consts + fc, w_consts + wc, b_consts + bc
    outs = custom_vjp_call_p.bind(
        *fc, *wc, *bc, *xs,
        call_jaxpr=call, fwd_jaxpr=fwd, bwd_jaxpr=bwd,
        num_consts=(len(fc), len(wc), len(bc)), num_res=num_res,
    )  # fmt: skip
    return outs, ct_d


def _batch_bwd(bwd_jaxpr: Jaxpr, axis_size: int, in_dims: list, arg_dims: list, axis_name: Any):
    """``bwd`` batched, returning each argument's cotangent with the argument's batch axis: a
    per-lane cotangent of an unbatched argument (one value used by every lane) is summed."""
    bwd, consts, out_d = batch_jaxpr(bwd_jaxpr, axis_size, in_dims, False, axis_name)
    if out_d == arg_dims:
        return bwd, consts

    def fixed(*a):
        outs = eval_jaxpr(bwd, [], *a)
        return [
            o if d == want else ops.reduce_sum(o, (0,)) if want is None
            else bdim_to_front(o, None, axis_size)
            for o, d, want in zip(outs, out_d, arg_dims)
        ]  # fmt: skip

    new, more = trace_jaxpr(fixed, [v.aval for v in bwd.invars])
    return new, more + consts


@custom_lin_p.def_abstract_eval
def _lin_abstract_eval(*avals, bwd_jaxpr, num_res, num_bconsts, out_avals):
    return list(out_avals)


@custom_lin_p.def_impl
def _lin_impl(*args, bwd_jaxpr, num_res, num_bconsts, out_avals):
    raise CustomVJPForwardModeError(
        with_user_line(
            "forward-mode differentiation (jvp, jacfwd, linearize's jvp function) of a "
            "custom_vjp function is not supported: its rule only gives vector-Jacobian "
            "products. Use reverse mode (grad, vjp, jacrev), or define the function with "
            "blu.custom_jvp instead."
        )
    )


@custom_lin_p.def_transpose
def _lin_transpose(cts, *args, bwd_jaxpr, num_res, num_bconsts, out_avals):
    res, bc, xs = groups(args, num_res, num_bconsts)
    cts = [instantiate(c) for c in cts]
    ct_in = eval_jaxpr(bwd_jaxpr, [], *bc, *res, *cts)
    return [None] * (num_res + num_bconsts) + [
        c if is_undefined(x) else None for c, x in zip(ct_in, xs)
    ]


@custom_lin_p.def_batch_named  # named: collectives in bwd see the axis name
def _lin_batch(axis_size, axis_name, args, dims, *, bwd_jaxpr, num_res, num_bconsts, out_avals):
    if unbatched(axis_name, dims, [bwd_jaxpr]):
        outs = custom_lin_p.bind(*args, bwd_jaxpr=bwd_jaxpr, num_res=num_res,
                                 num_bconsts=num_bconsts, out_avals=out_avals)  # fmt: skip
        return outs, [None] * len(outs)
    res, bc, xs = groups(args, num_res, num_bconsts)
    rd, bd, xd = groups(dims, num_res, num_bconsts)
    # tangents and output tangents batched at 0; bwd maps batched cotangents to batched ones
    xs = [bdim_to_front(x, d, axis_size) for x, d in zip(xs, xd)]
    bwd, b_consts, _ = batch_jaxpr(
        bwd_jaxpr, axis_size, bd + rd + [0] * len(out_avals), True, axis_name
    )
    outs = custom_lin_p.bind(
        *res, *b_consts, *bc, *xs,
        bwd_jaxpr=bwd, num_res=num_res, num_bconsts=len(b_consts) + len(bc),
        out_avals=tuple(a.update(shape=(axis_size, *a.shape)) for a in out_avals),
    )  # fmt: skip
    return outs, [0] * len(outs)


class custom_vjp:
    """A function with a user-defined vector-Jacobian product (``jax.custom_vjp``).

    Example (a softplus whose gradient stays finite for large inputs)::

        @blu.custom_vjp
        def softplus(x):
            return bnp.logaddexp(x, 0.0)

        def fwd(x):
            return softplus(x), x          # (output, residuals)

        def bwd(x, g):
            return (g * blu.nn.sigmoid(x),)  # one cotangent per argument

        softplus.defvjp(fwd, bwd)

    ``fwd(*args) -> (out, residuals)`` runs in the forward pass (residuals: a pytree of
    arrays); ``bwd(residuals, ct_out) -> tuple`` returns one cotangent per differentiable
    argument (a pytree matching it, or None for zero). With ``nondiff_argnums`` those arguments
    are passed to ``fwd`` as usual and first to ``bwd``: ``bwd(*nondiff_args, res, g)``.

    Composes with ``jit``, ``vmap`` and reverse mode (``grad``, ``vjp``, ``jacrev``); forward
    mode raises ``CustomVJPForwardModeError``.
    """

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd: Callable | None = None
        self.bwd: Callable | None = None
        self._in_rule = 0

    def defvjp(self, fwd: Callable, bwd: Callable, symbolic_zeros: bool = False) -> None:
        """Set the forward function (``-> (out, residuals)``) and the backward function.

        ``symbolic_zeros`` (JAX's): only False, ``fwd`` gets the arguments themselves and
        ``bwd`` array cotangents, zeros where none flows.

        Raises:
            BluTypeError: ``fwd`` is not callable or cannot take the function's positional
                arguments, or ``bwd`` is not callable or cannot take
                ``len(nondiff_argnums) + 2``; the previous rules (if any) stay.
            BluValueError: ``symbolic_zeros=True`` (not in blu: the rules are traced when the
                function is called, before it is known which inputs are perturbed).
        """
        where = f"custom_vjp {fun_name(self.fun)}.defvjp"
        gets = "fwd gets the arguments, bwd array cotangents (zeros where none flows)"
        refuse_symbolic_zeros(where, symbolic_zeros, gets)
        counts = positional_counts(self.fun)
        check_rule(where, "fwd", fwd, counts, "the function's arguments")
        k = len(self.nondiff_argnums)
        takes = f"the {k} nondiff_argnums arguments, then (res, g)" if k else "(res, g)"
        check_rule(where, "bwd", bwd, [k + 2], takes)
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.fwd is None or self.bwd is None:
            raise BluTypeError(
                with_user_line(f"custom_vjp {fun_name(self.fun)}: no rule; call .defvjp first")
            )
        args = resolve_args(self.fun, args, kwargs)
        if self._in_rule:  # called from its own fwd/bwd: the plain function
            return self.fun(*args)
        name = fun_name(self.fun)
        static, dyn = split_nondiff(args, self.nondiff_argnums)
        leaves, in_tree = pytree.tree_flatten(dyn)
        avals = [get_aval(x) for x in leaves]
        box: dict = {}

        def f_flat(*xs):
            out = self.fun(*with_static(static, pytree.tree_unflatten(in_tree, list(xs))))
            out_leaves, box["out_tree"] = pytree.tree_flatten(out)
            box["out_avals"] = [get_aval(o) for o in out_leaves]
            return out_leaves

        # inside blu.shard, traced again knowing the arguments' variance where a cond in it
        # may let devices take different branches with collectives (vma.trace_knowing)
        trace = lambda fun: trace_jaxpr(fun, avals)  # noqa: E731
        arg_vmas = lambda: vma.arg_vmas(leaves)  # noqa: E731
        call_jaxpr, fconsts = vma.trace_knowing(trace, f_flat, arg_vmas)
        out_tree, out_avals = box["out_tree"], box["out_avals"]

        def fwd_flat(*xs):
            self._in_rule += 1
            try:
                res = self.fwd(*with_static(static, pytree.tree_unflatten(in_tree, list(xs))))
            finally:
                self._in_rule -= 1
            if not isinstance(res, (tuple, list)) or len(res) != 2:
                raise BluTypeError(
                    with_user_line(f"custom_vjp {name}: fwd must return (output, residuals)")
                )
            p_leaves, p_tree = pytree.tree_flatten(res[0])
            check_outputs(f"custom_vjp {name}: fwd's output", out_tree, out_avals, p_tree,
                           [get_aval(p) for p in p_leaves], False)  # fmt: skip
            r_leaves, box["res_tree"] = pytree.tree_flatten(res[1])
            return [cast_to(p, a) for p, a in zip(p_leaves, out_avals)] + r_leaves

        fwd_jaxpr, wconsts = vma.trace_knowing(trace, fwd_flat, arg_vmas)
        res_avals = fwd_jaxpr.out_avals[len(out_avals) :]
        res_tree = box["res_tree"]
        n_res = len(res_avals)

        def bwd_flat(*a):
            res = pytree.tree_unflatten(res_tree, list(a[:n_res]))
            ct = pytree.tree_unflatten(out_tree, list(a[n_res:]))
            self._in_rule += 1
            try:
                cts = self.bwd(*[v for _, v in static], res, ct)
            finally:
                self._in_rule -= 1
            return _flatten_bwd_output(name, cts, dyn, avals)

        def bwd_vmas() -> list | None:  # the residuals' and the cotangents' (as the outputs')
            ins = vma.arg_vmas([*wconsts, *leaves])
            outs = None if ins is None else vma.jaxpr_vmas(fwd_jaxpr, ins)
            return None if outs is None else outs[len(out_avals) :] + outs[: len(out_avals)]

        bwd_jaxpr, bconsts = vma.trace_knowing(
            lambda fun: trace_jaxpr(fun, list(res_avals) + [tangent_aval(a) for a in out_avals]),
            bwd_flat, bwd_vmas,
        )  # fmt: skip
        outs = custom_vjp_call_p.bind(
            *fconsts, *wconsts, *bconsts, *leaves,
            call_jaxpr=call_jaxpr, fwd_jaxpr=fwd_jaxpr, bwd_jaxpr=bwd_jaxpr,
            num_consts=(len(fconsts), len(wconsts), len(bconsts)), num_res=n_res,
        )  # fmt: skip
        return pytree.tree_unflatten(out_tree, outs)


def _flatten_bwd_output(name: str, cts: Any, dyn: tuple, avals: list) -> list[Any]:
    """bwd's tuple of cotangents as flat leaves of the arguments' tangent avals (None -> 0)."""
    if not isinstance(cts, (tuple, list)) or len(cts) != len(dyn):
        raise BluTypeError(
            with_user_line(
                f"custom_vjp {name}: bwd must return a tuple with one cotangent per "
                f"differentiable argument ({len(dyn)}), got {type(cts).__name__}"
                + (f" of length {len(cts)}" if isinstance(cts, (tuple, list)) else "")
            )
        )
    out = []
    it = iter(avals)
    for i, (ct, arg) in enumerate(zip(cts, dyn)):
        arg_leaves = pytree.tree_leaves(arg)
        if ct is None:
            for _ in arg_leaves:
                a = tangent_aval(next(it))
                out.append(ops.zeros(a))
            continue
        ct_leaves, ct_tree = pytree.tree_flatten(ct, is_leaf=lambda x: x is None)
        if ct_tree != pytree.tree_structure(arg, is_leaf=lambda x: x is None):
            raise BluTypeError(
                with_user_line(
                    f"custom_vjp {name}: bwd's cotangent {i} has structure {ct_tree} but the "
                    f"argument has {pytree.tree_structure(arg)}"
                )
            )
        for c in ct_leaves:
            a = tangent_aval(next(it))
            if c is None:
                out.append(ops.zeros(a))
                continue
            ca = get_aval(c)
            if ca.shape != a.shape:
                raise BluTypeError(
                    with_user_line(
                        f"custom_vjp {name}: bwd's cotangent {i} is {ca.str_short()} but the "
                        f"argument is {a.str_short()}"
                    )
                )
            out.append(cast_to(c, a))
    return out
