"""A small MLIR text builder for hand-written GPU kernels (``flash_gpu``): SSA names, constants
hoisted to the function's entry, ``scf.for``/``scf.if`` with results, vector loads and stores,
and register tiles (lists of SSA names) multiplied out of shared-memory tiles.

Kept apart from ``emit.Builder`` (which serves the fusion pass's generated loop nests) because
these kernels are written by hand: their loops carry whole register tiles as ``iter_args``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

F32 = "f32"
SMEM = "#gpu.address_space<workgroup>"


def vec(n: int, ty: str = F32) -> str:
    return f"vector<{n}x{ty}>"


def smem_type(rows: int, cols: int) -> str:
    return f"memref<{rows}x{cols}xf32, {SMEM}>"


class Text:
    """One ``gpu.func``'s body under construction."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: list[str] = []
        self._const_names: dict[tuple[str, str], str] = {}
        self.n = 0
        self.depth = 3

    # ---- names, constants ---------------------------------------------------------------------

    def v(self, expr: str) -> str:
        name = f"%v{self.n}"
        self.n += 1
        self.stmt(f"{name} = {expr}")
        return name

    def stmt(self, s: str) -> None:
        self.lines.append("  " * self.depth + s)

    def _const(self, value: str, ty: str) -> str:
        key = (value, ty)
        name = self._const_names.get(key)
        if name is None:
            name = f"%c{len(self._const_names)}"
            self._const_names[key] = name
            typed = value if ty == "i1" else f"{value} : {ty}"  # booleans take no type
            self.consts.append(f"      {name} = arith.constant {typed}")
        return name

    def i(self, n: int) -> str:
        """An ``index`` constant."""
        return self._const(str(int(n)), "index")

    def i32(self, n: int) -> str:
        return self._const(str(int(n)), "i32")

    def f(self, x: float) -> str:
        """An ``f32`` constant (``inf``/``-inf`` spelled as MLIR's hex floats)."""
        if x == float("inf"):
            return self._const("0x7F800000", F32)
        if x == float("-inf"):
            return self._const("0xFF800000", F32)
        return self._const(repr(float(x)), F32)

    # ---- index and float arithmetic -----------------------------------------------------------

    def add(self, a: str, b: str) -> str:
        return self.v(f"arith.addi {a}, {b} : index")

    def mul(self, a: str, b: str) -> str:
        return self.v(f"arith.muli {a}, {b} : index")

    def div(self, a: str, b: str) -> str:
        return self.v(f"arith.divui {a}, {b} : index")

    def rem(self, a: str, b: str) -> str:
        return self.v(f"arith.remui {a}, {b} : index")

    def lin(self, *terms: tuple[str, int] | str) -> str:
        """``sum(x * k)`` over ``(x, k)`` pairs (a bare name counts once), as index arithmetic."""
        acc = None
        for t in terms:
            x, k = (t, 1) if isinstance(t, str) else t
            if k == 0:
                continue
            x = x if k == 1 else self.mul(x, self.i(k))
            acc = x if acc is None else self.add(acc, x)
        return acc if acc is not None else self.i(0)

    def cmp(self, pred: str, a: str, b: str) -> str:
        return self.v(f"arith.cmpi {pred}, {a}, {b} : index")

    def fop(self, op: str, *args: str) -> str:
        return self.v(f"arith.{op} {', '.join(args)} : f32")

    def fcmp(self, pred: str, a: str, b: str) -> str:
        return self.v(f"arith.cmpf {pred}, {a}, {b} : f32")

    def select(self, c: str, a: str, b: str, ty: str = F32) -> str:
        return self.v(f"arith.select {c}, {a}, {b} : {ty}")

    def exp2(self, x: str) -> str:
        return self.v(f"math.exp2 {x} : f32")

    def gpu(self, what: str) -> str:
        return self.v(f"gpu.{what} x")

    def barrier(self) -> None:
        self.stmt("gpu.barrier")

    def shuffle_xor(self, x: str, offset: int) -> str:
        # width 32: MLIR derives the active mask from the width, so a narrower width would
        # mark the upper lanes inactive; offsets below 16 keep the exchange inside 16 lanes
        name = f"%v{self.n}"
        self.n += 1
        self.stmt(f"{name}, {name}_ok = gpu.shuffle xor {x}, {self.i32(offset)}, "
                  f"{self.i32(32)} : f32")  # fmt: skip
        return name

    def lane_reduce(self, x: str, op: str, lanes: int) -> str:
        """Combine ``x`` over groups of ``lanes`` consecutive lanes (a power of two <= 32)."""
        off = lanes // 2
        while off >= 1:
            x = self.fop(op, x, self.shuffle_xor(x, off))
            off //= 2
        return x

    # ---- memory -------------------------------------------------------------------------------

    def load(self, buf: str, ty: str, idx: Sequence[str], n: int, ety: str = F32) -> list[str]:
        """``n`` consecutive values at ``buf[idx]`` (elements of type ``ety``: f32, bf16, f16),
        as f32 (one vector load when n > 1)."""
        at = ", ".join(idx)
        size = 4 if ety == F32 else 2
        if n == 1:
            x = self.v(f"memref.load {buf}[{at}] : {ty}")
            return [x if ety == F32 else self.v(f"arith.extf {x} : {ety} to f32")]
        align = min(16, size * n)
        vv = self.v(f"vector.load {buf}[{at}] {{alignment = {align}}} : {ty}, {vec(n, ety)}")
        if ety != F32:
            vv = self.v(f"arith.extf {vv} : {vec(n, ety)} to {vec(n)}")
        return [self.v(f"vector.extract {vv}[{j}] : f32 from {vec(n)}") for j in range(n)]

    def store(self, vals: Sequence[str], buf: str, ty: str, idx: Sequence[str],
              ety: str = F32) -> None:  # fmt: skip
        """Store f32 values at consecutive ``buf[idx]`` (rounded to ``ety`` first)."""
        at = ", ".join(idx)
        size = 4 if ety == F32 else 2
        if len(vals) == 1:
            x = vals[0] if ety == F32 else self.v(f"arith.truncf {vals[0]} : f32 to {ety}")
            self.stmt(f"memref.store {x}, {buf}[{at}] : {ty}")
            return
        n = len(vals)
        vv = self.v(f"vector.from_elements {', '.join(vals)} : {vec(n)}")
        if ety != F32:
            vv = self.v(f"arith.truncf {vv} : {vec(n)} to {vec(n, ety)}")
        align = min(16, size * n)
        self.stmt(f"vector.store {vv}, {buf}[{at}] {{alignment = {align}}} : {ty}, {vec(n, ety)}")

    def atomic_add(self, x: str, buf: str, ty: str, idx: Sequence[str]) -> None:
        self.v(f"memref.atomic_rmw addf {x}, {buf}[{', '.join(idx)}] : (f32, {ty}) -> f32")

    # ---- structured control flow --------------------------------------------------------------

    def loop(
        self,
        lo: str,
        hi: str,
        step: str,
        inits: Sequence[str],
        body: Callable[[str, list[str]], Sequence[str]],
        ty: str | Sequence[str] = F32,
    ) -> list[str]:
        """``scf.for`` carrying ``inits`` (of type ``ty``, one for all or one each);
        ``body(iv, args)`` returns the values to yield. Returns the loop's results."""
        iv = f"%v{self.n}"
        res = f"%v{self.n + 1}"
        self.n += 2
        args = [f"{iv}_a{j}" for j in range(len(inits))]
        tys = [ty] * len(inits) if isinstance(ty, str) else list(ty)
        if inits:
            carried = ", ".join(f"{a} = {x}" for a, x in zip(args, inits))
            types = ", ".join(tys)
            self.stmt(f"{res}:{len(inits)} = scf.for {iv} = {lo} to {hi} step {step} "
                      f"iter_args({carried}) -> ({types}) {{")  # fmt: skip
        else:
            self.stmt(f"scf.for {iv} = {lo} to {hi} step {step} {{")
        self.depth += 1
        out = body(iv, args)
        if inits:
            self.stmt(f"scf.yield {', '.join(out)} : {', '.join(tys)}")
        self.depth -= 1
        self.stmt("}")
        return [f"{res}#{j}" for j in range(len(inits))]

    def if_(self, cond: str, then: Callable[[], Sequence[str]], other: Callable[[], Sequence[str]],
            types: Sequence[str]) -> list[str]:  # fmt: skip
        """``scf.if`` with results of ``types`` (none: a plain conditional block)."""
        res = f"%v{self.n}"
        self.n += 1
        if types:
            self.stmt(f"{res}:{len(types)} = scf.if {cond} -> ({', '.join(types)}) {{")
        else:
            self.stmt(f"scf.if {cond} {{")
        self.depth += 1
        out = then()
        if types:
            self.stmt(f"scf.yield {', '.join(out)} : {', '.join(types)}")
        self.depth -= 1
        if types:
            self.stmt("} else {")
            self.depth += 1
            out = other()
            self.stmt(f"scf.yield {', '.join(out)} : {', '.join(types)}")
            self.depth -= 1
        self.stmt("}")
        return [f"{res}#{j}" for j in range(len(types))]

    def func(self, name: str, params: Sequence[str], threads: int = 0, min_blocks: int = 0) -> str:
        """The ``gpu.func``; ``threads``/``min_blocks``: the block size it is launched with and
        how many blocks an SM should hold at once (NVVM's ``maxntid``/``minctasm``: ptxas then
        bounds the registers per thread)."""
        attrs = []
        if threads:
            attrs.append(f"nvvm.maxntid = array<i32: {threads}, 1, 1>")
        if min_blocks:
            attrs.append(f"nvvm.minctasm = {min_blocks} : i32")
        head = f"    gpu.func @{name}({', '.join(params)}) kernel"
        if attrs:
            head += f" attributes {{{', '.join(attrs)}}}"
        body = self.consts + self.lines
        return "\n".join([head + " {", *body, "      gpu.return", "    }"])


def module(name: str, funcs: Sequence[str]) -> str:
    return (
        "module attributes {gpu.container_module} {\n"
        f"  gpu.module @{name} {{\n" + "\n".join(funcs) + "\n  }\n}\n"
    )
