"""``custom_jvp``: a function with a user-defined JVP rule (as ``jax.custom_jvp``).

A call traces the function and its rule to jaxprs right away, under the caller's interpreter,
and binds ``custom_jvp_call``: operands ``f consts, jvp consts, args``; it evaluates like ``f``;
its JVP applies the rule (param ``jvp``) under the parent interpreter. A call made while its
own rule is being traced or applied (``f_jvp`` calling ``f``) holds a ``_DeferredJVP`` instead:
the rule is applied when that call is differentiated, so every order applies the custom rule
again, and a rule calling the next order (``f(k + 1)``) traces only the orders taken. The
primitive batches by the named rule. The common design is in ``custom_derivatives.py``.

An eager call (at the root, no tracer among its operands) gives a value no transform can
differentiate, so its rule is only checked: traced at the first call of a signature (nondiff
arguments of plain Python kinds, avals and structures in and out, the flags' generation) and
skipped at the next ones, which bind the deferred rule; a rule that raised is traced again at
every call, so its error stays eager. (JAX traces the rule only when differentiated; tracing it
each time was most of an eager ``betainc``'s cost.)

Reverse mode needs no transpose rule: ``linearize`` runs the JVP rule with known primals and
unknown tangents, so the rule's tangent part is staged as ordinary primitives. A call that is
itself unknown there (a rule applying the function to its tangents, ``f(t)``, or any call on a
tangent) is only ever part of the linear jaxpr, so partial evaluation inlines its function: its
custom rule is not needed any more (JAX's ``JaxprTrace.process_custom_jvp_call`` does the same).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from blu.core import dtypes, pytree
from blu.core.config import config
from blu.core.errors import BluTypeError, with_user_line
from blu.core.interpreter import Tracer, at_root, get_aval, set_interpreter
from blu.core.jaxpr import Jaxpr, eval_jaxpr
from blu.core.primitive import Primitive
from blu.transforms import ops, vma
from blu.transforms.ad import jvp_flat
from blu.transforms.ad_util import Zero, add_tangents, instantiate, tangent_aval
from blu.transforms.batching import vmap
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

__all__ = ["custom_jvp"]


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
        cj, name = self.cj, fun_name(self.cj.fun)
        ps = pytree.tree_unflatten(self.in_tree, list(primals))
        ts = pytree.tree_unflatten(self.in_tree, list(tangents))
        cj._tracing_rule += 1  # its own calls in it defer their rules again
        try:
            res = cj.jvp(*[v for _, v in self.static], tuple(ps), tuple(ts))
        finally:
            cj._tracing_rule -= 1
        if not isinstance(res, (tuple, list)) or len(res) != 2:
            raise BluTypeError(
                with_user_line(f"custom_jvp {name}: the rule must return (primal_out, tangent_out)")
            )
        p_leaves, p_tree = pytree.tree_flatten(res[0])
        t_leaves, t_tree = pytree.tree_flatten(res[1])
        what = f"custom_jvp {name}: the JVP rule's"
        check_outputs(f"{what} primal output", self.out_tree, self.out_avals, p_tree,
                       [get_aval(p) for p in p_leaves], False)  # fmt: skip
        check_outputs(f"{what} tangent output", self.out_tree, self.out_avals, t_tree,
                       [get_aval(t) for t in t_leaves], True)  # fmt: skip
        return [cast_to(p, a) for p, a in zip(p_leaves, self.out_avals)] + list(t_leaves)

    def __repr__(self) -> str:
        return f"<rule of {fun_name(self.cj.fun)}, applied when differentiated>"


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


def _twice(vmas: tuple | None) -> tuple | None:
    return None if vmas is None else vmas + vmas


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
            cast_to(t, tangent_aval(a)) if dtypes.is_inexact(a.dtype) else Zero(tangent_aval(a))
            for t, a in zip(t_out, call_jaxpr.out_avals)
        ]
    if any(not isinstance(t, Zero) for t in t_fc):  # closed-over values: ordinary autodiff
        _, t_extra = jvp_flat(lambda *c: eval_jaxpr(call_jaxpr, [], *c, *xs), fc, list(t_fc))
        t_out = [add_tangents(a, b) for a, b in zip(t_out, t_extra)]
    return p_out, t_out


@custom_jvp_call_p.def_partial_eval
def _cj_partial_eval(pe, args, params):
    """A call with an unknown operand (a tangent) under partial evaluation: inline ``f``.

    Partial evaluation only ever stages the linear part of a JVP (``linearize``, and the
    partial-eval rules of jit, control flow and checkpoint inside it), so the custom rule of a
    call on tangents is never applied again; its function, staged as ordinary primitives, is
    what ``backward_pass`` transposes (known operations in it still run now)."""
    fc, _, xs = groups(args, params["num_fconsts"], params["num_jconsts"])
    with set_interpreter(pe):
        return eval_jaxpr(params["call_jaxpr"], [], *fc, *xs)


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
    xs, xd = front(xs, xd)
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


def _plain(v: Any) -> Any:
    """A hashable stand-in for a nondiff argument of a plain Python kind (its type kept: 1,
    1.0 and True differ; floats by repr: -0.0 is not 0.0); TypeError for any other kind."""
    t = type(v)
    if t in (bool, int, str, type(None)):
        return t, v
    if t in (float, complex):
        return t, repr(v)
    if t in (tuple, list):
        return t, tuple(_plain(x) for x in v)
    raise TypeError(t)


def _eager_key(static: list, in_tree, avals: list, out_tree, out_avals: list, operands: list):
    """What the check of an eager call's rule depends on (its nondiff arguments, the avals and
    structures in and out), or None where the call is not eager: not at the root (a transform
    may differentiate the result), a tracer among the operands (an escaped one: the call
    fails as before), a nondiff argument of another kind than ``_plain``'s or a pytree node
    whose data is unhashable (its treedef, a BluTypeError)."""
    if not at_root() or any(isinstance(x, Tracer) for x in operands):
        return None
    try:
        key = tuple((i, _plain(v)) for i, v in static), in_tree, tuple(avals), out_tree
        hash(key)
    except TypeError:
        return None
    return *key, tuple(out_avals)


_MAX_CHECKED = 256  # signatures remembered per function (then forgotten at once)


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
        # the flags' generation and the eager signatures (``_eager_key``) whose rule traced
        # without error under them: an eager call of one of those skips tracing its rule
        self._checked: tuple[Any, set] = (None, set())

    def _rule_checked(self, key: tuple, gen: Any) -> bool:
        gen_checked, done = self._checked  # (one read: another thread may replace it)
        return gen_checked == gen and key in done

    def _mark_checked(self, key: tuple, gen: Any) -> None:
        # ``gen``: the flags' generation read before the check, so that a check made under one
        # flag state (another thread's override) never counts for another
        gen_checked, done = self._checked
        if gen_checked != gen:
            done = set()
            self._checked = (gen, done)
        if len(done) >= _MAX_CHECKED:
            done.clear()
        done.add(key)

    def _nondiff_takes(self, rest: str) -> str:
        k = len(self.nondiff_argnums)
        return f"the {k} nondiff_argnums arguments, then {rest}" if k else rest

    def defjvp(self, jvp: Callable, symbolic_zeros: bool = False) -> Callable:
        """Set the JVP rule; returns it (usable as a decorator).

        ``symbolic_zeros`` (JAX's): only False, the rule's tangents are arrays, zeros where
        nothing flows.

        Raises:
            BluTypeError: ``jvp`` is not callable, or cannot take ``len(nondiff_argnums) + 2``
                positional arguments; the previous rule (if any) stays.
            BluValueError: ``symbolic_zeros=True`` (not in blu: the rule is traced when the
                function is called, before it is known which inputs are perturbed).
        """
        where = f"custom_jvp {fun_name(self.fun)}.defjvp"
        gets = "its tangents are arrays (zeros where none flows)"
        refuse_symbolic_zeros(where, symbolic_zeros, gets)
        takes = self._nondiff_takes("(primals, tangents)")
        check_rule(where, "the JVP rule", jvp, [len(self.nondiff_argnums) + 2], takes)
        self.jvp, self._checked = jvp, (None, set())
        return jvp

    def defjvps(self, *tangent_fns: Callable | None) -> None:
        """Set the rule from one function per differentiable argument: ``fn(t_i, primal_out,
        *primals)`` gives argument i's (linear) contribution to the output tangent; None means
        it has none. (Not with ``nondiff_argnums``.)

        Raises:
            BluTypeError: ``nondiff_argnums`` are set, more functions than the function has
                positional parameters (or fewer than it needs), or one that is neither None nor
                a callable taking ``(t, primal_out, *primals)``; the previous rule stays.
        """
        where = f"custom_jvp {fun_name(self.fun)}.defjvps"
        if self.nondiff_argnums:
            raise BluTypeError(
                with_user_line(f"{where}: not with nondiff_argnums (use defjvp), as JAX's")
            )
        counts = positional_counts(self.fun)
        if counts and not counts[0] <= len(tangent_fns) <= counts[-1]:
            raise BluTypeError(
                with_user_line(
                    f"{where}: takes one function (or None) per positional parameter of the "
                    f"function ({' to '.join(map(str, counts))}), got {len(tangent_fns)}"
                )
            )
        for i, fn in enumerate(tangent_fns):
            if fn is not None:
                what, takes = f"function {i}", "(t, primal_out, *primals)"
                check_rule(where, what, fn, [2 + c for c in counts], takes)

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

        self.jvp, self._checked = jvp, (None, set())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.jvp is None:
            raise BluTypeError(
                with_user_line(f"custom_jvp {fun_name(self.fun)}: no JVP rule; call .defjvp first")
            )
        args = resolve_args(self.fun, args, kwargs)
        static, dyn = split_nondiff(args, self.nondiff_argnums)
        leaves, in_tree = pytree.tree_flatten(dyn)
        avals = [get_aval(x) for x in leaves]
        out_box: list = []

        def f_flat(*xs):
            out = self.fun(*with_static(static, pytree.tree_unflatten(in_tree, list(xs))))
            out_leaves, out_tree = pytree.tree_flatten(out)
            out_box.append((out_tree, [get_aval(o) for o in out_leaves]))
            return out_leaves

        # inside blu.shard, traced again knowing the arguments' variance where a cond in it
        # may let devices take different branches with collectives (vma.trace_knowing)
        trace = lambda fun: trace_jaxpr(fun, avals)  # noqa: E731
        call_jaxpr, fconsts = vma.trace_knowing(trace, f_flat, lambda: vma.arg_vmas(leaves))
        out_tree, out_avals = out_box[-1]
        rule = _DeferredJVP(self, static, in_tree, out_tree, out_avals)
        jvp: Any = rule
        jconsts: list[Any] = []
        # an eager call's result is never differentiated: its rule is traced only to check it,
        # once per signature (a deferred rule stands in its call: ``_cj_impl`` runs ``f``)
        key = _eager_key(static, in_tree, avals, out_tree, out_avals, [*leaves, *fconsts])
        gen = config.generation  # a flag may change what the rule traces to
        checked = key is not None and self._rule_checked(key, gen)
        # (called from its own rule: that rule applies it later)
        if not checked and not self._tracing_rule:
            n = len(leaves)
            self._tracing_rule += 1
            try:
                jvp, jconsts = vma.trace_knowing(
                    lambda fun: trace_jaxpr(fun, avals + [tangent_aval(a) for a in avals]),
                    lambda *a: rule.apply(a[:n], a[n:]),
                    lambda: _twice(vma.arg_vmas(leaves)),  # tangents vary as their primals
                )
            finally:
                self._tracing_rule -= 1
            if key is not None:  # (a rule that raised is checked again at the next call)
                self._mark_checked(key, gen)
        named = {} if self.lowering_name is None else {"lowering_name": self.lowering_name}
        outs = custom_jvp_call_p.bind(
            *fconsts, *jconsts, *leaves,
            call_jaxpr=call_jaxpr, jvp=jvp,
            num_fconsts=len(fconsts), num_jconsts=len(jconsts), **named,
        )  # fmt: skip
        return pytree.tree_unflatten(out_tree, outs)
