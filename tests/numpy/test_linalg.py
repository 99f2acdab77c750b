"""blu.numpy.linalg and blu.lax.linalg against numpy/scipy float64 on random well-conditioned
batched matrices (batch dims of size 0 and 1 included), the documented degenerate behaviour and
the errors. Derivatives against central differences, vmap against per-slice loops and jit
against eager: ``test_linalg_transforms.py`` (on the inputs built here).

Well-conditioned inputs are built as ``Q1 diag(s) Q2^T`` with random orthogonal ``Q`` (from a
hypothesis-drawn seed) and hypothesis-drawn singular values ``s`` in [0.5, 2]; symmetric inputs
for eigen/singular-vector derivatives get well-separated spectra.
"""

import numpy as np
import pytest
import scipy.linalg
from helpers import arrays, check_grads, shapes
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from blu.lax import linalg as lax_linalg

LA = bnp.linalg


# ---- inputs ------------------------------------------------------------------------------------


def _orth(rng, shape):
    return np.linalg.qr(rng.standard_normal(shape))[0]


def _mT(x):
    return np.swapaxes(x, -1, -2)


@st.composite
def mats(draw, kind="general", m=None, n=None, batch=None, max_n=4):
    """Well-conditioned ``batch + (m, n)`` float64 matrices.

    kind: 'general' (singular values in [0.5, 2], random orthogonal factors), 'spd' (symmetric,
    eigenvalues in [0.5, 2]), 'distinct' (symmetric, eigenvalues of both signs at least 0.4
    apart), 'separated' (general with singular values at least 0.4 apart).
    """
    batch = draw(shapes(0, 2, 0, 3)) if batch is None else batch
    n = draw(st.integers(0, max_n)) if n is None else n
    m = n if m is None else m
    k = min(m, n)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind in ("distinct", "separated"):
        u = draw(arrays(batch + (k,), 0.0, 0.2))
        s = 0.5 + 0.6 * np.arange(k) + u
        if kind == "distinct":
            s = s - 0.6 * (k // 2)  # some negative eigenvalues
            s = rng.permuted(s, axis=-1) if s.size else s
    else:
        s = draw(arrays(batch + (k,), 0.5, 2.0))
    q1 = _orth(rng, batch + (m, m))[..., :k]
    if kind in ("spd", "distinct"):
        return q1 @ (s[..., :, None] * _mT(q1))
    q2 = _orth(rng, batch + (n, n))[..., :k]
    return q1 @ (s[..., :, None] * _mT(q2))


def _rand(draw, shape):
    return np.random.default_rng(draw(st.integers(0, 2**32 - 1))).standard_normal(shape)


def _close(got, want, rtol=1e-9, atol=1e-9):
    g = np.asarray(got, np.float64)
    assert g.shape == np.shape(want), (g.shape, np.shape(want))
    np.testing.assert_allclose(g, np.asarray(want, np.float64), rtol=rtol, atol=atol)


def _tri(a, lower, unit=False):
    t = np.tril(a) if lower else np.triu(a)
    if unit:
        t = t - t * np.eye(a.shape[-1]) + np.eye(a.shape[-1])
    return t


def _tri_operand(draw, batch, n):
    """A triangular-solve operand: random off-diagonal, diagonal in +-[0.5, 2] (well
    conditioned for n <= 4)."""
    a = 0.3 * _rand(draw, batch + (n, n))
    d = draw(arrays(batch + (n,), 0.5, 2.0)) * np.where(_rand(draw, batch + (n,)) < 0, -1, 1)
    return a - a * np.eye(n) + d[..., None] * np.eye(n)


# ---- values against numpy / scipy --------------------------------------------------------------


@given(st.data())
def test_cholesky_matches_numpy(data):
    a = data.draw(mats("spd"))
    want = np.linalg.cholesky(a)
    _close(LA.cholesky(a), want)
    _close(LA.cholesky(a, upper=True), _mT(want))
    _close(lax_linalg.cholesky(a), want)
    junk = _rand(data.draw, a.shape)
    _close(LA.cholesky(np.tril(a) + np.triu(junk, 1), symmetrize_input=False), want)


@given(st.data(), st.booleans())
def test_solve_inv_det_slogdet_match_numpy(data, vector):
    a = data.draw(mats())
    batch, n = a.shape[:-2], a.shape[-1]
    # b's batch dims broadcast against a's (size-1 or missing dims)
    b_batch = tuple(d if data.draw(st.booleans()) else 1 for d in batch)
    b_batch = b_batch[data.draw(st.integers(0, len(b_batch))) :]
    b = _rand(data.draw, (n,) if vector else b_batch + (n, data.draw(st.integers(0, 3))))
    _close(LA.solve(a, b), np.linalg.solve(a, b))
    _close(LA.inv(a), np.linalg.inv(a))
    _close(LA.det(a), np.linalg.det(a))
    sign, logdet = LA.slogdet(a)
    want_sign, want_logdet = np.linalg.slogdet(a)
    _close(sign, want_sign)
    _close(logdet, want_logdet)
    for method in ("lu", "qr"):  # JAX's method=
        sign, logdet = LA.slogdet(a, method=method)
        _close(sign, want_sign)
        _close(logdet, want_logdet)


def test_slogdet_method_checked():
    with pytest.raises(BluValueError, match="method"):
        LA.slogdet(np.eye(2), method="cholesky")


@given(st.data(), st.booleans(), st.sampled_from([0, 1, "T"]), st.booleans(), st.booleans())
def test_solve_triangular_matches_scipy(data, lower, trans, unit, vector):
    batch, n = data.draw(shapes(0, 2, 0, 3)), data.draw(st.integers(0, 4))
    a = _tri_operand(data.draw, batch, n)
    b = _rand(data.draw, (n,) if vector else batch + (n, 2))
    got = LA.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit)
    want = np.zeros(batch + b.shape[-1 if vector else -2 :])
    for i in np.ndindex(batch):
        want[i] = scipy.linalg.solve_triangular(
            a[i], b if vector else b[i], trans=trans, lower=lower, unit_diagonal=unit
        )
    _close(got, want)


@given(st.data(), st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_lax_triangular_solve_both_sides(data, left, lower, transpose_a, unit):
    batch, n = data.draw(shapes(0, 2, 0, 3)), data.draw(st.integers(0, 4))
    a = _tri_operand(data.draw, batch, n)
    k = data.draw(st.integers(0, 3))
    b = _rand(data.draw, batch + ((n, k) if left else (k, n)))
    op = _tri(a, lower, unit)
    op = _mT(op) if transpose_a else op
    # x = op^-1 b, or x = b op^-1 = (op^-T b^T)^T
    want = np.linalg.solve(op, b) if left else _mT(np.linalg.solve(_mT(op), _mT(b)))
    got = lax_linalg.triangular_solve(
        a, b, left_side=left, lower=lower, transpose_a=transpose_a, unit_diagonal=unit
    )
    _close(got, want)


@given(st.data())
def test_lu_matches_scipy(data):
    a = data.draw(mats())
    lu, piv, perm = lax_linalg.lu(a)
    assert piv.dtype == np.int32 and perm.dtype == np.int32
    lu, piv, perm = np.asarray(lu), np.asarray(piv), np.asarray(perm)
    n = a.shape[-1]
    for i in np.ndindex(a.shape[:-2]):
        want_lu, want_piv = scipy.linalg.lu_factor(a[i])
        _close(lu[i], want_lu)
        np.testing.assert_array_equal(piv[i], want_piv)
        L = np.tril(lu[i], -1) + np.eye(n)
        _close(L @ np.triu(lu[i]), a[i][perm[i]])


@given(st.data(), st.sampled_from(["reduced", "complete", "r"]))
def test_qr_matches_numpy(data, mode):
    m, n = data.draw(st.integers(0, 4)), data.draw(st.integers(0, 4))
    a = data.draw(mats(m=m, n=n))
    want = np.linalg.qr(a, mode=mode)
    got = LA.qr(a, mode=mode)
    if mode == "r":
        _close(got, want)
        return
    _close(got.Q, want.Q)
    _close(got.R, want.R)


@given(st.data())
def test_eigh_matches_numpy(data):
    a = data.draw(mats("distinct"))
    w, v = LA.eigh(a)
    want_w, want_v = np.linalg.eigh(a)
    _close(w, want_w)
    # eigenvectors are unique up to sign (the eigenvalues are distinct)
    _close(np.abs(np.asarray(v)), np.abs(want_v))
    _close(np.asarray(v) @ (want_w[..., :, None] * _mT(np.asarray(v))), a)
    _close(LA.eigvalsh(a), want_w)
    lw = lax_linalg.eigh(a)[1]
    _close(lw, want_w)
    # without symmetrizing, only the UPLO triangle is read (as numpy)
    junk = _rand(data.draw, a.shape)
    for uplo, keep in (("L", np.tril), ("U", np.triu)):
        x = keep(a) + (junk - keep(junk))
        _close(LA.eigvalsh(x, uplo, symmetrize_input=False), want_w)


@given(st.data(), st.booleans())
def test_svd_matches_numpy(data, full):
    m, n = data.draw(st.integers(0, 4)), data.draw(st.integers(0, 4))
    a = data.draw(mats("separated", m=m, n=n))
    u, s, vh = LA.svd(a, full_matrices=full)
    want_u, want_s, want_vh = np.linalg.svd(a, full_matrices=full)
    _close(s, want_s)
    assert np.shape(u) == want_u.shape and np.shape(vh) == want_vh.shape
    k = min(m, n)
    u, vh = np.asarray(u), np.asarray(vh)
    _close(u[..., :k] @ (want_s[..., :, None] * vh[..., :k, :]), a)
    _close(_mT(u) @ u, np.broadcast_to(np.eye(u.shape[-1]), _mT(u).shape[:-1] + (u.shape[-1],)))
    _close(LA.svd(a, compute_uv=False), want_s)
    _close(LA.svdvals(a), want_s)


@given(st.data(), st.booleans())
def test_lstsq_pinv_match_numpy(data, vector):
    m, n = data.draw(st.integers(0, 4)), data.draw(st.integers(0, 4))
    a = data.draw(mats(m=m, n=n))
    _close(LA.pinv(a), np.linalg.pinv(a))
    b = _rand(data.draw, (m,) if vector else a.shape[:-2] + (m, 2))
    x, resid, rank, s = LA.lstsq(a, b)
    for i in np.ndindex(a.shape[:-2]):
        bi = b if vector else b[i]
        want_x, want_resid, want_rank, want_s = np.linalg.lstsq(a[i], bi)
        _close(np.asarray(x)[i], want_x)
        assert int(np.asarray(rank)[i]) == want_rank
        _close(np.asarray(s)[i], want_s)
        if want_resid.size:  # numpy leaves it empty when m <= n; blu always computes it
            _close(np.asarray(resid)[i], want_resid)
        r = bi - a[i] @ want_x
        _close(np.asarray(resid)[i], np.sum(r * r, axis=0).reshape(-1), atol=1e-8)
    _close(LA.matrix_rank(a), np.linalg.matrix_rank(a) if a.size else np.zeros(a.shape[:-2]))


@pytest.mark.parametrize("shape,rank", [((5, 3), 3), ((5, 3), 2), ((3, 3), 3), ((2, 4), 2)])
@pytest.mark.parametrize("vector", [True, False])
def test_lstsq_numpy_resid(shape, rank, vector):
    # JAX's numpy_resid=True (blu had no such argument): numpy's residuals, empty when
    # rank < n or m <= n
    rng = np.random.default_rng(rank)
    m, n = shape
    a = rng.standard_normal((m, rank)) @ rng.standard_normal((rank, n))
    b = rng.standard_normal((m,) if vector else (m, 2))
    want = np.linalg.lstsq(a, b)
    got = LA.lstsq(a, b, numpy_resid=True)
    assert np.asarray(got[1]).shape == want[1].shape
    _close(got[1], want[1])
    _close(got[0], want[0])
    assert int(got[2]) == want[2]
    with pytest.raises(BluValueError, match="numpy_resid"):
        LA.lstsq(np.stack([a, a]), b if vector else np.stack([b, b]), numpy_resid=True)


def test_lstsq_and_pinv_rank_deficient():
    a = np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])
    b = np.array([1.0, 0.0, 2.0])
    x, _, rank, _ = LA.lstsq(a, b)
    want_x, _, want_rank, _ = np.linalg.lstsq(a, b)
    _close(x, want_x)
    assert int(rank) == want_rank == 1
    _close(LA.pinv(a), np.linalg.pinv(a))
    assert int(LA.matrix_rank(a)) == 1


@given(st.data(), st.integers(-3, 6))
def test_matrix_power_matches_numpy(data, p):
    a = data.draw(mats(max_n=3))
    _close(LA.matrix_power(a, p), np.linalg.matrix_power(a, p), rtol=1e-8)


VECTOR_ORDS = [None, 2, 1, 0, np.inf, -np.inf, 3, 0.5, -1]
MATRIX_ORDS = [None, "fro", "nuc", 2, -2, 1, -1, np.inf, -np.inf]


@given(st.data(), st.sampled_from(VECTOR_ORDS), st.booleans())
def test_vector_norm_matches_numpy(data, ord, keepdims):
    x = data.draw(arrays(data.draw(shapes(1, 3, 1, 4)), -3, 3))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    if ord is not None and ord <= 0 and ord != 0 and not np.all(x):
        x = x + 3.5 * (x == 0)  # numpy gives inf/0 at zeros for negative orders
    want = np.linalg.norm(x, ord, axis, keepdims)
    _close(LA.norm(x, ord, axis, keepdims), want)
    _close(LA.vector_norm(x, axis=axis, keepdims=keepdims, ord=2 if ord is None else ord), want)
    if x.ndim == 1:
        _close(LA.norm(x, ord), np.linalg.norm(x, ord))


@given(st.data(), st.sampled_from(MATRIX_ORDS), st.booleans())
def test_matrix_norm_matches_numpy(data, ord, keepdims):
    x = data.draw(arrays(data.draw(shapes(2, 4, 1, 4)), -3, 3))
    axes = data.draw(st.permutations(range(x.ndim)))[:2]
    axis = tuple(a - x.ndim if data.draw(st.booleans()) else a for a in axes)
    want = np.linalg.norm(x, ord, axis, keepdims)
    _close(LA.norm(x, ord, axis, keepdims), want)
    if x.ndim == 2:
        _close(LA.norm(x, ord), np.linalg.norm(x, ord))
    _close(
        LA.matrix_norm(x, ord="fro" if ord is None else ord),
        np.linalg.matrix_norm(x, ord="fro" if ord is None else ord),
    )
    _close(LA.norm(x), np.linalg.norm(x))


@given(st.data(), st.sampled_from([None, 2, -2, 1, np.inf, "fro"]))
def test_cond_matches_numpy(data, p):
    a = data.draw(mats(n=data.draw(st.integers(1, 4))))
    _close(LA.cond(a, p), np.linalg.cond(a, p))


@pytest.mark.parametrize("dt", [np.float32, bnp.bfloat16, np.float16])
def test_low_precision_dtypes(dt):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 3)) * 0.2 + 2 * np.eye(3)
    spd = a @ _mT(a)
    b = rng.standard_normal((2, 3, 2))
    tol = dict(rtol=1e-4, atol=1e-4) if dt == np.float32 else dict(rtol=5e-2, atol=5e-2)
    lo = lambda x: np.asarray(x, np.float64).astype(dt)  # noqa: E731
    a_, spd_, b_ = lo(a), lo(spd), lo(b)
    ref = lambda x: np.asarray(x, np.float64).astype(dt).astype(np.float64)  # noqa: E731
    for got, want in [
        (LA.cholesky(spd_), np.linalg.cholesky(ref(spd))),
        (LA.solve(a_, b_), np.linalg.solve(ref(a), ref(b))),
        (LA.det(a_), np.linalg.det(ref(a))),
        (LA.eigvalsh(spd_), np.linalg.eigvalsh(ref(spd))),
        (LA.svdvals(a_), np.linalg.svd(ref(a), compute_uv=False)),
        (LA.qr(a_).R, np.linalg.qr(ref(a)).R),
        (LA.norm(a_, 2, axis=(-2, -1)), np.linalg.norm(ref(a), 2, axis=(-2, -1))),
    ]:
        assert got.dtype == np.dtype(dt)
        _close(got, want, **tol)


def test_integer_input_becomes_float():
    a = np.array([[2, 1], [1, 3]], np.int32)
    got = LA.inv(a)
    assert bnp.issubdtype(got.dtype, bnp.floating)
    _close(got, np.linalg.inv(a), rtol=1e-6, atol=1e-6)
    _close(LA.norm(np.array([3, 4])), 5.0)


# ---- degenerate input --------------------------------------------------------------------------


def test_singular_solve_and_inv_give_inf_or_nan():
    a = np.array([[1.0, 2.0], [2.0, 4.0]])
    assert not np.all(np.isfinite(np.asarray(LA.solve(a, np.ones(2)))))
    assert not np.all(np.isfinite(np.asarray(LA.inv(a))))
    assert float(LA.det(a)) == 0.0
    sign, logdet = LA.slogdet(a)
    assert float(sign) == 0.0 and float(logdet) == -np.inf
    # one singular member of a batch does not spoil the others
    batch = np.stack([a, np.eye(2) * 2])
    _close(np.asarray(LA.inv(batch))[1], np.eye(2) / 2)
    assert not np.all(np.isfinite(np.asarray(blu.jit(LA.inv)(batch))[0]))


def test_non_positive_definite_cholesky_gives_nan():
    bad = np.array([[1.0, 2.0], [2.0, 1.0]])
    good = np.array([[4.0, 2.0], [2.0, 3.0]])
    out = np.asarray(LA.cholesky(np.stack([bad, good])))
    assert np.all(np.isnan(out[0]))
    _close(out[1], np.linalg.cholesky(good))
    assert np.all(np.isnan(np.asarray(blu.jit(LA.cholesky)(bad))))


def test_debug_nans_raises_on_degenerate_input():
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    with blu.config.override(debug_nans=True):
        with pytest.raises(LA.LinAlgError):
            LA.solve(singular, np.ones(2))
        with pytest.raises(np.linalg.LinAlgError):  # also a numpy LinAlgError
            LA.cholesky(-np.eye(2))
        with pytest.raises(LA.LinAlgError):
            blu.jit(LA.inv)(singular)
        with pytest.raises(LA.LinAlgError):
            lax_linalg.triangular_solve(np.zeros((2, 2)), np.ones((2, 1)), left_side=True)
        _close(LA.solve(np.eye(2), np.ones(2)), np.ones(2))  # regular input still works


def test_repeated_eigenvalues_documented_gradients():
    """Eigenvalue derivatives stay exact at repeated eigenvalues; eigenvector derivatives are
    inf/NaN there (not differentiable)."""
    a = np.diag([1.0, 1.0, 2.0])
    g = blu.grad(lambda x: bnp.sum(LA.eigvalsh(x) * np.array([1.0, 1.0, 3.0])))(a)
    _close(g, np.diag([1.0, 1.0, 3.0]))
    _, t = blu.jvp(lambda x: LA.eigh(x).eigenvectors, (a,), (np.ones((3, 3)),))
    assert not np.all(np.isfinite(np.asarray(t)))


def test_repeated_singular_values_documented_gradients():
    """Derivatives of symmetric functions of the singular values (the nuclear norm) stay exact
    at repeated singular values; the singular-vector tangents are finite there (the undefined
    terms are dropped)."""
    a = np.eye(3) * 2.0
    _close(blu.grad(lambda x: LA.norm(x, "nuc"))(a), np.eye(3))
    t_in = np.random.default_rng(0).standard_normal((3, 3))
    _, t = blu.jvp(lambda x: tuple(LA.svd(x)), (a,), (t_in,))
    assert all(np.all(np.isfinite(np.asarray(x))) for x in t)


def test_pinv_gradient_at_repeated_singular_values():
    a = np.eye(3)[:, :2] * 2.0  # singular values (2, 2)
    check_grads(LA.pinv, [a])


# ---- errors ------------------------------------------------------------------------------------


def test_shape_and_dtype_errors():
    with pytest.raises(BluShapeError, match="cholesky"):
        lax_linalg.cholesky(np.ones((2, 3)))
    with pytest.raises(BluTypeError, match="lu"):
        lax_linalg.lu(np.ones((2, 2), np.int32))
    with pytest.raises(BluShapeError, match="triangular_solve"):
        lax_linalg.triangular_solve(np.eye(3), np.ones((2, 3)), left_side=True)
    with pytest.raises(BluShapeError, match="linalg.solve"):
        LA.solve(np.eye(3), np.ones(2))
    with pytest.raises(BluShapeError, match="linalg.inv"):
        LA.inv(np.ones(3))
    with pytest.raises(BluValueError, match="qr"):
        LA.qr(np.eye(2), mode="full")
    with pytest.raises(BluValueError, match="norm"):
        LA.norm(np.ones(3), "fro")
    with pytest.raises(BluValueError, match="norm"):
        LA.norm(np.ones((2, 2)), 3)
    with pytest.raises(NotImplementedError, match="full_matrices"):
        blu.grad(lambda x: bnp.sum(LA.svd(x).U))(np.ones((3, 2)))
    with pytest.raises(NotImplementedError, match="full_matrices"):
        blu.grad(lambda x: bnp.sum(LA.qr(x, mode="complete").Q))(np.ones((3, 2)))


@given(st.integers(0, 45), st.sampled_from([np.int32, np.int64, np.uint8]))
def test_matrix_power_of_integers_stays_exact(n, dtype):
    """Integers keep their dtype for ``n >= 0`` (numpy's and JAX's): Fibonacci numbers from
    ``[[1, 1], [1, 0]]^n`` (a Python-int loop). They went through float32, which rounds above
    2^24 (F(40) = 102334155 came back 102334160) and returned float32."""
    fib = [0, 1]
    for _ in range(n + 1):
        fib.append(fib[-1] + fib[-2])
    want = np.array([[fib[n + 1], fib[n]], [fib[n], fib[n - 1] if n else 1]])  # F(-1) = 1
    got = LA.matrix_power(np.array([[1, 1], [1, 0]], dtype), n)
    assert got.dtype == dtype
    np.testing.assert_array_equal(np.asarray(got), want.astype(dtype))  # wraps as numpy's does
