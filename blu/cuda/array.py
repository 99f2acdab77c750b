"""``DeviceArray``: an array in device memory, and ``device_put`` / ``from_dlpack``.

A DeviceArray is a device address, a shape, a dtype, the device, and what keeps the memory
alive: a caching-allocator block (freed back to the allocator when the array is garbage
collected or ``delete()``d) or an imported DLPack tensor. Its contents are C-contiguous.

Dispatch is asynchronous: ``device_put`` and kernels queue work on the device's stream and
return at once; reading the value (``np.asarray(x)``, ``repr``, ``float(x)``) or
``x.block_until_ready()`` waits. Freeing is safe without waiting: the block returns to the pool
of the stream the work was queued on, so whatever reuses it is ordered after that work.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blu.core.array import ArrayOps
from blu.core.errors import BluValueError
from blu.cuda import dlpack
from blu.cuda.allocator import Block
from blu.cuda.device import Device
from blu.cuda.gpus import cuda_devices


class DeviceArray(ArrayOps):
    """An array in device memory (C-contiguous).

    Operators and numpy-style methods (``x + y``, ``x.sum()``, ``x[i]``) run on the device: each
    operation is a single-primitive kernel from the kernel cache (``blu.lower.cuda.dispatch``),
    and ``blu.jit`` functions called with DeviceArrays run their whole plan there.

    Attributes:
        shape, dtype, ndim, size, nbytes: as numpy's.
        device: the ``Device`` holding it.
    """

    __slots__ = ("_ptr", "shape", "dtype", "device", "_block", "_owner", "_aval", "__weakref__")
    __array_priority__ = 1000
    __hash__ = object.__hash__  # ArrayOps defines an elementwise __eq__
    _blu_device_array = True
    weak_type = False

    def __init__(
        self,
        device: Device,
        ptr: int,
        shape: tuple[int, ...],
        dtype: Any,
        block: Block | None = None,
        owner: Any = None,
    ):
        self._ptr = ptr
        self.shape = tuple(map(int, shape))
        self.dtype = np.dtype(dtype)
        self.device = device
        self._block = block
        self._owner = owner
        self._aval = None

    @classmethod
    def _adopt(cls, device: Device, ptr: int, aval: Any, block: Block | None) -> DeviceArray:
        """An array of ``aval`` (a ``ShapedArray``, not weakly typed) at ``ptr`` owning ``block``,
        made without normalizing the shape and dtype again (a jitted step returns hundreds)."""
        a = cls.__new__(cls)
        a._ptr, a.shape, a.dtype, a.device = ptr, aval.shape, aval.dtype, device
        a._block, a._owner, a._aval = block, None, aval
        return a

    @classmethod
    def empty(
        cls, shape: tuple[int, ...], dtype: Any, device: Device, tag: str | None = None
    ) -> DeviceArray:
        """An uninitialized array from ``device``'s allocator.

        Raises:
            CudaOutOfMemoryError: no room on the device (the message lists the largest buffers).
        """
        dtype = np.dtype(dtype)
        n = math.prod(shape) * dtype.itemsize
        block = device.allocator.malloc(n, device.stream_id, tag=tag or _describe(shape, dtype))
        return cls(device, block.ptr, shape, dtype, block=block)

    # ---- numpy-like attributes -----------------------------------------------------------------

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def aval(self) -> Any:
        a = self._aval
        if a is None:
            from blu.core.aval import shaped

            a = self._aval = shaped(self.shape, self.dtype)
        return a

    @property
    def ptr(self) -> int:
        """The device address of the first element.

        Raises:
            BluValueError: the array was deleted.
        """
        if self._ptr is None:
            raise BluValueError("DeviceArray: the array was deleted")
        return self._ptr

    def unsafe_buffer_pointer(self) -> int:
        """The device address (JAX's name)."""
        return self.ptr

    def devices(self) -> set[Device]:
        return {self.device}

    # ---- synchronization and host copies -------------------------------------------------------

    def block_until_ready(self) -> DeviceArray:
        """Wait until the work producing the array has finished."""
        self.ptr  # noqa: B018 - raises if deleted
        self.device.synchronize()
        return self

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        host = np.empty(self.shape, self.dtype)
        if host.nbytes:
            self.device.copy_d2h(host, self.ptr)
        else:
            self.ptr  # noqa: B018
        if dtype is not None and np.dtype(dtype) != self.dtype:
            return host.astype(dtype)
        return host

    def to_numpy(self) -> np.ndarray:
        return self.__array__()

    def copy(self) -> DeviceArray:
        """A new array with the same contents (a device-to-device copy)."""
        out = DeviceArray.empty(self.shape, self.dtype, self.device)
        self.device.copy_d2d(out.ptr, self.ptr, self.nbytes)
        return out

    def item(self) -> Any:
        return np.asarray(self).item()

    def __float__(self) -> float:
        return float(np.asarray(self))

    def __int__(self) -> int:
        return int(np.asarray(self))

    def __bool__(self) -> bool:
        return bool(np.asarray(self))

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def tolist(self) -> Any:
        return np.asarray(self).tolist()

    def __repr__(self) -> str:
        if self._ptr is None:
            return f"DeviceArray(<deleted>, shape={self.shape}, dtype={self.dtype})"
        body = np.array2string(np.asarray(self), separator=", ", prefix="DeviceArray(")
        return f"DeviceArray({body}, dtype={self.dtype}, device={self.device})"

    __hash__ = None  # type: ignore[assignment]

    # ---- lifetime ------------------------------------------------------------------------------

    def delete(self) -> None:
        """Free the memory now (the array can no longer be used)."""
        block, self._block = self._block, None
        owner, self._owner = self._owner, None
        self._ptr = None
        if block is not None:
            self.device.allocator.free(block)
        if owner is not None and hasattr(owner, "release"):
            owner.release()

    def is_deleted(self) -> bool:
        return self._ptr is None

    def __del__(self) -> None:
        block = self._block
        if block is not None:
            self._block = None
            try:
                self.device.allocator.free(block)
            except Exception:  # noqa: BLE001 - finalizers must not raise (interpreter exit)
                pass

    # ---- DLPack --------------------------------------------------------------------------------

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device.dlpack_device

    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """Export as a DLPack capsule (zero copy; the consumer's ``stream`` waits for ours).

        Raises:
            BluValueError: ``copy=True`` or a ``dl_device`` other than the array's, which need
                a copy (use ``np.asarray`` for a host copy).
        """
        if copy:
            raise BluValueError("DeviceArray.__dlpack__: copy=True is not supported")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BluValueError(
                f"DeviceArray.__dlpack__: the array is on {self.__dlpack_device__()}, "
                f"not {tuple(dl_device)}"
            )
        consumer = self.device.export_stream(stream)
        if consumer is not None and self._block is not None:
            # when freed, the block is not reused before the consumer's queued work is done
            self.device.allocator.record_stream(self._block, consumer)
        return dlpack.to_capsule(self, self.ptr, self.shape, self.dtype, self.device.dlpack_device)


def _describe(shape: tuple[int, ...], dtype: np.dtype) -> str:
    from blu.core import dtypes

    return f"{dtypes.short_name(dtype)}[{','.join(map(str, shape))}]"


def default_device() -> Device:
    """The first GPU.

    Raises:
        CudaUnavailableError: no usable GPU.
    """
    from blu.cuda.errors import CudaUnavailableError

    devs = cuda_devices()
    if not devs:
        raise CudaUnavailableError("no CUDA device is available (blu.cuda.is_available() is False)")
    return devs[0]


def device_put(x: Any, device: Device | None = None, *, tag: str | None = None) -> Any:
    """Copy ``x`` (an array, a scalar, or a pytree of them) to ``device`` (default: the first GPU).

    The copy is queued on the device's stream; the call returns at once. A DeviceArray already
    on ``device`` is returned as is.

    Args:
        x: numpy arrays, blu arrays, Python/numpy scalars, DeviceArrays, or pytrees of them.
        device: the target ``Device``.
        tag: what the buffer is, for out-of-memory reports (default: its dtype and shape).

    Returns:
        ``DeviceArray`` objects in the structure of ``x``.
    """
    from blu.core.pytree import tree_map

    dev = device if device is not None else default_device()
    return tree_map(lambda leaf: _put_one(leaf, dev, tag), x)


def _put_one(x: Any, device: Device, tag: str | None) -> DeviceArray:
    if isinstance(x, DeviceArray):
        if x.device is device:
            return x
        x = np.asarray(x)
    host = np.asarray(x)
    if not host.flags.c_contiguous:  # (np.ascontiguousarray would make 0-d arrays 1-d)
        host = host.copy(order="C")
    out = DeviceArray.empty(host.shape, host.dtype, device, tag=tag)
    if host.nbytes:
        device.copy_h2d(out.ptr, host)
    return out


def from_dlpack(x: Any, device: Device | None = None) -> DeviceArray:
    """A DeviceArray sharing the memory of a DLPack producer (a torch/CuPy GPU tensor; on a
    fake device, a numpy array), without a copy.

    Args:
        x: an object with ``__dlpack__``/``__dlpack_device__``.
        device: the device it is on (default: the GPU named by ``x.__dlpack_device__()``).

    Raises:
        BluValueError: ``x`` is not on ``device`` (or on no device blu knows), or is not
            C-contiguous.
    """
    dev_type, dev_id = x.__dlpack_device__()
    if device is None:
        from blu.cuda.dlpack import kDLCUDA

        devs = cuda_devices()
        if dev_type != kDLCUDA or dev_id >= len(devs):
            raise BluValueError(
                f"from_dlpack: the tensor is on DLPack device {(dev_type, dev_id)}, not a GPU "
                "blu can see; for host data use blu.cuda.device_put(np.asarray(x))"
            )
        device = devs[dev_id]
    if (dev_type, dev_id) != device.dlpack_device:
        raise BluValueError(
            f"from_dlpack: the tensor is on DLPack device {(dev_type, dev_id)}, "
            f"not {device} {device.dlpack_device}"
        )
    stream = device.import_stream_arg()
    capsule = x.__dlpack__() if stream is None else x.__dlpack__(stream=stream)
    ptr, shape, dtype, _, owner = dlpack.from_capsule(capsule)
    return DeviceArray(device, ptr, shape, dtype, owner=owner)
