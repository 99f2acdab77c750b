"""The caching device-memory allocator (in the manner of PyTorch's CUDACachingAllocator).

``cuMemAlloc``/``cuMemFree`` are slow (hundreds of microseconds, and ``cuMemFree`` synchronizes
the device), so blu asks the driver for large *segments* and hands out *blocks* carved from them,
keeping freed blocks cached for reuse. The design, and why:

- **Rounding.** Every request is rounded up to a multiple of 512 bytes (at least 512), so blocks
  are 512-byte aligned (cuBLASLt and vectorized kernels want 16-256-byte alignment) and sizes
  repeat, which makes reuse likely.
- **Two pools.** Blocks of at most 1 MiB come from the *small pool*, whose segments are 2 MiB;
  larger blocks come from the *large pool*, whose segments are 20 MiB for requests under 10 MiB
  (so several mid-size buffers share one segment) and the request rounded up to 2 MiB otherwise.
  Keeping small blocks out of large segments stops short-lived scalars from pinning big segments.
- **Best fit, splitting.** A request takes the smallest cached free block that fits (ties: lowest
  address) in its pool and stream; the rest of the block is split off as a new free block when it
  is at least 512 bytes (small pool) or more than 1 MiB (large pool; smaller remainders stay with
  the block as slack, which keeps the large pool from fragmenting into slivers).
- **Coalescing.** A freed block merges with its free neighbours in the same segment; a segment
  whose blocks are all free is one free block again and can go back to the driver.
- **Streams.** A segment belongs to the stream it was allocated for, and so do its blocks. A block
  freed on stream S is reused only for allocations on S: work queued later on S runs after the
  work that used the block, so no synchronization is needed. If a block was also used on other
  streams (``record_stream``), freeing it records an event on each of those streams and the block
  joins the free pool only once all those events have completed (polled at each allocation).
- **Out of memory.** When the driver refuses a segment, the allocator waits for the pending
  events, returns every fully free cached segment to the driver (all streams), and retries
  (for large requests also with the smallest segment that fits). If that fails too, it raises
  ``CudaOutOfMemoryError`` (a ``BluOutOfMemoryError``) saying the bytes asked and free and
  listing the largest live buffers and the ``tag`` of each (what produced it, e.g.
  ``"dot_general f32[1024,3072] (gpt2.py:88)"``), and the user's line.
- **A cap.** ``limit`` (default: ``blu.config.gpu_memory_limit``, read at each new segment; 0 is
  none) bounds the bytes held from the driver, as PyTorch's ``set_per_process_memory_fraction``:
  a segment past it fails as if the device were full. Tests use it to run out of memory on the
  simulated GPU; on a GPU it leaves room to other processes.
- **Statistics.** ``allocated_bytes`` counts rounded sizes of live blocks (the figure PyTorch's
  ``max_memory_allocated`` peaks over), ``reserved_bytes`` the segments held from the driver.

The allocator knows nothing about CUDA itself: it drives a *backing* object with ``malloc(n) ->
ptr`` (raising ``BackingOutOfMemory``), ``free(ptr)``, ``record_event(stream) -> event``,
``event_done(event) -> bool``, ``event_synchronize(event)``, ``release_event(event)``,
``describe() -> str`` and, optionally, ``mem_info() -> (free, total)`` bytes (``Backing``; it,
the size rules and the ``Segment``/``Block`` records are in ``blu.cuda.blocks``).
``blu.cuda.driver.CudaBacking`` implements it with the driver API; ``blu.cuda.fake.FakeBacking``
simulates it (with streams whose work completes on command) for
the CPU tests.
"""

from __future__ import annotations

import bisect
import threading
from typing import Any

from blu.core.config import config
from blu.core.errors import BluValueError, with_user_line
from blu.cuda.blocks import (  # noqa: F401  (re-exported: the allocator's sizes and records)
    LARGE_SEGMENT,
    MIN_LARGE_ALLOC,
    ROUND,
    SEGMENT_ROUND,
    SMALL_SEGMENT,
    SMALL_SIZE,
    Backing,
    Block,
    GiB,
    KiB,
    MiB,
    Segment,
    format_bytes,
    round_size,
    round_up,
    segment_size,
)
from blu.cuda.errors import BackingOutOfMemory, CudaOutOfMemoryError

MAX_REPORTED = 10  # live buffers listed in an out-of-memory error

_STAT_KEYS = (
    "allocated_bytes",
    "peak_allocated_bytes",
    "requested_bytes",
    "reserved_bytes",
    "peak_reserved_bytes",
    "num_allocs",
    "num_frees",
    "num_ooms",
    "num_alloc_retries",
    "num_segments",
    "num_backing_mallocs",
    "num_backing_frees",
    "active_blocks",
    "pending_blocks",
)


class CachingAllocator:
    """Device memory in cached, stream-ordered blocks (see the module docstring for the design).

    Args:
        backing: the device-memory source (``malloc``/``free``/events; see ``Backing``).
        name: how the device is named in error messages (e.g. ``"cuda:0"``).
        limit: the most bytes to hold from the backing (0: no cap; None: the
            ``gpu_memory_limit`` flag, read at each new segment).

    Thread-safe: one lock guards every public method.
    """

    def __init__(self, backing: Backing, name: str = "device", limit: int | None = None):
        self.backing = backing
        self.name = name
        self.limit = limit
        self._lock = threading.RLock()
        # free blocks per (small?, stream): a sorted list of (size, ptr) and a ptr -> Block map
        self._free_keys: dict[tuple[bool, int], list[tuple[int, int]]] = {}
        self._free_blocks: dict[int, Block] = {}
        self._segments: dict[int, Segment] = {}
        self._live: dict[int, Block] = {}
        self._pending: list[tuple[Block, list[Any]]] = []
        self._stats = dict.fromkeys(_STAT_KEYS, 0)

    # ---- public API ----------------------------------------------------------------------------

    def malloc(self, nbytes: int, stream: int = 0, tag: str | None = None) -> Block:
        """A live block of at least ``nbytes`` bytes for use on ``stream``.

        Args:
            nbytes: bytes wanted (>= 0; 0 still gets a 512-byte block, so addresses are unique).
            stream: the stream (an int handle) the block will be used on.
            tag: what the buffer is for, shown in out-of-memory reports.

        Raises:
            CudaOutOfMemoryError: the device has no room even after the cache was emptied.
            BluValueError: ``nbytes`` is negative.
        """
        if nbytes < 0:
            raise BluValueError(f"allocator: cannot allocate {nbytes} bytes")
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        with self._lock:
            if self._pending:
                self._process_events()
            block = self._take_free(size, small, stream)
            if block is None:
                block = self._new_segment_block(size, small, stream, nbytes, tag)
            self._split(block, size)
            block.allocated = True
            block.requested = nbytes
            block.tag = tag
            self._live[block.ptr] = block
            st = self._stats
            st["allocated_bytes"] += block.size
            st["requested_bytes"] += nbytes
            st["num_allocs"] += 1
            st["active_blocks"] += 1
            if st["allocated_bytes"] > st["peak_allocated_bytes"]:
                st["peak_allocated_bytes"] = st["allocated_bytes"]
            return block

    def free(self, block: Block) -> None:
        """Return a live block. If it was used on other streams (``record_stream``), it becomes
        reusable once those streams' work queued so far has finished.

        Raises:
            BluValueError: the block is not live (freed twice, or not from this allocator).
        """
        with self._lock:
            if self._live.get(block.ptr) is not block:
                raise BluValueError(f"allocator {self.name}: free of a block not live: {block!r}")
            del self._live[block.ptr]
            block.allocated = False
            st = self._stats
            st["allocated_bytes"] -= block.size
            st["requested_bytes"] -= block.requested
            st["num_frees"] += 1
            st["active_blocks"] -= 1
            uses, block.stream_uses = block.stream_uses, None
            if uses:
                events = [self.backing.record_event(s) for s in sorted(uses)]
                block.pending = len(events)
                self._pending.append((block, events))
                st["pending_blocks"] += 1
            else:
                self._release_block(block)

    def record_stream(self, block: Block, stream: int) -> None:
        """Note that ``block`` is also used by work on ``stream`` (not its own): when freed, it is
        not reused before that work is done."""
        with self._lock:
            if not block.allocated:
                raise BluValueError(f"allocator {self.name}: record_stream on a dead {block!r}")
            if stream != block.stream:
                if block.stream_uses is None:
                    block.stream_uses = set()
                block.stream_uses.add(stream)

    def empty_cache(self) -> None:
        """Wait for pending blocks, then return every fully free segment to the device."""
        with self._lock:
            self._synchronize_events()
            self._release_cached_segments()

    def synchronize_events(self) -> None:
        """Wait for the events of pending blocks (freed blocks used on other streams)."""
        with self._lock:
            self._synchronize_events()

    def cap(self) -> int:
        """The bytes this allocator may hold from the backing (0: no cap)."""
        limit = config.gpu_memory_limit if self.limit is None else self.limit
        try:
            return max(int(limit or 0), 0)
        except (TypeError, ValueError):
            raise BluValueError(
                f"gpu_memory_limit (BLU_GPU_MEMORY_LIMIT) = {limit!r}: expected a whole number "
                "of bytes"
            ) from None

    def free_bytes(self) -> int | None:
        """Bytes a new segment could still take: the backing's free memory (``mem_info``),
        within the cap; None where neither is known. Cached free blocks are not counted."""
        with self._lock:
            free = None
            mem_info = getattr(self.backing, "mem_info", None)
            if mem_info is not None:
                try:
                    free = int(mem_info()[0])
                except Exception:  # noqa: BLE001 - a report without the driver's figure
                    free = None
            cap = self.cap()
            if cap:
                room = max(cap - self._stats["reserved_bytes"], 0)
                free = room if free is None else min(free, room)
            return free

    def available_bytes(self) -> int | None:
        """The most bytes new allocations could get now: ``free_bytes()`` plus the cached free
        blocks (which may be split over segments: a single block may get less); None where
        the backing's free memory is unknown and there is no cap."""
        with self._lock:
            free = self.free_bytes()
            if free is None:
                return None
            return free + sum(b.size for b in self._free_blocks.values())

    def stats(self) -> dict[str, int]:
        """A copy of the statistics (bytes and counts; see the module docstring)."""
        with self._lock:
            return dict(self._stats)

    def reset_peak_stats(self) -> None:
        """Set the peaks to the current values."""
        with self._lock:
            self._stats["peak_allocated_bytes"] = self._stats["allocated_bytes"]
            self._stats["peak_reserved_bytes"] = self._stats["reserved_bytes"]

    def live_blocks(self) -> list[Block]:
        """Live blocks, largest first."""
        with self._lock:
            return sorted(self._live.values(), key=lambda b: (-b.size, b.ptr))

    def segments(self) -> list[Segment]:
        with self._lock:
            return sorted(self._segments.values(), key=lambda s: s.ptr)

    def snapshot(self) -> list[dict[str, Any]]:
        """Every segment with its blocks in address order (for debugging and tests)."""
        with self._lock:
            out = []
            for seg in self.segments():
                blocks = []
                b = self._segment_head(seg)
                while b is not None:
                    state = "live" if b.allocated else ("pending" if b.pending else "free")
                    blocks.append({"ptr": b.ptr, "size": b.size, "state": state, "tag": b.tag})
                    b = b.next
                out.append(
                    {
                        "ptr": seg.ptr,
                        "size": seg.size,
                        "stream": seg.stream,
                        "pool": "small" if seg.small else "large",
                        "blocks": blocks,
                    }
                )
            return out

    def memory_summary(self) -> str:
        """A short human-readable summary of the statistics and the largest live buffers."""
        st = self.stats()
        lines = [
            f"allocator {self.name}: {format_bytes(st['allocated_bytes'])} allocated in "
            f"{st['active_blocks']} live buffers "
            f"(peak {format_bytes(st['peak_allocated_bytes'])}), "
            f"{format_bytes(st['reserved_bytes'])} reserved in {st['num_segments']} segments "
            f"(peak {format_bytes(st['peak_reserved_bytes'])}); {st['num_allocs']} allocations, "
            f"{st['num_frees']} frees, {st['num_ooms']} out-of-memory errors"
        ]
        live = self.live_blocks()[:MAX_REPORTED]
        if live:
            lines.append("largest live buffers:")
            lines += [
                f"  {format_bytes(b.size):>12}  {b.tag or '(untagged)'}  (stream {b.stream})"
                for b in live
            ]
        return "\n".join(lines)

    # ---- free lists ----------------------------------------------------------------------------

    def _take_free(self, size: int, small: bool, stream: int) -> Block | None:
        keys = self._free_keys.get((small, stream))
        if not keys:
            return None
        i = bisect.bisect_left(keys, (size, -1))
        if i == len(keys):
            return None
        _, ptr = keys.pop(i)
        return self._free_blocks.pop(ptr)

    def _insert_free(self, block: Block) -> None:
        keys = self._free_keys.setdefault((block.segment.small, block.stream), [])
        bisect.insort(keys, (block.size, block.ptr))
        self._free_blocks[block.ptr] = block

    def _remove_free(self, block: Block) -> None:
        keys = self._free_keys[(block.segment.small, block.stream)]
        i = bisect.bisect_left(keys, (block.size, block.ptr))
        assert keys[i] == (block.size, block.ptr), "allocator free list out of order"
        del keys[i]
        del self._free_blocks[block.ptr]

    # ---- splitting and coalescing --------------------------------------------------------------

    def _split(self, block: Block, size: int) -> None:
        rest = block.size - size
        if rest < ROUND or (not block.segment.small and rest <= SMALL_SIZE):
            return
        tail = Block(block.ptr + size, rest, block.segment)
        tail.prev, tail.next = block, block.next
        if block.next is not None:
            block.next.prev = tail
        block.next = tail
        block.size = size
        self._insert_free(tail)

    def _release_block(self, block: Block) -> None:
        """A block no longer used: merge with free neighbours, then cache it."""
        prev = block.prev
        if prev is not None and prev.is_free:
            self._remove_free(prev)
            prev.size += block.size
            prev.next = block.next
            if block.next is not None:
                block.next.prev = prev
            block = prev
        nxt = block.next
        if nxt is not None and nxt.is_free:
            self._remove_free(nxt)
            block.size += nxt.size
            block.next = nxt.next
            if nxt.next is not None:
                nxt.next.prev = block
        block.tag = None
        block.requested = 0
        self._insert_free(block)

    # ---- segments ------------------------------------------------------------------------------

    def _new_segment_block(
        self, size: int, small: bool, stream: int, nbytes: int, tag: str | None
    ) -> Block:
        seg_size = segment_size(size)
        ptr = self._backing_malloc(seg_size)
        if ptr is None:
            # out of memory: wait for pending frees, reuse what they give back, else empty the
            # cache and try again (large requests also with the smallest segment that fits)
            self._stats["num_alloc_retries"] += 1
            self._synchronize_events()
            block = self._take_free(size, small, stream)
            if block is not None:
                return block
            self._release_cached_segments()
            ptr = self._backing_malloc(seg_size)
            if ptr is None and not small and seg_size > round_up(size, SEGMENT_ROUND):
                seg_size = round_up(size, SEGMENT_ROUND)
                ptr = self._backing_malloc(seg_size)
            if ptr is None:
                self._stats["num_ooms"] += 1
                raise self._oom_error(nbytes, size, stream, tag)
        seg = Segment(ptr, seg_size, stream, small)
        self._segments[ptr] = seg
        st = self._stats
        st["reserved_bytes"] += seg_size
        st["num_segments"] += 1
        if st["reserved_bytes"] > st["peak_reserved_bytes"]:
            st["peak_reserved_bytes"] = st["reserved_bytes"]
        return Block(ptr, seg_size, seg)

    def _backing_malloc(self, nbytes: int) -> int | None:
        cap = self.cap()
        if cap and self._stats["reserved_bytes"] + nbytes > cap:
            return None  # past the cap: as if the device were full
        try:
            ptr = self.backing.malloc(nbytes)
        except BackingOutOfMemory:
            return None
        self._stats["num_backing_mallocs"] += 1
        return ptr

    def _segment_head(self, seg: Segment) -> Block:
        ptr = seg.ptr
        b = self._live.get(ptr) or self._free_blocks.get(ptr)
        if b is None:  # the head block is pending
            b = next(blk for blk, _ in self._pending if blk.ptr == ptr)
        return b

    def _release_cached_segments(self) -> None:
        for key, keys in list(self._free_keys.items()):
            keep = []
            for size, ptr in keys:
                block = self._free_blocks[ptr]
                seg = block.segment
                if block.prev is None and block.next is None:  # the whole segment is free
                    assert seg.ptr == ptr and seg.size == size
                    del self._free_blocks[ptr]
                    del self._segments[ptr]
                    self.backing.free(ptr)
                    st = self._stats
                    st["reserved_bytes"] -= seg.size
                    st["num_segments"] -= 1
                    st["num_backing_frees"] += 1
                else:
                    keep.append((size, ptr))
            self._free_keys[key] = keep

    # ---- events --------------------------------------------------------------------------------

    def _process_events(self) -> None:
        """Blocks whose events have all completed join the free pool."""
        still = []
        for block, events in self._pending:
            left = []
            for ev in events:
                if self.backing.event_done(ev):
                    self.backing.release_event(ev)
                else:
                    left.append(ev)
            block.pending = len(left)
            if left:
                still.append((block, left))
            else:
                self._stats["pending_blocks"] -= 1
                self._release_block(block)
        self._pending = still

    def _synchronize_events(self) -> None:
        pending, self._pending = self._pending, []
        for block, events in pending:
            for ev in events:
                self.backing.event_synchronize(ev)
                self.backing.release_event(ev)
            block.pending = 0
            self._stats["pending_blocks"] -= 1
            self._release_block(block)

    # ---- out of memory -------------------------------------------------------------------------

    def _oom_error(self, nbytes: int, size: int, stream: int, tag: str | None) -> Exception:
        st = self._stats
        live = sorted(self._live.values(), key=lambda b: (-b.size, b.ptr))
        largest = [(b.size, b.tag, b.stream) for b in live[:MAX_REPORTED]]
        free = self.free_bytes()
        cap = self.cap()
        what = f" for {tag}" if tag else ""
        lines = [
            f"CUDA out of memory on {self.name}: could not allocate {format_bytes(size)} "
            f"({nbytes:,} bytes requested{what}, stream {stream}); "
            + (f"{format_bytes(free)} ({free:,} bytes) free." if free is not None else "free "
               "memory unknown."),
            f"  {format_bytes(st['allocated_bytes'])} allocated in {len(live)} live buffers, "
            f"{format_bytes(st['reserved_bytes'])} reserved by the allocator after emptying its "
            f"cache" + (f" (capped at {format_bytes(cap)}: gpu_memory_limit)" if cap else "")
            + f"; device: {self.backing.describe()}.",
        ]  # fmt: skip
        if largest:
            lines.append("  largest live buffers (size, what produced it, stream):")
            lines += [
                f"    {format_bytes(s):>12}  {t or '(untagged)'}  (stream {strm})"
                for s, t, strm in largest
            ]
            if len(live) > MAX_REPORTED:
                rest = sum(b.size for b in live[MAX_REPORTED:])
                lines.append(f"    ... and {len(live) - MAX_REPORTED} more ({format_bytes(rest)})")
        lines.append(
            "  Free live arrays you no longer need (del x), donate arguments to jit "
            "(donate_argnums), use a smaller batch, or rematerialize (blu.checkpoint)."
        )
        return CudaOutOfMemoryError(
            with_user_line("\n".join(lines)),
            nbytes=nbytes,
            largest=largest,
            free_bytes=free,
            allocated_bytes=st["allocated_bytes"],
            tag=tag,
        )
