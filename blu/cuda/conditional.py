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
and ``cuda.bindings`` have conditional nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from blu.cuda.driver import Module, call, driver_version, drv

__all__ = ["WhileGraph", "supported"]

MIN_DRIVER = 12040  # WHILE nodes

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
"""

_modules: dict[Any, Module] = {}


def supported() -> bool:
    """Whether the driver (>= 12.4) and ``cuda.bindings`` offer conditional WHILE nodes."""
    try:
        d = drv()
        return driver_version() >= MIN_DRIVER and hasattr(d, "cuGraphConditionalHandleCreate")
    except Exception:  # noqa: BLE001 - no driver: not supported
        return False


def _set_condition(dev: Any) -> Any:
    """The ``blu_set_condition`` kernel loaded into ``dev``'s context."""
    m = _modules.get(dev)
    if m is None:
        m = _modules[dev] = Module(_SET_CONDITION_PTX, name="blu_set_condition")
    return m.function("blu_set_condition")


class WhileGraph:
    """``while *pred: body()`` as one graph launch on ``device``'s stream (see the module
    docstring). ``body()`` queues one iteration's work on the device's stream and leaves the
    next condition (a byte: non-zero to go on) at ``pred_ptr``; the caller queues the first
    condition before ``launch()``.

    Raises:
        CudaError: the driver refused the graph (e.g. work a conditional body cannot hold).
    """

    def __init__(self, device: Any, pred_ptr: int, body: Callable[[], None]):
        d = drv()
        self.device = device
        stream = device.stream.handle
        setc = _set_condition(device)
        ctx = device.context.handle
        self.graph = call("cuGraphCreate", 0)
        self.exec = None
        try:
            handle = call("cuGraphConditionalHandleCreate", self.graph, ctx, 0, 0)
            h = int(handle)
            mode = d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
            # the first decision: a kernel node of the graph itself
            call("cuStreamBeginCaptureToGraph", stream, self.graph, None, None, 0, mode)
            try:
                setc.launch(1, 1, [h, pred_ptr], stream=device.stream_id)
            finally:
                call("cuStreamEndCapture", stream)
            nodes, _ = call("cuGraphGetNodes", self.graph, 1)
            params = d.CUgraphNodeParams()
            params.type = d.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
            params.conditional.handle = handle
            params.conditional.type = d.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_WHILE
            params.conditional.size = 1
            params.conditional.ctx = ctx
            call("cuGraphAddNode", self.graph, [nodes[0]], None, 1, params)
            body_graph = params.conditional.phGraph_out[0]
            call("cuStreamBeginCaptureToGraph", stream, body_graph, None, None, 0, mode)
            try:
                body()
                setc.launch(1, 1, [h, pred_ptr], stream=device.stream_id)
            finally:
                call("cuStreamEndCapture", stream)
            self.exec = call("cuGraphInstantiate", self.graph, 0)
        except BaseException:
            self.destroy()
            raise

    def launch(self) -> None:
        """Queue the loop on the device's stream (one driver call; nothing waits)."""
        call("cuGraphLaunch", self.exec, self.device.stream.handle)

    def destroy(self) -> None:
        if self.exec is not None:
            call("cuGraphExecDestroy", self.exec)
            self.exec = None
        if self.graph is not None:
            call("cuGraphDestroy", self.graph)
            self.graph = None
