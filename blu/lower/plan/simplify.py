"""Jaxpr simplification before partitioning: inline nested ``jit``s, forward identities, fold
scalar literals, common-subexpression elimination and dead-code elimination.

Closed-over arrays are already arguments (``jit`` hoists constvars into leading invars), so
nothing here bakes an array into the program: only scalar literals are folded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blu.core.jaxpr import _EFFECTFUL, Jaxpr, JaxprEqn, Literal, Var, dce_jaxpr, use_counts

_FOLDABLE_MAX_SIZE = 1  # only scalars become literals: arrays stay values


def simplify(jaxpr: Jaxpr) -> Jaxpr:
    """A jaxpr computing the same outputs with fewer, flatter equations."""
    j = inline_jits(jaxpr)
    j = forward_and_fold(j)
    j = transposed_dots(j)
    j = cse(j)
    return dce_jaxpr(j)


def inline_jits(jaxpr: Jaxpr) -> Jaxpr:
    """Replace every nested ``jit`` equation by its body (with fresh variables), recursively,
    so fusion sees across the boundaries of inner jitted functions."""
    if not any("inline" in e.primitive.lowerings for e in jaxpr.eqns):
        return jaxpr
    env: dict[Var, Any] = {}
    eqns: list[JaxprEqn] = []

    def read(a: Any) -> Any:
        return env.get(a, a) if isinstance(a, Var) else a

    def inline(j: Jaxpr, args: list[Any]) -> list[Any]:
        local: dict[Var, Any] = dict(zip(j.invars, args, strict=True))

        def lread(a: Any) -> Any:
            return local[a] if isinstance(a, Var) else a

        for e in j.eqns:
            ins = [lread(a) for a in e.invars]
            inl = e.primitive.lowerings.get("inline")
            if inl is not None:
                outs = inline(*inl(e.params, ins))
            else:
                outs = [Var(v.aval) for v in e.outvars]
                eqns.append(e.replace(invars=ins, outvars=outs))
            local.update(zip(e.outvars, outs))
        return [lread(v) for v in j.outvars]

    for e in jaxpr.eqns:
        ins = [read(a) for a in e.invars]
        inl = e.primitive.lowerings.get("inline")
        if inl is not None:
            outs = inline(*inl(e.params, ins))
            env.update(zip(e.outvars, outs))
        else:
            eqns.append(e.replace(invars=ins))
    return Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, [read(v) for v in jaxpr.outvars])


def _is_identity(e: JaxprEqn) -> bool:
    identity = e.primitive.lowerings.get("identity")  # blu/lower/lowering.py
    return identity is not None and identity(e)


def forward_and_fold(jaxpr: Jaxpr) -> Jaxpr:
    """Drop identity equations (stop_gradient, no-op casts and reshapes) and evaluate scalar
    equations whose operands are all literals."""
    env: dict[Var, Any] = {}
    eqns = []
    for e in jaxpr.eqns:
        ins = [env.get(a, a) if isinstance(a, Var) else a for a in e.invars]
        e = e.replace(invars=ins)
        if not e.primitive.multiple_results and _is_identity(e) and isinstance(ins[0], Var):
            env[e.outvars[0]] = ins[0]
            continue
        out = e.outvars[0]
        if (
            "elementwise" in e.primitive.lowerings
            and ins
            and all(isinstance(a, Literal) for a in ins)
            and out.aval.size <= _FOLDABLE_MAX_SIZE
            and out.aval.shape == ()
        ):
            try:
                with np.errstate(all="ignore"):
                    val = e.primitive.impl(
                        *[np.asarray(a.val, a.aval.dtype) for a in ins], **e.params
                    )
                env[out] = Literal(np.asarray(val, out.aval.dtype)[()], out.aval)
                continue
            except Exception:  # an impl that cannot run on literals: keep the equation
                pass
        eqns.append(e)
    outs = [env.get(v, v) if isinstance(v, Var) else v for v in jaxpr.outvars]
    return Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, outs)


def transposed_dots(jaxpr: Jaxpr) -> Jaxpr:
    """``transpose(dot_general(a, b))`` that puts ``b``'s free axes before ``a``'s is
    ``dot_general(b, a)``: the product writes its result in the order it is read (reverse-mode
    derivatives make these, e.g. a weight's gradient ``(x^T g)^T``), instead of a product then a
    strided copy. Only products without batch axes, read by nothing but the transpose."""
    uses = use_counts(jaxpr)
    producer = {v: e for e in jaxpr.eqns for v in e.outvars}
    swapped: dict[int, JaxprEqn] = {}  # id(transpose eqn) -> the product that replaces it
    drop: set[int] = set()
    for e in jaxpr.eqns:
        if e.primitive.name != "transpose" or not isinstance(e.invars[0], Var):
            continue
        d = producer.get(e.invars[0])
        if d is None or d.primitive.name != "dot_general" or uses.get(e.invars[0]) != 1:
            continue
        (lc, rc), (lb, rb) = d.params["dimension_numbers"]
        if lb or rb:
            continue
        nl = len(d.invars[0].aval.shape) - len(lc)
        nr = len(d.invars[1].aval.shape) - len(rc)
        if tuple(e.params["permutation"]) != tuple(range(nl, nl + nr)) + tuple(range(nl)):
            continue
        params = {**d.params, "dimension_numbers": ((tuple(rc), tuple(lc)), ((), ()))}
        swapped[id(e)] = d.replace(invars=[d.invars[1], d.invars[0]], outvars=e.outvars,
                                   params=params)  # fmt: skip
        drop.add(id(d))
    if not swapped:
        return jaxpr
    eqns = [swapped.get(id(e), e) for e in jaxpr.eqns if id(e) not in drop]
    return Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, jaxpr.outvars)


def _atom_key(a: Any) -> Any:
    if isinstance(a, Literal):
        v = np.asarray(a.val, a.aval.dtype)
        return ("lit", v.dtype.str, v.tobytes(), a.aval.weak_type)
    return a


def cse(jaxpr: Jaxpr) -> Jaxpr:
    """Common-subexpression elimination: an equation equal to an earlier one (same primitive,
    params and operands) reuses the earlier outputs."""
    env: dict[Var, Any] = {}
    seen: dict[Any, list[Var]] = {}
    eqns = []
    for e in jaxpr.eqns:
        ins = [env.get(a, a) if isinstance(a, Var) else a for a in e.invars]
        e = e.replace(invars=ins)
        key = None
        if e.primitive.name not in _EFFECTFUL:
            try:
                key = (e.primitive, tuple(sorted(e.params.items())), tuple(map(_atom_key, ins)))
                hash(key)
            except TypeError:
                key = None
        if key is not None and key in seen:
            env.update(zip(e.outvars, seen[key]))
            continue
        if key is not None:
            seen[key] = e.outvars
        eqns.append(e)
    outs = [env.get(v, v) if isinstance(v, Var) else v for v in jaxpr.outvars]
    return Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, outs)
