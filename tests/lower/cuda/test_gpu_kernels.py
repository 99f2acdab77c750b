"""GPU tests of every primitive's CUDA kernel, against numpy (marked ``gpu``).

Runs on a GPU (``blu.cuda.is_available()``) or, with ``BLU_FAKE_GPU=1``, on a
``blu.cuda.fake.FakeDevice``: the same ``GpuExecutable`` runs each fused kernel's CPU build and
compiles its GPU build (PTX/cubin) into the kernel cache (``BLU_CACHE_DIR``). The GPU machine has no
MLIR, so every shape here is FIXED and the cache is filled by running this file on the fake device:

    BLU_FAKE_GPU=1 BLU_TEST_CACHE_DIR=<cache> python -m pytest tests/lower/cuda/test_gpu_kernels.py

References are numpy float64 on the (already rounded) inputs, or numpy in the integer dtype (ints
and bools compare exactly). Float tolerances, relative: float32 1e-5, float64 1e-12, float16 1e-3,
bfloat16 1e-2 (one rounding of the output: 2^-11 and 2^-8). Helpers: ``gpu_helpers.py``; products,
donation, graphs and memory: ``test_gpu_executable.py``. Reduction shapes are chosen to hit each
strategy of ``codegen_gpu.plan_nests`` ("map", "row", "split", "thread"), checked by
``strategies``.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
from gpu_helpers import (
    FLOATS,
    GPU_MARKS,
    INTS,
    RTOL,
    SHAPE,
    SINTS,
    bf16,
    bool_,
    check,
    f16,
    f32,
    f64,
    gen,
    i32,
    i64,
    is_float,
    make_device,
    plan_nodes,
    put,
    u8,
    u32,
)  # fmt: skip

import blu
import blu.lax as lax
import blu.nn as nn
import blu.numpy as bnp
import blu.optim as optim
from blu.core import pytree
from blu.lower.cuda import codegen as codegen_gpu

pytestmark = GPU_MARKS


@pytest.fixture(scope="module")
def dev():
    return make_device()


# ---- numpy references ----------------------------------------------------------------------

_erf = np.vectorize(math.erf, otypes=[f64])
_erfc = np.vectorize(math.erfc, otypes=[f64])


def _div(a, b):
    if is_float(a.dtype):
        return a / b
    if np.iinfo(a.dtype).min < 0:
        return (np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))).astype(a.dtype)
    return a // b


def _signed(dt):
    return np.dtype(f"i{np.dtype(dt).itemsize}")


def _unsigned(dt):
    return np.dtype(f"u{np.dtype(dt).itemsize}")


def _srl(a, s):
    return (a.view(_unsigned(a.dtype)) >> s.astype(_unsigned(a.dtype))).view(a.dtype)


def _sra(a, s):
    return (a.view(_signed(a.dtype)) >> s.astype(_signed(a.dtype))).view(a.dtype)


def _clz(a):
    bits = np.iinfo(a.dtype).bits
    v = a.view(_unsigned(a.dtype)).astype(np.uint64)
    length = np.zeros(a.shape, np.int64)
    for b in range(bits):
        length = np.where((v >> np.uint64(b)) & np.uint64(1), b + 1, length)
    return (bits - length).astype(a.dtype)


def _popcount(a):
    return np.bitwise_count(a.view(_unsigned(a.dtype))).astype(a.dtype)


def _round_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


# (name, blu function, numpy reference, dtypes, input domains)
ELEMENTWISE = [
    ("abs", lax.abs, np.abs, FLOATS + SINTS, ("any",)),
    ("neg", lax.neg, np.negative, FLOATS + INTS, ("any",)),
    ("sign", lax.sign, np.sign, FLOATS + INTS, ("any",)),
    ("floor", lax.floor, np.floor, FLOATS, ("any",)),
    ("ceil", lax.ceil, np.ceil, FLOATS, ("any",)),
    ("round_away", lax.round, _round_away, FLOATS, ("any",)),
    (
        "round_even",
        lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
        np.rint,
        FLOATS,
        ("any",),
    ),
    ("is_finite", lax.is_finite, np.isfinite, FLOATS, ("special",)),
    ("exp", lax.exp, np.exp, FLOATS, ("any",)),
    ("exp2", lax.exp2, np.exp2, FLOATS, ("any",)),
    ("expm1", lax.expm1, np.expm1, FLOATS, ("any",)),
    ("log", lax.log, np.log, FLOATS, ("pos",)),
    ("log1p", lax.log1p, np.log1p, FLOATS, ("gtm1",)),
    ("sin", lax.sin, np.sin, FLOATS, ("any",)),
    ("cos", lax.cos, np.cos, FLOATS, ("any",)),
    ("tan", lax.tan, np.tan, FLOATS, ("unit",)),
    ("tanh", lax.tanh, np.tanh, FLOATS, ("any",)),
    ("sinh", lax.sinh, np.sinh, FLOATS, ("any",)),
    ("cosh", lax.cosh, np.cosh, FLOATS, ("any",)),
    ("asin", lax.asin, np.arcsin, FLOATS, ("unit",)),
    ("acos", lax.acos, np.arccos, FLOATS, ("unit",)),
    ("atan", lax.atan, np.arctan, FLOATS, ("any",)),
    ("asinh", lax.asinh, np.arcsinh, FLOATS, ("any",)),
    ("acosh", lax.acosh, np.arccosh, FLOATS, ("ge1",)),
    ("atanh", lax.atanh, np.arctanh, FLOATS, ("unit",)),
    ("sqrt", lax.sqrt, np.sqrt, FLOATS, ("pos",)),
    ("rsqrt", lax.rsqrt, lambda x: 1 / np.sqrt(x), FLOATS, ("pos",)),
    ("cbrt", lax.cbrt, np.cbrt, FLOATS, ("any",)),
    ("erf", lax.erf, _erf, FLOATS, ("any",)),
    ("erfc", lax.erfc, _erfc, FLOATS, ("any",)),
    ("logistic", lax.logistic, lambda x: 1 / (1 + np.exp(-x)), FLOATS, ("any",)),
    ("square", lax.square, np.square, FLOATS + INTS, ("any",)),
    (
        "integer_pow3",
        lambda x: lax.integer_pow(x, 3),
        lambda x: x * x * x,
        FLOATS + SINTS,
        ("any",),
    ),
    ("integer_pow-2", lambda x: lax.integer_pow(x, -2), lambda x: 1 / (x * x), FLOATS, ("pos",)),
    ("stop_gradient", lax.stop_gradient, lambda x: x, FLOATS + INTS, ("any",)),
    ("add", lax.add, np.add, FLOATS + INTS, ("any", "any")),
    ("sub", lax.sub, np.subtract, FLOATS + INTS, ("any", "any")),
    ("mul", lax.mul, np.multiply, FLOATS + INTS, ("any", "any")),
    ("max", lax.max, np.maximum, FLOATS + INTS + (bool_,), ("any", "any")),
    ("min", lax.min, np.minimum, FLOATS + INTS + (bool_,), ("any", "any")),
    ("div", lax.div, _div, FLOATS + INTS, ("any", "nz")),
    ("rem", lax.rem, np.fmod, FLOATS + INTS, ("any", "nz")),
    ("pow", lax.pow, np.power, FLOATS, ("pos", "any")),
    ("atan2", lax.atan2, np.arctan2, FLOATS, ("any", "nz")),
    ("and", lax.and_, np.bitwise_and, INTS + (bool_,), ("bits", "bits")),
    ("or", lax.or_, np.bitwise_or, INTS + (bool_,), ("bits", "bits")),
    ("xor", lax.xor, np.bitwise_xor, INTS + (bool_,), ("bits", "bits")),
    ("not", lax.not_, np.invert, INTS + (bool_,), ("bits",)),
    ("shift_left", lax.shift_left, lambda a, s: a << s, INTS, ("bits", "shift")),
    ("shift_right_logical", lax.shift_right_logical, _srl, INTS, ("bits", "shift")),
    ("shift_right_arithmetic", lax.shift_right_arithmetic, _sra, INTS, ("bits", "shift")),
    ("clz", lax.clz, _clz, INTS, ("bits",)),
    ("population_count", lax.population_count, _popcount, INTS, ("bits",)),
] + [
    (
        name,
        getattr(lax, name),
        ref,
        FLOATS + INTS + (bool_,) * (name in ("eq", "ne")),
        ("any", "any"),
    )
    for name, ref in [
        ("eq", np.equal),
        ("ne", np.not_equal),
        ("lt", np.less),
        ("le", np.less_equal),
        ("gt", np.greater),
        ("ge", np.greater_equal),
    ]
]

CASES = [
    pytest.param(fn, ref, dt, dom, id=f"{name}-{np.dtype(dt).name}")
    for name, fn, ref, dts, dom in ELEMENTWISE
    for dt in dts
]


@pytest.mark.parametrize("fn, ref, dt, domain", CASES)
def test_elementwise(dev, fn, ref, dt, domain):
    rng = np.random.default_rng(zlib.crc32(f"{domain}{np.dtype(dt).name}".encode()))
    xs = [gen(d, dt, SHAPE, rng) for d in domain]
    if domain == ("any", "any") and not is_float(dt) and np.dtype(dt) != bool_:
        xs[1][:, ::5] = xs[0][:, ::5]  # some equal pairs for the comparisons
    out = blu.jit(fn)(*(put(dev, x) for x in xs))
    wide = [x.astype(f64) for x in xs] if is_float(dt) else xs
    expect = np.asarray(ref(*wide))
    check(out, expect if expect.dtype == bool_ else expect.astype(np.asarray(out).dtype))


def test_a_long_chain_is_one_kernel(dev):
    # 400 equations of one elementwise chain in one kernel: its emitter recurses through every
    # link (the default recursion limit of 1000 had been exceeded at 200 links)
    def f(x):
        for _ in range(200):
            x = lax.sin(x) * 1.0001
        return x

    x = gen("any", f32, SHAPE, np.random.default_rng(3))
    want = x.astype(f64)
    for _ in range(200):
        want = np.sin(want) * 1.0001
    check(blu.jit(f)(put(dev, x)), want)


@pytest.mark.parametrize("shape", [(0, 129), (1, 1)], ids=["size0", "size1"])
def test_elementwise_degenerate_sizes(dev, shape):
    x = gen("pos", f32, shape, np.random.default_rng(1))
    check(
        blu.jit(lambda x: lax.exp(x) * lax.log(x))(put(dev, x)),
        np.exp(x.astype(f64)) * np.log(x.astype(f64)),
    )
    check(blu.jit(lambda x: x.sum(0))(put(dev, x)), x.astype(f64).sum(0))


def test_select_and_clamp(dev):
    rng = np.random.default_rng(2)
    for dt in (f32, bf16, i64, u8, bool_):
        p, a, b = (
            gen("any", bool_, SHAPE, rng),
            gen("any", dt, SHAPE, rng),
            gen("any", dt, SHAPE, rng),
        )
        check(blu.jit(lax.select)(*put(dev, p, a, b)), np.where(p, a, b), dtype=dt)
    x = gen("any", f32, SHAPE, rng)
    check(
        blu.jit(lambda x: bnp.clip(x, -0.5, 0.75))(put(dev, x)), np.clip(x.astype(f64), -0.5, 0.75)
    )


CONVERSIONS = [
    (f32, bf16, "any"),
    (f32, f16, "any"),
    (f32, f64, "any"),
    (f64, f32, "any"),
    (bf16, f32, "any"),
    (f16, f64, "any"),
    (f32, i32, "any"),
    (f64, i64, "any"),
    (f32, u8, "pos"),
    (f32, bool_, "any"),
    (i32, f32, "any"),
    (i64, f64, "any"),
    (u32, i64, "any"),
    (i32, u8, "pos"),
    (u8, f16, "any"),
    (bool_, f32, "any"),
    (bool_, i32, "any"),
]


@pytest.mark.parametrize(
    "src, dst, dom",
    [pytest.param(*c, id=f"{np.dtype(c[0]).name}-{np.dtype(c[1]).name}") for c in CONVERSIONS],
)
def test_convert_element_type(dev, src, dst, dom):
    x = gen(dom, src, SHAPE, np.random.default_rng(3))
    if is_float(src):
        x = (x * 10).astype(src)  # values with integer parts for the float -> int conversions
    if is_float(src) and not is_float(dst) and dst != bool_:
        ref = np.trunc(x.astype(f64)).astype(dst)
    else:
        ref = x.astype(
            dst
        )  # numpy: round-to-nearest-even for floats (ml_dtypes too), wrap for ints
    out = blu.jit(lambda x: lax.convert_element_type(x, dst))(put(dev, x))
    assert np.asarray(out).dtype == np.dtype(dst)
    np.testing.assert_array_equal(np.asarray(out), ref)


@pytest.mark.parametrize("src, dst", [(f32, i32), (u32, f32), (f64, i64), (i64, f64)], ids=str)
def test_bitcast_convert_type(dev, src, dst):
    x = gen("bits" if not is_float(src) else "any", src, SHAPE, np.random.default_rng(4))
    out = np.asarray(blu.jit(lambda x: lax.bitcast_convert_type(x, dst))(put(dev, x)))
    np.testing.assert_array_equal(out.view(_unsigned(dst)), x.view(_unsigned(src)))


# ---- data movement -------------------------------------------------------------------------


def _pad_ref(x, value, config):
    """numpy lax.pad: interior dilation, then low/high edges (negative ones crop)."""
    for d, (lo, hi, interior) in enumerate(config):
        n = x.shape[d]
        size = n + max(n - 1, 0) * interior
        shape = list(x.shape)
        shape[d] = size
        y = np.full(shape, value, x.dtype)
        idx = [slice(None)] * x.ndim
        idx[d] = slice(0, size, interior + 1)
        y[tuple(idx)] = x
        edge = [(0, 0)] * x.ndim
        edge[d] = (max(lo, 0), max(hi, 0))
        y = np.pad(y, edge, constant_values=value)
        idx[d] = slice(max(-lo, 0), y.shape[d] - max(-hi, 0))
        x = y[tuple(idx)]
    return x


MOVES = [
    (
        "broadcast_row",
        lambda x: lax.broadcast_in_dim(x[0], (5, 37, 129), (2,)),
        lambda x: np.broadcast_to(x[0], (5, 37, 129)),
    ),
    (
        "broadcast_col",
        lambda x: lax.broadcast_in_dim(x[:, :1], (37, 129), (0, 1)),
        lambda x: np.broadcast_to(x[:, :1], (37, 129)),
    ),
    ("reshape", lambda x: lax.reshape(x, (3, 43, 37)), lambda x: x.reshape(3, 43, 37)),
    ("transpose", lambda x: lax.transpose(x, (1, 0)), lambda x: x.T),
    (
        "transpose3",
        lambda x: lax.transpose(lax.reshape(x, (37, 3, 43)), (2, 0, 1)),
        lambda x: x.reshape(37, 3, 43).transpose(2, 0, 1),
    ),
    (
        "slice_strided",
        lambda x: lax.slice(x, (2, 5), (35, 120), (3, 7)),
        lambda x: x[2:35:3, 5:120:7],
    ),
    (
        "pad",
        lambda x: lax.pad(
            x, x.dtype.type(0) if hasattr(x.dtype, "type") else 0, [(2, -3, 1), (-1, 4, 2)]
        ),
        None,
    ),
    (
        "concatenate0",
        lambda x: lax.concatenate([x, x[:5], x[3:4]], 0),
        lambda x: np.concatenate([x, x[:5], x[3:4]], 0),
    ),
    (
        "concatenate1",
        lambda x: lax.concatenate([x[:, :10], x, x[:, 7:9]], 1),
        lambda x: np.concatenate([x[:, :10], x, x[:, 7:9]], 1),
    ),
    ("rev", lambda x: lax.rev(x, (0, 1)), lambda x: x[::-1, ::-1]),
    ("rev1", lambda x: lax.rev(x, 1), lambda x: x[:, ::-1]),
    ("squeeze", lambda x: lax.squeeze(x[:1], 0), lambda x: x[0]),
    ("getitem", lambda x: x[::2, 3:-4:5], lambda x: x[::2, 3:-4:5]),
]


@pytest.mark.parametrize("dt", [f32, bf16, i64, u8, bool_], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("fn, ref", [pytest.param(f, r, id=n) for n, f, r in MOVES])
def test_data_movement(dev, fn, ref, dt):
    x = gen("any", dt, SHAPE, np.random.default_rng(5))
    if ref is None:
        ref = lambda x: _pad_ref(x, np.zeros((), x.dtype), [(2, -3, 1), (-1, 4, 2)])  # noqa: E731
        fn = lambda x: lax.pad(x, np.zeros((), x.dtype), [(2, -3, 1), (-1, 4, 2)])  # noqa: E731
    check(blu.jit(fn)(put(dev, x)), ref(x), dtype=dt)


@pytest.mark.parametrize("dt", [f32, i32, u8], ids=lambda d: np.dtype(d).name)
def test_iota(dev, dt):
    # a jitted program without arguments runs on the default device: take a device operand
    z = put(dev, np.zeros((), dt))
    out = blu.jit(lambda z: lax.iota(dt, (37, 129), 1) + z)(z)
    check(out, np.broadcast_to(np.arange(129, dtype=dt), (37, 129)), dtype=dt)
    out = blu.jit(lambda z: lax.iota(dt, (37, 129), 0) + z)(z)
    check(out, np.broadcast_to(np.arange(37, dtype=dt)[:, None], (37, 129)), dtype=dt)


# ---- reductions ----------------------------------------------------------------------------


def strategies(f, *args) -> list[str]:
    """The strategies ``codegen_gpu.plan_nests`` picks for the kernels of ``jit(f)(*args)``."""
    out = []
    for n in plan_nodes(f, *args):
        if n.kind == "kernel":
            out += [p.strategy for p in codegen_gpu.plan_nests(n.layout)]
        elif n.kind == "fallback":
            out.append("fallback")
    return out


NPRED = {
    "sum": (lambda x, a: lax.reduce_sum(x, a), np.sum),
    "max": (lambda x, a: lax.reduce_max(x, a), np.max),
    "min": (lambda x, a: lax.reduce_min(x, a), np.min),
    "prod": (lambda x, a: lax.reduce_prod(x, a), np.prod),
    "and": (lambda x, a: lax.reduce_and(x, a), np.all),
    "or": (lambda x, a: lax.reduce_or(x, a), np.any),
    "argmax": (lambda x, a: lax.argmax(x, a), np.argmax),
    "argmin": (lambda x, a: lax.argmin(x, a), np.argmin),
}

# (op, dtype, shape, axes, strategy, domain)
REDUCTIONS = [
    ("sum", f32, (1024, 768), (1,), "row", "pos"),
    ("max", f32, (1024, 768), (1,), "row", "any"),
    ("min", i32, (1024, 768), (1,), "row", "any"),
    ("sum", f64, (1024, 768), (1,), "row", "any"),
    ("sum", f32, (4096, 768), (0,), "split", "pos"),
    ("max", f32, (4096, 768), (0,), "split", "any"),
    ("sum", bf16, (4096, 768), (0,), "split", "pos"),
    ("sum", bf16, (1024, 768), (1,), "row", "pos"),
    ("sum", f32, (100000,), (0,), "split", "pos"),
    ("sum", f32, (3, 100003), (1,), "split", "pos"),  # few long rows: contiguous runs a row
    ("max", bf16, (3, 100003), (1,), "split", "any"),
    # stage 1 combining each block's threads (``NestPlan.per_block``): S a multiple of the block
    ("sum", f32, (3000001,), (0,), "split", "pos"),
    ("min", i32, (3000001,), (0,), "split", "any"),
    ("max", bf16, (2, 2097155), (1,), "split", "any"),
    ("sum", f64, (2, 2097155), (1,), "split", "pos"),
    ("min", i64, (100000,), (0,), "split", "any"),
    ("sum", f32, (8, 33, 17, 5), (1, 2), "split", "pos"),
    ("max", f16, (8, 33, 17, 5), (1, 2), "split", "any"),
    # few elements in all (``codegen.SMALL_ROWS``): rows even where they are few, one launch
    ("prod", f32, SHAPE, (1,), "row", "prodish"),
    ("prod", f32, (37, 1290), (1,), "split", "prodish"),
    ("sum", f32, (300, 40), (1,), "thread", "pos"),
    ("sum", i32, (300, 40), (0, 1), "row", "any"),
    ("sum", i32, (3000, 40), (0, 1), "split", "any"),
    ("prod", f64, (300, 40), (0,), "split", "prodish"),
    ("and", bool_, SHAPE, (0,), "thread", "mostly"),
    ("or", bool_, SHAPE, (1,), "split", "rarely"),
    ("and", bool_, SHAPE, (0, 1), "split", "mostly"),
    ("or", bool_, (100000,), (0,), "split", "rarely"),
    ("or", bool_, (300, 40), (1,), "thread", "rarely"),
    ("argmax", f32, SHAPE, (1,), "thread", "any"),
    ("argmin", f32, SHAPE, (1,), "thread", "any"),
    ("argmax", f32, (1024, 768), (0,), "fallback", "any"),  # see test_argmax_axis0_is_a_kernel
    ("argmin", i32, (1024, 768), (0,), "fallback", "any"),
    ("argmax", bf16, SHAPE, (1,), "thread", "any"),
]


def _red_input(domain, dt, shape, rng):
    if domain == "prodish":
        return rng.uniform(0.97, 1.03, shape).astype(dt)
    if domain == "mostly":
        return rng.random(shape) < 0.995
    if domain == "rarely":
        return rng.random(shape) < 0.005
    return gen(domain, dt, shape, rng)


@pytest.mark.parametrize(
    "op, dt, shape, axes, strategy, domain",
    [
        pytest.param(*r, id=f"{r[0]}-{np.dtype(r[1]).name}-{'x'.join(map(str, r[2]))}-{r[3]}")
        for r in REDUCTIONS
    ],
)
def test_reduction(dev, op, dt, shape, axes, strategy, domain):
    x = _red_input(domain, dt, shape, np.random.default_rng(6))
    fn, ref = NPRED[op]
    arg = op.startswith("arg")
    f = (lambda x: fn(x, axes[0])) if arg else (lambda x: fn(x, axes))
    assert strategy in strategies(f, x)
    out = blu.jit(f)(put(dev, x))
    if arg:
        check(out, ref(x.astype(f64) if is_float(dt) else x, axis=axes[0]))
    elif is_float(dt):
        tol = RTOL[np.dtype(dt)] * (10 if op == "prod" else 1)
        check(out, ref(x.astype(f64), axis=axes), dtype=dt, rtol=tol)
    else:
        check(out, ref(x, axis=axes), dtype=dt)


@pytest.mark.xfail(strict=True, reason="argmax/argmin over a non-last axis run as a host fallback")
def test_argmax_axis0_is_a_kernel():
    x = np.zeros((1024, 768), f32)
    assert strategies(lambda x: lax.argmax(x, 0), x) == ["thread"]


def test_map_strategy_and_fused_map(dev):
    rng = np.random.default_rng(7)
    x, y = gen("any", f32, SHAPE, rng), gen("any", f32, (129,), rng)
    f = lambda x, y: lax.tanh(x * 2.0 + y) - x  # noqa: E731
    assert strategies(f, x, y) == ["map"]
    x64, y64 = x.astype(f64), y.astype(f64)
    check(blu.jit(f)(*put(dev, x, y)), np.tanh(x64 * 2 + y64) - x64, atol=1e-6)


# ---- fused groups vs numpy and vs eager blu on the host ----------------------------------------


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_softmax_and_layer_norm(dev):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1024, 768)).astype(f32) * 3
    g, b = rng.standard_normal(768).astype(f32), rng.standard_normal(768).astype(f32)
    out = blu.jit(nn.softmax)(put(dev, x))
    check(out, _softmax(x.astype(f64)))
    np.testing.assert_allclose(np.asarray(out), np.asarray(nn.softmax(x)), rtol=1e-5, atol=1e-7)
    x64 = x.astype(f64)
    mu, var = x64.mean(-1, keepdims=True), x64.var(-1, keepdims=True)
    ref = (x64 - mu) / np.sqrt(var + 1e-5) * g + b
    out = blu.jit(nn.layer_norm)(*put(dev, x, g, b))
    check(out, ref, rtol=1e-4)
    np.testing.assert_allclose(
        np.asarray(out), np.asarray(nn.layer_norm(x, g, b)), rtol=1e-5, atol=1e-5
    )


def test_gelu_linear(dev):
    rng = np.random.default_rng(9)
    x, w, b = (rng.standard_normal(s).astype(f32) for s in [(64, 128), (128, 256), (256,)])
    f = lambda x, w, b: nn.gelu(x @ w + b)  # noqa: E731
    with blu.config.override(default_matmul_precision="fp32"):
        out = blu.jit(f)(*put(dev, x, w, b))
        eager = np.asarray(f(x, w, b))
    h = x.astype(f64) @ w.astype(f64) + b
    ref = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
    check(out, ref, rtol=1e-4, atol=1e-5)  # f32 rounding of 1 + tanh(h) near -1: |h| * 2^-24
    np.testing.assert_allclose(np.asarray(out), eager, rtol=1e-5, atol=1e-5)


def test_cross_entropy_logsumexp(dev):
    rng = np.random.default_rng(10)
    logits = (rng.standard_normal((512, 1000)) * 4).astype(f32)
    labels = rng.integers(0, 1000, 512).astype(i32)
    l64 = logits.astype(f64)
    m = l64.max(-1)
    lse = m + np.log(np.exp(l64 - m[:, None]).sum(-1))
    check(blu.jit(lambda x: nn.logsumexp(x, -1))(put(dev, logits)), lse)
    per = lse - l64[np.arange(512), labels]
    check(blu.jit(lambda x, y: nn.cross_entropy(x, y, "none"))(*put(dev, logits, labels)), per)
    check(blu.jit(nn.cross_entropy)(*put(dev, logits, labels)), np.asarray(per.mean()), rtol=1e-5)


def test_adamw_update(dev):
    rng = np.random.default_rng(11)
    params = {
        "w": rng.standard_normal((256, 128)).astype(f32),
        "b": rng.standard_normal(128).astype(f32),
    }
    grads = {k: rng.standard_normal(v.shape).astype(f32) for k, v in params.items()}
    opt = optim.adamw(1e-2, weight_decay=0.1)
    state = opt.init(params)
    dparams, dgrads, dstate = (
        pytree.tree_map(lambda a: put(dev, a), t) for t in (params, grads, state)
    )
    step = blu.jit(opt.step)
    new, new_state = step(dgrads, dstate, dparams)
    new2, _ = step(dgrads, new_state, new)
    eager, _ = opt.step(grads, state, params)
    for k, p in params.items():
        p64, g64 = p.astype(f64), grads[k].astype(f64)
        m, v = 0.1 * g64, 0.001 * g64**2
        ref = p64 - 1e-2 * (m / 0.1 / (np.sqrt(v / 0.001) + 1e-8) + 0.1 * p64)
        check(new[k], ref, rtol=1e-5, atol=1e-6)  # p - lr * u: absolute error of p
        np.testing.assert_allclose(np.asarray(new[k]), np.asarray(eager[k]), rtol=1e-6, atol=1e-6)
        m, v = 0.9 * m + 0.1 * g64, 0.999 * v + 0.001 * g64**2
        ref2 = ref - 1e-2 * (m / (1 - 0.9**2) / (np.sqrt(v / (1 - 0.999**2)) + 1e-8) + 0.1 * ref)
        check(new2[k], ref2, rtol=1e-5, atol=1e-6)
