"""The caching allocator on a simulated device (blu.cuda.fake.FakeBacking): splitting,
coalescing, pools, stream-ordered reuse, statistics, the out-of-memory path, and a hypothesis
state machine of random alloc/free/record_stream/complete/empty_cache sequences checked against
a model (no overlapping live blocks, no cross-stream reuse of memory still in use, statistics)."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

from blu.core.errors import BluError, BluValueError
from blu.cuda.allocator import (
    LARGE_SEGMENT,
    ROUND,
    SMALL_SEGMENT,
    SMALL_SIZE,
    CachingAllocator,
    MiB,
    round_size,
    segment_size,
)
from blu.cuda.errors import CudaOutOfMemoryError
from blu.cuda.fake import FakeBacking


def make(capacity=1 << 40):
    fake = FakeBacking(capacity)
    return fake, CachingAllocator(fake, name="fake:0")


def test_round_and_segment_sizes():
    assert [round_size(n) for n in (0, 1, 512, 513, 1024, 1025)] == [
        512,
        512,
        512,
        1024,
        1024,
        1536,
    ]
    assert segment_size(512) == SMALL_SEGMENT
    assert segment_size(SMALL_SIZE) == SMALL_SEGMENT
    assert segment_size(SMALL_SIZE + 512) == LARGE_SEGMENT
    assert segment_size(9 * MiB) == LARGE_SEGMENT
    assert segment_size(10 * MiB) == 10 * MiB
    assert segment_size(10 * MiB + 512) == 12 * MiB


def test_small_blocks_share_a_segment_and_coalesce():
    fake, a = make()
    blocks = [a.malloc(1000, tag=f"b{i}") for i in range(3)]
    assert len(a.segments()) == 1 and fake.num_mallocs == 1
    # consecutive best-fit splits of one segment: adjacent addresses
    assert [b.ptr - blocks[0].ptr for b in blocks] == [0, 1024, 2048]
    assert all(b.size == 1024 and b.ptr % ROUND == 0 for b in blocks)
    a.free(blocks[1])
    a.free(blocks[0])  # merges with the freed neighbour
    (seg,) = a.snapshot()
    assert [(b["size"], b["state"]) for b in seg["blocks"]] == [
        (2048, "free"),
        (1024, "live"),
        (SMALL_SEGMENT - 3072, "free"),
    ]
    a.free(blocks[2])  # all three merge: the segment is one free block
    (seg,) = a.snapshot()
    assert [(b["size"], b["state"]) for b in seg["blocks"]] == [(SMALL_SEGMENT, "free")]
    assert a.stats()["reserved_bytes"] == SMALL_SEGMENT
    a.empty_cache()
    s = a.stats()
    assert s["reserved_bytes"] == 0 and s["num_segments"] == 0 and fake.live == {}


def test_best_fit_prefers_smallest_block():
    _, a = make()
    x = [a.malloc(n) for n in (4096, 512, 2048, 512, 8192, 512)]
    a.free(x[0])  # 4096 hole
    a.free(x[2])  # 2048 hole
    a.free(x[4])  # 8192 hole
    b = a.malloc(1500)  # best fit: the 2048 hole, split into 1536 + 512
    assert b.ptr == x[2].ptr and b.size == 1536
    c = a.malloc(3000)  # the 4096 hole
    assert c.ptr == x[0].ptr


def test_large_pool_split_keeps_slack_under_1mib():
    _, a = make()
    b = a.malloc(3 * MiB)  # from a 20 MiB segment: split, the other 17 MiB stay free
    assert b.size == 3 * MiB and b.segment.size == LARGE_SEGMENT
    c = a.malloc(16 * MiB + 512)  # best fit: the 17 MiB rest; 1 MiB - 512 left is slack
    assert c.ptr == b.ptr + 3 * MiB and c.size == 17 * MiB
    d = a.malloc(17 * MiB + 512)  # own segment (>= 10 MiB, rounded up to 2 MiB): 18 MiB
    assert d.segment.size == 18 * MiB and d.size == 18 * MiB
    e = a.malloc(10 * MiB)  # own segment, no remainder
    a.free(e)
    f = a.malloc(8 * MiB)  # best fit: the 10 MiB block, split (2 MiB > 1 MiB left)
    assert f.ptr == e.ptr and f.size == 8 * MiB
    assert a.stats()["allocated_bytes"] == (3 + 17 + 18 + 8) * MiB


def test_small_and_large_pools_are_separate():
    _, a = make()
    big = a.malloc(4 * MiB)
    a.free(big)
    small = a.malloc(1000)
    assert not (big.ptr <= small.ptr < big.ptr + LARGE_SEGMENT)
    assert len(a.segments()) == 2


def test_streams_do_not_share_free_blocks():
    fake, a = make()
    b = a.malloc(1000, stream=1)
    a.free(b)
    c = a.malloc(1000, stream=2)
    assert c.segment is not b.segment
    d = a.malloc(1000, stream=1)
    assert d.ptr == b.ptr  # reused on its own stream


def test_record_stream_defers_reuse_until_event_completes():
    fake, a = make()
    b = a.malloc(1000, stream=1)
    a.record_stream(b, 2)
    fake.submit(2)  # a kernel on stream 2 reads b
    a.free(b)
    assert a.stats()["pending_blocks"] == 1
    c = a.malloc(1000, stream=1)
    assert c.ptr != b.ptr  # stream 2 may still read b
    fake.complete(2)
    d = a.malloc(1000, stream=1)
    assert d.ptr == b.ptr and a.stats()["pending_blocks"] == 0
    assert fake.events_live == 0


def test_stats_and_peak():
    _, a = make()
    b1 = a.malloc(1000)
    b2 = a.malloc(3 * MiB + 1)
    s = a.stats()
    assert s["allocated_bytes"] == 1024 + 3 * MiB + 512
    assert s["requested_bytes"] == 1000 + 3 * MiB + 1
    assert s["reserved_bytes"] == SMALL_SEGMENT + LARGE_SEGMENT
    assert s["num_allocs"] == 2 and s["active_blocks"] == 2
    a.free(b2)
    s = a.stats()
    assert s["allocated_bytes"] == 1024 and s["peak_allocated_bytes"] == 1024 + 3 * MiB + 512
    a.reset_peak_stats()
    assert a.stats()["peak_allocated_bytes"] == 1024
    a.free(b1)
    assert a.stats()["num_frees"] == 2 and a.stats()["allocated_bytes"] == 0


def test_double_free_and_foreign_block_raise():
    _, a = make()
    b = a.malloc(10)
    a.free(b)
    with pytest.raises(BluValueError, match="not live"):
        a.free(b)
    with pytest.raises(BluValueError):
        a.malloc(-1)


def test_oom_frees_cache_and_retries():
    fake, a = make(capacity=40 * MiB)
    x = a.malloc(12 * MiB, stream=1)
    a.free(x)  # 12 MiB cached on stream 1
    y = a.malloc(4 * MiB, stream=2)  # a 20 MiB segment: 32 MiB reserved
    a.free(y)
    # 30 MiB on stream 3 fits only after both cached segments go back to the device
    z = a.malloc(30 * MiB, stream=3, tag="big")
    s = a.stats()
    assert s["num_alloc_retries"] == 1 and s["num_ooms"] == 0
    assert s["reserved_bytes"] == 30 * MiB and z.size == 30 * MiB


def test_oom_falls_back_to_smallest_segment():
    _, a = make(capacity=16 * MiB)
    b = a.malloc(5 * MiB)  # wants a 20 MiB segment; gets a 6 MiB one
    assert b.segment.size == 6 * MiB


def test_oom_error_lists_largest_live_buffers():
    _, a = make(capacity=64 * MiB)
    a.malloc(30 * MiB, tag="dot_general f32[1024,7680]")
    a.malloc(12 * MiB, tag="add f32[3072,1024]")
    a.malloc(1000, tag="scalar")
    with pytest.raises(CudaOutOfMemoryError) as info:
        a.malloc(40 * MiB, tag="exp f32[10240,1024]")
    err = info.value
    assert isinstance(err, BluError) and isinstance(err, MemoryError)
    msg = str(err)
    assert "40.00 MiB" in msg and "exp f32[10240,1024]" in msg
    assert msg.index("dot_general f32[1024,7680]") < msg.index("add f32[3072,1024]")
    assert [t for _, t, _ in err.largest] == [
        "dot_general f32[1024,7680]",
        "add f32[3072,1024]",
        "scalar",
    ]
    assert a.stats()["num_ooms"] == 1
    # the allocator still works after an out-of-memory error
    a.malloc(8 * MiB)


def test_oom_waits_for_pending_blocks():
    fake, a = make(capacity=20 * MiB)
    b = a.malloc(20 * MiB, stream=1)
    a.record_stream(b, 2)
    fake.submit(2)
    a.free(b)
    c = a.malloc(20 * MiB, stream=1)  # only possible once stream 2 is waited for
    assert c.ptr == b.ptr and a.stats()["num_ooms"] == 0


# ---- the state machine -------------------------------------------------------------------------

STREAMS = (0, 1, 2)
SIZES = st.one_of(
    st.integers(0, 4096),
    st.integers(4097, SMALL_SIZE),
    st.integers(SMALL_SIZE + 1, 12 * MiB),
    st.sampled_from([512, 1024, SMALL_SIZE, SMALL_SIZE + 1, 10 * MiB, 20 * MiB]),
)


class AllocatorMachine(RuleBasedStateMachine):
    """Random allocator traffic on a 48 MiB fake device, checked against a model."""

    blocks = Bundle("blocks")

    def __init__(self):
        super().__init__()
        self.fake = FakeBacking(capacity=48 * MiB)
        self.alloc = CachingAllocator(self.fake, name="fake:0")
        self.live = {}  # ptr -> (block, requested, stream)
        self.used_on = {}  # ptr -> (size, streams still possibly using it) of freed blocks
        self.n_alloc = self.n_free = self.n_oom = 0
        self.peak = 0

    def _allocated(self):
        return sum(b.size for b, _, _ in self.live.values())

    @rule(target=blocks, nbytes=SIZES, stream=st.sampled_from(STREAMS))
    def malloc(self, nbytes, stream):
        reserved_before = self.alloc.stats()["reserved_bytes"]
        try:
            b = self.alloc.malloc(nbytes, stream=stream, tag=f"t{self.n_alloc}")
        except CudaOutOfMemoryError as e:
            self.n_oom += 1
            size = round_size(nbytes)
            smallest = SMALL_SEGMENT if size <= SMALL_SIZE else -(-size // (2 * MiB)) * 2 * MiB
            # it really did not fit: even the smallest segment exceeds what is left once the
            # cache was emptied, and every segment still held has a live block
            s = self.alloc.stats()
            assert s["reserved_bytes"] + smallest > self.fake.capacity
            assert s["reserved_bytes"] <= reserved_before
            for seg in self.alloc.snapshot():
                assert any(blk["state"] == "live" for blk in seg["blocks"]), seg
            assert len(e.largest) == min(10, len(self.live))
            return None
        assert b.size >= nbytes and b.size % ROUND == 0 and b.ptr % ROUND == 0
        assert b.stream == stream
        # memory freed while other streams' work could still use it is not handed to a stream
        # other than its own before that work has completed
        for ptr, (size, tickets) in self.used_on.items():
            if ptr < b.ptr + b.size and b.ptr < ptr + size:
                busy = {
                    u
                    for u, t in tickets.items()
                    if u != stream and self.fake.completed.get(u, 0) < t
                }
                assert not busy, f"{b} reuses memory still used on streams {busy}"
        self.live[b.ptr] = (b, nbytes, stream)
        self.n_alloc += 1
        self.peak = max(self.peak, self._allocated())
        self.fake.submit(stream)  # a kernel writes it
        return b

    @rule(b=consumes(blocks))
    def free(self, b):
        if b is None:
            return
        _, _, stream = self.live.pop(b.ptr)
        users = {stream} | set(b.stream_uses or ())
        self.alloc.free(b)
        self.n_free += 1
        self.used_on[b.ptr] = (b.size, {u: self.fake.submitted.get(u, 0) for u in users})

    @rule(b=blocks, stream=st.sampled_from(STREAMS))
    def use_on_other_stream(self, b, stream):
        if b is None or b.ptr not in self.live or self.live[b.ptr][0] is not b:
            return
        self.alloc.record_stream(b, stream)
        self.fake.submit(stream)  # a kernel on `stream` reads it

    @rule(stream=st.one_of(st.none(), st.sampled_from(STREAMS)))
    def complete(self, stream):
        self.fake.complete(stream)

    @rule()
    def empty_cache(self):
        self.alloc.empty_cache()
        for seg in self.alloc.snapshot():
            assert any(blk["state"] == "live" for blk in seg["blocks"])

    @precondition(lambda self: self.n_alloc > 0)
    @rule()
    def reset_peak(self):
        self.alloc.reset_peak_stats()
        self.peak = self._allocated()

    @invariant()
    def no_overlap_and_inside_segments(self):
        # live and pending blocks (the GPU may still use them) never overlap
        busy = [(b.ptr, b.size) for b, _, _ in self.live.values()]
        for seg in self.alloc.snapshot():
            assert self.fake.live.get(seg["ptr"]) == seg["size"]
            pos = seg["ptr"]
            for blk in seg["blocks"]:
                assert blk["ptr"] == pos  # blocks tile their segment exactly
                pos += blk["size"]
                if blk["state"] == "pending":
                    busy.append((blk["ptr"], blk["size"]))
            assert pos == seg["ptr"] + seg["size"]
        busy.sort()
        for (p0, s0), (p1, _) in zip(busy, busy[1:]):
            assert p0 + s0 <= p1, "overlapping live blocks"

    @invariant()
    def stats_match_model(self):
        s = self.alloc.stats()
        assert s["allocated_bytes"] == self._allocated()
        assert s["requested_bytes"] == sum(n for _, n, _ in self.live.values())
        assert s["active_blocks"] == len(self.live)
        assert s["peak_allocated_bytes"] == self.peak
        assert s["num_allocs"] == self.n_alloc and s["num_frees"] == self.n_free
        assert s["num_ooms"] == self.n_oom
        assert s["reserved_bytes"] == self.fake.used == sum(self.fake.live.values())
        assert s["num_segments"] == len(self.fake.live)
        assert s["peak_reserved_bytes"] >= s["reserved_bytes"] >= s["allocated_bytes"]
        assert s["reserved_bytes"] <= self.fake.capacity
        assert s["num_backing_mallocs"] - s["num_backing_frees"] == s["num_segments"]

    def teardown(self):
        # everything freed and the cache emptied: all memory goes back, no events leak
        for b, _, _ in list(self.live.values()):
            self.alloc.free(b)
        self.alloc.empty_cache()
        s = self.alloc.stats()
        assert s["allocated_bytes"] == 0 and s["reserved_bytes"] == 0
        assert self.fake.live == {} and self.fake.events_live == 0


# cheap (~10 ms an example), so more examples than the ci profile's default
_parent = settings()
AllocatorMachine.TestCase.settings = settings(
    _parent, max_examples=max(_parent.max_examples, 40), stateful_step_count=80
)
TestAllocatorMachine = AllocatorMachine.TestCase
