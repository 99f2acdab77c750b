"""Complex matrix products on CUDA targets as real cuBLASLt products.

cuBLASLt's real GEMMs are what blu's CUDA plans run (``dots.library_dot``); a ``dot_general``
of complex64 / complex128 operands would otherwise run as a host fallback. With
``a = ar + i ai`` and ``b = br + i bi``::

    a . b = (ar . br - ai . bi) + i (ar . bi + ai . br)

four real products of the same dimension numbers (two where one operand is real), whose real
and imaginary parts the fused kernels read and assemble (``real``, ``imag``, ``complex`` are
kernel rules: ``mlir/rules_complex.py``). The products run in the parts' dtype (float32 for
complex64, float64 for complex128) at the equation's precision.

Numerics: the textbook four-multiplication form (not Gauss's three-multiplication one, which
loses accuracy when the parts differ in magnitude); each part's sum is rounded as a real GEMM
rounds it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.jaxpr import Jaxpr, JaxprEqn, Var, dce_jaxpr, splice_jaxpr
from blu.core.staging import trace_to_jaxpr
from blu.lax.complex import complex as make_complex
from blu.lax.complex import imag, real
from blu.lax.dot import dot_general, dot_general_p

__all__ = ["split_complex_dots"]


def _is_complex(a: Any) -> bool:
    return np.dtype(a.aval.dtype).kind == "c"


def _splits(e: JaxprEqn) -> bool:
    """A complex product whose parts cuBLASLt multiplies: complex64 / complex128 results of
    operands each complex of that dtype or real of its parts' dtype."""
    if e.primitive is not dot_general_p or not _is_complex(e.outvars[0]):
        return False
    out = np.dtype(e.outvars[0].aval.dtype)
    part = np.dtype(np.float32 if out == np.complex64 else np.float64)
    return all(np.dtype(a.aval.dtype) in (out, part) for a in e.invars) and out in (
        np.dtype(dtypes.complex64), np.dtype(dtypes.complex128))  # fmt: skip


def _parts(x: Any, is_real: bool) -> tuple[Any, Any]:
    return (x, None) if is_real else (real(x), imag(x))


def _body(e: JaxprEqn) -> Jaxpr:
    """The real-products form of complex product ``e``, traced on its operands' avals."""
    p = e.params
    lreal, rreal = (not _is_complex(a) for a in e.invars)

    def dot(x, y):
        return dot_general(x, y, p["dimension_numbers"], precision=p.get("precision"))

    def fun(a, b):
        ar, ai = _parts(a, lreal)
        br, bi = _parts(b, rreal)
        re = dot(ar, br) if ai is None or bi is None else dot(ar, br) - dot(ai, bi)
        terms = [t for t in (ar is not None and bi is not None and dot(ar, bi),
                             ai is not None and dot(ai, br)) if t is not False]  # fmt: skip
        im = terms[0] if len(terms) == 1 else terms[0] + terms[1]
        return [make_complex(re, im)]

    j, consts = trace_to_jaxpr(fun, [a.aval for a in e.invars])
    assert not consts and not j.constvars
    return j


def split_complex_dots(jaxpr: Jaxpr) -> Jaxpr:
    """``jaxpr`` with each complex ``dot_general`` as real products (see the module doc)."""
    if not any(_splits(e) for e in jaxpr.eqns):
        return jaxpr
    env: dict[Var, Any] = {}
    eqns: list[JaxprEqn] = []
    read = lambda a: env.get(a, a) if isinstance(a, Var) else a  # noqa: E731
    for e in jaxpr.eqns:
        ins = [read(a) for a in e.invars]
        if not _splits(e):
            outs = [Var(v.aval) for v in e.outvars]
            eqns.append(e.replace(invars=ins, outvars=outs))
            env.update(zip(e.outvars, outs))
            continue
        (env[e.outvars[0]],) = splice_jaxpr(_body(e), ins, eqns, e.source)
    return dce_jaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, [read(v) for v in jaxpr.outvars]))
