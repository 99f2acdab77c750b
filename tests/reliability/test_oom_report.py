"""The out-of-memory report (issue #17): a compiled program that cannot get its arena, an eager
device array that cannot be allocated, and a plan that cannot fit a device of a given size all
raise ``BluOutOfMemoryError`` naming the bytes asked and free, the plan's largest buffers at its
peak (shape, dtype, the equation making each, the user's line) and what other arrays hold.

Run on the simulated GPU (``fake_gpu``) with the allocator capped (``gpu_memory_limit``)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import blu
import blu.cuda as bc
from blu.core.errors import BluError, BluOutOfMemoryError
from blu.cuda.allocator import CachingAllocator, round_size
from blu.cuda.errors import CudaOutOfMemoryError
from blu.cuda.fake import FakeBacking

MiB = 1 << 20
N, K = 1024, 64  # the big intermediate: f32[N, N], 4 MiB


def _line_of(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, ln in enumerate(lines) if text in ln)


def two_products(a, b):
    c = a @ b  # the (N, N) float32 intermediate
    return (c @ b.T).sum()


@pytest.fixture
def fake_dev(set_flag):
    set_flag("fake_gpu", True)
    dev = bc.default_device()
    bc.empty_cache(dev)
    return dev


def _cap_at(set_flag, dev, extra: int) -> int:
    """Cap the allocator at what it holds now plus ``extra`` bytes."""
    bc.empty_cache(dev)
    limit = dev.allocator.stats()["reserved_bytes"] + extra
    set_flag("gpu_memory_limit", limit)
    return limit


def test_the_allocator_cap_raises_a_blu_out_of_memory_error_naming_free_bytes():
    backing = FakeBacking(capacity=1 << 40)
    alloc = CachingAllocator(backing, name="fake:cap", limit=40 * MiB)
    kept = alloc.malloc(12 * MiB, tag="kept f32[3145728]")
    with pytest.raises(BluOutOfMemoryError) as info:
        alloc.malloc(30 * MiB, tag="too big")
    e = info.value
    assert isinstance(e, CudaOutOfMemoryError) and isinstance(e, MemoryError)
    assert isinstance(e, BluError)
    reserved = alloc.stats()["reserved_bytes"]
    assert e.nbytes == 30 * MiB and e.free_bytes == 40 * MiB - reserved
    assert e.allocated_bytes == round_size(12 * MiB) and e.tag == "too big"
    msg = str(e)
    assert f"{30 * MiB:,} bytes requested for too big" in msg
    assert "kept f32[3145728]" in msg and "gpu_memory_limit" in msg
    assert "test_oom_report.py" in msg  # the user's line
    alloc.free(kept)
    assert alloc.malloc(30 * MiB) is not None  # within the cap once the other block is gone


def test_the_cap_comes_from_the_flag_when_not_given(set_flag):
    alloc = CachingAllocator(FakeBacking(capacity=1 << 40))
    set_flag("gpu_memory_limit", 24 * MiB)
    with pytest.raises(CudaOutOfMemoryError):
        alloc.malloc(30 * MiB)
    set_flag("gpu_memory_limit", 0)
    alloc.malloc(30 * MiB)


def _arena_report(fake_dev, set_flag) -> None:
    """Compiled with room to spare, then capped below its arena: the runtime report."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((N, K), np.float32)
    b = rng.standard_normal((K, N), np.float32)
    da, db = bc.device_put(a, fake_dev), bc.device_put(b, fake_dev)
    other = bc.device_put(np.zeros(MiB // 4, np.float32), fake_dev)  # 1 MiB held elsewhere
    f = blu.jit(two_products)
    # the plan (no kernels): the arena holds the (N, N) intermediate
    analysis = f.lower(a, b, target="cuda:sm_90").memory_analysis()
    assert analysis.temp_bytes >= N * N * 4
    want = ((a.astype(np.float64) @ b) @ b.T.astype(np.float64)).sum()
    tol = dict(rtol=1e-4, atol=1e-2 * np.sqrt(N * K))
    assert np.isclose(float(f(da, db)), want, **tol)  # compiled (and run) with room to spare
    limit = _cap_at(set_flag, fake_dev, 1 * MiB)  # room for less than the arena
    with pytest.raises(BluOutOfMemoryError) as info:
        f(da, db)  # the call that runs out
    e = info.value
    msg = str(e)
    reserved = fake_dev.allocator.stats()["reserved_bytes"]
    assert e.nbytes == analysis.temp_bytes  # the arena asked for
    assert e.free_bytes == limit - reserved  # what the capped allocator could still take
    assert f"{analysis.temp_bytes:,} bytes) asked" in msg
    assert f"{e.free_bytes:,} bytes) free" in msg
    assert "arena of temporaries" in msg
    biggest = e.buffers[0]
    assert biggest.label == f"f32[{N},{N}]" and biggest.nbytes == N * N * 4
    assert biggest.producer.startswith("dot_general")
    line = _line_of(two_products, "a @ b")
    assert f"test_oom_report.py:{line}" in biggest.source
    assert f"f32[{N},{N}]" in msg and f"test_oom_report.py:{line}" in msg
    # the call's own line, and what other live arrays hold (at least ``other``)
    me = _arena_report
    assert f"test_oom_report.py:{_line_of(me, 'the call that runs out')}" in msg
    assert e.other_bytes >= other.nbytes and "other live device arrays" in msg
    # the call took nothing: with the cap lifted it runs again
    set_flag("gpu_memory_limit", 0)
    assert np.isclose(float(f(da, db)), want, **tol)


def test_a_program_that_cannot_get_its_arena_names_the_plans_largest_buffer(fake_dev, set_flag):
    _arena_report(fake_dev, set_flag)


@pytest.mark.gpu
@pytest.mark.skipif(not bc.is_available(), reason="needs a GPU")
def test_the_report_on_a_gpu_with_the_allocator_capped(set_flag):
    """The same on a real GPU (``pytest -m gpu``; kernels from the cache that
    ``scripts/fill_gpu_cache.py`` fills by running this file on the simulated GPU)."""
    dev = bc.default_device()
    bc.empty_cache(dev)
    _arena_report(dev, set_flag)


def test_a_program_that_cannot_fit_is_refused_before_its_kernels_are_compiled(
    fake_dev, set_flag, monkeypatch
):
    from blu.lower.cuda import executable

    rng = np.random.default_rng(1)
    a = rng.standard_normal((N, K), np.float32)
    b = rng.standard_normal((K, N), np.float32)
    da, db = bc.device_put(a, fake_dev), bc.device_put(b, fake_dev)
    analysis = blu.jit(two_products).lower(a, b, target="cuda:sm_90").memory_analysis()
    limit = _cap_at(set_flag, fake_dev, 1 * MiB)
    compiled = []
    real_init = executable.GpuExecutable.__init__

    def init(self, *args, **kwargs):
        compiled.append(self)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(executable.GpuExecutable, "__init__", init)
    with pytest.raises(BluOutOfMemoryError) as info:
        blu.jit(two_products)(da, db)  # a new jit: its program is not compiled yet
    assert not compiled  # refused from the plan, before any kernel
    e = info.value
    reserved = fake_dev.allocator.stats()["reserved_bytes"]
    cached = sum(
        blk["size"] for seg in fake_dev.allocator.snapshot() for blk in seg["blocks"]
        if blk["state"] == "free"
    )  # fmt: skip
    assert e.free_bytes == limit - reserved + cached
    assert e.nbytes == analysis.temp_bytes + analysis.output_bytes - analysis.alias_bytes
    msg = str(e)
    assert "before compiling its kernels" in msg and f"f32[{N},{N}]" in msg
    assert f"test_oom_report.py:{_line_of(two_products, 'a @ b')}" in msg


def test_an_eager_array_that_cannot_be_allocated_names_bytes_and_line(fake_dev, set_flag):
    _cap_at(set_flag, fake_dev, 8 * MiB)
    x = np.ones((4 * MiB,), np.float32)  # 16 MiB
    with pytest.raises(BluOutOfMemoryError) as info:
        bc.device_put(x, fake_dev)
    e = info.value
    assert e.nbytes == x.nbytes
    assert e.free_bytes is not None and e.free_bytes < x.nbytes
    line = _line_of(test_an_eager_array_that_cannot_be_allocated_names_bytes_and_line,
                    "bc.device_put(x, fake_dev)")  # fmt: skip
    assert f"test_oom_report.py:{line}" in str(e)


def test_the_plan_says_it_does_not_fit_before_anything_runs():
    a = blu.ShapeDtypeStruct((N, K), np.float32)
    b = blu.ShapeDtypeStruct((K, N), np.float32)
    lowered = blu.jit(two_products).lower(a, b, target="cuda:sm_90")  # no kernel compiled
    m = lowered.memory_analysis()
    # what a call holds at once: both arguments, the whole arena, the fresh f32 scalar
    peak = 2 * N * K * 4 + m.temp_bytes + 4
    assert m.temp_bytes >= N * N * 4 + N * K * 4  # c and c @ b.T, both (N, .) float32
    lowered.check_memory(peak)  # fits exactly
    with pytest.raises(BluOutOfMemoryError) as info:
        lowered.check_memory(peak - 1)
    msg = str(info.value)
    line = _line_of(two_products, "a @ b")
    assert f"f32[{N},{N}]" in msg and "dot_general" in msg
    assert f"test_oom_report.py:{line}" in msg
    assert "exceeds" in msg and f"{peak - 1:,} bytes" in msg
    assert "other live device arrays" not in msg  # none said to be held
    # arrays held elsewhere count against the device
    with pytest.raises(BluOutOfMemoryError) as info:
        lowered.check_memory(peak, in_use=1)
    assert "other live device arrays (not this call's arguments) hold 0.00 MiB (1 bytes)" in str(
        info.value
    )


def attend(q, k, v):
    return blu.nn.dot_product_attention(q, k, v, is_causal=True)  # the user's line


def test_inlined_decompositions_keep_the_users_line():
    """float32 attention has no cuDNN lowering: the plan inlines its decomposition, traced at
    lowering time; its equations (the report's buffers) still point at the user's call, not at
    the line that lowered the program."""
    q = blu.ShapeDtypeStruct((2, 64, 2, 16), np.float32)
    lowered = blu.jit(attend).lower(q, q, q, target="cuda:sm_90")
    with pytest.raises(BluOutOfMemoryError) as info:
        lowered.check_memory(1)
    bufs = [b for b in info.value.buffers if b.place != "arg"]
    assert bufs and all(f"test_oom_report.py:{_line_of(attend, 'the user')}" in b.source
                        for b in bufs)  # fmt: skip
