"""MLIR CPU kernels of the fused attention primitives (``blu.lax.attention``): FlashAttention-2's
online softmax blocked over keys, so no ``(T, S)`` buffer exists (Dao 2023, "FlashAttention-2:
Faster Attention with Better Parallelism and Work Partitioning", arXiv:2307.08691).

- ``emit_forward`` (``flash_forward``): the keys transposed into the workspace first; then per
  block of ``Spec.row_block`` queries and block of ``BLOCK_KEYS`` keys (causal blocks end at the
  last row's limit): the scores as vectors of keys, each key vector loaded once for all the rows
  (an outer product, no horizontal sums), the running maxima, ``p = exp(s - m)`` over vectors
  (the Cephes steps of ``mathlib.exp``), and ``acc = alpha acc + sum_j p_j v_j`` held in
  registers, each ``v`` row shared by the rows (Algorithm 1). Writes ``out`` and ``lse = m +
  log l`` (``-inf`` and zeros for a row with nothing to attend).
- ``emit_backward`` (``flash_backward``): ``D = rowsum(dO * O) - dL`` and the queries and
  output gradients transposed first, then per block of ``Spec.backward_keys`` keys (their ``dk``,
  ``dv`` in registers, summed over the query heads of the group and the queries that see them)
  and vector of queries: ``S`` and ``dP = dO V^T`` as vectors of queries, ``P = exp(S - L)``,
  ``dS = P (dP - D)`` into small tiles, then per query ``dV += P dO``, ``dK += scale dS q``,
  ``dQ += scale dS k`` (memory) by broadcast FMAs (Algorithm 2, with the loops in the order a
  single core wants).

Layouts are the primitives' (flat, row-major): ``q (B, T, N, H)``, ``k (B, S, K, H)``,
``v (B, S, K, Hv)``, ``bias``/``mask`` ``(1|B, 1|N, T, S)`` (mask as bytes), ``lse (B, N, T)``.
Arithmetic is float32 (float64 for float64 inputs); bfloat16/float16 are converted on load and
rounded once on store. Query ``i`` sees key ``j <= i`` when causal (top-left aligned).
Every kernel is specialized to its sizes (a :class:`Spec`), compiled once through
``mlir_cpu.get_kernel`` and cached on disk like every CPU kernel.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from blu.core import dtypes
from blu.core.aval import ShapedArray
from blu.lower.mlir import mathlib
from blu.lower.mlir.emit import Builder, float_literal, memref_type, storage_type

BLOCK_KEYS = 64  # keys per block of the forward's scores (a stack buffer of rows x this many)
BACKWARD_KEYS = 4  # keys per block of the backward (their dk, dv rows stay in registers)
VERSION = "14"  # bump when the generated code changes meaning


@dataclasses.dataclass(frozen=True)
class Spec:
    """One attention problem: sizes, dtype and options (a kernel is compiled per spec)."""

    b: int
    t: int
    s: int
    n: int
    kh: int
    h: int
    hv: int
    dtype: str  # numpy name of q, k, v (and out, bias)
    scale: float
    is_causal: bool
    bias: tuple[int, int] | None  # the bias's leading sizes (1|B, 1|N), or None
    mask: tuple[int, int] | None
    has_dlse: bool = False
    need_dbias: bool = False

    @property
    def acc(self) -> str:
        return "f64" if self.dtype == "float64" else "f32"

    @property
    def low(self) -> bool:
        """bfloat16/float16: gradients accumulate in float32 scratch."""
        return self.dtype not in ("float32", "float64")

    def text(self, kind: str) -> str:
        """Cache key material of the ``kind`` ("fwd" or "bwd") kernel."""
        return (
            f"blu-attention-cpu-{kind} v{VERSION} block={BLOCK_KEYS} rows={self.row_block} "
            f"keys={self.backward_keys} "
            f"{dataclasses.astuple(self)!r}"
        )

    @property
    def lanes(self) -> int:
        """Lanes of one vector register (512 bits) of the accumulator type."""
        return 16 if self.acc == "f32" else 8

    @property
    def key_block(self) -> int:
        """Keys per block of the forward: ``BLOCK_KEYS`` rounded to whole vectors."""
        return max(1, BLOCK_KEYS // self.lanes) * self.lanes

    @property
    def row_block(self) -> int:
        """Queries per block of the forward: 8, fewer for wide values (their ``acc`` rows, 16
        vectors at most, stay in registers)."""
        return max(1, min(8, 16 // -(-self.hv // self.lanes)))

    @property
    def backward_keys(self) -> int:
        """Keys per block of the backward: ``BACKWARD_KEYS`` at every head size (for wide heads
        their accumulators spill, yet fewer keys measured slower: shorter FMA chains)."""
        return BACKWARD_KEYS

    @property
    def t_pad(self) -> int:
        """``T`` plus room for a vector of queries starting at any of them (the backward's
        transposed queries)."""
        return -(-(self.t + self.lanes - 1) // self.lanes) * self.lanes

    @property
    def s_pad(self) -> int:
        """``S`` rounded up to whole key blocks (the forward's transposed keys)."""
        return -(-self.s // self.key_block) * self.key_block

    def workspace(self, kind: str) -> list[tuple[str, int]]:
        """The scratch buffers ``(dtype name, elements)`` of the ``kind`` kernel: the forward's
        transposed keys ``(B, K, H, S_pad)``; the backward's ``D``, then (half floats) the
        float32 ``dq`` and ``dbias`` accumulators, then the transposed queries ``(B, N, H,
        T_pad)`` and output gradients ``(B, N, Hv, T_pad)``."""
        acc = "float64" if self.acc == "f64" else "float32"
        if kind == "fwd":
            return [(acc, self.b * self.kh * self.h * self.s_pad)]
        ws = [(acc, self.b * self.n * self.t)]
        if self.low:
            ws.append(("float32", self.b * self.t * self.n * self.h))
            if self.need_dbias:
                ws.append(("float32", math.prod(self.bias) * self.t * self.s))
        ws.append((acc, self.b * self.n * self.h * self.t_pad))
        ws.append((acc, self.b * self.n * self.hv * self.t_pad))
        return ws


def workspace_bytes(spec: Spec, kind: str) -> int:
    return sum(_align(n * np.dtype(d).itemsize) for d, n in spec.workspace(kind))


def workspace_offsets(spec: Spec, kind: str) -> list[int]:
    offs, at = [], 0
    for d, n in spec.workspace(kind):
        offs.append(at)
        at += _align(n * np.dtype(d).itemsize)
    return offs


def _align(n: int) -> int:
    return (n + 63) // 64 * 64


class Emitter:
    """A ``Builder`` with vector helpers over the accumulator type."""

    def __init__(self, spec: Spec):
        self.sp = spec
        self.b = Builder()
        self.b.depth = 2
        self.a = spec.acc
        self.w = 16 if self.a == "f32" else 8  # lanes of one chunk (a 512-bit register)
        self.dt = np.dtype(dtypes.bfloat16) if spec.dtype == "bfloat16" else np.dtype(spec.dtype)
        self.params: list[str] = []
        self.avals: dict[str, ShapedArray] = {}
        self._vconsts: dict[tuple, str] = {}

    # ---- parameters and constants ---------------------------------------------------------------

    def param(self, name: str, size: int, dt) -> str:
        aval = ShapedArray((max(size, 0),), np.dtype(dt))
        self.avals["%" + name] = aval
        self.params.append(f"%{name}: {memref_type(aval)}")
        return "%" + name

    def c(self, v: float) -> str:
        return self.b.const(v, self.a)

    def i(self, n: int) -> str:
        return self.b.index(n)

    def vconst(self, v: float, n: int, ty: str) -> str:
        key = (v, n, ty)
        if key not in self._vconsts:
            name = self.b.fresh("vc")
            lit = float_literal(v, ty) if ty.startswith("f") else str(int(v))
            self.b.const_lines.append(
                f"    {name} = arith.constant dense<{lit}> : vector<{n}x{ty}>"
            )
            self._vconsts[key] = name
        return self._vconsts[key]

    def iota(self, n: int) -> str:
        key = ("iota", n)
        if key not in self._vconsts:
            name = self.b.fresh("vc")
            vals = ", ".join(str(x) for x in range(n))
            self.b.const_lines.append(f"    {name} = arith.constant dense<[{vals}]> : "
                                      f"vector<{n}xi32>")  # fmt: skip
            self._vconsts[key] = name
        return self._vconsts[key]

    def lanes_below(self, start: str, end32: str, n: int) -> str:
        """The ``vector<n x i1>`` of lanes ``start + l < end`` (``end32`` an i32)."""
        st = self.op(f"arith.index_cast {start} : index to i32")
        lanes = self.op(f"arith.addi {self.op(f'vector.broadcast {st} : i32 to vector<{n}xi32>')}"
                        f", {self.iota(n)} : vector<{n}xi32>")  # fmt: skip
        end = self.op(f"vector.broadcast {end32} : i32 to vector<{n}xi32>")
        return self.op(f"arith.cmpi slt, {lanes}, {end} : vector<{n}xi32>")

    def chunks(self, d: int) -> list[tuple[int, int]]:
        """``(offset, lanes)`` covering ``d`` elements: full chunks, then the tail."""
        out = [(o, self.w) for o in range(0, d - d % self.w, self.w)]
        return out + ([(d - d % self.w, d % self.w)] if d % self.w else [])

    def vt(self, n: int, ty: str | None = None) -> str:
        return f"vector<{n}x{ty or self.a}>"

    # ---- scalar and vector arithmetic -----------------------------------------------------------

    def op(self, text: str) -> str:
        return self.b.op(text)

    def f(self, opname: str, x: str, y: str, ty: str | None = None) -> str:
        return self.op(f"arith.{opname} {x}, {y} : {ty or self.a}")

    def fma(self, x: str, y: str, z: str, n: int) -> str:
        return self.op(f"vector.fma {x}, {y}, {z} : {self.vt(n)}")

    def splat(self, x: str, n: int) -> str:
        return self.op(f"vector.broadcast {x} : {self.a} to {self.vt(n)}")

    def sel(self, c: str, x: str, y: str, ty: str | None = None) -> str:
        return self.op(f"arith.select {c}, {x}, {y} : {ty or self.a}")

    def exp(self, x: str) -> str:
        if self.a == "f32":
            return mathlib.exp(self.b, x)
        return self.op(f"math.exp {x} : f64")

    def vexp(self, x: str, n: int) -> str:
        """``e**x`` of a vector of probabilities' exponents: ``mathlib.exp``'s Cephes steps over
        ``vector<n x f32>``, with one power of two (results below ``e**-80`` flush to 0: nothing
        next to the row's largest term, 1) (the ``math`` dialect's, libm's, for float64)."""
        t = self.vt(n)
        if self.a == "f64":
            return self.op(f"math.exp {x} : {t}")
        it, ct = self.vt(n, "i32"), f"vector<{n}xi1>, {t}"
        c = lambda v: self.vconst(v, n, "f32")  # noqa: E731
        ff = lambda x, y, z: self.op(f"math.fma {x}, {y}, {z} : {t}")  # noqa: E731
        xc = self.f("minnumf", self.f("maxnumf", x, c(-80.0), t), c(mathlib.EXP_HI), t)
        z = self.op(f"math.floor {ff(xc, c(mathlib.LOG2E), c(0.5))} : {t}")
        r = ff(z, c(-mathlib.C1), xc)
        r = ff(z, c(-mathlib.C2), r)
        p = c(mathlib.EXP_POLY[0])
        for k in mathlib.EXP_POLY[1:]:
            p = ff(p, r, c(k))
        y = self.f("addf", ff(p, self.f("mulf", r, r, t), r), c(1.0), t)
        ni = self.op(f"arith.fptosi {z} : {t} to {it}")  # in [-115, 128]: 2**128 is inf
        biased = self.op(f"arith.addi {ni}, {self.vconst(127, n, 'i32')} : {it}")
        sh = self.op(f"arith.shli {biased}, {self.vconst(23, n, 'i32')} : {it}")
        y = self.f("mulf", y, self.op(f"arith.bitcast {sh} : {it} to {t}"), t)
        y = self.sel(self.op(f"arith.cmpf olt, {x}, {c(-80.0)} : {t}"), c(0.0), y, ct)
        return self.sel(self.op(f"arith.cmpf uno, {x}, {x} : {t}"), x, y, ct)

    def is_neg_inf(self, x: str) -> str:
        return self.op(f"arith.cmpf oeq, {x}, {self.c(-math.inf)} : {self.a}")

    def dot(self, xs: list[str], ys: list[str], d: int) -> str:
        """``sum(x * y)`` of two rows given as chunk vectors."""
        ch = self.chunks(d)
        total = self.c(0.0)
        full = [(x, y) for (x, y), (_, n) in zip(zip(xs, ys), ch) if n == self.w]
        if full:
            acc = self.op(f"arith.mulf {full[0][0]}, {full[0][1]} : {self.vt(self.w)}")
            for x, y in full[1:]:
                acc = self.fma(x, y, acc, self.w)
            total = self.reduce(acc, self.w)
        if ch and ch[-1][1] != self.w:
            n = ch[-1][1]
            tail = self.op(f"arith.mulf {xs[-1]}, {ys[-1]} : {self.vt(n)}")
            total = self.f("addf", total, self.reduce(tail, n)) if full else self.reduce(tail, n)
        return total

    def max_lanes(self, v: str, n: int) -> str:
        """The largest lane of a vector of ``n`` (a power of two) lanes, NaN lanes ignored: a
        tree of shuffles (``vector.reduction <maxnumf>`` becomes a serial chain of scalar
        maxima with NaN checks, the forward's costliest part at small heads)."""
        t, half = self.vt(n), n // 2
        while half:
            perm = [(i ^ half) for i in range(n)]  # swap the halves of each 2*half group
            sw = self.op(f"vector.shuffle {v}, {v} {perm} : {t}, {t}")
            v = self.f("maxnumf", v, sw, t)
            half //= 2
        return self.op(f"vector.extract {v}[0] : {self.a} from {t}")

    def reduce(self, v: str, n: int) -> str:
        return self.op(f"vector.reduction <add>, {v} fastmath<reassoc> : {self.vt(n)} "
                       f"into {self.a}")  # fmt: skip

    # ---- rows in memory -------------------------------------------------------------------------

    def vload(self, buf: str, off: str, n: int, mask: str | None = None) -> str:
        """``n`` elements of ``buf`` from ``off``, as a vector of the accumulator type (a bool
        buffer: ``i1``); with ``mask``, lanes off in it are not read (they are 0)."""
        aval = self.avals[buf]
        st = storage_type(aval.dtype)
        if mask is None:
            v = self.op(f"vector.load {buf}[{off}] : {memref_type(aval)}, {self.vt(n, st)}")
        else:
            zero = self.vconst(0 if st.startswith("i") else 0.0, n, st)
            v = self.op(f"vector.maskedload {buf}[{off}], {mask}, {zero} : {memref_type(aval)}, "
                        f"vector<{n}xi1>, {self.vt(n, st)} into {self.vt(n, st)}")  # fmt: skip
        if aval.dtype == np.bool_:
            return self.op(f"arith.cmpi ne, {v}, {self.vconst(0, n, 'i8')} : {self.vt(n, 'i8')}")
        if aval.dtype == dtypes.bfloat16:
            wide = self.op(f"arith.extui {v} : {self.vt(n, 'i16')} to {self.vt(n, 'i32')}")
            sh = self.op(f"arith.shli {wide}, {self.vconst(16, n, 'i32')} : {self.vt(n, 'i32')}")
            return self.op(f"arith.bitcast {sh} : {self.vt(n, 'i32')} to {self.vt(n, 'f32')}")
        if aval.dtype == dtypes.float16:
            return self.op(f"arith.extf {v} : {self.vt(n, 'f16')} to {self.vt(n, 'f32')}")
        return v

    def vstore(self, v: str, buf: str, off: str, n: int) -> None:
        aval = self.avals[buf]
        st = storage_type(aval.dtype)
        if aval.dtype == dtypes.bfloat16:
            v = self._to_bf16(v, n)
        elif aval.dtype == dtypes.float16:
            v = self.op(f"arith.truncf {v} : {self.vt(n, 'f32')} to {self.vt(n, 'f16')}")
        self.b.stmt(f"vector.store {v}, {buf}[{off}] : {memref_type(aval)}, {self.vt(n, st)}")

    def _to_bf16(self, x: str, n: int) -> str:
        """float32 -> bfloat16 bits, round to nearest even, NaN kept (as ``Builder``'s)."""
        i32, f32 = self.vt(n, "i32"), self.vt(n, "f32")
        k = lambda v: self.vconst(v, n, "i32")  # noqa: E731
        bits = self.op(f"arith.bitcast {x} : {f32} to {i32}")
        hi = self.op(f"arith.shrui {bits}, {k(16)} : {i32}")
        lsb = self.op(f"arith.andi {hi}, {k(1)} : {i32}")
        bias = self.op(f"arith.addi {lsb}, {k(0x7FFF)} : {i32}")
        rounded = self.op(f"arith.shrui {self.op(f'arith.addi {bits}, {bias} : {i32}')}, "
                          f"{k(16)} : {i32}")  # fmt: skip
        quiet = self.op(f"arith.ori {hi}, {k(0x40)} : {i32}")
        nan = self.op(f"arith.cmpf uno, {x}, {x} : {f32}")
        out = self.op(f"arith.select {nan}, {quiet}, {rounded} : vector<{n}xi1>, {i32}")
        return self.op(f"arith.trunci {out} : {i32} to {self.vt(n, 'i16')}")

    def row(self, buf: str, base: str, d: int) -> list[str]:
        return [self.vload(buf, self.b.iaddc(base, o), n) for o, n in self.chunks(d)]

    def store_row(self, vs: list[str], buf: str, base: str, d: int) -> None:
        for v, (o, n) in zip(vs, self.chunks(d)):
            self.vstore(v, buf, self.b.iaddc(base, o), n)

    def load(self, buf: str, lin: str) -> str:
        """A scalar of ``buf`` in the accumulator type (a mask byte as ``i1``)."""
        aval = self.avals[buf]
        v = self.b.load(buf, aval, lin)
        if aval.dtype == np.dtype(np.float64) or aval.dtype == np.bool_ or self.a == "f32":
            return v
        return self.op(f"arith.extf {v} : f32 to f64")

    def store(self, v: str, buf: str, lin: str) -> None:
        self.b.store(v, buf, self.avals[buf], lin)

    def transpose(
        self,
        src: str,
        sbase: str,
        sstride: int,
        dst: str,
        dbase: str,
        dstride: int,
        rows: int,
        cols: int,
    ) -> None:
        """``dst[dbase + c * dstride + r] = src[sbase + r * sstride + c]`` for ``r < rows``,
        ``c < cols``: tiles of ``w x w`` through registers (a butterfly of two-vector shuffles)
        where ``cols`` is whole vectors, element by element for the rest."""
        w, b = self.w, self.b
        full = rows - rows % w if cols % w == 0 else 0
        if full:
            r0, _, _ = self.for_(self.i(0), self.i(full), step=self.i(w))
            c0, _, _ = self.for_(self.i(0), self.i(cols), step=self.i(w))
            at = b.iadd(b.iadd(sbase, b.imul(r0, sstride)), c0)
            vs = [self.vload(src, b.iaddc(at, r * sstride), w) for r in range(w)]
            t = self.vt(w)
            d = w // 2
            while d:  # swap the off-diagonal d x d blocks: bit d of row and lane
                for a in [r for r in range(w) if not r & d]:
                    lo = [(x ^ d) + w if x & d else x for x in range(w)]
                    hi = [(x ^ d) if not x & d else x + w for x in range(w)]
                    na = self.op(f"vector.shuffle {vs[a]}, {vs[a + d]} {lo} : {t}, {t}")
                    vs[a + d] = self.op(f"vector.shuffle {vs[a]}, {vs[a + d]} {hi} : {t}, {t}")
                    vs[a] = na
                d //= 2
            to = b.iadd(b.iadd(dbase, b.imul(c0, dstride)), r0)
            for c in range(w):
                self.vstore(vs[c], dst, b.iaddc(to, c * dstride), w)
            self.end("")
            self.end("")
        if full < rows:
            r, _, _ = self.for_(self.i(full), self.i(rows))
            c, _, _ = self.for_(self.i(0), self.i(cols))
            x = self.load(src, b.iadd(b.iadd(sbase, b.imul(r, sstride)), c))
            self.store(x, dst, b.iadd(b.iadd(dbase, b.imul(c, dstride)), r))
            self.end("")
            self.end("")

    # ---- index helpers --------------------------------------------------------------------------

    def lin(self, *pairs: tuple[str, int]) -> str:
        """Row-major offset ``((i0 * d1 + i1) * d2 + i2) ...`` of ``(index, size)`` pairs."""
        acc = self.i(0)
        for idx, size in pairs:
            acc = self.b.iadd(self.b.imul(acc, size), idx)
        return acc

    def bs_offset(self, lead: tuple[int, int], b: str, n: str, i: str, j: str) -> str:
        """Offset of ``(b, n, i, j)`` in a ``(1|B, 1|N, T, S)`` bias or mask."""
        bb = b if lead[0] > 1 else self.i(0)
        nb = n if lead[1] > 1 else self.i(0)
        return self.lin((bb, lead[0]), (nb, lead[1]), (i, self.sp.t), (j, self.sp.s))

    def score(self, qs, ks, bias, mask, b, n, i, j) -> tuple[str, str | None]:
        """``scale q.k + bias`` (``q`` pre-scaled by the caller or not, see ``scaled``) and
        the mask bit (or None)."""
        sp = self.sp
        s = self.dot(qs, ks, sp.h)
        if bias is not None:
            s = self.f("addf", s, self.load(bias, self.bs_offset(sp.bias, b, n, i, j)))
        ok = None
        if mask is not None:
            ok = self.load(mask, self.bs_offset(sp.mask, b, n, i, j))
        return s, ok

    def for_(self, lo: str, hi: str, inits=(), step: str | None = None):
        return self.b.begin_range(lo, hi, step or self.i(1), inits)

    def end(self, res: str, yields=()) -> list[str]:
        return self.b.end_for(res, yields)

    def function(self, name: str, prologue: list[str]) -> str:
        lines = [f"  func.func @{name}({', '.join(self.params)}) {{"]
        lines += self.b.const_lines + ["    " + p for p in prologue]
        lines += self.b.lines + ["    return", "  }"]
        lines += list(self.b.decls.values())
        return "module {\n" + "\n".join(lines) + "\n}\n"


def inputs(e: Emitter, sp: Spec) -> tuple[str, str, str, str | None, str | None]:
    """The kernel parameters ``q, k, v, [bias], [mask]`` (None where the spec has none)."""
    q = e.param("q", sp.b * sp.t * sp.n * sp.h, e.dt)
    k = e.param("k", sp.b * sp.s * sp.kh * sp.h, e.dt)
    v = e.param("v", sp.b * sp.s * sp.kh * sp.hv, e.dt)
    bias = e.param("bias", math.prod(sp.bias) * sp.t * sp.s, e.dt) if sp.bias else None
    mask = e.param("mask", math.prod(sp.mask) * sp.t * sp.s, np.bool_) if sp.mask else None
    return q, k, v, bias, mask


def acc_dtype(sp: Spec):
    """The numpy accumulator type: float64 for float64 inputs, else float32."""
    return np.float64 if sp.acc == "f64" else np.float32
