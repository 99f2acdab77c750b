"""The Array API standard's names, attributes and special values on blu.numpy, against numpy
float64, finite differences and Python loops (vmap)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
import blu.numpy as bnp
from blu.core.errors import BluError
from tests.helpers import arrays, check_grads, check_jit, check_vmap, shapes

# ---- names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, ref, lo, hi",
    [
        ("acos", np.arccos, -0.9, 0.9),
        ("asin", np.arcsin, -0.9, 0.9),
        ("atan", np.arctan, -3, 3),
        ("acosh", np.arccosh, 1.1, 3),
        ("asinh", np.arcsinh, -3, 3),
        ("atanh", np.arctanh, -0.9, 0.9),
    ],
)
def test_unary_aliases(name, ref, lo, hi):
    x = np.linspace(lo, hi, 7)
    np.testing.assert_allclose(getattr(bnp, name)(x), ref(x), rtol=1e-12)
    check_grads(getattr(bnp, name), [x])


def test_binary_aliases():
    x, y = np.linspace(0.5, 2, 5), np.linspace(-1, 1, 5)
    np.testing.assert_allclose(bnp.atan2(y, x), np.arctan2(y, x), rtol=1e-12)
    np.testing.assert_allclose(bnp.pow(x, y), x**y, rtol=1e-12)
    check_grads(bnp.pow, [x, y])
    i, s = np.array([1, -8, 5], np.int32), np.array([1, 2, 3], np.int32)
    np.testing.assert_array_equal(bnp.bitwise_left_shift(i, s), i << s)
    np.testing.assert_array_equal(bnp.bitwise_right_shift(i, s), i >> s)
    np.testing.assert_array_equal(bnp.bitwise_invert(i), ~i)
    np.testing.assert_array_equal(2 << bnp.asarray(s), 2 << s)  # __rlshift__
    np.testing.assert_array_equal(64 >> bnp.asarray(s), 64 >> s)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_nextafter(dt):
    x = np.array([0.0, -0.0, 1.0, -1.0, 1.0, np.inf, 3.0, np.nan, 2.0, 1e30], dt)
    y = np.array([1.0, -1.0, 2.0, -2.0, 1.0, 0.0, -np.inf, 0.0, np.nan, np.inf], dt)
    got = np.asarray(bnp.nextafter(x, y))
    assert got.dtype == dt
    np.testing.assert_array_equal(got, np.nextafter(x, y))
    # d/dx1 = 1, d/dx2 = 0 (the result is x1 moved by one ulp)
    g = blu.grad(lambda a, b: bnp.nextafter(a, b).sum(), argnums=(0, 1))(x[2:5], y[2:5])
    np.testing.assert_array_equal(g[0], 1.0)
    np.testing.assert_array_equal(g[1], 0.0)
    check_vmap(bnp.nextafter, [x, y], [0, 0], atol=0, rtol=0)
    check_jit(bnp.nextafter, [x, y])


def test_imag_real_conj_of_real_arrays():
    x = np.array([[-1.5, 2.0]])
    np.testing.assert_array_equal(bnp.imag(x), np.zeros_like(x))
    np.testing.assert_array_equal(bnp.real(x), x)
    np.testing.assert_array_equal(bnp.conj(x), x)
    assert bnp.imag(np.int8([3])).dtype == np.int8
    special = np.array([np.nan, np.inf, -np.inf, -0.0])
    np.testing.assert_array_equal(bnp.imag(special), np.imag(special))  # zeros, not NaN


def test_isdtype():
    assert bnp.isdtype(bnp.float32, "real floating")
    assert bnp.isdtype(bnp.bfloat16, "real floating")
    assert not bnp.isdtype(bnp.float32, "complex floating")
    assert bnp.isdtype(bnp.uint8, ("signed integer", "unsigned integer"))
    assert not bnp.isdtype(bnp.uint8, "signed integer")
    assert bnp.isdtype(bnp.int64, "integral") and bnp.isdtype(bnp.int64, "numeric")
    assert not bnp.isdtype(bnp.bool, "numeric") and bnp.isdtype(bnp.bool, "bool")
    assert bnp.isdtype(np.dtype("int16"), bnp.int16) and not bnp.isdtype(bnp.int16, bnp.int32)
    with pytest.raises(BluError):
        bnp.isdtype(bnp.float32, "floating")
    with pytest.raises(BluError):
        bnp.isdtype(bnp.ones(2), "numeric")


@settings(deadline=None, max_examples=25)
@given(
    x=shapes(min_dims=1, max_dims=3).flatmap(arrays),
    n=st.integers(0, 3),
    data=st.data(),
)
def test_diff(x, n, data):
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    np.testing.assert_allclose(bnp.diff(x, n=n, axis=axis), np.diff(x, n=n, axis=axis))
    if x.size:
        check_grads(lambda a: bnp.diff(a, n=n, axis=axis), [x])


def test_diff_prepend_append_bool_and_transforms():
    x = np.arange(6.0).reshape(2, 3) ** 2
    got = bnp.diff(x, axis=1, prepend=-1.0, append=np.ones((2, 2)))
    np.testing.assert_array_equal(got, np.diff(x, axis=1, prepend=-1.0, append=np.ones((2, 2))))
    # n=0 is the input itself, without prepend (numpy)
    np.testing.assert_array_equal(bnp.diff(x, n=0, prepend=-1.0), np.diff(x, n=0, prepend=-1.0))
    b = np.array([True, True, False, True])
    np.testing.assert_array_equal(bnp.diff(b), np.diff(b))
    check_vmap(lambda a: bnp.diff(a, n=2), [x], [1])
    check_jit(lambda a: bnp.diff(a, axis=0), [x])
    with pytest.raises(BluError):
        bnp.diff(np.float64(1.0))


def test_diff_takes_n_and_axis_positionally():
    # numpy's and JAX's diff(a, n, axis, prepend, append): diff(x, 2) was a raw TypeError
    x = np.arange(12.0).reshape(3, 4) ** 2
    np.testing.assert_array_equal(bnp.diff(x, 2), np.diff(x, 2))
    np.testing.assert_array_equal(bnp.diff(x, 1, 0), np.diff(x, 1, 0))
    np.testing.assert_array_equal(bnp.diff(x, 1, 0, -1.0, 2.0), np.diff(x, 1, 0, -1.0, 2.0))
    got = blu.jit(lambda a: bnp.diff(a, 2, -1))(x)
    np.testing.assert_array_equal(got, np.diff(x, 2, -1))


def test_unstack():
    x = np.arange(24.0).reshape(2, 3, 4)
    for axis in (0, 1, -1):
        got = bnp.unstack(x, axis=axis)
        want = [np.take(x, i, axis=axis) for i in range(x.shape[axis])]
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    check_grads(lambda a: bnp.unstack(a, axis=1)[2] * 3.0, [x])
    assert bnp.unstack(np.zeros((0, 2))) == ()


# ---- unique --------------------------------------------------------------------------------------


@settings(deadline=None, max_examples=40)
@given(
    x=hnp.arrays(
        np.float64,
        shapes(min_dims=0, max_dims=2, max_side=5),
        elements=st.sampled_from([0.0, -0.0, 1.0, -2.5, 3.0, np.nan, np.inf]),
    )
)
def test_unique_all_matches_numpy(x):
    r = bnp.unique_all(x)
    flat = x.reshape(-1)
    values = np.asarray(r.values)
    # the standard: NaNs are distinct; numpy with equal_nan=False agrees
    want, idx, inv, counts = np.unique(
        flat, return_index=True, return_inverse=True, return_counts=True, equal_nan=False
    )
    np.testing.assert_array_equal(values, want)
    np.testing.assert_array_equal(r.indices, idx)
    np.testing.assert_array_equal(r.counts, counts)
    assert r.inverse_indices.shape == x.shape
    np.testing.assert_array_equal(values[np.asarray(r.inverse_indices)], x)
    np.testing.assert_array_equal(bnp.unique_values(x), want)
    np.testing.assert_array_equal(bnp.unique_counts(x).counts, counts)
    np.testing.assert_array_equal(bnp.unique_inverse(x).inverse_indices, inv.reshape(x.shape))


def test_unique_with_size_is_jittable_and_differentiable():
    x = np.array([3.0, 1.0, 3.0, 2.0])
    f = blu.jit(lambda a: bnp.unique_counts(a, size=5, fill_value=-1.0))
    v, c = f(x)
    np.testing.assert_array_equal(v, [1.0, 2.0, 3.0, -1.0, -1.0])
    np.testing.assert_array_equal(c, [1, 1, 2, 0, 0])
    ints = bnp.unique_values(np.array([5, 5, -1], np.int32))
    assert ints.dtype == np.int32 and ints.tolist() == [-1, 5]
    # values gather the first occurrence of each group: d sum(values) / dx is 1 there
    g = blu.grad(lambda a: (bnp.unique_values(a) ** 2).sum())(x)
    np.testing.assert_allclose(g, [6.0, 2.0, 0.0, 4.0])
    with pytest.raises(BluError):
        blu.jit(bnp.unique_values)(x)


# ---- linalg ---------------------------------------------------------------------------------


def test_linalg_standard_functions_match_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 4, 3)), rng.standard_normal((4, 3))
    np.testing.assert_allclose(bnp.linalg.cross(a, b), np.linalg.cross(a, b), rtol=1e-12)
    np.testing.assert_allclose(
        bnp.linalg.cross(a[..., :3, :], b[:3], axis=-2), np.cross(a[..., :3, :], b[:3], axis=-2)
    )
    m = rng.standard_normal((2, 3, 4))
    np.testing.assert_allclose(bnp.linalg.trace(m, offset=1), np.linalg.trace(m, offset=1))
    np.testing.assert_allclose(bnp.linalg.diagonal(m, offset=-1), np.linalg.diagonal(m, offset=-1))
    np.testing.assert_allclose(bnp.linalg.outer(b[0], a[0, 0]), np.linalg.outer(b[0], a[0, 0]))
    np.testing.assert_allclose(bnp.linalg.vecdot(a, b), np.linalg.vecdot(a, b))
    np.testing.assert_allclose(bnp.linalg.matmul(m, b), np.linalg.matmul(m, b))
    np.testing.assert_allclose(bnp.linalg.matrix_transpose(m), np.linalg.matrix_transpose(m))
    np.testing.assert_allclose(bnp.linalg.tensordot(m, b, axes=1), np.tensordot(m, b, axes=1))
    check_grads(lambda x, y: bnp.linalg.cross(x, y), [a, b])
    check_grads(lambda x: bnp.linalg.trace(x, offset=1), [m])
    check_vmap(lambda x, y: bnp.linalg.cross(x, y), [a, b], [1, 0])
    with pytest.raises(BluError):
        bnp.linalg.cross(np.ones(4), np.ones(4))
    with pytest.raises(BluError):
        bnp.linalg.outer(np.ones((2, 2)), np.ones(2))


def test_vecdot_lengths_do_not_broadcast():
    with pytest.raises(BluError):
        bnp.vecdot(np.ones((2, 1)), np.ones((2, 3)))
    np.testing.assert_allclose(bnp.vecdot(np.ones((2, 3)), np.arange(3.0)), [3.0, 3.0])
    np.testing.assert_allclose(
        bnp.vecdot(np.ones((3, 2)), np.ones((3, 1)), axis=0), np.full((2,), 3.0)
    )


# ---- special values -------------------------------------------------------------------------

_INF, _NAN = math.inf, math.nan
# (x1, x2, floor_divide, remainder) as the 2024.12 standard lists them
_DIVMOD_CASES = [
    (_INF, 2.0, _INF, _NAN),
    (-_INF, 2.0, -_INF, _NAN),
    (_INF, -2.0, -_INF, _NAN),
    (-0.0, 1.0, -0.0, 0.0),
    (0.0, -1.0, -0.0, -0.0),
    (-0.0, -1.0, 0.0, -0.0),
    (5.0, _INF, 0.0, 5.0),
    (5.0, -_INF, -0.0, -_INF),
    (-5.0, _INF, -0.0, _INF),
    (-5.0, -_INF, 0.0, -5.0),
    (1.0, 0.0, _INF, _NAN),
    (1.0, -0.0, -_INF, _NAN),
    (_INF, _INF, _NAN, _NAN),
    (7.0, -2.0, -4.0, -1.0),
]


@pytest.mark.parametrize("x1, x2, fd, rem", _DIVMOD_CASES)
def test_floor_divide_remainder_special_values(x1, x2, fd, rem):
    for dt in (np.float32, np.float64):
        a, b = np.array([x1], dt), np.array([x2], dt)
        for got, want in ((bnp.floor_divide(a, b), fd), (bnp.remainder(a, b), rem)):
            got = float(np.asarray(got)[0])
            if math.isnan(want):
                assert math.isnan(got)
            else:
                assert got == want and math.copysign(1, got) == math.copysign(1, want)


def test_inverse_hyperbolic_edges():
    # arcsinh keeps the sign of zero and has derivative 1 there; arccosh is NaN below 1 even
    # where (x - 1)(x + 1) overflows
    got = np.asarray(bnp.asinh(np.array([-0.0, 0.0])))
    assert got.tolist() == [0.0, 0.0] and np.signbit(got).tolist() == [True, False]
    for x0 in (0.0, -0.0):
        assert float(blu.grad(bnp.asinh)(np.float64(x0))) == 1.0
    np.testing.assert_array_equal(
        bnp.acosh(np.array([0.5, -1e30, -np.inf], np.float32)), [np.nan] * 3
    )
    assert np.signbit(np.asarray(bnp.nextafter(np.float32(0.0), np.float32(-0.0))))


def test_small_standard_fixes():
    np.testing.assert_array_equal(bnp.eye(3, k=2**31), np.zeros((3, 3)))
    u = np.ones(3, np.uint8)
    assert bnp.vecdot(u, u).dtype == np.uint8 and bnp.linalg.vecdot(u, u).tolist() == 3
    x = bnp.ones(2)
    assert bnp.from_dlpack(x, copy=False) is x


def test_signbit_reads_the_sign_bit():
    x = np.array([-np.nan, np.nan, -0.0, 0.0, -1.0, 2.0, -np.inf], np.float64)
    for dt in (np.float16, np.float32, np.float64):
        np.testing.assert_array_equal(bnp.signbit(x.astype(dt)), np.signbit(x.astype(dt)))
    np.testing.assert_array_equal(bnp.signbit(np.int8([-1, 0, 3])), [True, False, False])


def test_linspace_float64_scalars_are_not_rounded_through_float32():
    got = np.asarray(bnp.linspace(0.1, 0.7, 4, dtype=bnp.float64))
    assert got[0] == 0.1 and got[-1] == 0.7  # float32 rounding would miss both
    np.testing.assert_allclose(got, np.linspace(0.1, 0.7, 4), rtol=4 * np.finfo(np.float64).eps)


def test_nonzero_of_0d_raises():
    with pytest.raises(BluError):
        bnp.nonzero(bnp.asarray(1.0))
    assert len(bnp.nonzero(bnp.atleast_1d(1.0))[0]) == 1


# ---- arrays, devices, inspection -----------------------------------------------------------------


def test_array_attributes_of_the_standard():
    x = bnp.arange(6.0).reshape(2, 3)
    assert x.__array_namespace__() is bnp and x.__array_namespace__(api_version="2024.12") is bnp
    with pytest.raises(BluError):
        x.__array_namespace__(api_version="2019.01")
    np.testing.assert_array_equal(x.mT, np.arange(6.0).reshape(2, 3).T)
    info = bnp.__array_namespace_info__()
    assert x.device == info.default_device() and x.device in info.devices()
    assert x.to_device(x.device) is x
    assert x.__dlpack_device__() == (1, 0)
    assert bnp.__array_api_version__ == "2024.12"
    # under jit and vmap the tracers have the same attributes
    out = blu.jit(lambda t: t.mT.sum(0) + t.__array_namespace__().sum(t))(x)
    np.testing.assert_allclose(out, [18.0, 27.0])


def test_dlpack_round_trip_copies():
    x = bnp.arange(4.0)
    y = np.from_dlpack(x)
    np.testing.assert_array_equal(y, [0.0, 1.0, 2.0, 3.0])
    src = np.arange(3, dtype=np.int16)
    z = bnp.from_dlpack(src)
    src[0] = 9  # blu copied it
    assert z.dtype == np.int16 and z.tolist() == [0, 1, 2]
    with pytest.raises(BluError):
        bnp.from_dlpack(src, copy=False)


def test_device_keyword_on_creation_functions():
    d = bnp.__array_namespace_info__().default_device()
    for out in (
        bnp.zeros(2, device=d),
        bnp.ones(2, device=d),
        bnp.empty(2, device=d),
        bnp.full(2, 3.0, device=d),
        bnp.arange(2, device=d),
        bnp.linspace(0, 1, 2, device=d),
        bnp.eye(2, device=d)[0],
        bnp.asarray([1.0, 2.0], device=d),
        bnp.zeros_like(bnp.ones(2), device=d),
        bnp.full_like(bnp.ones(2), 4, device="cpu"),
    ):
        assert out.shape == (2,) and out.device == d
    with pytest.raises(BluError):
        bnp.zeros(2, device="tpu")


def test_namespace_info():
    info = bnp.__array_namespace_info__()
    caps = info.capabilities()
    assert caps["boolean indexing"] and caps["data-dependent shapes"]
    assert info.default_dtypes()["real floating"] == bnp.float32
    assert info.default_dtypes()["indexing"] == bnp.int32
    assert set(info.dtypes(kind="unsigned integer")) == {"uint8", "uint16", "uint32", "uint64"}
    assert set(info.dtypes(kind=("bool", "real floating"))) == {"bool", "float32", "float64"}
    assert len(info.dtypes()) == 13
    assert info.default_dtypes()["complex floating"] == bnp.complex64
    assert set(info.dtypes(kind="complex floating")) == {"complex64", "complex128"}


def test_signatures_of_the_standard():
    import inspect

    for fn in (bnp.zeros, bnp.arange, bnp.asarray, bnp.fft.fftfreq):
        p = inspect.signature(fn).parameters["device"]
        assert p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is None
    assert list(inspect.signature(bnp.reshape).parameters)[:2] == ["a", "shape"]
    assert list(inspect.signature(bnp.clip).parameters)[:3] == ["a", "min", "max"]
    x = np.arange(6.0)
    np.testing.assert_array_equal(bnp.reshape(x, shape=(2, 3)), x.reshape(2, 3))
    np.testing.assert_array_equal(bnp.reshape(x, newshape=(3, 2)), x.reshape(3, 2))
    np.testing.assert_array_equal(bnp.clip(x, 1, 4), np.clip(x, 1, 4))
    np.testing.assert_array_equal(bnp.clip(x, a_min=2, a_max=3), np.clip(x, 2, 3))
    assert bnp.astype(x, bnp.float32, device="cpu").device == bnp.zeros(1).device


def test_finfo_python_numbers_and_complex():
    for dt, real in [(bnp.float32, np.float32), (bnp.complex64, np.float32),
                     (bnp.complex128, np.float64), (bnp.bfloat16, None)]:  # fmt: skip
        fi = bnp.finfo(dt)
        assert type(fi.eps) is float and type(fi.max) is float and type(fi.bits) is int
        assert type(fi.smallest_normal) is float and type(fi.min) is float
        if real is not None:
            assert fi.dtype == real and fi.eps == float(np.finfo(real).eps)
            assert fi.max == float(np.finfo(real).max)
    assert bnp.finfo(bnp.float16).resolution == np.finfo(np.float16).resolution  # passthrough


def test_axis_errors_are_index_and_value_errors():
    for exc in (IndexError, ValueError):
        with pytest.raises(exc):
            bnp.expand_dims(np.ones((2, 3)), axis=4)
        with pytest.raises(exc):
            bnp.sum(np.ones(2), axis=1)


def test_pinv_with_an_array_of_tolerances():
    a = np.random.default_rng(0).standard_normal((3, 4, 2))
    rtol = np.array([0.1, 0.5, 1.0])
    np.testing.assert_allclose(bnp.linalg.pinv(a, rtol=rtol), np.linalg.pinv(a, rtol=rtol),
                               atol=1e-12)  # fmt: skip
    np.testing.assert_allclose(bnp.linalg.pinv(a, rtol=bnp.asarray(0.5)),
                               np.linalg.pinv(a, rtol=0.5), atol=1e-12)  # fmt: skip
