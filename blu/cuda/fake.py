"""A simulated device for the CPU tests of the runtime: backing memory, streams and events.

``FakeBacking`` implements the caching allocator's backing (``blu.cuda.allocator.Backing``):

- memory: a byte budget (``capacity``); addresses come from an unbounded fake address space in
  which freed ranges are reused first-fit (so reuse bugs show up as overlaps), or, with
  ``host_memory=True``, from real host buffers (so ``DeviceArray`` copies and DLPack can be
  tested on the CPU).
- streams: each stream has a count of submitted and of completed work items; ``submit(stream)``
  queues one, ``complete(stream)`` finishes a stream's work (all streams with no argument). An
  event recorded on a stream is done once the work queued before it has completed, as on a GPU.

It also checks its callers: freeing an address it did not hand out, or twice, raises.
"""

from __future__ import annotations

import ctypes
import dataclasses
from typing import Any

import numpy as np

from blu.cuda.allocator import ROUND, CachingAllocator, GiB, format_bytes
from blu.cuda.device import Device
from blu.cuda.dlpack import kDLCPU
from blu.cuda.errors import BackingOutOfMemory


@dataclasses.dataclass(frozen=True)
class FakeEvent:
    stream: int
    ticket: int  # done once the stream's completed count reaches this


class FakeBacking:
    """A simulated device memory with streams (see the module docstring).

    Args:
        capacity: bytes the device holds; ``malloc`` raises ``BackingOutOfMemory`` beyond it.
        host_memory: back each allocation with a real host buffer (its address is the pointer).
        base: the first fake address (unused with ``host_memory``).
    """

    def __init__(self, capacity: int = 64 * GiB, host_memory: bool = False, base: int = 1 << 32):
        self.capacity = capacity
        self.host_memory = host_memory
        self.used = 0
        self.live: dict[int, int] = {}  # ptr -> size
        self._holes: list[tuple[int, int]] = []  # freed address ranges (ptr, size), by address
        self._top = base
        self._buffers: dict[int, np.ndarray] = {}
        self.submitted: dict[int, int] = {}
        self.completed: dict[int, int] = {}
        self.events_live = 0
        self.num_mallocs = 0
        self.num_frees = 0
        self.free_log: list[tuple[int, int]] = []  # (ptr, size) of every free, in order

    # ---- memory --------------------------------------------------------------------------------

    def malloc(self, nbytes: int) -> int:
        if nbytes <= 0 or nbytes % ROUND:
            raise AssertionError(f"FakeBacking: odd segment size {nbytes}")
        if self.used + nbytes > self.capacity:
            raise BackingOutOfMemory(
                f"fake device: {format_bytes(nbytes)} asked, "
                f"{format_bytes(self.capacity - self.used)} free"
            )
        if self.host_memory:
            buf = np.empty(nbytes + ROUND, np.uint8)
            ptr = _round_up(buf.ctypes.data, ROUND)
            self._buffers[ptr] = buf
        else:
            ptr = self._place(nbytes)
        self.used += nbytes
        self.live[ptr] = nbytes
        self.num_mallocs += 1
        return ptr

    def free(self, ptr: int) -> None:
        size = self.live.pop(ptr, None)
        if size is None:
            raise AssertionError(f"FakeBacking: free of {ptr:#x}, which is not allocated")
        self.used -= size
        self.num_frees += 1
        self.free_log.append((ptr, size))
        if self.host_memory:
            del self._buffers[ptr]
        else:
            self._holes.append((ptr, size))
            self._holes.sort()
            self._merge_holes()
        # cuMemFree synchronizes the device: all queued work is done
        self.complete()

    def _place(self, nbytes: int) -> int:
        for i, (ptr, size) in enumerate(self._holes):
            if size >= nbytes:
                if size == nbytes:
                    del self._holes[i]
                else:
                    self._holes[i] = (ptr + nbytes, size - nbytes)
                return ptr
        ptr = self._top
        self._top += nbytes
        return ptr

    def _merge_holes(self) -> None:
        merged: list[tuple[int, int]] = []
        for ptr, size in self._holes:
            if merged and merged[-1][0] + merged[-1][1] == ptr:
                merged[-1] = (merged[-1][0], merged[-1][1] + size)
            else:
                merged.append((ptr, size))
        if merged and merged[-1][0] + merged[-1][1] == self._top:
            self._top = merged.pop()[0]
        self._holes = merged

    def describe(self) -> str:
        return (
            f"fake device, {format_bytes(self.capacity - self.used)} free of "
            f"{format_bytes(self.capacity)}"
        )

    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes, as cuMemGetInfo."""
        return self.capacity - self.used, self.capacity

    # ---- streams and events --------------------------------------------------------------------

    def submit(self, stream: int, n: int = 1) -> None:
        """Queue ``n`` work items on ``stream`` (they complete on ``complete``)."""
        self.submitted[stream] = self.submitted.get(stream, 0) + n

    def complete(self, stream: int | None = None) -> None:
        """Finish the work queued on ``stream`` (on every stream if None)."""
        for s in [stream] if stream is not None else list(self.submitted):
            self.completed[s] = self.submitted.get(s, 0)

    def idle(self, stream: int) -> bool:
        return self.completed.get(stream, 0) >= self.submitted.get(stream, 0)

    def record_event(self, stream: int) -> FakeEvent:
        self.events_live += 1
        return FakeEvent(stream, self.submitted.get(stream, 0))

    def event_done(self, event: FakeEvent) -> bool:
        return self.completed.get(event.stream, 0) >= event.ticket

    def event_synchronize(self, event: FakeEvent) -> None:
        done = self.completed.get(event.stream, 0)
        self.completed[event.stream] = max(done, event.ticket)

    def release_event(self, event: FakeEvent) -> None:
        self.events_live -= 1
        if self.events_live < 0:
            raise AssertionError("FakeBacking: an event was released twice")


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


class FakeDevice(Device):
    """A simulated device in host memory (for the CPU tests of ``DeviceArray`` and DLPack).

    Its memory is real host memory from a ``FakeBacking(host_memory=True)``, so copies are
    ``memmove``s and its DLPack device is the CPU (numpy can consume its arrays). Work is
    "queued" on stream ``stream_id`` of the backing and completes on ``synchronize``.
    """

    platform = "fake"

    def __init__(self, id: int = 0, capacity: int = 1 * GiB):
        self.backing = FakeBacking(capacity, host_memory=True)
        super().__init__(id, CachingAllocator(self.backing, name=f"fake:{id}"), stream_id=7)
        self.num_syncs = 0

    @property
    def dlpack_device(self) -> tuple[int, int]:
        return (kDLCPU, 0)

    def copy_h2d(self, dst: int, src: np.ndarray) -> None:
        self.backing.submit(self.stream_id)
        ctypes.memmove(dst, src.ctypes.data, src.nbytes)

    def copy_d2h(self, dst: np.ndarray, src: int) -> None:
        self.synchronize()
        ctypes.memmove(dst.ctypes.data, src, dst.nbytes)

    def copy_d2d(self, dst: int, src: int, nbytes: int) -> None:
        self.backing.submit(self.stream_id)
        ctypes.memmove(dst, src, nbytes)

    def memset(self, dst: int, value: int, nbytes: int) -> None:
        self.backing.submit(self.stream_id)
        ctypes.memset(dst, value, nbytes)

    def synchronize(self) -> None:
        self.num_syncs += 1
        self.backing.complete(self.stream_id)

    def export_stream(self, stream: int | None) -> int | None:
        return None  # CPU consumers pass no stream

    def import_stream_arg(self) -> int | None:
        return None

    def matmul_handle(self) -> Any:
        """A ``CublasLt`` over ``FakeCublasLt`` (computes in numpy on the fake device's memory)."""
        if getattr(self, "_matmul", None) is None:
            from blu.cuda.cublaslt import CublasLt

            self._matmul = CublasLt((0, 0), lib=FakeCublasLt())
        return self._matmul


# ---- a cuBLASLt stand-in ------------------------------------------------------------------------


def _host_view(ptr: int, count: int, dtype: np.dtype) -> np.ndarray:
    nbytes = count * dtype.itemsize
    return np.frombuffer((ctypes.c_uint8 * nbytes).from_address(ptr), dtype=dtype, count=count)


class FakeCublasLt:
    """Emulates the subset of ``nvmath.bindings.cublasLt`` that ``blu.cuda.cublaslt`` calls, on
    host memory, in float64: it records descriptor, layout and preference attributes as cuBLASLt
    would receive them, checks that the layouts describe a valid product (as cuBLASLt does,
    ``CUBLAS_STATUS_INVALID_VALUE`` otherwise), and computes the epilogues. With it the whole
    path from ``dot_general`` to ``cublasLtMatmul`` runs on the CPU.

    Attributes:
        calls: ``[(function name, args...)]`` of every call, for tests.
        candidates: how many algorithms the heuristic offers (numbered 0, 1, ...; all compute
            the same product).
        algos: the algorithm number of every ``matmul`` call, in order.
        refused: algorithm numbers whose ``matmul`` raises (as cuBLASLt may at run time).
    """

    matmul_heuristic_result_dtype = np.dtype(
        [
            ("algo", "<u8", (8,)),
            ("workspace_size", "<u8"),
            ("state", "<i4"),
            ("waves_count", "<f4"),
            ("reserved", "<i4", (4,)),
        ]
    )

    def __init__(self) -> None:
        from blu.cuda import cublaslt as lt

        self._lt = lt
        self._next = 1000
        self.objects: dict[int, dict[str, Any]] = {}
        self.calls: list[tuple] = []
        self.candidates = 1
        self.algos: list[int] = []
        self.refused: set[int] = set()

    def _new(self, kind: str, **attrs: Any) -> int:
        self._next += 8
        self.objects[self._next] = {"kind": kind, **attrs}
        return self._next

    def _get(self, h: int, kind: str) -> dict[str, Any]:
        obj = self.objects.get(h)
        if obj is None or obj["kind"] != kind:
            raise RuntimeError(f"CUBLAS_STATUS_INVALID_VALUE: {h} is not a live {kind}")
        return obj

    def _read_attr(self, table: dict, attr: int, buf: int, size: int) -> tuple[str, int]:
        for name, (code, dt) in table.items():
            if code == attr:
                if np.dtype(dt).itemsize != size:
                    raise RuntimeError(f"CUBLAS_STATUS_INVALID_VALUE: {name} size {size}")
                return name, int(_host_view(buf, 1, np.dtype(dt))[0])
        raise RuntimeError(f"FakeCublasLt: attribute {attr} not emulated")

    # handle, descriptors, layouts, preferences
    def create(self) -> int:
        self.calls.append(("create",))
        return self._new("handle")

    def destroy(self, h: int) -> None:
        self._get(h, "handle")
        del self.objects[h]

    def matmul_desc_create(self, compute: int, scale: int) -> int:
        self.calls.append(("matmul_desc_create", compute, scale))
        return self._new(
            "desc", COMPUTE_TYPE=compute, SCALE_TYPE=scale, TRANSA=0, TRANSB=0, EPILOGUE=1
        )

    def matmul_desc_set_attribute(self, h: int, attr: int, buf: int, size: int) -> None:
        name, value = self._read_attr(self._lt.DESC, attr, buf, size)
        self.calls.append(("matmul_desc_set_attribute", h, name, value))
        self._get(h, "desc")[name] = value

    def matmul_desc_destroy(self, h: int) -> None:
        self._get(h, "desc")
        del self.objects[h]

    def matrix_layout_create(self, dtype: int, rows: int, cols: int, ld: int) -> int:
        self.calls.append(("matrix_layout_create", dtype, rows, cols, ld))
        if ld < max(1, rows):
            raise RuntimeError(f"CUBLAS_STATUS_INVALID_VALUE: ld {ld} < rows {rows}")
        return self._new(
            "layout", TYPE=dtype, ROWS=rows, COLS=cols, LD=ld, BATCH_COUNT=1, STRIDED_BATCH_OFFSET=0
        )

    def matrix_layout_set_attribute(self, h: int, attr: int, buf: int, size: int) -> None:
        name, value = self._read_attr(self._lt.LAYOUT, attr, buf, size)
        self.calls.append(("matrix_layout_set_attribute", h, name, value))
        self._get(h, "layout")[name] = value

    def matrix_layout_destroy(self, h: int) -> None:
        self._get(h, "layout")
        del self.objects[h]

    def matmul_preference_create(self) -> int:
        self.calls.append(("matmul_preference_create",))
        return self._new("pref")

    def matmul_preference_set_attribute(self, h: int, attr: int, buf: int, size: int) -> None:
        name, value = self._read_attr(self._lt.PREF, attr, buf, size)
        self._get(h, "pref")[name] = value

    def matmul_preference_destroy(self, h: int) -> None:
        self._get(h, "pref")
        del self.objects[h]

    def matmul_algo_get_heuristic(self, handle, desc, a, b, c, d, pref, n, results, count) -> None:
        self.calls.append(("matmul_algo_get_heuristic", desc))
        self._check(self._get(desc, "desc"), *(self._get(x, "layout") for x in (a, b, c, d)))
        res = _host_view(results, n, self.matmul_heuristic_result_dtype)
        k = min(n, self.candidates)
        res[:k]["workspace_size"] = 0
        res[:k]["state"] = 0
        for i in range(k):
            res[i]["algo"][0] = i
        _host_view(count, 1, np.dtype(np.int32))[0] = k

    # the product
    def _check(self, desc: dict, A: dict, B: dict, C: dict, D: dict) -> tuple[int, int, int]:
        ar, ac = (A["COLS"], A["ROWS"]) if desc["TRANSA"] else (A["ROWS"], A["COLS"])
        br, bc = (B["COLS"], B["ROWS"]) if desc["TRANSB"] else (B["ROWS"], B["COLS"])
        if (
            ac != br
            or ar != D["ROWS"]
            or bc != D["COLS"]
            or (C["ROWS"], C["COLS"]) != (D["ROWS"], D["COLS"])
        ):
            raise RuntimeError(
                f"CUBLAS_STATUS_INVALID_VALUE: op(A) {ar}x{ac}, op(B) {br}x{bc}, "
                f"D {D['ROWS']}x{D['COLS']}"
            )
        if len({L["BATCH_COUNT"] for L in (A, B, C, D)}) != 1:
            raise RuntimeError("CUBLAS_STATUS_INVALID_VALUE: batch counts differ")
        return ar, bc, ac

    def matmul(
        self, handle, desc, alpha, a, a_l, b, b_l, beta, c, c_l, d, d_l, algo, ws, ws_size, stream
    ) -> None:
        self.calls.append(("matmul", desc, a, b, c, d, stream))
        number = int(_host_view(algo, 1, self.matmul_heuristic_result_dtype)[0]["algo"][0])
        if number in self.refused:
            raise RuntimeError(f"CUBLAS_STATUS_NOT_SUPPORTED (algorithm {number})")
        self.algos.append(number)
        lt = self._lt
        D_ = self._get(desc, "desc")
        A, B, C, D = (self._get(x, "layout") for x in (a_l, b_l, c_l, d_l))
        m, n, k = self._check(D_, A, B, C, D)
        types = {v: _bf16() if t == "bfloat16" else np.dtype(t) for t, v in lt.CUDA_R.items()}
        scale_dt = types[D_["SCALE_TYPE"]]
        al = float(_host_view(alpha, 1, scale_dt)[0])
        be = float(_host_view(beta, 1, scale_dt)[0])
        ep = {v: k_ for k_, v in lt.EPILOGUES.items()}[D_["EPILOGUE"]]
        batch = D["BATCH_COUNT"]

        def mat(ptr: int, L: dict, i: int) -> np.ndarray:
            dt = types[L["TYPE"]]
            off = i * L["STRIDED_BATCH_OFFSET"]
            count = off + (L["COLS"] - 1) * L["LD"] + L["ROWS"]
            flat = _host_view(ptr, count, dt).astype(np.float64)
            idx = off + np.arange(L["ROWS"])[:, None] + L["LD"] * np.arange(L["COLS"])[None, :]
            return flat[idx]

        def store(ptr: int, stride: int, i: int, val: np.ndarray, dt: np.dtype, ld: int) -> None:
            off = i * stride
            count = off + (val.shape[1] - 1) * ld + val.shape[0]
            flat = _host_view(ptr, count, dt)
            idx = off + np.arange(val.shape[0])[:, None] + ld * np.arange(val.shape[1])[None, :]
            flat[idx] = val.astype(dt)

        d_dt = types[D["TYPE"]]
        for i in range(batch):
            opA = mat(a, A, i)
            opA = opA.T if D_["TRANSA"] else opA
            opB = mat(b, B, i)
            opB = opB.T if D_["TRANSB"] else opB
            acc = al * (opA @ opB)
            if be:
                acc = acc + be * mat(c, C, i)
            if ep in lt._NEEDS_BIAS:
                stride = D_.get("BIAS_BATCH_STRIDE", 0)
                acc = acc + _host_view(D_["BIAS_POINTER"] + i * stride * d_dt.itemsize, m, d_dt)[
                    :, None
                ].astype(np.float64)
            aux_ld = D_.get("EPILOGUE_AUX_LD", 0)
            aux_stride = D_.get("EPILOGUE_AUX_BATCH_STRIDE", 0)
            if ep in ("gelu_aux", "gelu_aux_bias"):
                store(D_["EPILOGUE_AUX_POINTER"], aux_stride, i, acc, d_dt, aux_ld)
            if ep in ("gelu", "gelu_bias", "gelu_aux", "gelu_aux_bias"):
                acc = lt.gelu_tanh(acc)
            elif ep in ("relu", "relu_bias"):
                acc = np.maximum(acc, 0)
            elif ep in ("dgelu", "dgelu_bgrad"):
                aux_l = {
                    "ROWS": m,
                    "COLS": n,
                    "LD": aux_ld,
                    "STRIDED_BATCH_OFFSET": aux_stride,
                    "TYPE": D["TYPE"],
                }
                acc = acc * lt.gelu_tanh_grad(mat(D_["EPILOGUE_AUX_POINTER"], aux_l, i))
            grad = None
            if ep == "dgelu_bgrad":
                grad = acc.sum(axis=1)
            elif ep == "bgrad_rhs":
                grad = opA.sum(axis=1)
            elif ep == "bgrad_lhs":
                grad = opB.sum(axis=0)
            if grad is not None:
                stride = D_.get("BIAS_BATCH_STRIDE", 0)
                _host_view(D_["BIAS_POINTER"] + i * stride * d_dt.itemsize, len(grad), d_dt)[:] = (
                    grad.astype(d_dt)
                )
            store(d, D["STRIDED_BATCH_OFFSET"], i, acc, d_dt, D["LD"])


def _bf16() -> np.dtype:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)
