"""Soft register bounds (``compiler.SOFT_BOUND``): a row group that loops over rows with column
partials (``codegen_rows.GRID_SM_THREADS``) asks ptxas for ``1024 / block`` blocks an SM, and
keeps the bound only where ptxas assembles the function without spilling.

Without a GPU: the emitted text carries the marked bound; through ptxas, every function either
keeps its bound and spills nothing, or lost it because it spilled under it (checked against the
PTX assembled with every bound); without ptxas, no bound is kept.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess

import numpy as np
import pytest

import blu
import blu.nn as nn
from blu.lower.cuda import codegen_rows
from blu.lower.cuda import compiler as mlir_gpu
from blu.lower.cuda.codegen import emit_gpu_kernel
from blu.lower.plan.nodes import NodeKind

f32 = np.float32
needs_mlir = pytest.mark.skipif(importlib.util.find_spec("mlir") is None, reason="needs MLIR")
needs_ptxas = pytest.mark.skipif(mlir_gpu.find_ptxas() is None, reason="needs ptxas")


def _bf16():
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def rms_grads(x, g, dy):
    """An RMSNorm's input and gain gradients (LLaMA's; a bfloat16 cotangent cast up)."""

    def rms(x, g):
        return nn.rms_norm(x, g)

    return blu.vjp(rms, x, g)[1](dy.astype(f32))


def ln_grads(x, g, b, dy):
    """A layer norm's input, gain and bias gradients (GPT-2's)."""
    return blu.vjp(nn.layer_norm, x, g, b)[1](dy.astype(f32))


def _kernel_texts(fn, rows: int, cols: int) -> list[str]:
    """The emitted MLIR of the CUDA plan's kernels that loop a row group over rows."""
    n = 2 if fn is rms_grads else 3
    specs = [blu.ShapeDtypeStruct((rows, cols), np.dtype(f32))]
    specs += [blu.ShapeDtypeStruct((cols,), np.dtype(f32))] * (n - 1)
    specs += [blu.ShapeDtypeStruct((rows, cols), _bf16())]
    plan = blu.jit(fn).lower(*specs, target="cuda:sm_90")._program.plan
    texts = [emit_gpu_kernel(node.layout, f"k{i}") for i, node in enumerate(plan.nodes)
             if node.kind == NodeKind.KERNEL]  # fmt: skip
    return [t for t in texts if mlir_gpu.SOFT_BOUND in t]


def _bounds(text: str) -> dict[str, tuple[int, int]]:
    return {m.group(1): (int(m.group(2)), int(m.group(3))) for m in re.finditer(
        r"gpu\.func @(\w+)\(.*?\) kernel attributes \{blu\.soft_bound, nvvm\.maxntid = "
        r"array<i32: (\d+), 1, 1>, nvvm\.minctasm = (\d+) : i32\}", text)}  # fmt: skip


def _spills(ptx: bytes) -> dict[str, int]:
    cmd = [mlir_gpu.find_ptxas(), "-v", "-arch=sm_90", "-", "-o", "/dev/null"]
    out = subprocess.run(cmd, input=ptx, capture_output=True, check=True).stderr.decode()
    return {f: int(n) for f, n in re.findall(
        r"Function properties for (\w+)\s+\d+ bytes stack frame, (\d+) bytes spill stores", out)}


@needs_mlir
@pytest.mark.parametrize("fn, cols", [(rms_grads, 2048), (ln_grads, 768)])
def test_the_looping_group_asks_for_half_an_sm(fn, cols):
    texts = _kernel_texts(fn, 4096, cols)
    assert texts, "no row group with column partials"
    for text in texts:
        for name, (threads, blocks) in _bounds(text).items():
            assert threads == codegen_rows.group_block(cols), name
            assert blocks == codegen_rows.GRID_SM_THREADS // threads, name


@needs_mlir
@needs_ptxas
@pytest.mark.parametrize("sm_threads", [1024, 2048])
@pytest.mark.parametrize("fn, cols", [(rms_grads, 2048), (ln_grads, 768), (ln_grads, 1600)])
def test_a_bound_is_kept_only_where_it_spills_nothing(monkeypatch, fn, cols, sm_threads):
    """At 2048 threads an SM (32 registers) the groups spill, and lose the bound."""
    monkeypatch.setattr(codegen_rows, "GRID_SM_THREADS", sm_threads)
    dropped = 0
    for text in _kernel_texts(fn, 4096, cols):
        bounded = _spills(mlir_gpu.compile_ptx(text))
        ptx, cubin = mlir_gpu._assemble(text, "sm_90")
        final, kept = _spills(ptx), ptx.decode()
        assert cubin is not None
        for name in _bounds(text):
            has = re.search(rf"\.entry {name}\b[^{{]*\.minnctapersm", kept) is not None
            assert has == (bounded[name] == 0), (name, bounded[name])
            assert final[name] == 0 or not has, name
            dropped += not has
    assert dropped or sm_threads == 1024


@needs_mlir
def test_without_ptxas_no_bound_is_kept(monkeypatch):
    text = _kernel_texts(rms_grads, 4096, 2048)[0]
    monkeypatch.setattr(mlir_gpu, "find_ptxas", lambda: None)
    ptx, cubin = mlir_gpu._assemble(text, "sm_90")
    assert cubin is None and b".minnctapersm" not in ptx and b".maxntid" not in ptx
