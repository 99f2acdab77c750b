"""Matrix products through cuBLASLt (``nvmath.bindings.cublasLt``), with cached plans.

nvmath's high-level ``Matmul`` costs far more host time per call than the GPU needs for a GPT-2
sized product (measured on an H200, DESIGN.md §3), so blu calls the bindings
directly: for each distinct problem (shapes, dtypes, transposes, epilogue, precision, pointer
alignments) it creates the matmul descriptor, the four matrix layouts and the preference once,
asks the heuristic for an algorithm once, and afterwards each call is one ``cublasLtMatmul``
(plus a pointer attribute set when a bias or aux pointer changed).

**Row-major by swapping operands** (``blu.cuda.gemm_layout``: ``gemm_spec``): cuBLAS's ``A`` is
blu's *rhs*, cuBLAS's ``B`` is blu's *lhs*, ``m = N``, ``n = M``; ``D`` is the row-major output.

Consequences of the swap for epilogues: cuBLASLt's bias has one entry per row of ``D``, i.e.
per *column* of blu's output (``x @ W + b`` with ``b`` of shape ``(N,)``, as in a linear layer);
``BGRADA`` reduces cuBLAS's ``A`` = blu's rhs over ``k`` (``"bgrad_rhs"``: with
``dW = x^T @ dY`` it gives ``db = dY.sum(0)``), ``BGRADB`` reduces blu's lhs (``"bgrad_lhs"``;
cuBLASLt requires ``TRANSB``, i.e. an lhs stored ``(K, M)``). The GELU aux matrix has
``ld = round_up(N, 8)`` elements, i.e. it is a row-major ``(M, round_up(N, 8))`` array.

Epilogue names (blu ↔ cuBLASLt): ``none`` DEFAULT, ``bias`` BIAS, ``relu`` RELU, ``relu_bias``
RELU_BIAS, ``gelu`` GELU, ``gelu_bias`` GELU_BIAS, ``gelu_aux`` GELU_AUX (also writes the GELU
input to aux, for the backward pass), ``gelu_aux_bias`` GELU_AUX_BIAS, ``dgelu`` DGELU
(``D = gelu'(aux) * (lhs @ rhs)``), ``dgelu_bgrad`` DGELU_BGRAD (also writes the bias gradient),
``bgrad_rhs`` BGRADA, ``bgrad_lhs`` BGRADB. GELU is the tanh approximation (GPT-2's).

Precision (``blu.default_matmul_precision``, JAX's names too): for float32 operands ``"fp32"``/
``"highest"`` → ``CUBLAS_COMPUTE_32F`` (strict), ``"tf32"``/``"high"`` → ``32F_FAST_TF32``,
``"bf16"`` → ``32F_FAST_16BF``; bfloat16/float16 operands always accumulate in float32
(``COMPUTE_32F``), float64 in float64.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from blu.core.errors import BluTypeError, BluValueError
from blu.cuda import gemm_search
from blu.cuda.errors import CudaError
from blu.cuda.gemm_layout import GemmSpec, gemm_spec  # noqa: F401  (gemm_spec: re-exported)

# ---- ABI constants (cublas_api.h / library_types.h / cublasLt.h; stable across releases) --------

CUDA_R = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 14}
COMPUTE = {"32F": 68, "32F_FAST_TF32": 77, "32F_FAST_16BF": 75, "32F_FAST_16F": 74, "64F": 70}
OP_N, OP_T = 0, 1

# cublasLtMatmulDescAttributes_t: (value, dtype of the attribute)
DESC = {
    "COMPUTE_TYPE": (0, np.int32),
    "SCALE_TYPE": (1, np.int32),
    "TRANSA": (3, np.int32),
    "TRANSB": (4, np.int32),
    "EPILOGUE": (7, np.uint32),
    "BIAS_POINTER": (8, np.int64),
    "BIAS_BATCH_STRIDE": (10, np.int64),
    "EPILOGUE_AUX_POINTER": (11, np.int64),
    "EPILOGUE_AUX_LD": (12, np.int64),
    "EPILOGUE_AUX_BATCH_STRIDE": (13, np.int64),
}
LAYOUT = {"BATCH_COUNT": (5, np.int32), "STRIDED_BATCH_OFFSET": (6, np.int64)}
PREF = {
    "MAX_WORKSPACE_BYTES": (1, np.uint64),
    "MIN_ALIGNMENT_A_BYTES": (5, np.uint32),
    "MIN_ALIGNMENT_B_BYTES": (6, np.uint32),
    "MIN_ALIGNMENT_C_BYTES": (7, np.uint32),
    "MIN_ALIGNMENT_D_BYTES": (8, np.uint32),
}
# cublasLtEpilogue_t
EPILOGUES = {
    "none": 1,  # DEFAULT
    "relu": 2,
    "bias": 4,
    "relu_bias": 6,
    "gelu": 32,
    "gelu_bias": 36,
    "gelu_aux": 160,
    "gelu_aux_bias": 164,
    "dgelu": 192,
    "dgelu_bgrad": 208,
    "bgrad_rhs": 256,  # BGRADA: cuBLAS's A is blu's rhs
    "bgrad_lhs": 512,  # BGRADB
}
_NEEDS_BIAS = {"bias", "relu_bias", "gelu_bias", "gelu_aux_bias"}  # bias is an input
_WRITES_BIAS = {"dgelu_bgrad", "bgrad_rhs", "bgrad_lhs"}  # bias pointer receives a gradient
_NEEDS_AUX = {"gelu_aux", "gelu_aux_bias", "dgelu", "dgelu_bgrad"}

PRECISIONS = ("default", "highest", "high", "fp32", "tf32", "bf16")
HEURISTIC_CANDIDATES = 8
DEFAULT_WORKSPACE = 32 * 1024 * 1024  # NVIDIA's advice for Hopper


def dtype_name(dtype: Any) -> str:
    name = np.dtype(dtype).name
    if name not in CUDA_R:
        raise BluTypeError(
            f"cuBLASLt: unsupported dtype {name} (float32, float64, bfloat16, float16)"
        )
    return name


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (Hendrycks & Gimpel 2016, eq. in §2; GPT-2's ``gelu_new``)."""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def gelu_tanh_grad(x: np.ndarray) -> np.ndarray:
    """d/dx of ``gelu_tanh``."""
    c = np.sqrt(2.0 / np.pi)
    t = np.tanh(c * (x + 0.044715 * x**3))
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3 * 0.044715 * x * x)


def compute_type(in_dtype: str, precision: str) -> tuple[str, str]:
    """``(compute type, scale dtype)`` for operands of ``in_dtype`` at ``precision``.

    Raises:
        BluValueError: an unknown precision name.
    """
    if precision not in PRECISIONS:
        raise BluValueError(f"matmul precision {precision!r} is not one of {PRECISIONS}")
    if precision == "default":
        from blu.core.config import config

        precision = config.default_matmul_precision
    if in_dtype == "float64":
        return "64F", "float64"
    if in_dtype in ("bfloat16", "float16"):
        return "32F", "float32"
    return {
        "fp32": "32F",
        "highest": "32F",
        "tf32": "32F_FAST_TF32",
        "high": "32F_FAST_TF32",
        "bf16": "32F_FAST_16BF",
    }.get(precision, "32F"), "float32"


def _check_dtypes(a: str, b: str, d: str) -> None:
    ok = {
        ("float32", "float32"),
        ("float64", "float64"),
        ("bfloat16", "bfloat16"),
        ("bfloat16", "float32"),
        ("float16", "float16"),
        ("float16", "float32"),
    }
    if a != b or (a, d) not in ok:
        raise BluTypeError(
            f"cuBLASLt: unsupported dtypes lhs {b}, rhs {a}, out {d} (same operand dtypes; "
            "out equal to them or float32 for bfloat16/float16)"
        )


def alignment(ptr: int) -> int:
    """Largest power of two (at most 256) dividing a device address."""
    if ptr == 0:
        return 256
    return min(256, ptr & -ptr)


@dataclasses.dataclass(frozen=True)
class MatmulKey:
    """What a cached plan depends on."""

    spec: GemmSpec
    a_dtype: str
    d_dtype: str
    compute: str
    epilogue: str
    align: tuple[int, int, int, int]  # a, b, c, d
    accumulate: bool  # beta != 0 (C = D read and added)


class _Plan:
    __slots__ = (
        "desc",
        "layouts",
        "pref",
        "heuristics",
        "algo_ptr",
        "workspace_size",
        "alpha",
        "beta0",
        "beta1",
        "bias_ptr",
        "aux_ptr",
        "count",
        "searched",
    )


def _load_nvmath() -> Any:
    try:
        from nvmath.bindings import cublasLt
    except ImportError as e:
        raise CudaError(
            "matrix products on the GPU need nvmath-python (pip install nvmath-python; on the GPU "
            f"test machine scripts/gpu_check.sh installs it from .whl/): {e}",
            call="import nvmath.bindings.cublasLt",
        ) from e
    return cublasLt


class CublasLt:
    """A cuBLASLt handle with cached plans; one per device (``blu.cuda.matmul_handle``).

    Args:
        workspace: ``(device address, bytes)`` of scratch memory for cuBLASLt (32 MiB advised),
            which must outlive the handle; ``(0, 0)`` allows only workspace-free algorithms.
        lib: the ``nvmath.bindings.cublasLt`` module (default), or a stand-in for tests.
        search: time cuBLASLt's candidate algorithms on a product's first call and keep the
            fastest (``blu.cuda.gemm_search``); else the heuristic's first choice.
        timer_for, capturing: ``timer_for(stream)`` times queued work, ``capturing(stream)``
            says whether the stream is being captured into a graph (no search then; defaults:
            CUDA events and ``cuStreamIsCapturing``); stand-ins for tests.
    """

    def __init__(
        self,
        workspace: tuple[int, int] = (0, 0),
        lib: Any = None,
        search: bool = False,
        timer_for: Any = None,
        capturing: Any = None,
    ):
        self.lib = lib if lib is not None else _load_nvmath()
        self.search = search
        self._timer_for = timer_for or gemm_search.event_timer
        self._capturing = capturing or gemm_search.is_capturing
        self.num_searches = 0
        self.workspace_ptr, self.workspace_bytes = workspace
        self.handle = self._call("create")
        self.plans: dict[MatmulKey, _Plan] = {}
        self.num_heuristic_queries = 0

    # ---- low-level helpers ---------------------------------------------------------------------

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self.lib, name)(*args)
        except Exception as e:  # cuBLASLtError: name the call (the status is in the message)
            if isinstance(e, CudaError):
                raise
            raise CudaError(f"cublasLt.{name} failed: {e}", call=f"cublasLt.{name}") from e

    def _set(self, fn: str, handle: int, table: dict, attr: str, value: int) -> None:
        code, dt = table[attr]
        buf = np.array([value], dtype=dt)
        self._call(fn, handle, code, buf.ctypes.data, buf.itemsize)

    def _set_desc(self, desc: int, attr: str, value: int) -> None:
        self._set("matmul_desc_set_attribute", desc, DESC, attr, value)

    # ---- planning ------------------------------------------------------------------------------

    def plan(self, key: MatmulKey, bias_ptr: int = 0, aux_ptr: int = 0) -> _Plan:
        """The cached plan for ``key``, made on first use (descriptors, layouts, algorithm)."""
        p = self.plans.get(key)
        if p is not None:
            return p
        s = key.spec
        p = _Plan()
        compute, scale = (
            COMPUTE[key.compute],
            CUDA_R["float64" if key.compute == "64F" else "float32"],
        )
        p.desc = self._call("matmul_desc_create", compute, scale)
        self._set_desc(p.desc, "TRANSA", OP_T if s.trans_a else OP_N)
        self._set_desc(p.desc, "TRANSB", OP_T if s.trans_b else OP_N)
        ep = key.epilogue
        if ep != "none":
            self._set_desc(p.desc, "EPILOGUE", EPILOGUES[ep])
        if ep in _NEEDS_BIAS or ep in _WRITES_BIAS:
            # a placeholder until the call's own pointer: the heuristic wants one set
            self._set_desc(p.desc, "BIAS_POINTER", bias_ptr or 256)
            if s.batch > 1:
                n_bias = s.n if ep == "bgrad_lhs" else s.m
                self._set_desc(p.desc, "BIAS_BATCH_STRIDE", n_bias if ep in _WRITES_BIAS else 0)
        if ep in _NEEDS_AUX:
            self._set_desc(p.desc, "EPILOGUE_AUX_POINTER", aux_ptr or 256)
            self._set_desc(p.desc, "EPILOGUE_AUX_LD", s.aux_ld)
            if s.batch > 1:
                self._set_desc(p.desc, "EPILOGUE_AUX_BATCH_STRIDE", s.aux_ld * s.n)
        p.bias_ptr, p.aux_ptr = bias_ptr or 256, aux_ptr or 256
        a_t, d_t = CUDA_R[key.a_dtype], CUDA_R[key.d_dtype]
        p.layouts = (
            self._layout(a_t, s.a_rows, s.a_cols, s.lda, s.batch, s.stride_a),
            self._layout(a_t, s.b_rows, s.b_cols, s.ldb, s.batch, s.stride_b),
            self._layout(d_t, s.m, s.n, s.ldd, s.batch, s.stride_d),  # C
            self._layout(d_t, s.m, s.n, s.ldd, s.batch, s.stride_d),  # D
        )
        p.pref = self._call("matmul_preference_create")
        self._set(
            "matmul_preference_set_attribute",
            p.pref,
            PREF,
            "MAX_WORKSPACE_BYTES",
            self.workspace_bytes,
        )
        for name, al in zip("ABCD", key.align):
            self._set(
                "matmul_preference_set_attribute", p.pref, PREF, f"MIN_ALIGNMENT_{name}_BYTES", al
            )
        wanted = gemm_search.CANDIDATES if self.search else HEURISTIC_CANDIDATES
        p.heuristics = self._heuristics(wanted)
        count = np.zeros(1, np.int32)
        self.num_heuristic_queries += 1
        a_l, b_l, c_l, d_l = p.layouts
        self._call(
            "matmul_algo_get_heuristic",
            self.handle,
            p.desc,
            a_l,
            b_l,
            c_l,
            d_l,
            p.pref,
            wanted,
            p.heuristics.ctypes.data,
            count.ctypes.data,
        )
        if count[0] == 0:
            raise CudaError(
                f"cuBLASLt found no algorithm for {key} (workspace {self.workspace_bytes} bytes)",
                call="cublasLt.matmul_algo_get_heuristic",
            )
        # ranked best first; "algo" is the struct's first field. The others stay for a search.
        p.count = int(count[0]) if self.search else 1
        p.heuristics = p.heuristics[: p.count].copy()
        p.searched = not self.search or p.count == 1
        self._choose(p, 0)
        scale_dt = np.float64 if key.compute == "64F" else np.float32
        p.alpha = np.ones(1, scale_dt)
        p.beta0 = np.zeros(1, scale_dt)
        p.beta1 = np.ones(1, scale_dt)
        self.plans[key] = p
        return p

    def _heuristics(self, n: int) -> np.ndarray:
        dt = getattr(self.lib, "matmul_heuristic_result_dtype", None)
        if dt is None:  # pragma: no cover - older/newer nvmath without the dtype
            return np.asarray(self.lib.MatmulHeuristicResult(n))
        return np.zeros(n, dtype=dt)

    def _choose(self, p: _Plan, i: int) -> None:
        """Make candidate ``i`` of ``p.heuristics`` the plan's algorithm."""
        p.algo_ptr = p.heuristics[i : i + 1].ctypes.data
        p.workspace_size = int(p.heuristics["workspace_size"][i])

    def _search(self, p: _Plan, call_args: tuple, accumulate: bool, stream: int) -> None:
        """Time the plan's candidates on this call's operands; keep the fastest."""
        p.searched = True
        handle, desc, alpha, a, a_l, b, b_l, beta, c, c_l, d, d_l = call_args
        if (accumulate and c == d) or self._capturing(stream):  # each run would add into D again
            return
        self.num_searches += 1

        def run(i: int) -> None:
            ws = int(p.heuristics["workspace_size"][i])
            self._call("matmul", handle, desc, alpha, a, a_l, b, b_l, beta, c, c_l, d, d_l,
                       p.heuristics[i : i + 1].ctypes.data,
                       self.workspace_ptr if ws else 0, self.workspace_bytes if ws else 0,
                       stream)  # fmt: skip

        self._choose(p, gemm_search.fastest(p.count, run, self._timer_for(stream)))

    def _layout(self, dtype: int, rows: int, cols: int, ld: int, batch: int, stride: int) -> int:
        h = self._call("matrix_layout_create", dtype, rows, cols, ld)
        if batch > 1:
            self._set("matrix_layout_set_attribute", h, LAYOUT, "BATCH_COUNT", batch)
            self._set("matrix_layout_set_attribute", h, LAYOUT, "STRIDED_BATCH_OFFSET", stride)
        return h

    # ---- calls ---------------------------------------------------------------------------------

    def matmul(
        self,
        spec: GemmSpec,
        a_ptr: int,
        b_ptr: int,
        d_ptr: int,
        *,
        in_dtype: Any,
        out_dtype: Any,
        precision: str = "default",
        epilogue: str = "none",
        bias_ptr: int = 0,
        aux_ptr: int = 0,
        accumulate: bool = False,
        c_ptr: int = 0,
        stream: int = 0,
    ) -> None:
        """Queue ``D = op(A) @ op(B)`` (+ epilogue; ``+ C`` if ``accumulate``) on ``stream``.

        Args:
            spec: from ``gemm_spec`` (``a`` is blu's rhs, ``b`` blu's lhs).
            a_ptr, b_ptr, d_ptr: device addresses of the operands and the output.
            in_dtype, out_dtype: operand and output dtypes (see ``_check_dtypes``).
            precision: see the module docstring.
            epilogue: see the module docstring.
            bias_ptr: bias vector (input for ``*bias``, output for ``*bgrad*``).
            aux_ptr: GELU aux matrix (output for ``gelu_aux*``, input for ``dgelu*``).
            accumulate: add ``C`` (beta = 1), e.g. gradient accumulation.
            c_ptr: ``C``, of ``D``'s layout and dtype (0: ``D`` itself, added into in place).
            stream: CUDA stream handle.

        Raises:
            BluValueError: unknown epilogue, missing bias/aux pointer, or an unsupported
                epilogue configuration; BluTypeError: unsupported dtypes; CudaError: a cuBLASLt
                call failed (the message names it).
        """
        a_dt, d_dt = dtype_name(in_dtype), dtype_name(out_dtype)
        _check_dtypes(a_dt, a_dt, d_dt)
        if epilogue not in EPILOGUES:
            raise BluValueError(
                f"cuBLASLt: unknown epilogue {epilogue!r}; one of {list(EPILOGUES)}"
            )
        if (epilogue in _NEEDS_BIAS or epilogue in _WRITES_BIAS) and not bias_ptr:
            raise BluValueError(f"cuBLASLt: epilogue {epilogue!r} needs a bias pointer")
        if epilogue in _NEEDS_AUX and not aux_ptr:
            raise BluValueError(f"cuBLASLt: epilogue {epilogue!r} needs an aux pointer")
        if epilogue == "bgrad_lhs" and not spec.trans_b:
            raise BluValueError(
                "cuBLASLt: 'bgrad_lhs' (BGRADB) needs the lhs stored (K, M) (TRANSB); "
                "use 'bgrad_rhs' with the operands swapped"
            )
        if epilogue in ("dgelu", "dgelu_bgrad") and spec.k == 1:
            raise BluValueError("cuBLASLt: DGELU epilogues do not support k = 1")
        if spec.m == 0 or spec.n == 0:
            return
        if spec.k == 0:
            raise BluValueError(
                "cuBLASLt: k = 0 (an empty contraction): fill the output with zeros instead"
            )
        comp, _ = compute_type(a_dt, precision)
        c_ptr = c_ptr or d_ptr
        key = MatmulKey(
            spec,
            a_dt,
            d_dt,
            comp,
            epilogue,
            (alignment(a_ptr), alignment(b_ptr), alignment(c_ptr), alignment(d_ptr)),
            accumulate,
        )
        p = self.plans.get(key) or self.plan(key, bias_ptr, aux_ptr)
        if bias_ptr and bias_ptr != p.bias_ptr:
            self._set_desc(p.desc, "BIAS_POINTER", bias_ptr)
            p.bias_ptr = bias_ptr
        if aux_ptr and aux_ptr != p.aux_ptr:
            self._set_desc(p.desc, "EPILOGUE_AUX_POINTER", aux_ptr)
            p.aux_ptr = aux_ptr
        a_l, b_l, c_l, d_l = p.layouts
        beta = (p.beta1 if accumulate else p.beta0).ctypes.data
        if not p.searched:
            args = (self.handle, p.desc, p.alpha.ctypes.data, a_ptr, a_l, b_ptr, b_l, beta, c_ptr,
                    c_l, d_ptr, d_l)  # fmt: skip
            self._search(p, args, accumulate, stream)
        self._call(
            "matmul",
            self.handle,
            p.desc,
            p.alpha.ctypes.data,
            a_ptr,
            a_l,
            b_ptr,
            b_l,
            beta,
            c_ptr,
            c_l,
            d_ptr,
            d_l,
            p.algo_ptr,
            self.workspace_ptr if p.workspace_size else 0,
            self.workspace_bytes if p.workspace_size else 0,
            stream,
        )

    def close(self) -> None:
        """Destroy every cached descriptor and the handle."""
        for p in self.plans.values():
            for h in p.layouts:
                self._call("matrix_layout_destroy", h)
            self._call("matmul_preference_destroy", p.pref)
            self._call("matmul_desc_destroy", p.desc)
        self.plans.clear()
        if self.handle:
            self._call("destroy", self.handle)
            self.handle = 0
