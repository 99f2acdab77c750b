"""cuBLASLt epilogues in GPU programs: a product, its bias and the tanh GELU as one library call
(and a product with a value added, ``C``).

A transformer's MLP computes ``a = gelu_tanh(x @ W + b)``. Lowered as it is, the product writes
``h = x @ W`` and a fused kernel reads ``h`` back, adds the bias and applies the GELU (and, in a
training step, the derivative the backward pass keeps). cuBLASLt's ``GELU_AUX_BIAS`` epilogue
does it in the product: it writes ``a`` and the pre-activation ``h + b`` (the *aux* matrix, which
the backward pass reads for the GELU's derivative) from the accumulators, so ``h`` is never read
back. ``fuse_gelu_epilogues`` rewrites the jaxpr of a CUDA program (before the plan):

    h = dot_general(x, W); hb = h + broadcast_in_dim(b); a = custom_jvp_call[gelu_tanh](hb)
    # becomes  a, hb = dot_bias_gelu(x, W, b)   (one cuBLASLt call; a library node)

What is matched: a ``custom_jvp_call`` whose ``lowering_name`` param is ``"gelu_tanh"``
(``custom_jvp.lowering_name``; ``blu.nn.gelu(approximate=True)``) and whose operand is the sum
of a ``dot_general`` (read by nothing else) and a bias broadcast along the product's last axis,
all bfloat16 or all float16 (in float32 the epilogue measured slower), for a product cuBLASLt
reads without copies (``gemm_spec``), without batch axes, and with ``N`` a multiple of 8 (the aux
matrix is then exactly ``h``'s row-major layout). Everything else is left as it is.
``config.gpu_epilogues`` (``BLU_GPU_EPILOGUES=0``) turns the rewrite off.

With ``config.gpu_gelu_aux`` off (``BLU_GPU_GELU_AUX=0``) the product and bias become a ``BIAS``
call writing ``hb`` and the GELU stays a fused kernel reading it (the backward's ``DGELU`` reads
``hb`` either way). On the H100 (BENCHMARKS.md, session 25) GPT-2 124M's ``BIAS`` product took
127 us and the GELU kernel 85 us against the ``GELU_AUX_BIAS`` call's 182 us, and the steps were
equal: the epilogue stays the default, the flag is for other GPUs and MLP shapes.

The backward pass multiplies the cotangent of ``a`` by the GELU's derivative at ``hb`` (the
``custom_jvp_call`` named ``"gelu_tanh_grad"``, which the forward pass would compute and keep: a
kernel and an ``(M, N)`` residual per layer). Where that cotangent is itself a product read by
nothing else, cuBLASLt's ``DGELU`` epilogue computes it in the product from the aux matrix the
forward's call wrote:

    d = custom_jvp_call[gelu_tanh_grad](hb); g = dot_general(dy, W2); dh = g * d
    # becomes  dh = dot_dgelu(dy, W2, hb)   (one cuBLASLt call; the derivative is never stored)

The bias's gradient (``dh`` summed over its rows) stays a reduction in a fused kernel:
``DGELU_BGRAD``, which also returns it, ran GPT-2 124M's call in 427 us on the H200 against
``DGELU``'s 153 us (BENCHMARKS.md, session 18), far more than the 100 MB it saves reading.

A product plus a bias whose sum no fused kernel would read (every reader, through reshapes, a
library call or a product: the QKV projection before the attention) becomes ``dot_bias``, the
``BIAS`` epilogue, in every float dtype: the sum is otherwise a kernel that reads and writes the
whole ``(M, N)`` result again (docs/benchmarks/gpt2_gpu.md, session 8).

A product added to a value of its shape and dtype, the product read by nothing else, becomes
``dot_acc``: cuBLASLt adds the value as its ``C`` (beta = 1) into a new ``D``, so the product's
result is never written and read back by a sum kernel: a chunked classifier's weight gradient
(``acc + h_i^T dz_i``, float32 of the vocabulary times the width each chunk), a residual sum
after a projection without bias (LLaMA), a gradient summed from two paths.

(``hb`` must be a ``dot_bias_gelu``'s aux output; the multiply may be blu's NaN-guarded form from
``mul``'s transpose, which zeroes ``d`` where ``g`` is zero and ``d`` NaN: the epilogue's
derivative is finite wherever ``hb`` is.)

Numerics: the epilogue adds the bias to the float32 accumulators and applies the GELU before
rounding once to the output dtype; the unfused form rounds the product, then the sum, then the
GELU (a bf16 result differs in its last bits; float32 agrees to rounding). ``DGELU`` multiplies
the float32 accumulators by the derivative (float32, from the bf16 ``hb``) and rounds once.
"""

from __future__ import annotations

import numpy as np

from blu.core import dtypes
from blu.core.config import config
from blu.core.interpreter import get_aval
from blu.core.jaxpr import Jaxpr, JaxprEqn, Var, dce_jaxpr, producers, readers, use_counts
from blu.core.primitive import Primitive
from blu.cuda.cublaslt import gelu_tanh, gelu_tanh_grad, gemm_spec
from blu.lax.dot import dot_general_p
from blu.lower.library import LibraryLowering, register_library
from blu.lower.slots import made_by_plan

__all__ = ["dot_acc_p", "dot_bias_p", "dot_bias_gelu_p", "dot_dgelu_p", "fuse_epilogues"]

GELU_NAME = "gelu_tanh"  # the custom_jvp lowering names matched
GELU_GRAD_NAME = "gelu_tanh_grad"
# half floats only: on the H200 the GELU_AUX_BIAS product of the GPT-2 124M MLP (16384 x 768 x
# 3072) is slower than without the epilogue, yet in bf16 the step gains (the GELU kernel's pass
# is gone); in float32 the epilogue's algorithms are slower still and the step loses
# (docs/benchmarks/gpt2_gpu.md, session 7)
_FLOATS = (np.dtype(dtypes.bfloat16), np.dtype(np.float16))


def _product(lhs, rhs, params: dict):
    """``(out aval, product, accumulation dtype)``: the product in float32 (float64 for float64
    operands), as the epilogues compute it before rounding once."""
    out = dot_general_p.abstract_eval(get_aval(lhs), get_aval(rhs), **params)
    acc = np.result_type(out.dtype, np.float32)
    prod = np.asarray(dot_general_p.impl(np.asarray(lhs, acc), np.asarray(rhs, acc),
                                         **{**params, "preferred_element_type": None}))  # fmt: skip
    return out, prod, acc


def _cpu_call(prim: Primitive):
    def cpu(ins, outs, workspace, **params) -> None:  # the simulated GPU (BLU_FAKE_GPU=1)
        res = prim.impl(*ins, **params)
        for dst, r in zip(outs, res if prim.multiple_results else [res], strict=True):
            dst[...] = r

    return cpu


def _gpu_call(epilogue: str, bias: tuple | None = None, aux: tuple | None = None,
              c: tuple | None = None):  # fmt: skip
    """The library call of a product with cuBLASLt's ``epilogue``; ``bias``/``aux``/``c``:
    where their pointers are, ``("in", i)`` or ``("out", i)`` (None: no such pointer; a ``c``
    is added to the product, beta = 1)."""

    def gpu(dev, stream, ins, outs, workspace, in_avals, out_avals, _precision="default",
            **params):  # fmt: skip
        lhs, rhs = in_avals[:2]
        spec = gemm_spec(lhs.shape, rhs.shape, params["dimension_numbers"])
        at = lambda w: 0 if w is None else (ins if w[0] == "in" else outs)[w[1]]  # noqa: E731
        dev.matmul_handle().matmul(
            spec, ins[1], ins[0], outs[0], in_dtype=lhs.dtype, out_dtype=out_avals[0].dtype,
            precision=_precision, epilogue=epilogue, bias_ptr=at(bias), aux_ptr=at(aux),
            accumulate=c is not None, c_ptr=at(c), stream=stream,
        )  # fmt: skip

    return gpu


# ``gelu_tanh(dot_general(lhs, rhs) + bias)`` and the pre-activation: made by the CUDA plan only
dot_bias_gelu_p = Primitive("dot_bias_gelu", multiple_results=True)
# ``dot_general(lhs, rhs) * gelu_tanh_grad(aux)``
dot_dgelu_p = Primitive("dot_dgelu")
# ``dot_general(lhs, rhs) + bias`` (bias along the last axis)
dot_bias_p = Primitive("dot_bias")
# ``dot_general(lhs, rhs) + c`` (``c`` of the product's shape and dtype; cuBLASLt's beta = 1)
dot_acc_p = Primitive("dot_acc")


@dot_bias_gelu_p.def_abstract_eval
def _abstract_eval(lhs, rhs, bias, **params):
    out = dot_general_p.abstract_eval(lhs, rhs, **params)
    return [out, out]


for _p in (dot_dgelu_p, dot_bias_p, dot_acc_p):
    _p.def_abstract_eval(
        lambda lhs, rhs, _, **params: dot_general_p.abstract_eval(lhs, rhs, **params)
    )


@dot_bias_gelu_p.def_impl
def _impl(lhs, rhs, bias, **params):
    """The epilogue's arithmetic in numpy: bias added to the float32 product, GELU, one
    rounding of each result to the product's dtype."""
    out, prod, acc = _product(lhs, rhs, params)
    pre = prod + np.asarray(bias, acc)
    return [gelu_tanh(pre).astype(out.dtype), pre.astype(out.dtype)]


@dot_dgelu_p.def_impl
def _dgelu_impl(lhs, rhs, aux, **params):
    """The float32 product times the derivative at the float32 ``aux``, rounded once."""
    out, prod, acc = _product(lhs, rhs, params)
    return (prod * gelu_tanh_grad(np.asarray(aux, acc))).astype(out.dtype)


@dot_bias_p.def_impl
def _bias_impl(lhs, rhs, bias, **params):
    """The bias added to the float32 product, rounded once."""
    out, prod, acc = _product(lhs, rhs, params)
    return (prod + np.asarray(bias, acc)).astype(out.dtype)


@dot_acc_p.def_impl
def _acc_impl(lhs, rhs, c, **params):
    """``c`` added to the float32 product, rounded once."""
    out, prod, acc = _product(lhs, rhs, params)
    return (prod + np.asarray(c, acc)).astype(out.dtype)


_gpu = _gpu_call("gelu_aux_bias", bias=("in", 2), aux=("out", 1))
_dgelu_gpu = _gpu_call("dgelu", aux=("in", 2))
_bias_gpu = _gpu_call("bias", bias=("in", 2))
_acc_gpu = _gpu_call("none", c=("in", 2))

made_by_plan("cuda", dot_bias_gelu_p, dot_dgelu_p, dot_bias_p, dot_acc_p)
for _prim, _gpu_fn in ((dot_bias_gelu_p, _gpu), (dot_dgelu_p, _dgelu_gpu), (dot_bias_p, _bias_gpu),
                       (dot_acc_p, _acc_gpu)):  # fmt: skip
    register_library(
        _prim,
        LibraryLowering(
            workspace=lambda avals, params, target: 0,  # cuBLASLt's own workspace
            cpu=_cpu_call(_prim),
            gpu=_gpu_fn,
            product=True,
            # dot_acc: D may be C's buffer when nothing reads C later (cuBLASLt adds in place)
            inplace=2 if _prim is dot_acc_p else None,
        ),
        platform="cuda",
    )


# ---- the rewrite ---------------------------------------------------------------------------------


def fuse_epilogues(jaxpr: Jaxpr) -> Jaxpr:
    """``jaxpr`` with each product + bias + tanh GELU made one ``dot_bias_gelu``, the backward
    products times its derivative ``dot_dgelu`` and products + bias read by no kernel
    ``dot_bias`` (see the module docstring); the same jaxpr when nothing matches or
    ``config.gpu_epilogues`` is off."""
    if not config.gpu_epilogues:
        return jaxpr
    return _fuse_accumulate(_fuse_bias(_fuse_gelu(jaxpr)))


def _fuse_gelu(jaxpr: Jaxpr) -> Jaxpr:
    calls = [e for e in jaxpr.eqns if e.primitive.name == "custom_jvp_call" and _is_gelu(e)]
    if not calls:
        return jaxpr
    producer: dict[Var, JaxprEqn] = {v: e for e in jaxpr.eqns for v in e.outvars}
    uses = use_counts(jaxpr)
    replace: dict[int, JaxprEqn] = {}  # id(gelu call), or id(sum) -> the fused equation
    drop: set[int] = set()  # ids of the equations it replaces
    auxes = set()  # the pre-activations the backward's DGELU products may read
    for call in calls:
        m = _match(call, producer, uses)
        if m is None:
            continue
        dot, add, bias = m
        hb = add.outvars[0]
        if config.gpu_gelu_aux:  # the GELU in the product's epilogue, writing hb as its aux
            replace[id(call)] = JaxprEqn(dot_bias_gelu_p, [*dot.invars, bias], dict(dot.params),
                                         [call.outvars[0], hb], source=dot.source)  # fmt: skip
            drop.update((id(dot), id(add)))
        else:  # the product and bias write hb (BIAS); the GELU stays, a fused kernel reads hb
            replace[id(add)] = JaxprEqn(dot_bias_p, [*dot.invars, bias], dict(dot.params), [hb],
                                        source=dot.source)  # fmt: skip
            drop.add(id(dot))
        auxes.add(hb)
    if not replace:
        return jaxpr
    eqns = [replace.get(id(e), e) for e in jaxpr.eqns if id(e) not in drop]
    return _fuse_dgelu(Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, jaxpr.outvars), auxes)


def _fuse_dgelu(jaxpr: Jaxpr, auxes: set) -> Jaxpr:
    """Each ``g * gelu_tanh_grad(hb)`` with ``hb`` in ``auxes`` (a ``dot_bias_gelu``'s aux, or
    the ``dot_bias`` result a GELU kernel reads) and ``g`` a product read by nothing else made
    one ``dot_dgelu`` (the module docstring)."""
    derivs = {e.outvars[0]: e.invars[0] for e in jaxpr.eqns
              if e.primitive.name == "custom_jvp_call" and _is_named(e, GELU_GRAD_NAME)
              and e.invars[0] in auxes}  # fmt: skip
    if not derivs:
        return jaxpr
    producer, reader = producers(jaxpr), readers(jaxpr)
    outs = {v for v in jaxpr.outvars if isinstance(v, Var)}
    replace: dict[int, JaxprEqn] = {}
    for e in jaxpr.eqns:
        if e.primitive.name != "mul" or len(e.invars) != 2 or e.outvars[0] in outs:
            continue
        for g, x in (e.invars, e.invars[::-1]):
            d = _derivative(x, g, derivs, producer)
            dot = producer.get(g) if isinstance(g, Var) else None
            if d is None or dot is None or dot.primitive is not dot_general_p or g in outs:
                continue
            # the product's other readers may only be the guard's comparison
            if any(r is not e and r.primitive.name != "eq" for r in reader.get(g, [])):
                continue
            if not _dgelu_ok(dot, derivs[d], e.outvars[0]):
                continue
            replace[id(e)] = JaxprEqn(dot_dgelu_p, [*dot.invars, derivs[d]], dict(dot.params),
                                      [e.outvars[0]], source=dot.source)  # fmt: skip
            break
    if not replace:
        return jaxpr
    eqns = [replace.get(id(e), e) for e in jaxpr.eqns]
    return dce_jaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, jaxpr.outvars))


# what may read a ``dot_bias`` result (through reshapes): calls that would not fuse the sum
_UNFUSED = ("dot_general", "dot_product_attention_fwd", "dot_product_attention_bwd",
            "dot_product_attention_fwd_packed", "dot_product_attention_bwd_packed")  # fmt: skip
_BIAS_FLOATS = _FLOATS + (np.dtype(np.float32),)


def _fuse_bias(jaxpr: Jaxpr) -> Jaxpr:
    """Each product + bias (``_bias_sum``) whose sum only unfused calls read made ``dot_bias``."""
    producer, reader = producers(jaxpr), readers(jaxpr)
    outs = {v for v in jaxpr.outvars if isinstance(v, Var)}
    uses = use_counts(jaxpr)

    def unfused(v: Var) -> bool:
        rs = reader.get(v, [])
        return bool(rs) and v not in outs and all(
            r.primitive.name in _UNFUSED
            or (r.primitive.name == "reshape" and unfused(r.outvars[0]))
            for r in rs
        )  # fmt: skip

    replace: dict[int, JaxprEqn | None] = {}
    for e in jaxpr.eqns:
        if e.primitive.name != "add" or len(e.invars) != 2 or not unfused(e.outvars[0]):
            continue
        m = _bias_sum(e, producer, uses, _BIAS_FLOATS, need_n8=False)
        if m is not None:
            dot, bias = m
            replace[id(e)] = JaxprEqn(dot_bias_p, [*dot.invars, bias], dict(dot.params),
                                      [e.outvars[0]], source=dot.source)  # fmt: skip
            replace[id(dot)] = None
    if not replace:
        return jaxpr
    eqns = [x for x in (replace.get(id(e), e) for e in jaxpr.eqns) if x is not None]
    return dce_jaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, jaxpr.outvars))


_ACC_FLOATS = _BIAS_FLOATS
_F32 = np.dtype(np.float32)


def _fuse_accumulate(jaxpr: Jaxpr) -> Jaxpr:
    """Each ``c + dot_general(...)`` whose product nothing else reads made ``dot_acc``: the
    product adds ``c`` (beta = 1) instead of writing its result for a kernel that reads it and
    ``c`` back. A chunked classifier's weight gradient is such a chain (``acc + h_i^T dz_i``
    per chunk, float32 of the vocabulary times the width: GPT-2 124M's 154 MB, LLaMA-1B's
    1 GB, each written and read once more a chunk)."""
    producer = producers(jaxpr)
    outs = {v for v in jaxpr.outvars if isinstance(v, Var)}
    uses = use_counts(jaxpr)
    replace: dict[int, JaxprEqn | None] = {}
    for e in jaxpr.eqns:
        if e.primitive.name != "add" or len(e.invars) != 2:
            continue
        for d_var, c_var in (e.invars, e.invars[::-1]):
            dot = producer.get(d_var) if isinstance(d_var, Var) else None
            if (dot is None or dot.primitive is not dot_general_p or id(dot) in replace
                    or uses.get(d_var) != 1 or d_var in outs or not isinstance(c_var, Var)
                    or not _acc_ok(dot, c_var, e.outvars[0])):  # fmt: skip
                continue
            replace[id(e)] = JaxprEqn(dot_acc_p, [*dot.invars, c_var], dict(dot.params),
                                      [e.outvars[0]], source=dot.source)  # fmt: skip
            replace[id(dot)] = None
            break
    if not replace:
        return jaxpr
    eqns = [x for x in (replace.get(id(e), e) for e in jaxpr.eqns) if x is not None]
    return dce_jaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, eqns, jaxpr.outvars))


def _acc_ok(dot: JaxprEqn, c: Var, out: Var) -> bool:
    """cuBLASLt adds ``c`` in the product: ``c``, the product and the sum of one shape and
    float dtype, no batch axes, a layout read without copies, nothing empty."""
    o = dot.outvars[0].aval
    if o.dtype not in _ACC_FLOATS or c.aval.dtype != o.dtype or out.aval.dtype != o.dtype:
        return False
    if c.aval.shape != o.shape or out.aval.shape != o.shape or len(o.shape) != 2:
        return False
    lhs, rhs = dot.invars
    ins = lhs.aval.dtype
    if rhs.aval.dtype != ins or ins not in _ACC_FLOATS or (o.dtype != ins and o.dtype != _F32):
        return False  # (cuBLASLt's pairs: one operand dtype, out that or float32)
    spec = gemm_spec(lhs.aval.shape, rhs.aval.shape, dot.params["dimension_numbers"])
    return spec is not None and spec.batch == 1 and spec.m * spec.n * spec.k > 0


def _derivative(x, g, derivs: dict, producer: dict):
    """The derivative variable ``x`` is, or guards (``mul``'s transpose: ``select(isnan(
    select(g == 0, d, 0)), 0, d)``, i.e. ``d`` zeroed where ``g`` is zero and ``d`` NaN)."""
    if not isinstance(x, Var):
        return None
    if x in derivs:
        return x
    outer = producer.get(x)
    if outer is None or outer.primitive.name != "select" or len(outer.invars) != 3:
        return None
    pred, _, d = outer.invars
    ne = producer.get(pred) if isinstance(pred, Var) else None
    if d not in derivs or ne is None or ne.primitive.name != "ne":
        return None
    inner = producer.get(ne.invars[0]) if isinstance(ne.invars[0], Var) else None
    if inner is None or inner.primitive.name != "select" or inner.invars[1] is not d:
        return None
    eq = producer.get(inner.invars[0]) if isinstance(inner.invars[0], Var) else None
    return d if eq is not None and eq.primitive.name == "eq" and g in eq.invars else None


def _dgelu_ok(dot: JaxprEqn, aux: Var, out: Var) -> bool:
    """cuBLASLt's DGELU takes the product: half floats, no batch, ``N`` a multiple of 8 (the
    aux matrix is then ``aux``'s row-major layout), ``k > 1``, the aux of the result's shape."""
    lhs, rhs = dot.invars
    o = out.aval
    if o.dtype not in _FLOATS or any(v.aval.dtype != o.dtype for v in (lhs, rhs, aux)):
        return False
    if aux.aval.shape != o.shape or dot.outvars[0].aval.shape != o.shape or not o.shape:
        return False
    spec = gemm_spec(lhs.aval.shape, rhs.aval.shape, dot.params["dimension_numbers"])
    return spec is not None and spec.batch == 1 and o.shape[-1] % 8 == 0 and spec.k > 1 \
        and spec.m * spec.n > 0  # fmt: skip


def _is_named(e: JaxprEqn, name: str) -> bool:
    return e.params.get("lowering_name") == name and len(e.invars) == 1 and len(e.outvars) == 1


def _is_gelu(e: JaxprEqn) -> bool:
    return _is_named(e, GELU_NAME)


def _match(call: JaxprEqn, producer: dict, uses: dict) -> tuple | None:
    """``(dot, add, bias)`` when the GELU's operand is ``dot + broadcast(bias)`` as the
    module docstring says, else None."""
    add = producer.get(call.invars[0])
    if add is None or add.primitive.name != "add" or len(add.invars) != 2:
        return None
    m = _bias_sum(add, producer, uses, _FLOATS, need_n8=True)
    return None if m is None else (m[0], add, m[1])


def _bias_sum(add: JaxprEqn, producer: dict, uses: dict, floats, need_n8: bool):
    """``(dot, bias)`` when ``add`` is ``dot + broadcast(bias)``: the product read by nothing
    else, without batch axes, cuBLASLt reading it without copies, everything one dtype of
    ``floats``, the bias along the last axis (``need_n8``: ``N`` a multiple of 8); else None."""
    hb = add.outvars[0]
    for d_var, b_var in (add.invars, add.invars[::-1]):
        dot, bc = producer.get(d_var), producer.get(b_var)
        if (
            dot is None
            or bc is None
            or dot.primitive is not dot_general_p
            or bc.primitive.name != "broadcast_in_dim"
            or uses.get(d_var) != 1
        ):
            continue  # fmt: skip
        out, bias = d_var.aval, bc.invars[0]
        if not isinstance(bias, Var) or out.dtype not in floats or hb.aval.dtype != out.dtype:
            continue
        lhs, rhs = dot.invars
        if lhs.aval.dtype != out.dtype or rhs.aval.dtype != out.dtype:
            continue
        n = out.shape[-1] if out.shape else 0
        if (
            bias.aval.shape != (n,)
            or bias.aval.dtype != out.dtype
            or tuple(bc.params["broadcast_dimensions"]) != (len(out.shape) - 1,)
        ):
            continue  # fmt: skip
        spec = gemm_spec(lhs.aval.shape, rhs.aval.shape, dot.params["dimension_numbers"])
        if spec is None or spec.batch != 1 or (need_n8 and n % 8) or spec.m * spec.n * spec.k == 0:
            continue
        return dot, bias
    return None
