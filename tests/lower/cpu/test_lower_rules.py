"""Every primitive's CPU lowering (MLIR -> LLVM, blu/lower/mlir/rules.py) against its numpy impl.

Programs are compiled by ``blu.lower.cpu.executable.CpuExecutable`` and compared with eager
evaluation (each primitive's numpy impl, the oracle) over random shapes including size-0 and size-1
dimensions, in every supported dtype, with special values (NaN, +-inf, +-0, extreme integers)
mixed in. To keep compiles few, one kernel computes all the elementwise primitives of a dtype
at once (each output still checked on its own).

Tolerances: exact for integers, bools and data movement; float64 within a few ulp (libm vs
numpy's kernels); float32 within ~17 ulp (the vectorized polynomials of ``mathlib.py``);
bfloat16/float16 within one ulp of the narrow type (both sides compute in float32 and round
once, so only a float32 difference straddling a rounding boundary shows).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from helpers import shapes
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.lax as lax
from blu.core.staging import hoist_consts
from blu.lower.cpu.executable import CpuExecutable

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
I32, I64, U8, U32, BOOL = (np.dtype(t) for t in (np.int32, np.int64, np.uint8, np.uint32, np.bool_))
FLOATS = [F32, F64, BF16, F16]
INTS = [I32, I64, U8, U32]
ALL = FLOATS + INTS + [BOOL]
_RTOL = {F64: 1e-14, F32: 2e-6, BF16: 2.0**-7, F16: 2.0**-10}


@pytest.fixture(autouse=True, scope="module")
def _cache_dir(tmp_path_factory):
    """One kernel cache for the session's lowering tests (repeated kernels load, not compile)."""
    yield


def compiled(f, *args):
    """``f``'s outputs computed by the MLIR CPU executable, and the executable."""
    closed = blu.make_jaxpr(f)(*args)
    exe = CpuExecutable(hoist_consts(closed.jaxpr))
    outs = exe(*[np.asarray(c) for c in closed.consts], *[np.asarray(a) for a in args])
    return outs, exe


def eager(f, *args):
    with np.errstate(all="ignore"):  # (some numpy impls warn on overflow in casts)
        out = f(*args)
    return [np.asarray(o) for o in (out if isinstance(out, (tuple, list)) else [out])]


def sample(rng: np.random.Generator, shape, dtype, special: bool = True) -> np.ndarray:
    """Random values of ``dtype``: moderate numbers, and (``special``) NaN, infinities, signed
    zeros, tiny and huge floats, or extreme integers sprinkled in."""
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        small = rng.integers(max(info.min, -5), 6, shape)
        big = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
        x = np.where(rng.random(shape) < 0.5, small, big).astype(dtype)
        extremes = [0, 1, info.max, info.min] + ([-1] if info.min < 0 else [])
    else:
        x = (rng.standard_normal(shape) * 2.5).astype(dtype)
        extremes = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, 60.0, -90.0, 0.5, 1.0]
    flat = x.reshape(-1)
    if special and flat.size:
        k = rng.integers(0, flat.size, max(1, flat.size // 5))
        flat[k] = rng.choice(
            np.asarray(extremes, np.float64 if dtype.kind == "f" or dtype == BF16 else object)
        )
    return x


def assert_close(got, want, dtype, what: str, rtol=None, atol=None):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, what
    assert got.dtype == want.dtype, f"{what}: {got.dtype} != {want.dtype}"
    if want.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    r = _RTOL.get(np.dtype(dtype), 1e-6) if rtol is None else rtol
    a = (
        {F64: 1e-300, F32: 1e-37, BF16: 1e-37, F16: 6e-8}.get(want.dtype, 0)
        if atol is None
        else atol
    )
    with np.errstate(invalid="ignore"):
        got, want = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=r, atol=a,
                               err_msg=what)  # fmt: skip


# ---- elementwise -------------------------------------------------------------------------------

_UNARY_FLOAT = {
    "neg": lax.neg, "abs": lax.abs, "sign": lax.sign, "floor": lax.floor, "ceil": lax.ceil,
    "round": lax.round, "round_even": lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
    "sqrt": lax.sqrt, "rsqrt": lax.rsqrt, "exp": lax.exp, "log": lax.log, "tanh": lax.tanh,
    "logistic": lax.logistic, "log1p": lax.log1p, "expm1": lax.expm1, "erf": lax.erf,
    "erfc": lax.erfc, "sin": lax.sin, "cos": lax.cos, "tan": lax.tan, "asin": lax.asin,
    "acos": lax.acos, "atan": lax.atan, "sinh": lax.sinh, "cosh": lax.cosh, "asinh": lax.asinh,
    "acosh": lax.acosh, "atanh": lax.atanh, "exp2": lax.exp2, "cbrt": lax.cbrt,
    "square": lax.square, "is_finite": lax.is_finite, "ipow0": lambda x: lax.integer_pow(x, 0),
    "ipow3": lambda x: lax.integer_pow(x, 3), "ipow-2": lambda x: lax.integer_pow(x, -2),
    "stop_gradient": lax.stop_gradient,
}  # fmt: skip
_BINARY_FLOAT = {
    "add": lax.add, "sub": lax.sub, "mul": lax.mul, "div": lax.div, "rem": lax.rem,
    "max": lax.max, "min": lax.min, "pow": lax.pow, "atan2": lax.atan2, "eq": lax.eq,
    "ne": lax.ne, "lt": lax.lt, "le": lax.le, "gt": lax.gt, "ge": lax.ge,
}  # fmt: skip
_UNARY_INT = {
    "neg": lax.neg, "abs": lax.abs, "sign": lax.sign, "square": lax.square, "not": lax.not_,
    "population_count": lax.population_count, "clz": lax.clz,
    "ipow0": lambda x: lax.integer_pow(x, 0), "ipow1": lambda x: lax.integer_pow(x, 1),
    "ipow5": lambda x: lax.integer_pow(x, 5),
}  # fmt: skip
_BINARY_INT = {
    "add": lax.add, "sub": lax.sub, "mul": lax.mul, "div": lax.div, "rem": lax.rem,
    "max": lax.max, "min": lax.min, "eq": lax.eq, "ne": lax.ne, "lt": lax.lt, "le": lax.le,
    "gt": lax.gt, "ge": lax.ge, "and": lax.and_, "or": lax.or_, "xor": lax.xor,
    "shift_left": lax.shift_left, "shift_right_logical": lax.shift_right_logical,
    "shift_right_arithmetic": lax.shift_right_arithmetic,
}  # fmt: skip
_BOOL = {
    "add": lax.add, "mul": lax.mul, "max": lax.max, "min": lax.min, "and": lax.and_,
    "or": lax.or_, "xor": lax.xor, "eq": lax.eq, "ne": lax.ne, "lt": lax.lt, "le": lax.le,
    "gt": lax.gt, "ge": lax.ge,
}  # fmt: skip


def _check_table(unary: dict, binary: dict, dtype, shape, seed, rtol=None):
    rng = np.random.default_rng(seed)
    x, y = sample(rng, shape, dtype), sample(rng, shape, dtype)
    p = rng.random(shape) < 0.5
    if dtype.kind in "iu":  # shift amounts around the bit width, negative ones included
        bits = dtype.itemsize * 8
        y = np.where(rng.random(shape) < 0.5, rng.integers(0, bits + 2, shape), y).astype(dtype)
    names = list(unary) + list(binary) + ["select"]

    def f(x, y, p):
        x, y = _twice(x), _twice(y)  # shared producers: everything fuses into one kernel
        return ([fn(x) for fn in unary.values()] + [fn(x, y) for fn in binary.values()]
                + [lax.select(p, x, y)])  # fmt: skip

    got, exe = compiled(f, x, y, p)
    want = eager(f, x, y, p)
    assert sum(n.kind == "kernel" for n in exe.plan.nodes) == 1  # all fused into one kernel
    for name, g, w in zip(names, got, want):
        assert_close(g, w, dtype, f"{name} on {dtype} {shape}", rtol=rtol)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@given(shape=shapes(max_dims=3, max_side=5), seed=st.integers(0, 2**31))
def test_elementwise_floats_match_numpy(dtype, shape, seed):
    _check_table(_UNARY_FLOAT, _BINARY_FLOAT, dtype, shape, seed)


@pytest.mark.parametrize("dtype", INTS, ids=str)
@given(shape=shapes(max_dims=3, max_side=5), seed=st.integers(0, 2**31))
def test_elementwise_ints_match_numpy(dtype, shape, seed):
    _check_table(_UNARY_INT, _BINARY_INT, dtype, shape, seed)


@given(shape=shapes(max_dims=3, max_side=5), seed=st.integers(0, 2**31))
def test_elementwise_bools_match_numpy(shape, seed):
    _check_table({"not": lax.not_}, _BOOL, BOOL, shape, seed)


def test_transcendentals_on_a_dense_float32_range():
    """The float32 polynomials (mathlib.py) over 2**16 points spanning the whole range."""
    bits = np.arange(0, 2**32, 2**16, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([bits.view(np.float32), np.linspace(-20, 20, 4001, dtype=np.float32)])
    fns = [lax.exp, lax.log, lax.tanh, lax.logistic, lax.log1p, lax.expm1, lax.erf]

    def f(x):
        return [fn(x) for fn in fns]

    got, _ = compiled(f, x)
    for fn, g, w in zip(fns, got, eager(f, x)):
        assert_close(g, w, F32, fn.__name__)


def test_tanh_is_exactly_one_beyond_its_clamp_and_gelu_vanishes():
    # float32 tanh(x) rounds to +-1 from |x| ~ 9; the rational approximation's clamp at 7.9 gave
    # 1 - 3e-7 for every larger x, and GELU's x * (1 + tanh(.)) then grew with -x under jit
    x = np.array([9.0, 20.0, 1e4, 3e38, np.inf], np.float32)
    got = np.asarray(blu.jit(lax.tanh)(np.concatenate([x, -x])))
    np.testing.assert_array_equal(got, np.concatenate([np.ones(5), -np.ones(5)]))
    g = np.array([-1e30, -1e6, -1e4, -100.0, -20.0], np.float32)
    gelu = blu.jit(lambda v: blu.nn.gelu(v, approximate=True))
    np.testing.assert_array_equal(np.asarray(gelu(g)), np.zeros(5, np.float32))
    np.testing.assert_array_equal(np.asarray(blu.jit(blu.grad(blu.nn.gelu))(g[2])), 0.0)


# ---- casts -------------------------------------------------------------------------------------


@pytest.mark.parametrize("src", ALL, ids=str)
@given(shape=shapes(max_dims=2, max_side=6), seed=st.integers(0, 2**31))
def test_convert_element_type_to_every_dtype(src, shape, seed):
    x = sample(np.random.default_rng(seed), shape, src)
    if src in FLOATS and src != F64:  # out-of-range floats for every integer dtype
        with np.errstate(all="ignore"):
            x = np.where(np.abs(x.astype(np.float64)) > 3, x * 1e9, x).astype(src)
    f = lambda x: [lax.convert_element_type(x, d) for d in ALL]  # noqa: E731
    got, _ = compiled(f, x)
    for d, g, w in zip(ALL, got, eager(f, x)):
        assert_close(g, w, d, f"{src} -> {d}", rtol=0 if d != BF16 or src != F64 else None)


_SAME_WIDTH = [(F32, I32), (F32, U32), (I32, U32), (F64, I64), (BF16, F16),
               (F16, np.dtype(np.int16)), (U8, np.dtype(np.int8))]  # fmt: skip


@pytest.mark.parametrize("pair", _SAME_WIDTH, ids=str)
@given(shape=shapes(max_dims=2, max_side=5), seed=st.integers(0, 2**31))
def test_bitcast_convert_type_same_width(pair, shape, seed):
    src, dst = pair
    x = sample(np.random.default_rng(seed), shape, src, special=src.kind != "f")
    f = lambda x: lax.bitcast_convert_type(lax.neg(lax.neg(x)), dst)  # noqa: E731
    (got,), _ = compiled(f, x)
    want = eager(f, x)[0]
    np.testing.assert_array_equal(
        np.atleast_1d(got).view(np.uint8), np.atleast_1d(want).view(np.uint8)
    )


# ---- data movement -----------------------------------------------------------------------------


@st.composite
def movement(draw):
    """(name, operand shapes, a function of the operands), every op followed by an elementwise
    one so that it is lowered inside a kernel (an index map), not a numpy view."""
    dtype = draw(st.sampled_from([F32, I32, BF16, BOOL, U8]))
    op = draw(st.sampled_from(["broadcast_in_dim", "reshape", "transpose", "squeeze", "slice",
                               "pad", "concatenate", "rev", "iota"]))  # fmt: skip
    shape = draw(shapes(min_dims=1, max_dims=3, max_side=4))
    nd = len(shape)
    if op == "broadcast_in_dim":
        out = list(shape)
        for _ in range(draw(st.integers(0, 2))):
            out.insert(draw(st.integers(0, len(out))), draw(st.integers(0, 3)))
        dims, j = [], 0
        for i, d in enumerate(out):  # keep the operand's axes, in order
            if j < nd and d == shape[j]:
                dims.append(i)
                j += 1
        assume_ok = len(dims) == nd
        if not assume_ok:
            out, dims = list(shape), list(range(nd))
        shape = tuple(1 if draw(st.booleans()) else d for d in shape)  # size-1 axes broadcast
        return dtype, [shape], lambda x: lax.broadcast_in_dim(x, tuple(out), tuple(dims))
    if op == "reshape":
        size = int(np.prod(shape))
        new = draw(st.sampled_from([(size,), tuple(reversed(shape)), shape + (1,), (1,) + shape]))
        return dtype, [shape], lambda x: lax.reshape(x, new)
    if op == "transpose":
        perm = tuple(draw(st.permutations(range(nd))))
        return dtype, [shape], lambda x: lax.transpose(x, perm)
    if op == "squeeze":
        shape = tuple(1 if draw(st.booleans()) else d for d in shape)
        dims = tuple(i for i, d in enumerate(shape) if d == 1)
        return dtype, [shape], lambda x: lax.squeeze(x, dims)
    if op == "slice":
        starts = [draw(st.integers(0, d)) for d in shape]
        limits = [draw(st.integers(s, d)) for s, d in zip(starts, shape)]
        strides = [draw(st.integers(1, 3)) for _ in shape]
        return dtype, [shape], lambda x: lax.slice(x, starts, limits, strides)
    if op == "pad":
        cfg = []
        for d in shape:  # negative low/high crop, interior dilates; no side may crop past 0
            lo, hi, it = draw(st.integers(-1, 2)), draw(st.integers(-1, 2)), draw(st.integers(0, 2))
            grown = d + max(d - 1, 0) * it
            ok = grown + lo >= 0 and grown + hi >= 0 and grown + lo + hi >= 0
            cfg.append((lo, hi, it) if ok else (0, 0, it))
        return dtype, [shape, ()], lambda x, v: lax.pad(x, v, cfg)
    if op == "concatenate":
        dim = draw(st.integers(0, nd - 1))
        k = draw(st.integers(1, 3))
        shp = [tuple(draw(st.integers(0, 3)) if i == dim else d for i, d in enumerate(shape))
               for _ in range(k)]  # fmt: skip
        return dtype, shp, lambda *xs: lax.concatenate(xs, dim)
    if op == "rev":
        dims = tuple(i for i in range(nd) if draw(st.booleans()))
        return dtype, [shape], lambda x: lax.rev(x, dims)
    dim = draw(st.integers(0, nd - 1))
    dt = draw(st.sampled_from([I32, F32, U8, BF16, I64]))
    return (
        dtype,
        [shape],
        lambda x: lax.add(lax.convert_element_type(x, dt), lax.iota(dt, shape, dim)),
    )


def _twice(x):
    """An elementwise op that is exact in every dtype (so the check can be exact)."""
    return lax.not_(x) if x.dtype == BOOL else lax.neg(lax.neg(x))


@given(case=movement(), seed=st.integers(0, 2**31))
def test_data_movement_is_an_index_map(case, seed):
    dtype, shps, fn = case
    rng = np.random.default_rng(seed)
    args = [sample(rng, s, dtype) for s in shps]

    def f(*xs):
        return _twice(fn(*[_twice(x) for x in xs]))

    (got,), exe = compiled(f, *args)
    (want,) = eager(f, *args)
    assert [n.kind for n in exe.plan.nodes] == ["kernel"]
    assert got.dtype == want.dtype
    if dtype == BF16:  # (numpy's NaN == NaN check does not know bfloat16)
        got, want = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_array_equal(got, want)


# ---- reductions --------------------------------------------------------------------------------


@st.composite
def reduction(draw):
    op = draw(st.sampled_from(["sum", "max", "min", "prod", "and", "or", "argmax", "argmin"]))
    dtype = (
        BOOL
        if op in ("and", "or")
        else draw(st.sampled_from(ALL if op != "prod" else FLOATS + INTS))
    )
    if op in ("argmax", "argmin"):
        shape = draw(shapes(min_dims=1, max_dims=3, min_side=1, max_side=5))
        return op, dtype, shape, (draw(st.integers(0, len(shape) - 1)),)
    if dtype == BOOL and op in ("prod",):
        dtype = F32
    shape = draw(shapes(max_dims=3, max_side=6))
    axes = tuple(i for i in range(len(shape)) if draw(st.booleans()))
    return op, dtype, shape, axes


_REDUCERS = {"sum": lax.reduce_sum, "max": lax.reduce_max, "min": lax.reduce_min,
             "prod": lax.reduce_prod, "and": lax.reduce_and, "or": lax.reduce_or}  # fmt: skip


@given(case=reduction(), seed=st.integers(0, 2**31))
def test_reductions_match_numpy(case, seed):
    op, dtype, shape, axes = case
    x = sample(np.random.default_rng(seed), shape, dtype, special=op not in ("sum", "prod"))
    if op in ("argmax", "argmin"):
        fn = lax.argmax if op == "argmax" else lax.argmin
        f = lambda x: fn(lax.neg(x) if dtype.kind == "f" else x, axes[0], np.int32)  # noqa: E731
    else:
        f = lambda x: _REDUCERS[op](_twice(x), axes)  # noqa: E731
    (got,), exe = compiled(f, x)
    (want,) = eager(f, x)
    if op in ("sum", "prod") and dtype.kind == "f" or dtype == BF16:
        # summation order differs from numpy's pairwise sums: compare with an error bound
        n = max(int(np.prod([shape[a] for a in axes])), 1)
        ref = np.asarray(want, np.float64)
        scale = np.abs(x.astype(np.float64)).max(initial=1.0) ** (n if op == "prod" else 1)
        tol = {F64: 1e-15, F32: 1e-7}.get(dtype, 1e-2) * n * 4 * scale
        np.testing.assert_allclose(got.astype(np.float64), ref, rtol=1e-5, atol=tol)
    else:
        assert_close(got, want, dtype, f"{op} over {axes} of {dtype}{shape}", rtol=0)


# ---- library calls and fallbacks ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", [F32, F64, BF16, I32], ids=str)
def test_dot_general_is_a_blas_call_into_the_planned_buffer(dtype):
    rng = np.random.default_rng(0)
    a, b = sample(rng, (2, 3, 4), dtype, False), sample(rng, (2, 4, 5), dtype, False)
    dn = (((2,), (1,)), ((0,), (0,)))
    f = lambda a, b: lax.neg(lax.dot_general(a, b, dn))  # noqa: E731
    (got,), exe = compiled(f, a, b)
    assert [n.kind for n in exe.plan.nodes] == ["dot", "kernel"]
    assert_close(got, eager(f, a, b)[0], dtype, "dot_general", rtol=1e-5 if dtype != BF16 else None)


def test_primitives_without_a_rule_run_their_numpy_impl():
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)

    def f(x):  # a host callback between two kernels
        s = blu.pure_callback(lambda v: np.sort(v, 1), blu.ShapeDtypeStruct(x.shape, x.dtype),
                              lax.neg(x) * 2.0)  # fmt: skip
        return s + s, s  # (exact arithmetic: the same bits as the eager run)

    got, exe = compiled(f, x)
    assert {n.kind for n in exe.plan.nodes} >= {"kernel", "fallback"}
    for g, w in zip(got, eager(f, x)):
        np.testing.assert_array_equal(g, w)


def _bf16_reference(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, rounding to nearest even in integers; NaN quieted (0x40)."""
    u = x.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), ((u >> 16) | 0x40).astype(np.uint16), rounded)


def test_a_rounded_bfloat16_is_stored_as_rounded():
    """``Builder.round_to_bf16``'s value, stored to a bfloat16 buffer, stores the bits it was
    widened from (no second rounding: only the store is emitted); a value not made so is
    rounded at the store."""
    from blu.core.aval import ShapedArray
    from blu.lower.mlir.emit import Builder

    b, aval = Builder(), ShapedArray((4,), BF16)
    v = b.round_to_bf16("%x")
    bits, n = b.bf16_bits[v], len(b.lines)
    b.store(v, "%buf", aval, "%i")
    assert len(b.lines) == n + 1 and b.lines[-1].strip().startswith(f"memref.store {bits},")
    assert b.stored(v, aval) == v and b.round_to_bf16(v) == v and len(b.lines) == n + 1
    b.store("%y", "%buf", aval, "%i")
    assert len(b.lines) > n + 3 and "%y" in " ".join(b.lines[n + 1 :])


def test_float32_to_bfloat16_bits_on_the_cpu():
    """A kernel that rounds a float32 product to bfloat16 and stores it: the stored bits are
    the reference rounding's (ties to even, overflow to inf, NaN quieted), and the
    value widened again (a second output) is the same number."""
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(997).astype(F32) * 1e3, np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, 3.3895314e38, 1.00390625, 1.01171875, 1e-40,
         -1.00390625], F32)])  # fmt: skip
    y = np.array([1.0], F32)

    def fn(x, y):
        z = (x * y).astype(BF16)
        return z, z.astype(F32) + 0.0

    z, w = blu.jit(fn)(x, y)
    got = np.asarray(z).view(np.uint16)
    want = _bf16_reference(x)
    fin = ~np.isnan(x)
    assert (got[fin] == want[fin]).all() and np.isnan(np.asarray(z)[~fin].astype(F32)).all()
    wide = (want.astype(np.uint32) << 16).view(F32)
    np.testing.assert_array_equal(np.asarray(w)[fin], wide[fin])


def test_bfloat16_bits_are_kept_through_a_copy_and_a_bitcast():
    """Loaded bfloat16 bits, signaling NaNs among them, come out of a copy (a reversal) and a
    bitcast to uint16 as they went in (numpy's copy keeps them; a reviewing helper found the
    bitcast quieting 0x7F81 to 0x7FC1)."""
    bits = np.array([0x7F81, 0xFF81, 0x7FC0, 0x7F80, 0x0001, 0x8000, 0x3F80, 0x7FFF], np.uint16)
    x = bits.view(BF16)
    got_rev = np.asarray(blu.jit(lambda x: x[::-1])(x)).view(np.uint16)
    got_cast = np.asarray(blu.jit(lambda x: lax.bitcast_convert_type(x, np.uint16))(x))
    np.testing.assert_array_equal(got_rev, bits[::-1])
    np.testing.assert_array_equal(got_cast, bits)
