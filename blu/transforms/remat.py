"""``checkpoint`` (remat): trade compute for memory in reverse mode.

``checkpoint(f)`` binds ``checkpoint_p`` holding ``f``'s jaxpr and a *policy*. Under
``linearize``/``grad`` its partial-evaluation rule splits the JVP of that jaxpr itself instead of
letting each operation save its residuals: the known (primal) part runs now and keeps only the
values the policy saves; the unknown (tangent) part is staged as one ``checkpoint_p`` equation
that *recomputes* every other primal value it needs from those saved values and the inputs.
Transposing that equation evaluates the recomputation inside the backward pass.

Policies (``checkpoint_policies``), as in JAX: ``nothing_saveable`` (the default: keep only the
inputs), ``everything_saveable``, ``dots_saveable`` (keep the results of matrix products),
``dots_with_no_batch_dims_saveable``, ``save_only_these_names(*names)``,
``save_any_names_but_these(*names)`` and ``save_anything_except_these_names(*names)`` for values
tagged with ``checkpoint_name``, ``save_from_both_policies``, and JAX's aliases
``checkpoint_dots``, ``checkpoint_dots_with_no_batch_dims``. JAX's offloading policies
(``save_and_offload_only_these_names``, ``offload_dot_with_no_batch_dims``) save the values they
would move to host memory (blu has one memory space per device; the gradients are the same).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Sequence
from typing import Any

from blu.core import pytree
from blu.core.interpreter import get_aval, set_interpreter
from blu.core.jaxpr import Jaxpr, Literal, Var, dce_jaxpr, eval_jaxpr
from blu.core.primitive import Primitive
from blu.core.staging import StagingInterpreter
from blu.transforms import vma
from blu.transforms.ad import backward_pass
from blu.transforms.ad_ops import optimization_barrier
from blu.transforms.ad_util import Zero, is_undefined
from blu.transforms.axes import axis_env_key
from blu.transforms.batching import defvectorized
from blu.transforms.jaxpr_util import (
    batch_jaxpr,
    jvp_jaxpr,
    merge,
    nonzero,
    partial_eval_jaxpr,
    run_jaxpr,
    trace_jaxpr,
    unbatched,
)

__all__ = ["checkpoint", "remat", "checkpoint_name", "checkpoint_policies"]

# ---- checkpoint_name: an identity that tags a value for the policies ---------------------------

name_p = Primitive("checkpoint_name")
name_p.def_impl(lambda x, *, name: x)
name_p.def_abstract_eval(lambda x, *, name: x)


@name_p.def_jvp
def _name_jvp(primals, tangents, *, name):
    return name_p.bind(primals[0], name=name), tangents[0]


@name_p.def_transpose
def _name_transpose(ct, x, *, name):
    return [ct]


defvectorized(name_p)


def checkpoint_name(x: Any, name: str) -> Any:
    """Tag every array of the pytree ``x`` with ``name`` (the identity otherwise), so a
    ``save_only_these_names`` policy can keep it for the backward pass."""
    return pytree.tree_map(lambda a: name_p.bind(a, name=str(name)), x)


# ---- policies ----------------------------------------------------------------------------------
# a policy is called as policy(prim, *in_avals, **params) -> bool: may the output be saved?

_DOT_NAMES = ("dot_general",)  # every matrix product is a dot_general


def everything_saveable(prim, *avals, **params) -> bool:
    return True


def nothing_saveable(prim, *avals, **params) -> bool:
    return False


def dots_saveable(prim, *avals, **params) -> bool:
    return prim.name in _DOT_NAMES


def dots_with_no_batch_dims_saveable(prim, *avals, **params) -> bool:
    if prim.name != "dot_general":
        return False
    dims = params.get("dimension_numbers")
    try:
        (_, _), (lhs_batch, rhs_batch) = dims
    except (TypeError, ValueError):
        return False
    return not lhs_batch and not rhs_batch


def save_only_these_names(*names: str) -> Callable:
    keep = frozenset(names)

    def policy(prim, *avals, **params) -> bool:
        return prim is name_p and params["name"] in keep

    return policy


def save_any_names_but_these(*names: str) -> Callable:
    skip = frozenset(names)

    def policy(prim, *avals, **params) -> bool:
        return prim is name_p and params["name"] not in skip

    return policy


def save_from_both_policies(a: Callable, b: Callable) -> Callable:
    def policy(prim, *avals, **params) -> bool:
        return a(prim, *avals, **params) or b(prim, *avals, **params)

    return policy


def save_anything_except_these_names(*names: str) -> Callable:
    skip = frozenset(names)

    def policy(prim, *avals, **params) -> bool:  # every value but those named ``names``
        return prim is not name_p or params["name"] not in skip

    return policy


def save_and_offload_only_these_names(
    *,
    names_which_can_be_saved: Sequence[str],
    names_which_can_be_offloaded: Sequence[str],
    offload_src: str = "device",
    offload_dst: str = "pinned_host",
) -> Callable:
    # blu has no host memory space to move residuals to: an offloadable value is saved
    return save_only_these_names(*names_which_can_be_saved, *names_which_can_be_offloaded)


def offload_dot_with_no_batch_dims(
    offload_src: str = "device", offload_dst: str = "pinned_host"
) -> Callable:
    return dots_with_no_batch_dims_saveable  # (saved, not offloaded: as above)


checkpoint_policies = types.SimpleNamespace(
    everything_saveable=everything_saveable,
    nothing_saveable=nothing_saveable,
    dots_saveable=dots_saveable,
    checkpoint_dots=dots_saveable,
    dots_with_no_batch_dims_saveable=dots_with_no_batch_dims_saveable,
    checkpoint_dots_with_no_batch_dims=dots_with_no_batch_dims_saveable,
    save_anything_except_these_names=save_anything_except_these_names,
    save_and_offload_only_these_names=save_and_offload_only_these_names,
    offload_dot_with_no_batch_dims=offload_dot_with_no_batch_dims,
    save_only_these_names=save_only_these_names,
    save_any_names_but_these=save_any_names_but_these,
    save_from_both_policies=save_from_both_policies,
)

# ---- the primitive -----------------------------------------------------------------------------

checkpoint_p = Primitive("checkpoint", multiple_results=True)


@checkpoint_p.def_abstract_eval
def _ckpt_abstract_eval(*avals, jaxpr, policy):
    return jaxpr.out_avals


@checkpoint_p.def_impl
def _ckpt_impl(*args, jaxpr, policy):
    return run_jaxpr(jaxpr, args)


@checkpoint_p.def_jvp
def _ckpt_jvp(primals, tangents, *, jaxpr, policy):
    nz = nonzero(tangents)
    j, consts, out_nz = jvp_jaxpr(jaxpr, nz, [False] * len(jaxpr.outvars))
    outs = checkpoint_p.bind(
        *consts, *primals, *[t for t, z in zip(tangents, nz) if z],
        jaxpr=j, policy=policy,
    )  # fmt: skip
    n = len(jaxpr.outvars)
    t_iter = iter(outs[n:])
    t_out = [
        next(t_iter) if z else Zero(a.strip_weak_type()) for z, a in zip(out_nz, jaxpr.out_avals)
    ]
    return outs[:n], t_out


@checkpoint_p.def_batch_named  # named: collectives in the block see the vmap/shard axis name
def _ckpt_batch(axis_size, axis_name, args, dims, *, jaxpr, policy):
    if unbatched(axis_name, dims, [jaxpr]):
        outs = checkpoint_p.bind(*args, jaxpr=jaxpr, policy=policy)
        return outs, [None] * len(outs)
    j, consts, out_dims = batch_jaxpr(jaxpr, axis_size, dims, False, axis_name)
    return checkpoint_p.bind(*consts, *args, jaxpr=j, policy=policy), out_dims


@checkpoint_p.def_transpose
def _ckpt_transpose(cts, *args, jaxpr, policy):
    """Transpose inline: the backward pass first evaluates the non-linear equations, which is
    where the primal values are recomputed."""
    # the recomputation reads the saved values through a barrier, so the compiler cannot merge
    # it with the forward pass's copies of the same values (which would keep them alive)
    args = [a if is_undefined(a) or a is None else optimization_barrier(a) for a in args]
    out = backward_pass(jaxpr, [], list(args), list(cts))
    return [c if is_undefined(a) else None for c, a in zip(out, args)]


@checkpoint_p.def_partial_eval
def _ckpt_partial_eval(pe, args, params):
    jaxpr, policy = params["jaxpr"], params["policy"]
    unknown_in = [pe.is_unknown(a) for a in args]
    known, kconsts, unknown, out_uk, n_res = split_with_policy(jaxpr, unknown_in, policy, pe.parent)
    known_args = [a for a, u in zip(args, unknown_in) if not u]
    with set_interpreter(pe.parent):  # the primal part runs now, keeping only saved values
        k_outs = eval_jaxpr(known, [], *kconsts, *known_args)
    n_known = len(k_outs) - n_res
    residuals = k_outs[n_known:]
    atoms = [pe.to_atom(a) for a in (*residuals, *[a for a, u in zip(args, unknown_in) if u])]
    p = dict(jaxpr=unknown, policy=policy)
    u_outs = StagingInterpreter.stage(pe, checkpoint_p, atoms, p, unknown.out_avals)
    return merge(out_uk, u_outs, k_outs[:n_known])


def split_with_policy(jaxpr: Jaxpr, unknown_in: Sequence[bool], policy: Callable, parent):
    """Split ``jaxpr`` into a known part and an unknown part that recomputes what is not saved.

    First an ordinary partial evaluation (so primitives holding jaxprs, nested checkpoints
    included, split themselves by their own rules); then every residual that is neither an
    input nor the output of an equation ``policy`` saves is recomputed in the unknown part from
    the values that are, walking back through the known equations.

    Returns:
        ``(known, known_consts, unknown, out_unknowns, num_res)``: ``known`` maps
        ``known_consts, known inputs`` to the known outputs and the residuals; ``unknown`` maps
        residuals and unknown inputs to the unknown outputs.
    """
    n_out = len(jaxpr.outvars)
    known, kconsts, unknown, out_uk, n_res = partial_eval_jaxpr(
        jaxpr, unknown_in, [False] * n_out, parent
    )
    n_known = len(known.outvars) - n_res
    old_res = known.outvars[n_known:]
    producer = {v: e for e in known.eqns for v in e.outvars}
    residuals: list[Var] = []
    recompute: set[int] = set()
    seen: set[Any] = set()
    needed = list(old_res)
    while needed:
        v = needed.pop()
        if isinstance(v, Literal) or v in seen:  # a Literal is substituted, not passed
            continue
        seen.add(v)
        eqn = producer.get(v)
        if eqn is None or policy(eqn.primitive, *[a.aval for a in eqn.invars], **eqn.params):
            residuals.append(v)
        else:
            recompute.add(id(eqn))
            needed += [a for a in eqn.invars if isinstance(a, Var)]
    residuals.sort(key=lambda v: v.id)
    recomputed = [e for e in known.eqns if id(e) in recompute]
    known = dce_jaxpr(Jaxpr([], known.invars, known.eqns, known.outvars[:n_known] + residuals))
    # the unknown part: its residual inputs now stand for the known vars they came from
    rename = dict(zip(unknown.invars[:n_res], old_res))
    eqns = recomputed + [
        e.replace(invars=[rename.get(a, a) if isinstance(a, Var) else a for a in e.invars])
        for e in unknown.eqns
    ]
    outvars = [rename.get(a, a) if isinstance(a, Var) else a for a in unknown.outvars]
    unknown = Jaxpr([], residuals + unknown.invars[n_res:], eqns, outvars)
    return known, kconsts, unknown, out_uk, len(residuals)


# ---- the user-facing function ------------------------------------------------------------------


def checkpoint(
    fun: Callable | None = None,
    *,
    policy: Callable | None = None,
    prevent_cse: bool = True,
    static_argnums: int | Sequence[int] = (),
) -> Callable:
    """``fun`` whose intermediate values are recomputed in the backward pass instead of stored
    (``jax.checkpoint`` / ``jax.remat``).

    Args:
        fun: a function of pytrees of arrays (or omit it: ``@checkpoint(policy=...)``).
        policy: which intermediates may still be saved, e.g.
            ``blu.checkpoint_policies.dots_saveable``; default: none (only the inputs).
        prevent_cse: kept for JAX compatibility (blu does no CSE across the boundary).
        static_argnums: arguments passed as Python values.

    Values and derivatives are unchanged; under ``grad`` the residuals kept between the
    forward and backward passes shrink to the inputs plus what ``policy`` saves.
    """
    if fun is None:  # @checkpoint(policy=...)
        return functools.partial(
            checkpoint, policy=policy, prevent_cse=prevent_cse, static_argnums=static_argnums
        )
    policy = nothing_saveable if policy is None else policy
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    @functools.wraps(fun)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        dyn = [a for i, a in enumerate(args) if i not in static]
        leaves, in_tree = pytree.tree_flatten((dyn, kwargs))
        box = []

        def flat(*xs):
            d, kw = pytree.tree_unflatten(in_tree, list(xs))
            it = iter(d)
            full = [a if i in static else next(it) for i, a in enumerate(args)]
            out_leaves, out_tree = pytree.tree_flatten(fun(*full, **kw))
            box.append(out_tree)
            return out_leaves

        # inside blu.shard: traced keeping the values' varying manual axes, as a nested jit's
        # body, so a psum of an invariant value in it is its axis-size multiple (and transposes
        # as one)
        vmas = vma.arg_vmas(leaves) if axis_env_key() else None
        body = flat if vmas is None else vma.trace_manual(flat, vmas)
        jaxpr, consts = trace_jaxpr(body, [get_aval(x) for x in leaves])
        outs = checkpoint_p.bind(*consts, *leaves, jaxpr=jaxpr, policy=policy)
        return pytree.tree_unflatten(box[0], outs)

    return wrapped


remat = checkpoint
