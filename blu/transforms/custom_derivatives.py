"""``custom_jvp`` and ``custom_vjp``: user-defined derivative rules (as in JAX).

A call of a decorated function traces the function and its rules to jaxprs right away, under
the caller's interpreter, and binds one primitive holding them:

- ``custom_jvp_call``: operands ``f consts, jvp consts, args``; evaluates like ``f``; its JVP
  applies the rule (param ``jvp``) under the parent interpreter. A call made while its own
  rule is being traced (``f_jvp`` calling ``f``) holds a ``_DeferredJVP`` instead: the rule is
  applied when that call is differentiated, so every order applies the custom rule again.
- ``custom_vjp_call``: operands ``f consts, fwd consts, bwd consts, args``; its JVP runs ``fwd``
  and emits ``custom_lin``, a linear primitive of the tangents holding ``bwd`` and the
  residuals, whose transpose runs ``bwd``; forward mode cannot evaluate it and says so. A call
  of the function from its own ``fwd``/``bwd`` runs the function's body directly.

Tracing at the call makes closures work: a traced value the function or its rules close over
becomes an operand, which ``jit``, ``vmap`` and ``grad`` transform like any argument (with
respect to it, ``f`` gets ordinary autodiff). A deferred rule runs later, as JAX's rules do, so
what it closes over must still be valid then (concrete, or traced by a running transform).
All three primitives batch by the named rule: collectives inside see the vmap/shard axis name.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from blu.core import dtypes, pytree
from blu.core.errors import BluError, BluTypeError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.jaxpr import Jaxpr, eval_jaxpr
from blu.core.primitive import Primitive
from blu.transforms import ops
from blu.transforms.ad import jvp_flat
from blu.transforms.ad_util import Zero, add_tangents, instantiate, is_undefined, tangent_aval
from blu.transforms.batching import bdim_to_front, moveaxis, vmap
from blu.transforms.jaxpr_util import (
    batch_jaxpr,
    groups,
    run_jaxpr,
    trace_jaxpr,
    unbatched,
)

__all__ = ["custom_jvp", "custom_vjp", "CustomVJPForwardModeError"]


class CustomVJPForwardModeError(BluError, NotImplementedError):
    """Forward-mode differentiation reached a custom_vjp function."""


# ---- shared helpers ----------------------------------------------------------------------------


def _resolve_args(fun: Callable, args: tuple, kwargs: dict) -> tuple:
    """Keyword arguments become positional (the rules see one flat argument order)."""
    if not kwargs:
        return args
    try:
        bound = inspect.signature(fun).bind(*args, **kwargs)
    except TypeError as e:
        raise BluTypeError(with_user_line(f"{_name(fun)}: {e}")) from e
    bound.apply_defaults()
    if bound.kwargs:
        raise BluTypeError(
            with_user_line(f"{_name(fun)}: keyword-only arguments are not supported")
        )
    return tuple(bound.args)


def _name(fun: Callable) -> str:
    return getattr(fun, "__name__", "fun")


def _split_nondiff(args: tuple, nondiff: tuple[int, ...]):
    static = [(i, args[i]) for i in nondiff if i < len(args)]
    dyn = tuple(a for i, a in enumerate(args) if i not in nondiff)
    return static, dyn


def _with_static(static: list, dyn: Sequence[Any]) -> list:
    it = iter(dyn)
    n = len(static) + len(dyn)
    pos = dict(static)
    return [pos[i] if i in pos else next(it) for i in range(n)]


def _check_outputs(what: str, want_tree, want_avals, got_tree, got_avals, tangent: bool) -> None:
    if got_tree != want_tree:
        raise BluTypeError(
            with_user_line(
                f"{what} returned structure {got_tree}, but the function returns {want_tree}"
            )
        )
    for i, (w, g) in enumerate(zip(want_avals, got_avals)):
        w = tangent_aval(w) if tangent else w
        if w.shape != g.shape or (w.dtype != g.dtype and not g.weak_type):
            raise BluTypeError(
                with_user_line(
                    f"{what}: output leaf {i} is {g.str_short()} but the function's is "
                    f"{w.str_short()}; shapes and dtypes must match"
                )
            )


def _cast(x: Any, aval) -> Any:
    return ops.convert_element_type(x, aval.dtype) if get_aval(x).dtype != aval.dtype else x


# ---- custom_jvp --------------------------------------------------------------------------------

custom_jvp_call_p = Primitive("custom_jvp_call", multiple_results=True)


class _DeferredJVP:
    """The rule of a custom_jvp call made while its own rule was being traced: the user's rule,
    applied only when the call is differentiated, under the interpreter current then (so a rule
    calling its function applies the custom rule again at the next order)."""

    def __init__(self, cj: custom_jvp, static: list, in_tree, out_tree, out_avals: list):
        self.cj, self.static, self.in_tree = cj, static, in_tree
        self.out_tree, self.out_avals = out_tree, out_avals

    def apply(self, primals: Sequence[Any], tangents: Sequence[Any]) -> list[Any]:
        """Flat primal outputs then flat tangent outputs of the rule (checked and cast)."""
        cj, name = self.cj, _name(self.cj.fun)
        ps = pytree.tree_unflatten(self.in_tree, list(primals))
        ts = pytree.tree_unflatten(self.in_tree, list(tangents))
        res = cj.jvp(*[v for _, v in self.static], tuple(ps), tuple(ts))
        if not isinstance(res, (tuple, list)) or len(res) != 2:
            raise BluTypeError(
                with_user_line(f"custom_jvp {name}: the rule must return (primal_out, tangent_out)")
            )
        p_leaves, p_tree = pytree.tree_flatten(res[0])
        t_leaves, t_tree = pytree.tree_flatten(res[1])
        what = f"custom_jvp {name}: the JVP rule's"
        _check_outputs(f"{what} primal output", self.out_tree, self.out_avals, p_tree,
                       [get_aval(p) for p in p_leaves], False)  # fmt: skip
        _check_outputs(f"{what} tangent output", self.out_tree, self.out_avals, t_tree,
                       [get_aval(t) for t in t_leaves], True)  # fmt: skip
        return [_cast(p, a) for p, a in zip(p_leaves, self.out_avals)] + list(t_leaves)

    def __repr__(self) -> str:
        return f"<rule of {_name(self.cj.fun)}, applied when differentiated>"


class _BatchedJVP:
    """A deferred rule under vmap/shard: applied to whole batches (``in_axes`` per primal,
    the same for its tangent; ``out_axes`` per output, the same for its tangent), with the
    level's axis name for the collectives inside."""

    def __init__(self, inner: Any, axis_size: int, axis_name: Any, in_axes: list, out_axes: list):
        self.inner, self.axis_size, self.axis_name = inner, axis_size, axis_name
        self.in_axes, self.out_axes = tuple(in_axes) * 2, list(out_axes) * 2

    def apply(self, primals: Sequence[Any], tangents: Sequence[Any]) -> list[Any]:
        n = len(primals)
        per_lane = lambda *a: list(self.inner.apply(a[:n], a[n:]))  # noqa: E731
        return vmap(per_lane, self.in_axes, self.out_axes, self.axis_size, self.axis_name)(
            *primals, *tangents
        )

    def __repr__(self) -> str:
        return f"vmap({self.inner!r}, axis_name={self.axis_name!r})"


def _apply_jvp(jvp: Any, jconsts: Sequence[Any], primals: Sequence[Any], tangents: Sequence[Any]):
    """Run the rule: a traced jaxpr (consts first) or a deferred rule (no consts)."""
    if isinstance(jvp, Jaxpr):
        return eval_jaxpr(jvp, [], *jconsts, *primals, *tangents)
    return jvp.apply(primals, tangents)


@custom_jvp_call_p.def_abstract_eval
def _cj_abstract_eval(*avals, call_jaxpr, jvp, num_fconsts, num_jconsts, lowering_name=None):
    return call_jaxpr.out_avals


@custom_jvp_call_p.def_impl
def _cj_impl(*args, call_jaxpr, jvp, num_fconsts, num_jconsts, lowering_name=None):
    fc, _, xs = groups(args, num_fconsts, num_jconsts)
    return run_jaxpr(call_jaxpr, [*fc, *xs])


@custom_jvp_call_p.def_jvp
def _cj_jvp(primals, tangents, *, call_jaxpr, jvp, num_fconsts, num_jconsts,
            lowering_name=None):  # fmt: skip
    fc, jc, xs = groups(primals, num_fconsts, num_jconsts)
    t_fc, _, t_xs = groups(tangents, num_fconsts, num_jconsts)
    n = len(call_jaxpr.outvars)
    if all(isinstance(t, Zero) for t in t_xs):  # only closed-over values move
        p_out: list[Any] = eval_jaxpr(call_jaxpr, [], *fc, *xs)
        t_out: list[Any] = [Zero(tangent_aval(a)) for a in call_jaxpr.out_avals]
    else:
        # the user's rule (its closed-over values' own tangents would be second order: ignored)
        outs = _apply_jvp(jvp, jc, xs, [instantiate(t) for t in t_xs])
        p_out, t_out = outs[:n], outs[n:]
        t_out = [
            _cast(t, tangent_aval(a)) if dtypes.is_inexact(a.dtype) else Zero(tangent_aval(a))
            for t, a in zip(t_out, call_jaxpr.out_avals)
        ]
    if any(not isinstance(t, Zero) for t in t_fc):  # closed-over values: ordinary autodiff
        _, t_extra = jvp_flat(lambda *c: eval_jaxpr(call_jaxpr, [], *c, *xs), fc, list(t_fc))
        t_out = [add_tangents(a, b) for a, b in zip(t_out, t_extra)]
    return p_out, t_out


@custom_jvp_call_p.def_batch_named  # named: collectives in f or its rule see the axis name
def _cj_batch(axis_size, axis_name, args, dims, *, call_jaxpr, jvp, num_fconsts, num_jconsts,
              lowering_name=None):  # fmt: skip
    traced = isinstance(jvp, Jaxpr)
    named = {} if lowering_name is None else {"lowering_name": lowering_name}
    params = dict(call_jaxpr=call_jaxpr, jvp=jvp, num_fconsts=num_fconsts, num_jconsts=num_jconsts,
                  **named)  # fmt: skip
    # a deferred rule is Python code that may call collectives: it goes inside every named level
    if unbatched(axis_name, dims, [call_jaxpr, jvp] if traced else [call_jaxpr]) and (
        traced or axis_name is None
    ):
        outs = custom_jvp_call_p.bind(*args, **params)
        return outs, [None] * len(outs)
    fc, jc, xs = groups(args, num_fconsts, num_jconsts)
    fd, jd, xd = groups(dims, num_fconsts, num_jconsts)
    n = len(call_jaxpr.outvars)
    xs, xd = _front(xs, xd)
    if traced:  # batch only what depends on the batch (a tangent has its primal's batch axis)
        _, _, oc = batch_jaxpr(call_jaxpr, axis_size, fd + xd, False, axis_name)
        _, _, oj = batch_jaxpr(jvp, axis_size, jd + xd + xd, False, axis_name)
        out_b = [a is not None or b is not None or c is not None
                 for a, b, c in zip(oc, oj[:n], oj[n:])]  # fmt: skip
        call, c_consts, _ = batch_jaxpr(call_jaxpr, axis_size, fd + xd, out_b, axis_name)
        new_jvp, j_consts, _ = batch_jaxpr(jvp, axis_size, jd + xd + xd, out_b * 2, axis_name)
    else:  # the rule's outputs take f's batch axes
        call, c_consts, oc = batch_jaxpr(call_jaxpr, axis_size, fd + xd, False, axis_name)
        out_b = [d is not None for d in oc]
        new_jvp, j_consts = _BatchedJVP(jvp, axis_size, axis_name, xd, oc), []
    # (a named function keeps its name batched: it computes the same per element)
    outs = custom_jvp_call_p.bind(
        *c_consts, *fc, *j_consts, *jc, *xs,
        call_jaxpr=call, jvp=new_jvp,
        num_fconsts=len(c_consts) + len(fc), num_jconsts=len(j_consts) + len(jc), **named,
    )  # fmt: skip
    return outs, [0 if b else None for b in out_b]


def _front(xs: Sequence[Any], dims: Sequence[int | None]) -> tuple[list[Any], list[Any]]:
    """Batched operands with their batch axis moved to 0 (unbatched ones stay)."""
    xs = [x if d is None else moveaxis(x, d, 0) for x, d in zip(xs, dims)]
    return xs, [None if d is None else 0 for d in dims]


class custom_jvp:
    """A function with a user-defined JVP rule (``jax.custom_jvp``).

    Example::

        @blu.custom_jvp
        def softplus(x):
            return bnp.log1p(bnp.exp(x))

        @softplus.defjvp
        def softplus_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return softplus(x), t * blu.nn.sigmoid(x)

    The rule ``jvp(primals, tangents) -> (primal_out, tangent_out)`` gets tuples of the
    differentiable arguments and of their tangents (zeros where no tangent flows) and returns
    pytrees matching the function's output. Arguments listed in ``nondiff_argnums`` are passed
    first, unchanged: ``jvp(*nondiff_args, primals, tangents)``.

    Composes with ``jit``, ``vmap``, ``grad`` (reverse mode transposes the rule's linear part)
    and higher-order derivatives: the rule itself is differentiated, and where it calls the
    function (``softplus(x)`` above) that call is differentiated by the rule again.
    """

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp: Callable | None = None
        # a name a backend may recognize to compute the call by a library routine of the same
        # result (the CUDA plan fuses a "gelu_tanh" into the product before it): the calls'
        # ``lowering_name`` param; None: none
        self.lowering_name: str | None = None
        self._tracing_rule = 0  # > 0 while the rule is being traced (its own calls defer it)

    def defjvp(self, jvp: Callable) -> Callable:
        """Set the JVP rule; returns it (usable as a decorator)."""
        self.jvp = jvp
        return jvp

    def defjvps(self, *tangent_fns: Callable | None) -> None:
        """Set the rule from one function per differentiable argument: ``fn(t_i, primal_out,
        *primals)`` gives argument i's (linear) contribution to the output tangent; None means
        it has none. (Not with ``nondiff_argnums``.)"""

        def jvp(primals, tangents):
            out = self(*primals)
            total = None  # not out * 0: that is NaN where out is infinite (softplus(inf))
            for fn, t in zip(tangent_fns, tangents):
                if fn is not None:
                    c = fn(t, out, *primals)
                    total = c if total is None else pytree.tree_map(lambda a, b: a + b, total, c)
            if total is None:
                total = pytree.tree_map(lambda o: ops.zeros(tangent_aval(get_aval(o))), out)
            return out, total

        self.jvp = jvp

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.jvp is None:
            raise BluTypeError(
                with_user_line(f"custom_jvp {_name(self.fun)}: no JVP rule; call .defjvp first")
            )
        args = _resolve_args(self.fun, args, kwargs)
        static, dyn = _split_nondiff(args, self.nondiff_argnums)
        leaves, in_tree = pytree.tree_flatten(dyn)
        avals = [get_aval(x) for x in leaves]
        out_box: list = []

        def f_flat(*xs):
            out = self.fun(*_with_static(static, pytree.tree_unflatten(in_tree, list(xs))))
            out_leaves, out_tree = pytree.tree_flatten(out)
            out_box.append((out_tree, [get_aval(o) for o in out_leaves]))
            return out_leaves

        call_jaxpr, fconsts = trace_jaxpr(f_flat, avals)
        out_tree, out_avals = out_box[0]
        rule = _DeferredJVP(self, static, in_tree, out_tree, out_avals)
        jvp: Any = rule
        jconsts: list[Any] = []
        if not self._tracing_rule:  # else: called from its own rule, which applies it later
            n = len(leaves)
            self._tracing_rule += 1
            try:
                jvp, jconsts = trace_jaxpr(
                    lambda *a: rule.apply(a[:n], a[n:]),
                    avals + [tangent_aval(a) for a in avals],
                )
            finally:
                self._tracing_rule -= 1
        named = {} if self.lowering_name is None else {"lowering_name": self.lowering_name}
        outs = custom_jvp_call_p.bind(
            *fconsts, *jconsts, *leaves,
            call_jaxpr=call_jaxpr, jvp=jvp,
            num_fconsts=len(fconsts), num_jconsts=len(jconsts), **named,
        )  # fmt: skip
        return pytree.tree_unflatten(out_tree, outs)


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
    xs, xd = _front(xs, xd)
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

    def defvjp(self, fwd: Callable, bwd: Callable) -> None:
        """Set the forward function (``-> (out, residuals)``) and the backward function."""
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.fwd is None or self.bwd is None:
            raise BluTypeError(
                with_user_line(f"custom_vjp {_name(self.fun)}: no rule; call .defvjp first")
            )
        args = _resolve_args(self.fun, args, kwargs)
        if self._in_rule:  # called from its own fwd/bwd: the plain function
            return self.fun(*args)
        name = _name(self.fun)
        static, dyn = _split_nondiff(args, self.nondiff_argnums)
        leaves, in_tree = pytree.tree_flatten(dyn)
        avals = [get_aval(x) for x in leaves]
        box: dict = {}

        def f_flat(*xs):
            out = self.fun(*_with_static(static, pytree.tree_unflatten(in_tree, list(xs))))
            out_leaves, box["out_tree"] = pytree.tree_flatten(out)
            box["out_avals"] = [get_aval(o) for o in out_leaves]
            return out_leaves

        call_jaxpr, fconsts = trace_jaxpr(f_flat, avals)
        out_tree, out_avals = box["out_tree"], box["out_avals"]

        def fwd_flat(*xs):
            self._in_rule += 1
            try:
                res = self.fwd(*_with_static(static, pytree.tree_unflatten(in_tree, list(xs))))
            finally:
                self._in_rule -= 1
            if not isinstance(res, (tuple, list)) or len(res) != 2:
                raise BluTypeError(
                    with_user_line(f"custom_vjp {name}: fwd must return (output, residuals)")
                )
            p_leaves, p_tree = pytree.tree_flatten(res[0])
            _check_outputs(f"custom_vjp {name}: fwd's output", out_tree, out_avals, p_tree,
                           [get_aval(p) for p in p_leaves], False)  # fmt: skip
            r_leaves, box["res_tree"] = pytree.tree_flatten(res[1])
            return [_cast(p, a) for p, a in zip(p_leaves, out_avals)] + r_leaves

        fwd_jaxpr, wconsts = trace_jaxpr(fwd_flat, avals)
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

        bwd_jaxpr, bconsts = trace_jaxpr(
            bwd_flat, list(res_avals) + [tangent_aval(a) for a in out_avals]
        )
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
            out.append(_cast(c, a))
    return out
