"""A small key-value store over TCP (as torch.distributed's TCPStore) for bootstrapping a job:
the NCCL unique id, and the collectives of CPU processes.

The server is a thread (in the launcher, or in rank 0 when processes are started by SLURM or
mpirun). Clients ``set`` bytes, ``get`` (blocking until the key exists), ``add`` to a counter
and ``delete``. Frames: op (1 byte), key length (4 bytes), key, value length (8 bytes), value.
"""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
import time

from blu.core.errors import BluError

_SET, _GET, _ADD, _DEL, _CHECK = b"S", b"G", b"A", b"D", b"C"


class StoreError(BluError, RuntimeError):
    """The store could not be reached, or a key did not appear in time."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("store connection closed")
        buf += chunk
    return bytes(buf)


def _send_frame(sock: socket.socket, op: bytes, key: str, value: bytes = b"") -> None:
    k = key.encode()
    sock.sendall(op + struct.pack("<I", len(k)) + k + struct.pack("<Q", len(value)) + value)


def _recv_frame(sock: socket.socket) -> tuple[bytes, str, bytes]:
    op = _recv_exact(sock, 1)
    (kn,) = struct.unpack("<I", _recv_exact(sock, 4))
    key = _recv_exact(sock, kn).decode()
    (vn,) = struct.unpack("<Q", _recv_exact(sock, 8))
    return op, key, _recv_exact(sock, vn)


class _State:
    def __init__(self):
        self.data: dict[str, bytes] = {}
        self.cond = threading.Condition()


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        st: _State = self.server.state  # type: ignore[attr-defined]
        sock = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                op, key, value = _recv_frame(sock)
                with st.cond:
                    if op == _SET:
                        st.data[key] = value
                        st.cond.notify_all()
                        reply = b""
                    elif op == _GET:
                        timeout = struct.unpack("<d", value)[0]
                        if not st.cond.wait_for(lambda: key in st.data, timeout):
                            _send_frame(sock, b"T", key)
                            continue
                        reply = st.data[key]
                    elif op == _ADD:
                        n = int.from_bytes(st.data.get(key, b"\0" * 8), "little", signed=True)
                        n += struct.unpack("<q", value)[0]
                        st.data[key] = n.to_bytes(8, "little", signed=True)
                        st.cond.notify_all()
                        reply = st.data[key]
                    elif op == _DEL:
                        st.data.pop(key, None)
                        reply = b""
                    else:  # _CHECK
                        reply = b"1" if key in st.data else b"0"
                _send_frame(sock, b"O", key, reply)
        except (ConnectionError, OSError):
            return


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class StoreServer:
    """Serve a store on ``host:port`` (port 0 picks a free one) from a daemon thread."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self._server = _Server((host, port), _Handler)
        self._server.state = _State()  # type: ignore[attr-defined]
        self.host, self.port = self._server.server_address[:2]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class TCPStore:
    """A client of a ``StoreServer``.

    Args:
        host, port: the server.
        timeout: seconds to wait for the server at connect and for a key at ``get``.
    """

    def __init__(self, host: str, port: int, timeout: float = 300.0):
        self.timeout = timeout
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._sock = socket.create_connection((host, port), timeout=10)
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    raise StoreError(f"cannot reach the store at {host}:{port}: {e}") from e
                time.sleep(0.05)
        self._sock.settimeout(None)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._lock = threading.Lock()

    def _call(self, op: bytes, key: str, value: bytes = b"") -> bytes:
        with self._lock:
            _send_frame(self._sock, op, key, value)
            status, _, reply = _recv_frame(self._sock)
        if status == b"T":
            raise StoreError(f"timed out after {self.timeout}s waiting for store key {key!r}")
        return reply

    def set(self, key: str, value: bytes) -> None:
        self._call(_SET, key, bytes(value))

    def get(self, key: str) -> bytes:
        """The value of ``key``, waiting until some process sets it."""
        return self._call(_GET, key, struct.pack("<d", self.timeout))

    def add(self, key: str, delta: int) -> int:
        return int.from_bytes(
            self._call(_ADD, key, struct.pack("<q", delta)), "little", signed=True
        )

    def delete(self, key: str) -> None:
        self._call(_DEL, key)

    def check(self, key: str) -> bool:
        return self._call(_CHECK, key) == b"1"

    def close(self) -> None:
        self._sock.close()


class LocalStore:
    """The same interface in one process (a world of one needs no server)."""

    def __init__(self):
        self._data: dict[str, bytes] = {}

    def set(self, key: str, value: bytes) -> None:
        self._data[key] = bytes(value)

    def get(self, key: str) -> bytes:
        if key not in self._data:
            raise StoreError(f"store key {key!r} was never set (a world of one process)")
        return self._data[key]

    def add(self, key: str, delta: int) -> int:
        n = int.from_bytes(self._data.get(key, b"\0" * 8), "little", signed=True) + delta
        self._data[key] = n.to_bytes(8, "little", signed=True)
        return n

    def delete(self, key: str) -> None:
        self._data.pop(key, None)

    def check(self, key: str) -> bool:
        return key in self._data

    def close(self) -> None:
        pass
