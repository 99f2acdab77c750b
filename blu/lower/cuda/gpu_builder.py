"""The GPU kernels' scalar builder: ``mlir.emit.Builder`` with the GPU's library and units.

Library calls go to libdevice (``__nv_log1pf``, ...); float32 ``exp`` uses the
special-function unit's ``ex2.approx`` unless ``$BLU_GPU_EXP=poly``; generation 2 rounds
float32 to bfloat16 with the hardware's conversion.
"""

from __future__ import annotations

from typing import Any

from blu.core.config import config
from blu.lower.cuda.codegen_strided import loads_first
from blu.lower.mlir.emit import Builder


class GpuBuilder(Builder):
    """A Builder whose library calls go to libdevice (``__nv_log1pf``, ...)."""

    def libm(self, fn: str, args: Any, ty: str) -> str:
        return super().libm("__nv_" + fn, args, ty)

    @property
    def exp2_unit(self) -> bool:
        """float32 ``exp`` through ``ex2.approx`` (``mathlib.exp_ex2``; ``$BLU_GPU_EXP``)."""
        return config.gpu_exp != "poly"

    def f32_to_bf16(self, x: str) -> str:
        """Generation 2: the hardware's conversion (``cvt.rn.bf16.f32``, sm_80+: the integer
        form's rounding to nearest even in one instruction), a NaN kept as the integer form
        keeps it (its sign and upper payload, quieted) so both give the same bits."""
        if not loads_first():
            return super().f32_to_bf16(x)
        i32 = "i32"
        cvt = self.op(f"arith.bitcast {self.op(f'arith.truncf {x} : f32 to bf16')} : bf16 to i16")
        hi = self.op(f"arith.shrui {self.op(f'arith.bitcast {x} : f32 to i32')}, "
                     f"{self.const(16, i32)} : i32")  # fmt: skip
        quiet = self.op(f"arith.trunci {self.op(f'arith.ori {hi}, {self.const(0x40, i32)} : i32')}"
                        " : i32 to i16")  # fmt: skip
        nan = self.op(f"arith.cmpf uno, {x}, {x} : f32")
        return self.op(f"arith.select {nan}, {quiet}, {cvt} : i16")
