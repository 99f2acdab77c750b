"""Column-pivoted QR (``qr(..., pivoting=True)``, ``qr_multiply(..., pivoting=True)``,
``blu.lax.linalg.qr(x, pivoting=True)``) against scipy.linalg's LAPACK ``?geqp3`` in float64,
matrix by matrix over batch shapes: ``a[:, p] = q r``, ``q`` orthonormal, ``r`` upper triangular
with non-increasing ``|diag(r)|``; the permutation itself only on generic matrices (no ties);
rank-deficient matrices and ties by ``|diag(r)|``; float32; jit and vmap; derivatives against
finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sl
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu.core.errors import BluShapeError, BluTypeError
from blu.lax import linalg as lax_linalg
from blu.scipy import linalg as L
from tests.helpers import check_grads

BATCHES = [(), (1,), (3,), (2, 1), (0,)]


def _matrices(a, core=2):
    """The ``core``-dimensional items of ``a``, batch axes flattened (a size-0 item too)."""
    shape = np.shape(a)
    count = int(np.prod(shape[: len(shape) - core]))
    return np.reshape(a, (count,) + shape[len(shape) - core :])


def _check_factors(a, q, r, p, *, rtol, full):
    """``a[..., :, p] = q r``, ``q`` orthonormal columns, ``r`` upper triangular with
    non-increasing ``|diag(r)|``, ``p`` a permutation (int32); ``full``: mode 'full' shapes."""
    a, q, r, p = (np.asarray(x) for x in (a, q, r, p))
    *batch, m, n = a.shape
    k = min(m, n)
    assert q.shape == (*batch, m, m if full else k)
    assert r.shape == (*batch, m if full else k, n)
    assert p.shape == (*batch, n) and p.dtype == np.int32
    scale = max(1.0, float(np.abs(a).max(initial=0)))
    for ai, qi, ri, pi in zip(_matrices(a), _matrices(q), _matrices(r), _matrices(p, 1)):
        np.testing.assert_array_equal(np.sort(pi), np.arange(n))
        np.testing.assert_allclose(qi @ ri, ai[:, pi], rtol=rtol, atol=rtol * scale)
        np.testing.assert_allclose(qi.conj().T @ qi, np.eye(qi.shape[1]), atol=rtol)
        np.testing.assert_array_equal(np.tril(ri, -1), 0)
        d = np.abs(np.diagonal(ri))
        assert np.all(d[1:] <= d[:-1] * (1 + rtol) + rtol * scale), d


def _random(rng, shape, complex_):
    a = rng.standard_normal(shape)
    return a + 1j * rng.standard_normal(shape) if complex_ else a


@settings(deadline=None, max_examples=30)
@given(st.integers(0, 5), st.integers(0, 5), st.booleans(), st.data())
def test_pivoted_qr_against_scipy(m, n, complex_, data):
    """Generic matrices (no ties): ``p`` and ``r`` equal to SciPy's, every mode's shapes."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    batch = data.draw(st.sampled_from(BATCHES), label="batch")
    a = _random(rng, batch + (m, n), complex_)
    for mode in ("full", "economic"):
        q, r, p = L.qr(a, mode=mode, pivoting=True)
        _check_factors(a, q, r, p, rtol=1e-10, full=mode == "full")
        for ai, ri, pi in zip(_matrices(a), _matrices(r), _matrices(p, 1)):
            _, want_r, want_p = sl.qr(ai, mode=mode, pivoting=True)
            np.testing.assert_array_equal(pi, want_p)
            np.testing.assert_allclose(ri, want_r, rtol=1e-10, atol=1e-10)
    r_only, p_only = L.qr(a, mode="r", pivoting=True)
    np.testing.assert_allclose(r_only, L.qr(a, pivoting=True)[1], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(p_only, p)


def test_single_row_and_column_pick_the_largest_entry():
    """One row: the first pivot is the entry of largest magnitude, then LAPACK's swap order."""
    for a in (np.array([[1.0, -5.0, 2.0, 3.0]]), np.array([[2.0], [-7.0], [1.0]])):
        q, r, p = L.qr(a, pivoting=True)
        want_q, want_r, want_p = sl.qr(a, pivoting=True)
        np.testing.assert_array_equal(p, want_p)
        np.testing.assert_allclose(r, want_r, rtol=1e-14, atol=1e-14)
        np.testing.assert_allclose(q, want_q, rtol=1e-14, atol=1e-14)
    np.testing.assert_array_equal(L.qr(np.array([[1.0, -5.0, 2.0, 3.0]]), pivoting=True)[2],
                                  [1, 0, 2, 3])  # fmt: skip


@settings(deadline=None, max_examples=20)
@given(st.integers(2, 6), st.integers(2, 6), st.data())
def test_rank_deficient_matrices_reveal_their_rank(m, n, data):
    """``a = b c`` of rank ``k < min(m, n)``: ``|diag(r)|`` equals SciPy's (the first ``k`` large,
    the rest at rounding level)."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    k = data.draw(st.integers(1, min(m, n) - 1), label="rank")
    a = rng.standard_normal((2, m, k)) @ rng.standard_normal((2, k, n))
    q, r, p = L.qr(a, mode="economic", pivoting=True)
    _check_factors(a, q, r, p, rtol=1e-10, full=False)
    for ai, ri in zip(a, np.asarray(r)):
        want = np.abs(np.diagonal(sl.qr(ai, mode="economic", pivoting=True)[1]))
        got = np.abs(np.diagonal(ri))
        np.testing.assert_allclose(got[:k], want[:k], rtol=1e-9)
        assert np.all(got[k:] <= 1e-12 * got[0]), got
        np.testing.assert_array_equal(np.asarray(p)[0][:k], sl.qr(a[0], pivoting=True)[2][:k])


def test_ties_and_zero_columns():
    """Columns of equal norm (the pivot order is then free) and zero columns: ``|diag(r)|``
    equals SciPy's whatever the order."""
    h = sl.hadamard(4) * 1.0  # orthogonal columns, all of norm 2
    dup = np.array([[1.0, 1.0, 0.0], [2.0, 2.0, 0.0], [0.0, 0.0, 0.0]])  # repeated and zero
    for a in (h, h[:, :3], h[:3], dup, np.zeros((3, 2))):
        q, r, p = L.qr(a, pivoting=True)
        _check_factors(a, q, r, p, rtol=1e-12, full=True)
        want = np.abs(np.diagonal(sl.qr(a, pivoting=True)[1]))
        np.testing.assert_allclose(np.abs(np.diagonal(r)), want, rtol=1e-12, atol=1e-12)


@settings(deadline=None, max_examples=15)
@given(st.integers(1, 6), st.integers(1, 6), st.data())
def test_float32_keeps_its_dtype(m, n, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    a = rng.standard_normal((2, m, n)).astype(np.float32)
    q, r, p = L.qr(a, mode="economic", pivoting=True)
    assert np.asarray(q).dtype == np.float32 and np.asarray(r).dtype == np.float32
    eps = float(np.finfo(np.float32).eps)
    _check_factors(a, q, r, p, rtol=50 * eps, full=False)
    for ai, ri in zip(a.astype(np.float64), np.asarray(r)):
        want = np.abs(np.diagonal(sl.qr(ai, mode="economic", pivoting=True)[1]))
        np.testing.assert_allclose(np.abs(np.diagonal(ri)), want, rtol=1e-4, atol=1e-5)


def test_jit_and_vmap_match_eager():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 5, 4))
    eager = L.qr(a, mode="economic", pivoting=True)
    jitted = blu.jit(lambda x: L.qr(x, mode="economic", pivoting=True))(a)
    mapped = blu.vmap(lambda x: L.qr(x, mode="economic", pivoting=True), in_axes=2, out_axes=0)(
        np.moveaxis(a, 0, 2)
    )
    for got in (jitted, mapped):
        np.testing.assert_allclose(got[0], eager[0], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got[1], eager[1], rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(got[2], eager[2])
    for ai, pi in zip(a, np.asarray(eager[2])):
        np.testing.assert_array_equal(pi, sl.qr(ai, pivoting=True)[2])


def test_lax_linalg_qr_pivoting_shapes():
    """JAX's ``lax.linalg.qr(x, pivoting=True, full_matrices=..., use_magma=...)``."""
    a = np.random.default_rng(4).standard_normal((2, 5, 3))
    for full, (qs, rs) in ((True, ((5, 5), (5, 3))), (False, ((5, 3), (3, 3)))):
        q, r, p = lax_linalg.qr(a, pivoting=True, full_matrices=full, use_magma=False)
        _check_factors(a, q, r, p, rtol=1e-10, full=full)
        assert np.shape(q) == (2, *qs) and np.shape(r) == (2, *rs)
    assert len(lax_linalg.qr(a, use_magma=True)) == 2
    with pytest.raises(BluTypeError, match=r"qr.*i32\[2,3\]"):
        lax_linalg.qr(np.ones((2, 3), np.int32), pivoting=True)
    with pytest.raises(BluShapeError, match=r"qr.*f64\[3\]"):
        lax_linalg.qr(np.ones(3), pivoting=True)


def test_pivoted_qr_derivatives_against_finite_differences():
    """At generic matrices ``p`` is locally constant: the derivative is the unpivoted QR's of
    ``a[:, p]`` (JAX's rule)."""
    rng = np.random.default_rng(5)
    for shape in ((4, 3), (3, 4), (3, 3), (2, 4, 2)):
        x = rng.standard_normal(shape)
        check_grads(lambda x: L.qr(x, mode="economic", pivoting=True)[:2], [x])
    x = rng.standard_normal((2, 4))
    check_grads(blu.jit(lambda x: L.qr(x, pivoting=True)[:2]), [x])
    check_grads(lambda x: L.qr_multiply(x, np.arange(4.0), pivoting=True)[:2], [x.T.copy()])


@settings(deadline=None, max_examples=25)
@given(st.integers(1, 4), st.integers(1, 4), st.sampled_from(["left", "right"]), st.booleans(),
       st.booleans(), st.data())  # fmt: skip
def test_pivoted_qr_multiply_against_scipy(m, n, mode, conjugate, complex_, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    k = min(m, n)
    vector = data.draw(st.booleans(), label="vector")
    batch = () if vector else data.draw(st.sampled_from(BATCHES), label="batch")
    a = _random(rng, batch + (m, n), complex_)
    core = ((k,) if mode == "left" else (m,)) if vector else (k, 2) if mode == "left" else (2, m)
    c = rng.standard_normal(batch + core)
    cq, r, p = L.qr_multiply(a, c, mode, pivoting=True, conjugate=conjugate)
    out = ((m,) if mode == "left" else (k,)) if vector else (m, 2) if mode == "left" else (2, k)
    assert np.shape(cq) == batch + out and np.shape(r) == batch + (k, n)
    assert np.shape(p) == batch + (n,) and np.asarray(p).dtype == np.int32
    count = int(np.prod(batch))
    got = [np.reshape(np.asarray(x), (count, *s)) for x, s in ((cq, out), (r, (k, n)), (p, (n,)))]
    flat_a, flat_c = np.reshape(a, (count, m, n)), np.reshape(c, (count, *core))
    for i in range(count):
        want = sl.qr_multiply(flat_a[i], flat_c[i], mode, pivoting=True, conjugate=conjugate)
        np.testing.assert_allclose(got[0][i], want[0], rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(got[1][i], want[1], rtol=1e-10, atol=1e-10)
        np.testing.assert_array_equal(got[2][i], want[2])
