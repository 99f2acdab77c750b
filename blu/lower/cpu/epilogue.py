"""Products whose only reader adds them, scaled, to another array: ``W + alpha * (A @ B)`` as
one BLAS call, ``C = alpha * A @ B + beta * C`` with ``C`` a copy of ``W`` and ``beta = 1``.

An SGD update of a weight from its gradient (``w - lr * (x.T @ g)``) is a product and then a
kernel that reads the product's result, the weight, and writes the new weight: three arrays of
the weight's size moved through memory after the product wrote one. Fused, the product's result
is never stored: the new weight's buffer gets a copy of ``w`` and the product accumulates into
it (on one core the copy and the fused product take little more than the product alone, less
than the product and a separate update: docs/benchmarks/cpu_backend.md, session 7).

``find`` picks, in a CPU executable's steps, a product (2-D, float32/float64, as BLAS computes
it) whose result only one later kernel reads, where that kernel is exactly ``W + alpha * D``
(``add``/``sub``/``mul`` by a scalar/``neg``, the forms an optimizer's update takes) of the
product's result ``D`` and one array ``W`` made before the product, and writes a new output
(``("out",)`` in the memory plan). The product's step then computes the kernel's output (its
buffer is allocated there), and the kernel's step does nothing. Without CBLAS (another BLAS
under numpy), the step computes the product into the output, then scales and adds.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from blu.core.jaxpr import Literal, Var
from blu.lower.cpu import blas, spin
from blu.lower.cpu import threads as cpu_threads
from blu.lower.plan.nodes import NodeKind

__all__ = ["Fusion", "affine_form", "find", "runner"]


@dataclasses.dataclass(frozen=True)
class Fusion:
    """The product at step ``dot`` computes the output of the kernel at step ``kernel``:
    ``out = w + alpha * product`` (slots ``w`` and ``out``)."""

    dot: int
    kernel: int
    w: int
    out: int
    alpha: float


def _scalar(a: Any, producer: dict) -> float | None:
    """The value of a scalar literal, or of a broadcast of one; else None."""
    if isinstance(a, Literal):
        return float(np.asarray(a.val)) if np.ndim(a.val) == 0 else None
    e = producer.get(a)
    if e is not None and e.primitive.name == "broadcast_in_dim":
        return _scalar(e.invars[0], producer) if isinstance(e.invars[0], Literal) else None
    return None


def affine_form(jaxpr: Any) -> dict[int, float] | None:
    """The kernel jaxpr's one output as ``{input position: coefficient}`` when it is a sum of
    its inputs times scalars (every value of the output's shape and dtype), else None."""
    if len(jaxpr.outvars) != 1 or not isinstance(jaxpr.outvars[0], Var):
        return None
    aval = jaxpr.outvars[0].aval
    forms: dict[Var, dict[int, float]] = {}
    for i, v in enumerate(jaxpr.invars):
        if v.aval.shape == aval.shape and v.aval.dtype == aval.dtype:
            forms[v] = {i: 1.0}
    producer = {e.outvars[0]: e for e in jaxpr.eqns}
    for e in jaxpr.eqns:
        name, ins, out = e.primitive.name, e.invars, e.outvars[0]
        if name == "broadcast_in_dim" and _scalar(out, producer) is not None:
            continue
        if out.aval.shape != aval.shape or out.aval.dtype != aval.dtype:
            return None
        got = [forms.get(a) if isinstance(a, Var) else None for a in ins]
        if name in ("add", "sub") and all(g is not None for g in got):
            sign = 1.0 if name == "add" else -1.0
            f = dict(got[0])
            for k, c in got[1].items():
                f[k] = f.get(k, 0.0) + sign * c
        elif name == "mul" and sum(g is not None for g in got) == 1:
            k = 0 if got[0] is not None else 1
            c = _scalar(ins[1 - k], producer)
            if c is None:
                return None
            f = {i: c * x for i, x in got[k].items()}
        elif name == "neg" and got[0] is not None:
            f = {i: -x for i, x in got[0].items()}
        else:
            return None
        forms[out] = f
    return forms.get(jaxpr.outvars[0])


def _plain_2d(eqn: Any) -> bool:
    """A product BLAS computes as it is: 2-D operands, one contracted dimension each, no batch,
    every dtype the same float32/float64."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    la, ra, oa = (eqn.invars[0].aval, eqn.invars[1].aval, eqn.outvars[0].aval)
    if lb or rb or len(la.shape) != 2 or len(ra.shape) != 2 or len(lc) != 1 or len(rc) != 1:
        return False
    dts = {np.dtype(a.dtype) for a in (la, ra, oa)}
    return len(dts) == 1 and blas.gemm_for(dts.pop()) is not None


def find(steps: Any, memory: Any) -> list[Fusion]:
    """The fusions of a CPU executable's steps (see the module docstring)."""
    ss = steps.steps
    readers: dict[Var, list[int]] = {}
    for pos, st in enumerate(ss):
        for v in st.node.inputs:
            readers.setdefault(memory.root[v], []).append(pos)
    out: list[Fusion] = []
    taken: set[int] = set()
    for i, st in enumerate(ss):
        if st.kind != NodeKind.DOT or not _plain_2d(st.node.eqns[0]) or i in taken:
            continue
        if not all(isinstance(a, int) for a in st.ins) or len(st.outs) != 1:
            continue
        d = st.node.outputs[0]
        r = memory.root[d]
        if r is not d or memory.last_use.get(r, -1) >= len(ss):
            continue  # a view, or a result of the program
        rd = readers.get(r, [])
        if len(rd) != 1 or rd[0] <= i or rd[0] in taken:
            continue
        j = rd[0]
        kn = ss[j]
        node = kn.node
        if kn.kind != NodeKind.KERNEL or kn.scratch or getattr(node, "inplace", ()):
            continue
        if len(node.outputs) != 1 or node.inputs.count(d) != 1:
            continue
        o = node.outputs[0]
        if memory.root[o] is not o or memory.place.get(o) != ("out",):
            continue
        form = affine_form(node.jaxpr)
        di = node.inputs.index(d)
        if form is None or set(form) - {di} == set() or len(form) != 2 or form.get(di) is None:
            continue
        (wi,) = set(form) - {di}
        alpha = form[di]
        if form[wi] != 1.0 or alpha == 0.0 or not math.isfinite(alpha):
            continue
        w = node.inputs[wi]
        if memory.defined_at.get(memory.root[w], -1) >= st.index:
            continue  # W must exist when the product runs
        taken.update((i, j))
        out.append(Fusion(i, j, kn.ins[wi], kn.outs[0], alpha))
    return out


def runner(eqn: Any, fusion: Fusion, ins: list[int], solo: bool) -> Any:
    """The step runner of a fused product: ``run(env, arena, owned)`` writes
    ``env[out] = env[w] + alpha * (lhs @ rhs)``, split across the threads like ``blas.matmul``
    (``solo``: on one thread)."""
    (lc, _), _ = eqn.params["dimension_numbers"]
    lt = lc[0] == 0  # the left operand contracted on its first dimension: read transposed
    rt = eqn.params["dimension_numbers"][0][1][0] == 1
    li, ri = ins
    m = eqn.outvars[0].aval.shape[0]
    n = eqn.outvars[0].aval.shape[1]
    k = eqn.invars[0].aval.shape[lc[0]]
    flops = 2.0 * m * n * k
    alpha, wi, oi = fusion.alpha, fusion.w, fusion.out
    balance = cpu_threads.Balance()

    def run(env: list, arena: Any, owned: bool) -> None:
        a = env[li].T if lt else env[li]
        b = env[ri].T if rt else env[ri]
        w, o = env[wi], env[oi]
        threads = 1 if solo else blas.threads_for(flops)
        axis = blas.split_axis(m, n, threads) if threads > 1 else None
        if axis is None:
            return _part(a, b, w, o, alpha)
        if axis == 1:
            cuts = cpu_threads.split(m, threads, share=balance.share, align=16)

            def part(lo: int, hi: int) -> None:
                _part(a[lo:hi], b, w[lo:hi], o[lo:hi], alpha)

        else:
            cuts = cpu_threads.split(n, threads, share=balance.share, align=16)

            def part(lo: int, hi: int) -> None:
                _part(a, b[:, lo:hi], w[:, lo:hi], o[:, lo:hi], alpha)

        cpu_threads.run_parts(part, cuts, balance, native=True)

    return run


def _part(a: np.ndarray, b: np.ndarray, w: np.ndarray, o: np.ndarray, alpha: float) -> None:
    spin.copy_rows(o, w)
    if not blas.gemm(a, b, o, alpha, 1.0):
        if spin.recording() is not None:
            raise spin.NotRecordable("a product BLAS cannot take in place")
        with np.errstate(over="ignore", invalid="ignore"):
            p = np.matmul(a, b)
            p *= o.dtype.type(alpha)
            np.add(o, p, out=o)
