"""jax.numpy's partitioning and functional editing functions (partition, argpartition, choose,
delete, insert, put, piecewise, ...) against numpy in float64 over random shapes (size 0 and 1
included), under jit, and their derivatives against finite differences."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from helpers import arrays, assert_matches, check_grads, shapes
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core.errors import (
    BluAxisError,
    BluError,
    BluIndexError,
    BluShapeError,
    BluTypeError,
    BluValueError,
    ConcretizationError,
)

# ---- partition, argpartition -------------------------------------------------------------------


def _assert_partitioned(out, a, kth, axis):
    """``out`` is a permutation of ``a`` along ``axis`` with the ``kth`` sorted element in
    place, nothing larger before it and nothing smaller after it."""
    if axis is None:
        a, axis = a.reshape(-1), 0
    out, srt = np.moveaxis(np.asarray(out), axis, -1), np.moveaxis(np.sort(a, axis), axis, -1)
    assert out.shape == srt.shape
    np.testing.assert_array_equal(np.sort(out, -1), srt)  # a permutation of each line
    k = kth % srt.shape[-1]
    pivot = srt[..., k : k + 1]
    np.testing.assert_array_equal(out[..., k], srt[..., k])
    assert np.all(out[..., :k] <= pivot) and np.all(out[..., k + 1 :] >= pivot)


@st.composite
def _partition_case(draw):
    shape = draw(shapes(min_dims=1))
    a = np.round(draw(arrays(shape, -3, 3)))  # ties
    axis = draw(st.one_of(st.none(), st.integers(-a.ndim, a.ndim - 1)))
    n = a.size if axis is None else a.shape[axis]
    return a, draw(st.integers(-n, n - 1)) if n else 0, axis


@given(_partition_case())
def test_partition_and_argpartition_partition_like_numpy(case):
    a, kth, axis = case
    if (a.size if axis is None else a.shape[axis]) == 0:  # no kth fits an empty axis
        with pytest.raises(BluValueError, match="kth=0 is out of bounds"):
            bnp.partition(a, kth, axis)
        return
    _assert_partitioned(bnp.partition(a, kth, axis), a, kth, axis)
    _assert_partitioned(np.partition(a, kth, axis), a, kth, axis)  # the oracle agrees
    idx = np.asarray(bnp.argpartition(a, kth, axis))
    assert idx.dtype == np.int32
    flat = a.reshape(-1) if axis is None else a
    _assert_partitioned(np.take_along_axis(flat, idx, -1 if axis is None else axis), a, kth, axis)
    jitted = blu.jit(bnp.partition, static_argnums=(1, 2))(a, kth, axis)
    _assert_partitioned(jitted, a, kth, axis)


def test_partition_dtypes_nan_and_sequence_kth():
    x = np.array([5, 1, 4, 2, 3], np.int16)
    assert_matches(bnp.partition(x, 2), np.sort(x), np.int16)
    u = np.array([7, 0, 3], np.uint8)  # JAX's top_k form refuses unsigned; a sort does not
    assert_matches(bnp.partition(u, 0), np.sort(u), np.uint8)
    f = np.array([2.0, np.nan, -1.0, 0.5], np.float32)
    got = np.asarray(bnp.partition(f, 2))
    assert got.dtype == np.float32 and np.isnan(got[-1])  # NaN last, as numpy
    _assert_partitioned(got[:3], f[~np.isnan(f)], 2, -1)
    _assert_partitioned(bnp.partition(x, [1, 3]), x, 3, -1)  # numpy's sequence of kth
    _assert_partitioned(bnp.partition(x, [1, 3]), x, 1, -1)


def test_partition_gradient_follows_the_permutation():
    rng = np.random.default_rng(1)
    x = rng.permutation(12).reshape(3, 4) + 0.25 * rng.standard_normal((3, 4))
    w = rng.standard_normal((3, 4))
    g = blu.grad(lambda x: bnp.sum(bnp.partition(x, 1, axis=0) * w))(x)
    # closed form: x[i, j] lands at its rank along axis 0
    rank = np.argsort(np.argsort(x, 0), 0)
    assert_matches(g, np.take_along_axis(w, rank, 0))
    check_grads(lambda x: bnp.partition(x, -2, axis=None), [x])


def test_partition_rejects_bad_kth_and_axis():
    x = np.zeros((2, 5))
    with pytest.raises(BluValueError, match=r"kth=5 .*size 5 .*\(2, 5\)"):
        bnp.partition(x, 5)
    with pytest.raises(BluValueError, match=r"kth=-3 .*axis 0 of size 2"):
        bnp.argpartition(x, -3, axis=0)
    with pytest.raises(BluTypeError, match="kth must be an int"):
        bnp.partition(x, 1.5)
    with pytest.raises(BluAxisError, match="axis 2 is out of bounds"):
        bnp.argpartition(x, 0, axis=2)
    with pytest.raises(ConcretizationError, match="kth"):
        blu.jit(bnp.partition)(x, 1)
    with pytest.raises(ConcretizationError, match="kth"):
        blu.jit(functools.partial(bnp.argpartition, axis=0))(x, 1)


# ---- choose ------------------------------------------------------------------------------------


@st.composite
def _choose_case(draw):
    shape = draw(shapes(max_dims=3))
    n = draw(st.integers(1, 4))
    # each choice broadcasts with a: some of its trailing dims set to 1
    cshapes = [
        tuple(1 if draw(st.booleans()) else s for s in shape[draw(st.integers(0, len(shape))) :])
        for _ in range(n)
    ]
    choices = [draw(arrays(cs)) for cs in cshapes]
    a = draw(
        st.lists(
            st.integers(-2 * n, 2 * n), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))
        )
    )
    return np.array(a, np.int64).reshape(shape), choices


@given(_choose_case(), st.sampled_from(["wrap", "clip"]))
def test_choose_matches_numpy(case, mode):
    a, choices = case
    want = np.choose(a, choices, mode=mode)
    assert_matches(bnp.choose(a, choices, mode=mode), want, np.float64)
    assert_matches(blu.jit(lambda a, c: bnp.choose(a, c, mode=mode))(a, choices), want)
    ok = np.clip(a, 0, len(choices) - 1)  # 'raise' (the default) with indices in range
    assert_matches(bnp.choose(ok, choices), np.choose(ok, choices))
    stacked = np.stack([np.broadcast_to(c, a.shape) for c in choices])  # an array of choices
    assert_matches(bnp.choose(ok, stacked), np.choose(ok, stacked))


def test_choose_promotes_like_jax_and_differentiates():
    a = np.array([[0, 1, 2], [2, 1, 0]])
    c = [np.arange(3, dtype=np.int8), np.ones(3, np.float32), 2.0]
    got = bnp.choose(a, c)
    assert np.asarray(got).dtype == np.float32  # int8 and float32: float32; 2.0 is weak
    assert_matches(got, np.choose(a, [np.arange(3), np.ones(3), np.full(3, 2.0)]))
    assert np.asarray(bnp.choose(a, [np.int8(1), np.int16(2), np.int8(3)])).dtype == np.int16
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((2, 3)), rng.standard_normal(3)
    w = rng.standard_normal((2, 3))
    gx, gy = blu.grad(lambda x, y: bnp.sum(bnp.choose(a, [x, y, x * y]) * w), (0, 1))(x, y)
    # closed form: the output's derivative by each choice where a picks it (summed where y is
    # broadcast)
    assert_matches(gx, w * ((a == 0) + (a == 2) * y), np.float64)
    assert_matches(gy, (w * ((a == 1) + (a == 2) * x)).sum(0), np.float64)
    check_grads(lambda x, y: bnp.choose(a, [x, y, x * y], mode="wrap"), [x, y])


def test_choose_rejects_bad_input():
    c = [np.zeros(3), np.ones(3)]
    with pytest.raises(BluIndexError, match=r"shape \(3,\).*\[0, 2\)"):
        bnp.choose(np.array([0, 2, 1]), c)
    with pytest.raises(BluIndexError, match=r"\[0, 2\)"):
        bnp.choose(np.array([-1, 0, 1]), c, mode="raise")
    with pytest.raises(ConcretizationError, match="mode='wrap' or 'clip'"):
        blu.jit(bnp.choose)(np.array([0, 1, 1]), c)
    with pytest.raises(BluTypeError, match=r"a \(the choice indices\) must be integers"):
        bnp.choose(np.array([0.0, 1.0, 1.0], np.float32), c)
    with pytest.raises(BluValueError, match="mode"):
        bnp.choose(np.array([0, 1, 1]), c, mode="fill")
    with pytest.raises(BluValueError, match="empty"):
        bnp.choose(np.array([0]), [])
    with pytest.raises(BluError, match=r"\(4,\)"):
        bnp.choose(np.array([0, 1, 1]), [np.zeros(3), np.ones(4)], mode="clip")


# ---- delete ------------------------------------------------------------------------------------


@st.composite
def _delete_case(draw):
    a = draw(arrays(draw(shapes(max_dims=3))))
    axis = draw(st.one_of(st.none(), st.integers(-a.ndim, a.ndim - 1))) if a.ndim else None
    n = a.size if axis is None else a.shape[axis]
    kind = draw(st.sampled_from(["int", "list", "slice", "mask"]))
    if kind == "int" and n:
        obj = draw(st.integers(-n, n - 1))
    elif kind == "slice":
        obj = slice(
            draw(st.one_of(st.none(), st.integers(-n - 1, n + 1))),
            draw(st.one_of(st.none(), st.integers(-n - 1, n + 1))),
            draw(st.sampled_from([None, 1, 2, -1, -3])),
        )
    elif kind == "mask":
        obj = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
    else:  # repeated and negative indices are allowed in a concrete list
        obj = draw(st.lists(st.integers(-n, n - 1), max_size=4)) if n else []
    return a, obj, axis


@given(_delete_case())
def test_delete_matches_numpy(case):
    a, obj, axis = case
    want = np.delete(a, obj, axis)
    assert_matches(bnp.delete(a, obj, axis), want, np.float64)
    assert_matches(blu.jit(lambda a: bnp.delete(a, obj, axis))(a), want)
    ai = a.astype(np.int16)
    assert_matches(bnp.delete(ai, obj, axis), np.delete(ai, obj, axis), np.int16)


@given(st.data())
def test_delete_traced_unique_indices(data):
    a = data.draw(arrays(data.draw(shapes(min_dims=1, min_side=1))))
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    n = a.shape[axis]
    obj = data.draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n))
    obj = [i - n if data.draw(st.booleans()) else i for i in obj]  # negative ones too
    obj = np.array(obj, np.int32)
    f = blu.jit(lambda a, i: bnp.delete(a, i, axis, assume_unique_indices=True))
    assert_matches(f(a, obj), np.delete(a, obj, axis), np.float64)


def test_delete_gradient():
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((3, 5)), rng.standard_normal((3, 3))
    g = blu.grad(lambda x: bnp.sum(bnp.delete(x, [0, -2], axis=1) * w))(x)
    want = np.zeros((3, 5))
    want[:, [1, 2, 4]] = w  # closed form: the kept entries get their weight
    assert_matches(g, want)
    check_grads(lambda x: bnp.delete(x, 2), [x])
    i = np.array([4, 1])
    check_grads(lambda x: bnp.delete(x, i, 1, assume_unique_indices=True), [x])


def test_delete_rejects_bad_input():
    x = np.zeros((2, 3))
    with pytest.raises(BluIndexError, match=r"obj=3 .*axis 1 with size 3 .*\(2, 3\)"):
        bnp.delete(x, 3, axis=1)
    with pytest.raises(BluIndexError, match=r"index -7 in obj .*size 6"):
        bnp.delete(x, [0, -7])
    with pytest.raises(BluShapeError, match=r"length of axis 0 \(2\), got shape \(3,\)"):
        bnp.delete(x, np.array([True, False, True]), axis=0)
    with pytest.raises(BluTypeError, match="integer or bool.*float64"):
        bnp.delete(x, np.array([1.0]), axis=0)
    with pytest.raises(BluAxisError, match="axis 2 is out of bounds"):
        bnp.delete(x, 0, axis=2)
    with pytest.raises(ConcretizationError, match="assume_unique_indices"):
        blu.jit(lambda x, i: bnp.delete(x, i, 1))(x, np.array([1]))
    with pytest.raises(BluTypeError, match=r"obj \(the indices\) must be integers"):
        blu.jit(lambda x, i: bnp.delete(x, i, 1, assume_unique_indices=True))(x, np.ones(1))


# ---- insert ------------------------------------------------------------------------------------


@st.composite
def _insert_case(draw):
    a = draw(arrays(draw(shapes(max_dims=3))))
    axis = draw(st.one_of(st.none(), st.integers(-a.ndim, a.ndim - 1))) if a.ndim else None
    shape = (a.size,) if axis is None else a.shape
    ax = 0 if axis is None else axis % a.ndim
    n = shape[ax]
    kind = draw(st.sampled_from(["int", "list", "slice"]))
    if kind == "int":
        obj = draw(st.integers(-n, n))
        # a scalar index inserts values as a block: numpy moves their first axis to ``axis``
        block = draw(st.integers(0, 2))
        vshape = (block,) + shape[:ax] + shape[ax + 1 :] if block else ()
    elif kind == "slice":
        obj = slice(draw(st.integers(0, n)), None, draw(st.sampled_from([None, 2])))
        k = len(range(*obj.indices(n)))
        vshape = shape[:ax] + (k,) + shape[ax + 1 :]
    else:
        obj = draw(st.lists(st.integers(-n, n), max_size=4))  # repeated ones too
        vshape = shape[:ax] + (len(obj),) + shape[ax + 1 :]
        obj = np.array(obj, np.int64)
    if vshape and kind != "int" and draw(st.booleans()):  # broadcast along the other axes
        vshape = tuple(1 if i != ax else s for i, s in enumerate(vshape))
    return a, obj, np.arange(1.0, 1.0 + np.prod(vshape)).reshape(vshape) + 0.5, axis


@given(_insert_case())
def test_insert_matches_numpy(case):
    a, obj, values, axis = case
    want = np.insert(a, obj, values, axis)
    assert_matches(bnp.insert(a, obj, values, axis), want, np.float64)
    assert_matches(blu.jit(lambda a, v: bnp.insert(a, obj, v, axis))(a, values), want)
    ai = a.astype(np.int32)  # values take arr's dtype (float -> int truncates, as numpy)
    assert_matches(bnp.insert(ai, obj, values, axis), np.insert(ai, obj, values, axis), np.int32)
    if isinstance(obj, np.ndarray):  # traced indices: their positions need not be static
        f = blu.jit(lambda a, i, v: bnp.insert(a, i, v, axis))
        assert_matches(f(a, obj, values), want)


def test_insert_gradient():
    rng = np.random.default_rng(4)
    x, v = rng.standard_normal((2, 3)), rng.standard_normal((2, 2))
    w = rng.standard_normal((2, 5))
    gx, gv = blu.grad(lambda x, v: bnp.sum(bnp.insert(x, [3, 0], v, 1) * w), (0, 1))(x, v)
    assert_matches(gx, w[:, [1, 2, 3]])  # closed form: each entry's weight where it lands
    assert_matches(gv, w[:, [4, 0]])
    check_grads(lambda x, v: bnp.insert(x, 1, v, axis=0), [x, v[:1, :1]])


def test_insert_rejects_bad_input():
    x = np.zeros((2, 3))
    with pytest.raises(BluIndexError, match=r"index 4 in obj .*axis 1 with size 3 .*\(2, 3\)"):
        bnp.insert(x, 4, 1.0, axis=1)
    with pytest.raises(BluIndexError, match=r"index -7 .*size 6"):
        bnp.insert(x, [-7], [1.0])
    with pytest.raises(BluTypeError, match="obj must be integer indices, got float64"):
        bnp.insert(x, np.array([1.0]), 1.0, axis=0)
    with pytest.raises(BluShapeError, match=r"1-d indices, got shape \(1, 2\)"):
        bnp.insert(x, [[0, 1]], 1.0, axis=0)
    with pytest.raises(BluAxisError, match="axis -3 is out of bounds"):
        bnp.insert(x, 0, 1.0, axis=-3)
    with pytest.raises(BluShapeError, match=r"values of shape \(4,\) .*slots \(2, 3\)"):
        bnp.insert(x, [0, 1], np.ones(4), axis=0)
    with pytest.raises(BluShapeError, match=r"values of shape \(3, 3\) .*2 indices in obj"):
        bnp.insert(x, [0, 1], np.ones((3, 3)), axis=0)
    with pytest.raises(BluTypeError, match=r"obj \(the indices\) must be integers"):
        blu.jit(lambda x, i: bnp.insert(x, i, 0.0))(x, np.ones(2))


# ---- put ---------------------------------------------------------------------------------------


@st.composite
def _put_case(draw):
    a = draw(arrays(draw(shapes(max_dims=3))))
    size = a.size
    pos = draw(st.lists(st.integers(0, max(size - 1, 0)), unique=True, max_size=min(size, 5)))
    mode = draw(st.sampled_from([None, "clip", "wrap"]))
    ind = []
    for p in pos:  # distinct targets after the mode, written as numpy would read them
        if mode == "wrap":
            p += size * draw(st.integers(-2, 2))
        elif mode == "clip" and p in (0, size - 1):
            p = draw(st.sampled_from([p, p - 5 if p == 0 else p + 5]))
        elif mode is None and draw(st.booleans()):
            p -= size  # negative counts from the end
        ind.append(p)
    v = np.arange(1.0, 1.0 + draw(st.integers(1, 4))) + 0.5
    return a, np.array(ind, np.int64), v, mode


@given(_put_case())
def test_put_matches_numpy(case):
    a, ind, v, mode = case
    want = a.copy()
    if a.size:
        np.put(want, ind, v, mode=mode or "raise")
    assert_matches(bnp.put(a, ind, v, mode, inplace=False), want, np.float64)
    f = blu.jit(lambda a, i, v: bnp.put(a, i, v, mode, inplace=False))
    assert_matches(f(a, ind, v), want)
    ai = a.astype(np.int8)  # v takes a's dtype
    wi = ai.copy()
    if a.size:
        np.put(wi, ind, v.astype(np.int8), mode=mode or "raise")
    assert_matches(bnp.put(ai, ind, v, mode, inplace=False), wi, np.int8)


def test_put_drops_out_of_range_indices_by_default():
    x = np.arange(6.0).reshape(2, 3)
    got = bnp.put(x, np.array([1, 6, -7, 2**40, -1]), [10.0, 20.0], inplace=False)
    want = x.copy().reshape(-1)
    want[1], want[-1] = 10.0, 10.0  # v repeats: [10, 20, 10, 20, 10]
    assert_matches(got, want.reshape(2, 3))


def test_put_gradient():
    rng = np.random.default_rng(5)
    x, v, w = rng.standard_normal((2, 3)), rng.standard_normal(2), rng.standard_normal((2, 3))
    ind = np.array([4, 0])
    gx, gv = blu.grad(lambda x, v: bnp.sum(bnp.put(x, ind, v, inplace=False) * w), (0, 1))(x, v)
    want = w.copy().reshape(-1)
    want[ind] = 0.0  # closed form: overwritten entries get no gradient, v gets theirs
    assert_matches(gx, want.reshape(2, 3))
    assert_matches(gv, w.reshape(-1)[ind])
    check_grads(lambda x, v: bnp.put(x, ind, v, "wrap", inplace=False), [x, v])


def test_put_rejects_bad_input():
    x = np.zeros((2, 3))
    with pytest.raises(BluValueError, match="inplace=False"):
        bnp.put(x, [0], 1.0)
    with pytest.raises(BluValueError, match="'raise'.*JAX"):
        bnp.put(x, [0], 1.0, mode="raise", inplace=False)
    with pytest.raises(BluTypeError, match=r"ind \(the indices\) must be integers, got f64"):
        bnp.put(x, np.array([0.0]), 1.0, inplace=False)


# ---- piecewise ---------------------------------------------------------------------------------

_PIECES = [lambda x: x * x, lambda x: -x, bnp.sin, lambda x, s=2.0: s * x + 1.0, 0.5]


@given(st.data())
def test_piecewise_matches_numpy(data):
    x = data.draw(arrays(data.draw(shapes())))
    nc = data.draw(st.integers(1, 3))
    bounds = sorted(data.draw(st.lists(st.floats(-2, 2), min_size=nc, max_size=nc)))
    conds = [x > b for b in bounds]  # overlapping: the later one wins
    if x.size and data.draw(st.booleans()):
        conds[0] = conds[0][(0,) * x.ndim]  # a scalar condition broadcasts
    nf = data.draw(st.sampled_from([nc, nc + 1]))
    funcs = data.draw(st.lists(st.sampled_from(_PIECES), min_size=nf, max_size=nf))
    conds_np = [np.broadcast_to(c, x.shape) for c in conds]
    want = np.piecewise(x, conds_np, funcs)
    assert_matches(bnp.piecewise(x, conds, funcs), want, np.float64)
    assert_matches(blu.jit(lambda x: bnp.piecewise(x, [x > b for b in bounds], funcs))(x),
        np.piecewise(x, [x > b for b in bounds], funcs))  # fmt: skip
    xi = np.round(x * 3).astype(np.int32)  # the result keeps x's dtype
    ci = [xi > b for b in bounds]
    assert_matches(bnp.piecewise(xi, ci, funcs), np.piecewise(xi, ci, funcs), np.int32)


def test_piecewise_extra_arguments_and_gradient():
    x = np.linspace(-2.0, 2.0, 9)
    got = bnp.piecewise(x, [x < 0], [lambda x, s: s * x, lambda x, s: x / s], 4.0)
    assert_matches(got, np.where(x < 0, 4.0 * x, x / 4.0))
    f = lambda x: bnp.piecewise(x, [x < -1, x > 0.5], [lambda x: x**3, bnp.cos, 2.0])  # noqa: E731
    g = blu.vmap(blu.grad(f))(x + 0.1)
    xs = x + 0.1  # closed form, away from the pieces' edges
    assert_matches(g, np.where(xs > 0.5, -np.sin(xs), np.where(xs < -1, 3 * xs**2, 0.0)))
    check_grads(f, [x + 0.1])


def test_piecewise_rejects_bad_input():
    x = np.zeros((2, 3))
    with pytest.raises(BluValueError, match=r"2 condition\(s\), funclist needs 2 or 3 .*got 1"):
        bnp.piecewise(x, [x > 0, x < 0], [bnp.sin])
    with pytest.raises(BluShapeError, match=r"condlist\[1\] of shape \(2,\) .*\(2, 3\)"):
        bnp.piecewise(x, [x > 0, np.array([True, False])], [bnp.sin, bnp.cos])
