"""Short scans unrolled before the plan: their iterations inlined, stacked rows forwarded.

A model written as JAX users write it, ``lax.scan`` over its blocks' stacked parameters, is
differentiated into two scans: the forward one saves each block's residuals as stacked outputs
and the backward one reads them back row by row. Kept as loops, the target's rewrites that
pair a forward value with its backward use (the CUDA plan's packed attention and cuBLASLt
epilogues, ``cuda/packed_attention.py``, ``cuda/epilogues.py``) cannot see both halves, each
block's parameters are stacked and its gradients unstacked every step, and every residual
stays alive until the backward loop ends (GPT-2 124M bf16 on the H200: 0.82x the unrolled step,
3 GiB more; BENCHMARKS.md). As XLA's while-loop unroller does for short trip counts, a backend
may unroll scans of at most ``max_length`` iterations (and any scan whose ``unroll`` parameter
asks for all of them, as ``lax.scan(..., unroll=True)`` does in JAX):

- each iteration's body is inlined with fresh variables, the carry threaded through;
- a scanned-over input whose rows are known values is read as those values: the rows of an
  unrolled scan's stacked output, or the operands of a ``concatenate`` along axis 0 of values
  given a leading axis of 1 (``stack``); other inputs are sliced (``slice`` + ``squeeze``);
- a stacked output is still made (``reshape`` + ``concatenate``), but a ``slice`` of one of its
  rows is the row itself (a ``reshape``), so where every reader takes rows, dead-code
  elimination drops the stacking.

The result is the program the user would have written unrolled, up to the order of
independent equations: the same values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blu.core.aval import ShapedArray
from blu.core.jaxpr import Jaxpr, JaxprEqn, Literal, Var, dce_jaxpr
from blu.lax.control_flow.scan import scan_p
from blu.lax.shapes import broadcast_in_dim_p, concatenate_p, reshape_p, squeeze_p
from blu.lax.slicing import slice_p

__all__ = ["unroll_scans", "wants_unroll"]


def wants_unroll(eqn: JaxprEqn, max_length: int) -> bool:
    """Whether scan ``eqn`` is unrolled: ``1 <= length <= max_length``, or its ``unroll``
    parameter asks for every iteration (``True``, ``0`` or ``>= length``); a body closing over
    arrays (constvars) is left as a loop."""
    p = eqn.params
    if getattr(p["jaxpr"], "constvars", None):
        return False
    n, u = p["length"], p.get("unroll", 1)
    every = u is True or (not isinstance(u, bool) and (u == 0 or u >= n > 1))
    return n >= 1 and (every or n <= max_length)


class _Unroller:
    def __init__(self, pred: Callable[[JaxprEqn], bool]):
        self.pred = pred
        self.env: dict[Var, Any] = {}
        self.eqns: list[JaxprEqn] = []
        self.rows: dict[Var, list[Any]] = {}  # a stacked value -> its rows (along axis 0)
        self.unit: dict[Var, Any] = {}  # a (1, ...) reshape of a value -> that value

    def read(self, a: Any) -> Any:
        return self.env.get(a, a) if isinstance(a, Var) else a

    def emit(self, prim: Any, ins: list, params: dict, aval: Any, source: str) -> Var:
        out = Var(aval)
        self.eqns.append(JaxprEqn(prim, ins, params, [out], source))
        return out

    def run(self, jaxpr: Jaxpr) -> Jaxpr:
        for e in jaxpr.eqns:
            ins = [self.read(a) for a in e.invars]
            if e.primitive is scan_p and self.pred(e):
                outs = self.scan(e, ins)
                self.env.update(zip(e.outvars, outs))
                continue
            if e.primitive is slice_p and self.row_slice(e, ins):
                continue
            outs = [Var(v.aval) for v in e.outvars]
            self.eqns.append(e.replace(invars=ins, outvars=outs))
            self.env.update(zip(e.outvars, outs))
            self.note(e, ins, outs)
        out = [self.read(v) for v in jaxpr.outvars]
        return dce_jaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, self.eqns, out))

    def note(self, e: JaxprEqn, ins: list, outs: list) -> None:
        """Remember values whose rows are known: ``(1, ...)`` reshapes and their
        concatenations along axis 0."""
        o = outs[0]
        if e.primitive is reshape_p and isinstance(ins[0], Var):
            shape = tuple(o.aval.shape)
            if shape[:1] == (1,) and shape[1:] == tuple(ins[0].aval.shape):
                self.unit[o] = ins[0]
        elif e.primitive is concatenate_p and e.params["dimension"] == 0:
            rows: list[Any] = []
            for a in ins:
                if isinstance(a, Var) and a in self.unit:
                    rows.append(self.unit[a])
                elif isinstance(a, Var) and a in self.rows:
                    rows.extend(self.rows[a])
                else:
                    return
            self.rows[o] = rows

    def row_slice(self, e: JaxprEqn, ins: list) -> bool:
        """``slice(X, [i:i+1, :...])`` of a value whose rows are known: row ``i`` reshaped."""
        x = ins[0]
        if not isinstance(x, Var) or x not in self.rows:
            return False
        p, shape = e.params, tuple(x.aval.shape)
        start, limit = tuple(p["start_indices"]), tuple(p["limit_indices"])
        strides = p.get("strides") or (1,) * len(shape)
        i = start[0]
        if (limit[0] != i + 1 or any(start[1:]) or limit[1:] != shape[1:]
                or any(s != 1 for s in strides)):  # fmt: skip
            return False
        row = self.rows[x][i]
        out = e.outvars[0]
        self.env[out] = self.emit(reshape_p, [row], {"new_sizes": tuple(out.aval.shape)},
                                  out.aval, e.source)  # fmt: skip
        self.unit[self.env[out]] = row
        return True

    def row_of(self, x: Any, i: int, aval: Any, source: str) -> Any:
        """Row ``i`` of scanned-over input ``x`` (``aval``: the row's)."""
        if isinstance(x, Var) and x in self.rows:
            return self.rows[x][i]
        shape = tuple(x.aval.shape)
        start, limit = (i,) + (0,) * (len(shape) - 1), (i + 1,) + shape[1:]
        one = ShapedArray((1,) + shape[1:], aval.dtype)
        s = self.emit(slice_p, [x], {"start_indices": start, "limit_indices": limit,
                                     "strides": (1,) * len(shape)}, one, source)  # fmt: skip
        return self.emit(squeeze_p, [s], {"dimensions": (0,)}, aval, source)

    def scan(self, e: JaxprEqn, ins: list) -> list[Any]:
        p = e.params
        body: Jaxpr = p["jaxpr"]
        nc, nk, n = p["num_consts"], p["num_carry"], p["length"]
        consts, carry, xs = ins[:nc], ins[nc : nc + nk], ins[nc + nk :]
        x_avals = [v.aval for v in body.invars[nc + nk :]]
        ys: list[list[Any]] = [[None] * n for _ in body.outvars[nk:]]
        for i in range(n - 1, -1, -1) if p["reverse"] else range(n):
            rows = [self.row_of(x, i, a, e.source) for x, a in zip(xs, x_avals)]
            outs = self.inline(body, [*consts, *carry, *rows], e.source)
            carry = outs[:nk]
            for j, y in enumerate(outs[nk:]):
                ys[j][i] = y
        stacked = [self.stack(rs, v.aval, e.source) for rs, v in zip(ys, e.outvars[nk:])]
        return [*carry, *stacked]

    def inline(self, body: Jaxpr, args: list, source: str) -> list[Any]:
        local: dict[Var, Any] = dict(zip(body.invars, args, strict=True))
        lread = lambda a: local[a] if isinstance(a, Var) else a  # noqa: E731
        for be in body.eqns:
            bins = [lread(a) for a in be.invars]
            if be.primitive is scan_p and self.pred(be):  # a nested short scan: unrolled too
                outs = self.scan(be, bins)
            else:
                outs = [Var(v.aval) for v in be.outvars]
                self.eqns.append(be.replace(invars=bins, outvars=outs,
                                            source=be.source or source))  # fmt: skip
                self.note(be, bins, outs)
            local.update(zip(be.outvars, outs))
        return [lread(v) for v in body.outvars]

    def stack(self, rows: list[Any], aval: Any, source: str) -> Var:
        """The stacked output of rows (dropped later where only its rows are read)."""
        one = ShapedArray((1,) + tuple(aval.shape[1:]), aval.dtype)
        units = []
        for r in rows:
            if isinstance(r, Literal):  # a scalar literal row
                units.append(self.emit(broadcast_in_dim_p, [r], {
                    "shape": one.shape, "broadcast_dimensions": ()}, one, source))  # fmt: skip
                continue
            u = self.emit(reshape_p, [r], {"new_sizes": one.shape}, one, source)
            self.unit[u] = r
            units.append(u)
        out = self.emit(concatenate_p, units, {"dimension": 0}, aval, source)
        self.rows[out] = list(rows)
        return out


def unroll_scans(jaxpr: Jaxpr, max_length: int) -> Jaxpr:
    """``jaxpr`` with its scans of at most ``max_length`` iterations (or asking to be unrolled:
    ``wants_unroll``) unrolled, at the top level and in the unrolled bodies."""
    if not any(e.primitive is scan_p and wants_unroll(e, max_length) for e in jaxpr.eqns):
        return jaxpr
    return _Unroller(lambda e: wants_unroll(e, max_length)).run(jaxpr)
