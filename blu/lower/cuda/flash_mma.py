"""TF32 tensor-core products for blu's float32 flash kernels (``flash_tc.py``): ``mma.sync``
m16n8k8 on fragments, with operands rounded to TF32, or split into big and small TF32 parts for
3xTF32 (three products, small terms first: float32 accuracy from TF32 tensor cores, as
CUTLASS's ``TensorFloat32Op::k3xTF32``)."""

from __future__ import annotations

from blu.lower.cuda.flash_text import Text

_STRUCT = "!llvm.struct<(f32, f32, f32, f32)>"


class Mma:
    """TF32 ``mma.sync`` pieces over a ``Text``: rounding, splitting, fragment products."""

    def __init__(self, t: Text, mode: str):
        self.t, self.mode = t, mode

    def tf32(self, x: str) -> str:
        """``x`` rounded to TF32 (as the i32 bit pattern ``mma`` takes)."""
        return self.t.v(f'llvm.inline_asm "cvt.rna.tf32.f32 $0, $1;", "=r,f" {x} : (f32) -> i32')

    def as_f32(self, x: str) -> str:
        return self.t.v(f"arith.bitcast {x} : i32 to f32")

    def as_i32(self, x: str) -> str:
        return self.t.v(f"arith.bitcast {x} : f32 to i32")

    def parts(self, x: str, rounded: bool) -> list[str]:
        """The operand parts of an f32 value: ``[tf32(x)]``, or ``[big, small]`` in 3xTF32
        (``rounded``: ``x`` already holds TF32 bits, tf32 mode only)."""
        if self.mode == "tf32":
            return [self.as_i32(x) if rounded else self.tf32(x)]
        big = self.tf32(x)
        small = self.tf32(self.t.fop("subf", x, self.as_f32(big)))
        return [big, small]

    def staged(self, x: str) -> list[str]:
        """The f32 values to stage in shared memory for ``x``: its TF32 rounding, or big and
        small parts."""
        return [self.as_f32(p) for p in self.parts(x, False)]

    def _one(self, a: list[str], b: list[str], c: list[str]) -> list[str]:
        t = self.t
        r = t.v(f"nvvm.mma.sync A[{', '.join(a)}] B[{', '.join(b)}] C[{', '.join(c)}] "
                "{layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, "
                "multiplicandAPtxType = #nvvm.mma_type<tf32>, "
                "multiplicandBPtxType = #nvvm.mma_type<tf32>, "
                "shape = #nvvm.shape<m = 16, n = 8, k = 8>} "
                f": (i32, i32, f32) -> {_STRUCT}")  # fmt: skip
        return [t.v(f"llvm.extractvalue {r}[{i}] : {_STRUCT}") for i in range(4)]

    def mma(self, a: list[list[str]], b: list[list[str]], c: list[str]) -> list[str]:
        """``c += A B`` for fragments given as parts (``a[part]``: 4 registers, ``b[part]``:
        2): one product, or the three of 3xTF32 (small terms first)."""
        if self.mode == "tf32":
            return self._one(a[0], b[0], c)
        c = self._one(a[1], b[0], c)
        c = self._one(a[0], b[1], c)
        return self._one(a[0], b[0], c)
