"""No foreign code through the kernel cache, no blocking or unbounded read of an entry, eviction
that touches only blu's files, and private copies of loaded kernels owned by the process that made
them (issue #41). Each test plants what an attacker (a cache handed over from elsewhere, with
valid headers: the digest is no secret) or an unlucky disk would, and checks that nothing foreign
runs and that the kernel still gives numpy's float64 answer."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu.lower.cuda import compiler as mlir_gpu
from blu.lower.mlir import cache, entry_check
from blu.lower.mlir import llvm as mlir_cpu
from blu.lower.mlir.cache import CacheEntryWarning, CachePermissionError
from tests.helpers import env_flag

X = np.linspace(-2.0, 2.0, 37, dtype=np.float32)
EXPECTED = np.tanh(X.astype(np.float64)) * 3.0 + 1.0
RTOL = 8 * np.finfo(np.float32).eps
ROOT = Path(__file__).resolve().parents[2]

needs_ld = pytest.mark.skipif(mlir_cpu._linker is None, reason="no system linker: no .so entries")
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to plant code")


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
    mlir_cpu._loaded.clear()
    return np.asarray(blu.jit(fn)(x))


def check(out: np.ndarray) -> None:
    np.testing.assert_allclose(out, EXPECTED, rtol=RTOL, atol=RTOL)


def entries(d: Path, suffix: str) -> list[Path]:
    return sorted(p for p in d.rglob("*" + suffix) if not p.name.startswith(".tmp-"))


def filled(cdir: Path) -> tuple[Path, Path]:
    check(run())
    (so,), (ll,) = entries(cdir, ".so"), entries(cdir, ".llvm.mlir")
    return so, ll


def discards() -> list[str]:
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        check(run())
    return [str(x.message) for x in w if issubclass(x.category, CacheEntryWarning)]


def payload(p: Path) -> bytes:
    return p.read_bytes().split(b"\n", 1)[1]


# ---- (a) shared objects: imports on an allow-list, no load-time code ---------------------------

_NOSTDLIB_C = textwrap.dedent(
    """
    extern int system(const char *);
    void _mlir_%s(void **args) { (void)args; system("touch %s"); }
    """
)


@needs_ld
@needs_cc
def test_planted_nostdlib_object_calling_system_never_runs(cdir, tmp_path):
    """Was: a ``-nostdlib`` object (no DT_NEEDED, no constructor) with a valid header passed the
    check, and its kernel called libc's ``system`` through an undefined symbol."""
    so, _ = filled(cdir)
    key = so.name[: -len(".so")]
    marker = tmp_path / "system-ran"
    src = tmp_path / "planted.c"
    src.write_text(_NOSTDLIB_C % (mlir_cpu.symbol(key), marker))
    built = tmp_path / "planted.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-nostdlib", "-o", str(built), str(src)], check=True)
    why = entry_check.check_shared_object(built.read_bytes())
    assert why is not None and "system" in why
    so.write_bytes(cache.frame(key, ".so", built.read_bytes()))
    msgs = discards()
    assert len(msgs) == 1 and "system" in msgs[0] and so.name in msgs[0], msgs
    assert not marker.exists()


_IFUNC_C = textwrap.dedent(
    """
    static void real(void **a) { (void)a; }
    static void *pick(void) { return (void *)real; }
    void _mlir_%s(void **) __attribute__((ifunc("pick")));
    """
)


@needs_ld
@needs_cc
def test_planted_ifunc_symbol_is_refused(cdir, tmp_path):
    """An exported ifunc runs its resolver when ``dlsym`` looks the kernel up."""
    so, _ = filled(cdir)
    key = so.name[: -len(".so")]
    src = tmp_path / "ifunc.c"
    src.write_text(_IFUNC_C % mlir_cpu.symbol(key))
    built = tmp_path / "ifunc.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-nostdlib", "-o", str(built), str(src)], check=True)
    why = entry_check.check_shared_object(built.read_bytes())
    assert why is not None and ("ifunc" in why or "IRELATIVE" in why), why


def _rela(data: bytes) -> tuple[int, int]:
    """(file offset, size) of the first RELA table of a little-endian ELF64 shared object."""
    (phoff,) = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + i * phentsize
        )
        if p_type == 2:
            tags = {}
            for off in range(p_offset, p_offset + p_filesz, 16):
                tag, val = struct.unpack_from("<qQ", data, off)
                tags[tag] = val
            return tags[7], tags[8]  # our objects: vaddr == offset below the first RW page
    raise AssertionError("no dynamic segment")


@needs_ld
def test_relocation_outside_the_object_is_refused(cdir):
    """A relocation is a write by the dynamic loader: one aimed outside the object's segments
    would patch another library's memory while loading."""
    so, _ = filled(cdir)
    data = bytearray(payload(so))
    assert entry_check.check_shared_object(bytes(data)) is None
    off, size = _rela(bytes(data))
    assert size >= 24
    struct.pack_into("<Q", data, off, 1 << 40)  # r_offset of the first relocation
    why = entry_check.check_shared_object(bytes(data))
    assert why is not None and "relocation" in why, why


@needs_ld
def test_real_kernels_pass_the_checks(cdir):
    """What blu writes passes: libm imports and the pipeline's own code (the allow-lists were
    made from the undefined symbols of every kernel the CPU rule tests compile)."""
    run(lambda a: bnp.arctanh(a / 3.0) + bnp.cbrt(a) * bnp.arccosh(a * a + 1.0), X)
    assert discards() == []
    for so in entries(cdir, ".so"):
        assert entry_check.check_shared_object(payload(so)) is None


# ---- (b) LLVM-dialect text: no external definitions, calls only to allowed functions -----------

_CMD = """  llvm.mlir.global internal constant @cmd("touch {marker}\\00") {{addr_space = 0 : i32}}
"""
_AVAILABLE_EXTERNALLY = (
    _CMD
    + """
  llvm.func available_externally @system(%arg0: !llvm.ptr) -> i32 {{
    %0 = llvm.mlir.constant(0 : i32) : i32
    llvm.return %0 : i32
  }}
"""
)


def _plant_call(ll: Path, key: str, decls: str, call: str) -> bytes:
    text = payload(ll).decode()
    sym = mlir_cpu.symbol(key)
    head, rest = text.split(f"llvm.func @{sym}(", 1)
    sig, body = rest.split("{\n", 1)
    evil = head.replace("module {\n", "module {\n" + decls, 1)
    return (evil + f"llvm.func @{sym}(" + sig + "{\n" + call + body).encode()


@needs_ld
def test_available_externally_system_with_a_body_never_runs(cdir, tmp_path):
    """Was: a definition ``available_externally @system`` with a harmless body passed the check
    (it has a body), and LLVM bound the call to libc's ``system``."""
    _, ll = filled(cdir)
    for so in entries(cdir, ".so"):
        so.unlink()
    key = ll.name[: -len(".llvm.mlir")]
    marker = tmp_path / "system-ran"
    call = (
        "    %evil_cmd = llvm.mlir.addressof @cmd : !llvm.ptr\n"
        "    %evil_rc = llvm.call @system(%evil_cmd) : (!llvm.ptr) -> i32\n"
    )
    data = _plant_call(ll, key, _AVAILABLE_EXTERNALLY.format(marker=marker), call)
    ll.write_bytes(cache.frame(key, ".llvm.mlir", data))
    msgs = discards()
    assert len(msgs) == 1 and "system" in msgs[0], msgs
    assert not marker.exists()


@needs_ld
@pytest.mark.parametrize(
    "decls, call, word",
    [
        (  # a weak definition of a libc name: LLVM may take the library's instead
            "  llvm.func weak @getpid() -> i32 {\n    %0 = llvm.mlir.constant(0 : i32) : i32\n"
            "    llvm.return %0 : i32\n  }\n",
            "    %evil = llvm.call @getpid() : () -> i32\n",
            "getpid",
        ),
        (  # an external global: a data symbol of another library
            "  llvm.mlir.global external @environ() {addr_space = 0 : i32} : !llvm.ptr\n",
            "    %evil = llvm.mlir.addressof @environ : !llvm.ptr\n",
            "environ",
        ),
        (  # the address of an allowed function: a pointer into libc, a start for arithmetic
            "  llvm.func @memset(!llvm.ptr, i32, i64) -> !llvm.ptr\n",
            "    %evil = llvm.mlir.addressof @memset : !llvm.ptr\n",
            "memset",
        ),
    ],
    ids=["weak-libc-name", "external-global", "address-of-function"],
)
def test_foreign_llvm_constructs_are_refused(cdir, decls, call, word):
    _, ll = filled(cdir)
    for so in entries(cdir, ".so"):
        so.unlink()
    key = ll.name[: -len(".llvm.mlir")]
    ll.write_bytes(cache.frame(key, ".llvm.mlir", _plant_call(ll, key, decls, call)))
    msgs = discards()
    assert len(msgs) == 1 and word in msgs[0], msgs


# ---- (c) PTX and cubins -----------------------------------------------------------------------


def minimal_cuda_elf(undefined: tuple[str, ...] = ()) -> bytes:
    """An ELF64 header of a CUDA executable (EM_CUDA = 190) with a symbol table holding
    ``undefined`` symbols; enough for the structural checks (not for a GPU)."""
    strtab = b"\0" + b"".join(n.encode() + b"\0" for n in undefined)
    shstr = b"\0.symtab\0.strtab\0.shstrtab\0"
    syms = b"\0" * 24
    pos = 1
    for n in undefined:
        syms += struct.pack("<IBBHQQ", pos, 0x10, 0, 0, 0, 0)  # GLOBAL NOTYPE, UND
        pos += len(n) + 1
    body_off = 64
    sym_off, str_off = body_off, body_off + len(syms)
    shs_off = str_off + len(strtab)
    sh_off = (shs_off + len(shstr) + 7) & ~7
    sh = b"\0" * 64
    sh += struct.pack("<IIQQQQIIQQ", 1, 2, 0, 0, sym_off, len(syms), 2, 1, 8, 24)
    sh += struct.pack("<IIQQQQIIQQ", 9, 3, 0, 0, str_off, len(strtab), 0, 0, 1, 0)
    sh += struct.pack("<IIQQQQIIQQ", 17, 3, 0, 0, shs_off, len(shstr), 0, 0, 1, 0)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0x41, 8]) + b"\0" * 7
    hdr = ident + struct.pack(
        "<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, sh_off, 0x6005A04, 64, 56, 0, 64, 4, 3
    )
    body = syms + strtab + shstr
    return hdr + body + b"\0" * (sh_off - shs_off - len(shstr)) + sh


def _without_mlir(monkeypatch) -> None:
    from blu.lower import mlir as lower_mlir

    monkeypatch.setattr(lower_mlir, "_mlir_available", lambda: False)


def test_ptx_with_an_extern_function_is_refused(cdir, monkeypatch):
    canonical = "in v0:float32[5]\nout v0"
    key = cache.kernel_key(canonical, mlir_gpu.DEFAULT_TARGET)
    ptx = b".version 8.0\n.target sm_90\n.address_size 64\n.extern .func (.param .b32 r) evil;\n"
    cache.write_bytes(key, ".ptx", ptx)
    _without_mlir(monkeypatch)
    with pytest.raises(mlir_gpu.KernelCacheMiss, match=r"\.extern.*evil"):
        mlir_gpu.get_module(canonical, lambda name: "", "the test kernel")


def test_cubin_with_foreign_undefined_symbols_is_dropped(cdir, monkeypatch):
    """ptxas's own weak ``.nv.reservedSmem.*`` symbols pass; anything else the driver would
    have to resolve (or a non-CUDA ELF) is dropped and the verified PTX used."""
    canonical = "in v0:float32[6]\nout v0"
    key = cache.kernel_key(canonical, mlir_gpu.DEFAULT_TARGET)
    cache.write_bytes(key, ".ptx", b"// ptx")
    good = minimal_cuda_elf((".nv.reservedSmem.offset0",))
    assert entry_check.check_cubin(good) is None
    bad = minimal_cuda_elf(("vprintf_evil",))
    cache.write_bytes(key, ".cubin", bad)
    _without_mlir(monkeypatch)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        m = mlir_gpu.get_module(canonical, lambda name: "", "the test kernel")
    assert m.cubin is None and m.ptx == b"// ptx"
    assert any("vprintf_evil" in str(x.message) for x in w)
    assert "not a CUDA" in entry_check.check_cubin(b"\x7fELF" + b"\2\1\1" + b"\0" * 80)


def test_real_ptx_and_cubins_pass_the_checks(cdir):
    """Kernels compiled here (no GPU needed) have no ``.extern`` and only ptxas's own undefined
    symbols, so the prefilled-cache workflow keeps working."""
    pytest.importorskip("mlir")
    f = blu.jit(lambda a, b: bnp.sin(a) * bnp.exp(b) + a**b)
    spec = blu.ShapeDtypeStruct((64,), np.float32)
    f.lower(spec, spec, target="cuda:sm_90").compile()
    ptxs = entries(cdir, ".ptx")
    assert ptxs
    for p in ptxs:
        assert entry_check.check_ptx(payload(p)) is None
    for p in entries(cdir, ".cubin"):
        assert entry_check.check_cubin(payload(p)) is None


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
