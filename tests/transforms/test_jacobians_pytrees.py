"""jacfwd / jacrev / hessian of functions of pytrees: the result, per output leaf, has the
structure of the differentiated argument (JAX's layout), and every entry matches central
differences in float64."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu import tree_util as tu


def _f(d):
    return {"o": d["a"] * bnp.prod(d["b"][0]), "s": bnp.sum(d["a"] ** 2) * bnp.sum(d["b"][0])}


def _f_np(d):
    return {"o": d["a"] * np.prod(d["b"][0]), "s": np.sum(d["a"] ** 2) * np.sum(d["b"][0])}


def _fd_jac(f_np, d, eps=1e-6):
    """{out leaf path: {in leaf path: d out / d in}} by central differences."""
    in_leaves, in_tree = tu.tree_flatten(d)
    out0 = f_np(d)
    out_leaves, out_tree = tu.tree_flatten(out0)
    jac = [[None] * len(in_leaves) for _ in out_leaves]
    for j, x in enumerate(in_leaves):
        x = np.asarray(x, np.float64)
        cols = [np.zeros(np.shape(o) + x.shape) for o in out_leaves]
        for idx in np.ndindex(x.shape):
            hi, lo = x.copy(), x.copy()
            hi[idx] += eps
            lo[idx] -= eps
            at = lambda v: tu.tree_unflatten(in_tree, in_leaves[:j] + [v] + in_leaves[j + 1 :])  # noqa: E731,B023
            up, dn = tu.tree_leaves(f_np(at(hi))), tu.tree_leaves(f_np(at(lo)))
            for i, (u, v) in enumerate(zip(up, dn)):
                cols[i][(Ellipsis, *idx)] = (np.asarray(u) - np.asarray(v)) / (2 * eps)
        for i in range(len(out_leaves)):
            jac[i][j] = cols[i]
    return tu.tree_unflatten(out_tree, [tu.tree_unflatten(in_tree, row) for row in jac])


@pytest.mark.parametrize("jac", [blu.jacfwd, blu.jacrev])
@settings(max_examples=10, deadline=None)
@given(n=st.integers(0, 4), m=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_jacobian_of_a_pytree_argument_has_every_leaf(jac, n, m, seed):
    # jacfwd with an int argnums kept only the first leaf's block: {'o': (n, n), 's': (n,)}
    rng = np.random.default_rng(seed)
    d = {"a": rng.normal(size=n), "b": (rng.normal(size=m),)}
    got = jac(_f)(d)
    want = _fd_jac(_f_np, d)
    assert tu.tree_structure(got) == tu.tree_structure(want)
    for g, w in zip(tu.tree_leaves(got), tu.tree_leaves(want)):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-6, atol=1e-7)


def test_hessian_of_a_pytree_argument_is_blocks_of_every_pair():
    d = {"a": np.array([0.5, -1.0, 2.0]), "b": (np.array([1.5]),)}

    def loss(d):
        return bnp.sum(d["a"] ** 3) * bnp.sum(d["b"][0] ** 2)

    got = blu.hessian(loss)(d)
    a, b = d["a"], d["b"][0][0]
    want = {
        "a": {"a": np.diag(6 * a) * b**2, "b": ((6 * a**2 * b)[:, None],)},
        "b": ({"a": (6 * a**2 * b)[None, :], "b": (np.array([[2 * np.sum(a**3)]]),)},),
    }
    assert tu.tree_structure(got) == tu.tree_structure(want)
    for g, w in zip(tu.tree_leaves(got), tu.tree_leaves(want)):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12)


@pytest.mark.parametrize("jac", [blu.jacfwd, blu.jacrev, blu.hessian])
@pytest.mark.parametrize("n", [0, 1, 3])
def test_has_aux_and_keyword_arguments(jac, n):
    # has_aux and keyword arguments of the call raised raw TypeErrors
    x = np.linspace(-1.0, 1.0, n)

    def f(a, *, k):
        return bnp.sum(a**3) * k, {"aux": a * 2, "k": k}

    got, aux = jac(f, has_aux=True)(x, k=1.5)
    want = {blu.jacfwd: 4.5 * x**2, blu.jacrev: 4.5 * x**2, blu.hessian: np.diag(9.0 * x)}[jac]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(aux["aux"]), x * 2)
    assert float(aux["k"]) == 1.5
    with pytest.raises(blu.errors.BluTypeError, match=r"has_aux=True\) requires"):
        jac(lambda a: bnp.sum(a), has_aux=True)(x)
