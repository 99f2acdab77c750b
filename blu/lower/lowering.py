"""Lowerings registered on the primitives: importing this module fills each primitive's
``lowerings`` slot (``Primitive.lowerings``: kind -> rule), by primitive object. The plan
(``plan/fusion.py``, ``plan/partition.py``, ``plan/simplify.py``), the code generators
(``mlir/codegen*.py``) and the CPU views read the slot, never a table of names; a primitive
without an entry for a target becomes a host fallback node (the ``"host"`` slot says why, for
those that are expected to; ``tests/lower/test_lowering_slots.py`` checks every primitive is one
or the other). The per-element rules are registered by ``mlir/rules.py`` (``slots.lowering``),
library lowerings by each backend's folder (``library.register_library``, per platform).

Kinds (keys of ``prim.lowerings``):

- ``"elementwise"``: ``rule(b, eqn, *operand_values) -> value`` inside a kernel (``mlir/rules.py``).
- ``"index"``: ``rule(k, eqn, idx) -> value``: data movement and ``iota`` inside a kernel.
- ``"reduce"``: ``(identity(dtype), combine(b, dtype, acc, x))`` of a reduction.
- ``"arg_reduce"``: ``"max"`` / ``"min"``: ``argmax`` / ``argmin`` (a running (value, index)).
- ``"fuses"``: ``pred(eqn) -> bool``: whether this equation may join a kernel (default: yes).
- ``"complex"``: ``pred(eqn) -> bool``: whether an equation with complex operands or results may
  join a kernel (absent: it may not; ``blu/lower/mlir/rules_complex.py`` sets it).
- ``"own_point"``: positions of an index rule's operands read only at the output's own point
  (``fusion.own_point``: such an operand's buffer may be written over in place).
- ``"view"``: ``View``: data movement numpy does without a copy (``cpu`` makes the view;
  ``contiguous``: the same buffer, so also a view on the GPU).
- ``"identity"``: ``pred(eqn) -> bool``: the equation forwards its operand (simplification).
- ``"expensive"``: True for elementwise math worth a buffer rather than recomputation.
- ``"dot"``: the library product (numpy's matmul on the CPU, cuBLASLt on the GPU).
- ``"scatter"``: a scatter kernel (``mlir/scatter.py``).
- ``"loop"``: ``pred(eqn) -> bool``: control flow whose bodies the CPU compiles (a ``loop``
  node, ``cpu/control_flow.py``); CUDA targets run it on the host.
- ``"library"``: a ``LibraryLowering`` (``blu/lower/library.py``; ``gpu/libraries.py``).

The same kernel rules serve the CPU and CUDA targets (the GPU code generator emits the same
per-element rules inside its own loops); ``targets(prim)`` says what each target does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from blu.core.primitive import Primitive
from blu.lax import (
    bits,
    gather_scatter,
    random_gamma,
    reductions,
    shapes,
    slicing,
    special,
)
from blu.lax import elementwise as ew
from blu.lax.callback import debug_callback_p, pure_callback_p
from blu.lax.collective_prims import pvary_p
from blu.lax.control_flow.conditionals import cond_p
from blu.lax.control_flow.loops import while_p
from blu.lax.control_flow.scan import scan_p
from blu.lax.dot import dot_general_p
from blu.lower.backend import registered_backends
from blu.lower.mlir import rules as _rules  # noqa: F401  (registers the per-element rules)
from blu.lower.mlir import rules_complex as _rules_complex  # noqa: F401  (and complex values')
from blu.lower.mlir import rules_dynamic as _rules_dynamic  # noqa: F401  (run-time offsets)
from blu.lower.mlir import rules_gather as _rules_gather  # noqa: F401  (and gather's)
from blu.lower.mlir.rules_gather import gather_supported
from blu.lower.slots import fallback_reason, host_callback, host_fallback
from blu.transforms import ad_ops, remat
from blu.transforms import custom_derivatives as cd
from blu.transforms.jit import jit_p

EXPENSIVE = (
    ew.exp_p, ew.log_p, ew.tanh_p, special.logistic_p, special.log1p_p, special.expm1_p,
    special.erf_p, special.erfc_p, ew.sin_p, ew.cos_p, special.tan_p, special.pow_p, ew.div_p,
    special.sqrt_p, special.rsqrt_p, special.atan2_p, special.sinh_p, special.cosh_p,
    special.asin_p, special.acos_p, special.atan_p, special.asinh_p, special.acosh_p,
    special.atanh_p, special.exp2_p, special.cbrt_p, ew.rem_p, special.lgamma_p,
    special.digamma_p, special.polygamma_p, special.erf_inv_p, random_gamma.random_gamma_grad_p,
)  # fmt: skip

# Primitives that run their numpy impl on the host where no lowering applies (a synchronization
# on the GPU), with the reason: the ``"host"`` slot (``slots.host_fallback``). A primitive with
# neither fails tests/lower/test_lowering_slots.py. (The collectives are library nodes of each
# backend: blu/lower/collectives.py.)
_HOST = (
    ("only appears inside linearized programs; its impl runs the rule", cd.custom_lin_p),
    ("its jaxpr is run by its impl (remat is a transform-level boundary)", remat.checkpoint_p),
)  # fmt: skip
for _reason, *_prims in _HOST:
    host_fallback(_reason, *_prims)
host_callback("a Python callback: it runs on the host by definition", pure_callback_p,
              debug_callback_p)  # fmt: skip
HOST_FALLBACK = "host fallback"


def host_fallbacks(platform: str | None = None) -> dict[str, str]:
    """The primitives that still fall back to their numpy impl on the host, by name, with the
    declared reason (for docs/primitives.md): on ``platform`` (``"cpu"``, ``"cuda"``), or on
    any target (None). Host callbacks and primitives another target's plan makes are not
    fallbacks (``targets`` names them)."""
    out = {}
    for p in Primitive.registry.values():
        reason = fallback_reason(p)
        ts = targets(p)
        where = [ts[platform]] if platform is not None else ts.values()
        if reason is not None and HOST_FALLBACK in where:
            out[p.name] = reason
    return out


def declared_host_fallbacks() -> dict[str, str]:
    """Every primitive with a declared fallback reason, whether or not a lowering now applies
    on every target (the slots test finds stale declarations with it)."""
    return {p.name: fallback_reason(p) for p in Primitive.registry.values()
            if fallback_reason(p) is not None}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class View:
    """Data movement numpy does without a copy: ``cpu(eqn, x) -> view of x``; ``contiguous``:
    the output is the operand's buffer as it is (a view on the GPU too)."""

    cpu: Callable[[Any, np.ndarray], np.ndarray]
    contiguous: bool = False


def _reshape_view(eqn: Any, x: np.ndarray) -> np.ndarray:
    return x.reshape(eqn.outvars[0].aval.shape)


def _transpose_view(eqn: Any, x: np.ndarray) -> np.ndarray:
    return np.transpose(x, eqn.params["permutation"])


def _broadcast_view(eqn: Any, x: np.ndarray) -> np.ndarray:
    p = eqn.params
    shape = p["shape"]
    expanded = [1] * len(shape)
    for src, dst in enumerate(p["broadcast_dimensions"]):
        expanded[dst] = x.shape[src]
    return np.broadcast_to(x.reshape(expanded), shape)


def _slice_view(eqn: Any, x: np.ndarray) -> np.ndarray:
    p = eqn.params
    return x[
        tuple(
            slice(s, e, st)
            for s, e, st in zip(p["start_indices"], p["limit_indices"], p["strides"])
        )
    ]


def _rev_view(eqn: Any, x: np.ndarray) -> np.ndarray:
    return np.flip(x, eqn.params["dimensions"])


def _same_aval(e: Any) -> bool:
    x, out = (e.invars[0].aval if e.invars else None), e.outvars[0].aval
    return x is not None and x.shape == out.shape and x.dtype == out.dtype


def _broadcast_identity(e: Any) -> bool:
    x = e.invars[0].aval
    return _same_aval(e) and tuple(e.params["broadcast_dimensions"]) == tuple(range(x.ndim))


def _transpose_identity(e: Any) -> bool:
    return _same_aval(e) and tuple(e.params["permutation"]) == tuple(range(e.invars[0].aval.ndim))


def _bitcast_fuses(e: Any) -> bool:
    return e.invars[0].aval.dtype.itemsize == e.params["new_dtype"].itemsize


def _arg_reduce_fuses(e: Any) -> bool:  # only along the last (non-unit) axis
    x = e.invars[0].aval
    return all(d == 1 for d in x.shape[e.params["axis"] + 1 :])


def _register() -> None:
    for p in EXPENSIVE:
        p.lowerings["expensive"] = True
    reductions.argmax_p.lowerings.update(arg_reduce="max", fuses=_arg_reduce_fuses)
    reductions.argmin_p.lowerings.update(arg_reduce="min", fuses=_arg_reduce_fuses)
    bits.bitcast_convert_type_p.lowerings["fuses"] = _bitcast_fuses
    gather_scatter.gather_p.lowerings["fuses"] = gather_supported
    shapes.reshape_p.lowerings["view"] = View(_reshape_view, contiguous=True)
    shapes.squeeze_p.lowerings["view"] = View(_reshape_view, contiguous=True)
    shapes.transpose_p.lowerings["view"] = View(_transpose_view)
    shapes.broadcast_in_dim_p.lowerings["view"] = View(_broadcast_view)
    slicing.slice_p.lowerings["view"] = View(_slice_view)
    shapes.rev_p.lowerings["view"] = View(_rev_view)
    # a remat barrier read only by products and library calls (LLaMA's rematerialized SwiGLU
    # input): the saved buffer itself, not a copy a kernel of its own writes
    ad_ops.optimization_barrier_p.lowerings["view"] = View(_reshape_view, contiguous=True)
    ad_ops.stop_gradient_p.lowerings["identity"] = lambda e: True
    remat.name_p.lowerings["identity"] = lambda e: True  # a name for remat policies only
    pvary_p.lowerings["identity"] = lambda e: True  # marks values varying (shard_map)
    ew.convert_element_type_p.lowerings["identity"] = _same_aval
    shapes.reshape_p.lowerings["identity"] = _same_aval
    shapes.squeeze_p.lowerings["identity"] = _same_aval
    shapes.broadcast_in_dim_p.lowerings["identity"] = _broadcast_identity
    shapes.transpose_p.lowerings["identity"] = _transpose_identity
    dot_general_p.lowerings["dot"] = True  # which products run is the backend's (``runs_dot``)
    gather_scatter.scatter_p.lowerings["scatter"] = True
    gather_scatter.scatter_add_p.lowerings["scatter"] = True
    # simplification inlines nested jits and the primal bodies of custom-derivative calls
    # (their rules were applied by the transforms): ``(params, operands) -> (jaxpr, args)``
    for p in (scan_p, while_p, cond_p):
        p.lowerings["loop"] = _loop_lowers
    jit_p.lowerings["inline"] = lambda p, args: (p["jaxpr"], args)
    cd.custom_jvp_call_p.lowerings["inline"] = _custom_jvp_body
    cd.custom_vjp_call_p.lowerings["inline"] = _custom_vjp_body


def _loop_lowers(e: Any) -> bool:
    """Control flow compiles on the CPU when its bodies close over no arrays (their constants
    are operands, as the tracing of scan/while_loop/cond makes them)."""
    p = e.params
    bodies = p.get("branches") or [p[k] for k in ("jaxpr", "cond_jaxpr", "body_jaxpr") if k in p]
    return all(not getattr(b, "constvars", None) for b in bodies)


def _custom_jvp_body(params: dict, args: list) -> tuple[Any, list]:
    """A ``custom_jvp_call``'s function: its jaxpr on ``f consts, args`` (operands ``f consts,
    jvp consts, args``)."""
    fc, _, xs = cd.groups(args, params["num_fconsts"], params["num_jconsts"])
    return params["call_jaxpr"], [*fc, *xs]


def _custom_vjp_body(params: dict, args: list) -> tuple[Any, list]:
    """A ``custom_vjp_call``'s function: its jaxpr on ``f consts, args``."""
    fc, _, _, xs = cd.groups(args, *params["num_consts"])
    return params["call_jaxpr"], [*fc, *xs]


_register()

KERNEL_KINDS = ("elementwise", "index", "reduce", "arg_reduce")


def describe_generic(prim: Primitive, strided_views: bool, platform: str) -> str:
    """How ``prim`` runs on ``platform`` where no target-specific lowering applies
    (``Backend.describe``)."""
    lw = prim.lowerings
    kernel = next((k for k in KERNEL_KINDS if k in lw), None)
    if "callback" in lw:
        return "host callback"
    if lw.get("made_by", platform) != platform:
        return f"n/a (made by the {lw['made_by'].upper()} plan only)"
    if "inline" in lw:
        return "inlined"
    if kernel is not None:
        view = lw.get("view")
        fused = f"fused ({kernel})"
        if view is not None and (strided_views or view.contiguous):
            fused += " or view"
        return fused
    if prim.decomposition is not None:
        return "decomposition"
    return HOST_FALLBACK


def targets(prim: Primitive) -> dict[str, str]:
    """How ``prim`` runs on each platform's backend: ``{"cpu": ..., "cuda": ...}`` (for
    docs/primitives.md)."""
    return {name: cls().describe(prim) for name, cls in registered_backends().items()
            if name == cls.platform}  # fmt: skip
