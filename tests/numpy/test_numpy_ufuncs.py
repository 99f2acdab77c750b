"""blu.numpy elementwise functions against numpy: values (float64, float32, bf16/f16 and integer
dtypes), broadcasting, numpy's floor-division/remainder/rounding semantics, dtypes of results."""

import ml_dtypes
import numpy as np
import pytest
from helpers import shapes
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
import blu.numpy as bnp
from blu.core.errors import BluError, ConcretizationError


def _floats(shape, lo, hi, dtype=np.float64, halves=False):
    """Float arrays in [lo, hi]; with ``halves`` also exact multiples of 1/2 (rounding ties)."""
    el = st.floats(lo, hi, allow_nan=False, allow_infinity=False, width=64)
    if halves:
        el = st.one_of(el, st.integers(int(lo) * 2, int(hi) * 2).map(lambda k: k / 2))
    return hnp.arrays(dtype, shape, elements=el)


def _close(got, want, rtol=1e-12, atol=1e-12, dtype=None):
    got_np = np.asarray(got)
    assert got_np.shape == np.shape(want), (got_np.shape, np.shape(want))
    if dtype is not None:
        assert got_np.dtype == dtype, (got_np.dtype, dtype)
    np.testing.assert_allclose(
        got_np.astype(np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol
    )


# (name, numpy reference, domain)
UNARY = [
    ("negative", np.negative, (-3, 3)),
    ("positive", np.positive, (-3, 3)),
    ("abs", np.abs, (-3, 3)),
    ("fabs", np.fabs, (-3, 3)),
    ("sign", np.sign, (-3, 3)),
    ("sqrt", np.sqrt, (0, 4)),
    ("cbrt", np.cbrt, (-8, 8)),
    ("square", np.square, (-3, 3)),
    ("reciprocal", np.reciprocal, (0.25, 4)),
    ("exp", np.exp, (-5, 5)),
    ("exp2", np.exp2, (-5, 5)),
    ("expm1", np.expm1, (-3, 3)),
    ("log", np.log, (0.01, 10)),
    ("log2", np.log2, (0.01, 10)),
    ("log10", np.log10, (0.01, 10)),
    ("log1p", np.log1p, (-0.9, 5)),
    ("sin", np.sin, (-4, 4)),
    ("cos", np.cos, (-4, 4)),
    ("tan", np.tan, (-1.3, 1.3)),
    ("arcsin", np.arcsin, (-1, 1)),
    ("arccos", np.arccos, (-1, 1)),
    ("arctan", np.arctan, (-5, 5)),
    ("sinh", np.sinh, (-4, 4)),
    ("cosh", np.cosh, (-4, 4)),
    ("tanh", np.tanh, (-4, 4)),
    ("arcsinh", np.arcsinh, (-50, 50)),
    ("arccosh", np.arccosh, (1, 50)),
    ("arctanh", np.arctanh, (-0.99, 0.99)),
    ("deg2rad", np.deg2rad, (-360, 360)),
    ("rad2deg", np.rad2deg, (-7, 7)),
    ("floor", np.floor, (-5, 5)),
    ("ceil", np.ceil, (-5, 5)),
    ("trunc", np.trunc, (-5, 5)),
    ("rint", np.rint, (-5, 5)),
    ("round", np.round, (-5, 5)),
    ("isfinite", np.isfinite, (-5, 5)),
    ("isnan", np.isnan, (-5, 5)),
    ("isinf", np.isinf, (-5, 5)),
    ("signbit", np.signbit, (-5, 5)),
    ("logical_not", np.logical_not, (-1, 1)),
]


@pytest.mark.parametrize("name,ref,dom", UNARY, ids=[u[0] for u in UNARY])
@given(data=st.data())
def test_unary_float64(name, ref, dom, data):
    x = data.draw(_floats(shapes(), *dom, halves=name in ("round", "rint")))
    want = ref(x)
    _close(getattr(bnp, name)(x), want, rtol=1e-12, atol=1e-12, dtype=want.dtype)


@pytest.mark.parametrize("name,ref,dom", UNARY, ids=[u[0] for u in UNARY])
def test_unary_float32_and_special_values(name, ref, dom):
    rng = np.random.default_rng(0)
    x = rng.uniform(*dom, size=(5, 7)).astype(np.float32)
    got = getattr(bnp, name)(x)
    want = ref(x.astype(np.float64))
    assert np.asarray(got).dtype == (np.bool_ if want.dtype == bool else np.float32)
    _close(got, want, rtol=2e-6, atol=2e-6)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float64)
    if name not in ("logical_not",):
        with np.errstate(all="ignore"):
            _close(getattr(bnp, name)(special), ref(special), rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
@pytest.mark.parametrize(
    "name",
    [
        "exp",
        "log",
        "sqrt",
        "sin",
        "tanh",
        "round",
        "floor",
        "negative",
        "abs",
        "square",
        "sinh",
        "arctan",
        "log1p",
    ],
)
def test_unary_half_precision(name, dtype):
    ref, dom = {u[0]: (u[1], u[2]) for u in UNARY}[name]
    x = np.linspace(*dom, 23).astype(dtype)
    got = getattr(bnp, name)(x)
    assert np.asarray(got).dtype == dtype
    _close(got, ref(x.astype(np.float64)), rtol=2e-2, atol=2e-2)


def test_unary_integer_inputs():
    x = np.array([-3, 0, 2, 7], np.int32)
    assert bnp.sqrt(np.abs(x)).dtype == np.float32  # ints become the default float
    _close(bnp.exp(x), np.exp(x.astype(np.float64)), rtol=1e-6)
    for name in ("floor", "ceil", "trunc", "rint", "round", "abs", "square", "sign", "negative"):
        out = getattr(bnp, name)(x)
        assert out.dtype == np.int32, name
        np.testing.assert_array_equal(np.asarray(out), getattr(np, name)(x).astype(np.int32))
    u = np.array([0, 3, 250], np.uint8)
    np.testing.assert_array_equal(np.asarray(bnp.abs(u)), u)
    np.testing.assert_array_equal(np.asarray(bnp.negative(u)), np.negative(u))
    assert not np.asarray(bnp.isnan(x)).any() and np.asarray(bnp.isfinite(x)).all()
    with pytest.raises(BluError):
        bnp.negative(np.array([True]))


# (name, numpy reference, x domain, y domain)
BINARY = [
    ("add", np.add, (-3, 3), (-3, 3)),
    ("subtract", np.subtract, (-3, 3), (-3, 3)),
    ("multiply", np.multiply, (-3, 3), (-3, 3)),
    ("divide", np.divide, (-3, 3), (0.5, 3)),
    ("true_divide", np.true_divide, (-3, 3), (-3, -0.5)),
    ("floor_divide", np.floor_divide, (-6, 6), (-3, 3)),
    ("mod", np.mod, (-6, 6), (-3, 3)),
    ("remainder", np.remainder, (-6, 6), (-3, 3)),
    ("fmod", np.fmod, (-6, 6), (-3, 3)),
    ("power", np.power, (0.1, 3), (-2, 2)),
    ("float_power", np.float_power, (0.1, 3), (-2, 2)),
    ("arctan2", np.arctan2, (-3, 3), (-3, 3)),
    ("hypot", np.hypot, (-3, 3), (-3, 3)),
    ("maximum", np.maximum, (-3, 3), (-3, 3)),
    ("minimum", np.minimum, (-3, 3), (-3, 3)),
    ("fmax", np.fmax, (-3, 3), (-3, 3)),
    ("fmin", np.fmin, (-3, 3), (-3, 3)),
    ("logaddexp", np.logaddexp, (-30, 30), (-30, 30)),
    ("logaddexp2", np.logaddexp2, (-30, 30), (-30, 30)),
    ("copysign", np.copysign, (-3, 3), (-3, 3)),
    ("equal", np.equal, (-2, 2), (-2, 2)),
    ("not_equal", np.not_equal, (-2, 2), (-2, 2)),
    ("less", np.less, (-2, 2), (-2, 2)),
    ("less_equal", np.less_equal, (-2, 2), (-2, 2)),
    ("greater", np.greater, (-2, 2), (-2, 2)),
    ("greater_equal", np.greater_equal, (-2, 2), (-2, 2)),
    ("logical_and", np.logical_and, (-1, 1), (-1, 1)),
    ("logical_or", np.logical_or, (-1, 1), (-1, 1)),
    ("logical_xor", np.logical_xor, (-1, 1), (-1, 1)),
]


@pytest.mark.parametrize("name,ref,xdom,ydom", BINARY, ids=[b[0] for b in BINARY])
@given(data=st.data())
def test_binary_float64_broadcasting(name, ref, xdom, ydom, data):
    sx, sy = data.draw(
        hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3)
    ).input_shapes
    halves = name in ("floor_divide", "mod", "remainder", "fmod", "equal", "less_equal")
    x = data.draw(_floats(sx, *xdom, halves=halves))
    y = data.draw(_floats(sy, *ydom, halves=halves))
    with np.errstate(all="ignore"):
        want = ref(x, y)
    _close(getattr(bnp, name)(x, y), want, rtol=1e-10, atol=1e-12, dtype=want.dtype)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint32])
@pytest.mark.parametrize(
    "name",
    [
        "floor_divide",
        "mod",
        "fmod",
        "add",
        "subtract",
        "multiply",
        "maximum",
        "minimum",
        "less",
        "equal",
    ],
)
def test_binary_integers_including_zero_divisors(name, dtype):
    rng = np.random.default_rng(1)
    lo = 0 if np.issubdtype(dtype, np.unsignedinteger) else -9
    x = rng.integers(lo, 10, size=(6, 5)).astype(dtype)
    y = rng.integers(lo, 4, size=(1, 5)).astype(dtype)
    y[0, 0] = 0
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x, y)
    got = getattr(bnp, name)(x, y)
    assert np.asarray(got).dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(got), want)


def test_divmod_and_float_division_by_zero():
    x = np.array([-3.0, 0.0, 2.5, 7.0])
    y = np.array([0.0, 0.0, 0.0, -2.0])
    q, r = bnp.divmod(x, y)
    with np.errstate(all="ignore"):
        nq, nr = np.divmod(x, y)
    np.testing.assert_array_equal(np.asarray(q), nq)
    np.testing.assert_array_equal(np.asarray(r), nr)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint32])
def test_integer_power(dtype):
    lo = 0 if np.issubdtype(dtype, np.unsignedinteger) else -3
    x = np.arange(lo, 4).astype(dtype)[:, None]
    y = np.arange(0, 6).astype(dtype)[None, :]
    got = bnp.power(x, y)
    assert got.dtype == dtype
    np.testing.assert_array_equal(np.asarray(got), np.power(x, y))
    np.testing.assert_array_equal(np.asarray(bnp.power(x, 3)), np.power(x, 3))
    np.testing.assert_array_equal(np.asarray(x**2), x**2)
    with pytest.raises(BluError):
        bnp.power(x, -1)  # integers to negative integer powers, like numpy


def test_power_python_int_exponent_uses_integer_pow():
    jaxpr = blu.make_jaxpr(lambda x: x**3)(np.ones(3, np.float32))
    assert "integer_pow" in str(jaxpr)
    _close(bnp.power(np.array([-2.0, 0.0, 1.5]), 3), np.array([-8.0, 0.0, 3.375]))


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.int32, np.int64, np.uint8, np.uint32])
def test_bitwise(dtype):
    rng = np.random.default_rng(2)
    if dtype == np.bool_:
        x, y = rng.integers(0, 2, 20).astype(bool), rng.integers(0, 2, 20).astype(bool)
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, 20, dtype=dtype, endpoint=True)
        y = rng.integers(info.min, info.max, 20, dtype=dtype, endpoint=True)
    for name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        np.testing.assert_array_equal(np.asarray(getattr(bnp, name)(x, y)), getattr(np, name)(x, y))
    np.testing.assert_array_equal(np.asarray(bnp.invert(x)), np.invert(x))
    np.testing.assert_array_equal(np.asarray(~bnp.asarray(x)), ~x)
    np.testing.assert_array_equal(np.asarray(bnp.asarray(x) & y), x & y)
    if dtype != np.bool_:
        bits = np.dtype(dtype).itemsize * 8
        s = rng.integers(0, bits + 3, 20).astype(dtype)
        np.testing.assert_array_equal(np.asarray(bnp.left_shift(x, s)), np.left_shift(x, s))
        np.testing.assert_array_equal(np.asarray(bnp.right_shift(x, s)), np.right_shift(x, s))
        np.testing.assert_array_equal(np.asarray(bnp.asarray(x) >> 1), x >> 1)
    with pytest.raises(BluError):
        bnp.bitwise_and(np.ones(2), np.ones(2))


_INT_DTYPES = [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
               np.uint64]  # fmt: skip


@pytest.mark.parametrize("dtype", _INT_DTYPES)
@given(data=st.data())
def test_bitwise_count_against_numpy(dtype, data):
    """numpy's bitwise_count (the bits of |x|, uint8), extremes included, under jit and vmap."""
    if dtype == np.bool_:
        el = st.booleans()
    else:
        info = np.iinfo(dtype)
        el = st.one_of(st.integers(int(info.min), int(info.max)),
                       st.sampled_from([int(info.min), int(info.max), 0]))  # fmt: skip
    x = data.draw(hnp.arrays(dtype, data.draw(shapes()), elements=el))
    want = np.bitwise_count(x)
    for f in (bnp.bitwise_count, blu.jit(bnp.bitwise_count)):
        got = np.asarray(f(x))
        assert got.dtype == np.uint8 and got.shape == x.shape
        np.testing.assert_array_equal(got, want)
    if x.ndim:
        np.testing.assert_array_equal(np.asarray(blu.vmap(bnp.bitwise_count)(x)), want)
    with pytest.raises(BluError, match=r"f32\[2\]"):
        bnp.bitwise_count(np.ones(2, np.float32))


def test_bool_arithmetic_follows_numpy():
    a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    for name in ("add", "multiply", "maximum", "minimum"):
        got = getattr(bnp, name)(a, b)
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(np.asarray(got), getattr(np, name)(a, b))
    with pytest.raises(BluError):
        bnp.subtract(a, b)


@given(data=st.data())
def test_round_half_to_even_with_decimals(data):
    x = data.draw(_floats(shapes(), -50, 50, halves=True))
    for d in (0, 1, 2, -1):
        _close(bnp.round(x, d), np.round(x, d), rtol=1e-12, atol=1e-12)
    ints = np.round(x).astype(np.int64)
    for d in (-1, -2, 0):
        np.testing.assert_array_equal(np.asarray(bnp.round(ints, d)), np.round(ints, d))
    np.testing.assert_array_equal(
        np.asarray(bnp.round(np.array([0.5, 1.5, 2.5, -2.5]))), [0.0, 2.0, 2.0, -2.0]
    )


@given(data=st.data())
def test_round_of_small_integers_near_their_limits(data):
    # the remainder's test was 2 r > f, and 2 r overflowed: round(int8(99), -2) was 0 and
    # round(int8(-128), -2) 56; a 10**-decimals beyond the dtype gives numpy's 0s
    dt = data.draw(st.sampled_from([np.int8, np.uint8, np.int16, np.uint16, np.int32]))
    info = np.iinfo(dt)
    x = data.draw(hnp.arrays(dt, data.draw(shapes(max_dims=2)), elements=st.integers(
        max(int(info.min), -40000), min(int(info.max), 40000))))  # fmt: skip
    for d in (-1, -2, -3, -4):
        # the true values fit here, except beyond uint16's 65535 (numpy's wrap is no reference)
        want = np.round(x.astype(np.int64), d)
        keep = (want >= info.min) & (want <= info.max)
        got = np.asarray(bnp.round(x, d))
        assert got.dtype == dt
        np.testing.assert_array_equal(got[keep], want[keep].astype(dt))


@given(data=st.data())
def test_where_broadcasts_and_promotes(data):
    sc, sx, sy = data.draw(
        hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3)
    ).input_shapes
    c = data.draw(hnp.arrays(np.bool_, sc))
    x = data.draw(_floats(sx, -2, 2))
    y = data.draw(hnp.arrays(np.int32, sy, elements=st.integers(-5, 5)))
    got = bnp.where(c, x, y)
    _close(got, np.where(c, x, y), dtype=np.float64)
    # weak Python scalars keep the array's dtype; nonzero condition values count as True
    out = bnp.where(c.astype(np.int32) * 3, x.astype(np.float16), 0.0)
    assert out.dtype == np.float16


def test_where_one_argument():
    c = np.array([[0, 1], [2, 0]])
    for g, w in zip(bnp.where(c), np.nonzero(c)):
        np.testing.assert_array_equal(np.asarray(g), w)
    with pytest.raises(ConcretizationError, match="traced"):
        blu.jit(lambda c: bnp.where(c))(c)
    # with a static size it works on traced values: truncated or padded with fill_value
    for size in (0, 1, 2, 5):
        want = [
            np.concatenate([i[:size], np.full(max(size - len(i), 0), -1)]) for i in np.nonzero(c)
        ]
        for got in (bnp.nonzero(c, size=size, fill_value=-1),
                    blu.jit(lambda c: bnp.where(c, size=size, fill_value=-1))(c)):  # fmt: skip
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(np.asarray(g), w)
    with pytest.raises(BluError):
        bnp.where(c, 1.0)


@given(data=st.data())
def test_clip(data):
    x = data.draw(_floats(shapes(), -3, 3))
    _close(bnp.clip(x, -1, 1.5), np.clip(x, -1, 1.5))
    _close(bnp.clip(x, None, 0.5), np.clip(x, None, 0.5))
    _close(bnp.clip(x, min=-0.5), np.clip(x, -0.5, None))
    _close(bnp.asarray(x).clip(0, 1), np.clip(x, 0, 1))
    assert bnp.clip(np.arange(5, dtype=np.int8), 1, 3).dtype == np.int8


def test_nan_to_num_isclose_allclose():
    x = np.array([np.nan, np.inf, -np.inf, 1.5, -2.0], np.float32)
    _close(bnp.nan_to_num(x), np.nan_to_num(x), rtol=0)
    _close(
        bnp.nan_to_num(x, nan=7.0, posinf=1.0, neginf=-1.0),
        np.nan_to_num(x, nan=7.0, posinf=1.0, neginf=-1.0),
    )
    a = np.array([1.0, np.inf, np.nan, 1e-9, 2.0])
    b = np.array([1.0 + 1e-9, np.inf, np.nan, 0.0, 2.1])
    for eq in (False, True):
        np.testing.assert_array_equal(
            np.asarray(bnp.isclose(a, b, equal_nan=eq)), np.isclose(a, b, equal_nan=eq)
        )
    assert bool(bnp.allclose(a[:2], b[:2])) and not bool(bnp.allclose(a, b))
    assert bool(bnp.array_equal(a[:2], a[:2])) and not bool(bnp.array_equal(a, a[:2]))


def test_broadcast_error_names_shapes():
    with pytest.raises(BluError, match=r"\(2, 3\).*\(4,\)"):
        bnp.add(np.ones((2, 3)), np.ones(4))


@given(st.data())
def test_exp2_is_within_an_ulp_and_exact_at_integers(data):
    # it was exp(x log 2): 65 ulps off near 2**100 in float32, 2**10 not exactly 1024
    dt = data.draw(st.sampled_from([np.float32, np.float64]))
    hi = 127.0 if dt == np.float32 else 1023.0
    x = data.draw(
        hnp.arrays(dt, data.draw(shapes(max_dims=1)), elements=st.floats(-hi, hi, width=32))
    )
    got = np.asarray(bnp.exp2(x)).astype(np.float64)
    want = np.exp2(x.astype(np.float64))
    ulp = np.spacing(want.astype(dt)).astype(np.float64)
    assert (np.abs(got - want) <= 1.01 * ulp).all()
    k = np.arange(-100, 101).astype(dt)
    np.testing.assert_array_equal(np.asarray(bnp.exp2(k)), np.exp2(k))


@given(data=st.data())
def test_round_of_half_floats_scales_in_float32(data):
    # JAX's: numpy's float16 round(100.5, 3) scales to 100500, beyond float16: inf (blu too)
    dt = data.draw(st.sampled_from([np.float16, ml_dtypes.bfloat16]))
    x = data.draw(
        hnp.arrays(
            np.float32, data.draw(shapes(max_dims=1)), elements=st.floats(-6e4, 6e4, width=32)
        )
    )
    x = x.astype(dt)
    for d in (-2, 1, 3):
        want = np.round(x.astype(np.float32), d).astype(dt)
        got = np.asarray(bnp.round(x, d))
        assert got.dtype == dt
        np.testing.assert_array_equal(got, want)


@given(data=st.data())
def test_clip_of_integers_with_a_python_bound_beyond_the_dtype(data):
    # numpy's: a Python int below the dtype's minimum (as min) or above its maximum (as max)
    # clips nothing; it was a range error (JAX wraps it: clip(u8, 0, 300) clips to 44)
    dt = data.draw(st.sampled_from([np.uint8, np.int8, np.int16]))
    info = np.iinfo(dt)
    x = data.draw(hnp.arrays(dt, data.draw(shapes(max_dims=2))))
    lo = data.draw(st.sampled_from([None, int(info.min) - 5, int(info.min), 3]))
    hi = data.draw(st.sampled_from([None, int(info.max) + 45, int(info.max), 50]))
    want = np.clip(x, lo, hi) if (lo, hi) != (None, None) else x
    got = bnp.clip(x, lo, hi)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(got), want)
