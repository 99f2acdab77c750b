"""blu.scipy.linalg's Hessenberg and Schur decompositions and what is built on them (sqrtm,
funm, solve_sylvester), against scipy.linalg in float64: the Hessenberg form entry by entry
(LAPACK's reflectors); the Schur forms, which are not unique, by their defining properties
(``A = Z T Z^H``, ``Z`` unitary, ``T`` (quasi-)triangular, standardized ``2 x 2`` blocks) and
their eigenvalues against scipy's; over sizes 0 to 6, batches, and special matrices (diagonal,
triangular, nilpotent, repeated eigenvalues)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sl
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu.core.errors import BluShapeError, BluValueError
from blu.scipy import linalg as L
from tests.helpers import check_grads

BATCHES = [(), (1,), (3,), (2, 1), (0,)]


def _flat(x, n):
    x = np.asarray(x)
    return np.reshape(x, (int(np.prod(x.shape[:-2])), n, n))


def _matrix(rng, kind, n, complex_):
    a = rng.standard_normal((n, n))
    if complex_:
        a = a + 1j * rng.standard_normal((n, n))
    q, _ = np.linalg.qr(a)  # unitary, complex with a
    if kind == "diagonal":
        return np.diag(np.diag(a))
    if kind == "upper":
        return np.triu(a)
    if kind == "lower":
        return np.tril(a)
    if kind == "nilpotent":  # a Jordan block of 0, conjugated: all eigenvalues 0
        return q @ np.eye(n, k=1) @ q.conj().T
    if kind == "repeated":  # eigenvalues 1, 1, 2, 2, ...
        return q @ np.diag(np.arange(n) // 2 + 1.0) @ q.conj().T
    return a


def _eig_distance(got, want):
    """The largest distance from an eigenvalue in ``want`` to the nearest in ``got`` and back."""
    if not len(want):
        return 0.0
    d = np.abs(np.asarray(got)[:, None] - np.asarray(want)[None, :])
    return max(d.min(axis=0).max(), d.min(axis=1).max())


def _check_schur(a, T, Z, complex_form):
    n = a.shape[-1]
    T, Z = np.asarray(T), np.asarray(Z)
    assert T.shape == Z.shape == a.shape
    scale = max(1.0, np.abs(a).max(initial=0.0))
    tol = 1e-12 * max(n, 1) * scale
    np.testing.assert_allclose(Z @ T @ Z.conj().T, a, atol=tol)
    np.testing.assert_allclose(Z.conj().T @ Z, np.eye(n), atol=1e-12 * max(n, 1))
    if complex_form:
        assert np.all(np.tril(T, -1) == 0)
    else:
        assert np.all(np.tril(T, -2) == 0)
        sub = np.diag(T, -1)
        assert not np.any((sub[:-1] != 0) & (sub[1:] != 0))  # 2 x 2 blocks only
        for p in np.flatnonzero(sub):  # standardized: equal diagonal, b c < 0
            assert abs(T[p, p] - T[p + 1, p + 1]) <= tol
            assert T[p, p + 1] * T[p + 1, p] < 0
    return np.linalg.eigvals(T) if n else np.zeros(0)


@settings(deadline=None, max_examples=30)
@given(st.integers(0, 6), st.booleans(), st.sampled_from(BATCHES), st.data())
def test_hessenberg_against_scipy(n, complex_, batch, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    a = rng.standard_normal(batch + (n, n))
    if complex_:
        a = a + 1j * rng.standard_normal(a.shape)
    H, Q = L.hessenberg(a, calc_q=True)
    assert np.shape(H) == np.shape(Q) == a.shape
    np.testing.assert_allclose(L.hessenberg(a), H, rtol=0, atol=0)
    for x, h, q in zip(_flat(a, n), _flat(H, n), _flat(Q, n), strict=True):
        np.testing.assert_allclose(q @ h @ q.conj().T, x, atol=1e-12 * n)
        np.testing.assert_allclose(q.conj().T @ q, np.eye(n), atol=1e-12 * n)
        assert np.all(np.tril(h, -2) == 0) and np.all(np.imag(np.diag(h, -1)) == 0)
        if n >= 3 or not complex_:  # (SciPy returns a complex 2 x 2 as it is; LAPACK's
            hw, qw = sl.hessenberg(x, calc_q=True)  # reflector makes its subdiagonal real)
            np.testing.assert_allclose(h, hw, atol=1e-12 * n)
            np.testing.assert_allclose(q, qw, atol=1e-12 * n)


@settings(deadline=None, max_examples=60)
@given(
    st.integers(0, 6),
    st.sampled_from(["random", "diagonal", "upper", "lower", "nilpotent", "repeated"]),
    st.sampled_from(["real", "complex"]),
    st.booleans(),
    st.data(),
)
def test_schur_against_scipy_eigenvalues(n, kind, output, complex_input, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    a = _matrix(rng, kind, n, complex_input)
    T, Z = L.schur(a, output=output)
    complex_form = output == "complex" or complex_input
    assert np.asarray(T).dtype == (np.complex128 if complex_form else np.float64)
    ev = _check_schur(a, T, Z, complex_form)
    want = sl.eigvals(a) if n else np.zeros(0)
    # a nilpotent Jordan block's eigenvalues move by eps^(1/n) under rounding (scipy's too)
    tol = 10 * (1e-16 ** (1 / n)) if kind == "nilpotent" and n else 1e-10
    assert _eig_distance(ev, want) <= tol
    if kind in ("diagonal", "upper") and not complex_input:  # already in Schur form
        np.testing.assert_array_equal(T, a)
        np.testing.assert_array_equal(Z, np.eye(n))


def test_schur_batches_jit_and_vmap():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 3, 5, 5))
    T, Z = L.schur(a)
    for x, t, z in zip(_flat(a, 5), _flat(T, 5), _flat(Z, 5), strict=True):
        _check_schur(x, t, z, False)
        T1, Z1 = blu.jit(L.schur)(x)
        np.testing.assert_allclose(T1, t, atol=1e-12)
        np.testing.assert_allclose(Z1, z, atol=1e-12)
    Tv, _ = blu.vmap(lambda x: L.schur(x, "complex"))(a[0])
    for x, t in zip(a[0], np.asarray(Tv), strict=True):
        np.testing.assert_allclose(t, np.asarray(L.schur(x, "complex")[0]), atol=1e-12)
    assert L.schur(np.zeros((4, 0, 0)))[0].shape == (4, 0, 0)


def test_schur_promotes_integers_and_keeps_float32():
    a = np.array([[1, 2, 0], [3, 4, 1], [0, 1, 5]])
    T, Z = L.schur(a)
    assert np.asarray(T).dtype == np.float32 and np.asarray(Z).dtype == np.float32
    np.testing.assert_allclose(np.asarray(Z) @ np.asarray(T) @ np.asarray(Z).T, a, atol=1e-5)
    assert L.schur(a.astype(np.float32), "complex")[0].dtype == np.complex64
    assert L.hessenberg(a).dtype == np.float32


@settings(deadline=None, max_examples=30)
@given(st.integers(0, 6), st.sampled_from(BATCHES), st.data())
def test_rsf2csf_against_scipy(n, batch, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    a = rng.standard_normal(batch + (n, n))
    Tr, Zr = _flat(a, n).copy(), np.zeros_like(_flat(a, n))
    for i, x in enumerate(_flat(a, n)):  # scipy's real Schur forms as the input
        Tr[i], Zr[i] = sl.schur(x)
    Tr, Zr = Tr.reshape(a.shape), Zr.reshape(a.shape)
    T, Z = L.rsf2csf(Tr, Zr)
    assert np.asarray(T).dtype == np.complex128 and np.shape(T) == a.shape
    for tr, zr, t, z in zip(_flat(Tr, n), _flat(Zr, n), _flat(T, n), _flat(Z, n), strict=True):
        tw, zw = sl.rsf2csf(tr, zr)
        np.testing.assert_allclose(t, tw, atol=1e-12 * max(n, 1))
        np.testing.assert_allclose(z, zw, atol=1e-12 * max(n, 1))
    # on blu's own real Schur form: a complex Schur decomposition of a
    T, Z = L.rsf2csf(*L.schur(a))
    for x, t, z in zip(_flat(a, n), _flat(T, n), _flat(Z, n), strict=True):
        _check_schur(x, t, z, True)


# ---- sqrtm, funm, solve_sylvester ----------------------------------------------------------------


@settings(deadline=None, max_examples=40)
@given(
    st.integers(0, 5),
    st.sampled_from(["random", "spd", "diagonal", "upper", "repeated"]),
    st.booleans(),
    st.sampled_from(BATCHES[:3]),
    st.data(),
)
def test_sqrtm_against_scipy(n, kind, complex_, batch, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    mats = []
    for _ in range(int(np.prod(batch))):
        a = _matrix(rng, "random" if kind == "spd" else kind, n, complex_)
        mats.append(a @ a.conj().T + np.eye(n) if kind == "spd" else a + (n + 1) * np.eye(n))
    a = np.reshape(np.array(mats), batch + (n, n))  # eigenvalues off the negative real axis
    got = L.sqrtm(a)
    assert np.asarray(got).dtype == np.complex128 and np.shape(got) == a.shape  # (JAX's)
    for x, s in zip(_flat(a, n), _flat(got, n), strict=True):
        if n:
            np.testing.assert_allclose(s, sl.sqrtm(x), atol=1e-10 * n)
        np.testing.assert_allclose(
            s @ s, x, atol=1e-10 * max(n, 1) * (1 + np.abs(x).max(initial=0))
        )
    assert L.sqrtm(np.eye(2, dtype=np.float32)).dtype == np.complex64


def test_sqrtm_closed_forms():
    np.testing.assert_allclose(L.sqrtm(np.diag([4.0, 9.0, 0.0])), np.diag([2.0, 3.0, 0.0]))
    # [[1, 1], [0, 1]] has the root [[1, 1/2], [0, 1]]; a rotation by 2t the rotation by t
    np.testing.assert_allclose(L.sqrtm(np.array([[1.0, 1.0], [0.0, 1.0]])), [[1, 0.5], [0, 1]])
    t = 0.7
    rot = lambda t: np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])  # noqa: E731
    np.testing.assert_allclose(L.sqrtm(rot(2 * t)), rot(t), atol=1e-14)


@settings(deadline=None, max_examples=30)
@given(st.integers(0, 5), st.sampled_from(["random", "diagonal", "upper"]), st.data())
def test_funm_against_scipy_and_closed_forms(n, kind, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    a = _matrix(rng, kind, n, False)
    a = np.stack([a, 0.5 * a])
    got = L.funm(a, blu.numpy.exp)
    assert np.asarray(got).dtype == np.complex128 and np.shape(got) == a.shape
    for x, f in zip(a, np.asarray(got), strict=True):
        np.testing.assert_allclose(f, sl.expm(x), atol=1e-9 * max(n, 1))
        if n:
            want = sl.funm(x, lambda z: np.sin(z) + 2 * np.cos(z))
            g = L.funm(x, lambda z: blu.numpy.sin(z) + 2 * blu.numpy.cos(z))
            np.testing.assert_allclose(g, want, atol=1e-9 * n)
    F, err = L.funm(a, blu.numpy.exp, disp=False)
    np.testing.assert_allclose(F, got)
    assert np.shape(err) == (2,) and np.all((np.asarray(err) > 0) & (np.asarray(err) <= 1))


@settings(deadline=None, max_examples=40)
@given(st.integers(0, 4), st.integers(0, 4), st.booleans(), st.sampled_from(BATCHES[:3]), st.data())
def test_solve_sylvester_against_scipy(m, n, complex_, batch, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    method = data.draw(st.sampled_from(["schur", "eigen"]), label="method")
    a = rng.standard_normal(batch + (m, m)) + 2 * np.eye(m)  # eig(a) + eig(b) away from 0
    b = rng.standard_normal(batch + (n, n)) + 2 * np.eye(n)
    c = rng.standard_normal(batch + (m, n))
    if complex_:
        c = c + 1j * rng.standard_normal(c.shape)
    x = L.solve_sylvester(a, b, c, method=method)
    assert np.asarray(x).dtype == c.dtype and np.shape(x) == c.shape
    count = int(np.prod(batch))
    flat = [np.reshape(v, (count,) + np.shape(v)[-2:]) for v in (a, b, c, np.asarray(x))]
    for ai, bi, ci, xi in zip(*flat, strict=True):
        want = np.zeros_like(ci)
        if m and n:  # (scipy's is wrong for a complex c beside real a, b: cast them)
            want = sl.solve_sylvester(ai.astype(ci.dtype), bi.astype(ci.dtype), ci)
        # 'eigen' loses digits to the eigenvector matrices' condition: relative to |X|
        scale = max(1.0, float(np.abs(want).max(initial=0)))
        atol = 1e-10 if method == "schur" else 1e-9 * scale
        np.testing.assert_allclose(ai @ xi + xi @ bi, ci, atol=atol)
        np.testing.assert_allclose(xi, want, atol=atol)


@pytest.mark.parametrize("method", ["schur", "eigen"])
def test_solve_sylvester_without_a_unique_solution_is_nan(method):
    # eig(a) = {1, 2}, eig(b) = {-2, 5}: 2 + (-2) = 0
    x = L.solve_sylvester(np.diag([1.0, 2.0]), np.diag([-2.0, 5.0]), np.ones((2, 2)), method=method)
    assert np.all(np.isnan(np.asarray(x)))


def test_solve_sylvester_eigen_in_float32_and_with_complex_eigenvalues():
    """'eigen' on real matrices with complex-conjugate eigenvalue pairs (complex eigenvectors,
    a real solution) in float64 and float32."""
    rng = np.random.default_rng(7)
    rot = np.array([[0.0, -3.0], [3.0, 0.0]])  # eigenvalues +-3i
    a = sl.block_diag(rot, 1.0) + 0.1 * rng.standard_normal((3, 3)) + 2 * np.eye(3)
    b = np.array([[1.0, 2.0], [-2.0, 1.0]])  # eigenvalues 1 +- 2i
    c = rng.standard_normal((3, 2))
    want = sl.solve_sylvester(a, b, c)
    for dt, tol in ((np.float64, 1e-12), (np.float32, 1e-5)):
        x = L.solve_sylvester(a.astype(dt), b.astype(dt), c.astype(dt), method="eigen")
        assert np.asarray(x).dtype == dt
        np.testing.assert_allclose(x, want, rtol=tol * 10, atol=tol * 10)


def test_hessenberg_derivatives_and_schur_functions_under_jit_and_vmap():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((4, 4))
    check_grads(lambda x: L.hessenberg(x, calc_q=True), [x])  # through the reduction's scan
    # rsf2csf (differentiable, as JAX's) along the real Schur pattern of scipy's form
    T, Z = sl.schur(x)
    assert np.any(np.diag(T, -1) != 0)  # a 2 x 2 block to rotate
    pattern = (T != 0) | (np.arange(4)[:, None] <= np.arange(4)[None, :])

    def parts(t, z):
        tc, zc = L.rsf2csf(t * pattern, z)
        return [f(v) for v in (tc, zc) for f in (blu.numpy.real, blu.numpy.imag)]

    check_grads(parts, [T, Z])
    a = rng.standard_normal((3, 4, 4)) + 5 * np.eye(4)
    b, c = rng.standard_normal((3, 2, 2)) + 5 * np.eye(2), rng.standard_normal((3, 4, 2))
    for f, args in (
        (L.sqrtm, (a,)),
        (lambda a: L.funm(a, blu.numpy.exp), (a,)),
        (L.solve_sylvester, (a, b, c)),
        (lambda a, b, c: L.solve_sylvester(a, b, c, method="eigen"), (a, b, c)),
        (lambda t, z: L.rsf2csf(t, z), (a, a)),
    ):
        eager = f(*args)
        for got in (blu.jit(f)(*args), blu.vmap(f)(*args)):
            for g, w in zip(
                blu.tree_util.tree_leaves(got), blu.tree_util.tree_leaves(eager), strict=True
            ):
                np.testing.assert_allclose(g, w, atol=1e-12)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: L.schur(np.ones((2, 3))), BluShapeError, r"schur.*f64\[2,3\]"),
        (lambda: L.schur(np.ones(3)), BluShapeError, r"schur.*f64\[3\]"),
        (lambda: L.schur(np.eye(2), output="quasi"), BluValueError, "output"),
        (lambda: L.hessenberg(np.ones((3, 2))), BluShapeError, r"hessenberg.*f64\[3,2\]"),
        (lambda: L.rsf2csf(np.eye(2), np.ones((2, 3))), BluShapeError, r"rsf2csf.*f64\[2,3\]"),
        (lambda: L.rsf2csf(np.eye(2), np.eye(3)), BluShapeError, r"f64\[2,2\].*f64\[3,3\]"),
        (lambda: L.sqrtm(np.ones((2, 3))), BluShapeError, r"sqrtm.*f64\[2,3\]"),
        (lambda: L.sqrtm(np.eye(2), blocksize=2), BluValueError, "blocksize"),
        (lambda: L.funm(np.ones(4), np.exp), BluShapeError, r"funm.*f64\[4\]"),
        (
            lambda: L.solve_sylvester(np.eye(2), np.eye(3), np.ones((3, 2))),
            BluShapeError,
            r"f64\[2,2\].*f64\[3,3\].*f64\[3,2\]",
        ),
        (
            lambda: L.solve_sylvester(np.eye(2), np.eye(2), np.eye(2), method="bartels"),
            BluValueError,
            "method",
        ),
    ],
)
def test_bad_input_raises_blu_errors_naming_shapes(call, error, match):
    with pytest.raises(error, match=match):
        call()
