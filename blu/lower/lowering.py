"""Lowerings registered on the primitives: importing this module fills each primitive's
``lowerings`` slot (``Primitive.lowerings``: kind -> rule), by primitive object. The plan
(``plan/fusion.py``, ``plan/partition.py``, ``plan/simplify.py``), the code generators
(``mlir/codegen*.py``) and the CPU views read the slot, never a table of names; a primitive
without an entry for a target becomes a host fallback node (``HOST_FALLBACK`` lists the
primitives that do, with the reason; ``tests/lower/test_lowering_slots.py`` checks every primitive
is one or the other).

Kinds (keys of ``prim.lowerings``):

- ``"elementwise"``: ``rule(b, eqn, *operand_values) -> value`` inside a kernel (``mlir/rules.py``).
- ``"index"``: ``rule(k, eqn, idx) -> value``: data movement and ``iota`` inside a kernel.
- ``"reduce"``: ``(identity(dtype), combine(b, dtype, acc, x))`` of a reduction.
- ``"arg_reduce"``: ``"max"`` / ``"min"``: ``argmax`` / ``argmin`` (a running (value, index)).
- ``"fuses"``: ``pred(eqn) -> bool``: whether this equation may join a kernel (default: yes).
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
from blu.lax import bits, gather_scatter, reductions, shapes, slicing, special
from blu.lax import elementwise as ew
from blu.lax.control_flow.conditionals import cond_p
from blu.lax.control_flow.loops import while_p
from blu.lax.control_flow.scan import scan_p
from blu.lax.dot import dot_general_p
from blu.lower.gpu import libraries  # noqa: F401  (registers the cuSOLVER library lowerings)
from blu.lower.mlir import rules
from blu.lower.mlir.rules_gather import gather_supported
from blu.lower.plan.dots import library_dot
from blu.transforms import ad_ops
from blu.transforms import custom_derivatives as cd
from blu.transforms.jit import jit_p

ELEMENTWISE = (
    ew.add_p, ew.sub_p, ew.mul_p, ew.max_p, ew.min_p, bits.and_p, bits.or_p, bits.xor_p,
    ew.neg_p, bits.not_p, ew.div_p, ew.rem_p, ew.abs_p, ew.sign_p, special.square_p,
    special.integer_pow_p, special.rsqrt_p, ew.is_finite_p, ew.round_p, special.sqrt_p,
    ew.floor_p, ew.ceil_p, ew.sin_p, ew.cos_p, special.tan_p, ew.exp_p, ew.log_p, ew.tanh_p,
    special.asin_p, special.acos_p, special.atan_p, special.sinh_p, special.cosh_p,
    special.asinh_p, special.acosh_p, special.atanh_p, special.exp2_p, special.cbrt_p,
    special.erf_p, special.erfc_p, special.log1p_p, special.expm1_p, special.logistic_p,
    special.pow_p, special.atan2_p, ad_ops.stop_gradient_p, ew.eq_p, ew.ne_p, ew.lt_p, ew.le_p,
    ew.gt_p, ew.ge_p, ew.select_p, bits.shift_left_p, bits.shift_right_logical_p,
    bits.shift_right_arithmetic_p, bits.population_count_p, bits.clz_p,
    ew.convert_element_type_p, bits.bitcast_convert_type_p, ad_ops.optimization_barrier_p,
)  # fmt: skip
INDEX = (
    shapes.broadcast_in_dim_p, shapes.reshape_p, shapes.squeeze_p, shapes.transpose_p,
    slicing.slice_p, shapes.rev_p, shapes.iota_p, shapes.pad_p, shapes.concatenate_p,
    gather_scatter.gather_p,
)  # fmt: skip
REDUCE = (
    reductions.reduce_sum_p, reductions.reduce_prod_p, reductions.reduce_max_p,
    reductions.reduce_min_p, reductions.reduce_and_p, reductions.reduce_or_p,
)  # fmt: skip
EXPENSIVE = (
    ew.exp_p, ew.log_p, ew.tanh_p, special.logistic_p, special.log1p_p, special.expm1_p,
    special.erf_p, special.erfc_p, ew.sin_p, ew.cos_p, special.tan_p, special.pow_p, ew.div_p,
    special.sqrt_p, special.rsqrt_p, special.atan2_p, special.sinh_p, special.cosh_p,
    special.asin_p, special.acos_p, special.atan_p, special.asinh_p, special.acosh_p,
    special.atanh_p, special.exp2_p, special.cbrt_p, ew.rem_p,
)  # fmt: skip

# Primitives that run their numpy impl on the host (a synchronization on the GPU), and why.
# A primitive neither lowered nor listed here fails tests/lower/test_lowering_slots.py.
HOST_FALLBACK: dict[str, str] = {
    "sort": "no sorting kernel yet (a bitonic or radix sort per row)",
    "top_k": "no sorting kernel yet",
    "cumsum": "no scan kernel yet (a parallel prefix sum)",
    "cumprod": "no scan kernel yet",
    "cummax": "no scan kernel yet",
    "cummin": "no scan kernel yet",
    "cumulative_argextremum": "no scan kernel yet",
    "while": "on CUDA targets control flow runs on the host (the CPU compiles it: a loop node)",
    "cond": "on CUDA targets the branch is chosen from a host value (the CPU: a loop node)",
    "scan": "on CUDA targets control flow runs on the host (the CPU compiles it: a loop node)",
    "custom_lin": "only appears inside linearized programs; its impl runs the rule",
    "checkpoint": "its jaxpr is run by its impl (remat is a transform-level boundary)",
    "checkpoint_name": "an identity that names a value for remat policies",
    "cholesky": "LAPACK on the CPU; cuSOLVER on CUDA targets (a library node)",
    "triangular_solve": "LAPACK on the CPU; cuSOLVER on CUDA targets (a library node)",
    "lu": "LAPACK on the CPU; cuSOLVER on CUDA targets (a library node)",
    "qr": "LAPACK on the CPU; cuSOLVER on CUDA targets (a library node)",
    "eigh": "LAPACK on the CPU; cuSOLVER on CUDA targets (a library node)",
    "svd": "LAPACK on the CPU; cuSOLVER on CUDA targets (a library node)",
    "dynamic_slice": "no index rule for run-time offsets yet",
    "dynamic_update_slice": "no index rule for run-time offsets yet",
    "take_along_axis": "no index rule yet (gather covers the common cases)",
    "scatter_add_along_axis": "no scatter kernel for this form yet",
    "lgamma": "no elementwise rule yet (a polynomial in mathlib)",
    "digamma": "no elementwise rule yet (a polynomial in mathlib)",
    "polygamma": "no elementwise rule yet",
    "erf_inv": "no elementwise rule yet (a polynomial in mathlib)",
    "psum": "a collective: run per device by blu.parallel, not a kernel",
    "pmax": "a collective: run per device by blu.parallel, not a kernel",
    "pmin": "a collective: run per device by blu.parallel, not a kernel",
    "all_gather": "a collective: run per device by blu.parallel, not a kernel",
    "all_to_all": "a collective: run per device by blu.parallel, not a kernel",
    "ppermute": "a collective: run per device by blu.parallel, not a kernel",
    "reduce_scatter": "a collective: run per device by blu.parallel, not a kernel",
    "axis_index": "a collective: run per device by blu.parallel, not a kernel",
    "fft": "pocketfft (numpy) on the host; no cuFFT lowering yet",
    "real": "complex values run on the host: no complex arithmetic in the kernel generators",
    "imag": "complex values run on the host: no complex arithmetic in the kernel generators",
    "conj": "complex values run on the host: no complex arithmetic in the kernel generators",
    "complex": "complex values run on the host: no complex arithmetic in the kernel generators",
}


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
    for p in ELEMENTWISE:
        p.lowerings["elementwise"] = rules.SCALAR[p.name]
    for p in INDEX:
        p.lowerings["index"] = rules.INDEX[p.name]
    for p in REDUCE:
        p.lowerings["reduce"] = rules.REDUCE[p.name]
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
    ad_ops.stop_gradient_p.lowerings["identity"] = lambda e: True
    ew.convert_element_type_p.lowerings["identity"] = _same_aval
    shapes.reshape_p.lowerings["identity"] = _same_aval
    shapes.squeeze_p.lowerings["identity"] = _same_aval
    shapes.broadcast_in_dim_p.lowerings["identity"] = _broadcast_identity
    shapes.transpose_p.lowerings["identity"] = _transpose_identity
    dot_general_p.lowerings["dot"] = library_dot
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


def targets(prim: Primitive) -> dict[str, str]:
    """How ``prim`` runs on each target: ``{"cpu": ..., "cuda": ...}`` (for docs/primitives.md)."""
    lw = prim.lowerings
    kernel = next((k for k in KERNEL_KINDS if k in lw), None)
    out = {}
    for t in ("cpu", "cuda"):
        lib = lw.get("library")
        if lib is not None and (lib.gpu if t == "cuda" else lib.cpu) is not None:
            out[t] = "library"
        elif "dot" in lw:
            out[t] = "dot (numpy matmul)" if t == "cpu" else "dot (cuBLASLt)"
        elif "scatter" in lw:
            out[t] = "scatter kernel"
        elif "loop" in lw and t == "cpu":
            out[t] = "loop (compiled bodies)"
        elif "inline" in lw:
            out[t] = "inlined"
        elif kernel is not None:
            view = lw.get("view")
            fused = f"fused ({kernel})"
            if view is not None and (t == "cpu" or view.contiguous):
                fused += " or view"
            out[t] = fused
        elif prim.decomposition is not None:
            out[t] = "decomposition"
        else:
            out[t] = "host fallback"
    return out
