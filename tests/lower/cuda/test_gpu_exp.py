"""float32 ``exp`` on the GPU through ``ex2.approx`` (``mathlib.exp_ex2``, ``$BLU_GPU_EXP``).

Three parts: the PTX (no GPU: the kernel calls ``ex2.approx.ftz.f32`` and no polynomial, each
setting keys its own kernels; ``logistic`` divides by ``div.approx``); the algorithm modelled in
numpy float32 against float64 (no GPU: the argument reduction and the one scaling, with
``2**f`` perturbed by the hardware's 2 ulp both ways), within 3.2 ulp over the whole range,
subnormal results, zeros, inf and NaN; and the kernel on a GPU (marked ``gpu``) against float64
over the same values. Then a softmax's ``exp(x - max(x))`` (``mathlib.exp_nonpositive``): its
model within its bound over every 1009th non-positive float32, its PTX (no reduction), and
softmax and log-softmax on a GPU against float64.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from gpu_helpers import make_device, on_gpu, put
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.lax as lax
import blu.nn as nn
import blu.numpy as bnp
from blu.lower.cuda import codegen_rows
from blu.lower.cuda import compiler as mlir_gpu
from blu.lower.mlir import mathlib

f32, f64 = np.float32, np.float64
needs_mlir = pytest.mark.skipif(importlib.util.find_spec("mlir") is None, reason="needs MLIR")
needs_ptxas = pytest.mark.skipif(mlir_gpu.find_ptxas() is None, reason="needs ptxas")
BOUND = 3.2  # ulps: exp_ex2's bound (the module docstring)
TINY = 2.0**-149  # the least float32 subnormal: the ulp of every subnormal result


def _ulps(got: np.ndarray, x: np.ndarray) -> np.ndarray:
    """|got - e**x| in float32 ulps of the true result (float64 reference; subnormal results
    counted in the subnormal spacing), 0 where both are the same special value."""
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.exp(x.astype(f64))
        rounded = want.astype(f32)  # beyond FLT_MAX: inf, as float32 rounds it
        ulp = np.maximum(np.spacing(np.abs(rounded)).astype(f64), TINY)
        err = np.abs(got.astype(f64) - want) / ulp
    same = (got == rounded) | (np.isnan(got) & np.isnan(want))
    return np.where(same, 0.0, np.where(np.isnan(err), np.inf, err))


def _model(x: np.ndarray, ex2_ulps: float = 0.0) -> np.ndarray:
    """``exp_ex2`` step by step in float32 (fused multiply-adds in float64, where the product is
    exact); ``2**f`` from numpy (correctly rounded) moved by ``ex2_ulps`` of its spacing: the
    hardware's error either way, flushed to 0 below 2**-126 (``ftz``)."""
    x = np.asarray(x, f32)
    r = f64(mathlib.ROUNDER)
    with np.errstate(invalid="ignore", over="ignore"):
        hi, lo = f64(f32(mathlib.LOG2E_HI)), f64(f32(mathlib.LOG2E_LO))
        s = (x.astype(f64) * hi + r).astype(f32)  # fma: rounded once, to an integer + ROUNDER
        s = np.fmin(np.fmax(s, f32(r + mathlib.J_LO)), f32(r + mathlib.J_HI))  # NaN: a bound
        j = s - f32(r)
        f = (x.astype(f64) * hi - j).astype(f32)  # fma: the exact x*hi - j, rounded once
        f = (x.astype(f64) * lo + f).astype(f32)
        y = np.exp2(f)
        y = np.where(np.isfinite(y), y + f32(ex2_ulps) * np.spacing(y), y).astype(f32)
        y = np.where(np.abs(y) < f32(2.0**-126), f32(0), y)
        return (y.astype(f64) * np.exp2(j.astype(f64))).astype(f32)  # one rounding


SPECIALS = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 88.72, 88.7228, 88.73, 89.0, -87.3,
            -87.34, -88.0, -100.0, -103.2, -103.97, -104.0, -200.0, 1e-8, -1e-8, 1e-40,
            3e38]  # fmt: skip


def _sweep() -> np.ndarray:
    """Every 7919th float32 bit pattern between -105 and 89 (about 280,000 values), the
    specials."""
    lo, hi = np.array([-105.0, 89.0], f32).view(np.uint32)
    neg = np.arange(0x80000000, lo, 7919, dtype=np.uint32).view(f32)  # -0 down to -105
    pos = np.arange(0, hi, 7919, dtype=np.uint32).view(f32)
    return np.concatenate([neg, pos, np.array(SPECIALS, f32)])


@pytest.mark.parametrize("ex2_ulps", [0.0, -2.0, 2.0])
def test_the_algorithm_is_within_bound(ex2_ulps):
    x = _sweep()
    err = _ulps(_model(x, ex2_ulps), x)
    # the reduction and scaling 1.11 ulp (an exact 2**f), the hardware's 2 more
    assert err.max() <= (1.2 if ex2_ulps == 0 else BOUND), (x[err.argmax()], err.max())


@settings(max_examples=300, deadline=None)
@given(st.floats(width=32, allow_nan=True, allow_infinity=True))
def test_the_algorithm_any_float(v):
    x = np.array([v], f32)
    for u in (-2.0, 2.0):
        assert _ulps(_model(x, u), x)[0] <= BOUND


def test_specials_exactly():
    got = _model(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -200.0, 200.0], f32))
    assert got[0] == 1.0 and got[1] == 1.0 and got[2] == np.inf and got[3] == 0.0
    assert np.isnan(got[4]) and got[5] == 0.0 and got[6] == np.inf


@needs_mlir
def test_logistic_divides_approximately_with_ex2(tmp_path):
    """``mathlib.logistic``'s division: under ``ex2`` the ``div.approx.f32`` of the
    special-function unit's reciprocal, under ``poly`` the correctly rounded ``div.rn.f32``."""
    spec = blu.ShapeDtypeStruct((4096,), np.dtype(f32))

    def divs():
        exe = blu.jit(lax.logistic).lower(spec, target="cuda:sm_90").compile()
        text = "\n".join(p.decode() for p in exe.executable.ptx().values())
        return sorted({ln.split()[0] for ln in text.splitlines() if ln.strip().startswith("div.")})

    with blu.config.override(cache_dir=str(tmp_path)):
        assert divs() == ["div.approx.f32"]
        with blu.config.override(gpu_exp="poly"):
            assert divs() == ["div.rn.f32"]


@needs_mlir
@needs_ptxas
def test_ptx_uses_the_special_function_unit(tmp_path):
    spec = blu.ShapeDtypeStruct((4096,), np.dtype(f32))

    def ptx():
        exe = blu.jit(lambda x: lax.exp(x) + 1.0).lower(spec, target="cuda:sm_90").compile()
        return "\n".join(p.decode() for p in exe.executable.ptx().values())

    with blu.config.override(cache_dir=str(tmp_path)):
        fast = ptx()
        with blu.config.override(gpu_exp="poly"):
            poly = ptx()
            assert "#gpu-exp poly" in codegen_rows.key_suffix()
    assert "ex2.approx.ftz.f32" in fast and "cvt.rmi" not in fast
    assert "ex2.approx" not in poly and "cvt.rmi" in poly  # Cephes' floor and polynomial
    count = [sum(1 for line in p.splitlines() if line.strip().endswith(";")) for p in (fast, poly)]
    assert count[0] < 0.7 * count[1], count


@pytest.fixture(scope="module")
def dev():
    return make_device()


@on_gpu
@pytest.mark.parametrize("fn", ["exp", "logistic"])
def test_exp_on_the_gpu(dev, fn):
    x = _sweep()[::7]
    x = np.concatenate([x, np.zeros((-x.size) % 128, f32)]).reshape(-1, 128)
    out = np.asarray(blu.jit(getattr(lax, fn))(put(dev, x)))
    if fn == "exp":
        err = _ulps(out.ravel(), x.ravel())
        assert err.max() <= BOUND, (x.ravel()[err.argmax()], err.max())
    else:  # n / (1 + e**-|x|): the exp's 3.2 ulp (times 1 / (1 + e) <= 1), the sum's rounding
        # and div.approx's 2 ulp: 5.7 ulp of the result, 2**-23 relative each at most
        want = 1.0 / (1.0 + np.exp(-x.astype(f64)))
        np.testing.assert_allclose(out, want, rtol=5.7 * 2.0**-23, atol=TINY)


# ---- a softmax's exp: ``mathlib.exp_nonpositive`` for arguments known <= 0 (``plan.signs``) ----


def _model_nonpositive(x: np.ndarray, ex2_ulps: float = 0.0) -> np.ndarray:
    """``exp_nonpositive`` in float32: the product ``x * log2(e)`` rounded once, ``2**t`` from
    numpy moved by ``ex2_ulps`` of its spacing, flushed to 0 below 2**-126."""
    t = (np.asarray(x, f32) * f32(mathlib.LOG2E)).astype(f32)
    with np.errstate(invalid="ignore"):
        y = np.exp2(t.astype(f64)).astype(f32)
        y = np.where(np.isfinite(y), y + f32(ex2_ulps) * np.spacing(y), y).astype(f32)
    return np.where(np.abs(y) < f32(2.0**-126), f32(0), y)


def _nonpositive_sweep() -> np.ndarray:
    """Every 1009th float32 bit pattern from -0 down to -105 (about 1.1 million), the specials."""
    lo = np.array([-105.0], f32).view(np.uint32)[0]
    neg = np.arange(0x80000000, lo, 1009, dtype=np.uint32).view(f32)
    return np.concatenate([neg, np.array([0.0, -0.0, -1e-45, -87.33, -87.34, -np.inf], f32)])


@pytest.mark.parametrize("ex2_ulps", [0.0, -2.0, 2.0])
def test_the_shifted_exp_is_within_its_bound(ex2_ulps):
    """The docstring's bound: within ``0.75 |x| + 2.5`` ulp (2**-23 of the result each) where
    the result is normal, and within ``2.5 * 2**-23`` absolutely everywhere."""
    x = _nonpositive_sweep()
    got = _model_nonpositive(x, ex2_ulps).astype(f64)
    want = np.exp(x.astype(f64))
    assert np.abs(got - want).max() <= 2.5 * 2.0**-23
    normal = want >= 2.0**-126
    rel = np.abs(got - want)[normal] / want[normal]
    bound = (0.75 * np.abs(x[normal].astype(f64)) + 2.5) * 2.0**-23
    assert (rel <= bound).all(), x[normal][np.argmax(rel / bound)]


def test_the_shifted_exp_specials():
    got = _model_nonpositive(np.array([0.0, -0.0, -np.inf, np.nan, -88.0, -1000.0], f32))
    assert got[0] == 1.0 and got[1] == 1.0 and got[2] == 0.0 and np.isnan(got[3])
    assert got[4] == 0.0 and got[5] == 0.0  # below 2**-126: flushed


def _softmax_ptx(fn, shape=(64, 4096), **flags) -> str:
    spec = blu.ShapeDtypeStruct(shape, np.dtype(f32))
    with blu.config.override(**flags):
        exe = blu.jit(fn).lower(spec, target="cuda:sm_90").compile()
    return "\n".join(p.decode() for p in exe.executable.ptx().values())


ROUNDER_BITS = "0f4B400000"  # exp_ex2's reduction constant (1.5 * 2**23) in PTX


@needs_mlir
@needs_ptxas
def test_a_softmax_computes_its_exp_unreduced(tmp_path):
    """A softmax's ``exp(x - max(x))`` is one multiply and ``ex2`` (no reduction constant, fewer
    instructions); ``BLU_GPU_EXP=ex2-reduced`` keeps the reduction, and an ``exp`` of a value
    not known ``<= 0`` keeps it always."""

    def count(text):
        return sum(1 for line in text.splitlines() if line.strip().endswith(";"))

    with blu.config.override(cache_dir=str(tmp_path)):
        fast = _softmax_ptx(nn.softmax)
        reduced = _softmax_ptx(nn.softmax, gpu_exp="ex2-reduced")
        plain = _softmax_ptx(lambda x: lax.exp(x) / bnp.sum(lax.exp(x), axis=-1, keepdims=True))
    assert "ex2.approx.ftz.f32" in fast and ROUNDER_BITS not in fast
    assert "ex2.approx.ftz.f32" in reduced and ROUNDER_BITS in reduced
    assert ROUNDER_BITS in plain
    assert count(fast) < count(reduced)


@on_gpu
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_on_the_gpu(dev, fn):
    """Rows of random values (a spread of ~100), with -inf entries, an all -inf row and a row
    with +inf, against float64: within float32's rounding of the sum and ``exp_nonpositive``'s
    2.5 * 2**-23 a term."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((64, 3000)) * 25).astype(f32)
    x[3, ::7] = -np.inf
    x[5] = -np.inf
    x[9, 17] = np.inf
    out = np.asarray(blu.jit(getattr(nn, fn))(put(dev, x))).astype(f64)
    want = np.asarray(getattr(nn, fn)(x.astype(f64)))
    both_nan = np.isnan(out) & np.isnan(want)
    assert (np.isnan(out) == np.isnan(want)).all()
    if fn == "softmax":
        np.testing.assert_allclose(out[~both_nan], want[~both_nan], rtol=0, atol=4e-6)
    else:  # x - m - log(s): s within ~2**-21 relative, so log(s) within ~2**-21 absolutely
        fin = np.isfinite(want)
        np.testing.assert_allclose(out[fin], want[fin], rtol=1e-6, atol=1e-6)
        assert (out[~fin & ~both_nan] == want[~fin & ~both_nan]).all()
