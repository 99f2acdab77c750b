"""Errors of the GPU runtime (all in the BluError family)."""

from __future__ import annotations

from blu.core.errors import BluError, BluOutOfMemoryError


class CudaError(BluError, RuntimeError):
    """A CUDA driver or library call failed; the message names the call and the error code.

    Attributes:
        call: the name of the failing call, e.g. ``"cuModuleLoadData"``.
        code: the numeric status (``CUresult`` or ``cublasStatus_t``), or ``None``.
    """

    def __init__(self, msg: str, call: str = "", code: int | None = None):
        super().__init__(msg)
        self.call = call
        self.code = code


class CudaOutOfMemoryError(CudaError, BluOutOfMemoryError):
    """The device has no memory left for an allocation, even after the cache was emptied (or
    the allocator's cap, ``blu.config.gpu_memory_limit``, is reached).

    Attributes:
        nbytes: the bytes asked for.
        largest: ``[(size_bytes, tag, stream), ...]``, the largest live buffers, largest first.
        free_bytes: bytes the allocator could still get (the driver's free memory, within the
            cap), or None where unknown.
        allocated_bytes: bytes in live buffers of the allocator when it failed.
        tag: what the failed request was for (the allocation's tag), or None.
    """

    def __init__(
        self,
        msg: str,
        nbytes: int = 0,
        largest: list | None = None,
        call: str = "",
        free_bytes: int | None = None,
        allocated_bytes: int = 0,
        tag: str | None = None,
    ):
        super().__init__(msg, call=call, code=2)  # CUDA_ERROR_OUT_OF_MEMORY
        self.nbytes = nbytes
        self.largest = largest or []
        self.free_bytes = free_bytes
        self.allocated_bytes = allocated_bytes
        self.tag = tag


class BackingOutOfMemory(Exception):
    """Raised by a backing allocator's ``malloc`` when the device has no room (internal signal:
    the caching allocator catches it, frees its cache and retries, then raises
    ``CudaOutOfMemoryError``)."""


class CudaUnavailableError(BluError, RuntimeError):
    """No usable CUDA device: cuda-python, the driver or a GPU is missing."""
