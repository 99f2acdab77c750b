"""blu.lax.linalg.geqrf and householder_product (LAPACK's compact Householder QR) and
blu.numpy.linalg.qr(mode='raw'): raw output against numpy's ``qr(mode='raw')`` (LAPACK in both),
the factorization rebuilt (``Q R == A``), ``householder_product`` against the reflectors
multiplied out in numpy float64 (a loop of ``I - tau v v^H``) and against numpy's reduced ``Q``;
float32/float64/complex64/complex128, tall, wide, 1x1 and size-0 shapes; batches by leading axes
and by vmap (against a loop); jit against eager; the errors; no derivative (as JAX)."""

import numpy as np
import pytest
from helpers import shapes, tolerance
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core import pytree
from blu.core.errors import BluShapeError, BluTypeError
from blu.core.primitive import MissingRuleError
from blu.lax import linalg as lax_linalg

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def _rand(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def assert_close(got, want, n_ops=1):
    """Within ``tolerance`` of ``got``'s real dtype times ``n_ops``, relative and absolute;
    complex values compared as complex."""
    for g, w in zip(pytree.tree_leaves(got), pytree.tree_leaves(want), strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        tol = tolerance(np.finfo(g.dtype).dtype, n_ops)
        np.testing.assert_allclose(g.astype(np.complex128), w, rtol=tol, atol=tol)


def _mT(x):
    return np.swapaxes(x, -1, -2)


def _reflectors_product(a, taus):
    """``(H_1 ... H_k)[:, :n]``, ``H_i = I - tau_i v_i v_i^H``, ``v_i`` column ``i`` of ``a``
    below the diagonal with a unit ``i``-th entry: one matrix, complex128."""
    m, n = a.shape
    q = np.eye(m, dtype=np.complex128)
    for i, tau in enumerate(taus.astype(np.complex128)):
        v = np.zeros(m, np.complex128)
        v[i], v[i + 1 :] = 1, a[i + 1 :, i]
        q = q @ (np.eye(m) - tau * np.outer(v, v.conj()))
    return q[:, :n]


def _each(fn, *xs):
    """``fn`` over the matrices of the leading axes, stacked (a float64 reference loop)."""
    batch = xs[0].shape[:-2]
    outs = [fn(*(x[i] for x in xs)) for i in np.ndindex(*batch)]
    return np.stack(outs).reshape(batch + outs[0].shape) if outs else None


@st.composite
def _problems(draw):
    """Matrices whose Householder steps are well-conditioned (two LAPACK builds then agree to
    rounding): tall ones ``Q1 diag(s) Q2^H`` with singular values in [0.5, 2] (each column at
    least 0.5 from the span of those before it); wide ones such a square block, then any
    columns."""
    batch = draw(shapes(0, 2, 0, 3))
    m, n = draw(st.integers(0, 5)), draw(st.integers(0, 5))
    dtype = draw(st.sampled_from(DTYPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    k = min(m, n)
    q1 = np.linalg.qr(_rand(rng, batch + (m, m), dtype).astype(np.complex128))[0][..., :k]
    q2 = np.linalg.qr(_rand(rng, batch + (k, k), dtype).astype(np.complex128))[0]
    s = rng.uniform(0.5, 2.0, batch + (k,))
    a = (q1 * s[..., None, :]) @ _mT(q2).conj()
    a = np.concatenate([a, _rand(rng, batch + (m, n - k), dtype)], axis=-1)
    return (a if np.issubdtype(dtype, np.complexfloating) else a.real).astype(dtype)


@given(_problems())
def test_geqrf_against_numpy_raw_and_rebuilt(a):
    *batch, m, n = a.shape
    k = min(m, n)
    a_out, taus = lax_linalg.geqrf(a)
    assert a_out.shape == a.shape and taus.shape == (*batch, k)
    assert a_out.dtype == a.dtype and taus.dtype == a.dtype
    h, tau = np.linalg.qr(a, mode="raw")  # numpy's h: geqrf's output transposed
    n_ops = 4 * max(m, n, 1)
    assert_close(a_out, _mT(h), n_ops)
    assert_close(taus, tau, n_ops)
    # Q R == A, Q from the reflectors (m x k; householder_product needs rows >= columns)
    a_out, taus = np.asarray(a_out), np.asarray(taus)
    q = lax_linalg.householder_product(a_out[..., :, :k], taus)
    r = np.triu(a_out[..., :k, :])
    assert_close(np.asarray(q) @ r, a, n_ops)
    assert_close(q, np.linalg.qr(a)[0], n_ops)  # LAPACK's signs in both
    if a.size:
        want = _each(_reflectors_product, a_out[..., :, :k].astype(np.complex128), taus)
        got = np.asarray(q).astype(np.complex128)
        tol = tolerance(np.finfo(a.dtype).dtype, n_ops)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@given(st.data())
def test_householder_product_of_any_reflectors(data):
    """Random reflector vectors and scales (not geqrf's), ``k <= n <= m``, leading batch axes:
    against the product multiplied out in numpy."""
    dtype = data.draw(st.sampled_from(DTYPES))
    n = data.draw(st.integers(0, 4))
    m, k = n + data.draw(st.integers(0, 3)), data.draw(st.integers(0, n))
    batch = data.draw(shapes(0, 2, 1, 2))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    a = _rand(rng, batch + (m, n), dtype)
    taus = _rand(rng, batch + (k,), dtype)
    got = lax_linalg.householder_product(a, taus)
    assert got.shape == a.shape and got.dtype == a.dtype
    want = _each(_reflectors_product, a.astype(np.complex128), taus)
    if want is None:
        return
    want = want if np.issubdtype(dtype, np.complexfloating) else want.real
    assert_close(got, want, 4 * (m + 1) * (k + 1))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (4, 2), (2, 4), (3, 3), (0, 3), (3, 0), (0, 0)])
def test_numpy_qr_raw_is_numpys(shape, dtype):
    a = _rand(np.random.default_rng(0), (2,) + shape, dtype)
    h, tau = bnp.linalg.qr(a, mode="raw")
    want_h, want_tau = np.linalg.qr(a, mode="raw")
    assert h.shape == want_h.shape and tau.shape == want_tau.shape
    assert h.dtype == a.dtype and tau.dtype == a.dtype
    assert_close(h, want_h, 16)
    assert_close(tau, want_tau, 16)


def test_numpy_qr_raw_of_integers_is_the_default_float():
    a = np.array([[1, 2], [3, 4], [5, 7]], np.int32)
    h, tau = bnp.linalg.qr(a, mode="raw")
    assert h.dtype == np.float32 and tau.dtype == np.float32
    want_h, want_tau = np.linalg.qr(a.astype(np.float64), mode="raw")
    assert_close(h, want_h.astype(np.float32), 8)
    assert_close(tau, want_tau.astype(np.float32), 8)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_is_computed_in_float32(dtype):
    a = _rand(np.random.default_rng(1), (4, 3), np.float32)
    a_out, taus = lax_linalg.geqrf(bnp.asarray(a, dtype=dtype))
    assert a_out.dtype == np.dtype(bnp.dtype(dtype)) and taus.dtype == a_out.dtype
    q = lax_linalg.householder_product(a_out, taus)
    assert q.dtype == a_out.dtype
    back = np.asarray(q, np.float32) @ np.triu(np.asarray(a_out, np.float32)[:3])
    np.testing.assert_allclose(back, a, atol=0.05)


def test_vmap_against_a_loop():
    rng = np.random.default_rng(2)
    a = _rand(rng, (4, 3, 5, 2), np.float64)  # mapped over axis 1
    outs = blu.vmap(lax_linalg.geqrf, in_axes=1, out_axes=1)(a)
    for i in range(3):
        want = lax_linalg.geqrf(a[:, i])
        assert_close(outs[0][:, i], want[0])
        assert_close(outs[1][:, i], want[1])
    r, taus = (np.asarray(o) for o in lax_linalg.geqrf(a[0]))  # (3, 5, 2), (3, 2)
    hp = lax_linalg.householder_product
    got = blu.vmap(hp, in_axes=(0, None))(r, taus[1])
    for i in range(3):
        assert_close(got[i], hp(r[i], taus[1]))
    got = blu.vmap(hp, in_axes=(None, 0))(r[0], taus)
    for i in range(3):
        assert_close(got[i], hp(r[0], taus[i]))
    got = blu.vmap(blu.vmap(hp), in_axes=(1, None))(np.stack([r, r], 1), taus)
    assert_close(got[1], hp(r, taus))


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_jit_against_eager(dtype):
    a = _rand(np.random.default_rng(3), (2, 5, 3), dtype)

    def f(x):
        r, t = lax_linalg.geqrf(x)
        return r, t, lax_linalg.householder_product(r, t), bnp.linalg.qr(x, mode="raw")

    assert_close(blu.jit(f)(a), f(a))


def test_errors():
    with pytest.raises(BluTypeError, match=r"geqrf.*i32"):
        lax_linalg.geqrf(np.ones((2, 2), np.int32))
    with pytest.raises(BluShapeError, match=r"geqrf.*\[3\]"):
        lax_linalg.geqrf(np.ones(3))
    hp = lax_linalg.householder_product
    with pytest.raises(BluShapeError, match=r"householder_product.*\[3,5\].*rows"):
        hp(np.ones((3, 5)), np.ones(3))
    with pytest.raises(BluShapeError, match=r"more taus \(4\)"):
        hp(np.ones((5, 3)), np.ones(4))
    with pytest.raises(BluShapeError, match=r"batch"):
        hp(np.ones((2, 5, 3)), np.ones((3, 2)))
    with pytest.raises(BluShapeError, match=r"batch"):
        hp(np.ones((5, 3)), np.ones(()))
    with pytest.raises(BluTypeError, match=r"one dtype"):
        hp(np.ones((5, 3)), np.ones(2, np.float32))


def test_no_derivative_as_jax():
    a = _rand(np.random.default_rng(4), (4, 3), np.float64)
    with pytest.raises(MissingRuleError, match="geqrf has no derivative"):
        blu.grad(lambda x: bnp.sum(lax_linalg.geqrf(x)[0]))(a)
    with pytest.raises(MissingRuleError, match="householder_product has no derivative"):
        blu.jvp(lambda x: lax_linalg.householder_product(x, np.ones(2)), (a,), (a,))
    with pytest.raises(MissingRuleError, match="geqrf"):
        blu.grad(lambda x: bnp.sum(bnp.linalg.qr(x, mode="raw")[1]))(a)
    # a constant operand under a transform is fine: its tangent is zero
    g = blu.grad(lambda x: bnp.sum(x * lax_linalg.geqrf(a)[1][0]))(np.float64(2.0))
    assert_close(g, np.linalg.qr(a, mode="raw")[1][0])
