"""blu.numpy dtypes: the JAX promotion lattice (against JAX's documented table), weak types,
Python-scalar rules, dtype attributes and dtype functions."""

import ml_dtypes
import numpy as np
import pytest
import scipy.linalg as sla
import scipy.special as ssp
import scipy.stats as sst
from hypothesis import assume, given
from hypothesis import strategies as st

import blu
import blu.lax as lax
import blu.numpy as bnp
import blu.scipy.linalg as bsl
import blu.scipy.special as bsp
import blu.scipy.stats as bst
from blu.core.errors import BluError

# JAX's type promotion table (https://jax.readthedocs.io/en/latest/type_promotion.html), typed
# in from the documentation. 'i*' / 'f*' are weakly typed Python ints / floats; a weak result
# takes blu's defaults (int32 / float32) and stays weak.
_NAMES = "b1 u1 u2 u4 u8 i1 i2 i4 i8 bf f2 f4 f8 i* f*".split()
_TABLE = """
b1 b1 u1 u2 u4 u8 i1 i2 i4 i8 bf f2 f4 f8 i* f*
u1 u1 u1 u2 u4 u8 i2 i2 i4 i8 bf f2 f4 f8 u1 f*
u2 u2 u2 u2 u4 u8 i4 i4 i4 i8 bf f2 f4 f8 u2 f*
u4 u4 u4 u4 u4 u8 i8 i8 i8 i8 bf f2 f4 f8 u4 f*
u8 u8 u8 u8 u8 u8 f* f* f* f* bf f2 f4 f8 u8 f*
i1 i1 i2 i4 i8 f* i1 i2 i4 i8 bf f2 f4 f8 i1 f*
i2 i2 i2 i4 i8 f* i2 i2 i4 i8 bf f2 f4 f8 i2 f*
i4 i4 i4 i4 i8 f* i4 i4 i4 i8 bf f2 f4 f8 i4 f*
i8 i8 i8 i8 i8 f* i8 i8 i8 i8 bf f2 f4 f8 i8 f*
bf bf bf bf bf bf bf bf bf bf bf f4 f4 f8 bf bf
f2 f2 f2 f2 f2 f2 f2 f2 f2 f2 f4 f2 f4 f8 f2 f2
f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f8 f4 f4
f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8
i* i* u1 u2 u4 u8 i1 i2 i4 i8 bf f2 f4 f8 i* f*
f* f* f* f* f* f* f* f* f* f* bf f2 f4 f8 f* f*
"""
_DT = {
    "b1": np.dtype(bool),
    "u1": np.dtype(np.uint8),
    "u2": np.dtype(np.uint16),
    "u4": np.dtype(np.uint32),
    "u8": np.dtype(np.uint64),
    "i1": np.dtype(np.int8),
    "i2": np.dtype(np.int16),
    "i4": np.dtype(np.int32),
    "i8": np.dtype(np.int64),
    "bf": np.dtype(ml_dtypes.bfloat16),
    "f2": np.dtype(np.float16),
    "f4": np.dtype(np.float32),
    "f8": np.dtype(np.float64),
    "i*": np.dtype(np.int32),
    "f*": np.dtype(np.float32),
}
_ROWS = {r.split()[0]: r.split()[1:] for r in _TABLE.strip().splitlines()}
_PAIRS = [(a, b) for a in _NAMES for b in _NAMES]


def _operand(name):
    """A value of the table's kind: a 1-element array, or a Python scalar for weak types."""
    if name == "i*":
        return 3
    if name == "f*":
        return 1.5
    return bnp.asarray(np.ones((2,), _DT[name]))


def test_table_is_symmetric():
    for a, b in _PAIRS:
        assert _ROWS[a][_NAMES.index(b)] == _ROWS[b][_NAMES.index(a)], (a, b)


@pytest.mark.parametrize("a,b", _PAIRS)
def test_result_type_matches_jax_table(a, b):
    want = _ROWS[a][_NAMES.index(b)]
    got = bnp.result_type(_operand(a), _operand(b))
    assert got == _DT[want], (a, b, got, want)
    # the same through an operation: dtype and weakness of a + b
    out = bnp.add(_operand(a), _operand(b))
    assert out.dtype == _DT[want]
    assert out.weak_type == want.endswith("*")


@pytest.mark.parametrize("name", [n for n in _NAMES if not n.endswith("*")])
def test_python_types_are_weak_in_result_type(name):
    d = _DT[name]
    assert bnp.result_type(d, int) == _DT[_ROWS[name][_NAMES.index("i*")]]
    assert bnp.result_type(d, float) == _DT[_ROWS[name][_NAMES.index("f*")]]
    # promote_types treats both as strong dtypes
    assert bnp.promote_types(d, d) == d


def test_result_type_of_scalar_types():
    # numpy's scalar types (np.int32, not np.dtype) raised "<attribute 'dtype' of
    # 'numpy.generic' objects> is not a dtype"
    assert bnp.result_type(np.int32, np.float16) == np.float16
    assert bnp.result_type(np.float32, np.int8, bnp.bfloat16) == np.float32
    assert bnp.result_type(np.uint8, int) == np.uint8


def test_weak_scalars_keep_narrow_dtypes():
    x = bnp.ones((3,), bnp.float16)
    assert (x * 2.0).dtype == np.float16
    assert (2 * x).dtype == np.float16
    assert (bnp.ones((2,), bnp.int8) + 3).dtype == np.int8
    assert (bnp.ones((2,), bnp.uint8) * 2).dtype == np.uint8
    assert (bnp.ones((2,), bnp.int32) / 2).dtype == np.float32
    s = bnp.asarray(2.0)
    assert s.weak_type and (s + bnp.ones(2, bnp.bfloat16)).dtype == ml_dtypes.bfloat16


def test_python_int_out_of_range_is_an_error():
    with pytest.raises(BluError, match="does not fit"):
        bnp.ones((2,), bnp.int8) + 300
    with pytest.raises(BluError, match="does not fit"):
        bnp.asarray(2**40)
    # a wide enough dtype takes it
    out = bnp.ones((2,), bnp.int64) + 2**40
    np.testing.assert_array_equal(np.asarray(out), np.full(2, 2**40 + 1))


@pytest.mark.parametrize(
    "name, scalar",
    [("true_divide", -2), ("arctan2", -1), ("copysign", -1), ("hypot", -3), ("logaddexp", -3),
     ("float_power", -1), ("true_divide", 300)],
)  # fmt: skip
def test_python_int_beside_integers_goes_straight_into_the_float(name, scalar):
    # an inexact function's Python scalar is not range-checked against the integer array's
    # dtype (JAX's promote_dtypes_inexact; numpy's too): u8 / -2 raised 'does not fit in uint8'
    for dt in (np.uint8, np.int8):
        x = np.array([1, 100], dt)
        got = getattr(bnp, name)(x, scalar)
        want = getattr(np, name)(x.astype(np.float64), float(scalar))
        assert got.dtype == (np.float64 if name == "float_power" else np.float32)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    with pytest.raises(BluError, match="does not fit"):  # (exact arithmetic still checks)
        bnp.ones((2,), bnp.uint8) + (-2)


def test_asarray_dtypes():
    assert bnp.asarray(1.0).dtype == np.float32 and bnp.asarray(1.0).weak_type
    assert bnp.asarray(1).dtype == np.int32
    assert bnp.asarray(True).dtype == np.bool_
    assert bnp.asarray([1.0, 2.0]).dtype == np.float32 and not bnp.asarray([1.0]).weak_type
    assert bnp.asarray([1, 2]).dtype == np.int32
    assert bnp.asarray([1, 2.5]).dtype == np.float32
    assert bnp.asarray([True, False]).dtype == np.bool_
    assert bnp.asarray(np.ones(2)).dtype == np.float64  # numpy arrays keep their dtype
    assert bnp.asarray(np.ones(2, np.int64)).dtype == np.int64
    assert bnp.asarray(np.float64(1)).dtype == np.float64
    assert bnp.asarray([np.float64(1), 2.0]).dtype == np.float64
    assert bnp.asarray([1, 2], dtype=bnp.bfloat16).dtype == ml_dtypes.bfloat16
    assert bnp.array([[1, 2], [3, 4]], ndmin=3).shape == (1, 2, 2)
    assert bnp.asarray(np.ones(2, np.complex64)).dtype == np.complex64
    assert bnp.asarray([1, 2j]).dtype == np.complex64 and bnp.asarray(1j).weak_type
    with pytest.raises(BluError):
        bnp.asarray(np.ones(2, np.str_))
    with pytest.raises(BluError):
        bnp.asarray([[1, 2], [3]])
    with pytest.raises(BluError):
        bnp.asarray("abc")


def test_scalar_types_are_dtypes_and_constructors():
    for t, d in [
        (bnp.float32, np.float32),
        (bnp.bfloat16, ml_dtypes.bfloat16),
        (bnp.int8, np.int8),
        (bnp.bool_, np.bool_),
        (bnp.uint64, np.uint64),
    ]:
        assert np.dtype(t) == np.dtype(d)
        assert bnp.ones((2,), t).dtype == np.dtype(d)
        assert bnp.zeros(3).astype(t).dtype == np.dtype(d)
        assert t(1).dtype == np.dtype(d) and t(1).shape == ()
        assert bnp.dtype(t) == np.dtype(d)
    assert bnp.float32 == np.float32 and bnp.float32 != bnp.float64
    assert bnp.asarray(1.5).dtype == bnp.float32


def test_scalar_types_compare_unequal_to_foreign_objects():
    # numpy raises ValueError/TypeError for these; a dtype must answer False, not raise
    for other in ("foo", (1, 2), [("a", "f4")], None, object(), 1.5, "float64"):
        assert not (bnp.float32 == other)
        assert bnp.float32 != other
    assert bnp.float32 == "float32" and bnp.int8 == np.dtype("int8")


def test_issubdtype_finfo_iinfo():
    assert bnp.issubdtype(bnp.bfloat16, bnp.floating)
    assert bnp.issubdtype(bnp.bfloat16, bnp.inexact)
    assert not bnp.issubdtype(bnp.bfloat16, bnp.integer)
    assert bnp.issubdtype(bnp.int8, bnp.signedinteger)
    assert bnp.issubdtype(np.uint16, bnp.unsignedinteger)
    assert not bnp.issubdtype(bnp.float32, bnp.integer)
    assert bnp.issubdtype(bnp.float32, bnp.float32)
    assert not bnp.issubdtype(bnp.float32, bnp.float64)
    assert bnp.finfo(bnp.bfloat16).bits == 16 and float(bnp.finfo(bnp.bfloat16).eps) == 2.0**-7
    assert float(bnp.finfo(bnp.float32).max) == float(np.finfo(np.float32).max)
    assert bnp.iinfo(bnp.int16).max == 32767 and bnp.iinfo(bnp.uint8).min == 0
    with pytest.raises(BluError):
        bnp.iinfo(bnp.float32)
    assert bnp.can_cast(bnp.bfloat16, bnp.float32) and not bnp.can_cast(bnp.float32, bnp.int32)


def test_ndarray_covers_arrays_and_tracers():
    assert isinstance(bnp.zeros(2), bnp.ndarray)
    assert not isinstance(np.zeros(2), bnp.ndarray)
    seen = []
    blu.jit(lambda x: seen.append(isinstance(x, bnp.ndarray)) or x)(np.ones(2))
    blu.grad(lambda x: seen.append(isinstance(x, bnp.ndarray)) or bnp.sum(x))(np.ones(2))
    assert seen == [True, True]


def test_constants():
    assert bnp.pi == np.pi and bnp.e == np.e and bnp.inf == np.inf and np.isnan(bnp.nan)
    assert bnp.newaxis is None
    assert bnp.zeros((2, 3))[:, bnp.newaxis].shape == (2, 1, 3)


def test_promotion_under_jit_matches_eager():
    def f(x, y):
        return x * 2 + y, (x > y).astype(bnp.int8) + 1

    x, y = np.ones(3, np.float16), np.ones(3, np.float32)
    eager = f(bnp.asarray(x), bnp.asarray(y))
    jitted = blu.jit(f)(x, y)
    for e, j in zip(eager, jitted):
        assert e.dtype == j.dtype
        np.testing.assert_array_equal(np.asarray(e), np.asarray(j))


# A Python float next to a float64 array is float64's value (JAX's, where the scalar takes the
# array's dtype), not float32's 0.1 widened (1.5e-9 off); the references are numpy's float64.
_X64 = np.array([-0.7, -0.1, 0.0, 0.1, 0.35, 0.9])
_SCALAR_WITH_F64 = {
    "heaviside": (lambda: bnp.heaviside(_X64 * 0, 0.1), lambda: np.heaviside(_X64 * 0, 0.1)),
    "pad": (
        lambda: bnp.pad(_X64, 1, constant_values=0.1),
        lambda: np.pad(_X64, 1, constant_values=0.1),
    ),
    "piecewise": (
        lambda: bnp.piecewise(_X64, [_X64 < 0], [0.1, 1 / 3]),
        lambda: np.piecewise(_X64, [_X64 < 0], [0.1, 1 / 3]),
    ),
    "take fill_value": (
        lambda: bnp.take(_X64, np.array([0, 9]), mode="fill", fill_value=0.1),
        lambda: np.array([_X64[0], 0.1]),
    ),
    "take_along_axis fill_value": (
        lambda: bnp.take_along_axis(_X64, np.array([9, 0]), 0, mode="fill", fill_value=0.1),
        lambda: np.array([0.1, _X64[0]]),
    ),
    "at[].get fill_value": (
        lambda: bnp.asarray(_X64).at[np.array([0, 9])].get(mode="fill", fill_value=0.1),
        lambda: np.array([_X64[0], 0.1]),
    ),
    "unique fill_value": (
        lambda: bnp.unique(_X64, size=7, fill_value=0.1),
        lambda: np.append(np.unique(_X64), 0.1),
    ),
    "compress fill_value": (
        lambda: bnp.compress(_X64 > 0, _X64, size=4, fill_value=0.1),
        lambda: np.append(_X64[_X64 > 0], 0.1),
    ),
    "sum initial": (lambda: bnp.sum(_X64, initial=0.1), lambda: np.sum(_X64, initial=0.1)),
    "prod initial": (
        lambda: bnp.prod(_X64 + 1, initial=0.1),
        lambda: np.prod(_X64 + 1, initial=0.1),
    ),
    "max initial": (lambda: bnp.max(_X64, initial=1.1), lambda: np.max(_X64, initial=1.1)),
    "append": (lambda: bnp.append(_X64, 0.1), lambda: np.append(_X64, 0.1)),
    "hstack": (lambda: bnp.hstack([_X64, 0.1]), lambda: np.hstack([_X64, 0.1])),
    "vstack": (lambda: bnp.vstack([_X64[:1], 0.1]), lambda: np.vstack([_X64[:1], 0.1])),
    "stack": (lambda: bnp.stack([_X64[0], 0.1]), lambda: np.stack([_X64[0], 0.1])),
    "select default": (
        lambda: bnp.select([_X64 > 0], [_X64], 0.1),
        lambda: np.select([_X64 > 0], [_X64], 0.1),
    ),
    "ediff1d to_begin": (
        lambda: bnp.ediff1d(_X64, to_begin=0.1),
        lambda: np.ediff1d(_X64, to_begin=0.1),
    ),
    "diff prepend": (
        lambda: bnp.diff(_X64, prepend=0.1),
        lambda: np.diff(_X64, prepend=0.1),
    ),
    "einsum": (lambda: bnp.einsum("i,->i", _X64, 0.1), lambda: np.einsum("i,->i", _X64, 0.1)),
    "vdot": (lambda: bnp.vdot(_X64[:1], 0.1), lambda: np.vdot(_X64[:1], 0.1)),
    "outer": (lambda: bnp.outer(_X64, 0.1), lambda: np.outer(_X64, 0.1)),
    "isin": (lambda: bnp.isin(_X64, 0.1), lambda: np.isin(_X64, 0.1)),
    "setdiff1d": (lambda: bnp.setdiff1d(_X64, 0.1), lambda: np.setdiff1d(_X64, 0.1)),
    "union1d": (lambda: bnp.union1d(_X64, 1 / 3), lambda: np.union1d(_X64, 1 / 3)),
    "polyval": (
        lambda: bnp.polyval(_X64, 1 / 3),
        lambda: np.polyval(_X64, 1 / 3),
    ),
    "interp": (
        lambda: bnp.interp(1 / 3, _X64, _X64**2),
        lambda: np.interp(1 / 3, _X64, _X64**2),
    ),
    "linspace": (
        lambda: bnp.linspace(np.float64(0.1), 1 / 3, 4),
        lambda: np.linspace(0.1, 1 / 3, 4),
    ),
    "nn.logsumexp b": (
        lambda: blu.nn.logsumexp(_X64, b=1 / 3),
        lambda: ssp.logsumexp(_X64, b=1 / 3),
    ),
    "scipy.linalg.block_diag": (
        lambda: bsl.block_diag(_X64[None, :2], 1 / 3),
        lambda: sla.block_diag(_X64[None, :2], 1 / 3),
    ),
    "scipy.special.xlogy": (
        lambda: bsp.xlogy(1 / 3, _X64 + 1),
        lambda: ssp.xlogy(1 / 3, _X64 + 1),
    ),
    "scipy.special.boxcox": (
        lambda: bsp.boxcox(_X64 + 1, 1 / 3),
        lambda: ssp.boxcox(_X64 + 1, 1 / 3),
    ),
    "scipy.stats.norm.logpdf": (
        lambda: bst.norm.logpdf(_X64, 0.1, 1 / 3),
        lambda: sst.norm.logpdf(_X64, 0.1, 1 / 3),
    ),
    "scipy.stats.t.logpdf": (
        lambda: bst.t.logpdf(_X64, 2.1, 0.1, 1 / 3),
        lambda: sst.t.logpdf(_X64, 2.1, 0.1, 1 / 3),
    ),
    "scipy.stats.poisson.logpmf": (
        lambda: bst.poisson.logpmf(np.array([0.0, 1.0, 3.0]), 1 / 3),
        lambda: sst.poisson.logpmf(np.array([0.0, 1.0, 3.0]), 1 / 3),
    ),
}


@pytest.mark.parametrize("name", sorted(_SCALAR_WITH_F64))
def test_python_float_with_float64_array_keeps_float64_value(name):
    f, ref = _SCALAR_WITH_F64[name]
    got, want = np.asarray(f()), ref()
    assert got.dtype == want.dtype
    # float64 rounding (a few ulps of the largest value where a formula cancels); float32's
    # scalar is ~1e-8 off
    eps = np.finfo(np.float64).eps
    np.testing.assert_allclose(got, want, rtol=8 * eps, atol=8 * eps * np.max(np.abs(want)))


# A Python float ``s`` that reaches a float64 computation (a float64 dtype asked for, or a
# float64 operand beside it) takes float64's value of it, as JAX with x64 (where ``s`` is
# float64); float32's ``s`` is ~3e-8 relatively off. Entries: ``(blu(s), numpy float64(s))``.
_F64 = np.float64
_TO_F64 = {
    "lax.convert_element_type": (
        lambda s: lax.convert_element_type(s, _F64),
        lambda s: _F64(s),
    ),
    "lax.convert_element_type complex128": (
        lambda s: lax.convert_element_type(-s, np.complex128),
        lambda s: np.complex128(-s),
    ),
    "lax.convert_element_type under jit": (
        lambda s: blu.jit(lambda x: x + lax.convert_element_type(s, _F64))(_X64),
        lambda s: _X64 + s,
    ),
    "astype": (
        lambda s: bnp.astype(s, _F64),
        lambda s: _F64(s),
    ),
    "astype complex128": (
        lambda s: bnp.astype(-s, np.complex128),
        lambda s: np.complex128(-s),
    ),
    "logspace dtype": (
        lambda s: bnp.logspace(-s, 2, 5, dtype=_F64),
        lambda s: np.logspace(-s, 2, 5),
    ),
    "logspace dtype, int bounds": (
        lambda s: bnp.logspace(0, -1, 5, dtype=_F64, base=s),
        lambda s: np.logspace(0, -1, 5, base=s),
    ),
    "geomspace dtype": (
        lambda s: bnp.geomspace(s, 10, 4, dtype=_F64),
        lambda s: np.geomspace(s, 10, 4),
    ),
    "geomspace negative, dtype": (
        lambda s: bnp.geomspace(-3, -s, 4, endpoint=False, dtype=_F64),
        lambda s: np.geomspace(-3, -s, 4, endpoint=False),
    ),
    "geomspace float64 stop": (
        lambda s: bnp.geomspace(s, np.float64(7.0), 4),
        lambda s: np.geomspace(s, 7.0, 4),
    ),
    "vectorize": (
        lambda s: bnp.vectorize(lambda a, b: a - b)(_X64, s),
        lambda s: _X64 - s,
    ),
    "vectorize keyword, signature": (
        lambda s: bnp.vectorize(lambda a, *, b: a @ a * b, signature="(n),()->()")(_X64, b=-s),
        lambda s: _X64 @ _X64 * -s,
    ),
    "vectorize complex128": (
        lambda s: bnp.vectorize(lambda a, b: a * b)(_X64 + 0j, s * 1j),
        lambda s: (_X64 + 0j) * (s * 1j),
    ),
}


@pytest.mark.parametrize("name", sorted(_TO_F64))
@given(s=st.floats(0.05, 0.95) | st.floats(1.5, 40.0))
def test_python_float_takes_float64_value(name, s):
    assume(float(np.float32(s)) != s)  # float32 holds s exactly: nothing to see
    f, ref = _TO_F64[name]
    got, want = np.asarray(f(s)), np.asarray(ref(s))
    assert got.dtype == want.dtype
    eps = np.finfo(np.float64).eps
    np.testing.assert_allclose(got, want, rtol=16 * eps, atol=16 * eps * np.max(np.abs(want)))


def test_vectorize_keeps_python_scalars_kinds():
    # beside float64 a Python float becomes float64 (not complex next to complex128), an int
    # stays an int
    seen = []
    bnp.vectorize(lambda a, b, n: seen.append((b.dtype, n.dtype)) or a)(_X64 + 0j, 0.5, 3)
    assert seen == [(np.dtype(np.float64), np.dtype(np.int32))]


@given(n=st.integers(2**24 + 1, 2**52), neg=st.booleans())
def test_python_float_to_int64_truncates_its_float64_value(n, neg):
    # JAX with x64: the float is float64, truncated toward zero; float32 rounded 2**24 + 1 to
    # an even number first
    v = -(n + 0.5) if neg else n + 0.5
    for cast in (
        lambda v: lax.convert_element_type(v, np.int64),
        lambda v: bnp.astype(v, np.int64),
    ):
        got = cast(v)
        assert got.dtype == np.int64 and int(got) == int(v)


def test_python_int_beyond_int32_converts_to_64_bit_dtypes():
    # JAX with x64: 2**40 is an int64 and converts to int64, uint64 and float64 exactly
    for dt in (np.int64, np.uint64, np.float64):
        got = lax.convert_element_type(2**40 + 3, dt)
        assert got.dtype == dt and int(got) == 2**40 + 3
    assert int(lax.convert_element_type(2**63 + 5, np.uint64)) == 2**63 + 5
    with pytest.raises(BluError, match="does not fit"):
        lax.convert_element_type(2**64, np.uint64)


def test_numpys_scalar_aliases_are_the_64_bit_types():
    """JAX's ``float_``, ``int_``, ... are its scalar types of numpy's widths (``jnp.float_ is
    jnp.float64``); blu's 64-bit types are always on, so calling them keeps 64 bits."""
    want = {
        "double": np.double,
        "single": np.single,
        "cdouble": np.cdouble,
        "csingle": np.csingle,
        "int_": np.int_,
        "uint": np.uint,
        "float_": np.float64,
        "complex_": np.complex128,
    }  # numpy 2 lacks float_ and complex_: numpy 1 gave these types
    for name, np_type in want.items():
        t = getattr(bnp, name)
        assert t is getattr(bnp, np.dtype(np_type).name), name
        assert np.dtype(t) == np.dtype(np_type) and t == np_type, name
        x = t(np.array([1, 2]))
        assert x.dtype == np.dtype(np_type) and np.asarray(x).tolist() == [1, 2], name
    assert bnp.zeros(2, bnp.float_).dtype == np.float64
    assert bnp.asarray(1.0).dtype == np.float32  # Python scalars still default to 32 bits
