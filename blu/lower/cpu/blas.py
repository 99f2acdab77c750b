"""Threads of the matrix products of the CPU executable (numpy's BLAS).

OpenBLAS's own worker threads spin while they wait for each other: when the machine has more
runnable threads than cores, a product it splits waits for a descheduled worker and can take
many times longer than on one thread (a small product on a loaded 2-core machine). So the BLAS
always runs single-threaded
(``use_threads(1)``, through OpenBLAS's own ``set_num_threads`` found in the loaded library), and
a product large enough to pay for it (``MIN_THREADED_FLOPS``) is split by batch, rows or columns
across threads of our own (``matmul``): spinning workers that run only while an executable runs
and never make the caller wait for a part they have not started (``spin.py``), else a pool whose
threads block; numpy releases the GIL inside the product. ``config.cpu_threads``
(``BLU_CPU_THREADS``) sets how many; by default the cores the process may use.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import sys
import weakref
from typing import Any

import numpy as np

from blu.core import dtypes
from blu.core.config import config
from blu.lower.cpu import address, autotune, spin
from blu.lower.cpu import threads as cpu_threads

__all__ = ["SmallGemm", "dot_runner", "gemm", "gemm_for", "matmul", "mkl_gemm_for", "mm",
           "openblas_gemm_for", "small_gemm", "split_axis", "threads_for",
           "use_threads"]  # fmt: skip

MIN_THREADED_FLOPS = 1 << 25  # ~34 MFLOP: below this, one thread

_SYMBOLS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads")  # fmt: skip
_setter: object = None  # unresolved
_current = -1


def _openblas_libs() -> list[str]:
    with contextlib.suppress(OSError):
        with open("/proc/self/maps") as f:
            return sorted({ln.split()[-1] for ln in f if "openblas" in ln.lower() and "/" in ln})
    return []


def _find_setter():
    """OpenBLAS's ``set_num_threads`` from the library numpy loaded, or None."""
    with contextlib.suppress(OSError):
        for path in _openblas_libs():
            with contextlib.suppress(OSError):
                lib = ctypes.CDLL(path)
                for sym in _SYMBOLS:
                    fn = getattr(lib, sym, None)
                    if fn is not None:
                        fn.argtypes, fn.restype = [ctypes.c_int], None
                        return fn
    return None


@functools.cache
def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads_for(flops: float) -> int:
    """The threads a product of ``flops`` floating-point operations should use."""
    if flops < MIN_THREADED_FLOPS:
        return 1
    fixed = config.cpu_threads
    return fixed if isinstance(fixed, int) and fixed >= 1 else _cores()


def _part(x: np.ndarray, y: np.ndarray, o: np.ndarray) -> None:
    with np.errstate(over="ignore", invalid="ignore"):  # as the caller's (thread-local) state
        if x.ndim == 2:
            mm(x, y, o)
        elif spin.recording() is not None:  # one call per matrix of the batch
            for j in range(x.shape[0]):
                mm(x[j], y[j], o[j])
        else:
            np.matmul(x, y, out=o)


def matmul(
    lhs: np.ndarray, rhs: np.ndarray, out: np.ndarray, threads: int, balance: Any = None
) -> None:
    """``np.matmul(lhs, rhs, out=out)`` for 3-D ``(b, m, k) @ (b, k, n)`` operands, split into
    ``threads`` parts by batch (``b >= threads``), else by rows of ``lhs`` or by columns of
    ``rhs`` (``split_axis``), each on single-threaded BLAS, the caller's thread doing one part
    (its share learned per call site by ``balance``, a ``threads.Balance``; else equal parts).

    Each part packs all of the operand that is not cut (BLAS copies its blocks into a
    cache-friendly layout): cut by rows, every part packs the whole ``(k, n)`` right operand;
    by columns, the whole ``(m, k)`` left one. So the cut goes across the larger of ``m`` and
    ``n`` (on the MLP step's products, 2 threads, faster than always by rows when ``n > m``:
    docs/benchmarks/cpu_backend.md, session 7). ``out`` is C-contiguous: a row part writes a
    dense block, a column part a strided one (BLAS's ``ldc``; numpy passes such views to BLAS
    without a copy). A product whose contracted dimension ``k`` is long against ``m`` and ``n``
    (``split_axis``: 3) is cut along ``k`` instead: no operand is packed twice; the caller's
    part writes ``out``, each other part a buffer of its own, added to ``out`` at the end (the
    MLP step's ``h @ w2``, 256x1024 @ 1024x256)."""
    use_threads(1)
    b, m, n = lhs.shape[0], lhs.shape[1], rhs.shape[2]
    k = lhs.shape[2]
    axis = 0 if b >= threads else split_axis(m, n, threads, k if b == 1 else 0)
    if threads <= 1 or axis is None or b == 0:
        # (a product recorded for a spinning worker, e.g. the second of a pair, one call per
        # matrix: numpy's batched matmul would run it now, before the part it belongs to)
        mm(lhs[0], rhs[0], out[0]) if b == 1 else _part(lhs, rhs, out)
        return
    share = None if balance is None else balance.share
    if axis == 0:
        cuts = cpu_threads.split(b, threads, share=share)

        def part(lo: int, hi: int) -> None:
            _part(lhs[lo:hi], rhs[lo:hi], out[lo:hi])

    elif axis == 1:
        cuts = cpu_threads.split(m, threads, share=share, align=16)

        def part(lo: int, hi: int) -> None:
            for j in range(b):
                _part(lhs[j, lo:hi], rhs[j], out[j, lo:hi])

    elif axis == 2:
        cuts = cpu_threads.split(n, threads, share=share, align=16)

        def part(lo: int, hi: int) -> None:
            for j in range(b):
                _part(lhs[j], rhs[j, :, lo:hi], out[j, :, lo:hi])

    else:  # along k (b == 1): partial products, summed into ``out`` once all are done
        cuts = cpu_threads.split(k, threads, share=share, align=16)
        partial = {lo: np.empty((m, n), out.dtype) for lo, _ in cuts[1:]}
        solo = [False]

        def part(lo: int, hi: int) -> None:
            if lo == 0:  # the caller's (or, run whole, the only) part
                _part(lhs[0, :, lo:hi], rhs[0, lo:hi], out[0])
                solo[0] = hi == k
                return
            _part(lhs[0, :, lo:hi], rhs[0, lo:hi], partial[lo])

        cpu_threads.run_parts(part, cuts, balance, native=True)
        if not solo[0]:
            for t in partial.values():
                np.add(out[0], t, out=out[0])
        return
    cpu_threads.run_parts(part, cuts, balance, native=True)


def dot_runner(eqn: Any, solo: bool = False) -> Any:
    """dot_general into ``out`` through one np.matmul (BLAS for floats), as its impl does:
    ``run(lhs, rhs, out)``. Everything that depends only on the shapes (permutations, the
    (batch, m, k, n) view, the compute dtype) is worked out once, here. ``solo``: on one
    thread (a product run beside another one: ``cpu/pairs.py``)."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    la, ra, oa = eqn.invars[0].aval, eqn.invars[1].aval, eqn.outvars[0].aval
    lf = [i for i in range(len(la.shape)) if i not in lc and i not in lb]
    rf = [i for i in range(len(ra.shape)) if i not in rc and i not in rb]
    size = lambda shape, axes: int(np.prod([shape[a] for a in axes], dtype=np.int64))  # noqa: E731
    b, m, kk, n = size(la.shape, lb), size(la.shape, lf), size(la.shape, lc), size(ra.shape, rf)
    lt, rt = tuple(lb) + tuple(lf) + tuple(lc), tuple(rb) + tuple(rc) + tuple(rf)
    lt = None if lt == tuple(range(len(la.shape))) else lt
    rt = None if rt == tuple(range(len(ra.shape))) else rt
    out_dt, l_dt = np.dtype(oa.dtype), np.dtype(la.dtype)
    comp = out_dt
    if comp in (dtypes.bfloat16, dtypes.float16) or l_dt != comp:
        comp = np.dtype(np.float64 if np.float64 in (l_dt, out_dt) else np.float32)
        if not (dtypes.is_float(l_dt) or dtypes.is_float(out_dt)):
            comp = np.promote_types(l_dt, out_dt)
    direct = comp == out_dt
    flops = 2.0 * b * m * kk * n

    # (m, k) @ (k, n) as they are, in the operands' dtype: np.matmul(int8, int8, out=int32)
    # would sum in int8 and wrap (and float16 in float16) before casting into out; and only
    # where that dtype computes directly (float16 through numpy's own loop is ~40x slower than
    # converted to float32 for BLAS)
    same = l_dt == out_dt == np.dtype(ra.dtype)
    plain = same and direct and b == 1 and lt is None and rt is None
    plain = plain and len(la.shape) == 2 and len(ra.shape) == 2 and len(oa.shape) == 2
    small = flops < MIN_THREADED_FLOPS
    fast = small_gemm(m, kk, n, out_dt) if plain and small else None
    balance = cpu_threads.Balance()  # this product's split between the threads
    n_threads = (lambda f: 1) if solo else threads_for  # noqa: E731

    def run(lhs: np.ndarray, rhs: np.ndarray, out: np.ndarray) -> None:
        # (the executable's call runs under np.errstate(over="ignore", invalid="ignore"))
        if fast is not None:
            fast(lhs, rhs, out)
            return
        if (plain and small or not direct) and spin.recording() is not None:
            raise spin.NotRecordable("a product numpy makes")
        if plain and small:
            np.matmul(lhs, rhs, out=out)
            return
        l3 = (lhs if lt is None else lhs.transpose(lt)).reshape(b, m, kk)
        r3 = (rhs if rt is None else rhs.transpose(rt)).reshape(b, kk, n)
        if (l3.dtype != comp or r3.dtype != comp) and spin.recording() is not None:
            raise spin.NotRecordable("a product of converted operands")
        if l3.dtype != comp:
            l3 = l3.astype(comp)
        if r3.dtype != comp:
            r3 = r3.astype(comp)
        if direct:
            matmul(l3, r3, out.reshape(b, m, n), n_threads(flops), balance)
        else:
            out.reshape(b, m, n)[...] = np.matmul(l3, r3).astype(out.dtype)

    return run


def split_axis(m: int, n: int, threads: int, k: int = 0) -> int | None:
    """How a product of ``b < threads`` matrices ``(m, k) @ (k, n)`` is cut across ``threads``
    (``matmul``): 3 along ``k`` (one matrix, ``k`` at least twice ``m`` and ``n`` and 64 per
    thread: the partial sums to add cost less than packing a long operand twice; ``k=0``: never),
    1 by the rows of the result, 2 by its columns (``n > m``), or None (one thread: too few rows
    and columns to give each part at least 8)."""
    if threads <= 1:
        return None
    if k >= 2 * max(m, n) and k >= 64 * threads:
        return 3
    if n > m and n >= 8 * threads:
        return 2
    if m >= 8 * threads:
        return 1
    return None


# ---- C = alpha * op(A) @ op(B) + beta * C through CBLAS ------------------------------------------

_CBLAS_ROW_MAJOR, _CBLAS_NO_TRANS, _CBLAS_TRANS = 101, 111, 112


def gemm_for(dtype: np.dtype) -> Any:
    """The CBLAS ``sgemm``/``dgemm`` (float32/float64) products call, as a ctypes function (which
    releases the GIL for the call), or None (another dtype, no CBLAS at hand): Intel MKL's where
    the ``mkl`` wheel is installed and ``config.cpu_mkl`` is on (``mkl_gemm_for``), else the one
    of the OpenBLAS numpy loaded (``openblas_gemm_for``)."""
    if config.cpu_mkl:
        fn = mkl_gemm_for(dtype)
        if fn is not None:
            return fn
    return openblas_gemm_for(dtype)


def _typed(fn: Any, real: Any, integer: Any) -> Any:
    i, n, p = ctypes.c_int, integer, ctypes.c_void_p
    fn.argtypes = [i, i, i, n, n, n, real, p, n, p, n, real, p, n]
    fn.restype = None
    fn.int_max = np.iinfo(np.int64 if integer is ctypes.c_int64 else np.int32).max
    return fn


def _letter(dtype: np.dtype) -> tuple[str, Any] | None:
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        return None
    return ("s", ctypes.c_float) if dtype == np.float32 else ("d", ctypes.c_double)


@functools.cache
def openblas_gemm_for(dtype: np.dtype) -> Any:
    """The CBLAS ``sgemm``/``dgemm`` of the OpenBLAS numpy loaded (``gemm_for``), or None: its
    64-bit-integer build (``scipy_openblas64``, numpy's wheels) or the 32-bit one."""
    lt = _letter(dtype)
    if lt is None:
        return None
    c, real = lt
    i64, i32 = ctypes.c_int64, ctypes.c_int32
    names = [(f"scipy_cblas_{c}gemm64_", i64), (f"cblas_{c}gemm64_", i64),
             (f"scipy_cblas_{c}gemm", i32), (f"cblas_{c}gemm", i32)]  # fmt: skip
    for path in _openblas_libs():
        with contextlib.suppress(OSError):
            lib = ctypes.CDLL(path)
            for name, integer in names:
                fn = getattr(lib, name, None)
                if fn is not None:
                    return _typed(fn, real, integer)
    return None


# MKL's runtime library as the ``mkl`` wheel installs it: in the environment's lib folder
_MKL_NAMES = ("libmkl_rt.so.3", "libmkl_rt.so.2", "libmkl_rt.so")
_MKL_SEQUENTIAL = 1  # MKL_THREADING_SEQUENTIAL of ``MKL_Set_Threading_Layer``


@functools.cache
def _mkl() -> Any:
    """MKL's ``libmkl_rt`` with its sequential threading layer (no threads of its own: blu splits
    the work, ``matmul``), or None (not installed, or the layer cannot be set)."""
    dirs = dict.fromkeys(os.path.join(p, "lib") for p in (sys.prefix, sys.base_prefix))
    for d in dirs:
        for name in _MKL_NAMES:
            path = os.path.join(d, name)
            if not os.path.exists(path):
                continue
            with contextlib.suppress(OSError, AttributeError):
                lib = ctypes.CDLL(path)
                lib.MKL_Set_Threading_Layer.argtypes = [ctypes.c_int]
                lib.MKL_Set_Threading_Layer.restype = ctypes.c_int
                if lib.MKL_Set_Threading_Layer(_MKL_SEQUENTIAL) == _MKL_SEQUENTIAL:
                    return lib
    return None


@functools.cache
def mkl_gemm_for(dtype: np.dtype) -> Any:
    """MKL's CBLAS ``sgemm``/``dgemm`` (``gemm_for``; 32-bit integers, its LP64 interface), or
    None. On the 2-core development machine (Intel Xeon, AVX-512), one thread, MKL ran the
    scan RNN's small product and most of the MLP step's faster than OpenBLAS
    (docs/benchmarks/cpu_backend.md, session 8)."""
    lt, lib = _letter(dtype), _mkl()
    if lt is None or lib is None:
        return None
    fn = getattr(lib, f"cblas_{lt[0]}gemm", None)
    return None if fn is None else _typed(fn, lt[1], ctypes.c_int32)


def _blas_operand(x: np.ndarray) -> tuple[int, int] | None:
    """(transpose flag, leading dimension) of a 2-D operand BLAS reads in place: rows contiguous
    (as it is) or columns contiguous (transposed), else None."""
    it = x.itemsize
    r, c = x.strides
    if x.shape[1] <= 1 or c == it:
        if r % it == 0 and r // it >= max(x.shape[1], 1):
            return _CBLAS_NO_TRANS, max(r // it, x.shape[1], 1)
    if x.shape[0] <= 1 or r == it:
        if c % it == 0 and c // it >= max(x.shape[0], 1):
            return _CBLAS_TRANS, max(c // it, x.shape[0], 1)
    return None


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: float, beta: float) -> bool:
    """``c = alpha * a @ b + beta * c`` in place for 2-D float32/float64 arrays (``c``'s rows
    contiguous; ``a`` and ``b`` either way) on one BLAS thread; False (nothing done) when the
    CBLAS function or the layout is not at hand (the caller computes it otherwise)."""
    fn = gemm_for(c.dtype)
    if fn is None or a.dtype != c.dtype or b.dtype != c.dtype:
        return False
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return True
    if k == 0:  # BLAS may leave c alone when k == 0: scale it as the product says
        if spin.recording() is not None:
            raise spin.NotRecordable("an empty contraction")
        if beta == 0:  # BLAS's beta = 0 never reads c (a NaN there does not stay)
            c[...] = 0
        else:
            c *= c.dtype.type(beta)
        return True
    la, lb = _blas_operand(a), _blas_operand(b)
    it = c.itemsize
    if la is None or lb is None or c.strides[1] != it or c.strides[0] % it:
        return False
    ldc = max(c.strides[0] // it, n)
    if max(m, n, k, la[1], lb[1], ldc) > fn.int_max:
        return False
    args = (_CBLAS_ROW_MAJOR, la[0], lb[0], m, n, k, alpha, address.data(a), la[1], address.data(b),
            lb[1], beta, address.data(c), ldc)  # fmt: skip
    ops = spin.recording()
    if ops is not None:  # a part handed to a spinning worker (``spin.py``): listed, not run
        spin.gemm_op(ops, fn, c.dtype == np.float64, args, (a, b, c))
        return True
    use_threads(1)
    fn(*args)
    return True


def mm(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``np.matmul(a, b, out=out)`` for 2-D arrays: through MKL (``gemm``) where it is installed
    and takes them, else numpy's own (its OpenBLAS: less call overhead than through ctypes)."""
    if spin.recording() is not None:  # (any CBLAS: the spinning worker calls it)
        if not gemm(a, b, out, 1.0, 0.0):
            raise spin.NotRecordable("a product BLAS cannot take in place")
        return
    if not (config.cpu_mkl and mkl_gemm_for(out.dtype) is not None and gemm(a, b, out, 1.0, 0.0)):
        np.matmul(a, b, out=out)


class SmallGemm:
    """``out = a @ b`` for C-contiguous ``(m, k) @ (k, n)`` arrays of one dtype through a CBLAS
    ``?gemm`` (MKL's, or OpenBLAS's where timing chose it: ``small_gemm``), made once per product
    of a program: a small product is called often (a scan body's, every iteration), and the
    generic path's checks cost a large part of it (reading an array's address, ``.ctypes.data``,
    builds an object: the last few arrays seen are remembered with their addresses; a loop body
    sees the same few arrays every iteration). ``tiles`` > 1: as that many calls, each on a block
    of the columns of ``b`` and ``out`` (widths multiples of 16 where ``n`` allows)."""

    __slots__ = ("fn", "m", "k", "n", "dtype", "seen", "cols", "last")

    def __init__(self, fn: Any, m: int, k: int, n: int, dtype: Any, tiles: int = 1):
        self.fn, self.m, self.k, self.n, self.dtype = fn, m, k, n, np.dtype(dtype)
        self.seen: list[tuple[Any, int]] = []  # (weak reference to an array, its address)
        it = self.dtype.itemsize  # (column offset in bytes, width) per call
        self.cols = [(lo * it, hi - lo) for lo, hi in _column_tiles(n, tiles)]
        self.last: tuple = ((), [])  # the last call's addresses and its calls' arguments

    def _address(self, x: np.ndarray) -> int:
        for a, p in self.seen:
            if a() is x:
                return p
        p = address.data(x)
        self.seen.append((weakref.ref(x), p))  # (never keeps a caller's array alive)
        if len(self.seen) > 6:
            del self.seen[0]
        return p

    def __call__(self, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        dt = self.dtype
        ok = a.flags.c_contiguous and b.flags.c_contiguous and out.flags.c_contiguous
        if not (ok and a.dtype == dt and b.dtype == dt and out.dtype == dt):
            if spin.recording() is not None:
                raise spin.NotRecordable("a product numpy casts")
            np.matmul(a, b, out=out)  # (it casts other dtypes)
            return
        fn = self.fn
        ptrs = (self._address(a), self._address(b), self._address(out))
        seen, calls = self.last  # (one read: another thread's call may replace it)
        if ptrs != seen:  # (a loop body: the same few arrays, the same few calls)
            m, k, n = self.m, self.k, self.n
            pa, pb, po = ptrs
            calls = [(_CBLAS_ROW_MAJOR, _CBLAS_NO_TRANS, _CBLAS_NO_TRANS, m, w, k, 1.0,
                      pa, k, pb + off, n, 0.0, po + off, n) for off, w in self.cols]  # fmt: skip
            self.last = (ptrs, calls)
        ops = spin.recording()
        for args in calls:
            if ops is not None:
                spin.gemm_op(ops, fn, dt == np.float64, args, (a, b, out))
            else:
                fn(*args)


def _column_tiles(n: int, tiles: int) -> list[tuple[int, int]]:
    """``range(n)`` cut into ``tiles`` nonempty blocks (fewer where ``n`` is short), their
    bounds multiples of 16 where that leaves each block 16 columns or more."""
    tiles = max(1, min(tiles, n))
    if tiles > 1 and n >= 16 * tiles:
        step = n // tiles // 16 * 16  # (a multiple of 16, rounded down: the last is longer)
        cuts = [step * i for i in range(tiles)] + [n]
        return list(zip(cuts[:-1], cuts[1:]))
    return [(n * i // tiles, n * (i + 1) // tiles) for i in range(tiles)]


TUNED_MIN_FLOPS = 1 << 20  # products from ~1 MFLOP to MIN_THREADED_FLOPS: their call timed
TILINGS = (1, 2, 4, 8, 16)  # column blocks tried (``_tuned_tiles``)


def small_gemm(m: int, k: int, n: int, dtype: Any) -> SmallGemm | None:
    """A ``SmallGemm`` for a product of these sizes where MKL is at hand (``config.cpu_mkl``, read
    now) and the sizes are not degenerate; else, for a float product of ``TUNED_MIN_FLOPS`` or
    more, OpenBLAS's ``?gemm`` whole or in column blocks where timing found that faster than
    numpy's matmul (``_tuned_tiles``); else None (numpy's ``matmul`` does it)."""
    fn = mkl_gemm_for(dtype) if config.cpu_mkl else None
    if min(m, k, n) < 1:
        return None
    if fn is not None:
        return SmallGemm(fn, m, k, n, dtype) if max(m, k, n) <= fn.int_max else None
    fn = openblas_gemm_for(dtype)
    if fn is None or max(m, k, n) > fn.int_max or 2.0 * m * k * n < TUNED_MIN_FLOPS:
        return None
    tiles = _tuned_tiles(m, k, n, np.dtype(dtype))
    return None if tiles == 0 else SmallGemm(fn, m, k, n, dtype, tiles)


@functools.cache
def _tuned_tiles(m: int, k: int, n: int, dtype: np.dtype) -> int:
    """How this process runs a ``(m, k) @ (k, n)`` product through OpenBLAS: 0 numpy's matmul,
    else a ``SmallGemm`` in that many column blocks; the fastest on scratch operands
    (``autotune.fastest``; numpy's matmul unless another is clearly faster)."""
    fn = openblas_gemm_for(dtype)
    a, b, out = np.zeros((m, k), dtype), np.zeros((k, n), dtype), np.empty((m, n), dtype)
    use_threads(1)  # (as the executable runs it)
    candidates: list[Any] = [lambda: np.matmul(a, b, out=out)]
    tilings = [0]
    for t in TILINGS:
        if len(_column_tiles(n, t)) == t and (t == 1 or n // t >= 16):
            g = SmallGemm(fn, m, k, n, dtype, t)
            candidates.append(lambda g=g: g(a, b, out))
            tilings.append(t)
    return tilings[autotune.fastest(candidates)]


def use_threads(n: int) -> None:
    """Set the BLAS's thread count to ``n`` (a no-op when it already is, or with no OpenBLAS)."""
    global _setter, _current
    if n == _current:
        return
    if _setter is None:
        _setter = _find_setter() or False
    if _setter:
        _setter(n)
    _current = n
