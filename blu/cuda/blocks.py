"""What the caching allocator (``blu.cuda.allocator``) hands out and is built on: the size
rules (512-byte rounding, the small and large pools' segment sizes), the ``Backing`` protocol
it drives (device memory and stream events), and its ``Segment`` and ``Block`` records.
"""

from __future__ import annotations

from typing import Any, Protocol

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

ROUND = 512  # every block size is a multiple of this, and every block address too
SMALL_SIZE = 1 * MiB  # largest request served from the small pool
SMALL_SEGMENT = 2 * MiB  # segment size of the small pool
MIN_LARGE_ALLOC = 10 * MiB  # large requests under this share 20 MiB segments
LARGE_SEGMENT = 20 * MiB
SEGMENT_ROUND = 2 * MiB  # larger segments are rounded up to this


class Backing(Protocol):
    """What the caching allocator needs from the device (see ``blu.cuda.allocator``'s docstring)."""

    def malloc(self, nbytes: int) -> int: ...

    def free(self, ptr: int) -> None: ...

    def record_event(self, stream: int) -> Any: ...

    def event_done(self, event: Any) -> bool: ...

    def event_synchronize(self, event: Any) -> None: ...

    def release_event(self, event: Any) -> None: ...

    def describe(self) -> str: ...


def round_size(nbytes: int) -> int:
    """The block size for a request: at least 512 bytes, rounded up to a multiple of 512."""
    if nbytes <= ROUND:
        return ROUND
    return (nbytes + ROUND - 1) // ROUND * ROUND


def segment_size(size: int) -> int:
    """The segment size the allocator asks the driver for, for a block of ``size`` bytes."""
    if size <= SMALL_SIZE:
        return SMALL_SEGMENT
    if size < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return round_up(size, SEGMENT_ROUND)


def round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def format_bytes(n: int) -> str:
    """``1536 -> '1.50 KiB'``."""
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


class Segment:
    """One allocation from the backing, carved into a chain of blocks."""

    __slots__ = ("ptr", "size", "stream", "small")

    def __init__(self, ptr: int, size: int, stream: int, small: bool):
        self.ptr = ptr
        self.size = size
        self.stream = stream
        self.small = small

    def __repr__(self) -> str:
        pool = "small" if self.small else "large"
        return f"Segment({self.ptr:#x}, {format_bytes(self.size)}, stream={self.stream}, {pool})"


class Block:
    """A piece of a segment: live (handed out), pending (freed, waiting on events) or free.

    Attributes:
        ptr: device address (a multiple of 512).
        size: bytes reserved for it (a multiple of 512, at least ``requested``).
        requested: bytes the caller asked for.
        stream: the stream it belongs to (that of its segment).
        tag: what produced it, shown in out-of-memory reports.
    """

    __slots__ = (
        "ptr",
        "size",
        "requested",
        "stream",
        "segment",
        "prev",
        "next",
        "allocated",
        "pending",
        "stream_uses",
        "tag",
    )

    def __init__(self, ptr: int, size: int, segment: Segment):
        self.ptr = ptr
        self.size = size
        self.requested = 0
        self.stream = segment.stream
        self.segment = segment
        self.prev: Block | None = None
        self.next: Block | None = None
        self.allocated = False
        self.pending = 0  # events still to complete before the block may be reused
        self.stream_uses: set[int] | None = None
        self.tag: str | None = None

    @property
    def is_free(self) -> bool:
        return not self.allocated and not self.pending

    def __repr__(self) -> str:
        state = "live" if self.allocated else ("pending" if self.pending else "free")
        tag = f", tag={self.tag!r}" if self.tag else ""
        return (
            f"Block({self.ptr:#x}, {format_bytes(self.size)}, stream={self.stream}, {state}{tag})"
        )
