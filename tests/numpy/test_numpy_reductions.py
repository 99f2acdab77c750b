"""blu.numpy reductions, cumulative functions, statistics and sorting against numpy."""

import ml_dtypes
import numpy as np
import pytest
from helpers import arrays, shapes
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
import blu.numpy as bnp
from blu.core.errors import BluError, BluTypeError


def _close(got, want, rtol=1e-10, atol=1e-10, dtype=None):
    g = np.asarray(got)
    assert g.shape == np.shape(want), (g.shape, np.shape(want))
    if dtype is not None:
        assert g.dtype == dtype, (g.dtype, dtype)
    np.testing.assert_allclose(
        g.astype(np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol
    )


@st.composite
def array_and_axis(draw, min_dims=0, allow_none=True):
    """An array and an axis argument: None, an int, or a tuple of distinct (maybe negative) ints."""
    shape = draw(shapes(min_dims=min_dims))
    x = draw(arrays(shape))
    nd = len(shape)
    choices = [st.just(None)] if allow_none else []
    if nd:
        choices.append(st.integers(-nd, nd - 1))
        choices.append(
            st.lists(st.integers(0, nd - 1), unique=True, max_size=nd).map(
                lambda axes: tuple(a - nd if i % 2 else a for i, a in enumerate(axes))
            )
        )
    axis = draw(st.one_of(*choices)) if choices else None
    return x, axis


def _nonempty(x, axis):
    axes = range(x.ndim) if axis is None else ((axis,) if isinstance(axis, int) else axis)
    return all(x.shape[a] > 0 for a in axes)


@given(array_and_axis(), st.booleans())
def test_sum_prod_mean_var_std(xa, keepdims):
    x, axis = xa
    _close(bnp.sum(x, axis, keepdims=keepdims), np.sum(x, axis, keepdims=keepdims))
    _close(bnp.prod(x, axis, keepdims=keepdims), np.prod(x, axis, keepdims=keepdims))
    _close(bnp.asarray(x).sum(axis, keepdims=keepdims), np.sum(x, axis, keepdims=keepdims))
    with np.errstate(all="ignore"):
        _close(bnp.mean(x, axis, keepdims=keepdims), np.mean(x, axis, keepdims=keepdims))
        for ddof in (0, 1):
            _close(
                bnp.var(x, axis, ddof=ddof, keepdims=keepdims),
                np.var(x, axis, ddof=ddof, keepdims=keepdims),
            )
            _close(
                bnp.std(x, axis, ddof=ddof, keepdims=keepdims),
                np.std(x, axis, ddof=ddof, keepdims=keepdims),
            )
            _close(
                bnp.asarray(x).var(axis, ddof, keepdims),
                np.var(x, axis, ddof=ddof, keepdims=keepdims),
            )


@given(array_and_axis(), st.booleans())
def test_max_min_arg_all_any(xa, keepdims):
    x, axis = xa
    if _nonempty(x, axis):
        _close(bnp.max(x, axis, keepdims=keepdims), np.max(x, axis, keepdims=keepdims))
        _close(bnp.amin(x, axis, keepdims=keepdims), np.amin(x, axis, keepdims=keepdims))
        _close(bnp.ptp(x, axis, keepdims=keepdims), np.ptp(x, axis, keepdims=keepdims))
    else:
        with pytest.raises(BluError, match="identity"):
            bnp.max(x, axis)
    _close(
        bnp.max(x, axis, keepdims=keepdims, initial=0.5),
        np.max(x, axis, keepdims=keepdims, initial=0.5),
    )
    _close(
        bnp.min(x, axis, keepdims=keepdims, initial=-0.5),
        np.min(x, axis, keepdims=keepdims, initial=-0.5),
    )
    b = x > 0
    for f in ("all", "any"):
        _close(
            getattr(bnp, f)(b, axis, keepdims=keepdims),
            getattr(np, f)(b, axis, keepdims=keepdims),
            dtype=np.bool_,
        )
        _close(
            getattr(bnp, f)(x, axis, keepdims=keepdims),
            getattr(np, f)(x, axis, keepdims=keepdims),
            dtype=np.bool_,
        )
    _close(
        bnp.count_nonzero(b, axis, keepdims=keepdims), np.count_nonzero(b, axis, keepdims=keepdims)
    )
    if x.ndim and (axis is None or isinstance(axis, int)) and _nonempty(x, axis):
        for f in ("argmax", "argmin"):
            got = getattr(bnp, f)(x, axis, keepdims=keepdims)
            assert got.dtype == np.int32
            _close(got, getattr(np, f)(x, axis, keepdims=keepdims))
            # ties go to the first occurrence
            r = np.round(x)
            _close(getattr(bnp, f)(r, axis), getattr(np, f)(r, axis))


def test_where_and_initial_arguments():
    x = np.arange(12.0).reshape(3, 4)
    m = (x % 3) != 0
    _close(bnp.sum(x, 1, where=m), np.sum(x, 1, where=m))
    _close(bnp.prod(x + 1, 0, where=m, initial=2.0), np.prod(x + 1, 0, where=m, initial=2.0))
    _close(bnp.mean(x, 1, where=m), np.mean(x, 1, where=m))
    _close(bnp.var(x, 0, where=m), np.var(x, 0, where=m))
    _close(bnp.max(x, 1, where=m, initial=-1.0), np.max(x, 1, where=m, initial=-1.0))
    _close(bnp.all(x, 0, where=m), np.all(x, 0, where=m))
    with pytest.raises(BluError):
        bnp.max(x, where=m)


@pytest.mark.parametrize(
    "dtype,sum_dtype,mean_dtype",
    [
        (np.bool_, np.int32, np.float32),
        (np.int8, np.int32, np.float32),
        (np.uint8, np.uint32, np.float32),
        (np.int16, np.int32, np.float32),
        (np.int32, np.int32, np.float32),
        (np.int64, np.int64, np.float32),
        (np.uint64, np.uint64, np.float32),
        (np.float16, np.float16, np.float16),
        (ml_dtypes.bfloat16, ml_dtypes.bfloat16, ml_dtypes.bfloat16),
        (np.float32, np.float32, np.float32),
        (np.float64, np.float64, np.float64),
    ],
)
def test_reduction_dtypes_follow_jax(dtype, sum_dtype, mean_dtype):
    x = (np.arange(24) % 5).reshape(2, 3, 4).astype(dtype)
    ref = x.astype(np.float64)
    s = bnp.sum(x, 1)
    assert s.dtype == sum_dtype
    _close(s, ref.sum(1), rtol=1e-2)
    assert bnp.prod(x, 1).dtype == sum_dtype
    assert bnp.cumsum(x, 2).dtype == sum_dtype
    _close(bnp.cumsum(x, 2), np.cumsum(ref, 2), rtol=1e-2)
    m = bnp.mean(x, (0, 2))
    assert m.dtype == mean_dtype
    _close(m, ref.mean((0, 2)), rtol=1e-2)
    assert bnp.var(x).dtype == mean_dtype
    _close(bnp.var(x), ref.var(), rtol=1e-2)
    assert bnp.sum(x, dtype=bnp.float64).dtype == np.float64
    if dtype != np.bool_:
        assert bnp.max(x).dtype == dtype


def test_half_precision_mean_is_accurate():
    # 4096 ones in float16: a float16 running sum would stall at 2048
    x = np.ones(4096, np.float16)
    assert float(bnp.mean(x)) == 1.0
    assert bnp.mean(x).dtype == np.float16


@given(array_and_axis(allow_none=True, min_dims=0))
def test_cumsum_cumprod(xa):
    x, axis = xa
    if not (axis is None or isinstance(axis, int)):
        axis = None
    _close(bnp.cumsum(x, axis), np.cumsum(x, axis))
    _close(bnp.cumprod(x, axis), np.cumprod(x, axis))
    _close(bnp.asarray(x).cumsum(axis), np.cumsum(x, axis))
    if x.ndim:
        ax = 0 if axis is None else axis
        _close(
            bnp.cumulative_sum(x, axis=ax, include_initial=True),
            np.cumulative_sum(x, axis=ax, include_initial=True),
        )
        _close(bnp.cumulative_prod(x, axis=ax), np.cumulative_prod(x, axis=ax))


@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5),
                  elements=st.sampled_from([0.0, -0.0, 0.5, -2.0, np.nan, np.inf])),
       st.data())  # fmt: skip
def test_cumulative_ops_with_dtype_bool(x, data):
    """``dtype=bool`` (JAX's rule): truth values accumulated in int, then bool, so cumsum is
    "any nonzero so far" and cumprod "all nonzero so far" (it raised: bool is not numeric).
    Reference: numpy's logical_or / logical_and accumulations of ``x != 0``."""
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    truth = x != 0  # NaN counts as True, as its cast to bool
    for fn, ref in ((bnp.cumsum, np.logical_or), (bnp.cumprod, np.logical_and)):
        got = fn(x, axis=axis, dtype=bool)
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(np.asarray(got), ref.accumulate(truth, axis=axis))
    flat = bnp.cumsum(x, dtype=bool)  # axis None: the raveled array
    np.testing.assert_array_equal(np.asarray(flat), np.logical_or.accumulate(truth.ravel()))


@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4),
                  elements=st.sampled_from([0.0, -0.0, 0.5, -2.0, np.nan, np.inf])),
       st.data())  # fmt: skip
def test_sum_and_prod_with_dtype_bool(x, data):
    """``dtype=bool`` (JAX's and numpy's): sum is "any nonzero", prod "all nonzero" (prod
    raised: reduce_prod requires numeric operands; so did ``bnp.multiply.reduce(x, dtype=bool)``).
    Reference: numpy's logical_or / logical_and reductions of ``x != 0``."""
    axis = data.draw(st.sampled_from([None, *range(-x.ndim, x.ndim)]))
    keepdims = data.draw(st.booleans())
    truth = x != 0
    pairs = [(bnp.sum, np.logical_or), (bnp.prod, np.logical_and)]
    pairs += [(bnp.add.reduce, np.logical_or), (bnp.multiply.reduce, np.logical_and)]
    for fn, ref in pairs:
        got = fn(x, axis=axis, dtype=bool, keepdims=keepdims)
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got, ref.reduce(truth, axis=axis, keepdims=keepdims))
    mask = data.draw(hnp.arrays(np.bool_, x.shape))
    got = bnp.prod(x, axis=axis, dtype=bool, where=mask, initial=True)
    np.testing.assert_array_equal(got, np.logical_and.reduce(truth, axis=axis, where=mask))


def test_cumulative_ops_with_dtype_bool_on_integers():
    x = np.array([[0, 3, 0], [0, 0, -1]], np.int32)
    np.testing.assert_array_equal(np.asarray(bnp.cumsum(x, axis=1, dtype=bool)),
                                  [[False, True, True], [False, False, True]])  # fmt: skip
    np.testing.assert_array_equal(np.asarray(bnp.cumprod(x.T + 1, axis=0, dtype=bool)),
                                  [[True, True], [True, True], [True, False]])  # fmt: skip
    got = bnp.cumulative_sum(x[0], dtype=bool, include_initial=True)
    np.testing.assert_array_equal(np.asarray(got), [False, False, True, True])


@given(st.data())
def test_average_median_quantile(data):
    shape = data.draw(shapes(min_dims=1, min_side=1))
    x = data.draw(arrays(shape))
    ax = data.draw(st.integers(-len(shape), len(shape) - 1))
    w = data.draw(arrays(shape, 0.5, 2.0))
    _close(bnp.average(x, ax, w), np.average(x, ax, w))
    w1 = data.draw(arrays((shape[ax],), 0.5, 2.0))
    _close(bnp.average(x, ax, w1), np.average(x, ax, w1))
    avg, scl = bnp.average(x, ax, w, returned=True)
    navg, nscl = np.average(x, ax, w, returned=True)
    _close(avg, navg)
    _close(scl, nscl)
    _close(bnp.average(x), np.average(x))
    _close(bnp.median(x, ax), np.median(x, ax))
    _close(bnp.median(x), np.median(x))
    q = np.array([0.0, 0.3, 0.5, 1.0])
    _close(bnp.quantile(x, q, ax), np.quantile(x, q, ax))
    _close(bnp.quantile(x, 0.25, ax, keepdims=True), np.quantile(x, 0.25, ax, keepdims=True))
    _close(bnp.percentile(x, 75.0), np.percentile(x, 75.0))


def test_nan_reductions():
    x = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, np.nan]])
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        for f in ("nansum", "nanmean", "nanmax", "nanmin"):
            _close(getattr(bnp, f)(x, 1), getattr(np, f)(x, 1))


@given(st.data())
def test_sort_argsort(data):
    shape = data.draw(shapes(min_dims=1))
    x = data.draw(
        hnp.arrays(np.float64, shape, elements=st.sampled_from([-1.0, 0.0, 0.5, 2.0, np.nan]))
    )
    ax = data.draw(st.integers(-len(shape), len(shape) - 1))
    _close(bnp.sort(x, ax), np.sort(x, ax))
    _close(bnp.sort(x, None), np.sort(x, None))
    _close(bnp.asarray(x).sort(ax), np.sort(x, ax))
    got = bnp.argsort(x, ax)
    assert got.dtype == np.int32
    _close(got, np.argsort(x, ax, kind="stable"))
    _close(bnp.argsort(x, None), np.argsort(x, None, kind="stable"))
    # descending and stable: ties keep increasing index order
    want = np.argsort(-x, ax, kind="stable")
    finite = ~np.isnan(x).any(axis=ax, keepdims=True)
    got = np.asarray(bnp.argsort(x, ax, descending=True))
    np.testing.assert_array_equal(np.where(finite, got, 0), np.where(finite, want, 0))
    r = np.nan_to_num(np.round(x))
    _close(bnp.sort(r, ax, descending=True), -np.sort(-r, ax))
    ints = np.nan_to_num(x * 2).astype(np.int8)
    _close(bnp.sort(ints, ax), np.sort(ints, ax), dtype=np.int8)


@given(st.data())
def test_sort_complex_against_numpy(data):
    """numpy's sort_complex (the last axis, real part then imaginary part; ties in the real
    parts often), in JAX's dtypes: complex128 from float64/complex128, else complex64."""
    shape = data.draw(shapes(min_dims=1))
    parts = st.sampled_from([-1.0, 0.0, 0.5, 2.0])
    re = data.draw(hnp.arrays(np.float64, shape, elements=parts))
    im = data.draw(hnp.arrays(np.float64, shape, elements=parts))
    for x, dt in ((re + 1j * im, np.complex128), (re, np.complex128),
                  ((re + 1j * im).astype(np.complex64), np.complex64),
                  (re.astype(np.float32), np.complex64), ((2 * re).astype(np.int32), np.complex64),
                  ((2 * re).astype(np.int64), np.complex64), (re > 0, np.complex64)):  # fmt: skip
        got = np.asarray(bnp.sort_complex(x))
        assert got.dtype == dt, (x.dtype, got.dtype)
        np.testing.assert_array_equal(got, np.sort_complex(x).astype(dt))
    x = re + 1j * im
    np.testing.assert_array_equal(np.asarray(blu.jit(bnp.sort_complex)(x)), np.sort_complex(x))
    np.testing.assert_array_equal(
        np.asarray(blu.vmap(bnp.sort_complex)(x[None])), np.sort_complex(x)[None]
    )
    with pytest.raises(BluError, match="0-d"):
        bnp.sort_complex(np.float64(1.0))


_SPECIAL = st.sampled_from([np.nan, np.inf, -np.inf, -0.0])


@given(st.data())
def test_searchsorted(data):
    # NaN sorts last (np.sort's order) and a NaN query goes after the numbers, as in NumPy
    a = np.sort(
        data.draw(
            hnp.arrays(
                np.float64, st.integers(0, 9), elements=st.integers(-5, 5).map(float) | _SPECIAL
            )
        )
    )
    v = data.draw(
        hnp.arrays(
            np.float64,
            shapes(max_dims=2),
            elements=st.floats(-6, 6).map(lambda f: round(f * 2) / 2) | _SPECIAL,
        )
    )
    for side in ("left", "right"):
        _close(bnp.searchsorted(a, v, side), np.searchsorted(a, v, side))
    perm = np.random.default_rng(0).permutation(a.size)
    shuffled = a[perm]
    _close(
        bnp.searchsorted(shuffled, v, sorter=np.argsort(shuffled, kind="stable")),
        np.searchsorted(a, v),
    )


def test_searchsorted_methods():
    # JAX's methods give one result; an unknown one was silently ignored
    a, v = np.array([1.0, 2.0, 2.0, 4.0]), np.array([0.0, 2.0, 3.0, 5.0])
    for method in ("scan", "scan_unrolled", "sort", "compare_all"):
        _close(bnp.searchsorted(a, v, "right", method=method), np.searchsorted(a, v, "right"))
    with pytest.raises(BluError, match="method"):
        bnp.searchsorted(a, v, method="binary")


def test_searchsorted_of_a_python_int_past_the_dtype():
    # before or after every element, numpy's (it was a BluValueError; JAX wraps 300 to 44)
    a = np.array([1, 2, 100], np.int8)
    for v, side in ((300, "left"), (-300, "right"), (2**40, "right")):
        _close(bnp.searchsorted(a, v, side), np.searchsorted(a, v, side))
    _close(blu.jit(lambda a: bnp.searchsorted(a, -1))(a.astype(np.uint8)), np.array(0))


def test_digitize_puts_nan_past_the_last_bin():
    x = np.array([np.nan, 0.5, 1.5, 2.5, np.inf])
    for bins in (np.array([1.0, 2.0]), np.array([2.0, 1.0])):
        for right in (False, True):
            want = np.digitize(x, bins, right=right)
            np.testing.assert_array_equal(np.asarray(bnp.digitize(x, bins, right=right)), want)


def test_axis_errors():
    x = np.ones((2, 3))
    with pytest.raises(BluError, match="out of bounds"):
        bnp.sum(x, 2)
    with pytest.raises(BluError, match="repeated"):
        bnp.sum(x, (0, -2))
    with pytest.raises(BluError):
        bnp.argmax(np.ones((0, 3)), 0)


@given(st.data())
def test_quantile_and_median_over_several_axes(data):
    shape = data.draw(shapes(min_dims=2, max_dims=4, min_side=1, max_side=4))
    nd = len(shape)
    axes = tuple(
        data.draw(
            st.lists(st.integers(-nd, nd - 1), min_size=1, max_size=nd, unique_by=lambda a: a % nd)
        )
    )
    x = np.random.default_rng(len(shape)).standard_normal(shape)
    q = np.array([0.0, 0.3, 1.0])
    for keepdims in (False, True):
        _close(
            bnp.quantile(x, q, axis=axes, keepdims=keepdims),
            np.quantile(x, q, axis=axes, keepdims=keepdims),
        )
        _close(
            bnp.median(x, axis=axes, keepdims=keepdims), np.median(x, axis=axes, keepdims=keepdims)
        )


@pytest.mark.parametrize("axis", [1.0, 1.5, "1", "a", np.float64(0.0)], ids=repr)
@pytest.mark.parametrize(
    "call",
    [
        lambda x, axis: bnp.sum(x, axis=axis),
        lambda x, axis: bnp.linalg.norm(x, axis=axis),
        lambda x, axis: bnp.linalg.vector_norm(x, axis=axis),
        lambda x, axis: bnp.fft.fftn(x, axes=axis),
    ],
    ids=["sum", "norm", "vector_norm", "fftn"],
)
def test_an_axis_that_is_no_int_is_a_blu_type_error(call, axis):
    """numpy's rule (``operator.index``): 1.5 was silently axis 1 and '1' axis 1 (through
    ``int()``); a lone float raised Python's 'not iterable', 'a' Python's ValueError."""
    x = np.arange(12.0).reshape(3, 4)
    with pytest.raises(BluTypeError, match="axis must be an int"):
        call(x, axis)
    # integer-likes are still axes: numpy ints, 0-d and 1-d integer arrays
    want = x.sum(axis=1)
    for ok in (np.int64(1), np.array(1), [np.int32(1)], np.array([1])):
        np.testing.assert_array_equal(np.asarray(bnp.sum(x, axis=ok)), want)
    # (fftn compared an array of axes with (): numpy's ambiguous-truth ValueError)
    got = bnp.fft.fftn(x, axes=np.array([0, 1]))
    np.testing.assert_allclose(np.asarray(got), np.fft.fftn(x), rtol=1e-12, atol=1e-9)


@given(st.data())
def test_quantile_and_median_of_an_empty_axis_are_nan(data):
    # numpy's median (and JAX's median / quantile): NaN of the reduced shape; it was a
    # BluIndexError from take (and before that 0.0)
    shape = list(data.draw(shapes(min_dims=1, max_dims=3, min_side=1, max_side=3)))
    ax = data.draw(st.integers(0, len(shape) - 1))
    shape[ax] = 0
    x = np.zeros(shape, np.float32)
    rest = tuple(d for i, d in enumerate(shape) if i != ax)
    for keepdims in (False, True):
        out_rest = tuple(1 if i == ax else d for i, d in enumerate(shape)) if keepdims else rest
        with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning):
            want = np.median(x, axis=ax, keepdims=keepdims)
        got = bnp.median(x, axis=ax, keepdims=keepdims)
        assert got.shape == want.shape == out_rest and got.dtype == np.float32
        assert np.isnan(np.asarray(got)).all()
        q = bnp.quantile(x, np.array([0.0, 0.5]), axis=ax, keepdims=keepdims)
        assert q.shape == (2,) + out_rest and np.isnan(np.asarray(q)).all()
    assert np.isnan(float(bnp.percentile(x, 50.0)))


def test_array_methods_of_numpy_and_jax_arrays():
    # x.argsort(), x.take(i), x.nonzero()... were AttributeErrors (arrays and tracers alike)
    x = np.array([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]], np.float32)
    checks = [
        (lambda a: a.argsort(), lambda a: a.argsort()),
        (lambda a: a.argsort(axis=None), lambda a: a.argsort(axis=None, kind="stable")),
        (lambda a: a.sort(axis=0, descending=True), lambda a: -np.sort(-a, axis=0)),
        (lambda a: a[0].sort().searchsorted(2.0, side="right"), lambda a: np.array(2)),
        (lambda a: a.take(np.array([0, 4])), lambda a: a.take(np.array([0, 4]))),
        (lambda a: a.nonzero(size=5)[1], lambda a: a.nonzero()[1]),
        (lambda a: a.compress(np.array([False, True]), axis=0), lambda a: a[1:]),
        (lambda a: a.repeat(2, axis=1), lambda a: a.repeat(2, axis=1)),
        (lambda a: a.diagonal(1), lambda a: a.diagonal(1)),
        (lambda a: a.trace(), lambda a: a.trace()),
        (lambda a: a.cumprod(axis=1), lambda a: a.cumprod(axis=1)),
        (lambda a: a.ptp(axis=1), lambda a: np.ptp(a, axis=1)),
        (lambda a: a.argpartition(1)[:, :1], lambda a: a.argsort()[:, :1]),
    ]
    for got, want in checks:
        _close(got(bnp.asarray(x)), want(x))
        _close(blu.jit(got)(x), want(x))
    _close(bnp.asarray(np.array([0, 1, 0])).choose([x[0], x[1]]), np.array([3.0, 5.0, 2.0]))


@given(st.data())
def test_quantile_and_median_of_a_row_with_nan_are_nan(data):
    # numpy's (and JAX's): a NaN anywhere in a row makes its quantiles NaN; blu read the sorted
    # row's finite order statistics below the NaNs (median([nan, 1, 2, 3]) was 2.0)
    shape = data.draw(shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    x = data.draw(arrays(shape))
    mask = data.draw(hnp.arrays(np.bool_, shape))
    x = np.where(mask, np.nan, x)
    for ax in (None, 0, -1, tuple(range(len(shape)))):
        for keepdims in (False, True):
            with np.errstate(invalid="ignore"):
                want = np.median(x, axis=ax, keepdims=keepdims)
                wq = np.quantile(x, [0.0, 0.3, 1.0], axis=ax, keepdims=keepdims)
            got = np.asarray(bnp.median(x, axis=ax, keepdims=keepdims))
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
            gq = np.asarray(bnp.quantile(x, np.array([0.0, 0.3, 1.0]), axis=ax, keepdims=keepdims))
            np.testing.assert_allclose(gq, wq, rtol=1e-12, atol=1e-12)
    # pad's 'median' mode reads the same statistic
    row = np.array([np.nan, 1.0, 2.0, 3.0])
    np.testing.assert_array_equal(
        np.asarray(bnp.pad(row, 1, mode="median")), np.pad(row, 1, mode="median")
    )


@given(st.data())
def test_quantile_of_half_floats_is_rounded_once(data):
    # the neighbours' interpolation ran in float16 / bfloat16: bfloat16 medians were an ulp off
    # numpy's and JAX's (the float64 value rounded once)
    dt = data.draw(st.sampled_from([np.float16, ml_dtypes.bfloat16]))
    shape = data.draw(shapes(min_dims=1, max_dims=2, min_side=1, max_side=8))
    x = data.draw(arrays(shape, -4.0, 4.0)).astype(dt)
    q = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
    want = np.quantile(x.astype(np.float64), q, axis=-1).astype(dt)
    got = np.asarray(bnp.quantile(x, q, axis=-1))
    assert got.dtype == dt
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(
        np.asarray(bnp.median(x, axis=-1)), np.median(x.astype(np.float64), axis=-1).astype(dt)
    )
