"""A lockstep SIMT interpreter for the hand-written GPU kernels' MLIR text (``flash_text``
builder output: one op a line): runs one block's threads together as numpy arrays, so the
flash-attention kernels' index arithmetic, fragment layouts and ``mma.sync`` products can be
checked on a machine without a GPU.

Semantics: every SSA value is an array over the block's threads; ``scf.if`` runs both branches
under masks (loads of inactive threads read index 0, their stores are dropped); loop bounds must
be uniform; ``gpu.barrier`` starts a new epoch, and a shared-memory word read in an epoch after
another thread wrote it in the same epoch (or written after another thread read it) is
reported as a race (lockstep execution would otherwise hide a missing barrier).
``mma.sync.m16n8k8`` (TF32) follows the PTX ISA's fragment layouts, using the operands' upper
19 bits; ``cvt.rna.tf32.f32`` rounds to nearest, ties away from zero.
"""

from __future__ import annotations

import re

import numpy as np

F32 = np.float32


class Race(AssertionError):
    pass


def _split_funcs(text: str) -> dict[str, tuple[list[str], list[str]]]:
    funcs, lines = {}, text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"\s*gpu\.func @(\w+)\((.*?)\)(?: workgroup\((.*?)\))? kernel", lines[i])
        if m:
            params = [p.split(":")[0].strip() for p in m.group(2).split(", ")]
            if m.group(3):  # static shared buffers (1-D) after the parameters: (name, size)
                params += [(w.split(":")[0].strip(), int(re.search(r"memref<(\d+)x", w).group(1)))
                           for w in m.group(3).split(", %")]  # fmt: skip
            body, depth = [], 1
            i += 1
            while depth:
                s = lines[i].strip()
                if s.endswith("{") and not s.startswith("}"):
                    depth += 1
                elif s == "}":
                    depth -= 1
                if depth:
                    body.append(s)
                i += 1
            funcs[m.group(1)] = (params, body)
        else:
            i += 1
    return funcs


def _tree(lines: list[str]) -> list:
    """Nest the lines: ("op", text) or ("for"/"if", header, [bodies])."""
    out, stack = [], []
    cur = out
    for s in lines:
        if s == "gpu.return":
            continue
        if s == "} else {":
            node = stack[-1][1]
            node[2].append([])
            cur = node[2][-1]
        elif s == "}":
            cur, node = stack.pop()
            cur = cur
        elif s.endswith("{"):
            node = ["for" if "scf.for" in s else "if", s, [[]]]
            cur.append(node)
            stack.append((cur, node))
            cur = node[2][0]
        else:
            cur.append(("op", s))
    return out


class Block:
    def __init__(self, nt: int, bid: tuple[int, int], smem_bytes: int, glob: dict):
        self.nt, self.bid = nt, bid
        self.tid = np.arange(nt)
        self.smem = np.zeros(max(smem_bytes, 4) // 4, F32)
        self.w_epoch = np.full(self.smem.size, -1)
        self.w_tid = np.full(self.smem.size, -1)
        self.r_epoch = np.full(self.smem.size, -1)
        self.r_tid = np.full(self.smem.size, -1)
        self.epoch = 0
        self.env: dict[str, object] = dict(glob)
        self.views: dict[str, tuple[int, int, int]] = {}  # name -> (offset, rows, cols)

    # ---- values ---------------------------------------------------------------------------

    def val(self, name: str):
        name = name.strip()
        if "#" in name:
            base, j = name.split("#")
            return self.env[base][int(j)]
        return self.env[name]

    def bcast(self, x):
        x = np.asarray(x)
        return np.broadcast_to(x, (self.nt,) + x.shape[1:] if x.ndim else (self.nt,))

    # ---- shared memory with race checks ---------------------------------------------------

    def _flat(self, view: str, idx: list, k: int = 0):
        off, rows, cols = self.views[view]
        r, c = idx if len(idx) == 2 else (0, idx[0])
        return off // 4 + np.asarray(r) * cols + np.asarray(c) + k

    def sload(self, flat, mask):
        flat = np.where(mask, flat, 0)
        t = self.tid[mask]
        f = flat[mask]
        bad = (self.w_epoch[f] == self.epoch) & (self.w_tid[f] != t)
        if bad.any():
            raise Race(f"shared read after another thread's write in epoch {self.epoch}")
        multi = (self.r_epoch[f] == self.epoch) & (self.r_tid[f] != t)
        self.r_tid[f] = np.where(multi, -2, t)
        self.r_epoch[f] = self.epoch
        return self.smem[flat]

    def sstore(self, flat, x, mask):
        t, f = self.tid[mask], flat[mask]
        bad = (self.r_epoch[f] == self.epoch) & (self.r_tid[f] != t)
        bad |= (self.w_epoch[f] == self.epoch) & (self.w_tid[f] != t)
        if bad.any():
            raise Race(f"shared write racing another thread's access in epoch {self.epoch}")
        if len(np.unique(f)) != len(f):
            raise Race("two threads write one shared word in one op")
        self.smem[f] = x[mask]
        self.w_epoch[f], self.w_tid[f] = self.epoch, t


def _const(text: str, nt: int):
    v, _, ty = text.rpartition(" : ") if " : " in text else (text, "", "i1")
    v = v.strip()
    if ty == "i1" or v in ("true", "false"):
        return np.full(nt, v == "true")
    if v.startswith("dense<"):
        n = int(re.search(r"vector<(\d+)x", ty).group(1))
        return np.full((nt, n), F32(float(v[6:-1])))
    if ty == "index" or ty.startswith("i"):
        return np.full(nt, int(v), np.int64)
    if v.startswith("0x"):
        return np.full(nt, np.uint32(int(v, 16)).view(F32))
    return np.full(nt, F32(float(v)))


def _rna(x):
    bits = np.asarray(x, F32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.int32)


def _tf32(bits):
    return (np.asarray(bits).astype(np.int64) & 0xFFFFE000).astype(np.uint32).view(F32)


_CMPI = {"ult": np.less, "ule": np.less_equal, "ugt": np.greater, "uge": np.greater_equal,
         "eq": np.equal, "ne": np.not_equal, "slt": np.less, "sgt": np.greater,
         "sge": np.greater_equal, "sle": np.less_equal}  # fmt: skip
_CMPF = {"oeq": np.equal, "ogt": np.greater, "olt": np.less, "oge": np.greater_equal,
         "uno": lambda a, b: np.isnan(a) | np.isnan(b),
         "ord": lambda a, b: ~np.isnan(a) & ~np.isnan(b)}  # fmt: skip
_FOP = {"addf": np.add, "subf": np.subtract, "mulf": np.multiply, "divf": np.divide,
        "maximumf": np.maximum, "minimumf": np.minimum}  # fmt: skip
_IOP = {"addi": np.add, "subi": np.subtract, "muli": np.multiply, "divui": np.floor_divide,
        "remui": np.remainder, "minui": np.minimum, "maxui": np.maximum}  # fmt: skip


def _idx(s: str) -> list[str]:
    return [x.strip() for x in s.split(",")]


def _run(B: Block, nodes: list, mask) -> None:
    for node in nodes:
        if node[0] == "op":
            _op(B, node[1], mask)
        elif node[0] == "for":
            _for(B, node, mask)
        else:
            _if(B, node, mask)


def _results(head: str) -> tuple[str, int]:
    m = re.match(r"(%[\w#]+)(?::(\d+))? = ", head)
    return (m.group(1), int(m.group(2) or 1)) if m else ("", 0)


def _for(B: Block, node, mask) -> None:
    head = node[1]
    res, n = _results(head)
    m = re.search(r"scf\.for (%[\w#]+) = (%[\w#]+) to (%[\w#]+) step (%[\w#]+)", head)
    iv, lo, hi, st = m.groups()
    carried = re.search(r"iter_args\((.*)\) ->", head)
    pairs = [p.split(" = ") for p in carried.group(1).split(", ")] if carried else []
    cur = [np.array(B.val(x)) for _, x in pairs]
    if not mask.any():  # no thread runs it (bounds unread): the results are the inits
        if n:
            B.env[res] = cur if re.match(r"%[\w#]+:\d+ = ", head) else cur[0]
        return
    los, his = (np.broadcast_to(np.asarray(B.val(x)), (B.nt,)) for x in (lo, hi))
    lo_, hi_ = int(los[mask].min()), int(his[mask].max())
    st_ = int(np.asarray(B.val(st))[mask][0])
    uniform = (los[mask] == lo_).all() and (his[mask] == hi_).all()
    body = node[2][0]
    yl = body[-1][1] if body and body[-1][0] == "op" and "scf.yield" in body[-1][1] else None
    for i in range(lo_, hi_, st_):
        B.env[iv] = np.full(B.nt, i, np.int64)
        for (a, _), v in zip(pairs, cur):
            B.env[a] = v
        # per-thread bounds: a thread takes part in the iterations of its own range
        live = mask if uniform else mask & (los <= i) & (i < his)
        _run(B, body[:-1] if yl else body, live)
        if yl:
            names = _idx(yl.split("scf.yield ")[1].split(" : ")[0])
            new = [np.array(B.val(x)) for x in names]
            cur = new if uniform else [np.where(live, a, b) for a, b in zip(new, cur)]
    if n:  # ``%r:N = ...`` is read as ``%r#j``; a single result as ``%r``
        B.env[res] = cur if re.match(r"%[\w#]+:\d+ = ", head) else cur[0]


def _if(B: Block, node, mask) -> None:
    head = node[1]
    res, n = _results(head)
    cond = np.asarray(B.val(re.search(r"scf\.if (%[\w#]+)", head).group(1)))
    outs = []
    for br, m in zip(node[2], (mask & cond, mask & ~cond)):
        vals = None
        if br and br[-1][0] == "op" and "scf.yield" in br[-1][1]:
            body, yl = br[:-1], br[-1][1]
        else:
            body, yl = br, None
        if m.any():
            _run(B, body, m)
            if yl:
                names = _idx(yl.split("scf.yield ")[1].split(" : ")[0])
                vals = [np.array(B.val(x)) for x in names]
        outs.append(vals)
    if n:
        then, other = outs
        if then is None or other is None:
            B.env[res] = then if other is None else other
            return
        B.env[res] = [np.where(cond.reshape((-1,) + (1,) * (a.ndim - 1)), a, b)
                      for a, b in zip(then, other)]  # fmt: skip


def _op(B: Block, s: str, mask) -> None:
    env, nt = B.env, B.nt
    if s == "gpu.barrier":
        B.epoch += 1
        return
    m = re.match(r"(%[\w#]+)(?:, (%[\w#]+))? = ([\w.]+)\s*(.*)$", s)
    if m is None:
        m2 = re.match(r"([\w.]+) (.*)$", s)
        opname, rest, res = m2.group(1), m2.group(2), None
    else:
        res, res2, opname, rest = m.group(1), m.group(2), m.group(3), m.group(4)
    rest = re.sub(r" fastmath<\w+>", "", rest)
    kind = opname.split(".", 1)
    if opname == "arith.constant":
        env[res] = _const(rest, nt)
    elif kind[0] == "arith" and kind[1] in _IOP and rest.endswith(": index"):
        a, b = _idx(rest.rsplit(" : ", 1)[0])
        with np.errstate(divide="ignore"):
            env[res] = _IOP[kind[1]](B.val(a), np.maximum(B.val(b), 1) if kind[1] in
                                     ("divui", "remui") else B.val(b)).astype(np.int64)  # fmt: skip
    elif kind[0] == "arith" and kind[1] in _FOP:
        a, b = _idx(rest.rsplit(" : ", 1)[0])
        with np.errstate(all="ignore"):
            env[res] = _FOP[kind[1]](np.asarray(B.val(a), F32), np.asarray(B.val(b), F32))
    elif opname == "arith.cmpi":
        pred, a, b = _idx(rest.rsplit(" : ", 1)[0])
        env[res] = _CMPI[pred](B.val(a), B.val(b))
    elif opname == "arith.cmpf":
        pred, a, b = _idx(rest.rsplit(" : ", 1)[0])
        env[res] = _CMPF[pred](B.val(a), B.val(b))
    elif opname == "arith.select":
        c, a, b = _idx(rest.rsplit(" : ", 1)[0])
        env[res] = np.where(B.val(c), B.val(a), B.val(b))
    elif opname in ("arith.andi", "arith.ori", "arith.xori"):
        a, b = _idx(rest.rsplit(" : ", 1)[0])
        f = {"andi": np.logical_and, "ori": np.logical_or, "xori": np.logical_xor}[kind[1]]
        env[res] = f(B.val(a), B.val(b))
    elif opname == "arith.bitcast":
        x = np.ascontiguousarray(B.val(rest.split(" : ")[0]))
        env[res] = x.view(np.int32 if rest.endswith("to i32") else F32)
    elif opname == "arith.index_cast":
        env[res] = np.asarray(B.val(rest.split(" : ")[0])).astype(np.int64)
    elif opname == "math.exp2":
        with np.errstate(all="ignore"):
            env[res] = np.exp2(np.asarray(B.val(rest.split(" : ")[0]), F32))
    elif opname == "math.log2":
        with np.errstate(all="ignore"):
            env[res] = np.log2(np.asarray(B.val(rest.split(" : ")[0]), F32))
    elif opname == "math.fma":
        a, b, c = (np.asarray(B.val(x), F32) for x in _idx(rest.split(" : ")[0]))
        env[res] = (a.astype(np.float64) * b + c).astype(F32)
    elif opname == "gpu.thread_id":
        env[res] = B.tid.astype(np.int64)
    elif opname == "gpu.block_id":
        env[res] = np.full(nt, B.bid[0 if rest.strip() == "x" else 1], np.int64)
    elif opname == "gpu.dynamic_shared_memory":
        env[res] = "smem"
    elif opname == "memref.view":
        off = int(np.asarray(B.val(re.search(r"\[(%[\w#]+)\]", rest).group(1)))[0])
        rows, cols = map(int, re.search(r"to memref<(\d+)x(\d+)xf32", rest).groups())
        B.views[res] = (off, rows, cols)
    elif opname == "gpu.shuffle":
        x, off = _idx(rest.split(" : ")[0].replace("xor ", ""))[:2]
        partner = B.tid ^ int(np.asarray(B.val(off))[0])
        env[res] = np.asarray(B.val(x))[partner]
        env[res2] = np.ones(nt, bool)
    elif opname == "llvm.inline_asm":
        assert "cvt.rna.tf32.f32" in rest, rest
        x = re.search(r'"=r,f" (%[\w#]+)', rest).group(1)
        env[res] = _rna(B.val(x))
    elif opname == "llvm.extractvalue":
        x, j = re.match(r"(%[\w#]+)\[(\d+)\]", rest).groups()
        env[res] = B.val(x)[:, int(j)]
    elif opname == "nvvm.mma.sync":
        env[res] = _mma(B, rest, mask)
    elif opname == "vector.extract":
        x, j = re.match(r"(%[\w#]+)\[(\d+)\]", rest).groups()
        env[res] = np.asarray(B.val(x))[:, int(j)]
    elif opname == "vector.from_elements":
        env[res] = np.stack([np.asarray(B.val(x)) for x in _idx(rest.split(" : ")[0])], 1)
    elif opname in ("memref.load", "vector.load"):
        buf, idx = re.match(r"(%[\w#]+)\[(.*?)\]", rest).groups()
        n = int(re.search(r"vector<(\d+)x", rest).group(1)) if opname == "vector.load" else 1
        idx = [np.asarray(B.val(x)) for x in _idx(idx)]
        if buf in B.views:
            vals = [B.sload(B._flat(buf, idx, k), mask) for k in range(n)]
        else:
            g = env[buf]
            vals = [g[np.where(mask, idx[0] + k, 0)] for k in range(n)]
        env[res] = vals[0] if opname == "memref.load" else np.stack(vals, 1)
    elif opname in ("memref.store", "vector.store"):
        x, buf, idx = re.match(r"(%[\w#]+), (%[\w#]+)\[(.*?)\]", rest).groups()
        xv = np.asarray(B.val(x))
        xv = xv[:, None] if xv.ndim == 1 else xv
        idx = [np.asarray(B.val(i)) for i in _idx(idx)]
        for k in range(xv.shape[1]):
            if buf in B.views:
                B.sstore(B._flat(buf, idx, k), xv[:, k], mask)
            else:
                at = (idx[0] + k)[mask]
                assert len(np.unique(at)) == len(at), "two threads store one global word"
                env[buf][at] = xv[mask, k]
    elif opname == "memref.atomic_rmw":
        x, buf, idx = re.match(r"addf (%[\w#]+), (%[\w#]+)\[(.*?)\]", rest).groups()
        np.add.at(env[buf], np.asarray(B.val(idx))[mask], np.asarray(B.val(x))[mask])
    else:
        raise NotImplementedError(s)


def _mma(B: Block, rest: str, mask):
    a = [np.asarray(B.val(x)) for x in _idx(re.search(r"A\[(.*?)\]", rest).group(1))]
    b = [np.asarray(B.val(x)) for x in _idx(re.search(r"B\[(.*?)\]", rest).group(1))]
    c = [np.asarray(B.val(x), F32) for x in _idx(re.search(r"C\[(.*?)\]", rest).group(1))]
    assert mask.all(), "mma.sync under divergent control flow"
    out = np.zeros((B.nt, 4), F32)
    for w in range(B.nt // 32):
        lanes = np.arange(32) + 32 * w
        g, t = np.arange(32) >> 2, np.arange(32) % 4
        A = np.zeros((16, 8))
        Bm = np.zeros((8, 8))
        C = np.zeros((16, 8))
        for i, (dr, dk) in enumerate(((0, 0), (8, 0), (0, 4), (8, 4))):
            A[g + dr, t + dk] = _tf32(a[i][lanes])
        for i, dk in enumerate((0, 4)):
            Bm[t + dk, g] = _tf32(b[i][lanes])
        for i, (dr, dc) in enumerate(((0, 0), (0, 1), (8, 0), (8, 1))):
            C[g + dr, 2 * t + dc] = c[i][lanes]
        D = (A @ Bm + C).astype(F32)
        for i, (dr, dc) in enumerate(((0, 0), (0, 1), (8, 0), (8, 1))):
            out[lanes, i] = D[g + dr, 2 * t + dc]
    return out


def launch(text: str, func: str, grid: tuple[int, int], block: int, shared: int,
           args: list[np.ndarray]) -> None:  # fmt: skip
    """Run kernel ``func`` of the module ``text`` over ``grid`` on the float32 arrays ``args``
    (changed in place)."""
    params, body = _split_funcs(text)[func]
    wg = [p for p in params if isinstance(p, tuple)]
    params = [p for p in params if not isinstance(p, tuple)]
    shared += 4 * sum(n for _, n in wg)
    tree = _tree(body)
    for by in range(grid[1]):
        for bx in range(grid[0]):
            B = Block(block, (bx, by), shared, dict(zip(params, args)))
            off = shared - 4 * sum(n for _, n in wg)
            for name, n in wg:  # workgroup buffers: one-row views (words as float32)
                B.views[("%" + name.lstrip("%"))] = (off, 1, n)
                off += 4 * n
            _run(B, tree, np.ones(block, bool))
