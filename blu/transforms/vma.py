"""Varying manual axes (JAX's ``check_vma``): over which mesh axes of ``blu.shard`` a value differs.

Inside ``blu.shard`` every value either varies over a mesh axis (an input split over it,
``axis_index``, the result of ``psum_scatter``/``ppermute``/``all_to_all``) or is invariant over
it (a replicated input, the result of ``psum``/``pmean``/``pmax``/``pmin``/``all_gather`` over
it). JAX records this set in the aval; blu reads it off the value:

- virtual CPU devices: ``shard``'s batching levels are *manual* (``BatchInterpreter.manual``);
  a value varies over such a level's axis exactly when it is batched there;
- one process per device: ``shard`` runs ``f`` under a :class:`VmaInterpreter` whose tracers
  carry the set;
- staged code inside ``shard`` (a nested ``jit``'s trace, ``cond`` branches and loop bodies,
  and their transposes): traced under a ``VmaInterpreter`` seeded with the outer values' sets
  (:func:`trace_manual`; a loop's carries at a fixed point; values it closes over vary as they
  do in the enclosing body), and ``UndefinedPrimal.vma``
  carries a linear input's set into the transposes that run a ``backward_pass``.

Reverse mode uses it as JAX's shard_map does (JEP 17111, "efficient transposition of
replication-inducing collectives"): where an invariant value met a varying one, JAX inserts a
``pvary`` (identity) whose transpose is a ``psum``; ``backward_pass`` applies that ``psum`` to a
cotangent that varies over axes its primal did not (:func:`fix_cotangent`), and ``psum``'s
transpose passes the invariant cotangent through unchanged. So the gradient taken inside
``shard`` of a ``psum``-reduced loss is the gradient of the global function.

``None`` means "unknown" (no shard here, or a value staged by a transform whose trace is not
seeded, e.g. linearize's tangents): then nothing is adjusted, and ``backward_pass``
takes an unknown linear input or residual as varying over every axis.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from blu.core.interpreter import Interpreter, Tracer, current_interpreter, set_interpreter
from blu.core.jaxpr import Literal
from blu.transforms.ad_util import UndefinedPrimal
from blu.transforms.batching import BatchInterpreter, BatchTracer

Vma = frozenset

# primitive -> (input vmas, params) -> output vma; collectives register theirs (lax.parallel)
rules: dict[Any, Callable[..., frozenset]] = {}
_psum: list[Callable[[Any, tuple], Any]] = []  # lax.parallel's psum_p.bind, set at import


def register_psum(fn: Callable[[Any, tuple], Any]) -> None:
    _psum[:] = [fn]


class VmaTracer(Tracer):
    """A value inside ``shard`` on one process per device, with the mesh axes it varies over."""

    __slots__ = ("val", "vma")

    def __init__(self, interp: VmaInterpreter, val: Any, vma: frozenset):
        self._interp = interp
        self.val = val
        self.vma = vma

    @property
    def aval(self):
        from blu.core.interpreter import get_aval

        return get_aval(self.val)


class VmaInterpreter(Interpreter):
    """Tracks varying manual axes over the body of a ``shard`` running one process per device."""

    manual_outer = True

    def __init__(self, parent: Interpreter, names: Sequence[Any], closure: frozenset = Vma()):
        self.parent = parent
        self.names = tuple(names)
        # axes every traced value closed over varies over besides its own (a cond's branches
        # under a varying predicate: the values they close over are pvary-ed to its axes)
        self.closure = frozenset(closure)

    def lift(self, x: Any) -> tuple[Any, frozenset]:
        if isinstance(x, VmaTracer) and x._interp is self:
            return x.val, x.vma
        self.check_value(x)
        if isinstance(x, Tracer) and x._interp is not self.parent and _levels(self.parent):
            # a value of the enclosing shard body closed over by a staged one (a nested jit's
            # trace): it varies as it does there (unknown there: over every manual axis)
            got = vma_of(x, self.parent)
            return x, frozenset(manual_axes(self.parent)) if got is None else got | self.closure
        return x, frozenset()

    def process(self, prim: Any, args: tuple, params: dict) -> Any:
        vals, vmas = zip(*map(self.lift, args)) if args else ((), ())
        with set_interpreter(self.parent):
            out = prim.bind(*vals, **params)
        vma = out_vma(prim, vmas, params)
        if prim.multiple_results:
            return [self.wrap(o, vma) for o in out]
        return self.wrap(out, vma)

    def wrap(self, val: Any, vma: frozenset) -> Any:
        return VmaTracer(self, val, frozenset(vma))


def out_vma(prim: Any, vmas: Sequence[frozenset], params: dict) -> frozenset:
    rule = rules.get(prim)
    if rule is not None:
        return rule(vmas, **params)
    # a call of a jaxpr (jit, checkpoint) or branches (cond: the index first): through them,
    # so that a psum inside gives an invariant output (one vma for all outputs: their union)
    inner = params.get("jaxpr")
    if (
        hasattr(inner, "eqns")
        and not getattr(inner, "constvars", ())
        and len(inner.invars) == len(vmas)
    ):
        return frozenset().union(*jaxpr_vmas(inner, vmas))
    branches = params.get("branches")
    if branches and all(len(b.invars) == len(vmas) - 1 for b in branches):
        outs = [frozenset().union(*jaxpr_vmas(b, vmas[1:])) for b in branches]
        return frozenset().union(vmas[0], *outs)
    return frozenset().union(*vmas)


def _levels(start: Interpreter | None = None) -> list[Interpreter]:
    """The interpreters from the current one (or ``start``) out to the outermost manual level
    of the innermost ``shard`` (empty when no ``shard`` is active here)."""
    chain, interp = [], current_interpreter() if start is None else start
    while interp is not None:
        chain.append(interp)
        if getattr(interp, "manual_outer", False):
            return chain
        interp = interp.parent
    return []


def manual_axes(start: Interpreter | None = None) -> tuple:
    """The mesh axis names of the innermost active ``shard`` (outermost first)."""
    names = []
    for interp in _levels(start):
        if isinstance(interp, BatchInterpreter) and interp.manual:
            names.append(interp.axis_name)
        elif isinstance(interp, VmaInterpreter):
            names.extend(reversed(interp.names))
    return tuple(reversed(names))


def vma_of(x: Any, start: Interpreter | None = None) -> frozenset | None:
    """The manual axes ``x`` varies over, or None when unknown (no ``shard`` active, or ``x``
    is a value staged by a transform nested in the body whose variance is not recorded);
    seen from the current interpreter, or from ``start``."""
    levels = _levels(start)
    if not levels:
        return None
    vma: set = set()
    for interp in levels:
        if not (isinstance(x, Tracer) and x._interp is interp):
            continue  # a value of an outer level: constant here
        if isinstance(x, BatchTracer):
            if interp.manual:  # type: ignore[attr-defined]
                vma.add(interp.axis_name)  # type: ignore[attr-defined]
            x = x.val
        elif isinstance(x, VmaTracer):
            vma |= x.vma
            x = x.val
        elif hasattr(x, "primal"):  # a JVP tracer: its tangent varies as its primal
            x = x.primal
        else:
            return None  # staged (jit, linearize's tangents): not recorded
    last = levels[-1]
    if isinstance(last, VmaInterpreter) and isinstance(x, Tracer) and x._interp is not last.parent:
        # a value of an enclosing shard body closed over by a staged trace (a nested jit's, a
        # cond branch's, a loop body's): it varies as it does there (as VmaInterpreter.lift)
        if _levels(last.parent):
            got = vma_of(x, last.parent)
            return None if got is None else frozenset(vma) | got | last.closure
    return frozenset(vma)


def fix_cotangent(ct: Any, primal_vma: frozenset | None, typed: frozenset | None = None) -> Any:
    """The transpose of the implicit ``pvary``: ``psum`` a cotangent over the manual axes it
    varies over but its primal does not. ``typed``: axes the cotangent varies over as JAX
    types it (its equation's output's), though its value may be the same on every device."""
    if primal_vma is None or not _psum:
        return ct
    got = vma_of(ct)
    if got is None:
        return ct
    extra = (got | typed if typed else got) - primal_vma
    if not extra:
        return ct
    order = manual_axes()
    return _psum[0](ct, tuple(n for n in order if n in extra))


def holds_jaxpr(eqn: Any) -> bool:
    """Whether ``eqn``'s primitive holds jaxprs (a call, a loop, branches, a custom rule)."""

    def is_jaxpr(v: Any) -> bool:
        return hasattr(v, "eqns") or hasattr(getattr(v, "jaxpr", None), "eqns")

    return any(
        is_jaxpr(v) or (isinstance(v, (tuple, list)) and any(is_jaxpr(u) for u in v))
        for v in eqn.params.values()
    )


def arg_vmas(leaves: Sequence[Any]) -> tuple | None:
    """The arguments' varying manual axes when a ``jit`` is traced inside ``shard`` (part of
    its cache key), or None outside ``shard`` or where one is unknown."""
    if not _levels():
        return None
    vmas = tuple(vma_of(x) for x in leaves)
    return None if any(v is None for v in vmas) else vmas


def trace_manual(fun: Callable, vmas: Sequence[frozenset], closure: frozenset = Vma()) -> Callable:
    """``fun`` (flat arguments and outputs) run under a :class:`VmaInterpreter` seeded with the
    arguments' ``vmas``: a ``jit`` traced inside ``shard`` (or a transposed body) keeps the
    variance of its values, so gradients and collectives inside it follow shard_map's rule.
    ``closure``: axes added to those of the traced values ``fun`` closes over. The returned
    function records its outputs' vmas in ``out_vmas`` after each call."""
    names = manual_axes()

    def traced(*args: Any) -> list[Any]:
        interp = VmaInterpreter(current_interpreter(), names, closure)
        with set_interpreter(interp):
            outs = fun(*[interp.wrap(a, v) for a, v in zip(args, vmas)])
        interp.finished = True
        pairs = [interp.lift(o) for o in outs]
        traced.out_vmas = [v for _, v in pairs]  # type: ignore[attr-defined]
        return [o for o, _ in pairs]

    return traced


def seeded(fun: Callable, outer: Sequence[Any], closure: frozenset = Vma()) -> Callable:
    """``fun`` of staged arguments that will hold the values ``outer`` (a transposed body's
    residuals and cotangents), traced keeping their variance (:func:`trace_manual`; the
    values it closes over vary over ``closure`` too); ``fun`` itself outside ``shard`` or where
    one is unknown."""
    vmas = arg_vmas(outer)
    return fun if vmas is None else trace_manual(fun, vmas, closure)


def trace_loop_body(
    trace: Callable, body: Callable, seeds: list, carries: Sequence[tuple[int, int]]
) -> Any:
    """``trace(fun)`` of a loop body under :func:`trace_manual`, the carries' ``seeds`` grown
    until the body's output carries vary over no more axes than its input carries (a fixed
    point: vma sets only grow). ``carries``: input position -> output position pairs as
    ``(i, o)``. Traced plainly outside ``shard`` or where a seed is unknown. ``seeds`` is
    updated in place to the fixed point (e.g. for a while loop's condition)."""
    if not _levels() or any(v is None for v in seeds):
        return trace(body)
    for _ in range(len(manual_axes()) + 2):
        fun = trace_manual(body, seeds)
        out = trace(fun)
        grown = False
        for i, o in carries:
            if not fun.out_vmas[o] <= seeds[i]:  # type: ignore[attr-defined]
                seeds[i] = seeds[i] | fun.out_vmas[o]  # type: ignore[attr-defined]
                grown = True
        if not grown:
            return out
    return out


class _Divergence(threading.local):
    """Per thread: how many conds and while loops could not tell whether their predicate
    varies (``unknown``), and how many conds ran in lockstep (``lockstep``), so far."""

    def __init__(self) -> None:
        self.unknown = 0
        self.lockstep = 0


_divergence = _Divergence()


def note_unknown() -> None:
    """A ``cond``/``while_loop`` with collectives over manual axes was traced where its
    predicate's variance is unknown (a custom rule's function, traced plainly)."""
    _divergence.unknown += 1


def note_lockstep() -> None:
    """A ``cond`` on a varying index ran its branches in lockstep (their collectives)."""
    _divergence.lockstep += 1


def trace_knowing(trace: Callable, fun: Callable, vmas: Callable[[], Sequence | None]) -> Any:
    """``trace(fun)`` of a function that a custom rule traces plainly (its jaxpr as before).
    Inside ``shard``, when a ``cond`` or ``while_loop`` there could not tell whether its
    predicate varies and runs collectives over manual axes (:func:`note_unknown`), traced again
    under :func:`trace_manual` with the arguments' ``vmas()``: that trace is kept if a cond ran
    in lockstep there (devices may take different branches), and a ``while_loop`` whose
    predicate varies raises there; else the plain one is kept."""
    if not _levels():
        return trace(fun)
    before = _divergence.unknown
    out = trace(fun)
    if _divergence.unknown == before:
        return out
    known = vmas()
    if known is None or any(v is None for v in known):
        return out
    ran = _divergence.lockstep
    again = trace(trace_manual(fun, known))
    return again if _divergence.lockstep > ran else out


def jaxpr_vmas(jaxpr: Any, in_vmas: Sequence[frozenset]) -> list[frozenset]:
    """The outputs' varying manual axes of a jaxpr (no constvars) from its inputs' (the union
    over each equation's inputs, or the primitive's rule)."""
    env = dict(zip(jaxpr.invars, in_vmas))

    def read(a: Any) -> frozenset:
        return frozenset() if isinstance(a, Literal) else env.get(a, frozenset())

    for eqn in jaxpr.eqns:
        out = out_vma(eqn.primitive, [read(a) for a in eqn.invars], eqn.params)
        env.update((v, out) for v in eqn.outvars)
    return [read(v) for v in jaxpr.outvars]


def loop_carry_vmas(jaxpr: Any, consts: list, carries: list, xs: list) -> list | None:
    """The vmas of a loop's carries: their initial values' grown to a fixed point of the body
    (``jaxpr``: consts, carries, xs -> carries, ...); None outside ``shard`` or if unknown."""
    seeds = [
        x.vma if isinstance(x, UndefinedPrimal) else vma_of(x) for x in (*consts, *carries, *xs)
    ]
    if not _levels() or any(s is None for s in seeds):
        return None
    nc, ncar = len(consts), len(carries)
    for _ in range(len(manual_axes()) + 2):
        out = jaxpr_vmas(jaxpr, seeds)[:ncar]
        grown = [seeds[nc + k] | out[k] for k in range(ncar)]
        if grown == seeds[nc : nc + ncar]:
            break
        seeds[nc : nc + ncar] = grown
    return seeds
