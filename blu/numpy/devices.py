"""Devices and interchange for the Array API standard: ``x.device``, ``x.to_device``, the
``device=`` keyword of the creation functions, DLPack (``x.__dlpack__``, ``from_dlpack``) and
``__array_namespace_info__()`` (https://data-apis.org/array-api/2024.12/API_specification/).

A ``blu.Array`` (and every tracer) lives on the host: its device is ``CPU_DEVICE``, the first
device of ``blu.devices()`` without ``blu.parallel.initialize()``. A ``DeviceArray`` lives on
its GPU (``x.device`` is that ``blu.cuda`` device); ``to_device`` and ``device=`` copy between
the two through ``blu.cuda.device_put`` and ``np.asarray``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.array import Array
from blu.core.errors import BluTypeError, BluValueError, with_user_line
from blu.core.interpreter import Tracer
from blu.numpy import _dtypes
from blu.parallel.devices import Device

__all__ = ["from_dlpack", "__array_namespace_info__"]

CPU_DEVICE = Device(0, "cpu", 0, 0)

_KDL_CPU, _KDL_CUDA = 1, 2  # DLPack's DLDeviceType


def _is_cpu(device: Any) -> bool:
    return device is None or device == "cpu" or device == CPU_DEVICE


def _is_gpu(device: Any) -> bool:
    return type(device).__module__.startswith("blu.cuda")


def check_device(device: Any, name: str) -> None:
    """Raise unless ``device`` is None, ``"cpu"``, ``CPU_DEVICE`` or a ``blu.cuda`` device."""
    if not (_is_cpu(device) or _is_gpu(device)):
        raise BluValueError(
            with_user_line(
                f"{name}: device must be None, 'cpu', {CPU_DEVICE!r} or a blu.cuda device, "
                f"got {device!r}"
            )
        )


def with_device(fn: Callable) -> Callable:
    """Give a creation function the standard's keyword-only ``device=`` argument (the result
    is made on the host, then put there)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, device: Any = None, **kwargs: Any) -> Any:
        check_device(device, fn.__name__)
        out = fn(*args, **kwargs)
        if device is None:
            return out
        if isinstance(out, tuple):
            return tuple(to_device(o, device) for o in out)
        return to_device(out, device)

    # the signature shows the keyword (introspection, e.g. the Array API suite, reads it)
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    dev = inspect.Parameter("device", inspect.Parameter.KEYWORD_ONLY, default=None)
    at = next((i for i, p in enumerate(params) if p.kind == p.VAR_KEYWORD), len(params))
    wrapper.__signature__ = sig.replace(parameters=params[:at] + [dev] + params[at:])
    return wrapper


_namespace: Any = None  # blu.numpy, registered by the package when it is imported


def register_namespace(module: Any) -> None:
    """Make ``module`` (``blu.numpy``) what ``x.__array_namespace__()`` returns (``blu.numpy``
    calls this at import: its submodules never import the package)."""
    global _namespace
    _namespace = module


def array_namespace(api_version: str | None = None) -> Any:
    """``x.__array_namespace__()``: ``blu.numpy`` (it implements the standard's 2024.12).

    Raises:
        BluValueError: an ``api_version`` other than None, 2023.12 or 2024.12.
    """
    if api_version not in (None, "2023.12", "2024.12"):
        raise BluValueError(
            with_user_line(f"__array_namespace__: api_version {api_version!r} is not supported")
        )
    return _namespace


def array_device(x: Any) -> Any:
    """``x.device``: ``CPU_DEVICE`` for blu arrays and tracers (a DeviceArray has its own)."""
    return CPU_DEVICE


def array_devices(x: Any) -> set:
    """``x.devices()``: the devices holding ``x`` (``{CPU device 0}`` for a blu Array; the
    mesh's for a partitioned jit's replicated output)."""
    s = getattr(x, "_mesh_sharding", None)
    return {CPU_DEVICE} if s is None else s.device_set


def array_sharding(x: Any) -> Any:
    """``x.sharding``: ``SingleDeviceSharding`` of the device holding a blu Array;
    ``NamedSharding(mesh, P())`` for a partitioned jit's replicated output (as JAX's)."""
    from blu.parallel.mesh import SingleDeviceSharding

    s = getattr(x, "_mesh_sharding", None)
    return SingleDeviceSharding(CPU_DEVICE) if s is None else s


def array_shards(x: Any) -> list:
    """``x.addressable_shards`` of an array on one device: one ``Shard`` holding all of it."""
    from blu.parallel.sharded_array import Shard

    s = getattr(x, "_mesh_sharding", None)
    if s is not None:  # replicated over a mesh: the whole array on each of this process's devices
        devs = list(s.mesh.devices.flat)
        where = s.addressable_devices_indices_map(x.shape)
        return [
            Shard(d, i, devs.index(d), x)
            for d, i in sorted(where.items(), key=lambda t: devs.index(t[0]))
        ]
    return [Shard(x.sharding.device, tuple(slice(None) for _ in x.shape), 0, x)]


def to_device(x: Any, device: Any, /, *, stream: Any = None) -> Any:
    """``x.to_device(device)``: ``x`` itself when already there, else a copy.

    Raises:
        BluValueError: an unknown device, or a traced value sent to a GPU.
    """
    check_device(device, "to_device")
    on_gpu = getattr(x, "_blu_device_array", False)
    if _is_cpu(device):
        return Array(np.array(x)) if on_gpu else x
    if isinstance(x, Tracer):
        raise BluValueError(with_user_line("to_device: a traced value cannot change device"))
    from blu.cuda import device_put

    return device_put(x, device)


def dlpack_device(x: Any) -> tuple[int, int]:
    """``x.__dlpack_device__()``: (kDLCPU, 0) for host arrays."""
    if getattr(x, "_blu_device_array", False):
        return (_KDL_CUDA, int(x.device.id))
    return (_KDL_CPU, 0)


def _numpy_exports(dtype: np.dtype) -> bool:
    """Whether numpy's own DLPack exporter takes this dtype (not bfloat16 and ml_dtypes' others)."""
    return dtype.kind in "biufc"


def dlpack(
    x: Any,
    /,
    *,
    stream: Any = None,
    max_version: tuple[int, int] | None = None,
    dl_device: tuple[int, int] | None = None,
    copy: bool | None = None,
) -> Any:
    """``x.__dlpack__()``: a DLPack capsule of a concrete host array, for every blu dtype.

    numpy's exporter for bool, integer, float and complex dtypes (the buffer is read-only, so a
    consumer asking for a pre-1.0 capsule gets a copy); bfloat16 through blu's own capsule
    (``blu.cuda.dlpack``, DLPack's ``kDLBfloat`` code, a copy kept alive until the consumer
    releases it): ``torch.from_dlpack`` reads it; numpy has no bfloat16 importer
    (``np.asarray(x)`` gives an ``ml_dtypes.bfloat16`` copy instead).

    Raises:
        BluTypeError: ``x`` is traced, or its dtype has no DLPack code.
        BufferError: a device other than the CPU is asked for (the protocol's error).
    """
    if isinstance(x, Tracer):
        raise BluTypeError(with_user_line("__dlpack__: a traced value has no buffer to export"))
    if dl_device is not None and tuple(dl_device) != (_KDL_CPU, 0):
        raise BufferError(f"__dlpack__: blu arrays live on the CPU, not {dl_device}")
    value = np.asarray(x)
    if not _numpy_exports(value.dtype):
        from blu.cuda import dlpack as capsules  # ctypes only: loads no CUDA library

        value = np.ascontiguousarray(value).copy()
        return capsules.to_capsule(
            value, value.ctypes.data, tuple(value.shape), value.dtype, (_KDL_CPU, 0)
        )
    if max_version is None or tuple(max_version) < (1, 0) or copy:
        # DLPack < 1.0 cannot say read-only: hand over a writable copy
        value = value.copy()
    return value.__dlpack__(stream=stream, max_version=max_version, copy=copy)


def _from_capsule(x: Any) -> np.ndarray:
    """A host copy of ``x``'s buffer read through a legacy "dltensor" capsule (for dtypes numpy
    cannot import: bfloat16)."""
    import ctypes

    from blu.cuda import dlpack as capsules

    try:
        capsule = x.__dlpack__()
    except Exception as e:  # noqa: BLE001 - the producer's own error, named below
        raise BluValueError(
            with_user_line(f"from_dlpack: {type(x).__name__}.__dlpack__() failed: {e}")
        ) from e
    ptr, shape, dtype, device, owner = capsules.from_capsule(capsule)
    try:
        if device[0] not in (_KDL_CPU, 3):  # kDLCPU, kDLCUDAHost
            raise BluValueError(
                with_user_line(
                    f"from_dlpack: the tensor is on DLPack device {device}, not the CPU; copy it "
                    "to the host first (torch: .cpu()) or use blu.cuda for GPU tensors"
                )
            )
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if n == 0:
            return np.zeros(shape, dtype)
        raw = (ctypes.c_char * n).from_address(ptr)
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    finally:
        owner.release()


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> Any:
    """A blu array from any object with ``__dlpack__`` (numpy, torch, cupy, ...), copied into
    blu's own (immutable) host buffer; every blu dtype, bfloat16 included (DLPack's
    ``kDLBfloat`` code).

    Raises:
        BluValueError: ``copy=False`` for a foreign object (blu arrays never share a foreign
            buffer), a bad device, a tensor on a GPU, or a producer that cannot export (e.g. a
            torch tensor that requires grad: ``.detach()`` it).
        BluTypeError: the object has no ``__dlpack__``, or a dtype blu does not support.
    """
    check_device(device, "from_dlpack")
    if isinstance(x, (Array, Tracer)):
        out = x  # immutable: sharing it is safe
    elif copy is False:
        # a foreign buffer may be written by its owner: a blu array never aliases one
        raise BluValueError(with_user_line("from_dlpack: blu copies foreign buffers (copy=False)"))
    elif not hasattr(x, "__dlpack__"):
        raise BluTypeError(
            with_user_line(f"from_dlpack: {type(x).__name__} has no __dlpack__ method")
        )
    else:
        if isinstance(x, np.ndarray) and not _numpy_exports(x.dtype):
            value = x  # an ml_dtypes array (bfloat16): numpy cannot export it; copy it directly
        elif "bfloat16" in str(getattr(x, "dtype", "")):
            value = _from_capsule(x)  # numpy's importer has no bfloat16
        else:
            try:
                value = np.from_dlpack(x)
            except Exception as e:  # noqa: BLE001 - numpy's or the producer's error, named
                raise BluValueError(
                    with_user_line(
                        f"from_dlpack: cannot import this {type(x).__name__} through DLPack "
                        f"({type(e).__name__}: {e}); a torch tensor that requires grad needs "
                        ".detach(), a GPU tensor .cpu()"
                    )
                ) from e
        out = Array(np.array(value, dtype=dtypes.canonicalize(value.dtype)))
    return out if device is None else to_device(out, device)


# ---- __array_namespace_info__ --------------------------------------------------------------------

_KINDS = {
    "bool": ("bool",),
    "signed integer": ("int8", "int16", "int32", "int64"),
    "unsigned integer": ("uint8", "uint16", "uint32", "uint64"),
    "real floating": ("float32", "float64"),
    "complex floating": ("complex64", "complex128"),
}
_KINDS["integral"] = _KINDS["signed integer"] + _KINDS["unsigned integer"]
_KINDS["numeric"] = _KINDS["integral"] + _KINDS["real floating"] + _KINDS["complex floating"]


class Info:
    """What ``__array_namespace_info__()`` returns: blu.numpy's capabilities, devices and
    dtypes (the Array API's inspection API)."""

    __module__ = "blu.numpy"

    def capabilities(self) -> dict[str, Any]:
        # boolean masks and unique/nonzero work on concrete arrays (traced ones need size=)
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": 64}

    def default_device(self) -> Any:
        return CPU_DEVICE

    def devices(self) -> list[Any]:
        return [CPU_DEVICE]

    def default_dtypes(self, *, device: Any = None) -> dict[str, Any]:
        check_device(device, "default_dtypes")
        return {
            "real floating": _dtypes.float32,
            "complex floating": _dtypes.complex64,
            "integral": _dtypes.int32,
            "indexing": _dtypes.int32,
        }

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, Any]:
        check_device(device, "dtypes")
        if kind is None:
            names = ("bool",) + _KINDS["numeric"]
        elif isinstance(kind, tuple):
            names = tuple(n for k in kind for n in self._names(k))
        else:
            names = self._names(kind)
        # (bnp.bool is bnp.bool_)
        return {n: getattr(_dtypes, "bool_" if n == "bool" else n) for n in dict.fromkeys(names)}

    @staticmethod
    def _names(kind: str) -> tuple[str, ...]:
        if kind not in _KINDS:
            raise BluValueError(with_user_line(f"dtypes: unknown kind {kind!r}"))
        return _KINDS[kind]


def __array_namespace_info__() -> Info:
    """The Array API inspection namespace of ``blu.numpy``."""
    return Info()
