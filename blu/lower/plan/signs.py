"""Signs a kernel's values are known to have, from the shape of its jaxpr alone.

One fact so far: ``x - max(x)`` (the max over some axes of the same ``x``, broadcast back over
them, the shift of every softmax and log-sum-exp) is at most 0, or NaN. Each element is its
own value less the largest of a set that holds it: ``x[i] - M[i] <= 0`` whenever ``M[i]`` is
finite or ``+inf`` with ``x[i]`` finite; ``inf - inf``, ``-inf - -inf`` and any NaN give NaN.
A GPU kernel then computes ``exp`` of such a value without the argument reduction that keeps
large results accurate (``blu.lower.mlir.mathlib.exp_nonpositive``): results lie in [0, 1].

Only the forms the tracer writes are matched: ``broadcast_in_dim`` of the ``reduce_max``
straight over the kept dimensions, or of its ``reshape`` to the kept-dimension shape (size 1
on the reduced axes: ``keepdims``), through ``stop_gradient`` and through ``blu.nn``'s stable
shift ``where(isfinite(m), m, 0)``. That last one is not ``<= 0`` everywhere: a max of
``+inf`` or NaN (a row holding one) shifts by 0, and the row's other elements stay as they are,
but that row's sum of exponentials is ``+inf`` or NaN, so its softmax, log-softmax and
log-sum-exp are 0, ``inf``, ``-inf`` or NaN whatever those exponentials' last bits (and the
cheaper exp is still within ``0.75 |x| + 2.5`` ulp of them). Anything else is unknown (no fact),
never guessed.
"""

from __future__ import annotations

from typing import Any

from blu.core.jaxpr import Jaxpr, Literal, Var
from blu.lax.elementwise import is_finite_p, select_p, sub_p
from blu.lax.reductions import reduce_max_p
from blu.lax.shapes import broadcast_in_dim_p, reshape_p


def nonpositive(jaxpr: Jaxpr) -> frozenset[Var]:
    """The variables of ``jaxpr`` whose every element is ``<= 0`` or NaN (``x - max(x)``)."""
    producer = {v: e for e in jaxpr.eqns for v in e.outvars}
    out = set()
    for e in jaxpr.eqns:
        if e.primitive is sub_p and all(isinstance(a, Var) for a in e.invars):
            x, m = e.invars
            if _row_max_of(m, x, producer):
                out.add(e.outvars[0])
    return frozenset(out)


def _row_max_of(m: Var, x: Var, producer: dict[Var, Any]) -> bool:
    """Whether ``m[i]`` is the max of ``x`` over a set of elements that holds ``x[i]``."""
    shape = tuple(x.aval.shape)
    b = producer.get(m)
    if b is None or b.primitive is not broadcast_in_dim_p or tuple(m.aval.shape) != shape:
        return False
    src, dims = b.invars[0], tuple(b.params["broadcast_dimensions"])
    src = _peel(src, producer)
    r = producer.get(src) if isinstance(src, Var) else None
    if r is not None and r.primitive is reshape_p:  # keepdims: the reduced axes kept as 1s
        inner = r.invars[0]
        red = producer.get(inner) if isinstance(inner, Var) else None
        if red is None or red.primitive is not reduce_max_p or red.invars[0] is not x:
            return False
        axes = set(red.params["axes"])
        kept = tuple(1 if d in axes else n for d, n in enumerate(shape))
        return tuple(src.aval.shape) == kept and dims == tuple(range(len(shape)))
    if r is None or r.primitive is not reduce_max_p or r.invars[0] is not x:
        return False
    axes = set(r.params["axes"])
    return dims == tuple(d for d in range(len(shape)) if d not in axes)


def _peel(v: Any, producer: dict[Var, Any]) -> Any:
    """``v`` without the ``stop_gradient`` and ``where(isfinite(m), m, 0)`` around it."""
    while isinstance(v, Var) and v in producer:
        e = producer[v]
        if e.primitive.name == "stop_gradient":  # (a transform's primitive: not imported here)
            v = e.invars[0]
        elif e.primitive is select_p and _finite_or_zero(e, producer):
            v = e.invars[1]
        else:
            return v
    return v


def _finite_or_zero(e: Any, producer: dict[Var, Any]) -> bool:
    """``select(isfinite(m), m, 0)`` (the 0 a literal, or a broadcast one)."""
    pred, m, zero = e.invars
    p = producer.get(pred) if isinstance(pred, Var) else None
    if p is None or p.primitive is not is_finite_p or p.invars[0] is not m:
        return False
    z = producer.get(zero) if isinstance(zero, Var) else None
    if z is not None and z.primitive is broadcast_in_dim_p:
        zero = z.invars[0]
    return isinstance(zero, Literal) and float(zero.val) == 0.0
