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

What is not partitioned: control flow (``scan``, ``while``, ``cond``) and other primitives
without a rule run on whole operands on every device (right, but with one device's speed), and
``custom_jvp`` / ``custom_vjp`` functions are inlined (their custom derivative rules apply when
``grad`` is taken inside the jitted function, as for a training step, not to ``grad`` of the
partitioned function).
"""

from __future__ import annotations

import threading
from typing import Any

from blu.core import pytree
from blu.core.array import Array
from blu.core.aval import ShapedArray
from blu.core.errors import BluValueError, with_user_line
from blu.core.interpreter import Tracer, get_aval
from blu.core.jaxpr import Jaxpr, Literal, use_counts
from blu.core.primitive import Primitive
from blu.core.staging import hoist_consts, trace_to_jaxpr
from blu.lax import attention as att
from blu.parallel import runtime
from blu.parallel.mesh import Mesh, NamedSharding, PartitionSpec, check_spec
from blu.parallel.spmd_layout import Layout, divides, drop_trivial, reshard
from blu.parallel.spmd_rules import RULES, elementwise, rebroadcast, replicate_all, rule
from blu.transforms.jaxpr_util import groups

__all__ = ["collectives", "with_sharding_constraint"]


class _Ctx:
    def __init__(self, mesh: Mesh):
        self.mesh = mesh
        self.log: list[str] = []  # the collectives inserted (``collectives``)
        self.eqn: Any = None  # the equation being partitioned
        self._done: dict = {}  # (id(x), src, dst) -> (x, resharded): each move made once
        self._broadcasts: dict = {}  # id(y) -> (y, operand, its layout, the broadcast eqn)
        self.hints: dict = {}  # var -> dims its consumers (the outputs) want
        self.uses: dict = {}  # var -> how many equations (and outputs) read it

    def note_broadcast(self, y: Any, x: Any, lay: Layout, eqn: Any) -> None:
        self._broadcasts[id(y)] = (y, x, lay, eqn)

    def is_broadcast(self, y: Any) -> bool:
        hit = self._broadcasts.get(id(y))
        return hit is not None and hit[0] is y

    def hint(self, var: Any) -> tuple | None:
        return self.hints.get(var)

    def reshard(self, x: Any, src: Layout, dst: Layout) -> Any:
        if src == dst or drop_trivial(src, self.mesh) == drop_trivial(dst, self.mesh):
            return x
        key = (id(x), src, dst)
        hit = self._done.get(key)
        if hit is not None and hit[0] is x:
            return hit[1]
        n = len(self.log)
        if self.is_broadcast(x):  # made again in the wanted layout from its small operand
            _, source, lay, eqn = self._broadcasts[id(x)]
            y = rebroadcast(self, eqn, source, lay, dst)
            self._done[key] = (x, y)
            return y
        y = reshard(x, src, dst, self.mesh, self.log)
        for i in range(n, len(self.log)):  # the user's line that needed it
            self.log[i] += (
                f" for {self.eqn.primitive.name} at {self.eqn.source}" if self.eqn else ""
            )
        self._done[key] = (x, y)  # (x kept alive, so its id is not reused)
        return y


def _rule_of(prim: Primitive):
    found = RULES.get(prim.name)
    if found is not None:
        return found
    return elementwise if getattr(prim, "elementwise", False) else replicate_all


def run_partitioned(ctx: _Ctx, jaxpr: Jaxpr, vals: list, lays: list[Layout]) -> list:
    """Run ``jaxpr`` on per-device blocks: ``(block, Layout)`` per output."""
    env: dict = {}

    def read(v):
        if isinstance(v, Literal):
            return v.val, Layout.replicated(len(v.aval.shape))
        return env[v]

    ctx.uses.update(use_counts(jaxpr))
    for v, x, lay in zip([*jaxpr.constvars, *jaxpr.invars], vals, lays, strict=True):
        env[v] = (x, lay)
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        ctx.eqn = eqn
        outs = _rule_of(eqn.primitive)(ctx, eqn, [x for x, _ in ins], [lay for _, lay in ins])
        env.update(zip(eqn.outvars, outs, strict=True))
    return [read(v) for v in jaxpr.outvars]


def output_hints(jaxpr: Jaxpr, out_dims: list) -> dict:
    """Per variable, the split the outputs want, carried back through elementwise equations
    (an optimizer's update chain ends in the parameter's layout: computing it split is ZeRO)."""
    hints = {
        v: d
        for v, d in zip(jaxpr.outvars, out_dims)
        if d is not None and not isinstance(v, Literal)
    }
    for eqn in reversed(jaxpr.eqns):
        if not getattr(eqn.primitive, "elementwise", False) or eqn.outvars[0] not in hints:
            continue
        h = hints[eqn.outvars[0]]
        for v in eqn.invars:
            if not isinstance(v, Literal) and v.aval.shape == eqn.outvars[0].aval.shape:
                hints.setdefault(v, h)
    return hints


# ---- calls are inlined -------------------------------------------------------------------------


@rule("jit")
def _inline_jit(ctx, eqn, vals, lays):
    return run_partitioned(ctx, eqn.params["jaxpr"], vals, lays)


def _localize(ctx: _Ctx, jaxpr: Jaxpr, vals: list, lays: list) -> tuple | None:
    """``jaxpr`` partitioned and staged at these blocks' shapes: ``(jaxpr with its consts as
    leading inputs, consts, output layouts)``, or None if it needs communication."""
    sub = _Ctx(ctx.mesh)
    out_lays: list = []

    def per_device(*xs):
        outs = run_partitioned(sub, jaxpr, list(xs), lays)
        out_lays[:] = [lay for _, lay in outs]
        return [o for o, _ in outs]

    local, consts = trace_to_jaxpr(per_device, [get_aval(v) for v in vals])
    if sub.log or any(lay.partial for lay in out_lays):
        return None
    return hoist_consts(local), consts, out_lays


@rule("custom_jvp_call")
def _custom_jvp(ctx, eqn, vals, lays):
    """Kept a custom_jvp call (its rule, and a ``lowering_name`` the GPU plan fuses, e.g. GELU
    into a product's epilogue) with its function staged per device, when that needs no
    communication; otherwise inlined."""
    p = eqn.params
    nf, nj = p["num_fconsts"], p["num_jconsts"]
    vals = [ctx.reshard(v, lay, Layout(lay.dims)) for v, lay in zip(vals, lays)]  # sums resolved
    lays = [Layout(lay.dims) for lay in lays]
    (fv, jv, xv), (fl, jl, xl) = groups(vals, nf, nj), groups(lays, nf, nj)
    call = _localize(ctx, p["call_jaxpr"], fv + xv, fl + xl)
    jvp, rule_ok = p["jvp"], call is not None
    if rule_ok and isinstance(jvp, Jaxpr):  # a traced rule: staged per device as well
        lj = _localize(ctx, jvp, jv + xv + xv, jl + xl + xl)
        rule_ok = lj is not None and lj[2] == call[2] * 2
    if not rule_ok:
        return run_partitioned(ctx, p["call_jaxpr"], fv + xv, fl + xl)
    call_j, c_consts, out_lays = call
    j_consts: list = []
    if isinstance(jvp, Jaxpr):
        jvp, j_consts, _ = lj
    named = {k: p[k] for k in ("lowering_name",) if k in p}
    outs = eqn.primitive.bind(
        *c_consts, *fv, *j_consts, *jv, *xv, call_jaxpr=call_j, jvp=jvp,
        num_fconsts=len(c_consts) + nf, num_jconsts=len(j_consts) + nj, **named,
    )  # fmt: skip
    return list(zip(outs, out_lays))


@rule("custom_vjp_call")
def _inline_custom_vjp(ctx, eqn, vals, lays):
    p = eqn.params
    fc, _, _, xs = groups(list(zip(vals, lays)), *p["num_consts"])
    args = fc + xs
    return run_partitioned(ctx, p["call_jaxpr"], [a for a, _ in args], [b for _, b in args])


# ---- attention: batch and heads split ----------------------------------------------------------


@rule("dot_product_attention_fwd", "dot_product_attention_jvp", "dot_product_attention_bwd")
def _attention(ctx, eqn, vals, lays):
    """Every (B, ...) operand split alike on B; heads (queries' N and keys' KH, both divisible)
    split alike when there is no bias or mask."""
    roles = att._roles(eqn.primitive, eqn.params)
    shapes = [v.aval.shape for v in eqn.invars]
    b, n, kh = shapes[0][0], shapes[0][2], shapes[1][2]
    if any(len(o.aval.shape) not in (3, 4) or o.aval.shape[0] != b for o in eqn.outvars):
        return replicate_all(ctx, eqn, vals, lays)  # (a bias gradient summed over B)
    mesh = ctx.mesh
    bax = next(
        (
            lay.dims[0]
            for lay, r in zip(lays, roles)
            if r == "x" and lay.dims[0] and divides(mesh, b, lay.dims[0])
        ),
        (),
    )
    hax: tuple = ()
    if "b" not in roles:
        for lay, s in zip(lays, shapes):
            h = lay.dims[2] if len(s) == 4 else lay.dims[1]
            if h and not set(h) & set(bax) and divides(mesh, n, h) and divides(mesh, kh, h):
                hax = h
                break

    def layout(shape):
        if len(shape) == 4 and shape[0] == b:
            return Layout((bax, (), hax, ()))
        if len(shape) == 3:
            return Layout((bax, hax, ()))
        return Layout(((),) * len(shape))  # a (1, ...) bias or mask

    new = [ctx.reshard(x, lay, layout(s)) for x, lay, s in zip(vals, lays, shapes)]
    out = eqn.primitive.bind(*new, **eqn.params)
    return [(o, layout(v.aval.shape)) for o, v in zip(out, eqn.outvars)]


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
    want = Layout.from_spec(eqn.params["spec"], len(lay.dims))
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
        shardings: a ``NamedSharding`` or ``PartitionSpec`` (or a pytree prefix of them).

    Returns:
        ``x`` unchanged in value. Outside a ``jit`` that partitions over a mesh it is a no-op
        (one device holds everything), as JAX's on one device.
    """
    if _tracing.mesh is None:
        return x

    def one(s, sub):
        spec = s.spec if isinstance(s, NamedSharding) else (s or PartitionSpec())
        return pytree.tree_map(
            lambda leaf: sharding_constraint_p.bind(
                leaf,
                spec=check_spec(
                    spec, _tracing.mesh, get_aval(leaf).shape, "with_sharding_constraint"
                ),
            ),
            sub,
        )

    is_leaf = lambda s: isinstance(s, (NamedSharding, PartitionSpec)) or s is None  # noqa: E731
    if is_leaf(shardings):
        return one(shardings, x)
    return pytree.tree_map(one, shardings, x, is_leaf=is_leaf)


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
    except BluValueError as e:
        if "structure mismatch" not in str(e):
            raise
        raise BluValueError(
            with_user_line(
                f"{where} {shardings!r} does not match the structure {pytree.tree_structure(tree)}"
                " (one sharding per argument/output, or a pytree prefix of them)"
            )
        ) from e
    except Exception as e:
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
        if getattr(x, "_blu_sharded", False) and len(x.sharding.device_set) > 1:
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
    n_leaf = [c.num_leaves for c in in_tree.children()[0].children()]
    flags = [d for d, n in zip(donated, n_leaf) for _ in range(n)]
    donated_leaves = tuple(i for i, d in enumerate(flags) if d)
    want = _flat(f"{name}: in_shardings", tuple(dyn_args), jitted.in_shardings, mesh_box)
    want += [None] * (len(leaves) - len(want))
    if not mesh_box:
        raise BluValueError(
            with_user_line(
                f"{name}: in_shardings / out_shardings given as PartitionSpecs only: name the mesh "
                "with NamedSharding(mesh, spec) for at least one of them"
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
    return entry, _compile(entry, mesh, have, want, out_want, jitted.name, donated_leaves), mesh


def call(jitted: Any, args: tuple, kwargs: dict) -> Any:
    """Run ``jitted`` partitioned over the mesh of its shardings or sharded arguments."""
    entry, fn, leaves, mesh = _prepare(jitted, args, kwargs)
    # (arguments that are not sharded arrays enter replicated: with one process per device,
    # jit(shard(...)) takes them as this process's block, which they are)
    outs = fn(*entry.consts, *leaves)
    shardings = fn.__dict__.get("_blu_out_shardings")
    if shardings is None:  # (None for a replicated output: it stays a plain array)
        shardings = [None if NamedSharding(mesh, s).is_fully_replicated
                     else NamedSharding(mesh, s) for s in fn._blu_out_specs]  # fmt: skip
        fn._blu_out_shardings = shardings
    if any(shardings) and not any(isinstance(o, Tracer) for o in outs):  # (not under a transform)
        outs = [o if s is None else _wrap(o, s) for o, s in zip(outs, shardings)]
    return pytree.tree_unflatten(entry.out_tree, outs)


def lower(jitted: Any, args: tuple, kwargs: dict, target: str | None) -> Any:
    """``jitted.lower(...)`` of a partitioned function: the per-device program, staged (and
    with ``target``, lowered: ``.compile()`` fills the kernel cache ahead of time)."""
    entry, fn, leaves, _ = _prepare(jitted, args, kwargs)
    return fn.lower(*entry.consts, *leaves, target=target)


def _wrap(o: Any, sharding: NamedSharding) -> Any:
    from blu.parallel.sharded_array import ShardedArray, from_local

    if sharding.is_fully_replicated or not isinstance(o, Array):
        return o
    if runtime.is_initialized():
        return from_local(o._value, sharding, o.weak_type)
    return ShardedArray(o._value, sharding, o.shape, weak_type=o.weak_type)


def _compile(entry, mesh: Mesh, have: list, want: list, out_want: list, fname: str,
             donated: tuple = ()):  # fmt: skip
    from blu.parallel.shard_map import shard
    from blu.transforms import jit as jit_mod

    jaxpr, nc = entry.jaxpr, len(entry.consts)
    ctx = _Ctx(mesh)
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
