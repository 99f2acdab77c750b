"""Jaxpr helpers shared by the primitives that hold sub-jaxprs (jit, control flow, custom
derivatives, remat), and the jaxpr-to-jaxpr transforms they use, each defined once in its
transform's module with one cache: ``jvp_jaxpr`` (ad), ``partial_eval_jaxpr`` (partial_eval),
``batch_jaxpr`` (batching); ``run_jaxpr`` runs one on numpy arrays (impl rules).

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
from blu.core.interpreter import get_aval
from blu.core.jaxpr import ClosedJaxpr, Jaxpr, Var
from blu.core.lru import LRU
from blu.core.numpy_eval import NumpyExecutable
from blu.core.staging import hoist_consts, trace_to_jaxpr
from blu.transforms.ad import jvp_jaxpr
from blu.transforms.ad_util import Zero
from blu.transforms.batching import batch_jaxpr, moveaxis
from blu.transforms.partial_eval import partial_eval_jaxpr

__all__ = [  # the transforms of jaxprs, re-exported for the rules that use them
    "batch_jaxpr", "jvp_jaxpr", "partial_eval_jaxpr", "run_jaxpr", "trace_jaxpr",
]  # fmt: skip

# ---- tracing and running -----------------------------------------------------------------------


def trace_jaxpr(fun: Callable[..., Sequence[Any]], in_avals: Sequence[ShapedArray]):
    """Trace ``fun`` (flat args -> flat list of outputs) under the current interpreter.

    Returns:
        ``(jaxpr, consts)``: the jaxpr's first ``len(consts)`` invars stand for ``consts``.
    """
    jaxpr, consts = trace_to_jaxpr(fun, list(in_avals))
    return hoist_consts(jaxpr), list(consts)


# an executable holds its jaxpr (a weak key would never die): bounded instead
_executables = LRU("executable_cache_size")


def run_jaxpr(jaxpr: Jaxpr, args: Sequence[Any]) -> list[Any]:
    """Run a jaxpr (no constvars) on numpy arrays: what the impl rules use."""
    exe = _executables.get(jaxpr)
    if exe is None:  # two threads may both build one; either is right
        exe = _executables.setdefault(jaxpr, NumpyExecutable(jaxpr, "sub-jaxpr"))
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
    return [not isinstance(t, Zero) and dtypes.is_inexact(get_aval(t).dtype) for t in tangents]


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


def to_front(x: Any, d: int | None) -> Any:
    """``x`` with its batch axis moved to 0 (None stays None)."""
    return x if d is None else moveaxis(x, d, 0)


# ---- pytree checks -----------------------------------------------------------------------------


def flatten_avals(tree: Any) -> tuple[list[tuple[Any, ShapedArray]], Any]:
    """``[(key path, aval)], treedef`` of a pytree of arrays."""
    pairs, treedef = pytree.tree_flatten_with_path(tree)
    return [(p, get_aval(x)) for p, x in pairs], treedef


def check_same_types(
    what: str,
    name_a: str,
    name_b: str,
    tree_a,
    avals_a,
    tree_b,
    avals_b,
    root: str = "",
    allow_promote: bool = True,
) -> list[int]:
    """Check two flattened pytrees of avals agree in structure, shapes and dtypes.

    Returns the indices of leaves that differ only because ``a``'s leaf is weakly typed and
    promotes with ``b``'s to ``b``'s dtype (JAX's ``_promote_weak_typed_inputs``: the caller
    converts them to ``b``'s dtype and traces again, with ``allow_promote=False``); raises for every
    other difference, naming the leaf's key path, its shapes and dtypes.
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
        if (
            allow_promote
            and a.shape == b.shape
            and a.weak_type
            and dtypes.result_type(a, b) == b.dtype
        ):
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
