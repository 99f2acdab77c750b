"""jit: stage a function to a jaxpr once per signature and run it as one executable.

``jit`` is itself a primitive (``jit_p``) holding its jaxpr, so it composes with every transform:
its JVP, transpose, batching and partial-evaluation rules transform the inner jaxpr and bind
``jit_p`` again, so ``grad(jit(f))`` still runs the forward and backward passes as compiled
programs.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from blu.core import pytree
from blu.core import trace as tracing
from blu.core.array import Array
from blu.core.aval import ShapedArray, ShapeDtypeStruct
from blu.core.config import config
from blu.core.errors import BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer, current_interpreter, get_aval, set_interpreter
from blu.core.jaxpr import ClosedJaxpr, Jaxpr, dce_jaxpr, eval_jaxpr, pp_jaxpr
from blu.core.primitive import Primitive
from blu.core.staging import StagingInterpreter, hoist_consts, trace_to_jaxpr
from blu.transforms.ad_util import UndefinedPrimal, Zero, instantiate, tangent_aval

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


_executables: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@jit_p.def_impl
def _jit_impl(*args, jaxpr, name, donated_invars):
    per = _executables.get(jaxpr)
    if per is None:
        per = _executables[jaxpr] = {}
    exe = per.get(donated_invars)
    if exe is None:
        from blu.lower.cpu import make_executable

        exe = per[donated_invars] = make_executable(jaxpr, name, donated_invars)
    return exe(*args)


_jvp_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _jvp_jaxpr(jaxpr: Jaxpr, nonzeros: tuple[bool, ...]):
    per = _jvp_cache.setdefault(jaxpr, {})
    if nonzeros in per:
        return per[nonzeros]
    from blu.transforms.ad import jvp_flat

    builder = StagingInterpreter(current_interpreter())
    primals = [builder.new_arg(v.aval) for v in jaxpr.invars]
    tangents = [
        builder.new_arg(tangent_aval(v.aval)) if nz else Zero(tangent_aval(v.aval))
        for v, nz in zip(jaxpr.invars, nonzeros)
    ]
    with set_interpreter(builder):
        outs, touts = jvp_flat(lambda *a: eval_jaxpr(jaxpr, [], *a), primals, tangents)
    out_nz = [not isinstance(t, Zero) for t in touts]
    new, consts = builder.build(list(outs) + [t for t in touts if not isinstance(t, Zero)])
    per[nonzeros] = (new, consts, out_nz)
    return per[nonzeros]


@jit_p.def_jvp
def _jit_jvp(primals, tangents, *, jaxpr, name, donated_invars):
    nonzeros = tuple(not isinstance(t, Zero) for t in tangents)
    new, consts, out_nz = _jvp_jaxpr(jaxpr, nonzeros)
    outs = _bind_jaxpr(new, consts, [*primals, *[t for t in tangents if not isinstance(t, Zero)]],
                       f"jvp({name})")  # fmt: skip
    n = len(jaxpr.outvars)
    t_iter = iter(outs[n:])
    t_outs = [
        next(t_iter) if nz else Zero(tangent_aval(a)) for nz, a in zip(out_nz, jaxpr.out_avals)
    ]
    return outs[:n], t_outs


@jit_p.def_transpose
def _jit_transpose(cts, *args, jaxpr, name, donated_invars):
    from blu.transforms.ad import backward_pass

    undef = [isinstance(a, UndefinedPrimal) for a in args]
    ct_nz = [not isinstance(c, Zero) for c in cts]
    builder = StagingInterpreter(current_interpreter())
    res = [builder.new_arg(a.aval) for a, u in zip(jaxpr.invars, undef) if not u]
    ct_in = [builder.new_arg(v.aval) for v, nz in zip(jaxpr.outvars, ct_nz) if nz]
    r_iter, c_iter = iter(res), iter(ct_in)
    bw_args = [UndefinedPrimal(v.aval) if u else next(r_iter) for v, u in zip(jaxpr.invars, undef)]
    bw_cts = [next(c_iter) if nz else Zero(v.aval) for v, nz in zip(jaxpr.outvars, ct_nz)]
    with set_interpreter(builder):
        out = backward_pass(jaxpr, [], bw_args, bw_cts)
        out = [instantiate(c) for c, u in zip(out, undef) if u]
    t_jaxpr, consts = builder.build(out)
    known = [a for a, u in zip(args, undef) if not u]
    outs = iter(_bind_jaxpr(t_jaxpr, consts, [*known, *[c for c in cts if not isinstance(c, Zero)]],
                            f"transpose({name})"))  # fmt: skip
    return [next(outs) if u else None for u in undef]


_batch_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@jit_p.def_batch_named
def _jit_batch(axis_size, axis_name, args, dims, *, jaxpr, name, donated_invars):
    # a named rule, so collectives inside the jaxpr see the vmap/shard axis name
    from blu.transforms.batching import batch_jaxpr

    if all(d is None for d in dims) and axis_name is None:
        return jit_p.bind(*args, jaxpr=jaxpr, name=name, donated_invars=donated_invars), [
            None
        ] * len(jaxpr.outvars)
    key = (axis_size, axis_name, tuple(dims))
    per = _batch_cache.setdefault(jaxpr, {})
    if key not in per:
        per[key] = batch_jaxpr(jaxpr, axis_size, dims, axis_name)
    new, consts, out_dims = per[key]
    return _bind_jaxpr(new, consts, args, f"vmap({name})"), out_dims


@jit_p.def_partial_eval
def _jit_partial_eval(pe, args, params):
    from blu.transforms.partial_eval import partial_eval_jaxpr

    jaxpr, name = params["jaxpr"], params["name"]
    unknowns = [pe.is_unknown(a) for a in args]
    known_j, known_consts, unknown_j, _, out_unknowns, num_res = partial_eval_jaxpr(
        jaxpr, unknowns, pe.parent
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


def _release_for_donation(x: Array) -> None:
    """Let the executable write a donated array's buffer in place (the caller gave it up)."""
    try:
        x._value.flags.writeable = True
    except ValueError:  # a view of a read-only buffer: the executable allocates instead
        pass


class _CacheEntry:
    __slots__ = ("jaxpr", "consts", "out_tree", "uses_shard")

    def __init__(self, jaxpr, consts, out_tree, uses_shard=False):
        self.jaxpr, self.consts, self.out_tree = jaxpr, consts, out_tree
        self.uses_shard = uses_shard


_shard_traces = 0  # bumped by blu.shard: jit takes sharded arrays only if its trace reached one


def note_shard() -> None:
    """Called by ``blu.shard`` each time it runs (so jit knows its trace went through one)."""
    global _shard_traces
    _shard_traces += 1


def _check_sharded_args(name: str, leaves: Sequence[Any]) -> None:
    for i, x in enumerate(leaves):
        if getattr(x, "_blu_sharded", False) and len(x.sharding.device_set) > 1:
            raise BluValueError(
                with_user_line(
                    f"jit({name}): argument leaf {i} is a sharded global array "
                    f"({x.aval.str_short()}, {x.sharding}); jit does not partition a program "
                    "over devices yet: run the per-device program with blu.shard(f, mesh, "
                    "in_specs, out_specs), e.g. jit(shard(f, ...)), or pass np.asarray(x)"
                )
            )


def _normalize_static(fun: Callable, static_argnums: Any, static_argnames: Any):
    nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums or ())
    names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames or ())
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if params and not any(p.kind == p.VAR_POSITIONAL for p in params):
        bad = [i for i in nums if not -len(positional) <= i < len(positional)]
        if bad:
            raise BluValueError(
                with_user_line(
                    f"jit: static_argnums {bad} out of range for a function of "
                    f"{len(positional)} positional parameters {positional}"
                )
            )
        nums = tuple(i % len(positional) for i in nums)
    if params and not any(p.kind == p.VAR_KEYWORD for p in params):
        known = {p.name for p in params}
        bad_names = [n for n in names if n not in known]
        if bad_names:
            raise BluValueError(
                with_user_line(
                    f"jit: static_argnames {bad_names} are not parameters of the function "
                    f"(its parameters: {sorted(known)})"
                )
            )
    names = set(names) | {positional[i] for i in nums if i < len(positional)}
    nums = set(nums) | {positional.index(n) for n in names if n in positional}
    return frozenset(nums), frozenset(names)


class Jitted:
    """A function staged to a jaxpr once per signature (pytree structure, avals, static values).

    Call it like the original function; ``.lower(*args)`` gives the staged program for
    inspection; ``.clear_cache()`` drops the traces.
    """

    def __init__(self, fun, static_argnums=(), static_argnames=(), donate_argnums=()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.name = getattr(fun, "__name__", "fun")
        self.static_argnums, self.static_argnames = _normalize_static(
            fun, static_argnums, static_argnames
        )
        self.donate_argnums = (
            (donate_argnums,) if isinstance(donate_argnums, int) else tuple(donate_argnums)
        )
        self._cache: dict[Any, _CacheEntry] = {}
        self._last_key: Any = None

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

    def _trace(self, args, kwargs, dyn_args, dyn_kwargs, in_tree, in_avals) -> _CacheEntry:
        out_tree_box = []

        def flat_fun(*flat):
            d_args, d_kwargs = pytree.tree_unflatten(in_tree, list(flat))
            it = iter(d_args)
            full = [a if i in self.static_argnums else next(it) for i, a in enumerate(args)]
            kw = {k: (kwargs[k] if k in self.static_argnames else d_kwargs[k]) for k in kwargs}
            out_leaves, out_tree = pytree.tree_flatten(self.fun(*full, **kw))
            out_tree_box.append(out_tree)
            return out_leaves

        n_shard = _shard_traces
        jaxpr, consts = trace_to_jaxpr(flat_fun, in_avals)
        jaxpr = dce_jaxpr(jaxpr)  # e.g. the unused forward value under grad
        return _CacheEntry(jaxpr, consts, out_tree_box[0], _shard_traces != n_shard)

    def _explain_miss(self, key) -> str:
        if self._last_key is None:
            return "first call"
        (tree, avals, statics, axes), (otree, oavals, ostatics, oaxes) = key, self._last_key
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
        return "signature not seen before"

    def _lookup(self, args: tuple, kwargs: dict):
        dyn_args, dyn_kwargs, statics, donated = self._split(args, kwargs)
        leaves, in_tree = pytree.tree_flatten((dyn_args, dyn_kwargs))
        try:
            in_avals = tuple(get_aval(x) for x in leaves)
        except BluTypeError as e:
            raise BluTypeError(
                f"jit({self.name}): {e.args[0].splitlines()[0]}; pass non-array arguments as "
                "static (static_argnums=... / static_argnames=...)\n"
                + "\n".join(e.args[0].splitlines()[1:])
            ) from None
        from blu.parallel.axes import axis_env_key

        # a trace under one mesh (named axes and sizes) is not valid under another
        key = (in_tree, in_avals, statics, axis_env_key())
        entry = self._cache.get(key)
        if entry is None:
            if config.log_compiles:
                log.warning("jit(%s): tracing because %s", self.name, self._explain_miss(key))
            t0 = time.perf_counter()
            entry = self._trace(args, kwargs, dyn_args, dyn_kwargs, in_tree, in_avals)
            tracing.span_since(f"trace jit({self.name})", "trace", t0)
            if not any(isinstance(c, Tracer) for c in entry.consts):
                self._cache[key] = entry  # closures over tracers must be re-traced each time
            self._last_key = key
        n_leaf = [len(pytree.tree_leaves(a)) for a in dyn_args]
        donated_leaves = [d for d, n in zip(donated, n_leaf) for _ in range(n)]
        donated_leaves += [False] * (len(leaves) - len(donated_leaves))
        return entry, leaves, donated_leaves

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        entry, leaves, donated = self._lookup(args, kwargs)
        for leaf, d in zip(leaves, donated):
            if d and isinstance(leaf, Array):
                _release_for_donation(leaf)
        if not entry.uses_shard:
            _check_sharded_args(self.name, leaves)
        outs = jit_p.bind(
            *entry.consts,
            *leaves,
            jaxpr=_stable_hoisted(entry),
            name=self.name,
            donated_invars=(False,) * len(entry.consts) + tuple(donated),
        )
        tracing.span_since(f"jit({self.name})", "jit", t0)  # a timeline trace's host span
        return pytree.tree_unflatten(entry.out_tree, outs)

    def lower(self, *args: Any, target: str | None = None, **kwargs: Any) -> Lowered:
        """Stage for the given arguments (arrays or ``ShapeDtypeStruct``s) without running.

        With ``target="cpu"`` the program is also lowered through MLIR: ``.as_text()`` is the
        MLIR of its kernels and ``.compile()`` compiles them (into ``BLU_CACHE_DIR``).
        """
        args = pytree.tree_map(_spec_to_aval_holder, args, is_leaf=_is_spec)
        kwargs = pytree.tree_map(_spec_to_aval_holder, kwargs, is_leaf=_is_spec)
        entry, _, donated = self._lookup(args, kwargs)
        donated_invars = (False,) * len(entry.consts) + tuple(donated)
        return Lowered(self, entry, target, donated_invars)

    def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
        entry, _, _ = self._lookup(args, kwargs)
        return pytree.tree_unflatten(
            entry.out_tree, [ShapeDtypeStruct(a.shape, a.dtype) for a in entry.jaxpr.out_avals]
        )

    def clear_cache(self) -> None:
        self._cache.clear()
        self._last_key = None


_hoisted: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _stable_hoisted(entry: _CacheEntry) -> Jaxpr:
    """The hoisted jaxpr of a cache entry, made once so executables cache on its identity."""
    j = entry.jaxpr
    if not j.constvars:
        return j
    h = _hoisted.get(j)
    if h is None:
        h = _hoisted[j] = hoist_consts(j)
    return h


class _AvalHolder:
    """Stands for an argument during ``lower``: has an aval but no value."""

    __slots__ = ("aval",)

    def __init__(self, aval: ShapedArray):
        self.aval = aval


def _is_spec(x: Any) -> bool:
    return isinstance(x, ShapeDtypeStruct)


def _spec_to_aval_holder(x: Any) -> Any:
    if isinstance(x, ShapeDtypeStruct):
        return _SpecTracer(ShapedArray(x.shape, x.dtype))
    return x


class _SpecTracer(Tracer):
    """A value-less placeholder with an aval, used by ``lower`` for ShapeDtypeStruct specs."""

    __slots__ = ("_aval",)

    def __init__(self, aval: ShapedArray):
        self._interp = None
        self._aval = aval

    @property
    def aval(self) -> ShapedArray:
        return self._aval


class Lowered:
    """A staged program: ``.as_text()`` shows it, ``.compile()`` makes it runnable."""

    def __init__(self, jitted: Jitted, entry: _CacheEntry, target: str | None = None,
                 donated_invars: tuple[bool, ...] = ()):  # fmt: skip
        self.jitted = jitted
        self.entry = entry
        self.target = target
        self.donated_invars = donated_invars
        self._program = None
        if target is not None:
            if target.startswith("cuda"):
                from blu.lower.gpu import Lowered as LoweredProgram
            else:
                from blu.lower.cpu import Lowered as LoweredProgram

            self._program = LoweredProgram(
                _stable_hoisted(entry), jitted.name, target, donated_invars
            )

    @property
    def jaxpr(self) -> ClosedJaxpr:
        return ClosedJaxpr(self.entry.jaxpr, self.entry.consts)

    def as_text(self) -> str:
        """The MLIR of the program's kernels with a ``target``, else the staged jaxpr."""
        if self._program is not None:
            return self._program.as_text()
        return pp_jaxpr(self.entry.jaxpr)

    def memory_analysis(self) -> Any:
        """Argument, output, temporary and peak bytes (with a ``target``; else None)."""
        return None if self._program is None else self._program.memory_analysis()

    def compile(self) -> Compiled:
        exe = None if self._program is None else self._program.compile()
        return Compiled(self.jitted, self.entry, exe, self.donated_invars)


class Compiled:
    """A compiled program for one signature; call it with arrays of that signature."""

    def __init__(self, jitted: Jitted, entry: _CacheEntry, executable: Any = None,
                 donated_invars: tuple[bool, ...] = ()):  # fmt: skip
        self.jitted = jitted
        self.entry = entry
        self.executable = executable
        if executable is not None and getattr(executable, "target", "cpu").startswith("cuda"):
            from blu.lower import gpu_dispatch  # calls with DeviceArrays find it there

            gpu_dispatch.register(_stable_hoisted(entry), donated_invars, executable)
        elif executable is not None:  # calls with this signature run it (jit_p's impl finds it)
            per = _executables.get(_stable_hoisted(entry))
            if per is None:
                per = _executables[_stable_hoisted(entry)] = {}
            per[donated_invars] = executable

    def memory_analysis(self) -> Any:
        return None if self.executable is None else self.executable.memory_analysis()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.jitted(*args, **kwargs)

    def as_text(self) -> str:
        return pp_jaxpr(self.entry.jaxpr)


def jit(
    fun: Callable | None = None,
    *,
    static_argnums: int | Sequence[int] = (),
    static_argnames: str | Sequence[str] = (),
    donate_argnums: int | Sequence[int] = (),
) -> Any:
    """Stage ``fun`` to a jaxpr per argument signature and run it as one program.

    Args:
        fun: a function of pytrees of arrays (usable as ``@jit`` or ``@jit(static_argnums=..)``).
        static_argnums / static_argnames: arguments passed as Python values (hashable; part of
            the cache key) instead of traced arrays.
        donate_argnums: arguments whose buffers the program may reuse for outputs; the caller
            must not use them afterwards.

    Raises:
        BluTypeError: unhashable static arguments; ConcretizationError when ``fun`` needs the
            value of a traced argument (e.g. Python ``if`` on it).
    """
    if fun is None:
        return lambda f: jit(
            f,
            static_argnums=static_argnums,
            static_argnames=static_argnames,
            donate_argnums=donate_argnums,
        )
    if not callable(fun):
        raise BluValueError(with_user_line(f"jit expects a callable, got {type(fun).__name__}"))
    return Jitted(fun, static_argnums, static_argnames, donate_argnums)


def eval_shape(fun: Callable, *args: Any, **kwargs: Any) -> Any:
    """The output shapes and dtypes of ``fun`` (as ShapeDtypeStructs), without computing it."""
    args = pytree.tree_map(_spec_to_aval_holder, args, is_leaf=_is_spec)
    return Jitted(fun).eval_shape(*args, **kwargs)
