"""The kernel cache cannot be poisoned: entries are verified (header with key, kind, version and
sha256; no load-time code; no foreign calls) before anything is loaded or compiled, written
atomically, refused when someone else could have written them, and trimmed least recently used
first. Each test plants what an attacker or an unlucky disk would and checks the result against
numpy in float64."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu.core.config import Config
from blu.lower.cuda import compiler as mlir_gpu
from blu.lower.mlir import cache
from blu.lower.mlir import llvm as mlir_cpu
from blu.lower.mlir.cache import CacheEntryWarning, CachePermissionError
from tests.helpers import env_flag
from tests.reliability.test_reliability_cache_security import minimal_cuda_elf

X = np.linspace(-2.0, 2.0, 37, dtype=np.float32)
EXPECTED = np.tanh(X.astype(np.float64)) * 3.0 + 1.0
RTOL = 8 * np.finfo(np.float32).eps


@pytest.fixture
def cdir(tmp_path, monkeypatch) -> Path:
    """A fresh cache folder; kernels loaded earlier in this process are forgotten."""
    d = tmp_path / "cache"
    env_flag("BLU_CACHE_DIR", str(d))
    monkeypatch.delenv("BLU_CACHE_NO_SO", raising=False)
    monkeypatch.setattr(mlir_cpu, "_loaded", {})
    monkeypatch.setattr(mlir_gpu, "_loaded", {})
    monkeypatch.setattr(cache, "_size_estimate", {})
    return d


def run(fn=lambda a: bnp.tanh(a) * 3.0 + 1.0, x=X) -> np.ndarray:
    """A fresh jit (a new executable, so its kernel is fetched from the cache again)."""
    mlir_cpu._loaded.clear()
    return np.asarray(blu.jit(fn)(x))


def entries(d: Path, suffix: str) -> list[Path]:
    return sorted(p for p in d.rglob("*" + suffix) if not p.name.startswith(".tmp-"))


def check(out: np.ndarray) -> None:
    np.testing.assert_allclose(out, EXPECTED, rtol=RTOL, atol=RTOL)


def filled(cdir: Path) -> tuple[Path, Path]:
    check(run())
    (so,), (ll,) = entries(cdir, ".so"), entries(cdir, ".llvm.mlir")
    return so, ll


def rerun_expecting_discard(n: int = 1) -> None:
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        check(run())
    found = [x for x in w if issubclass(x.category, CacheEntryWarning)]
    assert len(found) == n, [str(x.message) for x in w]


needs_ld = pytest.mark.skipif(mlir_cpu._linker is None, reason="no system linker: no .so entries")


# ---- corruption ---------------------------------------------------------------------------------


@needs_ld
def test_new_folder_is_private_and_entries_carry_a_digest(cdir):
    so, ll = filled(cdir)
    assert os.stat(cdir).st_mode & 0o077 == 0
    payload, why = cache.read_entry(ll.name[: -len(".llvm.mlir")], ".llvm.mlir")
    assert why is None and payload.decode().lstrip().startswith("module")
    assert ll.read_bytes().startswith(cache.MAGIC)


@needs_ld
def test_truncated_shared_object_is_rebuilt(cdir):
    so, _ = filled(cdir)
    data = so.read_bytes()
    so.write_bytes(data[: len(data) // 2])  # was: a bus error in every later run
    rerun_expecting_discard()
    check(run())  # rebuilt: the next process loads it again with no warning
    assert mlir_cpu.stats["cache_so"] > 0


@needs_ld
def test_random_bytes_in_llvm_text_are_rebuilt(cdir, monkeypatch):
    _, ll = filled(cdir)
    env_flag("BLU_CACHE_NO_SO", "1")
    for so in entries(cdir, ".so"):
        so.unlink()
    ll.write_bytes(os.urandom(3000))  # was: UnicodeDecodeError on every run
    rerun_expecting_discard()
    assert ll.read_bytes().startswith(cache.MAGIC)


@needs_ld
def test_edited_constant_in_llvm_text_is_refused(cdir, monkeypatch):
    _, ll = filled(cdir)
    for so in entries(cdir, ".so"):
        so.unlink()
    text = ll.read_bytes()
    head, body = text.split(b"\n", 1)
    assert b"3.000000e+00" in body
    ll.write_bytes(head + b"\n" + body.replace(b"3.000000e+00", b"5.000000e+00"))
    rerun_expecting_discard()  # was: a wrong kernel, then cached for good


@needs_ld
def test_swapped_entries_are_refused(cdir):
    check(run())
    run(lambda a: a * 7.0 - 1.0)
    lls, sos = entries(cdir, ".llvm.mlir"), entries(cdir, ".so")
    assert len(lls) == 2 and len(sos) == 2
    for a, b in (lls, sos):
        tmp = a.read_bytes()
        a.write_bytes(b.read_bytes())
        b.write_bytes(tmp)  # was: a segfault (a null symbol address was called)
    rerun_expecting_discard(2)  # the .so and the .llvm.mlir of the kernel run


@needs_ld
def test_swapped_and_reframed_shared_object_misses_its_symbol(cdir):
    """Another kernel's (blu-made) object under this key with a recomputed header: the symbol
    lookup fails, so the entry is discarded instead of calling a null address."""
    check(run())
    run(lambda a: a * 7.0 - 1.0)
    so_a, so_b = entries(cdir, ".so")
    key_a = so_a.name[: -len(".so")]
    payload_b, _ = cache.read_entry(so_b.name[: -len(".so")], ".so")
    so_a.write_bytes(cache.frame(key_a, ".so", payload_b))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        check(run())
        run(lambda a: a * 7.0 - 1.0)
    msgs = [str(x.message) for x in w if issubclass(x.category, CacheEntryWarning)]
    assert len(msgs) == 1 and "no symbol" in msgs[0]


# ---- planted code ------------------------------------------------------------------------------

_CONSTRUCTOR_C = textwrap.dedent(
    """
    #include <stdio.h>
    __attribute__((constructor)) static void planted(void) {
        FILE *f = fopen("%s", "w"); if (f) { fputs("ran", f); fclose(f); }
    }
    void _mlir_%s(void **args) { (void)args; }
    """
)


@needs_ld
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the planted object")
@pytest.mark.parametrize("reframed", [False, True], ids=["raw", "with-valid-digest"])
def test_planted_shared_object_never_runs(cdir, tmp_path, reframed):
    so, _ = filled(cdir)
    key = so.name[: -len(".so")]
    marker = tmp_path / "planted-ran"
    src = tmp_path / "planted.c"
    src.write_text(_CONSTRUCTOR_C % (marker, mlir_cpu.symbol(key)))
    built = tmp_path / "planted.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(built), str(src)], check=True)
    data = built.read_bytes()
    so.write_bytes(cache.frame(key, ".so", data) if reframed else data)
    rerun_expecting_discard()
    assert not marker.exists()


_EVIL = """  llvm.mlir.global internal constant @cmd("touch {marker}\\00") {{addr_space = 0 : i32}}
  llvm.func @system(!llvm.ptr) -> i32
"""


@needs_ld
@pytest.mark.parametrize("reframed", [False, True], ids=["raw", "with-valid-digest"])
def test_system_call_edited_into_llvm_text_never_runs(cdir, tmp_path, reframed):
    _, ll = filled(cdir)
    for so in entries(cdir, ".so"):
        so.unlink()
    key = ll.name[: -len(".llvm.mlir")]
    marker = tmp_path / "system-ran"
    text = ll.read_bytes().split(b"\n", 1)[1].decode()
    sym = mlir_cpu.symbol(key)
    head, rest = text.split(f"llvm.func @{sym}(", 1)
    sig, body = rest.split("{\n", 1)
    call = (
        "    %evil_cmd = llvm.mlir.addressof @cmd : !llvm.ptr\n"
        "    %evil_rc = llvm.call @system(%evil_cmd) : (!llvm.ptr) -> i32\n"
    )
    evil = head.replace("module {\n", "module {\n" + _EVIL.format(marker=marker), 1)
    evil += f"llvm.func @{sym}(" + sig + "{\n" + call + body
    data = evil.encode()
    ll.write_bytes(cache.frame(key, ".llvm.mlir", data) if reframed else data)
    rerun_expecting_discard()
    assert not marker.exists()


# ---- permissions -------------------------------------------------------------------------------


@needs_ld
@pytest.mark.parametrize("mode", [0o770, 0o707])
def test_folder_writable_by_others_is_refused(cdir, mode):
    filled(cdir)
    os.chmod(cdir, mode)
    try:
        with pytest.raises(CachePermissionError, match=r"chmod 700"):
            run()
    finally:
        os.chmod(cdir, 0o700)


@needs_ld
def test_entry_writable_by_others_is_refused(cdir):
    so, _ = filled(cdir)
    os.chmod(so, 0o666)
    with pytest.raises(CachePermissionError, match=r"chmod 600 .*\.so"):
        run()


@needs_ld
def test_folder_owned_by_another_user_is_refused(cdir, monkeypatch):
    filled(cdir)
    other = os.stat(cdir).st_uid + 1
    monkeypatch.setattr(os, "getuid", lambda: other)
    with pytest.raises(CachePermissionError, match="owned by uid"):
        run()


# ---- the GPU machine (no MLIR): a bad entry is a clear miss ------------------------------------


def test_corrupt_gpu_entry_without_mlir_is_a_clear_miss(cdir, monkeypatch):
    from blu.lower import mlir as lower_mlir

    canonical = "in v0:float32[4]\nout v0"
    key = cache.kernel_key(canonical, mlir_gpu.DEFAULT_TARGET)
    cache.write_bytes(key, ".ptx", b".version 8.0\n.target sm_90\n")
    p = Path(cache.path(key, ".ptx"))
    data = bytearray(p.read_bytes())
    data[-3] ^= 0x10
    p.write_bytes(bytes(data))
    monkeypatch.setattr(lower_mlir, "_mlir_available", lambda: False)
    with pytest.raises(mlir_gpu.KernelCacheMiss, match="failed verification") as e:
        mlir_gpu.get_module(canonical, lambda name: "", "the test kernel")
    assert mlir_gpu.symbol(key) in str(e.value) and mlir_gpu.FILL_COMMAND in str(e.value)


def test_gpu_entry_round_trip_and_export(cdir, tmp_path, monkeypatch):
    """The export for the GPU machine carries the digests; the entries verify there."""
    import importlib.util

    canonical = "in v0:float32[8]\nout v0"
    key = cache.kernel_key(canonical, mlir_gpu.DEFAULT_TARGET)
    cache.write_bytes(key, ".ptx", b"// ptx")
    cubin = minimal_cuda_elf((".nv.reservedSmem.offset0",))  # checked: a CUDA ELF image
    cache.write_bytes(key, ".cubin", cubin)
    spec = importlib.util.spec_from_file_location(
        "fill_gpu_cache", Path(__file__).parents[2] / "scripts" / "fill_gpu_cache.py"
    )
    fill = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fill)
    dest = tmp_path / "carried"
    assert fill.export_gpu_entries(cdir, dest) == 1
    assert os.stat(dest).st_mode & 0o077 == 0
    env_flag("BLU_CACHE_DIR", str(dest))
    from blu.lower import mlir as lower_mlir

    monkeypatch.setattr(lower_mlir, "_mlir_available", lambda: False)
    m = mlir_gpu.get_module(canonical, lambda name: "", "the test kernel")
    assert (m.ptx, m.cubin, m.source) == (b"// ptx", cubin, "cache")


def test_fill_stages_the_test_corpora_for_the_gpu_machine(tmp_path):
    """The fill copies the corpora the GPU tests read into the carried data folder (the GPU
    machine has no shared/: a test that fell back to its synthetic corpus there asked for kernels
    the fill never compiled), leaves identical copies alone, replaces a stale one, and refuses a
    missing source by name."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "fill_gpu_cache", Path(__file__).parents[2] / "scripts" / "fill_gpu_cache.py"
    )
    fill = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fill)
    src, dest = tmp_path / "shared", tmp_path / "data"
    (src / "gpt2").mkdir(parents=True)
    (src / "a.txt").write_text("to be or not")
    (src / "gpt2" / "b.json").write_text("{}")
    names = ("a.txt", "gpt2/b.json")
    assert fill.stage_corpora(src, dest, names) == list(names)
    assert (dest / "gpt2" / "b.json").read_text() == "{}"
    assert fill.stage_corpora(src, dest, names) == []  # identical: nothing copied
    (dest / "a.txt").write_text("to be or NOT")  # same size, other bytes
    assert fill.stage_corpora(src, dest, names) == ["a.txt"]
    assert (dest / "a.txt").read_text() == "to be or not"
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        fill.stage_corpora(src, dest, ("missing.txt",))
    assert set(fill.TEST_CORPORA) >= {"tinyshakespeare.txt"}  # the example tests' corpus


# ---- writes: atomic, and nothing left on a full disk --------------------------------------------


class _FullDisk:
    def __init__(self, f):
        self.f = f

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()

    def write(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self.f, name)


@pytest.mark.parametrize("where", ["write", "fsync", "rename"])
def test_full_disk_leaves_no_temporary_file(cdir, monkeypatch, where):
    real_fdopen = os.fdopen

    def enospc(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    if where == "write":
        monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: _FullDisk(real_fdopen(fd, *a, **k)))
    else:
        monkeypatch.setattr(os, {"fsync": "fsync", "rename": "replace"}[where], enospc)
    check(run())  # the kernel is compiled and runs; it is just not stored
    monkeypatch.undo()
    leftovers = [p for p in cdir.rglob("*") if p.is_file() and p.name != "mlir-version"]
    assert leftovers == []


# ---- the size cap ------------------------------------------------------------------------------


def test_cache_max_bytes_flag_reads_the_environment():
    assert Config(environ={"BLU_CACHE_MAX_BYTES": "12345"}).cache_max_bytes == 12345
    assert Config(environ={}).cache_max_bytes == 2 << 30


def test_least_recently_used_entries_are_evicted(cdir):
    keys = [f"{i:02x}" + "ab" * 31 for i in range(8)]
    payload = b"x" * 1000
    size = len(cache.frame(keys[0], ".ptx", payload))
    with blu.config.override(cache_max_bytes=10**9):
        for i, k in enumerate(keys):
            cache.write_bytes(k, ".ptx", payload)
            os.utime(cache.path(k, ".ptx"), (1000 + i, 1000 + i))  # written in this order
    assert cache.read_entry(keys[0], ".ptx")[0] == payload  # a hit: now the most recent
    with blu.config.override(cache_max_bytes=5 * size):
        cache.write_bytes("ff" + "cd" * 31, ".ptx", payload)
    kept = {k for k in keys if os.path.exists(cache.path(k, ".ptx"))}
    assert kept == {keys[0], keys[5], keys[6], keys[7]}
    assert cache.cache_bytes() <= 5 * size


# ---- fuzz: random bit flips never give a wrong result or a crash --------------------------------


@needs_ld
def test_bit_flips_never_give_a_wrong_result(cdir):
    """Loading in this process is safe by construction: every byte of an entry (header and
    payload) is verified before anything is loaded or compiled, so a flip can only cause a
    discard and a rebuild."""
    dev = os.environ.get("HYPOTHESIS_PROFILE", "ci") == "dev"
    trials = 200 if dev else 16
    rng = np.random.default_rng(int(os.environ.get("BLU_FUZZ_SEED", "0")))
    so, ll = filled(cdir)
    pristine = {so: so.read_bytes(), ll: ll.read_bytes()}
    outcomes = {"discarded": 0, "loaded": 0}
    for t in range(trials):
        for p, data in pristine.items():
            p.write_bytes(data)
        victim = [so, ll][t % 2]
        data = bytearray(pristine[victim])
        hlen = data.index(b"\n") + 1
        for _ in range(int(rng.integers(1, 9))):  # in the header one trial in four
            lo, hi = (0, hlen) if rng.random() < 0.25 else (hlen, len(data))
            i = int(rng.integers(lo, hi))
            data[i] ^= 1 << int(rng.integers(0, 8))
        victim.write_bytes(bytes(data))
        if victim == ll:
            so.unlink()  # else the (sound) shared object is loaded and the text never read
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            out = run()
        check(out)
        n = sum(issubclass(x.category, CacheEntryWarning) for x in w)
        outcomes["discarded" if n else "loaded"] += 1
    assert outcomes["discarded"] == trials, outcomes
