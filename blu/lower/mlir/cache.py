"""The persistent kernel cache: compiled kernels in ``blu.config.cache_dir`` (``BLU_CACHE_DIR``).

A kernel's key is the sha256 of blu's canonical text of the kernel (its fused jaxpr with avals,
params and literal dtypes), the target (for the CPU: the host's architecture and instruction-set
extensions, since the object code uses them), blu's version, the MLIR bindings' version and
the code generator's version. Computing it never imports ``mlir``, so a machine without MLIR
can still find every kernel a machine with MLIR compiled ahead of time.

Entries (for the CPU target) are ``<key>.so`` (a shared object, when a linker is available)
and ``<key>.llvm.mlir`` (the kernel after the pass pipeline, in the LLVM dialect: a second
process skips the pipeline and only runs LLVM's code generation). Writes are atomic (a
temporary file renamed into place), so concurrent processes can share one directory.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import tempfile
from typing import Any

import numpy as np

from blu.core.config import config
from blu.core.jaxpr import Jaxpr, Literal

# bump when the generated code changes meaning, so stale entries are not reused
CODEGEN_VERSION = "9"


def cache_dir() -> str:
    return os.environ.get("BLU_CACHE_DIR") or config.cache_dir


def mlir_version() -> str:
    """The version of the MLIR Python bindings, read from package metadata (no import).

    Where the bindings are not installed (the GPU machine), the version recorded in the cache
    directory by the machine that filled it (``mlir-version``), so its keys still match."""
    installed = _installed_mlir_version()
    if installed != "none":
        _record_version(installed)
        return installed
    try:
        with open(os.path.join(cache_dir(), "mlir-version")) as f:
            return f.read().strip() or "none"
    except OSError:
        return "none"


@functools.cache
def _installed_mlir_version() -> str:
    from importlib import metadata

    for dist in ("xtc-mlir-python-bindings", "mlir-python-bindings", "mlir"):
        try:
            return f"{dist}=={metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return "none"


_recorded: set[str] = set()


def _record_version(version: str) -> None:
    d = cache_dir()
    if d in _recorded:
        return
    _recorded.add(d)
    if read_text_path(os.path.join(d, "mlir-version")) != version:
        write_file(os.path.join(d, "mlir-version"), version.encode())


def read_text_path(p: str) -> str | None:
    try:
        with open(p) as f:
            return f.read().strip()
    except OSError:
        return None


@functools.cache
def host_target() -> str:
    """``cpu:<arch>:<hash of the CPU's feature flags>``: object code compiled here runs on any
    machine with the same string."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags = " ".join(sorted(line.split(":", 1)[1].split()))
                    break
    except OSError:
        pass
    digest = hashlib.sha256(flags.encode()).hexdigest()[:12]
    return f"cpu:{platform.machine()}:{digest}"


def _param(v: Any) -> str:
    if isinstance(v, np.dtype):
        return f"dtype({v.name})"
    if isinstance(v, (tuple, list)):
        return "(" + ",".join(_param(x) for x in v) + ")"
    return repr(v)


def canonical_text(jaxpr: Jaxpr) -> str:
    """A deterministic listing of a kernel jaxpr: variables named by first appearance, avals,
    sorted params, literals with their dtypes. Equal text means an equal kernel."""
    names: dict[Any, str] = {}

    def name(v: Any) -> str:
        if isinstance(v, Literal):
            val = np.asarray(v.val, v.aval.dtype)
            return f"lit({val.dtype.name}:{val.tobytes().hex()})"
        if v not in names:
            names[v] = f"v{len(names)}"
        return names[v]

    def typed(v: Any) -> str:
        return f"{name(v)}:{v.aval.dtype.name}{list(v.aval.shape)}"

    lines = ["in " + " ".join(typed(v) for v in jaxpr.invars)]
    for e in jaxpr.eqns:
        params = ",".join(f"{k}={_param(v)}" for k, v in sorted(e.params.items()))
        ins = " ".join(name(a) for a in e.invars)
        lines.append(
            f"{' '.join(typed(v) for v in e.outvars)} = {e.primitive.name}[{params}] {ins}"
        )
    lines.append("out " + " ".join(name(v) for v in jaxpr.outvars))
    return "\n".join(lines)


def kernel_key(text: str, target: str) -> str:
    """sha256 of the canonical kernel text, the target and the blu / MLIR / codegen versions."""
    import blu

    h = hashlib.sha256()
    for part in (text, target, f"blu=={blu.__version__}", mlir_version(), CODEGEN_VERSION):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def path(key: str, suffix: str) -> str:
    return os.path.join(cache_dir(), key[:2], key + suffix)


def read_text(key: str, suffix: str) -> str | None:
    try:
        with open(path(key, suffix)) as f:
            return f.read()
    except OSError:
        return None


def write_bytes(key: str, suffix: str, data: bytes) -> str | None:
    """Atomically store an entry; returns its path (None when the directory is not writable)."""
    return write_file(path(key, suffix), data)


def write_file(dest: str, data: bytes) -> str | None:
    """Atomically write ``dest`` (a temporary file renamed into place)."""
    try:
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache may be shared
        os.replace(tmp, dest)
        return dest
    except OSError:
        return None
