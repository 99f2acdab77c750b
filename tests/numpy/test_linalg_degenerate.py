"""blu.numpy.linalg at rank-deficient and singular input, where JAX's rules differ from numpy's:
``pinv``'s default cut-off (``10 * max(m, n) * eps``, JAX's; numpy's 1e-15 inverts float32
rounding noise) and ``cond``'s NaN-to-inf rule for a singular matrix.

References are float64 numpy: the pseudo-inverse of the exact low-rank matrix from its rank-r
SVD, and inf for the condition number of a singular matrix (numpy's and JAX's value).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp

LA = bnp.linalg


def _low_rank(seed: int, m: int, n: int, r: int) -> np.ndarray:
    """An ``m x n`` float64 matrix of rank ``r`` with singular values in [0.5, 2]."""
    rng = np.random.default_rng(seed)
    u = np.linalg.qr(rng.standard_normal((m, m)))[0][:, :r]
    v = np.linalg.qr(rng.standard_normal((n, n)))[0][:, :r]
    return (u * rng.uniform(0.5, 2.0, r)) @ v.T


def _exact_pinv(a: np.ndarray, r: int) -> np.ndarray:
    """The pseudo-inverse of a rank-``r`` matrix, from its leading ``r`` singular triplets."""
    u, s, vt = np.linalg.svd(a, full_matrices=False)
    return (vt[:r].T / s[:r]) @ u[:, :r].T


@settings(deadline=None, max_examples=30)
@given(st.integers(0, 2**31), st.integers(2, 6), st.integers(2, 6), st.data())
def test_pinv_default_cutoff_drops_float32_rounding_noise(seed, m, n, data):
    r = data.draw(st.integers(1, min(m, n) - 1))
    a = _low_rank(seed, m, n, r)
    want = _exact_pinv(a, r)
    a32 = a.astype(np.float32)
    # the float32 singular values that should be zero are ~eps32: numpy's 1e-15 kept them and
    # gave entries ~1e7; JAX's cut-off drops them. The kept values are >= 0.5, so the result
    # is within a few eps32 of the exact pseudo-inverse (norms <= 2).
    got = np.asarray(LA.pinv(a32))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=200 * np.finfo(np.float32).eps)
    np.testing.assert_allclose(np.asarray(blu.jit(LA.pinv)(a32)), got, atol=1e-6)


def test_pinv_default_cutoff_is_relative_to_the_largest_singular_value():
    # singular values 1 and 1e-3 (float32): both far above 10 * 2 * eps32, so both inverted
    a = np.diag([1.0, 1e-3]).astype(np.float32)
    np.testing.assert_allclose(np.asarray(LA.pinv(a)), np.diag([1.0, 1e3]), rtol=1e-6)
    # 1e-7 is below 10 * 2 * eps32 * 1 = 2.4e-6: dropped; float64 keeps it (eps64 * 20 = 4e-15)
    b = np.diag([1.0, 1e-7])
    np.testing.assert_allclose(np.asarray(LA.pinv(b.astype(np.float32))), np.diag([1.0, 0.0]))
    np.testing.assert_allclose(np.asarray(LA.pinv(b)), np.diag([1.0, 1e7]), rtol=1e-12)
    # an explicit tolerance still wins
    np.testing.assert_allclose(np.asarray(LA.pinv(b, rtol=1e-6)), np.diag([1.0, 0.0]))


SINGULAR = {
    "zeros": np.zeros((2, 2)),
    "rank one": np.array([[1.0, 2.0], [2.0, 4.0]]),
    "zero row": np.array([[1.0, 0.0], [0.0, 0.0]]),
}


@pytest.mark.parametrize("name", sorted(SINGULAR))
@pytest.mark.parametrize("p", [1, -1, np.inf, -np.inf, "fro", "nuc"])
def test_cond_of_a_singular_matrix_is_inf(name, p):
    """``norm(x) * norm(inv(x))`` is 0 * inf or inf * NaN there (NaN before): JAX and numpy
    report inf."""
    x = SINGULAR[name]
    assert float(LA.cond(x, p)) == np.inf
    assert float(blu.jit(lambda a: LA.cond(a, p))(x)) == np.inf
    batch = np.stack([x, np.eye(2) * 2.0])  # the regular matrix keeps its finite value
    got = np.asarray(LA.cond(batch, p))
    assert got[0] == np.inf
    np.testing.assert_allclose(got[1], np.linalg.cond(batch[1], p), rtol=1e-12)


@pytest.mark.parametrize("p", [None, 2, 1, "fro", -2])
def test_cond_keeps_nan_from_nan_input(p):
    x = np.array([[np.nan, 1.0], [1.0, 2.0]])
    assert np.isnan(float(LA.cond(x, p)))


def test_cond_two_norm_of_the_zero_matrix():
    """p -2 of the zero matrix is 0/0: inf (numpy, JAX); a singular nonzero matrix gives
    ``s_min / s_max = 0``. For p None/2 JAX returns ``s[0] / s[-1]`` as is (0/0: NaN; x/0:
    inf)."""
    assert float(LA.cond(np.zeros((2, 2)), -2)) == np.inf
    assert float(LA.cond(SINGULAR["zero row"], -2)) == 0.0
    assert np.isnan(float(LA.cond(np.zeros((2, 2)))))
    assert float(LA.cond(SINGULAR["zero row"])) == np.inf


@settings(deadline=None, max_examples=20)
@given(st.integers(0, 2**31), st.integers(2, 5), st.integers(2, 5), st.data())
def test_lstsq_negative_rcond_means_machine_epsilon(seed, m, n, data):
    """numpy's and JAX's rule: ``rcond < 0`` is eps of the dtype. It was taken literally (every
    singular value kept), so the zero singular values of a rank-deficient matrix were inverted
    (inf/NaN, or ~1e16 from rounding noise) and the rank was full."""
    r = data.draw(st.integers(1, min(m, n) - 1))
    rng = np.random.default_rng(seed)
    # rank r with exactly zero singular values: a signed permutation of a diagonal matrix
    d = np.zeros((m, n))
    d[np.arange(r), np.arange(r)] = rng.uniform(0.5, 2.0, r) * rng.choice([-1.0, 1.0], r)
    a = d[rng.permutation(m)][:, rng.permutation(n)]
    b = rng.standard_normal(m)
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 1e-5)):
        x, _, rank, _ = LA.lstsq(a.astype(dtype), b.astype(dtype), rcond=-1)
        np.testing.assert_allclose(np.asarray(x), np.linalg.pinv(a) @ b, rtol=tol, atol=tol)
        assert int(rank) == r


@settings(deadline=None, max_examples=30)
@given(st.lists(st.sampled_from([0.0, -0.0, 1.5, -2.0, np.nan]), min_size=0, max_size=5))
def test_matrix_rank_of_a_vector_is_whether_it_has_a_nonzero(values):
    """numpy's and JAX's rule for ``ndim < 2``: 1 unless every entry is zero (it was a
    BluShapeError). The reference is the rule itself, written with Python's ``any``."""
    v = np.array(values)
    want = int(any(x != 0 for x in values))
    for x in (v, v.astype(np.float32), v[:1].reshape(()) if v.size else 0.0):
        got = LA.matrix_rank(x)
        assert got.dtype == np.int32 and got.shape == ()
    assert int(LA.matrix_rank(v)) == want
    assert int(blu.jit(LA.matrix_rank)(v)) == want


@settings(deadline=None, max_examples=30)
@given(st.integers(0, 2**31), st.integers(1, 4), st.integers(1, 4), st.booleans())
def test_matrix_rank_takes_one_tolerance_per_matrix(seed, batch, n, relative):
    """``tol``/``rtol`` of shape ``(...)`` hold one value per matrix (numpy's, and JAX's rtol):
    an array ``tol`` was compared along the singular values instead (silently wrong ranks
    when the shapes lined up), an array or traced ``rtol`` was a BluValueError. Diagonal
    matrices, so the singular values are the ``|d_i|`` and the reference a per-matrix count."""
    rng = np.random.default_rng(seed)
    d = rng.uniform(0.1, 3.0, (batch, n)) * rng.choice([-1.0, 1.0], (batch, n))
    a = np.zeros((batch, n, n))
    a[:, np.arange(n), np.arange(n)] = d
    t = rng.uniform(0.0, 1.0 if relative else 3.0, batch)
    s = np.abs(d)
    want = [(s[i] > t[i] * (s[i].max() if relative else 1.0)).sum() for i in range(batch)]
    kw = {"rtol" if relative else "tol": t}
    np.testing.assert_array_equal(np.asarray(LA.matrix_rank(a, **kw)), want)
    key = "rtol" if relative else "tol"
    jitted = blu.jit(lambda a, t: LA.matrix_rank(a, **{key: t}))(a, t)
    np.testing.assert_array_equal(np.asarray(jitted), want)
    with pytest.raises(blu.errors.BluValueError, match="tol or rtol"):  # numpy raises too
        LA.matrix_rank(a, tol=t, rtol=t)


@settings(deadline=None, max_examples=20)
@given(st.integers(0, 2**31), st.integers(1, 4), st.integers(1, 3), st.data())
def test_eig_of_a_stack_with_non_finite_matrices(seed, n, batch, data):
    """A matrix holding inf/NaN gets NaN eigenvalues and vectors (JAX's; numpy's LinAlgError
    escaped from the host callback and took the whole stack with it); the other matrices keep
    theirs. Triangular matrices, so the eigenvalues are the diagonal (sorted for comparison)."""
    rng = np.random.default_rng(seed)
    a = np.triu(rng.standard_normal((batch, n, n)))
    bad = data.draw(st.lists(st.booleans(), min_size=batch, max_size=batch))
    for i in np.flatnonzero(bad):
        a[i, rng.integers(n), rng.integers(n)] = data.draw(st.sampled_from([np.nan, np.inf]))
    for fn in (LA.eigvals, blu.jit(LA.eigvals), lambda x: LA.eig(x)[0]):
        w = np.asarray(fn(a))
        assert w.shape == (batch, n) and w.dtype == np.complex128
        for i in range(batch):
            if bad[i]:
                assert np.isnan(w[i]).all()
            else:
                got = np.sort_complex(w[i])
                np.testing.assert_allclose(got, np.sort(np.diagonal(a[i])), atol=1e-12)


@pytest.mark.parametrize(
    "shape,ord,axis",
    [
        ((0,), np.inf, None),
        ((2, 0), np.inf, -1),
        ((0,), -1, None),
        ((2, 0), -0.5, 1),
        ((0,), -2, None),
        ((3, 0), 1, None),
        ((0, 3), 1, None),
        ((3, 0), np.inf, None),
        ((0, 3), np.inf, None),
        ((3, 0), 2, None),
        ((0, 3), 2, None),
        ((2, 3, 0), 2, (1, 2)),
    ],
)
def test_norm_of_nothing(shape, ord, axis):
    # numpy's and JAX's values: a max-type norm of no entries is 0 (JAX's initial=0; blu's
    # max raised), and sum(|x|^p)^(1/p) with p < 0 is 0^(1/p) = inf (blu gave 0)
    x = np.zeros(shape)
    with np.errstate(divide="ignore"):
        want = np.linalg.norm(x, ord, axis)
    for dt in (np.float32, np.float64):
        got = np.asarray(LA.norm(x.astype(dt), ord, axis))
        assert got.dtype == dt and got.shape == np.shape(want)
        np.testing.assert_array_equal(got, want)
    kept = np.asarray(LA.norm(x, ord, axis, keepdims=True))
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(kept, np.linalg.norm(x, ord, axis, keepdims=True))


def test_norm_negative_ord_value_and_gradient():
    # (2^-1.5 + 1)^(-1/1.5) and its derivative x^(p-1) s^(1/p - 1) (finite differences)
    x = np.array([2.0, 1.0])
    p = -1.5
    s = np.sum(x**p)
    np.testing.assert_allclose(float(LA.norm(x, p)), s ** (1 / p), rtol=1e-14)
    g = np.asarray(blu.grad(lambda v: LA.norm(v, p))(x))
    h = 1e-6
    fd = [(np.sum((x + h * e) ** p) ** (1 / p) - np.sum((x - h * e) ** p) ** (1 / p)) / (2 * h)
          for e in np.eye(2)]  # fmt: skip
    np.testing.assert_allclose(g, fd, rtol=1e-7)
    # a zero entry: sum is inf, the norm 0 (numpy's)
    assert float(LA.norm(np.array([0.0, 1.0]), -1)) == 0.0


@pytest.mark.parametrize("shape", [(0, 0), (3, 0), (0, 4), (2, 3, 0)])
def test_matrix_rank_array_tolerance_of_empty_matrices_broadcasts(shape):
    # numpy's: the per-matrix tolerances (2,) broadcast with the batch even with no singular
    # values (blu returned the batch shape alone, () for one matrix)
    x = np.zeros(shape)
    rtol = np.array([0.1, 1e-6])
    want = np.zeros(np.broadcast_shapes(shape[:-2], (2,)), int)
    for kw in ({"rtol": rtol}, {"tol": rtol}):
        got = np.asarray(LA.matrix_rank(x, **kw))
        np.testing.assert_array_equal(got, want)
        assert got.shape == want.shape


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: LA.svd(a, hermitian=True),
        lambda a: LA.svd(a, compute_uv=False, hermitian=True),
        lambda a: LA.pinv(a, hermitian=True),
        lambda a: LA.matrix_rank(a, hermitian=True),
    ],
)
def test_hermitian_needs_square_matrices(fn):
    # numpy and JAX raise for hermitian=True on a non-square matrix; blu ignored the flag
    with pytest.raises(blu.errors.BluShapeError, match=r"square.*f32\[2,3\]"):
        fn(np.ones((2, 3), np.float32))
    # square: the SVD's values, as without the flag (numpy's eigenvalue route agrees for a
    # symmetric matrix)
    a = np.array([[2.0, -1.0], [-1.0, -3.0]])
    want = np.linalg.svd(a, compute_uv=False, hermitian=True)
    got = np.asarray(LA.svd(a, compute_uv=False, hermitian=True))
    np.testing.assert_allclose(got, want, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(LA.pinv(a, hermitian=True)), np.linalg.inv(a),
                               rtol=1e-13)  # fmt: skip


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (2, 0, 4)])
def test_pinv_hermitian_of_empty_matrices_is_empty(shape):
    # numpy's and JAX's pinv return the empty (n, m) before looking at hermitian
    want = np.linalg.pinv(np.zeros(shape), hermitian=True)
    got = np.asarray(LA.pinv(np.zeros(shape), hermitian=True))
    assert got.shape == want.shape == shape[:-2] + shape[:-3:-1]


@pytest.mark.parametrize("p", [None, 2, -2, 1, -1, np.inf, -np.inf, "fro", "nuc"])
@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0)])
def test_cond_of_empty_matrices_raises(p, shape):
    # numpy's LinAlgError and JAX's ValueError; blu gave 0 for 'fro'/'nuc' and max's error
    # for the others
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.cond(np.zeros(shape), p)
    with pytest.raises(blu.errors.LinAlgError, match="empty"):
        LA.cond(np.zeros(shape), p)
    # no matrices at all (batch 0) is an empty result, not an error (numpy's)
    got = np.asarray(LA.cond(np.zeros((0, 2, 2)), p))
    assert got.shape == (0,)
