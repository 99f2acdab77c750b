"""lax.scatter_sub / scatter_mul / scatter_min / scatter_max and lax.index_take (JAX's; blu had
none): against a numpy loop over the update rows (float64 and exact integers), with repeated and
out-of-bounds coordinates and size-0 / size-1 shapes; derivatives against finite differences;
vmap against a loop; jit against eager; the errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
from blu import lax
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from tests.helpers import check_grads, check_jit, check_vmap

UFUNCS = {
    "scatter_sub": np.subtract,
    "scatter_mul": np.multiply,
    "scatter_min": np.minimum,
    "scatter_max": np.maximum,
}


def _reference(name, operand, indices, updates, axes, mode):
    """Each update row combined into the operand in turn, at its coordinates."""
    out = np.array(operand, copy=True)
    axes = [a % operand.ndim for a in axes]
    rest = [i for i in range(operand.ndim) if i not in axes]
    batch = indices.shape[:-1]
    for b in np.ndindex(*batch):
        coords = [int(c) for c in indices[b]]
        dims = [operand.shape[a] for a in axes]
        if mode == "clip":
            coords = [min(max(c, 0), n - 1) for c, n in zip(coords, dims)]
        elif any(not 0 <= c < n for c, n in zip(coords, dims)):
            continue
        if 0 in dims:
            continue
        where: list = [slice(None)] * operand.ndim
        for a, c in zip(axes, coords):
            where[a] = c
        where = tuple(where)
        row = updates[b]  # rest_shape, in the order of the remaining axes
        out[where] = UFUNCS[name](out[where], row)
    del rest
    return out


@st.composite
def _problems(draw, dtype=np.float64):
    nd = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(0, 4)) for _ in range(nd))
    k = draw(st.integers(0, nd))
    axes = tuple(draw(st.permutations(range(nd)))[:k])
    batch = tuple(draw(st.integers(0, 5)) for _ in range(draw(st.integers(0, 2))))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # coordinates from -1 to size: repeated ones and out-of-bounds ones on each side
    idx = np.stack([rng.integers(-1, shape[a] + 1, batch) for a in axes], -1) if axes else (
        np.zeros(batch + (0,), np.int64))  # fmt: skip
    idx = idx.astype(draw(st.sampled_from([np.int32, np.int64, np.int8])))
    rest = tuple(shape[i] for i in range(nd) if i not in axes)
    if np.dtype(dtype).kind == "f":
        x, u = rng.uniform(-2, 2, shape), rng.uniform(-2, 2, batch + rest)
        x[rng.random(shape) < 0.2] = 1.0  # ties with the updates
        u[rng.random(batch + rest) < 0.2] = 1.0
    elif np.dtype(dtype).kind == "c":  # real parts often equal: the order is lexicographic
        x = rng.integers(-2, 3, shape) + 1j * rng.uniform(-2, 2, shape)
        u = rng.integers(-2, 3, batch + rest) + 1j * rng.uniform(-2, 2, batch + rest)
    else:
        x = rng.integers(-5, 6, shape).astype(dtype)
        u = rng.integers(-5, 6, batch + rest).astype(dtype)
    return x, idx, u, axes


@pytest.mark.parametrize("name", list(UFUNCS))
@pytest.mark.parametrize("mode", ["drop", "clip"])
@given(data=st.data())
def test_scatter_against_a_numpy_loop(name, mode, data):
    dtype = data.draw(st.sampled_from([np.float64, np.complex128, np.int32, np.int64, np.uint8]))
    x, idx, u, axes = data.draw(_problems(dtype))
    fn = getattr(lax, name)
    got = fn(x, idx, u, axes=axes, mode=mode)
    want = _reference(name, x, idx, u, axes, mode)
    assert np.asarray(got).dtype == x.dtype
    if dtype in (np.float64, np.complex128):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_array_equal(np.asarray(got), want)
    jitted = blu.jit(lambda a, b, c: fn(a, b, c, axes=axes, mode=mode))(x, idx, u)
    np.testing.assert_allclose(np.asarray(jitted), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(UFUNCS))
@given(data=st.data())
def test_scatter_vmap_against_a_loop(name, data):
    x, idx, u, axes = data.draw(_problems())
    fn = getattr(lax, name)
    rng = np.random.default_rng(0)
    xs = np.stack([x, x + rng.standard_normal(x.shape)])
    us = np.stack([u, u + rng.standard_normal(u.shape)])
    idxs = np.stack([idx, idx[::-1] if idx.ndim > 1 else idx])

    def f(a, b, c):
        return fn(a, b, c, axes=axes)

    check_vmap(f, [xs, idxs, us], [0, 0, 0])
    check_vmap(f, [xs, idx, us], [0, None, 0])
    check_vmap(f, [x, idxs, us], [None, 0, 0])


@pytest.mark.parametrize("name", list(UFUNCS))
def test_scatter_derivatives_against_finite_differences(name):
    rng = np.random.default_rng(1)
    x = rng.uniform(0.5, 2.0, (4, 3))
    u = rng.uniform(0.5, 2.0, (5, 3))
    if name in ("scatter_min", "scatter_max"):  # no ties between operand and updates
        u = u + 3.0 if name == "scatter_max" else u - 3.0
        u[3] = u[0] + (0.5 if name == "scatter_max" else -0.5)  # the duplicate wins
    idx = np.array([[1], [3], [7], [1], [-1]])  # a repeat and two dropped rows
    fn = getattr(lax, name)
    check_grads(lambda a, b: fn(a, idx, b, axes=(0,)), [x, u], order=2)
    # the winner of a duplicate coordinate takes the whole derivative
    g = blu.grad(lambda b: fn(x, idx, b, axes=(0,)).sum())(u)
    if name == "scatter_max":
        np.testing.assert_array_equal(np.asarray(g)[[0, 2, 4]], 0.0)
        np.testing.assert_array_equal(np.asarray(g)[[1, 3]], 1.0)


def test_scatter_errors_name_the_shapes():
    x = np.zeros((3, 2))
    with pytest.raises(BluShapeError, match=r"f64\[3,2\]"):
        lax.scatter_mul(x, np.zeros((4, 1), np.int32), np.zeros((4, 3)), axes=(0,))
    with pytest.raises(BluTypeError, match="integer"):
        lax.scatter_min(x, np.zeros((4, 1)), np.zeros((4, 2)), axes=(0,))
    with pytest.raises(BluTypeError, match="dtype"):
        lax.scatter_max(x, np.zeros((4, 1), np.int32), np.zeros((4, 2), np.float32), axes=(0,))
    with pytest.raises(BluTypeError, match="bool"):
        b = np.zeros((3,), bool)
        lax.scatter_sub(b, np.zeros((1, 1), np.int32), b[:1], axes=(0,))
    with pytest.raises(BluValueError, match="mode"):
        lax.scatter_mul(x, np.zeros((1, 1), np.int32), np.zeros((1, 2)), axes=(0,), mode="x")


# ---- index_take ---------------------------------------------------------------------------------


@given(data=st.data())
def test_index_take_against_numpy(data):
    nd = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.integers(1, 4)) for _ in range(nd))
    k = data.draw(st.integers(1, nd))
    axes = tuple(data.draw(st.permutations(range(nd)))[:k])
    n = data.draw(st.integers(0, 5))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    idxs = tuple(rng.integers(-9, 9, n).astype(np.int32) for _ in axes)
    src = rng.standard_normal(shape)
    got = lax.index_take(src, idxs, axes)
    # numpy: wrap each index, move the indexed axes to the front and read them
    wrapped = tuple(np.mod(i, shape[a]) for i, a in zip(idxs, axes))
    rest = [i for i in range(nd) if i not in axes]
    want = np.transpose(src, list(axes) + rest)[wrapped]
    np.testing.assert_array_equal(np.asarray(got), want)
    neg = tuple(a - nd for a in axes)
    np.testing.assert_array_equal(np.asarray(lax.index_take(src, idxs, neg)), want)
    check_jit(lambda s, *ii: lax.index_take(s, ii, axes), [src, *idxs])
    check_vmap(lambda s, *ii: lax.index_take(s, ii, axes),
               [np.stack([src, -src]), *[np.stack([i, i[::-1]]) for i in idxs]],
               [0] * (1 + len(idxs)))  # fmt: skip


def test_index_take_gradient_and_errors():
    src = np.random.default_rng(2).standard_normal((3, 4))
    idx = (np.array([0, -1, 0]), np.array([1, 5, 1]))
    check_grads(lambda s: lax.index_take(s, idx, (0, 1)), [src], order=2)
    g = blu.grad(lambda s: lax.index_take(s, idx, (0, 1)).sum())(src)
    want = np.zeros((3, 4))
    want[0, 1], want[2, 1] = 2.0, 1.0
    np.testing.assert_array_equal(np.asarray(g), want)
    with pytest.raises(BluValueError, match="2 index arrays for 1 axes"):
        lax.index_take(src, idx, (0,))
    with pytest.raises(BluShapeError, match=r"i64\[2,2\]"):
        lax.index_take(src, (np.zeros((2, 2), np.int64),), (0,))
    with pytest.raises(BluTypeError, match="integers"):
        lax.index_take(src, (np.zeros(2),), (0,))


# ---- scatter_apply ------------------------------------------------------------------------------


def _apply_reference(operand, indices, func, axes, mode):
    """``func`` applied in place at each index row in turn (np.add.at's loop, one row at a time)."""
    out = np.array(operand, copy=True)
    axes = [a % operand.ndim for a in axes]
    dims = [operand.shape[a] for a in axes]
    for b in np.ndindex(*indices.shape[:-1]):
        coords = [int(c) for c in indices[b]]
        if mode == "clip":
            coords = [min(max(c, 0), n - 1) for c, n in zip(coords, dims)]
        elif any(not 0 <= c < n for c, n in zip(coords, dims)):
            continue
        if 0 in dims:
            continue
        where: list = [slice(None)] * operand.ndim
        for a, c in zip(axes, coords):
            where[a] = c
        out[tuple(where)] = func(out[tuple(where)])
    return out


@pytest.mark.parametrize("mode", ["drop", "clip"])
@given(data=st.data())
def test_scatter_apply_against_a_numpy_loop(mode, data):
    dtype = data.draw(st.sampled_from([np.float64, np.int32]))
    x, idx, _, axes = data.draw(_problems(dtype))
    if dtype == np.int32:
        f, f_np = (lambda v: v * 2 - 1), (lambda v: v * 2 - 1)
    else:
        f, f_np = (lambda v: lax.sin(v) * 1.5 + 0.25), (lambda v: np.sin(v) * 1.5 + 0.25)
    want = _apply_reference(x, idx, f_np, axes, mode)
    got = lax.scatter_apply(x, idx, f, axes=axes, mode=mode)
    assert np.asarray(got).dtype == x.dtype
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
    # traced indices: the repeat count is found at run time (a while loop)
    jitted = blu.jit(lambda a, i: lax.scatter_apply(a, i, f, axes=axes, mode=mode))(x, idx)
    np.testing.assert_allclose(np.asarray(jitted), want, rtol=1e-12, atol=1e-12)
    rows = idx.reshape(math.prod(idx.shape[:-1]), idx.shape[-1])
    if len(np.unique(rows, axis=0)) == len(rows):  # the caller's promise holds: one application
        got = lax.scatter_apply(x, idx, f, axes=axes, mode=mode, unique_indices=True)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)


@given(data=st.data())
def test_scatter_apply_vmap_against_a_loop(data):
    x, idx, _, axes = data.draw(_problems())
    rng = np.random.default_rng(0)
    xs = np.stack([x, x + rng.standard_normal(x.shape)])
    idxs = np.stack([idx, idx[::-1] if idx.ndim > 1 else idx])

    def f(a, i):
        return lax.scatter_apply(a, i, lambda v: v * v - 0.5, axes=axes)

    check_vmap(f, [xs, idxs], [0, 0])
    check_vmap(f, [xs, idx], [0, None])
    check_vmap(f, [x, idxs], [None, 0])


def test_scatter_apply_derivatives_against_finite_differences():
    rng = np.random.default_rng(3)
    x = rng.uniform(-1.0, 1.0, (4, 3))
    w = np.array(0.7)
    idx = np.array([[1], [3], [7], [1], [-1], [1]])  # coordinate 1 three times, two dropped rows

    def f(a, s):  # func closes over a differentiated value
        return lax.scatter_apply(a, idx, lambda v: lax.sin(v) * s + 0.1, axes=(0,))

    check_grads(f, [x, w], order=2)
    # forward mode with traced indices (the while loop) against the closed form
    t = rng.standard_normal(x.shape)
    jvp = blu.jit(
        lambda a, i, ta: blu.jvp(
            lambda b: lax.scatter_apply(b, i, lambda v: lax.sin(v) * 0.7, axes=(0,)), (a,), (ta,)
        )[1]
    )(x, idx, t)
    want = t.copy()
    y = x[1]
    d = np.ones(3)
    for _ in range(3):  # d/dy of sin(.) * 0.7 applied three times: the chain rule's product
        d *= np.cos(y) * 0.7
        y = np.sin(y) * 0.7
    want[1] = d * t[1]
    want[3] = np.cos(x[3]) * 0.7 * t[3]
    np.testing.assert_allclose(np.asarray(jvp), want, rtol=1e-12, atol=1e-12)


def test_scatter_apply_takes_jaxs_promise_in_bounds_mode():
    # JAX's mode strings include 'promise_in_bounds'; it was a BluValueError
    x = np.linspace(-1.0, 2.0, 12).reshape(6, 2)
    idx = np.array([[1], [4], [1], [5]])
    want = _apply_reference(x, idx, lambda v: v * v - 0.5, (0,), "drop")

    def f(a, i):
        return lax.scatter_apply(a, i, lambda v: v * v - 0.5, axes=(0,), mode="promise_in_bounds")

    for got in (f(x, idx), blu.jit(f)(x, idx)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)


def test_scatter_apply_errors():
    x = np.zeros((3, 2))
    i = np.zeros((4, 1), np.int32)
    with pytest.raises(BluTypeError, match="not callable"):
        lax.scatter_apply(x, i, 3, axes=(0,))
    with pytest.raises(BluTypeError, match="float64 scalar to a int32"):
        lax.scatter_apply(x, i, lambda v: lax.convert_element_type(v, np.int32), axes=(0,))
    with pytest.raises(BluTypeError, match=r"float64 scalar to an array of shape \(2,\)"):
        lax.scatter_apply(x, i, lambda v: lax.broadcast(v, (2,)), axes=(0,))
    with pytest.raises(BluShapeError, match=r"update_shape \(4,\).*\(4, 2\)"):
        lax.scatter_apply(x, i, lambda v: v, axes=(0,), update_shape=(4,))
    with pytest.raises(BluTypeError, match="integer"):
        lax.scatter_apply(x, np.zeros((4, 1)), lambda v: v, axes=(0,))
    with pytest.raises(BluValueError, match="mode"):
        lax.scatter_apply(x, i, lambda v: v, axes=(0,), mode="x")
    same = lax.scatter_apply(x, i, lambda v: v + 1, axes=(0,), update_shape=(4, 2), mode=None)
    want = x.copy()
    want[0] += 4
    np.testing.assert_array_equal(np.asarray(same), want)
