"""Automatic differentiation: forward mode (JVP), linearize, transpose, and reverse mode.

Reverse mode is built as in JAX ("You Only Linearize Once", Radul et al. 2023):

1. ``jvp``: a JVP interpreter carries (primal, tangent) pairs; each primitive's JVP rule runs
   under the parent interpreter.
2. ``linearize``: the JVP runs with *known* primals and *unknown* tangents under a
   partial-evaluation interpreter, which computes everything known and stages the rest — a
   jaxpr linear in the tangents, whose constants are the residuals.
3. ``vjp``: that linear jaxpr is transposed (``backward_pass``); only linear primitives need
   transpose rules.

Symbolic zeros (``Zero``) keep untouched tangents and cotangents from being materialised.

This module holds the machinery on flat lists of values (``jvp_flat``, ``linearize_flat``,
``vjp_flat``, ``backward_pass``, ``jvp_jaxpr``); the user's API on pytrees (``jvp``,
``linearize``, ``vjp``, ``grad``, ``value_and_grad``) is in ``blu.transforms.ad_api``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.core.interpreter import (
    Interpreter,
    Tracer,
    current_interpreter,
    get_aval,
    set_interpreter,
)
from blu.core.jaxpr import Jaxpr, Literal, Var, eval_jaxpr
from blu.core.staging import hoist_consts, trace_to_jaxpr
from blu.transforms import ops, vma
from blu.transforms.ad_util import (
    UndefinedPrimal,
    Zero,
    add_tangents,
    instantiate,
    tangent_aval,
    zero_like,
)
from blu.transforms.partial_eval import PartialEvalInterpreter

# ---- forward mode ------------------------------------------------------------------------------


class JVPTracer(Tracer):
    """A primal value paired with its tangent (possibly a symbolic Zero)."""

    __slots__ = ("primal", "tangent")

    def __init__(self, interp: JVPInterpreter, primal: Any, tangent: Any):
        self._interp = interp
        self.primal = primal
        self.tangent = tangent

    @property
    def aval(self) -> ShapedArray:
        return get_aval(self.primal)


class JVPInterpreter(Interpreter):
    def __init__(self, parent: Interpreter):
        self.parent = parent

    def lift(self, x: Any) -> tuple[Any, Any]:
        if isinstance(x, JVPTracer) and x._interp is self:
            return x.primal, x.tangent
        self.check_value(x)
        return x, zero_like(x)

    def process(self, prim: Any, args: tuple, params: dict) -> Any:
        primals, tangents = zip(*map(self.lift, args)) if args else ((), ())
        with set_interpreter(self.parent):
            if all(isinstance(t, Zero) for t in tangents):
                return prim.bind(*primals, **params)
            out, t_out = prim.rule("jvp")(primals, tangents, **params)
        if prim.multiple_results:
            return [self.wrap(o, t) for o, t in zip(out, t_out)]
        return self.wrap(out, t_out)

    def wrap(self, primal: Any, tangent: Any) -> Any:
        if isinstance(tangent, Zero):
            return primal  # no tangent: the value is a constant of this interpreter
        return JVPTracer(self, primal, tangent)


def jvp_flat(fun: Callable, primals: Sequence[Any], tangents: Sequence[Any]):
    """JVP of a function of flat arguments; returns (primal outs, tangent outs, may be Zero)."""
    interp = JVPInterpreter(current_interpreter())
    ins = [interp.wrap(p, t) for p, t in zip(primals, tangents)]
    with set_interpreter(interp):
        outs = fun(*ins)
    interp.finished = True
    pairs = [interp.lift(o) for o in outs]
    return [p for p, _ in pairs], [t for _, t in pairs]


# ---- linearize: JVP + partial evaluation -------------------------------------------------------


def linearize_flat(fun: Callable, primals: Sequence[Any]):
    """Run the JVP of ``fun`` with known primals and staged tangents.

    Returns:
        (primal outputs, linear jaxpr from tangents in to tangents out, its residual consts)
    """
    pe = PartialEvalInterpreter(current_interpreter())
    tangents_in = [pe.new_arg(tangent_aval(get_aval(p))) for p in primals]
    # integer and bool inputs have no tangent: feed symbolic zeros (the invar stays unused)
    tangents_jvp = [t if dtypes.is_inexact(t.aval.dtype) else Zero(t.aval) for t in tangents_in]
    with set_interpreter(pe):
        primals_out, tangents_out = jvp_flat(fun, primals, tangents_jvp)
        tangents_out = [instantiate(t) for t in tangents_out]
    jaxpr, residuals = pe.build(tangents_out)
    return primals_out, jaxpr, residuals


# ---- transposition -----------------------------------------------------------------------------


def backward_pass(
    jaxpr: Jaxpr,
    consts: Sequence[Any],
    args: Sequence[Any],
    cts: Sequence[Any],
    in_vmas: Sequence[frozenset | None] | None = None,
):
    """Transpose a jaxpr that is linear in its ``UndefinedPrimal`` arguments.

    Args:
        jaxpr: the program; ``consts`` are its constvars' values.
        args: one per invar: a value (non-linear input) or an ``UndefinedPrimal``.
        cts: cotangents of the outputs (values or ``Zero``).
        in_vmas: inside ``blu.shard``, the mesh axes each linear input varies over
            (``blu.transforms.vma``): a cotangent that varies over more is ``psum``-ed to it.

    Returns:
        cotangents for each invar (``Zero`` where none flowed; ``None`` for non-linear inputs).
    """
    primal_env: dict[Var, Any] = dict(zip(jaxpr.constvars, consts))
    linear: set[Var] = set()
    for v, a in zip(jaxpr.invars, args, strict=True):
        if isinstance(a, UndefinedPrimal):
            linear.add(v)
        else:
            primal_env[v] = a

    def is_lin(a: Any) -> bool:
        return isinstance(a, Var) and a in linear

    def read_primal(a: Any) -> Any:
        if isinstance(a, Literal):
            return a.val
        if a in linear:  # its vma rides along, for transposes that run a backward_pass
            return UndefinedPrimal(a.aval, None if vmas is None else vmas.get(a))
        return primal_env[a]

    # inside a shard, the varying manual axes of the linear values (blu.transforms.vma). An
    # unknown one (a linear input or residual of a staged body) is taken as varying over every
    # axis: its cotangent is then psum-ed where it leaves the body, by the enclosing pass
    vmas: dict[Var, Any] | None = None
    everywhere = frozenset(vma.manual_axes())
    if everywhere:
        known = in_vmas or [getattr(a, "vma", None) for a in args]
        vmas = {v: everywhere if m is None else m for v, m in zip(jaxpr.invars, known)}

    def vma_in(a: Any) -> Any:
        if isinstance(a, Literal):
            return frozenset()
        if a in linear:
            return vmas.get(a, everywhere)  # type: ignore[union-attr]
        got = vma.vma_of(primal_env[a])
        return everywhere if got is None else got

    # forward: evaluate the non-linear equations (those with no linear input)
    lin_eqns = []
    for eqn in jaxpr.eqns:
        if any(is_lin(a) for a in eqn.invars):
            linear.update(eqn.outvars)
            lin_eqns.append(eqn)
            if vmas is not None:
                out = vma.out_vma(eqn.primitive, [vma_in(a) for a in eqn.invars], eqn.params)
                vmas.update((v, out) for v in eqn.outvars)
        else:
            outs = eqn.primitive.bind(*map(read_primal, eqn.invars), **eqn.params)
            outs = outs if eqn.primitive.multiple_results else [outs]
            primal_env.update(zip(eqn.outvars, outs))

    ct_env: dict[Var, Any] = {}

    def write_ct(v: Any, ct: Any) -> None:
        if ct is None or not is_lin(v):
            return
        ct_env[v] = add_tangents(ct_env[v], ct) if v in ct_env else ct

    for v, ct in zip(jaxpr.outvars, cts, strict=True):
        write_ct(v, ct)

    for eqn in reversed(lin_eqns):
        cts_out = [ct_env.pop(v, None) for v in eqn.outvars]
        if all(c is None or isinstance(c, Zero) for c in cts_out):
            continue
        cts_out = [Zero(v.aval) if c is None else c for c, v in zip(cts_out, eqn.outvars)]
        ct_arg = cts_out if eqn.primitive.multiple_results else cts_out[0]
        cts_in = eqn.primitive.rule("transpose")(
            ct_arg, *map(read_primal, eqn.invars), **eqn.params
        )
        # an ordinary equation's cotangent varies (as JAX types it) over the axes its output
        # does, even where its value is the same on every device (a psum's transpose passes
        # the invariant cotangent through): the implicit pvary of an input that varies over
        # fewer axes transposes to a psum over the others. Collectives and equations holding
        # jaxprs (whose transposes run their own backward_pass) say it themselves.
        logical = None
        if vmas is not None and eqn.primitive not in vma.rules and not vma.holds_jaxpr(eqn):
            logical = frozenset().union(*(vmas.get(v, frozenset()) for v in eqn.outvars))
        for a, ct in zip(eqn.invars, cts_in, strict=True):
            if vmas is not None and is_lin(a) and ct is not None and not isinstance(ct, Zero):
                ct = vma.fix_cotangent(ct, vmas.get(a), logical)
            write_ct(a, ct)

    return [
        ct_env.pop(v, Zero(v.aval)) if v in linear else None
        for v in jaxpr.invars  # invars stay in `linear` only if they were UndefinedPrimal
    ]


# ---- reverse mode ------------------------------------------------------------------------------


def vjp_flat(fun: Callable, primals: Sequence[Any]):
    """Returns (primal outs, f_vjp) where ``f_vjp(cts) -> cts of primals`` (may be Zero)."""
    in_vmas = [vma.vma_of(p) for p in primals]  # inside blu.shard: for the implicit pvary
    primals_out, jaxpr, residuals = linearize_flat(fun, primals)
    in_avals = [tangent_aval(get_aval(p)) for p in primals]

    def f_vjp(cts: Sequence[Any]) -> list[Any]:
        args = [UndefinedPrimal(a) for a in in_avals]
        return backward_pass(jaxpr, residuals, args, cts, in_vmas)

    return primals_out, f_vjp


# ---- the JVP of a jaxpr -------------------------------------------------------------------------

_jvp_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_jvp_lock = threading.Lock()


def jvp_jaxpr(jaxpr: Jaxpr, nonzeros: Sequence[bool], instantiate_out: Sequence[bool]):
    """The JVP of a jaxpr (no constvars) as a jaxpr, traced once per signature.

    Args:
        nonzeros: which inputs have a (non-symbolic-zero) tangent; non-float inputs never do.
        instantiate_out: outputs whose tangent must be a real array even when it is zero.

    Returns:
        ``(jvp, consts, out_nz)``: ``jvp`` takes ``consts, primals, nonzero tangents`` and returns
        ``primal outs, nonzero tangent outs``; ``out_nz`` says which output tangents it returns.
    """
    nonzeros = tuple(
        bool(nz) and dtypes.is_inexact(v.aval.dtype)
        for nz, v in zip(nonzeros, jaxpr.invars, strict=True)
    )
    inst = tuple(
        bool(i) and dtypes.is_inexact(a.dtype)
        for i, a in zip(instantiate_out, jaxpr.out_avals, strict=True)
    )
    with _jvp_lock:
        hit = _jvp_cache.get(jaxpr, {}).get((nonzeros, inst))
    if hit is not None:
        return hit
    n = len(jaxpr.invars)
    t_avals = [tangent_aval(v.aval) for v, nz in zip(jaxpr.invars, nonzeros) if nz]
    box: list[list[bool]] = []

    def fun(*args):
        primals, t_iter = args[:n], iter(args[n:])
        tangents = [
            next(t_iter) if nz else Zero(tangent_aval(v.aval))
            for v, nz in zip(jaxpr.invars, nonzeros)
        ]
        outs, touts = jvp_flat(lambda *a: eval_jaxpr(jaxpr, [], *a), primals, tangents)
        out_nz = [
            (not isinstance(t, Zero) or i) and dtypes.is_inexact(get_aval(o).dtype)
            for t, i, o in zip(touts, inst, outs)
        ]
        box.append(out_nz)
        touts = [
            _cast_like(instantiate(t), a) for t, nz, a in zip(touts, out_nz, jaxpr.out_avals) if nz
        ]
        return list(outs) + touts

    new, consts = trace_to_jaxpr(fun, [v.aval for v in jaxpr.invars] + t_avals)
    out = (hoist_consts(new), list(consts), box[0])
    if not any(isinstance(c, Tracer) for c in consts):  # a tracer const belongs to this trace
        with _jvp_lock:
            out = _jvp_cache.setdefault(jaxpr, {}).setdefault((nonzeros, inst), out)
    return out


def _cast_like(t: Any, aval: ShapedArray) -> Any:
    """A tangent with the tangent dtype of ``aval`` (a rule may return a weakly typed one)."""
    return ops.convert_element_type(t, aval.dtype) if get_aval(t).dtype != aval.dtype else t


def is_tracer(x: Any) -> bool:
    return isinstance(x, Tracer)
