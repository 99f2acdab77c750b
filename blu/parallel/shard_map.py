"""``blu.shard``: run a function once per device on its block, with collectives (shard_map).

    f_sharded = blu.shard(f, mesh, in_specs=(P("data"), P()), out_specs=P())

Each argument is split into blocks as its ``in_spec`` says (mesh axes the spec does not name:
every device gets the whole dimension); ``f`` sees one device's blocks and may call collectives
over the mesh axis names; each output is reassembled from the devices' blocks as its
``out_spec`` says, and must be equal across the mesh axes that spec does not name.

Two realizations of the same semantics:

- virtual CPU devices (``BLU_NUM_CPU_DEVICES``): the blocks are stacked on leading axes and
  ``f`` runs as nested vmaps, one level per mesh axis, with that axis's name; collectives turn
  into array operations over the stacked axes. It is an ordinary traced program, so
  ``jit(shard(f))``, ``grad(shard(f))`` and ``vmap(shard(f))`` are the usual transforms of it.
- one process per device (after ``blu.parallel.initialize()``): each process runs ``f`` on its
  own block; the collectives call the communicator (NCCL on GPUs). Arrays there are *local
  views*: a ShardedArray's aval is this process's block, and so are tracers that reach ``shard``
  from an enclosing ``jit`` (``jit(shard(f))`` over ShardedArrays); plain arrays passed
  eagerly are global and sliced. Take gradients inside ``shard`` on this path.

Gradients taken *inside* ``shard`` follow JAX's shard_map rule (``check_vma``; JEP 17111,
"efficient transposition of replication-inducing collectives"; ``blu.transforms.vma``): every
value inside ``f`` varies over some mesh axes (an input over those its in_spec names,
``axis_index``, ``psum_scatter``/``ppermute``/``all_to_all`` results) and is invariant over the
others (replicated inputs, ``psum``/``pmean``/``pmax``/``pmin``/``all_gather`` results). So:

- the gradient of an invariant (``psum``/``pmean``-reduced) loss is the gradient of the global
  function, equal to the gradient taken outside: data parallelism is
  ``grad(lambda p: pmean(local_loss(p, x), "data"))(params)``, no all-reduce of the gradients
  (it is the transpose of the implicit ``pvary`` where the replicated parameters meet the
  batch: a ``psum`` of their cotangents);
- the gradient of a varying loss w.r.t. a replicated parameter is the *sum* over the devices of
  their gradients (invariant); w.r.t. ``pvary(p, axes)`` it is this device's own (varying), e.g.
  to reduce-scatter it (ZeRO).

``check_vma=False`` only turns off the out_specs check; gradients follow the same rule. A
``jit`` or ``checkpoint`` nested in ``f`` is traced keeping its arguments' variance (and that of
the values it closes over), and so are the transposed bodies of ``jit``, ``scan``, ``cond`` and
``checkpoint``, and the forward traces of ``cond``/``switch`` branches and ``scan``/
``fori_loop``/``while_loop`` bodies (a loop's carries at a fixed point): a ``psum`` there of an
invariant value is a product, as outside, and its gradient has the axis size's factor.
Gradients taken *outside* (``grad(shard(f))``) are the ordinary gradients of the global
function.

A ``cond``/``switch`` whose predicate varies over a mesh axis lets each device take its own
branch. Collectives over that axis in the branches must then be the same in every branch, in
the same order (each device gives the operand of its own branch; the branches run in lockstep,
``blu.lax.control_flow.divergent``); a collective in some branches only is a ``BluValueError``
at trace time, naming it and the axis (a real machine would hang). So is a collective over such
an axis in a ``while_loop`` (``cond_fun`` or ``body_fun``) whose ``cond_fun`` varies over it:
devices would run different numbers of iterations (make the predicate invariant, e.g. with
``pmax``). A ``custom_jvp``/``custom_vjp`` function and its rules are checked (and run) so too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from blu import lax
from blu.core import pytree
from blu.core.array import Array
from blu.core.errors import BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import (
    Tracer,
    canonicalize_arg,
    current_interpreter,
    get_aval,
    set_interpreter,
)
from blu.parallel import runtime
from blu.parallel.mesh import Mesh, NamedSharding, PartitionSpec, check_spec
from blu.parallel.mesh import PartitionSpec as P
from blu.parallel.sharded_array import ShardedArray, from_local
from blu.transforms import jit as jit_mod
from blu.transforms.axes import ProcessAxisEnv, process_axis_env
from blu.transforms.batching import BatchInterpreter, bdim_to_front
from blu.transforms.vma import VmaInterpreter

_is_spec = lambda x: isinstance(x, PartitionSpec) or x is None  # noqa: E731


def _flat_specs(what: str, tree: Any, specs: Any) -> list[PartitionSpec]:
    n = pytree.tree_structure(tree).num_leaves
    if _is_spec(specs):
        return [specs or PartitionSpec()] * n
    out: list[PartitionSpec] = []
    try:
        pytree.tree_map(
            lambda s, sub: out.extend(
                [s or PartitionSpec()] * pytree.tree_structure(sub).num_leaves
            ),
            specs,
            tree,
            is_leaf=_is_spec,
        )
    except Exception as e:
        raise BluValueError(
            with_user_line(
                f"shard: {what} {specs!r} does not match the structure "
                f"{pytree.tree_structure(tree)} (give one PartitionSpec per argument/output, "
                "or a pytree prefix of them)"
            )
        ) from e
    return out


def _notify_jit() -> None:
    # jit over sharded arrays is allowed only when the traced function reaches a shard

    note = getattr(jit_mod, "note_shard", None)
    if note is not None:
        note()


def shard(
    f: Callable, mesh: Mesh, in_specs: Any, out_specs: Any, *, check_vma: bool = True
) -> Callable:
    """Run ``f`` per device on its blocks, with collectives over ``mesh``'s axis names.

    Args:
        f: a function of arrays (pytrees) returning arrays (pytrees).
        mesh: the device mesh (``blu.parallel.make_mesh``).
        in_specs: one ``PartitionSpec`` per positional argument (or a pytree prefix, or one
            spec for all): how each argument is split into blocks.
        out_specs: the same for the outputs: how blocks are reassembled.
        check_vma: raise when an output varies along a mesh axis its out_spec does not name
            (``False``: that output is taken from the first device along the axis, as JAX's
            ``check_vma=False`` leaves it unchecked). Gradients inside ``f`` follow shard_map's
            rule either way (see the module docstring); on one process per device outputs are
            not checked.

    Returns:
        a function of the global arrays; its concrete outputs are ``ShardedArray`` objects.

    Raises:
        BluValueError / BluShapeError: an unknown axis name, a spec that does not divide a
            dimension, specs that do not match the arguments, or an output that differs across
            a mesh axis its out_spec does not name.
    """
    if not isinstance(mesh, Mesh):
        raise BluValueError(with_user_line(f"shard: expected a Mesh, got {mesh!r}"))

    def sharded(*args: Any, **kwargs: Any) -> Any:
        if kwargs:  # (JAX's shard_map takes positional arguments only, each with its in_spec)
            raise BluTypeError(
                with_user_line(
                    f"shard: keyword arguments {sorted(kwargs)} are not taken: pass them "
                    "positionally, each with its in_spec, or close over them"
                )
            )
        _notify_jit()
        leaves, in_tree = pytree.tree_flatten(args)
        specs = _flat_specs("in_specs", args, in_specs)
        if runtime.is_initialized():
            return _run_processes(f, mesh, leaves, in_tree, specs, out_specs)
        return _run_virtual(f, mesh, leaves, in_tree, specs, out_specs, check_vma)

    sharded.__name__ = f"shard({getattr(f, '__name__', 'f')})"
    sharded.__wrapped__ = f  # type: ignore[attr-defined]
    return sharded


def shard_map(
    f: Callable | None = None,
    mesh: Mesh | None = None,
    in_specs: Any = None,
    out_specs: Any = None,
    *,
    check_vma: bool = True,
    check_rep: bool | None = None,
    axis_names: Any = None,
    auto: Any = frozenset(),
) -> Any:
    """``jax.shard_map`` / ``jax.experimental.shard_map.shard_map``: ``blu.shard`` by JAX's name.

    Both of JAX's spellings work: ``shard_map(f, mesh, in_specs, out_specs, check_rep=...)``
    (experimental) and ``shard_map(f, mesh=..., in_specs=..., out_specs=..., check_vma=...)``;
    with ``f`` omitted it returns a decorator.

    Args:
        f: the per-device function (see ``blu.shard``).
        mesh: the device mesh (required: blu has no ambient mesh).
        in_specs, out_specs: ``PartitionSpec`` pytrees (prefixes) for arguments and outputs.
        check_vma: as ``blu.shard``'s; ``check_rep`` is its older name (either set to ``False``
            turns the check off).
        axis_names: the mesh axes ``f`` is manual over; only all of them is supported.
        auto: mesh axes left to the compiler; only the empty set is supported.

    Returns:
        the sharded function (or a decorator when ``f`` is None).

    Raises:
        BluValueError: ``mesh`` or ``out_specs`` is missing, or ``axis_names``/``auto`` ask for
            partial-manual sharding (not supported).
    """
    if f is None:
        return lambda g: shard_map(
            g, mesh, in_specs, out_specs, check_vma=check_vma, check_rep=check_rep,
            axis_names=axis_names, auto=auto,
        )  # fmt: skip
    if mesh is None or out_specs is None:
        raise BluValueError(
            with_user_line("shard_map: pass mesh= and out_specs= (blu has no ambient mesh)")
        )
    if auto or (axis_names is not None and set(axis_names) != set(mesh.axis_names)):
        raise BluValueError(
            with_user_line(
                f"shard_map: partial-manual sharding (axis_names={axis_names!r}, auto={auto!r}) "
                f"is not supported; f is manual over all of {mesh.axis_names}"
            )
        )
    check = check_vma and (check_rep is None or bool(check_rep))
    return shard(f, mesh, P() if in_specs is None else in_specs, out_specs, check_vma=check)


# ---- virtual devices: nested vmaps --------------------------------------------------------------


def _to_stacked(x: Any, spec: PartitionSpec, mesh: Mesh) -> tuple[Any, list[Any]]:
    """Split ``x`` into blocks: leading axes = the mesh axes the spec uses (mesh order)."""
    shape = get_aval(x).shape
    new_shape: list[int] = []
    pos: dict[Any, int] = {}
    block_pos = []
    for i, s in enumerate(shape):
        names = spec.names_of(i)
        for n in names:
            pos[n] = len(new_shape)
            new_shape.append(mesh.shape[n])
        block_pos.append(len(new_shape))
        new_shape.append(s // math.prod(mesh.shape[n] for n in names))
    used = [n for n in mesh.axis_names if n in pos]
    y = lax.reshape(x, tuple(new_shape))
    return lax.transpose(y, tuple([pos[n] for n in used] + block_pos)), used


def _from_stacked(y: Any, spec: PartitionSpec, mesh: Mesh) -> Any:
    """Reassemble the global array from blocks stacked on leading axes (mesh order)."""
    used = [n for n in mesh.axis_names if n in spec.all_names()]
    block = get_aval(y).shape[len(used) :]
    perm, shape = [], []
    for i, s in enumerate(block):
        names = spec.names_of(i)
        perm += [used.index(n) for n in names] + [len(used) + i]
        shape.append(s * math.prod(mesh.shape[n] for n in names))
    return lax.reshape(lax.transpose(y, tuple(perm)), tuple(shape))


def _run_virtual(f, mesh, leaves, in_tree, specs, out_specs, check_vma=True):
    ins, used = [], []
    for i, (x, spec) in enumerate(zip(leaves, specs)):
        x = canonicalize_arg(x)
        spec = check_spec(spec, mesh, get_aval(x).shape, f"shard: in_specs of argument leaf {i}")
        y, u = _to_stacked(x, spec, mesh)
        ins.append(y)
        used.append(u)
    box: dict[str, Any] = {}

    def innermost(*blocks):
        out = f(*pytree.tree_unflatten(in_tree, list(blocks)))
        out_leaves, out_tree = pytree.tree_flatten(out)
        o_specs = _flat_specs("out_specs", out, out_specs)
        o_specs = [
            check_spec(s, mesh, get_aval(o).shape, f"shard: out_specs of output leaf {k}", False)
            for k, (o, s) in enumerate(zip(out_leaves, o_specs))
        ]
        box["tree"], box["specs"] = out_tree, o_specs
        return out_leaves

    def level(j: int, vals: list[Any]) -> list[Any]:
        if j == len(mesh.axis_names):
            return innermost(*vals)
        name, size = mesh.axis_names[j], mesh.devices.shape[j]
        interp = BatchInterpreter(current_interpreter(), size, name)
        interp.manual, interp.manual_outer = True, j == 0
        wrapped = [interp.wrap(v, 0 if name in u else None) for v, u in zip(vals, used)]
        with set_interpreter(interp):
            outs = level(j + 1, wrapped)
        interp.finished = True
        results = []
        for k, o in enumerate(outs):
            v, d = interp.lift(o)
            spec = box["specs"][k]
            if name in spec.all_names():
                results.append(bdim_to_front(v, d, size))
            elif d is not None and not check_vma:
                results.append(lax.index_in_dim(v, 0, d, keepdims=False))  # device 0's value
            elif d is not None:
                raise BluValueError(
                    with_user_line(
                        f"shard: output leaf {k} differs across mesh axis {name!r}, but its "
                        f"out_spec {spec!r} does not name {name!r} (so it must be equal on all "
                        f"devices): reduce it over {name!r} (psum, pmean, all_gather) or name "
                        "the axis in out_specs"
                    )
                )
            else:
                results.append(v)
        return results

    outs = level(0, ins)
    result = []
    for o, spec in zip(outs, box["specs"]):
        g = _from_stacked(o, spec, mesh)
        if isinstance(g, Array) and not isinstance(g, Tracer):
            g = ShardedArray(g._value, NamedSharding(mesh, spec), g.shape, weak_type=g.weak_type)
        result.append(g)
    return pytree.tree_unflatten(box["tree"], result)


# ---- one process per device ---------------------------------------------------------------------


def _run_processes(f, mesh, leaves, in_tree, specs, out_specs):
    world = runtime.process_count()
    procs = sorted(d.process_index for d in mesh.devices.flat)
    if procs != list(range(world)):
        raise BluValueError(
            with_user_line(
                f"shard: {mesh} has {mesh.size} devices but the job has {world} processes "
                "(one device each): build the mesh with blu.parallel.make_mesh"
            )
        )
    me = runtime.this_device()
    blocks = []
    for i, (x, spec) in enumerate(zip(leaves, specs)):
        if isinstance(x, ShardedArray) and x._local:
            if x.sharding != NamedSharding(mesh, spec) and not x.sharding.is_fully_replicated:
                raise BluValueError(
                    with_user_line(
                        f"shard: argument leaf {i} is laid out as {x.sharding}, not as its "
                        f"in_spec {spec!r} on {mesh}: device_put it with that sharding"
                    )
                )
            blocks.append(x.local_block())
        elif isinstance(x, Tracer):
            blocks.append(x)  # under jit in a process: already this process's block
        else:
            x = canonicalize_arg(x)
            shape = get_aval(x).shape
            spec = check_spec(spec, mesh, shape, f"shard: in_specs of argument leaf {i}")
            index = NamedSharding(mesh, spec).devices_indices_map(shape)[me]
            blocks.append(x[index] if index else x)
    env = ProcessAxisEnv(mesh.shape, mesh.coords(me), lambda names: runtime.comm_for(mesh, names))
    # the values' varying manual axes, for gradients inside f (blu.transforms.vma)
    interp = VmaInterpreter(current_interpreter(), mesh.axis_names)
    blocks = [
        interp.wrap(b, frozenset(n for n in mesh.axis_names if n in s.all_names()))
        for b, s in zip(blocks, specs)
    ]
    with process_axis_env(env), set_interpreter(interp):
        out = f(*pytree.tree_unflatten(in_tree, blocks))
    interp.finished = True
    out = pytree.tree_map(lambda o: interp.lift(o)[0], out)
    out_leaves, out_tree = pytree.tree_flatten(out)
    o_specs = _flat_specs("out_specs", out, out_specs)
    result = []
    for k, (o, s) in enumerate(zip(out_leaves, o_specs)):
        s = check_spec(s, mesh, get_aval(o).shape, f"shard: out_specs of output leaf {k}", False)
        if isinstance(o, Array) and not isinstance(o, Tracer):
            o = from_local(o._value, NamedSharding(mesh, s), o.weak_type)
        result.append(o)
    return pytree.tree_unflatten(out_tree, result)
