"""Convolutions laid out for cuDNN: an early pass of the CUDA target (``Backend.early_passes``).

cuDNN's convolutions (``blu.lower.cuda.convolution``) read the operands in place, but its engines
take image, filter and output only all channels-last (``NHWC``/``KRSC``) or all channels-first
(``NCHW``/``KCRS``): on an H200 a JAX-style ``HWIO`` filter (``RSCK``) gave wrong values and no
error, so ``convolution.problem`` refuses such layouts. This pass rewrites each
``conv_general_dilated`` equation that cuDNN would take but for its layouts as transposes of its
operands, the convolution on the transposed operands (its ``dimension_numbers`` renamed to match)
and a transpose of its result back: channels-first when the image and output already are, else
channels-last (what the tensor cores read best). The transposes are kernels like any other; in a
``NHWC``/``HWIO`` model only the filter (forward, input gradient) or the filter gradient moves,
a small array. Equations it cannot make native keep the im2col decomposition.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from blu.core.aval import ShapedArray
from blu.core.config import config
from blu.core.jaxpr import Jaxpr, JaxprEqn, splice_each
from blu.core.staging import trace_to_jaxpr
from blu.lax.convolution import ConvDimensionNumbers, conv_general_dilated_p
from blu.lax.shapes import transpose
from blu.lower.cuda import convolution as cv

# which of cuDNN's tensors each of the equation's (lhs, rhs, out) is, per problem kind
ROLES = {"fprop": ("x", "w", "y"), "dgrad": ("y", "w", "x"), "wgrad": ("x", "y", "w")}


def native_conv_layouts(jaxpr: Jaxpr) -> Jaxpr:
    """``jaxpr`` with each convolution cuDNN would take in other layouts rewritten (see the
    module docstring); unchanged when ``config.cudnn_conv`` is off."""
    if not config.cudnn_conv or not any(e.primitive is conv_general_dilated_p
                                        for e in jaxpr.eqns):  # fmt: skip
        return jaxpr
    return splice_each(
        jaxpr, lambda e: _rewritten(e) if e.primitive is conv_general_dilated_p else None
    )


def _permuted(avals: Sequence[ShapedArray], params: dict, which: int, perm: Sequence[int]):
    """``(avals, params)`` with operand ``which`` (0 lhs, 1 rhs, 2 out) stored with its axes
    permuted (new axis ``j`` is old axis ``perm[j]``)."""
    dn = list(params["dimension_numbers"])
    dn[which] = tuple(list(perm).index(a) for a in dn[which])
    avals = list(avals)
    if which < 2:
        a = avals[which]
        avals[which] = ShapedArray(tuple(a.shape[p] for p in perm), a.dtype)
    return avals, {**params, "dimension_numbers": ConvDimensionNumbers(*dn)}


def _role(spec: Any, role: str) -> tuple:
    return getattr(spec, role), getattr(spec, role + "_strides")


def _layout_for(avals, params, kind: str, last: bool):
    """``(permutations, avals, params, bytes moved)`` making the reading ``kind`` native, each
    operand (lhs, rhs, out) searched on its own (the identity first), or None."""
    perms, moved = [], 0
    out_aval = conv_general_dilated_p.abstract_eval(*avals, **params)
    for which, role in enumerate(ROLES[kind]):
        ndim = len(params["dimension_numbers"][which])
        size = (list(avals) + [out_aval])[which].size
        for perm in itertools.permutations(range(ndim)):
            a2, p2 = _permuted(avals, params, which, perm)
            s2 = next((sp for sp in cv.specs(a2, p2) if sp.kind == kind), None)
            if s2 is not None and cv.ordered(*_role(s2, role), last):
                perms.append(perm)
                moved += 0 if perm == tuple(range(ndim)) else size
                avals, params = a2, p2
                break
        else:
            return None
    return perms, avals, params, moved


def _rewritten(eqn: JaxprEqn) -> Jaxpr | None:
    avals, params = [a.aval for a in eqn.invars], eqn.params
    found = cv.specs(avals, params)
    if not found or any(cv.native(sp) for sp in found):
        return None
    options = []
    for spec in found:  # each reading (a kernel gradient may also read as a forward)
        last = not all(cv.ordered(*_role(spec, r), False) for r in ("x", "y"))
        got = _layout_for(avals, params, spec.kind, last)
        if got is not None and cv.problem(got[1], got[2]) is not None:
            options.append(got)
    if not options:
        return None
    (pl, pr, po), _, new_params, _ = min(options, key=lambda o: o[3])  # the fewest bytes moved
    iota = tuple(range(len(pl)))

    def fun(lhs, rhs):
        lhs = lhs if pl == iota else transpose(lhs, pl)
        rhs = rhs if pr == iota else transpose(rhs, pr)
        out = conv_general_dilated_p.bind(lhs, rhs, **new_params)
        return [out if po == iota else transpose(out, [po.index(k) for k in iota])]

    body, consts = trace_to_jaxpr(fun, [a.aval for a in eqn.invars])
    return None if consts or body.constvars else body
