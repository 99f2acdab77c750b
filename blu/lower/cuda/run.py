"""Running a ``GpuExecutable`` on a device: buffers, launches, loops, host fallbacks, CUDA
graphs.

``Bound`` is an executable bound to one device: its steps with kernel functions loaded into the
device's context (or, on a fake device, their CPU builds). A call assigns every value a device
address — arguments, planned arena offsets, fresh outputs, donated arguments' buffers — then
queues the steps on the device's stream.

Control flow is a loop node (``loops.py``): its bodies run from the loop's workspace.

Graphs (``BLU_CUDA_GRAPHS``: by default "auto", a large program with small fresh outputs such
as a training step; ``_graphs_enabled``): a plan without host fallbacks (and no ``while`` or
``cond``, which read a value on the host) is captured from its second call on. A graph bakes in
addresses, so its arena and its non-donated outputs live in buffers the binding keeps; small
arguments are copied into kept staging buffers (a token batch changes every step; a donated
argument that no output is written into comes back in a fresh buffer); large ones and
donated ones written in place (the same address comes back each step) key the graph.
Outputs are copied out of the kept buffers into fresh arrays after the replay; outputs in
donated arguments take the arguments' buffers over.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core import trace as tracing
from blu.core.array import Array
from blu.core.config import config
from blu.core.errors import BluError, BluValueError
from blu.core.jaxpr import Var
from blu.cuda.array import DeviceArray, default_device
from blu.cuda.cublaslt import gemm_spec
from blu.cuda.errors import CudaOutOfMemoryError
from blu.cuda.profile import compute_class, peaks_for, profiler
from blu.lower import library
from blu.lower.cuda import outputs
from blu.lower.cuda.codegen_strided import ALIGN
from blu.lower.cuda.kernels import call_host_kernel, host_kernel
from blu.lower.cuda.loops import LoopStep
from blu.lower.cuda.memory_checks import failed_what, held_by_others
from blu.lower.plan.memory_report import out_of_memory_error
from blu.lower.plan.nodes import NodeKind
from blu.lower.plan.steps import Step, literal_value
from blu.lower.program import BluFloatingPointError
from blu.lower.tracing import step_args

STAGE_BYTES = 64 << 20  # non-donated arguments up to this size are copied into graph staging
MAX_GRAPHS = 4


def _precision(eqn: Any, default: str) -> str:
    p = eqn.params.get("precision")
    if isinstance(p, (tuple, list)):
        p = p[0]
    p = str(getattr(p, "name", p) or "default").lower()
    return default if p in ("default", "none") else p


def fit_block(fn: Any, block: int) -> int:
    """The threads per block a fused kernel's launch can have: ``block``, or, where the compiled
    function cannot run that many (``CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK``: its registers per
    thread times ``block`` exceed the SM's register file, e.g. a reduction combining many large
    operands at 1,024 threads), the largest power of two it can. Correct for blu's fused kernels:
    the combine nests stride over their rows by ``gpu.block_dim`` and reduce with
    ``gpu.all_reduce``, so any block size computes the same result; the map and thread nests use
    256 threads, which every kernel can run; row nests and row groups, whose loops step by the
    block known at emission (or whose threads own fixed points of a row), are compiled for
    their block (``nvvm.maxntid``: ptxas spills rather than exceed it), so they always fit."""
    try:
        most = int(fn.attribute("MAX_THREADS_PER_BLOCK"))
    except (AttributeError, TypeError, ValueError):  # a stand-in function (tests, fakes)
        return block
    if block <= most:
        return block
    fit = 32
    while fit * 2 <= most:
        fit *= 2
    return fit


class GpuFallbackError(BluError):
    """A primitive without a GPU lowering failed in its host fallback."""


def bound_for(exe: Any, args: Any) -> Bound:
    """``exe`` bound to the device of its first device-array argument (else the default)."""
    dev = next((a.device for a in args if isinstance(a, DeviceArray)), None) or default_device()
    bound = exe._bound.get(dev)
    if bound is None:
        bound = exe._bound[dev] = Bound(exe, dev)
    return bound


def run(exe: Any, args: tuple) -> list[Any]:
    return bound_for(exe, args)(args)


GRAPH_MIN_STEPS = 64  # "auto": smaller programs gain little from a graph and pay its capture


def _graphs_enabled(steps: list, allocs: list) -> bool:
    """``config.cuda_graphs``: True/False, or "auto": a program of at least
    ``GRAPH_MIN_STEPS`` steps (a scan's counting each iteration's) whose fresh outputs (not
    written into donated arguments) fit in ``STAGE_BYTES`` — a training step. A replay copies
    its fresh outputs out of kept buffers and keeps its arena between calls, which programs
    with large outputs would pay for. (The GPT-2 124M step on the H200, bf16, ran faster
    replayed than launched.)"""
    mode = config.cuda_graphs
    if mode != "auto":
        return bool(mode)
    fresh = sum(a.size * a.dtype.itemsize for _, place, a in allocs if place[0] == "out")
    n = sum(s[1].launches if s[0] == NodeKind.LOOP else 1 for s in steps)
    return n >= GRAPH_MIN_STEPS and fresh <= STAGE_BYTES


class Bound:
    """A ``GpuExecutable`` bound to one device: the shared steps (``exe.steps``) with their
    runners' information (kernel functions loaded into the device's context, or on a fake
    device their CPU builds; products' cuBLASLt specs; library calls)."""

    def __init__(self, exe: Any, dev: Any):
        self.exe, self.dev = exe, dev
        self.fake = dev.platform == "fake"
        st = exe.steps
        self.in_slots, self.slot, self.n_slots = st.in_slots, st.slot, st.n_slots
        self.allocs: list[tuple[int, tuple, Any]] = st.allocs  # (slot, place, aval) planned
        if not self.fake:
            dev.activate()
        self.steps = [self._runner(step) for step in st.steps]
        self.work = [_work(step[0], step[1], step[3]) for step in self.steps]  # for BLU_PROFILE
        if profiler.enabled and not self.fake:  # the fractions of peak against this device's
            profiler.peaks = peaks_for(getattr(dev, "device_kind", ""))
        self.graphable = (not self.fake and self.graph_safe()
                          and _graphs_enabled(self.steps, self.allocs))  # fmt: skip
        self.trace_args: list[dict] | None = None  # per step, for timeline traces
        self.calls = 0
        self.graphs: OrderedDict = OrderedDict()
        self.kept: dict[str, Any] = {}
        self.recipes: list[tuple] | None = None  # ``outputs.out_recipes``, made on the first call
        self.takeovers: list[tuple] | None = None  # and split (``outputs.takeovers_of``)
        self.others: list[int] = []
        self.donated_into = sorted({p[1] for _, p, _ in self.allocs if p[0] == "donated"})
        # per argument, whether a graph replay copies it into a kept staging buffer: a small one
        # that no output is written into (a donated one the plan cannot write into comes back in
        # a fresh buffer; keyed by its address, each call would capture anew: ResNet-50's step)
        staged = [
            v.aval.size * v.aval.dtype.itemsize <= STAGE_BYTES and i not in self.donated_into
            for i, v in enumerate(exe.jaxpr.invars)
        ]
        self.staged_at = [i for i, s in enumerate(staged) if s]
        self.keyed_at = [i for i, s in enumerate(staged) if not s]
        self.pick_keyed = _picker(self.keyed_at)
        self.n_in = len(exe.jaxpr.invars)
        self.donated_at = [i for i, d in enumerate(exe.donated) if d]
        self.pick_donated = _picker(self.donated_at)
        self.pick_kept = _picker([i for i, d in enumerate(exe.donated) if not d])
        self.into_donated = all(exe.donated[i] for i in self.donated_into)
        # host arguments copied to the device and kept, by position, while the same immutable
        # object comes back (a trace's constants: LLaMA-1B's 64 RoPE tables, 32 MB, were
        # copied to the device at every step; ``_host_arg``)
        self.host_copies: dict[int, tuple[Any, DeviceArray]] = {}
        self.returned: set[int] | None = None  # arguments an output returns as they are
        self.arena_tag = f"jit({exe.name}) temporaries"  # the allocator's name for the blocks
        self.out_tags: dict[Any, str] = {}

    def graph_safe(self) -> bool:
        """Whether a CUDA graph can capture a call: no step waits for the GPU (no host
        fallback, no while or cond) and every library call can be captured."""
        for kind, info, _, _ in self.steps:
            if kind == NodeKind.FALLBACK or (kind == NodeKind.LOOP and not info.graph_safe):
                return False
            if kind == NodeKind.LIBRARY and not info[0].graph_safe:
                return False
        return True

    def _runner(self, step: Step) -> tuple:
        """``(kind, info, refs, node)``: what ``_step`` needs to run one step on this device."""
        exe, node, k = self.exe, step.node, step.index
        kind, e = step.kind, node.eqns[0]
        if kind == NodeKind.LOOP:  # control flow: its bodies' executables, bound here too
            loop = LoopStep(self, step, [Bound(b, self.dev) for b in exe.loop_bodies[k]])
            return (NodeKind.LOOP, loop, None, node)
        if kind.compiled:
            refs = [("s", x) for x in step.ins] + [("s", x) for x in step.outs]
            refs += [("a", off) for off in step.scratch]
            if self.fake:
                return ("host_kernel", host_kernel(node), refs, node)
            module = _module(self.dev, exe.modules[k])
            # a scatter's operand copy (``<sym>_0``) is skipped when it updates in place
            fns = []
            for la in exe.launches[k]:
                fn = module.function(la.func)
                if la.shared > 48 * 1024:  # a row group's stash (codegen_stash)
                    fn.set_max_dynamic_shared_memory(la.shared)
                fns.append((fn, la.grid, fit_block(fn, la.block), la.shared,
                            kind == NodeKind.SCATTER and la.func.endswith("_0")))  # fmt: skip
            return (NodeKind.KERNEL, fns, refs, node)
        if kind == NodeKind.DOT:
            lhs, rhs = e.invars
            spec = gemm_spec(lhs.aval.shape, rhs.aval.shape, e.params["dimension_numbers"])
            assert spec is not None, "canonicalize_dots left an unreadable layout"
            out = e.outvars[0]
            nbytes = out.aval.size * out.aval.dtype.itemsize
            (ls, rs), (os_,) = step.ins, step.outs
            info = (spec, ls, rs, os_, lhs.aval.dtype, out.aval.dtype,
                    _precision(e, exe.precision), nbytes)  # fmt: skip
            return (NodeKind.DOT, info, None, node)
        if kind == NodeKind.VIEW:
            return (NodeKind.VIEW, (step.ins[0], step.outs[0]), None, node)
        if kind == NodeKind.LIBRARY:
            lowering = library.lowering_for(e, exe.target)
            mods = exe.library_modules.get(k)
            extra = {}
            if mods and not self.fake:  # blu's own kernels the call launches
                extra["_modules"] = [_module(self.dev, m) for m in mods]
            if lowering.product or lowering.precision:  # as a dot_general node's
                extra["_precision"] = _precision(e, exe.precision)
            info = (lowering, e, step.ins, step.outs, step.scratch, extra)
            return (NodeKind.LIBRARY, info, None, node)
        ins = [("var", x) if isinstance(x, int) else ("lit", literal_value(x)) for x in step.ins]
        return (NodeKind.FALLBACK, (e, ins, step.outs), None, node)

    # ---- one call -----------------------------------------------------------------------------

    def __call__(self, args: Any) -> list[Any]:
        exe, dev = self.exe, self.dev
        arrays = list(args)
        if len(arrays) != self.n_in:
            raise BluValueError(f"jit({exe.name}): {len(arrays)} arguments for a program of "
                                f"{self.n_in}")  # fmt: skip
        for i, a in enumerate(arrays):
            if type(a) is DeviceArray and a.device is dev:  # (the usual case, inline)
                p = a._ptr
                if p is not None and not p % ALIGN:
                    continue
            arrays[i] = self._arg(i, a)
        donatable = self._donatable(arrays)
        self.calls += 1
        graph = self.graphable and self.calls >= 2 and not profiler.enabled
        if graph and self._graph_ok(donatable):
            return self._call_graph(arrays, donatable)
        ptr: list[int] = [0] * self.n_slots
        keep: list[Any] = [None] * self.n_slots
        for sl, a in zip(self.in_slots, arrays):
            ptr[sl], keep[sl] = a.ptr, a
        try:
            arena_ptr = 0  # (a program without temporaries: no arena to take)
            if exe.memory.arena_size:
                arena = DeviceArray.empty((exe.memory.arena_size,), np.uint8, dev,
                                          tag=self.arena_tag)  # fmt: skip
                keep.append(arena)
                arena_ptr = arena.ptr
            self._assign(ptr, keep, arrays, donatable, arena_ptr, persistent=False)
        except CudaOutOfMemoryError as e:
            raise self._oom_report(e, arrays, keep) from None
        self._launch_all(ptr, keep, arena_ptr)
        return outputs.make_outputs(self, ptr, keep, arrays, donatable, copy_out=False)

    def _arg(self, i: int, a: Any) -> DeviceArray:
        """Argument ``i`` as this device's aligned array: a host one or another device's
        copied here (``_host_arg``), one at an unaligned address copied (kernels assume
        aligned buffers: vector accesses). Raises ``BluValueError`` for a deleted array."""
        if not isinstance(a, DeviceArray) or a.device is not self.dev:
            return self._host_arg(i, a, self.exe.jaxpr.invars[i].aval.dtype)
        if a.ptr % ALIGN and a.nbytes and not self.fake:
            return _aligned_copy(a, self.dev)
        return a

    def _host_arg(self, i: int, a: Any, dtype: Any) -> DeviceArray:
        """Argument ``i``, not on this device, copied to it; kept for the next call where ``a``
        is a blu ``Array`` on the host (immutable: a trace's constants are such Arrays; a
        read-only numpy array is not kept, numpy lets its owner write it again) and the copy
        stays this binding's (the argument is not donated, and no output returns it as is),
        then reused while the same Array comes back undeleted (``self.host_copies``; a deleted
        one takes the copying path, which raises naming it)."""
        hit = self.host_copies.get(i)
        if hit is not None and hit[0] is a and a._deleted is None:
            return hit[1]
        self.host_copies.pop(i, None)
        d = _put(np.asarray(a, dtype), self.dev)
        if self.returned is None:
            self.recipes = self.recipes or outputs.out_recipes(self)
            self.returned = {r[1] for r in self.recipes if r[0] in ("arg", "donated")}
        if type(a) is Array and not self.exe.donated[i] and i not in self.returned:
            self.host_copies[i] = (a, d)
        return d

    def _oom_report(self, e: CudaOutOfMemoryError, arrays: list, keep: list) -> Exception:
        """The allocator's out-of-memory error while this call took its arena and outputs, as
        the plan's report (``plan.memory_report``): the bytes asked and free, the plan's largest
        buffers at its peak, and what other live arrays hold. Frees what the call took."""
        err = out_of_memory_error(
            self.exe.name, self.exe.plan, self.exe.memory,
            asked=e.nbytes, free=e.free_bytes, what=failed_what(e.tag), where=str(self.dev),
            donated=self.exe.donated,
            **held_by_others(self.dev.allocator, [*arrays, *keep, *self.kept.values()]),
        )  # fmt: skip
        keep.clear()  # what this call took goes back to the allocator
        return err

    def _donatable(self, arrays: list[DeviceArray]) -> Any:
        """Per argument, whether its buffer may be taken over: donated, owning its buffer
        (``_block``), and passed once. ``exe.donated`` itself where each donated one may be (a
        training step's state, checked in C: the donated arguments' blocks are distinct and
        none is another argument's, so no donated array is passed twice)."""
        donated = self.exe.donated
        if not self.donated_at:
            return donated
        blocks = set(map(_block, self.pick_donated(arrays)))
        if (len(blocks) == len(self.donated_at) and None not in blocks
                and blocks.isdisjoint(map(_block, self.pick_kept(arrays)))):  # fmt: skip
            return donated
        if len(set(map(id, arrays))) == len(arrays):  # (none passed twice)
            return [d and a._block is not None for d, a in zip(donated, arrays)]
        seen = Counter(map(id, arrays))  # an array passed twice is not taken over
        return [d and a._block is not None and seen[id(a)] == 1 for d, a in zip(donated, arrays)]

    def _assign(self, ptr, keep, arrays, donatable, arena_ptr, persistent) -> None:
        """Addresses of every planned buffer (arena offsets, outputs, donated arguments)."""
        for sl, place, aval in self.allocs:
            kind = place[0]
            if kind == "arena":
                ptr[sl] = arena_ptr + place[1]
            elif kind == "donated" and donatable[place[1]]:
                ptr[sl] = arrays[place[1]].ptr
            else:  # an output (or a donated one whose argument cannot be taken over)
                if persistent:
                    buf = self.kept.get(("out", sl))
                    if buf is None:
                        buf = self.kept[("out", sl)] = DeviceArray.empty(
                            aval.shape, aval.dtype, self.dev, tag=self._out_tag(aval)
                        )
                else:
                    buf = DeviceArray.empty(aval.shape, aval.dtype, self.dev,
                                            tag=self._out_tag(aval))  # fmt: skip
                ptr[sl], keep[sl] = buf.ptr, buf

    def _out_tag(self, aval: Any) -> str:
        tag = self.out_tags.get(aval)  # (made once: a call takes its outputs at every step)
        if tag is None:
            tag = self.out_tags[aval] = f"jit({self.exe.name}) output {aval.str_short()}"
        return tag

    def _launch_all(self, ptr: list[int], keep: list[Any], arena_ptr: int) -> None:
        if profiler.enabled:  # BLU_PROFILE=1: each step between two events
            tw = tracing.current()
            if tw is not None and self.trace_args is None:
                self.trace_args = [step_args(step[3]) for step in self.steps]
            labels = self.trace_args if tw is not None else [None] * len(self.steps)
            if tw is not None:  # the allocator's bytes, as the call starts
                st = self.dev.allocator.stats()
                mem = {"allocated": st.get("allocated_bytes", 0),
                       "reserved": st.get("reserved_bytes", 0)}  # fmt: skip
                tw.counter(f"memory {self.dev}", mem)
            with profiler.call(f"jit({self.exe.name})", self.dev.stream_id):
                for step, (name, nbytes, flops, peak), lab in zip(self.steps, self.work, labels):
                    with profiler.region(name, self.dev.stream_id, nbytes, flops, lab, peak):
                        self._step(step, ptr, keep, arena_ptr)
        else:
            for step in self.steps:
                self._step(step, ptr, keep, arena_ptr)

    def _step(self, step: tuple, ptr: list[int], keep: list[Any], arena_ptr: int) -> None:
        kind, info, refs, node = step
        dev = self.dev
        if kind in (NodeKind.KERNEL, "host_kernel"):
            addrs = [ptr[x] if t == "s" else arena_ptr + x for t, x in refs]
            if kind == NodeKind.KERNEL:
                for fn, grid, block, shared, copy in info:
                    if not (copy and addrs[0] == addrs[3]):
                        fn.launch(grid, block, addrs, shared, stream=dev.stream_id)
            else:
                call_host_kernel(info, addrs)
        elif kind == NodeKind.DOT:
            spec, ls, rs, os_, in_dt, out_dt, precision, nbytes = info
            if spec.m and spec.n:
                if spec.k == 0:
                    dev.memset(ptr[os_], 0, nbytes)
                else:
                    dev.matmul_handle().matmul(
                        spec, ptr[rs], ptr[ls], ptr[os_], in_dtype=in_dt, out_dtype=out_dt,
                        precision=precision, stream=dev.stream_id,
                    )  # fmt: skip
        elif kind == NodeKind.VIEW:
            i, o = info
            ptr[o], keep[o] = ptr[i], keep[i]
        elif kind == NodeKind.LIBRARY:
            self._library(info, ptr, arena_ptr)
        elif kind == NodeKind.LOOP:
            info.run(ptr, keep, arena_ptr)
        else:
            self._fallback(info, ptr, keep)
        if config.debug_nans:
            self._check_nans(node, ptr)

    def _library(self, info: tuple, ptr: list[int], arena_ptr: int) -> None:
        lowering, e, ins, outs, ws, extra = info
        work = arena_ptr + ws[0] if ws else 0
        if self.fake:  # host memory: the lowering's CPU form on views of the planned buffers
            from blu.cuda.fake import _host_view

            view = lambda p, a: _host_view(p, a.size, a.dtype).reshape(a.shape)  # noqa: E731
            lowering.cpu([view(ptr[x], a.aval) for x, a in zip(ins, e.invars)],
                         [view(ptr[x], v.aval) for x, v in zip(outs, e.outvars)],
                         None, **e.params)  # fmt: skip
            return
        lowering.gpu(self.dev, self.dev.stream_id, [ptr[x] for x in ins], [ptr[x] for x in outs],
                     work, [a.aval for a in e.invars], [v.aval for v in e.outvars],
                     **e.params, **extra)  # fmt: skip

    def _fallback(self, info: tuple, ptr: list[int], keep: list[Any]) -> None:
        e, ins, outs = info
        dev = self.dev
        try:
            vals = [x if kind == "lit" else _host(dev, ptr[x], a.aval)
                    for (kind, x), a in zip(ins, e.invars)]  # fmt: skip
            res = e.primitive.impl(*vals, **e.params)
            res = res if e.primitive.multiple_results else [res]
            res = [_put(np.asarray(r, v.aval.dtype), dev) for r, v in zip(res, e.outvars)]
        except BluError:
            raise
        except Exception as err:  # noqa: BLE001 - name the primitive and the user's line
            raise GpuFallbackError(
                f"jit({self.exe.name}): {e.primitive.name} (run on the host) failed: {err}"
                + (f"\n  from {e.source}" if e.source else "")
            ) from err
        for sl, r in zip(outs, res):
            ptr[sl], keep[sl] = r.ptr, r

    def _check_nans(self, node: Any, ptr: list[int]) -> None:
        for v in node.outputs:
            if v not in self.slot or not dtypes.is_float(v.aval.dtype):
                continue
            x = _host(self.dev, ptr[self.slot[v]], v.aval)
            if np.isnan(x.astype(np.float32) if x.dtype.itemsize < 4 else x).any():
                srcs = sorted({e.source for e in node.eqns if e.source})
                raise BluFloatingPointError(
                    f"jit({self.exe.name}): NaN in the output {v.aval.str_short()} of "
                    f"{node.label()} on {self.dev}"
                    + (f"\n  from {'; '.join(srcs[:3])}" if srcs else "")
                )

    # ---- graphs -------------------------------------------------------------------------------

    def _graph_ok(self, donatable: Any) -> bool:
        if donatable is self.exe.donated:  # (each donated argument taken over)
            return self.into_donated
        return all(map(donatable.__getitem__, self.donated_into))

    def _call_graph(self, arrays: list[DeviceArray], donatable: list[bool]) -> list[Any]:
        from blu.cuda.graph import Graph

        exe, dev, kept = self.exe, self.dev, self.kept
        # small and not donated: copied into a kept buffer the graph reads (a kept host copy
        # has the same address each call: it keys the graph, as a large argument does); the
        # others key the graph by position (which are staged varies with the kept copies)
        host = self.host_copies
        key = [tuple(map(_ptr, self.pick_keyed(arrays)))]  # (the keyed ones' in order)
        stage = []
        for i in self.staged_at:
            a = arrays[i]
            if host and i in host and host[i][1] is a:
                key.append((i, a._ptr))
            else:
                stage.append(i)
        for i in stage:
            a = arrays[i]
            buf = kept.get(i)
            if buf is None:
                buf = kept[i] = DeviceArray.empty(a.shape, a.dtype, dev)
            if a.nbytes:
                dev.copy_d2d(buf._ptr, a._ptr, a.nbytes)
        key_t = tuple(key)
        entry = self.graphs.get(key_t)
        if entry is None:  # capture: every planned buffer's address (kept between calls)
            ptr: list[int] = [0] * self.n_slots
            keep: list[Any] = [None] * self.n_slots
            for sl, a in zip(self.in_slots, arrays):
                ptr[sl], keep[sl] = a._ptr, a
            for i in stage:
                sl = self.in_slots[i]
                ptr[sl], keep[sl] = kept[i]._ptr, kept[i]
            try:
                arena = kept.get("arena")
                if arena is None:
                    arena = kept["arena"] = DeviceArray.empty(
                        (max(exe.memory.arena_size, 1),), np.uint8, dev,
                        tag=self.arena_tag,
                    )  # fmt: skip
                self._assign(ptr, keep, arrays, donatable, arena.ptr, persistent=True)
            except CudaOutOfMemoryError as e:
                raise self._oom_report(e, arrays, keep) from None
            if len(self.graphs) >= MAX_GRAPHS:
                _, (old, _) = self.graphs.popitem(last=False)
                old.destroy()
            g = Graph()
            with g.capture(dev.stream):
                self._launch_all(ptr, keep, arena.ptr)
            entry = self.graphs[key_t] = (g, list(ptr))
        else:  # a replay: the addresses are the captured ones (the key and kept buffers)
            self.graphs.move_to_end(key_t)
        g, captured = entry
        g.replay(dev.stream)
        return outputs.make_outputs(self, captured, None, arrays, donatable, copy_out=True)


_ptr, _block = attrgetter("_ptr"), attrgetter("_block")


def _picker(at: list[int]) -> Any:
    """``xs -> tuple(xs[i] for i in at)``, in C (``itemgetter``: which returns a lone item
    alone)."""
    if len(at) > 1:
        return itemgetter(*at)
    return (lambda xs: (xs[at[0]],)) if at else (lambda xs: ())


def _nbytes(vs: Any) -> int:
    return sum(v.aval.size * v.aval.dtype.itemsize for v in {id(v): v for v in vs}.values())


def _work(kind: str, info: Any, node: Any) -> tuple[str, int, int, str]:
    """A step's profile row name, minimal bytes (inputs read once, outputs written once),
    floating-point operations, and the peak to compare with (``blu.cuda.profile.Peaks``: a
    product's compute class, else "copy")."""
    out = node.outputs[0].aval.str_short() if node.outputs else ""
    if kind == NodeKind.DOT:
        spec, in_dt, precision = info[0], info[4], info[6]
        e = node.eqns[0]
        ins = "x".join(a.aval.str_short() for a in e.invars)
        flops = 2 * spec.batch * spec.m * spec.n * spec.k
        peak = compute_class(np.dtype(in_dt).name, precision)
        return f"cublasLt {ins} {precision}", _nbytes([*e.invars, *e.outvars]), flops, peak
    ins = node.inputs if kind != NodeKind.FALLBACK else [a for a in node.eqns[0].invars
                                                  if isinstance(a, Var)]  # fmt: skip
    nbytes = _nbytes([*ins, *node.outputs])
    if kind == NodeKind.LIBRARY and info[0].product:  # a product with an epilogue: its FLOPs
        e, precision = info[1], info[5].get("_precision", "default")
        lhs, rhs = e.invars[:2]
        spec = gemm_spec(lhs.aval.shape, rhs.aval.shape, e.params["dimension_numbers"])
        if spec is not None:
            flops = 2 * spec.batch * spec.m * spec.n * spec.k
            peak = compute_class(np.dtype(lhs.aval.dtype).name, precision)
            return f"{node.label()} -> {out}", nbytes, flops, peak
    return f"{node.label()} -> {out}", nbytes, 0, "copy"


def _module(dev: Any, mod: Any) -> Any:
    """The module loaded into ``dev``'s context (cached on the device)."""
    from blu.cuda import driver

    cache = dev.__dict__.setdefault("_blu_modules", {})
    m = cache.get(mod.key)
    if m is None:
        try:
            m = driver.Module(mod.image(), name=mod.name)
        except Exception:  # noqa: BLE001 - a cubin the driver refuses: JIT the PTX instead
            if mod.cubin is None:
                raise
            m = driver.Module(mod.ptx, name=mod.name)
        cache[mod.key] = m
    return m


def _aligned_copy(a: DeviceArray, dev: Any) -> DeviceArray:
    """A copy of ``a`` in a fresh (512-byte aligned) block: an argument at an address that is
    not ``ALIGN``-aligned (a DLPack view at an offset) cannot be read with vector loads."""
    fresh = DeviceArray.empty(a.shape, a.dtype, dev)
    dev.copy_d2d(fresh.ptr, a.ptr, a.nbytes)
    return fresh


def _put(x: np.ndarray, dev: Any) -> DeviceArray:
    from blu.cuda.array import _put_one

    return _put_one(np.asarray(x), dev, None)


def _view(dev: Any, ptr: int, owner: Any, aval: Any) -> DeviceArray:
    return DeviceArray(dev, ptr, aval.shape, aval.dtype, owner=owner)


def _host(dev: Any, ptr: int, aval: Any) -> np.ndarray:
    out = np.empty(aval.shape, aval.dtype)
    if out.nbytes:
        dev.copy_d2h(out, ptr)
    return out
