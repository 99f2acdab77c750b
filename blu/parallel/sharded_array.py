"""Global arrays made of per-device shards: ``ShardedArray`` and ``device_put``.

On virtual CPU devices every shard lives in this process: the ShardedArray keeps the global
value and each shard is a view of its block, so ``np.asarray`` (the gathered array) costs
nothing. With one process per device, a process holds only its own block (the *local view*:
``aval`` and the data that jit and shard see are the block; ``shape`` is the global shape).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blu.core import pytree
from blu.core.array import Array
from blu.core.aval import ShapedArray
from blu.core.errors import BluValueError, with_user_line
from blu.core.interpreter import Tracer, canonicalize_arg, get_aval, to_numpy
from blu.parallel import runtime
from blu.parallel.devices import Device
from blu.parallel.mesh import NamedSharding, SingleDeviceSharding, check_spec


class Shard:
    """One device's block of a global array.

    Attributes:
        device: where it lives.
        index: a tuple of slices: where the block sits in the global array.
        replica_id: 0 for the first device holding this block, 1 for the next, ...
        data: the block (a ``blu.Array``; None in ``global_shards`` for a block another process
            holds).
    """

    __slots__ = ("device", "index", "replica_id", "data")

    def __init__(self, device: Device, index: tuple, replica_id: int, data: Array | None):
        self.device, self.index, self.replica_id, self.data = device, index, replica_id, data

    def __repr__(self) -> str:
        return f"Shard(device={self.device}, index={self.index}, replica_id={self.replica_id})"


class ShardedArray(Array):
    """A global array laid out over devices by a ``NamedSharding``.

    Use it like a ``blu.Array`` (``np.asarray`` gathers it); ``.sharding`` and
    ``.addressable_shards`` tell where its blocks are. Pass it to ``blu.shard`` to run a function
    on each device's block.
    """

    __slots__ = ("sharding", "_global_shape", "_local")
    _blu_sharded = True  # jit partitions over these (blu.parallel.spmd) unless f runs shard

    def __init__(self, value: np.ndarray, sharding: NamedSharding, global_shape: tuple,
                 local: bool = False, weak_type: bool = False):  # fmt: skip
        super().__init__(value, weak_type)
        self.sharding = sharding
        self._global_shape = tuple(global_shape)
        self._local = local  # value is this process's block (one process per device)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._global_shape

    @property
    def ndim(self) -> int:
        return len(self._global_shape)

    @property
    def size(self) -> int:
        return int(np.prod(self._global_shape, dtype=np.int64))

    def devices(self) -> set:
        """The devices holding its blocks."""
        return set(self.sharding.device_set)

    @property
    def is_fully_addressable(self) -> bool:
        return not self._local or self.sharding.mesh.size == 1

    def __len__(self) -> int:
        if not self._global_shape:
            raise TypeError("len() of a 0-d array")
        return self._global_shape[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if self._local and not (self.is_fully_addressable or self.sharding.is_fully_replicated):
            raise BluValueError(
                with_user_line(
                    f"this array ({self.sharding}) spans several processes; this process holds "
                    "only its block (x.addressable_shards[0].data): gather it inside blu.shard "
                    "with all_gather (out_specs P())"
                )
            )
        return super().__array__(dtype, copy)

    @property
    def is_fully_replicated(self) -> bool:
        """Whether every device holds the whole array."""
        return self.sharding.is_fully_replicated

    @property
    def addressable_shards(self) -> list[Shard]:
        """The blocks this process holds, one per device."""
        return self._shards(everywhere=False)

    @property
    def global_shards(self) -> list[Shard]:
        """The blocks of every device of the mesh, in mesh order; ``data`` is None for those
        another process holds (one process per device)."""
        return self._shards(everywhere=True)

    def _shards(self, everywhere: bool) -> list[Shard]:
        mesh, spec = self.sharding.mesh, self.sharding.spec
        idx = self.sharding.devices_indices_map(self._global_shape)
        unnamed = [n for n in mesh.axis_names if n not in spec.all_names()]
        out = []
        for dev, index in idx.items():
            coords = mesh.coords(dev)
            replica = 0  # this device's index among those holding the same block
            for n in unnamed:
                replica = replica * mesh.shape[n] + coords[n]
            if self._local:
                if dev.process_index != runtime.process_index():
                    if everywhere:
                        out.append(Shard(dev, index, replica, None))
                    continue
                data = Array(self._value, self.weak_type)
            else:
                data = Array(np.asarray(self._value[index]), self.weak_type)
            out.append(Shard(dev, index, replica, data))
        return out

    def local_block(self) -> Array:
        """This process's block (with one process per device) or the whole value."""
        return Array(self._value, self.weak_type)

    def __repr__(self) -> str:
        if self._local:
            return (
                f"ShardedArray(shape={self.shape}, dtype={self.dtype}, {self.sharding}, "
                "local block)"
            )
        body = np.array2string(self._value, separator=", ", prefix="ShardedArray(")
        return f"ShardedArray({body}, dtype={self.dtype}, sharding={self.sharding})"

    def __reduce__(self):
        return (Array, (np.asarray(self), self.weak_type))


class PlacedArray(Array):
    """A plain array put on one named device of this process (``device_put(x, device)`` for a
    device other than the job's first): it records the device
    (``x.devices()``, ``x.sharding``, ``x.device``). Its value lives in this process as any
    array's; operations on it give ordinary arrays."""

    __slots__ = ("_device",)

    def __init__(self, value: np.ndarray, device: Device, weak_type: bool = False):
        super().__init__(value, weak_type)
        self._device = device

    def devices(self) -> set:
        return {self._device}

    @property
    def device(self) -> Device:
        return self._device

    @property
    def sharding(self) -> Any:
        return SingleDeviceSharding(self._device)

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, device={self._device!r})"

    def __reduce__(self):
        return (Array, (np.asarray(self), self.weak_type))


def _global_value(x: Any) -> tuple[np.ndarray, bool]:
    if isinstance(x, ShardedArray):
        return np.asarray(x), x.weak_type
    x = canonicalize_arg(x)
    if isinstance(x, Array):
        return x._value, x.weak_type
    aval = get_aval(x)
    return to_numpy(x, aval), False


def put_global(value: np.ndarray, sharding: NamedSharding, weak_type: bool = False) -> ShardedArray:
    """A ShardedArray of the global ``value`` (every process passes the same value)."""
    shape = tuple(value.shape)
    check_spec(sharding.spec, sharding.mesh, shape, "device_put")
    if runtime.is_initialized():
        mesh_procs = sorted(d.process_index for d in sharding.mesh.devices.flat)
        if mesh_procs != list(range(runtime.process_count())):
            raise BluValueError(
                with_user_line(
                    f"device_put: {sharding.mesh} must hold one device of each of the "
                    f"{runtime.process_count()} processes (blu.parallel.make_mesh)"
                )
            )
        index = sharding.devices_indices_map(shape)[runtime.this_device()]
        return ShardedArray(
            np.array(value[index]), sharding, shape, local=True, weak_type=weak_type
        )
    return ShardedArray(np.array(value), sharding, shape, weak_type=weak_type)


def from_local(block: np.ndarray, sharding: NamedSharding, weak_type: bool = False) -> ShardedArray:
    """A ShardedArray from this process's block (one process per device)."""
    block = np.asarray(block)
    shape = []
    for i, s in enumerate(block.shape):
        k = int(
            np.prod([sharding.mesh.shape[n] for n in sharding.spec.names_of(i)], dtype=np.int64)
        )
        shape.append(s * k)
    return ShardedArray(block, sharding, tuple(shape), local=True, weak_type=weak_type)


def device_put(x: Any, device_or_sharding: Any = None) -> Any:
    """Place ``x`` (an array or pytree of arrays) on devices.

    Args:
        x: arrays (numpy, blu, Python scalars) or a pytree of them.
        device_or_sharding: a ``NamedSharding`` (or a pytree of them matching ``x``) to lay the
            global array out over a mesh; a ``Device``, a ``SingleDeviceSharding`` (another
            array's ``x.sharding``) or ``None`` for a plain array.

    Returns:
        ``ShardedArray`` leaves for shardings; for a ``Device`` other than the job's first, a
        ``PlacedArray`` that records it (``x.devices() == {device}``, ``x.sharding`` a
        ``SingleDeviceSharding`` of it); ``blu.Array`` leaves otherwise. A traced value (inside
        ``jit``/``grad``/``vmap``) comes back as itself, as JAX's ``device_put`` under a
        transform: a ``NamedSharding`` then constrains its layout as ``with_sharding_constraint``
        does (in a ``jit`` partitioned over the mesh; elsewhere it is only checked).

    Raises:
        BluValueError / BluShapeError: the spec does not fit the array or the mesh; a
            ``Device`` that is not a device of the job, or one that another process holds
            (one process per device: this process addresses only its own).
    """

    def one(leaf, s):
        if isinstance(s, SingleDeviceSharding):
            s = s.device
        if isinstance(leaf, Tracer):
            return _traced(leaf, s)
        value, weak = _global_value(leaf)
        if isinstance(s, Device) and _check_device(s):
            return PlacedArray(np.array(value), s, weak)
        if s is None or isinstance(s, Device):
            return Array(np.array(value), weak)
        if not isinstance(s, NamedSharding):
            raise BluValueError(
                with_user_line(
                    f"device_put: expected a NamedSharding, SingleDeviceSharding or Device, "
                    f"got {s!r}"
                )
            )
        return put_global(value, s, weak)

    kinds = (NamedSharding, SingleDeviceSharding, Device)
    is_leaf = lambda v: isinstance(v, kinds) or v is None  # noqa: E731
    if device_or_sharding is None or isinstance(device_or_sharding, kinds):
        return pytree.tree_map(lambda leaf: one(leaf, device_or_sharding), x)
    return pytree.tree_map(lambda s, sub: pytree.tree_map(lambda leaf: one(leaf, s), sub),
                           device_or_sharding, x, is_leaf=is_leaf)  # fmt: skip


def _traced(leaf: Tracer, s: Any) -> Any:
    """``device_put`` of a traced value: the value itself (JAX's ``device_put_p`` is the
    identity on values and derivatives), its layout constrained by a ``NamedSharding``."""
    if isinstance(s, Device):
        _check_device(s)
        return leaf
    if s is None:
        return leaf
    if not isinstance(s, NamedSharding):
        raise BluValueError(
            with_user_line(
                f"device_put: expected a NamedSharding, SingleDeviceSharding or Device, got {s!r}"
            )
        )
    check_spec(s.spec, s.mesh, get_aval(leaf).shape, "device_put")
    return leaf if _constrain is None else _constrain(leaf, s)


# spmd's with_sharding_constraint, registered by spmd when it is imported (blu.parallel imports
# it): spmd is above this module, so importing it here would close an import cycle
_constrain: Any = None


def register_constraint(fn: Any) -> None:
    """Set the function a traced ``device_put`` with a ``NamedSharding`` calls (spmd's)."""
    global _constrain
    _constrain = fn


def _check_device(d: Device) -> bool:
    """Whether the array must record ``d`` (a plain array reports device 0); raises for a
    device out of the job or held by another process."""
    from blu.parallel.devices import devices, local_devices

    if d not in devices():
        raise BluValueError(
            with_user_line(f"device_put: {d!r} is not a device of this job ({devices()})")
        )
    mine = local_devices()
    if d not in mine:
        raise BluValueError(
            with_user_line(
                f"device_put: {d!r} belongs to process {d.process_index}, not to this process "
                f"({runtime.process_index()}, devices {mine}): with one process per device, "
                "lay data out over a mesh instead: device_put(x, NamedSharding(mesh, P(...)))"
            )
        )
    # (a plain array reports the CPU device 0; any other device, a GPU of a process included,
    # is recorded)
    return (d.platform, d.id, d.process_index) != ("cpu", 0, 0)


def local_aval(x: ShardedArray) -> ShapedArray:
    return ShapedArray(np.shape(x._value), x.dtype, x.weak_type)
