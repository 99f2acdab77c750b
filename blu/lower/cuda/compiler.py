"""Compiling kernels for CUDA GPUs: MLIR text -> NVVM -> PTX (and a cubin where ``ptxas``
exists), through the persistent kernel cache.

Pipeline (``PIPELINE``): attach an NVVM target (``chip=sm_90`` by default: the target string
``cuda:sm_90`` picks it), lower ``scf`` and ``gpu`` to NVVM with the bare-pointer memref
convention (one device address per buffer), and ``gpu-module-to-binary{format=isa}``, which
links libdevice for the ``__nv_*`` functions and runs LLVM's NVPTX back end. The PTX is read from
the ``gpu.binary`` op's object attribute; ``ptxas -arch=<chip>`` checks it and produces the
cubin the runtime loads (the PTX is the fallback, JIT-compiled by the driver).

Cache entries: ``<key>.ptx`` and ``<key>.cubin`` (``cache.kernel_key`` of the kernel's canonical
text and the target), each checked before use (``entry_check.check_ptx``: no ``.extern``;
``check_cubin``: a CUDA ELF image whose only undefined symbols are ptxas's own; a cubin is read
only beside a verified PTX, and a bad one is dropped for that PTX). On a machine without MLIR
(the GPU test machine) a miss raises ``KernelCacheMiss`` naming the kernel and the command that
fills the cache.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable

from blu.core import forks
from blu.core.config import config
from blu.core.errors import BluError
from blu.core.lru import LRU
from blu.lower.mlir import cache, entry_check
from blu.lower.mlir.llvm import CompileError, _dump, symbol
from blu.lower.target import CUDA_DEFAULT
from blu.lower.target import parse_target as _parse

log = logging.getLogger("blu.jit")

DEFAULT_TARGET = CUDA_DEFAULT
FILL_COMMAND = "python scripts/fill_gpu_cache.py"


def pipeline(chip: str) -> str:
    return (
        f"builtin.module(nvvm-attach-target{{chip={chip} O=3}},"
        # complex values: expanded to arith/math (then libdevice) and LLVM structs, as on the CPU
        "gpu.module(convert-complex-to-standard,convert-scf-to-cf,convert-complex-to-llvm,"
        "convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1}),gpu-to-llvm,"
        "reconcile-unrealized-casts,gpu-module-to-binary{format=isa})"
    )


class KernelCacheMiss(BluError):
    """A GPU kernel is not in the kernel cache and this machine cannot compile it (no MLIR)."""


def parse_target(target: str) -> str:
    """The chip (``sm_90``) of a ``cuda:sm_XX`` target string.

    Raises:
        BluValueError: not a CUDA target string.
    """
    t = _parse(target)
    if t.platform != "cuda":
        from blu.core.errors import BluValueError

        raise BluValueError(f"GPU target {target!r}: expected 'cuda:sm_XX' (e.g. 'cuda:sm_90')")
    return t.chip


class GpuModule:
    """A compiled kernel for the GPU: its images and symbol.

    Attributes:
        key: cache key; name: the ``gpu.module`` symbol (each launch's function is
        ``<name>_<nest>``); ptx: the PTX text; cubin: the cubin, or None where ``ptxas`` was
        missing; source: "compiled" | "cache" | "memory"; seconds: compile or load time.
    """

    __slots__ = ("key", "name", "ptx", "cubin", "source", "seconds")

    def __init__(self, key, name, ptx, cubin, source, seconds):
        self.key, self.name, self.ptx, self.cubin = key, name, ptx, cubin
        self.source, self.seconds = source, seconds

    def image(self) -> bytes:
        return self.cubin if self.cubin is not None else self.ptx


# key -> module, the most recently used ``blu.config.kernel_cache_size`` of them (the images are
# host bytes; executables hold the modules they use)
_loaded = LRU("kernel_cache_size")
_lock = forks.lock()  # held while a module is loaded or compiled


@forks.in_child
def _after_fork() -> None:
    """A child forked while another thread compiled has no thread to release the lock."""
    global _lock
    _lock = forks.renew(_lock)


stats = {"compiled": 0, "cache": 0, "memory": 0, "compile_s": 0.0}


def get_module(
    canonical: str, emit: Callable[[str], str], label: str = "", target: str = DEFAULT_TARGET
) -> GpuModule:
    """The compiled GPU kernel for a canonical text: from memory, the disk cache, or compiled.

    Args:
        canonical: ``cache.canonical_text`` of the kernel jaxpr.
        emit: given the symbol, returns the kernel's MLIR text (called only on a miss).
        label: a readable description for logs and errors.
        target: ``cuda:sm_XX``.

    Raises:
        KernelCacheMiss: not cached and MLIR is not installed here.
        CompileError: MLIR rejected the kernel.
    """
    key = cache.kernel_key(canonical, target)
    with _lock:
        m = _loaded.get(key)
        if m is not None:
            stats["memory"] += 1
            return m
        m = _load_or_compile(key, canonical, emit, label, target)
        _loaded[key] = m
        return m


def _load_or_compile(key, canonical, emit, label, target) -> GpuModule:
    name = symbol(key)
    t0 = time.perf_counter()
    from blu.lower.mlir import _mlir_available

    ptx, why = cache.read_entry(key, ".ptx")
    if ptx is not None:
        why = entry_check.check_ptx(ptx)
        ptx = None if why is not None else ptx
    if ptx is not None:
        cubin, cubin_why = cache.read_entry(key, ".cubin")
        if cubin is not None:
            cubin_why = entry_check.check_cubin(cubin)
            cubin = None if cubin_why is not None else cubin
        if cubin_why is not None:  # the PTX is enough: the driver compiles it
            cache.discard(key, ".cubin", cubin_why, label)
        stats["cache"] += 1
        return _done(GpuModule(key, name, ptx, cubin, "cache", time.perf_counter() - t0), label)
    if why is not None:
        if not _mlir_available():  # cannot rebuild here: say so, leave the entry to look at
            raise KernelCacheMiss(
                f"GPU kernel {name} ({label or 'a fused kernel'}) for {target}: its kernel "
                f"cache entry {cache.path(key, '.ptx')!r} failed verification ({why}), and "
                f"MLIR is not installed here to rebuild it. Refill the cache on a machine with "
                f"MLIR (`{FILL_COMMAND}`) and bring it along (BLU_CACHE_DIR)."
            )
        cache.discard(key, ".ptx", why, label)
    if not _mlir_available():
        raise KernelCacheMiss(
            f"GPU kernel {name} ({label or 'a fused kernel'}) for {target} is not in the kernel "
            f"cache {cache.cache_dir()!r}, and MLIR is not installed here to compile it. Fill the "
            f"cache on a machine with MLIR (`{FILL_COMMAND}`) and bring it along "
            f"(BLU_CACHE_DIR).\nkernel:\n{canonical[:2000]}"
        )
    text = emit(name)
    _dump(name, canonical, text, ".gpu.mlir")
    ptx = compile_ptx(text, parse_target(target))
    _dump(name, None, ptx.decode(), ".ptx")
    cubin = ptxas(ptx, parse_target(target))
    cache.write_bytes(key, ".ptx", ptx)
    if cubin is not None:
        cache.write_bytes(key, ".cubin", cubin)
    seconds = time.perf_counter() - t0
    stats["compiled"] += 1
    stats["compile_s"] += seconds
    return _done(GpuModule(key, name, ptx, cubin, "compiled", seconds), label)


def _done(m: GpuModule, label: str) -> GpuModule:
    if config.log_compiles:
        verb = "compiled" if m.source == "compiled" else f"loaded ({m.source})"
        log.warning("blu.jit: %s GPU kernel %s %s in %.1f ms", verb, m.name, label, m.seconds * 1e3)
    return m


def compile_ptx(text: str, chip: str = "sm_90") -> bytes:
    """Run the NVVM pipeline on a module of ``gpu.module``s; returns the PTX (one module).

    Raises:
        CompileError: the text does not parse or a pass fails.
    """
    from mlir import ir, passmanager
    from mlir.dialects import gpu

    with ir.Context():
        try:
            module = ir.Module.parse(text)
            passmanager.PassManager.parse(pipeline(chip)).run(module.operation)
        except Exception as e:  # MLIRError, ValueError: a lowering rule emitted bad IR
            raise CompileError(f"MLIR could not compile a GPU kernel: {e}\n{text[:4000]}") from e
        for op in module.body.operations:
            if op.operation.name == "gpu.binary":
                return dynamic_shared(bytes(gpu.ObjectAttr(op.attributes["objects"][0]).object))
    raise CompileError("the NVVM pipeline produced no gpu.binary")


# ``gpu.dynamic_shared_memory`` lowers to an internal zero-length global, which NVPTX writes as a
# one-byte *static* shared variable (in the one kernel using it, or at module scope): ptxas may
# place it before the kernel's other static shared variables (``gpu.all_reduce``'s), and a row
# group's stash then overwrote them. Declared as PTX's dynamic shared memory instead (at module
# scope: PTX takes ``.extern`` nowhere else), it starts after every static variable.
_DYNAMIC_SHARED = re.compile(rb"^\s*\.shared (\.align \d+ \.b8 __dynamic_shmem__\d+);\n", re.M)


def dynamic_shared(ptx: bytes) -> bytes:
    """``ptx`` with its dynamic shared memory declared as such (``.extern .shared ... []``)."""
    names = list(dict.fromkeys(_DYNAMIC_SHARED.findall(ptx)))
    if not names:
        return ptx
    ptx = _DYNAMIC_SHARED.sub(b"", ptx)
    head = re.search(rb"^\.address_size \d+\n", ptx, re.M)
    at = head.end() if head else 0
    decls = b"".join(b".extern .shared " + n + b"[];\n" for n in names)
    return ptx[:at] + b"\n" + decls + ptx[at:]


def find_ptxas() -> str | None:
    """``ptxas`` on PATH, under ``$CUDA_HOME``/``$CUDA_PATH``, or in /usr/local/cuda."""
    found = shutil.which("ptxas")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "bin", "ptxas")):
            return os.path.join(root, "bin", "ptxas")
    return None


def ptxas(ptx: bytes, chip: str = "sm_90") -> bytes | None:
    """Assemble PTX into a cubin with ``ptxas -arch=<chip>`` (None when ptxas is missing).

    Raises:
        CompileError: ptxas rejected the PTX (its message is included).
    """
    exe = find_ptxas()
    if exe is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "wb") as f:
            f.write(ptx)
        r = subprocess.run([exe, f"-arch={chip}", "-O3", src, "-o", dst], capture_output=True)
        if r.returncode != 0:
            raise CompileError(f"ptxas -arch={chip} rejected a kernel:\n{r.stderr.decode()[:2000]}")
        with open(dst, "rb") as f:
            return f.read()
