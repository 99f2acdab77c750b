"""Shared by the GPU test files (``test_gpu_kernels.py``, ``test_gpu_executable.py``): the
device to run on (a GPU, or with ``BLU_FAKE_GPU=1`` a ``FakeDevice``), dtypes, tolerances,
input generators and the comparison against numpy references."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

import blu
import blu.cuda as bc
from blu.cuda.fake import FakeDevice
from blu.lower.backend import prepare
from blu.lower.mlir import _mlir_available

FAKE = os.environ.get("BLU_FAKE_GPU") == "1"
f32, f64, f16, bf16 = np.float32, np.float64, np.float16, ml_dtypes.bfloat16
i32, i64, u8, u32, bool_ = np.int32, np.int64, np.uint8, np.uint32, np.bool_
FLOATS = (f32, f64, bf16, f16)
SINTS = (i32, i64)
INTS = (i32, i64, u8, u32)
RTOL = {np.dtype(f32): 1e-5, np.dtype(f64): 1e-12, np.dtype(f16): 1e-3, np.dtype(bf16): 1e-2}
SHAPE = (37, 129)


def is_float(dt) -> bool:
    return np.dtype(dt) in RTOL


def put(dev, *xs):
    out = tuple(bc.device_put(np.asarray(x), dev) for x in xs)
    return out if len(out) > 1 else out[0]


def check(out, ref, dtype=None, rtol=None, atol=None):
    """``out`` is a DeviceArray equal to ``ref`` (exact for ints/bools, ``rtol`` for floats)."""
    assert isinstance(out, bc.DeviceArray), type(out)
    got = np.asarray(out)
    ref = np.asarray(ref)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    if dtype is not None:
        assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    if is_float(got.dtype):
        tol = rtol if rtol is not None else RTOL[got.dtype]
        atol = tol * 1e-2 if atol is None else atol
        np.testing.assert_allclose(got.astype(f64), ref.astype(f64), rtol=tol, atol=atol)
    else:
        np.testing.assert_array_equal(got, ref.astype(got.dtype))


def rel_err(out, ref) -> float:
    got = np.asarray(out).astype(f64)
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def gen(domain: str, dt, shape, rng) -> np.ndarray:
    """Inputs of dtype ``dt`` from ``domain`` (see the table of elementwise cases)."""
    dt = np.dtype(dt)
    if dt == bool_:
        return rng.random(shape) < 0.5
    if is_float(dt):
        if domain == "any":
            x = rng.standard_normal(shape) * 1.5
        elif domain == "pos":
            x = rng.uniform(0.1, 4.0, shape)
        elif domain == "unit":
            x = rng.uniform(-0.9, 0.9, shape)
        elif domain == "ge1":
            x = rng.uniform(1.1, 4.0, shape)
        elif domain == "gtm1":
            x = rng.uniform(-0.5, 4.0, shape)
        elif domain == "nz":
            x = rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 3.0, shape)
        elif domain == "special":
            x = rng.standard_normal(shape)
            x.flat[::7] = np.inf
            x.flat[3::11] = -np.inf
            x.flat[5::13] = np.nan
        else:
            raise ValueError(domain)
        return x.astype(dt)
    info = np.iinfo(dt)
    signed = info.min < 0
    if domain == "shift":
        return rng.integers(0, info.bits, shape).astype(dt)
    if domain == "bits":
        return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
    if domain == "nz":
        mag = rng.integers(1, 20, shape)
        return (mag * rng.choice([-1, 1], shape) if signed else mag).astype(dt)
    if domain in ("pos", "ge1"):
        return rng.integers(1, 100, shape).astype(dt)
    return rng.integers(-100 if signed else 0, 100 if signed else 200, shape).astype(dt)


GPU_MARKS = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (FAKE or bc.is_available()), reason="needs a GPU (or BLU_FAKE_GPU=1)"),
]
# tests of programs drawn at random (the fuzzer, the OpInfo sweeps) compile kernels no cache can
# hold ahead: they run on the simulated GPU (CI) or where MLIR is installed, not on the GPU
# machine, which runs only kernels compiled ahead (scripts/fill_gpu_cache.py)
COMPILING_GPU_MARKS = [
    *GPU_MARKS,
    pytest.mark.skipif(not (FAKE or _mlir_available()),
                       reason="compiles random programs: needs MLIR (or BLU_FAKE_GPU=1)"),
]  # fmt: skip


def on_gpu(test):
    """``GPU_MARKS`` on one test (in a file whose other tests need no GPU)."""
    for mark in GPU_MARKS:
        test = mark(test)
    return test


def make_device():
    """The device the GPU tests run on."""
    return FakeDevice(capacity=4 << 30) if FAKE else bc.devices()[0]


def plan_nodes(f, *args) -> list:
    """The nodes of the GPU plan of ``jit(f)(*args)`` (traced and planned, not run)."""
    closed = blu.make_jaxpr(f)(*args)
    jaxpr = getattr(closed, "jaxpr", closed)
    return prepare(jaxpr, (False,) * len(jaxpr.invars), "cuda:sm_90")[1].nodes


def assert_no_spills(ptx: str, tmp_path) -> None:
    """``ptxas -v`` assembles the PTX module ``ptx`` for sm_90 with no spill in any function."""
    import subprocess

    from blu.lower.cuda.compiler import find_ptxas

    src = tmp_path / "k.ptx"
    src.write_text(ptx)
    cmd = [find_ptxas(), "-v", "-arch=sm_90", str(src), "-o", str(tmp_path / "k.cubin")]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    spills = [ln for ln in out.stderr.splitlines() if "spill" in ln]
    assert spills and all(" 0 bytes spill stores, 0 bytes spill loads" in ln for ln in spills)
