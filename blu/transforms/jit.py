"""jit: stage a function to a jaxpr once per signature and run it as one executable.

``jit`` is itself a primitive (``jit_p``) holding its jaxpr, so it composes with every transform:
its JVP, transpose, batching and partial-evaluation rules transform the inner jaxpr and bind
``jit_p`` again, so ``grad(jit(f))`` still runs the forward and backward passes as compiled
programs.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from blu.core import execution, lru, pytree
from blu.core import trace as tracing
from blu.core.array import Array, immutable
from blu.core.aval import ShapeDtypeStruct
from blu.core.config import config
from blu.core.errors import BluTypeError, BluValueError, user_site, with_user_line
from blu.core.interpreter import Tracer, at_root, current_interpreter, get_aval, set_interpreter
from blu.core.jaxpr import Jaxpr, dce_jaxpr, eval_jaxpr
from blu.core.lru import LRU
from blu.core.primitive import Primitive
from blu.core.staging import StagingInterpreter, hoist_consts, trace_to_jaxpr
from blu.transforms import batching, dispatch, vma
from blu.transforms import donation as _donation
from blu.transforms.ad import backward_pass, jvp_jaxpr
from blu.transforms.ad_util import UndefinedPrimal, Zero, instantiate, tangent_aval
from blu.transforms.aot import Lowered, Signature, _is_spec, _spec_to_aval_holder
from blu.transforms.axes import axis_env_key
from blu.transforms.batching import batch_jaxpr
from blu.transforms.jaxpr_util import nonzero
from blu.transforms.jit_args import _normalize_donate, _normalize_static, donated_leaf_flags
from blu.transforms.jit_cache import (
    CacheEntry,
    stable_hoisted,
)
from blu.transforms.partial_eval import partial_eval_jaxpr

log = logging.getLogger("blu.jit")

jit_p = Primitive("jit", multiple_results=True)


def _bind_jaxpr(jaxpr: Jaxpr, consts: Sequence[Any], args: Sequence[Any], name: str) -> list[Any]:
    """Bind ``jit_p`` on a jaxpr whose constvars are given by ``consts``."""
    flat = hoist_consts(jaxpr) if jaxpr.constvars else jaxpr
    n = len(flat.invars)
    return jit_p.bind(*consts, *args, jaxpr=flat, name=name, donated_invars=(False,) * n)


# ---- rules of jit_p ----------------------------------------------------------------------------


@jit_p.def_abstract_eval
def _jit_abstract_eval(*avals, jaxpr, name, donated_invars):
    for i, (a, v) in enumerate(zip(avals, jaxpr.invars, strict=True)):
        if a.shape != v.aval.shape or a.dtype != v.aval.dtype:
            raise BluTypeError(
                f"jit({name}): argument {i} is {a.str_short()} but the jaxpr expects "
                f"{v.aval.str_short()}"
            )
    return jaxpr.out_avals


@jit_p.def_impl
def _jit_impl(*args, jaxpr, name, donated_invars):
    backend = execution.executor()  # registered by blu.lower (``blu.core.execution``)
    if backend is None:  # no backend: the reference evaluation (results may alias operands)
        return eval_jaxpr(jaxpr, [], *[_owned(a) for a in args])
    return backend.call(jaxpr, name, donated_invars, args)


def _owned(x: Any) -> Any:
    """A borrowed user numpy buffer (``jit_p.borrows_operands``) copied (unless ``immutable``)."""
    return x.copy() if isinstance(x, np.ndarray) and not immutable(x) else x


# non-donated operands are read in place: the backend copies them where its executable's
# results could alias them (``backend.call``), so a user's numpy array is never copied per call
jit_p.borrows_operands = lambda params: [not d for d in params["donated_invars"]]


@jit_p.def_jvp
def _jit_jvp(primals, tangents, *, jaxpr, name, donated_invars):
    nonzeros = nonzero(tangents)  # integer tangents count as zero
    new, consts, out_nz = jvp_jaxpr(jaxpr, nonzeros, [False] * len(jaxpr.outvars))
    outs = _bind_jaxpr(new, consts, [*primals, *[t for t, nz in zip(tangents, nonzeros) if nz]],
                       f"jvp({name})")  # fmt: skip
    n = len(jaxpr.outvars)
    t_iter = iter(outs[n:])
    t_outs = [
        next(t_iter) if nz else Zero(tangent_aval(a)) for nz, a in zip(out_nz, jaxpr.out_avals)
    ]
    return outs[:n], t_outs


@jit_p.def_transpose
def _jit_transpose(cts, *args, jaxpr, name, donated_invars):
    undef = [isinstance(a, UndefinedPrimal) for a in args]
    ct_nz = [not isinstance(c, Zero) for c in cts]
    builder = StagingInterpreter(current_interpreter())
    res = [builder.new_arg(a.aval) for a, u in zip(jaxpr.invars, undef) if not u]
    ct_in = [builder.new_arg(v.aval) for v, nz in zip(jaxpr.outvars, ct_nz) if nz]
    known = [a for a, u in zip(args, undef) if not u]

    def transposed(*staged):
        r_iter, c_iter = iter(staged[: len(res)]), iter(staged[len(res) :])
        bw = [
            UndefinedPrimal(v.aval, a.vma) if u else next(r_iter)
            for v, a, u in zip(jaxpr.invars, args, undef)
        ]
        bc = [next(c_iter) if nz else Zero(v.aval) for v, nz in zip(jaxpr.outvars, ct_nz)]
        out = backward_pass(jaxpr, [], bw, bc)
        return [instantiate(c) for c, u in zip(out, undef) if u]

    with set_interpreter(builder):  # inside blu.shard: keeping the values' varying mesh axes
        outer = known + [c for c in cts if not isinstance(c, Zero)]
        out = vma.seeded(transposed, outer)(*res, *ct_in)
    t_jaxpr, consts = builder.build(out)
    outs = iter(_bind_jaxpr(t_jaxpr, consts, [*known, *[c for c in cts if not isinstance(c, Zero)]],
                            f"transpose({name})"))  # fmt: skip
    return [next(outs) if u else None for u in undef]


@jit_p.def_batch_named
def _jit_batch(axis_size, axis_name, args, dims, *, jaxpr, name, donated_invars):
    # a named rule, so collectives inside the jaxpr see the vmap/shard axis name
    if all(d is None for d in dims) and axis_name is None:
        return jit_p.bind(*args, jaxpr=jaxpr, name=name, donated_invars=donated_invars), [
            None
        ] * len(jaxpr.outvars)
    new, consts, out_dims = batch_jaxpr(jaxpr, axis_size, dims, None, axis_name)
    return _bind_jaxpr(new, consts, args, f"vmap({name})"), out_dims


@jit_p.def_partial_eval
def _jit_partial_eval(pe, args, params):
    jaxpr, name = params["jaxpr"], params["name"]
    unknowns = [pe.is_unknown(a) for a in args]
    known_j, known_consts, unknown_j, out_unknowns, num_res = partial_eval_jaxpr(
        jaxpr, unknowns, False, pe.parent
    )
    with set_interpreter(pe.parent):
        known_outs = _bind_jaxpr(
            known_j, known_consts, [a for a, u in zip(args, unknowns) if not u], name
        )
    n_known = len(known_outs) - num_res
    residuals = known_outs[n_known:]
    unknown_args = [*residuals, *[a for a, u in zip(args, unknowns) if u]]
    atoms = [pe.to_atom(a) for a in unknown_args]
    unknown_outs = StagingInterpreter.stage(
        pe, jit_p, atoms,
        dict(jaxpr=unknown_j, name=name, donated_invars=(False,) * len(unknown_j.invars)),
        unknown_j.out_avals,
    )  # fmt: skip
    k_iter, u_iter = iter(known_outs[:n_known]), iter(unknown_outs)
    return [next(u_iter) if u else next(k_iter) for u in out_unknowns]


# ---- the user-facing jit -----------------------------------------------------------------------


_partitioner: Any = None  # blu.parallel.spmd (call, lower), registered by blu.parallel


def set_partitioner(module: Any) -> None:
    """Register the SPMD partitioner (``blu.parallel`` is above this layer)."""
    global _partitioner
    _partitioner = module
    batching.partitioning_mesh[:] = [module.partitioning_mesh]  # for vmap's spmd_axis_name


def _partition(jitted: Jitted, args: tuple, kwargs: dict) -> Any:
    if _partitioner is None:
        raise BluValueError(
            with_user_line(f"jit({jitted.name}): in_shardings / out_shardings need blu.parallel")
        )
    return _partitioner.call(jitted, args, kwargs)


class _Held(threading.local):
    """``blu.debug.inspect_array_sharding``'s callbacks held while ``jit`` traces a call with
    sharded arguments: the SPMD partitioner traces the function again, calling back with the
    layouts, so a held callback runs only if that trace is the one that runs (it calls
    ``shard``)."""

    def __init__(self) -> None:
        self.calls: list | None = None


_held = _Held()


def hold_sharding_callback(fn: Callable[[], None]) -> bool:
    """Hold ``fn`` (returns True) while a trace may be redone by the partitioner; else False."""
    if _held.calls is None:
        return False
    _held.calls.append(fn)
    return True


class _ShardCount(threading.local):
    """``blu.shard`` runs seen by this thread's traces: jit takes sharded arrays only if its trace
    reached one (per thread, so another thread's shard does not count)."""

    def __init__(self) -> None:
        self.n = 0


_shard_traces = _ShardCount()


def note_shard() -> None:
    """Called by ``blu.shard`` each time it runs (so jit knows its trace went through one)."""
    _shard_traces.n += 1


def _check_addressable(name: str, jaxpr: Jaxpr) -> None:
    """Refuse, before compiling, an array no 64-bit machine can hold (its byte count, or one
    of its dimensions, does not even fit the compiler's index type).

    Raises:
        BluOutOfMemoryError: naming the array's shape, dtype, bytes and the primitive.
    """
    from blu.core.errors import out_of_memory

    for e in jaxpr.eqns:
        for v in e.outvars:
            n = v.aval.dtype.itemsize
            for d in v.aval.shape:
                n *= d
            if n >= 2**63 or any(d >= 2**63 for d in v.aval.shape):
                raise out_of_memory(v.aval.shape, v.aval.dtype, f"jit({name}): {e.primitive.name}")


class Jitted:
    """A function staged to a jaxpr once per signature (pytree structure, avals, static values).

    Call it like the original function; ``.lower(*args)`` gives the staged program for
    inspection; ``.clear_cache()`` drops the traces. At most ``blu.config.jit_cache_size``
    traces are kept (least recently used dropped first, with what only they hold: their jaxpr,
    constants and, through the executable cache, their compiled program).
    """

    _no_partition = False  # (set on the per-device program the partitioner compiles)

    def __init__(self, fun, static_argnums=(), static_argnames=(), donate_argnums=None,
                 in_shardings=None, out_shardings=None, donate_argnames=None):  # fmt: skip
        functools.update_wrapper(self, fun)
        self.in_shardings, self.out_shardings = in_shardings, out_shardings
        self.fun = fun
        self.name = getattr(fun, "__name__", "fun")
        self.static_argnums, self.static_argnames = _normalize_static(
            fun, static_argnums, static_argnames
        )
        self.donate_argnums, self.donate_argnames = _normalize_donate(
            fun, donate_argnums, donate_argnames, self.static_argnums, self.static_argnames
        )
        self._cache = LRU("jit_cache_size")  # signature -> CacheEntry
        self._last_key: Any = None
        self._last_tree: Any = None  # the previous call's argument treedef (a fast flatten)
        self._fast: dispatch.FastCall | None = None  # the last signature's fast path
        _jitted.add(self)

    def _partitions(self, leaves: Sequence[Any]) -> bool:
        """Whether a call with these leaves goes to the SPMD partitioner: some are arrays sharded
        over several devices and the function does not run ``shard`` itself."""
        return (
            _partitioner is not None
            and not self._no_partition
            and any(getattr(x, "_blu_sharded", False) and len(x.sharding.device_set) > 1
                    for x in leaves)
        )  # fmt: skip

    def _split(self, args: tuple, kwargs: dict):
        dyn_args, static_vals, donated = [], [], []
        for i, a in enumerate(args):
            if i in self.static_argnums:
                static_vals.append(("arg", i, a))
            else:
                dyn_args.append(a)
                donated.append(i in self.donate_argnums)
        dyn_kwargs = {}
        for k in sorted(kwargs):
            if k in self.static_argnames:
                static_vals.append(("kw", k, kwargs[k]))
            else:
                dyn_kwargs[k] = kwargs[k]
                donated.append(k in self.donate_argnames)
        for _, where, v in static_vals:
            try:
                hash(v)
            except TypeError as e:
                raise BluTypeError(
                    with_user_line(
                        f"jit({self.name}): static argument {where} of type {type(v).__name__} "
                        "is not hashable; static arguments are cache keys and must be hashable "
                        "(use a tuple instead of a list)"
                    )
                ) from e
        return dyn_args, dyn_kwargs, tuple(static_vals), donated

    def _trace(
        self, args, kwargs, dyn_args, dyn_kwargs, in_tree, in_avals, vmas=None
    ) -> CacheEntry:
        out_tree_box = []

        def flat_fun(*flat):
            d_args, d_kwargs = pytree.tree_unflatten(in_tree, list(flat))
            it = iter(d_args)
            full = [a if i in self.static_argnums else next(it) for i, a in enumerate(args)]
            kw = {k: (kwargs[k] if k in self.static_argnames else d_kwargs[k]) for k in kwargs}
            out_leaves, out_tree = pytree.tree_flatten(self.fun(*full, **kw))
            out_tree_box.append(out_tree)
            return out_leaves

        n_shard = _shard_traces.n
        if vmas is not None:  # inside blu.shard: keep the values' varying manual axes
            flat_fun = vma.trace_manual(flat_fun, vmas)
        jaxpr, consts = trace_to_jaxpr(flat_fun, in_avals)
        jaxpr = dce_jaxpr(jaxpr)  # e.g. the unused forward value under grad
        _check_addressable(self.name, jaxpr)
        return CacheEntry(jaxpr, consts, out_tree_box[0], _shard_traces.n != n_shard)

    def _explain_miss(self, key) -> str:
        if self._last_key is None:
            return "first call"
        (tree, avals, statics, axes, vmas), (otree, oavals, ostatics, oaxes, ovmas) = (
            key,
            self._last_key,
        )
        if axes != oaxes:
            return f"named axes changed from {list(oaxes)} to {list(axes)} (another mesh)"
        if tree != otree:
            return f"argument structure changed from {otree} to {tree}"
        for i, (a, b) in enumerate(zip(avals, oavals)):
            if a != b:
                return f"argument leaf {i} changed from {b.str_short()} to {a.str_short()}" + (
                    " (weak type)" if a.shape == b.shape and a.dtype == b.dtype else ""
                )
        for (_, w, v), (_, _, ov) in zip(statics, ostatics):
            if v != ov:
                return f"static argument {w} changed from {ov!r} to {v!r}"
        if vmas != ovmas:
            return f"the arguments' varying mesh axes changed from {ovmas} to {vmas}"
        return "signature not seen before"

    def _lookup(self, args: tuple, kwargs: dict):
        dyn_args, dyn_kwargs, statics, donated = self._split(args, kwargs)
        last = self._last_tree
        if last is None:
            leaves, in_tree = pytree.tree_flatten((dyn_args, dyn_kwargs))
        else:  # (the usual case: the same structure as the previous call)
            leaves, in_tree = pytree.tree_flatten_like((dyn_args, dyn_kwargs), last)
        self._last_tree = in_tree
        try:
            in_avals = tuple(get_aval(x) for x in leaves)
        except BluTypeError as e:
            raise BluTypeError(
                f"jit({self.name}): {e.args[0].splitlines()[0]}; pass non-array arguments as "
                "static (static_argnums=... / static_argnames=...)\n"
                + "\n".join(e.args[0].splitlines()[1:])
            ) from None
        # a trace under one mesh (named axes and sizes) is not valid under another
        # inside blu.shard, which mesh axes each argument varies over (shard_map's rule)
        vmas = vma.arg_vmas(leaves) if axis_env_key() else None
        key = (in_tree, in_avals, statics, axis_env_key(), vmas)
        entry = self._cache.get(key)
        if entry is None:
            if config.log_compiles:
                log.warning("jit(%s): tracing because %s", self.name, self._explain_miss(key))
            t0 = time.perf_counter()
            probe, held = self._partitions(leaves), _held.calls
            if probe:  # (the partitioner will trace it again: hold inspect_array_sharding's)
                _held.calls = []
            try:
                entry = self._trace(args, kwargs, dyn_args, dyn_kwargs, in_tree, in_avals, vmas)
            except Exception:
                if self._partitions(leaves):  # (a process's blocks are not the global shapes
                    return None, leaves, None  # the function is written for: partition it)
                raise
            finally:
                calls, _held.calls = (_held.calls if probe else None), held
            for fn in calls if calls is not None and entry.uses_shard else ():
                fn()  # (this trace is the one that runs: the partitioner will not redo it)
            tracing.span_since(f"trace jit({self.name})", "trace", t0)
            if not any(isinstance(c, Tracer) for c in entry.consts):
                # closures over tracers must be re-traced each time; of two threads tracing one
                # signature at once, both use the first entry (so one executable is compiled)
                entry = self._cache.setdefault(key, entry)
            self._last_key = key  # for the log message only
        # leaves per argument, from the treedef of (dyn_args, dyn_kwargs) (not a second
        # flatten of every argument: a training step's state has hundreds of leaves)
        return entry, leaves, donated_leaf_flags(in_tree, donated)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        fast = self._fast
        if fast is not None and not kwargs:  # the previous call's signature (dispatch.py)
            out = fast(args)
            if out is not dispatch.MISS:
                return out
        if config.disable_jit:  # blu.disable_jit(): run op by op, nothing is traced or cached
            return self.fun(*args, **kwargs)
        t0 = time.perf_counter()
        if self.in_shardings is not None or self.out_shardings is not None:
            return _partition(self, args, kwargs)
        entry, leaves, donated = self._lookup(args, kwargs)
        if entry is None or (not entry.uses_shard and self._partitions(leaves)):
            return _partition(self, args, kwargs)  # jit over sharded arrays
        donating = any(donated)
        if donating:
            for leaf in leaves:
                if isinstance(leaf, Array):
                    leaf._value  # noqa: B018 - raises, naming the donation, if deleted
            inputs = _donation.donate_inputs(leaves, donated)
        else:
            inputs = leaves
        try:
            outs = jit_p.bind(
                *entry.consts,
                *inputs,
                jaxpr=stable_hoisted(entry),
                name=self.name,
                donated_invars=(False,) * len(entry.consts) + tuple(donated),
            )
        except BaseException:
            _donation.restore(leaves, donated)  # not run: the caller keeps them
            raise
        if donating:
            _donation.delete_donated(self.name, leaves, donated, user_site())
        if not kwargs and not self.static_argnums and not entry.uses_shard and at_root():
            self._fast = self._fast_path(args, leaves, entry, donated)
        tracing.span_since(f"jit({self.name})", "jit", t0)  # a timeline trace's host span
        return pytree.tree_unflatten(entry.out_tree, outs)

    def _fast_path(self, args: tuple, leaves: list, entry: CacheEntry, donated: list) -> Any:
        """The fast path for calls like this one (``dispatch.make``), or None."""
        fast_callable = getattr(execution.executor(), "fast_callable", None)  # (optional)
        if fast_callable is None or not dispatch.could_take(leaves, entry.consts):
            return None
        jaxpr = stable_hoisted(entry)
        donated_invars = (False,) * len(entry.consts) + tuple(donated)
        # (a donated leaf is deleted by now: its shape and dtype remain, which is all it needs)
        run = fast_callable(jaxpr, self.name, donated_invars, [*entry.consts, *leaves])
        return dispatch.make(args, leaves, entry.jaxpr, entry.consts, entry.out_tree, run,
                             donated, self.name)  # fmt: skip

    def lower(self, *args: Any, target: str | None = None, **kwargs: Any) -> Lowered:
        """Stage for the given arguments (arrays or ``ShapeDtypeStruct``s) without running.

        With ``target="cpu"`` the program is also lowered through MLIR: ``.as_text()`` is the
        MLIR of its kernels and ``.compile()`` compiles them (into ``BLU_CACHE_DIR``).
        """
        args = pytree.tree_map(_spec_to_aval_holder, args, is_leaf=_is_spec)
        kwargs = pytree.tree_map(_spec_to_aval_holder, kwargs, is_leaf=_is_spec)
        if self.in_shardings is not None or self.out_shardings is not None:
            if _partitioner is None:
                return _partition(self, args, kwargs)  # (raises)
            return _partitioner.lower(self, args, kwargs, target)
        entry, leaves, donated = self._lookup(args, kwargs)
        donated_invars = (False,) * len(entry.consts) + tuple(donated)
        dyn_args, dyn_kwargs, statics, _ = self._split(args, kwargs)
        signature = Signature(
            statics, pytree.tree_structure((dyn_args, dyn_kwargs)), [get_aval(x) for x in leaves]
        )
        return Lowered(self, entry, target, donated_invars, signature)

    def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
        entry, _, _ = self._lookup(args, kwargs)
        return pytree.tree_unflatten(
            entry.out_tree, [ShapeDtypeStruct(a.shape, a.dtype) for a in entry.jaxpr.out_avals]
        )

    def clear_cache(self) -> None:
        self._cache.clear()
        self._last_key = None
        self._fast = None


_jitted: weakref.WeakSet = weakref.WeakSet()  # every Jitted alive (clear_caches)


def clear_caches() -> None:
    """Drop every jitted function's traces and fast path and empty blu's in-process caches
    (executables, loaded kernels), as ``jax.clear_caches``; the next call of each jitted
    function traces and compiles again (compiled kernels come back from ``BLU_CACHE_DIR``)."""
    for j in list(_jitted):
        j.clear_cache()
    lru.clear_all()


def jit(
    fun: Callable | None = None,
    *,
    static_argnums: int | Sequence[int] = (),
    static_argnames: str | Sequence[str] = (),
    donate_argnums: int | Sequence[int] | None = None,
    donate_argnames: str | Sequence[str] | None = None,
    in_shardings: Any = None,
    out_shardings: Any = None,
) -> Any:
    """Stage ``fun`` to a jaxpr per argument signature and run it as one program.

    Args:
        fun: a function of pytrees of arrays (usable as ``@jit`` or ``@jit(static_argnums=..)``).
        static_argnums / static_argnames: arguments passed as Python values (hashable; part of
            the cache key) instead of traced arrays.
        donate_argnums / donate_argnames: arguments (by position / by parameter name) whose
            buffers the program may reuse for outputs (as in JAX). A donated ``blu.Array`` is
            deleted by the call: any later use of its value raises a ``BluValueError`` ("Array
            has been deleted"); a donated numpy array is copied first, so the caller's array is
            never written. Given one of the two, the other is inferred from the signature (the
            parameter is donated whether passed by position or by keyword); given both, each
            applies only to arguments passed its way (JAX's rule).
        in_shardings / out_shardings: ``NamedSharding``s (or ``PartitionSpec``s when another
            one names the mesh, or ``None``: the argument's own / the propagated layout), one
            per positional argument / output or a pytree prefix. With them, or called with
            sharded arrays (``device_put(x, NamedSharding(...))``), the program is partitioned
            over the mesh with collectives inserted (``blu.parallel.spmd``); its results equal
            the unpartitioned program's.

    Raises:
        BluValueError: ``donate_argnums`` out of range, not ints, or also static;
            ``donate_argnames`` not parameters (of a function without ``**kwargs``),
            positional-only, or also static.
        BluTypeError: unhashable static arguments; ConcretizationError when ``fun`` needs the
            value of a traced argument (e.g. Python ``if`` on it).
    """
    if fun is None:
        return lambda f: jit(
            f,
            static_argnums=static_argnums,
            static_argnames=static_argnames,
            donate_argnums=donate_argnums,
            donate_argnames=donate_argnames,
            in_shardings=in_shardings,
            out_shardings=out_shardings,
        )
    if not callable(fun):
        raise BluValueError(with_user_line(f"jit expects a callable, got {type(fun).__name__}"))
    return Jitted(fun, static_argnums, static_argnames, donate_argnums, in_shardings,
                  out_shardings, donate_argnames)  # fmt: skip


def eval_shape(fun: Callable, *args: Any, **kwargs: Any) -> Any:
    """The output shapes and dtypes of ``fun`` (as ShapeDtypeStructs), without computing it."""
    args = pytree.tree_map(_spec_to_aval_holder, args, is_leaf=_is_spec)
    kwargs = pytree.tree_map(_spec_to_aval_holder, kwargs, is_leaf=_is_spec)
    return Jitted(fun).eval_shape(*args, **kwargs)
