"""Mesh (devices laid out on named axes), PartitionSpec and NamedSharding, as in JAX.

    mesh = blu.parallel.make_mesh((2, 2), ("data", "model"))
    spec = P("data", None)            # dim 0 split over 'data', dim 1 replicated
    sharding = NamedSharding(mesh, spec)

A spec entry per array dimension: ``None`` (not split), an axis name, or a tuple of names (split
over their product, first name major). Mesh axes a spec does not name are replicated.
"""

from __future__ import annotations

import collections
import math
import operator
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core.errors import BluShapeError, BluValueError, with_user_line
from blu.parallel.devices import Device, local_devices
from blu.parallel.devices import devices as job_devices


class Mesh:
    """Devices arranged in an n-d array with one name per axis.

    Args:
        devices: an n-d array (or nested lists) of distinct ``Device`` objects.
        axis_names: one name per axis of ``devices``.

    ``with mesh:`` makes it the current mesh (JAX's legacy resource environment): a ``jit``
    whose ``in_shardings`` / ``out_shardings`` are bare ``PartitionSpec`` objects partitions
    over it.

    Raises:
        BluValueError: names do not match the array's rank, repeat, or devices repeat.
    """

    def __init__(self, devices: Any, axis_names: Sequence[Any]):
        if isinstance(axis_names, str):
            axis_names = (axis_names,)
        arr = np.empty(np.shape(devices), dtype=object)
        arr[...] = _as_object_array(devices)
        names = tuple(axis_names)
        if arr.ndim != len(names):
            raise BluValueError(
                with_user_line(
                    f"Mesh: {len(names)} axis names {names} for a device array of shape "
                    f"{arr.shape} (one name per axis)"
                )
            )
        if len(set(names)) != len(names):
            raise BluValueError(with_user_line(f"Mesh: axis names {names} repeat"))
        flat = list(arr.flat)
        if not flat:
            raise BluValueError(with_user_line(f"Mesh: no devices (shape {arr.shape})"))
        if not all(isinstance(d, Device) for d in flat):
            raise BluValueError(
                with_user_line("Mesh: devices must be blu Device objects (blu.devices())")
            )
        if len(set(flat)) != len(flat):
            raise BluValueError(with_user_line("Mesh: a device appears twice"))
        self.devices = arr
        self.axis_names = names

    @property
    def shape(self) -> collections.OrderedDict:
        """Axis name -> size, in axis order (an ``OrderedDict``, as JAX's)."""
        return collections.OrderedDict(zip(self.axis_names, self.devices.shape))

    @property
    def axis_sizes(self) -> tuple[int, ...]:
        """The size of each axis, in axis order (JAX's ``Mesh.axis_sizes``)."""
        return tuple(self.devices.shape)

    def __enter__(self) -> Mesh:
        _context.stack.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _context.stack.pop()

    @property
    def size(self) -> int:
        return self.devices.size

    @property
    def device_ids(self) -> np.ndarray:
        return np.vectorize(lambda d: d.id, otypes=[int])(self.devices)

    def coords(self, device: Device) -> dict[Any, int]:
        """Axis name -> index of ``device`` in this mesh."""
        where = np.argwhere(self.devices == device)
        if len(where) == 0:
            raise BluValueError(f"{device} is not in {self}")
        return dict(zip(self.axis_names, (int(i) for i in where[0])))

    def _key(self):
        return (self.axis_names, self.devices.shape, tuple(d for d in self.devices.flat))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mesh) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        axes = ", ".join(f"{n!r}: {s}" for n, s in self.shape.items())
        return f"Mesh({{{axes}}})"


class _Context(threading.local):
    def __init__(self) -> None:
        self.stack: list[Mesh] = []


_context = _Context()


def context_mesh() -> Mesh | None:
    """The mesh of the innermost ``with mesh:`` block of this thread (None: none)."""
    return _context.stack[-1] if _context.stack else None


def _as_object_array(devs: Any) -> np.ndarray:
    if isinstance(devs, np.ndarray):
        return devs
    out = np.empty(np.shape(np.asarray(devs, dtype=object)), dtype=object)
    out[...] = np.asarray(devs, dtype=object)
    return out


def make_mesh(axis_shapes: Sequence[int], axis_names: Sequence[Any], devices: Any = None) -> Mesh:
    """A mesh of the given shape over all devices (``blu.devices()``) or ``devices`` (JAX's
    keyword, as ``blu.make_mesh``'s).

    Raises:
        BluValueError: a size that is not a positive integer, or the shape's product is not
            the number of devices.
    """
    devs = list(job_devices() if devices is None else devices)
    try:
        shape = tuple(operator.index(s) for s in axis_shapes)
    except TypeError:
        shape = (0,)
    if any(s < 1 for s in shape):
        raise BluValueError(
            with_user_line(
                "make_mesh: axis_shapes must be positive integers, one per axis, got "
                f"{axis_shapes!r}"
            )
        )
    if math.prod(shape) != len(devs):
        raise BluValueError(
            with_user_line(
                f"make_mesh: mesh shape {shape} holds {math.prod(shape)} devices but there are "
                f"{len(devs)} (set BLU_NUM_CPU_DEVICES for virtual CPU devices, or launch one "
                "process per GPU with python -m blu.parallel.launch)"
            )
        )
    arr = np.empty(len(devs), dtype=object)
    arr[:] = devs
    return Mesh(arr.reshape(shape), axis_names)


class _Unconstrained:
    """``PartitionSpec.UNCONSTRAINED``: a dimension ``with_sharding_constraint`` leaves as the
    partitioner has it (JAX's)."""

    _one: _Unconstrained | None = None

    def __new__(cls) -> _Unconstrained:
        if cls._one is None:
            cls._one = super().__new__(cls)
        return cls._one

    def __repr__(self) -> str:
        return "P.UNCONSTRAINED"

    def __reduce__(self) -> str:
        return "UNCONSTRAINED"


UNCONSTRAINED = _Unconstrained()


class PartitionSpec(tuple):
    """How each dimension of an array is split over mesh axes: one entry per leading
    dimension, ``None`` (not split), a name, or a tuple of names. Missing trailing entries are
    ``None``.

    ``PartitionSpec.UNCONSTRAINED`` as an entry (``with_sharding_constraint`` only, as JAX's):
    the dimension keeps the split the partitioner gave it, less any mesh axis the constrained
    dimensions take (blu's partitioner does not search for a better one).
    """

    UNCONSTRAINED = UNCONSTRAINED

    def __new__(cls, *entries: Any):
        norm = []
        for e in entries:
            if isinstance(e, list):
                e = tuple(e)
            if isinstance(e, tuple) and len(e) == 1:
                e = e[0]
            if isinstance(e, tuple) and len(e) == 0:
                e = None
            norm.append(e)
        return super().__new__(cls, norm)

    def names_of(self, dim: int) -> tuple[Any, ...]:
        """The mesh axes dimension ``dim`` is split over (major first)."""
        if dim >= len(self):
            return ()
        e = self[dim]
        if e is None or e is UNCONSTRAINED:
            return ()
        return tuple(e) if isinstance(e, tuple) else (e,)

    def all_names(self) -> tuple[Any, ...]:
        return tuple(n for i in range(len(self)) for n in self.names_of(i))

    def __repr__(self) -> str:
        return "P(" + ", ".join(repr(e) for e in self) + ")"


P = PartitionSpec


def check_spec(
    spec: Any,
    mesh: Mesh,
    shape: tuple[int, ...],
    where: str,
    divide: bool = True,
    unconstrained: bool = False,
) -> PartitionSpec:
    """Validate ``spec`` for an array of ``shape`` on ``mesh`` (``divide=False``: ``shape`` is a
    block, to be multiplied rather than divided; ``unconstrained``: entries may be
    ``PartitionSpec.UNCONSTRAINED``).

    Raises:
        BluValueError: not a PartitionSpec, an unknown axis name, an axis used twice, more
            entries than dimensions, or ``UNCONSTRAINED`` where it is not allowed.
        BluShapeError: a dimension not divisible by the product of its mesh axes.
    """
    if spec is None:
        spec = PartitionSpec()
    if not isinstance(spec, PartitionSpec):
        raise BluValueError(
            with_user_line(f"{where}: expected a PartitionSpec (blu.parallel.P(...)), got {spec!r}")
        )
    if len(spec) > len(shape):
        raise BluValueError(
            with_user_line(
                f"{where}: spec {spec!r} has {len(spec)} entries for an array of rank "
                f"{len(shape)} (shape {shape})"
            )
        )
    for e in spec:
        if (e is UNCONSTRAINED and not unconstrained) or (
            isinstance(e, tuple) and UNCONSTRAINED in e
        ):
            raise BluValueError(
                with_user_line(
                    f"{where}: spec {spec!r}: PartitionSpec.UNCONSTRAINED is only allowed as a "
                    "whole entry of with_sharding_constraint's spec"
                )
            )
    used = spec.all_names()
    for n in used:
        if n not in mesh.shape:
            raise BluValueError(
                with_user_line(
                    f"{where}: spec {spec!r} names axis {n!r}, which is not an axis of {mesh} "
                    f"(axes: {mesh.axis_names})"
                )
            )
    if len(set(used)) != len(used):
        raise BluValueError(with_user_line(f"{where}: spec {spec!r} uses a mesh axis twice"))
    for dim in range(len(spec) if divide else 0):
        names = spec.names_of(dim)
        k = math.prod(mesh.shape[n] for n in names)
        if names and shape[dim] % k:
            raise BluShapeError(
                with_user_line(
                    f"{where}: spec {spec!r} splits dimension {dim} (size {shape[dim]}) of an "
                    f"array of shape {shape} over mesh axes {names} of total size {k}, which "
                    f"does not divide {shape[dim]}"
                )
            )
    return spec


class NamedSharding:
    """An array laid out on ``mesh`` as ``spec`` says.

    Args:
        mesh: the device mesh.
        spec: a PartitionSpec (default: fully replicated).
    """

    def __init__(self, mesh: Mesh, spec: PartitionSpec | None = None):
        if not isinstance(mesh, Mesh):
            raise BluValueError(with_user_line(f"NamedSharding: expected a Mesh, got {mesh!r}"))
        spec = PartitionSpec() if spec is None else spec
        if not isinstance(spec, PartitionSpec):
            raise BluValueError(
                with_user_line(f"NamedSharding: expected a PartitionSpec, got {spec!r}")
            )
        for n in spec.all_names():
            if n not in mesh.shape:
                raise BluValueError(
                    with_user_line(
                        f"NamedSharding: spec {spec!r} names axis {n!r}, not an axis of {mesh}"
                    )
                )
        self.mesh = mesh
        self.spec = spec

    @property
    def device_set(self) -> set[Device]:
        return set(self.mesh.devices.flat)

    @property
    def is_fully_replicated(self) -> bool:
        return all(self.mesh.shape[n] == 1 for n in self.spec.all_names())

    @property
    def num_devices(self) -> int:
        return self.mesh.size

    @property
    def addressable_devices(self) -> set[Device]:
        """The mesh's devices this process addresses (all of them on virtual CPU devices)."""
        return self.device_set & set(local_devices())

    @property
    def is_fully_addressable(self) -> bool:
        return self.addressable_devices == self.device_set

    memory_kind = None

    def addressable_devices_indices_map(
        self, global_shape: Sequence[int]
    ) -> dict[Device, tuple[slice, ...]]:
        """``devices_indices_map`` restricted to ``addressable_devices``."""
        mine = self.addressable_devices
        return {d: i for d, i in self.devices_indices_map(global_shape).items() if d in mine}

    def shard_shape(self, global_shape: Sequence[int]) -> tuple[int, ...]:
        """The shape of each device's block."""
        shape = tuple(global_shape)
        check_spec(self.spec, self.mesh, shape, "NamedSharding")
        return tuple(
            s // math.prod(self.mesh.shape[n] for n in self.spec.names_of(i))
            for i, s in enumerate(shape)
        )

    def devices_indices_map(self, global_shape: Sequence[int]) -> dict[Device, tuple[slice, ...]]:
        """Device -> the index (a tuple of slices) of its block in the global array."""
        shape = tuple(global_shape)
        block = self.shard_shape(shape)
        out = {}
        for dev in self.mesh.devices.flat:
            c = self.mesh.coords(dev)
            idx = []
            for i in range(len(shape)):
                lin = 0
                for n in self.spec.names_of(i):
                    lin = lin * self.mesh.shape[n] + c[n]
                idx.append(slice(lin * block[i], (lin + 1) * block[i]))
            out[dev] = tuple(idx)
        return out

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, NamedSharding)
            and self.mesh == other.mesh
            and _trim(self.spec) == _trim(other.spec)
        )

    def __hash__(self) -> int:
        return hash((self.mesh, _trim(self.spec)))

    def __repr__(self) -> str:
        return f"NamedSharding(mesh={self.mesh!r}, spec={self.spec!r})"


def _trim(spec: PartitionSpec) -> tuple:
    t = tuple(spec)
    while t and t[-1] is None:
        t = t[:-1]
    return t


class SingleDeviceSharding:
    """An array whole on one device (``jax.sharding.SingleDeviceSharding``): what ``x.sharding``
    is for a blu array that is not sharded.

    Args:
        device: the ``blu.parallel.Device`` holding it.
    """

    def __init__(self, device: Any):
        self.device = device

    @property
    def device_set(self) -> set[Device]:
        return {self.device}

    @property
    def addressable_devices(self) -> set[Device]:
        return {self.device}

    num_devices = 1
    is_fully_replicated = True
    is_fully_addressable = True
    memory_kind = None

    def shard_shape(self, global_shape: Sequence[int]) -> tuple[int, ...]:
        """The shape of the one block: the array's own."""
        return tuple(global_shape)

    def devices_indices_map(self, global_shape: Sequence[int]) -> dict[Device, tuple[slice, ...]]:
        """The device -> the whole array's index."""
        return {self.device: tuple(slice(None) for _ in global_shape)}

    addressable_devices_indices_map = devices_indices_map

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SingleDeviceSharding) and self.device == other.device

    def __hash__(self) -> int:
        return hash(("single", self.device))

    def __repr__(self) -> str:
        return f"SingleDeviceSharding(device={self.device!r})"
