"""``Device``: one device of the job (a virtual CPU device, or one process's GPU).

The value type alone, below the runtime (which builds the job's devices after ``initialize()``)
and ``blu.parallel.devices`` (which lists them).
"""

from __future__ import annotations


class Device:
    """One device.

    Attributes:
        id: global index (0 .. number of devices - 1).
        platform: ``"cpu"`` (virtual or one process each) or ``"gpu"``.
        process_index: the process that owns it.
        local_id: its index on the owning host (the CUDA ordinal for GPUs).
    """

    __slots__ = ("id", "platform", "process_index", "local_id")

    def __init__(self, id: int, platform: str = "cpu", process_index: int = 0, local_id: int = 0):
        self.id = id
        self.platform = platform
        self.process_index = process_index
        self.local_id = local_id

    def __repr__(self) -> str:
        return f"{self.platform.upper()}Device(id={self.id})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and (self.id, self.platform, self.process_index) == (
            other.id,
            other.platform,
            other.process_index,
        )

    def __hash__(self) -> int:
        return hash((self.id, self.platform, self.process_index))
