"""The launcher's relay of its ranks' output: every line prefixed ``[rank N] `` and written
whole, so two ranks never share a line.

Each rank's stdout and stderr reach the launcher separately (pipes of the processes it starts,
or the per-rank files that ``mpiexec -outfile-pattern`` writes); a ``Relay`` keeps a partial
line of each until its end arrives (``\\n``, or ``\\r`` for progress bars) and writes each whole
line with one call under a lock, to the launcher's stdout or stderr. The ranks run with
``PYTHONUNBUFFERED=1`` (unless set), so their lines arrive as they are printed.
"""

from __future__ import annotations

import os
import re
import threading
from typing import TextIO

_LINE = re.compile(rb"[^\r\n]*[\r\n]")


class Relay:
    """Prefix and forward the bytes of one rank's stream, line by line.

    Args:
        rank: the rank (the prefix is ``[rank N] ``).
        dest: where the lines go (``sys.stdout`` or ``sys.stderr``: its binary buffer when it
            has one).
        lock: shared by every relay of the launcher, so that each line is written whole.
    """

    def __init__(self, rank: int, dest: TextIO, lock: threading.Lock):
        self.prefix = f"[rank {rank}] ".encode()
        self.dest = dest
        self.lock = lock
        self.partial = b""

    def feed(self, data: bytes) -> None:
        """Forward every line that ``data`` completes; keep the rest for later."""
        buf = self.partial + data
        end = max(buf.rfind(b"\n"), buf.rfind(b"\r")) + 1
        whole, self.partial = buf[:end], buf[end:]
        if whole:
            self._write(b"".join(self.prefix + line for line in _LINE.findall(whole)))

    def close(self) -> None:
        """Forward a last line that has no end (with one added)."""
        if self.partial:
            self._write(self.prefix + self.partial + b"\n")
            self.partial = b""

    def _write(self, data: bytes) -> None:
        with self.lock:
            try:
                self.dest.flush()  # the launcher's own messages first
                raw = getattr(self.dest, "buffer", None)
                if raw is None:
                    self.dest.write(data.decode(errors="replace"))
                    self.dest.flush()
                else:
                    raw.write(data)
                    raw.flush()
            except (BrokenPipeError, ValueError):  # the reader went away: drop the output
                pass


def pump(fd: int, relay: Relay) -> threading.Thread:
    """A daemon thread that reads the pipe ``fd`` until its end and feeds ``relay``."""

    def run():
        try:
            while True:
                data = os.read(fd, 65536)
                if not data:
                    break
                relay.feed(data)
        finally:
            relay.close()
            os.close(fd)

    t = threading.Thread(target=run, daemon=True, name=f"blu-launch-{relay.prefix!r}")
    t.start()
    return t


class FileTail:
    """The new bytes of a file that another process appends to (``mpiexec``'s per-rank
    output files), fed to ``relay`` at each ``poll``."""

    def __init__(self, path: str, relay: Relay):
        self.path = path
        self.relay = relay
        self.offset = 0

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        if data:
            self.relay.feed(data)
