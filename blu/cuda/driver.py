"""A thin layer over the CUDA driver API (``cuda.bindings.driver`` from cuda-python).

Importing this module imports nothing from CUDA: ``cuda.bindings`` is loaded on first use, so
``import blu`` works on machines without cuda-python, a driver or a GPU. Every driver call goes
through ``check(result, "cuName")``, which turns a failing ``CUresult`` into a ``CudaError``
naming the call and the error (``CUDA_ERROR_OUT_OF_MEMORY`` into ``CudaOutOfMemoryError``).

Handles (``CUstream``, ``CUevent``, ``CUfunction``...) stay cuda-python objects inside the small
classes below; device addresses are plain Python ints. Streams are identified to the caching
allocator by ``int(stream)`` (the ``CUstream`` handle's value; 0 is the legacy default stream).

Contents: ``init``, ``device_count``, ``device_properties``, ``Context`` (a device's primary
context, shared with PyTorch and CuPy), ``Stream``, ``Event``, ``Module``/``Function`` (PTX or
cubin images, launches), memory copies and sets. CUDA graphs are in ``blu.cuda.graph``, the
allocator's backing (``CudaBacking``) in ``blu.cuda.device``.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core.errors import BluTypeError
from blu.cuda.errors import (
    CudaError,
    CudaOutOfMemoryError,
    CudaUnavailableError,
)

_drv: Any = None
_init_lock = threading.Lock()
_initialized = False


def drv() -> Any:
    """The ``cuda.bindings.driver`` module, imported on first use.

    Raises:
        CudaUnavailableError: cuda-python is not installed.
    """
    global _drv
    if _drv is None:
        try:
            from cuda.bindings import driver
        except ImportError as e:
            raise CudaUnavailableError(
                "blu's GPU runtime needs cuda-python (pip install 'blu[cuda13]' or "
                f"'cuda-python>=12.6'): {e}"
            ) from e
        _drv = driver
    return _drv


def _code(err: Any) -> int:
    return int(getattr(err, "value", err))


def error_name(err: Any) -> str:
    """``CUDA_ERROR_OUT_OF_MEMORY``-style name of a CUresult (or its number if unknown)."""
    try:
        e, name = drv().cuGetErrorName(err)
        if _code(e) == 0 and name:
            return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001 - naming an error must never raise
        pass
    return getattr(err, "name", None) or f"CUresult {_code(err)}"


def error_string(err: Any) -> str:
    try:
        e, s = drv().cuGetErrorString(err)
        if _code(e) == 0 and s:
            return s.decode() if isinstance(s, bytes) else str(s)
    except Exception:  # noqa: BLE001
        pass
    return ""


def check(ret: Any, call: str) -> Any:
    """Unpack a cuda-python result ``(CUresult, *values)`` and raise if it is an error.

    Args:
        ret: what a ``cuda.bindings.driver`` function returned: a tuple whose first item is the
            ``CUresult``, or a bare ``CUresult``.
        call: the driver function's name, for the error message.

    Returns:
        ``None``, the single value, or a tuple of the values after the status.

    Raises:
        CudaOutOfMemoryError: for ``CUDA_ERROR_OUT_OF_MEMORY``.
        CudaError: for any other error; ``.call`` and ``.code`` say which call and status.
    """
    if isinstance(ret, tuple):
        err, vals = ret[0], ret[1:]
    else:
        err, vals = ret, ()
    code = _code(err)
    if code != 0:
        raise make_error(err, call)
    if not vals:
        return None
    return vals[0] if len(vals) == 1 else vals


def make_error(err: Any, call: str) -> CudaError:
    code = _code(err)
    detail = error_string(err)
    msg = f"{call} failed: {error_name(err)} ({code})" + (f": {detail}" if detail else "")
    if code == 2:  # CUDA_ERROR_OUT_OF_MEMORY
        return CudaOutOfMemoryError(msg, call=call)
    return CudaError(msg, call=call, code=code)


def _annotate(e: CudaError, context: str) -> CudaError:
    """Add what was being done to an error's message (keeping its type, call and code)."""
    e.args = (f"{e} ({context})",)
    return e


def call(name: str, *args: Any) -> Any:
    """``check(cuda.bindings.driver.<name>(*args), name)``."""
    return check(getattr(drv(), name)(*args), name)


# ---- initialization and devices ----------------------------------------------------------------


def init() -> None:
    """``cuInit(0)``, once per process.

    Raises:
        CudaUnavailableError: cuda-python or the driver library is missing.
        CudaError: ``cuInit`` failed (e.g. ``CUDA_ERROR_NO_DEVICE``).
    """
    global _initialized
    if _initialized:
        return
    with _init_lock:
        if _initialized:
            return
        d = drv()
        try:
            ret = d.cuInit(0)
        except Exception as e:  # cuda-pathfinder raises when libcuda.so is absent
            raise CudaUnavailableError(f"cuInit: the CUDA driver could not be loaded: {e}") from e
        check(ret, "cuInit")
        _initialized = True


def device_count() -> int:
    init()
    return int(call("cuDeviceGetCount"))


def driver_version() -> int:
    """The driver's CUDA version as 1000*major + 10*minor (e.g. 13000)."""
    init()
    return int(call("cuDriverGetVersion"))


@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    """What blu reads off a GPU (``cuDeviceGetAttribute``).

    Attributes:
        ordinal: the device index.
        name: e.g. ``"NVIDIA H200"``.
        compute_capability: ``(major, minor)``, e.g. ``(9, 0)``.
        total_memory: bytes of device memory.
        multiprocessor_count: streaming multiprocessors.
        l2_cache_bytes: L2 cache size.
        max_shared_memory_per_block_optin: dynamic shared memory a block may get after raising
            its limit with ``Function.set_max_dynamic_shared_memory``.
        warp_size: threads per warp.
    """

    ordinal: int
    name: str
    compute_capability: tuple[int, int]
    total_memory: int
    multiprocessor_count: int
    l2_cache_bytes: int
    max_shared_memory_per_block_optin: int
    warp_size: int

    @property
    def arch(self) -> str:
        """``"sm_90"`` for compute capability 9.0."""
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"


def device_properties(ordinal: int) -> DeviceProperties:
    init()
    d = drv()
    dev = call("cuDeviceGet", ordinal)
    A = d.CUdevice_attribute

    def attr(name: str) -> int:
        return int(call("cuDeviceGetAttribute", getattr(A, name), dev))

    raw = call("cuDeviceGetName", 256, dev)
    name = raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)
    return DeviceProperties(
        ordinal=ordinal,
        name=name,
        compute_capability=(
            attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
            attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"),
        ),
        total_memory=int(call("cuDeviceTotalMem", dev)),
        multiprocessor_count=attr("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
        l2_cache_bytes=attr("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"),
        max_shared_memory_per_block_optin=attr(
            "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"
        ),
        warp_size=attr("CU_DEVICE_ATTRIBUTE_WARP_SIZE"),
    )


class Context:
    """A device's primary context (the one the CUDA runtime, PyTorch and CuPy use too, so
    pointers and streams are shared with them)."""

    _by_ordinal: dict[int, Context] = {}
    _lock = threading.Lock()
    _current = threading.local()

    def __init__(self, ordinal: int):
        init()
        self.ordinal = ordinal
        self.device = call("cuDeviceGet", ordinal)
        self.handle = call("cuDevicePrimaryCtxRetain", self.device)

    @classmethod
    def get(cls, ordinal: int = 0) -> Context:
        """The primary context of device ``ordinal``, made current on this thread."""
        ctx = cls._by_ordinal.get(ordinal)
        if ctx is None:
            with cls._lock:
                ctx = cls._by_ordinal.get(ordinal)
                if ctx is None:
                    ctx = cls._by_ordinal[ordinal] = Context(ordinal)
        ctx.make_current()
        return ctx

    def make_current(self) -> None:
        if getattr(Context._current, "ordinal", None) != self.ordinal:
            call("cuCtxSetCurrent", self.handle)
            Context._current.ordinal = self.ordinal

    def synchronize(self) -> None:
        self.make_current()
        call("cuCtxSynchronize")

    def mem_info(self) -> tuple[int, int]:
        """``(free, total)`` bytes of device memory."""
        self.make_current()
        free, total = call("cuMemGetInfo")
        return int(free), int(total)


# ---- streams and events ------------------------------------------------------------------------


def _stream_handle(stream: Any) -> Any:
    """A ``CUstream`` for a Stream, an int handle or None (the legacy default stream)."""
    if isinstance(stream, Stream):
        return stream.handle
    return drv().CUstream(0 if stream is None else int(stream))


class Stream:
    """A CUDA stream. ``int(stream)`` is its handle's value (the allocator's stream id)."""

    __slots__ = ("handle", "_owned", "__weakref__")

    def __init__(self, handle: Any, owned: bool = False):
        self.handle = handle
        self._owned = owned

    @classmethod
    def create(cls, non_blocking: bool = True, priority: int = 0) -> Stream:
        """A new stream; non-blocking streams do not synchronize with the legacy default stream.

        Lower ``priority`` numbers run first (0 is the default priority).
        """
        d = drv()
        flags = d.CUstream_flags.CU_STREAM_NON_BLOCKING if non_blocking else 0
        h = call("cuStreamCreateWithPriority", int(flags), priority)
        return cls(h, owned=True)

    @classmethod
    def legacy_default(cls) -> Stream:
        return cls(drv().CUstream(0))

    @classmethod
    def from_handle(cls, value: int) -> Stream:
        """Wrap a stream created elsewhere (e.g. ``torch.cuda.current_stream().cuda_stream``)."""
        return cls(drv().CUstream(int(value)))

    def __int__(self) -> int:
        return int(self.handle)

    def synchronize(self) -> None:
        call("cuStreamSynchronize", self.handle)

    def query(self) -> bool:
        """True when all work queued on the stream has completed."""
        err = drv().cuStreamQuery(self.handle)
        err = err[0] if isinstance(err, tuple) else err
        if _code(err) == 600:  # CUDA_ERROR_NOT_READY
            return False
        check(err, "cuStreamQuery")
        return True

    def wait_event(self, event: Event) -> None:
        """Work queued on this stream from now on waits for ``event``."""
        call("cuStreamWaitEvent", self.handle, event.handle, 0)

    def wait_stream(self, other: Stream) -> None:
        """Work queued on this stream from now on waits for the work queued so far on ``other``."""
        ev = Event.create(timing=False)
        ev.record(other)
        self.wait_event(ev)
        ev.destroy()  # safe: the wait is already enqueued

    def destroy(self) -> None:
        if self._owned and self.handle is not None:
            call("cuStreamDestroy", self.handle)
            self.handle = None

    def __repr__(self) -> str:
        return f"Stream({int(self.handle) if self.handle is not None else 'destroyed'})"


class Event:
    """A CUDA event (for ordering between streams and for timing)."""

    __slots__ = ("handle",)

    def __init__(self, handle: Any):
        self.handle = handle

    @classmethod
    def create(cls, timing: bool = True) -> Event:
        d = drv()
        flags = (
            d.CUevent_flags.CU_EVENT_DEFAULT if timing else d.CUevent_flags.CU_EVENT_DISABLE_TIMING
        )
        return cls(call("cuEventCreate", int(flags)))

    def record(self, stream: Any = None) -> Event:
        call("cuEventRecord", self.handle, _stream_handle(stream))
        return self

    def query(self) -> bool:
        """True when the work before the event's record has completed."""
        err = drv().cuEventQuery(self.handle)
        err = err[0] if isinstance(err, tuple) else err
        if _code(err) == 600:  # CUDA_ERROR_NOT_READY
            return False
        check(err, "cuEventQuery")
        return True

    def synchronize(self) -> None:
        call("cuEventSynchronize", self.handle)

    def elapsed_ms(self, end: Event) -> float:
        """Milliseconds from this event to ``end`` (both recorded, timing events)."""
        return float(call("cuEventElapsedTime", self.handle, end.handle))

    def destroy(self) -> None:
        if self.handle is not None:
            call("cuEventDestroy", self.handle)
            self.handle = None


# ---- modules, functions, launches --------------------------------------------------------------


class Module:
    """A loaded PTX or cubin image (``cuModuleLoadData``); functions by name, cached."""

    def __init__(self, image: bytes | str, name: str = "<module>"):
        data = image.encode() if isinstance(image, str) else bytes(image)
        if not data.startswith(b"\x7fELF") and not data.endswith(b"\0"):
            data += b"\0"  # PTX text must be NUL-terminated
        self.name = name
        self._image = data  # the driver reads it during the call only; kept for debugging
        try:
            self.handle = call("cuModuleLoadData", data)
        except CudaError as e:
            raise _annotate(e, f"loading module {name}") from None
        self._functions: dict[str, Function] = {}

    @classmethod
    def from_file(cls, path: str) -> Module:
        """Load ``<key>.ptx`` or ``<key>.cubin`` from the kernel cache (or anywhere)."""
        with open(path, "rb") as f:
            return cls(f.read(), name=path)

    def function(self, name: str) -> Function:
        fn = self._functions.get(name)
        if fn is None:
            try:
                h = call("cuModuleGetFunction", self.handle, name.encode())
            except CudaError as e:
                raise _annotate(e, f"kernel {name!r} in module {self.name}") from None
            fn = self._functions[name] = Function(h, name)
        return fn

    def unload(self) -> None:
        if self.handle is not None:
            call("cuModuleUnload", self.handle)
            self.handle = None


def pack_args(args: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Kernel parameters in the form ``cuLaunchKernel`` reads: one 8-byte slot per parameter
    (device addresses and Python ints as 64-bit integers; numpy scalars in their own width, in the
    low bytes, little-endian) and an array of the slots' addresses.

    Returns:
        ``(slots, pointers)``: keep both alive until the launch call returns (the driver copies
        the values during the call, also while a stream is being captured into a graph).

    Raises:
        BluTypeError: a parameter that is not an int or a numpy scalar of at most 8 bytes.
    """
    n = len(args)
    slots = np.zeros(max(n, 1), np.uint64)
    if all(type(a) is int and a >= 0 for a in args):  # the common case: device addresses
        slots[:n] = args
    else:
        raw = slots.view(np.uint8)
        for i, a in enumerate(args):
            if isinstance(a, (bool, float)):
                raise BluTypeError(
                    f"kernel parameter {i} is a Python {type(a).__name__}: pass a numpy scalar "
                    "(np.float32(x), np.int32(x)...) so its width is explicit"
                )
            if isinstance(a, int):
                a = np.int64(a) if a < 0 else np.uint64(a)
            if not isinstance(a, np.generic) or a.nbytes > 8:
                raise BluTypeError(f"kernel parameter {i} of type {type(a).__name__} unsupported")
            raw[8 * i : 8 * i + a.nbytes] = np.frombuffer(a.tobytes(), np.uint8)
    base = slots.ctypes.data
    pointers = np.arange(base, base + 8 * n, 8, dtype=np.uint64) if n else np.zeros(1, np.uint64)
    return slots, pointers


class Function:
    """A kernel in a loaded module."""

    __slots__ = ("handle", "name")

    def __init__(self, handle: Any, name: str):
        self.handle = handle
        self.name = name

    def launch(
        self,
        grid: tuple[int, ...] | int,
        block: tuple[int, ...] | int,
        args: Sequence[Any],
        shared_mem: int = 0,
        stream: Any = None,
    ) -> None:
        """Queue the kernel on ``stream`` (asynchronous: no host synchronization).

        Args:
            grid: blocks per grid, ``(x, y, z)`` (missing trailing dimensions are 1).
            block: threads per block, likewise.
            args: the kernel's parameters in order (see ``pack_args``); with MLIR's bare-pointer
                convention, one device address per memref.
            shared_mem: dynamic shared memory per block, bytes.
            stream: a ``Stream``, an int handle, or None for the legacy default stream.

        Raises:
            CudaError: the launch was refused (names ``cuLaunchKernel`` and this kernel).
        """
        slots, pointers = pack_args(args)
        self.launch_packed(_dim3(grid), _dim3(block), pointers, shared_mem, stream)
        del slots  # alive until here

    def launch_packed(
        self,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        pointers: np.ndarray,
        shared_mem: int = 0,
        stream: Any = None,
    ) -> None:
        """``launch`` with the parameters already packed (``pack_args``; the caller keeps the
        slots alive for the call, and may change them between launches: the driver copies the
        values). For a sequence of launches of the same parameters (a library's kernels)."""
        gx, gy, gz = grid
        bx, by, bz = block
        packed = int(pointers.ctypes.data)
        err = drv().cuLaunchKernel(
            self.handle, gx, gy, gz, bx, by, bz, shared_mem, _stream_handle(stream), packed, 0
        )
        err = err[0] if isinstance(err, tuple) else err
        if _code(err) != 0:
            e = make_error(err, "cuLaunchKernel")
            where = f"kernel {self.name}, grid {(gx, gy, gz)}, block {(bx, by, bz)}"
            raise _annotate(e, f"{where}, {shared_mem} bytes of shared memory")

    def set_max_dynamic_shared_memory(self, nbytes: int) -> None:
        """Allow launches with more than 48 KiB of dynamic shared memory (up to the device's
        ``max_shared_memory_per_block_optin``)."""
        attr = drv().CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        call("cuFuncSetAttribute", self.handle, attr, nbytes)

    def attribute(self, name: str) -> int:
        """A ``CU_FUNC_ATTRIBUTE_<name>`` value, e.g. ``"NUM_REGS"``, ``"LOCAL_SIZE_BYTES"``."""
        attr = getattr(drv().CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}")
        return int(call("cuFuncGetAttribute", attr, self.handle))


def _dim3(d: tuple[int, ...] | int) -> tuple[int, int, int]:
    t = (d,) if isinstance(d, int) else tuple(d)
    if not 1 <= len(t) <= 3 or any(int(x) < 1 for x in t):
        raise BluTypeError(f"launch dimensions must be 1 to 3 positive ints, got {d!r}")
    return tuple(int(x) for x in t) + (1,) * (3 - len(t))  # type: ignore[return-value]


# ---- memory ------------------------------------------------------------------------------------


def mem_alloc(nbytes: int) -> int:
    return int(call("cuMemAlloc", nbytes))


def mem_free(ptr: int) -> None:
    call("cuMemFree", drv().CUdeviceptr(ptr))


def memcpy_htod_async(dst: int, src: np.ndarray, stream: Any = None) -> None:
    """Copy a C-contiguous host array to device address ``dst`` (returns once ``src`` may be
    reused: pageable memory is staged by the driver)."""
    if not src.flags.c_contiguous:
        raise BluTypeError("memcpy_htod_async: the host array must be C-contiguous")
    if src.nbytes:
        call(
            "cuMemcpyHtoDAsync",
            drv().CUdeviceptr(dst),
            src.ctypes.data,
            src.nbytes,
            _stream_handle(stream),
        )


def memcpy_dtoh_async(dst: np.ndarray, src: int, stream: Any = None) -> None:
    """Copy ``dst.nbytes`` bytes from device address ``src`` into a C-contiguous host array (the
    data is there once the stream is synchronized)."""
    if not dst.flags.c_contiguous or not dst.flags.writeable:
        raise BluTypeError("memcpy_dtoh_async: the host array must be C-contiguous and writable")
    if dst.nbytes:
        call(
            "cuMemcpyDtoHAsync",
            dst.ctypes.data,
            drv().CUdeviceptr(src),
            dst.nbytes,
            _stream_handle(stream),
        )


def memcpy_dtod_async(dst: int, src: int, nbytes: int, stream: Any = None) -> None:
    if nbytes:
        d = drv()
        call(
            "cuMemcpyDtoDAsync",
            d.CUdeviceptr(dst),
            d.CUdeviceptr(src),
            nbytes,
            _stream_handle(stream),
        )


def memset_d8_async(dst: int, value: int, nbytes: int, stream: Any = None) -> None:
    if nbytes:
        call("cuMemsetD8Async", drv().CUdeviceptr(dst), value, nbytes, _stream_handle(stream))


def memset_d32_async(dst: int, value: int, count: int, stream: Any = None) -> None:
    """Set ``count`` 32-bit words at ``dst`` to ``value`` (e.g. a float32's bit pattern)."""
    if count:
        call("cuMemsetD32Async", drv().CUdeviceptr(dst), value, count, _stream_handle(stream))
