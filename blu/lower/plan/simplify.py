"""Jaxpr simplification before partitioning: inline nested ``jit``s, forward identities, fold
scalar literals, common-subexpression elimination and dead-code elimination.

Closed-over arrays are already arguments (``jit`` hoists constvars into leading invars), so
nothing here bakes an array into the program: only scalar literals are folded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blu.core.jaxpr import _EFFECTFUL, Jaxpr, JaxprEqn, Literal, Var, dce_jaxpr

_FOLDABLE_MAX_SIZE = 1  # only scalars become literals: arrays stay values


def simplify(jaxpr: Jaxpr) -> Jaxpr:
    """A jaxpr computing the same outputs with fewer, flatter equations."""
    j = inline_jits(jaxpr)
    j = forward_and_fold(j)
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
