"""Staging: tracing a Python function into a jaxpr (what ``make_jaxpr`` and ``jit`` do)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from blu.core import pytree
from blu.core.array import Array, immutable
from blu.core.aval import ShapedArray, ShapeDtypeStruct
from blu.core.errors import user_frame
from blu.core.interpreter import Interpreter, Tracer, current_interpreter, get_aval, set_interpreter
from blu.core.jaxpr import Atom, ClosedJaxpr, Jaxpr, JaxprEqn, Literal, Var


class StagedTracer(Tracer):
    """A value being staged into a jaxpr: it only knows its aval and its variable."""

    __slots__ = ("_aval", "_var")

    def __init__(self, interp: StagingInterpreter, var: Var):
        self._interp = interp
        self._aval = var.aval
        self._var = var

    @property
    def aval(self) -> ShapedArray:
        return self._aval


class StagingInterpreter(Interpreter):
    """Records every primitive application as a jaxpr equation instead of running it.

    Values it does not own (concrete arrays, or tracers of ancestor interpreters) become the
    jaxpr's constvars; Python and numpy scalars become literals.
    """

    def __init__(self, parent: Interpreter):
        self.parent = parent
        self.invars: list[Var] = []
        self.eqns: list[JaxprEqn] = []
        self.constvars: list[Var] = []
        self.consts: list[Any] = []
        self._const_ids: dict[int, Var] = {}
        self._keep_alive: list[Any] = []

    def new_arg(self, aval: ShapedArray) -> StagedTracer:
        var = Var(aval)
        self.invars.append(var)
        return StagedTracer(self, var)

    def to_atom(self, x: Any) -> Atom:
        if isinstance(x, StagedTracer) and x._interp is self:
            return x._var
        if isinstance(x, (bool, int, float, complex, np.generic)):
            return Literal(x, get_aval(x))
        if isinstance(x, Array) and x.ndim == 0:
            return Literal(x._value[()], x.aval)  # scalars print inline, as in JAX
        if isinstance(x, Tracer):
            self.check_value(x)
        var = self._const_ids.get(id(x))
        if var is None:
            var = Var(get_aval(x))
            self._const_ids[id(x)] = var
            self.constvars.append(var)
            self._keep_alive.append(x)  # so its id stays unique while tracing
            if isinstance(x, np.ndarray):  # captured at trace time, as in JAX
                x = Array(x if immutable(x) else np.array(x))
            self.consts.append(x)
        return var

    def stage(self, prim: Any, atoms: list[Atom], params: dict, out_avals: Any) -> Any:
        """Append one equation and return tracers for its outputs."""
        avals = out_avals if prim.multiple_results else [out_avals]
        outvars = [Var(a) for a in avals]
        self.eqns.append(JaxprEqn(prim, atoms, params, outvars, user_frame()))
        outs = [StagedTracer(self, v) for v in outvars]
        return outs if prim.multiple_results else outs[0]

    def process(self, prim: Any, args: tuple, params: dict) -> Any:
        atoms = [self.to_atom(a) for a in args]
        out_avals = prim.rule("abstract_eval")(*[a.aval for a in atoms], **params)
        return self.stage(prim, atoms, params, out_avals)

    def build(self, outs: Sequence[Any]) -> tuple[Jaxpr, list[Any]]:
        """Finish: the jaxpr whose outputs are ``outs``, and the values of its constvars."""
        outvars = [self.to_atom(o) for o in outs]
        self.finished = True
        return Jaxpr(self.constvars, self.invars, self.eqns, outvars), self.consts


def trace_to_jaxpr(
    fun: Callable[..., Sequence[Any]], in_avals: Sequence[ShapedArray]
) -> tuple[Jaxpr, list[Any]]:
    """Trace ``fun`` (flat arguments -> flat list of outputs) into a jaxpr and its consts."""
    builder = StagingInterpreter(current_interpreter())
    args = [builder.new_arg(a) for a in in_avals]
    with set_interpreter(builder):
        outs = fun(*args)
    return builder.build(outs)


def hoist_consts(jaxpr: Jaxpr) -> Jaxpr:
    """Turn constvars into leading invars (closed-over values become arguments)."""
    return Jaxpr([], jaxpr.constvars + jaxpr.invars, jaxpr.eqns, jaxpr.outvars)


def make_jaxpr(
    fun: Callable, static_argnums: int | Sequence[int] = ()
) -> Callable[..., ClosedJaxpr]:
    """Return a function that traces ``fun`` on example arguments and gives its jaxpr.

    An argument may be a ``ShapeDtypeStruct`` (only its shape and dtype are read), as in JAX.

    Example:
        >>> blu.make_jaxpr(lambda x: bnp.sin(x) * 2.0)(1.0)
        { lambda ; a:f32[]. let
            b:f32[] = sin a
            c:f32[] = mul b 2.0
          in (c,) }
    """
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    def traced(*args: Any, **kwargs: Any) -> ClosedJaxpr:
        dyn = [a for i, a in enumerate(args) if i not in static]
        leaves, in_tree = pytree.tree_flatten((dyn, kwargs))
        # a ShapeDtypeStruct stands for an argument of its shape and dtype (as in JAX)
        in_avals = [
            ShapedArray(x.shape, x.dtype) if isinstance(x, ShapeDtypeStruct) else get_aval(x)
            for x in leaves
        ]

        def flat_fun(*flat):
            d, kw = pytree.tree_unflatten(in_tree, list(flat))
            it = iter(d)
            full = [a if i in static else next(it) for i, a in enumerate(args)]
            return pytree.tree_leaves(fun(*full, **kw))

        jaxpr, consts = trace_to_jaxpr(flat_fun, in_avals)
        return ClosedJaxpr(jaxpr, consts)

    return traced
