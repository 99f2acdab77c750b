"""The CPU executable: a jaxpr prepared for the CPU (``plan.prepare``), its fused kernels
compiled through MLIR (``mlir.mlir_cpu``), run on numpy arrays: the step runners of the shared
steps (``plan.steps``) for each node kind.

    exe = CpuExecutable(jaxpr, name="step", donated_invars=(True, False))
    outs = exe(*numpy_arrays)
    exe.memory_analysis()

Debugging: ``BLU_LOG_COMPILES=1`` logs every kernel compiled or loaded from the cache;
``BLU_DUMP_IR=dir`` writes each kernel's jaxpr and MLIR before and after the pass pipeline;
``BLU_DEBUG_NANS=1`` checks every node's floating-point outputs and raises at the first NaN,
naming the primitives and the user's source line.
"""

from __future__ import annotations

import ctypes
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core import trace as tracing
from blu.core.array import immutable
from blu.core.config import config
from blu.core.errors import BluValueError
from blu.core.jaxpr import Jaxpr, Literal
from blu.lower import library
from blu.lower.cpu import address, blas, chains, epilogue, hugepages, lean, spin
from blu.lower.cpu import profile as cpu_profile
from blu.lower.cpu import threads as cpu_threads
from blu.lower.cpu.control_flow import loop_runner
from blu.lower.cpu.kernels import emit_node, kernel_text, split_rows
from blu.lower.cpu.locks import TryLock
from blu.lower.cpu.options import CpuOptions
from blu.lower.cpu.rows import RowKernel, _threads
from blu.lower.mlir import llvm as mlir_cpu
from blu.lower.plan.nodes import NodeKind
from blu.lower.plan.steps import Step, literal_value
from blu.lower.program import BluFloatingPointError, Executable, log
from blu.lower.program import Lowered as _Lowered

__all__ = ["BluFloatingPointError", "CpuExecutable"]


# ---- steps ---------------------------------------------------------------------------------------


class _Kernel:
    __slots__ = ("fn", "ins", "outs", "args", "scratch", "ptrs", "packed", "node", "n", "last")

    def __init__(self, fn, ins, outs, scratch, node):
        self.fn, self.ins, self.outs, self.scratch, self.node = fn, ins, outs, scratch, node
        self.args = (*ins, *outs)  # the slots whose addresses lead the pointer array
        self.n = len(ins) + len(outs) + len(scratch)
        self.ptrs = (ctypes.c_void_p * max(self.n, 1))()
        base = ctypes.addressof(self.ptrs)
        self.packed = (ctypes.c_void_p * max(self.n, 1))(*[base + 8 * i for i in range(self.n)])
        # a loop body's kernels remember the arrays whose addresses they hold (``remember``):
        # iteration after iteration most buffers are the same objects, and reading an address
        # (``.ctypes.data``) costs more than the kernel on small arrays
        self.last: list | None = None

    def remember(self, on: bool) -> None:
        """Start (a loop's call begins) or stop (it ends: the references are dropped) reusing
        the addresses of the arrays of the previous call."""
        self.last = [None] * (len(self.args) + 1) if on else None

    def __call__(self, env: list, arena: np.ndarray | None, shared: bool = True) -> None:
        # the pointer arrays are reused across calls; a concurrent call (shared=False) makes its own
        p, packed = self.ptrs, self.packed
        last = self.last
        if not shared:
            p = (ctypes.c_void_p * max(self.n, 1))()
            base = ctypes.addressof(p)
            packed = (ctypes.c_void_p * max(self.n, 1))(*[base + 8 * i for i in range(self.n)])
            last = None
        k = 0
        if last is None:
            for s in self.args:
                p[k] = address.data(env[s])
                k += 1
        else:
            for s in self.args:
                x = env[s]
                if x is not last[k]:
                    last[k] = x
                    p[k] = address.data(x)
                k += 1
            if self.scratch and arena is last[-1]:
                self.fn(packed)
                return
            last[-1] = arena
        if self.scratch:
            base = address.data(arena)
            for off in self.scratch:
                p[k] = base + off
                k += 1
        self.fn(packed)


def _unless_nan_checks(run: Any) -> Any:
    """A step runner that runs ``run`` only when NaNs are checked (``_stream_products``)."""

    def deferred(env: list, arena: Any, owned: bool) -> None:
        if config.debug_nans:
            run(env, arena, owned)

    deferred.streamed = True  # (its work is the loop's: ``cpu/profile.py``)
    return deferred


def _nothing(env: list, arena: Any, owned: bool) -> None:
    """The step of a kernel whose output a fused product computed (``cpu/epilogue.py``)."""


POOL_BYTES = 1 << 20  # outputs this large are recycled through the executable's pool


class CpuExecutable(Executable):
    """A jaxpr compiled for the CPU (see the module docstring).

    It reads its (non-donated) numpy arguments in place, never writes them and never returns
    them (``borrows_inputs``: jit hands it a user's arrays without copying them).

    Args:
        jaxpr: the program (no constvars; ``jit`` hoists them into arguments).
        name: for logs and errors.
        donated_invars: per argument, whether the program may write into its buffer.
        options: the seam's ``Options`` (the CPU reads none of them).
        prepared: the ``prepare`` result, if already made (``jit(f).lower(...).compile()``).
    """

    def __init__(
        self,
        jaxpr: Jaxpr,
        name: str = "jit",
        donated_invars: Sequence[bool] | None = None,
        options: Any = None,
        prepared: Any = None,
    ):
        t0 = time.perf_counter()
        super().__init__(jaxpr, name, "cpu", donated_invars, options or CpuOptions(), prepared)
        kernels: dict[str, Any] = {}
        t1 = time.perf_counter()
        self.node_kernels: list[Any] = []  # per node: its compiled kernel (or None)
        for node in self.plan.nodes:
            k = None
            if node.kind.compiled:
                canon = kernel_text(node)
                k = kernels.get(canon)
                if k is None:
                    k = kernels[canon] = mlir_cpu.get_kernel(
                        canon, lambda sym, n=node: emit_node(n, sym), node.label()
                    )
            self.node_kernels.append(k)
        self.kernels = kernels
        self.timing = {"plan_s": t1 - t0, "kernels_s": time.perf_counter() - t1}
        self._trace_args: dict | None = None  # the run loop's spans, made when first traced
        st = self.steps
        self.in_slots, self.out_spec, self.n_slots = st.in_slots, st.out_spec, st.n_slots
        self.slot, self.donated_slots = st.slot, st.donated_slots
        # products run side by side (``cpu/pairs.py``): the step positions that start a pair
        pairs, ss = self.memory.concurrent, st.steps
        self._pair_at = {i for i, step in enumerate(ss) if step.index in pairs
                         and i + 1 < len(ss) and ss[i + 1].index == step.index + 1}  # fmt: skip
        self._solo = {i + d for i in self._pair_at for d in (0, 1)}
        # a pair whose pool thread ends far behind (a busy machine) runs serially for a while
        self._pair_balance = {i: cpu_threads.Balance() for i in self._pair_at}
        # products computing the update kernel after them (``cpu/epilogue.py``)
        fused = {f.dot: f for f in epilogue.find(st, self.memory)}
        done_by = {f.kernel for f in fused.values()}
        self.runners = []
        for i, step in enumerate(ss):
            allocs, run = step.allocs, None
            if i in fused:  # the kernel's output is made here, the product's is never stored
                f = fused[i]
                allocs = [a for a in ss[f.kernel].allocs if a[0] == f.out]
                run = epilogue.runner(step.node.eqns[0], f, step.ins, i in self._solo)
            elif i in done_by:
                allocs, run = [], _nothing
            self.runners.append((allocs, run or self._runner(step, i in self._solo), step.node))
        self.fused_products = len(fused)
        before = [run for _, run, _ in self.runners]
        self._stream_products()
        # a product handed to a loop (streamed) leaves its pair: its own step does nothing
        kept = [run is was for (_, run, _), was in zip(self.runners, before)]
        for i in [i for i in self._pair_at if not (kept[i] and kept[i + 1])]:
            self._pair_at.discard(i)
            for k in (i, i + 1):  # its partner splits across the threads again
                if kept[k]:
                    allocs, _, node = self.runners[k]
                    run = (epilogue.runner(ss[k].node.eqns[0], fused[k], ss[k].ins, False)
                           if k in fused else self._runner(ss[k]))  # fmt: skip
                    self.runners[k] = (allocs, run, node)

        # steps run row part by row part through each of them (``cpu/chains.py``)
        def free(i: int) -> bool:  # a step a chain may take: not paired, fused or streamed
            if isinstance(self.runners[i][1], RowKernel):
                return True
            paired = i in self._pair_at or i - 1 in self._pair_at
            return ss[i].kind == NodeKind.DOT and kept[i] and i not in fused and not paired

        # (not with spinning workers: a chain saves hand-overs, which they make cheap, and packs
        # the products' right operands once per part; the MLP training step on 2 threads was
        # slower with chains than without: docs/benchmarks/cpu_backend.md, session 9)
        self._chain_at: dict[int, tuple] = {}
        free_steps = set(filter(free, range(len(ss)))) if not spin.available() else set()
        for c in chains.find(st, self.memory, free_steps, _threads()):
            kernels = {k - c.start: self.runners[k][1] for k in range(c.start, c.end + 1)
                       if ss[k].kind == NodeKind.KERNEL}  # fmt: skip
            allocs = [a for k in range(c.start, c.end + 1) for a in self.runners[k][0]]
            run = chains.runner(c, ss[c.start : c.end + 1], kernels)
            self._chain_at[c.start] = (allocs, run, c.end)
        self._arena: np.ndarray | None = None
        self._views: dict[int, np.ndarray] | None = None
        self._arena_lock = TryLock()  # released on every exit path (``locks.py``)
        # per output, the argument whose buffer it is (a pass-through or a view), else None:
        # a user's array is read in place (``borrows_inputs``), so such an output is copied
        j, root = self.jaxpr, self.memory.root
        arg_of = {v: i for i, v in enumerate(j.invars)}
        self._out_arg = [arg_of.get(root.get(v)) if not isinstance(v, Literal) else None
                         for v in j.outvars]  # fmt: skip
        # large output buffers are reused once the caller has dropped them (no page faults)
        self._pool: dict[int, np.ndarray] = {}
        # donated arguments a kernel writes through in place (``Node.inplace``): when the
        # caller's buffer cannot be written, the output gets a copy of it (``_buffer``)
        self._inplace_args = {
            i
            for node in self.plan.nodes
            for o, k in node.inplace
            if (p := self.memory.place.get(node.outputs[o])) is not None and p[0] == "donated"
            for i in [p[1]]
        }
        self._poolable = {
            slot
            for step in st.steps
            for slot, place, aval in step.allocs
            if place[0] == "out" and aval.size * aval.dtype.itemsize >= POOL_BYTES
        }
        self._in_dtypes = [v.aval.dtype for v in self.jaxpr.invars]
        # outputs made in buffers of their own (never views of the arena)
        self._fresh_slots = {slot for step in st.steps for slot, place, _ in step.allocs
                             if place[0] == "out"}  # fmt: skip
        # numpy math in a step (products, library calls, loops, fallbacks) runs under the
        # caller's error state as numpy's matmul does; compiled kernels set no flags it reads
        kinds = {step.kind for step in st.steps}
        self._numpy_math = bool(kinds - {NodeKind.KERNEL, NodeKind.VIEW})
        # a step that may split across threads: the spinning workers are told when calls end
        self._may_split = _threads() > 1 and (
            self._numpy_math or any(isinstance(run, RowKernel) for _, run, _ in self.runners)
        )
        # the labels of the nodes run by their numpy impls, those of loop bodies included
        self.fallbacks = [n.label() for n in self.plan.nodes if n.kind == NodeKind.FALLBACK]
        for _, run, _ in self.runners:
            for body in getattr(run, "bodies", ()):
                self.fallbacks += body.exe.fallbacks
        tracing.span_since(f"compile jit({name})", "compile", t0,
                           {"target": "cpu", "nodes": len(self.plan.nodes),
                            "kernels": len(self.kernels), **self.timing})  # fmt: skip
        if config.log_compiles:
            n_kernels = sum(n.kind == NodeKind.KERNEL for n in self.plan.nodes)
            log.warning(
                "blu.jit(%s): %d nodes (%d kernels, %d distinct), planned in %.1f ms, kernels in "
                "%.1f ms; %s",
                name,
                len(self.plan.nodes),
                n_kernels,
                len(kernels),
                self.timing["plan_s"] * 1e3,
                self.timing["kernels_s"] * 1e3,
                self.memory.analysis,
            )

    # ---- the step runners -------------------------------------------------------------------

    def _runner(self, step: Step, solo: bool = False) -> Any:
        """``run(env, arena, owned)`` for one step (``env``: slot -> numpy array); ``solo``: a
        product on one thread (it runs beside another)."""
        kind, e = step.kind, step.node.eqns[0]
        if kind.compiled:
            fn = self.node_kernels[step.index].fn
            r = split_rows(step.node)
            if r:  # compiled with a row range: run in parts on blu's threads
                return RowKernel(fn, step.ins, step.outs, step.scratch, step.node, r)
            return _Kernel(fn, step.ins, step.outs, step.scratch, step.node)
        if kind == NodeKind.LOOP:  # control flow: its bodies compiled as executables
            return loop_runner(step, lambda j, tag: CpuExecutable(j, f"{self.name}/{tag}"))
        if kind == NodeKind.DOT:
            ins, (out,) = step.ins, step.outs
            product = blas.dot_runner(e, solo)
            if all(isinstance(a, int) for a in ins):
                (li, ri) = ins

                def dot(env, arena, owned):
                    product(env[li], env[ri], env[out])

                return dot

            def dot(env, arena, owned):
                vals = [env[a] if isinstance(a, int) else literal_value(a) for a in ins]
                product(vals[0], vals[1], env[out])

            return dot
        if kind == NodeKind.VIEW:
            (i,), (o,) = step.ins, step.outs
            view_of = e.primitive.lowerings["view"].cpu  # blu/lower/lowering.py

            def view(env, arena, owned):
                env[o] = view_of(e, env[i])

            return view
        if kind == NodeKind.LIBRARY:
            lowering = library.lowering_for(e, "cpu")
            ins, outs, ws = step.ins, step.outs, step.scratch

            def call(env, arena, owned):
                work = arena[ws[0] : ws[0] + step.node.workspace] if ws else None
                lowering.cpu([env[a] for a in ins], [env[o] for o in outs], work, **e.params)

            return call
        ins = [("lit", literal_value(a)) if not isinstance(a, int) else ("var", a)
               for a in step.ins]  # fmt: skip
        return lambda env, arena, owned: self._fallback((e, ins, step.outs), env, arena)

    def _stream_products(self) -> None:
        """Products hoisted out of a scan, made just before its loop and read only by it, are
        handed to the loop, which makes them on another core while it runs
        (``control_flow._Stream``); their own steps then do nothing (unless NaNs are checked:
        then they make them, and the loop does not)."""
        steps = self.steps.steps
        for i, step in enumerate(steps):
            loop = self.runners[i][1]
            if step.kind != NodeKind.LOOP or not hasattr(loop, "can_stream"):
                continue
            read_between: set = set()
            j = i - 1
            while j >= 0 and steps[j].kind == NodeKind.DOT:
                d = steps[j]
                (out,) = d.outs
                if out not in read_between and loop.can_stream(d.node.eqns[0], d.ins, out):
                    loop.stream(d.node.eqns[0], d.ins, out)
                    self.runners[j] = (d.allocs, _unless_nan_checks(self.runners[j][1]), d.node)
                read_between.update(a for a in d.ins if isinstance(a, int))
                j -= 1

    # ---- running ------------------------------------------------------------------------------

    def _take_arena(self, mine: bool = True) -> tuple[np.ndarray, bool]:
        """The executable's own arena (True: the caller then releases ``_arena_lock``), or a
        new one (False) for a concurrent call, a nested one (``mine`` False: this thread holds
        the lock already) or where ``mine`` is False."""
        if mine and self._arena_lock.try_acquire():
            if self._arena is None:  # (on huge pages where it can: ``hugepages.py``)
                self._arena = hugepages.arena(self.memory.arena_size)
            return self._arena, True
        return hugepages.arena(self.memory.arena_size), False  # a concurrent call

    def __call__(self, *args: Any) -> list[np.ndarray]:
        env: list[Any] = [None] * self.n_slots
        for slot, dtype, x in zip(self.in_slots, self._in_dtypes, args, strict=True):
            if type(x) is not np.ndarray:
                x = np.asarray(x)
            if x.dtype != dtype:
                x = x.astype(dtype)
            env[slot] = x if x.flags.c_contiguous else np.ascontiguousarray(x)
        # the arguments that share memory with another (for donation): this call's own, found
        # when a donated buffer is first placed (concurrent calls each have theirs)
        overlap: list = [None]
        errs = np.errstate(over="ignore", invalid="ignore") if self._numpy_math else None
        # everything taken is given back in ``finally``, whatever is raised where (an interrupt
        # right after the arena's lock was taken too: ``TryLock``)
        mine, errs_on, entered = self._arena_lock.free_here(), False, False
        try:
            arena, owned = self._take_arena(mine)
            blas.use_threads(1)  # numpy's BLAS single-threaded (blas.py says why)
            if errs is not None:  # products: as numpy's matmul
                errs.__enter__()
                errs_on = True
            tw = tracing.current()  # a timeline trace: one span per step, memory counters
            if tw is not None:
                cpu_profile.memory_counters(self, tw, env, start=True)
            if self._may_split:  # spinning workers may wait for parts until the outermost call
                entered = True  # ends (before: ``leave`` tolerates one ``enter`` missed)
                spin.enter()
            pool = self._poolable if owned else ()
            # the arena's buffers as arrays, made once (the executable's own arena persists)
            views = self._views if owned and self._views is not None else self._arena_views(arena)
            if owned:
                self._views = views
            debug_nans = config.debug_nans
            pair_at = self._pair_at if not debug_nans else ()
            chain_at = self._chain_at if not debug_nans else {}
            spans = cpu_profile.spans(self, _threads(), not debug_nans) if tw is not None else None
            runners, n_steps, n_step = self.runners, len(self.runners), 0
            while n_step < n_steps:
                k = n_step
                allocs, run, node = runners[n_step]
                chain = chain_at.get(n_step)
                if chain is not None:  # steps up to ``end`` run as one, by rows
                    allocs, run, end = chain
                t = time.perf_counter() if tw is not None else 0.0
                paired = n_step in pair_at
                for slot, place, aval in allocs + runners[n_step + 1][0] if paired else allocs:
                    v = views.get(slot)
                    if v is not None:
                        env[slot] = v
                    elif slot in pool:
                        env[slot] = self._pooled(slot, aval)
                    else:
                        env[slot] = self._buffer(place, aval, arena, env, args, overlap)
                if paired:  # the next product on a pool thread, this one here
                    other = runners[n_step + 1][1]

                    def both(lo: int, hi: int, run: Any = run, other: Any = other) -> None:
                        if lo == 0:  # (0, 2): one after the other here (``Balance.solo``)
                            run(env, arena, owned)
                        if hi == 2:
                            other(env, arena, owned)

                    cpu_threads.run_parts(both, [(0, 1), (1, 2)], self._pair_balance[n_step],
                                          native=True)  # fmt: skip
                    n_step += 2
                else:
                    run(env, arena, owned)
                    n_step = n_step + 1 if chain is None else end + 1
                    if debug_nans:
                        self._check_nans(node, env)
                if spans is not None:  # one span per step, pair or chain, with its work
                    tw.span(spans[k][0], "device", t, pid=tracing.EXECUTABLE, args=spans[k][1])
            if tw is not None:
                cpu_profile.memory_counters(self, tw, env, start=False)
            outs = []
            for (kind, x), a in zip(self.out_spec, self._out_arg):
                if kind == "lit":
                    outs.append(x.copy())
                    continue
                y = env[x]
                if x not in self._fresh_slots and np.may_share_memory(y, arena):  # never hand
                    # out the arena
                    y = y.copy()
                elif a is not None and isinstance(args[a], np.ndarray) and not immutable(args[a]):
                    y = y.copy()  # a user's array (read in place) is never handed back, unless
                    # nothing can write it (``immutable``: not a read-only view of a writable one)
                outs.append(y)
            return outs
        finally:
            if entered:
                spin.leave()
            if errs_on:
                errs.__exit__(None, None, None)
            self._arena_lock.release_if_held(mine)

    borrows_inputs = True

    def lean(self) -> Any:
        """``run(*arrays)`` skipping the general call's machinery, for jit's fast path, where
        the program is only plain kernels (``cpu/lean.py``), else None."""
        return lean.runner(self, _Kernel)

    def _pooled(self, slot: int, aval: Any) -> np.ndarray:
        """The pooled buffer of output ``slot`` if nothing outside the pool holds it any more
        (the caller dropped the result, views of it included), else a new one (pooled)."""
        b = self._pool.get(slot)
        if b is not None and sys.getrefcount(b) == 3:  # the pool, ``b`` and the call's argument
            b.flags.writeable = True  # the Array wrapping it had made it read-only
            return b
        b = self._pool[slot] = np.empty(aval.shape, aval.dtype)
        return b

    def _buffer(self, place: tuple, aval: Any, arena: np.ndarray, env: list, args: tuple,
                overlap: list | None = None) -> np.ndarray:  # fmt: skip
        """The buffer of one allocation (``place``: arena, donated argument or fresh).
        ``overlap`` is the calling call's own one-element holder of its overlap analysis
        (``_overlapping`` of its arguments, computed once per call when first needed)."""
        kind = place[0]
        if kind == "arena":
            n = aval.size * aval.dtype.itemsize
            return arena[place[1] : place[1] + n].view(aval.dtype).reshape(aval.shape)
        if kind == "donated":
            x = env[self.in_slots[place[1]]]
            ok = (
                x.flags.writeable
                and x.flags.c_contiguous
                and x.nbytes == aval.size * aval.dtype.itemsize
            )
            if ok:  # once per call: O(n log n), not O(n^2); never shared between calls
                if overlap is None:
                    overlap = [None]
                if overlap[0] is None:
                    overlap[0] = _overlapping([env[s] for s in self.in_slots])
            if ok and place[1] not in overlap[0]:
                if x.shape == aval.shape and x.dtype == aval.dtype:
                    return x  # itself, not a view: the result can be donated again next call
                return x.reshape(-1).view(np.uint8).view(aval.dtype).reshape(aval.shape)
            if place[1] in self._inplace_args:
                # the kernel writes this output through the argument's pointer: give it a copy
                # of the argument in place of the argument (read by no later step)
                y = np.array(x, order="C", copy=True)
                env[self.in_slots[place[1]]] = y
                return y.reshape(aval.shape)
        return np.empty(aval.shape, aval.dtype)

    def _arena_views(self, arena: np.ndarray) -> dict[int, np.ndarray]:
        views = {}
        for slot, place, aval in self.steps.allocs:
            if place[0] == "arena":
                n = aval.size * aval.dtype.itemsize
                views[slot] = arena[place[1] : place[1] + n].view(aval.dtype).reshape(aval.shape)
        return views

    def _fallback(self, step: tuple, env: list, arena: np.ndarray) -> None:
        e, ins, outs = step
        vals = [x if kind == "lit" else env[x] for kind, x in ins]
        res = e.primitive.impl(*vals, **e.params)
        res = res if e.primitive.multiple_results else [res]
        for slot, v, r in zip(outs, e.outvars, res):
            r = np.asarray(r)
            if r.dtype != v.aval.dtype:
                r = r.astype(v.aval.dtype)
            if (
                not r.flags.c_contiguous
                or np.may_share_memory(r, arena)
                or any(np.may_share_memory(r, env[s]) for s in self.in_slots)
            ):
                r = r.copy()  # kernels read dense row-major buffers; temporaries die early
            env[slot] = r

    def _check_nans(self, node: Any, env: list) -> None:
        for v in node.outputs:
            x = env[self.slot[v]] if v in self.slot else None
            if x is None or not dtypes.is_float(v.aval.dtype):
                continue
            if np.isnan(x.astype(np.float32) if x.dtype.itemsize < 4 else x).any():
                srcs = sorted({e.source for e in node.eqns if e.source})
                raise BluFloatingPointError(
                    f"jit({self.name}): NaN in the output {v.aval.str_short()} of {node.label()}"
                    + (f"\n  from {'; '.join(srcs[:3])}" if srcs else "")
                )


class Lowered(_Lowered):
    """A jaxpr lowered for the CPU (``jit(f).lower(..., target="cpu")``; see ``Lowered`` of
    ``blu.lower.program``)."""

    executable = CpuExecutable

    def __init__(
        self,
        jaxpr: Jaxpr,
        name: str = "jit",
        target: str = "cpu",
        donated_invars: Sequence[bool] | None = None,
        options: Any = None,
    ):
        if target != "cpu":
            raise BluValueError(
                f"blu.jit(...).lower(target={target!r}): the CPU backend lowers only for 'cpu' "
                "(the CUDA target is 'cuda:sm_XX', e.g. 'cuda:sm_90')"
            )
        super().__init__(jaxpr, name, target, donated_invars, options or CpuOptions())


_byte_bounds = getattr(np.lib, "array_utils", np).byte_bounds  # numpy 2 moved it


def _overlapping(arrays: list[np.ndarray]) -> set[int]:
    """Indices of the arrays whose memory extent overlaps another one's (a donated argument
    that another argument reads must not be written over). Extents, not exact elements: two
    interleaved strided views count as overlapping, as ``np.may_share_memory`` says."""
    spans = sorted(
        (lo, hi, i) for i, a in enumerate(arrays) if a.nbytes for lo, hi in [_byte_bounds(a)]
    )
    out: set[int] = set()
    end, owner = -1, -1
    for lo, hi, i in spans:
        if lo < end:
            out.update((i, owner))
        if hi > end:
            end, owner = hi, i
    return out
