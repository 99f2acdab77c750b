"""MLIR text for CPU kernels: element types, constants, SSA names, ``scf.for`` nests, index
arithmetic, and the emission of a fused kernel's loop nests (planned by ``fusion.py``).

Kernels are emitted as MLIR *text* (parsed by the bindings only when compiled), so producing a
kernel and its cache key never imports ``mlir``. Every buffer is a flat, contiguous
``memref<N x T>`` of the value's storage type; inside a kernel values live in their compute
type: bfloat16 and float16 in float32 (rounded once, when stored or explicitly converted), bool
as ``i1`` (stored as ``i8``), complex64/complex128 as ``complex<f32>`` / ``complex<f64>``
(the complex dialect; ``rules_complex.py``). bfloat16 is stored as its 16 bits (``i16``) and
converted with integer operations (round to nearest even, as ml_dtypes does), which vectorize
on any x86 CPU and leave ``arith.maximumf`` & co. intact for LLVM's reduction vectorizer
(``arith-expand``, MLIR's bfloat16 expansion, would also rewrite them into compare-and-select
chains).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from blu.core import dtypes

_STORAGE = {
    dtypes.float32: "f32", dtypes.float64: "f64", dtypes.bfloat16: "i16", dtypes.float16: "f16",
    dtypes.bool_: "i8", dtypes.int8: "i8", dtypes.int16: "i16", dtypes.int32: "i32",
    dtypes.int64: "i64", dtypes.uint8: "i8", dtypes.uint16: "i16", dtypes.uint32: "i32",
    dtypes.uint64: "i64", dtypes.complex64: "complex<f32>", dtypes.complex128: "complex<f64>",
}  # fmt: skip


def storage_type(dt: np.dtype) -> str:
    """The MLIR element type of a buffer of ``dt`` (bool is stored as a byte)."""
    return _STORAGE[np.dtype(dt)]


def compute_type(dt: np.dtype) -> str:
    """The MLIR type a value of ``dt`` has inside a kernel (half floats computed in f32)."""
    dt = np.dtype(dt)
    if dt in (dtypes.bfloat16, dtypes.float16):
        return "f32"
    if dt == dtypes.bool_:
        return "i1"
    return _STORAGE[dt]


def is_float(dt: np.dtype) -> bool:
    return dtypes.is_float(np.dtype(dt))


def is_complex(dt: np.dtype) -> bool:
    return dtypes.is_complex(np.dtype(dt))


def scalar(value: Any, dt: np.dtype) -> Any:
    """``value`` as the Python scalar ``Builder.const`` takes for a value of ``dt``."""
    dt = np.dtype(dt)
    if dt == dtypes.bool_:
        return bool(value)
    if is_complex(dt):
        return complex(value)
    return float(value) if is_float(dt) else int(value)


def is_unsigned(dt: np.dtype) -> bool:
    return dtypes.is_unsigned(np.dtype(dt))


def memref_type(aval: Any) -> str:
    return f"memref<{max(aval.size, 0)}x{storage_type(aval.dtype)}>"


def float_literal(value: float, ty: str) -> str:
    """An exact MLIR float literal (hex bit pattern; keeps NaN, inf and -0.0)."""
    if ty == "f64":
        return f"0x{struct.unpack('<Q', struct.pack('<d', float(value)))[0]:016X}"
    if ty == "f32":
        return f"0x{int(np.array(value, np.float32).view(np.uint32)):08X}"
    if ty == "f16":
        return f"0x{int(np.array(value, np.float16).view(np.uint16)):04X}"
    if ty == "bf16":
        return f"0x{int(np.array(value, dtypes.bfloat16).view(np.uint16)):04X}"
    raise ValueError(ty)


def int_literal(value: int, ty: str) -> str:
    """A signless integer literal, written as the signed value of the same bits."""
    if ty == "i1":
        return "true" if value else "false"
    bits = int(ty[1:])
    v = int(value) & ((1 << bits) - 1)
    if v >= 1 << (bits - 1):
        v -= 1 << bits
    return str(v)


class Idx:
    """A point of an array of ``shape``, known as a multi-index and/or a linear (row-major)
    offset; the other form is computed on demand (and then remembered)."""

    __slots__ = ("shape", "multi", "lin")

    def __init__(self, shape: Sequence[int], multi: Sequence[str] | None = None, lin=None):
        self.shape = tuple(shape)
        self.multi = None if multi is None else tuple(multi)
        self.lin = lin

    def key(self) -> tuple:
        return ("m", self.shape, self.multi) if self.multi is not None else ("l", self.lin)


class Builder:
    """Accumulates the lines of one ``func.func``: constants (hoisted to the entry block), SSA
    values with fresh names, loops, and folding of index arithmetic on constants."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.const_lines: list[str] = []
        self._consts: dict[tuple[str, str], str] = {}
        self.index_value: dict[str, int] = {}  # SSA name -> value, for index constants
        self.decls: dict[str, str] = {}  # external functions called (libm)
        # bfloat16 bits of the values ``round_to_bf16`` made or ``widen`` loaded: storing one
        # stores them as they are (widening was exact), not rounded again (8 instructions)
        self.bf16_bits: dict[str, str] = {}
        # variables whose elements are <= 0 or NaN (``blu.lower.plan.signs``), where a kernel
        # computes a cheaper ``exp`` (set by the GPU emitter)
        self.nonpositive: frozenset = frozenset()
        self._n = 0
        self.depth = 1

    def fresh(self, prefix: str = "v") -> str:
        self._n += 1
        return f"%{prefix}{self._n}"

    def stmt(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def op(self, rhs: str, prefix: str = "v") -> str:
        name = self.fresh(prefix)
        self.stmt(f"{name} = {rhs}")
        return name

    # ---- constants ----------------------------------------------------------------------------

    def const(self, value: Any, ty: str) -> str:
        if ty.startswith("complex<"):  # complex64 / complex128: both parts exact
            part, z = ty[8:-1], complex(value)
            re_, im = float_literal(z.real, part), float_literal(z.imag, part)
            lit = f"[{re_} : {part}, {im} : {part}]"
        elif ty in ("f16", "bf16", "f32", "f64"):
            lit = float_literal(value, ty)
        elif ty == "index":
            lit = str(int(value))
        else:
            lit = int_literal(int(value), ty)
        key = (lit, ty)
        name = self._consts.get(key)
        if name is None:
            name = self._consts[key] = self.fresh("c")
            typed = lit if ty == "i1" else f"{lit} : {ty}"  # `true` / `false` carry their type
            dialect = "complex" if ty.startswith("complex<") else "arith"
            self.const_lines.append(f"    {name} = {dialect}.constant {typed}")
            if ty == "index":
                self.index_value[name] = int(value)
        return name

    def index(self, n: int) -> str:
        return self.const(n, "index")

    def libm(self, fn: str, args: Sequence[str], ty: str) -> str:
        """A call to the C math library (for functions whose LLVM lowering loses accuracy)."""
        sig = f"({', '.join([ty] * len(args))}) -> {ty}"
        self.decls[fn] = f"  func.func private @{fn}{sig}"
        return self.op(f"func.call @{fn}({', '.join(args)}) : {sig}")

    # ---- index arithmetic with constant folding -----------------------------------------------

    def imul(self, a: str, n: int) -> str:
        if n == 1:
            return a
        va = self.index_value.get(a)
        if va is not None:
            return self.index(va * n)
        if n == 0:
            return self.index(0)
        return self.op(f"arith.muli {a}, {self.index(n)} : index", "i")

    def iadd(self, a: str, b: str) -> str:
        va, vb = self.index_value.get(a), self.index_value.get(b)
        if va is not None and vb is not None:
            return self.index(va + vb)
        if va == 0:
            return b
        if vb == 0:
            return a
        return self.op(f"arith.addi {a}, {b} : index", "i")

    def iaddc(self, a: str, n: int) -> str:
        return a if n == 0 else self.iadd(a, self.index(n))

    def lin(self, idx: Idx) -> str:
        if idx.lin is None:
            acc = self.index(0)
            for d, i in zip(idx.shape, idx.multi):
                acc = self.iadd(self.imul(acc, d), i)
            idx.lin = acc
        return idx.lin

    def multi(self, idx: Idx) -> tuple[str, ...]:
        if idx.multi is None:
            rest, out = idx.lin, []
            for k, d in reversed(list(enumerate(idx.shape))):
                if d == 1:
                    out.append(self.index(0))
                elif all(s == 1 for s in idx.shape[:k]):
                    out.append(rest)
                else:
                    out.append(self.op(f"arith.remui {rest}, {self.index(d)} : index", "i"))
                    rest = self.op(f"arith.divui {rest}, {self.index(d)} : index", "i")
            idx.multi = tuple(reversed(out))
        return idx.multi

    # ---- loops --------------------------------------------------------------------------------

    def begin_for(
        self, n: int, inits: Sequence[tuple[str, str]] = ()
    ) -> tuple[str, list[str], str]:
        """Open ``scf.for %iv = 0 to n``; returns (iv, iter-arg names, result name)."""
        return self.begin_range(self.index(0), self.index(n), self.index(1), inits)

    def begin_range(
        self, lo: str, hi: str, step: str, inits: Sequence[tuple[str, str]] = ()
    ) -> tuple[str, list[str], str]:
        """Open ``scf.for %iv = lo to hi step step`` over SSA index values (e.g. a GPU thread's
        grid-stride loop); returns (iv, iter-arg names, result name)."""
        iv = self.fresh("i")
        res = self.fresh("r") if inits else ""
        args = [self.fresh("a") for _ in inits]
        head = f"scf.for {iv} = {lo} to {hi} step {step}"
        if inits:
            its = ", ".join(f"{a} = {v}" for a, (v, _) in zip(args, inits))
            tys = ", ".join(t for _, t in inits)
            multi = f":{len(inits)}" if len(inits) > 1 else ""
            self.stmt(f"{res}{multi} = {head} iter_args({its}) -> ({tys}) {{")
        else:
            self.stmt(head + " {")
        self.depth += 1
        return iv, args, res

    def end_for(self, res: str, yields: Sequence[tuple[str, str]] = ()) -> list[str]:
        if yields:
            self.stmt(f"scf.yield {', '.join(v for v, _ in yields)} : "
                      f"{', '.join(t for _, t in yields)}")  # fmt: skip
        self.depth -= 1
        self.stmt("}")
        if not yields:
            return []
        return [res] if len(yields) == 1 else [f"{res}#{k}" for k in range(len(yields))]

    # ---- memory -------------------------------------------------------------------------------

    def load(self, buf: str, aval: Any, lin: str) -> str:
        return self.widen(self.op(f"memref.load {buf}[{lin}] : {memref_type(aval)}"), aval)

    def widen(self, v: str, aval: Any) -> str:
        """An element of ``aval``'s buffer as loaded (its storage type) in its compute type."""
        if aval.dtype == dtypes.bfloat16:
            y = self.bf16_to_f32(v)
            self.bf16_bits[y] = v  # stored or bitcast as loaded (a signaling NaN's bits too)
            return y
        if aval.dtype == dtypes.float16:
            return self.op(f"arith.extf {v} : f16 to f32")
        if aval.dtype == dtypes.bool_:
            return self.op(f"arith.cmpi ne, {v}, {self.const(0, 'i8')} : i8")
        return v

    def store(self, value: str, buf: str, aval: Any, lin: str) -> None:
        if aval.dtype == dtypes.bfloat16:
            value = self.to_bf16(value)
        elif aval.dtype == dtypes.float16:
            value = self.op(f"arith.truncf {value} : f32 to f16")
        elif aval.dtype == dtypes.bool_:
            value = self.op(f"arith.extui {value} : i1 to i8")
        self.stmt(f"memref.store {value}, {buf}[{lin}] : {memref_type(aval)}")

    def stored(self, value: str, aval: Any) -> str:
        """``value`` as a ``load`` reads it back after ``store`` (half floats are rounded)."""
        if aval.dtype == dtypes.bfloat16:
            return value if value in self.bf16_bits else self.round_to_bf16(value)
        if aval.dtype == dtypes.float16:
            half = self.op(f"arith.truncf {value} : f32 to f16")
            return self.op(f"arith.extf {half} : f16 to f32")
        return value

    # ---- bfloat16 as bits -----------------------------------------------------------------------

    def bf16_to_f32(self, bits: str) -> str:
        """The float32 value of bfloat16 bits (``i16``): they are its upper half."""
        wide = self.op(f"arith.extui {bits} : i16 to i32")
        shifted = self.op(f"arith.shli {wide}, {self.const(16, 'i32')} : i32")
        return self.op(f"arith.bitcast {shifted} : i32 to f32")

    def f32_to_bf16(self, x: str) -> str:
        """float32 -> bfloat16 bits (``i16``), rounding to nearest even; NaN stays a (quiet) NaN."""
        i32 = "i32"
        bits = self.op(f"arith.bitcast {x} : f32 to i32")
        hi = self.op(f"arith.shrui {bits}, {self.const(16, i32)} : i32")
        lsb = self.op(f"arith.andi {hi}, {self.const(1, i32)} : i32")
        bias = self.op(f"arith.addi {lsb}, {self.const(0x7FFF, i32)} : i32")
        rounded = self.op(f"arith.shrui {self.op(f'arith.addi {bits}, {bias} : i32')}, "
                          f"{self.const(16, i32)} : i32")  # fmt: skip
        quiet = self.op(f"arith.ori {hi}, {self.const(0x40, i32)} : i32")
        nan = self.op(f"arith.cmpf uno, {x}, {x} : f32")
        out = self.op(f"arith.select {nan}, {quiet}, {rounded} : i32")
        return self.op(f"arith.trunci {out} : i32 to i16")

    def round_to_bf16(self, x: str) -> str:
        """A float32 value rounded to the nearest bfloat16 (kept in float32)."""
        if x in self.bf16_bits:  # already rounded
            return x
        bits = self.f32_to_bf16(x)
        y = self.bf16_to_f32(bits)
        self.bf16_bits[y] = bits
        return y

    def to_bf16(self, x: str) -> str:
        """``f32_to_bf16``, or the bits ``x`` was widened from if ``round_to_bf16`` made it
        (the same bits: rounded, a NaN quieted, already) or ``widen`` loaded it (the bits as
        loaded: a copy keeps a signaling NaN's bits, as numpy's does)."""
        bits = self.bf16_bits.get(x)
        return bits if bits is not None else self.f32_to_bf16(x)


def collapse(sizes: Sequence[int], labels: Sequence[str]) -> list[tuple[int, str]]:
    """Merge adjacent loop dimensions with the same label ('k' kept / 'r' reduced)."""
    out: list[tuple[int, str]] = []
    for n, lab in zip(sizes, labels):
        if out and out[-1][1] == lab:
            out[-1] = (out[-1][0] * n, lab)
        else:
            out.append((n, lab))
    return out


def prod(xs: Sequence[int]) -> int:
    return math.prod(xs)
