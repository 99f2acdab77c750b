"""A while loop decided on the device: a CUDA graph with a conditional WHILE node.

CUDA graphs gained conditional nodes in CUDA 12.3 (IF) and 12.4 (WHILE): a node whose body graph
runs while a *conditional handle* is non-zero, the handle being set by a kernel of the graph with
``cudaGraphSetConditional`` (CUDA C++ Programming Guide, "Conditional Graph Nodes"). A loop whose
condition is data (a ``while_loop``) then runs its iterations without the host reading the
predicate after each one: the host queues the first evaluation of the condition, launches the
graph once, and only the caller's own reads wait for it.

    loop = WhileGraph(device, pred_ptr, body)   # body(): queue one iteration's work, ending
    loop.launch()                               # with the condition written at pred_ptr

``body`` is captured once (``cuStreamBeginCaptureToGraph`` into the WHILE node's body graph), so
every address it uses is baked in: the caller keys its graphs by those addresses. The graph is

    set_condition(handle, *pred) -> WHILE(handle) { body(); set_condition(handle, *pred) }

where ``set_condition`` is a one-thread kernel of blu's own, written in PTX (the driver resolves
``cudaGraphSetConditional`` when it loads the module). ``supported()`` says whether this driver
and ``cuda.bindings`` have conditional nodes. ``SwitchGraph`` runs one of a ``cond``'s branches
the same way (a SWITCH node, drivers >= 12.8), its index read on the device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from blu.cuda.driver import Module, call, driver_version, drv
from blu.cuda.graph import Graph

__all__ = ["SwitchGraph", "WhileGraph", "supported"]

MIN_DRIVER = 12040  # WHILE nodes
MIN_SWITCH_DRIVER = 12080  # SWITCH nodes

# set_condition(handle, pred): cudaGraphSetConditional(handle, *pred != 0), one thread
_SET_CONDITION_PTX = """.version 8.0
.target sm_90
.address_size 64
.extern .func cudaGraphSetConditional(.param .b64 handle, .param .b32 value);
.visible .entry blu_set_condition(.param .u64 handle_param, .param .u64 pred_param)
{
    .reg .b64 %rd<4>;
    .reg .b16 %rs<2>;
    .reg .b32 %r<3>;
    .reg .pred %p<2>;
    ld.param.u64 %rd1, [handle_param];
    ld.param.u64 %rd2, [pred_param];
    cvta.to.global.u64 %rd3, %rd2;
    ld.global.u8 %rs1, [%rd3];
    cvt.u32.u16 %r1, %rs1;
    setp.ne.u32 %p1, %r1, 0;
    selp.u32 %r2, 1, 0, %p1;
    {
        .param .b64 a0;
        .param .b32 a1;
        st.param.b64 [a0], %rd1;
        st.param.b32 [a1], %r2;
        call.uni cudaGraphSetConditional, (a0, a1);
    }
    ret;
}

// blu_set_branch(handle, index, n): cudaGraphSetConditional(handle, clamp(*index, 0, n - 1))
.visible .entry blu_set_branch(.param .u64 handle_param, .param .u64 index_param,
                               .param .u32 n_param)
{
    .reg .b64 %rd<4>;
    .reg .b32 %r<6>;
    ld.param.u64 %rd1, [handle_param];
    ld.param.u64 %rd2, [index_param];
    ld.param.u32 %r1, [n_param];
    cvta.to.global.u64 %rd3, %rd2;
    ld.global.s32 %r2, [%rd3];
    max.s32 %r3, %r2, 0;
    add.s32 %r4, %r1, -1;
    min.s32 %r5, %r3, %r4;
    {
        .param .b64 a0;
        .param .b32 a1;
        st.param.b64 [a0], %rd1;
        st.param.b32 [a1], %r5;
        call.uni cudaGraphSetConditional, (a0, a1);
    }
    ret;
}
"""

_modules: dict[Any, Module] = {}


def supported() -> bool:
    """Whether the driver (>= 12.4) and ``cuda.bindings`` offer conditional WHILE nodes."""
    try:
        d = drv()
        return driver_version() >= MIN_DRIVER and hasattr(d, "cuGraphConditionalHandleCreate")
    except Exception:  # noqa: BLE001 - no driver: not supported
        return False


def supported_switch() -> bool:
    """Whether the driver (>= 12.8) offers conditional SWITCH nodes."""
    try:
        return supported() and driver_version() >= MIN_SWITCH_DRIVER
    except Exception:  # noqa: BLE001
        return False


def _kernel(dev: Any, name: str) -> Any:
    """Kernel ``name`` of blu's conditional-node helpers, loaded into ``dev``'s context."""
    m = _modules.get(dev)
    if m is None:
        m = _modules[dev] = Module(_SET_CONDITION_PTX, name="blu_conditional")
    return m.function(name)


def _set_condition(dev: Any) -> Any:
    return _kernel(dev, "blu_set_condition")


def _conditional_node(graph: Any, deps: list, handle: Any, kind: str, size: int, ctx: Any):
    """Add a conditional node of ``kind`` ("WHILE", "SWITCH") after ``deps``; its body graphs."""
    d = drv()
    params = d.CUgraphNodeParams()
    params.type = d.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
    params.conditional.handle = handle
    params.conditional.type = getattr(d.CUgraphConditionalNodeType, f"CU_GRAPH_COND_TYPE_{kind}")
    params.conditional.size = size
    params.conditional.ctx = ctx
    call("cuGraphAddNode", graph, deps, None, len(deps), params)
    return [params.conditional.phGraph_out[i] for i in range(size)]


def _capture_into(device: Any, graph: Any, work: Callable[[], None]) -> None:
    """Queue ``work`` on the device's stream captured into ``graph``."""
    d = drv()
    stream = device.stream.handle
    mode = d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    call("cuStreamBeginCaptureToGraph", stream, graph, None, None, 0, mode)
    try:
        work()
    finally:
        call("cuStreamEndCapture", stream)


class WhileGraph(Graph):
    """``while *pred: body()`` as one graph launch on ``device``'s stream (see the module
    docstring). ``body()`` queues one iteration's work on the device's stream and leaves the
    next condition (a byte: non-zero to go on) at ``pred_ptr``; the caller queues the first
    condition before ``launch()``.

    Raises:
        CudaError: the driver refused the graph (e.g. work a conditional body cannot hold).
    """

    def __init__(self, device: Any, pred_ptr: int, body: Callable[[], None]):
        self.device = device
        setc = _set_condition(device)
        ctx = device.context.handle
        self.graph = call("cuGraphCreate", 0)
        self.exec = None
        try:
            handle = call("cuGraphConditionalHandleCreate", self.graph, ctx, 0, 0)
            h, sid = int(handle), device.stream_id
            # the first decision: a kernel node of the graph itself, then the loop after it
            _capture_into(device, self.graph, lambda: setc.launch(1, 1, [h, pred_ptr], stream=sid))
            nodes, _ = call("cuGraphGetNodes", self.graph, 1)
            (body_graph,) = _conditional_node(self.graph, [nodes[0]], handle, "WHILE", 1, ctx)

            def iteration() -> None:
                body()
                setc.launch(1, 1, [h, pred_ptr], stream=sid)

            _capture_into(device, body_graph, iteration)
            self.exec = call("cuGraphInstantiate", self.graph, 0)
        except BaseException:
            self.destroy()
            raise

    def launch(self) -> None:
        """Queue the loop on the device's stream (one driver call; nothing waits)."""
        self.replay(self.device.stream)


class SwitchGraph(WhileGraph):
    """``branches[clamp(*index, 0, n - 1)]()`` as one graph launch: a conditional SWITCH node
    (drivers >= 12.8) after a kernel that reads the int32 index on the device."""

    def __init__(self, device: Any, index_ptr: int, branches: list[Callable[[], None]]):
        self.device = device
        setb = _kernel(device, "blu_set_branch")
        ctx = device.context.handle
        self.graph = call("cuGraphCreate", 0)
        self.exec = None
        try:
            handle = call("cuGraphConditionalHandleCreate", self.graph, ctx, 0, 0)
            h, sid, n = int(handle), device.stream_id, len(branches)
            _capture_into(device, self.graph, lambda: setb.launch(
                1, 1, [h, index_ptr, np.uint32(n)], stream=sid))  # fmt: skip
            nodes, _ = call("cuGraphGetNodes", self.graph, 1)
            bodies = _conditional_node(self.graph, [nodes[0]], handle, "SWITCH", n, ctx)
            for g, branch in zip(bodies, branches, strict=True):
                _capture_into(device, g, branch)
            self.exec = call("cuGraphInstantiate", self.graph, 0)
        except BaseException:
            self.destroy()
            raise
