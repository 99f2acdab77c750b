"""blu.scipy.linalg against scipy.linalg / numpy in float64, matrix by matrix over batch shapes
(size-0 and size-1 axes too) of random well-conditioned matrices; JAX's promotion (integers to
float32, float32 kept); derivatives against finite differences; jit and vmap against eager;
and the errors on bad shapes and arguments."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sl
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from blu.scipy import linalg as L
from tests.helpers import check_grads

BATCHES = [(), (1,), (3,), (2, 1), (0,)]
RTOL = 1e-10


def _close(got, want, rtol=RTOL, atol=None):
    got = np.asarray(got)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    atol = rtol if atol is None else atol
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _each(f, *arrays, out_shape):
    """``f`` applied core by core (``arrays``: pairs of an array and its number of core axes)
    over the common leading (batch) axes, stacked into ``out_shape``."""
    count = int(np.prod(np.broadcast_shapes(*(a.shape[: a.ndim - k] for a, k in arrays))))
    flat = [np.reshape(a, (count,) + a.shape[a.ndim - k :]) for a, k in arrays]
    outs = [f(*(x[i] for x in flat)) for i in range(count)]
    return np.reshape(np.array(outs), out_shape) if outs else np.zeros(out_shape)


def _general(rng, shape):
    """Well-conditioned square matrices: random plus ``n`` on the diagonal."""
    n = shape[-1]
    return rng.standard_normal(shape) + n * np.eye(n)


def _spd(rng, shape):
    m = rng.standard_normal(shape)
    return m @ np.swapaxes(m, -1, -2) + shape[-1] * np.eye(shape[-1])


def _draw(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    return rng, data.draw(st.sampled_from(BATCHES), label="batch"), data.draw(st.integers(1, 4))


# ---- Cholesky, triangular and general solves ----------------------------------------------------


@settings(deadline=None, max_examples=20)
@given(st.booleans(), st.data())
def test_cholesky_cho_solve_and_pos_solve_against_scipy(lower, data):
    rng, batch, n = _draw(data)
    a = _spd(rng, batch + (n, n))
    bv, bm = rng.standard_normal(batch + (n,)), rng.standard_normal(batch + (n, 2))
    c = L.cholesky(a, lower=lower)
    _close(c, _each(lambda x: sl.cholesky(x, lower=lower), (a, 2), out_shape=a.shape))
    assert L.cholesky(a).shape == a.shape and np.allclose(L.cholesky(a), L.cholesky(a, False))
    factor = L.cho_factor(a, lower=lower)
    assert factor[1] is lower
    for b in (bv, bm):
        want = np.linalg.solve(a, b[..., None])[..., 0] if b is bv else np.linalg.solve(a, b)
        _close(L.cho_solve(factor, b), want)
        _close(L.solve(a, b, lower=lower, assume_a="pos"), want)
    # only the triangle named is read
    junk = a + (np.triu if lower else np.tril)(np.full((n, n), 7.0), 1 if lower else -1)
    _close(L.cholesky(junk, lower=lower), c)


@settings(deadline=None, max_examples=20)
@given(st.sampled_from([0, 1, 2, "N", "T", "C"]), st.booleans(), st.booleans(), st.data())
def test_solve_triangular_against_scipy(trans, lower, unit_diagonal, data):
    rng, batch, n = _draw(data)
    a = _general(rng, batch + (n, n))
    for b in (rng.standard_normal(batch + (n,)), rng.standard_normal(batch + (n, 3))):
        k = b.ndim - len(batch)
        want = _each(
            lambda x, y: sl.solve_triangular(x, y, trans, lower, unit_diagonal),
            (a, 2), (b, k), out_shape=b.shape,
        )  # fmt: skip
        _close(L.solve_triangular(a, b, trans, lower, unit_diagonal), want)
    # batch axes of size 1 broadcast
    b1 = rng.standard_normal((1,) * len(batch) + (n, 2))
    one = b1[(0,) * len(batch)]
    want = _each(
        lambda x: sl.solve_triangular(x, one, trans, lower), (a, 2), out_shape=batch + (n, 2)
    )
    _close(L.solve_triangular(a, b1, trans, lower), want)


def test_solve_triangular_complex_conjugate_transpose():
    rng = np.random.default_rng(0)
    a = _general(rng, (3, 3)) + 1j * rng.standard_normal((3, 3))
    b = rng.standard_normal(3) + 1j * rng.standard_normal(3)
    for trans in (0, 1, 2):
        _close(L.solve_triangular(a, b, trans=trans), sl.solve_triangular(a, b, trans=trans))
    _close(L.cholesky(a @ a.conj().T), sl.cholesky(a @ a.conj().T))


@settings(deadline=None, max_examples=20)
@given(st.sampled_from(["gen", "sym", "her", "pos"]), st.data())
def test_solve_inv_det_against_numpy(assume_a, data):
    rng, batch, n = _draw(data)
    a = _spd(rng, batch + (n, n))
    b = rng.standard_normal(batch + (n, 2))
    _close(L.solve(a, b, assume_a=assume_a), np.linalg.solve(a, b))
    v = rng.standard_normal(n)  # one vector: numpy's rule for 'gen', as JAX's
    if assume_a != "pos" or not batch:
        _close(L.solve(a, v, assume_a=assume_a), np.linalg.solve(a, v[..., None])[..., 0])
    _close(L.inv(a), np.linalg.inv(a) if a.size else a)
    _close(L.det(a), np.linalg.det(a) if a.size else np.ones(batch), rtol=1e-9)


# ---- LU ------------------------------------------------------------------------------------------


@settings(deadline=None, max_examples=20)
@given(st.sampled_from([0, 1, 2]), st.data())
def test_lu_lu_factor_lu_solve_against_scipy(trans, data):
    rng, batch, n = _draw(data)
    a = rng.standard_normal(batch + (n, n))  # pivoting happens
    p, l_, u = L.lu(a)
    want = [_each(lambda x, i=i: sl.lu(x)[i], (a, 2), out_shape=a.shape) for i in range(3)]
    for got, w in zip((p, l_, u), want, strict=True):
        _close(got, w)
    pl, u2 = L.lu(a, permute_l=True)
    _close(pl, want[0] @ want[1])
    _close(u2, want[2])
    lu_, piv = L.lu_factor(a)
    _close(lu_, _each(lambda x: sl.lu_factor(x)[0], (a, 2), out_shape=a.shape))
    np.testing.assert_array_equal(
        piv, _each(lambda x: sl.lu_factor(x)[1], (a, 2), out_shape=batch + (n,))
    )
    assert np.asarray(piv).dtype == np.int32
    op = a if trans == 0 else np.swapaxes(a, -1, -2)
    for b in (rng.standard_normal(batch + (n,)), rng.standard_normal(batch + (n, 3))):
        bm = b[..., None] if b.ndim == a.ndim - 1 else b
        want = np.linalg.solve(op, bm) if a.size else bm
        want = want[..., 0] if b.ndim == a.ndim - 1 else want
        _close(L.lu_solve((lu_, piv), b, trans=trans), want, rtol=1e-8)


def test_lu_and_lu_solve_complex():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 4)) + 1j * rng.standard_normal((4, 4))
    b = rng.standard_normal((4, 2)) + 1j * rng.standard_normal((4, 2))
    p, l_, u = L.lu(a)
    want = sl.lu(a)
    assert np.asarray(p).dtype == want[0].dtype == np.float64  # real, as SciPy's and JAX's
    for got, w in zip((p, l_, u), want, strict=True):
        _close(got, w)
    _close(L.lu(a, permute_l=True)[0], want[0] @ want[1])
    f = L.lu_factor(a)
    for trans in (0, 1, 2):
        _close(L.lu_solve(f, b, trans), sl.lu_solve(sl.lu_factor(a), b, trans), rtol=1e-9)


@settings(deadline=None, max_examples=25)
@given(st.integers(0, 5), st.integers(0, 5), st.booleans(), st.data())
def test_lu_and_lu_factor_of_rectangular_matrices_against_scipy(m, n, complex_, data):
    """JAX's shapes: p (m, m), l (m, k), u (k, n), lu (m, n), piv (k,), k = min(m, n)."""
    rng, batch, _ = _draw(data)
    a = rng.standard_normal(batch + (m, n))
    if complex_:
        a = a + 1j * rng.standard_normal(a.shape)
    k = min(m, n)
    p, l_, u = L.lu(a)
    assert np.asarray(p).dtype == np.float64
    shapes = (batch + (m, m), batch + (m, k), batch + (k, n))
    for i, (got, shp) in enumerate(zip((p, l_, u), shapes, strict=True)):
        if m and n:  # (SciPy gives p (0, 0) for an (m, 0) matrix; JAX's p is (m, m))
            _close(got, _each(lambda x, i=i: sl.lu(x)[i], (a, 2), out_shape=shp))
        assert np.shape(got) == shp
    _close(np.asarray(p) @ np.asarray(l_) @ np.asarray(u), a)
    _close(L.lu(a, permute_l=True)[0], np.asarray(p) @ np.asarray(l_))
    lu_, piv = L.lu_factor(a)
    assert np.shape(piv) == batch + (k,) and np.asarray(piv).dtype == np.int32
    if m and n:
        _close(lu_, _each(lambda x: sl.lu_factor(x)[0], (a, 2), out_shape=batch + (m, n)))
        want_piv = _each(lambda x: sl.lu_factor(x)[1], (a, 2), out_shape=batch + (k,))
        np.testing.assert_array_equal(piv, want_piv)


def test_rectangular_lu_derivatives_against_finite_differences():
    rng = np.random.default_rng(5)
    for shape in ((4, 2), (2, 4), (3, 1), (1, 3)):
        x = rng.standard_normal(shape)
        check_grads(lambda x: L.lu(x)[1:], [x], order=2)
        check_grads(lambda x: L.lu_factor(x)[0], [x])
    x = rng.standard_normal((2, 3, 5))  # batched, under jit
    check_grads(blu.jit(lambda x: L.lu(x, permute_l=True)), [x])


# ---- eigh, qr, svd, polar ------------------------------------------------------------------------


@settings(deadline=None, max_examples=20)
@given(st.data())
def test_eigh_qr_svd_against_scipy(data):
    rng, batch, n = _draw(data)
    a = _spd(rng, batch + (n, n))
    w, v = L.eigh(a)
    _close(w, np.linalg.eigvalsh(a) if a.size else np.zeros(batch + (n,)))
    _close(np.asarray(a) @ v, np.asarray(v) * np.asarray(w)[..., None, :], rtol=1e-9)
    _close(L.eigh(a, eigvals_only=True), w)
    _close(L.eigh(a, lower=False)[0], w)
    m = data.draw(st.integers(1, 4))
    x = rng.standard_normal(batch + (m, n))
    k = min(m, n)
    for mode, qshape, rshape in (("full", (m, m), (m, n)), ("economic", (m, k), (k, n))):
        q, r = L.qr(x, mode=mode)
        assert q.shape == batch + qshape and r.shape == batch + rshape
        _close(np.asarray(q) @ r, x)
        _close(
            np.swapaxes(q, -1, -2) @ np.asarray(q),
            np.broadcast_to(np.eye(qshape[1]), q.shape[:-2] + (qshape[1],) * 2),
        )
        _close(np.tril(r, -1), np.zeros(r.shape))
    (r_only,) = L.qr(x, mode="r")
    _close(r_only, L.qr(x)[1])
    u, s, vh = L.svd(x)
    _close(s, _each(lambda y: sl.svdvals(y), (x, 2), out_shape=batch + (k,)))
    assert u.shape == batch + (m, m) and vh.shape == batch + (n, n)
    u, s, vh = L.svd(x, full_matrices=False)
    _close((np.asarray(u) * np.asarray(s)[..., None, :]) @ vh, x)
    _close(L.svd(x, compute_uv=False), s)


@settings(deadline=None, max_examples=20)
@given(st.sampled_from(["right", "left"]), st.sampled_from(["qdwh", "svd"]), st.data())
def test_polar_against_scipy(side, method, data):
    rng, batch, n = _draw(data)
    m = data.draw(st.integers(n, 4))  # m >= n: full column rank, a unique unitary factor
    a = rng.standard_normal(batch + (m, n))
    u, p = L.polar(a, side, method=method)
    want_u = _each(lambda x: sl.polar(x, side)[0], (a, 2), out_shape=a.shape)
    pn = n if side == "right" else m
    want_p = _each(lambda x: sl.polar(x, side)[1], (a, 2), out_shape=batch + (pn, pn))
    _close(u, want_u, rtol=1e-8)
    _close(p, want_p, rtol=1e-8)


@settings(deadline=None, max_examples=30)
@given(st.integers(1, 4), st.integers(1, 4), st.sampled_from(["left", "right"]), st.booleans(),
       st.booleans(), st.data())  # fmt: skip
def test_qr_multiply_against_scipy(m, n, mode, conjugate, complex_, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    k = min(m, n)
    vector = data.draw(st.booleans())  # c (k,) or (m,): one vector, unbatched (JAX ravels)
    batch = () if vector else data.draw(st.sampled_from(BATCHES))
    a = rng.standard_normal(batch + (m, n))
    if complex_:
        a = a + 1j * rng.standard_normal(a.shape)
    core = ((k,) if mode == "left" else (m,)) if vector else (k, 2) if mode == "left" else (2, m)
    c = rng.standard_normal(batch + core)
    cq, r = L.qr_multiply(a, c, mode, conjugate=conjugate)
    out = ((m,) if mode == "left" else (k,)) if vector else (m, 2) if mode == "left" else (2, k)
    count = int(np.prod(batch))
    got = np.reshape(np.asarray(cq), (count,) + out), np.reshape(np.asarray(r), (count, k, n))
    for i, (x, ci) in enumerate(
        zip(np.reshape(a, (count, m, n)), np.reshape(c, (count,) + core), strict=True)
    ):
        want = sl.qr_multiply(x, ci, mode, conjugate=conjugate)
        _close(got[0][i], want[0])
        _close(got[1][i], want[1])
    assert np.shape(cq) == batch + out and np.shape(r) == batch + (k, n)
    assert [np.shape(x) for x in L.qr_multiply(np.ones((0, 3)), np.ones((2, 0)))] == [
        (2, 0),
        (0, 3),
    ]


# ---- expm ----------------------------------------------------------------------------------------


@settings(deadline=None, max_examples=25)
@given(st.sampled_from([1e-3, 0.05, 0.3, 1.0, 3.0, 20.0, 80.0]), st.data())
def test_expm_against_scipy(scale, data):
    """Norms across every Padé degree's bound (Higham 2005's theta_3 .. theta_13) and scaling."""
    rng, batch, n = _draw(data)
    a = rng.standard_normal(batch + (n, n))
    a = a * scale / max(np.abs(a).sum(-2).max(), 1e-300) if a.size else a
    want = _each(sl.expm, (a, 2), out_shape=a.shape)
    _close(L.expm(a), want, rtol=1e-12 * max(1.0, scale), atol=1e-12 * np.abs(want).max(initial=1))
    got32 = L.expm(a.astype(np.float32))
    assert np.asarray(got32).dtype == np.float32
    _close(got32, want, rtol=2e-5 * max(1.0, scale), atol=2e-5 * np.abs(want).max(initial=1))
    ut = np.triu(a)
    _close(L.expm(ut, upper_triangular=True), _each(sl.expm, (ut, 2), out_shape=a.shape),
           rtol=1e-12 * max(1.0, scale), atol=1e-12 * np.abs(want).max(initial=1))  # fmt: skip


def test_expm_closed_forms_complex_and_max_squarings():
    t = 0.7
    rot = np.array([[0.0, -t], [t, 0.0]])  # exp is the rotation by t
    _close(L.expm(rot), [[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]], rtol=1e-15)
    _close(L.expm(np.diag([1.0, -2.0, 40.0])), np.diag(np.exp([1.0, -2.0, 40.0])), rtol=1e-13)
    z = np.array([[1j, 2.0], [0.5, -1j]])
    _close(L.expm(z), sl.expm(z), rtol=1e-13)
    # ||A||_1 = 200 needs ceil(log2(200 / 5.37)) = 6 squarings in float64
    big = np.diag([200.0, 1.0])
    assert np.all(np.isnan(np.asarray(L.expm(big, max_squarings=5))))
    _close(L.expm(big * 1e-2, max_squarings=0), np.diag(np.exp([2.0, 0.01])), rtol=1e-13)
    _close(L.expm(np.zeros((1, 0, 0))), np.zeros((1, 0, 0)))


@settings(deadline=None, max_examples=20)
@given(st.sampled_from([0.1, 1.0, 8.0]), st.data())
def test_expm_frechet_against_scipy(scale, data):
    rng, batch, n = _draw(data)
    a = scale * rng.standard_normal(batch + (n, n))
    e = rng.standard_normal(batch + (n, n))
    got_expm, got = L.expm_frechet(a, e)
    for i in range(2):  # expm(a), then L(a, e)
        want = _each(lambda x, y, i=i: sl.expm_frechet(x, y)[i], (a, 2), (e, 2), out_shape=a.shape)
        _close(
            (got_expm, got)[i], want, rtol=1e-9, atol=1e-9 * max(1.0, np.abs(want).max(initial=0))
        )
    _close(L.expm_frechet(a, e, compute_expm=False), np.asarray(got))


@pytest.mark.parametrize("seed", range(3))
def test_expm_frechet_derivatives_against_finite_differences(seed):
    # differentiable: expm's second derivative (at fixed 3 x 3 points: in the hypothesis test
    # above it ran once per drawn example, on the same shape)
    x, e3 = np.random.default_rng(seed).standard_normal((2, 3, 3))
    check_grads(lambda x, y: L.expm_frechet(x, y, compute_expm=False), [x, e3])


@settings(deadline=None, max_examples=20)
@given(st.integers(0, 6), st.booleans(), st.data())
def test_eigh_tridiagonal_against_scipy(n, select_i, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    batch = data.draw(st.sampled_from(BATCHES[:3]))
    d, e = rng.standard_normal(batch + (n,)), rng.standard_normal(batch + (max(n - 1, 0),))
    lo, hi = 0, n - 1
    if n and select_i:
        lo, hi = sorted(data.draw(st.integers(0, n - 1)) for _ in range(2))
    kw = {"select": "i", "select_range": (lo, hi)} if n and select_i else {}
    w, v = L.eigh_tridiagonal(d, e, **kw)
    k = hi - lo + 1
    assert np.shape(w) == batch + (k,) and np.shape(v) == batch + (n, k)
    _close(L.eigh_tridiagonal(d, e, eigvals_only=True, **kw), np.asarray(w))
    count = int(np.prod(batch))
    for di, ei, wi, vi in zip(
        *(np.reshape(x, (count,) + np.shape(x)[len(batch) :]) for x in (d, e, w, v)), strict=True
    ):
        if n:
            want = sl.eigh_tridiagonal(di, ei, eigvals_only=True, **kw)
            _close(wi, want, atol=1e-12)
        t = np.diag(di) + np.diag(ei, 1) + np.diag(ei, -1)
        _close(t @ vi, vi * wi, atol=1e-12)
        _close(vi.T @ vi, np.eye(k), atol=1e-12)
    d, e = rng.standard_normal(4), rng.standard_normal(3)  # eigenvalues: eigh's derivatives
    check_grads(lambda d, e: L.eigh_tridiagonal(d, e, eigvals_only=True), [d, e], order=2)


# ---- special matrices ----------------------------------------------------------------------------


@settings(deadline=None, max_examples=20)
@given(st.lists(st.sampled_from([(), (2,), (1, 1), (2, 3), (3, 1), (0, 2), (2, 0)]), max_size=4),
       st.sampled_from([np.float64, np.int32, np.float32]))  # fmt: skip
def test_block_diag_against_scipy(shapes, dtype):
    rng = np.random.default_rng(len(shapes))
    arrs = [(rng.standard_normal(s) * 10).astype(dtype) for s in shapes]
    got = L.block_diag(*arrs)
    want = sl.block_diag(*arrs)
    np.testing.assert_array_equal(got, want)
    assert np.asarray(got).dtype == (want.dtype if shapes else np.float32)


@settings(deadline=None, max_examples=20)
@given(st.integers(0, 4), st.integers(0, 4), st.sampled_from([(), (1,), (3,)]), st.booleans())
def test_toeplitz_against_scipy(m, n, batch, with_r):
    rng = np.random.default_rng(m * 5 + n)
    c = rng.integers(-9, 9, batch + (max(m, 1),))
    r = rng.standard_normal(batch + (n,)) if with_r else None
    got = L.toeplitz(c, r)
    if with_r:
        want = _each(lambda x, y: sl.toeplitz(x, y), (c, 1), (r, 1), out_shape=got.shape)
    else:
        want = _each(lambda x: sl.toeplitz(x), (c, 1), out_shape=got.shape)
        assert np.asarray(got).dtype == c.dtype  # integers stay integers, as JAX's
    _close(got, want, rtol=0)
    z = np.array([1.0, 2j, 3 - 1j])  # r defaults to conj(c): Hermitian
    _close(L.toeplitz(z), sl.toeplitz(z), rtol=0)


def test_hilbert_against_scipy():
    for n in (0, 1, 5):
        got = L.hilbert(n)
        assert np.asarray(got).dtype == np.float32
        _close(got, sl.hilbert(n), rtol=1e-7)


# ---- promotion, derivatives, transforms, errors -------------------------------------------------


def test_integer_input_is_promoted_to_float32_and_float32_is_kept():
    i = np.array([[4, 1], [1, 3]], np.int32)
    f32 = i.astype(np.float32)
    for f in (L.cholesky, L.inv, L.det, L.expm, lambda a: L.lu(a)[2], lambda a: L.eigh(a)[0],
              lambda a: L.qr(a)[1], lambda a: L.svd(a)[1], lambda a: L.polar(a)[1],
              lambda a: L.solve(a, np.array([1, 2])), lambda a: L.lu_factor(a)[0],
              lambda a: L.solve_triangular(a, np.array([1, 2])),
              lambda a: L.cho_solve(L.cho_factor(a), np.array([1, 2]))):  # fmt: skip
        assert np.asarray(f(i)).dtype == np.float32
        assert np.asarray(f(f32)).dtype == np.float32
        _close(f(i), f(i.astype(np.float64)), rtol=1e-5)


def _sym(x):
    n = x.shape[-1]
    return x @ x.T + n * np.eye(n) if isinstance(x, np.ndarray) else x @ x.T + n * bnp.eye(n)


def test_derivatives_against_finite_differences():
    rng = np.random.default_rng(3)
    x, b = rng.standard_normal((3, 3)), rng.standard_normal((3, 2))
    check_grads(lambda x: L.cholesky(_sym(x)), [x], order=2)
    check_grads(lambda x: L.cholesky(_sym(x), lower=True), [x])
    check_grads(lambda x, b: L.solve(_sym(x), b, assume_a="pos"), [x, b], order=2)
    check_grads(lambda x, b: L.solve(x + 3 * bnp.eye(3), b), [x, b])
    check_grads(lambda x, b: L.cho_solve(L.cho_factor(_sym(x)), b), [x, b])
    check_grads(lambda x, b: L.solve_triangular(x + 3 * bnp.eye(3), b, trans=1), [x, b])
    check_grads(lambda x, b: L.lu_solve(L.lu_factor(x + 3 * bnp.eye(3)), b, trans=1), [x, b])
    check_grads(lambda x: L.det(x), [x])
    for scale in (0.02, 0.5, 2.0, 12.0):  # Padé degrees 3 .. 13, with and without squaring
        check_grads(lambda x, s=scale: L.expm(s * x), [x / np.abs(x).sum(0).max()], order=2)
    check_grads(lambda x: L.polar(x + 3 * bnp.eye(3))[1], [x])


def test_pos_solve_derivative_is_that_of_the_full_matrix():
    """JAX's ``custom_linear_solve``: ``dx = -a^-1 da x`` also for a non-symmetric ``da``."""
    rng = np.random.default_rng(4)
    a, b = _spd(rng, (3, 3)), rng.standard_normal(3)
    da = rng.standard_normal((3, 3))
    _, t = blu.jvp(lambda a: L.solve(a, b, assume_a="pos"), (a,), (da,))
    x = np.linalg.solve(a, b)
    _close(t, -np.linalg.solve(a, da @ x))


def test_jit_and_vmap_agree_with_eager():
    rng = np.random.default_rng(5)
    a, b = _spd(rng, (3, 4, 4)), rng.standard_normal((3, 4))
    fns = {
        "cholesky": lambda a, b: L.cholesky(a),
        "cho_solve": lambda a, b: L.cho_solve(L.cho_factor(a, lower=True), b),
        "solve_triangular": lambda a, b: L.solve_triangular(a, b, trans="C", lower=True),
        "solve": lambda a, b: L.solve(a, b[:, None], assume_a="pos"),
        "lu": lambda a, b: L.lu(a),
        "lu_solve": lambda a, b: L.lu_solve(L.lu_factor(a), b, trans=1),
        "inv": lambda a, b: L.inv(a),
        "det": lambda a, b: L.det(a),
        "eigh": lambda a, b: L.eigh(a, eigvals_only=True),
        "qr": lambda a, b: L.qr(a),
        "svd": lambda a, b: L.svd(a, compute_uv=False),
        "polar": lambda a, b: L.polar(a, "left"),
        "expm": lambda a, b: L.expm(a / 4),
        "toeplitz": lambda a, b: L.toeplitz(b, a[0]),
        "block_diag": lambda a, b: L.block_diag(a, b),
    }
    for name, f in fns.items():
        eager = [f(a[i], b[i]) for i in range(3)]
        for i in range(3):
            got = blu.jit(f)(a[i], b[i])
            for g, e in zip(
                blu.tree_util.tree_leaves(got), blu.tree_util.tree_leaves(eager[i]), strict=True
            ):
                _close(g, e, rtol=1e-12)
        got = blu.vmap(f)(a, b)
        for j, leaf in enumerate(blu.tree_util.tree_leaves(got)):
            want = np.stack([np.asarray(blu.tree_util.tree_leaves(e)[j]) for e in eager])
            _close(leaf, want, rtol=1e-12)
        assert name


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: L.cholesky(np.ones((3, 4))), BluShapeError, r"cholesky.*f64\[3,4\]"),
        (lambda: L.cholesky(np.ones(3)), BluShapeError, r"cholesky.*f64\[3\]"),
        (lambda: L.expm(np.ones((2, 3))), BluShapeError, r"expm.*f64\[2,3\]"),
        (lambda: L.expm(np.eye(2, dtype=np.float16)), BluTypeError, "float16"),
        (lambda: L.cho_solve((np.eye(3), False), np.ones(4)), BluShapeError, r"f64\[4\]"),
        (lambda: L.solve(np.eye(3), np.ones((3, 3, 3, 1)), assume_a="pos"), BluShapeError, "b f64"),
        (lambda: L.solve(np.eye(3), np.ones(4)), BluShapeError, "solve"),
        (lambda: L.solve(np.eye(2), np.ones(2), assume_a="diagonal"), BluValueError, "assume_a"),
        (lambda: L.solve_triangular(np.eye(3), np.ones((2, 3))), BluShapeError, r"f64\[2,3\]"),
        (lambda: L.solve_triangular(np.eye(2), np.ones(2), trans=3), BluValueError, "trans"),
        (
            lambda: L.solve_triangular(np.ones((2, 2, 2)), np.ones((3, 2, 1))),
            BluShapeError,
            "broadcast",
        ),
        (lambda: L.lu(np.ones(3)), BluShapeError, r"lu.*f64\[3\]"),
        (lambda: L.expm_frechet(np.eye(2), np.eye(3)), BluShapeError, r"f64\[2,2\].*f64\[3,3\]"),
        (lambda: L.expm_frechet(np.ones((2, 3)), np.ones((2, 3))), BluShapeError, r"f64\[2,3\]"),
        (lambda: L.eigh_tridiagonal(np.ones(3), np.ones(3)), BluShapeError, r"f64\[3\]"),
        (lambda: L.eigh_tridiagonal(np.ones(3), np.ones(2), select="v"), BluValueError, "'v'"),
        (
            lambda: L.eigh_tridiagonal(np.ones(3), np.ones(2), select="i", select_range=(2, 3)),
            BluValueError,
            "select_range",
        ),
        (lambda: L.lu_factor(np.ones(3)), BluShapeError, r"lu_factor.*f64\[3\]"),
        (lambda: L.lu_solve(L.lu_factor(np.ones((3, 2))), np.ones(3)), BluShapeError, "lu_solve"),
        (lambda: L.lu_solve((np.eye(3), np.zeros(2, np.int32)), np.ones(3)), BluShapeError, "piv"),
        (lambda: L.lu_solve(L.lu_factor(np.eye(2)), np.ones(2), trans="X"), BluValueError, "trans"),
        (lambda: L.eigh(np.eye(2), np.eye(2)), BluValueError, "b=None"),
        (lambda: L.eigh(np.eye(2), type=2), BluValueError, "type"),
        (lambda: L.qr(np.eye(2), mode="raw"), BluValueError, "mode"),
        (lambda: L.qr(np.ones(2)), BluShapeError, r"qr.*f64\[2\]"),
        (
            lambda: L.qr_multiply(np.ones((3, 2)), np.ones((2, 2))),
            BluShapeError,
            r"\(\.\.\., p, 3\)",
        ),
        (lambda: L.qr_multiply(np.ones((3, 2)), np.ones(3), "up"), BluValueError, "mode"),
        (lambda: L.svd(np.eye(2), lapack_driver="x"), BluValueError, "lapack_driver"),
        (lambda: L.polar(np.eye(2), "up"), BluValueError, "side"),
        (lambda: L.polar(np.eye(2), method="newton"), BluValueError, "method"),
        (lambda: L.block_diag(np.ones((1, 1, 1))), BluShapeError, r"f64\[1,1,1\] at argument 0"),
        (lambda: L.toeplitz(np.ones((2, 3)), np.ones((3, 3))), BluShapeError, "broadcast"),
        (lambda: L.hilbert(2.5), BluTypeError, "int"),
        (lambda: L.hilbert(-1), BluValueError, ">= 0"),
    ],
)
def test_bad_input_raises_blu_errors_naming_shapes(call, error, match):
    with pytest.raises(error, match=match):
        call()
