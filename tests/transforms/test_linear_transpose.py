"""``blu.linear_transpose`` (JAX's): the transpose of a linear function, compared with the
explicit transpose of its matrix built in numpy float64; errors for a non-linear function, a
cotangent of the wrong shape, dtype or structure, and mixed integer and float dtypes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu import lax
from blu.core.errors import BluShapeError, BluTypeError, BluValueError

F64 = np.float64
TOL = dict(rtol=1e-12, atol=1e-12)


@settings(deadline=None)
@given(m=st.integers(1, 5), n=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_matmul_transpose_is_the_transposed_matrix(m, n, seed):
    rng = np.random.default_rng(seed)
    a, y = rng.standard_normal((m, n)), rng.standard_normal(m)
    (got,) = blu.linear_transpose(lambda x: bnp.asarray(a) @ x, np.zeros(n))(y)
    np.testing.assert_allclose(np.asarray(got), a.T @ y, **TOL)
    assert got.shape == (n,) and got.dtype == F64


@settings(deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), seed=st.integers(0, 2**16))
def test_sum_over_an_axis_transposes_to_a_broadcast(shape, seed):
    rng = np.random.default_rng(seed)
    ct = rng.standard_normal(shape[1:])
    (got,) = blu.linear_transpose(lambda x: bnp.sum(x, axis=0), np.zeros(shape))(ct)
    np.testing.assert_allclose(np.asarray(got), np.broadcast_to(ct, shape), **TOL)


def test_reshape_and_two_arguments_with_pytrees():
    rng = np.random.default_rng(0)
    ct = {"r": rng.standard_normal((3, 2)), "d": rng.standard_normal(6)}

    def f(p, y):
        return {"r": bnp.reshape(p["x"], (3, 2)), "d": 2.0 * p["x"] - 3.0 * y}

    prim = ({"x": np.zeros(6)}, np.zeros(6))
    got_p, got_y = blu.linear_transpose(f, *prim)(ct)
    np.testing.assert_allclose(np.asarray(got_p["x"]), ct["r"].reshape(6) + 2.0 * ct["d"], **TOL)
    np.testing.assert_allclose(np.asarray(got_y), -3.0 * ct["d"], **TOL)


def _conv_matrix(w, n_in, stride, pad):
    """The dense matrix (numpy float64, loops) of a 1-D cross-correlation of a (C, n_in) signal
    with an (O, C, K) kernel, zero padding ``pad`` on both sides and the given stride."""
    o, c, k = w.shape
    n_out = (n_in + 2 * pad - k) // stride + 1
    mat = np.zeros((o * n_out, c * n_in))
    for oc in range(o):
        for t in range(n_out):
            for ic in range(c):
                for j in range(k):
                    src = t * stride + j - pad
                    if 0 <= src < n_in:
                        mat[oc * n_out + t, ic * n_in + src] += w[oc, ic, j]
    return mat, n_out


@pytest.mark.parametrize("stride,pad", [(1, 0), (2, 1), (1, 2)])
def test_convolution_transpose_is_the_transposed_conv_matrix(stride, pad):
    rng = np.random.default_rng(stride * 10 + pad)
    w = rng.standard_normal((3, 2, 3))
    n_in = 7
    mat, n_out = _conv_matrix(w, n_in, stride, pad)

    def f(x):
        return lax.conv_general_dilated(x, bnp.asarray(w), (stride,), [(pad, pad)])

    ct = rng.standard_normal((1, 3, n_out))
    (got,) = blu.linear_transpose(f, np.zeros((1, 2, n_in)))(ct)
    want = (mat.T @ ct.reshape(-1)).reshape(1, 2, n_in)
    np.testing.assert_allclose(np.asarray(got), want, **TOL)


def test_only_shapes_and_dtypes_of_the_primals_are_read():
    s = blu.ShapeDtypeStruct((), np.dtype(np.float32))
    got = blu.linear_transpose(lambda x, y: 0.5 * x - 0.5 * y, s, s)(1.0)
    assert [float(g) for g in got] == [0.5, -0.5]
    assert all(g.dtype == np.float32 for g in got)


def test_under_jit_and_vmap():
    a = np.arange(6.0).reshape(2, 3)
    t = blu.linear_transpose(lambda x: bnp.asarray(a) @ x, np.zeros(3))
    ys = np.array([[1.0, -2.0], [0.5, 3.0]])
    (got,) = blu.jit(blu.vmap(t))(ys)
    np.testing.assert_allclose(np.asarray(got), ys @ a, **TOL)


def test_a_non_linear_function_is_a_type_error():
    with pytest.raises(BluTypeError, match="not linear"):
        blu.linear_transpose(bnp.sin, np.zeros(3))(np.ones(3))
    with pytest.raises(BluTypeError, match="not linear"):
        blu.linear_transpose(lambda x: x * x, np.zeros(3))(np.ones(3))


def test_cotangent_checks():
    t = blu.linear_transpose(lambda x: (x[:2] * 2.0, x), np.zeros(3))
    with pytest.raises(BluShapeError, match=r"f64\[3\].*f64\[2\]"):
        t((np.ones(3), np.ones(3)))
    with pytest.raises(BluTypeError, match=r"f32\[2\].*f64\[2\]"):
        t((np.ones(2, np.float32), np.ones(3)))
    with pytest.raises(BluTypeError, match="structure"):
        t([np.ones(2), np.ones(3)])


def test_mixed_integer_and_float_is_a_type_error():
    with pytest.raises(BluTypeError, match="integer"):
        blu.linear_transpose(lambda x: x.astype(np.float32), np.zeros(3, np.int32))


def test_reduce_axes_is_refused():
    with pytest.raises(BluValueError, match="reduce_axes"):
        blu.linear_transpose(lambda x: x, np.zeros(3), reduce_axes=("i",))
