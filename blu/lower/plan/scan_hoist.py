"""Products of a ``scan`` body that do not depend on the carry, hoisted out of the loop.

A body product of a scanned-over input and a loop constant (an RNN's input projection
``x_t @ W``) computes the same thing every iteration on the next row of ``xs``: it is one product
over all rows at once, ``xs @ W`` with the rows as its leading axis, made before the loop; the
body then reads row ``t`` of that result as one more scanned-over input. One large product runs
at BLAS's full speed where ``length`` small ones each pay a call and run at a fraction of it.
(XLA keeps these products inside the loop.)

Only products whose operands are the body's own inputs (an ``xs`` and a constant), without batch
axes, whose stacked result stays under ``MAX_HOISTED_BYTES``, are moved; everything else is left
as it is.

A loop constant a body product reads transposed (the backward's ``g_t @ U^T``) is transposed
once before the loop instead (``transpose`` of the constant, a new constant of the body): BLAS
runs a product whose operand is stored transposed slower at an RNN's sizes (32x256 @
(256x256)^T; docs/benchmarks/cpu_backend.md, session 7), and the body runs it ``length`` times.
The copy is held through the loop: constants over ``MAX_HOISTED_BYTES`` are left as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blu.core.jaxpr import Jaxpr, JaxprEqn, Var
from blu.lax.shapes import transpose_p

__all__ = ["hoist_scan_products", "rewrite_scans"]

MAX_HOISTED_BYTES = 64 << 20  # a hoisted product's stacked result is held for the whole loop


def hoist_scan_products(jaxpr: Jaxpr) -> Jaxpr:
    """``jaxpr`` with the carry-independent products of its scans hoisted (see above)."""
    return rewrite_scans(jaxpr, _hoist)


def rewrite_scans(jaxpr: Jaxpr, rewrite: Callable[[JaxprEqn], list[JaxprEqn] | None]) -> Jaxpr:
    """``jaxpr`` with each ``scan`` equation replaced by ``rewrite(eqn)`` (equations in its
    place), or kept where that is None; ``jaxpr`` itself when nothing changed."""
    if not any(e.primitive.name == "scan" for e in jaxpr.eqns):
        return jaxpr
    eqns: list[JaxprEqn] = []
    changed = False
    for e in jaxpr.eqns:
        new = rewrite(e) if e.primitive.name == "scan" else None
        if new is None:
            eqns.append(e)
        else:
            eqns.extend(new)
            changed = True
    return Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, jaxpr.outvars) if changed else jaxpr


def _hoist(scan: JaxprEqn) -> list[JaxprEqn] | None:
    p = scan.params
    body: Jaxpr = p["jaxpr"]
    if getattr(body, "constvars", None):
        return None
    nc, nk, length = p["num_consts"], p["num_carry"], p["length"]
    consts = {v: i for i, v in enumerate(body.invars[:nc])}
    xs = {v: i for i, v in enumerate(body.invars[nc + nk :])}
    outer_consts, outer_xs = scan.invars[:nc], scan.invars[nc + nk :]
    before: list[JaxprEqn] = []
    new_xs_inner: list[Var] = []
    new_xs_outer: list[Any] = []
    new_consts_inner: list[Var] = []
    new_consts_outer: list[Any] = []
    laid_out: dict[tuple, Var] = {}  # (constant, permutation) -> the body's transposed constant
    keep: list[JaxprEqn] = []
    for e in body.eqns:
        stacked = _stacked_product(e, consts, xs, outer_consts, outer_xs, length)
        if stacked is not None:
            before.append(stacked)
            new_xs_inner.append(e.outvars[0])
            new_xs_outer.append(stacked.outvars[0])
            continue
        for side, perm in _transposed_consts(e, consts):
            v = e.invars[side]
            t = laid_out.get((v, perm))
            if t is None:
                aval = v.aval.update(shape=tuple(v.aval.shape[a] for a in perm))
                t = laid_out[(v, perm)] = Var(aval)
                outer = Var(aval)
                before.append(JaxprEqn(transpose_p, [outer_consts[consts[v]]],
                                       {"permutation": perm}, [outer], e.source))  # fmt: skip
                new_consts_inner.append(t)
                new_consts_outer.append(outer)
            e = _read_laid_out(e, side, t)
        keep.append(e)
    if not before:
        return None
    inv = list(body.invars)
    new_body = Jaxpr([], inv[:nc] + new_consts_inner + inv[nc:] + new_xs_inner, keep,
                     body.outvars)  # fmt: skip
    outer = list(scan.invars)
    new_scan = scan.replace(invars=outer[:nc] + new_consts_outer + outer[nc:] + new_xs_outer,
                            params={**p, "jaxpr": new_body,
                                    "num_consts": nc + len(new_consts_inner)})  # fmt: skip
    return before + [new_scan]


def _transposed_consts(e: JaxprEqn, consts: dict) -> list[tuple[int, tuple[int, ...]]]:
    """(operand, permutation) for each loop-constant operand of a body product (no batch axes)
    that is not laid out as BLAS reads it fastest: lhs (free, contracting), rhs (contracting,
    free)."""
    if e.primitive.name != "dot_general" or len(e.invars) != 2:
        return []
    (lc, rc), (lb, rb) = e.params["dimension_numbers"]
    if lb or rb:
        return []
    found = []
    for side, contract, ahead in ((0, lc, False), (1, rc, True)):
        v = e.invars[side]
        if not (isinstance(v, Var) and v in consts):
            continue
        if v.aval.size * v.aval.dtype.itemsize > MAX_HOISTED_BYTES:  # the copy is held too
            continue
        free = tuple(a for a in range(len(v.aval.shape)) if a not in contract)
        perm = tuple(contract) + free if ahead else free + tuple(contract)
        if perm != tuple(range(len(perm))):
            found.append((side, perm))
    return found


def _read_laid_out(e: JaxprEqn, side: int, t: Var) -> JaxprEqn:
    """Product ``e`` reading operand ``side`` from ``t``, its transposed copy."""
    (lc, rc), batch = e.params["dimension_numbers"]
    n = len(lc)
    if side == 0:
        lead = len(t.aval.shape) - n
        lc = tuple(range(lead, lead + n))
    else:
        rc = tuple(range(n))
    ins = list(e.invars)
    ins[side] = t
    return e.replace(invars=ins, params={**e.params, "dimension_numbers": ((lc, rc), batch)})


def _stacked_product(e, consts, xs, outer_consts, outer_xs, length) -> JaxprEqn | None:
    """``xs_full @ W`` for a body product ``x_t @ W`` (``x_t`` scanned over, ``W`` a loop
    constant), else None."""
    if e.primitive.name != "dot_general" or len(e.invars) != 2:
        return None
    lhs, rhs = e.invars
    if not (isinstance(lhs, Var) and isinstance(rhs, Var) and lhs in xs and rhs in consts):
        return None
    (lc, rc), (lb, rb) = e.params["dimension_numbers"]
    if lb or rb:
        return None
    out = e.outvars[0].aval
    stacked_aval = out.update(shape=(length,) + tuple(out.shape))
    if stacked_aval.size * stacked_aval.dtype.itemsize > MAX_HOISTED_BYTES:
        return None
    dims = ((tuple(a + 1 for a in lc), tuple(rc)), ((), ()))
    full_x, w = outer_xs[xs[lhs]], outer_consts[consts[rhs]]
    return e.replace(invars=[full_x, w], outvars=[Var(stacked_aval)],
                     params={**e.params, "dimension_numbers": dims})  # fmt: skip
