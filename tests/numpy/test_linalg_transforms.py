"""blu.numpy.linalg and blu.lax.linalg under transformations: derivatives against central
differences, vmap against per-slice loops, jit against eager. The inputs are those of
``test_linalg.py``: well-conditioned batched matrices ``Q1 diag(s) Q2^T``, with well-separated
spectra for the eigen/singular-vector derivatives.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu.lax import linalg as lax_linalg
from tests.helpers import check_grads, check_jit, check_vmap, shapes
from tests.numpy.test_linalg import (
    MATRIX_ORDS,
    VECTOR_ORDS,
    _close,
    _mT,
    _orth,
    _rand,
    _tri_operand,
    mats,
)

LA = bnp.linalg


# ---- derivatives against central differences ---------------------------------------------------

small_batch = shapes(0, 1, 1, 2)


@given(st.data())
def test_grad_cholesky(data):
    a = data.draw(mats("spd", batch=data.draw(small_batch), n=data.draw(st.integers(1, 3))))
    check_grads(LA.cholesky, [a], order=2)


@given(st.data(), st.booleans())
def test_grad_solve_inv_det_slogdet(data, vector):
    a = data.draw(mats(batch=data.draw(small_batch), n=data.draw(st.integers(1, 3))))
    b = _rand(data.draw, a.shape[-1:] if vector else a.shape[:-1] + (2,))
    check_grads(LA.solve, [a, b], order=2)
    check_grads(LA.inv, [a])
    check_grads(LA.det, [a], order=2)
    check_grads(lambda x: LA.slogdet(x).logabsdet, [a], order=2)


@given(st.data(), st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_grad_triangular_solve(data, left, lower, transpose_a, unit):
    batch, n = data.draw(small_batch), data.draw(st.integers(1, 3))
    a = _tri_operand(data.draw, batch, n)
    b = _rand(data.draw, batch + ((n, 2) if left else (2, n)))

    def f(a, b):
        return lax_linalg.triangular_solve(
            a, b, left_side=left, lower=lower, transpose_a=transpose_a, unit_diagonal=unit
        )

    check_grads(f, [a, b], order=2)


@given(st.data())
def test_grad_lu(data):
    a = data.draw(mats(batch=data.draw(small_batch), n=data.draw(st.integers(1, 3))))
    check_grads(lambda x: lax_linalg.lu(x)[0], [a], order=2)


@given(st.data())
def test_grad_qr(data):
    m, n = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    a = data.draw(mats(batch=data.draw(small_batch), m=m, n=n))
    check_grads(lambda x: tuple(LA.qr(x)), [a], order=2)
    if m <= n:
        check_grads(lambda x: tuple(LA.qr(x, mode="complete")), [a])


@given(st.data())
def test_grad_eigh(data):
    """Eigenvalues, and eigenvector functions invariant to each vector's sign."""
    a = data.draw(mats("distinct", batch=data.draw(small_batch), n=data.draw(st.integers(1, 4))))

    def f(x):
        w, v = LA.eigh(x)
        return w, v * v

    check_grads(f, [a], order=2)


@given(st.data())
def test_grad_svd(data):
    """Singular values, and singular-vector functions invariant to the joint sign of
    ``(u_i, v_i)``."""
    m, n = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    a = data.draw(mats("separated", batch=data.draw(small_batch), m=m, n=n))

    def f(x):
        u, s, vh = LA.svd(x, full_matrices=False)
        return s, u * u, vh * vh, (u * s[..., None, :]) @ vh

    check_grads(f, [a], order=1)
    check_grads(LA.svdvals, [a], order=2)


@given(st.data())
def test_grad_lstsq_pinv_matrix_power(data):
    m, n = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    a = data.draw(mats(batch=data.draw(small_batch), m=m, n=n))
    b = _rand(data.draw, a.shape[:-1] + (2,))
    check_grads(LA.pinv, [a])  # its own rule: fine at repeated singular values
    check_grads(lambda a, b: LA.lstsq(a, b)[:2], [a, b])
    sep = data.draw(mats("separated", batch=(), m=m, n=n))
    check_grads(LA.pinv, [sep], order=2)  # the second order differentiates the SVD
    sq = data.draw(mats(batch=(), n=data.draw(st.integers(1, 3))))
    for p in (-2, 0, 1, 3):
        check_grads(lambda x: LA.matrix_power(x, p), [sq])


@given(st.data(), st.sampled_from(VECTOR_ORDS[:2] + [1, np.inf, 3]))
def test_grad_vector_norm(data, ord):
    x = _rand(data.draw, data.draw(shapes(1, 2, 1, 4)))
    check_grads(lambda x: LA.norm(x, ord, axis=-1), [x], order=2)


@given(st.data(), st.sampled_from(MATRIX_ORDS))
def test_grad_matrix_norm(data, ord):
    x = data.draw(mats("separated", batch=data.draw(small_batch), n=data.draw(st.integers(1, 3))))
    check_grads(lambda x: LA.norm(x, ord, axis=(-2, -1)), [x])


@pytest.mark.parametrize("ord", [None, 2, 3, 1, np.inf])
def test_norm_gradient_is_zero_at_zero(ord):
    g = blu.grad(lambda x: LA.norm(x, ord))(np.zeros(4))
    np.testing.assert_array_equal(np.asarray(g), np.zeros(4))
    g = blu.grad(lambda x: LA.norm(x, "fro" if ord in (None, 2) else 1))(np.zeros((2, 3)))
    np.testing.assert_array_equal(np.asarray(g), np.zeros((2, 3)))
    g = blu.grad(lambda x: bnp.sum(LA.norm(x, axis=-1)))(np.array([[0.0, 0.0], [3.0, 4.0]]))
    _close(g, [[0.0, 0.0], [0.6, 0.8]])


def test_jacfwd_jacrev_agree_on_solve():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 3)) + 3 * np.eye(3)
    b = rng.standard_normal(3)
    jf = blu.jacfwd(LA.solve, argnums=(0, 1))(a, b)
    jr = blu.jacrev(LA.solve, argnums=(0, 1))(a, b)
    x = np.linalg.solve(a, b)
    ainv = np.linalg.inv(a)
    want_da = -np.einsum("ij,k->ijk", ainv, x)  # dx_i/da_jk = -ainv_ij x_k
    for j in (jf, jr):
        _close(j[0], want_da)
        _close(j[1], ainv)


# ---- vmap and jit ------------------------------------------------------------------------------


def _stack(data, slices_kind, **kw):
    """A batch of per-slice matrices stacked along a random axis: (array, axis)."""
    size = data.draw(st.integers(0, 3))
    x = data.draw(mats(slices_kind, batch=(size,), **kw))
    ax = data.draw(st.integers(0, x.ndim - 1))
    return np.moveaxis(x, 0, ax), ax


FUNCS = {
    "cholesky": (lambda x: LA.cholesky(x), "spd"),
    "solve": (lambda x: LA.solve(x, np.arange(x.shape[-1], dtype=x.dtype)), "general"),
    "inv": (LA.inv, "general"),
    "det": (LA.det, "general"),
    "slogdet": (lambda x: tuple(LA.slogdet(x)), "general"),
    "lu": (lax_linalg.lu, "general"),
    "qr": (lambda x: tuple(LA.qr(x)), "general"),
    "eigh": (lambda x: tuple(LA.eigh(x)), "distinct"),
    "svd": (lambda x: tuple(LA.svd(x)), "separated"),
    "pinv": (LA.pinv, "general"),
    "lstsq": (lambda x: LA.lstsq(x, np.ones(x.shape[-2])), "general"),
    "matrix_power": (lambda x: LA.matrix_power(x, 3), "general"),
    "norm2": (lambda x: LA.norm(x, 2, axis=(-2, -1)), "general"),
    "norm_vec": (lambda x: LA.norm(x, 3, axis=0), "general"),
}


@pytest.mark.parametrize("name", sorted(FUNCS))
@given(data=st.data())
def test_vmap_matches_loop(name, data):
    f, kind = FUNCS[name]
    x, ax = _stack(data, kind, n=data.draw(st.integers(1, 3)))
    check_vmap(f, [x], [ax], out_axis=data.draw(st.sampled_from([0, -1])), atol=1e-9, rtol=1e-9)
    # the JVP rules batch too
    t = _rand(data.draw, x.shape)
    jvp = lambda x, t: blu.jvp(f, (x,), (t,))  # noqa: E731
    check_vmap(jvp, [x, t], [ax, ax], atol=1e-9, rtol=1e-9)


@given(st.data(), st.booleans())
def test_vmap_triangular_solve_one_operand_batched(data, batch_a):
    n = data.draw(st.integers(1, 3))
    size = data.draw(st.integers(0, 3))
    a = _tri_operand(data.draw, (size,) if batch_a else (), n)
    b = _rand(data.draw, (n, 2) if batch_a else (size, n, 2))

    def f(a, b):
        return lax_linalg.triangular_solve(a, b, left_side=True, lower=True)

    check_vmap(f, [a, b], [0, None] if batch_a else [None, 0], atol=1e-9, rtol=1e-9)
    check_vmap(LA.solve, [a, b], [0, None] if batch_a else [None, 0], atol=1e-9, rtol=1e-9)


def test_vmap_of_grad_and_jit_of_grad():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((4, 3, 3)) + 3 * np.eye(3)
    want = np.linalg.inv(a).transpose(0, 2, 1)  # grad of log|det|
    g = blu.vmap(blu.grad(lambda x: LA.slogdet(x).logabsdet))(a)
    _close(g, want)
    _close(blu.jit(blu.vmap(blu.grad(lambda x: LA.slogdet(x).logabsdet)))(a), want)


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_jit_matches_eager(name):
    f, kind = FUNCS[name]
    check_jit(f, [_fixed(kind)])


def _fixed(kind):
    rng = np.random.default_rng(11)
    q1, q2 = _orth(rng, (2, 3, 3)), _orth(rng, (2, 3, 3))
    s = np.array([0.6, 1.3, 1.9])
    return q1 @ (s[:, None] * _mT(q2 if kind in ("general", "separated") else q1))
