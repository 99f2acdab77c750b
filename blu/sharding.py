"""``blu.sharding`` (JAX's ``jax.sharding``): ``Mesh``, ``PartitionSpec``, ``NamedSharding`` and
the ``Sharding`` base class, the same objects as ``blu.parallel``'s.

    mesh = blu.make_mesh((2, 2), ("data", "model"))
    x = blu.device_put(x, NamedSharding(mesh, PartitionSpec("data", None)))

``isinstance(s, Sharding)`` holds for a ``NamedSharding`` and for a ``SingleDeviceSharding``
(``x.sharding`` of an array that is not sharded). JAX's explicit-axes mode
(``AxisType``, ``set_mesh``, ``reshard``) and abstract meshes are not in blu (see
``docs/coming_from_jax.md``).
"""

from __future__ import annotations

import abc

from blu.parallel.device import Device
from blu.parallel.mesh import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

__all__ = ["Device", "Mesh", "NamedSharding", "PartitionSpec", "Sharding", "SingleDeviceSharding"]


class Sharding(abc.ABC):  # noqa: B024 - a marker base, as jax.sharding.Sharding for isinstance
    """The base of blu's shardings (``NamedSharding``), for ``isinstance`` checks."""


Sharding.register(NamedSharding)
Sharding.register(SingleDeviceSharding)
