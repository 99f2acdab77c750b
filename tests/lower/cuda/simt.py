"""A lockstep SIMT interpreter of the ``gpu.func`` text blu's CUDA emitter writes, for CPU tests
of GPU kernels' values (the simulated device, ``BLU_FAKE_GPU=1``, runs the CPU backend's loops
instead, so it never executes the emitter's code).

``run_func(text, name, mem, grid, block)`` runs launch ``name`` of a ``gpu.module`` text over
``grid`` blocks of ``block`` threads, one block at a time, the block's threads as numpy vectors
in step (a region runs under a mask of the threads that enter it). ``mem`` maps each buffer
parameter (``%in0``, ``%out1``, ``%tmp2``...) to a flat numpy array, updated in place; bfloat16
buffers are int16 arrays of the raw bits, as the kernels see them.

What it covers is the subset the row-group and split emitters write: ``arith``, the ``math``
functions they use, ``memref.load/store`` on flat buffers and on views of the block's dynamic
shared memory (``gpu.dynamic_shared_memory``, ``memref.view``: each view its own array, fresh
per block, and a load of an element no thread of the block stored raises), ``scf.for`` (with
``iter_args``) and ``scf.if``, ``gpu.all_reduce`` with a combining region (the threads' values
combined in thread order), the special-function ``ex2`` call, ``gpu.barrier``. Anything else
raises ``NotImplementedError`` naming the line. Arithmetic is numpy's in the operation's type
(``fma`` in float64, then rounded; ``ex2`` as ``exp2``), so values agree with the GPU's to
rounding, and two kernels with the same operations in the same order agree bit for bit.

Written for the pipelined row loop's tests (``test_gpu_simt.py``: ``codegen_prefetch``); from a
reviewing helper's interpreter of session 25.
"""

from __future__ import annotations

import re
from typing import Any

import ml_dtypes
import numpy as np

NP = {"f32": np.float32, "f64": np.float64, "index": np.int64, "i64": np.int64, "i32": np.int32,
      "i16": np.int16, "i8": np.int8, "i1": np.bool_}  # fmt: skip
_UNSIGNED = {"i8": np.uint8, "i16": np.uint16, "i32": np.uint32, "i64": np.uint64}
_BINARY = {
    "arith.addf": np.add, "arith.addi": np.add, "arith.subf": np.subtract,
    "arith.subi": np.subtract, "arith.mulf": np.multiply, "arith.muli": np.multiply,
    "arith.divf": np.divide, "arith.divui": np.floor_divide, "arith.remui": np.remainder,
    "arith.minui": np.minimum, "arith.maxsi": np.maximum, "arith.minsi": np.minimum,
    "arith.divsi": lambda a, b: np.trunc(a / b), "arith.remsi": np.fmod,
    "arith.maxnumf": np.fmax, "arith.minnumf": np.fmin,
    "arith.maximumf": np.maximum, "arith.minimumf": np.minimum, "arith.ori": np.bitwise_or,
    "arith.andi": np.bitwise_and, "arith.xori": np.bitwise_xor, "arith.shli": np.left_shift,
}  # fmt: skip
_UNARY = {"math.sqrt": np.sqrt, "arith.negf": np.negative, "math.exp": np.exp,
          "math.absf": np.abs, "math.rsqrt": lambda a: np.float32(1) / np.sqrt(a)}  # fmt: skip
_MEMREF = r"memref<\d+x\w+(?:, #gpu\.address_space<workgroup>)?>"
_CMP = {"eq": np.equal, "ne": np.not_equal, "gt": np.greater, "ge": np.greater_equal,
        "lt": np.less, "le": np.less_equal}  # fmt: skip


def functions(text: str) -> dict[str, list[str]]:
    """Each ``gpu.func``'s name to its body's lines (stripped)."""
    out: dict[str, list[str]] = {}
    cur = None
    for ln in text.splitlines():
        s = ln.strip()
        m = re.match(r"gpu\.func @(\w+)\(", s)
        if m:
            cur = out[m.group(1)] = []
        elif s == "gpu.return":
            cur = None
        elif cur is not None:
            cur.append(s)
    return out


def buffer_params(text: str, name: str) -> list[tuple[str, int, str]]:
    """``[(param, elements, element type)]`` of launch ``name``'s buffers."""
    head = next(ln for ln in text.splitlines() if f"gpu.func @{name}(" in ln)
    return [(p, int(n), t) for p, n, t in re.findall(r"(%\w+): memref<(\d+)x(\w+)>", head)]


def _tree(lines: list[str], i: int = 0) -> tuple[list, int]:
    """Lines nested by regions: a ``str`` or ``(header, children)``."""
    out: list = []
    while i < len(lines):
        s = lines[i]
        if s.startswith("}"):  # (an all_reduce's region ends "} : (f32) -> (f32)")
            if s != "}" and not s.startswith("} :"):
                raise NotImplementedError(s)
            return out, i
        if s.endswith("{"):
            kids, i = _tree(lines, i + 1)
            out.append((s, kids))
        else:
            out.append(s)
        i += 1
    return out, i


def _const(lit: str, ty: str) -> Any:
    if ty == "i1":
        return lit == "true"
    if ty in ("f32", "f64") and lit.startswith("0x"):
        bits = np.array(int(lit, 16), _UNSIGNED["i32" if ty == "f32" else "i64"])
        return bits.view(NP[ty])[()]
    return NP[ty](float(lit)) if ty in ("f32", "f64") else NP[ty](int(lit, 0))


class _Block:
    """One block's threads in step (``T`` lanes)."""

    def __init__(self, mem: dict, T: int, bid: int, grid: int):
        self.mem, self.T, self.env = mem, T, {}
        self.ids = {"block_id": np.int64(bid), "thread_id": np.arange(T, dtype=np.int64),
                    "block_dim": np.int64(T), "grid_dim": np.int64(grid)}  # fmt: skip
        self.yielded: list = []
        self.shared: dict = {}  # a view of shared memory -> (its elements, which were stored)

    def buffer(self, name: str) -> tuple[np.ndarray, np.ndarray | None]:
        """A buffer parameter's array (None: global), or a shared view's and its stored mask."""
        got = self.shared.get(name)
        return got if got is not None else (self.mem[name], None)

    def vec(self, x: Any) -> np.ndarray:
        x = np.asarray(x)
        return np.broadcast_to(x, (self.T,)).copy() if x.ndim == 0 else x

    def run(self, items: list, mask: np.ndarray) -> None:
        for it in items:
            if isinstance(it, str):
                self.op(it, mask)
            else:
                self.region(*it, mask)

    def op(self, s: str, mask: np.ndarray) -> None:
        E = self.env.__getitem__
        if s.startswith("gpu.barrier"):
            return  # (lockstep: every thread is at the barrier)
        if s.startswith("scf.yield"):
            self.yielded = [E(n) for n in s[len("scf.yield ") :].split(" : ")[0].split(", ")]
            return
        if s.startswith("memref.store"):
            m = re.match(rf"memref\.store (%[\w#]+), (%\w+)\[(%[\w#]+)\] : {_MEMREF}", s)
            (arr, stored), idx = self.buffer(m.group(2)), self.vec(E(m.group(3)))
            v, i = self.vec(E(m.group(1))), idx[mask]
            assert ((i >= 0) & (i < arr.size)).all(), f"store out of bounds: {s}"
            arr[i] = v[mask].astype(arr.dtype)
            if stored is not None:
                stored[i] = True
            return
        m = re.match(r"(%\w+) = (\S+) (.*)$", s)
        if m is None:
            raise NotImplementedError(s)
        dst, name, rest = m.groups()
        rest = re.sub(r" fastmath<[^>]*>", "", rest)
        with np.errstate(all="ignore"):
            self.env[dst] = self._value(name, rest, mask, s)

    def _value(self, name: str, rest: str, mask: np.ndarray, s: str) -> Any:
        E = self.env.__getitem__
        if name == "arith.constant":
            lit, ty = rest.rsplit(" : ", 1) if " : " in rest else (rest, "i1")
            return _const(lit.strip(), ty.strip())
        if name == "gpu.dynamic_shared_memory":
            return None  # (its views are arrays of their own)
        if name.startswith("gpu."):
            return self.ids[name[4:]]
        if name == "memref.view":
            m = re.match(r"%\w+\[%\w+\]\[\] : memref<\?xi8, [^>]+>> to memref<(\d+)x(\w+),", rest)
            n, ty = int(m.group(1)), NP[m.group(2)]
            self.shared[s.split(" = ")[0]] = (np.full(n, -1, ty), np.zeros(n, bool))
            return None
        if name == "memref.load":
            m = re.match(rf"(%\w+)\[(%[\w#]+)\] : {_MEMREF}", rest)
            (arr, stored), idx = self.buffer(m.group(1)), self.vec(E(m.group(2)))
            safe = np.where(mask, idx, 0)
            assert ((safe >= 0) & (safe < arr.size)).all(), f"load out of bounds: {s}"
            assert stored is None or stored[safe[mask]].all(), f"load of an unstored element: {s}"
            return arr[safe]
        if name == "math.fma":
            m = re.match(r"(%[\w#]+), (%[\w#]+), (%[\w#]+) : (\w+)", rest)
            a, b, c = (np.asarray(E(m.group(i)), np.float64) for i in (1, 2, 3))
            return (a * b + c).astype(NP[m.group(4)])
        if name == "llvm.call_intrinsic":
            m = re.match(r'"([\w.]+)"\((%[\w#]+)\) : \((\w+)\) -> (\w+)', rest)
            if m is None or "ex2" not in m.group(1):
                raise NotImplementedError(s)
            return np.exp2(np.asarray(E(m.group(2)), np.float32))
        if name in ("arith.cmpf", "arith.cmpi"):
            m = re.match(r"(\w+), (%[\w#]+), (%[\w#]+) : (\w+)", rest)
            p, a, b = m.group(1), np.asarray(E(m.group(2))), np.asarray(E(m.group(3)))
            if name == "arith.cmpf":
                nan = np.isnan(a) | np.isnan(b)
                if p in ("uno", "ord"):
                    return nan if p == "uno" else ~nan
                base = _CMP[p[1:]](a, b)
                return base & ~nan if p[0] == "o" else base | nan
            if p.startswith("u"):
                u = _UNSIGNED.get(m.group(4), np.uint64)
                a, b, p = a.astype(u), b.astype(u), p[1:]
            elif p.startswith("s"):
                p = p[1:]
            return _CMP[p](a, b)
        if name == "arith.select":
            m = re.match(r"(%[\w#]+), (%[\w#]+), (%[\w#]+) : (\w+)", rest)
            return np.where(E(m.group(1)), E(m.group(2)), E(m.group(3)))
        m = re.match(r"(%[\w#]+) : (\w+) to (\w+)$", rest)
        if m:
            return self._cast(name, np.asarray(E(m.group(1))), m.group(2), m.group(3), s)
        m = re.match(r"(%[\w#]+), (%[\w#]+) : (\w+)$", rest)
        if m:
            a, b, ty = np.asarray(E(m.group(1))), np.asarray(E(m.group(2))), m.group(3)
            if name == "arith.shrui":
                u = _UNSIGNED[ty]
                return (a.astype(NP[ty]).view(u) >> b.astype(u)).view(NP[ty])
            if name not in _BINARY:
                raise NotImplementedError(s)
            return np.asarray(_BINARY[name](a, b)).astype(NP[ty])
        m = re.match(r"(%[\w#]+) : (\w+)$", rest)
        if m and name in _UNARY:
            return np.asarray(_UNARY[name](np.asarray(E(m.group(1))))).astype(NP[m.group(2)])
        raise NotImplementedError(s)

    @staticmethod
    def _cast(name: str, a: np.ndarray, t1: str, t2: str, s: str) -> np.ndarray:
        if name == "arith.bitcast":
            if {t1, t2} <= {"bf16", "i16"}:
                return a.astype(np.int16)  # (bfloat16 values travel as their bits)
            return a.astype(NP[t1]).view(NP[t2])
        if name == "arith.extui":
            u = a.astype(np.uint8) if t1 == "i1" else a.astype(NP[t1]).view(_UNSIGNED[t1])
            return u.astype(_UNSIGNED[t2]).view(NP[t2])
        if name == "arith.truncf" and t2 == "bf16":
            return a.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.int16)
        if name == "arith.uitofp":
            return a.astype(np.uint8 if t1 == "i1" else _UNSIGNED[t1]).astype(NP[t2])
        if name in ("arith.trunci", "arith.truncf", "arith.extf", "arith.sitofp",
                    "arith.fptosi", "arith.index_cast"):  # fmt: skip
            return a.astype(NP[t2])
        raise NotImplementedError(s)

    def region(self, head: str, kids: list, mask: np.ndarray) -> None:
        E = self.env.__getitem__
        m = re.match(r"(?:(%\w+)(?::\d+)? = )?scf\.for (%\w+) = (%\w+) to (%\w+) step (%\w+)"
                     r"(?: iter_args\((.*)\) -> \((.*)\))? \{", head)  # fmt: skip
        if m:
            res, iv, lo, hi, step, its, _ = m.groups()
            lo, hi, step = (self.vec(np.asarray(E(x), np.int64)) for x in (lo, hi, step))
            names, vals = [], []
            for part in its.split(", ") if its else []:
                a, v = part.split(" = ")
                names.append(a)
                vals.append(self.vec(E(v)))
            n = 0
            while True:
                at = lo + n * step
                live = mask & (at < hi)
                if not live.any():
                    break
                self.env[iv] = at
                self.env.update(zip(names, vals))
                self.run(kids, live)
                vals = [np.where(live, self.vec(y), v) for y, v in zip(self.yielded, vals)]
                n += 1
            if res:
                self.env[res] = vals[0] if len(vals) == 1 else None
                self.env.update({f"{res}#{i}": v for i, v in enumerate(vals)})
            return
        m = re.match(r"scf\.if (%[\w#]+) \{", head)
        if m:
            self.run(kids, mask & self.vec(E(m.group(1))))
            return
        m = re.match(r"(%\w+) = gpu\.all_reduce (%[\w#]+) uniform \{", head)
        if m:
            x = self.vec(E(m.group(2)))
            p, q = re.match(r"\^bb0\((%\w+): \w+, (%\w+): \w+\):", kids[0]).groups()
            acc = x[0]
            for t in range(1, self.T):  # (in thread order: the same in every kernel)
                self.env[p], self.env[q] = acc, x[t]
                for s in kids[1:]:
                    if s.startswith("gpu.yield"):
                        acc = self.env[s.split()[1]]
                    else:
                        self.op(s, np.ones(1, bool))
            self.env[m.group(1)] = acc
            return
        raise NotImplementedError(head)


def run_func(text: str, name: str, mem: dict, grid: int, block: int) -> None:
    """Run launch ``name`` of the module ``text`` on the buffers ``mem`` (module docstring)."""
    tree, _ = _tree(functions(text)[name])
    for bid in range(grid):
        _Block(mem, block, bid, grid).run(tree, np.ones(block, bool))
