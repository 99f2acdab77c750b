"""``custom_jvp`` and ``custom_vjp``: user-defined derivative rules (as in JAX).

A call of a decorated function traces the function *and* its rules to jaxprs right away, under
the caller's interpreter, and binds one primitive holding them:

- ``custom_jvp_call``: operands ``f consts, jvp consts, args``; it evaluates like ``f``; its JVP
  evaluates the user's rule (``jvp_jaxpr``) instead of differentiating ``f``.
- ``custom_vjp_call``: operands ``f consts, fwd consts, bwd consts, args``; its JVP runs ``fwd``
  and emits ``custom_lin``, a linear primitive of the tangents that holds ``bwd`` and the
  residuals; transposing ``custom_lin`` runs ``bwd``. Forward mode alone (``jvp``) cannot
  evaluate ``custom_lin`` and says so.

Tracing the rules eagerly makes closures work: a traced value the function or its rules close
over becomes an operand, so ``jit``, ``vmap`` and ``grad`` transform it like any argument.
Differentiating with respect to a value ``f`` closes over uses ordinary autodiff of ``f`` for
that part (the custom rule covers the explicit arguments). A call of the function from inside
its own rule (``f_fwd`` calling ``f``) runs ``f``'s body directly.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from blu.core import dtypes, pytree
from blu.core.errors import BluError, BluTypeError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.jaxpr import eval_jaxpr
from blu.core.primitive import Primitive
from blu.lax.control_flow.jaxpr_util import batch_jaxpr, groups, run_jaxpr, trace_jaxpr
from blu.transforms.ad_util import Zero, add_tangents, instantiate, is_undefined, tangent_aval

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
    from blu import lax

    return lax.convert_element_type(x, aval.dtype) if get_aval(x).dtype != aval.dtype else x


# ---- custom_jvp --------------------------------------------------------------------------------

custom_jvp_call_p = Primitive("custom_jvp_call", multiple_results=True)


@custom_jvp_call_p.def_abstract_eval
def _cj_abstract_eval(*avals, call_jaxpr, jvp_jaxpr, num_fconsts, num_jconsts):
    return call_jaxpr.out_avals


@custom_jvp_call_p.def_impl
def _cj_impl(*args, call_jaxpr, jvp_jaxpr, num_fconsts, num_jconsts):
    fc, _, xs = groups(args, num_fconsts, num_jconsts)
    return run_jaxpr(call_jaxpr, [*fc, *xs])


@custom_jvp_call_p.def_jvp
def _cj_jvp(primals, tangents, *, call_jaxpr, jvp_jaxpr, num_fconsts, num_jconsts):
    from blu.transforms.ad import jvp_flat

    fc, jc, xs = groups(primals, num_fconsts, num_jconsts)
    t_fc, _, t_xs = groups(tangents, num_fconsts, num_jconsts)
    # the user's rule (its closed-over values' own tangents would be second order: ignored)
    t_in = [instantiate(t) for t in t_xs]
    outs = eval_jaxpr(jvp_jaxpr, [], *jc, *xs, *t_in)
    n = len(call_jaxpr.outvars)
    p_out, t_out = outs[:n], outs[n:]
    t_out = [
        _cast(t, tangent_aval(a)) if dtypes.is_float(a.dtype) else Zero(tangent_aval(a))
        for t, a in zip(t_out, call_jaxpr.out_avals)
    ]
    if any(not isinstance(t, Zero) for t in t_fc):  # closed-over values: ordinary autodiff
        _, t_extra = jvp_flat(lambda *c: eval_jaxpr(call_jaxpr, [], *c, *xs), fc, list(t_fc))
        t_out = [add_tangents(a, b) for a, b in zip(t_out, t_extra)]
    return p_out, t_out


@custom_jvp_call_p.def_batch
def _cj_batch(axis_size, args, dims, *, call_jaxpr, jvp_jaxpr, num_fconsts, num_jconsts):
    from blu.transforms.batching import bdim_to_front

    fc, jc, xs = groups(args, num_fconsts, num_jconsts)
    fd, jd, xd = groups(dims, num_fconsts, num_jconsts)
    # every argument batched at 0, so tangents (same shapes as the args) are batched at 0 too
    xs = [bdim_to_front(x, d, axis_size) for x, d in zip(xs, xd)]
    x0 = [0] * len(xs)
    call, c_consts, _ = batch_jaxpr(call_jaxpr, axis_size, fd + x0, True)
    jvp, j_consts, _ = batch_jaxpr(jvp_jaxpr, axis_size, jd + x0 + x0, True)
    outs = custom_jvp_call_p.bind(
        *c_consts, *fc, *j_consts, *jc, *xs,
        call_jaxpr=call, jvp_jaxpr=jvp,
        num_fconsts=len(c_consts) + len(fc), num_jconsts=len(j_consts) + len(jc),
    )  # fmt: skip
    return outs, [0] * len(outs)


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
    and higher-order derivatives (the rule itself is differentiated).
    """

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp: Callable | None = None
        self._in_rule = 0

    def defjvp(self, jvp: Callable) -> Callable:
        """Set the JVP rule; returns it (usable as a decorator)."""
        self.jvp = jvp
        return jvp

    def defjvps(self, *tangent_fns: Callable | None) -> None:
        """Set the rule from one function per differentiable argument: ``fn(t_i, primal_out,
        *primals)`` gives argument i's (linear) contribution to the output tangent; None means
        it has none. (Not with ``nondiff_argnums``.)"""

        def jvp(primals, tangents):
            out = self.fun(*primals)
            total = pytree.tree_map(lambda o: o * 0, out)
            for fn, t in zip(tangent_fns, tangents):
                if fn is not None:
                    total = pytree.tree_map(lambda a, b: a + b, total, fn(t, out, *primals))
            return out, total

        self.jvp = jvp

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.jvp is None:
            raise BluTypeError(
                with_user_line(f"custom_jvp {_name(self.fun)}: no JVP rule; call .defjvp first")
            )
        args = _resolve_args(self.fun, args, kwargs)
        if self._in_rule:  # called from its own rule: the plain function
            return self.fun(*args)
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
        n = len(leaves)

        def jvp_flat(*a):
            primals = pytree.tree_unflatten(in_tree, list(a[:n]))
            tangents = pytree.tree_unflatten(in_tree, list(a[n:]))
            self._in_rule += 1
            try:
                res = self.jvp(*[v for _, v in static], tuple(primals), tuple(tangents))
            finally:
                self._in_rule -= 1
            if not isinstance(res, (tuple, list)) or len(res) != 2:
                raise BluTypeError(
                    with_user_line(
                        f"custom_jvp {_name(self.fun)}: the rule must return "
                        "(primal_out, tangent_out)"
                    )
                )
            p_leaves, p_tree = pytree.tree_flatten(res[0])
            t_leaves, t_tree = pytree.tree_flatten(res[1])
            what = f"custom_jvp {_name(self.fun)}: the JVP rule's"
            _check_outputs(f"{what} primal output", out_tree, out_avals, p_tree,
                           [get_aval(p) for p in p_leaves], False)  # fmt: skip
            _check_outputs(f"{what} tangent output", out_tree, out_avals, t_tree,
                           [get_aval(t) for t in t_leaves], True)  # fmt: skip
            return [_cast(p, a) for p, a in zip(p_leaves, out_avals)] + list(t_leaves)

        jvp_jaxpr, jconsts = trace_jaxpr(jvp_flat, avals + [tangent_aval(a) for a in avals])
        outs = custom_jvp_call_p.bind(
            *fconsts, *jconsts, *leaves,
            call_jaxpr=call_jaxpr, jvp_jaxpr=jvp_jaxpr,
            num_fconsts=len(fconsts), num_jconsts=len(jconsts),
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
    from blu.transforms.ad import jvp_flat

    fc, wc, bc, xs = groups(primals, *num_consts)
    t_fc, _, _, t_xs = groups(tangents, *num_consts)
    outs = eval_jaxpr(fwd_jaxpr, [], *wc, *xs)
    n = len(call_jaxpr.outvars)
    p_out, res = outs[:n], outs[n:]
    float_out = [dtypes.is_float(a.dtype) for a in call_jaxpr.out_avals]
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


@custom_vjp_call_p.def_batch
def _cv_batch(axis_size, args, dims, *, call_jaxpr, fwd_jaxpr, bwd_jaxpr, num_consts, num_res):
    from blu.transforms.batching import bdim_to_front

    fc, wc, bc, xs = groups(args, *num_consts)
    fd, wd, bd, xd = groups(dims, *num_consts)
    # every argument batched at 0: the cotangents bwd returns are then per lane, and the sum
    # over lanes of an unbatched argument is the transpose of this broadcast
    xs = [bdim_to_front(x, d, axis_size) for x, d in zip(xs, xd)]
    x0 = [0] * len(xs)
    call, c_consts, _ = batch_jaxpr(call_jaxpr, axis_size, fd + x0, True)
    fwd, w_consts, _ = batch_jaxpr(fwd_jaxpr, axis_size, wd + x0, True)
    n_out = len(call_jaxpr.outvars)
    bwd, b_consts, _ = batch_jaxpr(bwd_jaxpr, axis_size, bd + [0] * (num_res + n_out), True)
    fc, wc, bc = c_consts + fc, w_consts + wc, b_consts + bc
    outs = custom_vjp_call_p.bind(
        *fc, *wc, *bc, *xs,
        call_jaxpr=call, fwd_jaxpr=fwd, bwd_jaxpr=bwd,
        num_consts=(len(fc), len(wc), len(bc)), num_res=num_res,
    )  # fmt: skip
    return outs, [0] * len(outs)


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


@custom_lin_p.def_batch
def _lin_batch(axis_size, args, dims, **params):
    return _lin_impl(*args, **params), None


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
    from blu import lax

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
                out.append(lax.full(a.shape, 0, a.dtype))
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
                out.append(lax.full(a.shape, 0, a.dtype))
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
