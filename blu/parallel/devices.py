"""Devices: N virtual CPU devices in one process, or one device per process after
``blu.parallel.initialize()``.

``BLU_NUM_CPU_DEVICES=N`` (read at each call, default 1) gives N virtual CPU devices; their
shards live in this process and ``blu.shard`` runs them as nested vmaps with in-process
collectives. After ``initialize()`` the devices are the processes of the job (one GPU each),
and this process can address only its own.
"""

from __future__ import annotations

from blu.core.config import config
from blu.core.errors import BluValueError
from blu.parallel import runtime
from blu.parallel.device import Device

__all__ = ["Device", "device_count", "devices", "local_devices", "num_cpu_devices"]


def num_cpu_devices() -> int:
    raw = config.num_cpu_devices
    n = raw if isinstance(raw, int) and not isinstance(raw, bool) else 0
    if n < 1:
        raise BluValueError(
            f"BLU_NUM_CPU_DEVICES must be a positive integer, got {raw!r} "
            "(blu.config.num_cpu_devices)"
        )
    return n


def devices() -> list[Device]:
    """Every device of the job: the processes' devices after ``initialize()``, else the
    ``BLU_NUM_CPU_DEVICES`` virtual CPU devices of this process."""
    if runtime.is_initialized():
        return runtime.world_devices()
    return [Device(i, "cpu", 0, i) for i in range(num_cpu_devices())]


def local_devices() -> list[Device]:
    """The devices this process can address."""
    return [d for d in devices() if d.process_index == runtime.process_index()]


def device_count() -> int:
    """The number of devices of the job (``len(devices())``)."""
    return len(devices())
