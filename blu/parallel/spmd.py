"""``jit`` over sharded arrays: the SPMD partitioner.

    mesh = make_mesh((4,), ("data",))
    step = blu.jit(train_step, in_shardings=(replicated, NamedSharding(mesh, P("data"))))
    params, loss = step(params, batch)       # or: jit(train_step)(params, sharded_batch)

``jit`` traces the function on the *global* arrays, as if on one device. This module then
writes the per-device program: it walks the jaxpr in order with each value's ``Layout``
(``spmd_layout``), starting from the arguments' shardings; each primitive's rule
(``spmd_rules``) picks layouts it can compute from locally, and ``reshard`` inserts the
collectives where layouts meet (all-reduce, reduce-scatter, all-gather; slicing where a whole
value is split). The per-device program runs as ``blu.shard`` over the mesh, compiled by
``jit``: on virtual CPU devices as one batched program, with one process per device each
running its block (NCCL or MPI for the collectives). The result equals the unsharded program
(up to the order of floating-point sums).

Outputs keep the layout propagation gave them, unless ``out_shardings`` names one; a pending
partial sum is all-reduced. ``with_sharding_constraint(x, sharding)`` inside the function fixes
a value's layout (as JAX's).

Loops and branches are partitioned: a ``scan`` or ``while_loop`` body is staged per device with
its carries' layouts found by iterating to a fixed point, a ``cond``'s branches staged per
device and made to agree. A ``custom_jvp`` function that needs no communication stays one call
(its rule, and a fusion the GPU plan keys on its name); ``custom_vjp`` functions are inlined
(their rules apply to ``grad`` taken inside the jitted function, as in a training step). What
has no rule (sorting, FFTs, linear algebra, ...) runs on whole operands on every device: right,
but at one device's speed; ``collectives`` lists the gathers that costs.
"""

from __future__ import annotations

import threading
from typing import Any

from blu.core import pytree
from blu.core.array import Array
from blu.core.aval import ShapedArray
from blu.core.errors import BluValueError, with_user_line
from blu.core.interpreter import Tracer, get_aval
from blu.core.primitive import Primitive
from blu.parallel import runtime
from blu.parallel import sharded_array as _sharded_array
from blu.parallel import spmd_inspect as _inspect  # noqa: F401  (registers its rule)
from blu.parallel import spmd_nested as _nested  # noqa: F401  (registers the nested rules)
from blu.parallel.mesh import (
    UNCONSTRAINED,
    Mesh,
    NamedSharding,
    PartitionSpec,
    check_spec,
    context_mesh,
)
from blu.parallel.spmd_interp import PartitionContext, output_hints, run_partitioned
from blu.parallel.spmd_layout import Layout
from blu.parallel.spmd_rules import rule
from blu.transforms.donation import Donated
from blu.transforms.jit_args import donated_leaf_flags

__all__ = ["collectives", "with_sharding_constraint"]


# ---- with_sharding_constraint ------------------------------------------------------------------

sharding_constraint_p = Primitive("sharding_constraint")
sharding_constraint_p.def_impl(lambda x, *, spec: x)
sharding_constraint_p.def_abstract_eval(lambda x, *, spec: x)
sharding_constraint_p.def_jvp(
    lambda primals, tangents, *, spec: (
        sharding_constraint_p.bind(primals[0], spec=spec),
        sharding_constraint_p.bind(tangents[0], spec=spec),
    )
)
# (only bound while jit partitions, which consumes it; anywhere else it is the identity)
sharding_constraint_p.decomposition = lambda x, *, spec: x
sharding_constraint_p.def_batch(lambda axis_size, args, dims, *, spec: (args[0], dims[0]))
sharding_constraint_p.def_transpose(
    lambda ct, x, *, spec: [sharding_constraint_p.bind(ct, spec=spec)]
)


@rule("sharding_constraint")
def _constraint(ctx, eqn, vals, lays):
    (x,), (lay,) = vals, lays
    spec = eqn.params["spec"]
    want = Layout.from_spec(spec, len(lay.dims))
    free = [i for i, e in enumerate(spec) if e is UNCONSTRAINED]
    if free:  # as the partitioner has them, less the axes the constrained dimensions take
        taken = want.used()
        want = want.with_dims(
            [
                tuple(a for a in lay.dims[i] if a not in taken) if i in free else d
                for i, d in enumerate(want.dims)
            ]  # fmt: skip
        )
    return [(ctx.reshard(x, lay, want), want)]


class _Partitioning(threading.local):
    def __init__(self) -> None:
        self.mesh: Mesh | None = None


_tracing = _Partitioning()


def partitioning_mesh() -> Mesh | None:
    """The mesh ``jit`` is partitioning the function being traced over (None: not)."""
    return _tracing.mesh


def with_sharding_constraint(x: Any, shardings: Any) -> Any:
    """Fix the layout of ``x`` (an array or pytree) inside a partitioned ``jit``.

    Args:
        x: arrays of the traced function.
        shardings: a ``NamedSharding`` or ``PartitionSpec`` (or a pytree prefix of them). An
            entry ``PartitionSpec.UNCONSTRAINED`` leaves that dimension split as the
            partitioner has it, less the mesh axes the other entries take (JAX lets XLA choose;
            blu keeps what propagation gave).

    Returns:
        ``x`` unchanged in value. Outside a ``jit`` that partitions over a mesh it is a no-op
        (one device holds everything), as JAX's on one device; a ``NamedSharding``'s spec is
        still checked against its mesh and each leaf's rank (JAX's, which allows uneven splits).

    Raises:
        BluValueError: a spec with more entries than a leaf's rank, an axis its mesh lacks, or
            shardings that do not match the structure of ``x``.
        BluShapeError: inside a partitioned ``jit``, a dimension its axes do not divide.
    """

    def one(s, sub):
        if _tracing.mesh is None:  # (a no-op; the spec checked as JAX's, no divisibility)
            if isinstance(s, NamedSharding):
                for leaf in pytree.tree_leaves(sub):
                    check_spec(
                        s.spec, s.mesh, get_aval(leaf).shape, "with_sharding_constraint",
                        divide=False, unconstrained=True,
                    )  # fmt: skip
            return sub
        if isinstance(s, NamedSharding) and s.mesh != _tracing.mesh:
            raise BluValueError(
                with_user_line(
                    f"with_sharding_constraint: {s} is over another mesh (devices "
                    f"{s.mesh.device_ids.tolist()}) than the jit's ({_tracing.mesh}, devices "
                    f"{_tracing.mesh.device_ids.tolist()}); jit partitions over one"
                )
            )
        spec = s.spec if isinstance(s, NamedSharding) else (s or PartitionSpec())
        return pytree.tree_map(
            lambda leaf: sharding_constraint_p.bind(
                leaf,
                spec=check_spec(
                    spec,
                    _tracing.mesh,
                    get_aval(leaf).shape,
                    "with_sharding_constraint",
                    unconstrained=True,
                ),
            ),
            sub,
        )

    is_leaf = lambda s: isinstance(s, (NamedSharding, PartitionSpec)) or s is None  # noqa: E731
    if is_leaf(shardings):
        return one(shardings, x)
    return pytree.tree_map(one, shardings, x, is_leaf=is_leaf)


_sharded_array.register_constraint(with_sharding_constraint)  # a traced device_put's layout


# ---- jit's entry -------------------------------------------------------------------------------


def _spec_of(s: Any, mesh_box: list, where: str) -> PartitionSpec | None:
    if s is None:
        return None
    if isinstance(s, NamedSharding):
        if mesh_box and mesh_box[0] != s.mesh:
            raise BluValueError(
                with_user_line(
                    f"{where}: shardings over two meshes ({mesh_box[0]} "
                    f"and {s.mesh}); jit partitions over one"
                )
            )
        mesh_box[:1] = [s.mesh]
        return s.spec or PartitionSpec()
    if isinstance(s, PartitionSpec):
        return s
    raise BluValueError(
        with_user_line(f"{where}: expected a NamedSharding, PartitionSpec or None, got {s!r}")
    )


def _flat(where: str, tree: Any, shardings: Any, mesh_box: list) -> list:
    """One spec (or None: not given) per leaf of ``tree``, from a pytree prefix of shardings."""
    n = pytree.tree_structure(tree).num_leaves
    is_leaf = lambda s: s is None or isinstance(s, (NamedSharding, PartitionSpec))  # noqa: E731
    if is_leaf(shardings):
        return [_spec_of(shardings, mesh_box, where)] * n
    out: list = []
    try:
        pytree.tree_map(
            lambda s, sub: out.extend(
                [_spec_of(s, mesh_box, where)] * pytree.tree_structure(sub).num_leaves
            ),
            shardings,
            tree,
            is_leaf=is_leaf,
        )
    except Exception as e:
        if isinstance(e, BluValueError) and "structure mismatch" not in str(e):
            raise  # (a bad sharding's own error)
        raise BluValueError(
            with_user_line(
                f"{where} {shardings!r} does not match the structure {pytree.tree_structure(tree)}"
                " (one sharding per argument/output, or a pytree prefix of them)"
            )
        ) from e
    return out


_REPLICATED = PartitionSpec()


def _is_sharded(x: Any) -> bool:
    return getattr(x, "_blu_sharded", False) and len(x.sharding.device_set) > 1


def _global_aval(x: Any) -> ShapedArray:
    if getattr(x, "_blu_sharded", False):
        a = get_aval(x)
        return ShapedArray(tuple(x.shape), a.dtype, a.weak_type)
    return get_aval(x)


def _prepare(jitted: Any, args: tuple, kwargs: dict) -> tuple:
    """``(entry, per-device jitted program, argument leaves, mesh)`` for these arguments (the
    work is done once per signature; a later call only looks it up)."""
    dyn_args, dyn_kwargs, statics, donated = jitted._split(args, kwargs)
    last = jitted.__dict__.get("_spmd_tree")
    if last is None:
        leaves, in_tree = pytree.tree_flatten((dyn_args, dyn_kwargs))
    else:  # (the usual case: the structure of the previous call)
        leaves, in_tree = pytree.tree_flatten_like((dyn_args, dyn_kwargs), last)
    jitted._spmd_tree = in_tree
    have, avals, mesh_box = [], [], []
    for i, x in enumerate(leaves):
        if _is_sharded(x):
            where = f"jit({jitted.name}): argument leaf {i}"
            have.append(_spec_of(x.sharding, mesh_box, where))
            avals.append(_global_aval(x))
        else:
            have.append(_REPLICATED)
            avals.append(get_aval(x))
    key = (in_tree, tuple(avals), statics, tuple(have), tuple(donated))
    cache = jitted.__dict__.setdefault("_spmd_cache", {})
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = _build(jitted, args, kwargs, leaves, in_tree, key[1], have, mesh_box)
    entry, fn, mesh = hit
    jitted._spmd_last = fn
    return entry, fn, leaves, mesh


def _build(jitted, args, kwargs, leaves, in_tree, avals, have, mesh_box) -> tuple:
    name = f"jit({jitted.name})"
    dyn_args, dyn_kwargs, _, donated = jitted._split(args, kwargs)
    flags = donated_leaf_flags(in_tree, donated)
    donated_leaves = tuple(i for i, d in enumerate(flags) if d)
    want = _flat(f"{name}: in_shardings", tuple(dyn_args), jitted.in_shardings, mesh_box)
    want += [None] * (len(leaves) - len(want))
    if not mesh_box:  # (the mesh may be named by out_shardings only)
        named = pytree.tree_leaves(
            jitted.out_shardings, is_leaf=lambda s: isinstance(s, (NamedSharding, PartitionSpec))
        )
        mesh_box[:] = [s.mesh for s in named if isinstance(s, NamedSharding)][:1]
    if not mesh_box and context_mesh() is not None:  # ``with mesh:`` (JAX's legacy form)
        mesh_box[:] = [context_mesh()]
    if not mesh_box:
        raise BluValueError(
            with_user_line(
                f"{name}: in_shardings / out_shardings given as PartitionSpecs only: name the mesh "
                "with NamedSharding(mesh, spec) for at least one of them, or call it inside "
                "`with mesh:`"
            )
        )
    mesh = mesh_box[0]
    for i, (a, s) in enumerate(zip(avals, want)):
        if s is not None:
            check_spec(s, mesh, a.shape, f"{name}: in_shardings of argument leaf {i}")
    _tracing.mesh = mesh
    try:
        entry = jitted._trace(args, kwargs, dyn_args, dyn_kwargs, in_tree, avals)
    finally:
        _tracing.mesh = None
    outs_tree = pytree.tree_unflatten(entry.out_tree, list(entry.jaxpr.outvars))
    out_want = _flat(f"{name}: out_shardings", outs_tree, jitted.out_shardings, mesh_box)
    if mesh_box[0] != mesh:
        raise BluValueError(with_user_line(f"{name}: out_shardings name another mesh"))
    for i, (v, s) in enumerate(zip(entry.jaxpr.outvars, out_want)):
        if s is not None:
            check_spec(s, mesh, v.aval.shape, f"{name}: out_shardings of output leaf {i}")
    return entry, _compile(entry, mesh, have, want, out_want, jitted.name, donated_leaves), mesh


def call(jitted: Any, args: tuple, kwargs: dict) -> Any:
    """Run ``jitted`` partitioned over the mesh of its shardings or sharded arguments."""
    entry, fn, leaves, mesh = _prepare(jitted, args, kwargs)
    # (arguments that are not sharded arrays enter replicated: with one process per device,
    # jit(shard(...)) takes them as this process's block, which they are)
    outs = fn(*entry.consts, *leaves)
    if fn._blu_donates:  # the donated leaves' record names the user's jit and leaf index
        _rename_donated(leaves, len(entry.consts), jitted.name)
    shardings = fn.__dict__.get("_blu_out_shardings")
    if shardings is None:
        shardings = [NamedSharding(mesh, s) for s in fn._blu_out_specs]
        fn._blu_out_shardings = shardings
    if not any(isinstance(o, Tracer) for o in outs):  # (not under a transform)
        outs = [_wrap(o, s) for o, s in zip(outs, shardings)]
    return pytree.tree_unflatten(entry.out_tree, outs)


def _rename_donated(leaves: list, nc: int, name: str) -> None:
    """The per-device program took the consts first and is named ``shard(...)``: its record of
    a donated leaf, ``(name, index, where)``, is made the user's jit's and argument leaf's."""
    for k, x in enumerate(leaves):
        why = getattr(x, "_deleted", None)
        if isinstance(why, Donated) and why[1] == nc + k:
            x._deleted = Donated((name, k, why[2]))


def lower(jitted: Any, args: tuple, kwargs: dict, target: str | None) -> Any:
    """``jitted.lower(...)`` of a partitioned function: the per-device program, staged (and
    with ``target``, lowered: ``.compile()`` fills the kernel cache ahead of time)."""
    entry, fn, leaves, _ = _prepare(jitted, args, kwargs)
    return fn.lower(*entry.consts, *leaves, target=target)


def _wrap(o: Any, sharding: NamedSharding) -> Any:
    from blu.parallel.sharded_array import ShardedArray, from_local

    if not isinstance(o, Array):
        return o
    if sharding.is_fully_replicated:  # a plain array (jit takes it as one), which reports it
        if type(o) is not Array:
            return o
        out = Array(o._value, o.weak_type)
        out._mesh_sharding = sharding
        return out
    if runtime.is_initialized():
        return from_local(o._value, sharding, o.weak_type)
    return ShardedArray(o._value, sharding, o.shape, weak_type=o.weak_type)


def _compile(entry, mesh: Mesh, have: list, want: list, out_want: list, fname: str,
             donated: tuple = ()):  # fmt: skip
    from blu.parallel.shard_map import shard
    from blu.transforms import jit as jit_mod

    jaxpr, nc = entry.jaxpr, len(entry.consts)
    ctx = PartitionContext(mesh)
    out_specs: list = []  # filled while the per-device program is traced (shard reads it after)

    def per_device(*blocks):
        vals, lays = list(blocks), []
        for v in jaxpr.constvars:
            lays.append(Layout.replicated(len(v.aval.shape)))
        for k, v in enumerate(jaxpr.invars):
            nd = len(v.aval.shape)
            src = Layout.from_spec(have[k], nd)
            if want[k] is not None:
                dst = Layout.from_spec(want[k], nd)
                vals[nc + k] = ctx.reshard(vals[nc + k], src, dst)
                src = dst
            lays.append(src)
        ctx.hints = output_hints(
            jaxpr,
            [
                None if s is None else Layout.from_spec(s, len(v.aval.shape)).dims
                for s, v in zip(out_want, jaxpr.outvars)
            ],
        )
        outs = run_partitioned(ctx, jaxpr, vals, lays)
        result = []
        out_specs.clear()
        for (x, lay), spec in zip(outs, out_want):
            dst = Layout(lay.dims) if spec is None else Layout.from_spec(spec, len(lay.dims))
            result.append(ctx.reshard(x, lay, dst))
            out_specs.append(dst.spec())
        return result

    per_device.__name__ = fname
    specs = tuple([PartitionSpec()] * nc + list(have))
    fn = jit_mod.jit(
        shard(per_device, mesh, specs, out_specs, check_vma=False),
        donate_argnums=tuple(nc + i for i in donated),
    )
    fn._no_partition = True
    fn._blu_donates = bool(donated)
    fn._blu_out_specs = out_specs
    fn._blu_collectives = ctx.log
    return fn


def collectives(jitted: Any) -> list[str]:
    """The collectives the partitioner inserted into ``jitted``'s last partitioned program,
    one line each: kind (all-reduce, reduce-scatter, all-gather), the per-device block's
    aval, the mesh axes. (Slicing a whole value into blocks needs no communication and is not
    listed.) Raises BluValueError if ``jitted`` has not run partitioned."""
    fn = getattr(jitted, "_spmd_last", None)
    if fn is None:
        raise BluValueError(f"collectives: jit({jitted.name}) has not run over a mesh yet")
    return list(fn._blu_collectives)
