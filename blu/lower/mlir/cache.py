"""The persistent kernel cache: compiled kernels in ``blu.config.cache_dir`` (``BLU_CACHE_DIR``).

A kernel's key is the sha256 of blu's canonical text of the kernel (its fused jaxpr with avals,
params and literal dtypes), the target (for the CPU: the host's architecture and instruction-set
extensions, since the object code uses them), blu's version, the MLIR bindings' version and
the code generator's version. Computing it never imports ``mlir``, so a machine without MLIR
can still find every kernel a machine with MLIR compiled ahead of time.

Entries (for the CPU target) are ``<key>.so`` (a shared object, when a linker is available)
and ``<key>.llvm.mlir`` (the kernel after the pass pipeline, in the LLVM dialect: a second
process skips the pipeline and only runs LLVM's code generation); for CUDA ``<key>.ptx`` and
``<key>.cubin``.

Integrity (as ccache and Bazel's content-addressed caches promise): each entry file starts with
one header line ``blu-cache-entry v1 {"blu": ..., "key": ..., "kind": ..., "sha256": ...,
"size": ...}`` recording the key, the entry kind (suffix), blu's version and the sha256 of the
bytes that follow. :func:`read_entry` checks the header byte for byte against the one these
bytes, this key and this version would get, before anything is loaded: a flipped bit, a
truncated, swapped or foreign file is discarded (with one warning) and rebuilt. Writes are
atomic (a temporary file in the same folder, fsync, rename; the temporary file is removed on
every failure), so concurrent processes can share one directory.

Provenance: the CPU's entries (``.so``, ``.llvm.mlir``) also carry an HMAC under a per-user key
kept outside the folder (``cache_key``), so only code this user's blu compiled is loaded; every
entry's contents are checked too (``entry_check``: imports, load-time code, foreign calls, PTX
externs, cubin symbols). Entries are opened as regular files of at most ``MAX_ENTRY_BYTES``,
never through a link and never blocking (:func:`read_regular_stat`); eviction lists only files
blu wrote (its names, in its shard folders, starting with its header) and its own temporary files.

Trust (as ssh does for its keys): entries are executed, so the cache folder is created 0700
and loading refuses a folder or entry owned by another user or writable by group or others
(:class:`CachePermissionError` says how to fix it). The folder is trimmed to
``config.cache_max_bytes`` (``BLU_CACHE_MAX_BYTES``) by evicting the least recently used
entries (a hit bumps the entry's modification time).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import platform
import re
import stat
import tempfile
import threading
import time
import warnings
from typing import Any

import numpy as np

from blu.core.config import config
from blu.core.errors import BluError
from blu.core.jaxpr import Jaxpr, Literal
from blu.core.version import __version__
from blu.lower.mlir import cache_key

# bump when the generated code changes meaning, so stale entries are not reused (a key holds a
# kernel's jaxpr, not its layout or code). 10: a value gathered from many offsets and read by
# several equations gets a buffer (``fusion.KernelLayout._shared_gather``); 11: a widening cast
# only read there holds its operand instead (``KernelLayout._narrow_source``); 12: a reduction
# nest joins a later one of its shape and axes (``KernelLayout._defer_reductions``); 13: a
# reshape that only splits or merges dimensions maps each group's digits (``rules._reshape``)
CODEGEN_VERSION = "13"


def cache_dir() -> str:
    return config.cache_dir


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
    """A small text file of the cache folder (``mlir-version``), read as an entry is: a regular
    file only, never through a link, never blocking, at most 4 KiB."""
    try:
        data = read_regular(p, 4096)
        return data.decode("utf-8").strip()
    except (OSError, EntryRefused, UnicodeDecodeError):
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
    h = hashlib.sha256()
    for part in (text, target, f"blu=={__version__}", mlir_version(), CODEGEN_VERSION):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


# ---- entries: verified reads, atomic writes --------------------------------------------------

MAGIC = b"blu-cache-entry v1 "
SUFFIXES = (".so", ".llvm.mlir", ".ptx", ".cubin")
MAX_ENTRY_BYTES = 256 << 20  # bigger than any kernel blu writes: refused before it is read
TMP_PREFIX = ".tmp-blu-"  # blu's temporary files (``tempfile.mkstemp``: 8 more characters)
_ENTRY_NAME = re.compile(r"([0-9a-f]{64})(\.so|\.llvm\.mlir|\.ptx|\.cubin)")
_TMP_NAME = re.compile(re.escape(TMP_PREFIX) + r"[a-z0-9_]{8}")
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a folder"))  # fmt: skip


class CachePermissionError(BluError):
    """The kernel cache folder or an entry is owned by another user or writable by others."""


class CacheEntryWarning(UserWarning):
    """A kernel cache entry failed verification and was discarded (it is rebuilt)."""


class EntryRefused(Exception):
    """A cache file that is not a regular file of bounded size (the message says what it is)."""


def read_regular(p: str, max_bytes: int = MAX_ENTRY_BYTES) -> bytes:
    """:func:`read_regular_stat`'s bytes."""
    return read_regular_stat(p, max_bytes)[0]


def read_regular_stat(
    p: str, max_bytes: int = MAX_ENTRY_BYTES, head: int | None = None
) -> tuple[bytes, os.stat_result]:
    """The bytes (the first ``head`` of them, if given) and the ``fstat`` of ``p``, opened as a
    regular file only: never through a symbolic link (the last component), never blocking (a FIFO
    or a device is refused after ``fstat``, unread), at most ``max_bytes`` (checked before
    reading, so a sparse or endless file is never read whole).

    Raises:
        FileNotFoundError: there is no such file.
        EntryRefused: a link, not a regular file, or too big.
        OSError: unreadable.
    """
    try:
        fd = os.open(p, _OPEN_FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise EntryRefused("a symbolic link (blu never writes one)") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            what = next((w for test, w in _KINDS if test(st.st_mode)), "not a regular file")
            raise EntryRefused(f"{what}, not a regular file")
        if st.st_size > max_bytes:
            raise EntryRefused(f"{st.st_size} bytes, over the cap of {max_bytes} bytes")
        os.set_blocking(fd, True)
        chunks, n = [], 0
        limit = max_bytes if head is None else min(head, max_bytes)
        while n <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - n))
            if not chunk:
                break
            chunks.append(chunk)
            n += len(chunk)
        if n > max_bytes:
            raise EntryRefused(f"more than {max_bytes} bytes (it grew while read)")
        return b"".join(chunks)[:limit], st
    finally:
        os.close(fd)


def path(key: str, suffix: str) -> str:
    return os.path.join(cache_dir(), key[:2], key + suffix)


def _blu_version() -> str:
    return __version__


def header(key: str, suffix: str, payload: bytes) -> bytes:
    """The header line an entry with these bytes, key and kind gets (canonical JSON)."""
    rec = {
        "blu": _blu_version(),
        "key": key,
        "kind": suffix,
        "sha256": hashlib.sha256(payload).hexdigest(),
        "size": len(payload),
    }
    if suffix in cache_key.SIGNED:  # the CPU's entries: signed with this user's key
        rec["mac"] = cache_key.mac(key, suffix, rec["sha256"])
    return MAGIC + json.dumps(rec, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def frame(key: str, suffix: str, payload: bytes) -> bytes:
    """An entry file's bytes: the header line, then the payload."""
    return header(key, suffix, payload) + payload


def verify(key: str, suffix: str, data: bytes) -> tuple[bytes | None, str | None]:
    """``(payload, None)`` if ``data`` is a sound entry for this key and kind, else
    ``(None, why)``. Pure: nothing is loaded, decoded or executed."""
    nl = data.find(b"\n", 0, 4096)
    if not data.startswith(MAGIC) or nl < 0:
        return None, "no blu cache header (a foreign, truncated or pre-verification file)"
    payload = data[nl + 1 :]
    try:
        rec = json.loads(data[len(MAGIC) : nl])
    except (ValueError, UnicodeDecodeError):
        return None, "undecodable header"
    if not isinstance(rec, dict):
        return None, "undecodable header"
    if rec.get("key") != key or rec.get("kind") != suffix:
        return None, f"it holds another entry ({rec.get('key')!s:.16}{rec.get('kind')})"
    if rec.get("size") != len(payload):
        return None, f"size {len(payload)} instead of the recorded {rec.get('size')} (truncated?)"
    expected = header(key, suffix, payload)
    if data[: nl + 1] != expected:
        signed = suffix in cache_key.SIGNED
        if (
            signed
            and rec.get("sha256") == hashlib.sha256(payload).hexdigest()
            and rec.get("mac") != json.loads(expected[len(MAGIC) :]).get("mac")
        ):
            return None, (
                "not signed with this user's cache key (an entry blu did not compile here: "
                "copied in or planted; blu loads only CPU code it compiled itself)"
            )
        return None, "sha256 mismatch (the bytes changed after they were written)"
    return payload, None


def check_private(p: str, is_dir: bool) -> None:
    """Refuse (as ssh does) a cache folder or entry that someone else could have written.

    Raises:
        CachePermissionError: owned by another user, or writable by group or others.
    """
    st = os.stat(p)
    what = "kernel cache folder" if is_dir else "kernel cache entry"
    fix = f"chmod {'700' if is_dir else '600'} {p!r}"
    if is_dir and os.path.abspath(p) != os.path.abspath(cache_dir()) and os.path.islink(p):
        raise CachePermissionError(
            f"the {what} {p!r} is a symbolic link (to {os.path.realpath(p)!r}): blu never makes "
            "one, and reads and writes through it would touch files outside the cache. Remove "
            f"it (`rm {p!r}`)"
        )
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise CachePermissionError(
            f"the {what} {p!r} is owned by uid {st.st_uid}, not by you (uid {os.getuid()}): "
            "blu executes what the cache holds, so it only uses a cache that only you can "
            f"write. Use your own folder (BLU_CACHE_DIR=...), or `chown -R $USER {p!r}` and "
            f"`{fix}`"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = "group" if st.st_mode & stat.S_IWGRP else "others"
        raise CachePermissionError(
            f"the {what} {p!r} is writable by {who} "
            f"(mode {stat.S_IMODE(st.st_mode):o}): blu executes what the cache holds, so it "
            f"refuses entries someone else could have planted. Fix: `{fix}`"
            + ("" if is_dir else f" (and `chmod 700 {os.path.dirname(p)!r}`)")
        )


def read_entry(key: str, suffix: str) -> tuple[bytes | None, str | None]:
    """The verified payload of an entry: ``(payload, None)``; ``(None, None)`` when there is no
    entry; ``(None, why)`` when it exists but failed verification (left in place: the caller
    :func:`discard`s it or reports it).

    Raises:
        CachePermissionError: the folder or the entry could have been written by someone else.
    """
    p = path(key, suffix)
    shard = os.path.dirname(p)
    if not os.path.lexists(shard):
        return None, None
    for d in (cache_dir(), shard):
        check_private(d, is_dir=True)
    try:
        data, st = read_regular_stat(p)
    except FileNotFoundError:
        return None, None
    except EntryRefused as e:
        return None, str(e)
    except OSError as e:
        return None, f"unreadable ({e.strerror})"
    if hasattr(os, "getuid") and (
        st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    ):
        check_private(p, is_dir=False)  # raises, naming the entry
    payload, why = verify(key, suffix, data)
    if payload is not None:
        with contextlib.suppress(OSError):
            os.utime(p)  # least recently used = oldest modification time
    return payload, why


def discard(key: str, suffix: str, why: str, label: str = "") -> None:
    """Remove a bad entry and say so once (the caller rebuilds it)."""
    p = path(key, suffix)
    warnings.warn(
        f"blu: discarded the kernel cache entry {p} ({label or 'a kernel'}): {why}; rebuilding it",
        CacheEntryWarning,
        stacklevel=3,
    )
    if not os.path.islink(os.path.dirname(p)):  # unlink removes a link, never its target
        with contextlib.suppress(OSError):
            os.unlink(p)


def read_text(key: str, suffix: str) -> str | None:
    """A verified entry as UTF-8 text (None when missing, bad or undecodable)."""
    payload, _ = read_entry(key, suffix)
    try:
        return None if payload is None else payload.decode("utf-8")
    except UnicodeDecodeError:
        return None


def write_bytes(key: str, suffix: str, data: bytes) -> str | None:
    """Atomically store an entry (header + ``data``); returns its path (None when the folder
    is not writable or the disk is full). Then trims the cache to ``config.cache_max_bytes``."""
    framed = frame(key, suffix, data)
    dest = write_file(path(key, suffix), framed)
    if dest is not None:
        _note_written(len(framed))
    return dest


def _makedirs_private(d: str) -> None:
    root = cache_dir()
    if not os.path.isdir(root):
        os.makedirs(root, mode=0o700, exist_ok=True)
    if d != root:
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, 0o700)
        if os.path.islink(d) or not os.path.isdir(d):  # never write through a planted link
            raise OSError(errno.ENOTDIR, "not a folder of the cache", d)


def write_file(dest: str, data: bytes, mode: int = 0o644) -> str | None:
    """Atomically write ``dest``: a temporary file in the same folder, written, fsynced and
    renamed into place; on any failure (a full disk included) the temporary file is removed and
    None returned."""
    tmp = None
    try:
        d = os.path.dirname(dest)
        _makedirs_private(d)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=TMP_PREFIX)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, dest)
        tmp = None
        _fsync_dir(d)
        return dest
    except OSError:
        return None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _fsync_dir(d: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# ---- the size cap: least-recently-used eviction ----------------------------------------------

_size_lock = threading.Lock()
_size_estimate: dict[str, int] = {}  # cache folder -> bytes (scanned once, then added to)
STALE_TMP_S = 3600.0  # temporary files older than this are left over from a crashed writer


def _entries(root: str) -> list[tuple[float, int, str]]:
    """``(mtime, size, path)`` of every entry blu wrote: a regular file in a shard folder (the
    key's first two hex digits), named ``<key><suffix>``, that starts with blu's header. Removes
    blu's own stale temporary files on the way; nothing else is ever listed or touched."""
    out = []
    now = time.time()
    try:
        shards = [
            e for e in os.scandir(root)
            if len(e.name) == 2 and all(c in "0123456789abcdef" for c in e.name)
            and e.is_dir(follow_symlinks=False)
        ]  # fmt: skip
    except OSError:
        return out
    for shard in shards:
        try:
            files = list(os.scandir(shard.path))
        except OSError:
            continue
        for f in files:
            try:
                st = f.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
                continue
            if _TMP_NAME.fullmatch(f.name):
                if now - st.st_mtime > STALE_TMP_S:
                    with contextlib.suppress(OSError):
                        os.unlink(f.path)
                continue
            m = _ENTRY_NAME.fullmatch(f.name)
            if m is None or m.group(1)[:2] != shard.name or not _has_magic(f.path):
                continue
            out.append((st.st_mtime, st.st_size, f.path))
    return out


def _has_magic(p: str) -> bool:
    """Whether the file starts with blu's entry header (read as an entry: no link, no FIFO)."""
    try:
        return read_regular_stat(p, MAX_ENTRY_BYTES, len(MAGIC))[0] == MAGIC
    except (OSError, EntryRefused):
        return False


def cache_bytes() -> int:
    """Bytes the entries of the cache folder take."""
    return sum(size for _, size, _ in _entries(cache_dir()))


def evict(max_bytes: int | None = None) -> int:
    """Remove least recently used entries until the folder holds at most ``max_bytes``
    (default ``config.cache_max_bytes``); returns the bytes that remain."""
    cap = int(config.cache_max_bytes if max_bytes is None else max_bytes)
    root = cache_dir()
    entries = sorted(_entries(root))
    total = sum(size for _, size, _ in entries)
    for _, size, p in entries:
        if total <= cap:
            break
        try:
            os.unlink(p)
            total -= size
        except FileNotFoundError:
            total -= size
        except OSError as e:
            if e.errno not in (errno.EACCES, errno.EPERM):
                raise
    with _size_lock:
        _size_estimate[root] = total
    return total


def _note_written(n: int) -> None:
    root = cache_dir()
    with _size_lock:
        est = _size_estimate.get(root)
        if est is not None:
            _size_estimate[root] = est + n
    if est is None or est + n > int(config.cache_max_bytes):
        evict()
