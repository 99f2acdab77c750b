"""The kernel cache's files (issue #41): entries are opened as regular files of bounded size only
(never through a link, never blocking on a FIFO, never read whole when huge), eviction touches
only files blu wrote, and the private copies of loaded kernels belong to the process that made
them (a forked child leaves the parent's alone; nothing accumulates; a killed process's folder is
removed by the next start)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import blu
from blu.lower.mlir import cache
from blu.lower.mlir.cache import CacheEntryWarning, CachePermissionError
from tests.reliability.test_reliability_cache_security import ROOT, needs_ld


@pytest.fixture
def cdir(tmp_path) -> Path:
    """A fresh cache folder."""
    from tests.helpers import env_flag

    d = tmp_path / "cache"
    env_flag("BLU_CACHE_DIR", str(d))
    cache._size_estimate.clear()
    return d


# ---- opening entries: regular files only, bounded, never blocking ------------------------------

_KEY = "ab" + "cd" * 31


def _read_in_thread(key: str, suffix: str, timeout: float = 20.0):
    out: list = []
    t = threading.Thread(target=lambda: out.append(cache.read_entry(key, suffix)), daemon=True)
    t.start()
    t.join(timeout)
    return t, out


def test_fifo_entry_does_not_block(cdir):
    """Was: ``open`` of a FIFO planted as an entry blocked for ever."""
    cache.write_bytes(_KEY, ".ptx", b"// ptx")
    p = Path(cache.path(_KEY, ".ptx"))
    p.unlink()
    os.mkfifo(p, 0o600)
    t, out = _read_in_thread(_KEY, ".ptx")
    if t.is_alive():  # unblock the reader before failing
        os.close(os.open(p, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading a FIFO entry blocked")
    payload_, why = out[0]
    assert payload_ is None and "FIFO" in why


@pytest.mark.parametrize("target", ["/dev/zero", "elsewhere"])
def test_symlinked_entry_is_refused_unread(cdir, tmp_path, target):
    cache.write_bytes(_KEY, ".ptx", b"// ptx")
    p = Path(cache.path(_KEY, ".ptx"))
    if target == "elsewhere":  # a valid entry, but not in the cache: blu never writes a link
        target = str(tmp_path / "valid-entry")
        shutil.copy(p, target)
    p.unlink()
    p.symlink_to(target)
    t, out = _read_in_thread(_KEY, ".ptx")
    assert not t.is_alive(), "reading a symlinked entry did not return"
    payload_, why = out[0]
    assert payload_ is None and "symbolic link" in why
    with pytest.warns(CacheEntryWarning, match="symbolic link"):
        cache.discard(_KEY, ".ptx", why)  # removes the link, never its target
    assert not p.is_symlink() and os.path.exists(target)


def test_huge_sparse_entry_is_refused_without_reading_it(cdir):
    cache.write_bytes(_KEY, ".ptx", b"// ptx")
    p = Path(cache.path(_KEY, ".ptx"))
    with open(p, "r+b") as f:
        f.truncate(1 << 40)  # 1 TiB, sparse
    t0 = time.perf_counter()
    payload_, why = cache.read_entry(_KEY, ".ptx")
    assert payload_ is None and "bytes" in why and str(cache.MAX_ENTRY_BYTES) in why
    assert time.perf_counter() - t0 < 5.0


def test_symlinked_shard_folder_is_refused(cdir, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    cache.write_bytes(_KEY, ".ptx", b"// ptx")
    shard = Path(cache.path(_KEY, ".ptx")).parent
    shutil.rmtree(shard)
    shard.symlink_to(elsewhere)
    with pytest.raises(CachePermissionError, match="symbolic link"):
        cache.read_entry(_KEY, ".ptx")
    assert cache.write_bytes(_KEY, ".ptx", b"// ptx") is None  # nothing written through it
    assert list(elsewhere.iterdir()) == []


# ---- eviction touches only blu's files --------------------------------------------------------


def test_eviction_leaves_foreign_files_alone(cdir):
    """Was: any ``*.so``, ``*.ptx``, ``*.cubin``, ``*.llvm.mlir`` or old ``.tmp-*`` under the
    folder was deleted."""
    keys = [f"{i:02x}" + "ab" * 31 for i in range(4)]
    with blu.config.override(cache_max_bytes=10**9):
        for k in keys:
            cache.write_bytes(k, ".ptx", b"x" * 1000)
    foreign = [
        cdir / "notes.so",
        cdir / "00" / "mine.ptx",
        cdir / "00" / ("00" + "ab" * 31 + ".cubin"),  # blu's name, not blu's header
        cdir / "00" / ".tmp-notes",
        cdir / "zz" / ("zz" + "ab" * 31 + ".so"),
        cdir / "work" / "deep" / "model.so",
    ]
    old = time.time() - 10 * cache.STALE_TMP_S
    for f in foreign:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"user data " * 100)
        os.utime(f, (old, old))
    linked = cdir.parent / "user-folder"  # a shard-like link to a folder of the user's
    linked.mkdir()
    kept = linked / ("0f" + "ab" * 31 + ".ptx")
    kept.write_bytes(cache.frame("0f" + "ab" * 31, ".ptx", b"users own"))
    os.utime(kept, (old, old))
    (cdir / "0f").symlink_to(linked)
    foreign.append(kept)
    stale = cdir / "01" / ".tmp-blu-abcd1234"  # a crashed writer's
    stale.write_bytes(cache.MAGIC)
    os.utime(stale, (old, old))
    with blu.config.override(cache_max_bytes=0):
        cache.write_bytes("ff" + "cd" * 31, ".ptx", b"y")
    assert all(f.exists() for f in foreign), [str(f) for f in foreign if not f.exists()]
    assert not any(os.path.exists(cache.path(k, ".ptx")) for k in keys)
    assert not stale.exists()
    assert cache.cache_bytes() == 0


# ---- private copies of loaded kernels ---------------------------------------------------------

_FORK_SCRIPT = textwrap.dedent(
    """
    import os, sys, warnings
    import numpy as np
    import blu, blu.numpy as bnp
    from blu.lower.mlir import llvm
    warnings.simplefilter("error")
    x = np.linspace(-2, 2, 37, dtype=np.float32)
    f = lambda a: bnp.tanh(a) * 3.0 + 1.0
    np.asarray(blu.jit(f)(x))            # compiled: .so stored, loaded from a private copy
    d = llvm._so_dir
    pid = os.fork()
    if pid == 0:
        llvm._loaded.clear()
        np.asarray(blu.jit(lambda a: bnp.tanh(a) * 3.0 + 1.0)(x))   # the child loads its own
        assert llvm._so_dir != d, "the child shares the parent's folder"
        sys.exit(0)                        # a normal exit: atexit handlers run
    os.waitpid(pid, 0)
    assert os.path.isdir(d), "the child's exit removed the parent's private folder"
    before = dict(llvm.stats)
    for i in range(6):                     # every later cache hit still loads (no discard)
        llvm._loaded.clear()
        np.asarray(blu.jit(lambda a: bnp.tanh(a) * 3.0 + 1.0)(x))
        np.asarray(blu.jit(lambda a: a * 5.0 - 2.0)(x))
    assert llvm.stats["compiled"] == before["compiled"] + 1, llvm.stats
    assert llvm.stats["cache_so"] == before["cache_so"] + 11, llvm.stats
    assert os.listdir(d) == [], os.listdir(d)   # no copy kept once loaded
    print("DIR", d)
    """
)


def _tmp_env(tmp_path: Path) -> dict:
    env = dict(os.environ)
    env.update(TMPDIR=str(tmp_path / "tmp"), BLU_CACHE_DIR=str(tmp_path / "cache2"))
    env.update(PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    env.pop("BLU_CACHE_NO_SO", None)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return env


@needs_ld
def test_forked_child_keeps_its_hands_off_the_parents_copies(tmp_path):
    env = _tmp_env(tmp_path)
    r = subprocess.run([sys.executable, "-c", _FORK_SCRIPT], env=env, capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    d = r.stdout.split("DIR ", 1)[1].strip()
    assert not os.path.exists(d)  # removed by its own process at exit
    assert os.listdir(tmp_path / "tmp") == []  # and the child's too


@needs_ld
def test_folders_of_dead_processes_are_removed_at_start(tmp_path):
    env = _tmp_env(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    tmp = tmp_path / "tmp"
    stale = tmp / f"blu-so-{dead}-x1y2z3"
    stale.mkdir()
    (stale / ("0" * 64 + ".so")).write_bytes(b"left by a killed process")
    alive = tmp / f"blu-so-{os.getpid()}-a1b2c3"  # this test process: alive
    alive.mkdir()
    foreign = tmp / "blu-so-notes"
    foreign.mkdir()
    script = (
        "import numpy as np, blu, blu.numpy as bnp\n"
        "np.asarray(blu.jit(lambda a: bnp.tanh(a) + 1.0)(np.ones(3, np.float32)))\n"
    )
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert not stale.exists() and alive.exists() and foreign.exists()
