"""Devices of the GPU runtime: what a ``DeviceArray`` lives on.

A ``Device`` bundles a caching allocator, the stream blu queues its work on, and the copies and
synchronization a ``DeviceArray`` needs. ``CudaDevice`` is one GPU (its primary context, a
non-blocking stream, ``cuMemAlloc``-backed allocator); ``blu.cuda.fake.FakeDevice`` is a
simulated one in host memory for the CPU tests. Nothing here imports CUDA until a
``CudaDevice`` is made. The GPUs themselves (``cuda_devices``, ``is_available``) are listed by
``blu.cuda.gpus``.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from blu.core.config import config
from blu.cuda import driver as d
from blu.cuda.allocator import CachingAllocator
from blu.cuda.dlpack import kDLCUDA
from blu.cuda.errors import BackingOutOfMemory, CudaError, CudaOutOfMemoryError


class Device:
    """A device that holds ``DeviceArray`` objects (abstract: see ``CudaDevice`` and
    ``FakeDevice``).

    Attributes:
        platform: ``"cuda"`` or ``"fake"``.
        id: the device index.
        allocator: its ``CachingAllocator``.
        stream_id: the int handle of the stream blu queues work on (the allocator's stream id).
    """

    platform = "abstract"

    def __init__(self, id: int, allocator: CachingAllocator, stream_id: int):
        self.id = id
        self.allocator = allocator
        self.stream_id = stream_id

    def __repr__(self) -> str:
        return f"{self.platform}:{self.id}"

    @property
    def dlpack_device(self) -> tuple[int, int]:
        raise NotImplementedError

    def copy_h2d(self, dst: int, src: np.ndarray) -> None:
        """Queue a copy of a C-contiguous host array to ``dst`` (``src`` may be reused after)."""
        raise NotImplementedError

    def copy_d2h(self, dst: np.ndarray, src: int) -> None:
        """Copy ``dst.nbytes`` from ``src`` into ``dst``, waiting for queued work first."""
        raise NotImplementedError

    def copy_d2d(self, dst: int, src: int, nbytes: int) -> None:
        raise NotImplementedError

    def memset(self, dst: int, value: int, nbytes: int) -> None:
        """Queue setting ``nbytes`` bytes at ``dst`` to the byte ``value``."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait for all work queued on the device's stream."""
        raise NotImplementedError

    def matmul_handle(self) -> Any:
        """The device's ``blu.cuda.cublaslt.CublasLt``."""
        raise NotImplementedError

    def export_stream(self, stream: int | None) -> int | None:
        """Make a DLPack consumer's ``stream`` (protocol convention: None/1 legacy default,
        2 per-thread default, -1 none, else a handle) wait for this device's queued work;
        returns the consumer stream's handle (for ``record_stream``), or None."""
        raise NotImplementedError

    def import_stream_arg(self) -> int | None:
        """The ``stream`` to pass to a producer's ``__dlpack__`` (our stream, in DLPack terms)."""
        raise NotImplementedError


class CudaDevice(Device):
    """One GPU: its primary context, a non-blocking stream and a caching allocator.

    Made by ``blu.cuda.devices()`` (one per GPU, created on first use).
    """

    platform = "cuda"

    def __init__(self, ordinal: int):
        # the context, stream and allocator are made on first use, so listing the devices of a
        # machine does not create a context (hundreds of MiB) on every GPU
        self.id = ordinal
        self._ready = False
        self._properties: Any = None
        self._matmul: Any = None
        self._lock = threading.RLock()

    def _init(self) -> None:
        with self._lock:
            if self._ready:
                return
            self._d = d
            self.context = d.Context.get(self.id)
            self.stream = d.Stream.create(non_blocking=True)
            backing = CudaBacking(self.context, name=f"cuda:{self.id}")
            self._allocator = CachingAllocator(backing, name=f"cuda:{self.id}")
            self._stream_id = int(self.stream)
            self._ready = True

    @property
    def allocator(self) -> CachingAllocator:  # type: ignore[override]
        if not self._ready:
            self._init()
        return self._allocator

    @property
    def stream_id(self) -> int:  # type: ignore[override]
        if not self._ready:
            self._init()
        return self._stream_id

    def activate(self) -> CudaDevice:
        """Make the device's context current on this thread (creating it on first use)."""
        if not self._ready:
            self._init()
        self.context.make_current()
        return self

    @property
    def properties(self) -> Any:
        """``blu.cuda.driver.DeviceProperties`` (name, compute capability, memory, SMs...)."""
        if self._properties is None:
            from blu.cuda import driver

            self._properties = driver.device_properties(self.id)
        return self._properties

    @property
    def device_kind(self) -> str:
        return self.properties.name

    @property
    def dlpack_device(self) -> tuple[int, int]:
        return (kDLCUDA, self.id)

    def copy_h2d(self, dst: int, src: np.ndarray) -> None:
        self.activate()
        self._d.memcpy_htod_async(dst, src, self.stream)

    def copy_d2h(self, dst: np.ndarray, src: int) -> None:
        self.activate()
        self._d.memcpy_dtoh_async(dst, src, self.stream)
        self.stream.synchronize()

    def copy_d2d(self, dst: int, src: int, nbytes: int) -> None:
        self.activate()
        self._d.memcpy_dtod_async(dst, src, nbytes, self.stream)

    def memset(self, dst: int, value: int, nbytes: int) -> None:
        self.activate()
        self._d.memset_d8_async(dst, value, nbytes, self.stream)

    def synchronize(self) -> None:
        self.activate()
        self.stream.synchronize()

    def export_stream(self, stream: int | None) -> int | None:
        if stream == -1:
            return None
        handle = {None: 0, 1: 0, 2: 2}.get(stream, stream)  # 2: CU_STREAM_PER_THREAD
        if handle == self.stream_id:
            return None
        self.activate()
        d = self._d
        ev = d.Event.create(timing=False)
        ev.record(self.stream)
        d.Stream.from_handle(handle).wait_event(ev)
        ev.destroy()  # the wait is queued; destroying the event is safe
        return handle

    def import_stream_arg(self) -> int | None:
        return self.stream_id

    def matmul_handle(self) -> Any:
        """The device's ``blu.cuda.cublaslt.CublasLt`` (created on first use, with a 32 MiB
        workspace from the allocator; algorithms searched as ``config.gemm_search`` says)."""
        if self._matmul is None:
            with self._lock:
                if self._matmul is None:
                    from blu.cuda.cublaslt import DEFAULT_WORKSPACE, CublasLt

                    self.activate()
                    ws = self.allocator.malloc(
                        DEFAULT_WORKSPACE, self.stream_id, tag="cuBLASLt workspace"
                    )
                    self._matmul_workspace = ws
                    self._matmul = CublasLt((ws.ptr, ws.size), search=config.gemm_search)
        return self._matmul


# ---- the allocator's backing on a GPU ----------------------------------------------------------


class CudaBacking:
    """``blu.cuda.allocator.Backing`` over ``cuMemAlloc``/``cuMemFree`` and CUDA events."""

    def __init__(self, context: d.Context, name: str = "cuda"):
        self.context = context
        self.name = name
        self._event_pool: list[d.Event] = []

    def malloc(self, nbytes: int) -> int:
        self.context.make_current()
        try:
            return d.mem_alloc(nbytes)
        except CudaOutOfMemoryError as e:
            raise BackingOutOfMemory(str(e)) from None

    def free(self, ptr: int) -> None:
        self.context.make_current()
        d.mem_free(ptr)

    def record_event(self, stream: int) -> d.Event:
        ev = self._event_pool.pop() if self._event_pool else d.Event.create(timing=False)
        return ev.record(stream)

    def event_done(self, event: d.Event) -> bool:
        return event.query()

    def event_synchronize(self, event: d.Event) -> None:
        event.synchronize()

    def release_event(self, event: d.Event) -> None:
        self._event_pool.append(event)

    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes of the device, as ``cuMemGetInfo``."""
        return self.context.mem_info()

    def describe(self) -> str:
        try:
            free, total = self.context.mem_info()
        except CudaError:
            return self.name
        gib = 1024**3
        return f"{self.name}, {free / gib:.2f} GiB free of {total / gib:.2f} GiB"


def fake_gpu() -> bool:
    """``BLU_FAKE_GPU=1``: a simulated GPU (``blu.cuda.fake.FakeDevice``) stands in for the real
    ones, so GPU programs run on the CPU and their kernels are compiled into the kernel cache
    (``scripts/fill_gpu_cache.py``). The ``fake_gpu`` flag of ``blu.config``."""
    return bool(config.fake_gpu)
