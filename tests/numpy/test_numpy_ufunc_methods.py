"""bnp.ufunc and bnp.frompyfunc (jax.numpy's): the standard ufuncs' attributes and methods
(reduce, accumulate, outer, at, reduceat) against numpy's own ufunc methods in float64, the call
tracing as the wrapped function, derivatives against finite differences, frompyfunc against a
Python loop, and the BluErrors."""

from __future__ import annotations

import inspect
import operator
import pickle

import numpy as np
import pytest
from helpers import arrays, check_grads, shapes
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core.errors import BluAxisError, BluError, BluIndexError, BluValueError
from blu.numpy import ufuncs as plain

BINARY = ["add", "multiply", "subtract", "maximum", "minimum", "logaddexp", "hypot", "fmax"]


def _close(got, want, rtol=1e-12):
    got = np.asarray(got)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-12)


def test_standard_ufuncs_have_numpys_attributes():
    for name in ["add", "multiply", "maximum", "logical_and", "bitwise_and", "sin", "divmod"]:
        u, ref = getattr(bnp, name), getattr(np, name)
        assert isinstance(u, bnp.ufunc)
        assert (u.nin, u.nout) == (ref.nin, ref.nout)
        assert u.identity == ref.identity
    assert bnp.abs is bnp.absolute and bnp.pow is bnp.power
    assert bnp.add.__name__ == "add" and bnp.add.__doc__ == plain.add.__doc__
    assert inspect.signature(bnp.add) == inspect.signature(plain.add)
    assert pickle.loads(pickle.dumps(bnp.add)) is bnp.add
    made = pickle.loads(pickle.dumps(bnp.frompyfunc(operator.mul, 2, 1, identity=1)))
    assert (made.nin, made.identity) == (2, 1)
    np.testing.assert_array_equal(made.reduce(np.arange(1, 5)), 24)
    assert (
        inspect.signature(bnp.ufunc).parameters["nin"].kind
        == inspect.Parameter.POSITIONAL_OR_KEYWORD
    )
    assert not isinstance(bnp.clip, bnp.ufunc) and not isinstance(bnp.matmul, bnp.ufunc)


def test_call_traces_as_the_wrapped_function():
    x, y = np.ones((3,), np.float32), np.ones((3,), np.float32)
    for name in ["add", "multiply", "maximum", "sin", "equal"]:
        args = (x,) if getattr(bnp, name).nin == 1 else (x, y)
        want = str(blu.make_jaxpr(getattr(plain, name, None) or getattr(bnp, name)._func)(*args))
        assert str(blu.make_jaxpr(getattr(bnp, name))(*args)) == want


@given(st.data(), shapes(min_dims=1), st.sampled_from(BINARY), st.booleans())
def test_reduce_matches_numpy(data, shape, name, keepdims):
    x = data.draw(arrays(shape, 0.5, 2.0))
    axis = data.draw(st.sampled_from([None, *range(-len(shape), len(shape))]))
    u, ref = getattr(bnp, name), getattr(np, name)
    if ref.identity is None and (x.size == 0 if axis is None else shape[axis] == 0):
        with pytest.raises(BluValueError, match="no identity"):
            u.reduce(x, axis=axis)
        return
    if axis is None and name == "subtract":  # numpy: "not reorderable"; blu and JAX: raveled
        want = np.reshape(ref.reduce(x.ravel()), (1,) * x.ndim if keepdims else ())
    else:
        want = ref.reduce(x, axis=axis, keepdims=keepdims)
    _close(u.reduce(x, axis=axis, keepdims=keepdims), want)


@given(st.data(), shapes(min_dims=1), st.sampled_from(BINARY))
def test_reduce_initial_and_where_match_numpy(data, shape, name):
    x = data.draw(arrays(shape, 0.5, 2.0))
    mask = data.draw(arrays(shape, 0, 1)) > 0.5
    u, ref = getattr(bnp, name), getattr(np, name)
    _close(u.reduce(x, axis=0, initial=1.5), ref.reduce(x, axis=0, initial=1.5))
    _close(
        u.reduce(x, axis=0, initial=1.5, where=mask),
        ref.reduce(x, axis=0, initial=1.5, where=mask),
    )


def test_accumulate_keeps_integer_dtypes_as_jax():
    # JAX's add/multiply.accumulate keep an integer dtype (wrapping); numpy 2 widens to 64 bits
    x = np.array([[200, 2, 3], [7, 9, 11]], np.uint8)
    for name in ["add", "multiply"]:
        got = getattr(bnp, name).accumulate(x, axis=1)
        want = getattr(np, name).accumulate(x, 1, dtype=np.uint8)
        assert got.dtype == np.uint8
        np.testing.assert_array_equal(got, want)


def test_reduce_bitwise_and_logical_match_numpy():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 64, (4, 5)).astype(np.int32)
    for name in ["bitwise_and", "bitwise_or", "bitwise_xor"]:
        for axis in [0, 1, None, (0, 1)]:
            want = getattr(np, name).reduce(x, axis=axis)
            np.testing.assert_array_equal(getattr(bnp, name).reduce(x, axis=axis), want)
    b = x > 30
    for name in ["logical_and", "logical_or", "logical_xor"]:
        want = getattr(np, name).reduce(b, axis=1)
        np.testing.assert_array_equal(getattr(bnp, name).reduce(b, axis=1), want)
    mask = x % 3 == 0
    np.testing.assert_array_equal(
        bnp.bitwise_or.reduce(x, axis=0, where=mask), np.bitwise_or.reduce(x, axis=0, where=mask)
    )


@given(st.data(), shapes(min_dims=1), st.sampled_from(BINARY))
def test_accumulate_matches_numpy(data, shape, name):
    x = data.draw(arrays(shape, 0.5, 2.0))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    _close(getattr(bnp, name).accumulate(x, axis=axis), getattr(np, name).accumulate(x, axis=axis))


@given(st.data(), shapes(max_dims=2), shapes(max_dims=2), st.sampled_from(BINARY))
def test_outer_matches_numpy(data, sa, sb, name):
    a, b = data.draw(arrays(sa, 0.5, 2.0)), data.draw(arrays(sb, 0.5, 2.0))
    _close(getattr(bnp, name).outer(a, b), getattr(np, name).outer(a, b))


@given(st.data(), st.integers(1, 6), st.sampled_from(BINARY + ["negative", "sqrt"]))
def test_at_matches_numpys_unbuffered_at(data, n, name):
    x = data.draw(arrays((n, 3), 0.5, 2.0))
    idx = np.array(data.draw(st.lists(st.integers(-n, n - 1), max_size=8)), np.int32)
    u, want = getattr(bnp, name), x.copy()
    if u.nin == 1:
        getattr(np, name).at(want, idx)
        got = u.at(x, idx, inplace=False)
    else:
        v = data.draw(arrays((len(idx), 3), 0.5, 2.0))
        getattr(np, name).at(want, idx, v)
        got = u.at(x, idx, v, inplace=False)
    _close(got, want)
    want = x.copy()
    np.add.at(want, (1 % n, slice(0, 2)), 0.25)
    _close(bnp.add.at(x, (1 % n, slice(0, 2)), 0.25, inplace=False), want)


_RNG = np.random.default_rng(7)


@pytest.mark.parametrize(
    "shape, idx, b",
    [
        ((3, 2), (np.array([0, 1]),), np.array([10.0, 20.0])),  # b along a[idx]'s last axis
        ((3, 3), (np.array([0, 0]),), np.array([1.0, 2.0, 4.0])),
        ((3, 4), (slice(None), np.array([0, 1, 1])), _RNG.uniform(1, 2, (3, 3))),
        ((2, 3, 4), (np.array([0, 1]), slice(None), np.array([2, 3])), _RNG.uniform(1, 2, (2, 3))),
        ((2, 3, 4), (Ellipsis, np.array([2, 2])), _RNG.uniform(1, 2, (2, 3, 2))),
        ((2, 3, 4), (1, np.array([0, 2])), _RNG.uniform(1, 2, (2, 4))),
        ((4,), (np.array([[0, 1], [1, 3]]),), _RNG.uniform(1, 2, (2, 2))),
    ],
)
def test_generic_at_broadcasts_b_against_the_selection_as_numpy(shape, idx, b):
    # divide has no fast path: the loop, with b broadcast against a[idx] (numpy's rule)
    a = np.random.default_rng(1).uniform(1, 2, shape)
    want = a.copy()
    np.divide.at(want, idx, b)
    blu_idx = tuple(bnp.asarray(e) if isinstance(e, np.ndarray) else e for e in idx)
    got = bnp.divide.at(bnp.asarray(a), blu_idx, bnp.asarray(b), inplace=False)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


@given(st.data(), st.integers(1, 7), st.sampled_from(BINARY))
def test_reduceat_matches_numpy(data, n, name):
    x = data.draw(arrays((2, n), 0.5, 2.0))
    idx = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=5)), np.int32)
    got = getattr(bnp, name).reduceat(x, idx, axis=1)
    _close(got, getattr(np, name).reduceat(x, idx, axis=1))


def test_grad_of_add_reduce_and_multiply_accumulate_against_finite_differences():
    x = np.random.default_rng(1).uniform(0.5, 2.0, (3, 4))
    check_grads(lambda a: bnp.add.reduce(a, axis=1) ** 2, [x], order=2)
    check_grads(lambda a: bnp.multiply.accumulate(a, axis=1), [x], order=2)
    check_grads(lambda a: bnp.subtract.reduce(a, axis=0), [x], order=1)
    check_grads(lambda a: bnp.logaddexp.accumulate(a, axis=0), [x], order=1)


def _loop_reduce(f, x, start=None):
    acc = x[0] if start is None else start
    for v in x if start is not None else x[1:]:
        acc = f(acc, v)
    return acc


@given(st.data(), shapes(min_dims=1, max_dims=2, min_side=1))
def test_frompyfunc_against_a_python_loop(data, shape):
    x = data.draw(arrays(shape, 0.5, 2.0))
    py = lambda a, b: a * b + 1.0  # noqa: E731  (not associative: the order matters)
    u = bnp.frompyfunc(py, 2, 1)
    assert isinstance(u, bnp.ufunc) and (u.nin, u.nout, u.identity) == (2, 1, None)
    _close(u(x, 0.5), x * 0.5 + 1.0)
    want = np.array(_loop_reduce(py, list(x)))
    _close(u.reduce(x), want)
    acc = [x[0]]
    for v in x[1:]:
        acc.append(py(acc[-1], v))
    _close(u.accumulate(x), np.stack(acc))
    idx = np.array([0, 0, shape[0] - 1])
    want = x.copy()
    for i in idx:
        want[i] = py(want[i], 2.0)
    _close(u.at(x, idx, 2.0, inplace=False), want)
    two = bnp.frompyfunc(lambda a: (a + 1.0, a * 2.0), 1, 2)
    got = two(x)
    _close(got[0], x + 1.0)
    _close(got[1], x * 2.0)


def test_frompyfunc_identity_for_empty_reductions():
    u = bnp.frompyfunc(lambda a, b: a + b, 2, 1, identity=0.0)
    _close(u.reduce(np.zeros((0, 3))), np.zeros(3))
    _close(u.reduce(np.ones((2, 0)), axis=1, keepdims=True), np.zeros((2, 1)))
    with pytest.raises(BluValueError, match="no identity"):
        bnp.frompyfunc(lambda a, b: a + b, 2, 1).reduce(np.zeros((0, 3)))


def test_reduce_dtype_matches_numpy():
    x = np.array([[100, 100, 7], [3, 2, 1]], np.int8)
    for name in ["add", "multiply", "subtract", "maximum"]:
        got = getattr(bnp, name).reduce(x, axis=0, dtype=np.float32)
        want = getattr(np, name).reduce(x, axis=0, dtype=np.float32)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_errors():
    x = np.ones((2, 3))
    with pytest.raises(BluValueError, match="sin.reduce: only binary"):
        bnp.sin.reduce(x)
    with pytest.raises(BluValueError, match="divmod.accumulate: only binary"):
        bnp.divmod.accumulate(x)
    with pytest.raises(BluAxisError, match="out of bounds"):
        bnp.add.reduce(x, axis=2)
    with pytest.raises(BluAxisError, match="out of bounds"):
        bnp.maximum.accumulate(x, axis=-3)
    with pytest.raises(BluValueError, match="axis must be one int"):
        bnp.add.accumulate(x, axis=None)
    with pytest.raises(BluValueError, match="out= argument"):
        bnp.add.reduce(x, out=np.zeros(3))
    with pytest.raises(BluValueError, match="out= argument"):
        bnp.add(x, x, out=np.zeros(3))
    with pytest.raises(BluValueError, match="inplace=False"):
        bnp.add.at(x, 0, 1.0)
    with pytest.raises(BluValueError, match="needs initial"):
        bnp.maximum.reduce(x, where=x > 0)
    with pytest.raises(BluValueError, match="bool"):
        bnp.add.reduce(x, where=x)
    with pytest.raises(BluValueError, match="1-d integer"):
        bnp.add.reduceat(x, np.zeros((1, 1), np.int32))
    with pytest.raises(BluIndexError, match="out of range for axis 1 of size 3"):
        bnp.add.reduceat(x, np.array([0, 3]), axis=1)
    with pytest.raises(BluError, match="takes 2 positional"):
        bnp.frompyfunc(lambda a, b: a, 2, 1)(x)
