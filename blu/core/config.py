"""Configuration: every blu setting, read from its environment variable once (at import), then
changeable in code for the rest of the program or for a block.

    blu.config.update("log_compiles", True)
    with blu.config.override(log_compiles=True): ...
    blu.config.cache_dir  # read a flag

The environment only gives the starting values: after ``config.update("cache_dir", d)`` blu uses
``d`` whatever ``BLU_CACHE_DIR`` says, and setting ``os.environ`` after ``import blu`` changes
nothing (as JAX's flags). Code reads settings here, never from ``os.environ``.

Flags (environment variable, type, default):

- ``log_compiles`` (``BLU_LOG_COMPILES``, bool, False): log every jit trace with the reason the
  cache missed.
- ``debug_nans`` (``BLU_DEBUG_NANS``, bool, False): degenerate matrices raise ``LinAlgError``.
- ``debug`` (``BLU_DEBUG``, int 0-4, 0): debug output level.
- ``cache_dir`` (``BLU_CACHE_DIR``, path, ``~/.cache/blu``): the compiled-kernel cache.
- ``cache_max_bytes`` (``BLU_CACHE_MAX_BYTES``, int, 2 GiB): the kernel cache folder is trimmed
  to it, least recently used entries first.
- ``cache_key_file`` (``BLU_CACHE_KEY_FILE``, path, ``~/.config/blu/cache-key``): the per-user
  secret that signs the CPU's cache entries (made 0600 on first use; kept outside the cache).
- ``default_matmul_precision`` (``BLU_DEFAULT_MATMUL_PRECISION``, "fp32" | "tf32" | "bf16").
- ``jit_backend`` (``BLU_JIT_BACKEND``, "" | "mlir" | "numpy", ""): jit's CPU executor ("" is
  the default, compiled kernels; "numpy" the reference interpreter).
- ``cuda_graphs`` (``BLU_CUDA_GRAPHS``, "auto" | bool, "auto"): replay GPU programs as CUDA
  graphs: "auto" for programs of at least ``GRAPH_MIN_STEPS`` launches whose fresh outputs are
  small (a training step: its state goes back into donated buffers), true for every program
  without host fallbacks, false never.
- ``gpu_unroll`` (``BLU_GPU_UNROLL``, int or None, None): the row-loop unroll limit of GPU
  kernels (None: the built-in default; 0: never unrolled).
- ``gpu_rows`` (``BLU_GPU_ROWS``, "block" | "warp", "block"): the GPU row-kernel form.
- ``dump_ir`` (``BLU_DUMP_IR``, path or "", ""): a folder to write each kernel's IR to.
- ``cache_no_so`` (``BLU_CACHE_NO_SO``, bool, False): keep no shared objects in the cache.
- ``fake_gpu`` (``BLU_FAKE_GPU``, bool, False): a simulated GPU stands in for real ones.
- ``profile`` (``BLU_PROFILE``, bool, False): time each GPU kernel; print a table at exit.
- ``num_cpu_devices`` (``BLU_NUM_CPU_DEVICES``, int, 1): virtual CPU devices for ``shard``.
- ``parallel_backend`` (``BLU_PARALLEL_BACKEND``, "nccl" | "cpu" or None, None): the process
  group backend of ``blu.parallel.initialize`` (None: NCCL when available).
- ``cudnn_attention`` (``BLU_CUDNN_ATTENTION``, bool, True): plans for CUDA targets run bf16/fp16
  attention through cuDNN's fused SDPA (``nvidia-cudnn-frontend``); off, through blu's own
  kernels. A plan must not depend on the machine that lowers it (AOT on a CPU machine), so this
  is a setting, not a probe.
- ``cudnn_conv`` (``BLU_CUDNN_CONV``, bool, True): plans for CUDA targets run
  ``conv_general_dilated`` (forward, input and kernel gradients) through cuDNN's convolution
  graphs (``blu.cuda.cudnn_conv``; other layouts transposed to ones cuDNN takes); off, through
  the im2col decomposition. On since its GPU tests passed on an H200 (2026-12-05); a setting,
  not a probe, as ``cudnn_attention``.
- ``flash_attention`` (``BLU_FLASH_ATTENTION``, bool, True): plans for CUDA targets run float32
  attention (and bf16/fp16 where cuDNN is off) through blu's own flash kernels
  (``blu.lower.cuda.flash``); off, through the unfused decomposition.
- ``disable_jit`` (``BLU_DISABLE_JIT``, bool, False): ``jit`` runs its function eagerly
  (``blu.disable_jit()``, as ``jax_disable_jit``).
- ``jit_cache_size`` (``BLU_JIT_CACHE_SIZE``, int >= 1, 256): traces kept per jitted function
  (one per signature), least recently used dropped first.
- ``executable_cache_size`` (``BLU_EXECUTABLE_CACHE_SIZE``, int >= 1, 256): compiled programs
  kept in the process (jit, AOT ``Compiled``, eager GPU operations), least recently used first.
- ``kernel_cache_size`` (``BLU_KERNEL_CACHE_SIZE``, int >= 1, 1024): loaded kernels kept for
  reuse by new programs beyond those the cached programs hold (a dropped one is loaded again
  from the disk cache, ``cache_dir``, when needed).
- ``gpu_memory_limit`` (``BLU_GPU_MEMORY_LIMIT``, int bytes, 0): the most device memory the
  caching allocator of each GPU (real or simulated) may hold from the driver; 0: no cap (as
  PyTorch's ``set_per_process_memory_fraction``). Past it, allocations raise
  ``BluOutOfMemoryError`` as if the device were full.
- ``cpu_threads`` (``BLU_CPU_THREADS``, int >= 1, None): threads the CPU executable splits its
  large work across: matrix products (each part on single-threaded BLAS), fused kernels whose
  rows are independent (``blu/lower/cpu/rows.py``) and attention kernels (by batch entry);
  None: the cores the process may use (``blu/lower/cpu/blas.py``, ``threads.py``).
- ``gpu_kernels`` (``BLU_GPU_KERNELS``, 1 | 2 | 3, 2): the GPU kernel emitter's generation: 2
  issues several independent loads per thread in strided loops and keeps a row group's
  per-row totals in registers; 1 is the emitter before that (kept for before/after timing,
  ``benchmarks/gpu_kernels.py``); 3 adds the online softmax normalizer and 128-bit row runs
  (``codegen_online.py``; opt-in: the H200 step measured no faster, docs/benchmarks/gpt2_gpu.md,
  session 6). Part of
  every GPU kernel's cache key.
- ``flash_tensor_cores`` (``BLU_FLASH_TENSOR_CORES``, bool, True): blu's float32 flash-attention
  kernels use tensor cores (``blu.lower.cuda.flash_tc``: TF32 ``mma.sync``, one product per
  multiply under ``default_matmul_precision="tf32"``, three (3xTF32, float32 accuracy) under
  "fp32") where a tensor-core form exists; off, the CUDA-core kernels.
- ``gemm_search`` (``BLU_GEMM_SEARCH``, bool, True): on a GPU, time cuBLASLt's candidate
  algorithms on each product's first call and keep the fastest (``blu.cuda.gemm_search``); off,
  the heuristic's first choice.
- ``gpu_epilogues`` (``BLU_GPU_EPILOGUES``, bool, True): CUDA programs compute a product, its bias
  and the tanh GELU as one cuBLASLt call (``GELU_AUX_BIAS``; ``blu.lower.cuda.epilogues``); off,
  the product and a fused kernel.
- ``gpu_gelu_aux`` (``BLU_GPU_GELU_AUX``, bool, True): with ``gpu_epilogues``, the MLP's product,
  bias and tanh GELU are one ``GELU_AUX_BIAS`` call; off, the product and bias are one ``BIAS``
  call writing the pre-activation and the GELU a fused kernel (both keep the backward's ``DGELU``
  product; which is faster depends on the GPU's cuBLASLt kernels, ``blu.lower.cuda.epilogues``).
- ``gpu_row_prefetch`` (``BLU_GPU_ROW_PREFETCH``, bool, True): GPU row groups whose blocks loop
  over rows (a layer norm's backward with its gain and bias gradients) load the next row before
  the current row's block reductions (``blu.lower.cuda.codegen_prefetch``; on the H100 GPT-2
  124M's layer-norm backward went from 44% to 63% of copy bandwidth). Off: part of every GPU
  kernel's cache key.
- ``gpu_exp`` (``BLU_GPU_EXP``, ``"ex2"`` | ``"ex2-reduced"`` | ``"poly"``, ``"ex2"``): how GPU
  kernels compute a float32 ``exp`` (and the functions built on it: ``logistic``, ``expm1``):
  ``ex2-reduced`` reduces the argument and calls the special-function unit's ``ex2.approx.f32``
  (within 3.2 ulp; half the instructions) and divides ``logistic``'s ``n / (1 + e**-|x|)`` by
  ``div.approx.f32`` (2 ulp); ``ex2`` does the same, but an argument known to be ``<= 0`` (a
  softmax's ``x - max(x)``: ``blu.lower.plan.signs``) goes to ``ex2.approx`` unreduced (2 of
  ``exp``'s 11 instructions; within 2.5 * 2**-23 of the result); ``poly`` the CPU's Cephes
  polynomial (within 2 ulp; ``blu.lower.mlir.mathlib.exp``) and the correctly rounded division.
  Part of every GPU kernel's cache key.
- ``gpu_group_columns`` (``BLU_GPU_GROUP_COLUMNS``, bool, True): a GPU row group followed by
  column reductions over its rows (a layer norm backward's gain and bias gradients, next to the
  input gradient) runs them in its own pass: each block loops over rows keeping column partials
  in registers (``blu.lower.cuda.codegen_rows``); off, a separate split reduction reads the rows
  again. Part of every GPU kernel's cache key.
- ``gpu_column_blocks`` (``BLU_GPU_COLUMN_BLOCKS``, int >= 1, None): the blocks of a GPU row
  group that also reduces its columns (``blu.lower.cuda.codegen_rows.column_blocks``: each block
  loops over rows and stores one partial a column; fewer blocks, fewer partials for the second
  stage to combine), at most one per 16 rows. None: about ``COLUMN_THREADS`` (2**16) threads.
  Part of every GPU kernel's cache key when set.
- ``gpu_row_stash`` (``BLU_GPU_ROW_STASH``, int >= 0 bytes, None): the most shared memory a
  looped GPU row group (rows too long for registers: a classifier's logits) keeps its row's
  inputs in, so that its passes read the row from global memory once
  (``blu.lower.cuda.codegen_stash``). None: as much as the chip gives a block (225 KiB on
  sm_90); 0: no stash. Part of every GPU kernel's cache key when set.
- ``gpu_map_values`` (``BLU_GPU_MAP_VALUES``, int >= 1, 16): most values a thread of a GPU
  elementwise loop stores per chunk (``blu.lower.cuda.codegen_strided.map_unroll``): each thread
  takes 16 bytes of the narrowest buffer (8 bfloat16 elements), halved until the chunk stores at
  most this many values (registers: they are live at once). 24 keeps 16-byte accesses for
  three-output bfloat16 nests (a SwiGLU backward) at about 48 registers a thread. Part of every
  GPU kernel's cache key.
- ``packed_attention`` (``BLU_PACKED_ATTENTION``, bool, True): CUDA programs give the fused
  attention its ``q, k, v`` (and take ``dq, dk, dv`` back) as strided slices of the QKV product's
  array (``blu.lower.cuda.packed_attention``); off, as copies.
- ``unroll_scans`` (``BLU_UNROLL_SCANS``, int, 16): CUDA programs unroll scans of at most this
  many iterations before the plan (``blu.lower.plan.scan_unroll``: a model scanned over its
  blocks gets the unrolled model's rewrites and memory plan); 0: only scans whose ``unroll``
  asks for it; longer scans run as loop nodes.
- ``cuda_conditional_nodes`` (``BLU_CUDA_CONDITIONAL_NODES``, bool, True): a ``while_loop`` on a
  GPU runs as a CUDA graph with a conditional WHILE node (drivers >= 12.4; the predicate never
  goes to the host); off, the host reads the predicate after each iteration.
- ``cpu_mkl`` (``BLU_CPU_MKL``, bool, True): CPU matrix products (float32/float64) call Intel
  MKL's ``cblas_sgemm``/``dgemm`` (its sequential layer: blu splits the work across its own
  threads) where the ``mkl`` wheel is installed (``pip install blu[cpu-mkl]``); off, or without
  it, numpy's OpenBLAS (``blu/lower/cpu/blas.py``).
- ``cpu_spin`` (``BLU_CPU_SPIN``, bool, True): the parts of a split CPU step run on worker
  threads that wait in a native loop while an executable runs (``blu/lower/cpu/spin.py``) instead
  of blocking between parts; off, or where MLIR cannot compile that loop, on the blocking pool.

Every variable is parsed by one function (``parse_setting``): booleans are ``1``, ``true``,
``yes``, ``on`` or ``0``, ``false``, ``no``, ``off`` (any case); a value that does not parse (a
boolean ``maybe``, a count ``zero``, a choice not offered) raises ``BluValueError`` naming the
variable, its value and what is expected, when blu is imported. An empty variable is unset.

``update`` sets a flag for the whole process. ``override`` (and ``blu.disable_jit()``, built on
it) sets flags for a ``with`` block in the current context only (a ``contextvars`` context: the
current thread, or asyncio task), as JAX's thread-local configuration: another thread's flags are
not changed by it, and overlapping blocks in two threads each restore their own. A thread starts
with the process-wide values. ``config.generation`` changes whenever the flags this context sees
may have (``blu/transforms/dispatch.py`` compares it).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Callable, Iterator
from typing import Any

from blu.core import forks
from blu.core.errors import BluValueError

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _bool(raw: str) -> bool:
    """A boolean (``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off``, any case)."""
    v = raw.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError("a boolean: 1, true, yes, on or 0, false, no, off")


def _auto_bool(raw: str) -> Any:
    if raw.strip().lower() == "auto":
        return "auto"
    try:
        return _bool(raw)
    except ValueError:
        raise ValueError("auto or a boolean: 1, true, yes, on or 0, false, no, off") from None


def _int(lo: int, hi: int | None = None, what: str = "a whole number") -> Callable[[str], int]:
    """A parser of whole numbers in ``[lo, hi]`` (``hi`` None: no upper bound)."""
    bound = f" from {lo} to {hi}" if hi is not None else f" >= {lo}"

    def parse(raw: str) -> int:
        try:
            v = int(raw.strip())
        except ValueError:
            v = None
        if v is None or v < lo or (hi is not None and v > hi):
            raise ValueError(what + bound)
        return v

    return parse


def _choice(*options: str) -> Callable[[str], str]:
    """A parser of one of ``options`` (any case, surrounding blanks ignored)."""

    def parse(raw: str) -> str:
        v = raw.strip().lower()
        if v not in options:
            raise ValueError("one of " + ", ".join(repr(o) for o in options))
        return v

    return parse


def _str(raw: str) -> str:
    return raw


_BYTES = "a whole number of bytes"
_PRECISIONS = ("fp32", "tf32", "bf16", "highest", "high", "default")  # JAX's names too

# name -> (environment variable, parser of a non-empty value, default when unset or empty)
FLAGS: dict[str, tuple[str, Callable[[str], Any], Any]] = {
    "log_compiles": ("BLU_LOG_COMPILES", _bool, False),
    "debug_nans": ("BLU_DEBUG_NANS", _bool, False),
    "debug": ("BLU_DEBUG", _int(0, 4), 0),
    "cache_dir": ("BLU_CACHE_DIR", _str, os.path.join(os.path.expanduser("~"), ".cache", "blu")),
    "default_matmul_precision": ("BLU_DEFAULT_MATMUL_PRECISION", _choice(*_PRECISIONS), "fp32"),
    "jit_backend": ("BLU_JIT_BACKEND", _choice("mlir", "numpy"), ""),
    "cuda_graphs": ("BLU_CUDA_GRAPHS", _auto_bool, "auto"),
    "gpu_unroll": ("BLU_GPU_UNROLL", _int(0), None),
    "gpu_rows": ("BLU_GPU_ROWS", _choice("block", "warp"), "block"),
    "dump_ir": ("BLU_DUMP_IR", _str, ""),
    "cache_no_so": ("BLU_CACHE_NO_SO", _bool, False),
    "fake_gpu": ("BLU_FAKE_GPU", _bool, False),
    "profile": ("BLU_PROFILE", _bool, False),
    "num_cpu_devices": ("BLU_NUM_CPU_DEVICES", _int(1), 1),
    "parallel_backend": ("BLU_PARALLEL_BACKEND", _choice("nccl", "mpi", "cpu"), None),
    "disable_jit": ("BLU_DISABLE_JIT", _bool, False),
    "cache_max_bytes": ("BLU_CACHE_MAX_BYTES", _int(0, what=_BYTES), 2 << 30),
    "cache_key_file": (
        "BLU_CACHE_KEY_FILE",
        _str,
        os.path.join(os.path.expanduser("~"), ".config", "blu", "cache-key"),
    ),
    "cudnn_attention": ("BLU_CUDNN_ATTENTION", _bool, True),
    "cudnn_conv": ("BLU_CUDNN_CONV", _bool, True),
    "jit_cache_size": ("BLU_JIT_CACHE_SIZE", _int(1), 256),
    "executable_cache_size": ("BLU_EXECUTABLE_CACHE_SIZE", _int(1), 256),
    "kernel_cache_size": ("BLU_KERNEL_CACHE_SIZE", _int(1), 1024),
    "flash_attention": ("BLU_FLASH_ATTENTION", _bool, True),
    "gpu_memory_limit": ("BLU_GPU_MEMORY_LIMIT", _int(0, what=_BYTES), 0),
    "cpu_threads": ("BLU_CPU_THREADS", _int(1), None),
    "gpu_kernels": ("BLU_GPU_KERNELS", _int(1, 3), 2),
    "flash_tensor_cores": ("BLU_FLASH_TENSOR_CORES", _bool, True),
    "gemm_search": ("BLU_GEMM_SEARCH", _bool, True),
    "gpu_epilogues": ("BLU_GPU_EPILOGUES", _bool, True),
    "gpu_gelu_aux": ("BLU_GPU_GELU_AUX", _bool, True),
    "gpu_row_prefetch": ("BLU_GPU_ROW_PREFETCH", _bool, True),
    "gpu_exp": ("BLU_GPU_EXP", _choice("ex2", "ex2-reduced", "poly"), "ex2"),
    "gpu_group_columns": ("BLU_GPU_GROUP_COLUMNS", _bool, True),
    "gpu_map_values": ("BLU_GPU_MAP_VALUES", _int(1), 16),
    "gpu_column_blocks": ("BLU_GPU_COLUMN_BLOCKS", _int(1), None),
    "gpu_row_stash": ("BLU_GPU_ROW_STASH", _int(0, what=_BYTES), None),
    "packed_attention": ("BLU_PACKED_ATTENTION", _bool, True),
    "unroll_scans": ("BLU_UNROLL_SCANS", _int(0), 16),
    "cuda_conditional_nodes": ("BLU_CUDA_CONDITIONAL_NODES", _bool, True),
    "cpu_mkl": ("BLU_CPU_MKL", _bool, True),
    "cpu_spin": ("BLU_CPU_SPIN", _bool, True),
}


def parse_setting(var: str, raw: str, parse: Callable[[str], Any] | None = None) -> Any:
    """The value of environment variable ``var`` holding ``raw`` (non-empty), parsed by
    ``parse`` (default: the parser of the flag read from ``var``).

    Raises:
        BluValueError: ``raw`` does not parse; the message names the variable, the value and
            what is expected (``BLU_DEBUG='x': expected a whole number from 0 to 4``).
    """
    if parse is None:
        parse = next(p for v, p, _ in FLAGS.values() if v == var)
    try:
        return parse(raw)
    except ValueError as e:
        raise BluValueError(f"{var}={raw!r}: expected {e}") from None


def read_environment(environ: Any = None) -> dict[str, Any]:
    """Every flag's value from ``environ`` (default ``os.environ``): what ``config`` starts with.

    Raises:
        BluValueError: a variable does not parse (``parse_setting``).
    """
    environ = os.environ if environ is None else environ
    out = {}
    for name, (var, parse, default) in FLAGS.items():
        raw = environ.get(var, "")
        out[name] = parse_setting(var, raw, parse) if raw.strip() else default
    return out


def _env_int(name: str, default: int) -> int:
    """Environment variable ``name`` as a whole number of bytes (``default`` when unset)."""
    raw = os.environ.get(name, "").strip()
    return parse_setting(name, raw, _int(0, what=_BYTES)) if raw else default


class Config:
    """The flags (``blu.config``); attributes read them, ``update`` sets them for the process,
    ``override`` for a block of the current context (thread)."""

    def __init__(self, environ: Any = None) -> None:
        self.__dict__["_values"] = read_environment(environ)
        self.__dict__["_lock"] = forks.lock()  # (renewed in a forked child)
        # the current context's overrides: None, or a dict (a new one per ``override`` block)
        self.__dict__["_local"] = contextvars.ContextVar(f"blu_config_{id(self)}", default=None)
        self.__dict__["_gen"] = 0  # bumped by every ``update``

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        local = d["_local"].get()
        if local is not None and name in local:
            return local[name]
        try:
            return d["_values"][name]
        except KeyError:
            raise AttributeError(f"blu.config has no flag {name!r}") from None

    @property
    def generation(self) -> tuple:
        """What changes whenever the flags seen here may have: the count of ``update`` calls and
        this context's overrides (compared by ``blu/transforms/dispatch.py``)."""
        d = self.__dict__
        return d["_gen"], d["_local"].get()

    def __setattr__(self, name: str, value: Any) -> None:
        raise BluValueError(f"set flags with blu.config.update({name!r}, value)")

    def _check(self, name: str) -> None:
        if name not in self._values:
            raise BluValueError(f"blu.config has no flag {name!r}; flags: {sorted(self._values)}")

    def update(self, name: str, value: Any) -> None:
        """Set a flag for the rest of the program, in every thread (whatever its environment
        variable says; a thread's ``override`` block still shows its own value until it ends).

        Raises:
            BluValueError: no flag of that name.
        """
        self._check(name)
        with self._lock:
            self._values[name] = value
            self.__dict__["_gen"] += 1

    @contextlib.contextmanager
    def override(self, **flags: Any) -> Iterator[None]:
        """Set flags for the duration of a ``with`` block, in the current context only (the
        current thread: others keep theirs); restored on exit, also on error.

        Raises:
            BluValueError: no flag of one of the names.
        """
        for k in flags:
            self._check(k)
        var = self.__dict__["_local"]
        outer = var.get()
        var.set({**outer, **flags} if outer else dict(flags))
        try:
            yield
        finally:
            var.set(outer)

    def values(self) -> dict[str, Any]:
        """A copy of every flag's current value (in this context)."""
        local = self.__dict__["_local"].get()
        return {**self._values, **local} if local else dict(self._values)


config = Config()


@forks.in_child
def _after_fork() -> None:
    """A child forked while another thread ran ``update`` gets the lock fresh."""
    config.__dict__["_lock"] = forks.renew(config.__dict__["_lock"])
