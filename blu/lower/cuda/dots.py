"""Put every ``dot_general`` of a jaxpr in a layout one cuBLASLt call reads without copies.

cuBLASLt multiplies strided batches of column-major matrices, optionally transposed
(``cublaslt.gemm_spec``): batch dimensions must lead both operands and each operand must be
``free + contracting`` or ``contracting + free`` in memory. This pass, for the GPU target:

1. folds a ``transpose`` feeding a product into the product's dimension numbers when the
   output's dimension order is unchanged (e.g. ``x @ w.T`` reads ``w`` as it is stored, with
   cuBLAS's TRANSA);
2. where the layout is still unreadable, inserts a ``transpose`` of the operand into
   ``(batch, free, contracting)`` / ``(batch, contracting, free)`` order; the fusion pass folds
   that copy into the kernel producing the operand when it can.
"""

from __future__ import annotations

from typing import Any

from blu.core import dtypes
from blu.core.jaxpr import Jaxpr, JaxprEqn, Var, dce_jaxpr, use_counts
from blu.lax.dot import dot_general_p
from blu.lax.shapes import transpose_p

GEMM_DTYPES = (dtypes.float32, dtypes.float64, dtypes.bfloat16, dtypes.float16)


def library_dot(eqn: JaxprEqn) -> bool:
    """Whether the GPU runs this ``dot_general`` through cuBLASLt (float operands of one dtype)."""
    lhs, rhs = eqn.invars
    out = eqn.outvars[0].aval.dtype
    return (
        isinstance(lhs, Var) and isinstance(rhs, Var)
        and lhs.aval.dtype == rhs.aval.dtype and lhs.aval.dtype in GEMM_DTYPES
        and (out == lhs.aval.dtype or out == dtypes.float32)
    )  # fmt: skip


def canonicalize_dots(jaxpr: Jaxpr) -> Jaxpr:
    """The jaxpr with its library products readable by cuBLASLt (see the module docstring)."""
    from blu.cuda.cublaslt import gemm_spec

    if not any(e.primitive is dot_general_p for e in jaxpr.eqns):
        return jaxpr
    source = _fold_output_transposes(jaxpr)
    changed = source is not jaxpr.eqns
    producer = {v: e for e in source for v in e.outvars}
    eqns: list[JaxprEqn] = []
    for e in source:
        if e.primitive is not dot_general_p or not library_dot(e):
            eqns.append(e)
            continue
        (lc, rc), (lb, rb) = e.params["dimension_numbers"]
        lhs, rhs = e.invars
        lhs, lc, lb = _fold_transpose(producer.get(lhs), lhs, lc, lb)
        rhs, rc, rb = _fold_transpose(producer.get(rhs), rhs, rc, rb)
        dn = ((tuple(lc), tuple(rc)), (tuple(lb), tuple(rb)))
        if gemm_spec(lhs.aval.shape, rhs.aval.shape, dn) is None:
            # copy the fewest operands into canonical order: lhs (batch, free, contracting),
            # rhs (batch, contracting, free)
            nb = len(lb)
            lf = [d for d in range(lhs.aval.ndim) if d not in lc and d not in lb]
            rf = [d for d in range(rhs.aval.ndim) if d not in rc and d not in rb]
            lperm, rperm = tuple(lb) + tuple(lf) + tuple(lc), tuple(rb) + tuple(rc) + tuple(rf)
            lcan = (list(range(nb + len(lf), lhs.aval.ndim)), list(range(nb)))
            rcan = (list(range(nb, nb + len(rc))), list(range(nb)))
            for fix_l, fix_r in ((True, False), (False, True), (True, True)):
                lc2, lb2 = lcan if fix_l else (lc, lb)
                rc2, rb2 = rcan if fix_r else (rc, rb)
                ls = _permuted(lhs.aval.shape, lperm) if fix_l else lhs.aval.shape
                rs = _permuted(rhs.aval.shape, rperm) if fix_r else rhs.aval.shape
                cand = ((tuple(lc2), tuple(rc2)), (tuple(lb2), tuple(rb2)))
                if gemm_spec(ls, rs, cand) is not None:
                    break
            if fix_l:
                lhs = _transpose(eqns, transpose_p, lhs, lperm, e.source)
            if fix_r:
                rhs = _transpose(eqns, transpose_p, rhs, rperm, e.source)
            dn = cand
        if (lhs, rhs) != tuple(e.invars) or dn != e.params["dimension_numbers"]:
            changed = True
            e = JaxprEqn(e.primitive, [lhs, rhs], {**e.params, "dimension_numbers": dn},
                         e.outvars, e.source)  # fmt: skip
        eqns.append(e)
    if not changed:
        return jaxpr
    return dce_jaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, jaxpr.outvars))


def _fold_output_transposes(jaxpr: Jaxpr) -> list[JaxprEqn]:
    """``transpose(dot_general(a, b), perm)`` that only swaps the two free groups of the
    output becomes ``dot_general(b, a)`` (e.g. a weight gradient ``(x.T @ dy).T``): the
    product writes the layout its reader wants, with no copy. Returns ``jaxpr.eqns`` itself when
    nothing changes."""
    uses = use_counts(jaxpr, output_uses=2)  # an output keeps its own layout
    swapped: dict[Var, JaxprEqn] = {}  # a dot's output -> the dot writing the transpose instead
    for t in jaxpr.eqns:
        if t.primitive is not transpose_p:
            continue
        x = t.invars[0]
        if not isinstance(x, Var) or uses.get(x) != 1:
            continue
        d = next((e for e in jaxpr.eqns if x in e.outvars), None)
        if d is None or d.primitive is not dot_general_p or not library_dot(d):
            continue
        (lc, rc), (lb, rb) = d.params["dimension_numbers"]
        nb = len(lb)
        nl = d.invars[0].aval.ndim - len(lc) - nb
        nr = d.invars[1].aval.ndim - len(rc) - nb
        want = tuple(range(nb)) + tuple(range(nb + nl, nb + nl + nr)) + tuple(range(nb, nb + nl))
        if tuple(t.params["permutation"]) != want:
            continue
        swapped[x] = JaxprEqn(d.primitive, [d.invars[1], d.invars[0]],
                              {**d.params, "dimension_numbers": ((rc, lc), (rb, lb))},
                              t.outvars, d.source)  # fmt: skip
    if not swapped:
        return jaxpr.eqns
    out = []
    for e in jaxpr.eqns:
        if e.primitive is dot_general_p and e.outvars[0] in swapped:
            out.append(swapped[e.outvars[0]])
        elif not (e.primitive is transpose_p and e.invars[0] in swapped):
            out.append(e)
    return out


def _fold_transpose(prod: Any, x: Var, contract, batch) -> tuple[Var, list[int], list[int]]:
    """Read through ``x = transpose(y, perm)`` when the free dimensions keep their order."""
    if prod is None or prod.primitive is not transpose_p or not isinstance(prod.invars[0], Var):
        return x, list(contract), list(batch)
    perm = prod.params["permutation"]
    free = [d for d in range(x.aval.ndim) if d not in contract and d not in batch]
    mapped = [perm[d] for d in free]
    if mapped != sorted(mapped):
        return x, list(contract), list(batch)
    return prod.invars[0], [perm[d] for d in contract], [perm[d] for d in batch]


def _permuted(shape: tuple[int, ...], perm: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(shape[d] for d in perm)


def _transpose(eqns: list[JaxprEqn], prim: Any, x: Var, perm: tuple[int, ...], source: str) -> Var:
    if perm == tuple(range(len(perm))):
        return x
    out = Var(prim.rule("abstract_eval")(x.aval, permutation=perm))
    eqns.append(JaxprEqn(prim, [x], {"permutation": perm}, [out], source))
    return out
