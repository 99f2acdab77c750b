"""MLIR CPU kernels of the fused attention primitives (``blu.lax.attention``): FlashAttention-2's
online softmax blocked over keys, so no ``(T, S)`` buffer exists (Dao 2023, "FlashAttention-2:
Faster Attention with Better Parallelism and Work Partitioning", arXiv:2307.08691).

- ``emit_forward``: per query row, the keys in blocks of ``BLOCK_KEYS``: the block's scores
  (``q . k`` as ``vector`` dot products over the head), the running maximum, ``exp`` of the
  block (a scalar loop LLVM vectorizes), and ``acc = alpha acc + sum_j p_j v_j`` held in
  registers (Algorithm 1). Writes ``out`` and ``lse = m + log l`` (``-inf`` and zeros for a row
  with nothing to attend).
- ``emit_backward``: ``D = rowsum(dO * O) - dL`` first, then per key row ``j`` (its ``dk_j``,
  ``dv_j`` in registers, summed over the query heads of its group and the queries that see it),
  ``P = exp(S - L)``, ``dV += P dO``, ``dS = P (dO . v - D)``, ``dQ += scale dS k`` (memory),
  ``dK += scale dS q`` (Algorithm 2, with the loops in the order a single core wants).

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

BLOCK_KEYS = 64  # keys per block of scores (a stack buffer of this many accumulator values)
VERSION = "2"  # bump when the generated code changes meaning


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
            f"blu-attention-cpu-{kind} v{VERSION} block={BLOCK_KEYS} {dataclasses.astuple(self)!r}"
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
    def s_pad(self) -> int:
        """``S`` rounded up to whole key blocks (the forward's transposed keys)."""
        return -(-self.s // self.key_block) * self.key_block

    def workspace(self, kind: str) -> list[tuple[str, int]]:
        """The scratch buffers ``(dtype name, elements)`` of the ``kind`` kernel: the forward's
        transposed keys ``(B, K, H, S_pad)``; the backward's ``D``, then (half floats) the
        float32 ``dq`` and ``dbias`` accumulators."""
        acc = "float64" if self.acc == "f64" else "float32"
        if kind == "fwd":
            return [(acc, self.b * self.kh * self.h * self.s_pad)]
        ws = [(acc, self.b * self.n * self.t)]
        if self.low:
            ws.append(("float32", self.b * self.t * self.n * self.h))
            if self.need_dbias:
                ws.append(("float32", math.prod(self.bias) * self.t * self.s))
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


class _Emitter:
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


def _inputs(e: _Emitter, sp: Spec) -> tuple[str, str, str, str | None, str | None]:
    q = e.param("q", sp.b * sp.t * sp.n * sp.h, e.dt)
    k = e.param("k", sp.b * sp.s * sp.kh * sp.h, e.dt)
    v = e.param("v", sp.b * sp.s * sp.kh * sp.hv, e.dt)
    bias = e.param("bias", math.prod(sp.bias) * sp.t * sp.s, e.dt) if sp.bias else None
    mask = e.param("mask", math.prod(sp.mask) * sp.t * sp.s, np.bool_) if sp.mask else None
    return q, k, v, bias, mask


def _acc_np(sp: Spec):
    return np.float64 if sp.acc == "f64" else np.float32


# ---- forward -------------------------------------------------------------------------------------


def emit_forward(sp: Spec, name: str) -> str:
    """The forward kernel ``name(q, k, v, [bias], [mask], out, lse, kt)`` (``kt``: workspace
    for the transposed keys; see the module doc)."""
    e = _Emitter(sp)
    q, k, v, bias, mask = _inputs(e, sp)
    out = e.param("out", sp.b * sp.t * sp.n * sp.hv, e.dt)
    lse = e.param("lse", sp.b * sp.n * sp.t, _acc_np(sp))
    kt = e.param("kt", sp.b * sp.kh * sp.h * sp.s_pad, _acc_np(sp))
    a, g, lanes, bk, sp_ = e.a, sp.n // sp.kh, sp.lanes, sp.key_block, sp.s_pad
    sc = "%sc"
    e.avals[sc] = ShapedArray((bk,), _acc_np(sp))
    prologue = [f"{sc} = memref.alloca() : {memref_type(e.avals[sc])}"]
    ninf, zero = e.c(-math.inf), e.c(0.0)
    vch = e.chunks(sp.hv)
    vzeros = [e.vconst(0.0, n, a) for _, n in vch]
    vtys = [e.vt(n) for _, n in vch]
    lt = e.vt(lanes)

    # keys transposed to (B, K, H, S_pad), zero-padded: a block's scores are then vectors of
    # keys, sum_h q[h] * kt[h, j0:j0+lanes], with no horizontal sums
    bi, _, _ = e.for_(e.i(0), e.i(sp.b))
    khi, _, _ = e.for_(e.i(0), e.i(sp.kh))
    ji, _, _ = e.for_(e.i(0), e.i(sp_))
    hi, _, _ = e.for_(e.i(0), e.i(sp.h))
    dst = e.lin((bi, sp.b), (khi, sp.kh), (hi, sp.h), (ji, sp_))
    inside = e.op(f"arith.cmpi ult, {ji}, {e.i(sp.s)} : index")
    src = e.sel(inside, e.lin((bi, sp.b), (ji, sp.s), (khi, sp.kh), (hi, sp.h)), e.i(0), "index")
    e.store(e.sel(inside, e.load(k, src), zero), kt, dst)
    for _ in range(4):
        e.end("")

    bi, _, _ = e.for_(e.i(0), e.i(sp.b))
    ni, _, _ = e.for_(e.i(0), e.i(sp.n))
    khi = e.b.op(f"arith.divui {ni}, {e.i(g)} : index") if g > 1 else ni
    ii, _, _ = e.for_(e.i(0), e.i(sp.t))
    qbase = e.lin((bi, sp.b), (ii, sp.t), (ni, sp.n), (e.i(0), sp.h))
    jend = e.i(sp.s)
    if sp.is_causal:
        jend = e.op(f"arith.minui {e.b.iaddc(ii, 1)}, {jend} : index")
    jend32 = e.op(f"arith.index_cast {jend} : index to i32")
    inits = [(ninf, a), (zero, a)] + list(zip(vzeros, vtys))
    j0, st, res = e.for_(e.i(0), jend, inits, step=e.i(bk))
    m, l, accs = st[0], st[1], st[2:]
    jn = e.op(f"arith.minui {e.op(f'arith.subi {jend}, {j0} : index')}, {e.i(bk)} : index")
    # pass 1: the block's scores (vectors over keys) and their maximum
    nr = bk // lanes
    hi, ss, rh = e.for_(e.i(0), e.i(sp.h), [(e.vconst(0.0, lanes, a), lt)] * nr)
    qh = e.splat(e.f("mulf", e.load(q, e.b.iadd(qbase, hi)), e.c(sp.scale)), lanes)
    kb = e.b.iadd(e.lin((bi, sp.b), (khi, sp.kh), (hi, sp.h), (j0, sp_)), e.i(0))
    ss = [e.fma(qh, e.vload(kt, e.b.iaddc(kb, r * lanes), lanes), x, lanes)
          for r, x in enumerate(ss)]  # fmt: skip
    ss = e.end(rh, [(x, lt) for x in ss])
    mx = None
    for r, x in enumerate(ss):
        start = e.b.iaddc(j0, r * lanes)
        ok = e.lanes_below(start, jend32, lanes)
        if bias is not None:
            x = e.f("addf", x, e.vload(bias, e.bs_offset(sp.bias, bi, ni, ii, start), lanes, ok),
                    lt)  # fmt: skip
        if mask is not None:
            mk = e.vload(mask, e.bs_offset(sp.mask, bi, ni, ii, start), lanes, ok)
            ok = e.op(f"arith.andi {ok}, {mk} : vector<{lanes}xi1>")
        x = e.sel(ok, x, e.vconst(-math.inf, lanes, a), f"vector<{lanes}xi1>, {lt}")
        e.b.stmt(f"vector.store {x}, {sc}[{e.i(r * lanes)}] : {memref_type(e.avals[sc])}, {lt}")
        mx = x if mx is None else e.f("maxnumf", mx, x, lt)
    mb = e.op(f"vector.reduction <maxnumf>, {mx} : {lt} into {a}")
    m_new = e.f("maxnumf", m, mb)
    m_safe = e.sel(e.is_neg_inf(m_new), zero, m_new)
    alpha = e.exp(e.f("subf", m, m_safe))
    # pass 2: p = exp(s - m) in place, and its sum (a loop LLVM vectorizes)
    jj, (sm,), r2 = e.for_(e.i(0), jn, [(zero, a)])
    x = e.op(f"memref.load {sc}[{jj}] : {memref_type(e.avals[sc])}")
    p = e.exp(e.f("subf", x, m_safe))
    e.b.stmt(f"memref.store {p}, {sc}[{jj}] : {memref_type(e.avals[sc])}")
    (ls,) = e.end(r2, [(e.op(f"arith.addf {sm}, {p} fastmath<reassoc> : {a}"), a)])
    # pass 3: acc = alpha acc + sum_j p_j v_j
    scaled = [e.f("mulf", x, e.splat(alpha, n), e.vt(n)) for x, (_, n) in zip(accs, vch)]
    jj, st3, r3 = e.for_(e.i(0), jn, list(zip(scaled, vtys)))
    p = e.op(f"memref.load {sc}[{jj}] : {memref_type(e.avals[sc])}")
    vs = e.row(v, e.lin((bi, sp.b), (e.b.iadd(j0, jj), sp.s), (khi, sp.kh), (e.i(0), sp.hv)),
               sp.hv)  # fmt: skip
    new = [e.fma(e.splat(p, n), y, acc, n) for y, acc, (_, n) in zip(vs, st3, vch)]
    accs2 = e.end(r3, list(zip(new, vtys)))
    l2 = e.f("addf", e.f("mulf", alpha, l), ls)
    fin = e.end(res, [(m_new, a), (l2, a)] + list(zip(accs2, vtys)))
    m, l, accs = fin[0], fin[1], fin[2:]
    has = e.op(f"arith.cmpf ogt, {l}, {zero} : {a}")
    l1 = e.sel(has, l, e.c(1.0))
    inv = e.f("divf", e.c(1.0), l1)
    outs = [e.sel(has, e.f("mulf", x, e.splat(inv, n), e.vt(n)), z, e.vt(n))
            for x, z, (_, n) in zip(accs, vzeros, vch)]  # fmt: skip
    e.store_row(outs, out, e.lin((bi, sp.b), (ii, sp.t), (ni, sp.n), (e.i(0), sp.hv)), sp.hv)
    lg = e.op(f"math.log {l1} : {a}")
    e.store(e.sel(has, e.f("addf", m, lg), ninf), lse, e.lin((bi, sp.b), (ni, sp.n), (ii, sp.t)))
    for _ in range(3):
        e.end("")
    return e.function(name, prologue)


# ---- backward ------------------------------------------------------------------------------------


def emit_backward(sp: Spec, name: str) -> str:
    """The backward kernel ``name(q, k, v, [bias], [mask], out, lse, dout, [dlse], dq, dk, dv,
    [dbias], dd, [dq_acc], [dbias_acc])`` (the last are the workspace buffers)."""
    e = _Emitter(sp)
    q, k, v, bias, mask = _inputs(e, sp)
    acc_np, a, g = _acc_np(sp), e.a, sp.n // sp.kh
    nq, nrow = sp.b * sp.t * sp.n, sp.b * sp.n * sp.t
    out = e.param("out", nq * sp.hv, e.dt)
    lse = e.param("lse", nrow, acc_np)
    dout = e.param("dout", nq * sp.hv, e.dt)
    dlse = e.param("dlse", nrow, acc_np) if sp.has_dlse else None
    dq = e.param("dq", nq * sp.h, e.dt)
    dk = e.param("dk", sp.b * sp.s * sp.kh * sp.h, e.dt)
    dv = e.param("dv", sp.b * sp.s * sp.kh * sp.hv, e.dt)
    nbias = math.prod(sp.bias) * sp.t * sp.s if sp.need_dbias else 0
    dbias = e.param("dbias", nbias, e.dt) if sp.need_dbias else None
    dd = e.param("dd", nrow, acc_np)
    dq_acc, db_acc = dq, dbias
    if sp.low:
        dq_acc = e.param("dqacc", nq * sp.h, np.float32)
        if sp.need_dbias:
            db_acc = e.param("dbacc", nbias, np.float32)
    zero, pinf = e.c(0.0), e.c(math.inf)
    qb, sc = sp.key_block, "%sc"
    sct = memref_type(ShapedArray((qb,), acc_np))

    def fill_zero(buf: str, size: int) -> None:
        x, _, _ = e.for_(e.i(0), e.i(size))
        e.store(zero, buf, x)
        e.end("")

    fill_zero(dq_acc, nq * sp.h)
    if db_acc is not None:
        fill_zero(db_acc, nbias)
    # D = rowsum(dO * O) - dL
    bi, _, _ = e.for_(e.i(0), e.i(sp.b))
    ii, _, _ = e.for_(e.i(0), e.i(sp.t))
    ni, _, _ = e.for_(e.i(0), e.i(sp.n))
    base = e.lin((bi, sp.b), (ii, sp.t), (ni, sp.n), (e.i(0), sp.hv))
    d = e.dot(e.row(dout, base, sp.hv), e.row(out, base, sp.hv), sp.hv)
    row = e.lin((bi, sp.b), (ni, sp.n), (ii, sp.t))
    if dlse is not None:
        d = e.f("subf", d, e.load(dlse, row))
    e.store(d, dd, row)
    for _ in range(3):
        e.end("")
    # per key row j: dk_j, dv_j in registers over the group's heads and the queries seeing j
    hch, vch = e.chunks(sp.h), e.chunks(sp.hv)
    hz = [(e.vconst(0.0, n, a), e.vt(n)) for _, n in hch]
    vz = [(e.vconst(0.0, n, a), e.vt(n)) for _, n in vch]
    bi, _, _ = e.for_(e.i(0), e.i(sp.b))
    khi, _, _ = e.for_(e.i(0), e.i(sp.kh))
    ji, _, _ = e.for_(e.i(0), e.i(sp.s))
    kbase = e.lin((bi, sp.b), (ji, sp.s), (khi, sp.kh), (e.i(0), sp.h))
    vbase = e.lin((bi, sp.b), (ji, sp.s), (khi, sp.kh), (e.i(0), sp.hv))
    ks, vs = e.row(k, kbase, sp.h), e.row(v, vbase, sp.hv)
    gi, st_g, res_g = e.for_(e.i(0), e.i(g), hz + vz)
    ni = e.b.iadd(e.b.imul(khi, g), gi)
    # the queries seeing key j in blocks: their P = exp(S - L) first (a loop LLVM
    # vectorizes), then each query's updates
    carried = [(x, t) for x, (_, t) in zip(st_g, hz + vz)]
    ib, st, res_i = e.for_(ji if sp.is_causal else e.i(0), e.i(sp.t), carried, step=e.i(qb))
    inn = e.op(f"arith.minui {e.op(f'arith.subi {e.i(sp.t)}, {ib} : index')}, {e.i(qb)} : index")
    jj, _, _ = e.for_(e.i(0), inn)
    ii = e.b.iadd(ib, jj)
    qbase = e.lin((bi, sp.b), (ii, sp.t), (ni, sp.n), (e.i(0), sp.h))
    s, ok = e.score(e.row(q, qbase, sp.h), ks, None, mask, bi, ni, ii, ji)
    s = e.f("mulf", s, e.c(sp.scale))
    if bias is not None:
        s = e.f("addf", s, e.load(bias, e.bs_offset(sp.bias, bi, ni, ii, ji)))
    lv = e.load(lse, e.lin((bi, sp.b), (ni, sp.n), (ii, sp.t)))
    lv = e.sel(e.is_neg_inf(lv), pinf, lv)  # a row with nothing to attend: P = 0, not NaN
    x = e.f("subf", s, lv)
    if ok is not None:
        x = e.sel(ok, x, e.c(-math.inf))
    e.b.stmt(f"memref.store {x}, {sc}[{jj}] : {sct}")
    e.end("")
    jj, _, _ = e.for_(e.i(0), inn)
    x = e.op(f"memref.load {sc}[{jj}] : {sct}")
    e.b.stmt(f"memref.store {e.exp(x)}, {sc}[{jj}] : {sct}")
    e.end("")
    jj, st, res_q = e.for_(e.i(0), inn, [(x, t) for x, (_, t) in zip(st, hz + vz)])
    dks, dvs = st[: len(hch)], st[len(hch) :]
    ii = e.b.iadd(ib, jj)
    p = e.op(f"memref.load {sc}[{jj}] : {sct}")
    qbase = e.lin((bi, sp.b), (ii, sp.t), (ni, sp.n), (e.i(0), sp.h))
    obase = e.lin((bi, sp.b), (ii, sp.t), (ni, sp.n), (e.i(0), sp.hv))
    qs, dos = e.row(q, qbase, sp.h), e.row(dout, obase, sp.hv)
    row = e.lin((bi, sp.b), (ni, sp.n), (ii, sp.t))
    dvs = [e.fma(e.splat(p, n), y, x, n) for y, x, (_, n) in zip(dos, dvs, vch)]
    dp = e.dot(dos, vs, sp.hv)
    ds = e.f("mulf", p, e.f("subf", dp, e.load(dd, row)))
    if db_acc is not None:  # the bias is added after the scale
        off = e.bs_offset(sp.bias, bi, ni, ii, ji)
        e.store(e.f("addf", e.load(db_acc, off), ds), db_acc, off)
    dss = e.f("mulf", ds, e.c(sp.scale))
    for x, (o, n) in zip(ks, hch):
        off = e.b.iaddc(qbase, o)
        e.vstore(e.fma(e.splat(dss, n), x, e.vload(dq_acc, off, n), n), dq_acc, off, n)
    dks = [e.fma(e.splat(dss, n), x, y, n) for x, y, (_, n) in zip(qs, dks, hch)]
    ys = e.end(res_q, [(x, e.vt(n)) for x, (_, n) in zip(dks + dvs, hch + vch)])
    ys = e.end(res_i, [(x, e.vt(n)) for x, (_, n) in zip(ys, hch + vch)])
    ys = e.end(res_g, [(x, e.vt(n)) for x, (_, n) in zip(ys, hch + vch)])
    e.store_row(ys[: len(hch)], dk, kbase, sp.h)
    e.store_row(ys[len(hch) :], dv, vbase, sp.hv)
    for _ in range(3):
        e.end("")
    if sp.low:  # round the float32 accumulators once
        for src, dst, size in ((dq_acc, dq, nq * sp.h), (db_acc, dbias, nbias)):
            if src is None or src == dst:
                continue
            x, _, _ = e.for_(e.i(0), e.i(size))
            e.store(e.load(src, x), dst, x)
            e.end("")
    return e.function(name, [f"{sc} = memref.alloca() : {sct}"])
