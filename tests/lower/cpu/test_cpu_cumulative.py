"""The cumulative primitives compiled on the CPU (``blu.lower.mlir.cumulative``: a library node
calling blu's own kernel, no host fallback): against float64 references made with Python loops
(sums and products; tolerance ``n eps`` of the dtype, as the summation order may differ),
exact for max/min and the argument forms, over shapes with size-0 and size-1 axes, every axis,
both directions, integer, bool and half-float dtypes, NaN and inf; grad and vmap through jit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.lax as lax
from blu.core import dtypes
from blu.lax import cumulative as cum
from blu.lower.plan.nodes import NodeKind

FLOATS = [np.float32, np.float64, dtypes.bfloat16, np.float16]
INTS = [np.int32, np.int8, np.uint8, np.int64]
OPS = {"sum": lax.cumsum, "prod": lax.cumprod, "max": lax.cummax, "min": lax.cummin}


def executable(f, *args):
    return blu.jit(f).lower(*args, target="cpu").compile().executable


def assert_compiled(f, *args, libraries: int = 1):
    exe = executable(f, *args)
    kinds = [n.kind for n in exe.plan.nodes]
    assert NodeKind.FALLBACK not in kinds and exe.fallbacks == [], exe.plan
    assert kinds.count(NodeKind.LIBRARY) == libraries, exe.plan


def reference(op: str, x: np.ndarray, axis: int, reverse: bool) -> np.ndarray:
    """A Python loop along the axis in float64 (integers: in their own dtype, wrapping)."""
    acc_dt = np.float64 if dtypes.is_float(x.dtype) else x.dtype
    v = np.moveaxis(x.astype(acc_dt), axis, -1)
    out = np.empty_like(v)
    order = range(v.shape[-1] - 1, -1, -1) if reverse else range(v.shape[-1])
    run = None
    with np.errstate(all="ignore"):
        for k in order:
            cur = v[..., k]
            if run is None:
                run = cur.copy()
            elif op == "sum":
                run = run + cur
            elif op == "prod":
                run = run * cur
            elif op == "max":
                run = np.maximum(run, cur)
            else:
                run = np.minimum(run, cur)
            out[..., k] = run
    return np.moveaxis(out, -1, axis)


def arg_reference(kind: str, x: np.ndarray, axis: int, reverse: bool) -> np.ndarray:
    """The first position in scan order of each running extremum (NaN wins once seen)."""
    v = np.moveaxis(x.astype(np.float64) if dtypes.is_float(x.dtype) else x, axis, -1)
    out = np.zeros(v.shape, np.int32)
    for idx in np.ndindex(*v.shape[:-1]):
        best, at = None, 0
        order = range(v.shape[-1] - 1, -1, -1) if reverse else range(v.shape[-1])
        for k in order:
            c = v[idx + (k,)]
            nan_c = dtypes.is_float(x.dtype) and np.isnan(c)
            nan_b = best is not None and dtypes.is_float(x.dtype) and np.isnan(best)
            if best is None or (c > best if kind == "max" else c < best) or (nan_c and not nan_b):
                best, at = c, k
            out[idx + (k,)] = at
    return np.moveaxis(out, -1, axis)


def check(op: str, x: np.ndarray, axis: int, reverse: bool) -> None:
    got = np.asarray(blu.jit(lambda a: OPS[op](a, axis, reverse))(x))
    assert got.dtype == x.dtype and got.shape == x.shape
    want = reference(op, x, axis, reverse)
    if dtypes.is_float(x.dtype) and op in ("sum", "prod"):
        n = max(x.shape[axis], 1)
        eps = float(np.finfo(np.float32 if x.dtype in (dtypes.bfloat16, np.float16)
                             else x.dtype).eps)  # fmt: skip
        # accumulated in float32 (half floats) then rounded once to the dtype
        ulp = float(np.finfo(x.dtype).eps) if x.dtype in (dtypes.bfloat16, np.float16) else 0.0
        scale = reference(op, np.abs(x), axis, reverse)
        g = got.astype(np.float64)
        with np.errstate(invalid="ignore"):
            tol = 4 * n * eps * np.abs(scale) + ulp * np.abs(want)
            finite = np.isfinite(want) & np.isfinite(tol)
            err = np.abs(g - want)
        assert np.all(err[finite] <= tol[finite]), (x, got, want)
        # NaN and inf where the float64 reference has them (the values are far from overflow)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(want))
        np.testing.assert_array_equal(g[np.isinf(want)], want[np.isinf(want)])
    elif dtypes.is_float(x.dtype):
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))
    else:
        np.testing.assert_array_equal(got, want.astype(x.dtype))


shapes = st.lists(st.integers(0, 5), min_size=1, max_size=3).map(tuple)


def values(shape, dt, rng, special: bool) -> np.ndarray:
    if dt == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if not dtypes.is_float(np.dtype(dt)):
        info = np.iinfo(dt)
        return rng.integers(max(info.min, -100), min(info.max, 100), shape).astype(dt)
    x = rng.standard_normal(shape) * 2
    if special and x.size:
        flat = x.reshape(-1)
        picks = rng.integers(0, flat.size, max(1, flat.size // 4))
        flat[picks] = rng.choice([np.nan, np.inf, -np.inf], picks.size)
    return x.astype(dt)


@settings(max_examples=60, deadline=None)
@given(shapes, st.data(), st.booleans(), st.sampled_from(FLOATS + INTS),
       st.sampled_from(list(OPS)), st.booleans(), st.integers(0, 2**31))  # fmt: skip
def test_matches_loop_reference(shape, data, reverse, dt, op, special, seed):
    axis = data.draw(st.integers(0, len(shape) - 1))
    check(op, values(shape, dt, np.random.default_rng(seed), special), axis, reverse)


@settings(max_examples=40, deadline=None)
@given(shapes, st.data(), st.booleans(), st.sampled_from(FLOATS + INTS + [np.bool_]),
       st.sampled_from(["max", "min"]), st.booleans(), st.integers(0, 2**31))  # fmt: skip
def test_arg_forms_match_reference(shape, data, reverse, dt, kind, special, seed):
    axis = data.draw(st.integers(0, len(shape) - 1))
    x = values(shape, dt, np.random.default_rng(seed), special)
    if x.size and dtypes.is_float(x.dtype):  # ties: repeated values
        x.reshape(-1)[::2] = x.reshape(-1)[0]
    f = lambda a: cum.cumarg_p.bind(a, axis=axis, reverse=reverse, kind=kind)  # noqa: E731
    got = np.asarray(blu.jit(f)(x))
    np.testing.assert_array_equal(got, arg_reference(kind, x, axis, reverse))
    np.testing.assert_array_equal(got, cum.cumarg_p.impl(x, axis=axis, reverse=reverse, kind=kind))


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_compiled_not_fallback(op, axis):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert_compiled(lambda a: OPS[op](a, axis) * 2.0, x)
    f = lambda a: cum.cumarg_p.bind(a, axis=axis, reverse=True, kind="max")  # noqa: E731
    assert_compiled(f, x)


def test_bool_extremes_and_wrapping_ints():
    check("max", np.array([[False, True, False]]), 1, False)
    check("min", np.array([[True, True, False]]), 1, True)
    check("sum", np.full((3, 40), 100, np.int8), 1, False)  # wraps like numpy's int8 cumsum
    check("prod", np.full((40, 3), 3, np.uint8), 0, True)


def test_large_split_across_threads():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((256, 4100)).astype(np.float32)
    for axis in (0, 1):
        check("sum", x, axis, False)
        check("max", x, axis, True)


def test_grad_and_vmap_through_jit():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 5)).astype(np.float64)
    w = rng.standard_normal((3, 5))
    loss = lambda a: (lax.cumsum(a, 1, reverse=True) * w).sum() + lax.cummax(a, 0).sum()  # noqa: E731
    g = np.asarray(blu.jit(blu.grad(loss))(x))
    gs = np.cumsum(w, 1)  # d/dx_j sum_i w_i sum_{k>=i} x_k = sum_{i<=j} w_i
    gm = np.zeros_like(x)
    am = arg_reference("max", x, 0, False)
    for i in range(3):
        for j in range(5):
            gm[am[i, j], j] += 1
    np.testing.assert_allclose(g, gs + gm, rtol=1e-12)
    gp = np.asarray(blu.jit(blu.grad(lambda a: lax.cumprod(a, 1).sum()))(x))
    eps, num = 1e-6, np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        d = np.zeros_like(x)
        d[idx] = eps
        num[idx] = (np.cumprod(x + d, 1).sum() - np.cumprod(x - d, 1).sum()) / (2 * eps)
    np.testing.assert_allclose(gp, num, rtol=1e-6, atol=1e-8)
    xs = rng.standard_normal((4, 3, 5)).astype(np.float32)
    v = np.asarray(blu.jit(blu.vmap(lambda a: lax.cumsum(a, 1)))(xs))
    np.testing.assert_allclose(v, np.cumsum(xs.astype(np.float64), 2), rtol=1e-5, atol=1e-5)
    assert_compiled(blu.vmap(lambda a: lax.cummin(a, 0, reverse=True)), xs)


def test_complex_operands_run_on_the_host():
    x = (np.arange(6) + 1j).astype(np.complex64).reshape(2, 3)
    exe = executable(lambda a: lax.cumsum(a, 1), x)
    assert [n.kind for n in exe.plan.nodes] == [NodeKind.FALLBACK]
    np.testing.assert_array_equal(
        np.asarray(blu.jit(lambda a: lax.cumsum(a, 1))(x)), np.cumsum(x, 1)
    )
