"""Elementwise GPU loops with several outputs (``codegen_strided``): each chunk's stores go buffer
by buffer, so LLVM merges a thread's consecutive elements into one vector store per output, and
``$BLU_GPU_MAP_VALUES`` bounds the values a chunk stores (16 bytes of bfloat16 a thread for a
three-output nest at 24).

Without a GPU: the PTX of a SwiGLU's value and gradients (three bfloat16 outputs of one nest):
vector stores only in the unrolled chunk, 8-byte accesses at the default, 16-byte ones at 24, the
setting in the kernel key, no spills. On a GPU (marked ``gpu``): the three outputs against
float64 at sizes the chunks do not divide, both settings.
"""

from __future__ import annotations

import importlib.util
import re

import numpy as np
import pytest
from gpu_helpers import assert_no_spills, make_device, on_gpu, put

import blu
import blu.nn as nn
from blu.lower.cuda import codegen_rows
from blu.lower.cuda import compiler as mlir_gpu

f64 = np.float64
needs_mlir = pytest.mark.skipif(importlib.util.find_spec("mlir") is None, reason="needs MLIR")
needs_ptxas = pytest.mark.skipif(mlir_gpu.find_ptxas() is None, reason="needs ptxas")


def _bf16():
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def swiglu_grads(g, u, dh):
    """``h = silu(g) * u`` and its VJP to ``dh``: one elementwise nest of three outputs."""
    h, vjp = blu.vjp(lambda g, u: nn.silu(g) * u, g, u)
    return (h, *vjp(dh))


def _ptx(n: int, tmp_path, **flags) -> str:
    spec = blu.ShapeDtypeStruct((n,), _bf16())
    with blu.config.override(cache_dir=str(tmp_path), **flags):
        exe = blu.jit(swiglu_grads).lower(spec, spec, spec, target="cuda:sm_90").compile()
    return "\n".join(p.decode() for p in exe.executable.ptx().values())


def _accesses(ptx: str, op: str) -> list[str]:
    """The global ``ld``/``st`` instructions' types (``v2.b32``, ``b16``, ...)."""
    return re.findall(rf"\b{op}\.global\.([a-z0-9.]+)\s", ptx)


@needs_mlir
@pytest.mark.parametrize("values, width", [(16, 8), (24, 16)])
def test_vector_stores_buffer_by_buffer(tmp_path, values, width):
    ptx = _ptx(1 << 20, tmp_path, gpu_map_values=values)  # chunks divide: no remainder loop
    stores, loads = _accesses(ptx, "st"), _accesses(ptx, "ld")
    assert len(stores) == 3 and len(loads) == 3, (stores, loads)  # one access per buffer
    size = {"v2.b32": 8, "v4.b16": 8, "v4.b32": 16, "v2.b64": 16}
    assert all(size.get(t) == width for t in stores + loads), (stores, loads)


def test_the_setting_keys_the_kernels():
    assert "#gpu-map-values" not in codegen_rows.key_suffix()
    with blu.config.override(gpu_map_values=24):
        assert "#gpu-map-values 24" in codegen_rows.key_suffix()


@needs_mlir
@needs_ptxas
@pytest.mark.parametrize("values", [16, 24])
def test_no_spills(tmp_path, values):
    assert_no_spills(_ptx(1000, tmp_path, gpu_map_values=values), tmp_path)


@pytest.fixture(scope="module")
def dev():
    return make_device()


@on_gpu
@pytest.mark.parametrize("values", [16, 24])
@pytest.mark.parametrize("n", [1, 1000, 8 * 256 * 4 + 13])
def test_swiglu_grads_on_the_gpu(dev, values, n):
    rng = np.random.default_rng(n)
    bf16 = _bf16()
    g, u, dh = (rng.standard_normal(n).astype(bf16) for _ in range(3))
    g[:3] = np.array([0.0, -30.0, 30.0], bf16)[: min(n, 3)]
    with blu.config.override(gpu_map_values=values):
        got = [np.asarray(o).astype(f64) for o in blu.jit(swiglu_grads)(*put(dev, g, u, dh))]
    g64, u64, d64 = (a.astype(f64) for a in (g, u, dh))
    s = 1 / (1 + np.exp(-g64))
    want = [g64 * s * u64, d64 * u64 * s * (1 + g64 * (1 - s)), d64 * g64 * s]
    for o, w in zip(got, want, strict=True):
        # bfloat16 inputs exact in f32; a few f32 steps, then one rounding to bfloat16 (2**-8)
        np.testing.assert_allclose(o, w, rtol=2.0**-7, atol=2.0**-7 * np.abs(w).max())
