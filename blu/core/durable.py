"""Durable, atomic file writes: a file appears whole under its name or not at all.

The protocol (SQLite's and the GPT-2 example's): write a temporary file in the destination's
folder, fsync it, ``os.replace`` it onto the name, fsync the folder (so the rename itself
survives a power cut). On any failure the temporary file is removed and the error re-raised;
what the name pointed to before is untouched.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from collections.abc import Iterable
from pathlib import Path

TMP_SUFFIX = ".blu-tmp"


def temporary_name(dest: str | os.PathLike) -> Path:
    """The temporary file ``write_atomic`` writes ``dest`` through (unique per call)."""
    dest = Path(dest)
    return dest.with_name(f".{dest.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}{TMP_SUFFIX}")


def write_atomic(dest: str | os.PathLike, chunks: Iterable[bytes | memoryview]) -> tuple[str, int]:
    """Write the concatenation of ``chunks`` to ``dest`` atomically and durably.

    Returns:
        (the sha256 of the bytes written, as hex; their number).

    Raises:
        Whatever writing or a chunk's producer raises (``OSError`` for a full disk); the
        temporary file is then gone and ``dest`` is as it was.
    """
    dest = Path(dest)
    tmp = temporary_name(dest)
    digest, size = hashlib.sha256(), 0
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            for chunk in chunks:
                view = memoryview(chunk).cast("B")
                digest.update(view)
                size += len(view)
                while view:
                    view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(dest.parent)
    return digest.hexdigest(), size


def fsync_dir(d: str | os.PathLike) -> None:
    """Flush a folder's entries (a rename in it) to disk; a no-op where folders cannot be opened."""
    with contextlib.suppress(OSError):
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
