"""Compiling kernels for the CPU: MLIR text -> pass pipeline -> LLVM -> machine code, through
the persistent cache.

The pipeline lowers ``scf``/``arith``/``math``/``memref``/``func`` (and ``vector``: the
attention kernels' dot products, ``mlir/attention.py``) to the LLVM dialect (math
functions without a polynomial in ``mathlib`` become libm calls); ``ExecutionEngine(opt_level=3)``
then runs LLVM's -O3 for the host CPU (LLVM vectorizes the loops, reductions included: they
carry ``fastmath<reassoc>``). Memrefs use the bare-pointer calling convention, and the
engine's packed wrapper ``_mlir_<name>(void **args)`` gives every kernel one C signature.

On a cache hit, a second process loads the shared object (``ctypes``, no MLIR at all) or, where
no linker was available (or ``BLU_CACHE_NO_SO=1``), re-creates the engine from the stored
LLVM-dialect text (skipping the pass pipeline). ``import mlir`` happens only when something must
be compiled. Entries are verified first (``cache.read_entry``: header, key, sha256 and this
user's signature, ``cache_key``; then ``entry_check``: no load-time code, imports only on the
allow-list, no foreign calls or definitions); a bad one is discarded with one warning and rebuilt,
so nothing unverified is ever loaded or compiled. ``dlopen`` reads a private copy of the verified
bytes, removed once loaded (see "private copies" below).
"""

from __future__ import annotations

import _ctypes
import atexit
import contextlib
import ctypes
import hashlib
import logging
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable

from blu.core import forks
from blu.core.config import config
from blu.core.errors import BluError
from blu.core.lru import LRU
from blu.lower.mlir import cache, entry_check

log = logging.getLogger("blu.jit")

# complex values (``complex<f32>``, ``rules_complex.py``): convert-complex-to-standard expands
# the complex dialect's math (div, abs, exp, log, sqrt, ...) into arith/math first, and
# convert-complex-to-llvm lowers the rest (create/re/im/add/...) to LLVM structs; both are no-ops
# on kernels without complex values
PIPELINE = (
    "builtin.module(convert-complex-to-standard,convert-scf-to-cf,"
    "convert-vector-to-llvm{reassociate-fp-reductions=1},convert-math-to-llvm,"
    "convert-math-to-libm,expand-strided-metadata,finalize-memref-to-llvm,convert-arith-to-llvm,"
    "convert-complex-to-llvm,"
    "convert-cf-to-llvm,convert-func-to-llvm{use-bare-ptr-memref-call-conv=1},"
    "reconcile-unrealized-casts)"
)

_PACKED = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class CompileError(BluError):
    """MLIR rejected a kernel or the pass pipeline failed (a bug in a lowering rule)."""


class UntrustedEntry(BluError):
    """A cached kernel holds code blu's pipeline never produces (see ``entry_check``)."""


class Kernel:
    """A compiled kernel: ``kernel(ptrs)`` calls it with a ``c_void_p`` array of buffer
    addresses (inputs, outputs, scratch, in the kernel's parameter order).

    Attributes:
        key: its cache key; name: its symbol; source: where it came from ("compiled",
        "cache:so", "cache:llvm", "memory"); seconds: compile or load time.
    """

    __slots__ = ("fn", "keep", "key", "name", "source", "seconds")

    def __init__(self, addr: int, keep: object, key: str, name: str, source: str, seconds: float):
        self.fn = _PACKED(addr)
        self.keep = keep  # the engine or library that owns the code
        self.key, self.name, self.source, self.seconds = key, name, source, seconds


# key -> kernel, the most recently used ``blu.config.kernel_cache_size`` of them, for new
# executables; an executable holds its own kernels, so one dropped here stays alive while used
_loaded = LRU("kernel_cache_size")
_lock = forks.lock()  # held while a kernel is loaded or compiled


@forks.in_child
def _after_fork() -> None:
    """A child forked while another thread compiled has no thread to release the lock."""
    global _lock
    _lock = forks.renew(_lock)


stats = {"compiled": 0, "cache_so": 0, "cache_llvm": 0, "memory": 0, "compile_s": 0.0}


def symbol(key: str) -> str:
    return "k" + key[:24]


def get_kernel(canonical: str, emit: Callable[[str], str], label: str = "") -> Kernel:
    """The compiled kernel for a canonical text, from memory, the disk cache, or compiled.

    Args:
        canonical: ``cache.canonical_text`` of the kernel jaxpr.
        emit: given the symbol name, returns the kernel's MLIR text (called only on a miss).
        label: a readable description for logs.
    """
    key = cache.kernel_key(canonical, cache.host_target())
    with _lock:
        k = _loaded.get(key)
        if k is not None:
            stats["memory"] += 1
            return k
        k = _load_or_compile(key, canonical, emit, label)
        _loaded[key] = k
        return k


def _load_or_compile(key: str, canonical: str, emit: Callable[[str], str], label: str) -> Kernel:
    name = symbol(key)
    t0 = time.perf_counter()
    k = _load_so(key, name, label, t0)
    if k is not None:
        return _done(k, label)
    k = _load_llvm(key, name, label, t0)
    if k is not None:
        return _done(k, label)
    text = emit(name)
    _dump(name, canonical, text)
    engine, llvm_text = _compile(text)
    _dump(name, None, llvm_text, ".llvm.mlir")
    cache.write_bytes(key, ".llvm.mlir", llvm_text.encode())
    so = _store_object(key, engine)
    seconds = time.perf_counter() - t0
    stats["compiled"] += 1
    stats["compile_s"] += seconds
    lib = _reload(so, name) if so is not None else None
    if lib is not None:  # the engine (~0.8 MB of LLVM state per kernel) is dropped here
        addr = ctypes.cast(getattr(lib, "_mlir_" + name), ctypes.c_void_p).value
        return _done(Kernel(addr, lib, key, name, "compiled", seconds), label)
    return _done(Kernel(engine.raw_lookup(name), engine, key, name, "compiled", seconds), label)


def _reload(data: bytes, name: str) -> ctypes.CDLL | None:
    """The shared object just made of a compiled kernel, loaded (checked as a cache entry is), so
    the kernel runs from it and its execution engine can be freed; None if anything fails (the
    engine is then kept)."""
    if entry_check.check_shared_object(data) is not None:
        return None
    try:
        lib = _dlopen_private(data)
        getattr(lib, "_mlir_" + name)
    except (OSError, AttributeError):
        return None
    return lib


def _load_so(key: str, name: str, label: str, t0: float) -> Kernel | None:
    """The kernel from a verified ``<key>.so`` (a private copy of the verified bytes is what
    ``dlopen`` reads: the cache file could change after it was checked), or None."""
    data, why = cache.read_entry(key, ".so")
    if data is None:
        if why is not None:
            cache.discard(key, ".so", why, label)
        return None
    why = entry_check.check_shared_object(data)
    if why is not None:
        cache.discard(key, ".so", why, label)
        return None
    try:
        lib = _dlopen_private(data)
        addr = ctypes.cast(getattr(lib, "_mlir_" + name), ctypes.c_void_p).value
    except OSError as e:
        cache.discard(key, ".so", f"dlopen failed ({e})", label)
        return None
    except AttributeError:
        cache.discard(key, ".so", f"no symbol _mlir_{name}", label)
        return None
    stats["cache_so"] += 1
    return Kernel(addr, lib, key, name, "cache:so", time.perf_counter() - t0)


def _load_llvm(key: str, name: str, label: str, t0: float) -> Kernel | None:
    """The kernel from a verified ``<key>.llvm.mlir`` (checked to be of the kind the pipeline
    produces before it is compiled), or None."""
    data, why = cache.read_entry(key, ".llvm.mlir")
    if data is None:
        if why is not None:
            cache.discard(key, ".llvm.mlir", why, label)
        return None
    try:
        engine = _engine(data.decode("utf-8"), run_passes=False)
        addr = engine.raw_lookup(name)
    except (UnicodeDecodeError, CompileError, UntrustedEntry) as e:
        why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        cache.discard(key, ".llvm.mlir", why, label)
        return None
    if not addr:
        cache.discard(key, ".llvm.mlir", f"no symbol {name}", label)
        return None
    stats["cache_llvm"] += 1
    so = _store_object(key, engine)
    lib = _reload(so, name) if so is not None else None
    if lib is not None:  # run from the shared object; the engine is freed
        addr, engine = ctypes.cast(getattr(lib, "_mlir_" + name), ctypes.c_void_p).value, lib
    return Kernel(addr, engine, key, name, "cache:llvm", time.perf_counter() - t0)


# ---- private copies of loaded shared objects ---------------------------------------------------
# ``dlopen`` reads a private copy of the verified bytes (the cache file could change after it was
# checked), in a folder of this process: ``<tmp>/blu-so-<pid>-XXXXXXXX`` (0700). A copy is removed
# as soon as it is loaded (Linux keeps an unlinked file mapped), so the folder stays empty; it is
# removed at exit by the process that made it only (a forked child makes its own, and its exit
# leaves the parent's alone); folders of processes no longer alive (killed) are removed at start.

SO_PREFIX = "blu-so-"
_SO_FOLDER = re.compile(re.escape(SO_PREFIX) + r"(\d+)-[a-z0-9_]+")
_so_lock = threading.Lock()
_so_dir: str | None = None
_so_owner = 0  # the pid that made _so_dir
_swept = False


def _private_dir() -> str:
    global _so_dir, _so_owner, _swept
    if _so_dir is None or _so_owner != os.getpid() or not os.path.isdir(_so_dir):
        if not _swept:
            _swept = True
            remove_stale_private_dirs()
        _so_dir = tempfile.mkdtemp(prefix=f"{SO_PREFIX}{os.getpid()}-")  # 0700
        _so_owner = os.getpid()
    return _so_dir


def _remove_own_private_dir() -> None:
    """At exit: the private folder, by the process that made it only."""
    if _so_dir is not None and _so_owner == os.getpid():
        shutil.rmtree(_so_dir, ignore_errors=True)


def _forget_private_dir() -> None:
    """In a forked child: the parent's folder is the parent's; the child makes its own."""
    global _so_dir, _so_owner, _so_lock
    _so_dir, _so_owner, _so_lock = None, 0, threading.Lock()


atexit.register(_remove_own_private_dir)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_private_dir)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process (EPERM): alive
    return True


def remove_stale_private_dirs(tmp: str | None = None) -> list[str]:
    """Remove this user's private folders (``blu-so-<pid>-*``) whose process is gone (killed
    before its exit handler ran); returns them. A folder of a live process is left alone."""
    tmp = tmp or tempfile.gettempdir()
    removed = []
    try:
        found = list(os.scandir(tmp))
    except OSError:
        return removed
    for e in found:
        m = _SO_FOLDER.fullmatch(e.name)
        if m is None or int(m.group(1)) == os.getpid() or _alive(int(m.group(1))):
            continue
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and (not hasattr(os, "getuid") or st.st_uid == os.getuid()):
            shutil.rmtree(e.path, ignore_errors=True)
            removed.append(e.path)
    return removed


def _dlopen_private(data: bytes) -> ctypes.CDLL:
    """``dlopen`` a private copy of verified bytes, then remove the copy. Named by their sha256:
    the dynamic loader treats a name it has loaded before as that library (without reading the
    file again), and equal names mean equal bytes."""
    with _so_lock:
        p = os.path.join(_private_dir(), hashlib.sha256(data).hexdigest() + ".so")
        fd = os.open(p + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(p + ".tmp", p)
        try:
            lib = ctypes.CDLL(p)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(p)
    # each CDLL is one dlopen reference: closed when the last kernel using it is freed (the
    # loader unmaps the code when no reference is left)
    weakref.finalize(lib, _dlclose, lib._handle)
    return lib


def _dlclose(handle: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        _ctypes.dlclose(handle)


def _done(k: Kernel, label: str) -> Kernel:
    if config.log_compiles:
        verb = "compiled" if k.source == "compiled" else f"loaded ({k.source})"
        log.warning("blu.jit: %s kernel %s %s in %.1f ms", verb, k.name, label, k.seconds * 1e3)
    return k


def _engine(text: str, run_passes: bool):
    from mlir import execution_engine, ir, passmanager

    with ir.Context():
        try:
            module = ir.Module.parse(text)
            if run_passes:
                passmanager.PassManager.parse(PIPELINE).run(module.operation)
        except Exception as e:  # MLIRError, ValueError: the kernel text is malformed
            raise CompileError(f"MLIR could not compile a kernel: {e}\n{text[:4000]}") from e
        if not run_passes:  # cached text: refuse what the pipeline never produces
            why = entry_check.check_llvm_module(module)
            if why is not None:
                raise UntrustedEntry(why)
        llvm_text = str(module) if run_passes else text
        engine = execution_engine.ExecutionEngine(module, opt_level=3)
    engine.llvm_text = llvm_text  # type: ignore[attr-defined]
    return engine


def _compile(text: str):
    engine = _engine(text, run_passes=True)
    return engine, engine.llvm_text


_linker = shutil.which("ld")


def _store_object(key: str, engine) -> bytes | None:
    """Write the engine's object code as ``<key>.so`` (needs a system ``ld``; else skipped).
    Returns the shared object's bytes (None where none was made)."""
    if _linker is None or config.cache_no_so:
        return None
    try:
        with tempfile.TemporaryDirectory() as d:
            obj, so = os.path.join(d, "k.o"), os.path.join(d, "k.so")
            engine.dump_to_object_file(obj)
            subprocess.run([_linker, "-shared", "-o", so, obj], check=True, capture_output=True)
            with open(so, "rb") as f:
                data = f.read()
            cache.write_bytes(key, ".so", data)
        return data
    except (OSError, subprocess.CalledProcessError):
        return None


def _dump(name: str, canonical: str | None, text: str, suffix: str = ".mlir") -> None:
    """``BLU_DUMP_IR=dir``: write each compiled kernel's jaxpr and MLIR (before/after passes)."""
    d = config.dump_ir
    if not d:
        return
    os.makedirs(d, exist_ok=True)
    if canonical is not None:
        with open(os.path.join(d, name + ".jaxpr.txt"), "w") as f:
            f.write(canonical)
    with open(os.path.join(d, name + suffix), "w") as f:
        f.write(text)
