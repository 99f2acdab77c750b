"""vmap: vectorizing map by batching rules.

A batching interpreter carries values with a *batch dimension* (``bdim``: an axis index, or
``None`` when the value is the same for every batch member). Each primitive's batching rule
``batch(axis_size, args, dims, **params) -> (out, out_dim)`` rewrites the operation to act on the
whole batch at once; it runs under the parent interpreter.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from blu.core import pytree
from blu.core.aval import ShapedArray
from blu.core.errors import BluValueError, with_user_line
from blu.core.interpreter import (
    Interpreter,
    Tracer,
    canonicalize_arg,
    current_interpreter,
    get_aval,
    set_interpreter,
)
from blu.core.jaxpr import Jaxpr, eval_jaxpr
from blu.core.staging import StagingInterpreter, hoist_consts
from blu.transforms import ops
from blu.transforms.axes import axis_env_key

not_mapped = None


class BatchTracer(Tracer):
    """A batched value: ``val`` has an extra axis ``bdim`` of size ``axis_size``."""

    __slots__ = ("val", "bdim")

    def __init__(self, interp: BatchInterpreter, val: Any, bdim: int):
        self._interp = interp
        self.val = val
        self.bdim = bdim

    @property
    def aval(self) -> ShapedArray:
        aval = get_aval(self.val)
        shape = aval.shape[: self.bdim] + aval.shape[self.bdim + 1 :]
        return aval.update(shape=shape)


class BatchInterpreter(Interpreter):
    # set by blu.shard on virtual devices: this level is a mesh axis (blu.transforms.vma)
    manual = False
    manual_outer = False  # the shard's outermost level

    def __init__(self, parent: Interpreter, axis_size: int, axis_name: Any = None):
        self.parent = parent
        self.axis_size = axis_size
        self.axis_name = axis_name

    def lift(self, x: Any) -> tuple[Any, int | None]:
        if isinstance(x, BatchTracer) and x._interp is self:
            return x.val, x.bdim
        self.check_value(x)
        return x, not_mapped

    def process(self, prim: Any, args: tuple, params: dict) -> Any:
        vals, dims = zip(*map(self.lift, args)) if args else ((), ())
        with set_interpreter(self.parent):
            if prim.batch_named is not None:  # collectives see every named level
                out, out_dim = prim.batch_named(
                    self.axis_size, self.axis_name, vals, dims, **params
                )
            elif all(d is None for d in dims):
                return prim.bind(*vals, **params)
            else:
                out, out_dim = prim.rule("batch")(self.axis_size, vals, dims, **params)
        if prim.multiple_results:
            return [self.wrap(o, d) for o, d in zip(out, out_dim)]
        return self.wrap(out, out_dim)

    def wrap(self, val: Any, bdim: int | None) -> Any:
        return val if bdim is None else BatchTracer(self, val, bdim)


# ---- helpers for batching rules -----------------------------------------------------------------


def moveaxis(x: Any, src: int, dst: int) -> Any:
    """Move one axis of ``x`` (a blu operation, so it stages/differentiates as usual)."""
    ndim = get_aval(x).ndim
    src, dst = src % ndim, dst % ndim
    if src == dst:
        return x
    perm = [i for i in range(ndim) if i != src]
    perm.insert(dst, src)
    return ops.transpose(x, tuple(perm))


def bdim_to_front(x: Any, bdim: int | None, axis_size: int) -> Any:
    """``x`` with its batch axis first; an unbatched ``x`` is broadcast to ``axis_size``."""
    if bdim is None:
        aval = get_aval(x)
        return ops.broadcast_in_dim(x, (axis_size,) + aval.shape, tuple(range(1, aval.ndim + 1)))
    return moveaxis(x, bdim, 0)


def defvectorized(prim: Any) -> None:
    """Batching rule of an elementwise primitive of one operand."""
    prim.elementwise = True  # (the SPMD partitioner's elementwise rule applies)

    def rule(axis_size, args, dims, **params):
        (x,), (d,) = args, dims
        return prim.bind(x, **params), d

    prim.def_batch(rule)


def defbroadcasting(prim: Any) -> None:
    """Batching rule of an elementwise n-ary primitive: line the batch axes up in front."""
    prim.elementwise = True

    def rule(axis_size, args, dims, **params):
        if prim.multiple_results:
            raise NotImplementedError
        first = next(d for d in dims if d is not None)
        if all(d == first for d in dims if d is not None) and all(
            d is not None or get_aval(a).ndim == 0 for a, d in zip(args, dims)
        ):
            # all batched at the same axis (or scalar constants)
            args = [
                a if d is not None else _bcast_scalar(a, args[dims.index(first)])
                for a, d in zip(args, dims)
            ]
            return prim.bind(*args, **params), first
        args = [bdim_to_front(a, d, axis_size) for a, d in zip(args, dims)]
        return prim.bind(*args, **params), 0

    prim.def_batch(rule)


def _bcast_scalar(s: Any, like: Any) -> Any:
    aval = get_aval(like)
    return ops.broadcast_in_dim(s, aval.shape, ())


# ---- vmap --------------------------------------------------------------------------------------


def _flatten_axes(what: str, tree: Any, axes: Any) -> list[Any]:
    """Broadcast an in_axes/out_axes spec (an int, None, or a pytree prefix) to the leaves."""
    leaves_tree = pytree.tree_structure(tree)
    for ax in pytree.tree_leaves(axes):
        if not isinstance(ax, int) or isinstance(ax, bool):
            raise BluValueError(
                with_user_line(f"vmap {what} entries must be ints or None, got {ax!r}")
            )
    if axes is None or isinstance(axes, int):
        return [axes] * leaves_tree.num_leaves
    try:
        out = []
        pytree.tree_map(
            lambda ax, sub: out.extend([ax] * pytree.tree_structure(sub).num_leaves),
            axes,
            tree,
            is_leaf=lambda x: x is None,
        )
        return out
    except Exception as e:
        raise BluValueError(
            with_user_line(f"vmap {what} {axes!r} does not match the structure {leaves_tree}")
        ) from e


# () -> the mesh a jit being traced is partitioned over, or None; set by blu.transforms.jit
# (which imports this module) once blu.parallel registers its partitioner
partitioning_mesh: list[Callable[[], Any]] = []


def _check_spmd_axis_name(spmd_axis_name: Any) -> None:
    mesh = partitioning_mesh[0]() if partitioning_mesh else None
    if mesh is not None:
        raise BluValueError(
            with_user_line(
                f"vmap: spmd_axis_name={spmd_axis_name!r} inside a jit partitioned over {mesh} is "
                "not supported: blu does not shard the mapped axis for you; call "
                "with_sharding_constraint on the batched values instead"
            )
        )


def vmap(
    fun: Callable,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_size: int | None = None,
    axis_name: Any = None,
    spmd_axis_name: Any = None,
) -> Callable:
    """Vectorize ``fun`` over an axis of its arguments.

    Args:
        fun: function of pytrees of arrays.
        in_axes: an int, None, or a tuple/pytree prefix of the arguments giving, per argument
            leaf, the axis to map over (negative axes count from the end) or None (not mapped).
        out_axes: the same for the outputs; None requires the output to be unbatched.
        axis_size: the batch size, required when no argument is mapped.
        axis_name: a name for collectives over the mapped axis.
        spmd_axis_name: a mesh axis name (or tuple); in JAX it only shards the mapped axis
            over that mesh axis inside a partitioned ``jit``, never changing values. blu
            accepts it where nothing is partitioned (where it has no effect) and refuses it
            inside a ``jit`` partitioned over a mesh (a ``BluValueError``: constrain the
            batched values with ``with_sharding_constraint`` there instead).

    Keyword arguments are mapped over their axis 0, as in JAX (``in_axes`` names the positional
    arguments only).

    Raises:
        BluValueError: inconsistent sizes, out-of-range axes, or mismatched specs.
    """

    def batched(*args: Any, **kwargs: Any):
        if spmd_axis_name is not None:
            _check_spmd_axis_name(spmd_axis_name)
        if isinstance(in_axes, list):
            axes_spec: Any = tuple(in_axes)
        else:
            axes_spec = in_axes
        if isinstance(axes_spec, tuple) and len(axes_spec) != len(args):
            raise BluValueError(
                with_user_line(
                    f"vmap in_axes has {len(axes_spec)} entries but the function got {len(args)} "
                    "positional arguments"
                )
            )
        leaves, in_tree = pytree.tree_flatten(args)
        kw_leaves, kw_tree = pytree.tree_flatten(kwargs)
        n_pos = len(leaves)
        axes = _flatten_axes("in_axes", args, axes_spec) + [0] * len(kw_leaves)
        # an unmapped leaf reaches ``fun`` as it is (a Python value stays one, as in JAX, so it
        # can be a static argument of a jit inside); numpy arrays are copied into Arrays (the
        # function could hand the caller's buffer back)
        leaves = [
            canonicalize_arg(x) if ax is not None or type(x) is np.ndarray else x
            for x, ax in zip(leaves + kw_leaves, axes)
        ]
        sizes = set()
        norm_axes = []
        for x, ax in zip(leaves, axes):
            if ax is None:
                norm_axes.append(None)
                continue
            aval = get_aval(x)
            if not -aval.ndim <= ax < aval.ndim:
                raise BluValueError(
                    with_user_line(
                        f"vmap in_axes={ax} is out of range for an argument of shape {aval.shape}"
                    )
                )
            ax %= aval.ndim
            norm_axes.append(ax)
            sizes.add(aval.shape[ax])
        if len(sizes) > 1:
            detail = ", ".join(
                f"{get_aval(x).shape} axis {a}" for x, a in zip(leaves, norm_axes) if a is not None
            )
            raise BluValueError(
                with_user_line(f"vmap got inconsistent sizes for the mapped axis: {detail}")
            )
        size = sizes.pop() if sizes else axis_size
        if size is None:
            raise BluValueError(
                with_user_line("vmap needs axis_size when no argument is mapped (all in_axes None)")
            )
        if axis_size is not None and size != axis_size:
            raise BluValueError(
                with_user_line(f"vmap axis_size={axis_size} but arguments have {size}")
            )
        interp = BatchInterpreter(current_interpreter(), size, axis_name)
        ins = [interp.wrap(x, a) for x, a in zip(leaves, norm_axes)]
        with set_interpreter(interp):
            out = fun(
                *pytree.tree_unflatten(in_tree, ins[:n_pos]),
                **pytree.tree_unflatten(kw_tree, ins[n_pos:]),
            )
        interp.finished = True
        out_leaves, out_tree = pytree.tree_flatten(out)
        o_axes = _flatten_axes("out_axes", out, out_axes)
        results = []
        for o, oa in zip(out_leaves, o_axes):
            val, d = interp.lift(o)
            results.append(_move_out(val, d, oa, size))
        return pytree.tree_unflatten(out_tree, results)

    batched.__name__ = f"vmap({getattr(fun, '__name__', 'fun')})"
    batched.__wrapped__ = fun  # type: ignore[attr-defined]
    return batched


def _move_out(val: Any, d: int | None, out_axis: int | None, size: int) -> Any:
    if out_axis is None:
        if d is not None:
            raise BluValueError(
                with_user_line("vmap out_axes=None but the output depends on the mapped axis")
            )
        return val
    if d is None:
        val = bdim_to_front(val, None, size)
        d = 0
    ndim = get_aval(val).ndim
    if not -ndim <= out_axis < ndim:
        raise BluValueError(
            with_user_line(f"vmap out_axes={out_axis} out of range for rank {ndim}")
        )
    return moveaxis(val, d, out_axis % ndim)


_batch_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_batch_lock = threading.Lock()


def batch_jaxpr(
    jaxpr: Jaxpr,
    axis_size: int,
    in_dims: Sequence[int | None],
    force_out: Sequence[bool] | bool | None = True,
    axis_name: Any = None,
) -> tuple[Jaxpr, list[Any], list[int | None]]:
    """The batched version of a jaxpr (no constvars), traced once per signature.

    Args:
        in_dims: per input, its batch axis or None.
        force_out: None to leave each output's batch axis where the rules put it; otherwise
            batched outputs move to axis 0 and those marked True (per output, or all) that came
            out unbatched are broadcast (loop carries and branch outputs need one layout).
        axis_name: the batching level's axis name, for the collectives inside.

    Returns:
        ``(batched, consts, out_dims)``: ``batched`` takes ``consts`` then the batched inputs.
    """
    key = (
        axis_size,
        axis_name,
        tuple(in_dims),
        force_out if force_out is None or isinstance(force_out, bool) else tuple(force_out),
        axis_env_key(),  # collectives inside see the named axes around
    )
    with _batch_lock:
        hit = _batch_cache.get(jaxpr, {}).get(key)
    if hit is not None:
        return hit
    builder = StagingInterpreter(current_interpreter())
    args = []
    for v, d in zip(jaxpr.invars, in_dims, strict=True):
        aval = v.aval
        if d is not None:
            aval = aval.update(shape=aval.shape[:d] + (axis_size,) + aval.shape[d:])
        args.append(builder.new_arg(aval))
    interp = BatchInterpreter(builder, axis_size, axis_name)
    ins = [interp.wrap(a, d) for a, d in zip(args, in_dims)]
    with set_interpreter(interp):
        outs = eval_jaxpr(jaxpr, [], *ins)
    interp.finished = True
    pairs = [interp.lift(o) for o in outs]
    if force_out is not None:
        forces = [force_out] * len(pairs) if isinstance(force_out, bool) else force_out
        with set_interpreter(builder):
            pairs = [
                (moveaxis(v, d, 0), 0)
                if d is not None
                else ((bdim_to_front(v, None, axis_size), 0) if force else (v, None))
                for (v, d), force in zip(pairs, forces, strict=True)
            ]
    new_jaxpr, consts = builder.build([v for v, _ in pairs])
    out = (hoist_consts(new_jaxpr), list(consts), [d for _, d in pairs])
    if not any(isinstance(c, Tracer) for c in consts):  # a tracer const belongs to this trace
        with _batch_lock:
            out = _batch_cache.setdefault(jaxpr, {}).setdefault(key, out)
    return out
