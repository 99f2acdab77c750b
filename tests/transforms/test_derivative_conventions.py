"""Named regression tests for derivatives blu once got wrong, and for the conventions where
the textbook rule gives 0/0 or 0 * inf (docs/conventions.md). Each value is computed
independently: by hand, by finite differences, or by the other AD mode.
"""

import numpy as np
from helpers import check_grads

import blu
import blu.numpy as bnp
from blu import grad, hessian, jacfwd, jacrev, lax, vmap

# ---- higher derivatives where a factor is zero --------------------------------------------------


def test_second_derivative_of_a_product_at_zero():
    h = hessian(lambda v: v[0] * v[1])(np.zeros(2))
    np.testing.assert_array_equal(np.asarray(h), [[0.0, 1.0], [1.0, 0.0]])


def test_prod_derivatives_with_one_and_with_several_zeros():
    x1, x2 = np.array([0.0, 2.0, 3.0]), np.array([0.0, 0.0, 3.0])
    np.testing.assert_allclose(np.asarray(grad(bnp.prod)(x1)), [6.0, 0.0, 0.0])
    np.testing.assert_allclose(np.asarray(hessian(bnp.prod)(x1)), [[0, 3, 2], [3, 0, 0], [2, 0, 0]])
    # two zeros: the gradient is 0 but d2/dx0dx1 = x2 = 3 (was 0)
    np.testing.assert_allclose(np.asarray(grad(bnp.prod)(x2)), [0.0, 0.0, 0.0])
    np.testing.assert_allclose(np.asarray(hessian(bnp.prod)(x2)), [[0, 3, 0], [3, 0, 0], [0, 0, 0]])
    third = jacfwd(jacrev(jacfwd(bnp.prod)))(np.zeros(3))
    assert float(np.asarray(third)[0, 1, 2]) == 1.0
    # cumprod: the last entry is the product
    h = hessian(lambda x: bnp.cumprod(x)[-1])(x2)
    np.testing.assert_allclose(np.asarray(h), [[0, 3, 0], [3, 0, 0], [0, 0, 0]])
    check_grads(lambda x: bnp.prod(x, axis=1), [np.array([[0.0, 0.0, 3.0], [1.0, 0.0, 2.0]])], 2)


def test_powers_at_zero():
    assert float(grad(grad(lambda x: x**3))(0.0)) == 0.0
    assert float(grad(grad(grad(lambda x: x**3)))(0.0)) == 6.0
    assert float(grad(grad(lambda x: x**2.0))(0.0)) == 2.0
    assert float(grad(grad(grad(lambda x: x**3.0)))(0.0)) == 6.0


def test_x_to_the_zero_at_zero_has_gradient_zero():
    assert float(grad(lambda x: x**0)(0.0)) == 0.0
    assert float(grad(lambda x: x**0.0)(0.0)) == 0.0
    assert float(grad(lambda x: lax.integer_pow(x, 0))(0.0)) == 0.0


# ---- index updates writing one location more than once ------------------------------------------


def test_reverse_mode_through_set_with_repeated_indices_equals_forward_mode():
    idx = np.array([0, 0, 1, 1, 1])
    u = np.arange(1.0, 6.0)
    x = np.zeros(3)

    def f(x, u):
        return bnp.asarray(x).at[idx].set(u)

    for argnums in (0, 1):
        fwd = np.asarray(jacfwd(f, argnums=argnums)(x, u))
        rev = np.asarray(jacrev(f, argnums=argnums)(x, u))
        np.testing.assert_array_equal(rev, fwd)
    # the kept write is the last: out[0] = u[1], out[1] = u[4]
    np.testing.assert_array_equal(np.asarray(f(x, u)), [2.0, 5.0, 0.0])
    np.testing.assert_array_equal(np.asarray(jacrev(f, argnums=1)(x, u))[0], [0, 1, 0, 0, 0])
    check_grads(f, [x, u], order=2)
    # traced indices and jit
    g = blu.jit(jacrev(lambda x, u, i: bnp.asarray(x).at[i].set(u), argnums=1))
    np.testing.assert_array_equal(np.asarray(g(x, u, idx)), np.asarray(jacfwd(f, argnums=1)(x, u)))


def test_reverse_mode_through_add_multiply_min_max_with_repeated_indices():
    idx = np.array([0, 0, 1])
    x, u = np.array([2.0, 2.0, 2.0]), np.array([1.0, 3.0, 0.5])
    for op in ("add", "multiply", "min", "max"):

        def f(x, u, op=op):
            return getattr(bnp.asarray(x).at[idx], op)(u)

        for argnums in (0, 1):
            np.testing.assert_allclose(
                np.asarray(jacrev(f, argnums=argnums)(x, u)),
                np.asarray(jacfwd(f, argnums=argnums)(x, u)),
            )
        check_grads(f, [x, u], order=2)


# ---- functions smooth at singular matrices ------------------------------------------------------


def test_det_gradient_at_singular_matrices_is_the_cofactor_matrix():
    s = np.array([[1.0, 2.0], [2.0, 4.0]])
    np.testing.assert_allclose(np.asarray(grad(bnp.linalg.det)(s)), [[4.0, -2.0], [-2.0, 1.0]])
    m = np.arange(1.0, 10.0).reshape(3, 3)  # rank 2
    cof = np.array([[-3.0, 6.0, -3.0], [6.0, -12.0, 6.0], [-3.0, 6.0, -3.0]])
    np.testing.assert_allclose(np.asarray(grad(bnp.linalg.det)(m)), cof, atol=1e-12)
    np.testing.assert_array_equal(np.asarray(grad(bnp.linalg.det)(np.zeros((3, 3)))), 0.0)


def test_det_higher_derivatives_at_singular_matrices():
    h = np.asarray(hessian(bnp.linalg.det)(np.zeros((2, 2)))).reshape(4, 4)
    want = np.array([[0, 0, 0, 1], [0, 0, -1, 0], [0, -1, 0, 0], [1, 0, 0, 0]], np.float64)
    np.testing.assert_array_equal(h, want)
    third = np.asarray(jacrev(jacrev(jacrev(bnp.linalg.det)))(np.zeros((3, 3))))
    assert third.reshape(9, 9, 9)[0, 4, 8] == 1.0  # d3 det / da00 da11 da22
    check_grads(bnp.linalg.det, [np.array([[1.0, 2.0], [2.0, 4.0]])], order=2)
    # batched: one singular, one regular matrix
    a = np.stack([np.array([[1.0, 2.0], [2.0, 4.0]]), np.array([[2.0, 1.0], [1.0, 3.0]])])
    check_grads(bnp.linalg.det, [a], order=2)
    v = vmap(grad(bnp.linalg.det))(a)
    np.testing.assert_allclose(np.asarray(v)[1], 5.0 * np.linalg.inv(a[1]).T)


# ---- batched control flow with a non-finite untaken branch --------------------------------------


def test_untaken_nonfinite_branch_of_where_gives_a_finite_gradient():
    assert float(grad(lambda x: bnp.where(x > 0, bnp.log(x), 0.0))(0.0)) == 0.0
    assert float(grad(lambda x: bnp.where(x != 0, 1.0 / x, x))(0.0)) == 1.0
    g = vmap(grad(lambda x: bnp.where(x > 0, bnp.sqrt(x), 0.0)))(np.array([-1.0, 0.0, 4.0]))
    np.testing.assert_allclose(np.asarray(g), [0.0, 0.0, 0.25])
    j = blu.jit(grad(lambda x: bnp.where(x > 0, bnp.log(x), 0.0)))(0.0)
    assert float(j) == 0.0
    # second order: the taken branch's derivatives are kept exactly
    assert float(grad(grad(lambda x: bnp.where(x > 0, x**3, 0.0)))(2.0)) == 12.0


def test_untaken_nonfinite_branch_of_cond_gives_a_finite_gradient():
    def f(x):
        return lax.cond(x > 0, bnp.log, lambda x: 2 * x, x)

    assert float(grad(f)(0.0)) == 2.0
    xs = np.array([-1.0, 0.0, 4.0])
    np.testing.assert_allclose(np.asarray(vmap(grad(f))(xs)), [2.0, 2.0, 0.25])
    # grad of vmap: cond becomes a select under vmap and both branches run
    np.testing.assert_allclose(np.asarray(grad(lambda v: bnp.sum(vmap(f)(v)))(xs)), [2, 2, 0.25])


# ---- norms, log-sum-exp, standard deviation at degenerate points --------------------------------


def test_norm_at_zero_has_subgradient_zero():
    for f in (bnp.linalg.norm, bnp.linalg.vector_norm, lambda a: bnp.linalg.norm(a, ord=1)):
        np.testing.assert_array_equal(np.asarray(grad(f)(np.zeros(3))), 0.0)
        np.testing.assert_array_equal(np.asarray(jacfwd(f)(np.zeros(3))), 0.0)
    np.testing.assert_array_equal(np.asarray(grad(bnp.linalg.norm)(np.zeros((2, 2)))), 0.0)


def test_logsumexp_over_only_minus_inf_has_gradient_zero():
    x = np.array([-np.inf, -np.inf])
    assert float(blu.nn.logsumexp(x)) == -np.inf
    np.testing.assert_array_equal(np.asarray(grad(blu.nn.logsumexp)(x)), 0.0)
    np.testing.assert_array_equal(np.asarray(jacfwd(blu.nn.logsumexp)(x)), 0.0)
    rows = np.array([[-np.inf, -np.inf], [0.0, np.log(3.0)]])
    g = grad(lambda r: bnp.sum(blu.nn.logsumexp(r, axis=-1)))(rows)
    np.testing.assert_allclose(np.asarray(g), [[0.0, 0.0], [0.25, 0.75]])
    ga = grad(bnp.logaddexp, argnums=(0, 1))(-np.inf, -np.inf)
    assert [float(v) for v in ga] == [0.0, 0.0]
    assert float(bnp.logaddexp(-np.inf, -np.inf)) == -np.inf


def test_std_at_zero_variance_has_gradient_zero():
    np.testing.assert_array_equal(np.asarray(grad(bnp.std)(np.ones(3))), 0.0)
    check_grads(bnp.std, [np.array([1.0, 2.0, 4.0])], order=2)


# ---- indexing keywords: honoured or rejected ----------------------------------------------------


def test_take_along_axis_honours_mode_and_fill_value():
    x, i = np.arange(5.0), np.array([0, 7, -1, -9])
    assert np.asarray(bnp.take_along_axis(x, i, axis=0)).tolist() == [0, 4, 4, 0]
    assert np.asarray(bnp.take_along_axis(x, i, axis=0, mode="wrap")).tolist() == [0, 2, 4, 1]
    got = bnp.take_along_axis(x, i, axis=0, mode="fill", fill_value=-1.0)
    assert np.asarray(got).tolist() == [0, -1, 4, -1]


def test_at_get_honours_mode_and_fill_value():
    x, i = bnp.asarray(np.arange(5.0)), np.array([0, 7, -1, -9])
    got = np.asarray(x.at[i].get(mode="fill"))
    np.testing.assert_array_equal(got, [0.0, np.nan, 4.0, np.nan])
    assert np.asarray(x.at[i].get(mode="fill", fill_value=-2.0)).tolist() == [0, -2, 4, -2]
    assert np.asarray(x.at[i].get(mode="clip")).tolist() == [0, 4, 4, 0]


def test_at_update_honours_mode_clip():
    x = bnp.asarray(np.zeros(3))
    assert np.asarray(x.at[np.array([5])].set(1.0)).tolist() == [0, 0, 0]  # dropped
    assert np.asarray(x.at[np.array([5])].set(1.0, mode="clip")).tolist() == [0, 0, 1]
    assert np.asarray(x.at[np.array([-9, 9])].add(1.0, mode="clip")).tolist() == [1, 0, 1]


def test_unknown_index_modes_and_keywords_are_rejected():
    import pytest

    x, i = bnp.asarray(np.arange(5.0)), np.array([0, 1])
    with pytest.raises(Exception, match="mode"):
        x.at[i].get(mode="wrapp")
    with pytest.raises(Exception, match="mode"):
        x.at[i].set(1.0, mode="bogus")
    with pytest.raises(TypeError):
        x.at[i].set(1.0, fill_value=3.0)
    with pytest.raises(Exception, match="fill_value"):
        x.at[i].get(fill_value=3.0)
    with pytest.raises(Exception, match="mode"):
        bnp.take_along_axis(np.arange(3.0), i, axis=0, mode="bogus")
