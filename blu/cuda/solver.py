"""The linear-algebra primitives on the GPU: cuSOLVER (dense) and cuBLAS via ``nvmath.bindings``.

One function per primitive of ``blu.lax.linalg``; ``GPU_KERNELS`` maps the primitive's name to
it. Each has the signature, parameters and output conventions of its CPU kernel in
``blu/core/lapack.py``, on C-contiguous ``DeviceArray``s with any leading batch shape:
``GPU_KERNELS[prim.name](*device_arrays, **eqn.params)`` returns what
``prim.impl(*numpy_arrays, **params)`` returns (a list for multiple-result primitives).

**Row-major data, column-major libraries.** A row-major ``(m, n)`` matrix has the bytes of the
column-major ``(n, m)`` matrix ``A^T``. The kernels use that where they can and otherwise
transpose on the device with ``cublas<t>geam``:

- cholesky: ``lower(A)`` is the upper triangle of ``A^T``; ``trmm`` by the identity copies that
  triangle with exact zeros elsewhere (exact: ``x * 1 + 0``; cuBLAS's default math mode keeps
  float32 in float32, no TF32), ``potrf(UPPER)`` factors it in place (``S = U^T U``), and the
  buffer read row-major is ``U^T = L``. ``potrf`` leaves the other triangle alone (LAPACK);
  ``potrfBatched`` does not: "the other part of A is used as a workspace ... lower triangle of
  A is destroyed" (on an H200 it held the mirror of ``U``). So a batch is factored in a work
  buffer and a second ``trmm`` by the identity copies ``triu(U)`` out, zeros below.
- triangular_solve: ``op(A) X = B`` is ``X^T op(A)^T = B^T``: one ``trsm`` with the side and
  the triangle swapped, on the bytes as they are.
- lu: geam in, ``getrf``, geam out; 1-based LAPACK pivots made 0-based, and the permutation,
  on the host.
- qr: geam in, ``geqrf``; ``trmm`` by the identity writes ``triu(R)^T``, i.e. row-major ``R``
  with exact zeros below the diagonal; ``orgqr``; geam out.
- geqrf, householder_product: geam in, ``geqrf`` (``orgqr``), geam out.
- eigh: ``syevd`` of ``A^T`` reading the other triangle (the same symmetric matrix); geam of
  the eigenvectors (``syevd`` returns them in columns, column-major).
- svd: ``gesvd`` needs ``m >= n``. For ``m <= n`` it factors ``A^T`` (``n x m``) ``= V S U^T``:
  its ``U`` read row-major is ``vt`` and its ``VT`` read row-major is ``u``, no copies. For
  ``m > n``: geam in, and geam of ``U`` and ``VT`` out.

**Batches.** ``potrfBatched`` and ``trsmBatched`` (device arrays of pointers) serve batches of
more than one matrix; the other calls loop over the batch with pointer offsets (cuSOLVER's
getrf, geqrf, orgqr, syevd and gesvd take one matrix). Work is queued on the device's stream
(both handles are bound to it); workspaces, info and pointer arrays come from the device's
caching allocator.

**Synchronizations.** cholesky, eigh and svd read the per-matrix ``info`` back to give a
failing matrix all-NaN outputs (not positive definite, no convergence), as the CPU kernels do;
lu reads its pivots back (``n`` int32 a matrix) to form the 0-based pivots and the permutation.
qr and triangular_solve do not synchronize. Under ``blu.config.debug_nans`` degenerate input
raises ``LinAlgError`` as on the CPU (triangular_solve then reads ``a`` back for its
diagonal). bfloat16/float16 go through the host (converted to float32 there, computed on the
GPU, converted back): cuSOLVER has no such types. Empty inputs run the CPU kernel on the host
(nothing to move, but outputs such as the identity ``q`` of a ``(3, 0)`` matrix), and so does a
simulated device (``BLU_FAKE_GPU``, host memory) unless ``use_libraries`` gave it stand-ins.

**Libraries.** ``blu.cuda.solver_libraries`` finds and loads cuSOLVER and cuBLAS
(``preload_libraries``, re-exported here).

Sources: cuSOLVER API reference, cuSolverDN (docs.nvidia.com/cuda/cusolver: ``<t>potrf``,
``<t>potrfBatched``, ``<t>getrf``, ``<t>geqrf``, ``<t>orgqr``, ``<t>syevd``, ``<t>gesvd`` and
its remark "gesvd only supports m>=n"); cuBLAS reference (``<t>geam`` and its in-place mode
``C = B``, ``<t>trmm`` (out of place), ``<t>trsm``, ``<t>trsmBatched``, ``<t>copy``); LAPACK
Users' Guide for the storage conventions (1-based ``ipiv``, Householder vectors and ``tau``).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from blu.core import dtypes, lapack
from blu.core.config import config
from blu.core.errors import BluShapeError, BluTypeError, BluValueError, LinAlgError, with_user_line
from blu.cuda.array import DeviceArray, device_put
from blu.cuda.device import Device
from blu.cuda.errors import CudaError
from blu.cuda.profile import profiler
from blu.cuda.solver_libraries import (  # noqa: F401  (re-exported)
    LOAD_ORDER,
    bindings,
    find_library,
    preload_libraries,
    toolkit_lib_dirs,
)

# cublas_api.h / cusolver_common.h enumerations (a stable ABI)
LOWER, UPPER = 0, 1  # cublasFillMode_t
OP_N, OP_T = 0, 1  # cublasOperation_t
LEFT, RIGHT = 0, 1  # cublasSideMode_t
NON_UNIT, UNIT = 0, 1  # cublasDiagType_t
EIG_VECTOR = 1  # cusolverEigMode_t
NAN_BYTE = 0xFF  # every byte 0xFF: a (negative, quiet) NaN in float32 and float64

# ---- handles -----------------------------------------------------------------------------------


def c_name(library: str, fn: str) -> str:
    """The C name of an nvmath binding, for messages: ``("cusolverDn", "spotrf_buffer_size")``
    -> ``"cusolverDnSpotrf_bufferSize"``, ``("cublas", "strsm_batched")`` ->
    ``"cublasStrsmBatched"``."""
    head, sep, tail = fn.partition("_buffer_size")
    camel = "".join(p[:1].upper() + p[1:] for p in head.split("_"))
    return library + camel + ("_bufferSize" if sep else "") + tail


def _activate(device: Device) -> None:
    activate = getattr(device, "activate", None)  # a CudaDevice's context (fakes have none)
    if activate is not None:
        activate()


class SolverHandles:
    """A cusolverDn handle and a cuBLAS handle bound to one device's stream.

    Made once per device by ``handles(device)``; ``use_libraries`` installs stand-ins (tests).

    Args:
        device: the ``Device`` whose stream the work is queued on.
        cusolver, cublas: ``nvmath.bindings.cusolverDn`` / ``nvmath.bindings.cublas``
            (default), or objects with the same functions.
    """

    def __init__(self, device: Device, cusolver: Any = None, cublas: Any = None):
        if cusolver is None or cublas is None:
            default_dn, default_blas = bindings()
            cusolver, cublas = cusolver or default_dn, cublas or default_blas
        self.device, self.dn, self.blas = device, cusolver, cublas
        _activate(device)
        self.dn_handle = self._call(self.dn, "cusolverDn", "create", what="a handle")
        self._call(self.dn, "cusolverDn", "set_stream", self.dn_handle, device.stream_id)
        self.blas_handle = self._call(self.blas, "cublas", "create", what="a handle")
        self._call(self.blas, "cublas", "set_stream", self.blas_handle, device.stream_id)

    @staticmethod
    def _call(lib: Any, library: str, fn: str, *args: Any, what: str = "") -> Any:
        try:
            return getattr(lib, fn)(*args)
        except CudaError:
            raise
        except Exception as e:  # cuSOLVERError / cuBLASError (the status is in the message)
            name = c_name(library, fn)
            raise CudaError(f"{name} failed{' for ' + what if what else ''}: {e}", call=name) from e

    def cusolver(self, fn: str, *args: Any, what: str = "") -> Any:
        """``cusolverDn.<fn>(handle, *args)``; errors become ``CudaError`` naming the call."""
        return self._call(self.dn, "cusolverDn", fn, self.dn_handle, *args, what=what)

    def cublas(self, fn: str, *args: Any, what: str = "") -> Any:
        """``cublas.<fn>(handle, *args)``; errors become ``CudaError`` naming the call."""
        return self._call(self.blas, "cublas", fn, self.blas_handle, *args, what=what)

    def close(self) -> None:
        """Destroy both handles."""
        if self.dn_handle:
            self._call(self.dn, "cusolverDn", "destroy", self.dn_handle)
            self.dn_handle = 0
        if self.blas_handle:
            self._call(self.blas, "cublas", "destroy", self.blas_handle)
            self.blas_handle = 0


_HANDLES: dict[Device, SolverHandles] = {}
_handles_lock = threading.Lock()


def handles(device: Device) -> SolverHandles:
    """The device's ``SolverHandles`` (created on first use and kept)."""
    h = _HANDLES.get(device)
    if h is None:
        with _handles_lock:
            h = _HANDLES.get(device)
            if h is None:
                h = _HANDLES[device] = SolverHandles(device)
    return h


def use_libraries(device: Device, cusolver: Any, cublas: Any) -> SolverHandles:
    """Bind ``device`` to these cusolverDn/cuBLAS modules (stand-ins for the CPU tests)."""
    with _handles_lock:
        _HANDLES[device] = SolverHandles(device, cusolver, cublas)
        return _HANDLES[device]


# ---- one kernel call ---------------------------------------------------------------------------


def _short(shape: tuple, dtype: Any) -> str:
    return f"{dtypes.short_name(np.dtype(dtype))}[{','.join(map(str, shape))}]"


def batch_size(shape: tuple[int, ...]) -> int:
    """Number of matrices in a ``(..., rows, cols)`` array."""
    return int(np.prod(shape[:-2], dtype=np.int64))


def at(x: DeviceArray, i: int, count: int) -> int:
    """Device address of matrix ``i`` of the ``count`` matrices (or vectors) in ``x``."""
    return x.ptr + i * (x.nbytes // count)


class _Call:
    """The state of one kernel call: device, handles, the ``s``/``d`` prefix, host scalars."""

    def __init__(self, name: str, a: DeviceArray):
        self.dev = a.device
        self.h = handles(self.dev)
        self.dtype = a.dtype
        self.t = {np.dtype(np.float32): "s", np.dtype(np.float64): "d"}[a.dtype]
        self.nb = batch_size(a.shape)
        self.what = f"{name} of {_short(a.shape, a.dtype)}"
        self._one = np.ones(1, a.dtype)  # host pointer mode: alpha/beta read at the call
        self._zero = np.zeros(1, a.dtype)
        self.one, self.zero = self._one.ctypes.data, self._zero.ctypes.data

    def dn(self, fn: str, *args: Any) -> Any:
        return self.h.cusolver(self.t + fn, *args, what=self.what)

    def blas(self, fn: str, *args: Any) -> Any:
        return self.h.cublas(self.t + fn, *args, what=self.what)

    def empty(self, shape: tuple, dtype: Any = None, tag: str = "") -> DeviceArray:
        dtype = self.dtype if dtype is None else dtype
        return DeviceArray.empty(tuple(shape), dtype, self.dev, tag=f"{self.what}: {tag}")

    def zeros(self, shape: tuple, dtype: Any = None, tag: str = "") -> DeviceArray:
        x = self.empty(shape, dtype, tag)
        self.dev.memset(x.ptr, 0, x.nbytes)
        return x

    def copy(self, x: DeviceArray, tag: str) -> DeviceArray:
        out = self.empty(x.shape, x.dtype, tag)
        self.dev.copy_d2d(out.ptr, x.ptr, x.nbytes)
        return out

    def workspace(self, lwork: int) -> DeviceArray:
        return self.empty((max(int(lwork), 1),), tag="workspace")

    def pointers(self, x: DeviceArray) -> DeviceArray:
        """A device array of the addresses of ``x``'s matrices (for the batched calls)."""
        host = x.ptr + np.arange(self.nb, dtype=np.uint64) * np.uint64(x.nbytes // self.nb)
        return device_put(host, self.dev, tag=f"{self.what}: pointers")

    def identity(self, n: int) -> DeviceArray:
        """``I_n`` on the device: zeros, then ones copied onto the diagonal (stride n + 1)."""
        eye = self.zeros((n, n), tag="identity")
        ones = device_put(np.ones(n, self.dtype), self.dev, tag=f"{self.what}: ones")
        self.blas("copy", n, ones.ptr, 1, eye.ptr, n + 1)
        return eye

    def transpose(self, m: int, n: int, src: int, ld_src: int, dst: int, ld_dst: int) -> None:
        """``dst`` (``m x n`` column-major) = ``src^T`` (``src``: ``n x m`` column-major), by
        geam in its in-place mode ``C = B`` with ``beta = 0`` (``dst`` must hold zeros, so
        nothing but ``src`` can reach the result)."""
        args = (OP_T, OP_N, m, n, self.one, src, ld_src, self.zero, dst, ld_dst, dst, ld_dst)
        self.blas("geam", *args)

    def failed(self, info: DeviceArray, message: str, a: DeviceArray) -> np.ndarray:
        """Read ``info`` back (synchronizes): which matrices failed (``info > 0``).

        Raises:
            LinAlgError: some did, with ``blu.config.debug_nans`` set (as the CPU kernels).
            CudaError: ``info < 0`` (an illegal argument; a bug here).
        """
        host = np.asarray(info).reshape(-1)
        if (host < 0).any():
            raise CudaError(f"{self.what}: argument {-host.min()} was illegal (info < 0)")
        bad = host > 0
        if bad.any():
            if config.debug_nans:
                raise LinAlgError(
                    with_user_line(f"{message} (matrices of shape {a.shape}, dtype {a.dtype})")
                )
        return bad

    def nan_where(self, bad: np.ndarray, outs: Sequence[DeviceArray]) -> None:
        """Fill the outputs of the failed matrices with NaN."""
        for i in np.flatnonzero(bad):
            for o in outs:
                self.dev.memset(at(o, int(i), self.nb), NAN_BYTE, o.nbytes // self.nb)


def _host_kernel(name: str, arrays: Sequence[DeviceArray], params: dict) -> Any:
    """The CPU kernel on host copies, its outputs put on the device (empty inputs, and
    simulated devices without stand-in libraries)."""
    outs = getattr(lapack, name)(*[np.asarray(x) for x in arrays], **params)
    dev = arrays[0].device
    if isinstance(outs, list):
        return [device_put(np.asarray(o), dev) for o in outs]
    return device_put(np.asarray(outs), dev)


def _through_f32(fn: Callable, arrays: Sequence[DeviceArray], params: dict) -> Any:
    """bfloat16/float16: convert on the host to float32, run, convert float outputs back."""
    dt, dev = arrays[0].dtype, arrays[0].device
    outs = fn(*[device_put(np.asarray(x).astype(np.float32), dev) for x in arrays], **params)

    def back(o: DeviceArray) -> DeviceArray:
        return device_put(np.asarray(o).astype(dt), dev) if o.dtype == np.float32 else o

    return [back(o) for o in outs] if isinstance(outs, list) else back(outs)


def check_operands(name: str, arrays: Sequence[Any], ranks: Sequence[int] = ()) -> None:
    """DeviceArrays on one device, of one float dtype, of rank >= 2 (or the least ``ranks``).

    Raises:
        BluTypeError: not DeviceArrays, mixed or unsupported dtypes.
        BluValueError: on different devices. BluShapeError: rank < 2.
    """
    if not all(isinstance(x, DeviceArray) for x in arrays):
        kinds = ", ".join(type(x).__name__ for x in arrays)
        raise BluTypeError(f"{name} on the GPU takes DeviceArrays, got {kinds}")
    a = arrays[0]
    desc = ", ".join(_short(x.shape, x.dtype) for x in arrays)
    if any(x.device is not a.device for x in arrays):
        raise BluValueError(f"{name}: operands {desc} are on {[x.device for x in arrays]}")
    supported = ("float32", "float64", "bfloat16", "float16")
    if any(x.dtype != a.dtype for x in arrays) or a.dtype.name not in supported:
        raise BluTypeError(f"{name} on the GPU needs one dtype of {supported}, got {desc}")
    if any(x.ndim < r for x, r in zip(arrays, ranks or [2] * len(arrays))):
        raise BluShapeError(f"{name} on the GPU needs (..., m, n) matrices, got {desc}")


def _kernel(name: str, ranks: Sequence[int] = ()) -> Callable[[Callable], Callable]:
    """Argument checks, empty and bfloat16/float16 inputs, and profiling around a kernel."""

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*arrays: DeviceArray, **params: Any) -> Any:
            check_operands(name, arrays, ranks)
            dev = arrays[0].device
            simulated = getattr(dev, "platform", "") != "cuda" and dev not in _HANDLES
            if simulated or any(x.size == 0 for x in arrays):
                return _host_kernel(name, arrays, params)
            if arrays[0].dtype.name in ("bfloat16", "float16"):
                return _through_f32(run, arrays, params)
            _activate(dev)
            if not profiler.enabled:
                return fn(*arrays, **params)
            with profiler.region(f"cusolver {name} {_short(arrays[0].shape, arrays[0].dtype)}",
                                 dev.stream_id):  # fmt: skip
                return fn(*arrays, **params)

        return run

    return wrap


# ---- the kernels -------------------------------------------------------------------------------


@_kernel("cholesky")
def cholesky(a: DeviceArray) -> DeviceArray:
    """Lower Cholesky factors of ``(..., n, n)`` matrices (only the lower triangle is read;
    the upper triangle of the result is zero); all NaN for a matrix that is not positive
    definite. cuBLAS ``<t>trmm`` + cuSOLVER ``<t>potrf`` (one matrix) or ``<t>potrfBatched``
    + ``<t>trmm`` (a batch: potrfBatched overwrites the other triangle, so the factor's triangle
    is copied out); UPPER on the column-major view. Synchronizes once to read ``info``."""
    c, n = _Call("cholesky", a), a.shape[-1]
    work, eye = c.empty(a.shape, tag="factor"), c.identity(n)

    def triu_copy(src: DeviceArray, dst: DeviceArray) -> None:  # column-major triu, zeros below
        for i in range(c.nb):
            c.blas("trmm", LEFT, UPPER, OP_N, NON_UNIT, n, n, c.one, at(src, i, c.nb), n,
                   eye.ptr, n, at(dst, i, c.nb), n)  # fmt: skip

    triu_copy(a, work)  # the upper triangle of the column-major view is lower(A)
    info = c.empty((c.nb,), np.int32, "info")
    if c.nb == 1:
        ws = c.workspace(c.dn("potrf_buffer_size", UPPER, n, work.ptr, n))
        c.dn("potrf", UPPER, n, work.ptr, n, ws.ptr, ws.size, info.ptr)
        out = work  # potrf keeps the zeros of the other triangle
    else:
        ptrs = c.pointers(work)
        c.dn("potrf_batched", UPPER, n, ptrs.ptr, n, info.ptr, c.nb)
        out = c.empty(a.shape, tag="factor (copied out)")
        triu_copy(work, out)  # potrfBatched used the lower triangle as its workspace
    c.nan_where(c.failed(info, "cholesky: not positive definite", a), [out])
    return out


@_kernel("triangular_solve")
def triangular_solve(
    a: DeviceArray, b: DeviceArray, *, left_side: bool, lower: bool, transpose_a: bool,
    unit_diagonal: bool,
) -> DeviceArray:  # fmt: skip
    """``op(a)^-1 b`` (``left_side``) or ``b op(a)^-1`` for triangular ``a`` ``(..., m, m)``
    and ``b`` ``(..., m, k)`` / ``(..., k, m)``: cuBLAS ``<t>trsm`` / ``<t>trsmBatched`` on the
    column-major views (side and triangle swapped). A zero diagonal gives inf/NaN."""
    if a.shape[:-2] != b.shape[:-2] or a.shape[-1] != a.shape[-2]:
        raise BluShapeError(f"triangular_solve: a {a.shape} and b {b.shape} do not fit")
    if (b.shape[-2] if left_side else b.shape[-1]) != a.shape[-1]:
        raise BluShapeError(
            f"triangular_solve: b {b.shape} does not fit a {a.shape} (left_side={left_side})"
        )
    c, m = _Call("triangular_solve", a), a.shape[-1]
    if not unit_diagonal:
        if config.debug_nans and not np.diagonal(np.asarray(a), 0, -2, -1).all():
            raise LinAlgError(with_user_line(
                f"triangular_solve: singular (zero diagonal) matrix (matrices of shape "
                f"{a.shape}, dtype {a.dtype})"))  # fmt: skip
    out = c.copy(b, "solution")
    rows, cols = b.shape[-2:]
    flags = (RIGHT if left_side else LEFT, UPPER if lower else LOWER,
             OP_T if transpose_a else OP_N, UNIT if unit_diagonal else NON_UNIT)  # fmt: skip
    if c.nb == 1:
        c.blas("trsm", *flags, cols, rows, c.one, a.ptr, m, out.ptr, cols)
    else:
        pa, pb = c.pointers(a), c.pointers(out)
        c.blas("trsm_batched", *flags, cols, rows, c.one, pa.ptr, m, pb.ptr, cols, c.nb)
    return out


def permutation_from_pivots(pivots: np.ndarray) -> np.ndarray:
    """The permutation of LAPACK's 0-based row swaps ``pivots`` ``(..., n)``: row ``j`` was
    swapped with row ``pivots[..., j]``, in order; ``a[..., perm, :] == L @ U``."""
    piv = np.asarray(pivots).reshape(-1, pivots.shape[-1])
    n = piv.shape[-1]
    perm = np.broadcast_to(np.arange(n, dtype=np.int32), piv.shape).copy()
    rows = np.arange(piv.shape[0])
    for j in range(n):
        pj = piv[:, j]
        swapped = perm[rows, pj]
        perm[rows, pj] = perm[rows, j]
        perm[rows, j] = swapped
    return perm.reshape(pivots.shape)


@_kernel("lu")
def lu(a: DeviceArray) -> list[DeviceArray]:
    """LU with partial pivoting of ``(..., n, n)`` matrices: ``[lu, pivots, permutation]``
    (int32, 0-based; ``a[..., permutation, :] == L @ U``). cuSOLVER ``<t>getrf`` between two
    geam transposes; reads the pivots back (one synchronization). A singular matrix gives a
    zero on ``U``'s diagonal."""
    c, n = _Call("lu", a), a.shape[-1]
    work = c.zeros(a.shape, tag="column-major copy")
    for i in range(c.nb):
        c.transpose(n, n, at(a, i, c.nb), n, at(work, i, c.nb), n)
    ws = c.workspace(c.dn("getrf_buffer_size", n, n, work.ptr, n))
    ipiv = c.empty((c.nb, n), np.int32, "pivots")
    info = c.empty((c.nb,), np.int32, "info")
    for i in range(c.nb):
        c.dn("getrf", n, n, at(work, i, c.nb), n, ws.ptr, at(ipiv, i, c.nb), at(info, i, c.nb))
    out = c.zeros(a.shape, tag="lu")
    for i in range(c.nb):
        c.transpose(n, n, at(work, i, c.nb), n, at(out, i, c.nb), n)
    pivots = np.asarray(ipiv).reshape(a.shape[:-1]) - 1  # LAPACK's are 1-based
    c.failed(info, "lu: singular matrix", a)
    perm = permutation_from_pivots(pivots)
    return [out, device_put(pivots.astype(np.int32), c.dev), device_put(perm, c.dev)]


@_kernel("qr")
def qr(a: DeviceArray, *, full_matrices: bool) -> list[DeviceArray]:
    """Householder QR of ``(..., m, n)`` matrices: ``[q, r]`` with ``q`` ``(..., m, kq)`` and
    ``r`` ``(..., kq, n)``, ``kq = m`` if ``full_matrices`` else ``min(m, n)``; LAPACK's signs.
    cuSOLVER ``<t>geqrf`` + ``<t>orgqr``, cuBLAS ``<t>trmm`` (R) and geam; no synchronization."""
    c, (m, n) = _Call("qr", a), a.shape[-2:]
    k = min(m, n)
    kq = m if full_matrices else k
    batch = a.shape[:-2]
    wc = max(n, kq)  # orgqr builds kq columns of Q in place
    work = c.zeros(batch + (wc, m), tag="column-major copy")  # column-major m x wc
    for i in range(c.nb):
        c.transpose(m, n, at(a, i, c.nb), n, at(work, i, c.nb), m)
    tau = c.empty(batch + (k,), tag="tau")
    lwork = max(c.dn("geqrf_buffer_size", m, n, work.ptr, m),
                c.dn("orgqr_buffer_size", m, kq, k, work.ptr, m, tau.ptr))  # fmt: skip
    ws, info = c.workspace(lwork), c.empty((c.nb,), np.int32, "info")
    q, r = c.zeros(batch + (m, kq), tag="q"), c.zeros(batch + (kq, n), tag="r")
    eye = c.identity(k)
    for i in range(c.nb):
        w, t = at(work, i, c.nb), at(tau, i, c.nb)
        c.dn("geqrf", m, n, w, m, t, ws.ptr, ws.size, at(info, i, c.nb))
        # r read column-major is R^T (n x kq, ld n): its k x k block is I triu(R_kk)^T ...
        c.blas("trmm", RIGHT, UPPER, OP_T, NON_UNIT, k, k, c.one, w, m, eye.ptr, k,
               at(r, i, c.nb), n)  # fmt: skip
        if n > k:  # ... and below it, columns k.. of R transposed (m < n: all rows)
            isz = a.dtype.itemsize
            c.transpose(n - k, k, w + k * m * isz, m, at(r, i, c.nb) + k * isz, n)
        c.dn("orgqr", m, kq, k, w, m, t, ws.ptr, ws.size, at(info, i, c.nb))
        c.transpose(kq, m, w, m, at(q, i, c.nb), kq)
    return [q, r]


@_kernel("eigh")
def eigh(a: DeviceArray, *, lower: bool) -> list[DeviceArray]:
    """Symmetric eigen-decomposition of ``(..., n, n)`` matrices reading the ``lower`` (else
    upper) triangle: ``[v, w]``, eigenvectors in the columns of ``v``, ``w`` ascending; all NaN
    where the iteration fails. cuSOLVER ``<t>syevd`` + geam; synchronizes to read ``info``."""
    c, n = _Call("eigh", a), a.shape[-1]
    uplo = UPPER if lower else LOWER  # lower(A) is the upper triangle of the column-major view
    work = c.copy(a, "eigenvectors (column-major)")
    w = c.empty(a.shape[:-1], tag="eigenvalues")
    ws = c.workspace(c.dn("syevd_buffer_size", EIG_VECTOR, uplo, n, work.ptr, n, w.ptr))
    info = c.empty((c.nb,), np.int32, "info")
    v = c.zeros(a.shape, tag="eigenvectors")
    for i in range(c.nb):
        wk = at(work, i, c.nb)
        c.dn("syevd", EIG_VECTOR, uplo, n, wk, n, at(w, i, c.nb), ws.ptr, ws.size,
             at(info, i, c.nb))  # fmt: skip
        c.transpose(n, n, wk, n, at(v, i, c.nb), n)
    c.nan_where(c.failed(info, "eigh: no convergence", a), [v, w])
    return [v, w]


@_kernel("svd")
def svd(a: DeviceArray, *, full_matrices: bool, compute_uv: bool) -> list[DeviceArray]:
    """SVD of ``(..., m, n)`` matrices: ``[s, u, vt]`` (or ``[s]``), ``s`` descending; all NaN
    where the iteration fails. cuSOLVER ``<t>gesvd`` (which needs rows >= columns: see the
    module docstring); synchronizes to read ``info``."""
    c, (m, n) = _Call("svd", a), a.shape[-2:]
    k, batch = min(m, n), a.shape[:-2]
    s = c.empty(batch + (k,), tag="s")
    info = c.empty((c.nb,), np.int32, "info")
    rwork = c.empty((max(k - 1, 1),), tag="rwork")
    tall = m > n
    gm, gn = (m, n) if tall else (n, m)  # gesvd's matrix: A (transposed here) or A^T (as is)
    if tall:
        work = c.zeros(batch + (n, m), tag="column-major copy")
        for i in range(c.nb):
            c.transpose(m, n, at(a, i, c.nb), n, at(work, i, c.nb), m)
    else:
        work = c.copy(a, "gesvd input")
    ws = c.workspace(c.dn("gesvd_buffer_size", gm, gn))
    outs = [s]
    job = ord("A" if full_matrices else "S") if compute_uv else ord("N")
    ku = m if full_matrices else k  # columns of u
    kv = n if full_matrices else k  # rows of vt
    if compute_uv:
        u, vt = c.zeros(batch + (m, ku), tag="u"), c.zeros(batch + (kv, n), tag="vt")
        outs += [u, vt]
        if tall:  # gesvd's U (m x ku) and VT (n x n), column-major, then transposed
            gu, gvt = c.empty(batch + (ku, m), tag="U"), c.empty(batch + (n, n), tag="VT")
        else:  # gesvd's U (n x kv) read row-major is vt; its VT (m x m) read row-major is u
            gu, gvt = vt, u
    for i in range(c.nb):
        w = at(work, i, c.nb)
        if compute_uv:
            uv = (at(gu, i, c.nb), gm, at(gvt, i, c.nb), gn)
            c.dn("gesvd", job, ord("A"), gm, gn, w, gm, at(s, i, c.nb), *uv, ws.ptr, ws.size,
                 rwork.ptr, at(info, i, c.nb))  # fmt: skip
            if tall:
                c.transpose(ku, m, at(gu, i, c.nb), m, at(u, i, c.nb), ku)
                c.transpose(n, n, at(gvt, i, c.nb), n, at(vt, i, c.nb), n)
        else:
            c.dn("gesvd", job, job, gm, gn, w, gm, at(s, i, c.nb), 0, gm, 0, gn, ws.ptr,
                 ws.size, rwork.ptr, at(info, i, c.nb))  # fmt: skip
    c.nan_where(c.failed(info, "svd: no convergence", a), outs)
    return outs


def _column_major(c: _Call, a: DeviceArray, tag: str) -> DeviceArray:
    """A column-major copy ``(..., n, m)`` of row-major ``(..., m, n)`` matrices (geam)."""
    m, n = a.shape[-2:]
    work = c.zeros(a.shape[:-2] + (n, m), tag=tag)
    for i in range(c.nb):
        c.transpose(m, n, at(a, i, c.nb), n, at(work, i, c.nb), m)
    return work


@_kernel("geqrf")
def geqrf(a: DeviceArray) -> list[DeviceArray]:
    """LAPACK's compact Householder QR of ``(..., m, n)`` matrices: ``[a_out, taus]``.
    geam in, cuSOLVER ``<t>geqrf``, geam out; no synchronization."""
    c, (m, n) = _Call("geqrf", a), a.shape[-2:]
    work = _column_major(c, a, "column-major copy")
    taus = c.empty(a.shape[:-2] + (min(m, n),), tag="taus")
    ws = c.workspace(c.dn("geqrf_buffer_size", m, n, work.ptr, m))
    info, out = c.empty((c.nb,), np.int32, "info"), c.zeros(a.shape, tag="a_out")
    for i in range(c.nb):
        w = at(work, i, c.nb)
        c.dn("geqrf", m, n, w, m, at(taus, i, c.nb), ws.ptr, ws.size, at(info, i, c.nb))
        c.transpose(n, m, w, m, at(out, i, c.nb), n)
    return [out, taus]


@_kernel("householder_product", ranks=(2, 1))
def householder_product(a: DeviceArray, taus: DeviceArray) -> DeviceArray:
    """The first ``n`` columns of ``H_1 ... H_k`` from ``(..., m, n)`` reflectors and ``(..., k)``
    taus (``m >= n >= k``). geam in, cuSOLVER ``<t>orgqr``, geam out; no synchronization."""
    c, (m, n), k = _Call("householder_product", a), a.shape[-2:], taus.shape[-1]
    work = _column_major(c, a, "reflectors (column-major)")
    ws = c.workspace(c.dn("orgqr_buffer_size", m, n, k, work.ptr, m, taus.ptr))
    info, out = c.empty((c.nb,), np.int32, "info"), c.zeros(a.shape, tag="q")
    for i in range(c.nb):
        w = at(work, i, c.nb)
        c.dn("orgqr", m, n, k, w, m, at(taus, i, c.nb), ws.ptr, ws.size, at(info, i, c.nb))
        c.transpose(n, m, w, m, at(out, i, c.nb), n)
    return out


GPU_KERNELS: dict[str, Callable[..., Any]] = {
    "cholesky": cholesky,
    "triangular_solve": triangular_solve,
    "lu": lu,
    "qr": qr,
    "eigh": eigh,
    "svd": svd,
    "geqrf": geqrf,
    "householder_product": householder_product,
}
