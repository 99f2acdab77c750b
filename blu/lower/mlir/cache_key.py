"""The per-user key that signs the CPU's kernel cache entries (``<key>.so``, ``<key>.llvm.mlir``).

Content checks (``entry_check``) cannot prove what native code does: a shared object with no
import at all may still make system calls by itself. So the CPU's entries, which never travel
(``scripts/fill_gpu_cache.py`` exports only PTX and cubins), carry in their header an HMAC-SHA256
of their key, kind and sha256 under a secret only this user's blu holds: an entry copied in from
another user or machine, or planted with a recomputed digest, fails it and is rebuilt, never
loaded (as ccache and Bazel accept only what they produced). The content checks still run: they
are the second line.

The key: 32 random bytes, as hex, in ``config.cache_key_file`` (``BLU_CACHE_KEY_FILE``, default
``~/.config/blu/cache-key``), outside the cache folder so that a cache handed over does not bring
its own key; created 0600 on first use; refused (:class:`CacheKeyError`) when it is a link, not
a regular file, owned by another user or readable or writable by others. Where it cannot be
created (a read-only home), the process uses a key of its own, so its CPU entries are rebuilt by
the next process rather than trusted. GPU entries are not signed: they travel between machines
by design (``docs/`` and DESIGN §3), and are checked by content.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import os
import secrets
import stat
import threading

from blu.core.config import config
from blu.core.errors import BluError

SIGNED = (".so", ".llvm.mlir")
_lock = threading.Lock()
_keys: dict[str, bytes] = {}
_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


class CacheKeyError(BluError):
    """The cache's signing key file is not this user's private file."""


def mac(entry_key: str, suffix: str, sha256: str) -> str:
    """The HMAC-SHA256 an entry of this key, kind and payload digest carries."""
    msg = f"blu-cache-entry\0{entry_key}\0{suffix}\0{sha256}".encode()
    return hmac.new(user_key(), msg, hashlib.sha256).hexdigest()


def user_key() -> bytes:
    p = config.cache_key_file
    with _lock:
        k = _keys.get(p)
        if k is None:
            k = _keys[p] = _load_or_create(p)
        return k


def _load_or_create(p: str) -> bytes:
    for _ in range(3):
        try:
            return _load(p)
        except FileNotFoundError:
            pass
        try:
            _create(p)
        except OSError as e:
            if e.errno == errno.EEXIST:
                continue  # another process made it first: read theirs
            return secrets.token_bytes(32)  # cannot keep one: this process's own
    return secrets.token_bytes(32)


def _load(p: str) -> bytes:
    try:
        fd = os.open(p, _FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise CacheKeyError(
                f"the kernel cache key {p!r} is a symbolic link: blu signs its CPU kernels with "
                f"a key only you hold. Remove the link (`rm {p!r}`): a new key is made"
            ) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > 4096:
            raise CacheKeyError(f"the kernel cache key {p!r} is not a small regular file")
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            raise CacheKeyError(
                f"the kernel cache key {p!r} is owned by uid {st.st_uid}, not by you: "
                f"use your own (BLU_CACHE_KEY_FILE=...) or remove it"
            )
        if st.st_mode & 0o077:
            raise CacheKeyError(
                f"the kernel cache key {p!r} is readable or writable by others (mode "
                f"{stat.S_IMODE(st.st_mode):o}): anyone who reads it can sign kernels blu would "
                f"run. Fix: `rm {p!r}` (a new key is made; your CPU kernels are recompiled once)"
            )
        os.set_blocking(fd, True)
        text = os.read(fd, 4096).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) < 16:
        raise CacheKeyError(f"the kernel cache key {p!r} is malformed: remove it (`rm {p!r}`)")
    return key


def _create(p: str) -> None:
    """Write a new key atomically: a private temporary file, linked into place only if ``p``
    does not exist yet (two processes never end up with different keys)."""
    d = os.path.dirname(p) or "."
    os.makedirs(d, mode=0o700, exist_ok=True)
    tmp = os.path.join(d, f".cache-key-{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, p)  # EEXIST if another process was first
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
