"""blu's GPU runtime: devices, streams, the caching allocator, cuBLASLt products, device arrays.

Importing ``blu.cuda`` imports no CUDA library: ``cuda.bindings`` (cuda-python) and
``nvmath.bindings`` (nvmath-python) are loaded on first use, so ``import blu`` works on
machines without them, a driver or a GPU; ``is_available()`` then says False.

Modules: ``driver`` (contexts, streams, events, modules, launches; errors name the call),
``graph`` (CUDA graph capture and replay), ``allocator`` (the caching allocator),
``cublaslt`` (matrix products with cached plans), ``products`` (dot_general on DeviceArrays),
``array`` (DeviceArray, device_put, from_dlpack), ``dlpack``, ``device``, ``gpus`` (the GPUs:
``is_available``, ``cuda_devices``), ``profile``
(``BLU_PROFILE=1``), ``fake`` (a simulated device for the CPU tests).
"""

from __future__ import annotations

from typing import Any

from blu.cuda.allocator import Block, CachingAllocator
from blu.cuda.array import DeviceArray, default_device, device_put, from_dlpack
from blu.cuda.device import CudaDevice, Device
from blu.cuda.errors import CudaError, CudaOutOfMemoryError, CudaUnavailableError
from blu.cuda.gpus import cuda_devices, is_available
from blu.cuda.profile import profiler

__all__ = [
    "Block",
    "CachingAllocator",
    "CudaDevice",
    "CudaError",
    "CudaOutOfMemoryError",
    "CudaUnavailableError",
    "Device",
    "DeviceArray",
    "default_device",
    "device_count",
    "device_put",
    "devices",
    "empty_cache",
    "from_dlpack",
    "is_available",
    "max_memory_allocated",
    "memory_stats",
    "memory_summary",
    "profiler",
    "reset_peak_memory_stats",
    "synchronize",
]


def devices() -> list[CudaDevice]:
    """The GPUs, as ``CudaDevice`` objects (an empty list without a usable GPU)."""
    return cuda_devices()


def device_count() -> int:
    """The number of usable GPUs (0 without one)."""
    return len(cuda_devices())


def _device(device: Device | None) -> Device:
    return device if device is not None else default_device()


def memory_stats(device: Device | None = None) -> dict[str, int]:
    """The caching allocator's statistics for ``device`` (default: the first GPU).

    Keys: ``allocated_bytes`` (bytes in live buffers, rounded to 512 — what PyTorch's
    ``memory_allocated`` counts), ``peak_allocated_bytes`` (compare with PyTorch's
    ``max_memory_allocated``), ``reserved_bytes`` (held from the driver), ``peak_reserved_bytes``,
    ``requested_bytes``, ``num_allocs``, ``num_frees``, ``num_ooms``, ``num_alloc_retries``,
    ``num_segments``, ``num_backing_mallocs``, ``num_backing_frees``, ``active_blocks``,
    ``pending_blocks``.

    Raises:
        CudaUnavailableError: no device given and no GPU available.
    """
    return _device(device).allocator.stats()


def max_memory_allocated(device: Device | None = None) -> int:
    """Peak bytes in live buffers since start or ``reset_peak_memory_stats``."""
    return memory_stats(device)["peak_allocated_bytes"]


def reset_peak_memory_stats(device: Device | None = None) -> None:
    """Reset the peak counters of ``memory_stats`` to the current values (default:
    the first GPU)."""
    _device(device).allocator.reset_peak_stats()


def empty_cache(device: Device | None = None) -> None:
    """Return the allocator's cached, unused segments to the driver (all GPUs by default)."""
    for d in [device] if device is not None else cuda_devices():
        d.allocator.empty_cache()


def memory_summary(device: Device | None = None) -> str:
    """A human-readable table of the caching allocator's statistics for ``device``
    (default: the first GPU)."""
    return _device(device).allocator.memory_summary()


def synchronize(device: Device | None = None) -> None:
    """Wait for the work queued on the device's stream."""
    _device(device).synchronize()


def __getattr__(name: str) -> Any:
    # submodules that import CUDA libraries on use, reachable as attributes
    if name in (
        "driver",
        "graph",
        "cublaslt",
        "products",
        "fake",
        "dlpack",
        "profile",
        "allocator",
    ):
        import importlib

        return importlib.import_module(f"blu.cuda.{name}")
    raise AttributeError(f"module 'blu.cuda' has no attribute {name!r}")
