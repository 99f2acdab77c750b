"""No foreign code through the kernel cache, no blocking or unbounded read of an entry, eviction
that touches only blu's files, and private copies of loaded kernels owned by the process that made
them (issue #41). Each test plants what an attacker (a cache handed over from elsewhere, with
valid headers: the digest is no secret) or an unlucky disk would, and checks that nothing foreign
runs and that the kernel still gives numpy's float64 answer. The content checks are tested with
entries framed with this user's own key (``cache.frame``), i.e. as if the key had leaked: they are
the second line behind the per-user signature of the CPU's entries."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu.lower.cuda import compiler as mlir_gpu
from blu.lower.mlir import cache, entry_check
from blu.lower.mlir import llvm as mlir_cpu
from blu.lower.mlir.cache import CacheEntryWarning
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


@needs_cc
def test_import_found_through_the_hash_table_without_section_headers(tmp_path):
    """The loader finds symbols through the hash tables, not the section headers: an object with
    only a GNU hash table and its section headers wiped still shows its import of ``system``."""
    src = tmp_path / "planted.c"
    src.write_text(_NOSTDLIB_C % ("k" + "0" * 24, tmp_path / "never"))
    built = tmp_path / "planted.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-nostdlib", "-Wl,--hash-style=gnu", "-o",
                    str(built), str(src)], check=True)  # fmt: skip
    data = bytearray(built.read_bytes())
    struct.pack_into("<Q", data, 40, 0)  # e_shoff
    struct.pack_into("<HHH", data, 58, 0, 0, 0)  # e_shentsize, e_shnum, e_shstrndx
    why = entry_check.check_shared_object(bytes(data))
    assert why is not None and "system" in why, why


def test_mangled_objects_never_raise_and_never_pass(tmp_path):
    """Random damage to a planted object's headers gives a reason, never an exception, and never
    hides its import (the loader and the check read the same tables, by address)."""
    rng = np.random.default_rng(0)
    if shutil.which("cc") is None:
        pytest.skip("no C compiler to plant code")
    src = tmp_path / "planted.c"
    src.write_text(_NOSTDLIB_C % ("k" + "0" * 24, tmp_path / "never"))
    built = tmp_path / "planted.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-nostdlib", "-o", str(built), str(src)], check=True)
    base = built.read_bytes()
    for i in range(400):
        data = bytearray(base[: int(rng.integers(0, len(base)))] if i % 4 == 0 else base)
        for _ in range(int(rng.integers(1, 6))):
            if data:
                data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))
        why = entry_check.check_shared_object(bytes(data))
        if why is None:  # only if the damage removed the import itself
            assert b"system\0" not in bytes(data) or _import_gone(tmp_path, bytes(data)), i


def _import_gone(tmp_path: Path, data: bytes) -> bool:
    if shutil.which("readelf") is None:
        return False
    f = tmp_path / "mangled.so"
    f.write_bytes(data)
    r = subprocess.run(["readelf", "-W", "--dyn-syms", "--use-dynamic", str(f)],
                       capture_output=True, check=False)  # fmt: skip
    return b"UND system" not in r.stdout


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


# ---- the CPU's entries are signed with this user's key -----------------------------------------

_RAW_SYSCALL_C = textwrap.dedent(
    """
    void _mlir_%s(void **args) {
        static const char path[] = "%s";
        long fd;
        (void)args;  /* open(path, O_WRONLY | O_CREAT, 0644) by a raw system call: no import */
        __asm__ volatile ("syscall" : "=a"(fd) : "a"(2L), "D"(path), "S"(0101L), "d"(0644L)
                          : "rcx", "r11", "memory");
    }
    """
)


def foreign_frame(tmp_path: Path, key: str, suffix: str, data: bytes) -> bytes:
    """An entry framed as blu frames it, but on another machine (another user's key)."""
    with blu.config.override(cache_key_file=str(tmp_path / "elsewhere" / "cache-key")):
        return cache.frame(key, suffix, data)


@needs_ld
@needs_cc
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the planted code is x86-64 assembly")
def test_object_making_raw_system_calls_from_elsewhere_never_runs(cdir, tmp_path):
    """An object with no import at all passes every content check (no check can prove what
    machine code does); it was not compiled with this user's key, so it is never loaded."""
    so, _ = filled(cdir)
    key = so.name[: -len(".so")]
    marker = tmp_path / "raw-syscall-ran"
    src = tmp_path / "raw.c"
    src.write_text(_RAW_SYSCALL_C % (mlir_cpu.symbol(key), marker))
    built = tmp_path / "raw.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-nostdlib", "-o", str(built), str(src)], check=True)
    assert entry_check.check_shared_object(built.read_bytes()) is None  # the content is "fine"
    so.write_bytes(foreign_frame(tmp_path, key, ".so", built.read_bytes()))
    msgs = discards()
    assert len(msgs) == 1 and "not signed with this user's cache key" in msgs[0], msgs
    assert not marker.exists()


@needs_ld
def test_cpu_cache_copied_from_another_machine_is_rebuilt(cdir, tmp_path):
    so, ll = filled(cdir)
    for p, suffix in ((so, ".so"), (ll, ".llvm.mlir")):
        p.write_bytes(foreign_frame(tmp_path, p.name[: -len(suffix)], suffix, payload(p)))
    msgs = discards()  # the .so is refused, then the text: both rebuilt
    assert len(msgs) == 2 and all("not signed" in m for m in msgs), msgs
    assert discards() == []  # rebuilt with this user's key


def test_key_file_is_made_private_and_refused_when_others_could_read_it(tmp_path):
    from blu.lower.mlir import cache_key

    p = tmp_path / "cfg" / "cache-key"
    with blu.config.override(cache_key_file=str(p)):
        cache_key._keys.pop(str(p), None)
        k = cache_key.user_key()
        assert len(k) == 32 and os.stat(p).st_mode & 0o777 == 0o600
        cache_key._keys.clear()
        assert cache_key.user_key() == k  # the same key in the next process
        os.chmod(p, 0o644)
        cache_key._keys.clear()
        with pytest.raises(cache_key.CacheKeyError, match="readable or writable by others"):
            cache_key.user_key()
        p.unlink()
        p.symlink_to(tmp_path / "someone-elses-key")
        cache_key._keys.clear()
        with pytest.raises(cache_key.CacheKeyError, match="symbolic link"):
            cache_key.user_key()
    cache_key._keys.clear()


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


@pytest.mark.parametrize("decl, ok", [
    (b".extern .shared .align 16 .b8 __dynamic_shmem__0[];", True),  # a row stash's window
    (b".extern .shared .align 16 .b8 table[];", False),  # another name: not the pipeline's
    (b".extern .global .align 16 .b8 __dynamic_shmem__0[];", False),  # another module's data
    (b".extern .shared .align 16 .b8 __dynamic_shmem__0[64];", False),
])  # fmt: skip
def test_only_the_dynamic_shared_window_may_be_extern(decl, ok):
    ptx = b".version 8.0\n.target sm_90\n.address_size 64\n" + decl + b"\n"
    assert (entry_check.check_ptx(ptx) is None) is ok


def test_dynamic_shared_memory_is_declared_after_the_static_variables():
    """NVPTX writes ``gpu.dynamic_shared_memory``'s zero-length global as a one-byte static
    shared variable (demoted into its one kernel); ``compiler.dynamic_shared`` declares it as
    PTX's dynamic shared memory at module scope, the kernels' static variables kept."""
    ptx = (b".version 7.8\n.target sm_90\n.address_size 64\n\n\t// .globl\tk_0\n"
           b".visible .entry k_0(\n\t.param .u64 k_0_param_0\n)\n{\n\t.reg .b64 \t%rd<3>;\n"
           b"\t// demoted variable\n\t.shared .align 16 .b8 __dynamic_shmem__0;\n"
           b"\t// demoted variable\n\t.shared .align 4 .b8 __wg_k_0_0[128];\n"
           b"\tmov.b64 \t%rd1, __dynamic_shmem__0;\n\tret;\n}\n")  # fmt: skip
    out = mlir_gpu.dynamic_shared(ptx)
    lines = out.decode().splitlines()
    decl = ".extern .shared .align 16 .b8 __dynamic_shmem__0[];"
    assert lines.count(decl) == 1 and lines.index(decl) < lines.index(".visible .entry k_0(")
    assert "\t.shared .align 4 .b8 __wg_k_0_0[128];" in lines
    assert "\t.shared .align 16 .b8 __dynamic_shmem__0;" not in lines
    assert entry_check.check_ptx(out) is None
    assert mlir_gpu.dynamic_shared(b"no shared memory\n") == b"no shared memory\n"


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


def test_real_ptx_and_cubins_pass_the_checks(cdir, tmp_path, monkeypatch):
    """Kernels compiled here (no GPU needed) have no ``.extern`` and only ptxas's own undefined
    symbols, so the prefilled-cache workflow keeps working: exported, carried to a machine with
    another user's key and no MLIR, they load from the cache."""
    import importlib.util

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
    spec_ = importlib.util.spec_from_file_location("fill", ROOT / "scripts" / "fill_gpu_cache.py")
    fill = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(fill)
    carried = tmp_path / "carried"
    assert fill.export_gpu_entries(cdir, carried) == len(ptxs)
    env_flag("BLU_CACHE_DIR", str(carried))
    _without_mlir(monkeypatch)
    mlir_gpu._loaded.clear()
    before = mlir_gpu.stats["cache"]
    with blu.config.override(cache_key_file=str(tmp_path / "gpu-machine" / "cache-key")):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            blu.jit(lambda a, b: bnp.sin(a) * bnp.exp(b) + a**b).lower(
                spec, spec, target="cuda:sm_90"
            ).compile()
    assert mlir_gpu.stats["cache"] == before + len(ptxs)
