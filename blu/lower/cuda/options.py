"""The CUDA backend's ``Options`` (what besides a program changes its executable), typed."""

from __future__ import annotations

import dataclasses

from blu.core.config import config
from blu.lower.backend import Options
from blu.lower.cuda import codegen_rows, codegen_strided


@dataclasses.dataclass(frozen=True)
class CudaOptions(Options):
    """What changes a CUDA executable besides its program, donation and target.

    Attributes:
        precision: the matrix-product precision of products with the default precision
            (``blu.config.default_matmul_precision``).
        unroll: the row groups' most elements per thread (``BLU_GPU_UNROLL``).
        warp_rows: row groups in the warp form (``BLU_GPU_ROWS=warp``).
        generation: the kernel emitter's generation (``BLU_GPU_KERNELS``).
        flash_tensor_cores: float32 flash attention on tensor cores.
        epilogues: cuBLASLt epilogue products (``BLU_GPU_EPILOGUES``).
        packed_attention: attention reading q, k, v strided from the QKV product.
        unroll_scans: scans of at most this many iterations are unrolled
            (``BLU_UNROLL_SCANS``).
        conditional_nodes: while loops decided on the device (``BLU_CUDA_CONDITIONAL_NODES``).
        exp: how kernels compute a float32 exp (``BLU_GPU_EXP``: "ex2", "ex2-reduced", "poly").
        group_columns: row groups take in the column reductions over their rows
            (``BLU_GPU_GROUP_COLUMNS``).
        map_values: most values an elementwise chunk stores (``BLU_GPU_MAP_VALUES``).
        gelu_aux: the MLP's GELU in the product's ``GELU_AUX_BIAS`` epilogue, else a kernel
            after a ``BIAS`` product (``BLU_GPU_GELU_AUX``).
        row_prefetch: row groups looping over rows load the next row first
            (``BLU_GPU_ROW_PREFETCH``).
        column_blocks: the blocks of a row group with column partials (0: about
            ``COLUMN_THREADS`` threads; ``BLU_GPU_COLUMN_BLOCKS``).
        row_stash: the most shared memory a looped row group keeps its row in (bytes;
            ``BLU_GPU_ROW_STASH``; -1: the chip's).
    """

    precision: str = ""
    unroll: int = codegen_rows.UNROLL
    warp_rows: bool = False
    generation: int = 2
    flash_tensor_cores: bool = True
    epilogues: bool = True
    packed_attention: bool = True
    unroll_scans: int = 16
    conditional_nodes: bool = True
    exp: str = "ex2"
    group_columns: bool = True
    map_values: int = codegen_strided.MAP_VALUES
    gelu_aux: bool = True
    row_prefetch: bool = True
    column_blocks: int = 0
    row_stash: int = -1

    @classmethod
    def from_config(cls, precision: str | None = None) -> CudaOptions:
        """The options in effect now (``blu.config``)."""
        return cls(precision or config.default_matmul_precision, codegen_rows.unroll_limit(),
                   codegen_rows.warp_rows_on(), codegen_strided.generation(),
                   bool(config.flash_tensor_cores), bool(config.gpu_epilogues),
                   bool(config.packed_attention), int(config.unroll_scans),
                   bool(config.cuda_conditional_nodes), str(config.gpu_exp),
                   bool(config.gpu_group_columns), codegen_strided.map_values(),
                   bool(config.gpu_gelu_aux), bool(config.gpu_row_prefetch),
                   int(config.gpu_column_blocks or 0),
                   -1 if config.gpu_row_stash is None else int(config.gpu_row_stash))  # fmt: skip
