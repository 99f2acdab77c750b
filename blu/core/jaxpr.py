"""The jaxpr: blu's IR. A list of primitive applications over typed variables.

    { lambda a:f32[3]; b:f32[3]. let
        c:f32[3] = sin b
        d:f32[3] = mul c a
      in (d,) }

``constvars`` (before the ``;``) are values the traced function closed over; ``invars`` its
arguments. Every equation binds fresh ``outvars``; operands are ``Var``s or ``Literal`` scalars.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from blu.core.aval import ShapedArray
from blu.core.dtypes import short_name

_var_ids = itertools.count()


class Var:
    """A variable of a jaxpr, with its aval. Identity is object identity."""

    __slots__ = ("aval", "id")

    def __init__(self, aval: ShapedArray):
        self.aval = aval
        self.id = next(_var_ids)

    def __repr__(self) -> str:
        return f"Var({self.id}:{self.aval.str_short()})"


class Literal:
    """A scalar constant written into the jaxpr."""

    __slots__ = ("val", "aval")

    def __init__(self, val: Any, aval: ShapedArray):
        self.val = val
        self.aval = aval

    def __repr__(self) -> str:
        return f"Literal({self.val})"


Atom = Var | Literal


class JaxprEqn:
    """``outvars = primitive[params] invars``, with the user's source line it came from."""

    __slots__ = ("primitive", "invars", "params", "outvars", "source")

    def __init__(self, primitive, invars: list, params: dict, outvars: list[Var], source: str = ""):
        self.primitive = primitive
        self.invars = invars
        self.params = params
        self.outvars = outvars
        self.source = source

    def replace(self, **kw: Any) -> JaxprEqn:
        fields = {s: getattr(self, s) for s in self.__slots__}
        fields.update(kw)
        return JaxprEqn(**fields)


class Jaxpr:
    """A typed program: ``constvars``, ``invars``, ``eqns``, ``outvars``."""

    __slots__ = ("constvars", "invars", "eqns", "outvars", "__weakref__")

    def __init__(self, constvars: list[Var], invars: list[Var], eqns: list[JaxprEqn], outvars):
        self.constvars = list(constvars)
        self.invars = list(invars)
        self.eqns = list(eqns)
        self.outvars = list(outvars)

    @property
    def in_avals(self) -> list[ShapedArray]:
        return [v.aval for v in self.invars]

    @property
    def out_avals(self) -> list[ShapedArray]:
        return [v.aval for v in self.outvars]

    def __str__(self) -> str:
        return pp_jaxpr(self)

    __repr__ = __str__


class ClosedJaxpr:
    """A jaxpr together with the values of its constvars."""

    __slots__ = ("jaxpr", "consts")

    def __init__(self, jaxpr: Jaxpr, consts: Sequence[Any]):
        self.jaxpr = jaxpr
        self.consts = list(consts)

    in_avals = property(lambda self: self.jaxpr.in_avals)
    out_avals = property(lambda self: self.jaxpr.out_avals)
    eqns = property(lambda self: self.jaxpr.eqns)

    def __str__(self) -> str:
        return pp_jaxpr(self.jaxpr)

    __repr__ = __str__


# ---- printing ----------------------------------------------------------------------------------


def _names():
    for n in itertools.count(1):
        for combo in itertools.product("abcdefghijklmnopqrstuvwxyz", repeat=n):
            yield "".join(combo)


class _Namer:
    def __init__(self):
        self.names: dict[Var, str] = {}
        self.gen = _names()

    def __call__(self, v: Atom) -> str:
        if isinstance(v, Literal):
            val = v.val.item() if isinstance(v.val, (np.ndarray, np.generic)) else v.val
            return repr(val)
        if v not in self.names:
            self.names[v] = next(self.gen)
        return self.names[v]

    def typed(self, v: Var) -> str:
        return f"{self(v)}:{v.aval.str_short()}"


def _pp_param(value: Any, namer_indent: int) -> str:
    if isinstance(value, ClosedJaxpr):
        value = value.jaxpr
    if isinstance(value, Jaxpr):
        inner = pp_jaxpr(value).replace("\n", "\n" + " " * namer_indent)
        return inner
    if isinstance(value, np.dtype):
        return short_name(value)
    return repr(value)


def pp_jaxpr(jaxpr: Jaxpr, indent: int = 0) -> str:
    """A readable listing of the jaxpr, in JAX's layout."""
    name = _Namer()
    consts = " ".join(name.typed(v) for v in jaxpr.constvars)
    ins = " ".join(name.typed(v) for v in jaxpr.invars)
    head = f"{{ lambda {consts}; {ins}. let" if consts else f"{{ lambda ; {ins}. let"
    lines = [head]
    for eqn in jaxpr.eqns:
        outs = " ".join(name.typed(v) for v in eqn.outvars)
        params = ""
        if eqn.params:
            items = ", ".join(f"{k}={_pp_param(v, 8)}" for k, v in sorted(eqn.params.items()))
            params = f"[{items}]"
        args = " ".join(name(v) for v in eqn.invars)
        lines.append(f"    {outs} = {eqn.primitive.name}{params} {args}")
    outs = ", ".join(name(v) for v in jaxpr.outvars)
    lines.append(f"  in ({outs},) }}")
    return "\n".join(lines)


# ---- evaluation --------------------------------------------------------------------------------


def eval_jaxpr(jaxpr: Jaxpr, consts: Sequence[Any], *args: Any) -> list[Any]:
    """Run a jaxpr by binding each equation's primitive under the current interpreter.

    Under the eval interpreter this computes values; under a transform's interpreter it applies
    that transform to the whole program.
    """
    env: dict[Var, Any] = {}

    def read(v: Atom) -> Any:
        return v.val if isinstance(v, Literal) else env[v]

    for v, x in zip(jaxpr.constvars, consts, strict=True):
        env[v] = x
    for v, x in zip(jaxpr.invars, args, strict=True):
        env[v] = x
    for eqn in jaxpr.eqns:
        outs = eqn.primitive.bind(*map(read, eqn.invars), **eqn.params)
        if eqn.primitive.multiple_results:
            env.update(zip(eqn.outvars, outs, strict=True))
        else:
            env[eqn.outvars[0]] = outs
    return [read(v) for v in jaxpr.outvars]


def jaxpr_as_fun(closed: ClosedJaxpr) -> Callable[..., list[Any]]:
    return lambda *args: eval_jaxpr(closed.jaxpr, closed.consts, *args)


# ---- simplification ----------------------------------------------------------------------------


def use_counts(jaxpr: Jaxpr, output_uses: int = 1) -> dict[Var, int]:
    """How many times each variable is read: once per equation operand, ``output_uses`` times
    as an output of ``jaxpr`` (rewrites that take a value over when it has one reader)."""
    uses: dict[Var, int] = {}
    for e in jaxpr.eqns:
        for a in e.invars:
            if isinstance(a, Var):
                uses[a] = uses.get(a, 0) + 1
    for v in jaxpr.outvars:
        if isinstance(v, Var):
            uses[v] = uses.get(v, 0) + output_uses
    return uses


def producers(jaxpr: Jaxpr) -> dict[Var, JaxprEqn]:
    """The equation that makes each variable (rewrites that walk a value back to its source)."""
    return {v: e for e in jaxpr.eqns for v in e.outvars}


def readers(jaxpr: Jaxpr) -> dict[Var, list[JaxprEqn]]:
    """The equations that read each variable, in program order (once per operand)."""
    out: dict[Var, list[JaxprEqn]] = {}
    for e in jaxpr.eqns:
        for a in e.invars:
            if isinstance(a, Var):
                out.setdefault(a, []).append(e)
    return out


def splice_jaxpr(body: Jaxpr, args: Sequence[Any], into: list[JaxprEqn], source: str = "") -> list:
    """Append ``body``'s equations to ``into`` with fresh output variables and its inputs bound
    to ``args`` (atoms of the enclosing jaxpr); return its outputs there. ``source``, when
    given, is every spliced equation's user line (a rewrite traced now would otherwise carry
    the rewrite's own lines)."""
    local: dict[Var, Any] = dict(zip(body.invars, args, strict=True))
    read = lambda a: local[a] if isinstance(a, Var) else a  # noqa: E731
    for be in body.eqns:
        outs = [Var(v.aval) for v in be.outvars]
        into.append(be.replace(invars=[read(a) for a in be.invars], outvars=outs,
                               source=source or be.source))  # fmt: skip
        local.update(zip(be.outvars, outs))
    return [read(v) for v in body.outvars]


def splice_each(jaxpr: Jaxpr, body_of: Callable[[JaxprEqn], Jaxpr | None]) -> Jaxpr:
    """``jaxpr`` with each equation for which ``body_of(eqn)`` gives a jaxpr replaced by that
    jaxpr's equations (``splice_jaxpr`` on the equation's operands, with its source line); the
    other equations kept (their operands renamed)."""
    env: dict[Var, Any] = {}
    eqns: list[JaxprEqn] = []
    read = lambda a: env.get(a, a) if isinstance(a, Var) else a  # noqa: E731
    for e in jaxpr.eqns:
        ins = [read(a) for a in e.invars]
        body = body_of(e)
        if body is None:
            eqns.append(e.replace(invars=ins))
        else:
            env.update(zip(e.outvars, splice_jaxpr(body, ins, eqns, e.source)))
    return Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, [read(v) for v in jaxpr.outvars])


def dce_jaxpr(jaxpr: Jaxpr, used_outputs: Sequence[bool] | None = None) -> Jaxpr:
    """Dead-code elimination: drop equations none of whose outputs are used.

    Args:
        used_outputs: which outputs to keep (default: all).
    """
    outvars = jaxpr.outvars
    if used_outputs is not None:
        outvars = [v for v, u in zip(outvars, used_outputs, strict=True) if u]
    live = {v for v in outvars if isinstance(v, Var)}
    kept = []
    for eqn in reversed(jaxpr.eqns):
        if any(v in live for v in eqn.outvars) or eqn.primitive.name in _EFFECTFUL:
            kept.append(eqn)
            live.update(v for v in eqn.invars if isinstance(v, Var))
    kept.reverse()
    return Jaxpr(jaxpr.constvars, jaxpr.invars, kept, outvars)


_EFFECTFUL: set[str] = set()  # primitive names DCE must keep (e.g. debug callbacks)
