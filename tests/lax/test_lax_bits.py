"""Bitwise lax primitives (bits.py) against Python integer arithmetic, and threefry2x32 built
from them against the Random123 known-answer vectors."""

from __future__ import annotations

import operator
import sys
import warnings

import ml_dtypes
import numpy as np
import pytest
from helpers import check_jit, check_vmap, shapes
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
from blu import lax
from blu.core.errors import BluShapeError, BluTypeError, BluValueError

INT_DTYPES = [np.int8, np.int32, np.int64, np.uint8, np.uint32, np.uint64]
dt_ids = [np.dtype(d).name for d in INT_DTYPES]


def ints(dtype, shape):
    info = np.iinfo(dtype)
    return hnp.arrays(dtype, shape, elements=st.integers(int(info.min), int(info.max)))


def bits_of(v: int, dtype) -> int:
    """The two's-complement bit pattern of ``v`` as a non-negative Python int."""
    return int(v) % (1 << np.iinfo(dtype).bits)


def from_bits(b: int, dtype) -> int:
    """The value of ``dtype`` whose bit pattern is ``b``."""
    n = np.iinfo(dtype).bits
    b %= 1 << n
    return b - (1 << n) if np.iinfo(dtype).min < 0 and b >> (n - 1) else b


def quietly(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow/shift warnings
        return fn(*args)


# ---- logical operations ------------------------------------------------------------------------

LOGICAL = {"and_": operator.and_, "or_": operator.or_, "xor": operator.xor}


@pytest.mark.parametrize("dtype", [*INT_DTYPES, np.bool_], ids=[*dt_ids, "bool"])
@pytest.mark.parametrize("name", list(LOGICAL))
@given(data=st.data())
def test_logical_ops_match_python_bit_arithmetic(name, dtype, data):
    shape = data.draw(shapes())
    if dtype is np.bool_:
        x, y = data.draw(hnp.arrays(np.bool_, shape)), data.draw(hnp.arrays(np.bool_, shape))
    else:
        x, y = data.draw(ints(dtype, shape)), data.draw(ints(dtype, shape))
    got = quietly(getattr(lax, name), x, y)
    assert got.dtype == np.dtype(dtype) and got.shape == shape
    ref = LOGICAL[name]
    want = [ref(a, b) for a, b in zip(x.ravel().tolist(), y.ravel().tolist())]
    if dtype is not np.bool_:
        want = [from_bits(ref(bits_of(a, dtype), bits_of(b, dtype)), dtype)
                for a, b in zip(x.ravel().tolist(), y.ravel().tolist())]  # fmt: skip
    assert np.asarray(got).ravel().tolist() == want


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=dt_ids)
@given(data=st.data())
def test_not_is_bitwise_complement(dtype, data):
    x = data.draw(ints(dtype, data.draw(shapes())))
    got = quietly(lax.not_, x)
    assert got.dtype == np.dtype(dtype)
    mask = (1 << np.iinfo(dtype).bits) - 1
    want = [from_bits(bits_of(v, dtype) ^ mask, dtype) for v in x.ravel().tolist()]
    assert np.asarray(got).ravel().tolist() == want


def test_not_of_bool_is_logical_not():
    assert lax.not_(np.array([True, False])).tolist() == [False, True]
    assert lax.not_(np.array([True, False])).dtype == np.bool_


# ---- shifts ------------------------------------------------------------------------------------


def shl_ref(x: int, s: int, dtype) -> int:
    n = np.iinfo(dtype).bits
    s = bits_of(s, dtype)  # the amount is read as unsigned
    return 0 if s >= n else from_bits(bits_of(x, dtype) << s, dtype)


def shr_logical_ref(x: int, s: int, dtype) -> int:
    n = np.iinfo(dtype).bits
    s = bits_of(s, dtype)
    return 0 if s >= n else from_bits(bits_of(x, dtype) >> s, dtype)


def shr_arith_ref(x: int, s: int, dtype) -> int:
    n = np.iinfo(dtype).bits
    s = min(bits_of(s, dtype), n - 1)
    b = bits_of(x, dtype)
    signed = b - (1 << n) if b >> (n - 1) else b  # the top bit is the sign, even for unsigned
    return from_bits(signed >> s, dtype)


SHIFTS = {
    "shift_left": shl_ref,
    "shift_right_logical": shr_logical_ref,
    "shift_right_arithmetic": shr_arith_ref,
}


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=dt_ids)
@pytest.mark.parametrize("name", list(SHIFTS))
@given(data=st.data())
def test_shifts_match_xla_semantics(name, dtype, data):
    n = np.iinfo(dtype).bits
    x = data.draw(ints(dtype, (8,)))
    # amounts in and out of range, including n, n + 1 and (for signed types) negative ones
    lo = -2 if np.iinfo(dtype).min < 0 else 0
    s = data.draw(hnp.arrays(dtype, (8,), elements=st.integers(lo, min(n + 3, 127))))
    s[:2] = [n - 1, n]
    got = quietly(getattr(lax, name), x, s)
    got_jit = blu.jit(getattr(lax, name))(x, s)
    want = [SHIFTS[name](int(a), int(b), dtype) for a, b in zip(x, s)]
    assert got.dtype == np.dtype(dtype)
    assert np.asarray(got).tolist() == want
    assert np.asarray(got_jit).tolist() == want


def test_shift_by_python_int():
    x = np.array([0x80000001, 3], np.uint32)
    assert lax.shift_left(x, 1).tolist() == [2, 6]
    assert lax.shift_right_logical(x, 31).tolist() == [1, 0]
    assert lax.shift_right_arithmetic(x, 31).tolist() == [0xFFFFFFFF, 0]
    assert lax.shift_right_arithmetic(np.array([-8], np.int32), 1).tolist() == [-4]


# ---- bit counts --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=dt_ids)
@given(data=st.data())
def test_population_count_and_clz(dtype, data):
    n = np.iinfo(dtype).bits
    x = data.draw(ints(dtype, (9,)))
    x[:3] = [0, 1, np.iinfo(dtype).max]
    pc, lz = lax.population_count(x), lax.clz(x)
    assert pc.dtype == lz.dtype == np.dtype(dtype)
    assert pc.tolist() == [bin(bits_of(v, dtype)).count("1") for v in x.tolist()]
    assert lz.tolist() == [n - bits_of(v, dtype).bit_length() for v in x.tolist()]


# ---- bitcast -----------------------------------------------------------------------------------

SAME_WIDTH = [
    (np.float32, np.uint32),
    (np.uint32, np.float32),
    (np.float32, np.int32),
    (np.float64, np.uint64),
    (np.int64, np.float64),
    (ml_dtypes.bfloat16, np.uint16),
    (np.uint16, np.float16),
    (np.int8, np.uint8),
]


@pytest.mark.parametrize("src,dst", SAME_WIDTH, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_bitcast_same_width_reinterprets_bits(src, dst, data):
    shape = data.draw(shapes())
    nbytes = np.dtype(src).itemsize
    raw = data.draw(hnp.arrays(np.dtype(f"u{nbytes}"), shape))
    x = raw.view(src)  # any bit pattern, NaN payloads included
    got = lax.bitcast_convert_type(x, dst)
    assert got.dtype == np.dtype(dst) and got.shape == shape
    assert np.asarray(got).view(np.dtype(f"u{nbytes}")).tolist() == raw.tolist()
    back = lax.bitcast_convert_type(got, src)
    assert np.asarray(back).view(np.dtype(f"u{nbytes}")).tolist() == raw.tolist()


def test_bitcast_known_values():
    one = lax.bitcast_convert_type(np.float32(1.0), np.uint32)
    assert one.item() == 0x3F800000
    # the RNG trick: 23 random mantissa bits under the exponent of 1.0 give a float in [1, 2)
    bits = np.array([0, 0xFFFFFFFF, 0x12345678], np.uint32)
    f = lax.bitcast_convert_type(lax.or_(lax.shift_right_logical(bits, 9), 0x3F800000), np.float32)
    assert np.asarray(f).tolist() == [1.0, 2 - 2.0**-23, 1 + (0x12345678 >> 9) / 2.0**23]


def test_bitcast_changes_width_along_a_trailing_axis():
    x = np.array([[0x04030201, 0x08070605]], np.uint32)
    narrow = lax.bitcast_convert_type(x, np.uint8)
    assert narrow.shape == (1, 2, 4)
    assert np.asarray(narrow).tolist() == [[[1, 2, 3, 4], [5, 6, 7, 8]]]  # little-endian
    wide = lax.bitcast_convert_type(narrow, np.uint32)
    assert wide.shape == (1, 2) and np.asarray(wide).tolist() == x.tolist()
    assert lax.bitcast_convert_type(np.uint32(0x0201), np.uint16).tolist() == [0x0201, 0]
    with pytest.raises(BluShapeError, match=r"bitcast_convert_type.*u8\[3\].*size 4"):
        lax.bitcast_convert_type(np.zeros(3, np.uint8), np.uint32)
    with pytest.raises(BluTypeError, match="bool"):
        lax.bitcast_convert_type(np.zeros(3, np.bool_), np.uint8)


@given(data=st.data())
def test_bitcast_vmap_any_axis(data):
    core = data.draw(shapes(min_dims=1, max_dims=2))
    size = data.draw(st.integers(1, 3))
    for src, dst, shape in [(np.uint32, np.float32, core), (np.uint32, np.uint8, core),
                            (np.uint8, np.uint32, core[:-1] + (4,))]:  # fmt: skip
        axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
        full = list(shape)
        full.insert(axis % (len(shape) + 1), size)
        x = data.draw(ints(src, tuple(full)))
        check_vmap(lambda v, d=dst: lax.bitcast_convert_type(v, d), [x], [axis], atol=0, rtol=0)


# ---- transforms --------------------------------------------------------------------------------

BINARY_BITS = ["and_", "or_", "xor", "shift_left", "shift_right_logical", "shift_right_arithmetic"]


@pytest.mark.parametrize("name", BINARY_BITS)
@given(data=st.data())
def test_binary_bits_vmap_and_jit(name, data):
    core = data.draw(shapes(max_dims=2))
    choices = [None, *range(-len(core) - 1, len(core) + 1)]
    ax = data.draw(st.sampled_from(choices))
    ay = data.draw(st.sampled_from(choices[1:] if ax is None else choices))
    size = data.draw(st.integers(1, 3))

    def batched(axis):
        if axis is None:
            return core
        s = list(core)
        s.insert(axis % (len(core) + 1), size)
        return tuple(s)

    x = data.draw(ints(np.uint32, batched(ax)))
    y = data.draw(hnp.arrays(np.uint32, batched(ay), elements=st.integers(0, 40)))
    fn = getattr(lax, name)
    check_vmap(fn, [x, y], [ax, ay], atol=0, rtol=0)
    check_jit(fn, [x if ax is None else np.take(x, 0, ax), y if ay is None else np.take(y, 0, ay)])


def test_bit_ops_have_zero_derivatives():
    # the bitcast round trip is not differentiable: only the direct use of x carries a gradient
    def f(x):
        u = lax.bitcast_convert_type(x, np.uint64)
        y = lax.bitcast_convert_type(lax.xor(u, 0), np.float64)
        return lax.reduce_sum(lax.mul(x, y))

    x = np.array([1.5, -2.0, 0.25])
    np.testing.assert_array_equal(np.asarray(blu.grad(f)(x)), x)
    _, t = blu.jvp(lambda v: lax.population_count(lax.shift_left(v, 1)), (np.arange(3),),
                   (np.zeros(3, np.int64),))  # fmt: skip
    assert np.asarray(t).tolist() == [0, 0, 0]


# ---- errors ------------------------------------------------------------------------------------


def test_bit_ops_reject_floats_naming_op_and_dtype():
    for fn in (lax.and_, lax.or_, lax.xor, lax.shift_left, lax.shift_right_logical,
               lax.shift_right_arithmetic):  # fmt: skip
        with pytest.raises(BluTypeError, match=r"integer.*f32\[2\]"):
            fn(np.ones(2, np.float32), np.ones(2, np.float32))
    for fn in (lax.not_, lax.population_count, lax.clz):
        with pytest.raises(BluTypeError, match=r"f64\[2\]"):
            fn(np.ones(2))
    with pytest.raises(BluTypeError, match=r"shift_left.*bool"):
        lax.shift_left(np.array([True]), np.array([True]))


def test_bit_op_shape_mismatch_names_shapes_and_line():
    line = sys._getframe().f_lineno + 2
    with pytest.raises(BluShapeError) as e:
        lax.xor(np.zeros((2, 1), np.uint32), np.zeros((2,), np.uint32))
    msg = str(e.value)
    assert "xor" in msg and "u32[2,1]" in msg and "u32[2]" in msg
    assert f"test_lax_bits.py:{line}" in msg


# ---- threefry2x32 ------------------------------------------------------------------------------
# Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC 2011); the 20-round
# Threefry-2x32 of Random123, as in jax.random's threefry_2x32.

ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def threefry2x32(key0, key1, x0, x1):
    """With blu.lax (uint32 arrays of one shape)."""

    def rotl(v, d):
        return lax.or_(lax.shift_left(v, d), lax.shift_right_logical(v, 32 - d))

    ks = (key0, key1, lax.xor(lax.xor(key0, key1), 0x1BD11BDA))
    x0, x1 = lax.add(x0, ks[0]), lax.add(x1, ks[1])
    for i in range(5):
        for r in ROTATIONS[i % 2]:
            x0 = lax.add(x0, x1)
            x1 = lax.xor(x0, rotl(x1, r))
        x0 = lax.add(x0, ks[(i + 1) % 3])
        x1 = lax.add(lax.add(x1, ks[(i + 2) % 3]), i + 1)
    return x0, x1


def threefry2x32_python(key0: int, key1: int, x0: int, x1: int) -> tuple[int, int]:
    """The same with Python ints, as an independent reference."""
    m = 0xFFFFFFFF
    ks = (key0, key1, key0 ^ key1 ^ 0x1BD11BDA)
    x0, x1 = (x0 + ks[0]) & m, (x1 + ks[1]) & m
    for i in range(5):
        for r in ROTATIONS[i % 2]:
            x0 = (x0 + x1) & m
            x1 = x0 ^ (((x1 << r) | (x1 >> (32 - r))) & m)
        x0 = (x0 + ks[(i + 1) % 3]) & m
        x1 = (x1 + ks[(i + 2) % 3] + i + 1) & m
    return x0, x1


# (key0, key1, counter0, counter1) -> output: Random123's kat_vectors for threefry2x32_20
KAT = [
    ((0, 0, 0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344, 0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize("inputs,want", KAT)
def test_threefry2x32_known_answers(inputs, want):
    args = [np.uint32(v) for v in inputs]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = threefry2x32(*args)
    assert tuple(int(g) for g in got) == want
    assert threefry2x32_python(*inputs) == want
    assert tuple(int(g) for g in blu.jit(threefry2x32)(*args)) == want


@given(data=st.data())
def test_threefry2x32_vectorized_jit_and_vmap(data):
    n = data.draw(st.integers(1, 6))
    k0, k1 = data.draw(ints(np.uint32, ())), data.draw(ints(np.uint32, ()))
    x0, x1 = data.draw(ints(np.uint32, (n,))), data.draw(ints(np.uint32, (n,)))
    want = [threefry2x32_python(int(k0), int(k1), int(a), int(b)) for a, b in zip(x0, x1)]
    keys = (np.full(n, k0, np.uint32), np.full(n, k1, np.uint32))
    for fn in (threefry2x32, blu.jit(threefry2x32)):
        o0, o1 = fn(*keys, x0, x1)
        assert list(zip(np.asarray(o0).tolist(), np.asarray(o1).tolist())) == want
    o0, o1 = blu.vmap(threefry2x32, in_axes=(None, None, 0, 0))(k0, k1, x0, x1)
    assert list(zip(np.asarray(o0).tolist(), np.asarray(o1).tolist())) == want


# ---- reduce_precision (JAX's; blu had none) ----------------------------------------------------

_SRC_BITS = {"float16": (5, 10), "bfloat16": (8, 7), "float32": (8, 23), "float64": (11, 52)}


def _reduce_precision_reference(x: np.ndarray, e: int, m: int) -> np.ndarray:
    """The same IEEE rounding in float64 arithmetic, not on bits: round to a multiple of the
    spacing of ``m`` mantissa bits at ``x``'s exponent (numpy's round: ties to even), then a
    signed infinity above the range of ``e`` exponent bits, a signed zero below its normal
    range (the operand's subnormals keep their own spacing when the exponent is not reduced)."""
    src_e, src_m = _SRC_BITS[np.dtype(x.dtype).name]
    src_min_exp = 2 - 2 ** (src_e - 1)  # the exponent of the smallest normal
    reduce_exp = e < src_e
    bias = 2 ** (e - 1) - 1 if reduce_exp else 2 ** (src_e - 1) - 1
    out = []
    for v in x.astype(np.float64).ravel():
        if not np.isfinite(v) or v == 0:
            out.append(v)
            continue
        exp = max(int(np.frexp(v)[1]) - 1, src_min_exp)
        q = 2.0 ** (exp - min(m, src_m))
        r = np.round(v / q) * q
        # r's exponent (not a comparison with 2.0 ** (bias + 1): 2.0**1024 overflows a float64)
        r_exp = int(np.frexp(r)[1]) - 1 if np.isfinite(r) else np.inf
        if r_exp > bias:
            r = np.copysign(np.inf, v)
        elif reduce_exp and r_exp < 1 - bias:
            r = np.copysign(0.0, v)
        out.append(r)
    return np.array(out, np.float64).reshape(x.shape)


def _assert_same_floats(got: np.ndarray, want: np.ndarray) -> None:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(got, want)  # NaN where NaN
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # signed zeros


def _floats32(shape):
    special = st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-40, 3.4e38, 1.0])
    any_f32 = st.floats(width=32, allow_subnormal=True)
    return hnp.arrays(np.float32, shape, elements=st.one_of(any_f32, special))


@given(
    x=shapes(max_side=5).flatmap(_floats32),
    e=st.integers(1, 10),
    m=st.integers(0, 25),
)
def test_reduce_precision_matches_the_float64_reference(x, e, m):
    got = np.asarray(lax.reduce_precision(x, e, m))
    assert got.shape == x.shape and got.dtype == np.float32
    _assert_same_floats(got, _reduce_precision_reference(x, e, m))


@given(x=shapes(max_side=5).flatmap(_floats32))
def test_reduce_precision_8_7_is_bfloat16_rounding(x):
    # subnormals, infinities and NaN included: bfloat16 has float32's exponent range
    got = lax.reduce_precision(x, exponent_bits=8, mantissa_bits=7)
    _assert_same_floats(got, x.astype(ml_dtypes.bfloat16))


@given(x=shapes(max_side=5).flatmap(_floats32))
def test_reduce_precision_5_10_is_float16_rounding_in_its_normal_range(x):
    got = np.asarray(lax.reduce_precision(x, 5, 10))
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    # float16's subnormals (below 2**-14) are zeros here: the reduced format has none
    subnormal = np.abs(want) < 2.0**-14
    want = np.where(subnormal, np.copysign(np.float16(0), x), want)
    _assert_same_floats(got, want)


def test_reduce_precision_ties_go_to_even_and_overflow_to_inf():
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 255.5, 257.0, 259.0, 65504.0])
    got = np.asarray(lax.reduce_precision(x, 5, 7))  # 7 mantissa bits: spacing 2**-7 at 1
    # ties to the even neighbour: 255.5 (spacing 1) to 256; 257 and 259 (spacing 2) to 256 and
    # 260; 65504 rounds to 65536, beyond the largest finite (2 - 2**-7) * 2**15: inf
    want = [1.0, 1 + 4 * 2**-8, -1.0, 256.0, 256.0, 260.0, np.inf]
    _assert_same_floats(got, np.array(want))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64])
@given(seed=st.integers(0, 2**32 - 1), shape=shapes(max_side=4), e=st.integers(1, 12),
       m=st.integers(0, 54))  # fmt: skip
def test_reduce_precision_other_dtypes(dtype, seed, shape, e, m):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 2.0 ** rng.integers(-20, 20, shape)).astype(dtype)
    got = np.asarray(lax.reduce_precision(x, e, m))
    assert got.dtype == np.dtype(dtype)
    _assert_same_floats(got, _reduce_precision_reference(x, e, m))


def test_reduce_precision_of_float64_to_8_23_is_float32_rounding():
    x = np.array([np.pi, -1 / 3, 1e30, 3.4028235677973366e38, 1e39, 1e-30, np.nan, -np.inf])
    with np.errstate(over="ignore"):
        want = x.astype(np.float32)
    _assert_same_floats(lax.reduce_precision(x, 8, 23), want)


def test_reduce_precision_derivative_is_the_identity_and_it_traces():
    x = np.array([0.1, -3.7, 1e4], np.float32)
    g = np.asarray(blu.grad(lambda v: (lax.reduce_precision(v, 5, 3) * v).sum())(x))
    # d/dv (r(v) v) with r' = 1: v + r(v)
    np.testing.assert_allclose(g, x + _reduce_precision_reference(x, 5, 3), rtol=1e-6)
    check_jit(lambda v: lax.reduce_precision(v, 5, 3), [x])
    check_vmap(lambda v: lax.reduce_precision(v, 4, 2), [x.reshape(3, 1)], in_axes=[0])


@pytest.mark.parametrize(
    ("x", "e", "m", "err", "match"),
    [
        (np.arange(3), 5, 10, BluTypeError, r"real float operand, got i64\[3\]"),
        (np.zeros(2, np.complex64), 5, 10, BluTypeError, r"real float operand, got c64\[2\]"),
        (np.zeros(2, np.float32), 0, 10, BluValueError, r"exponent_bits=0, mantissa_bits=10"),
        (np.zeros(2, np.float32), 5, -1, BluValueError, r"exponent_bits=5, mantissa_bits=-1"),
        (np.zeros(2, np.float32), 5.5, 2, BluTypeError, r"exponent_bits must be an int"),
    ],
)
def test_reduce_precision_errors(x, e, m, err, match):
    with pytest.raises(err, match=match):
        lax.reduce_precision(x, e, m)


# ---- nextafter (JAX's; blu had none) -----------------------------------------------------------


def _float_pairs(dtype):
    width = {np.float16: 16, np.float32: 32, np.float64: 64}[dtype]
    f = np.finfo(dtype)
    special = st.sampled_from(
        [0.0, -0.0, np.inf, -np.inf, np.nan, float(f.max), -float(f.max),
         float(f.smallest_subnormal), -float(f.smallest_subnormal), float(f.tiny), 1.0]
    )  # fmt: skip
    elem = st.one_of(st.floats(width=width, allow_subnormal=True), special)
    return shapes(max_side=5).flatmap(
        lambda s: st.tuples(
            hnp.arrays(dtype, s, elements=elem), hnp.arrays(dtype, s, elements=elem)
        )
    )


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=lambda d: d.__name__)
@given(data=st.data())
def test_nextafter_matches_numpy(dtype, data):
    x1, x2 = data.draw(_float_pairs(dtype))
    got = np.asarray(lax.nextafter(x1, x2))
    with np.errstate(over="ignore"):
        want = np.nextafter(x1, x2)
    # at x1 == x2 C's nextafter (and XLA's) gives x2; numpy's float16 one gives x1, the sign of
    # a zero differing
    want = np.where(x1 == x2, x2, want)
    assert got.dtype == np.dtype(dtype) and got.shape == want.shape
    np.testing.assert_array_equal(got, want)  # NaN where NaN
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@given(x=hnp.arrays(np.float32, shapes(max_side=5), elements=st.floats(-1e3, 1e3, width=32)))
def test_nextafter_bfloat16_is_one_step_of_the_bits(x):
    x = x.astype(ml_dtypes.bfloat16)
    up = np.asarray(lax.nextafter(x, np.full_like(x, np.inf)))
    # the next bfloat16 up: the smallest bfloat16 above x, among x's neighbours in bits
    u = x.view(np.uint16).astype(np.int64)
    cands = np.stack([u - 1, u + 1, np.full_like(u, 1)]).clip(0, 2**16 - 1).astype(np.uint16)
    cands = cands.view(ml_dtypes.bfloat16).astype(np.float64)
    xf = x.astype(np.float64)
    want = np.where(cands > xf, cands, np.inf).min(axis=0)
    np.testing.assert_array_equal(up.astype(np.float64), want)


def test_nextafter_examples_scalars_and_zero_derivative():
    one = np.float32(1.0)
    assert float(lax.nextafter(np.ones(1, np.float32), 2.0)[0]) == float(one + np.finfo(one).eps)
    assert float(lax.nextafter(np.zeros((), np.float32), -1.0)) == -float(
        np.finfo(np.float32).smallest_subnormal
    )
    assert float(blu.grad(lambda v: lax.nextafter(v, 2.0))(1.0)) == 0.0
    x = np.array([[1.0, -2.0, 0.0]], np.float32)
    check_jit(lambda a, b: lax.nextafter(a, b), [x, -x])
    check_vmap(lambda a, b: lax.nextafter(a, b), [x.T, x.T], in_axes=[0, 0])


@pytest.mark.parametrize(
    ("x1", "x2", "err", "match"),
    [
        (np.zeros(2, np.int32), np.zeros(2, np.int32), BluTypeError, r"one dtype, got i32"),
        (np.zeros(2, np.float32), np.zeros(2), BluTypeError, r"dtype, got f32\[2\], f64\[2\]"),
        (np.zeros(2, np.float32), np.zeros(3, np.float32), BluShapeError, r"got f32\[2\], f32\[3"),
    ],
)  # fmt: skip
def test_nextafter_errors(x1, x2, err, match):
    with pytest.raises(err, match=match):
        lax.nextafter(x1, x2)
