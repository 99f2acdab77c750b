"""blu.numpy indexing (x[idx]) and .at[] updates against numpy, for random index expressions:
ints, slices with random start/stop/step (negative too), None, Ellipsis, integer arrays
(broadcasting, negative), boolean masks; eagerly, under jit with traced index arrays, and with
out-of-bounds indices (clamped for reads, dropped for updates)."""

import numpy as np
import pytest
from helpers import arrays, shapes
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core.errors import BluError, BluIndexError, BluShapeError, ConcretizationError


@st.composite
def index_exprs(draw, shape, allow_masks=True):
    """A random numpy index expression for an array of ``shape``."""
    adv_shape = draw(st.sampled_from([(), (2,), (3,), (2, 1), (0,), (1, 3)]))
    used = set()  # a mask's indices only broadcast with ints, so a mask excludes arrays
    items = []
    dim = 0
    nd = len(shape)
    ellipsis_at = draw(st.one_of(st.none(), st.integers(0, nd)))
    skip = draw(st.integers(0, nd - ellipsis_at)) if ellipsis_at is not None else 0
    while dim < nd:
        if ellipsis_at is not None and dim == ellipsis_at:
            items.append(Ellipsis)
            dim += skip
            ellipsis_at = None
            continue
        if draw(st.integers(0, 5)) == 0:
            items.append(None)
        n = shape[dim]
        kinds = ["slice", "full"]
        if n > 0:
            kinds += ["int"] + (["array"] if "mask" not in used else [])
        if allow_masks and n > 0 and not used:
            kinds.append("mask")
        kind = draw(st.sampled_from(kinds))
        if kind in ("array", "mask"):
            used.add(kind)
        if kind == "full":
            if any(it is Ellipsis for it in items) or draw(st.booleans()):
                items.append(slice(None))
            else:
                break  # leave the remaining axes unindexed
        elif kind == "slice":
            bound = st.one_of(st.none(), st.integers(-n - 2, n + 2))
            step = draw(st.sampled_from([None, 1, 2, 3, -1, -2, -3]))
            items.append(slice(draw(bound), draw(bound), step))
        elif kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "array":
            ashape = adv_shape[draw(st.integers(0, len(adv_shape))) :]
            ashape = tuple(1 if draw(st.integers(0, 3)) == 0 else d for d in ashape)
            size = int(np.prod(ashape))
            vals = draw(st.lists(st.integers(-n, n - 1), min_size=size, max_size=size))
            arr = np.array(
                vals, dtype=draw(st.sampled_from([np.int32, np.int64, np.int8]))
            ).reshape(ashape)
            form = draw(st.sampled_from(["numpy", "list", "blu"]))
            items.append(
                arr.tolist()
                if form == "list" and arr.ndim == 1 and arr.size
                else bnp.asarray(arr)
                if form == "blu"
                else arr
            )
        else:  # a boolean mask over one or two axes
            k = 2 if dim + 1 < nd and draw(st.booleans()) else 1
            mshape = shape[dim : dim + k]
            bits = draw(
                st.lists(
                    st.booleans(), min_size=int(np.prod(mshape)), max_size=int(np.prod(mshape))
                )
            )
            items.append(np.array(bits, bool).reshape(mshape))
            dim += k
            continue
        dim += 1
    if draw(st.integers(0, 6)) == 0:
        items.append(None)
    if len(items) == 1 and draw(st.booleans()):
        return items[0]
    return tuple(items)


def _np_index(idx):
    """The same index for numpy (blu arrays as numpy arrays)."""
    conv = lambda i: np.asarray(i) if isinstance(i, blu.Array) else i  # noqa: E731
    return tuple(conv(i) for i in idx) if isinstance(idx, tuple) else conv(idx)


def _close(got, want, rtol=0.0):
    g = np.asarray(got)
    assert g.shape == np.shape(want), (g.shape, np.shape(want))
    assert g.dtype == np.asarray(want).dtype
    np.testing.assert_allclose(g, want, rtol=rtol)


def _split_dynamic(idx):
    """(template, arrays): integer arrays taken out, so jit can trace them."""
    items = idx if isinstance(idx, tuple) else (idx,)
    arrs, template = [], []
    for it in items:
        a = np.asarray(it) if isinstance(it, (np.ndarray, blu.Array)) else None
        if a is not None and a.dtype.kind in "iu":
            template.append(("dyn", len(arrs)))
            arrs.append(a)
        else:
            template.append(("static", it))
    return template, arrs, isinstance(idx, tuple)


def _rebuild(template, arrs, is_tuple):
    items = tuple(arrs[v] if k == "dyn" else v for k, v in template)
    return items if is_tuple else items[0]


@st.composite
def array_and_index(draw, allow_masks=True, min_dims=0):
    shape = draw(shapes(min_dims=min_dims, max_dims=4))
    x = np.asarray(np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) - 3)
    return x, draw(index_exprs(shape, allow_masks))


@settings(max_examples=150)
@given(array_and_index())
def test_getitem_matches_numpy(xi):
    x, idx = xi
    want = x[_np_index(idx)]
    _close(bnp.asarray(x)[idx], want)
    _close(blu.jit(lambda x: x[idx])(x), want)
    template, arrs, is_tuple = _split_dynamic(idx)
    if arrs:  # integer arrays as traced values
        got = blu.jit(lambda x, *a: x[_rebuild(template, a, is_tuple)])(x, *arrs)
        _close(got, want)


@settings(max_examples=100)
@given(array_and_index(), st.data())
def test_at_updates_match_numpy_ufunc_at(xi, data):
    x, idx = xi
    np_idx = _np_index(idx)
    positions = np.arange(x.size).reshape(x.shape)[np_idx]  # numpy's own indexing, as oracle
    rshape = positions.shape
    vshape = rshape[data.draw(st.integers(0, len(rshape))) :]
    vshape = tuple(1 if data.draw(st.integers(0, 3)) == 0 else d for d in vshape)
    v = data.draw(arrays(vshape, -4, 4)).astype(np.float32)
    vb = np.broadcast_to(v, rshape).ravel()
    flat = positions.ravel()
    ax = bnp.asarray(x)
    for method, ufunc in [
        ("add", np.add),
        ("multiply", np.multiply),
        ("min", np.minimum),
        ("max", np.maximum),
    ]:
        want = x.copy().ravel()
        ufunc.at(want, flat, vb)
        # repeated indices: the products may associate differently (float32 rounding)
        _close(
            getattr(ax.at[idx], method)(v),
            want.reshape(x.shape),
            1e-6 if method == "multiply" else 0,
        )
    want = x.copy().ravel()
    np.subtract.at(want, flat, vb)
    _close(ax.at[idx].subtract(v), want.reshape(x.shape))
    if np.unique(flat).size == flat.size:  # set: numpy's x[idx] = v when positions are unique
        want = x.copy()
        want[np_idx] = v
        _close(ax.at[idx].set(v), want)
        _close(blu.jit(lambda x, v: x.at[idx].set(v))(x, v), want)
        xa = np.array(np.abs(x))
        want = xa.copy()
        want[np_idx] = xa[np_idx] ** np.abs(v)
        _close(bnp.asarray(xa).at[idx].power(np.abs(v)), want, 1e-6)
        want = x.copy()
        want[np_idx] = np.cos(x[np_idx])
        _close(ax.at[idx].apply(bnp.cos), want, 1e-6)
    _close(ax.at[idx].get(), x[np_idx])
    template, arrs, is_tuple = _split_dynamic(idx)
    if arrs:
        got = blu.jit(lambda x, v, *a: x.at[_rebuild(template, a, is_tuple)].add(v))(x, v, *arrs)
        want = x.copy().ravel()
        np.add.at(want, flat, vb)
        _close(got, want.reshape(x.shape))


def test_out_of_bounds_arrays_clamp_on_read_and_drop_on_update():
    x = np.arange(12.0).reshape(3, 4)
    idx = np.array([5, -7, 1])
    _close(bnp.asarray(x)[idx], x[[2, 0, 1]])
    _close(bnp.asarray(x)[1, idx], x[1, [3, 0, 1]])
    _close(bnp.asarray(x)[idx, :2], x[[2, 0, 1], :2])
    _close(blu.jit(lambda x, i: x[i])(x, idx), x[[2, 0, 1]])
    want = x.copy()
    want[1] += 10.0
    _close(bnp.asarray(x).at[idx].add(10.0), want)
    _close(blu.jit(lambda x, i: x.at[i].add(10.0))(x, idx), want)
    want = x.copy()
    want[1, 1] = -1.0
    _close(bnp.asarray(x).at[1, idx].set(-1.0), want)
    _close(
        bnp.asarray(x).at[idx, 1].multiply(0.0),
        np.where((np.arange(3)[:, None] == 1) & (np.arange(4) == 1), 0.0, x),
    )


def test_drop_and_fill_modes_take_an_out_of_bounds_python_int():
    # mode='drop'/'fill' drop (read fill_value for) a Python int out of bounds, as an integer
    # array's, JAX's; they raised BluIndexError (the default mode still does, numpy's)
    x = np.arange(20.0).reshape(5, 4)
    b = bnp.asarray(x)
    for mode in ("drop", "fill"):
        _close(b.at[7].set(100.0, mode=mode), x)
        _close(b.at[-6, 1].add(1.0, mode=mode), x)
        _close(blu.jit(lambda a, m=mode: a.at[:, 4].multiply(0.0, mode=m))(x), x)
    _close(b.at[7].get(mode="fill"), np.full(4, np.nan))
    _close(b.at[1, 9].get(mode="fill", fill_value=-1.0), -1.0)
    with pytest.raises(BluShapeError):
        b.at[7].set(np.ones(3), mode="drop")  # the values' shape is still checked
    with pytest.raises(BluIndexError, match="index 7 is out of bounds"):
        b.at[7].set(1.0)


@pytest.mark.parametrize(
    "big", [np.array([2**32 + 1, 1], np.int64), np.array([2**32 - 1, 1], np.uint32),
            np.array([2**64 - 2, 1], np.uint64), np.array([-(2**32) + 1, 1], np.int64)],
)  # fmt: skip
def test_wide_index_dtypes_stay_out_of_bounds(big):
    # int64 / uint32 / uint64 indices that int32 cannot hold: a bare conversion wrapped
    # 2**32 + 1 to the valid index 1 (and 2**32 - 1 to -1, the last row)
    x = np.arange(12.0).reshape(3, 4)
    clamp = 0 if big[0] < 0 else 2  # reads clamp an out-of-bounds index into range
    dropped = x.copy()
    dropped[1] = -1.0  # only the in-bounds index 1 is written
    filled = np.stack([np.full(4, -5.0), x[1]])
    for run in (lambda f, *a: f(*map(bnp.asarray, a)), lambda f, *a: blu.jit(f)(*a)):
        _close(run(lambda x, i: x[i], x, big), x[[clamp, 1]])
        _close(run(lambda x, i: x[i, 0], x, big), x[[clamp, 1], 0])
        _close(run(lambda x, i: x.at[i].set(-1.0), x, big), dropped)
        _close(run(lambda x, i: x.at[i].get(mode="fill", fill_value=-5.0), x, big), filled)
        _close(run(lambda x, i: bnp.take(x, i, 0, mode="fill", fill_value=-5.0), x, big), filled)
        _close(
            run(lambda x, i: bnp.take_along_axis(x, i[:, None], 0, mode="fill", fill_value=-5.0),
                x, big),
            filled,
        )  # fmt: skip
        _close(run(lambda x, i: x.at[i].set(-1.0, mode="clip"), x, big[:1]),
               np.where(np.arange(3)[:, None] == clamp, -1.0, x))  # fmt: skip
    _close(blu.jit(lambda x, i: x[i[0]])(x, big), x[clamp])  # a traced scalar
    _close(blu.jit(lambda x, i: x.at[i[0]].set(-1.0))(x, big), x)
    _close(bnp.take(x, big, 0, mode="wrap"), x[big % 3])
    _close(blu.jit(lambda x, i: bnp.take(x, i, 0, mode="wrap"))(x, big), x[big % 3])


def test_traced_scalar_indices_use_dynamic_slice():
    x = np.arange(24.0).reshape(2, 3, 4)
    f = lambda x, i, j: x[i, :, j]  # noqa: E731
    for i, j in [(0, 0), (1, -1), (-2, 2)]:
        _close(blu.jit(f)(x, i, j), x[i, :, j])
    text = str(blu.make_jaxpr(lambda x, i: x[i])(x, 1))
    assert "dynamic_slice" in text and "gather" not in text
    # out of range: clamped into range (reads), dropped (updates)
    _close(blu.jit(lambda x, i: x[i])(x, 5), x[1])
    _close(blu.jit(lambda x, i: x.at[i].set(0.0))(x, 5), x)
    want = x.copy()
    want[1, 2] = 7.0
    _close(blu.jit(lambda x, i, j: x.at[i, j].set(7.0))(x, -1, 2), want)
    want = x.copy()
    want[:, 1, 1:3] *= 2
    _close(blu.jit(lambda x, i: x.at[:, i, 1:3].multiply(2.0))(x, 1), want)
    # with an integer array too, the traced scalar is one more advanced index
    _close(blu.jit(lambda x, i: x[i, [0, 2]])(x, 1), x[1, [0, 2]])


def test_scalar_bool_and_empty_indices():
    x = np.arange(6.0).reshape(2, 3)
    for idx in (True, False, (Ellipsis, True), (0, False), (), Ellipsis, (slice(None), None)):
        _close(bnp.asarray(x)[idx], x[idx])
    _close(bnp.asarray(5.0)[()], np.asarray(np.float32(5.0)))
    _close(bnp.asarray(x)[np.array(1)], x[1])
    _close(bnp.asarray(x)[bnp.asarray(1), bnp.asarray(-1)], x[1, -1])


def test_update_values_cast_and_broadcast():
    x = bnp.zeros((3, 4), bnp.int32)
    out = x.at[:, 1].set(2.7)
    assert out.dtype == np.int32
    _close(out, np.array([[0, 2, 0, 0]] * 3, np.int32))
    out = x.at[1:].add(np.array([1, 2, 3, 4]))
    _close(out, np.array([[0, 0, 0, 0], [1, 2, 3, 4], [1, 2, 3, 4]], np.int32))
    out = x.at[0].set(np.ones((1, 1, 4), np.int32))  # numpy drops leading size-1 axes
    _close(out, np.array([[1] * 4, [0] * 4, [0] * 4], np.int32))
    with pytest.raises(BluError):
        x.at[0].set(np.ones(3))
    b = bnp.zeros(4, bnp.bool_).at[np.array([1, 1, 3])].max(True)
    _close(b, np.array([False, True, False, True]))


def test_at_divide_of_integers_is_a_float_division():
    # JAX's x / ones_like(x).at[idx].multiply(v): it multiplied by the integer reciprocal 1 // v,
    # which is 0, so x.at[1].divide(2) zeroed row 1
    x = np.arange(6).reshape(3, 2)
    want = x / np.array([[1], [4], [1]])  # index 1 twice: divided by 2 * 2; 5 is dropped
    for got in (
        bnp.asarray(x).at[np.array([1, 1, 5])].divide(2),
        blu.jit(lambda x: x.at[np.array([1, 1, 5])].divide(2))(x),
    ):
        assert np.asarray(got).dtype == bnp.true_divide(x, x).dtype  # float, as x / x
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-7)
    got = bnp.asarray(x.astype(np.uint8)).at[:, 1].divide(np.array([2, 4, 8], np.uint8))
    want = x / np.array([[1, 2], [1, 4], [1, 8]])
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-7)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_at_min_max_of_complex_arrays(dtype):
    # lexicographic, as np.minimum.at (a raw ValueError: no integer identity for complex)
    x = np.array([1 + 1j, 1 - 1j, -1j, 2 + 0j], dtype)
    idx = np.array([0, 0, 3, 2, 2])
    v = np.array([1 + 2j, 1 + 0.5j, 5j, -1j, -1 - 1j], dtype)
    for name, ufunc in (("min", np.minimum), ("max", np.maximum)):
        want = x.copy()
        ufunc.at(want, idx, v)
        _close(getattr(bnp.asarray(x).at[idx], name)(v), want)
        _close(blu.jit(lambda x, v, name=name: getattr(x.at[idx], name)(v))(x, v), want)


def test_index_errors():
    x = bnp.zeros((2, 3))
    with pytest.raises(IndexError, match=r"out of bounds.*\(2, 3\)"):
        x[2]
    with pytest.raises(IndexError, match="too many"):
        x[0, 0, 0]
    with pytest.raises(IndexError):
        x[0.5]
    with pytest.raises(IndexError):
        x[np.array([0.5])]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., ...]
    with pytest.raises(IndexError, match="boolean index"):
        x[np.array([True, False, True])]
    with pytest.raises(ConcretizationError, match="where"):
        blu.jit(lambda x, m: x[m])(np.ones(3), np.array([True, False, True]))
    with pytest.raises(ConcretizationError, match="dynamic_slice"):
        blu.jit(lambda x, i: x[i : i + 1])(np.ones(3), 1)
    with pytest.raises(BluError, match="zero"):
        x[::0]


def test_item_assignment_is_a_blu_error_under_transforms_too():
    # a tracer's x[0] = 1 raised a raw TypeError ('object does not support item assignment')
    def f(x):
        x[0] = 1.0
        return x

    for g in (f, blu.jit(f), blu.vmap(f), blu.grad(lambda x: f(x).sum())):
        with pytest.raises(BluError, match="immutable.*at\\[idx\\]"):
            g(bnp.zeros((2, 3)))


def test_index_errors_are_blu_errors_index_error():
    # getitem raised a class of its own, so except blu.errors.BluIndexError missed it
    with pytest.raises(blu.errors.BluIndexError, match="index 4 is out of bounds"):
        bnp.zeros(4)[4]
    with pytest.raises(blu.errors.BluIndexError, match="too many indices"):
        bnp.zeros(4)[0, 0]


def test_iteration_and_len():
    x = bnp.asarray(np.arange(6).reshape(3, 2))
    rows = list(x)
    assert len(rows) == 3
    _close(rows[2], np.array([4, 5]))


@pytest.mark.parametrize(
    "method", ["set", "add", "subtract", "multiply", "divide", "power", "min", "max"]
)
@pytest.mark.parametrize("jit", [False, True])
def test_at_python_float_takes_float64_dtype(method, jit):
    # a Python float is weakly typed: it takes x's dtype from its own value (as JAX), so 0.1
    # into a float64 array is float64's 0.1, not float32's 0.1 widened
    x = np.array([0.05, 2.0, 0.3])
    want = x.copy()
    ref = {"set": lambda a, v: v, "add": np.add, "subtract": np.subtract,
           "multiply": np.multiply, "divide": np.divide, "power": np.power,
           "min": np.minimum, "max": np.maximum}[method]  # fmt: skip
    want[[0, 1]] = ref(x[[0, 1]], 0.1)
    f = lambda a: getattr(a.at[:2], method)(0.1)  # noqa: E731
    got = np.asarray((blu.jit(f) if jit else f)(bnp.asarray(x)))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=4 * np.finfo(np.float64).eps, atol=0)


def test_at_python_int_into_int64():
    x = np.zeros(2, np.int64)
    got = np.asarray(bnp.asarray(x).at[1].set(2**40))
    assert got.dtype == np.int64 and got.tolist() == [0, 2**40]
