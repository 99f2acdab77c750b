"""CUDA graphs: capture the work queued on a stream once, replay it with one driver call.

A Python ``cuLaunchKernel`` costs more host time than the GPU needs for a
1M-element elementwise kernel (DESIGN.md §3); a GPT-2 step has hundreds of kernels, so the
executable captures its whole launch plan once and replays it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from blu.cuda.driver import Stream, call, drv


class Graph:
    """A CUDA graph captured from a stream, instantiated once and replayed.

    Use::

        g = Graph()
        with g.capture(stream):
            ...  # launches, library calls and copies queued on `stream`
        g.replay(stream)  # as many times as wanted

    Capture records work without running it. It uses the *relaxed* mode, so the thread may still
    make calls such as ``cuMemAlloc`` (the caching allocator may need a segment); memory that
    the captured work uses must stay allocated as long as the graph is replayed.
    """

    def __init__(self) -> None:
        self.graph: Any = None
        self.exec: Any = None

    @contextlib.contextmanager
    def capture(self, stream: Stream) -> Iterator[Graph]:
        d = drv()
        mode = d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        call("cuStreamBeginCapture", stream.handle, mode)
        try:
            yield self
        except BaseException:
            # end the capture so the stream is usable again; drop the partial graph
            with contextlib.suppress(Exception):
                g = call("cuStreamEndCapture", stream.handle)
                call("cuGraphDestroy", g)
            raise
        self.graph = call("cuStreamEndCapture", stream.handle)
        self.exec = call("cuGraphInstantiate", self.graph, 0)

    def replay(self, stream: Stream) -> None:
        """Queue the whole graph on ``stream`` (one driver call)."""
        call("cuGraphLaunch", self.exec, stream.handle)

    def num_nodes(self) -> int:
        _, n = call("cuGraphGetNodes", self.graph, 0)
        return int(n)

    def destroy(self) -> None:
        if self.exec is not None:
            call("cuGraphExecDestroy", self.exec)
            self.exec = None
        if self.graph is not None:
            call("cuGraphDestroy", self.graph)
            self.graph = None
