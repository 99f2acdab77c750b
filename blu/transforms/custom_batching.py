"""``custom_vmap``: a function with a user-defined batching rule, as
``jax.custom_batching.custom_vmap``.

A call traces the function to a jaxpr and binds ``custom_vmap_call`` (operands: the values it
closes over, then the arguments; params: the jaxpr, the rule, the arguments' and outputs'
trees). It evaluates like the function; ``vmap`` applies the rule to the arguments with their
batch axes in front. Its JVP binds ``custom_vmap_call`` twice, once for the outputs (same
rule) and once for their tangents, whose rule is the JVP of the user's rule (so ``vmap`` of a
derivative still batches by the rule); a value the function closes over is differentiated
through the function's body. The tangents' call is linear in the tangents: its transpose runs
the body's ``backward_pass``, so reverse mode works (the backward pass batches the body's
transpose, not the rule). ``jit`` inlines the body (``decomposition``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from blu.core import dtypes, pytree
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import get_aval
from blu.core.jaxpr import eval_jaxpr
from blu.core.primitive import Primitive
from blu.transforms.ad import backward_pass, jvp_flat
from blu.transforms.ad_util import Zero, add_tangents, instantiate, is_undefined, tangent_aval
from blu.transforms.batching import bdim_to_front, moveaxis
from blu.transforms.custom_common import fun_name, resolve_args
from blu.transforms.jaxpr_util import run_jaxpr, trace_jaxpr

__all__ = ["custom_vmap"]

custom_vmap_call_p = Primitive("custom_vmap_call", multiple_results=True)


@custom_vmap_call_p.def_abstract_eval
def _abstract_eval(*avals, call_jaxpr, rule, num_consts, in_tree, out_tree, name):
    return call_jaxpr.out_avals


@custom_vmap_call_p.def_impl
def _impl(*args, call_jaxpr, rule, num_consts, in_tree, out_tree, name):
    return run_jaxpr(call_jaxpr, args)


def _decomposition(*args, call_jaxpr, rule, num_consts, in_tree, out_tree, name):
    """Under ``jit`` the call is its body (the rule was applied by ``vmap``)."""
    return eval_jaxpr(call_jaxpr, [], *args)


custom_vmap_call_p.decomposition = _decomposition


def _check_rule_output(name: str, res: Any, out_tree: Any, avals: list, size: int) -> tuple:
    """The rule's ``(out, out_batched)`` as flat outputs and batch dims, checked.

    Raises:
        BluTypeError: not a pair; a structure other than the function's output's (or, for
            ``out_batched``, than ``out``'s); a dtype other than the function's.
        BluShapeError: a leaf whose shape is not the function's (with ``size`` in front where
            ``out_batched`` says it is batched).
    """
    if not (isinstance(res, (tuple, list)) and len(res) == 2):
        raise BluTypeError(
            with_user_line(
                f"custom_vmap {name}: the vmap rule must return a pair (out, out_batched), got "
                f"{type(res).__name__}"
            )
        )
    out, out_batched = res
    leaves, tree = pytree.tree_flatten(out)
    flags, b_tree = pytree.tree_flatten(out_batched)
    if tree != out_tree:
        raise BluTypeError(
            with_user_line(
                f"custom_vmap {name}: the vmap rule's output has structure {tree} but the "
                f"function's has {out_tree}"
            )
        )
    if b_tree != tree:
        raise BluTypeError(
            with_user_line(
                f"custom_vmap {name}: the vmap rule's out_batched has structure {b_tree} but "
                f"its output has {tree}"
            )
        )
    for i, (x, b, a) in enumerate(zip(leaves, flags, avals)):
        xa = get_aval(x)
        want = (size, *a.shape) if b else a.shape
        if xa.shape != want:
            raise BluShapeError(
                with_user_line(
                    f"custom_vmap {name}: output leaf {i} of the vmap rule has shape {xa.shape} "
                    f"but out_batched={bool(b)} wants {want} (the function gives {a.str_short()})"
                )
            )
        if xa.dtype != a.dtype:
            raise BluTypeError(
                with_user_line(
                    f"custom_vmap {name}: output leaf {i} of the vmap rule is {xa.str_short()} "
                    f"but the function gives {a.str_short()}"
                )
            )
    return leaves, [0 if b else None for b in flags]


@custom_vmap_call_p.def_batch
def _batch(axis_size, args, dims, *, call_jaxpr, rule, num_consts, in_tree, out_tree, name):
    if any(d is not None for d in dims[:num_consts]):
        raise BluValueError(
            with_user_line(
                f"custom_vmap {name}: the function closes over a value this vmap batches; pass "
                "it as an argument so the vmap rule sees it"
            )
        )
    args, dims = args[num_consts:], dims[num_consts:]
    xs = [x if d is None else moveaxis(x, d, 0) for x, d in zip(args, dims)]
    batched = pytree.tree_unflatten(in_tree, [d is not None for d in dims])
    res = rule(axis_size, list(batched), *pytree.tree_unflatten(in_tree, xs))
    return _check_rule_output(name, res, out_tree, call_jaxpr.out_avals, axis_size)


class _JVPRule:
    """The vmap rule of a call's tangents: the JVP of the user's rule, on the arguments and their
    nonzero tangents (a leaf whose value or tangent is batched is batched in both)."""

    def __init__(self, rule: Callable, in_tree: Any, out_tree: Any, avals: list, nz: list,
                 float_out: list, name: str):  # fmt: skip
        self.rule, self.in_tree, self.out_tree, self.avals = rule, in_tree, out_tree, avals
        self.nz, self.float_out, self.name = nz, float_out, name

    def __call__(self, axis_size: int, in_batched: list, xs: list, ts: list) -> tuple:
        xb, tb = in_batched
        it = iter(zip(ts, tb))
        t_full = [next(it) if nz else (None, False) for nz in self.nz]
        both = [b or tbi for b, (_, tbi) in zip(xb, t_full)]
        xs = [bdim_to_front(x, None, axis_size) if b and not xbi else x
              for x, b, xbi in zip(xs, both, xb)]  # fmt: skip
        tans = []
        for x, b, (t, tbi) in zip(xs, both, t_full):
            if t is None:
                tans.append(Zero(tangent_aval(get_aval(x))))
            else:
                tans.append(bdim_to_front(t, None, axis_size) if b and not tbi else t)
        box: dict = {}

        def primal(*leaves: Any) -> list:
            args = pytree.tree_unflatten(self.in_tree, list(leaves))
            res = self.rule(axis_size, list(pytree.tree_unflatten(self.in_tree, both)), *args)
            outs, box["dims"] = _check_rule_output(
                self.name, res, self.out_tree, self.avals, axis_size
            )
            return outs

        _, t_outs = jvp_flat(primal, xs, tans)
        keep = [i for i, f in enumerate(self.float_out) if f]
        outs = [instantiate(t_outs[i]) for i in keep]
        return outs, [box["dims"][i] is not None for i in keep]


@custom_vmap_call_p.def_jvp
def _jvp(primals, tangents, *, call_jaxpr, rule, num_consts, in_tree, out_tree, name):
    params = dict(call_jaxpr=call_jaxpr, rule=rule, num_consts=num_consts, in_tree=in_tree,
                  out_tree=out_tree, name=name)  # fmt: skip
    p_out = custom_vmap_call_p.bind(*primals, **params)
    out_avals = call_jaxpr.out_avals
    float_out = [dtypes.is_inexact(a.dtype) for a in out_avals]
    t_out: list[Any] = [Zero(tangent_aval(a)) for a in out_avals]
    if not any(float_out):
        return p_out, t_out
    consts, xs = list(primals[:num_consts]), list(primals[num_consts:])
    t_consts, t_xs = tangents[:num_consts], tangents[num_consts:]
    nz = [not isinstance(t, Zero) and dtypes.is_inexact(get_aval(x).dtype)
          for t, x in zip(t_xs, xs)]  # fmt: skip
    if any(nz):
        t_nz = [instantiate(t) for t, n in zip(t_xs, nz) if n]
        n_c, n_x = len(consts), len(xs)

        def tangent_call(*a: Any) -> list:
            c, x, t_it = a[:n_c], a[n_c : n_c + n_x], iter(a[n_c + n_x :])
            ts = [next(t_it) if n else Zero(tangent_aval(get_aval(v))) for v, n in zip(x, nz)]
            _, touts = jvp_flat(lambda *v: eval_jaxpr(call_jaxpr, [], *c, *v), x, ts)
            return [instantiate(t) for t, f in zip(touts, float_out) if f]

        avals = [get_aval(v) for v in consts + xs + t_nz]
        t_jaxpr, extra = trace_jaxpr(tangent_call, avals)
        t_tree = pytree.tree_structure([0] * sum(float_out))
        lin = custom_vmap_call_p.bind(
            *extra, *consts, *xs, *t_nz,
            call_jaxpr=t_jaxpr,
            rule=_JVPRule(rule, in_tree, out_tree, list(out_avals), nz, float_out, name),
            num_consts=len(extra) + n_c,
            in_tree=pytree.tree_structure(([0] * n_x, [0] * len(t_nz))),
            out_tree=t_tree, name=name,
        )  # fmt: skip
        it = iter(lin)
        t_out = [next(it) if f else z for f, z in zip(float_out, t_out)]
    if any(not isinstance(t, Zero) for t in t_consts):  # closed-over values: the body's autodiff
        body = lambda *c: eval_jaxpr(call_jaxpr, [], *c, *xs)  # noqa: E731
        _, t_extra = jvp_flat(body, consts, list(t_consts))
        t_out = [add_tangents(a, b) if f else a for a, b, f in zip(t_out, t_extra, float_out)]
    return p_out, t_out


@custom_vmap_call_p.def_transpose
def _transpose(cts, *args, call_jaxpr, rule, num_consts, in_tree, out_tree, name):
    """A call in a linear position (the tangents' call): the transpose of its body."""
    cts = [Zero(a) if c is None else c for c, a in zip(cts, call_jaxpr.out_avals)]
    got = backward_pass(call_jaxpr, [], list(args), cts)
    return [g if is_undefined(a) else None for g, a in zip(got, args)]


class custom_vmap:
    """A function with a user-defined batching rule (``jax.custom_batching.custom_vmap``).

    Example::

        @blu.custom_batching.custom_vmap
        def f(x, y):
            return x + y

        @f.def_vmap
        def f_vmap_rule(axis_size, in_batched, xs, ys):
            x_batched, y_batched = in_batched
            out = xs + ys if x_batched and y_batched else ...
            return out, True      # (out, out_batched)

    The rule ``rule(axis_size, in_batched, *args)`` is called by ``vmap`` when an argument is
    batched: ``args`` are the arguments with their batch axis (of size ``axis_size``) first,
    where ``in_batched`` (a list with one pytree of bools per argument) says they have one; it
    returns ``(out, out_batched)``, ``out`` with the function's output structure and dtypes
    and ``out_batched`` a pytree of bools with ``out``'s structure (a batched leaf has
    ``axis_size`` in front). Unbatched, the function runs as itself. ``jvp`` / ``grad`` work:
    ``vmap`` of a derivative batches by the derivative of the rule; reverse mode
    differentiates the function's body where it transposes.

    Raises:
        BluTypeError: called before ``def_vmap``; the rule's output is not a pair, or has the
            wrong structure or dtype.
        BluShapeError: the rule's output shape disagrees with ``out_batched``.
        BluValueError: under ``vmap``, the function closes over a value that ``vmap`` batches.

    Source: ``jax.custom_batching.custom_vmap`` (``jax/_src/custom_batching.py``).
    """

    def __init__(self, fun: Callable):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.vmap_rule: Callable | None = None

    def def_vmap(self, vmap_rule: Callable) -> Callable:
        """Set the batching rule ``rule(axis_size, in_batched, *args) -> (out,
        out_batched)``; returns it, so it can be used as a decorator."""
        if not callable(vmap_rule):
            raise BluTypeError(
                with_user_line(
                    f"custom_vmap {fun_name(self.fun)}.def_vmap: the rule must be callable, got "
                    f"{type(vmap_rule).__name__}"
                )
            )
        self.vmap_rule = vmap_rule
        return vmap_rule

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = fun_name(self.fun)
        if self.vmap_rule is None:
            raise BluTypeError(
                with_user_line(f"custom_vmap {name}: no batching rule; call .def_vmap first")
            )
        args = resolve_args(self.fun, args, kwargs)
        leaves, in_tree = pytree.tree_flatten(args)
        box: dict = {}

        def flat(*xs: Any) -> list:
            outs, box["out_tree"] = pytree.tree_flatten(
                self.fun(*pytree.tree_unflatten(in_tree, list(xs)))
            )
            return outs

        jaxpr, consts = trace_jaxpr(flat, [get_aval(x) for x in leaves])
        outs = custom_vmap_call_p.bind(
            *consts, *leaves,
            call_jaxpr=jaxpr, rule=self.vmap_rule, num_consts=len(consts),
            in_tree=in_tree, out_tree=box["out_tree"], name=name,
        )  # fmt: skip
        return pytree.tree_unflatten(box["out_tree"], outs)
