"""``cond``/``switch`` whose branch index varies over a mesh axis of ``blu.shard``: collectives.

Each device runs the branch its own index picks, so devices may run different branches. A
collective over such an axis is well defined only when every device reaches it, whatever its
branch: every branch must do the same collectives over the axis, in the same order, with the
same parameters and operand types (the communicator pairs them up: each device contributes the
operand of its own branch). A collective in some branches only would hang a real machine (or
pair with an unrelated one), so it is an error at trace time, named with its axis.

Such a cond is not bound as ``cond_p`` but run in lockstep (:func:`lockstep`): every branch
up to its next collective over the axis, then that collective once, on the operand of each
device's own branch (``select_n`` by the index), its result fed to every branch; the outputs
are those of each device's branch. Every device computes every branch, and transforms see
ordinary operations: on virtual CPU devices a batched index ran each branch over all devices
and selected (vmap's rule), so a branch's collective summed the operands of devices that did
not take it, and so did its transpose with their cotangents; across processes the branches'
collectives paired up, but not those of their derivatives (a branch whose collective's operand
does not depend on the differentiated value has no tangent collective).

A ``while_loop`` whose predicate varies over a mesh axis has no such reading: devices run their
own numbers of iterations, and one that has finished reaches no more collectives (JAX lowers the
loop per device; a real machine hangs). A collective over the axis in its ``cond_fun`` or
``body_fun`` is an error at trace time (:func:`check_loop`).

A ``custom_jvp``/``custom_vjp`` function and its rules are traced without their arguments'
variance (their jaxprs stay as they were); where a cond or while loop in one could not tell
whether its predicate varies and has collectives over manual axes, the trace is redone knowing
it (``vma.trace_knowing``), and kept if a cond ran in lockstep there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from blu.core import dtypes
from blu.core.errors import BluValueError, with_user_line
from blu.core.jaxpr import ClosedJaxpr, Jaxpr, Literal
from blu.lax.elementwise import eq, select
from blu.lax.select_n import select_n
from blu.lax.shapes import broadcast_in_dim, full, full_like
from blu.transforms import vma
from blu.transforms.ad_ops import stop_gradient

_LOCAL = ("axis_index", "pvary")  # collectives that exchange nothing between devices


def _axes(eqn: Any) -> tuple:
    names = eqn.params.get("axis_name", ())
    return tuple(names) if isinstance(names, (tuple, list)) else (names,)


def _nested(eqn: Any) -> list[Jaxpr]:
    out = []
    for v in eqn.params.values():
        for j in v if isinstance(v, (tuple, list)) else (v,):
            j = j.jaxpr if isinstance(j, ClosedJaxpr) else j
            if isinstance(j, Jaxpr):
                out.append(j)
    return out


def talks(eqn: Any, names: frozenset) -> tuple | None:
    """``(collective, axes)`` of the first collective over any of ``names`` that ``eqn`` runs
    (itself or in a jaxpr it holds), or None."""
    prim = eqn.primitive
    if getattr(prim, "collective", False):
        hit = [n for n in _axes(eqn) if n in names]
        return (prim.name, tuple(hit)) if hit and prim.name not in _LOCAL else None
    for j in _nested(eqn):
        for e in j.eqns:
            got = talks(e, names)
            if got is not None:
                return got
    return None


def _same(a: Any, b: Any) -> bool:
    """Whether two collective equations of different branches pair up on a device."""
    if a.primitive is not b.primitive or len(a.invars) != len(b.invars):
        return False
    for u, v in zip(a.invars, b.invars):
        if u.aval.shape != v.aval.shape or u.aval.dtype != v.aval.dtype:
            return False
    try:
        return bool(a.params == b.params)
    except Exception:  # params that do not compare (arrays): not known to be the same
        return False


def _ordinal(k: int) -> str:
    return f"{k}{'st' if k == 1 else 'nd' if k == 2 else 'rd' if k == 3 else 'th'}"


def _describe(eqn: Any, names: frozenset) -> str:
    prim, axes = talks(eqn, names)  # type: ignore[misc]
    where = "" if eqn.primitive.name == prim else f" (inside {eqn.primitive.name})"
    avals = ", ".join(v.aval.str_short() for v in eqn.invars if not isinstance(v, Literal))
    return f"{prim}{where} over axis {', '.join(map(repr, axes))} of {avals}"


def check_branches(what: str, branches: Sequence[Jaxpr], names: frozenset) -> None:
    """Raises BluValueError unless every branch does the same collectives over ``names`` in
    the same order (see the module docstring), naming the first that differs and its axis."""
    stops = [[i for i, e in enumerate(br.eqns) if talks(e, names)] for br in branches]
    label = (
        (lambda b: ("false_fun", "true_fun")[b]) if what == "cond" else (lambda b: f"branch {b}")
    )
    for b in range(1, len(branches)):
        for k in range(max(len(stops[0]), len(stops[b]))):
            e0 = branches[0].eqns[stops[0][k]] if k < len(stops[0]) else None
            eb = branches[b].eqns[stops[b][k]] if k < len(stops[b]) else None
            if e0 is not None and eb is not None and _same(e0, eb):
                continue
            nth = f"the {_ordinal(k + 1)} collective over the axis"
            if e0 is None or eb is None:
                has, lacks, eqn = (b, 0, eb) if e0 is None else (0, b, e0)
                differs = (
                    f"{nth} in {label(has)} is {_describe(eqn, names)}, and {label(lacks)} has "
                    f"{'none' if k == 0 else f'only {k}'}"
                )
            else:
                eqn = eb
                differs = (
                    f"{nth} is {_describe(e0, names)} in {label(0)} but {_describe(eb, names)} "
                    f"in {label(b)}"
                )
            axes = ", ".join(repr(n) for n in sorted(names, key=str))
            axes = f"axes {axes}" if len(names) > 1 else f"axis {axes}"
            raise BluValueError(
                with_user_line(
                    f"{what}: the branch index varies over mesh {axes}, so devices may take "
                    "different branches, and a collective over it "
                    f"must be reached by every device whatever its branch: {differs}"
                    + (f" (the collective at {eqn.source})" if eqn.source else "")
                    + f". Run the collective outside the {what}, do the same collectives in every "
                    "branch, or make the index invariant over the axis (e.g. reduce it with pmax)"
                )
            )


def check_loop(pred_vma: frozenset | None, cond: Jaxpr, body: Jaxpr, manual: tuple) -> None:
    """``while_loop`` inside ``blu.shard``: raises BluValueError when ``cond_fun``'s result varies
    over mesh axes (``pred_vma``) and ``cond_fun`` or ``body_fun`` runs a collective over one of
    them, naming it and the axis. Devices then run their own numbers of iterations, and a
    device that has finished would not reach the others' collective: a real machine hangs (JAX
    lowers the loop per device and defines nothing else). A ``pred_vma`` of None (unknown: the
    loop is traced where the variance is not recorded) with collectives over ``manual`` is
    noted (``vma.note_unknown``), so that a custom rule's trace is redone knowing it."""
    if pred_vma is None:
        if manual and _first((cond, body), frozenset(manual)) is not None:
            vma.note_unknown()
        return
    names = frozenset(pred_vma)
    hit = _first((cond, body), names) if names else None
    if hit is None:
        return
    where, eqn = hit
    axes = ", ".join(repr(n) for n in sorted(names, key=str))
    axes = f"axes {axes}" if len(names) > 1 else f"axis {axes}"
    raise BluValueError(
        with_user_line(
            f"while_loop: cond_fun's result varies over mesh {axes}, so devices may run "
            f"different numbers of iterations, and a device that has finished would not reach "
            f"the others' collectives over it: {where} runs {_describe(eqn, names)}"
            + (f" (the collective at {eqn.source})" if eqn.source else "")
            + ". Make the predicate invariant over the axis (e.g. loop while any device "
            "continues, pmax(pred.astype('int32'), axis) > 0, with body_fun keeping a finished "
            "device's value by a select on its own predicate), or run the collective outside "
            "the loop"
        )
    )


def _first(jaxprs: tuple, names: frozenset) -> tuple | None:
    """``(cond_fun or body_fun, eqn)`` of the first equation that runs a collective over
    ``names``, or None."""
    for what, j in zip(("cond_fun", "body_fun"), jaxprs):
        for e in j.eqns:
            if talks(e, names):
                return what, e
    return None


def lockstep(index: Any, branches: Sequence[Jaxpr], names: frozenset, args: Sequence[Any]) -> list:
    """The outputs of ``branches`` (no constvars; ``index`` in range) run as each device runs
    its own branch: each branch up to its next collective over ``names``; that collective
    once, on the operands of the device's branch (``select_n`` by ``index``); its results fed
    to every branch; the outputs of the device's branch. Every branch computes on every
    device; as in JAX's vmap of cond, a branch a device does not take sees its inputs (and
    the collectives' results) through ``stop_gradient``, so that its derivatives (inf or nan
    where the cond guards a domain) do not reach the gradient. Call ``check_branches`` first."""
    vma.note_lockstep()
    stops = [[i for i, e in enumerate(br.eqns) if talks(e, names)] for br in branches]
    envs: list[dict] = [{} for _ in branches]
    taken = [eq(index, full_like(index, b)) for b in range(len(branches))]

    def feed(b: int, variables: Sequence[Any], vals: Sequence[Any]) -> None:
        for v, x in zip(variables, vals, strict=True):
            if dtypes.is_inexact(v.aval.dtype):  # this branch's value only where it is taken
                mine = broadcast_in_dim(taken[b], v.aval.shape, ())
                x = select(mine, x, stop_gradient(x))
            envs[b][v] = x

    def read(b: int, a: Any) -> Any:
        return full(a.aval.shape, a.val, a.aval.dtype) if isinstance(a, Literal) else envs[b][a]

    def pick(vals: list) -> Any:
        return vals[0] if all(v is vals[0] for v in vals) else select_n(index, *vals)

    for b, br in enumerate(branches):
        feed(b, br.invars, args)
    done = [0] * len(branches)
    for k in range(len(stops[0]) + 1):
        for b, br in enumerate(branches):
            end = stops[b][k] if k < len(stops[b]) else len(br.eqns)
            for eqn in br.eqns[done[b] : end]:
                outs = eqn.primitive.bind(*[read(b, a) for a in eqn.invars], **eqn.params)
                outs = outs if eqn.primitive.multiple_results else [outs]
                envs[b].update(zip(eqn.outvars, outs, strict=True))
            done[b] = end + 1
        if k == len(stops[0]):
            break
        eqns = [br.eqns[stops[b][k]] for b, br in enumerate(branches)]
        first = eqns[0]
        ins = [
            pick([read(b, e.invars[j]) for b, e in enumerate(eqns)])
            for j in range(len(first.invars))
        ]
        outs = first.primitive.bind(*ins, **first.params)
        outs = outs if first.primitive.multiple_results else [outs]
        for b, e in enumerate(eqns):
            feed(b, e.outvars, outs)
    return [
        pick([read(b, br.outvars[i]) for b, br in enumerate(branches)])
        for i in range(len(branches[0].outvars))
    ]
