"""Scatter kernels (``scatter_add`` and ``scatter``, ``blu/lax/gather_scatter.py``) for the CPU
and for CUDA GPUs, as MLIR text: a launch-plan node of their own (a scatter writes at computed
places, so it does not fit the one-element-per-point model of fused kernels).

Semantics (the numpy impl ``_scatter_impl`` is the oracle): ``out = operand``, then for every
row ``b`` of ``indices`` (shape ``batch_shape + (len(axes),)``) and every point ``r`` of the
operand's other axes, ``out[c] += updates[b..., r...]`` (``scatter``: ``=``), where
``c[axes[k]] = indices[b..., k]`` and the other coordinates are ``r``. Coordinates follow
``mode`` as in the gather rule (``rules_gather.coordinate``): ``'clip'`` clamps them into range;
``'fill_or_drop'`` skips a row with any coordinate outside ``[0, n)`` (JAX's default
FILL_OR_DROP). An indexed axis of size 0 has nothing to write to: ``out = operand``.

The kernel function takes four flat buffers (``emit.memref_type``, bare pointers):
``(operand, indices, updates, out)``.

- CPU (``target="cpu"``): one ``func.func``: the copy (skipped when ``out`` is ``operand``'s
  buffer: an in-place update), then the rows in order, each added (in the compute type: half
  floats in float32, rounded once per addition, as numpy does) or written. Duplicates therefore
  accumulate in row order, like ``np.add.at``, and for ``scatter`` the last row wins, like
  numpy's assignment.
- GPU (``target="cuda:sm_XX"``): a ``gpu.module @<name>`` with two kernels over the same four
  parameters: ``<name>_0`` copies ``operand`` to ``out`` (a grid-stride loop; leave it out
  when updating in place), ``<name>_1`` runs one thread per update element (grid-stride),
  ``memref.atomic_rmw`` ``addf`` for f32, f64, f16 and bf16 (native ``atom.add`` on sm_90;
  bf16 updates are added as bf16, rounded by the hardware), ``addi`` for integers (8- and 16-bit
  ones become compare-and-swap loops on the containing word, done by LLVM), ``ori`` for bool.
  The order of additions is not deterministic. ``scatter`` stores without atomics: of duplicate
  rows, any one wins (as JAX documents for the GPU). ``scatter_launches`` gives the grids
  without MLIR.
"""

from __future__ import annotations

import math
from typing import Any

from blu.core import dtypes
from blu.core.errors import BluValueError
from blu.lower.mlir.emit import Builder, Idx, compute_type, is_float, memref_type, storage_type
from blu.lower.mlir.launch import BLOCK, MAX_MAP_GRID, Launch
from blu.lower.mlir.rules_gather import coordinate
from blu.lower.target import platform_of

__all__ = ["SCATTERS", "scatter_supported", "emit_scatter", "scatter_launches"]

SCATTERS = ("scatter_add", "scatter")
_KNOWN = frozenset(d for d in dtypes.SUPPORTED if not dtypes.is_complex(d))  # no complex kernels


def scatter_supported(eqn: Any) -> bool:
    """Whether a ``scatter_add`` / ``scatter`` equation has a compiled kernel: every ``axes``
    and mode of blu's scatters, for blu's dtypes (False for anything else)."""
    if eqn.primitive.name not in SCATTERS:
        return False
    operand, indices, updates = (v.aval for v in eqn.invars)
    return (
        operand.dtype in _KNOWN
        and updates.dtype == operand.dtype
        and dtypes.is_int(indices.dtype)
        and eqn.params["mode"] in ("clip", "fill_or_drop")
    )


class _Geometry:
    """The operand seen as runs of axes: indexed axes stay alone, adjacent untouched axes merge
    (so an embedding table ``(V, D)`` scattered on axis 0 has one inner run of ``D``).

    Attributes:
        N: operand elements; B: rows (index tuples); K: coordinates per row; R: elements per
        row (product of the untouched axes); shape: the merged shape; slots: per merged dim,
        ``("axis", k)`` (coordinate ``k`` of a row) or ``("rest", j)`` (run ``j``); runs: the
        run sizes; empty: an indexed axis has size 0 (nothing to write).
    """

    def __init__(self, eqn: Any):
        operand, indices, _ = (v.aval for v in eqn.invars)
        axes = tuple(eqn.params["axes"])
        self.N, self.K = operand.size, len(axes)
        self.B = math.prod(indices.shape[:-1])
        self.shape: list[int] = []
        self.slots: list[tuple[str, int]] = []
        self.runs: list[int] = []
        for d, n in enumerate(operand.shape):
            if d in axes:
                self.shape.append(n)
                self.slots.append(("axis", axes.index(d)))
            elif self.slots and self.slots[-1][0] == "rest":
                self.shape[-1] *= n
                self.runs[-1] *= n
            else:
                self.shape.append(n)
                self.slots.append(("rest", len(self.runs)))
                self.runs.append(n)
        self.R = math.prod(self.runs)
        self.empty = any(operand.shape[a] == 0 for a in axes)

    def updates(self) -> int:
        """Update elements to scatter (0 when there is nothing to do)."""
        return 0 if self.empty else self.B * self.R


def scatter_launches(eqn: Any, name: str, inplace: bool = False) -> list[Launch]:
    """The GPU launches of ``emit_scatter(eqn, name, "cuda:...")``, in order: the copy
    (``<name>_0``, omitted when ``inplace``: ``out`` is ``operand``'s buffer) and the scatter
    (``<name>_1``); kernels with nothing to do are left out. Each launch passes the four
    buffers ``(operand, indices, updates, out)``; block 256 threads, grid-stride loops."""
    g = _Geometry(eqn)
    out = []
    if g.N and not inplace:
        out.append(Launch(f"{name}_0", min(-(-g.N // BLOCK), MAX_MAP_GRID), BLOCK))
    if g.N and g.updates():
        out.append(Launch(f"{name}_1", min(-(-g.updates() // BLOCK), MAX_MAP_GRID), BLOCK))
    return out


def emit_scatter(eqn: Any, name: str, target: str = "cpu") -> str:
    """The MLIR text of a scatter kernel (see the module docstring).

    Args:
        eqn: a ``scatter_add`` or ``scatter`` equation (``scatter_supported(eqn)``).
        name: the symbol: the CPU ``func.func``, or the ``gpu.module`` (kernels
            ``<name>_0``, ``<name>_1``).
        target: ``"cpu"`` (or the cache's ``cpu:<arch>:<flags>``) or ``"cuda:sm_XX"``.

    Returns:
        a module's text with the parameters ``(operand, indices, updates, out)`` as flat
        memrefs (bare pointers).

    Raises:
        BluValueError: an unknown target, or an equation ``scatter_supported`` rejects.
    """
    if not scatter_supported(eqn):
        raise BluValueError(f"scatter kernel: no lowering for {eqn.primitive.name} of "
                            f"{', '.join(v.aval.str_short() for v in eqn.invars)}")  # fmt: skip
    try:
        platform = platform_of(target)
    except BluValueError as e:
        raise BluValueError(f"scatter kernel: {e}") from None
    em = _ScatterEmitter(eqn)
    return {"cpu": em.cpu_module, "cuda": em.gpu_module}[platform](name)


class _ScatterEmitter:
    def __init__(self, eqn: Any):
        self.eqn = eqn
        self.operand, self.indices, self.updates = (v.aval for v in eqn.invars)
        self.accumulate = eqn.primitive.name == "scatter_add"
        self.drop = eqn.params["mode"] == "fill_or_drop"
        self.g = _Geometry(eqn)
        self.b = Builder()

    def _params(self, out_type: str | None = None) -> str:
        types = [memref_type(a) for a in (self.operand, self.indices, self.updates)]
        types.append(out_type or memref_type(self.operand))
        return ", ".join(f"%{n}: {t}" for n, t in zip(("in0", "in1", "in2", "out0"), types))

    # ---- shared pieces ------------------------------------------------------------------------

    def _row(self, row: str) -> tuple[list[str], str | None]:
        """The clamped coordinates of row ``row`` and (``fill_or_drop``) whether all are in
        bounds (None when there is nothing to check)."""
        b, g = self.b, self.g
        coords, ok = [], None
        axis_of = sorted((k, n) for (kind, k), n in zip(g.slots, g.shape) if kind == "axis")
        for k, n in axis_of:  # (coordinate position, axis size), by position
            at = b.iaddc(b.imul(row, g.K), k)
            raw = b.op(f"memref.load %in1[{at}] : {memref_type(self.indices)}")
            c, valid = coordinate(b, raw, self.indices.dtype, n, self.drop)
            coords.append(c)
            if self.drop:
                ok = valid if ok is None else b.op(f"arith.andi {ok}, {valid} : i1")
        return coords, ok

    def _target(self, coords: list[str], run_idx: list[str]) -> str:
        """The operand's flat index of a row's coordinates and a point of the runs."""
        multi = [coords[k] if kind == "axis" else run_idx[k] for kind, k in self.g.slots]
        return self.b.lin(Idx(self.g.shape, multi))

    def _if(self, cond: str | None) -> bool:
        if cond is None:
            return False
        self.b.stmt(f"scf.if {cond} {{")
        self.b.depth += 1
        return True

    def _end_if(self, opened: bool) -> None:
        if opened:
            self.b.depth -= 1
            self.b.stmt("}")

    def _raw_copy(self, i: str) -> None:
        ty = memref_type(self.operand)
        v = self.b.op(f"memref.load %in0[{i}] : {ty}")
        self.b.stmt(f"memref.store {v}, %out0[{i}] : {ty}")

    def _combine(self, old: str, x: str) -> str:
        dt = self.operand.dtype
        ty = compute_type(dt)
        op = "addf" if is_float(dt) else ("ori" if dt == dtypes.bool_ else "addi")
        return self.b.op(f"arith.{op} {old}, {x} : {ty}")

    # ---- CPU ----------------------------------------------------------------------------------

    def cpu_module(self, name: str) -> str:
        b, g = self.b, self.g
        b.depth = 2
        ty = memref_type(self.operand)
        p_in = b.op(f"memref.extract_aligned_pointer_as_index %in0 : {ty} -> index", "i")
        p_out = b.op(f"memref.extract_aligned_pointer_as_index %out0 : {ty} -> index", "i")
        opened = self._if(b.op(f"arith.cmpi ne, {p_in}, {p_out} : index"))
        i, _, r = b.begin_for(g.N)
        self._raw_copy(i)
        b.end_for(r)
        self._end_if(opened)
        if g.N and g.updates():
            row, _, r_row = b.begin_for(g.B)
            coords, ok = self._row(row)
            opened = self._if(ok)
            run_idx, ends = [], []
            for n in g.runs:
                iv, _, r_run = b.begin_for(n)
                run_idx.append(iv)
                ends.append(r_run)
            self._update(self._target(coords, run_idx), b.iadd(b.imul(row, g.R),
                         b.lin(Idx(g.runs, run_idx))))  # fmt: skip
            for r_run in reversed(ends):
                b.end_for(r_run)
            self._end_if(opened)
            b.end_for(r_row)
        lines = [f"  func.func @{name}({self._params()}) {{"]
        lines += b.const_lines + b.lines + ["    return", "  }"]
        return "module {\n" + "\n".join(lines) + "\n}\n"

    def _update(self, at: str, u_at: str) -> None:
        b = self.b
        if not self.accumulate:
            v = b.op(f"memref.load %in2[{u_at}] : {memref_type(self.updates)}")
            b.stmt(f"memref.store {v}, %out0[{at}] : {memref_type(self.operand)}")
            return
        x = b.load("%in2", self.updates, u_at)
        old = b.load("%out0", self.operand, at)
        b.store(self._combine(old, x), "%out0", self.operand, at)

    # ---- GPU ----------------------------------------------------------------------------------

    def _gpu_begin(self) -> None:
        self.b = Builder()
        self.b.depth = 3

    def _grid_stride(self, n: int) -> str:
        """Open ``scf.for t = global thread id to n step total threads``; returns ``t``."""
        b = self.b
        bid, bdim, tid, gdim = (
            b.op(f"gpu.{w} x", "g") for w in ("block_id", "block_dim", "thread_id", "grid_dim")
        )
        start = b.op(f"arith.addi {b.op(f'arith.muli {bid}, {bdim} : index', 'i')}, {tid} : index")
        step = b.op(f"arith.muli {gdim}, {bdim} : index", "i")
        t = b.fresh("i")
        b.stmt(f"scf.for {t} = {start} to {b.index(n)} step {step} {{")
        b.depth += 1
        return t

    def _gpu_func(self, fname: str, params: str) -> str:
        b = self.b
        lines = [f"    gpu.func @{fname}({params}) kernel {{"]
        lines += ["  " + ln for ln in b.const_lines] + b.lines
        lines += ["      gpu.return", "    }"]
        return "\n".join(lines)

    def _atomic_type(self) -> tuple[str, str]:
        """(element type of ``out`` in the scatter kernel, atomic kind)."""
        dt = self.operand.dtype
        if dt == dtypes.bfloat16:  # the same bits, typed for atom.add.bf16
            return "bf16", "addf"
        if is_float(dt):
            return storage_type(dt), "addf"
        return storage_type(dt), ("ori" if dt == dtypes.bool_ else "addi")

    def gpu_module(self, name: str) -> str:
        g = self.g
        self._gpu_begin()
        if g.N:
            t = self._grid_stride(g.N)
            self._raw_copy(t)
            self.b.depth -= 1
            self.b.stmt("}")
        funcs = [self._gpu_func(f"{name}_0", self._params())]
        self._gpu_begin()
        b = self.b
        elem, kind = self._atomic_type()
        out_ty = f"memref<{g.N}x{elem}>" if self.accumulate else memref_type(self.operand)
        if g.N and g.updates():
            t = self._grid_stride(g.updates())
            row = b.op(f"arith.divui {t}, {b.index(g.R)} : index", "i") if g.R > 1 else t
            r = b.op(f"arith.remui {t}, {b.index(g.R)} : index", "i") if g.R > 1 else b.index(0)
            coords, ok = self._row(row)
            opened = self._if(ok)
            at = self._target(coords, list(b.multi(Idx(g.runs, None, r))))
            v = b.op(f"memref.load %in2[{t}] : {memref_type(self.updates)}")
            if not self.accumulate:
                b.stmt(f"memref.store {v}, %out0[{at}] : {out_ty}")
            else:
                if elem == "bf16":
                    v = b.op(f"arith.bitcast {v} : i16 to bf16")
                b.op(f"memref.atomic_rmw {kind} {v}, %out0[{at}] : ({elem}, {out_ty}) -> {elem}")
            self._end_if(opened)
            b.depth -= 1
            b.stmt("}")
        funcs.append(self._gpu_func(f"{name}_1", self._params(out_ty)))
        return (
            "module attributes {gpu.container_module} {\n"
            f"  gpu.module @{name} {{\n" + "\n".join(funcs) + "\n  }\n}\n"
        )
