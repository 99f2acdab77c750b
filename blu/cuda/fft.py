"""The FFT on the GPU: cuFFT through ``nvmath.bindings.cufft``, queued on the device's stream.

``execute(dev, stream, src, dst, workspace, shape, dtype, fft_type, fft_lengths)`` computes
``blu.lax.fft``'s transform of the C-contiguous array at ``src`` (``shape``, ``dtype``) into
``dst``, as numpy's ``fftn`` / ``ifftn`` / ``rfftn`` / ``irfftn`` over the trailing
``len(fft_lengths)`` axes (the leading axes are the batch):

- ``FFT`` / ``IFFT``: C2C (complex64) or Z2Z (complex128), forward or inverse;
- ``RFFT``: R2C / D2Z, the last axis ``n // 2 + 1`` long in the output;
- ``IRFFT``: C2R / Z2D, output lengths ``fft_lengths``.

cuFFT's inverse transforms are unnormalized; numpy's (and blu's) divide by the product of the
lengths, so the output is scaled by cuBLAS (``csscal``/``zdscal``/``sscal``/``dscal``, on the
same stream). C2R overwrites its input (cuFFT documents it for multi-dimensional transforms and
allows it in every case), so IRFFT first copies its input into the planned workspace
(``workspace_bytes``). Plans are made once per (device, type, lengths, batch) with cuFFT's own
work area (``cufftMakePlanMany64``, allocated when the plan is made, outside graph capture: the
first call of an executable runs eagerly) and kept.

Source: the cuFFT documentation (CUDA 12), "Advanced Data Layout", "cufftExecC2R" and
"Accuracy and Performance"; numpy.fft's normalization ("backward").
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core.errors import BluValueError, with_user_line
from blu.cuda.errors import CudaError

# cufftType_t and the directions (cufft.h)
R2C, C2R, C2C = 0x2A, 0x2C, 0x29
D2Z, Z2D, Z2Z = 0x6A, 0x6C, 0x69
FORWARD, INVERSE = -1, 1

_INT32_MAX = 2**31 - 1


def cufft_type(fft_type: str, dtype: Any) -> tuple[int, str]:
    """(cufftType_t, the exec function's name) for a transform of an input of ``dtype``.

    Raises:
        BluValueError: a type/dtype pair blu's ``fft`` does not produce.
    """
    dt = np.dtype(dtype)
    table = {
        ("FFT", "complex64"): (C2C, "exec_c2c"),
        ("IFFT", "complex64"): (C2C, "exec_c2c"),
        ("FFT", "complex128"): (Z2Z, "exec_z2z"),
        ("IFFT", "complex128"): (Z2Z, "exec_z2z"),
        ("RFFT", "float32"): (R2C, "exec_r2c"),
        ("RFFT", "float64"): (D2Z, "exec_d2z"),
        ("IRFFT", "complex64"): (C2R, "exec_c2r"),
        ("IRFFT", "complex128"): (Z2D, "exec_z2d"),
    }
    try:
        return table[(fft_type, dt.name)]
    except KeyError:
        raise BluValueError(
            with_user_line(f"fft on the GPU: no cuFFT transform {fft_type} of {dt.name} input")
        ) from None


def _layouts(fft_type: str, lengths: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """The input's and the output's trailing dims (cuFFT's ``inembed`` / ``onembed``)."""
    half = list(lengths[:-1]) + [lengths[-1] // 2 + 1]
    if fft_type == "RFFT":
        return list(lengths), half
    if fft_type == "IRFFT":
        return half, list(lengths)
    return list(lengths), list(lengths)


def workspace_bytes(in_shape: Sequence[int], dtype: Any, fft_type: str) -> int:
    """Planned scratch of one call: IRFFT's copy of its input (C2R overwrites it); else 0."""
    if fft_type != "IRFFT":
        return 0
    return int(math.prod(in_shape)) * np.dtype(dtype).itemsize


def bindings() -> tuple[Any, Any]:
    """``(nvmath.bindings.cufft, nvmath.bindings.cublas)``.

    Raises:
        CudaError: nvmath-python is not installed.
    """
    try:
        from nvmath.bindings import cublas, cufft
    except ImportError as e:
        raise CudaError(
            "the FFT on the GPU needs nvmath-python (pip install nvmath-python; on the GPU "
            "machine scripts/fetch_gpu_wheels.sh puts it in .whl/)"
        ) from e
    return cufft, cublas


class Plans:
    """cuFFT plans of one device, by (type, lengths, batch); ``lib`` is ``nvmath.bindings.cufft``
    or a stand-in with the same functions (tests)."""

    def __init__(self, lib: Any):
        self.lib = lib
        self._plans: dict[tuple, int] = {}
        self._lock = threading.Lock()

    def get(self, fft_type: str, ctype: int, lengths: tuple[int, ...], batch: int) -> int:
        key = (ctype, lengths, batch, fft_type == "IRFFT")
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        with self._lock:
            plan = self._plans.get(key)
            if plan is None:
                inembed, onembed = _layouts(fft_type, lengths)
                plan = self._call("create")
                try:
                    self._call("make_plan_many64", plan, len(lengths), list(lengths), inembed, 1,
                               math.prod(inembed), onembed, 1, math.prod(onembed), ctype,
                               batch)  # fmt: skip
                except Exception:
                    self._call("destroy", plan)
                    raise
                self._plans[key] = plan
        return plan

    def _call(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self.lib, fn)(*args)
        except CudaError:
            raise
        except Exception as e:  # cuFFTError (the status is in the message)
            name = "cufft" + "".join(p[:1].upper() + p[1:] for p in fn.split("_"))
            raise CudaError(f"{name} failed: {e}", call=name) from e

    def close(self) -> None:
        """Destroy every plan."""
        with self._lock:
            for plan in self._plans.values():
                self._call("destroy", plan)
            self._plans.clear()


_PLANS: dict[Any, Plans] = {}
_plans_lock = threading.Lock()


def plans(device: Any, lib: Any = None) -> Plans:
    """The device's plans (made on first use; ``lib`` binds a stand-in library, for tests)."""
    with _plans_lock:
        p = _PLANS.get(device)
        if p is None or (lib is not None and p.lib is not lib):
            p = _PLANS[device] = Plans(lib if lib is not None else bindings()[0])
        return p


def execute(dev: Any, stream: int, src: int, dst: int, workspace: int | None,
            shape: Sequence[int], dtype: Any, fft_type: str,
            fft_lengths: Sequence[int]) -> None:  # fmt: skip
    """Queue ``fft(x, fft_type, fft_lengths)`` of the array at ``src`` into ``dst`` on ``stream``.

    Args:
        dev: the ``Device``; stream: its stream handle (int); src, dst: device addresses of the
            input (``shape``, ``dtype``, C-contiguous) and the output; workspace: an address of
            ``workspace_bytes(shape, dtype, fft_type)`` bytes (IRFFT), else unused.
    """
    lengths = tuple(int(n) for n in fft_lengths)
    k = len(lengths)
    batch = int(math.prod(shape[:-k]))
    in_count = int(math.prod(shape))
    out_lengths = _layouts(fft_type, lengths)[1]
    out_count = batch * int(math.prod(out_lengths))
    if out_count == 0:
        return
    if in_count == 0:  # a zero-length transformed axis (numpy: zeros where it is defined)
        out_item = np.dtype(dtype).itemsize * (2 if fft_type == "RFFT" else 1)
        if fft_type == "IRFFT":
            out_item = np.dtype(dtype).itemsize // 2
        dev.memset(dst, 0, out_count * out_item)
        return
    ctype, exec_name = cufft_type(fft_type, dtype)
    p = plans(dev)
    activate = getattr(dev, "activate", None)
    if activate is not None:
        activate()
    plan = p.get(fft_type, ctype, lengths, batch)
    p._call("set_stream", plan, stream)
    if fft_type == "IRFFT":  # C2R destroys its input: transform a copy
        dev.copy_d2d(workspace, src, in_count * np.dtype(dtype).itemsize)
        src = workspace
    if fft_type in ("FFT", "IFFT"):
        p._call(exec_name, plan, src, dst, FORWARD if fft_type == "FFT" else INVERSE)
    else:
        p._call(exec_name, plan, src, dst)
    if fft_type in ("IFFT", "IRFFT"):
        _scale(dev, dst, out_count, 1.0 / math.prod(lengths), fft_type, np.dtype(dtype))


def _scale(dev: Any, ptr: int, count: int, factor: float, fft_type: str, in_dtype: Any) -> None:
    """``x *= factor`` for ``count`` elements at ``ptr`` (the inverse's normalization), by
    cuBLAS's real scaling of a complex (``csscal``/``zdscal``) or real (``sscal``/``dscal``)
    vector, in chunks of at most 2**31 - 1 elements (cuBLAS's int count)."""
    from blu.cuda.solver import handles

    wide = in_dtype in (np.dtype(np.complex128), np.dtype(np.float64))
    if fft_type == "IFFT":
        fn, item = ("zdscal", 16) if wide else ("csscal", 8)
    else:  # IRFFT: a real output
        fn, item = ("dscal", 8) if wide else ("sscal", 4)
    alpha = np.array([factor], np.float64 if wide else np.float32)  # host pointer mode
    h = handles(dev)
    for start in range(0, count, _INT32_MAX):
        n = min(_INT32_MAX, count - start)
        h.cublas(fn, n, alpha.ctypes.data, ptr + start * item, 1, what="the inverse FFT's scale")
