"""Sums of products accumulated by a ``scan`` carry, made after the loop as one product.

The transpose of a scan (the backward pass of an RNN) accumulates each weight's gradient in a
carry: ``dU <- dU + h_{t-1}^T g_t`` every iteration, a (256 x 32) @ (32 x 256) product that runs
at a fraction of BLAS's speed (a short contraction) and an add of the whole ``dU``. Where a
carry is only ever added to by one product of per-iteration values, the loop computes nothing
from it: the body emits the product's operands as stacked outputs instead (an operand that is a
scanned-over input is not emitted: the stacked input itself is used), and after the loop one
product contracting the rows as well, ``sum_t A_t^T B_t = A^T B`` with ``A``, ``B`` stacked
(``(256 x 3200) @ (3200 x 256)``), is added to the carry's initial value. The mirror of
``scan_hoist`` (products independent of the carry moved before the loop).

The rewrite applies to a carry ``c`` whose body output is ``add(c, v)`` (either order) where
``v`` is a ``dot_general`` without batch axes, possibly followed by ``transpose``/``reshape``,
of two operands that are not loop constants; ``c`` must be read by nothing else and each
intermediate value by nothing but the next link. Stacked outputs it adds stay under
``MAX_STACKED_BYTES``. The sum is the same up to the order of floating-point additions.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from blu.core.jaxpr import Jaxpr, JaxprEqn, Var, dce_jaxpr, use_counts
from blu.lower.plan.scan_hoist import rewrite_scans

__all__ = ["hoist_scan_accumulations"]

MAX_STACKED_BYTES = 64 << 20  # the operands stacked for the sum are held until after the loop
_LINKS = ("transpose", "reshape")  # linear maps that commute with the sum over iterations


def hoist_scan_accumulations(jaxpr: Jaxpr) -> Jaxpr:
    """``jaxpr`` with the product-accumulating carries of its scans summed after the loop."""
    return rewrite_scans(jaxpr, _rewrite)


class _Sum:
    """A carry found summing products: its index, the body's add, product and links."""

    def __init__(self, k: int, add: JaxprEqn, carry_first: bool, dot: JaxprEqn, links: list):
        self.k, self.add, self.carry_first, self.dot, self.links = k, add, carry_first, dot, links


def _uses(body: Jaxpr) -> Counter:
    return Counter(use_counts(body))  # (0 for a variable nothing reads)


def _find(body: Jaxpr, nc: int, nk: int) -> list[_Sum]:
    """The carries of ``body`` that only accumulate a product (see the module docstring)."""
    producer = {v: e for e in body.eqns for v in e.outvars}
    uses = _uses(body)
    consts = set(body.invars[:nc])
    found = []
    for k in range(nk):
        c, out = body.invars[nc + k], body.outvars[k]
        add = producer.get(out) if isinstance(out, Var) else None
        if add is None or add.primitive.name != "add" or uses[c] != 1 or uses[out] != 1:
            continue
        a, b = add.invars
        if (a is c) == (b is c):
            continue
        v = b if a is c else a
        links: list[JaxprEqn] = []
        e = producer.get(v) if isinstance(v, Var) else None
        while e is not None and e.primitive.name in _LINKS and len(e.invars) == 1 and uses[v] == 1:
            links.append(e)
            v = e.invars[0]
            e = producer.get(v) if isinstance(v, Var) else None
        if e is None or e.primitive.name != "dot_general" or uses[v] != 1:
            continue
        (_, _), (lb, rb) = e.params["dimension_numbers"]
        ops = e.invars
        if lb or rb or len(ops) != 2 or not all(isinstance(x, Var) for x in ops):
            continue
        if any(x in consts for x in ops) or c in ops:
            continue
        if out.aval.dtype != e.outvars[0].aval.dtype:
            continue
        links.reverse()
        found.append(_Sum(k, add, a is c, e, links))
    return found


def _rewrite(scan: JaxprEqn) -> list[JaxprEqn] | None:
    p = scan.params
    body: Jaxpr = p["jaxpr"]
    if getattr(body, "constvars", None):
        return None
    nc, nk, length = p["num_consts"], p["num_carry"], p["length"]
    sums = _find(body, nc, nk)
    if not sums:
        return None
    # per operand, its stacked value outside: a scanned-over input as it is, an existing stacked
    # output, or a new stacked output of the body
    outer_of: dict[Var, Any] = {
        v: x for v, x in zip(body.invars[nc + nk :], scan.invars[nc + nk :])
    }
    outer_of.update(
        (v, o) for v, o in zip(body.outvars[nk:], scan.outvars[nk:]) if isinstance(v, Var)
    )
    new_ys: list[Var] = []
    new_outer: list[Var] = []
    budget = MAX_STACKED_BYTES
    kept: list[_Sum] = []
    for s in sums:
        need = [x for x in dict.fromkeys(s.dot.invars) if x not in outer_of]
        size = sum(length * x.aval.size * x.aval.dtype.itemsize for x in need)
        if size > budget:
            continue
        budget -= size
        for x in need:
            y = Var(x.aval.update(shape=(length,) + tuple(x.aval.shape)))
            outer_of[x] = y
            new_ys.append(x)
            new_outer.append(y)
        kept.append(s)
    if not kept:
        return None
    drop = {s.k for s in kept}
    gone = {id(e) for s in kept for e in [s.add, s.dot, *s.links]}
    keep_k = [k for k in range(nk) if k not in drop]
    invars = (body.invars[:nc] + [body.invars[nc + k] for k in keep_k]
              + body.invars[nc + nk :])  # fmt: skip
    outvars = [body.outvars[k] for k in keep_k] + body.outvars[nk:] + new_ys
    new_body = dce_jaxpr(Jaxpr([], invars, [e for e in body.eqns if id(e) not in gone], outvars))
    # scanned-over inputs only the products read are not sliced per iteration any more
    used = _uses(new_body)
    xs = [(v, x) for v, x in zip(body.invars[nc + nk :], scan.invars[nc + nk :]) if used[v]]
    new_body = Jaxpr([], invars[: nc + len(keep_k)] + [v for v, _ in xs], new_body.eqns, outvars)
    outer_in = (scan.invars[:nc] + [scan.invars[nc + k] for k in keep_k]
                + [x for _, x in xs])  # fmt: skip
    outer_out = [scan.outvars[k] for k in keep_k] + scan.outvars[nk:] + new_outer
    new_scan = scan.replace(
        invars=outer_in,
        outvars=outer_out,
        params={**p, "jaxpr": new_body, "num_carry": len(keep_k)},
    )
    after: list[JaxprEqn] = []
    for s in kept:
        after.extend(_summed(s, outer_of, scan.invars[nc + s.k], scan.outvars[s.k]))
    return [new_scan, *after]


def _summed(s: _Sum, outer_of: dict, init: Any, result: Var) -> list[JaxprEqn]:
    """``result = init + links(sum_t dot(A_t, B_t))`` as one product over the stacked operands
    (the iteration axis contracted with the product's own contracting axes)."""
    (lc, rc), _ = s.dot.params["dimension_numbers"]
    dims = (((0, *(a + 1 for a in lc)), (0, *(a + 1 for a in rc))), ((), ()))
    lhs, rhs = (outer_of[x] for x in s.dot.invars)
    v = Var(s.dot.outvars[0].aval)
    eqns = [s.dot.replace(invars=[lhs, rhs], outvars=[v],
                          params={**s.dot.params, "dimension_numbers": dims})]  # fmt: skip
    for link in s.links:
        w = Var(link.outvars[0].aval)
        eqns.append(link.replace(invars=[v], outvars=[w]))
        v = w
    ins = [init, v] if s.carry_first else [v, init]
    eqns.append(s.add.replace(invars=ins, outvars=[result]))
    return eqns
