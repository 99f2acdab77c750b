"""Process memory stays flat over many distinct shapes of one jitted function: the in-process
caches (jit's traces per function, the executable cache, the loaded-kernel table) are bounded
LRUs (``blu.config.jit_cache_size``, ``executable_cache_size``, ``kernel_cache_size``).

The 2,000-shape run (about 2,000 compiles) runs in the dev profile (HYPOTHESIS_PROFILE=dev) or
with BLU_SLOW_TESTS=1; the CI runs 100 shapes with small bounds."""

from __future__ import annotations

import gc
import os
import threading

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu.core.errors import BluValueError
from blu.core.lru import LRU
from blu.lower import execution
from blu.lower.mlir import llvm as mlir_cpu
from tests.helpers import env_flag

SLOW = os.environ.get("HYPOTHESIS_PROFILE") == "dev" or os.environ.get("BLU_SLOW_TESTS") == "1"
LINUX = os.path.exists("/proc/self/statm")


def rss_bytes() -> int:
    """Resident set size from /proc/self/statm (pages), no psutil."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def expected(n: int) -> np.ndarray:
    return np.tanh(np.ones(n)) * 2.0 + 1.0  # float64 oracle


def sweep(f, sizes, check_every: int = 50):
    for n in sizes:
        out = f(np.ones(n, np.float32))
        if n % check_every == 0:
            np.testing.assert_allclose(np.asarray(out), expected(n), rtol=4e-6)


@pytest.mark.skipif(not LINUX, reason="needs /proc (Linux)")
@pytest.mark.skipif(not SLOW, reason="2,000 compiles: HYPOTHESIS_PROFILE=dev or BLU_SLOW_TESTS=1")
def test_memory_stays_flat_over_2000_distinct_shapes(tmp_path):
    """With the default bounds: after the caches fill, process memory stops growing."""
    env_flag("BLU_CACHE_DIR", str(tmp_path / "cache"))
    f = blu.jit(lambda x: bnp.tanh(x) * 2.0 + 1.0)
    bound = blu.config.executable_cache_size
    sweep(f, range(1, bound + 201))  # fill the caches; allocator pools, imports
    gc.collect()
    before = rss_bytes()
    sweep(f, range(bound + 201, bound + 2201))
    gc.collect()
    grown = rss_bytes() - before
    assert len(f._cache) == blu.config.jit_cache_size
    assert len(execution._executables) <= bound
    # was ~0.9 MB per shape (2,000 shapes: 60 MB -> 1.9 GB)
    assert grown < 40 * 2**20, f"process memory grew {grown / 2**20:.0f} MiB over 2,000 shapes"


@pytest.mark.skipif(not LINUX, reason="needs /proc (Linux)")
def test_memory_flat_over_100_shapes_with_small_bounds(tmp_path, set_flag):
    """The CI variant: bounds of 20, 100 distinct shapes; the caches stay at their bounds and
    memory grows less than 15 MiB over the last 70 shapes (it was ~0.9 MB per shape)."""
    env_flag("BLU_CACHE_DIR", str(tmp_path / "cache"))
    for flag in ("jit_cache_size", "executable_cache_size", "kernel_cache_size"):
        set_flag(flag, 20)
    execution._executables.clear()
    mlir_cpu._loaded.clear()
    f = blu.jit(lambda x: bnp.tanh(x) * 2.0 + 1.0)
    sweep(f, range(1, 31))
    gc.collect()
    before = rss_bytes()
    sweep(f, range(31, 101))
    gc.collect()
    grown = rss_bytes() - before
    assert len(f._cache) == 20 and f._cache.evictions == 80
    assert len(execution._executables) <= 20 and len(mlir_cpu._loaded) <= 20
    assert grown < 15 * 2**20, f"process memory grew {grown / 2**20:.0f} MiB over 70 shapes"
    # an evicted signature is traced and compiled again, with the right answer
    np.testing.assert_allclose(np.asarray(f(np.ones(1, np.float32))), expected(1), rtol=4e-6)


def test_evicted_executables_and_kernels_are_freed(tmp_path, set_flag):
    """What an evicted entry held (its executable, its kernel's library) is released when
    nothing else uses it."""
    import weakref

    env_flag("BLU_CACHE_DIR", str(tmp_path / "cache"))
    for flag in ("jit_cache_size", "executable_cache_size", "kernel_cache_size"):
        set_flag(flag, 2)
    f = blu.jit(lambda x: x * 3.0 - 1.0)
    f(np.ones(7, np.float32))
    (exe,) = [v for k, v in execution._executables._d.items() if k[0].invars[-1].aval.shape == (7,)]
    exe_ref = weakref.ref(exe)
    kernel_refs = [weakref.ref(k.keep) for k in exe.kernels.values()]  # their libraries
    del exe
    for n in (8, 9, 10, 11):
        np.testing.assert_allclose(np.asarray(f(np.ones(n, np.float32))), 2.0 * np.ones(n))
    gc.collect()
    assert exe_ref() is None
    assert kernel_refs and all(r() is None for r in kernel_refs)


def test_lru_order_bound_and_flag_checks(set_flag):
    set_flag("jit_cache_size", 3)
    c = LRU("jit_cache_size")
    for k in "abc":
        c[k] = k.upper()
    assert c.get("a") == "A"  # a is now the most recent: b goes first
    c["d"] = "D"
    assert c.keys() == ["c", "a", "d"] and c.evictions == 1
    assert c.setdefault("a", "other") == "A"  # the first value wins
    set_flag("jit_cache_size", 1)  # a smaller bound applies at the next insertion
    c["e"] = "E"
    assert c.keys() == ["e"] and len(c) == 1
    for bad in (0, -1, "many", True):
        set_flag("jit_cache_size", bad)
        with pytest.raises(BluValueError, match="BLU_JIT_CACHE_SIZE"):
            c["f"] = "F"
    assert c.keys() == ["e"]  # nothing changed by the refused insertion


def test_lru_from_threads():
    """8 threads hit, add and evict at once: the bound holds, no entry is lost mid-flight."""
    c = LRU(16)
    errors = []

    def work(t: int) -> None:
        try:
            for i in range(2000):
                k = (t * 7 + i) % 40
                v = c.setdefault(k, k * k)
                assert v == k * k
                got = c.get(k)
                assert got is None or got == k * k
                assert len(c) <= 16
        except AssertionError as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and len(c) == 16


def test_jit_from_threads_with_a_small_bound(set_flag):
    """Threads calling one jitted function on more shapes than the bound all get right
    answers (entries evicted under another thread's feet are traced again)."""
    set_flag("jit_cache_size", 3)
    set_flag("executable_cache_size", 4)
    f = blu.jit(lambda x: (x * 2.0).sum())
    errors = []

    def work(t: int) -> None:
        try:
            for i in range(12):
                n = 1 + (t + i) % 6
                got = float(np.asarray(f(np.arange(n, dtype=np.float32))))
                assert got == pytest.approx(n * (n - 1.0)), (n, got)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]
    assert len(f._cache) <= 3
