"""Errors of the GPU runtime (all in the BluError family)."""

from __future__ import annotations

from blu.core.errors import BluError


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


class CudaOutOfMemoryError(CudaError, MemoryError):
    """The device has no memory left for an allocation, even after the cache was emptied.

    Attributes:
        nbytes: the bytes asked for.
        largest: ``[(size_bytes, tag, stream), ...]``, the largest live buffers, largest first.
    """

    def __init__(self, msg: str, nbytes: int = 0, largest: list | None = None, call: str = ""):
        super().__init__(msg, call=call, code=2)  # CUDA_ERROR_OUT_OF_MEMORY
        self.nbytes = nbytes
        self.largest = largest or []


class BackingOutOfMemory(Exception):
    """Raised by a backing allocator's ``malloc`` when the device has no room (internal signal:
    the caching allocator catches it, frees its cache and retries, then raises
    ``CudaOutOfMemoryError``)."""


class CudaUnavailableError(BluError, RuntimeError):
    """No usable CUDA device: cuda-python, the driver or a GPU is missing."""
