"""Jaxpr helpers shared by the primitives that hold sub-jaxprs (control flow, custom
derivatives, remat).

Every helper that builds a jaxpr returns one *without constvars*: its consts are hoisted to be
its leading invars and returned beside it, so a primitive passes them as ordinary operands and
every transform (jvp, vmap, partial eval, transpose) sees them. Closures over traced values work
because of this: a tracer the user's function closed over becomes an operand of the primitive.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

from blu.core import dtypes, pytree
from blu.core.aval import ShapedArray
from blu.core.errors import BluTypeError, with_user_line
from blu.core.interpreter import Interpreter, get_aval, set_interpreter
from blu.core.jaxpr import ClosedJaxpr, Jaxpr, Var, eval_jaxpr
from blu.core.staging import StagingInterpreter, hoist_consts, trace_to_jaxpr
from blu.transforms.ad_util import Zero, instantiate, tangent_aval

# ---- tracing and running -----------------------------------------------------------------------


def trace_jaxpr(fun: Callable[..., Sequence[Any]], in_avals: Sequence[ShapedArray]):
    """Trace ``fun`` (flat args -> flat list of outputs) under the current interpreter.

    Returns:
        ``(jaxpr, consts)``: the jaxpr's first ``len(consts)`` invars stand for ``consts``.
    """
    jaxpr, consts = trace_to_jaxpr(fun, list(in_avals))
    return hoist_consts(jaxpr), list(consts)


_executables: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def run_jaxpr(jaxpr: Jaxpr, args: Sequence[Any]) -> list[Any]:
    """Run a jaxpr (no constvars) on numpy arrays: what the impl rules use."""
    exe = _executables.get(jaxpr)
    if exe is None:
        from blu.lower.reference import NumpyExecutable

        exe = _executables[jaxpr] = NumpyExecutable(jaxpr, "sub-jaxpr")
    return exe(*args)


def reorder(jaxpr: Jaxpr, in_order: Sequence[int] | None = None, out_order=None) -> Jaxpr:
    """The same program with its invars / outvars permuted (``new[i] = old[order[i]]``)."""
    invars = jaxpr.invars if in_order is None else [jaxpr.invars[i] for i in in_order]
    outvars = jaxpr.outvars if out_order is None else [jaxpr.outvars[i] for i in out_order]
    return Jaxpr([], invars, jaxpr.eqns, outvars)


def groups(seq: Sequence[Any], *sizes: int) -> list[list[Any]]:
    """Split ``seq`` into consecutive groups of the given sizes plus the rest."""
    out, start = [], 0
    for n in sizes:
        out.append(list(seq[start : start + n]))
        start += n
    out.append(list(seq[start:]))
    return out


def mask(seq: Sequence[Any], keep: Sequence[bool]) -> list[Any]:
    return [x for x, k in zip(seq, keep, strict=True) if k]


def merge(keep: Sequence[bool], if_true: Sequence[Any], if_false: Sequence[Any]) -> list[Any]:
    """Interleave two lists back: position i comes from ``if_true`` when ``keep[i]``."""
    t, f = iter(if_true), iter(if_false)
    return [next(t) if k else next(f) for k in keep]


def join_consts(parts: Sequence[tuple[Jaxpr, Sequence[Any]]]) -> tuple[list[Jaxpr], list[Any]]:
    """Give several jaxprs (each with its own leading consts) one shared const list.

    Jaxpr ``i`` of the result takes all the consts (``consts_0 + consts_1 + ...``) and ignores
    the others'; its remaining invars are unchanged. Used by ``cond`` (one operand list for all
    branches).
    """
    all_consts = [c for _, cs in parts for c in cs]
    out = []
    for i, (j, cs) in enumerate(parts):
        k = len(cs)
        invars: list[Var] = []
        for b, (jb, csb) in enumerate(parts):
            if b == i:
                invars += j.invars[:k]
            else:
                invars += [Var(v.aval) for v in jb.invars[: len(csb)]]
        out.append(Jaxpr([], invars + j.invars[k:], j.eqns, j.outvars))
    return out, all_consts


# ---- forward mode ------------------------------------------------------------------------------


def nonzero(tangents: Sequence[Any]) -> list[bool]:
    """Which tangents carry a value (not a symbolic Zero; integer tangents count as zero)."""
    return [not isinstance(t, Zero) and dtypes.is_float(get_aval(t).dtype) for t in tangents]


_jvp_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def jvp_jaxpr(jaxpr: Jaxpr, nonzeros: Sequence[bool], instantiate_out: Sequence[bool]):
    """The JVP of a jaxpr (no constvars) as a jaxpr.

    Args:
        nonzeros: which inputs have a (non-symbolic-zero) tangent; non-float inputs never do.
        instantiate_out: outputs whose tangent must be a real array even when it is zero.

    Returns:
        ``(jvp, consts, out_nz)``: ``jvp`` takes ``consts, primals, nonzero tangents`` and returns
        ``primal outs, nonzero tangent outs``; ``out_nz`` says which output tangents it returns.
    """
    nonzeros = tuple(
        bool(nz) and dtypes.is_float(v.aval.dtype)
        for nz, v in zip(nonzeros, jaxpr.invars, strict=True)
    )
    inst = tuple(
        bool(i) and dtypes.is_float(a.dtype)
        for i, a in zip(instantiate_out, jaxpr.out_avals, strict=True)
    )
    per = _jvp_cache.setdefault(jaxpr, {})
    if (nonzeros, inst) in per:
        return per[(nonzeros, inst)]
    from blu.transforms.ad import jvp_flat

    n = len(jaxpr.invars)
    t_avals = [tangent_aval(v.aval) for v, nz in zip(jaxpr.invars, nonzeros) if nz]
    box: list[list[bool]] = []

    def fun(*args):
        primals, t_iter = args[:n], iter(args[n:])
        tangents = [
            next(t_iter) if nz else Zero(tangent_aval(v.aval))
            for v, nz in zip(jaxpr.invars, nonzeros)
        ]
        outs, touts = jvp_flat(lambda *a: eval_jaxpr(jaxpr, [], *a), primals, tangents)
        out_nz = [
            (not isinstance(t, Zero) or i) and dtypes.is_float(get_aval(o).dtype)
            for t, i, o in zip(touts, inst, outs)
        ]
        box.append(out_nz)
        touts = [
            _cast_like(instantiate(t), a) for t, nz, a in zip(touts, out_nz, jaxpr.out_avals) if nz
        ]
        return list(outs) + touts

    new, consts = trace_jaxpr(fun, [v.aval for v in jaxpr.invars] + t_avals)
    per[(nonzeros, inst)] = (new, consts, box[0])
    return per[(nonzeros, inst)]


def _cast_like(t: Any, aval: ShapedArray) -> Any:
    """A tangent with the tangent dtype of ``aval`` (a rule may return a weakly typed one)."""
    from blu import lax

    if get_aval(t).dtype != aval.dtype:
        return lax.convert_element_type(t, aval.dtype)
    return t


# ---- partial evaluation ------------------------------------------------------------------------


def partial_eval_jaxpr(
    jaxpr: Jaxpr, in_unknowns: Sequence[bool], instantiate: Sequence[bool], parent: Interpreter
):
    """Split a jaxpr (no constvars) into a known and an unknown part.

    Like ``blu.transforms.partial_eval.partial_eval_jaxpr``, but outputs marked ``instantiate``
    are made unknown even when they are known (a loop carry that must stay unknown).

    Returns:
        ``(known, known_consts, unknown, out_unknowns, num_res)``: ``known`` takes
        ``known_consts, known inputs`` and returns ``known outputs, residuals``; ``unknown``
        takes ``residuals, unknown inputs`` and returns the unknown outputs.
    """
    from blu.transforms.partial_eval import PartialEvalInterpreter

    known_builder = StagingInterpreter(parent)
    pe = PartialEvalInterpreter(known_builder)
    args = [
        pe.new_arg(v.aval) if u else known_builder.new_arg(v.aval)
        for v, u in zip(jaxpr.invars, in_unknowns, strict=True)
    ]
    with set_interpreter(pe):
        outs = eval_jaxpr(jaxpr, [], *args)
    out_uk = [pe.is_unknown(o) or bool(i) for o, i in zip(outs, instantiate, strict=True)]
    unknown, residuals = pe.build(mask(outs, out_uk))
    unknown = hoist_consts(unknown)
    known, known_consts = known_builder.build(mask(outs, [not u for u in out_uk]) + list(residuals))
    return hoist_consts(known), list(known_consts), unknown, out_uk, len(residuals)


# ---- batching ----------------------------------------------------------------------------------


_collectives_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def uses_collectives(jaxpr: Jaxpr) -> bool:
    """Whether ``jaxpr`` (or a jaxpr nested in its equations) calls a named-axis collective,
    so batching it under a named axis must go inside even when no operand is batched."""
    hit = _collectives_cache.get(jaxpr)
    if hit is None:
        hit = False
        for eqn in jaxpr.eqns:
            if getattr(eqn.primitive, "collective", False):
                hit = True
                break
            for v in eqn.params.values():
                for j in v if isinstance(v, (tuple, list)) else (v,):
                    j = j.jaxpr if isinstance(j, ClosedJaxpr) else j
                    if isinstance(j, Jaxpr) and uses_collectives(j):
                        hit = True
            if hit:
                break
        _collectives_cache[jaxpr] = hit
    return hit


def unbatched(axis_name: Any, dims: Sequence[int | None], jaxprs: Sequence[Jaxpr]) -> bool:
    """True when a control-flow primitive can be bound as is under this batching level: no
    operand is batched, and no collective inside needs the level's axis name."""
    if any(d is not None for d in dims):
        return False
    return axis_name is None or not any(uses_collectives(j) for j in jaxprs)


def batch_jaxpr(
    jaxpr: Jaxpr,
    axis_size: int,
    in_dims: Sequence[int | None],
    force_out: Sequence[bool] | bool = True,
    axis_name: Any = None,
):
    """The batched version of a jaxpr (no constvars), with every batched output at axis 0.

    Args:
        in_dims: per input, its batch axis or None.
        force_out: per output (or for all), whether an unbatched output must be broadcast so it
            is batched too.
        axis_name: the batching level's axis name, for the collectives inside.

    Returns:
        ``(batched, consts, out_dims)`` with each out dim 0 or None.
    """
    from blu.transforms.batching import batch_jaxpr as _batch_jaxpr

    new, consts, out_dims = _batch_jaxpr(jaxpr, axis_size, in_dims, axis_name, force_out)
    return hoist_consts(new), list(consts), out_dims


def to_front(x: Any, d: int | None) -> Any:
    """``x`` with its batch axis moved to 0 (None stays None)."""
    from blu.transforms.batching import moveaxis

    return x if d is None else moveaxis(x, d, 0)


# ---- pytree checks -----------------------------------------------------------------------------


def flatten_avals(tree: Any) -> tuple[list[tuple[Any, ShapedArray]], Any]:
    """``[(key path, aval)], treedef`` of a pytree of arrays."""
    pairs, treedef = pytree.tree_flatten_with_path(tree)
    return [(p, get_aval(x)) for p, x in pairs], treedef


def check_same_types(
    what: str, name_a: str, name_b: str, tree_a, avals_a, tree_b, avals_b, root: str = ""
) -> list[int]:
    """Check two flattened pytrees of avals agree in structure, shapes and dtypes.

    Returns the indices of leaves that differ only because ``a``'s leaf is weakly typed and has
    another dtype (the caller may promote them); raises for every other difference, naming the
    leaf's key path, its shapes and dtypes.
    """
    if tree_a != tree_b:
        raise BluTypeError(
            with_user_line(
                f"{what}: {name_a} has structure {tree_a} but {name_b} has structure {tree_b}"
            )
        )
    promote = []
    for i, ((path, a), b) in enumerate(zip(avals_a, avals_b, strict=True)):
        if a.shape == b.shape and a.dtype == b.dtype:
            continue
        if a.shape == b.shape and a.weak_type and not b.weak_type:
            promote.append(i)
            continue
        leaf = root + pytree.keystr(path)
        raise BluTypeError(
            with_user_line(
                f"{what}: leaf {leaf} is {a.str_short()} in {name_a} but {b.str_short()} in "
                f"{name_b} (shape {a.shape} vs {b.shape}, dtype {a.dtype} vs {b.dtype}); "
                "they must have the same shape and dtype"
            )
        )
    return promote
