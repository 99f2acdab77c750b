"""Elementwise lax primitives (elementwise.py, special.py) across dtypes, on the op tables of
``test_lax_elementwise.py``: every float dtype against the float64 reference within that
dtype's precision, weak types, integer ops against Python integer arithmetic (wraparound,
C-style division), bools, special values and the documented conventions at kinks and ties, and
the errors.
"""

from __future__ import annotations

import math
import operator
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
from blu import lax
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from tests.lax.test_lax_elementwise import BINARY, FLOAT_DTYPES, TOL, UNARY, _f64, _sign, ids, ids2

# ---- dtypes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", UNARY, ids=ids)
def test_unary_float_dtypes_close_to_float64(op, dtype):
    rng = np.random.default_rng(0)
    x = rng.uniform(op.lo, op.hi, size=(3, 5)).astype(dtype)
    got = op.fn(x)
    assert got.dtype == np.dtype(dtype) and not got.weak_type
    want = op.ref(x.astype(np.float64))
    np.testing.assert_allclose(_f64(got), want, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", BINARY, ids=ids2)
def test_binary_float_dtypes_close_to_float64(op, dtype):
    rng = np.random.default_rng(1)
    x, y = rng.uniform(*op.x_dom, size=(4, 3)), rng.uniform(*op.y_dom, size=(4, 3))
    x, y = (a.astype(dtype) for a in op.prep(x, y))
    got = op.fn(x, y)
    assert got.dtype == np.dtype(dtype)
    want = op.ref(x.astype(np.float64), y.astype(np.float64))
    np.testing.assert_allclose(_f64(got), want, rtol=TOL[dtype], atol=TOL[dtype])


def _weak(x):
    return lax.convert_element_type(np.asarray(x, np.float32), np.float32, weak_type=True)


@pytest.mark.parametrize("op", UNARY, ids=ids)
def test_unary_keeps_weak_type(op):
    x = _weak(0.7 if op.lo < 0.7 < op.hi else (op.lo + op.hi) / 2)
    assert x.weak_type
    assert op.fn(x).weak_type
    assert blu.jit(op.fn)(x).weak_type


@pytest.mark.parametrize("op", BINARY, ids=ids2)
def test_binary_weak_iff_both_weak(op):
    a, b = _weak(1.5), _weak(0.75)
    assert op.fn(a, b).weak_type
    assert not op.fn(a, np.float32(0.75)).weak_type
    assert not op.fn(np.float32(1.5), b).weak_type
    assert not lax.lt(a, b).weak_type and lax.lt(a, b).dtype == np.bool_
    assert not lax.is_finite(a).weak_type


INT_DTYPES = [np.int8, np.int32, np.int64, np.uint8, np.uint32]


def _ints(dtype, size=7):
    info = np.iinfo(dtype)
    return hnp.arrays(dtype, (size,), elements=st.integers(int(info.min), int(info.max)))


def _wrap(v: int, dtype) -> int:
    """Python int -> the value it wraps to in ``dtype`` (two's complement)."""
    bits = np.iinfo(dtype).bits
    v %= 1 << bits
    if np.iinfo(dtype).min < 0 and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


INT_REFS = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "max": max,
    "min": min,
    "div": lambda a, b: -1 if b == 0 else _c_div(a, b),  # XLA: x / 0 = -1 (all bits set)
    "rem": lambda a, b: a if b == 0 else a - b * _c_div(a, b),  # XLA: x % 0 = x
}


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", list(INT_REFS))
@given(data=st.data())
def test_integer_arithmetic_wraps_like_twos_complement(name, dtype, data):
    x, y = data.draw(_ints(dtype)), data.draw(_ints(dtype))
    y[0], y[1] = 0, 1  # always cover division by 0 and by 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy overflow / divide warnings would be errors
        got = getattr(lax, name)(x, y)
        got_jit = blu.jit(getattr(lax, name))(x, y)
    want = [_wrap(INT_REFS[name](int(a), int(b)), dtype) for a, b in zip(x, y)]
    assert got.dtype == np.dtype(dtype)
    assert np.asarray(got).tolist() == want
    assert np.asarray(got_jit).tolist() == want


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_integer_unary_ops(dtype, data):
    x = data.draw(_ints(dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name, ref in [("neg", operator.neg), ("abs", abs), ("sign", _sign),
                          ("square", lambda v: v * v)]:  # fmt: skip
            got = getattr(lax, name)(x)
            assert got.dtype == np.dtype(dtype)
            assert np.asarray(got).tolist() == [_wrap(int(ref(int(v))), dtype) for v in x], name
        for y in (0, 1, 2, 3, 7):
            got = lax.integer_pow(x, y)
            assert np.asarray(got).tolist() == [_wrap(int(v) ** y, dtype) for v in x], y


def test_uint32_wraparound_modulo_2_32():
    x = np.array([0xFFFFFFFF, 0x80000000, 12345], np.uint32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lax.add(x, 1).tolist() == [0, 0x80000001, 12346]
        assert lax.mul(x, 0x9E3779B9).tolist() == [(int(v) * 0x9E3779B9) % 2**32 for v in x]
        assert lax.sub(np.uint32(0), np.uint32(1)).item() == 0xFFFFFFFF  # 0-d too
        assert lax.add(np.uint32(0xFFFFFFFF), np.uint32(2)).item() == 1


def test_integer_division_edge_cases():
    big = np.array([-(2**31), -(2**31), 7, -7, 7, -7], np.int32)
    d = np.array([-1, 1, -2, 2, 0, 0], np.int32)
    assert lax.div(big, d).tolist() == [-(2**31), -(2**31), -3, -3, -1, -1]
    assert lax.rem(big, d).tolist() == [0, 0, 1, -1, 7, -7]
    # int64 beyond float64's 53 bits: truncation must be exact
    x = np.array([2**62 + 1, -(2**62) - 3], np.int64)
    assert lax.div(x, np.array([3, 3], np.int64)).tolist() == [
        (2**62 + 1) // 3,
        -((2**62 + 3) // 3),
    ]


def test_comparisons_return_bool_for_every_dtype():
    for dt in [*FLOAT_DTYPES, *INT_DTYPES, np.bool_]:
        x = np.array([0, 1, 1], dt)
        y = np.array([1, 1, 0], dt)
        for name in ("eq", "ne", "lt", "le", "gt", "ge"):
            ref = getattr(operator, name)
            got = getattr(lax, name)(x, y)
            assert got.dtype == np.bool_, (name, dt)
            assert got.tolist() == [ref(float(a), float(b)) for a, b in zip(x, y)]
        assert lax.select(lax.lt(x, y), x, y).tolist() == np.minimum(x, y).tolist()


def test_bool_arithmetic_and_casts():
    t, f = np.array([True, True, False]), np.array([True, False, False])
    assert lax.add(t, f).tolist() == [True, True, False]  # logical or
    assert lax.mul(t, f).tolist() == [True, False, False]  # logical and
    assert lax.max(t, f).tolist() == [True, True, False]
    x = np.array([np.nan, np.inf, -np.inf, 3.99, -3.99, 0.0, 300.0])
    assert lax.convert_element_type(x, np.int8).tolist() == [0, 127, -128, 3, -3, 0, 127]
    assert lax.convert_element_type(x, np.uint8).tolist() == [0, 255, 0, 3, 0, 0, 255]
    big = np.array([1e30, -1e30])
    assert lax.convert_element_type(big, np.uint64).tolist() == [2**64 - 1, 0]
    assert lax.convert_element_type(big, np.int64).tolist() == [2**63 - 1, -(2**63)]
    assert lax.convert_element_type(x, np.bool_).tolist() == [True] * 5 + [False, True]
    assert lax.convert_element_type(np.array([257, -1]), np.uint8).tolist() == [1, 255]


# ---- special values and documented conventions -------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_special_values_without_warnings(dtype):
    def a(*v):
        return np.array(v, dtype)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _f64(lax.round(a(-2.5, -0.5, 0.5, 1.5, 2.5, -0.2))).tolist() == [
            -3,
            -1,
            1,
            2,
            3,
            0,
        ]
        even = lax.round(a(-2.5, -0.5, 0.5, 1.5, 2.5), lax.RoundingMethod.TO_NEAREST_EVEN)
        assert _f64(even).tolist() == [-2, 0, 0, 2, 2]
        assert _f64(lax.rem(a(-7.5, 7.5, -7.5), a(2, -2, -2))).tolist() == [-1.5, 1.5, -1.5]
        assert np.isnan(_f64(lax.sqrt(a(-1.0)))).all()
        assert _f64(lax.log(a(0.0))).tolist() == [-np.inf]
        assert _f64(lax.rsqrt(a(0.0))).tolist() == [np.inf]
        assert _f64(lax.div(a(1.0, -1.0), a(0.0, 0.0))).tolist() == [np.inf, -np.inf]
        assert _f64(lax.integer_pow(a(0.0), -1)).tolist() == [np.inf]
        assert _f64(lax.logistic(a(-1e4, 1e4, 0))).tolist() == [0.0, 1.0, 0.5]
        assert _f64(lax.exp(a(1e4))).tolist() == [np.inf]
        assert lax.is_finite(a(np.inf, -np.inf, np.nan, 1.0)).tolist() == [
            False,
            False,
            False,
            True,
        ]
        assert np.isnan(_f64(lax.max(a(np.nan), a(1.0)))).all()
        assert _f64(lax.erf_inv(a(-1.0, 1.0))).tolist() == [-np.inf, np.inf]
        assert _f64(lax.pow(a(0.0), a(0.0))).tolist() == [1.0]


def _grads(fn, x, y):
    return [float(g) for g in blu.grad(fn, argnums=(0, 1))(x, y)]


def test_documented_derivatives_at_kinks_and_ties():
    # max/min: a tie splits the derivative evenly between the operands (as in JAX)
    assert _grads(lax.max, 1.5, 1.5) == [0.5, 0.5]
    assert _grads(lax.min, -2.0, -2.0) == [0.5, 0.5]
    assert _grads(lax.max, 2.0, 1.0) == [1.0, 0.0]
    x = np.array([1.0, 2.0, 3.0])
    g = blu.grad(lambda v: lax.reduce_sum(lax.max(v, lax.full((3,), 2.0, np.float64))))(x)
    assert np.asarray(g).tolist() == [0.0, 0.5, 1.0]
    # abs: the derivative at 0 is sign(0) = 0
    assert float(blu.grad(lax.abs)(0.0)) == 0.0
    assert float(blu.grad(lax.abs)(-3.0)) == -1.0
    # piecewise-constant ops have derivative 0
    for fn in (lax.sign, lax.floor, lax.ceil, lax.round):
        assert float(blu.grad(fn)(1.3)) == 0.0
    # pow: no NaN at x = 0; the x-derivative is 0 where y == 0
    assert _grads(lax.pow, 0.0, 2.0) == [0.0, 0.0]
    assert _grads(lax.pow, 0.0, 0.0) == [0.0, 0.0]
    assert float(blu.grad(lambda y: lax.pow(2.0, y))(3.0)) == pytest.approx(8 * math.log(2))
    assert float(blu.grad(lambda v: lax.integer_pow(v, 0))(0.0)) == 0.0


def test_python_scalars_take_the_array_dtype():
    x = np.array([1.0, 4.0], np.float32)
    assert lax.add(x, 2.0).dtype == np.float32 and not lax.add(x, 2.0).weak_type
    assert lax.mul(_weak(3.0), 2.0).weak_type  # a Python scalar is weak: weak iff x is
    assert lax.add(2.0, 3).weak_type and lax.add(2.0, 3).item() == 5.0  # promoted together
    assert lax.add(np.float64(1.0), 2).dtype == np.float64  # numpy scalars are strong
    assert lax.pow(x, 0.5).tolist() == [1.0, 2.0]
    assert lax.atan2(1.0, np.float64(1.0)).item() == pytest.approx(math.pi / 4)
    assert lax.max(np.array([3, -5], np.int8), 0).tolist() == [3, 0]
    assert lax.rem(np.array([7, -7], np.int32), 3).tolist() == [1, -1]


# ---- errors ------------------------------------------------------------------------------------

_HERE = __file__.rsplit("/", 1)[-1]


def test_shape_mismatch_names_both_shapes_and_the_line():
    line = sys._getframe().f_lineno + 2
    with pytest.raises(BluShapeError) as e:
        lax.add(np.ones((2, 3)), np.ones((3, 2)))
    msg = str(e.value)
    assert "add" in msg and "f64[2,3]" in msg and "f64[3,2]" in msg
    assert f"{_HERE}:{line}" in msg


def test_shape_mismatch_under_jit_points_at_the_traced_line():
    def f(x, y):
        return lax.atan2(x, y)  # the line named in the error

    line = f.__code__.co_firstlineno + 1
    with pytest.raises(BluShapeError) as e:
        blu.jit(f)(np.ones(3), np.ones(4))
    assert "f64[3]" in str(e.value) and "f64[4]" in str(e.value)
    assert f"{_HERE}:{line}" in str(e.value)


def test_python_scalars_that_do_not_fit_are_errors():
    with pytest.raises(BluTypeError, match=r"2\.5.*i32"):
        lax.add(np.arange(3, dtype=np.int32), 2.5)
    with pytest.raises(BluTypeError, match="300"):
        lax.max(np.arange(3, dtype=np.int8), 300)


def test_dtype_mismatch_names_both_dtypes():
    with pytest.raises(BluTypeError, match=r"mul.*f32\[2\].*f64\[2\]"):
        lax.mul(np.ones(2, np.float32), np.ones(2, np.float64))
    with pytest.raises(BluTypeError, match=r"select"):
        lax.select(np.array([1, 0]), np.ones(2), np.zeros(2))  # int predicate


FLOAT_ONLY = [op for op in UNARY if op.float_only]


@pytest.mark.parametrize("op", FLOAT_ONLY, ids=[op.name for op in FLOAT_ONLY])
def test_float_only_unary_rejects_integers(op):
    with pytest.raises(BluTypeError, match=r"floating-point.*i32\[3\]"):
        op.fn(np.arange(3, dtype=np.int32))


def test_float_only_binary_and_numeric_only_reject():
    for fn in (lax.pow, lax.atan2):
        with pytest.raises(BluTypeError, match="floating-point"):
            fn(np.arange(3), np.arange(3))
    for fn in (lax.sub, lax.div, lax.rem):
        with pytest.raises(BluTypeError, match=r"numeric.*bool"):
            fn(np.array([True]), np.array([False]))
    with pytest.raises(BluTypeError, match=r"numeric.*bool"):
        lax.neg(np.array([True]))
    with pytest.raises(BluTypeError, match="negative powers"):
        lax.integer_pow(np.arange(3), -1)
    with pytest.raises(BluTypeError, match="not an int"):
        lax.integer_pow(np.ones(3), 1.5)
    with pytest.raises(BluValueError, match="non-negative"):
        lax.polygamma(-1, np.ones(3))


@pytest.mark.parametrize("xdt", [np.float16, np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("ydt", [np.int8, np.int32, np.uint32, np.int64])
def test_pow_integer_exponent(xdt, ydt):
    # JAX's lax.pow takes an integer exponent array with a float or complex base (converted to
    # the base's dtype); it was a BluTypeError
    x = np.array([0.0, 1.5, -2.0, 3.0, -0.5, 2.0], xdt)
    y = np.array([0, 2, 3, 1, 4, 0 if ydt == np.uint32 else -2], ydt)
    want = np.array([complex(a) ** int(b) for a, b in zip(x.tolist(), y.tolist())])
    for fn in (lax.pow, blu.jit(lax.pow)):
        got = fn(x, y)
        assert got.dtype == np.dtype(xdt) and got.shape == (6,)
        np.testing.assert_allclose(np.asarray(got).astype(complex), want, rtol=TOL.get(xdt, 1e-6))
    if xdt == np.float64:  # d/dx x**n = n x**(n-1); the integer exponent has no tangent
        t = np.ones(6)
        _, dx = blu.jvp(lambda v: lax.pow(v, y), (x,), (t,))
        want_dx = [int(b) * a ** (int(b) - 1) if b else 0.0 for a, b in zip(x.tolist(), y.tolist())]
        np.testing.assert_allclose(np.asarray(dx), want_dx, rtol=1e-12)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_sign_keeps_the_sign_of_zero(dtype):
    # sign(-0.0) is -0.0 (IEEE copysign semantics, XLA's and JAX's); eagerly it was +0.0
    x = np.array([-0.0, 0.0, -3.0, 2.0, np.nan], dtype)
    for fn in (lax.sign, blu.jit(lax.sign)):
        got = _f64(fn(x))
        assert got[:4].tolist() == [0.0, 0.0, -1.0, 1.0] and np.isnan(got[4])
        assert np.signbit(got[:2]).tolist() == [True, False]


def test_lax_broadcasting_of_0d_and_size_1_dimensions():
    # as JAX's lax: a 0-d operand takes the other's shape and operands of one rank broadcast
    # their size-1 dimensions (it was a BluShapeError); ranks are never added
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3)).astype(np.float32)
    for y in (np.float32(1.5), rng.normal(size=(1, 3)).astype(np.float32)):
        for fn in (lax.add, blu.jit(lax.atan2), lax.max):
            got = fn(x, y)
            ref = {"add": np.add, "atan2": np.arctan2, "max": np.maximum}[fn.__name__]
            np.testing.assert_allclose(np.asarray(got), ref(x, y), rtol=1e-6)
        # the broadcast operand's gradient sums over the broadcast dimensions
        gx, gy = blu.grad(lambda a, b: lax.reduce_sum(lax.mul(a, b), (0, 1)), argnums=(0, 1))(x, y)
        np.testing.assert_allclose(np.asarray(gx), np.broadcast_to(y, x.shape), rtol=1e-6)
        want_gy = x.sum() if np.ndim(y) == 0 else x.sum(0, keepdims=True)
        np.testing.assert_allclose(np.asarray(gy), want_gy, rtol=1e-5)
    got = lax.mul(np.ones((2, 1), np.int32) * 3, np.arange(3, dtype=np.int32)[None])
    assert got.shape == (2, 3) and np.asarray(got).tolist() == [[0, 3, 6], [0, 3, 6]]
    with pytest.raises(BluShapeError, match=r"f32\[2,3\], f32\[3\]"):
        lax.add(x, np.ones(3, np.float32))  # ranks differ
    with pytest.raises(BluShapeError, match=r"f32\[2,3\], f32\[2,2\]"):
        lax.add(x, np.ones((2, 2), np.float32))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_erf_inv_keeps_the_sign_of_zero(dtype):
    # erf_inv is odd: erf_inv(-0.0) is -0.0 (as blu.jit's and JAX's); eagerly it was +0.0
    x = np.array([-0.0, 0.0, 0.5], dtype)
    for fn in (lax.erf_inv, blu.jit(lax.erf_inv)):
        got = _f64(fn(x))
        assert got[:2].tolist() == [0.0, 0.0] and np.signbit(got[:2]).tolist() == [True, False]
        np.testing.assert_allclose(got[2], 0.4769362762044699, rtol=TOL[dtype])


def test_complex_broadcasts_a_0d_operand_and_size_1_dimensions():
    # JAX's lax.complex(1.0 (0-d float32), [1, 2, 3]) is [1+1j, 1+2j, 1+3j]; it was a BluShapeError
    y = np.array([1.0, 2.0, 3.0], np.float32)
    got = np.asarray(lax.complex(np.float32(1.0), y))
    np.testing.assert_array_equal(got, 1.0 + 1j * y.astype(np.complex64))
    assert got.dtype == np.complex64
    x2 = np.array([[1.0], [2.0]], np.float32)
    got2 = np.asarray(blu.jit(lax.complex)(x2, y[None, :]))
    np.testing.assert_array_equal(got2, x2 + 1j * y[None, :])
    g = blu.grad(lambda a: lax.real(lax.complex(a, y)).sum())(np.float32(2.0))
    assert float(g) == 3.0  # the 0-d operand's cotangent sums back over the broadcast
